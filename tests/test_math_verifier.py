"""The math verifier: every documented rule, hacks, limits, and its isolation from the caller."""

import asyncio
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from load_support import a_cpu, crowded, pinned
from ludus.core import Status
from ludus.envs.math.guard import GuardedPool
from ludus.envs.math.verifier import MathVerifier, judge
from ludus.tasks.answers import find_answers

CORRECT, WRONG = Status.CORRECT, Status.WRONG


def boxed(answer: str) -> str:
    return f"We work through the steps: 12 + 7 = 19 and 19 - 4 = 15. So the result is $\\boxed{{{answer}}}$."


RULES = [
    # exact numbers
    ("42", "42", CORRECT),
    ("-7", "-7", CORRECT),
    ("7", "-7", WRONG),
    ("0.5", r"\frac{1}{2}", CORRECT),
    (r"\dfrac{1}{2}", "0.5", CORRECT),
    (r"\frac12", r"\tfrac{1}{2}", CORRECT),
    ("0.333", r"\frac{1}{3}", WRONG),
    ("3.14", r"\pi", WRONG),
    ("6.28", r"2\pi", WRONG),
    ("1.41", r"\sqrt{2}", WRONG),
    ("13.0", "13", CORRECT),
    ("12.99", "13", WRONG),
    ("1.0000001", "1", WRONG),
    # decimal gold: correct to its last digit
    (r"2\pi", "6.28", CORRECT),
    ("6.283", "6.28", CORRECT),
    (r"\frac{157}{25}", "6.28", CORRECT),
    ("6.3", "6.28", WRONG),
    ("6.29", "6.28", WRONG),
    (r"\frac{25}{2}", "12.5", CORRECT),
    ("13", "12.5", WRONG),
    # tiny values, factorials, powers
    (r"\frac{1}{2004!}", r"\frac{1}{2006!}", WRONG),
    (r"\frac{1}{2006!}", r"\frac{1}{2006!}", CORRECT),
    (r"10^{-12}", r"10^{-13}", WRONG),
    (r"\pi + 10^{-100}", r"\pi", WRONG),
    ("5!", "120", CORRECT),
    (r"\binom{6}{3}", "20", CORRECT),
    # formatting that does not change the value
    ("1,000,000", "1000000", CORRECT),
    (r"1\,000\,000", "1000000", CORRECT),
    ("1{,}000", "1000", CORRECT),
    (r"\left( \frac{3}{4} \right)", "0.75", CORRECT),
    ("\u22125", "-5", CORRECT),
    ("\u00bd", "0.5", CORRECT),
    (r"3 \times 10^{4}", "30000", CORRECT),
    ("3e4", "30000", CORRECT),
    (r"2 \cdot 3", "6", CORRECT),
    # expressions: symbolic, proven
    (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}", CORRECT),
    (r"2\sqrt{2}", r"\sqrt{8}", CORRECT),
    ("(x-1)(x+1)", "x^2 - 1", CORRECT),
    ("(x-1)(x+2)", "x^2 - 1", WRONG),
    (r"1 - \frac{1}{e}", r"1 + \frac{1}{e}", WRONG),
    (r"1 - \frac{1}{e}", r"1 - e^{-1}", CORRECT),
    (r"e^{i\pi}", "-1", CORRECT),
    (r"\sqrt[3]{8}", "2", CORRECT),
    (r"\log_2 8", "3", CORRECT),
    (r"\sin^2 x + \cos^2 x", "1", CORRECT),
    (r"\infty", r"\infty", CORRECT),
    (r"-\infty", r"\infty", WRONG),
    # units policy
    (r"25\%", "25", CORRECT),
    ("25", r"25\%", CORRECT),
    ("0.25", r"25\%", WRONG),
    (r"25\%", "0.25", WRONG),
    (r"30^\circ", "30", CORRECT),
    ("30\u00b0", r"30^{\circ}", CORRECT),
    (r"\frac{\pi}{6}", r"30^\circ", WRONG),
    (r"5\text{ cm}", "5", CORRECT),
    (r"\$12.50", "12.5", CORRECT),
    # text and multiple choice
    (r"\text{Tuesday}", r"\text{tuesday}", CORRECT),
    ("Monday", r"\text{Tuesday}", WRONG),
    ("B", r"\text{(B)}", CORRECT),
    (r"\textbf{(B)}\ 42", "B", CORRECT),
    ("(C)", "B", WRONG),
    # sets, tuples, intervals, matrices
    ("3, 2", "2, 3", CORRECT),
    (r"\{3, 2\}", r"\{2, 3\}", CORRECT),
    ("x = 2, 3", "2, 3", CORRECT),
    ("2", "2, 3", WRONG),
    ("2, 3, 5", "2, 3", WRONG),
    (r"2 \pm \sqrt{3}", r"2 + \sqrt{3}, 2 - \sqrt{3}", CORRECT),
    ("(1, 2)", "(1, 2)", CORRECT),
    ("(2, 1)", "(1, 2)", WRONG),
    ("[1, 2)", "(1, 2)", WRONG),
    ("[1, 2]", "[1, 2]", CORRECT),
    (r"(1, \infty) \cup (-\infty, 0)", r"(-\infty, 0) \cup (1, \infty)", CORRECT),
    (r"(-\infty, 0] \cup (1, \infty)", r"(-\infty, 0) \cup (1, \infty)", WRONG),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", CORRECT),
    (r"\begin{pmatrix} 2 \\ 1 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", WRONG),
    (r"\begin{bmatrix} 1 & 2 \end{bmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", WRONG),
    # equations and inequalities
    ("2x - y + 1 = 0", "y = 2x + 1", CORRECT),
    ("y - 1 = 2x", "y = 2x + 1", CORRECT),
    ("y = 2x - 1", "y = 2x + 1", WRONG),
    ("x = 5", "5", CORRECT),
    ("5", "x = 5", CORRECT),
    ("y = 5", "x = 5", WRONG),
    ("3 < x", "x > 3", CORRECT),
    (r"x \ge 3", "x > 3", WRONG),
    (r"x \geq 3", r"3 \le x", CORRECT),
    ("x < 3", "x > 3", WRONG),
    # ratios
    ("6:8", "3:4", CORRECT),
    (r"3 \colon 4", "3:4", CORRECT),
    ("4:3", "3:4", WRONG),
    (r"\frac{3}{4}", "3:4", WRONG),
]


