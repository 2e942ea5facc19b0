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
  spaces and joiners, bidi marks, the soft hyphen, tags), every unassigned (Cn: U+2065 renders
  as nothing) and private-use (Co) code point, and the other default-ignorable code
  points (U+034F, the Hangul jamo fillers, variation selectors, Mongolian free variation
  selectors, Khmer inherent vowels);
* punctuation look-alikes → ASCII (:data:`PUNCTUATION`: a Lisu tone letter or a low-9 quote
  that reads as a comma, curly quotes, asterisk operators).

:func:`latin` (case kept) maps letters that look like Latin ones — Cyrillic, Greek, Armenian,
Coptic, Cherokee, Lisu and Canadian syllabics look-alikes, Latin small capitals — onto them;
:func:`fold` does it case-blind, and :func:`skeleton` (also dropping combining marks but those on
another script's letters, and Markdown inside a word) is what keywords, forbidden words, end phrases and echoes are matched on.
:func:`visible` is the clean text without what a Markdown reader never sees (HTML comments, link
targets, HTML tags and hidden elements). :func:`disguised_words` finds words that hold a Latin
letter and a character no Latin word holds (an allowlist), which no honest reply writes.

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

_COMMAS_BY_LOOK = (
    ",\u055d\u060c\u060d\u066b\u066c\u07f8\u1363\u1802\u1808\u2e32\u2e34\u2e41\u2e49\u2e4c\u3001\ua4fe\ua60d\ua6f5"
    "\u275f\u2760\u0375\u02ce\u02bb\u02bd\U0001144d\U0001145a\U00016e97\U0001da87\U0001f678"
)


def _comma_like() -> frozenset[str]:
    """Every character named COMMA (but an accent above a letter, or a quotation mark ornament
    set high), and the marks that look like one though named otherwise."""
    named = set()
    for code in range(0x20000):
        name = unicodedata.name(chr(code), "")
        if "COMMA" in name and "ABOVE" not in name and ("QUOTATION" not in name or " LOW " in name):
            named.add(chr(code))
    return frozenset(named | set(_COMMAS_BY_LOOK))


COMMA_LIKE = _comma_like()
"""Commas of every script and what a reader takes for one, after :func:`clean`: every character
whose Unicode name says COMMA (the comma below of Romanian ``ș`` too: a comma to the eye), but
combining commas above (Greek breathings, Latvian ``ģ``) and the high quotation ornaments; and,
named otherwise, the Arabic date, decimal and thousands separators, the Greek lower numeral sign,
the low grave and low acute modifiers, the turned and reversed comma modifiers. A cedilla or an
ogonek on no letter (NFKC makes ``¸`` a space and a combining cedilla) is one too
(:data:`LOOSE_COMMA`)."""

LOOSE_COMMA = re.compile(r"\u0326|(?<![^\W\d_])[\u0327\u0328]")
"""A combining comma below anywhere, a cedilla or ogonek that sits on no letter (in NFD text)."""

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


class _Replace:
    """Characters replaced through a table, found by one character class: fast on text that
    holds none of them, where ``str.translate`` looks every character up in the table."""

    def __init__(self, table: dict[str, str], extra: str = ""):
        self.table = table  # ``extra``: a class body of more characters to delete (a table of "")
        self.pattern = re.compile(f"[{_ranges(sorted(table))}{extra}]")
        self.deletes = not any(table.values())

    def __call__(self, text: str) -> str:
        if self.deletes:
            return self.pattern.sub("", text)
        return self.pattern.sub(lambda m: self.table[m.group()], text) if self.pattern.search(text) else text


class _Tables(NamedTuple):
    invisible: _Replace  # invisible characters, to ""
    latin: _Replace  # look-alike letters, case kept
    fold: _Replace  # lower-case look-alike letters, each case pair read alike (Cyrillic н as h, like Н)
    marks: re.Pattern[str]  # runs of combining marks (Mn, Me)


@cache
def _tables() -> _Tables:
    """Built on first use from ``unicodedata`` (a scan of planes 0-3 and 14, the planes with
    assigned characters; names read in planes 0-1)."""
    remove: dict[str, str] = {}
    marks: list[str] = []
    lookalikes = dict(_LOOKALIKES)
    for code in (*range(0x40000), *range(0xE0000, 0xE1000)):  # the rest is unassigned or private use
        char = chr(code)
        category = unicodedata.category(char)
        if category in ("Cf", "Cn", "Co", "Cs"):  # format, unassigned, private use, lone surrogates
            remove[char] = ""
        elif category in ("Mn", "Me"):
            marks.append(char)
        elif category in ("Ll", "Lu", "Lo") and 0x180 <= code < 0x20000:
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
    marks_pattern = re.compile(f"[{_ranges([m for m in marks if m not in remove])}]+")
    unassigned = "\U00040000-\U000dffff\U000e1000-\U0010ffff"  # planes 4-13 unassigned, 15-16 private use
    return _Tables(_Replace(remove, unassigned), _Replace(lookalikes), _Replace(fold), marks_pattern)


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
_ASCII_WORD = re.compile(r"\w+", re.A)
_WORD_RUN = re.compile(r"\w+")
_INSIDE_WORD = re.compile(r"(?<=[^\W_])(?:[*_~`]|</?[a-z][^<>\n]*>)+(?=[^\W_])")
"""Markdown emphasis and HTML tags between two letters of a word, which a reader does not see.
Linear: one mark or one tag a repetition (the two start with different characters, and a tag
ends at its only ``>``), tried only after a letter or digit (a ``_`` run is not a start each)."""


@lru_cache(maxsize=256)
def clean(text: str) -> str:
    """``text`` as a reader sees it (module docstring): the text every check reads."""
    text = text.replace("\r\n", "\n").translate(_BEFORE_NFKC)
    if text.isascii():  # NFKC leaves ASCII alone, and none of it is invisible
        return text
    return _PUNCTUATION(_tables().invisible(unicodedata.normalize("NFKC", text)))


_HIDDEN = re.compile(r"<!--.*?(?:-->|\Z)|(?<=\])\([^()\s]*\)|^[ \t]*\[[^\]\n]+\]:[ \t]*\S.*$", re.S | re.M)


_TAG = re.compile(r"(?<!<)<(/?)([A-Za-z][A-Za-z0-9-]*)(?=[\s/>])([^<>]*)>(?!>)")
"""An HTML tag (not a ``<<title>>``, which IFEval asks for)."""
_HIDING = re.compile(r"\bhidden\b|display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_INLINE_TAGS = frozenset(
    "a abbr b bdi bdo cite code del em font i ins kbd mark q s samp small span strong sub sup u var".split()
)


@lru_cache(maxsize=256)
def visible(text: str) -> str:
    """Clean text without what a Markdown reader never shows: HTML comments, link targets and
    link definitions (a keyword in ``<!-- -->`` or in ``[here](http://lantern)`` is not in the
    reply to a reader), and HTML as a browser shows it: the inside of every tag gone (attributes:
    ``<img alt="lantern">``, ``title=…``, ``href=…``), an element marked ``hidden``,
    ``display:none`` or ``visibility:hidden`` gone with its content (to its closing tag, or to the
    end of the reply when it has none)."""
    return _without_html(_HIDDEN.sub("", clean(text)))


def _without_html(text: str) -> str:
    """``text`` with HTML tags dropped (an inline one joins the text on its two sides, others part
    it) and hidden elements removed; one pass, each tag read once."""
    if "<" not in text:
        return text
    out, pos = [], 0
    while (m := _TAG.search(text, pos)) is not None:
        out.append(text[pos : m.start()])
        closing, name, attributes = m.groups()
        name = name.lower()
        pos = m.end()
        if not closing and _HIDING.search(attributes):
            end = re.compile(rf"</{re.escape(name)}\s*>", re.I).search(text, pos)
            pos = end.end() if end else len(text)
        out.append("" if name in _INLINE_TAGS else " ")
    out.append(text[pos:])
    return "".join(out)


def latin(text: str) -> str:
    """``text`` with look-alike letters read as the Latin letters they look like (case kept)."""
    return text if text.isascii() else _tables().latin(text)


@lru_cache(maxsize=256)
def fold(text: str) -> str:
    """Clean ``text`` in lower case with look-alike letters read as Latin, both letters of a case
    pair alike (Cyrillic ``Н`` and ``н`` are ``h``): case-blind counts and matching read this."""
    lowered = clean(text).lower()
    return lowered if lowered.isascii() else _tables().fold(lowered)


@lru_cache(maxsize=256)
def skeleton(text: str) -> str:
    """What matching reads: :func:`fold`, Markdown emphasis and HTML tags inside a word dropped
    (``**de**lve`` and ``de<b>lve</b>`` read ``delve``), and every combining mark dropped but
    those on a letter of a script other than Latin or Greek (``dèlve``, ``del\u093cve`` with a
    Devanagari nukta or ``del\u05b4ve`` with a Hebrew point are ``delve``; Devanagari vowel signs
    on Devanagari letters stay)."""
    folded = _INSIDE_WORD.sub("", fold(text))
    if folded.isascii():
        return folded
    return unicodedata.normalize("NFC", _tables().marks.sub(_mark_run, unicodedata.normalize("NFKD", folded)))


def _mark_run(m: re.Match[str]) -> str:
    """A run of combining marks kept where it spells a letter of a script other than Latin or Greek."""
    start = m.start()
    base = m.string[start - 1] if start else " "
    return m.group() if base.isalpha() and not base.isascii() and script(base) not in ("LATIN", "GREEK") else ""


def words(text: str) -> list[str]:
    """The words of ``text`` (already clean): runs of word characters and combining marks that
    hold a letter or a digit. (Python's ``\\w`` stops at a mark: runs it splits there are joined.)"""
    if text.isascii():
        return [w for w in _ASCII_WORD.findall(text) if w.strip("_")]
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


_GLUED_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "THAI")
"""Scripts written without spaces between words, whose text glues a Latin word to its own
("Tシャツ", "AI技术", "TV를"); their letters and syllables look like no Latin letter."""
_NOT_ORTHOGRAPHIC = ((0x0250, 0x02AF), (0x1D00, 0x1DBF), (0xAB30, 0xAB6F))
"""Latin blocks of phonetic letters (IPA, phonetic extensions, Latin Extended-E: the Latin iota
``ɩ``, blackletter ``ꬲ``) that no orthography writes but the letters of :data:`_PHONETIC_IN_USE`."""
_PHONETIC_IN_USE = frozenset("əɛɔɖɣʋɓɗɲʃʒɑɡŋɨʉ")
"""IPA letters of living orthographies (Azerbaijani ``ə``, Akan and Ewe ``ɛ ɔ ɖ ɣ ʋ``, Hausa ``ɓ ɗ``)."""


