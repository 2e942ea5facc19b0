"""Logged episodes as training data: Ludus's own trajectory files and OpenAI-format conversations.

A log is a JSONL file (or a run folder, whose trajectory files are read: ``ludus.rollout.records``).
Each line is one episode, in either form:

* **a Ludus trajectory** — what ``ludus eval`` (``trajectories.jsonl``), a training run
  (``samples.jsonl``) and ``ludus proxy --out`` (``episodes.jsonl``) write: token ids and behaviour
  log-probs are recorded with every turn;
* **an OpenAI-format conversation** — ``{"messages": [...], "tools": [...], "reward": 1.0}``:
  chat messages as the OpenAI API takes them (``content`` a string or text parts, assistant
  ``tool_calls`` with JSON ``arguments``, ``tool`` messages with ``tool_call_id``); optional
  ``"task"`` (a Ludus task: ``id``, ``prompt``, ``answer``, ``info``) or ``"task_id"``, which
  groups attempts at one task (by default the messages before the first reply do), ``"env"``
  and ``"status"``. Without ``"reward"`` the episode needs a grader (``grade``: any Ludus
  environment re-grading it, ``ludus.rollout.rescore``).

Token ids are used where the line has them (a Ludus trajectory's turns); otherwise each assistant
message becomes a turn as the policy being trained writes it (``TrainablePolicy.turn_ids``), and
the trajectory's ``info["logged"]["tokens"]`` says ``"recomputed"``. Behaviour log-probs likewise:
``"recorded"``, or ``"recomputed"`` — computed by the policy at the start of training, which is
then taken as the behaviour policy (``recompute_logprobs``).

Nothing is dropped silently: a line that cannot be used is counted under its reason in
:class:`LogReport`, with its file and line number among the first errors shown. Every imported
trajectory gets ``policy_version = -1`` (not sampled by any version of the run's weights) and
``info["logged"]`` (its file and line, and what was recomputed).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ludus.core.types import Message, Score, Task, ToolCall, ToolSpec, Trajectory, Turn, chained_turns
from ludus.policies.base import TrainablePolicy
from ludus.rollout.records import (
    finite_number,
    load_json,
    malformed,
    shown,
    trajectory_files,
    trajectory_of,
    untrusted_lines,
)

LOGGED_VERSION = -1  # the policy_version of an imported trajectory: no version of this run sampled it
SHOWN_ERRORS = 20  # errors kept word for word; the rest are counted


class LogError(ValueError):
    """A line of a log that cannot be used, and why (one plain sentence)."""


@dataclass
class LogReport:
    """What an import read: lines, trajectories kept, lines skipped by reason, the first errors
    (``file:line: reason``), and how many trajectories had their tokens or log-probs recomputed."""

    lines: int = 0
    kept: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    recomputed_tokens: int = 0
    recomputed_logprobs: int = 0
    graded: int = 0

    def skip(self, where: str, reason: str) -> None:
        self.skipped[reason.split(":")[0]] += 1
        if len(self.errors) < SHOWN_ERRORS:
            self.errors.append(f"{where}: {shown(reason)}")  # the log's own text in it, made safe to print

    def summary(self) -> str:
        parts = [f"{self.kept} of {self.lines} logged episodes imported"]
        if self.graded:
            parts.append(f"{self.graded} graded")
        if self.recomputed_tokens:
            parts.append(f"{self.recomputed_tokens} tokenised by the policy")
        if self.recomputed_logprobs:
            parts.append(f"{self.recomputed_logprobs} with behaviour log-probs recomputed")
        text = ", ".join(parts)
        if self.skipped:
            text += "; skipped: " + ", ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "kept": self.kept,
            "skipped": dict(self.skipped),
            "errors": self.errors,
            "recomputed_tokens": self.recomputed_tokens,
            "recomputed_logprobs": self.recomputed_logprobs,
            "graded": self.graded,
        }


def log_files(paths: Sequence[str | Path]) -> list[Path]:
    """The JSONL files ``paths`` name: files as they are, run folders by their trajectory files."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = trajectory_files(path)
            if not found:
                raise FileNotFoundError(f"{path} holds no trajectory file (trajectories.jsonl, samples.jsonl, …)")
            files += found
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise ValueError(f"log {path} is not a file (a pipe or a device?): give a JSONL file or a run folder")
        else:
            raise FileNotFoundError(f"log {path} does not exist")
    return files


# ---- one line ---------------------------------------------------------------------------


