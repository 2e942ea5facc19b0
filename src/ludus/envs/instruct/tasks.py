"""Where the instruction-following tasks come from: a seeded generator, or an IFEval-format file.

The generator (:class:`InstructFamily`) draws a writing request and 1-3 mutually consistent
constraints, then *builds* a reply that meets them all — the reference — and only then fixes
the thresholds that are counts of the reply (words, sentences, letters, capital words), so
every task is solvable by construction and checked once more before it is handed out. Every
task has at least one constraint on the reply's shape (a title, bullets, a postscript, a fixed
ending…): a bag of keywords alone never meets a task.

A task's ``answer`` is ``{"constraints": [...], "reference": "..."}`` (no reference for a file
row). An IFEval-format file (``key``, ``prompt``, ``instruction_id_list``, ``kwargs`` per row:
Google's ``input_data.jsonl``) maps onto the same checkers (:func:`load_ifeval`); instruction
ids we have no checker for are counted and reported, never dropped in silence.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ludus.core.types import Task
from ludus.envs.instruct.constraints import (
    IFEVAL_IDS,
    Constraint,
    capital_words,
    check,
    count_words,
    describe,
    keyword_count,
    language_available,
    letter_count,
    sentences,
)
from ludus.envs.instruct.substance import substance
from ludus.tasks.loaders import FileTasks, TaskFileError, read_rows
from ludus.tasks.procedural import Problem, TaskFamily

logger = logging.getLogger("ludus.envs.instruct")

FORMS = (
    "short blog post", "letter to a friend", "product description", "short story", "speech", "diary entry",
    "newsletter", "travel guide", "review", "lesson plan", "pep talk", "museum label",
)  # fmt: skip
TOPICS = (
    "the history of tea", "learning to swim", "a rainy day in the city", "urban gardening", "a first day at work",
    "keeping bees", "the night sky", "a small bakery", "moving to a new town", "repairing an old bicycle",
    "the joy of reading", "a school science fair", "learning a new language", "a long train ride", "winter mornings",
    "cooking for friends", "a local football club", "saving money", "walking the dog", "a village festival",
    "public libraries", "the ocean at night", "building a treehouse", "a family recipe", "playing the piano",
    "a mountain hike", "recycling at home", "the first snow", "a lost umbrella", "a quiet cafe",
)  # fmt: skip
PROSE = (
    "Most people notice this only when they slow down.", "Small habits add up over the years.",
    "It is easier to start than it looks.", "Good things often begin with one simple step.",
    "There is always something new to learn here.", "Patience turns out to be the secret.",
    "Friends and neighbors tend to join in sooner or later.", "The details are what make it memorable.",
    "Nobody gets it right on the first try.", "A little planning goes a long way.",
    "The best part is sharing it with others.", "Every season brings a different mood.",
    "It rewards curiosity more than talent.", "You do not need expensive tools to begin.",
    "The results are worth the wait.", "Mistakes are part of the fun.", "It feels calm and familiar.",
    "Many stories start in exactly this way.", "Try it once and you may be surprised.",
    "Children and grown ups enjoy it alike.", "The quiet moments matter most.",
    "Some days go better than others.", "What looks simple hides a lot of care.",
    "People remember how it made them feel.", "There is no single right way to do it.",
    "A good guide makes the first weeks easier.", "It is worth writing down what you learn.",
)  # fmt: skip
OPENERS = ("Here is my take on {topic}.", "This is about {topic}.", "Let me tell you about {topic}.")
KEYWORDS = (
    "lantern", "harbor", "compass", "velvet", "orchard", "glacier", "meadow", "pebble", "thunder", "saffron",
    "canyon", "falcon", "marble", "riddle", "willow", "beacon", "quartz", "tundra", "cobalt", "juniper",
)  # fmt: skip
KEYWORD_SENTENCES = ("I keep thinking about the {}.", "Picture a {} for a moment.", "The {} comes to mind here.")
FORBIDDEN = (
    "delve", "tapestry", "journey", "realm", "vibrant", "unlock", "landscape", "crucial", "testament", "embark",
    "navigate", "foster", "seamless", "robust", "pivotal", "amazing", "literally", "basically",
)  # fmt: skip
END_PHRASES = (
    "Any other questions?", "Is there anything else I can help with?", "Let me know if you have additional questions.",  # noqa: E501
    "That is all for today.", "Thank you for reading.",
)  # fmt: skip
FIRST_WORDS = ("today", "honestly", "meanwhile", "finally", "perhaps", "imagine", "consider", "remember", "overall")
EMPHASIS = ("REALLY", "TRULY", "ALWAYS", "DEFINITELY", "NEVER")
CAPITAL_SENTENCES = ("That is {} worth it.", "You {} need a little patience.", "It {} pays to ask.")
PLACEHOLDERS = ("[name]", "[date]", "[address]", "[city]", "[company]", "[phone number]", "[time]")
PLACEHOLDER_SENTENCES = ("You can reach me at {}.", "Let us meet on {}.", "Send it to {} when ready.")
HIGHLIGHTS = ("patience pays off", "start small", "keep it simple", "ask for help", "rest matters", "enjoy the process")
BULLETS = (
    "Start with one small step.", "Keep a simple routine.", "Ask someone who has done it.", "Write down what works.",
    "Take a break when you need one.", "Share what you learn.", "Check your progress each week.",
)  # fmt: skip
POSTSCRIPTS = ("Thanks for reading.", "Write back soon.", "I will send photos later.", "Say hello to everyone.")

SHAPE_KINDS = (
    "json_format", "bullets", "title", "highlights", "sections", "postscript", "placeholders", "end_phrase",
    "quotation", "repeat_prompt", "two_responses", "length_paragraphs", "paragraph_first_word",
)  # fmt: skip
"""Kinds about the reply's shape; every generated task has one, so keywords alone never pass."""
PLAIN_KINDS = (
    "length_words", "length_sentences", "keywords_include", "keywords_forbidden", "keyword_frequency",
    "letter_frequency", "lowercase", "uppercase", "capital_words", "no_comma",
)  # fmt: skip
GENERATED_KINDS = SHAPE_KINDS + PLAIN_KINDS
"""Every kind the generator draws (``constrained_response`` and ``language`` come from files only)."""

