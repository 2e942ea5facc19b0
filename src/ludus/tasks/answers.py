"""Finding the final answer in a model's reply: the one extraction every verifier shares.

A reply's answer is what follows the reasoning: only text after the last ``</think>`` counts,
and a reply that opens ``<think>`` but never closes it has no answer. Within that text the
answer is marked by one of several conventions (:data:`MARKERS`); the first kind present, in
the caller's priority order, is used and every occurrence of it is returned, so the caller
can refuse hedging (two different boxed answers) instead of silently taking the last one.
Everything here is linear-time string scanning: no regular expression can backtrack on a
20,000-character reply, and nothing is evaluated.
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
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_GSM8K = re.compile(r"^[ \t]*####[ \t]*(.*?)[ \t]*$", re.M)
_ANSWER_LINE = re.compile(
    r"^[ \t>*#_]*(?:final[ \t]+answer|answer)[ \t*_]*[:：][ \t*_]*(.*?)[ \t]*$"  # "Answer: 5", "**Final answer:** 5"
    r"|\b(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t]+is[ \t]*:?[ \t]*(.*?)[ \t]*$",  # "The final answer is 5."
    re.M | re.I,
)
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
    respected; ``\\boxed{\\boxed{3}}`` is ``3``."""
    found, end = [], 0
    for match in _BOX_COMMAND.finditer(text):
        if match.start() < end:
            continue  # inside the previous box
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{" and text[i - 1] != "\\":
                depth += 1
            elif text[i] == "}" and text[i - 1] != "\\":
                depth -= 1
                if depth == 0:
                    inner = text[start:i].strip()
                    nested = boxed_contents(inner)
                    whole_box = nested and _BOX_COMMAND.match(inner) and inner.endswith("}")
                    found.append(nested[0] if whole_box and len(nested) == 1 else inner)
                    end = i
                    break
    return found


def _answer_lines(text: str) -> list[str]:
    """Every answer line; within one line the last statement wins ("the answer is 4… no, the answer is 3")."""
    found = []
    for line_form, sentence_form in _ANSWER_LINE.findall(text):
        answer = (line_form or sentence_form).strip()
        while (inner := _ANSWER_LINE.findall(answer)) and (inner[-1][0] or inner[-1][1]) != answer:
            answer = (inner[-1][0] or inner[-1][1]).strip()
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
            found = _ANSWER_TAG.findall(reply)
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


def last_math(text: str) -> tuple[list[str], str]:
    """For evaluating free-form replies with no marker: the last math span (``$…$``, ``$$…$$``, ``\\(…\\)``,
    ``\\[…\\]``) after the reasoning, else the last number. Training should keep requiring a marker."""
    reply = reply_after_reasoning(text)
    if reply is None:
        return [], "the reply opens <think> but never closes it"
    spans = [next(g for g in m.groups() if g is not None).strip() for m in _MATH_SPANS.finditer(reply)]
    spans = [s for s in spans if s]
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
