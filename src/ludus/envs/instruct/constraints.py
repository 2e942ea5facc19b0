r"""Verifiable instructions (IFEval's set): one checker per kind, each a pure function of the reply.

A constraint is plain data, ``{"kind": "length_words", "relation": "at least", "num_words": 120}``,
with IFEval's own keyword names for the parameters, so a task file from IFEval maps onto it
unchanged (:data:`IFEVAL_IDS`). :func:`check` decides one constraint on one reply; ``loose``
also accepts the reply with markdown ``*`` removed and/or its first or last line dropped, as
IFEval's loose score does. An empty reply meets nothing (IFEval's rule too).

Where we differ from IFEval's reference checkers on purpose (the agreement test in
``tests/test_instruct_env.py`` measures every kind against them on real model replies):

* ``length_sentences`` splits sentences with a regular expression, not NLTK's Punkt model
  (its data is a download); ``capital_words`` counts all-capital words of two letters or more
  (Punkt-free too, and "I" or "A" opening a sentence is not a capital word);
* ``postscript`` wants the marker at the start of a line, where IFEval finds ``p.s.`` anywhere;
* ``lowercase`` / ``uppercase`` do not also ask a language detector whether the reply is English;
* keywords are matched literally (IFEval compiles them as regular expressions);
* ``language`` denies a reply with nothing to detect (IFEval counts it as followed).

Every checker reads the reply as a reader sees it (:func:`ludus.envs.instruct.text.clean`:
invisible characters removed, NFKC, look-alike punctuation mapped), and keywords, forbidden
words, end phrases, first words and repeated requests are matched on its
:func:`~ludus.envs.instruct.text.skeleton` (look-alike letters read as Latin, accents and case
ignored). What a reader never sees cannot meet a constraint, and what a reader does see
cannot hide from one: a constraint is met when it holds on the :func:`~.text.visible` text
(HTML comments and link targets removed) and on the whole clean text. Only ``json_format`` and
``language`` read the reply as written (JSON is for machines; the detector needs no help).
The deliberate differences this makes (``tests/test_instruct_env.py`` asserts each kind):

* words are counted as NLTK's tokenizer counts them (combining marks belong to their word), on
  the clean text, and a word holds a letter or digit: an emoji's variation selector or joiner,
  a lone ``_`` is no word (NLTK makes each one a word);
* ``no_comma`` refuses every script's comma and its look-alikes (``，``, ``、``, ``‚``, Lisu ``ꓹ``);
* ``lowercase`` / ``uppercase`` refuse letters of other scripts ("in English") and read look-alikes
  and small capitals as the capitals they look like;
* ``json_format`` refuses ``NaN`` and ``Infinity`` (Python's parser takes them; JSON has neither);
* ``title``, ``highlights`` and ``placeholders`` do not count an empty one (``<<>>``, ``[]``);
* ``two_responses`` refuses two near copies (80 % of the shorter one's word triples shared);
* accepted where IFEval refuses a real answer: paragraphs split by a line of spaces or CRLF,
  ``•`` and dash bullets, curly quotes around the reply, ``**Word**`` as a paragraph's first word,
  an end phrase followed by a closing quote or ``**``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from ludus.envs.instruct.text import COMMA_LIKE, LOOSE_COMMA, clean, fold, latin, script, skeleton, visible, words

Constraint = Mapping[str, Any]
"""``{"kind": ..., **parameters}``."""

RELATIONS = ("at least", "at most", "less than", "exactly")

IFEVAL_IDS: dict[str, str] = {
    "length_constraints:number_words": "length_words",
    "length_constraints:number_sentences": "length_sentences",
    "length_constraints:number_paragraphs": "length_paragraphs",
    "length_constraints:nth_paragraph_first_word": "paragraph_first_word",
    "keywords:existence": "keywords_include",
    "keywords:forbidden_words": "keywords_forbidden",
    "keywords:frequency": "keyword_frequency",
    "keywords:letter_frequency": "letter_frequency",
    "detectable_format:json_format": "json_format",
    "detectable_format:number_bullet_lists": "bullets",
    "detectable_format:title": "title",
    "detectable_format:number_highlighted_sections": "highlights",
    "detectable_format:multiple_sections": "sections",
    "detectable_format:constrained_response": "constrained_response",
    "detectable_content:postscript": "postscript",
    "detectable_content:number_placeholders": "placeholders",
    "change_case:english_lowercase": "lowercase",
    "change_case:english_capital": "uppercase",
    "change_case:capital_word_frequency": "capital_words",
    "punctuation:no_comma": "no_comma",
    "startend:end_checker": "end_phrase",
    "startend:quotation": "quotation",
    "combination:repeat_prompt": "repeat_prompt",
    "combination:two_responses": "two_responses",
    "language:response_language": "language",
}
"""IFEval's instruction ids (all 25 of the published set) and the kind each maps onto."""

CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")

_ABBREVIATIONS = re.compile(r"\b(Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|vs|etc|e\.g|i\.e|U\.S)\.", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|(?<=[。।॥۔؟።])\s*|\n\s*\n")
_BULLET = re.compile(r"^[ \t]*(?!(?:-[ \t]*){3,}$|(?:\*[ \t]*){3,}$)(\*[^*\n]|-|[+•◦‣⁃▪●–—−‐][ \t]).*$", re.M)
"""IFEval's bullets (``*`` or ``-`` opening a line) and other bullet marks, but not a Markdown
horizontal rule (``---``, ``* * *``)."""
_HIGHLIGHT = re.compile(r"\*[^\n*]*\*")
_BOLD = re.compile(r"\*\*[^\n*]*\*\*")
_CAPITAL_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")


def compare(actual: int, relation: str, target: int) -> bool:
    """``actual RELATION target`` for IFEval's relations and ours (``at most``, ``exactly``)."""
    if relation == "at least":
        return actual >= target
    if relation == "less than":
        return actual < target
    if relation == "at most":
        return actual <= target
    if relation == "exactly":
        return actual == target
    raise ValueError(f"unknown relation {relation!r}; known: {', '.join(RELATIONS)}")


# ---- counting --------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def count_words(text: str) -> int:
    """IFEval's count (NLTK's ``RegexpTokenizer(r"\\w+")``) on the clean text (:func:`.text.words`)."""
    return len(words(clean(text)))


def sentences(text: str) -> list[str]:
    """Sentences: text ending in ``.``, ``!`` or ``?`` before a space, in another script's full
    stop (``。``, ``।``, ``۔``…), or a blank line; common abbreviations (``Dr.``, ``e.g.``) do not
    end one. A piece without a word is no sentence."""
    masked = _ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", "\0"), text)
    pieces = (p.replace("\0", ".").strip() for p in _SENTENCE_END.split(masked))
    return [p for p in pieces if words(p)]


def star_paragraphs(text: str) -> int | None:
    """Paragraphs separated by the markdown divider ``***`` (or a line ``* * *``, the same divider);
    ``None`` when one between two is empty (IFEval's rule: an empty paragraph at either end is
    not counted)."""
    text = re.sub(r"^[ \t]*\*[ \t]+\*[ \t]+\*[ \t]*$", "***", text, flags=re.M)
    pieces = re.split(r"(?<!\w)\s?\*\*\*\s?(?!\w)", text)
    inner = pieces[1:-1]
    if any(not p.strip() for p in inner):
        return None
    return sum(1 for p in pieces if p.strip())


def blank_line_paragraphs(text: str) -> list[str]:
    """Paragraphs separated by a blank line (one of spaces too), empty ones dropped."""
    return [p.strip() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def highlights(text: str) -> int:
    """``*highlighted*`` and ``**bold**`` spans with text inside, counted as IFEval counts them."""
    single = sum(1 for h in _HIGHLIGHT.findall(text) if h.strip("*").strip())
    double = sum(1 for h in _BOLD.findall(text) if h[2:-2].strip())
    return single + double


def capital_words(text: str) -> int:
    """Words of two letters or more written all in capitals (look-alikes read as Latin)."""
    return sum(1 for w in _CAPITAL_WORD.findall(latin(text)) if len(w) > 1 and w.isupper())


def keyword_count(keyword: str, text: str) -> int:
    """Occurrences of ``keyword`` anywhere (inside longer words too, as IFEval counts), on skeletons."""
    needle = skeleton(keyword).strip()
    return skeleton(text).count(needle) if needle else 0


def json_body(text: str) -> str:
    """The reply without a surrounding markdown fence (```` ```json ```` … ```` ``` ````)."""
    body = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        if body.startswith(fence):
            body = body[len(fence) :]
            break
    return body.removesuffix("```").strip()


def first_word(paragraph: str) -> str:
    """The paragraph's first word, on its skeleton, without leading quotes or Markdown emphasis
    and cut at its first punctuation mark (IFEval's reading: "Boyle's" is "boyle"; ours:
    ``**Today**`` is "today")."""
    tokens = skeleton(paragraph).split()
    return re.split(r"[.,?!'\"*_:;\u2014\u2013]", tokens[0].lstrip("'\"*_"))[0] if tokens else ""


def named_constraints(constraints: Sequence[Constraint]) -> list[tuple[str, Constraint]]:
    """Each constraint with its component name: the kind, ``_2``, ``_3``… when a kind repeats."""
    seen: Counter[str] = Counter()
    out = []
    for c in constraints:
        seen[c["kind"]] += 1
        out.append((c["kind"] if seen[c["kind"]] == 1 else f"{c['kind']}_{seen[c['kind']]}", c))
    return out


# ---- one checker per kind --------------------------------------------------------------------


def _length_words(text: str, p: Constraint) -> bool:
    return compare(count_words(text), p["relation"], int(p["num_words"]))


def _length_sentences(text: str, p: Constraint) -> bool:
    return compare(len(sentences(text)), p["relation"], int(p["num_sentences"]))


def _length_paragraphs(text: str, p: Constraint) -> bool:
    return star_paragraphs(text) == int(p["num_paragraphs"])


def _paragraph_first_word(text: str, p: Constraint) -> bool:
    paragraphs = blank_line_paragraphs(text)
    nth = int(p["nth_paragraph"])
    if len(paragraphs) != int(p["num_paragraphs"]) or not 1 <= nth <= len(paragraphs):
        return False
    return first_word(paragraphs[nth - 1]) == first_word(str(p["first_word"]))


def _keywords_include(text: str, p: Constraint) -> bool:
    return all(keyword_count(k, text) > 0 for k in p["keywords"])


_ASCII_LOOKALIKES = {
    "l": "(?:l|i|1|\\|)", "i": "(?:i|l|1|\\|)", "o": "[o0]", "q": "[qo]", "m": "(?:m|rn)", "w": "(?:w|vv)", "d": "(?:d|cl)",
}  # fmt: skip


@lru_cache(maxsize=256)
def lookalike_pattern(word: str) -> re.Pattern[str]:
    """``word`` (on its skeleton) as a whole word, each letter also matching the ASCII marks a
    reader takes it for: ``deIve`` (a capital I, which is ``i`` on a skeleton), ``f0ster``,
    ``arnazing``, ``ǫuartz`` (a small-capital q of "fancy text", ``o`` on a skeleton). For what
    must not be there: forbidden words, keywords under a ceiling."""
    body = "".join(_ASCII_LOOKALIKES.get(c, re.escape(c)) for c in skeleton(word).strip())
    return re.compile(rf"(?<!\w){body}(?!\w)")


def _keywords_forbidden(text: str, p: Constraint) -> bool:
    body = skeleton(text)
    return not any(lookalike_pattern(w).search(body) for w in p["forbidden_words"] if skeleton(w).strip())


def _keyword_frequency(text: str, p: Constraint) -> bool:
    """At least: the keyword itself counts. At most, less than, exactly: its look-alikes count too."""
    count = keyword_count(p["keyword"], text)
    if p["relation"] != "at least":
        count = max(count, len(lookalike_pattern(p["keyword"]).findall(skeleton(text))))
    return compare(count, p["relation"], int(p["frequency"]))


def letter_count(letter: str, text: str) -> int:
    """Occurrences of ``letter``, case-blind, look-alikes read as Latin (accented letters are others)."""
    return fold(text).count(fold(letter))


def _letter_frequency(text: str, p: Constraint) -> bool:
    return compare(letter_count(str(p["letter"]), text), p["let_relation"], int(p["let_frequency"]))


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def _json_format(text: str, p: Constraint) -> bool:
    """JSON as a machine reads it (the reply as written); ``NaN`` and ``Infinity`` are not JSON."""
    try:
        json.loads(json_body(text), parse_constant=_not_json)
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python's parser goes
        return False
    return True


def _bullets(text: str, p: Constraint) -> bool:
    return len(_BULLET.findall(text)) == int(p["num_bullets"])


def _title(text: str, p: Constraint) -> bool:
    """IFEval's ``<<[^\n]+>>`` found on some line, its text non-empty once the brackets are
    stripped. Matched by hand: the regex backtracks quadratically on a line of ``<<<<…``, and
    its greedy match on a line runs from the first ``<<`` to the last ``>>``."""
    for line in text.split("\n"):
        start, end = line.find("<<"), line.rfind(">>")
        if start >= 0 and end >= start + 3 and line[start : end + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


def _highlights(text: str, p: Constraint) -> bool:
    return highlights(text) >= int(p["num_highlights"])


def _sections(text: str, p: Constraint) -> bool:
    splitter = re.escape(str(p["section_spliter"]).strip())
    return len(re.split(rf"\s?{splitter}\s?\d+\s?", latin(text))) - 1 >= int(p["num_sections"])


def _constrained_response(text: str, p: Constraint) -> bool:
    return any(option in latin(text) for option in CONSTRAINED_OPTIONS)


def _postscript(text: str, p: Constraint) -> bool:
    marker = r"\.\s?".join(c for c in str(p.get("postscript_marker") or "P.S.") if c.isalnum())
    return re.search(rf"^[^\S\n]*[*_]*{marker}\.?(?!\w)", latin(text), re.I | re.M) is not None


def _placeholders(text: str, p: Constraint) -> bool:
    return placeholders(text) >= int(p["num_placeholders"])


def placeholders(text: str) -> int:
    r"""IFEval's ``len(re.findall(r"\[.*?\]", text))``, counted by hand: that regex backtracks
    quadratically on a line of ``[[[[…`` (a 100,000-character reply took 36 s)."""
    count = 0
    for line in text.split("\n"):
        start = line.find("[")
        while start >= 0:
            end = line.find("]", start + 1)
            if end < 0:
                break  # no later "[" on this line has a "]" after it either
            count += bool(line[start + 1 : end].strip())  # "[]" holds no placeholder
            start = line.find("[", end + 1)
    return count


def _english_letters(text: str) -> bool:
    """Whether every letter that has a case, or could pass for one, is Latin ("in English")."""
    return all(script(c) == "LATIN" for c in text if c.isalpha() and unicodedata.category(c) != "Lm")


def _lowercase(text: str, p: Constraint) -> bool:
    text = latin(text)
    return text.islower() and _english_letters(text)


def _uppercase(text: str, p: Constraint) -> bool:
    text = latin(text)
    return text.isupper() and _english_letters(text)


def _capital_words(text: str, p: Constraint) -> bool:
    return compare(capital_words(text), p["capital_relation"], int(p["capital_frequency"]))


def _no_comma(text: str, p: Constraint) -> bool:
    """No comma of any script nor a look-alike; ``„`` counts where it follows a word (a German
    opening quote follows a space); a comma below, or a cedilla or ogonek on no letter."""
    if any(c in COMMA_LIKE for c in text) or re.search(r"\S„", text):
        return False
    return text.isascii() or LOOSE_COMMA.search(unicodedata.normalize("NFD", text)) is None


def _end_phrase(text: str, p: Constraint) -> bool:
    """The reply ends with the phrase; closing quotes, Markdown emphasis and emoji or other
    symbols (no word) may follow it (IFEval refuses an emoji after the phrase)."""
    phrase = " ".join(skeleton(str(p["end_phrase"])).split())
    return bool(phrase) and _without_trailing_marks(" ".join(skeleton(text).split())).endswith(
        _without_trailing_marks(phrase)
    )


def _without_trailing_marks(text: str) -> str:
    end = len(text)
    while end and (text[end - 1] in "\"'*_ " or unicodedata.category(text[end - 1]) == "So"):
        end -= 1
    return text[:end]


def _quotation(text: str, p: Constraint) -> bool:
    """Wrapped in double quotes: straight, curly (read as straight) or German ``„…"``."""
    body = text.strip()
    return len(body) > 1 and body[0] in '"„' and body[-1] == '"'


def _repeat_prompt(text: str, p: Constraint) -> bool:
    request = " ".join(skeleton(str(p["prompt_to_repeat"])).split())
    return " ".join(skeleton(text).split()).startswith(request)


def _two_responses(text: str, p: Constraint) -> bool:
    parts = text.split("******")
    if any(not part.strip() for part in parts[1:-1]):
        return False
    answers = [words(skeleton(part)) for part in parts if part.strip()]
    return len(answers) == 2 and not near_copies(*answers)


def near_copies(a: list[str], b: list[str]) -> bool:
    """Two word lists that are one text: equal, or 80 % of the shorter one's word triples in the other."""
    if a == b:
        return True
    grams = [set(zip(w, w[1:], w[2:], strict=False)) for w in (a, b)]
    shorter = min(grams, key=len)
    return bool(shorter) and len(grams[0] & grams[1]) >= 0.8 * len(shorter)


def _language(text: str, p: Constraint) -> bool:
    from langdetect import DetectorFactory, LangDetectException, detect  # optional: pip install 'ludus[instruct]'

    DetectorFactory.seed = 0  # langdetect samples: a fixed seed makes the verdict reproducible
    try:
        return detect(text) == p["language"]
    except LangDetectException:
        return False  # no letters to detect: deny (IFEval counts it as followed)


# the parameters the checkers read as whole numbers
COUNTS = frozenset(
    {
        "num_words", "num_sentences", "num_paragraphs", "nth_paragraph", "frequency", "let_frequency",
        "num_bullets", "num_highlights", "num_sections", "num_placeholders", "capital_frequency",
    }
)  # fmt: skip

CHECKERS: dict[str, Callable[[str, Constraint], bool]] = {
    "length_words": _length_words,
    "length_sentences": _length_sentences,
    "length_paragraphs": _length_paragraphs,
    "paragraph_first_word": _paragraph_first_word,
    "keywords_include": _keywords_include,
    "keywords_forbidden": _keywords_forbidden,
    "keyword_frequency": _keyword_frequency,
    "letter_frequency": _letter_frequency,
    "json_format": _json_format,
    "bullets": _bullets,
    "title": _title,
    "highlights": _highlights,
    "sections": _sections,
    "constrained_response": _constrained_response,
    "postscript": _postscript,
    "placeholders": _placeholders,
    "lowercase": _lowercase,
    "uppercase": _uppercase,
    "capital_words": _capital_words,
    "no_comma": _no_comma,
    "end_phrase": _end_phrase,
    "quotation": _quotation,
    "repeat_prompt": _repeat_prompt,
    "two_responses": _two_responses,
    "language": _language,
}


def language_available() -> bool:
    """Whether the optional language detector (``langdetect``) is installed."""
    try:
        import langdetect  # noqa: F401
    except ImportError:
        return False
    return True


def loose_variants(text: str) -> list[str]:
    """IFEval's loose readings of a reply: as written, without markdown ``*``, without its first
    line, its last line or both, and those without ``*``."""
    lines = text.split("\n")
    cut = ["\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [text, text.replace("*", ""), *cut, *(c.replace("*", "") for c in cut)]


RAW_KINDS = frozenset({"json_format", "language"})
"""Kinds read on the reply as written, not as a reader sees it."""


def check(constraint: Constraint, text: str, *, loose: bool = False) -> bool:
    """Whether ``text`` meets ``constraint``: on its visible text and on its whole clean text
    (module docstring); an empty reply (or reading of it) meets nothing."""
    checker = CHECKERS[constraint["kind"]]
    if constraint["kind"] in RAW_KINDS:
        texts = [text]
    else:
        shown, whole = visible(text), clean(text)
        texts = [shown] if shown == whole else [shown, whole]
    for reading in texts:
        readings = dict.fromkeys(loose_variants(reading)) if loose else [reading]  # a reply without * has 4, not 8
        if not any(r.strip() and checker(r, constraint) for r in readings):
            return False
    return True


def describe(c: Constraint) -> str:
    """The instruction as the model reads it (IFEval's wording, where it has one)."""
    kind = c["kind"]
    if kind == "length_words":
        return f"Answer with {c['relation']} {c['num_words']} words."
    if kind == "length_sentences":
        return f"Your response should contain {c['relation']} {c['num_sentences']} sentences."
    if kind == "length_paragraphs":
        return (
            f"There should be {c['num_paragraphs']} paragraphs. Paragraphs are separated with the markdown divider: ***"
        )
    if kind == "paragraph_first_word":
        return (
            f"There should be {c['num_paragraphs']} paragraphs. Paragraphs and only paragraphs are separated "
            f"with each other by two new lines. Paragraph {c['nth_paragraph']} must start with word "
            f"{c['first_word']}."
        )
    if kind == "keywords_include":
        return f"Include keywords {', '.join(c['keywords'])} in the response."
    if kind == "keywords_forbidden":
        return f"Do not include keywords {', '.join(c['forbidden_words'])} in the response."
    if kind == "keyword_frequency":
        return f"In your response, the word {c['keyword']} should appear {c['relation']} {c['frequency']} times."
    if kind == "letter_frequency":
        return f"In your response, the letter {c['letter']} should appear {c['let_relation']} {c['let_frequency']} times."  # fmt: skip
    if kind == "bullets":
        return (
            f"Your answer must contain exactly {c['num_bullets']} bullet points. "
            "Use the markdown bullet points such as:\n* This is point 1.\n* This is point 2"
        )
    if kind == "highlights":
        return (
            f"Highlight at least {c['num_highlights']} sections in your answer with markdown, "
            "i.e. *highlighted section*."
        )
    if kind == "sections":
        splitter = c["section_spliter"]
        return (
            f"Your response must have {c['num_sections']} sections. Mark the beginning of each section "
            f"with {splitter} X, such as:\n{splitter} 1\n[content of section 1]\n{splitter} 2\n[content of section 2]"
        )
    if kind == "postscript":
        return f"At the end of your response, please explicitly add a postscript starting with {c['postscript_marker']}"
    if kind == "placeholders":
        return (
            f"The response must contain at least {c['num_placeholders']} placeholders represented by "
            "square brackets, such as [address]."
        )
    if kind == "capital_words":
        return (
            f"In your response, words with all capital letters should appear {c['capital_relation']} "
            f"{c['capital_frequency']} times."
        )
    if kind == "end_phrase":
        return f"Finish your response with this exact phrase {c['end_phrase']}. No other words should follow this phrase."  # fmt: skip
    if kind == "repeat_prompt":
        return (
            "First repeat the request word for word without change, then give your answer "
            "(1. do not say any words or characters before repeating the request; "
            "2. the request you need to repeat does not include this sentence)"
        )
    if kind == "language":
        return f"Your ENTIRE response should be in {c['language']} language, no other language is allowed."
    return FIXED_DESCRIPTIONS[kind]


FIXED_DESCRIPTIONS: dict[str, str] = {
    "json_format": "Entire output should be wrapped in JSON format. You can use markdown ticks such as ```.",
    "title": "Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.",
    "constrained_response": "Answer with one of the following options: " + ", ".join(CONSTRAINED_OPTIONS),
    "lowercase": (
        "Your entire response should be in English, and in all lowercase letters. No capital letters are allowed."
    ),
    "uppercase": "Your entire response should be in English, and in all capital letters.",
    "no_comma": "In your entire response, refrain from the use of any commas.",
    "quotation": "Wrap your entire response with double quotation marks.",
    "two_responses": (
        "Give two different responses. Responses and only responses should be separated by 6 asterisk symbols: ******."
    ),
}