_JSON_FRIENDLY = frozenset(
    {"keywords_include", "keywords_forbidden", "keyword_frequency", "letter_frequency", "lowercase", "uppercase"}
    | {"no_comma", "length_words", "placeholders", "capital_words"}
)
_CONFLICTS: dict[str, frozenset[str]] = {
    "json_format": frozenset(GENERATED_KINDS) - _JSON_FRIENDLY,
    "quotation": frozenset({"repeat_prompt", "two_responses"}),
    "repeat_prompt": frozenset({"two_responses", "paragraph_first_word"}),
    "two_responses": frozenset({"length_paragraphs", "sections", "paragraph_first_word"}),
    "sections": frozenset({"lowercase", "uppercase", "length_paragraphs", "paragraph_first_word"}),
    "length_paragraphs": frozenset({"paragraph_first_word"}),
    "paragraph_first_word": frozenset({"title"}),
    "lowercase": frozenset({"uppercase", "capital_words"}),
    "uppercase": frozenset({"capital_words"}),
}


def compatible(kind: str, chosen: Sequence[str]) -> bool:
    """Whether ``kind`` can join ``chosen`` in one task: no repeat, no pair that cannot hold together."""
    return kind not in chosen and all(
        kind not in _CONFLICTS.get(other, ()) and other not in _CONFLICTS.get(kind, ()) for other in chosen
    )


