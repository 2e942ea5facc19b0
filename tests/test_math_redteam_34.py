"""Red team of the math grader's issue-34 rules (commit 649030f): replies a reward-hacking policy or hostile input
could use, each with the verdict a careful grader gives.

The tests without a mark were findings fixed in ``ludus.envs.math.verifier``; those marked ``xfail(strict=True)`` are
findings still open (the reason says why), so that fixing one turns its test into a failure to unmark.
"""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from ludus.core.types import Status
from ludus.envs.math.verifier import judge

CORRECT, WRONG, AMBIGUOUS = Status.CORRECT, Status.WRONG, Status.AMBIGUOUS


def boxed(answer: str) -> str:
    return f"So the answer is $\\boxed{{{answer}}}$."


def _digits_of_golden_ratio(places: int) -> str:
    """0.618… to ``places`` digits: a ratio of Fibonacci numbers, whose continued fraction is all ones (the longest
    there is for its number of digits)."""
    a, b = 1, 1
    for _ in range(3 * places):
        a, b = b, a + b
    return "0." + str(Fraction(a, b).numerator * 10**places // b).zfill(places)


# ---- fixed: an inequality SymPy took seconds to minutes to solve (a 5 s timeout per reply in training) ----

SLOW_CONDITIONS = [
    r"x^{3} + x^{31} > 1",  # 7 s: SymPy isolates every complex root
    r"x^{3} + x^{101} > 1",  # minutes, then out of memory
    r"x^{10^{10}} > 1",  # MemoryError
    r"|x|^{31} + |x|^{3} > 1",
    r"\sin(x)^{31} + \sin(x)^{3} > 1",
    r"\sqrt{x^{31} + x^{3}} > 1",  # 8 s
    r"x^{1/31} + x^{1/3} > 1",  # 7 s
    r"\frac{1}{x^{31} + x^{3} - 1} > 0",  # 7 s
    r"|x-0|+|x-1|+|x-2|+|x-3|+|x-4|+|x-5|+|x-6|+|x-7| > 1",  # 2.4 s: every absolute value doubles the cases
    r"\frac{1}{x} + \frac{1}{x+1} + \frac{1}{x+2} > 1",  # 2 s: a cubic once over one denominator
    r"\frac{1}{|x^2 - 3x + 1|} > |x - 7|",  # 9 s
    r"x^2 - " + "9" * 60 + "x + " + "9" * 60 + " > 0",  # 4.7 s: SymPy factors the coefficients
    r"\frac{x^2 - \sqrt{3}x + \pi}{x^2 + e x - \sqrt{11}} > \sqrt{2}",  # 0.9 s
    r"\tan(x) > \sin(x)",  # 1.3 s
    r"x^4 - 3x^3 + x - 7 > 0",  # 0.8 s
    r"0<x<1, 2<x<3, 4<x<5, 6<x<7, 8<x<9, 10<x<11, 12<x<13, 14<x<15, 16<x<17, 18<x<19, 20<x<21, 22<x<23, "
    r"24<x<25, 26<x<27, 28<x<29, 30<x<31, 32<x<33, 34<x<35, 36<x<37, 38<x<39",  # pieces checked pairwise for overlap
]


@pytest.mark.parametrize("condition", SLOW_CONDITIONS)
def test_an_inequality_too_large_to_solve_states_no_set_and_costs_little(condition):
    start = time.process_time()
    score = judge(boxed(condition), r"(-\infty, -1) \cup (2, \infty)")
    assert time.process_time() - start < 0.5
    assert score.status == WRONG


def test_small_conditions_are_still_solved():
    assert judge(boxed(r"1\le|z|\le\frac32"), r"[-\frac32,-1]\cup[1,\frac32]").status == CORRECT
    assert judge(boxed(r"|x| \geq 2"), r"(-\infty, -2] \cup [2, \infty)").status == CORRECT
    assert judge(boxed(r"|x - 1| + |x + 2| < 5"), "(-3, 2)").status == WRONG  # a condition to solve: no answer
    assert judge(boxed(r"|x| < 2"), "(-2, 2)").status == CORRECT
    assert judge(boxed(r"|x| < -1"), "(-2, 2)").status == WRONG  # the empty set


# ---- fixed: "or" in a gold between the pieces of one set of reals, or between the values of one name, was read as a
# choice: one piece (an incomplete answer) was paid, and the whole answer could not be read at all ----

GOLD_OR = [
    (r"x > 2", r"x < -1 \text{ or } x > 2", WRONG),
    (r"x < -1 \text{ or } x > 2", r"x < -1 \text{ or } x > 2", CORRECT),  # was format_error
    (r"(2, \infty)", r"$x<-1$ or $x>2$", WRONG),
    (r"(-\infty, -1) \cup (2, \infty)", r"$x<-1$ or $x>2$", CORRECT),
    (r"k \ge 2", r"$k \geqslant 2$ or $k<-20$", WRONG),
    (r"(3, \infty)", r"(-\infty, 1) or (3, \infty)", WRONG),
    (r"x < 1 \text{ or } x > 3", r"(-\infty, 1) or (3, \infty)", CORRECT),
    (r"[0, 1]", r"x \in [0, 1] or x \in [2, 3]", WRONG),
    (r"x \in [0, 1] \cup [2, 3]", r"x \in [0, 1] or x \in [2, 3]", CORRECT),
    (r"1", r"x = 1 \text{ or } 2", WRONG),  # one of the two solutions
    (r"x = 1, x = 2", r"x = 1 \text{ or } 2", CORRECT),
    (r"-1", r"a = 1 or -1", WRONG),
    (r"\pm 1", r"a = 1 or -1", CORRECT),
    (r"0", r"x = \pm 1 or x = 0", WRONG),
    (r"-1, 0, 1", r"x = \pm 1 or x = 0", CORRECT),
    (r"11", r"$21,16$ or $11$", CORRECT),  # alternatives of different shapes stay alternatives
    (r"(7,11)", r"(11,7) or (7,11)", CORRECT),
]


@pytest.mark.parametrize(("answer", "gold", "status"), GOLD_OR)
def test_or_in_a_gold_joins_pieces_and_values(answer, gold, status):
    assert judge(boxed(answer), gold).status == status


# ---- fixed: set-builder notation naming another variable than its condition ----


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        (r"\{y \mid x > 3\}", r"(3, \infty)"),
        (r"\{x \mid y > 3\}", r"(3, \infty)"),
        (r"\{x \mid y > 3\}", r"x > 3"),
        (r"\{x \mid x > 3 \text{ or } y < 1\}", r"(-\infty, 1) \cup (3, \infty)"),
    ],
)
def test_a_set_builder_whose_condition_is_on_another_variable_is_wrong(answer, gold):
    assert judge(boxed(answer), gold).status == WRONG


