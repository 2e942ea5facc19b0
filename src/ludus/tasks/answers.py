"""Finding the final answer in a model's reply: the one extraction every verifier shares.

A reply's answer is what follows the reasoning: only text after the last ``</think>`` counts,
and a reply that opens ``<think>`` but never closes it has no answer. Within that text the
answer is marked by one of several conventions (:data:`MARKERS`); the first kind present, in
the caller's priority order, is used and every occurrence of it is returned, so the caller
can refuse hedging (two different boxed answers) instead of silently taking the last one.
Everything here is linear-time string scanning, and nothing is evaluated: no regular expression
backtracks over a run of spaces, and an opener with no closer (``\\boxed{``, ``<answer>``, ``\\(``)
is given up once, not rescanned to the end of the reply from each of a thousand copies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from ludus.core.types import Score, Status

Marker = Literal["boxed", "answer_tag", "gsm8k", "answer_line"]
MARKERS: tuple[Marker, ...] = ("boxed", "answer_tag", "gsm8k", "answer_line")
DESCRIBED = {
    "boxed": "\\boxed{}",
    "answer_tag": "<answer> tag",
    "gsm8k": "#### line",
    "answer_line": "'Answer:' line",
}

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"(?<!\\)[{}]")  # \{ and \} are literal braces
_ANSWER_OPEN = re.compile(r"<answer>", re.I)
_ANSWER_CLOSE = re.compile(r"</answer>", re.I)
# Each answer runs to the end of its line; trailing spaces are stripped in code (a lazy group before
# "[ \t]*$" would retry the space run from every position: quadratic in a line of spaces).
_GSM8K = re.compile(r"^[ \t]*####[ \t]*(.*)$", re.M)
_LINE_HEAD = r"[ \t>*#_]*(?:final[ \t]+answer|answer)[ \t*_]*[:：][ \t*_]*"  # "Answer: 5", "**Final answer:** 5"
_SENTENCE_HEAD = r"(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t]+is[ \t]*:?[ \t]*"  # "The final answer is 5."
_ANSWER_LINE = re.compile(rf"^{_LINE_HEAD}(.*)$|\b{_SENTENCE_HEAD}(.*)$", re.M | re.I)
_HEAD_HERE = re.compile(rf"{_LINE_HEAD}|{_SENTENCE_HEAD}", re.I)
_SENTENCE_LATER = re.compile(rf"\b{_SENTENCE_HEAD}", re.I)
# $5$, \(5\), \[5\]; an escaped dollar (\$) inside is money, not the end of the math: $\$18.90$
_LEADING_MATH = re.compile(r"^(?:\$+((?:\\\$|[^$])+)\$+|\\\((.+?)\\\)|\\\[(.+?)\\\])", re.S)
_MATH_SPANS = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$((?:\\\$|[^$])+)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_LAST_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:/\d+)?")


def reply_after_reasoning(text: str) -> str | None:
    """The part of ``text`` after the last ``</think>``; ``None`` if reasoning was opened but never closed."""
    head, sep, tail = text.rpartition("</think>")
    if sep:
        return tail
    return None if "<think>" in text else text


def boxed_contents(text: str) -> list[str]:
    """The contents of every outermost ``\\boxed{…}`` / ``\\fbox{…}`` in ``text``, nested braces
    respected; ``\\boxed{\\boxed{3}}`` is ``3``. One pass matches every brace; an unclosed box is skipped
    (the boxes inside it still count)."""
    boxes = {m.start(): m.end() - 1 for m in _BOX_COMMAND.finditer(text)}  # where each box opens its brace
    if not boxes:
        return []
    closing: dict[int, int] = {}  # each opening brace's closing one
    opened: list[int] = []
    for m in _BRACE.finditer(text):
        if m.group() == "{":
            opened.append(m.start())
        elif opened:
            closing[opened.pop()] = m.start()
    found: list[str] = []
    end = 0
    for start, brace in boxes.items():
        if start >= end and brace in closing:
            found.append(_unboxed(text, brace + 1, closing[brace], boxes, closing))
            end = closing[brace]
    return found


def _unboxed(text: str, start: int, end: int, boxes: dict[int, int], closing: dict[int, int]) -> str:
    """``text[start:end]`` stripped, and while that is one whole box, that box's contents."""
    while True:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        brace = boxes.get(start)
        if brace is None or closing.get(brace) != end - 1:
            return text[start:end]
        start, end = brace + 1, end - 1


def _answer_tags(text: str) -> list[str]:
    """The contents of every ``<answer>…</answer>``: once an opening tag has no closing one after it,
    no later one has either."""
    found: list[str] = []
    pos = 0
    while (opening := _ANSWER_OPEN.search(text, pos)) and (closing := _ANSWER_CLOSE.search(text, opening.end())):
        found.append(text[opening.end() : closing.start()])
        pos = closing.end()
    return found