@pytest.mark.parametrize(("answer", "gold", "status"), RULES)
def test_equivalence_rules(answer, gold, status):
    score = judge(boxed(answer), gold)
    assert score.status == status, score.reason
    assert score.value == (1.0 if status == CORRECT else 0.0)


@pytest.mark.parametrize(
    ("answer", "gold"),
    # decimal golds (tolerance), units and multiple choice are one-directional by design
    [(a, g) for a, g, s in RULES if not any(c in a + g for c in (".", "%", "=", "B", "\\$", "cm", "circ", "\u00b0"))],
)
def test_equivalence_is_symmetric_where_the_semantics_are(answer, gold):
    assert judge(boxed(answer), gold).status == judge(boxed(gold), answer).status


# --- real answer notation (issue 15): one or more positives and near misses per category
NOTATION = {
    "labels": [
        ("(p, q) = (3, 2)", "(3, 2)", CORRECT),
        ("(3, 2)", "(p, q) = (3, 2)", CORRECT),
        ("(p, q) = (3, 2)", "(q, p) = (3, 2)", WRONG),  # labels naming different things
        ("f(x) = x^2 + 1", "x^2+1", CORRECT),
        ("f(x) = 1", "g(x) = 1", WRONG),
        (r"x \in [0, 1)", "[0, 1)", CORRECT),
        (r"y \in [0, 1)", r"x \in [0, 1)", WRONG),
        (r"x \in [0, 1]", "[0, 1)", WRONG),
        ("V_1 : V_2 = 11 : 21", "11:21", CORRECT),
        ("V_2 : V_1 = 11 : 21", "V_1 : V_2 = 11 : 21", WRONG),
        ("AB = 5", "5", CORRECT),
        ("2x = 6", "6", WRONG),
        (r"\text{Area} = 25", "25", CORRECT),
        (r"\text{Perimeter} = 25", r"\text{Area} = 25", WRONG),
        ("x + y = 5", "5", WRONG),
    ],
    "sets and lists": [
        ("{1, 3}", r"\{1,3\}", CORRECT),
        ("{1, 3}", r"\{1, 4\}", WRONG),
        ("{1, 3}", "(1, 3)", WRONG),
        (r"x = 4 \text{ or } x = 1", "1, 4", CORRECT),  # "or" lists solutions where the gold is a list
        (r"x = 4 \text{ or } x = 1", "4", Status.AMBIGUOUS),  # ... and hedges where it is one value
        (r"x = 4 \text{ or } y = 1", "1, 4", WRONG),  # two variables: an assignment, not a solution set
        ("x_1 = 1, x_2 = 4", "1, 4", CORRECT),
        (r"1 \text{ and } 4", "1, 4", CORRECT),
        (r"0, \pm 3", "-3, 0, 3", CORRECT),
        (r"0, \pm 3", "0, 3", WRONG),
        (r"\{\pm 1\}", r"\{-1, 1\}", CORRECT),
        (r"\{\pm 1\}", r"\{1\}", WRONG),
    ],
    "empty set": [
        *[(a, r"\emptyset", CORRECT) for a in (r"\varnothing", r"\emptyset", r"\{\}", r"\{ \}", "\u2205")],
        (r"\emptyset", r"\varnothing", CORRECT),
        (r"\{0\}", r"\emptyset", WRONG),
        ("0", r"\varnothing", WRONG),
        (r"\{\emptyset\}", r"\emptyset", WRONG),
    ],
    "thousands and decimal commas": [
        ("1,000.99", "1000.99", CORRECT),
        (r"10,\!000", "10000", CORRECT),
        ("10{,}000", "10000", CORRECT),
        (r"10\,000", "10000", CORRECT),
        ("0,111", "0.111", CORRECT),  # a leading 0: a decimal comma
        ("0,111", "111", WRONG),
        ("1,4", "1.4", WRONG),  # not three digits and no leading 0: a list, never 1.4
        ("1,00", "100", Status.FORMAT_ERROR),  # neither 100 nor the list 1, 0 (an item "00")
        ("1, 4", r"\{1, 4\}", CORRECT),
        ("0,25", r"\{0, 25\}", CORRECT),  # a list where the gold is a list
        ("1,000.99", "1000", WRONG),
    ],
    "repeating decimals": [
        (r"0.\overline{3}", r"\frac13", CORRECT),
        (r"0.1\overline{6}", r"\frac16", CORRECT),
        ("0.(3)", "1/3", CORRECT),
        (r"0.\overline{9}", "1", CORRECT),
        (r"0.\overline{16}", r"\frac16", WRONG),
        ("0.(3)", "0", WRONG),  # never the product 0 * 3
        (r"0.\overline{3}", r"\frac{3}{10}", WRONG),
    ],
    "mixed numbers": [
        (r"7\frac{3}{4}", r"\frac{31}{4}", CORRECT),
        ("7 3/4", "7.75", CORRECT),
        (r"7\frac{3}{4}", r"\frac{21}{4}", WRONG),  # never the product 7 * 3/4
        ("7 3/4", r"\frac{21}{4}", WRONG),
    ],
    "constants, operators, bases, sums": [
        (r"\mathrm{e}^2", "e^2", CORRECT),
        (r"\mathrm{e}^2", "e^3", WRONG),
        (r"\operatorname{arctan} 1", r"\frac{\pi}{4}", CORRECT),
        (r"\operatorname{lcm}(4, 6)", "12", CORRECT),
        (r"\operatorname{lcm}(4, 6)", "24", WRONG),
        ("204_{5}", "204_5", CORRECT),
        ("54", "204_5", CORRECT),  # the decimal value, the gold stating the base
        ("204_5", "54", WRONG),  # ... but not a base-5 answer to a decimal gold
        ("204", "204_5", WRONG),
        ("204_6", "204_5", WRONG),
        (r"\sum_{k=1}^{10} k", "55", CORRECT),
        (r"\sum_{i=1}^{n} i", r"\frac{n(n+1)}{2}", CORRECT),  # i is the index here, not sqrt(-1)
        (r"\sum_{k=1}^{10} k", "56", WRONG),
        (r"\prod_{k=1}^{4} k", "4!", CORRECT),
    ],
    "chains and approximations": [
        ("x = 5 + 6 = 11", "11", CORRECT),
        ("5 + 6 = 11", "11", CORRECT),
        ("x = 5 + 6 = 12", "11", WRONG),  # a false chain states nothing
        ("x = 5 + 6 = 11", "5", WRONG),
        (r"A = \pi r^2 = 16\pi", r"16\pi", CORRECT),
        (r"\frac{10}{3} \approx 3.33", r"\frac{10}{3}", CORRECT),
        (r"2\pi \approx 6.5", r"2\pi", WRONG),  # the decimal contradicts the exact part
        (r"\approx 3.14", r"\pi", CORRECT),  # correct to its written precision
        (r"\approx 3.15", r"\pi", WRONG),
        (r"\approx 3.1", r"\pi", WRONG),  # fewer than three significant digits
        (r"\approx 1.73", "1.732", WRONG),  # a decimal gold keeps its own precision
    ],
    "units": [
        (r"\textbf{150 km}", "150", CORRECT),
        (r"12 \textnormal{ cm}", "12", CORRECT),
        (r"5\mathrm{~m}", "5 m", CORRECT),
        (r"\text{12 apples}", "12", CORRECT),
        ("150", r"150 \text{ km}", CORRECT),  # a bare number against a unit: compared as written
        (r"1.5 \text{ km}", r"1500 \text{ m}", CORRECT),
        (r"90 \text{ minutes}", r"1.5 \text{ hours}", CORRECT),
        ("150 m", "150 km", WRONG),
        (r"150 \text{ m}", r"150 \text{ km}", WRONG),
        (r"15 \text{ cm}^2", r"15 \text{ cm}", WRONG),
        (r"60 \text{ mph}", r"60 \text{ km/h}", WRONG),
        (r"x = 5 \text{ cm}", r"5 \text{ m}", WRONG),
        (r"5 \text{ dollars}", r"500 \text{ cents}", CORRECT),
        (r"3 \text{ million}", "3000000", CORRECT),
    ],
    "times of day": [
        ("12:00", "1:00", WRONG),  # never the ratio 12:0 = 1:0
        ("6:00", "3:00", WRONG),
        ("12:00", "12:00", CORRECT),
        (r"3:00 \text{ PM}", "15:00", CORRECT),
        (r"3:00 \text{ AM}", "15:00", WRONG),
        (r"12:00 \text{ PM}", r"12:00 \text{ AM}", WRONG),
        ("3:4", "6:8", CORRECT),  # ratios stay ratios
    ],
}


