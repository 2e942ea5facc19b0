"""reasoning-gym's datasets as Ludus environments: ``rg:NAME`` for each of them.

reasoning-gym (extra ``ludus[reasoning-gym]``) generates about a hundred seeded task families,
each with a difficulty curriculum and its own scorer. Each dataset becomes a single-turn
environment whose tasks come from the dataset at a fixed configuration: reasoning-gym's defaults,
``difficulty=N`` (its curriculum with every attribute at level N, clamped), and ``config={...}``
overrides on top. A task stores only the dataset index and configuration; the entry is
regenerated (deterministically) to grade, so tasks round-trip through JSON whatever the metadata
holds. Grading follows the dataset's audited :class:`~ludus.envs.reasoning_gym.verdicts.Verdict`.
"""

from __future__ import annotations

import decimal
import functools
import importlib.util
import json
import random
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any, ClassVar

from ludus.core.env import SingleTurnEnv, Split, TaskSource
from ludus.core.types import Message, Score, Status, Task
from ludus.envs.reasoning_gym.grading import MAX_CHARS
from ludus.envs.reasoning_gym.reading import read_answer
from ludus.tasks.procedural import Problem, ProceduralTasks, TaskFamily

PREFIX = "rg:"
DATASET_SIZE = 10_000  # distinct problems per configuration (some datasets precompute `size` items)
# Levels whose problems reasoning-gym 0.1.25 cannot make in practice, found by generating three tasks
# at every level of every curriculum (docs/reasoning_gym.md): left out of difficulty_levels.
UNUSABLE_LEVELS = {
    "jugs": {
        3: "three problems take over a minute to generate (16-31 s each, measured near idle)",
        4: "its generator gives up: 'Could not generate a puzzle with difficulty at least 20 using 7 jugs'",
    },
    "number_sequence": {4: "three problems take over a minute to generate"},
}
GENERATION_TRIES = 8  # indexes tried before a configuration counts as broken
CLASS_PREFIX = "RG_"  # module attribute RG_<dataset> is that dataset's environment class (picklable)


def _verdict(dataset: str) -> Any:
    from ludus.envs.reasoning_gym.audit import AUDIT  # noqa: PLC0415 - imports reasoning-gym helpers

    return AUDIT[dataset]


INSTALL_HINT = "the rg: environments need reasoning-gym: pip install 'ludus[reasoning-gym]'"


def installed() -> bool:
    return importlib.util.find_spec("reasoning_gym") is not None


def _rg() -> Any:
    try:
        import reasoning_gym.factory  # noqa: PLC0415 - an optional extra, imported on use
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return reasoning_gym.factory


@functools.cache
def offered() -> dict[str, str]:
    """Every dataset offered as ``rg:NAME`` and its description: the audited ones not refused (a
    dataset of a newer reasoning-gym that we have not audited is not offered). Read from our audit
    table alone, without importing reasoning-gym, so that ``ludus envs`` stays light."""
    from ludus.envs.reasoning_gym.audit import AUDIT  # noqa: PLC0415

    grading = {"replaced": "graded by Ludus's own scorer", "works": "its own scorer, full marks only"}
    return {
        name: f"reasoning-gym's {name} ({grading[verdict.kind]})"
        for name, verdict in sorted(AUDIT.items())
        if verdict.kind != "refused"
    }


@functools.cache
def levels(dataset: str) -> tuple[int, ...]:
    """The difficulty levels of ``dataset``'s curriculum, 1-based (empty when it has none): as many as
    its longest attribute has, less those whose configuration rg itself refuses (a few curricula step
    outside their own config's limits: caesar_cipher 3-4, knight_swap 1, modulo_grid 2, rubiks_cube 5)
    and the :data:`UNUSABLE_LEVELS`."""
    factory = _rg()
    if dataset not in factory.CURRICULA:
        return ()
    curriculum = factory.create_curriculum(dataset)
    top = max((len(attr.levels) for attr in curriculum.attributes.values()), default=1)
    valid = []
    for level in sorted(set(range(1, top + 1)) - set(UNUSABLE_LEVELS.get(dataset, ()))):
        config = _at_level(dataset, level, {"seed": 0, "size": DATASET_SIZE})
        try:
            if hasattr(config, "validate"):
                config.validate()
        except (AssertionError, TypeError, ValueError):
            continue
        valid.append(level)
    return tuple(valid)


def _at_level(dataset: str, level: int, fields: dict[str, Any]) -> Any:
    """rg's curriculum with every attribute at ``level`` (clamped to its own top), as rg makes its
    config by default: each range from the easiest value up to that level's (a level's own value
    alone leaves some generators, countdown's, failing to find problems)."""
    curriculum = _rg().create_curriculum(dataset)
    curriculum.set_global_level(level - 1)
    return curriculum.generate_configuration(fields)


