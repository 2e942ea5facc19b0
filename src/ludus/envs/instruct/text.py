r"""A reply as its reader sees it: the one normalisation every ``instruct`` check reads, and words.

Why: a checker that reads code points pays for what no reader sees. A zero-width space splits a
forbidden word in two, a Hangul filler (a letter to Python, a blank to the eye) joins two words
into one, a Cyrillic ``о`` hides ``delve`` from a search, Lisu letters look like capitals but have
no case, a Lisu tone letter is a comma to the eye and a letter to Python. So every check reads
:func:`clean` text:

* line breaks unified (CRLF, CR, U+2028/U+2029, NEL, form feed → ``\n``);
* characters that render blank but are not white space (the Hangul fillers U+3164 and U+FFA0,
  the braille blank U+2800) → a space;
* NFKC: full-width and mathematical letters, ligatures, superscripts → their plain forms;
* invisible characters removed: every format character (Unicode category Cf: zero-width
  spaces and joiners, bidi marks, the soft hyphen, tags) and the other default-ignorable code
  points (U+034F, the Hangul jamo fillers, variation selectors, Mongolian free variation
  selectors, Khmer inherent vowels);
* punctuation look-alikes → ASCII (:data:`PUNCTUATION`: a Lisu tone letter or a low-9 quote
  that reads as a comma, curly quotes, asterisk operators).

:func:`latin` (case kept) maps letters that look like Latin ones — Cyrillic, Greek, Armenian,
Coptic, Cherokee, Lisu and Canadian syllabics look-alikes, Latin small capitals — onto them;
:func:`fold` does it case-blind, and :func:`skeleton` (also dropping accents on Latin letters and
Markdown inside a word) is what keywords, forbidden words, end phrases and echoes are matched on.
:func:`visible` is the clean text without what a Markdown reader never sees (HTML comments, link
targets). :func:`disguised_words` finds words that mix Latin letters with
another alphabet's, which no honest reply writes.

:func:`words` splits words as NLTK's ``RegexpTokenizer(r"\w+")`` — what IFEval counts with —
does on real scripts: NLTK compiles it with the ``regex`` module, whose ``\w`` includes combining
marks (Devanagari vowel signs, decomposed accents), where Python's ``re`` splits a word at each
one. It differs from NLTK in reading clean text, and in that a word holds a letter or a digit
(a lone ``_`` or an emoji's variation selector is no word).
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache, lru_cache
from typing import NamedTuple

_BEFORE_NFKC = str.maketrans(
    {"\r": "\n", "\u2028": "\n", "\u2029": "\n", "\x85": "\n", "\x0b": "\n", "\x0c": "\n"}  # line breaks
    | {"\u3164": " ", "\uffa0": " ", "\u2800": " ", "\U0001d159": " "}  # blank to the eye (NFKC would hide the fillers)
    | {chr(0x1F150 + i): chr(65 + i) for i in range(26)}  # negative circled letters: 🅐 is A (NFKC keeps them)
    | {chr(0x1F170 + i): chr(65 + i) for i in range(26)}  # negative squared letters: 🅰 is A
)
_IGNORABLE_RANGES = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0xFE00, 0xFE0F),
    (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF),
)  # fmt: skip
"""Default-ignorable code points that are not format characters (Cf is removed whole); from
Unicode's DerivedCoreProperties (variation selectors U+E0100–U+E01EF are inside the last range)."""

PUNCTUATION = {
    "\u201a": ",", "\ua4f9": ",", "\u02cf": ",",  # single low-9 quote, Lisu tone NA PO, low acute: commas to the eye
    "\ua4f8": ".", "\ua4fd": ":",  # Lisu tones MYA TI and MYA JEU: a full stop and a colon to the eye
    "\u201c": '"', "\u201d": '"', "\u201f": '"', "\u2033": '"',  # curly double quotes, double prime
    "\u2018": "'", "\u2019": "'", "\u201b": "'", "\u2032": "'",  # curly single quotes, prime
    "\u2217": "*", "\u204e": "*", "\u2731": "*", "\u066d": "*",  # asterisk operator, low, heavy, Arabic five-pointed
}  # fmt: skip
"""Punctuation that reads as an ASCII mark, mapped onto it. ``„`` stays: an opening quote in German,
counted as a comma by ``no_comma`` only where it follows a word."""