@pytest.mark.parametrize(
    ("answer", "gold", "status"), [case for cases in NOTATION.values() for case in cases], ids=lambda v: str(v)[:30]
)
def test_real_answer_notation(answer, gold, status):
    score = judge(boxed(answer), gold)
    assert score.status == status, score.reason


@pytest.mark.parametrize(
    ("completion", "gold", "status"),
    [
        ("Adding the parts, the final answer is \\(7\\).", "7", CORRECT),
        ("The final answer is \\[ \\frac{\\sqrt{2}}{2} \\]", "\\frac{1}{\\sqrt2}", CORRECT),
        ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "0.75", CORRECT),
        ("The final answer is $41$.", "42", WRONG),
        # a gold with several boxes lists them all; so do the answer's boxes then
        ("The roots are $\\boxed{2}$ and $\\boxed{3}$.", "\\boxed{2} \\text{ and } \\boxed{3}", CORRECT),
        ("The roots are $\\boxed{2, 3}$.", "$\\boxed{3}$ and $\\boxed{2}$", CORRECT),
        ("The root is $\\boxed{2}$.", "\\boxed{2} \\text{ and } \\boxed{3}", WRONG),
        ("The roots are $\\boxed{3}$ and $\\boxed{4}$.", "\\boxed{2}, \\boxed{3}", WRONG),
        ("first \\boxed{3} then \\boxed{4}", "3", Status.AMBIGUOUS),  # a one-box gold: still a hedge
    ],
)
def test_final_answer_sentences_and_several_boxes(completion, gold, status):
    assert judge(completion, gold).status == status


def test_last_math_fallback_is_opt_in():
    reply = "Adding the two parts we get $x = 12$, and doubling gives $24$ in total."
    assert judge(reply, "24").status == Status.NO_ANSWER  # the default: a marker is required
    assert judge(reply, "24", fallback="last_math").status == CORRECT
    assert judge(reply, "12", fallback="last_math").status == WRONG  # the *last* expression
    assert judge("So there are 17 apples left.", "17", fallback="last_math").status == CORRECT
    assert judge("No number here.", "17", fallback="last_math").status == Status.NO_ANSWER
    assert judge("$5$ ... \\boxed{7}", "7", fallback="last_math").status == CORRECT  # a marker still wins
    assert judge("<think>it is $3$", "3", fallback="last_math").status == Status.NO_ANSWER
    assert MathVerifier(workers=1, fallback="last_math").score("It is $\\frac{1}{2}$.", "0.5").status == CORRECT
    with pytest.raises(ValueError, match="fallback"):
        MathVerifier(fallback="last_number")