def _text(content: Any, what: str) -> str:
    """An OpenAI message's content as text: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise LogError(f"unsupported content: {what} has a {kind!r} part (only text parts are read)")
            texts.append(part["text"])
        return "".join(texts)
    raise LogError(f"malformed message: {what}'s content is a {type(content).__name__}")


def _tool_call(call: Any, what: str) -> ToolCall:
    if not isinstance(call, dict):
        raise LogError(f"malformed tool call: {what} has a tool call that is not an object")
    function = call.get("function", call)  # OpenAI's {"type": "function", "function": {...}} or Ludus's own
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise LogError(f"malformed tool call: {what} has a tool call without a name")
    arguments, name = function.get("arguments", {}), function["name"]
    if isinstance(arguments, str):
        try:
            arguments = load_json(arguments.encode()) if arguments.strip() else {}
        except ValueError as exc:
            raise LogError(
                f"malformed tool call: {what} calls {name!r} with arguments that are not JSON ({exc})"
            ) from None
    if not isinstance(arguments, dict):
        raise LogError(f"malformed tool call: {what} calls {name!r} with arguments that are not an object")
    return ToolCall(name, arguments, str(call.get("id") or ""))


def openai_messages(raw: Any) -> list[Message]:
    """OpenAI chat messages as Ludus messages (``developer`` read as ``system``)."""
    if not isinstance(raw, list) or not raw:
        raise LogError("malformed messages: 'messages' must be a non-empty list")
    messages = []
    for k, m in enumerate(raw):
        what = f"message {k}"
        if not isinstance(m, dict):
            raise LogError(f"malformed message: {what} is not an object")
        role = "system" if m.get("role") == "developer" else m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise LogError(f"malformed message: {what} has role {m.get('role')!r}")
        calls = [_tool_call(c, what) for c in m.get("tool_calls") or []] if role == "assistant" else []
        tool_call_id = m.get("tool_call_id")
        messages.append(
            Message(
                role,
                _text(m.get("content"), what),
                tool_calls=calls,
                tool_call_id=str(tool_call_id) if tool_call_id is not None else None,
                name=m.get("name") if isinstance(m.get("name"), str) else None,
            )
        )
    return messages


def _task_of(row: dict[str, Any], messages: list[Message]) -> Task:
    """The row's task, or one named by the conversation before its first reply (so that attempts
    at one prompt form one group)."""
    if isinstance(row.get("task"), dict):
        try:
            return Task.from_dict(row["task"])
        except (TypeError, ValueError) as exc:
            raise LogError(f"malformed task: {exc}") from None
    first = next(k for k, m in enumerate(messages) if m.role == "assistant")
    context = [m.to_dict() for m in messages[:first]]
    task_id = row.get("task_id")
    if task_id is None:
        task_id = "logged-" + hashlib.sha256(json.dumps(context, sort_keys=True).encode()).hexdigest()[:16]
    prompt = next((m.content for m in reversed(messages[:first]) if m.role == "user"), "")
    return Task(str(task_id), prompt, info={"context": context})


def _reward_score(row: dict[str, Any]) -> Score | None:
    reward = row.get("reward")
    if reward is None:
        return None
    if not finite_number(reward):
        raise LogError(f"bad reward: 'reward' must be a finite number, got {reward!r}"[:200])
    status = row.get("status", "logged")
    if not isinstance(status, str):
        raise LogError(f"bad reward: 'status' must be a string, got {status!r}")
    return Score(float(reward), status=status, reason=str(row.get("reason", "the log's reward")))


def parse_line(raw: bytes) -> Trajectory:
    """One line of a log as a trajectory (tokens not filled in yet for a conversation)."""
    try:
        row = load_json(raw)
    except ValueError as exc:
        raise LogError(f"not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise LogError(f"not an episode: a JSON {type(row).__name__}, not an object")
    if "messages" not in row:
        raise LogError("not an episode: no 'messages'")
    if isinstance(row.get("task"), dict) and isinstance(row.get("turns"), list):  # a Ludus trajectory
        try:
            trajectory = trajectory_of(row)
        except ValueError as exc:
            raise LogError(f"malformed trajectory: {exc}") from None
        if not any(m.role == "assistant" for m in trajectory.messages):
            raise LogError("no reply: the episode has no assistant message")
        return trajectory
    messages = openai_messages(row["messages"])
    if not any(m.role == "assistant" for m in messages):
        raise LogError("no reply: the conversation has no assistant message")
    try:
        tools = [ToolSpec.from_dict(t) for t in row.get("tools") or []]
    except (TypeError, ValueError) as exc:
        raise LogError(f"malformed tools: {exc}") from None
    trajectory = Trajectory(
        _task_of(row, messages), messages, score=_reward_score(row), env=str(row.get("env", "")), tools=tools
    )
    problem = malformed(trajectory)
    if problem is not None:
        raise LogError(f"malformed episode: {problem}")
    return trajectory


# ---- tokens and log-probs -------------------------------------------------------------


def tokenise(trajectory: Trajectory, policy: TrainablePolicy) -> None:
    """Fill in a turn per assistant message, as ``policy`` writes it; the episode's reward on the
    last turn (where a Ludus trajectory keeps its final reward)."""
    turns = []
    for k, message in enumerate(trajectory.messages):
        if message.role == "assistant":
            prompt, completion = policy.turn_ids(trajectory.messages[:k], message, trajectory.tools)
            turns.append(Turn(prompt, completion, [], finish_reason="tool_calls" if message.tool_calls else "stop"))
    turns[-1].reward = trajectory.score.value if trajectory.score is not None else 0.0
    trajectory.turns = turns


def recompute_logprobs(
    trajectories: Sequence[Trajectory], policy: TrainablePolicy, temperature: float, batch: int = 64
) -> int:
    """Behaviour log-probs for every turn that has none, under ``policy`` as it is now (at the
    sampling ``temperature``, as a sampler records them). Returns how many trajectories got them.

    The turns that form one token sequence (:func:`~ludus.core.types.chained_turns`) are scored in
    one pass over it: a conversation of a thousand short turns costs one pass over its length, not
    a thousand passes over ever longer prompts (a line of kilobytes would otherwise cost minutes)."""
    rows: list[tuple[list[int], list[int], list[Turn]]] = []  # first prompt, the ids after it, its turns
    touched: dict[int, Trajectory] = {}
    for trajectory in trajectories:
        for run in chained_turns(trajectory.turns):
            turns = [trajectory.turns[k] for k in run]
            if all(len(turn.logprobs) == len(turn.completion_ids) for turn in turns):
                continue
            first, last = turns[0], turns[-1]
            rows.append((first.prompt_ids, [*last.prompt_ids, *last.completion_ids][len(first.prompt_ids) :], turns))
            touched[id(trajectory)] = trajectory
    policy.module.eval()
    with torch.no_grad():
        for lo in range(0, len(rows), batch):
            chunk = rows[lo : lo + batch]
            logp, _ = policy.token_logprobs(
                [prompt for prompt, _, _ in chunk], [rest for _, rest, _ in chunk], temperature
            )
            for row, (prompt, _, turns) in enumerate(chunk):
                for turn in turns:
                    if len(turn.logprobs) != len(turn.completion_ids):
                        start = len(turn.prompt_ids) - len(prompt)  # where the turn's completion is in the row
                        turn.logprobs = logp[row, start : start + len(turn.completion_ids)].tolist()
    for t in touched.values():
        t.info["logged"]["logprobs"] = "recomputed"
    return len(touched)


def _check_vocabulary(trajectory: Trajectory, policy: TrainablePolicy) -> None:
    """Recorded ids another model's tokenizer made would index past this one's vocabulary."""
    tokenizer = policy.tokenizer  # type: ignore[attr-defined] - every trainable policy has one
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else tokenizer.vocab_size
    if any(not 0 <= i < size for turn in trajectory.turns for i in (*turn.prompt_ids, *turn.completion_ids)):
        raise LogError(f"foreign tokens: recorded token ids outside this model's vocabulary of {size}")


# ---- a whole log --------------------------------------------------------------------------


def read_logs(
    paths: Sequence[str | Path],
    policy: TrainablePolicy | None = None,
    *,
    temperature: float = 1.0,
    grade: Callable[[Trajectory], Score] | None = None,
) -> tuple[list[Trajectory], LogReport]:
    """Every usable episode of the logs at ``paths`` and the report of what was read.

    With ``policy``, conversations without token ids are tokenised by it and turns without
    behaviour log-probs get them from it (those trajectories are marked); a turn that does not fit
    its context is a skipped line. ``grade`` scores episodes whose line has no reward (an
    ``infra_error`` from it is a skipped line: the grader failed, the episode says nothing)."""
    report = LogReport()
    kept: list[Trajectory] = []
    for path in log_files(paths):
        for line in untrusted_lines(path):
            report.lines += 1
            where = f"{path}:{line.number}"
            try:
                if line.cut:
                    raise LogError(f"too long: the line is over {len(line.raw):,} bytes")
                trajectory = parse_line(line.raw)
                recorded = bool(trajectory.turns) and all(turn.completion_ids for turn in trajectory.turns)
                if recorded and policy is not None:
                    _check_vocabulary(trajectory, policy)
                if trajectory.score is None:
                    if grade is None:
                        raise LogError("no reward: the line has no 'reward' and no grader was given")
                    trajectory.score = grade(trajectory)
                    report.graded += 1
                    if trajectory.score.is_infra_error:
                        raise LogError(f"grader failed: {trajectory.score.reason}")
                elif trajectory.score.is_infra_error:
                    raise LogError(f"infra_error: the episode was not graded ({trajectory.score.reason})")
                trajectory.info["logged"] = {
                    "file": str(path),
                    "line": line.number,
                    "tokens": "recorded" if recorded else "recomputed",
                    "logprobs": "recorded",
                }
                if not recorded and policy is not None:
                    tokenise(trajectory, policy)
                    report.recomputed_tokens += 1
            except LogError as exc:
                report.skip(where, str(exc))
                continue
            except ValueError as exc:  # a turn longer than the policy's context
                report.skip(where, f"does not fit the model: {exc}")
                continue
            trajectory.policy_version = LOGGED_VERSION
            kept.append(trajectory)
    if policy is not None:
        report.recomputed_logprobs = recompute_logprobs(kept, policy, temperature)
    report.kept = len(kept)
    return kept, report


def grouped(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Attempts at one task (same environment and task id) as one group, in first-seen order."""
    groups: dict[tuple[str, str], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.env, t.task.id), []).append(t)
    return list(groups.values())
