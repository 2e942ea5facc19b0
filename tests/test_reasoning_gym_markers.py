"""rg:NAME environments pay a right answer however it is marked (issue 34): reasoning-gym's own <answer>
tag and Ludus's other markers, multi-line answers (grids, boards, moves) read whole, a sentence's final
full stop; and never more: a value under a one-line answer, two different answers, or an answer hidden
by look-alike or invisible characters earn nothing (src/ludus/envs/reasoning_gym/reading.py)."""

from __future__ import annotations

import functools
import time

import pytest
from reasoning_gym.utils import extract_answer

from ludus.core import registry
from ludus.core.types import Status, Task
from ludus.envs.reasoning_gym import offered
from ludus.envs.reasoning_gym.grading import MAX_CHARS
from ludus.envs.reasoning_gym.reading import Reading, read_answer

OFFERED = sorted(offered())
TASKS = 2  # tasks per family graded in every form
REASONING = "Let me work through this step by step.\nFirst I look at the question carefully.\n\n"
COMMENTARY = "This is because I checked every step carefully."


@functools.cache
def samples(dataset: str) -> tuple[object, list[tuple[Task, str]], list[str]]:
    """The environment, ``TASKS`` tasks with their gold answers, and the golds of a few more tasks (wrong
    answers to try once the <answer> tag shows they are wrong)."""
    env = registry.make(f"rg:{dataset}")
    source = env.task_source("train")
    golds = []
    for index in range(TASKS + 3):
        task = source.get(index)
        reference = env.reference(task)
        if reference is not None:
            golds.append((task, reference.removeprefix("<answer>").removesuffix("</answer>").strip()))
    assert len(golds) >= TASKS, dataset
    return env, golds[:TASKS], [gold for _, gold in golds]


def _prose_lines(gold: str) -> bool:
    """A multi-line answer whose lines are sentences (tower_of_hanoi's moves)."""
    return "\n" in gold and len(gold.splitlines()[-1].split()) >= 3


