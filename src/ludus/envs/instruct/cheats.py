r"""Replies that must earn nothing on an ``instruct`` task: ``InstructEnv.cheats`` (played by
``ludus check --redteam``), the tests and ``benchmarks/instruct_cheats.py`` use this library.

Three families, each named by what it tries:

* **content-free** — :data:`CONSTANTS` (the empty reply, ``{}``, ``a\n******\nb``, lorem ipsum, a
  word 300 times, every shape at once…), and the task's own parameters with nothing said: its
  keywords stuffed, its topic or request alone, the reference with every word of its prose
  blanked out (so every count and shape still holds);
* **echoes** — the prompt copied back before the reference, plainly and disguised: zero-width
  spaces, look-alike or full-width letters, Hangul fillers for spaces, soft hyphens, lower case
  without punctuation, a word in six changed, inside an HTML comment;
* **blind spots** — a constraint broken in plain sight of a reader but not of a naive checker,
  on the reference: a forbidden word split by a zero-width space or written in Cyrillic, a
  comma written as ``‚`` or ``ꓹ``, a capital in Lisu, extra words joined by Hangul fillers, a
  keyword only in an HTML comment, a title or placeholder of invisible characters, a second
  response identical but for a zero-width space, JSON with ``NaN``…; and the reference with
  each constraint plainly broken.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from ludus.core.types import Task
from ludus.envs.instruct.constraints import Constraint, named_constraints
from ludus.envs.instruct.substance import constraints_of
from ludus.envs.instruct.tasks import violate

LOREM = "lorem ipsum dolor amet consectetur adipiscing elit sed eiusmod tempor incididunt labore dolore aliqua enim veniam quis"

CONSTANTS: dict[str, str] = {
    "empty": "",
    "white space": " \n\t ",
    "a zero-width space": "\u200b",
    "a Hangul filler": "\u3164",
    "a braille blank": "\u2800",
    "an empty object": "{}",
    "an empty list": "[]",
    "zero": "0",
    "null": "null",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "an empty string": '""',
    "a quoted letter": '"a"',
    "four quotes": '""""',
    "a letter": "a",
    "a capital": "A",
    "a preamble": "Sure! Here is my answer.",
    "two responses of a letter": "a\n******\nb",
    "a title": "<<a>>",
    "a title of a zero-width space": "<<\u200b>>\n\u200b",
    "a postscript": "P.S. a",
    "a second postscript": "P.P.S a",
    "two bullets": "* a\n* b",
    "five bullets": "* a\n* b\n* c\n* d\n* e",
    "a divider": "***",
    "four paragraphs of a letter": "a\n***\nb\n***\nc\n***\nd",
    "four blank-line paragraphs": "a\n\nb\n\nc\n\nd",
    "four sections": "Section 1\na\nSection 2\nb\nSection 3\nc\nSection 4\nd",
    "four SECTIONS": "SECTION 1\na\nSECTION 2\nb\nSECTION 3\nc\nSECTION 4\nd",
    "placeholders": "[a] [b] [c] [d]",
    "placeholder words": "[name] [date] [address] [city] [company]",
    "highlights": "*a* *b* *c* *d*",
    "a fixed option": "My answer is yes.",
    "a fenced empty object": "```json\n{}\n```",
    "an empty response object": '{"response": ""}',
    "a NaN object": '{"response": NaN}',
    "an object of empty fields": '{"title": "", "text": "", "keywords": []}',
    "an end phrase": "Any other questions?",
    "a sign-off": "Thank you for reading.",
    "a title and a postscript": "<<Title>>\nText.\nP.S. Text.",
    "every shape at once": "<<a>>\nSection 1\n* a\n* b\n*a* [a]\n***\nSection 2\n*b* [b]\nP.S. a\nAny other questions?",
    "lorem ipsum": " ".join([LOREM] * 6),
    "'the' 300 times": " ".join(["the"] * 300),
    "'word' 300 times": " ".join(["word"] * 300),
    "the alphabet 12 times": " ".join("abcdefghijklmnopqrstuvwxyz" * 12),
    "the numbers to 300": " ".join(map(str, range(1, 301))),
    "capital letters": "AAAA BBBB CCCC DDDD EEEE FFFF",
    "all lower case, nothing said": "all lower case text here with nothing to say",
    "ALL CAPS, NOTHING SAID": "ALL CAPS TEXT HERE WITH NOTHING TO SAY",
    "mathematical bold": "𝐧𝐨𝐭𝐡𝐢𝐧𝐠 𝐭𝐨 𝐬𝐞𝐞 𝐡𝐞𝐫𝐞",
    "emoji": "👍\ufe0f " * 20,
}
"""Content-free replies, the same for every task."""