@cache
def _fits_latin(char: str) -> bool:
    """Whether a non-ASCII word character may stand in a Latin word: a combining mark (an
    accent, dropped by :func:`skeleton`), a Latin letter of an orthography, a Greek letter
    (units and formulas: "μm"), a modifier letter (Hawaiian ``ʻ``), a letter of a script that
    glues Latin words to its own. Anything else — another alphabet's letter, a digit of
    another script, a spacing vowel sign — makes the word a disguise."""
    category = unicodedata.category(char)
    if category in ("Mn", "Me"):
        return True
    name = script(char).split("-")[0]  # KATAKANA-HIRAGANA PROLONGED SOUND MARK
    if category == "Lm":
        return unicodedata.name(char, "").startswith("MODIFIER LETTER") or name in _GLUED_SCRIPTS
    if not category.startswith("L"):
        return char == "_"
    if name == "LATIN":
        return char.lower() in _PHONETIC_IN_USE or not any(a <= ord(char) <= b for a, b in _NOT_ORTHOGRAPHIC)
    return name == "GREEK" or name in _GLUED_SCRIPTS


def disguised_words(text: str) -> list[str]:
    """Words of clean ``text`` that hold a Latin letter and a character no Latin word holds
    (:func:`_fits_latin`, an allowlist): ``dеlve`` with a Cyrillic ``е``, ``deاve`` with an Arabic
    alef for ``l``, ``j०urney`` with a Devanagari zero, ``fostɩr`` with a Latin iota."""
    if text.isascii():
        return []
    out = []
    for word in dict.fromkeys(words(text)):
        if word.isascii() or not any(c.isalpha() and (c.isascii() or script(c) == "LATIN") for c in word):
            continue
        if not all(c.isascii() or _fits_latin(c) for c in word):
            out.append(word)
    return out
