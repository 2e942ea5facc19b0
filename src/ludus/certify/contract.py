"""The environment contract checker behind ``ludus check ENV``.

It drives an environment through the invariants written down in :mod:`ludus.core.env` and
says, one line per check, what holds and what does not, so an author learns what is wrong
before a training run does. Each check builds fresh instances from the factory and is
isolated: an exception inside one check is that check's failure, never the checker's crash —
except :class:`MissingDependency` (a package to install), which stops the check.

Two choices worth knowing:

* "seeds vary" is a *warning*, not a failure: an environment built around one fixed task is
  legal, but a policy can memorise its answer, so the author should hear about it.
* The checker bounds every episode at ``min(max_turns, max_steps)`` steps, so an
  environment that never ends fails a check instead of hanging the checker. It does not
  bound wall-clock time: a ``step`` that blocks forever blocks the checker.
"""

from __future__ import annotations

import math
import random
import re
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from ludus.core.env import Env, EnvStateError, MissingDependency
from ludus.core.registry import EnvLoadError, factory
from ludus.core.types import Message, Observation, Score, Status, StepResult, ToolCall, ToolSpec

MAX_STEPS = 100
"""The most steps the checker takes in one episode, whatever ``max_turns`` says."""

JUNK = "I am not sure."
"""A fixed, plausible-but-useless reply: every environment must cope with it and end."""

ANSWER_LIKE: tuple[str, ...] = (JUNK, "0", "42", "<answer>1</answer>", "\\boxed{-7}")
"""Replies that look like answers, to reach the reward paths that junk alone would not."""

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-compatible chat APIs accept

Level = Literal["error", "warning", "info"]
"""``info`` lines are figures and notes (the red-team's throughput): never a failure."""


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. On success ``detail`` states what was verified; on failure, what broke."""

    name: str
    ok: bool
    detail: str
    level: Level = "error"


@dataclass
class CheckReport:
    """Every check's result for one environment; ``ok`` ignores warnings."""

    env: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok and r.level == "error"]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok and r.level == "warning"]


class _Failed(Exception):
    """Raised inside a check to fail it with a sentence for the author."""


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(exc: BaseException) -> str:
    """The exception and the line that raised it, so the author can go straight there."""
    text = f"{type(exc).__name__}: {exc}"
    if len(text) > 300:
        text = text[:297] + "..."
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {last.filename}:{last.lineno} in {last.name})"
    return text


def difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON-like values first differ, as ``path: a vs b``; ``None`` if equal."""
    where = path or "value"
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                return f"{sub}: only in the {'second' if key not in a else 'first'}"
            found = difference(a[key], b[key], sub)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None if len(a) == len(b) else f"{where}: {len(a)} vs {len(b)} items"
    return None if a == b else f"{where}: {_short(a)} vs {_short(b)}"


def step_view(result: StepResult) -> dict[str, Any]:
    """A StepResult without ``info``: info may carry timings, which differ run to run."""
    return {k: v for k, v in result.to_dict().items() if k != "info"}


def _in_range(value: float, bounds: tuple[float, float]) -> bool:
    return isinstance(value, (int, float)) and bounds[0] <= value <= bounds[1]


def _tool_problem(spec: Any) -> str | None:
    if not isinstance(spec, ToolSpec):
        return f"{_short(spec)} is a {type(spec).__name__}, not a ToolSpec"
    if not isinstance(spec.name, str) or not _TOOL_NAME.match(spec.name):
        return f"tool name {spec.name!r} must be 1-64 letters, digits, '_' or '-'"
    if not isinstance(spec.description, str) or not spec.description.strip():
        return f"tool {spec.name!r} has no description; it is what the model reads"
    params = spec.parameters
    if not isinstance(params, dict) or params.get("type") != "object":
        return f"tool {spec.name!r}: parameters must be a JSON schema with type 'object', got {_short(params)}"
    props = params.get("properties", {})
    if not isinstance(props, dict) or not all(isinstance(v, dict) for v in props.values()):
        return f"tool {spec.name!r}: parameters.properties must map names to schemas, got {_short(props)}"
    required = params.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(props):
        return f"tool {spec.name!r}: parameters.required {_short(required)} must list names in properties"
    return None


def _garbage(rng: random.Random, n: int) -> str:
    """Text a broken sampler might emit: controls, combining marks, RTL, zero-width, CJK, emoji, quotes."""
    ranges = [(0, 31), (0x300, 0x36F), (0x590, 0x5FF), (0x200B, 0x202E), (0x4E00, 0x4E80), (0x1F600, 0x1F64F)]
    ranges.append((0xFFF0, 0xFFFD))
    specials = "{}[]<>\"'\\`$%\n"
    out = []
    for _ in range(n):
        if rng.random() < 0.2:
            out.append(rng.choice(specials))
        else:
            lo, hi = rng.choice(ranges)
            out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def malformed_actions(tool_names: list[str]) -> list[tuple[str, str | Message]]:
    """The bad model outputs every environment must survive, labelled for the report."""
    real = tool_names[0] if tool_names else "answer"
    broken_args: list[Any] = ["{not json", [1, 2], None]
    return [
        ("empty text", ""),
        ("whitespace", " \n\t  \r\n "),
        ("a 100k-character reply", "1234567890" * 10_000),
        ("random unicode", _garbage(random.Random(0), 2_000)),
        ("binary-like bytes", bytes(range(256)).decode("latin-1") * 4),
        (
            "text with a fake tool-call JSON",
            f'<tool_call>{{"name": "{real}", "arguments": {{"x": 1}}}}</tool_call>\n{{"name": "nope", "arguments": "}}',
        ),
        (
            "a call to a non-existent tool",
            Message("assistant", "", tool_calls=[ToolCall("no_such_tool__", {"x": 1}, id="call_0")]),
        ),
        (
            "tool calls with non-dict arguments",
            Message(
                "assistant",
                "",
                tool_calls=[ToolCall(real, args, id=f"call_{i}") for i, args in enumerate(broken_args)],
            ),
        ),
        (
            "a tool call with garbage argument values",
            Message(
                "assistant",
                "calling",
                tool_calls=[ToolCall(real, {"\x00": [None, {"deep": [1e308]}], "x": "\ufffd" * 10}, id="call_9")],
            ),
        ),
    ]


@dataclass
class _Context:
    factory: Callable[[], Env]
    seeds: list[int]
    max_steps: int
    _malformed: list[tuple[str, list[StepResult], BaseException | None]] | None = None

    @contextmanager
    def env(self) -> Iterator[Env]:
        env = self.factory()
        if not isinstance(env, Env):
            raise _Failed(f"the factory returned {type(env).__name__}, not a ludus Env")
        try:
            yield env
        finally:
            env.close()

    def limit(self, env: Env) -> int:
        return max(1, min(int(env.max_turns), self.max_steps))

    def play(self, env: Env, action: str | Message) -> list[StepResult]:
        """Step with ``action`` until the episode ends or the step limit is reached."""
        results: list[StepResult] = []
        for _ in range(self.limit(env)):
            results.append(env.step(action))
            if results[-1].done:
                break
        return results

    def malformed_runs(self) -> list[tuple[str, list[StepResult], BaseException | None]]:
        """One episode per malformed action on the first seed, computed once for the checks that share it."""
        if self._malformed is None:
            runs = []
            with self.env() as env:
                for label, action in malformed_actions([t.name for t in env.tools()]):
                    results: list[StepResult] = []
                    try:
                        env.reset(seed=self.seeds[0])
                        for _ in range(self.limit(env)):
                            results.append(env.step(action))
                            if not isinstance(results[-1], StepResult) or results[-1].done:
                                break
                        runs.append((label, results, None))
                    except Exception as exc:
                        runs.append((label, results, exc))
            self._malformed = runs
        return self._malformed


# ---- the checks: each raises _Failed on failure; a returned string replaces the pass line ----


def _check_construct(ctx: _Context) -> None:
    with ctx.env():
        pass


def _check_metadata(ctx: _Context) -> None:
    with ctx.env() as env:
        cls = type(env)
        for attr in ("name", "description"):
            value = getattr(env, attr, "")  # the class's, unless the instance has its own (a RemoteEnv's)
            if not isinstance(value, str) or not value.strip():
                raise _Failed(f"{cls.__name__}.{attr} is empty; set it as a class attribute")
        bounds = env.reward_range
        if (
            not isinstance(bounds, tuple)
            or len(bounds) != 2
            or not all(isinstance(b, (int, float)) and math.isfinite(b) for b in bounds)
            or not bounds[0] < bounds[1]
        ):
            raise _Failed(f"reward_range must be a (low, high) pair of finite numbers with low < high, got {bounds!r}")
        if not isinstance(env.max_turns, int) or env.max_turns < 1:
            raise _Failed(f"max_turns must be a positive integer, got {env.max_turns!r}")


def _check_reset(ctx: _Context) -> None:
    with ctx.env() as env:
        for seed in ctx.seeds:
            obs = env.reset(seed=seed)
            if not isinstance(obs, Observation):
                raise _Failed(f"reset(seed={seed}) returned {type(obs).__name__}, not an Observation")
            if not obs.messages:
                raise _Failed(f"reset(seed={seed}) returned no messages; the policy would see an empty conversation")
            bad = [m for m in obs.messages if not isinstance(m, Message)]
            if bad:
                raise _Failed(f"reset(seed={seed}) returned a {type(bad[0]).__name__} among its messages")
            if obs.messages[-1].role not in ("user", "tool"):
                raise _Failed(
                    f"reset(seed={seed}) ends with a {obs.messages[-1].role!r} message; "
                    "the last one must be user or tool so the policy has something to answer"
                )


def _check_json(ctx: _Context) -> None:
    with ctx.env() as env:
        for seed in ctx.seeds:
            obs = env.reset(seed=seed)
            back = Observation.from_json(obs.to_json())
            if back != obs:
                diff = difference(obs.to_dict(), back.to_dict()) or "the objects compare unequal"
                raise _Failed(f"reset(seed={seed}) observation changed in a JSON round trip: {diff}")
        for spec in env.tools():
            if ToolSpec.from_json(spec.to_json()) != spec:
                raise _Failed(f"tool {spec.name!r} changed in a JSON round trip")


def _check_tools(ctx: _Context) -> None:
    with ctx.env() as env:
        specs = list(env.tools()) + list(env.reset(seed=ctx.seeds[0]).tools)
        for spec in specs:
            problem = _tool_problem(spec)
            if problem:
                raise _Failed(problem)
        names = [s.name for s in env.tools()]
        if len(names) != len(set(names)):
            raise _Failed(f"tools() lists a name twice: {names}")


def _check_step_before_reset(ctx: _Context) -> None:
    with ctx.env() as env:
        try:
            env.step(JUNK)
        except EnvStateError:
            return
        except Exception as exc:
            raise _Failed(f"raised {_describe(exc)} instead of EnvStateError") from exc
        raise _Failed("step() before reset() returned a result instead of raising EnvStateError")


def _check_determinism(ctx: _Context) -> None:
    for seed in ctx.seeds:
        with ctx.env() as a, ctx.env() as b:
            first, second = a.reset(seed=seed).to_dict(), b.reset(seed=seed).to_dict()
            diff = difference(first, second)
            if diff:
                raise _Failed(
                    f"reset(seed={seed}) gave different messages on two fresh instances: {diff}; "
                    "draw every random choice from self.rng"
                )
            ra, rb = ctx.play(a, JUNK), ctx.play(b, JUNK)
            for i, (x, y) in enumerate(zip(ra, rb, strict=False)):
                diff = difference(step_view(x), step_view(y))
                if diff:
                    raise _Failed(
                        f"seed {seed}, step {i + 1} with {JUNK!r} differed between two fresh instances: {diff}"
                    )
            if len(ra) != len(rb):
                raise _Failed(
                    f"seed {seed}: the same actions ended one episode after {len(ra)} steps, another {len(rb)}"
                )
            diff = difference(first, a.reset(seed=seed).to_dict())
            if diff:
                raise _Failed(
                    f"reset(seed={seed}) on the same instance a second time gave a different observation: {diff}; "
                    "reset must not depend on earlier episodes"
                )


def _check_seeds_vary(ctx: _Context) -> None:
    if len(ctx.seeds) < 2:
        return
    with ctx.env() as env:
        seen = {env.reset(seed=seed).to_json() for seed in ctx.seeds}
    if len(seen) == 1:
        raise _Failed(
            f"all {len(ctx.seeds)} seeds gave the same first observation; "
            "without per-episode variation a policy can memorise one answer"
        )


def _check_episodes_end(ctx: _Context) -> None:
    with ctx.env() as env:
        for seed in ctx.seeds:
            env.reset(seed=seed)
            results = ctx.play(env, JUNK)
            if not results[-1].done:
                why = (
                    f"; max_turns is {env.max_turns} but the checker stops at {ctx.max_steps} steps"
                    if env.max_turns > ctx.max_steps
                    else f" although max_turns is {env.max_turns}"
                )
                raise _Failed(f"seed {seed}: {len(results)} steps of {JUNK!r} and the episode had not ended{why}")
            if not isinstance(results[-1].score, Score):
                raise _Failed(f"seed {seed}: the episode ended after {len(results)} steps without a Score")


def _check_step_after_end(ctx: _Context) -> None:
    with ctx.env() as env:
        env.reset(seed=ctx.seeds[0])
        if not ctx.play(env, JUNK)[-1].done:
            raise _Failed("could not test: the episode did not end (see 'episodes end')")
        try:
            env.step(JUNK)
        except EnvStateError:
            return
        except Exception as exc:
            raise _Failed(f"raised {_describe(exc)} instead of EnvStateError") from exc
        raise _Failed("step() after the episode ended returned a result instead of raising EnvStateError")


def _result_problem(result: Any, bounds: tuple[float, float]) -> str | None:
    """What is wrong with one step's result as data, whatever the action was; ``None`` if nothing."""
    if not isinstance(result, StepResult):
        return f"step returned {type(result).__name__}, not a StepResult"
    if not _in_range(result.reward, bounds):
        return f"reward {result.reward!r} is outside reward_range {bounds}"
    if result.score is not None and not isinstance(result.score.status, str):
        return f"score status {result.score.status!r} is not a string"
    if result.score is not None and not _in_range(result.score.value, bounds):
        return f"score {result.score.value!r} is outside reward_range {bounds}"
    return None


