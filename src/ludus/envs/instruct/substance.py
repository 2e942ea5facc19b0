"""The gates before any ``instruct`` constraint is credited: the reply must address its task
(:func:`substance`) and must not copy the prompt's instructions back (:func:`no_echo`).

Why: the constraints check form only, and form is cheap. On 3,000 generated tasks one of 16
constant replies (``""``, ``{}``, ``a\\n******\\nb``…) met every constraint of 27 % of them. The
gate is one general rule for every task, read on the reply as a reader sees it
(:mod:`.text`); it fails a reply that

* is empty, or longer than anything a task asks for (:data:`MAX_CHARS`);
* reorders its letters with bidi overrides, or writes words that mix Latin letters with
  another alphabet's look-alikes (``dеlve`` with a Cyrillic ``е``);
* has fewer than :func:`floor` words of its own: distinct words of two letters or more that
  the task did not tell it (:func:`instruction_words`), not function words (:data:`STOPWORDS`),
  not filler (:data:`FILLER`: lorem ipsum, foo, blah…), not one letter repeated, not inside
  ``[placeholders]`` — the floor is :data:`MIN_OWN_WORDS`, lower only where a constraint caps the
  reply's length, and none for a fixed-option answer ("My answer is yes.");
* does not name its task's topic, where the task has one (generated tasks do);
* is mostly repetition (:data:`MIN_FRESH_BIGRAMS`), says the same thing twice
  (:data:`MAX_REPEATED_SHARE`), or repeats a passage of itself with its words shuffled (the
  reference reversed beside itself: word salad made of the reply's own words).

What it cannot see: whether the reply's own words make sense. Gibberish of fresh words that
names the topic passes the gate; gate on an LLM judge (``ludus.rewards``) for that.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

from ludus.core.types import Score, Status, Task
from ludus.envs.instruct.constraints import Constraint, describe
from ludus.envs.instruct.text import clean, disguised_words, skeleton, visible, words

MAX_CHARS = 50_000
"""The longest reply read (several times the longest answer IFEval asks for): a flood is not an
answer, and the checkers' work stays bounded."""

MIN_OWN_WORDS = 6
"""Distinct words of its own a reply needs (every generated reference has them: the generator
keeps a task only when its reference passes the gate)."""

MIN_FRESH_BIGRAMS = 0.3
"""The share of a reply's word pairs (of 30 or more) that must be distinct: the real replies of
the agreement test have 0.9 (median) and 0.37 at the lowest (one stuffed with the keywords it was
asked for); one answer pasted three times has 0.33, four times 0.25."""

WINDOW = 8
"""Repetition is read in windows of 8 words of three letters or more (formulas' symbols and
numbers are not words that can say something twice)."""

MAX_REPEATED_SHARE, MAX_REPEATED_PASSAGE = 0.6, 0.4
"""A reply says the same thing twice when 60 % of its words lie in passages it said before word
for word, or one such passage is 40 % of it: one answer pasted twice is 0.5 and 0.5, three times
0.67 and 0.33; the real replies of the agreement test reach 0.49 (a song's refrain) and 0.35 (a
request repeated before the answer)."""

SHUFFLED_WINDOWS = 8
"""A passage is a shuffled repeat when 8 windows hold the same words as an earlier window that
they do not overlap, in an order never seen before (real replies: 4 at most, in formulas)."""

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each either else ever every few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself just let like
    may me might more most much must my myself neither no nor not now of off on once one only or other our ours
    ourselves out over own same shall she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up upon us very was we were what when where which while who
    whom whose why will with would yet you your yours yourself yourselves yes ok okay sure""".split()
)
"""English function words: they carry no content of their own."""

FILLER = frozenset(
    """lorem ipsum dolor amet consectetur adipiscing elit sed eiusmod tempor incididunt labore dolore aliqua enim veniam
    quis nostrud exercitation ullamco laboris nisi aliquip commodo consequat duis aute irure reprehenderit voluptate
    velit esse cillum fugiat nulla pariatur excepteur sint occaecat cupidatat proident sunt officia deserunt mollit
    laborum lipsum foo bar baz qux quux blah bla etc asdf qwerty xyz abc test testing dummy filler placeholder text
    word words something stuff thing things""".split()
)
"""Words that fill space without saying anything: lorem ipsum (its Latin words), programmers' placeholders."""