COMMA_LIKE = frozenset(
    ",\u055d\u060c\u060d\u066b\u07f8\u1363\u1802\u1808\u2e32\u2e34\u2e41\u2e49\u2e4c\u3001\ua4fe\ua60d\ua6f5"
    "\u275f\u2760\U0001144d\U0001145a\U00016e97\U0001da87\U0001f678"
)
"""Commas of every script (each character named COMMA that is punctuation) and marks that look
like one (Arabic date and decimal separators, low comma quotation ornaments), after :func:`clean`."""

_LOOKALIKES = {
    # Cyrillic
    "а": "a", "А": "A", "В": "B", "с": "c", "С": "C", "е": "e", "Е": "E", "һ": "h", "Һ": "H", "і": "i", "І": "I",
    "ј": "j", "Ј": "J", "к": "k", "К": "K", "М": "M", "Н": "H", "о": "o", "О": "O", "р": "p", "Р": "P", "ѕ": "s",
    "Ѕ": "S", "Т": "T", "х": "x", "Х": "X", "у": "y", "У": "Y", "ү": "y", "Ү": "Y", "ԁ": "d", "ԛ": "q", "Ԛ": "Q",
    "ԝ": "w", "Ԝ": "W", "ӏ": "l", "Ӏ": "I", "Ԍ": "G",
    # Greek
    "α": "a", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "ι": "i", "Ι": "I", "κ": "k", "Κ": "K", "Μ": "M",
    "ν": "v", "Ν": "N", "ο": "o", "Ο": "O", "ρ": "p", "Ρ": "P", "Τ": "T", "υ": "u", "Υ": "Y", "χ": "x", "Χ": "X",
    "γ": "y", "ω": "w", "ϲ": "c", "Ϲ": "C", "ϳ": "j", "Ϳ": "J",
    # Armenian, Coptic
    "օ": "o", "Օ": "O", "ս": "u", "Ս": "U", "ց": "g", "հ": "h", "ո": "n", "զ": "q", "Տ": "S", "Լ": "L",
    "ⲟ": "o", "Ⲟ": "O",
    # Cherokee capitals (the small letters are mapped through them)
    "Ꭺ": "A", "Ᏼ": "B", "Ꮯ": "C", "Ꭰ": "D", "Ꭼ": "E", "Ꮐ": "G", "Ꮋ": "H", "Ꭵ": "i", "Ꭻ": "J", "Ꮶ": "K",
    "Ꮮ": "L", "Ꮇ": "M", "Ꮲ": "P", "Ꮢ": "R", "Ꮪ": "S", "Ꭲ": "T", "Ꮩ": "V", "Ꮃ": "W", "Ꮓ": "Z",
    # Lisu (no case: they look like capitals)
    "ꓮ": "A", "ꓐ": "B", "ꓚ": "C", "ꓓ": "D", "ꓰ": "E", "ꓝ": "F", "ꓖ": "G", "ꓧ": "H", "ꓲ": "I", "ꓙ": "J",
    "ꓗ": "K", "ꓡ": "L", "ꓟ": "M", "ꓠ": "N", "ꓳ": "O", "ꓑ": "P", "ꓣ": "R", "ꓢ": "S", "ꓔ": "T", "ꓴ": "U",
    "ꓦ": "V", "ꓪ": "W", "ꓫ": "X", "ꓬ": "Y", "ꓜ": "Z",
    # Canadian syllabics and a runic letter ("fancy text" generators' capitals)
    "ᗩ": "A", "ᗷ": "B", "ᑕ": "C", "ᗪ": "D", "ᗴ": "E", "ᖴ": "F", "ᘜ": "G", "ᕼ": "H", "ᓰ": "I", "ᒍ": "J",
    "ᛕ": "K", "ᒪ": "L", "ᗰ": "M", "ᑎ": "N", "ᑭ": "P", "ᑫ": "Q", "ᖇ": "R", "ᔕ": "S", "ᑌ": "U", "ᐯ": "V",
    "ᗯ": "W", "ᘔ": "Z",
    # Latin letters that are other letters to the eye
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɡ": "g",
}  # fmt: skip
"""Letters of other scripts that look like a Latin letter (Unicode's confusables, the ones a
reader cannot tell apart in common fonts), with the case they look like."""