AMBIGUOUS, NO_ANSWER, FORMAT = Status.AMBIGUOUS, Status.NO_ANSWER, Status.FORMAT_ERROR
# how reasoning models write right answers every day (issue 34), each rule with its near misses
EVERYDAY = {
    "several boxes for a several-value gold": [
        (r"So \boxed{(2, 2)} \quad\text{and}\quad \boxed{(6, 2)}", "(2,2),(6,2)", CORRECT),
        (r"\boxed{1},\boxed{2},\boxed{3}", "1,2,3", CORRECT),
        (r"\boxed{k = 45} and \boxed{n = 2}", "k=45, n=2", CORRECT),
        (r"\boxed{n = 2} and \boxed{k = 45}", "k=45, n=2", CORRECT),  # an assignment: by name
        (r"\boxed{n = 45} and \boxed{k = 2}", "k=45, n=2", WRONG),
        (r"\boxed{1},\boxed{2}", "1,2,3", WRONG),  # a subset
        (r"\boxed{2} and \boxed{3}", "2", AMBIGUOUS),  # one value: still a hedge
        (r"\boxed{10} and \boxed{5}", "$5$;$10$", WRONG),  # a cloze's blanks keep their order
        (r"\boxed{5} and \boxed{10}", "$5$;$10$", CORRECT),
        (r"the answer is \boxed{5} (write it as \boxed{})", "5", CORRECT),  # an empty box beside one is none
    ],
    "Minerva format, chat residue, a sentence after the answer": [
        ("Final Answer: The final answer is 12,000,023. I hope it is correct.", "12000023", CORRECT),
        ("Final Answer: The volume of $ABCDEFGH$ is 120.", "120", CORRECT),
        ("Final Answer: The volume of $ABCDEFGH$ is not 120.", "120", WRONG),  # the sentence stays whole
        ("Answer: 5, since 2 + 3 = 5", "5", CORRECT),
        ("Answer: $5$ or 6", "5", AMBIGUOUS),  # leading math is the answer only when the sentence ends there
        ("Answer: $5$x", "5", WRONG),
        ("The answer is \\boxed{7}<|im_end|>\n<|im_start|>user\nAnswer: \\boxed{8}", "7", CORRECT),
        ("<|im_start|>Answer: \\boxed{42}<|im_end|>", "42", CORRECT),
        ("\\boxed{41}<|eot_id|>\\boxed{42}", "42", WRONG),  # after the end of the turn: not the answer
        ("```python\nprint(f'\\\\boxed{{{x}}}')\n```\nSo it is \\boxed{9}.", "9", CORRECT),  # a program's box
    ],
    "double-escaped LaTeX": [
        (r"\boxed{\\left(\\frac{1}{5},\\frac{1}{6}\\right)}", r"\left(\frac{1}{5},\frac{1}{6}\right)", CORRECT),
        (r"\boxed{(\frac15,\frac16)}", r"\\left(\\frac{1}{5},\\frac{1}{6}\\right)", CORRECT),
        (r"\boxed{(\frac15,\frac17)}", r"\\left(\\frac{1}{5},\\frac{1}{6}\\right)", WRONG),
        (r"\boxed{\\dfrac{2}{3} +\frac{1}{72}}", r"\frac{49}{72}", CORRECT),  # escaped in part
        (r"\boxed{\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}}", r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", CORRECT),
    ],
    "labels that are expressions": [
        (r"f(x)=1", "1", CORRECT),
        (r"|AB|=1", "1", CORRECT),
        (r"A:B=1", "1", CORRECT),
        (r"\frac{NO}{BO}=\frac{1}{\sqrt6}", r"\frac{1}{\sqrt6}", CORRECT),
        (r"D = (0, 1)", "(0,1)", CORRECT),
        (r"D = (1, 0)", "(0,1)", WRONG),
        (r"p=5,q=2;p=7,q=2", "(5,2),(7,2)", CORRECT),
        (r"p=5,q=2;p=7,q=3", "(5,2),(7,2)", WRONG),
        (r"x = 1, y = 4", "(1, 4)", CORRECT),  # names in alphabetical order: the ordered pair
        (r"y = 4, x = 1", "(4, 1)", WRONG),  # ... never read backwards
        (r"x^2 = 4", "4", WRONG),  # a power is no name
        (r"2x + 3", "f(x) = 2x + 3", CORRECT),
        (r"y = 2x + 3", "f(x) = 2x + 3", CORRECT),
        (r"g(x) = 2x + 3", "f(x) = 2x + 3", WRONG),  # another function
        (r"-2", r"\log_6\left(\frac{1}{36}\right) = -2", CORRECT),  # a true statement: its value
        (r"y = \pm 2", "2, -2", CORRECT),
        (
            r"\mathbf{L} = \begin{pmatrix}2 & 0 \\ -3 & 5\end{pmatrix}",
            r"\begin{pmatrix}2&0\\-3&5\end{pmatrix}",
            CORRECT,
        ),
    ],
    "inequalities and intervals": [
        (r"-2 \le x \le 7", r"x \in [-2,7]", CORRECT),
        (r"x \in [-2,7]", r"-2 \le x \le 7", CORRECT),
        (r"-2 < x \le 7", r"x \in [-2,7]", WRONG),
        (r"-2 \le y \le 7", r"x \in [-2,7]", WRONG),  # another variable
        (r"-793 < a < 10", "(-793, 10)", CORRECT),
        (r"x > 3", r"(3, \infty)", CORRECT),
        (r"x \ge 3", r"(3, \infty)", WRONG),
        (r"1\le|z|\le\frac32", r"[-\frac32,-1]\cup[1,\frac32]", CORRECT),
        (r"1\le|z|\le\frac32", r"[1,\frac32]", WRONG),
        (r"x<-1 \text{ or } x>2", r"(-\infty,-1)\cup(2,\infty)", CORRECT),
        (r"x>1, x<3", "(1,3)", WRONG),  # overlapping pieces: "and" or "or"? unread
        (r"\sin(x)^{2} + x^{9} > x^{3} - 1", "(0,1)", WRONG),  # a condition SymPy cannot solve: no set
        (r"[-2, 1)", r"\{x \mid -2 \le x < 1\}", CORRECT),  # set-builder notation
    ],
    "separators": [
        (r"11,\! 111,\! 111,\! 100", "11111111100", CORRECT),
        (r"1\;000", "1000", CORRECT),
        (r"\frac{12}{5525}", r"\frac{12}{5,\!525}", CORRECT),
        (r"(1;2)", "(1,2)", CORRECT),
        (r"(1;2)", "(2,1)", WRONG),
        (r"(1,5; 2,5)", "(1.5, 2.5)", FORMAT),  # decimal commas inside: not read
        (r"11", "$21,16$ or $11$", CORRECT),  # alternatives of different shapes: any one
        (r"16, 21", "$21,16$ or $11$", CORRECT),
        (r"21", "$21,16$ or $11$", WRONG),
        (r"(7,11)", "(11,7)or(7,11)", CORRECT),
        (r"(7,12)", "(11,7)or(7,11)", WRONG),
        (r"9", "$5$ or $9$", WRONG),  # single values: all of them
        (r"5, 9", "$5$ or $9$", CORRECT),
        (r"1", "x = 1 or x = 2", WRONG),
        (r"576\pi", r"$576\pi\;m^{2}$", CORRECT),  # a unit typeset apart with \; after a symbolic value
        (r"576\pi \text{ cm}^2", r"$576\pi\;m^{2}$", WRONG),
        (r"2\,h", "2", CORRECT),
        (r"2h", "2", WRONG),  # 2·h
    ],
    "long decimals": [
        (r"0.0833333333333333", r"\frac{1}{12}", CORRECT),
        (r"0.083333", r"\frac{1}{12}", WRONG),  # five significant digits: an approximation
        (r"0.666666", r"\frac{2}{3}", CORRECT),  # cut, not rounded
        (r"0.666667", r"\frac{2}{3}", CORRECT),
        (r"0.666", r"\frac{2}{3}", WRONG),
        (r"\frac{2}{3}", "0.6666666666666666", CORRECT),  # the gold's direction
        (r"0.66666667", "0.6666666666666666", CORRECT),
        (r"0.667", "0.6666666666666666", WRONG),
        (r"2.314814814815 \times 10^{-3}", r"\frac{1}{432}", CORRECT),
        (r"0.142857", r"-\frac{1}{7}", WRONG),
        (r"0.8660254037844386", r"\frac{\sqrt{3}}{2}", CORRECT),  # ten digits or more of an irrational
        (r"0.866025", r"\frac{\sqrt{3}}{2}", WRONG),
        (r"3.14", r"\pi", WRONG),
    ],
}


@pytest.mark.parametrize(
    ("answer", "gold", "status"), [case for cases in EVERYDAY.values() for case in cases], ids=lambda v: str(v)[:30]
)
def test_everyday_notation_of_right_answers(answer, gold, status):
    reply = answer if any(m in answer for m in ("\\boxed", "Answer", "answer")) else boxed(answer)
    score = judge(reply, gold)
    assert score.status == status, score.reason


REGRESSION = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "math_regression.jsonl"


def test_the_regression_corpus_has_no_false_positive_and_every_claimed_positive():
    """benchmarks/data/math_regression.jsonl: real notation and near misses from other graders' suites.

    Items marked ``known_miss`` are positives the verifier does not read yet: they must still be
    rejected without a crash, so that fixing one shows up here (and the mark must then go). An item with
    ``expected_status: timeout`` is a near miss no bounded comparison decides (a power tower)."""
    items = [json.loads(line) for line in REGRESSION.read_text().splitlines() if line.strip()]
    assert len(items) >= 300 and sum(not i["equivalent"] for i in items) >= len(items) // 3
    scores = MathVerifier(workers=2, timeout_s=10).score_many([(i["completion"], i["gold"]) for i in items])
    false_positives = [i["id"] for i, s in zip(items, scores, strict=True) if s.value and not i["equivalent"]]
    missed = [
        (i["id"], s.status, s.reason)
        for i, s in zip(items, scores, strict=True)
        if i["equivalent"] and not i.get("known_miss") and s.status != CORRECT
    ]
    fixed = [i["id"] for i, s in zip(items, scores, strict=True) if i.get("known_miss") and s.status == CORRECT]
    crashed = [
        i["id"]
        for i, s in zip(items, scores, strict=True)
        if s.status in (Status.INFRA_ERROR, Status.TIMEOUT) and i.get("expected_status") != s.status
    ]
    assert not false_positives and not missed and not fixed and not crashed, (false_positives, missed, fixed, crashed)


@pytest.mark.parametrize(
    ("completion", "status"),
    [
        (r"first \boxed{3} then \boxed{4}", Status.AMBIGUOUS),
        (r"\boxed{3} and again \boxed{3}", CORRECT),
        (r"\boxed{\frac{6}{2}} which is \boxed{3.0}", CORRECT),
        (r"\boxed{3 \text{ or } 4}", Status.AMBIGUOUS),
        ("The answer is either 3 or 4.", Status.AMBIGUOUS),
        (r"\boxed{}", Status.NO_ANSWER),
        (r"\boxed{ }", Status.NO_ANSWER),
        ("I computed 3 in the end.", Status.NO_ANSWER),  # no marker: never the last number
        ("<think>so it is \\boxed{3}", Status.NO_ANSWER),  # reasoning never closed
        ("<think>maybe \\boxed{4}</think> The result: \\boxed{3}", CORRECT),
        ("<think>it is 3</think><answer>3</answer>", CORRECT),
        ("work\n#### 3", CORRECT),
        ("Answer: 3", CORRECT),
        ("**Final answer:** 3", CORRECT),
        ("Thus the final answer is 3.", CORRECT),
        ("the answer is 4... no wait, the answer is 3.", CORRECT),  # the last answer line counts
        (r"\fbox{3}", CORRECT),
        (r"\boxed{\boxed{3}}", CORRECT),
        (r"\boxed{ \boxed{ \fbox{3} } }", CORRECT),
        (r"\boxed{\boxed{3} + \frac{1}{2}}", Status.FORMAT_ERROR),  # not one whole box: never read as 3
        (r"\boxed{\boxed{3} {4}}", Status.FORMAT_ERROR),
        (r"\boxed{3} \boxed{", CORRECT),  # an unclosed box is skipped
        (r"\boxed{\boxed{3}", CORRECT),  # and the boxes inside it still count
    ],
)
def test_final_answer_extraction(completion, status):
    assert judge(completion, "3").status == status


@pytest.mark.parametrize(
    ("completion", "gold", "status"),
    [
        # a \text{} wrapper is formatting, on either side (NVIDIA/NeMo-Skills tests/test_math_equal.py)
        (r"\boxed{\text{odd}}", "odd", CORRECT),
        (r"\boxed{odd}", r"\text{odd}", CORRECT),
        (r"\boxed{\text{oddd}}", "odd", WRONG),
        # a prime is part of a name: f' is one symbol
        (r"\boxed{f'}", "f'", CORRECT),
        (r"\boxed{f''}", "f'", WRONG),
        (r"\boxed{f}", "f'", WRONG),
        # a stray trailing backslash or line break is not math
        ("Answer: 185\\", "185", CORRECT),
        (r"\boxed{185}", "185\\\\", CORRECT),
        (r"\boxed{186}", "185\\", WRONG),
        # one matrix in parentheses is that matrix (Qwen2.5-Math grader case list)
        (r"\boxed{\begin{pmatrix}1&2\\3&4\end{pmatrix}}", r"(\begin{pmatrix}1&2\\3&4\\\end{pmatrix})", CORRECT),
        (r"\boxed{\begin{pmatrix}1&2\\3&5\end{pmatrix}}", r"(\begin{pmatrix}1&2\\3&4\end{pmatrix})", WRONG),
        # a gold naming an option with its content: the answer must name the option
        (r"\boxed{C}", "C. x = 42", CORRECT),
        (r"\boxed{(C)}", "(C) 42", CORRECT),
        (r"\boxed{B}", "C. x = 42", WRONG),
        (r"\boxed{A}", "(A) and (C)", WRONG),  # two options named: never read as one
    ],
)
def test_notation_from_other_graders_suites(completion, gold, status):
    assert judge(completion, gold).status == status


def test_an_option_letter_inside_arithmetic_is_not_a_choice():
    """NeMo-Skills: ``\\mathrm{E}*2`` is not the option E; naming it with its content still is."""
    assert judge(r"\boxed{\mathrm{E}*2}", "E").status == Status.FORMAT_ERROR
    assert judge(r"\boxed{2E}", "E").status == Status.FORMAT_ERROR
    assert judge(r"\boxed{\mathrm{E}}", "E").status == CORRECT
    assert judge(r"\boxed{\textbf{(E)}\ 42}", "E").status == CORRECT
    assert judge(r"\boxed{\mathrm{(D) }1,008,016}", "D").status == CORRECT


def test_decimal_golds_can_be_read_as_exact():
    assert judge(boxed("12.54"), "12.5").status == CORRECT  # the documented price of the default
    assert judge(boxed("12.54"), "12.5", decimal_gold="exact").status == WRONG
    assert judge(boxed(r"\frac{25}{2}"), "12.5", decimal_gold="exact").status == CORRECT
    with pytest.raises(ValueError, match="decimal_gold"):
        MathVerifier(decimal_gold="loose")


def test_multiple_choice_refuses_several_letters():
    assert judge(r"\boxed{A, B, C, D}", "B").status == Status.AMBIGUOUS
    assert judge(r"\boxed{B \text{ or } C}", "B").status == Status.AMBIGUOUS
    assert judge(r"\boxed{42}", "B").status == Status.FORMAT_ERROR


def test_marker_priority_is_configurable():
    text = "<answer>4</answer> but \\boxed{3}"
    assert judge(text, "3").status == CORRECT
    assert judge(text, "3", priority=("answer_tag", "boxed")).status == WRONG
    assert find_answers(text, ("gsm8k",))[0] == []


def test_answer_cap_and_huge_values_are_refused_before_work():
    long = judge(r"\boxed{" + "1+" * 2000 + "1}", "4001")
    assert long.status == Status.FORMAT_ERROR and "cap" in long.reason
    assert judge(r"\boxed{" + "1+" * 2000 + "1}", "2001", max_answer_chars=10_000).status == CORRECT
    for tower in [r"2^{2^{2^{2^{2^{2^{2}}}}}}", r"10^{10^{10^{10}}}", r"(9^{9^{9}})!", r"(10^{6})!"]:
        score = judge(boxed(tower), "4")
        assert score.status == Status.TIMEOUT and "refused" in score.reason
    deep = judge(boxed("(" * 400 + "1" + ")" * 400), "1")
    assert deep.status == Status.FORMAT_ERROR


def test_a_gold_that_cannot_be_read_never_pays():
    score = judge(boxed("3"), r"\frac{3}{")
    assert score.status == Status.GOLD_ERROR and score.value == 0.0
    assert judge(boxed("3"), r"\frac{1}{0}").status == Status.GOLD_ERROR


def test_gold_may_be_a_full_solution_with_a_box():
    assert judge(boxed("12"), r"Adding gives $5 + 7 = \boxed{12}$.").status == CORRECT


def test_extracted_answer_and_reason_are_reported():
    score = judge(boxed("41"), "42")
    assert score.extracted == "41" and "41" in score.reason and "42" in score.reason


# --- the guarded verifier: isolation, limits, threads, event loops


@pytest.fixture(scope="module")
def verifier():
    return MathVerifier(workers=2, timeout_s=10)


def test_verifier_scores_in_a_worker(verifier):
    assert verifier.score(boxed(r"\frac{3}{4}"), "0.75").status == CORRECT
    assert [s.status for s in verifier.score_many([(boxed("1"), "1"), (boxed("2"), "1"), ("", "1")])] == [
        CORRECT,
        WRONG,
        Status.NO_ANSWER,
    ]


def test_verifier_works_from_threads_and_event_loops(verifier):
    results = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(verifier.score(boxed(str(i)), str(i)))) for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s.status for s in results] == [CORRECT] * 6

    async def many():
        return await asyncio.gather(*(verifier.ascore(boxed(str(i)), "3") for i in range(5)))

    assert [s.status for s in asyncio.run(many())] == [WRONG, WRONG, WRONG, CORRECT, WRONG]


