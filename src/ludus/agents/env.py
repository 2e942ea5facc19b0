"""``AgentEnv``: an agent you already have — written against the ``openai`` client — trained as it is.

The agent runs as a black box (:mod:`ludus.agents.runner`: a Python callable or a command) with
its OpenAI client pointed at the process's agent gateway (:mod:`ludus.agents.gateway`) under a
key of its own episode. Each model call it makes is one turn of the episode, in the ordinary
``reset``/``step`` contract, so the rollout engine needs nothing new:

* ``reset`` starts the agent and returns its first call's conversation and tools;
* the engine samples the policy's reply as for any environment (its tokens and behaviour
  log-probs recorded as sampled) and passes it to ``step``, which hands it to the waiting call
  and returns the agent's next call (only the messages it added, or, when the agent rewrote its
  history, the whole conversation, flagged ``history_rewritten``);
* when the agent returns, its outcome is graded (:meth:`AgentEnv.grade`): by default its answer
  by the wrapped environment's own grader (``env="sql"``), by a rubric (``rubric=[...]``), or by
  a subclass that reads the files it wrote or the state it changed.

Who is to blame, always stated: an agent that ends or crashes before its first model call did
nothing the policy caused (``infra_error``, masked); one that crashes after calls may have been
broken by the policy's replies (status ``agent_error``, reward 0). Limits: ``cpu_limit_s`` of
the agent's own CPU time (status ``timeout``); ``timeout_s`` of wall-clock time between two
model calls with the CPU limit not reached is a hang or a slow dependency, not the policy's
doing (``infra_error``). The time the agent waits for the policy counts in neither.
"""

from __future__ import annotations

import queue
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ludus.agents.gateway import AgentGateway, EpisodeLine, PendingCall
from ludus.agents.runner import AgentContext, AgentOutcome, AgentRun, CallableRun, CommandRun
from ludus.agents.sandboxed import SandboxedCommandRun, agent_limits, check_sandbox, read_files
from ludus.core.env import Env, SingleTurnEnv, Split, TaskSource
from ludus.core.lazy import import_target
from ludus.core.registry import factory as env_factory
from ludus.core.types import InfraError, Message, Observation, Score, Status, StepResult, Task
from ludus.serve.openai_front import OpenAIError

AGENT_ERROR = "agent_error"  # the agent crashed after the policy had replied to it
POLL_S = 0.25  # how often a waiting episode looks at its agent's CPU time


class _Ended:
    """The agent's run ended (an event in the line's queue, after its last call), or was ended
    for using its CPU time (``timed_out``)."""

    def __init__(self, outcome: AgentOutcome, timed_out: bool = False):
        self.outcome, self.timed_out = outcome, timed_out or outcome.timed_out


