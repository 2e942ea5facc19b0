"""Reading the final answer of a reply to a reasoning-gym task, multi-line answers whole.

reasoning-gym's own rule (``reasoning_gym.utils.extract_answer``, the only reader its eval script uses)
is the last ``<answer>…</answer>``, newlines included; its prompts ask for nothing else. Ludus reads that
tag first, then its other markers as every exact-answer grader does (:mod:`ludus.tasks.answers`:
``\\boxed{}``, an ``Answer:`` line, a ``####`` line; with none, the whole reply), and all the answers a
reply marks must agree (two different ones are ``ambiguous``). What rg's answers need beyond the shared
reading: many are several lines long (grids, boards, lists of moves) and some are sentences ending in a
full stop. So an ``Answer:`` marker (also ``Final answer:``, ``**Answer:**``, "the answer is"):

- starts its answer after the marker, or on the next non-blank line when the marker ends its line;
- continues it over the lines below up to the commentary, the next marker or the end of the reply:
  values (a line that is not prose: a row of a grid, a number) and blank lines continue it, so ``Answer:
  42`` with ``43`` under it is the answer ``42\\n43``, never 42; commentary starts at a horizontal rule,
  at a ``Label:`` line (``Explanation:``) or at a line of prose (three words or more, each between
  spaces) under a value or a blank line; prose lines right under a prose line (moves, sentences) are read
  both ways, as commentary and as the answer's next lines;
- on a one-line answer's own line, takes a clause giving a reason ("5, since …") or prose after a full
  stop ("5. I checked it twice.") for commentary too, as the shared reading does, but not a value ("5. 6");
- reads a code fence that opens the answer to its closing fence, and one line wrapped whole in
  ``$…$``, ``**…**`` or backticks as what is inside ("**Answer: 42**" is 42 too);
- leaves out a marker on a line copied from the question when the reply marks another answer.

A final full stop is a sentence's end unless the answer itself is a sentence: each reading is graded
without it, then with it, and the first reading that earns full marks counts; the reply's answers agree
when they do without their commentary. Every reply is read in one pass
over its lines (a reply can be 64,000 characters of lines or of spaces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

from ludus.core.types import Score, Status
from ludus.tasks.answers import (
    DESCRIBED,
    LINE_HEAD,
    SENTENCE_END,
    SENTENCE_HEAD,
    find_answers,
    last_statement,
    leading_math,
    reply_after_reasoning,
)

_MARKER = re.compile(rf"^{LINE_HEAD}|\b{SENTENCE_HEAD}", re.I)
# a word of prose: a word of its own (between spaces, maybe after a quote or a bracket) of two letters or more;
# "MIST,FIST,FEST" (a word ladder) is one value, not three words
_WORD = re.compile(r"(?<!\S)[\"'(*_]*[^\W\d_]{2,}")
_LABEL = re.compile(r"[ \t>*#_]*[^\W\d_]{2,}(?:[ \t]+[^\W\d_]{2,}){0,2}[ \t*_]*:(?:[ \t*_]|$)")  # "Explanation:"
_RULE = re.compile(r"[ \t]*(?:-{3,}|\*{3,}|_{3,}|={3,})[ \t]*")
_FENCE_OPEN = re.compile(r"[ \t]*```[\w+-]*[ \t]*")
_FENCE_CLOSE = re.compile(r"[ \t]*```[ \t]*")
_WRAPPED = re.compile(r"\*\*([^*].*?)\*\*|`([^`]+)`", re.S)  # **42**, `42`
PROSE_WORDS = 3


@dataclass(frozen=True)
class Reading:
    """The reply's final answer: ``answers`` are its readings, graded in order until one earns full
    marks; ``where`` says how it was marked."""

    answers: tuple[str, ...]
    where: str


def _prose(line: str) -> bool:
    return len(list(islice(_WORD.finditer(line), PROSE_WORDS))) == PROSE_WORDS


def _extent(first: str, lines: list[str], start: int, stop: int) -> tuple[str, str]:
    """The answer whose first line is ``first`` (empty when the marker ended its line) and that may continue
    over ``lines[start:stop]``, cut before the commentary: short, up to the first line of prose under the
    first line; long, through prose lines right under prose lines (a list of moves, several sentences)."""
    body: list[str] = [first] if first.strip() else []
    i = start
    if not body:  # "Answer:" then the answer on the lines below it
        while i < stop and not lines[i].strip():
            i += 1
        if i == stop or _RULE.fullmatch(lines[i]) or _LABEL.match(lines[i]):
            return "", ""  # nothing, or commentary at once: "Answer:" then "---" or "Explanation: ..."
        body, i = [lines[i]], i + 1
    if _FENCE_OPEN.fullmatch(body[0]):  # a code fence: read to its closing fence
        for j in range(i, stop):
            if _FENCE_CLOSE.fullmatch(lines[j]):
                inside = "\n".join(lines[i:j]).strip()
                return inside, inside
    short: int | None = None  # how many lines of body the short reading has, once it is cut
    above = "prose" if _prose(body[0]) else "value"
    for line in lines[i:stop]:
        if not line.strip():
            body.append(line)
            above = "blank"
            continue
        if _RULE.fullmatch(line) or _LABEL.match(line):
            break
        prose = _prose(line)
        if prose and above != "prose":
            break
        if prose and short is None:
            short = len(body)
        body.append(line)
        above = "prose" if prose else "value"
    return "\n".join(body[:short]).strip(), "\n".join(body).strip()


def _unwrapped(answer: str) -> str:
    """One line wrapped whole: "$5$" (or "$5$. I hope it is correct."), "**5**" and "`5`" are 5."""
    if "\n" not in answer:
        if (math := leading_math(answer)) is not None:
            return math
        if (wrapped := _WRAPPED.fullmatch(answer)) is not None:
            return next(g for g in wrapped.groups() if g is not None).strip()
    return answer


def _cut(answer: str, end: re.Match[str] | None) -> str | None:
    if end is None or (end.group()[0] in ".!?" and not _prose(answer[end.end() :])):
        return None
    return answer[: end.start()].rstrip()


def _sentences(answer: str) -> list[str]:
    """A one-line ``answer`` without the commentary on its own line, as the shared reading reads it: after
    a clause giving a reason ("5, since …") or after a sentence when prose follows ("5. I checked it
    twice."). The first such place and the last are tried (an answer that is a sentence may hold a ", as"
    of its own), so the line is read in one pass."""
    if "\n" in answer:
        return []
    ends = list(SENTENCE_END.finditer(answer))
    first, last = (ends[0], ends[-1]) if ends else (None, None)
    return [cut for cut in dict.fromkeys((_cut(answer, first), _cut(answer, last))) if cut is not None]


def _stops(answer: str) -> list[str]:
    """``answer`` without, then with, a final full stop (a sentence's end, or part of a sentence answer)."""
    return [answer[:-1].rstrip(), answer] if answer.endswith(".") else [answer]


def _readings(short: str, long: str) -> tuple[str, tuple[str, ...]]:
    """The answer to compare with the reply's other answers (the short extent's first sentence, without its
    full stop), and the readings to grade in order: the short extent, its sentences, the long extent."""
    short = _unwrapped(short)
    sentences = [_unwrapped(cut) for cut in _sentences(short)]
    forms = _stops(short) + [form for cut in sentences for form in _stops(cut)]
    forms += _stops(_unwrapped(long)) if long != short else []
    return _stops(sentences[0] if sentences else short)[0], tuple(dict.fromkeys(forms))


def _quoted(line: str, question: str) -> bool:
    """Whether ``line`` is a line of the question, copied (maybe as a ``>`` quote): "In the case a state is
    repeated the answer is the state before the repetition!" is string_synthesis's question, not an answer."""
    text = line.strip().lstrip(">").strip()
    return bool(question) and bool(text) and text in question


def answer_lines(reply: str, question: str = "") -> list[tuple[str, tuple[str, ...]]]:
    """Every ``Answer:`` marker's answer in ``reply`` (one marker a line: within a line the last statement
    wins, "the answer is 4… no, the answer is 3"), each read to the next marker: the answer to compare with
    the others, and its readings. A marker on a line copied from ``question`` is left out when the reply
    marks another answer."""
    lines = [line.removesuffix("\r") for line in reply.split("\n")]
    marked = [(n, m) for n, line in enumerate(lines) if (m := _MARKER.search(line)) is not None]
    found = []
    for k, (n, m) in enumerate(marked):
        stop = marked[k + 1][0] if k + 1 < len(marked) else len(lines)
        short, long = _extent(last_statement(lines[n][m.end() :].lstrip()).rstrip(), lines, n + 1, stop)
        emphasis = lines[n].lstrip(" \t>#")[:2]
        if emphasis in ("**", "__"):  # "**Answer: 42**": the bold closes after the answer
            short, long = (text[:-2].rstrip() if text.endswith(emphasis) else text for text in (short, long))
        found.append((_quoted(lines[n], question), _readings(short, long) if short else ("", ("",))))
    if not all(quoted for quoted, _ in found):
        found = [item for item in found if not item[0]]
    return [answer for _, answer in found]


# reasoning-gym's own tag first, then Ludus's other markers, as the shared exact-answer extraction
PRIORITY = ("answer_tag", "boxed", "answer_line", "gsm8k")


def read_answer(completion: str, max_chars: int, question: str = "") -> Reading | Score:
    """The final answer of ``completion`` (its readings), or the zero :class:`Score` saying why there is none;
    ``question``, the task's prompt, to tell a copied line of it from an answer."""
    if len(completion) > max_chars:
        return Score.zero(Status.FORMAT_ERROR, f"reply is {len(completion)} characters; the cap is {max_chars}")
    reply = reply_after_reasoning(completion)
    if reply is None:
        return Score.zero(Status.NO_ANSWER, "the reply opens <think> but never closes it")
    for marker in PRIORITY:
        where = DESCRIBED[marker]
        if marker == "answer_line":
            found = answer_lines(reply, question)
        else:
            found = [(answer, (answer,)) for answer in find_answers(completion, (marker,))[0]]
        if not found:
            continue
        different = sorted({answer for answer, _ in found})
        if len(different) > 1:
            return Score.zero(
                Status.AMBIGUOUS, f"{len(different)} different final answers in {where}s: {different[:4]}"
            )
        if not different[0]:
            return Score.zero(Status.NO_ANSWER, f"empty answer ({where})")
        readings = found[-1][1]
        lines = readings[0].count("\n") + 1
        return Reading(readings, where if lines == 1 else f"{where} ({lines} lines)")
    if reply.strip():
        return Reading((reply.strip(),), "whole reply")
    return Score.zero(Status.NO_ANSWER, "empty reply")