def test_a_hung_call_is_killed_and_the_pool_recovers():
    with GuardedPool("time:sleep", workers=1) as pool:
        outcome = pool.call(30, timeout_s=0.5)
        assert outcome.kind == "timeout"
        assert pool.call(0, timeout_s=30).kind == "ok"  # a fresh worker replaced the killed one


def test_a_starved_call_is_never_a_timeout():
    """The worker shares its CPU with 4 busy processes: a call needing ~0.6 s of CPU takes ~3 s of
    wall time. Its 2 s limit counts the worker's own time, so it ends ``ok`` (a wall-clock deadline
    said ``timeout``); past the wall backstop it is ``starved`` (scored ``infra_error``), not ``timeout``."""
    work = ("sha256", b"password", b"salt", 1_000_000)
    cpu = a_cpu()
    with GuardedPool("hashlib:pbkdf2_hmac", workers=1) as pool:
        with pinned(cpu):
            assert pool.call("sha256", b"", b"", 1, timeout_s=30).kind == "ok"  # the worker starts on `cpu`
        with crowded(cpu, busy=4):
            done = pool.call(*work, timeout_s=2)
            starved = pool.call(*work, timeout_s=2, wall_s=1)
    assert done.kind == "ok" and len(done.value) == 32, done.detail
    assert starved.kind == "starved" and "too busy" in starved.detail, starved