_LATIN_IN_DISGUISE = ("CYRILLIC", "ARMENIAN", "COPTIC", "CHEROKEE", "LISU", "CANADIAN", "RUNIC", "TIFINAGH", "GEORGIAN")
"""Alphabets that never share a word with Latin letters in honest text. Greek does, in units and
formulas ("μm", "ρu"): its look-alikes are only read as Latin (:func:`skeleton`)."""


class _Replace:
    """Characters replaced through a table, found by one character class: fast on text that
    holds none of them, where ``str.translate`` looks every character up in the table."""

    def __init__(self, table: dict[str, str]):
        self.table = table
        self.pattern = re.compile(f"[{_ranges(sorted(table))}]")
        self.deletes = not any(table.values())

    def __call__(self, text: str) -> str:
        if self.deletes:
            return self.pattern.sub("", text)
        return self.pattern.sub(lambda m: self.table[m.group()], text) if self.pattern.search(text) else text


class _Tables(NamedTuple):
    invisible: _Replace  # invisible characters, to ""
    latin: _Replace  # look-alike letters, case kept
    fold: _Replace  # lower-case look-alike letters, each case pair read alike (Cyrillic н as h, like Н)


@cache
def _tables() -> _Tables:
    """Built on first use from ``unicodedata`` (a scan of planes 0-1: format characters elsewhere
    are the tags of plane 14, in ``_IGNORABLE_RANGES``)."""
    remove: dict[str, str] = {}
    lookalikes = dict(_LOOKALIKES)
    for code in range(0x20000):
        char = chr(code)
        category = unicodedata.category(char)
        if category == "Cf":
            remove[char] = ""
        elif category in ("Ll", "Lu", "Lo") and code >= 0x180:
            name = unicodedata.name(char, "")
            if name.startswith("LATIN LETTER SMALL CAPITAL ") and len(name.split()[-1]) == 1:
                lookalikes[char] = name.split()[-1]  # ᴅᴇʟᴠᴇ: small capitals read as capitals
            elif name.startswith("CHEROKEE SMALL LETTER ") and char.upper() in lookalikes:
                lookalikes[char] = lookalikes[char.upper()]
    for low, high in _IGNORABLE_RANGES:
        remove.update(dict.fromkeys(map(chr, range(low, high + 1)), ""))
    fold = {}
    for char in {c for k in lookalikes for c in (k, k.lower(), k.upper()) if len(c.lower()) == 1}:
        low = char.lower()
        fold[low] = (lookalikes.get(low.upper()) or lookalikes.get(low) or low).lower()
    return _Tables(_Replace(remove), _Replace(lookalikes), _Replace(fold))


def _ranges(chars: list[str]) -> str:
    """Sorted characters as a compact regex class body (``a-z`` runs), which ``re`` matches fast."""
    out, start = [], 0
    for i in range(1, len(chars) + 1):
        if i == len(chars) or ord(chars[i]) != ord(chars[i - 1]) + 1:
            first, last = re.escape(chars[start]), re.escape(chars[i - 1])
            out.append(first if start == i - 1 else f"{first}-{last}")
            start = i
    return "".join(out)