def _check_reward_range(ctx: _Context) -> None:
    with ctx.env() as env:
        bounds = env.reward_range
        for seed in ctx.seeds:
            for action in ANSWER_LIKE:
                env.reset(seed=seed)
                for i, result in enumerate(ctx.play(env, action)):
                    where = f"seed {seed}, step {i + 1} with {action!r}"
                    problem = _result_problem(result, bounds)
                    if problem:
                        raise _Failed(f"{where}: {problem}")
                    if result.score is not None and result.score.is_infra_error:
                        # the base class turns an out-of-range reward into infra_error, so it surfaces here
                        raise _Failed(f"{where}: the environment reported infra_error: {result.score.reason}")


def _check_reference(ctx: _Context) -> str | None:
    tested = 0
    with ctx.env() as env:
        top = env.reward_range[1]
        for seed in ctx.seeds:
            env.reset(seed=seed)
            if env.task is None:
                raise _Failed(f"reset(seed={seed}) did not set env.task")
            actions = env.reference_actions(env.task)
            if actions is None:
                continue
            tested += 1
            final = None
            for action in actions:
                final = env.step(action)
                if final.done:
                    break
            if final is None or final.score is None or final.score.value != top:
                got = (
                    "no Score"
                    if final is None or final.score is None
                    else f"{final.score.value} ({final.score.status}: {final.score.reason})"
                )
                shown = _short(actions[0].content) if len(actions) == 1 else f"({len(actions)} actions)"
                raise _Failed(f"seed {seed}: reference {shown} scored {got}, not the full reward {top}")
    return None if tested else "no reference reply to test: reference_actions() returns None"