def test_a_memory_blowup_stays_in_the_worker():
    with GuardedPool("builtins:bytearray", workers=1, memory_mb=256) as pool:
        assert pool.call(2 * 1024**3, timeout_s=30).kind == "memory"
        assert pool.call(10, timeout_s=30).value == bytearray(10)


def test_a_crashing_worker_is_an_infrastructure_error():
    with GuardedPool("os:_exit", workers=1) as pool:
        assert pool.call(3, timeout_s=30).kind == "crash"


HOSTILE_MB = {  # a megabyte each: the extraction used to rescan the reply from every opener (or space)
    "unclosed boxes": ("\\boxed{" * 150_000, None),
    "nested boxes": ("\\boxed{" * 75_000 + "3" + "}" * 75_000, None),
    "unclosed answer tags": ("<answer>" * 125_000 + "3", None),
    "a #### line of spaces": ("#### 3" + " " * 1_000_000 + "x\nAnswer: 3", None),
    "an answer line of spaces": ("Answer: 3" + " " * 1_000_000 + "x", None),
    "the answer is, again and again": ("the answer is " * 70_000 + "3", None),
    "unclosed \\( and \\[": ("\\(" * 250_000 + "\\[" * 250_000 + "$3$", "last_math"),
    "chat-template tokens": ("<|im_start|>" * 80_000 + "Answer: 3", None),
    "code fences": ("```" * 300_000 + "\\boxed{3}", None),
    "a subject that never says is": ("Answer: the " + "a " * 500_000, None),
    "unclosed math in an answer line": ("Answer: x " + "\\(" * 250_000 + ". 3", None),
    "reasons, again and again": ("Answer: 3" + ", since" * 140_000, None),
}


