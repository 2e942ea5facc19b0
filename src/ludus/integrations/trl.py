"""Ludus in TRL's ``GRPOTrainer``: graders as ``reward_funcs``, tool environments as ``environment_factory``.

Single-turn environments (arithmetic, math, code, …)::

    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer
    from ludus.integrations.trl import LudusReward

    dataset = load_dataset("parquet", data_files="math-train.parquet")["train"]  # `ludus export math ...`
    trainer = GRPOTrainer(model=..., reward_funcs=LudusReward(), train_dataset=dataset, args=GRPOConfig(...))

Multi-turn tool environments (sql, repo, code-tools, …)::

    from ludus.integrations.trl import LudusEnvironment

    environment = LudusEnvironment("sql")  # or LudusEnvironment(lambda: RemoteEnv(url))
    trainer = GRPOTrainer(model=..., environment_factory=environment, reward_funcs=environment.reward,
                          train_dataset=dataset, args=GRPOConfig(...))

How TRL drives an environment (TRL 1.16, ``environment_factory``): it calls ``reset(**row)`` on one
instance per rollout, offers the instance's public methods as tools (their signatures and
docstrings are the schemas the model sees), calls them when the model writes a tool call, and
never passes the final reply to the environment. So each Ludus tool becomes a generated method
that plays the call as one ``step`` of the episode, and the reward function — which TRL gives the
completions and the ``environments`` — plays the final reply as the last ``step`` and returns its
score. Each tool call is one turn of the episode (the environment's ``max_turns`` counts them).

Two TRL behaviours to know: the model's chat template needs a response parser so TRL can read
tool calls (TRL sets one for the templates it knows — Qwen, Llama 3, …; for others set
``tokenizer.response_template``); and a tool result that would overflow the completion budget
is dropped by TRL without a word, which leaves an episode without a final answer: it then
scores ``truncated`` (0), as it would in Ludus's own trainer.

Rewards are a score's value, or ``None`` for ``infra_error`` (TRL leaves the sample out of the
reward, never counts it 0) — an environment that could not start for a sample, its env server
down say, included; the share of each status is logged as ``ludus/<status>``.
"""

from __future__ import annotations

import inspect
import keyword
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ludus.core.env import Env
from ludus.core.types import Message, Observation, Score, Status, ToolCall, ToolSpec
from ludus.integrations.common import (
    COLUMNS,
    TRL_LAYOUT,
    EnvFactory,
    EnvPool,
    EnvUnavailable,
    Grader,
    RowError,
    Slot,
    TaskRef,
    chat,
    check_prompt,
    infra_error,
    reward,
)

logger = logging.getLogger("ludus.integrations.trl")


def rows(exported: Any) -> list[dict[str, Any]]:
    """TRL dataset rows from :func:`ludus.integrations.common.export_tasks`: a conversational
    ``prompt`` column and the ``ludus_*`` columns that TRL passes on to the reward functions."""
    return [{"prompt": chat(e.observation.messages), **e.ref.columns()} for e in exported]


def _completion_text(completion: Any) -> tuple[str, bool]:
    """``(final reply text, it still calls tools)`` of a TRL completion: a string, or a list of
    chat messages whose last assistant message is the reply."""
    if isinstance(completion, str):
        return completion, False
    if isinstance(completion, Sequence):
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                content = message.get("content") or ""
                if isinstance(content, list):  # content blocks
                    content = "".join(b.get("text", "") for b in content if isinstance(b, Mapping))
                return str(content), bool(message.get("tool_calls"))
        return "", False
    raise TypeError(f"a completion is a string or a list of chat messages, got {type(completion).__name__}")