def rg_config(dataset: str, settings_key: str) -> Any:
    """The dataset's config object for ``settings`` (JSON: difficulty, overrides, seed): rg's defaults,
    or its curriculum at ``difficulty`` (every attribute at that level, clamped to its own top; the
    level's own range, not the levels below it), then the overrides."""
    factory = _rg()
    settings = json.loads(settings_key)
    difficulty, overrides = settings["difficulty"], settings["config"]
    _cls, config_cls = factory.DATASETS[dataset]
    unknown = sorted(set(overrides) - set(config_cls.__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"rg:{dataset} has no config field(s) {unknown}; its fields are {sorted(config_cls.__dataclass_fields__)}"
        )
    fields = {"seed": settings["seed"], "size": DATASET_SIZE}
    if difficulty is None:
        return config_cls(**fields, **overrides)
    have = levels(dataset)
    if difficulty not in have:
        raise ValueError(
            f"rg:{dataset} has difficulty levels {list(have) or 'none'} (its reasoning-gym curriculum); "
            f"got difficulty={difficulty}"
        )
    return replace(_at_level(dataset, difficulty, fields), **overrides)


@functools.lru_cache(maxsize=64)
def _dataset(dataset: str, settings_key: str) -> Any:
    """The dataset for ``settings`` (made once per process: some precompute their problems)."""
    config = rg_config(dataset, settings_key)  # our own errors name the field or the level
    try:
        if hasattr(config, "validate"):  # most configs check themselves; a few have no validate()
            config.validate()
        with decimal.localcontext():
            return _rg().DATASETS[dataset][0](config)
    except (AssertionError, TypeError, ValueError) as exc:
        raise ValueError(f"rg:{dataset}: reasoning-gym refuses the configuration {settings_key}: {exc}") from exc


def settings_key(difficulty: int | None, config: Mapping[str, Any], seed: int) -> str:
    """What makes a dataset, as the JSON text tasks keep (``info["rg_settings"]``)."""
    return json.dumps({"difficulty": difficulty, "config": dict(config), "seed": seed}, sort_keys=True)


@functools.lru_cache(maxsize=4096)
def _entry(dataset: str, settings: str, index: int) -> dict[str, Any]:
    """Entry ``index`` of a dataset (kept: some datasets take a quarter of a second per entry). In a
    local decimal context: decimal_arithmetic sets the process-wide precision to 12 digits."""
    with decimal.localcontext():
        return _dataset(dataset, settings)[index]


class DatasetFamily(TaskFamily):
    """Tasks drawn from one reasoning-gym dataset at one configuration."""

    def __init__(self, dataset: str, settings: str):
        self.name = PREFIX + dataset
        self.dataset, self.settings = dataset, settings

    def params(self) -> str:
        return self.settings

    def make(self, rng: random.Random) -> Problem:
        failure: Exception | None = None
        for _ in range(GENERATION_TRIES):
            index = rng.randrange(DATASET_SIZE)
            try:
                entry = _entry(self.dataset, self.settings, index)
            except Exception as exc:  # noqa: BLE001 - some generators give up on some seeds: draw another
                failure = exc
                continue
            return Problem(entry["question"], entry["answer"], {"rg_index": index, "rg_settings": self.settings})
        raise RuntimeError(
            f"rg:{self.dataset} ({self.settings}): reasoning-gym failed to generate {GENERATION_TRIES} problems "
            f"in a row, the last with {type(failure).__name__}: {failure}"
        )


class ReasoningGymEnv(SingleTurnEnv):
    """One reasoning-gym dataset; subclasses (``RG_<dataset>``) fix ``dataset``."""

    dataset: ClassVar[str] = ""
    system_prompt = "Give your final answer inside <answer></answer> tags."

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        difficulty: int | None = None,
        config: Mapping[str, Any] | None = None,
        seed: int = 0,
        eval_fraction: float = 0.1,
    ):
        super().__init__(tasks)
        if not self.dataset:
            raise TypeError("make a reasoning-gym environment by name: ludus.make('rg:NAME') or env_class(NAME)")
        self.verdict = _verdict(self.dataset)
        if self.verdict.kind == "refused":
            raise ValueError(f"rg:{self.dataset} is not offered: {self.verdict.reason}")
        try:
            self.settings = settings_key(difficulty, config or {}, seed)
        except TypeError as exc:
            raise ValueError(f"rg:{self.dataset}: config must be JSON values: {exc}") from exc
        # a bad configuration fails here, not mid-run; the resolved fields, for people to read
        self.config = asdict(_dataset(self.dataset, self.settings).config)
        self.family = DatasetFamily(self.dataset, self.settings)
        self.seed, self.eval_fraction = seed, eval_fraction

    def default_tasks(self, split: Split = "train") -> TaskSource:
        return ProceduralTasks(self.family, seed=self.seed, split=split, eval_fraction=self.eval_fraction)

    def entry(self, task: Task) -> dict[str, Any]:
        """The reasoning-gym entry behind ``task``, regenerated from its index and configuration."""
        return _entry(self.dataset, task.info["rg_settings"], task.info["rg_index"])

    def score(self, task: Task, completion: str) -> Score:
        """The reply's answer (:mod:`~ludus.envs.reasoning_gym.reading`: rg's ``<answer>`` tag or Ludus's other
        markers, multi-line answers whole) graded by the dataset's verdict. An ``Answer:`` line may be read more
        than one way (without and with a final full stop, without the commentary on its own line): the first
        reading that earns full marks counts, else the first reading's score."""
        reading = read_answer(completion, MAX_CHARS, task.prompt)
        if isinstance(reading, Score):
            return reading
        entry = self.entry(task)
        first = None
        for answer in reading.answers:
            score = self._grade(answer, entry, task)
            if score.value >= 1.0:
                return score
            first = first or score
        assert first is not None  # a reading has at least one answer
        return replace(first, reason=f"{first.reason} ({reading.where})")

    def _grade(self, answer: str, entry: dict[str, Any], task: Task) -> Score:
        if self.verdict.scorer is not None:
            try:
                return self.verdict.scorer(answer, entry)
            except (ValueError, ArithmeticError, RecursionError) as exc:  # an answer past int()'s digits, say
                reason = f"Ludus's scorer cannot read the answer ({type(exc).__name__})"
                return Score(0.0, Status.FORMAT_ERROR, reason, extracted=answer)
        dataset = _dataset(self.dataset, task.info["rg_settings"])
        try:
            with decimal.localcontext():
                value = float(dataset.score_answer(answer, entry))
        except Exception as exc:  # rg's scorer choked on the model's answer: no reward, and why
            return Score(
                0.0, Status.FORMAT_ERROR, f"reasoning-gym's scorer raised {type(exc).__name__}", extracted=answer
            )
        if value >= 1.0:
            return Score(1.0, Status.CORRECT, "reasoning-gym's scorer gives full marks", extracted=answer)
        return Score(
            0.0, Status.WRONG, f"reasoning-gym's scorer gives {value:.2f}; only full marks count", extracted=answer
        )

    def reference(self, task: Task) -> str | None:
        entry = self.entry(task)
        answer = entry["answer"] if self.verdict.reference is None else self.verdict.reference(entry)
        return None if answer is None else f"<answer>{answer}</answer>"

    def cheats(self, task: Task) -> Mapping[str, list[Message]]:
        """Two answers at once, and the gold answer buried in a longer one (rg's default scorer pays
        a substring a share of the reward)."""
        gold = self.entry(task)["answer"]
        if gold is None:
            return {}
        return {
            "gold_inside_padding": [Message("assistant", f"<answer>{gold} or maybe not {gold}0</answer>")],
            "two_answers": [Message("assistant", f"<answer>{gold}</answer> <answer>{gold}1</answer>")],
        }