def test_answer_extraction_is_linear_on_hostile_replies():
    """Each reply is a megabyte: quadratic extraction takes minutes on it (64 KB of unclosed ``\\boxed{``
    took 5 s), linear well under a second. The limit is generous; what matters is never ``timeout``."""
    verifier = MathVerifier(workers=1, timeout_s=60)
    for name, (reply, fallback) in HOSTILE_MB.items():
        score = replace(verifier, fallback=fallback).score(reply, "3")
        assert score.status not in (Status.TIMEOUT, Status.INFRA_ERROR), (name, score.reason)
    assert verifier.score("\\boxed{3}", "3").status == CORRECT
    nested_ok = replace(verifier, fallback="last_math").score("\\(" * 1000 + " so $3$ \\) and \\(3\\)", "3")
    assert nested_ok.status == CORRECT


def test_unit_words_are_read_in_linear_time():
    """A unit after a long run of spaces, then more spaces: the unit pattern was cubic in them (a 1,000-character
    answer took a second, 20,000 characters forever)."""
    answer = "5 m" + " " * 10_000 + "squared" + " " * 10_000 + "x"
    score = MathVerifier(workers=1, timeout_s=60, max_answer_chars=30_000).score(boxed(answer), "5")
    assert score.status not in (Status.TIMEOUT, Status.INFRA_ERROR) and not score.correct, score.reason


def test_a_slow_proof_times_out_as_a_zero_and_the_verifier_recovers():
    """Numerically equal, so the verifier must expand two degree-3000 polynomials: minutes of SymPy."""
    slow = MathVerifier(workers=1, timeout_s=1)
    score = slow.score(boxed("(x+1)^{1500}(x-1)^{1500}"), "(x^2-1)^{1500}")
    assert score.status == Status.TIMEOUT and score.value == 0.0 and "killed" in score.reason
    assert slow.score(boxed("7"), "7").status == CORRECT


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="priority"):
        MathVerifier(priority=("boxed", "last_number"))
    with pytest.raises(ValueError, match="timeout_s"):
        MathVerifier(timeout_s=0)


# --- properties: never raises, always bounded, on arbitrary text and LaTeX

LATEX_PIECES = st.sampled_from(
    [
        r"\frac",
        r"\sqrt",
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        "^",
        "_",
        "!",
        "x",
        "2",
        "10",
        r"\pi",
        "e",
        ",",
        "=",
        r"\le",
        r"\cup",
        r"\infty",
        r"\text{",
        "-",
        "+",
        r"\cdot",
        r"\boxed{",
        "|",
        r"\begin{pmatrix}",
        "&",
        r"\\",
        r"\end{pmatrix}",
        "0.5",
        "%",
        r"\circ",
        " or ",
        "</think>",
        "<answer>",
        "####",
        "\n",
        "Answer: ",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LATEX_PIECES, max_size=40).map("".join), st.sampled_from(["3", r"\frac{1}{2}", "(1, 2)", "x = 2", "B"]))
def test_judge_never_raises_on_latex_soup(completion, gold):
    score = judge(completion, gold)
    assert score.status in set(Status) and score.value in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.text(max_size=30))
def test_judge_never_raises_on_arbitrary_text(completion, gold):
    score = judge(completion, gold)
    assert score.status in set(Status) and score.value in (0.0, 1.0)


# symmetric semantics on generated exact values: equal values always match, both ways
NUMBER = st.one_of(
    st.integers(-50, 50).map(str),
    st.tuples(st.integers(-20, 20), st.integers(1, 12)).map(lambda t: rf"\frac{{{t[0]}}}{{{t[1]}}}"),
    st.integers(1, 30).map(lambda n: rf"\sqrt{{{n}}}"),
    st.sampled_from([r"\pi", "e", r"2\pi", r"\frac{\pi}{3}"]),
)


@settings(max_examples=150, deadline=None)
@given(NUMBER, NUMBER)
def test_exact_equivalence_is_symmetric_and_reflexive(a, b):
    assert judge(boxed(a), a).status == CORRECT
    assert judge(boxed(a), b).status == judge(boxed(b), a).status


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LATEX_PIECES, max_size=30).map("".join))
def test_the_guarded_verifier_always_returns_a_score(completion):
    score = MathVerifier(workers=1, timeout_s=5).score(completion, "3")
    assert score.status in set(Status) - {Status.INFRA_ERROR}


def test_an_escaped_dollar_inside_inline_math_is_money_not_its_end():
    """Minerva's "The final answer is $\\$18.90$." (lm-evaluation-harness's few-shot format)."""
    verifier = MathVerifier()
    reply = "Final Answer: The final answer is $\\$18.90$. I hope it is correct."
    assert verifier.score(reply, "18.90").status == Status.CORRECT
    assert verifier.score(reply, "19").status == Status.WRONG
    assert verifier.score("It costs \\$5 and \\$6, so the answer is $11$.", "11").status == Status.CORRECT