class AgentEnv(SingleTurnEnv):
    """An agent trained as it is (see the module docstring).

    ``agent``: a Python agent, ``"module:function"`` or the callable itself, called as
    ``agent(context)`` with an :class:`~ludus.agents.runner.AgentContext` (sync or async; what it
    returns is its answer). ``command``: an agent as a command (a list of arguments, or one string
    split as a shell would): the task comes as JSON on stdin and in ``$LUDUS_TASK_FILE``, its
    OpenAI client finds ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``, and what it prints is its
    answer; it starts in the directory the environment was made in, and ``$LUDUS_WORKDIR`` is
    its own empty directory. Exactly one of the two.

    ``env`` and ``env_args``: the environment whose tasks the agent gets and whose grader grades
    its answer (``"sql"``, ``"math"``…); ``share_info``: the keys of a task's ``info`` the agent
    may read (``["db"]`` for ``sql``: the database file it queries itself) — nothing else of the
    task leaves, never its answer. ``max_turns``: model calls per episode.

    ``sandbox``: run the command in the sandbox (:mod:`ludus.agents.sandboxed`), its only network
    the endpoint; ``sandbox_files``: the files and folders (relative to where the environment is
    made) copied into its directory, where it starts; ``sandbox_limits``: fields of
    :class:`~ludus.sandbox.Limits` (memory, processes, output…) other than its time."""

    name: ClassVar[str] = "agent"
    description: ClassVar[str] = "an agent written against the OpenAI client, trained as it is"
    requires: ClassVar[Mapping[str, str]] = {
        "fastapi": "pip install 'ludus[serve]'",
        "uvicorn": "pip install 'ludus[serve]'",
    }
    grades_through_score: ClassVar[bool] = True

    def __init__(
        self,
        agent: str | Callable[[AgentContext], Any] | None = None,
        *,
        command: str | Sequence[str] | None = None,
        env: str | None = None,
        env_args: Mapping[str, Any] | None = None,
        share_info: Sequence[str] = (),
        max_turns: int = 16,
        cpu_limit_s: float = 60.0,
        timeout_s: float = 120.0,
        sandbox: bool = False,
        sandbox_files: Sequence[str] = (),
        sandbox_limits: Mapping[str, Any] | None = None,
        tasks: TaskSource | None = None,
    ):
        if (agent is None) == (command is None):
            raise ValueError("AgentEnv needs exactly one of agent= (a Python callable) and command= (a command)")
        if isinstance(agent, str):
            try:
                agent = import_target(agent)
            except (ImportError, AttributeError, ValueError) as exc:
                raise ValueError(
                    f"agent={agent!r} names no importable object ({type(exc).__name__}: {exc}); give "
                    "'module:function' with the module on the Python path (PYTHONPATH=. for a file here)"
                ) from None
        if agent is not None and not callable(agent):
            raise ValueError(f"agent= must be callable, got {agent!r}")
        if isinstance(command, str):
            command = shlex.split(command)
        if command is not None and (not command or not all(isinstance(part, str) for part in command)):
            raise ValueError(f"command= must be a non-empty list of strings, got {command!r}")
        if max_turns < 1 or cpu_limit_s <= 0 or timeout_s <= 0:
            raise ValueError("max_turns, cpu_limit_s and timeout_s must be positive")
        self.agent, self.command = agent, None if command is None else list(command)
        self.cwd = Path.cwd()  # where a command starts: its relative paths mean what they meant here
        self.share_info = tuple(share_info)
        self.max_turns, self.cpu_limit_s, self.timeout_s = max_turns, cpu_limit_s, timeout_s
        if not sandbox and (sandbox_files or sandbox_limits):
            raise ValueError("sandbox_files and sandbox_limits are for sandbox=True")
        if sandbox and command is None:
            raise ValueError("sandbox=True runs a command= in the sandbox; a Python agent= runs in this process")
        self.sandbox_limits = None
        self.sandbox_files: dict[str, bytes] = {}
        if sandbox:
            check_sandbox()
            self.sandbox_limits = agent_limits(
                sandbox_limits, cpu_s=cpu_limit_s, timeout_s=timeout_s, max_turns=max_turns
            )
            self.sandbox_files = read_files(list(sandbox_files), self.cwd)
        self.graded: Env | None = None if env is None else env_factory(env, dict(env_args or {}))()
        super().__init__(tasks)
        self._line: EpisodeLine | None = None
        self._run: AgentRun | None = None
        self._pending: PendingCall | None = None
        self._workdir: Path | None = None
        self._calls = 0

    # ---- tasks and grading: the wrapped environment's, unless a subclass says otherwise ----------
    def default_tasks(self, split: Split = "train") -> TaskSource:
        if self.graded is None:
            return super().default_tasks(split)
        return self.graded.task_source(split)

    def reference(self, task: Task) -> str | None:
        return None if self.graded is None else self.graded.reference(task)

    def cheats(self, task: Task) -> Mapping[str, list[Message]]:
        """The wrapped environment's own cheats, played as replies to the agent's calls."""
        return {} if self.graded is None else self.graded.cheats(task)

    def agent_task(self, task: Task) -> dict[str, Any]:
        """The task as the agent sees it: its id, its prompt and the shared ``info`` keys."""
        info = {key: task.info[key] for key in self.share_info if key in task.info}
        return {"id": task.id, "prompt": task.prompt, "info": info}

    def grade(self, task: Task, outcome: AgentOutcome) -> Score:
        """The episode's score from how the agent ended. By default its answer goes to
        :meth:`score`; override to grade the files in ``outcome.workdir`` or a state it changed."""
        if not outcome.answer:
            return Score.zero(Status.NO_ANSWER, "the agent returned no answer")
        return self.score(task, outcome.answer)

    def score(self, task: Task, completion: str) -> Score:
        """The wrapped environment's grade of the agent's answer, as if the policy had replied it."""
        if self.graded is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no grader: pass env= (the environment whose grader grades the "
                "answer), rubric=[...], or override grade()"
            )
        result = self.graded.step(Message("assistant", completion))
        if result.score is None:
            return Score.zero(Status.NO_ANSWER, "the graded environment wanted more turns than the agent's answer")
        return result.score

    # ---- the episode ----------------------------------------------------------------------------
    def begin(self, task: Task) -> Observation:
        self._stop("a new episode started")
        if self.graded is not None:
            self.graded.reset(task, self.episode_seed)  # its resources (a database file) exist from here on
        self._calls = 0
        self._line = AgentGateway.shared().open()
        self._workdir = Path(tempfile.mkdtemp(prefix="ludus-agent-"))
        context = AgentContext(self.agent_task(task), self._line.base_url, self._line.key, self._workdir)
        line = self._line
        on_end = lambda outcome: line.events.put(_Ended(outcome))  # noqa: E731
        if self.agent is not None:
            self._run = CallableRun(self.agent, context, on_end)
        elif self.sandbox_limits is not None:
            assert self.command is not None
            self._run = SandboxedCommandRun(self.command, context, on_end, self.sandbox_files, self.sandbox_limits)
        else:
            assert self.command is not None
            self._run = CommandRun(self.command, context, on_end, self.cwd)
        event = self._next_event()
        if isinstance(event, _Ended):
            self._stop("the agent ended")
            what = f"failed: {event.outcome.error}" if event.outcome.error else "finished"
            raise InfraError(f"the agent {what} before calling the model, so nothing in it is the policy's doing")
        return Observation(list(event.call.messages), list(event.call.tools))

    def transition(self, action: Message) -> StepResult:
        assert self._pending is not None and self.task is not None
        _name_tool_calls(action, self.turn)
        self._pending.answer(action)
        self._pending = None
        event = self._next_event()
        if isinstance(event, _Ended):
            outcome = event.outcome
            if outcome.infra_failure:
                self._stop("the agent's run failed")
                raise InfraError(f"{outcome.error}, after {self._calls} model calls: not the policy's doing")
            if event.timed_out:
                score = Score.zero(Status.TIMEOUT, f"{outcome.error} after {self._calls} model calls")
            elif outcome.error is not None:
                score = Score.zero(AGENT_ERROR, f"the agent failed after {self._calls} model calls: {outcome.error}")
            else:
                score = self.grade(self.task, outcome)  # before its working directory goes
            self._stop("the agent ended")
            info = {"agent_calls": self._calls, "agent_cpu_s": round(outcome.cpu_s, 3)}
            return StepResult(Observation([]), score.value, terminated=True, score=score, info=info)
        if self.turn + 1 >= self.max_turns:
            self._stop(f"the episode's limit of {self.max_turns} model calls was reached")
            score = Score.zero(Status.TRUNCATED, f"the agent made more than {self.max_turns} model calls")
            return StepResult(Observation([]), 0.0, truncated=True, score=score, info={"agent_calls": self._calls})
        return self._observed(event.call.messages, event.call.tools, action)

    def _observed(self, messages: list[Message], tools: list[Any], action: Message) -> StepResult:
        """The agent's next call as a step: what it added after the reply, or its whole history
        when what it sent back is not the conversation so far followed by the reply."""
        known = [*self.messages, action]
        if len(messages) > len(known) and _same(messages[: len(known)], known):
            return StepResult(Observation(list(messages[len(known) :]), list(tools)))
        return StepResult(Observation(list(messages), list(tools)), history_rewritten=True)

    def _next_event(self) -> PendingCall | _Ended:
        """Wait for the agent's next model call or its end, within its limits."""
        assert self._line is not None and self._run is not None
        started = time.monotonic()
        while True:
            try:
                event = self._line.events.get(timeout=POLL_S)
            except queue.Empty:
                cpu = self._run.cpu_s()
                if cpu >= self.cpu_limit_s:
                    self._run.stop()
                    error = f"the agent used its {self.cpu_limit_s:g} s of CPU time"
                    return _Ended(AgentOutcome(None, error, self._workdir or Path(), cpu_s=cpu), timed_out=True)
                if time.monotonic() - started >= self.timeout_s:
                    self._stop("the agent took too long")
                    raise InfraError(
                        f"the agent neither called the model nor ended within {self.timeout_s:g} s and used only "
                        f"{cpu:.2f} s of CPU: a hang or a slow dependency, not the policy's doing"
                    ) from None
                continue
            if isinstance(event, PendingCall):
                self._calls += 1
                self._pending = event
            return event

    def _stop(self, reason: str) -> None:
        """End the running agent, if any: refuse its calls, stop its process, remove its files."""
        if self._pending is not None:
            self._pending.refuse(OpenAIError(403, f"this episode has ended ({reason})", "episode_ended"))
            self._pending = None
        if self._line is not None:
            self._line.close(f"this episode has ended ({reason})")
            self._line = None
        if self._run is not None:
            self._run.stop()
            self._run = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def close(self) -> None:
        self._stop("the environment was closed")
        if self.graded is not None:
            self.graded.close()


def _name_tool_calls(action: Message, turn: int) -> None:
    """Give the reply's tool calls ids (``call_<turn>_<i>``) where the policy wrote none: the
    agent answers each by its id, and sends them back in its history."""
    for index, call in enumerate(action.tool_calls):
        if not call.id:
            call.id = f"call_{turn}_{index}"


def _same(sent: Sequence[Message], known: Sequence[Message]) -> bool:
    """Whether the agent's messages are the conversation as the episode knows it."""
    return all(a.to_dict() == b.to_dict() for a, b in zip(sent, known, strict=True))
