"""The Env base class enforces the episode invariants, so every environment gets them for free."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ludus.core.env import Env, EnvStateError, SingleTurnEnv, ToolEnv
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolCall


class Numbered:
    """A tiny endless task source: task i asks for i + 1."""

    size: int | None = None

    def get(self, index: int) -> Task:
        return Task(f"num/{index}", f"What is {index}+1?", answer=index + 1)


class EchoEnv(SingleTurnEnv):
    name = "echo"
    description = "answer with the number"
    system_prompt = "Reply with a number."

    def score(self, task: Task, completion: str) -> Score:
        if completion.strip() == str(task.answer):
            return Score(1.0, Status.CORRECT, "right")
        return Score.zero(Status.WRONG, f"expected {task.answer}")


class GuessEnv(ToolEnv):
    """Guess a per-episode secret with a ``probe`` tool, then answer it."""

    name = "guess"
    description = "find the secret number"
    max_turns = 4

    def begin(self, task: Task) -> Observation:
        self.secret = self.rng.randint(0, 99)
        self.probes = 0
        return super().begin(task)

    def tool_functions(self) -> Sequence[Callable[..., Any]]:
        return [self.probe]

    def probe(self, guess: int) -> str:
        """Compare a guess with the secret.

        Args:
            guess: the number to compare.
        """
        self.probes += 1
        return "higher" if guess < self.secret else "lower" if guess > self.secret else "equal"

    def score(self, task: Task, completion: str) -> Score:
        ok = completion.strip() == str(self.secret)
        return Score(float(ok), Status.CORRECT if ok else Status.WRONG, f"{self.probes} probes")


class CrashingEnv(EchoEnv):
    def score(self, task: Task, completion: str) -> Score:
        raise KeyError("grader state lost")


class GreedyEnv(EchoEnv):
    def score(self, task: Task, completion: str) -> Score:
        return Score(5.0, Status.CORRECT, "too generous")


class ScorelessEnv(EchoEnv):
    def transition(self, action: Message) -> StepResult:
        return StepResult(Observation([]), reward=1.0, terminated=True)


class ChattyEnv(EchoEnv):
    """Never ends on its own: only the turn limit stops it."""

    max_turns = 3

    def transition(self, action: Message) -> StepResult:
        return StepResult(Observation([Message("user", "go on")]), reward=0.1)


TASK = Task("t", "What is 2+1?", answer=3)


def test_single_turn_episode() -> None:
    env = EchoEnv()
    obs = env.reset(TASK)
    assert [m.role for m in obs.messages] == ["system", "user"]
    assert obs.messages[-1].content == "What is 2+1?"
    result = env.step("3")
    assert result.terminated and not result.truncated and result.done
    assert result.reward == 1.0
    assert result.score is not None and result.score.status == Status.CORRECT
    assert result.observation.messages == []
    assert [m.role for m in env.messages] == ["system", "user", "assistant"]
    assert env.done and env.turn == 1


def test_wrong_answer_is_scored_not_raised() -> None:
    env = EchoEnv()
    env.reset(TASK)
    result = env.step(Message("assistant", "four"))
    assert result.reward == 0.0 and result.score is not None and result.score.status == Status.WRONG


def test_reset_uses_task_source_by_seed() -> None:
    env = EchoEnv(tasks=Numbered())
    assert env.reset(seed=7).messages[-1].content == "What is 7+1?"
    assert env.task is not None and env.task.id == "num/7"
    assert env.reset().messages[-1].content == "What is 0+1?"


def test_reset_without_any_task_source_says_what_to_do() -> None:
    with pytest.raises(NotImplementedError, match="pass tasks=..."):
        EchoEnv().reset(seed=0)


def test_reset_rejects_non_task() -> None:
    with pytest.raises(TypeError, match="expects a ludus Task"):
        EchoEnv().reset({"id": "t", "prompt": "p"})  # type: ignore[arg-type]


def test_step_before_reset_and_after_done_raise() -> None:
    env = EchoEnv()
    with pytest.raises(EnvStateError, match="call reset"):
        env.step("3")
    env.reset(TASK)
    env.step("3")
    with pytest.raises(EnvStateError):
        env.step("3")
    env.reset(TASK)  # a new episode makes step legal again
    assert env.step("3").reward == 1.0


def test_step_rejects_non_assistant_messages() -> None:
    env = EchoEnv()
    env.reset(TASK)
    with pytest.raises(TypeError, match="assistant Message"):
        env.step(Message("user", "3"))


def call(name: str, **arguments: Any) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(name, arguments, id=f"c-{name}")])


def test_tool_env_tools_use_per_episode_state() -> None:
    env = GuessEnv()
    obs = env.reset(TASK, seed=1)
    assert [t.name for t in obs.tools] == ["probe"]
    assert obs.tools[0].parameters["required"] == ["guess"]
    secret = env.secret
    below = env.step(call("probe", guess=-1))
    assert not below.done and below.reward == 0.0
    reply = below.observation.messages[0]
    assert reply.role == "tool" and reply.tool_call_id == "c-probe" and reply.name == "probe"
    assert reply.content == "higher"
    assert env.step(call("probe", guess=secret)).observation.messages[0].content == "equal"
    final = env.step(str(secret))
    assert final.terminated and final.reward == 1.0
    assert final.score is not None and final.score.reason == "2 probes"

    env.reset(TASK, seed=1)  # state belongs to the episode: same seed, same secret, probes reset
    assert env.secret == secret and env.probes == 0
    assert [m.role for m in env.messages] == ["user"]


def test_tool_env_secret_depends_on_seed_not_on_history() -> None:
    secrets = set()
    for seed in range(6):
        env = GuessEnv()
        env.reset(TASK, seed=seed)
        secrets.add(env.secret)
        assert GuessEnv().reset(TASK, seed=seed) == env.reset(TASK, seed=seed)
    assert len(secrets) > 1


def test_tool_env_errors_are_shown_to_the_model() -> None:
    env = GuessEnv()
    env.reset(TASK)
    missing = env.step(call("peek"))
    assert missing.observation.messages[0].content == "Error: no tool named 'peek'; available: probe"
    bad = env.step(call("probe", guess="ten"))
    assert bad.observation.messages[0].content.startswith("Error: argument 'guess' of probe must be integer")
    assert not bad.done


def test_truncation_after_max_turns() -> None:
    env = GuessEnv()
    env.reset(TASK)
    results = [env.step(call("probe", guess=50)) for _ in range(GuessEnv.max_turns)]
    assert not any(r.done for r in results[:-1])
    last = results[-1]
    assert last.truncated and not last.terminated
    assert last.score is not None and last.score.status == Status.TRUNCATED and last.score.value == 0.0
    with pytest.raises(EnvStateError):
        env.step("50")


def test_non_terminating_transition_is_cut_off_at_max_turns() -> None:
    env = ChattyEnv()
    env.reset(TASK)
    rewards = []
    while not env.done:
        result = env.step("hm")
        rewards.append(result.reward)
    assert env.turn == 3 and rewards == [0.1, 0.1, 0.1]
    assert result.truncated and result.score is not None and result.score.status == "truncated"


@pytest.mark.parametrize(
    ("env_cls", "reason"),
    [
        (CrashingEnv, "CrashingEnv.transition raised KeyError: 'grader state lost'"),
        (GreedyEnv, "reward 5.0 is outside the declared reward_range (0.0, 1.0)"),
        (ScorelessEnv, "the episode ended without a Score"),
    ],
)
def test_environment_bugs_become_infra_error(env_cls: type[Env], reason: str) -> None:
    env = env_cls()
    env.reset(TASK)
    result = env.step("3")
    assert result.terminated and result.reward == 0.0
    assert result.score is not None and result.score.status == Status.INFRA_ERROR
    assert result.score.is_infra_error
    assert result.score.reason == reason
    assert env.done


def test_async_reset_and_step() -> None:
    async def episode() -> tuple[Observation, StepResult]:
        env = EchoEnv()
        obs = await env.areset(TASK, seed=3)
        return obs, await env.astep("3")

    obs, result = asyncio.run(episode())
    assert obs.messages[-1].content == "What is 2+1?"
    assert result.terminated and result.reward == 1.0


def test_async_episodes_run_concurrently_on_separate_instances() -> None:
    async def many() -> list[float]:
        envs = [EchoEnv(tasks=Numbered()) for _ in range(8)]
        await asyncio.gather(*(e.areset(seed=i) for i, e in enumerate(envs)))
        results = await asyncio.gather(*(e.astep(str(i + 1)) for i, e in enumerate(envs)))
        return [r.reward for r in results]

    assert asyncio.run(many()) == [1.0] * 8


def test_async_step_before_reset_raises() -> None:
    with pytest.raises(EnvStateError):
        asyncio.run(EchoEnv().astep("3"))