_CYRILLIC = str.maketrans("aceopxyiAEOPCHKMTXB", "асеорхуіАЕОРСНКМТХВ")
_FULLWIDTH = {c: chr(ord(c) + 0xFEE0) for c in map(chr, range(0x21, 0x7F))}
_SMALL_CAPITALS = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘǫʀꜱᴛᴜᴠᴡxʏᴢ")
_LOOKALIKE_OF = {"a": "а", "c": "с", "e": "е", "i": "і", "o": "о", "p": "р", "s": "ѕ", "x": "х", "y": "у", "h": "һ"}


def cheats(task: Task, reference: str | None) -> dict[str, str]:
    """Every cheat of the library that applies to ``task``, by name (module docstring)."""
    out = dict(CONSTANTS)
    out.update(_content_free(task, reference))
    if reference is not None:
        out.update(_echoes(task.prompt, reference))
        for name, c in named_constraints(constraints_of(task)):
            out[f"the reference with {name} broken"] = violate(c, reference)
            out.update(_blind_spots(name, c, reference))
    return out


# ---- content-free, from the task's parameters ---------------------------------------------------


def _content_free(task: Task, reference: str | None) -> Iterator[tuple[str, str]]:
    constraints = constraints_of(task)
    topic = str(task.info.get("topic") or "")
    keywords = [k for c in constraints for k in c.get("keywords", [])]
    keywords += [c["keyword"] for c in constraints if "keyword" in c]
    if keywords:
        yield "the task's keywords, stuffed", " ".join(keywords * 10)
        yield "the task's keywords and topic, stuffed", " ".join([topic, *keywords] * 10)
    if topic:
        yield "the topic alone", topic
        yield "a title of the topic", f"<<{topic.title()}>>\n{topic}."
    yield "the request alone", str(task.info.get("request") or task.prompt.split(".")[0])
    for c in constraints:
        if c["kind"] == "end_phrase":
            yield "the end phrase alone", str(c["end_phrase"])
    if reference is not None:
        keep = _protected(task)
        yield "the reference with its prose blanked", _blank(reference, keep, lambda i: "blah")
        yield "the reference in lorem ipsum", _blank(reference, keep, lambda i: LOREM.split()[i % 17])
        word = (topic.split() or ["it"])[-1]
        yield "the reference with every word its topic", _blank(reference, keep, lambda i: word)


def _protected(task: Task) -> set[str]:
    """Words a blanked reply keeps so that it still meets every constraint: the task's keywords,
    first words, end phrase, section names, topic, and the request a constraint asks repeated."""
    keep: set[str] = set(re.findall(r"[a-z]+", str(task.info.get("topic") or "").lower()))
    for c in constraints_of(task):
        for key in ("keywords", "keyword", "first_word", "end_phrase", "section_spliter", "prompt_to_repeat"):
            values = c.get(key, [])
            for value in [values] if isinstance(values, str) else values:
                keep.update(re.findall(r"[a-z]+", value.lower()))
    return keep


def _blank(text: str, keep: set[str], filler: Callable[[int], str]) -> str:
    """``text`` with every word of two letters or more outside ``keep`` replaced by ``filler(i)``
    in the word's case (``REALLY`` → ``BLAH``), so counts, capitals and shapes still hold."""
    count = iter(range(len(text)))

    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        if word.lower() in keep or len(word) < 2:
            return word
        new = filler(next(count))
        return new.upper() if word.isupper() else new.capitalize() if word[0].isupper() else new

    return re.sub(r"[A-Za-z]+", swap, text)


# ---- the prompt copied back -------------------------------------------------------------------------