_NOT_OWN = STOPWORDS | FILLER
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]*\]")
_BIDI_OVERRIDES = ("\u202d", "\u202e")


def substance(task: Task, completion: str, min_own_words: int = MIN_OWN_WORDS) -> Score:
    """Passes when the reply addresses ``task`` (module docstring); else the first rule it breaks.
    ``min_own_words`` is the floor where no constraint lowers it (lower it for tasks that ask for
    one word or a list of numbers)."""
    if not completion.strip() or not clean(completion).strip():
        return Score.zero(Status.NO_ANSWER, "empty reply")
    limit = max_chars(constraints_of(task))
    if len(completion) > limit:
        return Score.zero(Status.WRONG, f"{len(completion):,} characters: longer than any answer ({limit:,})")
    why = _lacks_substance(task, completion, min_own_words)
    return Score.zero(Status.WRONG, why) if why else Score(1.0, Status.CORRECT, "")


def _lacks_substance(task: Task, completion: str, min_own_words: int) -> str | None:
    if any(c in completion for c in _BIDI_OVERRIDES):
        return "the reply reorders its letters with bidi override characters"
    disguised = disguised_words(clean(completion))
    if disguised:
        return f"words mix Latin letters with another alphabet's look-alikes: {disguised[:3]}"
    own = own_words(instruction_words(task), completion)
    need = floor(constraints_of(task), min_own_words)
    if len(own) < need:
        return f"{len(own)} words of its own ({sorted(own)[:8]}); a reply to this task needs {need}"
    topic = topic_words(task)
    if topic and not any(_same_stem(w, t) for w in _visible_words(completion) for t in topic):
        return f"does not mention its topic ({' '.join(topic)})"
    tokens = _visible_words(completion)
    pairs = list(zip(tokens, tokens[1:], strict=False))
    if len(pairs) >= 30 and len(set(pairs)) < MIN_FRESH_BIGRAMS * len(pairs):
        return f"mostly repetition: {len(set(pairs))} distinct word pairs of {len(pairs)}"
    repeated, passage, shuffled = repetition([w for w in tokens if len(w) >= 3 and w.isalpha()])
    if repeated >= MAX_REPEATED_SHARE or passage >= MAX_REPEATED_PASSAGE:
        return f"says the same thing twice: {repeated:.0%} of its words repeat an earlier passage"
    if shuffled >= SHUFFLED_WINDOWS:
        return "repeats a passage of itself with its words shuffled"
    return None


def constraints_of(task: Task) -> list[Constraint]:
    answer = task.answer if isinstance(task.answer, Mapping) else {}
    constraints = answer.get("constraints")
    return list(constraints) if isinstance(constraints, list) else []


def max_chars(constraints: Sequence[Constraint]) -> int:
    """:data:`MAX_CHARS`, or room for ten characters a word where a task asks for more words."""
    asked = [int(c["num_words"]) for c in constraints if c["kind"] == "length_words"]
    return max([MAX_CHARS, *(10 * n for n in asked)])