# how models mark a final answer; G is the gold (one line or several)
FORMS = {
    "tag": lambda g: f"<answer>{g}</answer>",
    "tag_after_reasoning": lambda g: f"{REASONING}<answer>{g}</answer>",
    "tag_on_its_own_lines": lambda g: f"{REASONING}<answer>\n{g}\n</answer>\nI am done.",
    "answer_line": lambda g: f"{REASONING}Answer: {g}",
    "answer_below_the_marker": lambda g: f"{REASONING}Answer:\n{g}",
    "answer_below_after_a_blank_line": lambda g: f"{REASONING}Answer:\n\n{g}\n",
    "final_answer": lambda g: f"{REASONING}Final answer: {g}",
    "bold_marker": lambda g: f"{REASONING}**Answer:** {g}",
    "bold_line": lambda g: f"{REASONING}**Answer: {g}**",
    "the_answer_is": lambda g: f"{REASONING}The answer is {g}.",
    "quoted_marker": lambda g: f"{REASONING}> Final Answer: {g}",
    "commentary_after_a_blank_line": lambda g: f"{REASONING}Answer: {g}\n\n{COMMENTARY}",
    "below_then_commentary": lambda g: f"{REASONING}Answer:\n{g}\n\n{COMMENTARY}",
    "labelled_commentary": lambda g: f"{REASONING}Answer: {g}\nExplanation: 6 * 7 = 42",
    "rule_then_commentary": lambda g: f"{REASONING}Answer: {g}\n\n---\n\n{COMMENTARY}",
    "commentary_right_under": lambda g: f"{REASONING}Answer: {g}\n{COMMENTARY}",
    "reason_on_the_same_line": lambda g: f"{REASONING}The answer is {g}, because I checked every step.",
    "sentence_on_the_same_line": lambda g: f"{REASONING}Answer: {g}. I checked every step carefully.",
    "code": lambda g: f"{REASONING}Answer:\n```\n{g}\n```\n{COMMENTARY}" if "\n" in g else f"Answer: `{g}`",
    "after_think": lambda g: f"<think>{REASONING}</think>\nAnswer: {g}",
    "bare": lambda g: g,
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("dataset", OFFERED)
def test_a_right_answer_earns_full_marks_however_it_is_marked(dataset, form):
    env, golds, _ = samples(dataset)
    for task, gold in golds:
        if form == "commentary_right_under" and _prose_lines(gold):
            continue  # a sentence right under a list of moves continues it: see the test below
        if form.endswith("_on_the_same_line") and "\n" in gold:
            continue  # commentary on the last line of a multi-line answer is not cut: put it below
        score = env.score(task, FORMS[form](gold))
        assert score.value == 1.0 and score.status == Status.CORRECT, (gold[:200], score.status, score.reason)


def test_a_sentence_right_under_a_list_of_moves_continues_the_list_and_a_blank_line_ends_it():
    """Prose lines under prose lines are read both ways (the first line alone, or with them), so a list of
    moves is read whole; commentary right under it is then part of the list, and is paid after a blank line."""
    env, golds, _ = samples("tower_of_hanoi")
    task, gold = next((t, g) for t, g in golds if "\n" in g)
    assert env.score(task, f"Answer: {gold}\n{COMMENTARY}").value == 0.0
    assert env.score(task, f"Answer: {gold}\n\n{COMMENTARY}").value == 1.0
    first, rest = gold.split("\n", 1)
    assert env.score(task, f"Answer: {first}\n\n{rest}").value == 0.0  # a blank line ends the moves too


@pytest.mark.parametrize("dataset", OFFERED)
def test_reasoning_gyms_own_extraction_reads_the_same_answer_from_a_tag(dataset):
    """rg's eval reads only its extract_answer (the last <answer>…</answer>, newlines included): our reading
    of a tagged reply is the same text, whatever the reply around it."""
    _, golds, _ = samples(dataset)
    for _, gold in golds:
        for reply in (f"<answer>{gold}</answer>", f"{REASONING}<answer>\n{gold}\n</answer>\nDone. Answer: 0"):
            reading = read_answer(reply, MAX_CHARS)
            assert isinstance(reading, Reading) and reading.answers == (extract_answer(reply),)


@pytest.mark.parametrize("dataset", OFFERED)
def test_wrong_answers_hedges_and_values_under_the_answer_earn_nothing(dataset):
    env, golds, others = samples(dataset)
    for task, gold in golds:
        wrong = [w for w in others if w != gold and env.score(task, f"<answer>{w}</answer>").value == 0.0][:1]
        for w in wrong:  # another task's answer, which the tag shows is wrong here
            for reply in (f"Answer: {w}", f"{REASONING}Answer:\n{w}", f"The answer is {w}."):
                assert env.score(task, reply).value == 0.0, (reply[:200], w[:80])
            for hedge in (
                f"Answer: {gold}\nFinal answer: {w}",
                f"Answer: {gold}\n\nSo the answer is {w}.",
                f"<answer>{gold}</answer> <answer>{w}</answer>",
                f"**Answer:**\n{gold}\n\nAnswer: {w}",
            ):
                score = env.score(task, hedge)
                assert score.value == 0.0 and score.status == Status.AMBIGUOUS, (hedge[:200], score.reason)
        if "\n" in gold:
            continue
        value = "44" if gold == "43" else "43"
        values = [value] + [w for w in wrong if "\n" not in w and len(w.split()) < 3]
        for v in values:  # a one-line answer with another value under it is that two-line answer: wrong
            for reply in (f"Answer: {gold}\n{v}", f"Answer: {gold}\n\n{v}", f"Answer:\n{gold}\n{v}\n\n{COMMENTARY}"):
                score = env.score(task, reply)
                assert score.value == 0.0, (reply[:200], score.reason)


def test_the_two_families_whose_answers_are_sentences_keep_their_full_stop_on_an_answer_line():
    """emoji_mystery's and sentence_reordering's golds end with a full stop: on an Answer: line (where a
    final full stop is taken as the sentence's end) the answer is graded without it, then with it, so the
    sentence is paid with its stop, and with the stop of "The answer is ... ." after it."""
    for dataset in ("emoji_mystery", "sentence_reordering"):
        env, golds, _ = samples(dataset)
        task, gold = next((t, g) for t, g in golds if g.endswith("."))
        assert env.score(task, f"Answer: {gold}").value == 1.0
        assert env.score(task, f"The answer is {gold}.").value == 1.0
        assert env.score(task, f"Answer: {gold[:-1]}").value == 0.0  # the gold without its stop is not it
        assert env.score(task, f"Answer: {gold}.").value == 1.0  # its own stop and the sentence's, as above
        assert env.score(task, f"Answer: {gold}..").value == 0.0  # only one stop is taken off


def test_numbers_take_the_sentence_full_stop_off_but_not_a_third_part():
    env, golds, _ = samples("decimal_chain_sum")
    task, gold = golds[0]
    assert env.score(task, f"The answer is {gold}.").value == 1.0
    assert env.score(task, f"Answer: {gold}.").value == 1.0
    assert env.score(task, f"Answer: {gold}.3").value == 0.0
    assert env.score(task, f"Answer: {gold}..").value == 0.0


def test_commentary_on_the_answers_own_line_is_prose_or_a_reason_never_a_value():
    """As the shared reading: "42, since …" and "42. I checked it twice." are 42 (and agree with another
    marker's 42); "42. 43" and "42 43" are not 42."""
    env, golds, _ = samples("basic_arithmetic")
    task, gold = golds[0]
    for reply in (f"Answer: {gold}, since I added them up.", f"The answer is {gold}. I checked it twice."):
        assert env.score(task, reply).value == 1.0, reply
    assert env.score(task, f"Answer: {gold}, because of the order.\nFinal answer: {gold}").value == 1.0
    for reply in (f"Answer: {gold}. 43", f"Answer: {gold} 43", f"Answer: {gold}. It is 43."):
        assert env.score(task, reply).value == 0.0, reply
    hedge = env.score(task, f"Answer: {gold}, since it is.\nFinal answer: 43")
    assert hedge.status == Status.AMBIGUOUS


def test_leading_math_is_read_only_when_nothing_but_a_sentence_follows_it():
    """'$5$. I hope it is correct.' is 5 (the shared reading); '$5$x' and '$5$ or 6' are not 5."""
    env, golds, _ = samples("fraction_simplification")
    task, gold = golds[0]
    inside = gold.strip("$")
    assert env.score(task, f"Answer: ${inside}$. I hope it is correct.").value == 1.0
    assert env.score(task, f"Answer: ${inside}$x").value == 0.0
    assert env.score(task, f"Answer: ${inside}$ or 1/2").value == 0.0


def test_an_antiderivative_split_over_lines_is_not_one_expression():
    """Our parser reads a line break as a space, so '... + C' with '43' under it was the product 43*C (an
    antiderivative still): a value under the answer is refused here too."""
    env, golds, _ = samples("intermediate_integration")
    task, gold = golds[0]
    for reply in (f"Answer: {gold}\n43", f"<answer>{gold}\n43</answer>", f"<answer>{gold}\n\n43</answer>"):
        score = env.score(task, reply)
        assert score.value == 0.0 and score.status == Status.FORMAT_ERROR, (reply, score.reason)
    assert env.score(task, f"<answer>\n{gold}\n</answer>").value == 1.0


# ---------------------------------------------------------------------------------------------
# attacks


@pytest.mark.parametrize("dataset", OFFERED)
def test_constant_replies_earn_no_more_on_an_answer_line_than_in_the_tag(dataset):
    """A constant reply (0, Yes, an empty list…) is paid on an Answer: line exactly when it is in the tag,
    and an empty marker is no answer."""
    env, golds, _ = samples(dataset)
    task, _ = golds[0]
    for constant in ("0", "1", "-1", "Yes", "No", "True", "False", "[]", "{}", "A", "None", "0 0\n0 0"):
        tagged = env.score(task, f"<answer>{constant}</answer>").value
        for reply in (f"Answer: {constant}", f"Answer:\n{constant}", f"The answer is {constant}."):
            assert env.score(task, reply).value == tagged, (reply, tagged)
    for empty in ("Answer:", "Answer:\n\n\n", "**Answer:**", "The answer is.", "Answer: \n---\nsee above", ""):
        assert env.score(task, empty).status == Status.NO_ANSWER, empty


@pytest.mark.parametrize("dataset", ["basic_arithmetic", "rotate_matrix", "emoji_mystery"])
def test_invisible_and_look_alike_characters_hide_no_answer_and_make_none(dataset):
    """A zero-width character or a Cyrillic letter inside the marker makes it no marker: the whole reply is
    then the answer (wrong), so such a reply can neither hide a second answer from the grader nor be paid;
    one inside the answer makes it another string. Letters Python folds to ASCII (the long s) read as the
    word a person reads."""
    env, golds, _ = samples(dataset)
    task, gold = golds[0]
    for reply in (
        f"Ans\u200bwer: {gold}",
        f"Answer\u200b: {gold}",
        f"\u0410nswer: {gold}",  # Cyrillic A
        f"Answer: \u200b{gold}",
        f"Answer: {gold}\u200b",
        f"<answer>{gold}\u2060</answer>",
        f"<\u0430nswer>{gold}</\u0430nswer>",
        f"Answer: {gold}\u2028{gold}",  # a Unicode line separator is not a line break here
    ):
        assert env.score(task, reply).value == 0.0, repr(reply[:80])
    assert env.score(task, f"ANſWER: {gold}").value == 1.0
    assert env.score(task, f"Answer\uff1a{gold}").value == 1.0  # a full-width colon, as the shared reading
    # a marker broken by an invisible character is no marker: its answer is never read as one
    assert env.score(task, f"Answer: 0\nFinal ans\u200bwer: {gold}").value == 0.0
    assert env.score(task, f"Answer: 0\n\nThe ans\u200bwer is {gold}").value == 0.0


def test_a_line_of_the_question_copied_into_the_reply_is_not_an_answer():
    """string_synthesis's question says "... the answer is the state before the repetition!" and
    bitwise_arithmetic's "If the answer is negative, reply as ...": a reply that repeats that line and
    then answers was two different answers (ambiguous); the copied line is left out, unless it is the
    reply's only marker (then it is read, and wrong)."""
    for dataset in ("string_synthesis", "bitwise_arithmetic"):
        env, golds, _ = samples(dataset)
        task, gold = golds[0]
        line = next(line for line in task.prompt.splitlines() if "the answer is" in line)
        for quoted in (line, f"> {line}", f"  {line}  "):
            assert env.score(task, f"The question says:\n{quoted}\n\nAnswer: {gold}").value == 1.0, quoted
        assert env.score(task, f"The question says:\n{line}").value == 0.0
        sentence = line[line.index("If") :] if "If" in line else line
        assert env.score(task, f"You wrote: {sentence[:-1]}, I see.\nAnswer: {gold}").status == Status.AMBIGUOUS
        assert env.score(task, f"> Answer: 0\n\nAnswer: {gold}").status == Status.AMBIGUOUS  # not the question's


def _timed(env, task, reply: str) -> tuple[object, float]:
    start = time.perf_counter()
    score = env.score(task, reply)
    return score, time.perf_counter() - start


def test_huge_replies_are_read_in_linear_time():
    """Replies at the 64,000-character cap built to make a reader backtrack or rescan: every one is read in
    well under a second and paid nothing; one character more is refused unread."""
    env, golds, _ = samples("rotate_matrix")
    task, gold = next((t, g) for t, g in golds if "\n" in g)
    room = MAX_CHARS - 20
    replies = {
        "grid_rows": "Answer:\n" + ("0 1\n" * room)[: room - 8],
        "blank_lines": "Answer:" + "\n" * room,
        "spaces": "Answer: " + " " * room,
        "markers": "Answer: 1\n" * (room // 10),
        "statements": "the answer is " * (room // 14),
        "the_runs": ("the" + " " * 500 + "x ") * (room // 505),
        "fences": "Answer:\n" + "```\n" * (room // 4),
        "dollars": "Answer: " + "$" * room,
        "bold": "**Answer: " + "**" * (room // 2),
        "prose": "Answer: 1\n" + ("word " * 100 + "\n") * (room // 501),
        "parens": "Answer: \\(" + " \\)" * (room // 3),
        "full_stops": "Answer: 1" + ". a" * (room // 3),
        "underscores": "Answer: " + "_" * room,
        "reasons": "The answer is 1" + ", so" * (room // 4),
    }
    for name, reply in replies.items():
        assert len(reply) <= MAX_CHARS, name
        score, seconds = _timed(env, task, reply)
        assert score.value == 0.0 and seconds < 1.5, (name, score.reason, seconds)
    padded = "Answer:\n" + "\n" * (room - len(gold)) + gold  # blank lines before a right answer are nothing
    assert len(padded) <= MAX_CHARS and env.score(task, padded).value == 1.0
    over = env.score(task, "Answer: " + gold + " " * MAX_CHARS)
    assert over.status == Status.FORMAT_ERROR and "cap" in over.reason