def test_a_set_builder_on_its_own_variable_is_still_read():
    assert judge(boxed(r"\{x \mid x > 3\}"), r"(3, \infty)").status == CORRECT


# ---- fixed: a long decimal with a long continued fraction overflowed the recursion (status timeout, not wrong) ----


def test_a_thousand_digit_decimal_is_compared_not_refused():
    reply = boxed(_digits_of_golden_ratio(900))
    assert judge(reply, r"\frac17").status == WRONG
    assert judge(boxed("1"), _digits_of_golden_ratio(990)).status == WRONG
    assert judge(boxed(r"\frac{1}{3}"), "0." + "3" * 990).status == CORRECT


# ---- open ----


# fixed: sets of reals were solved by SymPy, so a reply that copied the question's inequality ('Solve x^2 - 5x + 6 < 0')
# was paid for it (the grader never sees the question); now only the variable or its absolute value bounded by a number
# states a set, as equations are never solved (x^2 - 5x + 6 = 0 is no answer to 2, 3)
@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        (r"x^2 - 5x + 6 < 0", "(2, 3)"),
        (r"|x - 1| < 2", "(-1, 3)"),
        (r"\frac{x - 1}{x + 2} > 0", r"x<-2 \text{ or } x>1"),
    ],
)
def test_restating_an_inequality_is_not_solving_it(answer, gold):
    assert judge(boxed(answer), gold).status != CORRECT


@pytest.mark.xfail(
    strict=True,
    reason="fenced blocks are blanked before markers are read wherever ``` appears, also inside a box or across "
    "two boxes, so the box reads as its text outside the fence; a fence opening and closing at a line's start "
    "(Markdown's rule) would not be blanked there. No reward to gain (only the first value is read), so left open "
    "in ludus.tasks.answers, which every environment's answer reading shares",
)
@pytest.mark.parametrize(
    "reply",
    ["\\boxed{5 ``` or 6 ```}", "\\boxed{5 ```}\\boxed{6```}", "Answer: 5 ``` or 6 ```"],
)
def test_a_code_fence_inside_an_answer_does_not_hide_a_hedge(reply):
    assert judge(reply, "5").status != CORRECT


@pytest.mark.xfail(
    strict=True,
    reason="an answer line ends with its first sentence or reason clause and what follows is never looked at, so a "
    "retraction or a second value after it is dropped (as it already was after a leading $5$). No reward to gain "
    "(the first value is the one read), and a denial word in a reason ('since 7 is not even') is common",
)
@pytest.mark.parametrize(
    "reply",
    ["Answer: 5. Or maybe 6.", "Answer: 5, which is wrong.", "Answer: 5. Not really.", "Answer: (11,7). Or (1,1)"],
)
def test_a_sentence_after_the_answer_that_retracts_it(reply):
    gold = "(11,7) or (7,11)" if "(11,7)" in reply else "5"
    assert judge(reply, gold).status != CORRECT