@pytest.mark.parametrize(
    ("reply", "gold", "status"),
    [
        (r"\boxed{x \in \mathbb{R}}", r"\mathbb{R}", Status.CORRECT),
        (r"\boxed{(-\infty, \infty)}", r"\mathbb{R}", Status.CORRECT),
        (r"\boxed{ℝ}", r"\mathbb R", Status.CORRECT),
        (r"\boxed{(0, \infty)}", r"\mathbb{R}", Status.WRONG),
        (r"\boxed{\mathbb{R}}", r"[0, \infty)", Status.WRONG),
    ],
)
def test_the_reals_are_the_interval_of_every_real_number(reply, gold, status):
    assert MathVerifier().score(reply, gold).status == status


# Red-teaming the notation rules: wrong answers that a rule once accepted, each now refused by a general rule.
@pytest.mark.parametrize(
    ("answer", "gold", "status"),
    [
        # the \frac12 shorthand is a mixed number like 2\frac{1}{2}, never the product 2·1/2
        (r"2\frac12", "1", WRONG),
        (r"2\frac12", r"\frac52", CORRECT),
        # a chain must contain the gold's variable: y = 2x = 6 gives x = 3
        (r"y = 2x = 6", "x = 6", WRONG),
        (r"x = 2y = 6", "x = 6", CORRECT),
        # a bare variable on both sides is an equation, not a label
        (r"x = 2x + 1", "2x + 1", WRONG),
        (r"y = 2x + 1", "2x + 1", CORRECT),
        # an approximation keeps its label, and never stands for a gold with an exact decimal
        (r"y \approx 3.14", r"x = \pi", WRONG),
        (r"x \approx 3.14", r"x = \pi", CORRECT),
        (r"\approx 100", "100", WRONG),
        (r"\approx 3.00", "3", WRONG),
        (r"\approx 0.500", r"\frac12", WRONG),
        (r"\approx 0.333", r"\frac13", CORRECT),
        # words that change or deny the number are not units
        (r"3 \text{ thousand}", "3", WRONG),
        (r"3 \text{ thousand}", "3000", CORRECT),
        (r"2 \text{ dozen}", "24", CORRECT),
        (r"5 \text{ squared}", "5", Status.FORMAT_ERROR),
        (r"5 \text{ tenths}", "5", Status.FORMAT_ERROR),
        (r"5 \text{ is incorrect}", "5", Status.FORMAT_ERROR),
        (r"1 \text{ maybe}", "1", Status.FORMAT_ERROR),
        (r"5 \text{ pairs}", "5", CORRECT),
        # a known unit against another unit word, and more known units
        (r"5 \text{ tons}", r"5 \text{ kg}", WRONG),
        (r"5 \text{ ms}", r"5 \text{ s}", WRONG),
        (r"5 \text{ gal}", r"5 \text{ L}", WRONG),
        (r"5 \text{ degrees}", r"5 \text{ radians}", WRONG),
        (r"30 \text{ degrees}", r"\frac{\pi}{6} \text{ radians}", CORRECT),
        (r"\$5", r"5 \text{ cents}", WRONG),
        (r"500 \text{ cents}", r"\$5", CORRECT),
        (r"\$5", "5", CORRECT),
        (r"5 \text{ cm}^2", r"5 \text{ square units}", CORRECT),  # "units" stands for any unit
        # an option named to deny it, or used with a sign
        (r"\text{not } B", "B", Status.FORMAT_ERROR),
        (r"\text{E is false}", "E", Status.FORMAT_ERROR),
        (r"-B", "B", Status.FORMAT_ERROR),
        # two numbers side by side are neither one number nor a product
        (r"2 3", "23", Status.FORMAT_ERROR),
        (r"2 3", "6", Status.FORMAT_ERROR),
        (r"1 000", "1000", CORRECT),
        # a list item with a leading zero: 1,000 is never the list 1, 0
        (r"\{1,000\}", r"\{1, 0\}", Status.FORMAT_ERROR),
        (r"(1,000)", r"(1, 0)", Status.FORMAT_ERROR),
        (r"1, 000", r"1, 0", Status.FORMAT_ERROR),
        (r"0,5", r"0, 5", CORRECT),
        # labels of two different names make an assignment, never a list of solutions
        (r"x \approx 1.414, y \approx 2.828", r"\sqrt{2}, 2\sqrt{2}", WRONG),
        (r"x \in \{1\}, y \in \{2\}", "1, 2", WRONG),
        (r"AB = 1, BC = 4", "1, 4", WRONG),
        (r"x \in \{1\}, x \in \{2\}", "1, 2", CORRECT),
        # "units squared" is a power of the unit; "5 squared" is 25
        (r"5 \text{ units squared}", "5", CORRECT),
        (r"5 \text{ meters squared}", r"5 \text{ m}^2", CORRECT),
        # a unit after a symbolic value or an approximation is a unit too
        (r"16\pi \text{ m}", r"16\pi \text{ cm}", WRONG),
        (r"0.16\pi \text{ m}", r"16\pi \text{ cm}", CORRECT),
        (r"\approx 3.14 \text{ m}", r"\pi \text{ km}", WRONG),
        (r"\approx 50.27 \text{ cm}^2", r"16\pi \text{ cm}", WRONG),
        (r"\approx 50.27 \text{ cm}^2", r"16\pi \text{ cm}^2", CORRECT),
    ],
)
def test_red_team_notation_tricks_are_refused(answer, gold, status):
    assert judge(boxed(answer), gold).status == status


def test_numbers_too_large_to_compare_never_crash():
    # e^{e^{e^{10}}} once crashed the worker (OverflowError, NotAlgebraic): it is refused before work
    assert judge(boxed("3"), r"e^{e^{e^{e^{10}}}}").status == Status.GOLD_ERROR
    assert judge(boxed(r"e^{e^{e^{e^{10}}}}"), "3").status == Status.TIMEOUT
    assert judge(boxed(r"\approx 3.14"), r"e^{e^{e^{10}}}").status == Status.GOLD_ERROR
    assert judge(boxed(r"e^{\pi i}"), "-1").status == CORRECT


def test_last_math_fallback_refuses_a_doubted_or_hedged_span():
    for reply in ["It is either $4$ or $5$.", "$5$ is wrong, not $5$.", "Hmm, I'm not sure, maybe $x = 5$?"]:
        assert judge(reply, "5", fallback="last_math").status == Status.AMBIGUOUS
    assert judge("So the total is $5$.", "5", fallback="last_math").status == CORRECT