class InstructFamily(TaskFamily):
    """Writing requests with ``min_constraints``-``max_constraints`` verifiable constraints drawn
    from ``kinds`` (default: every generated kind), each task with its built reference."""

    name = "instruct"

    def __init__(self, min_constraints: int = 1, max_constraints: int = 3, kinds: Sequence[str] | None = None):
        if not 1 <= min_constraints <= max_constraints <= 5:
            raise ValueError(f"need 1 <= min_constraints <= max_constraints <= 5, got {min_constraints}, {max_constraints}")  # fmt: skip
        chosen = tuple(kinds) if kinds is not None else GENERATED_KINDS
        unknown = set(chosen) - set(GENERATED_KINDS)
        if unknown:
            raise ValueError(f"kinds {sorted(unknown)} cannot be generated; choose from {', '.join(GENERATED_KINDS)}")
        if not set(chosen) & set(SHAPE_KINDS):
            raise ValueError(f"kinds must include one about the reply's shape: {', '.join(SHAPE_KINDS)}")
        self.min_constraints, self.max_constraints, self.kinds = min_constraints, max_constraints, chosen

    def make(self, rng: random.Random) -> Problem:
        for _ in range(100):
            made = _attempt(rng, self.kinds, rng.randint(self.min_constraints, self.max_constraints))
            if made is not None:
                return made
        raise RuntimeError(f"no consistent task from kinds {self.kinds}")  # pragma: no cover - a generator bug


def _attempt(rng: random.Random, kinds: Sequence[str], count: int) -> Problem | None:
    """One draw: constraints, the reply built for them, counts fixed from it; ``None`` if it fails
    its own check or the substance gate."""
    chosen = [rng.choice([k for k in kinds if k in SHAPE_KINDS])]
    while len(chosen) < count:
        options = [k for k in kinds if compatible(k, chosen)]
        if not options:
            break
        chosen.append(rng.choice(options))
    form, topic = rng.choice(FORMS), rng.choice(TOPICS)
    request = f"Write a {form} about {topic}."
    params = _draw_parameters(rng, chosen, request)
    # everything after the plan is drawn from the plan itself: two tasks with one prompt share one reference
    build = random.Random(json.dumps([request, sorted(params, key=lambda c: c["kind"])], sort_keys=True))
    params = [_draw_frequency(build, c) for c in params]
    reply = _build(build, params, request)
    constraints = [_fix_counts(build, c, reply) for c in params]
    if not all(check(c, reply) for c in constraints):
        return None
    rng.shuffle(constraints)
    prompt = " ".join([request, *(describe(c) for c in constraints)])
    answer, info = {"constraints": constraints, "reference": reply}, {"request": request, "topic": topic}
    if not substance(Task("", prompt, answer, info), reply).correct:  # the gate every reply meets
        return None
    return Problem(prompt, answer, info)


def _draw_parameters(rng: random.Random, kinds: Sequence[str], request: str) -> list[dict[str, Any]]:
    """Each kind's parameters that the prompt shows (how often a word recurs, and counts of the reply, come later)."""
    keywords = rng.sample(KEYWORDS, 4)
    out: list[dict[str, Any]] = []
    for kind in kinds:
        c: dict[str, Any] = {"kind": kind}
        if kind == "length_paragraphs":
            c["num_paragraphs"] = rng.randint(2, 4)
        elif kind == "paragraph_first_word":
            n = rng.randint(2, 4)
            c.update(num_paragraphs=n, nth_paragraph=rng.randint(1, n), first_word=rng.choice(FIRST_WORDS))
        elif kind == "keywords_include":
            c["keywords"] = keywords[: rng.randint(1, 3)]
        elif kind == "keywords_forbidden":
            c["forbidden_words"] = rng.sample(FORBIDDEN, rng.randint(1, 3))
        elif kind == "keyword_frequency":
            c.update(keyword=keywords[3], relation=rng.choice(("at least", "less than")))
        elif kind == "letter_frequency":
            c.update(letter=rng.choice("aeiorstnlcdmphu"), let_relation=rng.choice(("at least", "less than")))
        elif kind == "bullets":
            c["num_bullets"] = rng.randint(2, 5)
        elif kind == "highlights":
            c["num_highlights"] = rng.randint(1, 4)
        elif kind == "sections":
            c.update(section_spliter=rng.choice(("Section", "SECTION")), num_sections=rng.randint(2, 4))
        elif kind == "postscript":
            c["postscript_marker"] = rng.choice(("P.S.", "P.P.S"))
        elif kind == "placeholders":
            c["num_placeholders"] = rng.randint(1, 3)
        elif kind == "capital_words":
            c["capital_relation"] = rng.choice(("at least", "less than"))
        elif kind == "end_phrase":
            c["end_phrase"] = rng.choice(END_PHRASES)
        elif kind == "repeat_prompt":
            c["prompt_to_repeat"] = request
        elif kind in ("length_words", "length_sentences"):
            c["relation"] = rng.choice(("at least", "at most", "less than") + (("exactly",) if kind == "length_sentences" else ()))  # fmt: skip
        out.append(c)
    return out