def _check_malformed(ctx: _Context) -> None:
    problems: list[str] = []
    with ctx.env() as env:
        bounds = env.reward_range
    for label, results, exc in ctx.malformed_runs():
        if exc is not None:
            problems.append(f"{label}: raised {_describe(exc)}")
            continue
        problem = next(filter(None, (_result_problem(r, bounds) for r in results)), None)
        if problem:
            problems.append(f"{label}: {problem}")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise _Failed("; ".join(problems[:3]) + more)


def _check_no_infra_error(ctx: _Context) -> None:
    for label, results, _ in ctx.malformed_runs():  # exceptions are reported by "malformed actions"
        for result in results:
            score = getattr(result, "score", None)
            if isinstance(score, Score) and score.status == Status.INFRA_ERROR:
                raise _Failed(
                    f"{label} produced infra_error ({score.reason}); the environment crashed on model input. "
                    "Bad output is the model's mistake: score it (e.g. format_error) instead"
                )


def _check_step_json(ctx: _Context) -> None:
    labelled: list[tuple[str, StepResult]] = []
    with ctx.env() as env:
        for seed in ctx.seeds:
            env.reset(seed=seed)
            labelled += [(f"seed {seed} with {JUNK!r}", r) for r in ctx.play(env, JUNK)]
    for label, results, _ in ctx.malformed_runs():
        labelled += [(label, r) for r in results if isinstance(r, StepResult)]
    for label, result in labelled:
        back = StepResult.from_json(result.to_json())
        if back != result:
            diff = difference(result.to_dict(), back.to_dict()) or "the objects compare unequal"
            raise _Failed(f"{label}: a StepResult changed in a JSON round trip: {diff}")