def _echoes(prompt: str, reference: str) -> Iterator[tuple[str, str]]:
    yield "the request echoed back", prompt
    disguised = {
        "plainly": prompt,
        "with zero-width spaces": re.sub(r"(\w)(\w)", "\\1\u200b\\2", prompt),
        "in look-alike letters": prompt.translate(_CYRILLIC),
        "in full-width letters": prompt.translate(_FULLWIDTH),
        "with Hangul fillers for spaces": prompt.replace(" ", "\u3164"),
        "with soft hyphens": re.sub(r"(\w\w)(\w)", "\\1\u00ad\\2", prompt),
        "lower-cased without punctuation": re.sub(r"[^\w\s]", "", prompt.lower()),
        "with a word in six changed": " ".join("really" if i % 6 == 5 else w for i, w in enumerate(prompt.split())),
        "with a word inserted every five": " ".join(
            w + (" really" if i % 5 == 4 else "") for i, w in enumerate(prompt.split())
        ),  # noqa: E501
        "in an HTML comment": f"<!-- {prompt} -->",
        "with a Hebrew point in each word": re.sub(r"(\w)(\w+)", "\\1\u05b4\\2", prompt),
        "with an unassigned invisible character in each word": re.sub(r"(\w)(\w+)", "\\1\u2065\\2", prompt),
        "in a hidden HTML element": f'<span style="display:none">{prompt}</span>',
    }
    for how, echo in disguised.items():
        name = "the request echoed, then the reference" if how == "plainly" else f"the prompt {how}, then the reference"
        yield name, f"{echo}\n\n{reference}"


# ---- blind spots: a constraint broken where only a naive checker cannot see it --------------------------


def _blind_spots(name: str, c: Constraint, ref: str) -> Iterator[tuple[str, str]]:
    kind = c["kind"]
    relation = str(c.get("relation") or c.get("let_relation") or c.get("capital_relation") or "")
    ceiling = relation in ("less than", "at most", "exactly")
    yield f"the reference with {name} broken, the reference hidden in a comment", f"{violate(c, ref)}\n<!--\n{ref}\n-->"
    if kind == "keywords_forbidden":
        word = str(c["forbidden_words"][0])
        for how, disguised in _disguises(word).items():
            yield f"a forbidden word {how}", f"{ref} {disguised}"
    elif kind == "no_comma":
        for how, comma in {
            "full-width": "，", "a low-9 quote": "‚", "Lisu": "ꓹ", "Arabic": "،", "ideographic": "、",
            "small": "﹐", "a low double quote": "„", "a modifier letter": "ˏ",
        }.items():  # fmt: skip
            yield f"a comma written {how}", f"{ref}{comma} indeed"
    elif kind == "lowercase":
        for how, word in {"in Lisu": "ꓬꓰꓢ", "in small capitals": "ʏᴇꜱ", "in Cherokee": "ᎪᏴ"}.items():
            yield f"capitals written {how}", f"{ref} {word}"
    elif kind == "uppercase":
        yield "lower case written as modifier letters", f"{ref} ʸᵉˢ"
    elif kind == "length_words" and ceiling:
        extra = int(c["num_words"]) + 1
        for how, joint in {"Hangul fillers": "\u3164", "half-width Hangul fillers": "\uffa0"}.items():
            yield f"extra words joined by {how}", f"{ref} {joint.join(['more'] * extra)}"
    elif kind == "length_words":
        short = violate(c, ref)
        for how, joint in {"a zero-width space": "\u200b", "a combining grapheme joiner": "\u034f"}.items():
            yield f"too few words, each split by {how}", re.sub(r"(\w\w)(\w\w)", f"\\1{joint}\\2", short)
        pad = int(c["num_words"])
        yield "too few words, padded with underscores", short + " _" * pad
        yield "too few words, padded with lone combining marks", short + " \u0301" * pad
        yield "too few words, padded in a comment", f"{short}<!-- {' more' * pad} -->"
    elif kind == "length_sentences" and ceiling:
        yield "extra sentences ended by a Lisu full stop", "ꓸ ".join(["More here"] * (int(c["num_sentences"]) + 1)) + "ꓸ " + ref  # fmt: skip
    elif kind == "letter_frequency" and ceiling:
        letter, times = str(c["letter"]).lower(), int(c["let_frequency"])
        yield "the letter in full-width, past the limit", f"{ref} {' '.join([_FULLWIDTH[letter]] * times)}"
        if letter in _LOOKALIKE_OF:
            yield "the letter as a look-alike, past the limit", f"{ref} {' '.join([_LOOKALIKE_OF[letter]] * times)}"
    elif kind == "keyword_frequency" and ceiling:
        word, times = str(c["keyword"]), int(c["frequency"])
        for how, disguised in _disguises(word).items():
            yield f"the keyword {how}, past the limit", f"{ref} {' '.join([disguised] * times)}"
    elif kind in ("keyword_frequency", "keywords_include"):
        word = str(c.get("keyword") or c.get("keywords", [""])[0])
        yield "a keyword only in a comment", f"{violate(c, ref)}<!-- {' '.join([word] * 9)} -->"
        yield "a keyword only in a link target", f"{violate(c, ref)} [more](https://{word}.example/{word})"
    elif kind == "capital_words" and ceiling:
        yield "capital words in Lisu, past the limit", f"{ref} {' '.join(['ꓔꓲꓟꓰ'] * (int(c['capital_frequency']) + 1))}"
    elif kind == "title":
        for how, blank in {
            "zero-width spaces": "\u200b",
            "Hangul fillers": "\u3164",
            "braille blanks": "\u2800",
        }.items():
            yield f"a title of {how}", re.sub(r"<<[^\n]*?>>", f"<<{blank}>>", ref)
    elif kind == "highlights":
        yield "highlights of zero-width spaces", re.sub(r"\*[^\n*]+\*", "*\u200b*", ref)
    elif kind == "placeholders":
        yield "empty placeholders", re.sub(r"\[[^\]\n]*\]", "[]", ref)
        yield "placeholders of zero-width spaces", re.sub(r"\[[^\]\n]*\]", "[\u200b]", ref)
    elif kind == "bullets":
        for how, mark in {"an asterisk operator": "∗", "a bullet sign": "•", "a full-width asterisk": "＊"}.items():
            yield f"an extra bullet marked with {how}", f"{ref}\n{mark} One more point."
    elif kind == "two_responses":
        first = ref.split("******")[0].strip()
        copies = {
            "but for zero-width spaces": re.sub(r"(\w)(\w)", "\\1\u200b\\2", first),
            "but in look-alike letters": first.translate(_CYRILLIC),
            "but for one word": re.sub(r"\w+", "Indeed", first, count=1),
        }
        for how, copy in copies.items():
            yield f"the same response twice {how}", f"{first}\n******\n{copy}"
    elif kind == "length_paragraphs":
        for how, divider in {"asterisk operators": "∗∗∗", "full-width asterisks": "＊＊＊"}.items():
            yield f"an extra paragraph after a divider of {how}", f"{ref}\n{divider}\nOne more paragraph here."
    elif kind == "paragraph_first_word":
        for how, gap in {"a line of spaces": "\n \n", "CRLF line ends": "\r\n\r\n"}.items():
            yield f"an extra paragraph after {how}", f"{ref}{gap}One more paragraph here."
    elif kind == "json_format":
        body = json.loads(re.sub(r"^```(json)?|```$", "", ref.strip(), flags=re.I))
        yield "the reference JSON with a NaN", json.dumps({**_as_object(body), "score": float("nan")})