@functools.cache
def env_class(dataset: str) -> type[ReasoningGymEnv]:
    """The environment class of ``dataset`` (``rg:dataset``), made once per process."""
    factory = _rg()
    if dataset not in factory.DATASETS:
        raise KeyError(f"reasoning-gym has no dataset {dataset!r}")
    if dataset not in offered():
        raise ValueError(f"rg:{dataset} is not offered: {_verdict(dataset).reason}")
    attrs = {
        "name": PREFIX + dataset,
        "description": offered()[dataset],
        "dataset": dataset,
        "difficulty_levels": levels(dataset),
        "__module__": __name__,
        "__qualname__": CLASS_PREFIX + dataset,
        "__doc__": f"reasoning-gym's {dataset} dataset.",
    }
    return type(CLASS_PREFIX + dataset, (ReasoningGymEnv,), attrs)


def __getattr__(name: str) -> Any:
    """``RG_<dataset>``: lets pickle find a dataset's class by its qualified name (Ray, env servers)."""
    if name.startswith(CLASS_PREFIX):
        try:
            return env_class(name[len(CLASS_PREFIX) :])
        except (KeyError, ValueError, ImportError) as exc:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}: {exc}") from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def registry_entries() -> list[tuple[str, str, str]]:
    """``(name, class target, description)`` of every offered dataset: the ``ludus.env_families``
    entry point (raises ImportError, saying what to install, without reasoning-gym)."""
    if not installed():
        raise ImportError(INSTALL_HINT)
    return [(PREFIX + name, f"{__name__}:{CLASS_PREFIX}{name}", about) for name, about in offered().items()]