def _draw_frequency(rng: random.Random, c: Constraint) -> dict[str, Any]:
    """How often the reply will use the keyword or capital words (the prompt's count comes from the reply)."""
    key = {"keyword_frequency": "frequency", "capital_words": "capital_frequency"}.get(c["kind"])
    return {**c, key: rng.randint(1, 4)} if key else dict(c)


def _build(rng: random.Random, params: Sequence[Constraint], request: str) -> str:
    """A reply meeting every constraint in ``params`` (counts of the reply aside)."""
    by = {c["kind"]: c for c in params}
    topic = request.split(" about ", 1)[1].rstrip(".")
    extra = _extra_sentences(rng, by)
    if "json_format" in by:
        body = " ".join([OPENERS[0].format(topic=topic), *rng.sample(PROSE, 2), *extra])
        reply = json.dumps({"response": body}, ensure_ascii=False)
        reply = f"```json\n{reply}\n```" if rng.random() < 0.5 else reply
        return _case(reply, by)
    answers = [_answer(rng, by, topic, extra)]
    if "two_responses" in by:  # plain prose of other sentences: the shape constraints hold in the first
        answers.append(_answer(rng, {}, topic, [], avoid=answers[0]))
    reply = "\n******\n".join(answers)
    if "postscript" in by:
        marker = by["postscript"]["postscript_marker"]
        reply += f"\n{marker} {by['end_phrase']['end_phrase'] if 'end_phrase' in by else rng.choice(POSTSCRIPTS)}"
    elif "end_phrase" in by:
        reply += " " + by["end_phrase"]["end_phrase"]
    if "repeat_prompt" in by:
        reply = f"{request}\n{reply}"
    reply = _case(reply, by)
    return f'"{reply}"' if "quotation" in by else reply


def _extra_sentences(rng: random.Random, by: dict[str, Constraint]) -> list[str]:
    """The sentences that carry keywords, placeholders, highlights and capital words."""
    out = [rng.choice(KEYWORD_SENTENCES).format(k) for k in by.get("keywords_include", {}).get("keywords", [])]
    if "keyword_frequency" in by:
        c = by["keyword_frequency"]
        times = c["frequency"] if c["relation"] == "at least" else rng.randint(0, c["frequency"] - 1)
        out += [rng.choice(KEYWORD_SENTENCES).format(c["keyword"]) for _ in range(times)]
    if "placeholders" in by:
        spots = rng.sample(PLACEHOLDERS, by["placeholders"]["num_placeholders"])
        out += [rng.choice(PLACEHOLDER_SENTENCES).format(p) for p in spots]
    if "highlights" in by:
        out += [f"The key point is *{h}*." for h in rng.sample(HIGHLIGHTS, by["highlights"]["num_highlights"])]
    if "capital_words" in by:
        c = by["capital_words"]
        times = c["capital_frequency"] if c["capital_relation"] == "at least" else rng.randint(0, c["capital_frequency"] - 1)  # fmt: skip
        out += [rng.choice(CAPITAL_SENTENCES).format(rng.choice(EMPHASIS)) for _ in range(times)]
    rng.shuffle(out)
    return out


