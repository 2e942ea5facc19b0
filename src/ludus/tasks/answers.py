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
# "Answer: 5", "**Final answer:** 5"; after the colon only the emphasis that closes the marker is skipped, so an
# answer may open with "_" or "*" (a board row "_ Q _ _")
LINE_HEAD = r"[ \t>*#_]*(?:final[ \t]+answer|answer)[ \t*_]*[:：][*_]*[ \t]*"
SENTENCE_HEAD = r"(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t]+is[ \t]*:?[ \t]*"  # "The final answer is 5."
_ANSWER_LINE = re.compile(rf"^{LINE_HEAD}(.*)$|\b{SENTENCE_HEAD}(.*)$", re.M | re.I)
_HEAD_HERE = re.compile(rf"{LINE_HEAD}|{SENTENCE_HEAD}", re.I)
_SENTENCE_LATER = re.compile(rf"\b{SENTENCE_HEAD}", re.I)
# $5$, \(5\), \[5\]; an escaped dollar (\$) inside is money, not the end of the math: $\$18.90$
_LEADING_MATH = re.compile(r"^(?:\$+((?:\\\$|[^$])+)\$+|\\\((.+?)\\\)|\\\[(.+?)\\\])", re.S)
_MATH_SPANS = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$((?:\\\$|[^$])+)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_LAST_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:/\d+)?")


# chat-template tokens: a reply ends at the first one (what follows, a made-up user turn, is not the answer)
_END_OF_TURN = re.compile(
    r"<\|(?:im_start|im_end|endoftext|end_of_text|eot_id|start_header_id|end_header_id|eom_id|end|user|assistant"
    r"|system)\|>|</s>|<(?:start|end)_of_turn>|<\uff5c[^<>\uff5c]{1,40}\uff5c>"
)


def reply_after_reasoning(text: str) -> str | None:
    """The part of ``text`` after the last ``</think>``, up to the first chat-template token (``<|im_end|>``,
    ``<|eot_id|>``, ``</s>``…) after any it starts with; ``None`` if reasoning was opened but never closed."""
    start = 0
    while (header := _END_OF_TURN.match(text, start)) is not None:  # "<|im_start|>Answer: …": the turn's header
        start = header.end()
    end = _END_OF_TURN.search(text, start)
    text = text[start : end.start() if end is not None else len(text)]
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


def last_statement(answer: str) -> str:
    """What follows the last "answer is" / "Answer:" in ``answer`` (itself after one): each found from
    where the previous one ended, so the line is read once."""
    pos = 0
    while (head := _HEAD_HERE.match(answer, pos) or _SENTENCE_LATER.search(answer, pos + 1)) is not None:
        pos = head.end()
        while pos < len(answer) and answer[pos].isspace():
            pos += 1
    return answer[pos:]


def _answer_lines(text: str) -> list[str]:
    """Every answer line; within one line the last statement wins ("the answer is 4… no, the answer is 3"),
    "The volume of $V$ is 120." is what its first "is" states, and the answer ends with its sentence
    ("12,000,023. I hope it is correct." is 12,000,023; "5, since …" is 5)."""
    found = []
    for line_form, sentence_form in _ANSWER_LINE.findall(text):
        answer = last_statement((line_form or sentence_form).strip())
        math = leading_math(answer)  # "$5$. I hope it is correct." -> "5"
        if math is None:
            answer = _first_sentence(answer)
            subject = _SUBJECT_IS.match(answer)
            if subject:  # "The volume of $ABCDEFGH$ is 120" -> "120"
                answer = answer[subject.end() :]
                math = leading_math(answer)
        answer = answer if math is None else math
        found.append(answer[:-1].rstrip() if answer.endswith(".") else answer)
    return found


def leading_math(answer: str) -> str | None:
    """The math span ``answer`` starts with when only its sentence's end follows (``$5$.``, ``$5$, since …``);
    ``None`` when more of the answer does (``$5$ or 6``, ``$5$x``: the whole line is the answer)."""
    math = _LEADING_MATH.match(answer)
    if math is None or not _AFTER_ANSWER.match(answer, math.end()):
        return None
    return next(g for g in math.groups() if g is not None).strip()


# a sentence ends at ". ", "! ", "? " (never inside a number: "3.5") or at a clause giving a reason
_AFTER_ANSWER = re.compile(r"\s*$|[.!?,;:](?:\s|$)")
SENTENCE_END = re.compile(r"[.!?](?=\s)|,[ \t]+(?:since|because|as|which|so|where|given|thus|hence)(?![^\W\d_])", re.I)
# "The volume of $V$ is …": a subject that starts with "the", up to its first verb (never "is not")
_SUBJECT_IS = re.compile(r"the[ \t][^=<>]*?[ \t](?:is|are|equals|was|were)[ \t]+(?!not(?![A-Za-z]))", re.I)


def _first_sentence(answer: str) -> str:
    """``answer`` up to the end of its first sentence, outside math spans (``$…$``)."""
    masked = _MATH_SPANS.sub(lambda m: "\0" * len(m.group(0)), _unclosed_masked(answer))
    end = SENTENCE_END.search(masked)
    return answer[: end.start()].rstrip() if end else answer


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
    # a box a program prints is not the answer: fenced blocks are read only when the prose marks none
    prose = _CODE_BLOCK.sub(lambda m: " " * len(m.group(0)), reply) if "```" in reply else reply
    for marker in priority:
        found = _marked(prose, marker) or (_marked(reply, marker) if prose is not reply else [])
        if found:
            return [f.strip() for f in found], DESCRIBED[marker]
    if whole_reply and reply.strip():
        return [reply.strip()], "whole reply"
    return [], "no final answer marked (" + ", ".join(DESCRIBED[m] for m in priority) + ")"


_CODE_BLOCK = re.compile(r"```.*?```", re.S)  # a fenced block: code, or a tool's output


def _marked(reply: str, marker: Marker) -> list[str]:
    """Every answer ``marker`` marks in ``reply``."""
    if marker == "boxed":
        return boxed_contents(reply)
    if marker == "answer_tag":
        return _answer_tags(reply)
    if marker == "gsm8k":
        return _GSM8K.findall(reply)
    if marker == "answer_line":
        return _answer_lines(reply)
    raise ValueError(f"unknown answer marker {marker!r}; choose from {', '.join(MARKERS)}")


def _without_unclosed(text: str, opener: str, closer: str) -> str:
    """``text`` with every ``opener`` that has no ``closer`` after it (and one character) turned into NULs,
    same length: from each such opener a lazy ``opener(.+?)closer`` would scan to the end of the text."""
    cut = max(0, text.rfind(closer) - len(opener))
    return text[:cut] + text[cut:].replace(opener, "\0" * len(opener))


def _unclosed_masked(text: str) -> str:
    """``text`` with every ``\\(`` and ``\\[`` that is never closed masked (same length): :data:`_MATH_SPANS`
    then scans it in linear time."""
    return _without_unclosed(_without_unclosed(text, "\\(", "\\)"), "\\[", "\\]")


def last_math(text: str) -> tuple[list[str], str]:
    """For evaluating free-form replies with no marker: the last math span (``$…$``, ``$$…$$``, ``\\(…\\)``,
    ``\\[…\\]``) after the reasoning, else the last number. Training should keep requiring a marker."""
    reply = reply_after_reasoning(text)
    if reply is None:
        return [], "the reply opens <think> but never closes it"
    masked = _unclosed_masked(reply)
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