def floor(constraints: Sequence[Constraint], min_own_words: int = MIN_OWN_WORDS) -> int:
    """Own words a reply needs: ``min_own_words``; half a word cap a constraint sets, when lower;
    none when the answer is one of fixed options."""
    if any(c["kind"] == "constrained_response" for c in constraints):
        return 0
    caps = [
        int(c["num_words"]) - (c["relation"] == "less than")
        for c in constraints
        if c["kind"] == "length_words" and c["relation"] != "at least"
    ]
    return min([min_own_words, *(max(1, cap // 2) for cap in caps)])


@lru_cache(maxsize=256)
def _visible_words(completion: str) -> list[str]:
    return words(skeleton(visible(completion)))


def instruction_words(task: Task) -> frozenset[str]:
    """The words the task told the reply: its instructions as :func:`describe` words them, and
    its request where the task names it (generated tasks). A file task's prompt holds text a
    reply may rightly reuse (a passage to rewrite), so only its instructions count."""
    told = [describe(c) for c in constraints_of(task)]
    request = task.info.get("request") if isinstance(task.info, Mapping) else None
    return _words_of(" ".join([*told, request if isinstance(request, str) else ""]))


@lru_cache(maxsize=256)
def _words_of(text: str) -> frozenset[str]:
    return frozenset(words(skeleton(text)))


def own_words(told: frozenset[str], completion: str) -> set[str]:
    """Distinct visible words of the reply that say something it was not told: two letters or
    more, not one letter repeated, outside ``[placeholders]``, not function words or filler."""
    said = set(_segmented(words(skeleton(_PLACEHOLDER.sub(" ", visible(completion)))))) - _NOT_OWN - told
    return {w for w in said if len(set(w)) > 1 and sum(c.isalpha() for c in w) >= 2}


_UNSPACED = re.compile(
    r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"
)
"""Runs of scripts written without spaces between words (Thai, Lao, Myanmar, Khmer, kana, CJK)."""


def _segmented(tokens: list[str]) -> list[str]:
    """``tokens`` with each run of an unspaced script cut every two characters: a clause of
    Chinese, Japanese or Thai is one token to ``\\w+``, and two characters is about a word (for
    the floor of own words only; counts follow NLTK, as IFEval does)."""
    out = []
    for token in tokens:
        if not _UNSPACED.search(token):
            out.append(token)
            continue
        for piece in re.split(f"({_UNSPACED.pattern})", token):
            if _UNSPACED.fullmatch(piece):
                out.extend(piece[i : i + 2] for i in range(0, len(piece), 2))
            elif piece:
                out.append(piece)
    return out


def topic_words(task: Task) -> list[str]:
    """The content words of the task's topic (``info["topic"]``, which generated tasks have)."""
    topic = task.info.get("topic") if isinstance(task.info, Mapping) else None
    return [w for w in words(skeleton(topic)) if w not in STOPWORDS] if isinstance(topic, str) else []


def _same_stem(word: str, topic: str) -> bool:
    """Whether ``word`` is ``topic`` or a form of it (``swimming`` for ``swim``, ``library`` for
    ``libraries``, ``bee`` for ``bees``) or a compound of it (``beekeeping`` for ``keeping``): it
    starts with the topic word, the topic word starts with it (three letters or more), both share
    their first five letters, or it holds the topic word (of five letters or more)."""
    if word.startswith(topic) or (len(word) >= 3 and topic.startswith(word)):
        return True
    return len(word) >= 5 and len(topic) >= 5 and (word[:5] == topic[:5] or topic in word)


def repetition(tokens: Sequence[str]) -> tuple[float, float, int]:
    """How ``tokens`` repeat themselves, read in windows of :data:`WINDOW` words that do not
    overlap the earlier window they repeat: the share of words inside a window said before
    word for word; the longest passage said before word for word, as a share of all words;
    and the number of windows holding an earlier window's words in an order not seen before
    (a passage repeated with its words shuffled; a refrain keeps its order)."""
    k = WINDOW
    first_order: dict[tuple[str, ...], int] = {}
    first_bag: dict[tuple[str, ...], int] = {}
    covered = [False] * len(tokens)
    run = longest = shuffled = 0
    previous = -2
    for i in range(len(tokens) - k + 1):
        window = tuple(tokens[i : i + k])
        earlier = first_order.setdefault(window, i)
        if earlier <= i - k:
            covered[i : i + k] = [True] * k
            run = run + 1 if earlier == previous + 1 else 1
            longest, previous = max(longest, run + k - 1), earlier
            continue
        run, previous = 0, -2
        if earlier == i and first_bag.setdefault(tuple(sorted(window)), i) <= i - k:
            shuffled += 1
    n = len(tokens) or 1
    return sum(covered) / n, longest / n, shuffled


# ---- the echo gate --------------------------------------------------------------------------------


ECHO_SHARE, PROMPT_ECHO_SHARE, SHUFFLED_ECHO_SHARE = 0.65, 0.8, 0.8
"""The share of an instruction's words (of the whole prompt's), in its order, that makes a
passage of the reply an echo of it; and of an instruction's content words in any order. The
prompt's is higher: a reply to "rewrite this passage" rightly says most of the passage again;
so is the shuffled one: a reply rightly puts the keywords it was asked for close together."""


def no_echo(task: Task, completion: str) -> Score:
    """Fails when the reply copies the prompt, or one of its instruction sentences, back — read
    on skeleton words, so zero-width characters, look-alike letters, case and punctuation hide
    nothing; an instruction with a word or two changed, or its words shuffled, is still an echo.
    The request a ``repeat_prompt`` constraint asks to be repeated is taken off the front first."""
    reply = words(skeleton(completion))
    for c in constraints_of(task):
        if c["kind"] == "repeat_prompt":
            request = words(skeleton(str(c["prompt_to_repeat"])))
            if reply[: len(request)] == request:
                reply = reply[len(request) :]
    at: dict[str, list[int]] = {}
    for i, w in enumerate(reply):
        at.setdefault(w, []).append(i)
    prompt = words(skeleton(task.prompt))
    if prompt and _echoes(reply, at, prompt, PROMPT_ECHO_SHARE):
        return Score.zero(Status.WRONG, "the reply copies the prompt back")
    for instruction in _instructions(task, tuple(prompt)):
        if _echoes(reply, at, instruction, ECHO_SHARE) or _shuffled_echo(reply, instruction):
            return Score.zero(Status.WRONG, f"the reply copies an instruction back: {' '.join(instruction)[:80]!r}")
    return Score(1.0, Status.CORRECT, "")


def _instructions(task: Task, prompt: tuple[str, ...]) -> list[list[str]]:
    """The task's instruction sentences of five words or more (as :func:`describe` words them)
    that its prompt shows."""
    out = []
    for c in constraints_of(task):
        for sentence in re.split(r"(?<=[.:])\s+", describe(c)):
            said = words(skeleton(sentence))
            if len(said) >= 5 and _contains(list(prompt), said):
                out.append(said)
    return out


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    joined = "\x00" + "\x00".join(haystack) + "\x00"
    return "\x00" + "\x00".join(needle) + "\x00" in joined


def _echoes(reply: Sequence[str], at: Mapping[str, list[int]], instruction: Sequence[str], share: float) -> bool:
    """Whether a passage of ``reply`` (``at``: where each of its words is) holds ``share`` of
    ``instruction``'s words in its order, each at most two words after the last one found: a
    copy with words changed, dropped or inserted is still a copy."""
    n = len(instruction)
    for start in sorted({i - j for j, w in enumerate(instruction[:3]) for i in at.get(w, ())}):
        hits, pos = 0, max(start, 0)
        for k, w in enumerate(instruction):
            if hits + n - k < share * n:
                break
            window = reply[pos : pos + 3]
            if w in window:
                pos += window.index(w) + 1
                hits += 1
        if hits >= share * n:
            return True
    return False


def _shuffled_echo(reply: Sequence[str], instruction: Sequence[str]) -> bool:
    """Whether some passage of ``reply`` half again as long as ``instruction`` holds
    :data:`SHUFFLED_ECHO_SHARE` of its content words (four or more), in any order."""
    wanted = Counter(w for w in instruction if w not in STOPWORDS)
    need = SHUFFLED_ECHO_SHARE * sum(wanted.values())
    if sum(wanted.values()) < 4:
        return False
    span = len(instruction) * 3 // 2
    inside: Counter[str] = Counter()
    held = 0
    for i, w in enumerate(reply):
        if w in wanted:
            inside[w] += 1
            held += inside[w] <= wanted[w]
        if i >= span and reply[i - span] in wanted:
            gone = reply[i - span]
            held -= inside[gone] <= wanted[gone]
            inside[gone] -= 1
        if held >= need:
            return True
    return False