def _answer(rng: random.Random, by: dict[str, Constraint], topic: str, extra: list[str], avoid: str = "") -> str:
    """One answer: paragraphs of prose (``extra`` spread among them), bullets, a title, sections;
    none of its sentences in ``avoid`` (two responses must differ)."""
    if "length_paragraphs" in by:
        count, joint = by["length_paragraphs"]["num_paragraphs"], "\n***\n"
    elif "paragraph_first_word" in by:
        count, joint = by["paragraph_first_word"]["num_paragraphs"], "\n\n"
    elif "sections" in by:
        count, joint = by["sections"]["num_sections"], "\n\n"
    else:
        count, joint = rng.randint(1, 3), "\n\n"
    sizes = [rng.randint(2, 3) for _ in range(count)]
    sizes[0] = max(sizes[0], 4 - count)  # three sentences at least: a reply says something of its own
    sentences = iter(rng.sample([p for p in PROSE if p not in avoid], sum(sizes)))  # none said twice
    paragraphs = [[next(sentences) for _ in range(size)] for size in sizes]
    paragraphs[0].insert(0, rng.choice([o for o in OPENERS if o.format(topic=topic) not in avoid]).format(topic=topic))
    for sentence in extra:
        paragraph = rng.choice(paragraphs)
        paragraph.insert(rng.randint(1, len(paragraph)), sentence)
    if "paragraph_first_word" in by:
        c = by["paragraph_first_word"]
        opening = paragraphs[c["nth_paragraph"] - 1]
        opening[0] = f"{c['first_word'].capitalize()} {opening[0][0].lower()}{opening[0][1:]}"
    texts = [" ".join(p) for p in paragraphs]
    if "bullets" in by:
        texts[0] += "\n" + "\n".join(f"* {b}" for b in rng.sample(BULLETS, by["bullets"]["num_bullets"]))
    if "sections" in by:
        texts = [f"{by['sections']['section_spliter']} {i}\n{t}" for i, t in enumerate(texts, start=1)]
    if "title" in by:
        texts[0] = f"<<{topic.title()}>>\n{texts[0]}"
    return joint.join(texts)


def _case(reply: str, by: dict[str, Constraint]) -> str:
    if "lowercase" in by:
        return reply.lower()
    return reply.upper() if "uppercase" in by else reply


def _fix_counts(rng: random.Random, c: Constraint, reply: str) -> dict[str, Any]:
    """``c`` with its threshold read off the built reply, where the threshold is a count of it."""
    out = dict(c)
    kind = c["kind"]
    if kind == "length_words":
        out["num_words"] = _threshold(rng, count_words(reply), c["relation"], step=10)
    elif kind == "length_sentences":
        out["num_sentences"] = _threshold(rng, len(sentences(reply)), c["relation"], step=1)
    elif kind == "letter_frequency":
        out["let_frequency"] = _threshold(rng, letter_count(c["letter"], reply), c["let_relation"], step=5)
    elif kind == "capital_words":
        out["capital_frequency"] = _threshold(rng, capital_words(reply), c["capital_relation"], step=1)
    elif kind == "keyword_frequency":
        out["frequency"] = _threshold(rng, keyword_count(c["keyword"], reply), c["relation"], step=1)
    return out