def _last_statement(answer: str) -> str:
    """What follows the last "answer is" / "Answer:" in ``answer`` (itself after one): each found from
    where the previous one ended, so the line is read once."""
    pos = 0
    while (head := _HEAD_HERE.match(answer, pos) or _SENTENCE_LATER.search(answer, pos + 1)) is not None:
        pos = head.end()
        while pos < len(answer) and answer[pos].isspace():
            pos += 1
    return answer[pos:]


def _answer_lines(text: str) -> list[str]:
    """Every answer line; within one line the last statement wins ("the answer is 4… no, the answer is 3")."""
    found = []
    for line_form, sentence_form in _ANSWER_LINE.findall(text):
        answer = _last_statement((line_form or sentence_form).strip())
        math = _LEADING_MATH.match(answer)  # "$5$. I hope it is correct." -> "5"
        if math:
            answer = next(g for g in math.groups() if g is not None).strip()
        found.append(answer[:-1].rstrip() if answer.endswith(".") else answer)
    return found


def find_answers(
    text: str, priority: Sequence[Marker] = MARKERS, *, whole_reply: bool = False
) -> tuple[list[str], str]:
    """Every final answer of the first marker kind present, and a phrase saying where they were found.

    Returns ``([], reason)`` when there is none. With ``whole_reply=True`` a reply without any
    marker is itself the answer (for tiny models that answer bare, e.g. ``57``).
    """
    reply = reply_after_reasoning(text)
    if reply is None:
        return [], "the reply opens <think> but never closes it"
    for marker in priority:
        if marker == "boxed":
            found = boxed_contents(reply)
        elif marker == "answer_tag":
            found = _answer_tags(reply)
        elif marker == "gsm8k":
            found = _GSM8K.findall(reply)
        elif marker == "answer_line":
            found = _answer_lines(reply)
        else:
            raise ValueError(f"unknown answer marker {marker!r}; choose from {', '.join(MARKERS)}")
        if found:
            return [f.strip() for f in found], DESCRIBED[marker]
    if whole_reply and reply.strip():
        return [reply.strip()], "whole reply"
    return [], "no final answer marked (" + ", ".join(DESCRIBED[m] for m in priority) + ")"


def _without_unclosed(text: str, opener: str, closer: str) -> str:
    """``text`` with every ``opener`` that has no ``closer`` after it (and one character) turned into NULs,
    same length: from each such opener a lazy ``opener(.+?)closer`` would scan to the end of the text."""
    cut = max(0, text.rfind(closer) - len(opener))
    return text[:cut] + text[cut:].replace(opener, "\0" * len(opener))


def last_math(text: str) -> tuple[list[str], str]:
    """For evaluating free-form replies with no marker: the last math span (``$…$``, ``$$…$$``, ``\\(…\\)``,
    ``\\[…\\]``) after the reasoning, else the last number. Training should keep requiring a marker."""
    reply = reply_after_reasoning(text)
    if reply is None:
        return [], "the reply opens <think> but never closes it"
    masked = _without_unclosed(_without_unclosed(reply, "\\(", "\\)"), "\\[", "\\]")
    spans: list[str] = []
    for m in _MATH_SPANS.finditer(masked):
        start, end = m.span(m.lastindex or 0)  # the group of the alternative that matched, read in the reply
        if reply[start:end].strip():
            spans.append(reply[start:end].strip())
    if spans:
        return [spans[-1]], "the last math expression (fallback)"
    numbers = _LAST_NUMBER.findall(reply)
    if numbers:
        return [numbers[-1]], "the last number (fallback)"
    return [], "no marker and no math expression in the reply"


MAX_ANSWER_CHARS = 2_000
# A tiny model answers bare ("57"), so a reply with no marker is itself the answer here.
EXACT_PRIORITY: tuple[Marker, ...] = ("answer_tag", "boxed", "answer_line", "gsm8k")


def extract_answer(text: str) -> tuple[str | None, str]:
    """The final answer in ``text`` and where it came from; ``(None, reason)`` when several
    *different* marked answers are given or there is none (see :func:`find_answers`)."""
    found, where = find_answers(text, EXACT_PRIORITY, whole_reply=True)
    if len(set(found)) > 1:
        return None, f"{len(set(found))} different final answers in {where}s: {found[:4]}"
    return (found[-1], where) if found else ("", where)


def final_answer(completion: str, max_chars: int = MAX_ANSWER_CHARS) -> tuple[str | None, Score | None]:
    """The reply's single final answer, or the zero :class:`Score` saying why there is none.

    Shared by every exact-answer verifier so that length caps, hedging and empty answers are
    judged the same way everywhere.
    """
    if len(completion) > max_chars:
        return None, Score.zero(Status.FORMAT_ERROR, f"reply is {len(completion)} characters; the cap is {max_chars}")
    answer, where = extract_answer(completion)
    if answer is None:
        return None, Score.zero(Status.AMBIGUOUS, where)
    if not answer:
        return None, Score.zero(Status.NO_ANSWER, f"empty answer ({where})")
    return answer, None