def _disguises(word: str) -> dict[str, str]:
    """``word`` as a reader still reads it but a naive search does not find it."""
    half = max(1, len(word) // 2)
    return {
        "split by a zero-width space": f"{word[:half]}\u200b{word[half:]}",
        "split by a soft hyphen": f"{word[:half]}\u00ad{word[half:]}",
        "split by a word joiner": f"{word[:half]}\u2060{word[half:]}",
        "split by a combining grapheme joiner": f"{word[:half]}\u034f{word[half:]}",
        "split by a variation selector": f"{word[:half]}\ufe0f{word[half:]}",
        "in Cyrillic look-alikes": word.translate(_CYRILLIC),
        "in full-width letters": word.translate(_FULLWIDTH),
        "in small capitals": word.lower().translate(_SMALL_CAPITALS),
        "in mathematical bold": "".join(chr(0x1D41A + ord(ch) - 97) if "a" <= ch <= "z" else ch for ch in word.lower()),
        "with accents": re.sub(r"([aeiou])", "\\1\u0301", word),
        "struck through": "".join(ch + "\u0336" for ch in word),
        "reversed inside a bidi override": f"\u202e{word[::-1]}\u202c",
        "with a Devanagari nukta": f"{word[:half]}\u093c{word[half:]}",
        "split by an unassigned invisible character": f"{word[:half]}\u2065{word[half:]}",
        "with a Myanmar zero for o": word.replace("o", "\u1040"),
    }


def _as_object(body: Any) -> dict[str, Any]:
    return body if isinstance(body, dict) else {"response": body}