@dataclass(frozen=True)
class _Check:
    name: str
    what: str
    run: Callable[[_Context], str | None]
    level: Level = "error"


CHECKS: tuple[_Check, ...] = (
    _Check("metadata", "the class declares a name, a description, a valid reward_range and max_turns", _check_metadata),
    _Check(
        "reset", "reset returns an Observation with at least one message, the last a user or tool one", _check_reset
    ),
    _Check("json", "observations and tool specs survive a JSON round trip", _check_json),
    _Check("tools", "every tool has a valid name, a description and an object schema for its parameters", _check_tools),
    _Check("step before reset", "step before reset raises EnvStateError", _check_step_before_reset),
    _Check(
        "determinism",
        "the same seed and actions give identical observations and step results on fresh instances and on re-reset",
        _check_determinism,
    ),
    _Check("seeds vary", "different seeds give different first observations", _check_seeds_vary, "warning"),
    _Check("episodes end", "episodes of junk replies end within max_turns with a Score", _check_episodes_end),
    _Check("step after end", "step after the episode ended raises EnvStateError", _check_step_after_end),
    _Check("reward range", "every reward and score lies within reward_range, with no infra_error", _check_reward_range),
    _Check("reference", "the reference reply earns the full reward", _check_reference),
    _Check(
        "malformed actions",
        "malformed actions (empty, huge, garbage, fake or broken tool calls) never raise and stay in range",
        _check_malformed,
    ),
    _Check(
        "no infra_error on model output", "malformed model output is scored, never infra_error", _check_no_infra_error
    ),
    _Check("step json", "step results survive a JSON round trip", _check_step_json),
)


def _run(check: _Check, ctx: _Context) -> CheckResult:
    try:
        note = check.run(ctx)
    except _Failed as exc:
        return CheckResult(check.name, False, str(exc), check.level)
    except MissingDependency:
        raise  # a package to install, not a broken contract: the caller says which, once
    except Exception as exc:
        return CheckResult(check.name, False, f"raised {_describe(exc)}", check.level)
    return CheckResult(check.name, True, note or check.what, check.level)


def check_env(
    env_factory: Callable[[], Env], *, name: str, seeds: Iterable[int] = range(5), max_steps: int = MAX_STEPS
) -> CheckReport:
    """Run every contract check on environments built by ``env_factory`` (called once per instance needed)."""
    ctx = _Context(env_factory, [int(s) for s in seeds], max_steps)
    if not ctx.seeds:
        raise ValueError("check_env needs at least one seed")
    report = CheckReport(name)
    construct = _run(_Check("construct", "the factory builds a ludus Env", _check_construct), ctx)
    report.results.append(construct)
    if construct.ok:  # without an instance every other check would repeat the same error
        report.results.extend(_run(check, ctx) for check in CHECKS)
    return report


def check_env_by_name(
    name: str, *, seeds: Iterable[int] = range(5), max_steps: int = MAX_STEPS, **env_kwargs: Any
) -> CheckReport:
    """Check the environment registered as ``name``. An unknown name raises :class:`UnknownEnvError`
    (a typo, not a contract failure); code that fails to load is reported as a failed "load" check."""
    try:
        make = factory(name, env_kwargs)
    except EnvLoadError as exc:
        return CheckReport(name, [CheckResult("load", False, str(exc))])
    return check_env(make, name=name, seeds=seeds, max_steps=max_steps)


def format_report(report: CheckReport) -> str:
    """Plain words, one line per check, and a verdict line."""
    lines = [f"ludus check {report.env}"]
    for r in report.results:
        if r.ok:
            lines.append(f"✓ {r.detail}")
        else:
            lines.append(f"{'!' if r.level == 'warning' else '✗'} {r.name}: {r.detail}")
    passed = sum(r.ok for r in report.results)
    counts = f"{passed} passed, {len(report.failures)} failed, {len(report.warnings)} warning(s)"
    verdict = "meets the environment contract" if report.ok else "does NOT meet the environment contract"
    lines.append(f"{counts}: {report.env} {verdict}")
    return "\n".join(lines)