_PUNCTUATION = _Replace(PUNCTUATION)
_ASCII_WORD = re.compile(r"_*[A-Za-z0-9]\w*", re.A)
_WORD_RUN = re.compile(r"\w+")
_ACCENTS = re.compile(r"(?<=[a-z])[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
"""Combining diacritical marks (the blocks that decorate Latin letters) after a Latin letter."""
_INSIDE_WORD = re.compile(r"(?<=\w)(?:[*_~`]+|</?[a-z][^<>\n]*>)+(?=\w)")
"""Markdown emphasis and HTML tags between two letters of a word, which a reader does not see."""


@lru_cache(maxsize=256)
def clean(text: str) -> str:
    """``text`` as a reader sees it (module docstring): the text every check reads."""
    text = text.replace("\r\n", "\n").translate(_BEFORE_NFKC)
    if text.isascii():  # NFKC leaves ASCII alone, and none of it is invisible
        return text
    return _PUNCTUATION(_tables().invisible(unicodedata.normalize("NFKC", text)))


_HIDDEN = re.compile(r"<!--.*?(?:-->|\Z)|(?<=\])\([^()\s]*\)|^[ \t]*\[[^\]\n]+\]:[ \t]*\S.*$", re.S | re.M)


@lru_cache(maxsize=256)
def visible(text: str) -> str:
    """Clean text without what a Markdown reader never shows: HTML comments, link targets and
    link definitions (a keyword in ``<!-- -->`` or in ``[here](http://lantern)`` is not in the
    reply to a reader)."""
    return _HIDDEN.sub("", clean(text))


def latin(text: str) -> str:
    """``text`` with look-alike letters read as the Latin letters they look like (case kept)."""
    return text if text.isascii() else _tables().latin(text)


def fold(text: str) -> str:
    """Clean ``text`` in lower case with look-alike letters read as Latin, both letters of a case
    pair alike (Cyrillic ``Н`` and ``н`` are ``h``): case-blind counts and matching read this."""
    lowered = clean(text).lower()
    return lowered if lowered.isascii() else _tables().fold(lowered)


@lru_cache(maxsize=256)
def skeleton(text: str) -> str:
    """What matching reads: :func:`fold`, Markdown emphasis and HTML tags inside a word dropped
    (``**de**lve`` and ``de<b>lve</b>`` read ``delve``), and accents on Latin letters dropped
    (``dèlve`` is ``delve``; Devanagari vowel signs stay)."""
    folded = _INSIDE_WORD.sub("", fold(text))
    if folded.isascii():
        return folded
    return unicodedata.normalize("NFC", _ACCENTS.sub("", unicodedata.normalize("NFD", folded)))


def words(text: str) -> list[str]:
    """The words of ``text`` (already clean): runs of word characters and combining marks that
    hold a letter or a digit. (Python's ``\\w`` stops at a mark: runs it splits there are joined.)"""
    if text.isascii():
        return _ASCII_WORD.findall(text)
    runs: list[str] = []
    start = end = -1
    for m in _WORD_RUN.finditer(text):
        if m.start() == end:
            end = m.end()
        else:
            if start >= 0:
                runs.append(text[start:end])
            start, end = m.span()
        while end < len(text) and unicodedata.category(text[end])[0] == "M":
            end += 1
    if start >= 0:
        runs.append(text[start:end])
    return [w for w in runs if "_" not in w or any(c.isalnum() for c in w)]


def script(char: str) -> str:
    """A letter's script as its Unicode name says it (``LATIN``, ``CYRILLIC``, ``LISU``…)."""
    return unicodedata.name(char, "?").split(" ", 1)[0]


def disguised_words(text: str) -> list[str]:
    """Words of clean ``text`` that mix Latin letters with another alphabet's (``dеlve`` with a
    Cyrillic ``е``): Cyrillic, Armenian, Cherokee, Lisu… letters (Greek is free to)."""
    if text.isascii():
        return []
    out = []
    for word in dict.fromkeys(words(text)):
        if word.isascii() or not any("a" <= c.lower() <= "z" for c in word):
            continue
        for c in word:
            if c.isalpha() and not c.isascii():
                name = script(c)
                if name in _LATIN_IN_DISGUISE:
                    out.append(word)
                    break
    return out