def _threshold(rng: random.Random, actual: int, relation: str, step: int) -> int:
    """A round threshold that ``actual`` meets under ``relation`` (at least 1)."""
    if relation == "exactly":
        return actual
    if relation == "at least":
        return max(1, actual // step * step - step * rng.randint(0, 1))
    return (actual // step + 1) * step + step * rng.randint(0, 1)  # less than, at most


# ---- IFEval-format files ---------------------------------------------------------------------


def map_instruction(instruction_id: str, kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
    """IFEval's ``(instruction_id, kwargs)`` as one of our constraints; ``None`` when we have no checker."""
    kind = IFEVAL_IDS.get(instruction_id)
    if kind is None or (kind == "language" and not language_available()):
        return None
    return {"kind": kind, **{k: v for k, v in (kwargs or {}).items() if v is not None}}


def load_ifeval(path: str | Path, unsupported: Counter[str] | None = None) -> FileTasks:
    """An IFEval-format ``.jsonl`` (or ``.parquet``) file as tasks. Instruction ids without a
    checker (or ``language:response_language`` without ``langdetect``) are counted into
    ``unsupported`` and logged; a row left with no constraint at all is skipped and counted."""
    path = Path(path)
    skipped: Counter[str] = Counter() if unsupported is None else unsupported
    tasks: list[Task] = []
    for where, row in read_rows(path):
        if not isinstance(row, dict) or not isinstance(row.get("instruction_id_list"), list):
            raise TaskFileError(path, "each row needs prompt, instruction_id_list and kwargs (IFEval's format)", where=where)  # fmt: skip
        ids, kwargs = row["instruction_id_list"], row.get("kwargs") or [{}] * len(row["instruction_id_list"])
        mapped = [(i, map_instruction(i, k)) for i, k in zip(ids, kwargs, strict=True)]
        skipped.update(i for i, c in mapped if c is None)
        constraints = [c for _, c in mapped if c is not None]
        if not constraints:
            skipped["(rows with no supported instruction)"] += 1
            continue
        key = row.get("key", len(tasks))
        info = {"instruction_ids": ids, "unsupported": [i for i, c in mapped if c is None]}
        tasks.append(Task(f"{path.stem}/{key}", str(row["prompt"]), {"constraints": constraints}, info, "ifeval"))
    if skipped:
        logger.warning("%s: instructions without a checker, not graded: %s", path, dict(skipped))
    if not tasks:
        raise TaskFileError(path, "has no row with an instruction we can check")
    return FileTasks(path, tasks)


# ---- near misses -----------------------------------------------------------------------------


def violate(c: Constraint, reply: str) -> str:
    """``reply`` changed so that it no longer meets ``c`` (the red team's and the tests' near miss)."""
    return _VIOLATIONS[c["kind"]](c, reply)


def _too_many(relation: str) -> bool:
    return relation in ("at most", "less than", "exactly")


def _cut_words(c: Constraint, r: str) -> str:
    if _too_many(c["relation"]):
        return r + " more" * (int(c["num_words"]) + 1)
    words = list(re.finditer(r"\w+", r))
    keep = int(c["num_words"]) - 1
    return r[: words[keep - 1].end()] if keep > 0 else ""


def _cut_sentences(c: Constraint, r: str) -> str:
    if _too_many(c["relation"]):
        return r + " One more thing." * (int(c["num_sentences"]) + 1)
    return " ".join(sentences(r)[: int(c["num_sentences"]) - 1])


def _remove(word: str, r: str) -> str:
    return re.sub(re.escape(word), "", r, flags=re.I)


_VIOLATIONS: dict[str, Callable[[Constraint, str], str]] = {
    "length_words": _cut_words,
    "length_sentences": _cut_sentences,
    "length_paragraphs": lambda c, r: r + "\n***\nOne more paragraph.",
    "paragraph_first_word": lambda c, r: r + "\n\nOne more paragraph.",
    "keywords_include": lambda c, r: _remove(c["keywords"][0], r),
    "keywords_forbidden": lambda c, r: f"{r} {c['forbidden_words'][0]}",
    "keyword_frequency": lambda c, r: (
        _remove(c["keyword"], r) if c["relation"] == "at least" else r + f" {c['keyword']}" * int(c["frequency"])
    ),
    "letter_frequency": lambda c, r: (
        _remove(c["letter"], r) if c["let_relation"] == "at least" else r + f" {c['letter']}" * int(c["let_frequency"])
    ),
    "json_format": lambda c, r: "{" + r,
    "bullets": lambda c, r: r + "\n* One more point.",
    "title": lambda c, r: r.replace("<<", "").replace(">>", ""),
    "highlights": lambda c, r: r.replace("*", ""),
    "sections": lambda c, r: re.sub(re.escape(str(c["section_spliter"])), "Part", r),
    "constrained_response": lambda c, r: re.sub(r"My answer is (yes|no|maybe)\.", "", r),
    "postscript": lambda c, r: re.sub(r"^([^\S\n]*)p\.\s?(p\.\s?)?s\.?", r"\1Also", r, flags=re.I | re.M),
    "placeholders": lambda c, r: r.replace("[", "").replace("]", ""),
    "lowercase": lambda c, r: r + " Yes.",
    "uppercase": lambda c, r: r + " yes.",
    "capital_words": lambda c, r: (
        r.lower() if c["capital_relation"] == "at least" else r + " LOUD" * int(c["capital_frequency"])
    ),
    "no_comma": lambda c, r: r + ", indeed",
    "end_phrase": lambda c, r: r.rstrip().rstrip('"') + " Thanks.",
    "quotation": lambda c, r: r.strip().strip('"'),
    "repeat_prompt": lambda c, r: "Sure. " + r,
    "two_responses": lambda c, r: r.replace("******", ""),
    "language": lambda c, r: "Ceci est une réponse." if c["language"] == "en" else "This reply is written in English.",
}