class _StatusLog:
    """Per-batch status shares as TRL metrics (``log_metric``), the status of each sample in the
    completions table (``log_extra``), and totals in ``counts``."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def log(self, scores: Sequence[Score], kwargs: Mapping[str, Any]) -> None:
        batch = Counter(s.status for s in scores)
        self.counts.update(batch)
        log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
        if callable(log_metric) and scores:
            for status in sorted(set(self.counts) | {Status.CORRECT, Status.INFRA_ERROR}):
                log_metric(f"ludus/{status}", batch.get(status, 0) / len(scores))
        if callable(log_extra):
            log_extra("ludus_status", [s.status for s in scores])
        if batch.get(Status.INFRA_ERROR):
            reasons = {s.reason for s in scores if s.is_infra_error}
            logger.warning(
                "%d of %d samples are infra_error, left out of the reward: %s",
                batch[Status.INFRA_ERROR],
                len(scores),
                "; ".join(sorted(reasons))[:500],
            )


class LudusReward:
    """A TRL reward function grading each completion with the environment its row names.

    ``env``: ``None`` (each row's ``ludus_env`` with its ``ludus_env_args``, from the registry), a
    registered name (with ``env_args``), or an env factory — a ``RemoteEnv`` on a server, say.
    ``check_prompt`` (default on) refuses a row whose prompt is not the environment's first
    observation: the model would be graded on another question than the one it was asked.
    ``workers`` grade a batch in parallel threads (slow graders: sandboxes, databases)."""

    __name__ = "ludus"  # the reward's name in TRL's logs

    def __init__(
        self,
        env: str | EnvFactory | None = None,
        env_args: Mapping[str, Any] | str | None = None,
        *,
        workers: int = 1,
        retries: int = 1,
        check_prompt: bool = True,
    ):
        self.grader = Grader(env, env_args, workers=workers, retries=retries)
        self.check_prompt = check_prompt
        self.status = _StatusLog()

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        missing = [c for c in COLUMNS if c not in kwargs]
        if missing:
            raise RowError(
                f"the dataset lacks the columns {', '.join(missing)}: LudusReward grades rows that "
                f"{TRL_LAYOUT.export()} wrote (or that keep its ludus_* columns)"
            )
        refs = [
            TaskRef.from_columns({c: kwargs[c][i] for c in COLUMNS}, where=f"row {i} of the batch")
            for i in range(len(completions))
        ]
        replies = [_completion_text(c)[0] for c in completions]
        scores = self.grader.grade_all(refs, replies, list(prompts) if self.check_prompt else None)
        self.status.log(scores, kwargs)
        return [reward(s) for s in scores]

    def close(self) -> None:
        self.grader.close()


# ---- multi-turn: a Ludus environment as TRL's environment_factory ------------------------------

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


def _annotation(schema: Mapping[str, Any], where: str) -> Any:
    """The Python type hint whose JSON schema (as transformers derives it) is ``schema``."""
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    if "anyOf" in schema:
        options = [_annotation(s, where) for s in schema["anyOf"]]
        union = options[0]
        for option in options[1:]:
            union = union | option
        return union
    kind = schema.get("type")
    if kind is None:
        return Any
    if isinstance(kind, list):
        return _annotation({"anyOf": [{"type": k} for k in kind]}, where)
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    if kind == "array":
        items = schema.get("items")
        return list[_annotation(items, where)] if isinstance(items, Mapping) and items else list
    if kind == "object":
        extra = schema.get("additionalProperties")
        return dict[str, _annotation(extra, where)] if isinstance(extra, Mapping) and extra else dict
    raise ValueError(f"{where} has JSON-schema type {kind!r}, which TRL's tool schemas cannot express")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def tool_method(spec: ToolSpec) -> Callable[..., str]:
    """A method named like the tool, whose signature and Google-style docstring make transformers
    derive the tool's schema, and whose call plays the tool call as one step of the episode.
    Arguments reach the environment as the model wrote them: the environment checks them."""
    name = spec.name
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in ("reset", "get_reward"):
        raise ValueError(f"tool {name!r} cannot be a TRL environment method: rename it to a public Python identifier")
    properties: Mapping[str, Any] = spec.parameters.get("properties", {}) or {}
    required = set(spec.parameters.get("required", []) or [])
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    lines = []
    for pname, schema in properties.items():
        if not pname.isidentifier() or keyword.iskeyword(pname):
            raise ValueError(
                f"argument {pname!r} of tool {name!r} is not a Python identifier; TRL calls tools by keyword"
            )
        hint = _annotation(schema, f"argument {pname!r} of tool {name!r}")
        default = inspect.Parameter.empty if pname in required else schema.get("default")
        parameters.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        annotations[pname] = hint
        lines.append(f"    {pname}: {_one_line(schema.get('description') or f'the {pname} argument')}")

    def method(self: LudusToolEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = _one_line(spec.description or name) + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


class LudusToolEnvironment:
    """One TRL rollout's environment: ``reset(**row)`` starts the Ludus episode the row names; the
    tool methods (generated per environment, see :class:`LudusEnvironment`) step it. Everything
    else is private, because TRL offers every public method to the model as a tool."""

    def __init__(self, envs: EnvPool, check_prompt: bool = True):
        self._envs = envs
        self._check_prompt = check_prompt
        self._slot: Slot | None = None
        self._env: Env | None = None
        self._ref: TaskRef | None = None
        self._score: Score | None = None
        self._calls = 0

    def reset(self, **row: Any) -> None:
        """Start the episode the row names. An environment that cannot start (its env server down,
        say) ends the episode at once as ``infra_error``: its reward is ``None``, not a crash of
        the training run."""
        ref = TaskRef.from_columns(row, where="the dataset row")
        self._env, self._ref, self._score, self._calls = None, ref, None, 0
        self._envs.check_env(ref)
        try:
            if self._slot is None:  # TRL keeps instances and resets them: one Ludus environment each
                self._slot = self._envs.new_slot(ref)
            task = self._envs.task(self._slot, ref)
        except EnvUnavailable as exc:
            self._score = infra_error(exc)
            return None
        self._env = self._slot.env
        try:
            observation = self._env.reset(task, seed=ref.seed)
        except Exception as exc:  # noqa: BLE001 - the environment failed, not the model: masked later
            self._score = infra_error(exc, "reset")
            return None
        prompt = row.get("prompt")
        if self._check_prompt and prompt is not None:
            check_prompt(prompt, observation.messages, ref)
        return None  # the row's prompt is already the first observation

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._score is not None:
            return f"Error: the episode has ended ({self._score.status}); give your final answer"
        if self._env is None:
            raise RuntimeError("a tool was called before reset(): TRL resets every environment before generating")
        self._calls += 1
        call = ToolCall(name, dict(arguments), id=f"call_{self._calls}")
        result = self._env.step(Message("assistant", "", tool_calls=[call]))
        if result.done:
            assert result.score is not None
            self._score = result.score
        replies = [m.content for m in result.observation.messages if m.role == "tool"]
        if replies:
            return "\n".join(replies)
        return f"Error: the episode ended: {self._score.reason if self._score else 'no reply'}"

    def _finish(self, completion: Any) -> Score:
        """Play the final reply as the episode's last step (unless the episode already ended) and
        return the episode's score."""
        if self._score is not None:
            return self._score
        if self._env is None:
            raise RuntimeError("the reward was asked before reset(): TRL resets every environment before generating")
        text, calls_pending = _completion_text(completion)
        if calls_pending:  # TRL stopped the tool loop (iteration limit, an overflowing tool result)
            self._score = Score.zero(Status.TRUNCATED, "the rollout ended on a tool call, without a final answer")
            return self._score
        result = self._env.step(Message("assistant", text))
        if result.done:
            assert result.score is not None
            self._score = result.score
        else:
            self._score = Score.zero(Status.TRUNCATED, "the environment expected more turns after the final reply")
        return self._score


class LudusEnvironment:
    """``environment_factory`` for TRL's ``GRPOTrainer``, and its reward function (``.reward``).

    ``env`` is a registered name (with ``env_args``) or an env factory (a ``RemoteEnv`` on a
    server, say). The tools are read once, here, from an episode on task 0 of ``probe_split``:
    TRL shows every rollout of an environment the same tool schemas. An environment that cannot
    be reached here raises (a wrong address, a server not started: nothing has trained yet);
    once set up, an episode whose environment cannot start is an ``infra_error``."""

    def __init__(
        self,
        env: str | EnvFactory,
        env_args: Mapping[str, Any] | str | None = None,
        *,
        probe_split: str = "train",
        check_prompt: bool = True,
    ):
        self.envs = EnvPool(env, env_args)
        self.check_prompt = check_prompt
        probe = self.envs.factory() if self.envs.factory is not None else None
        if probe is None:  # pragma: no cover - EnvPool always has a factory for a name or a callable
            raise TypeError("LudusEnvironment needs an environment name or factory")
        try:
            observation: Observation = probe.reset(probe.task_source(probe_split).get(0), seed=0)  # type: ignore[arg-type]
            self.tools = list(observation.tools) or probe.tools()
        finally:
            probe.close()
        if not self.tools:
            raise ValueError(
                f"{getattr(probe, 'name', '') or type(probe).__name__} offers no tools: train it with LudusReward "
                "as a reward function instead of as an environment"
            )
        env_name = getattr(probe, "name", "") or type(probe).__name__
        class_name = "".join(part.capitalize() for part in str(env_name).replace("_", "-").split("-")) or "Ludus"
        methods = {spec.name: tool_method(spec) for spec in self.tools}
        self.cls: type[LudusToolEnvironment] = type(f"{class_name}ToolEnvironment", (LudusToolEnvironment,), methods)
        self.status = _StatusLog()
        self.reward = self._make_reward()

    def __call__(self) -> LudusToolEnvironment:
        return self.cls(self.envs, self.check_prompt)

    def _make_reward(self) -> Callable[..., list[float | None]]:
        def ludus_env(completions: Sequence[Any], environments: Sequence[Any] | None = None, **kwargs: Any):
            if environments is None:
                raise ValueError("the Ludus environment reward needs TRL's environments: pass environment_factory too")
            scores = []
            for environment, completion in zip(environments, completions, strict=True):
                if not isinstance(environment, LudusToolEnvironment):
                    raise TypeError(f"expected a Ludus environment, got {type(environment).__name__}")
                scores.append(environment._finish(completion))
            self.status.log(scores, kwargs)
            return [reward(s) for s in scores]

        return ludus_env

    def close(self) -> None:
        self.envs.close()


def tool_schemas(environment: LudusEnvironment) -> list[dict[str, Any]]:
    """The tool schemas TRL will show the model, as transformers derives them from the generated
    methods (to compare with the environment's own ``ToolSpec``s)."""
    from transformers.utils import get_json_schema

    instance = environment()
    return [get_json_schema(getattr(instance, spec.name)) for spec in environment.tools]
