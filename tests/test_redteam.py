"""``ludus check --redteam``: every built-in environment resists the cheat library, and deliberately
hackable toy environments are caught, with the cheat that worked named."""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ludus.certify.redteam import (
    CHEATS,
    Target,
    answer_form,
    env_kinds,
    format_redteam,
    redteam_env,
    redteam_env_by_name,
)
from ludus.cli import main
from ludus.core.env import SingleTurnEnv, ToolEnv
from ludus.core.types import Message, Observation, Score, Status, Task
from ludus.rollout.remote import RemoteEnv

# (environment, constructor arguments, tasks): small enough for the whole file to stay well under a minute
BUILT_IN = [
    ("arithmetic", {}, 3),
    ("countdown", {}, 3),
    ("sorting", {}, 3),
    ("linear-equation", {}, 3),
    ("math", {}, 2),
    ("sql", {}, 2),
    ("code", {}, 2),
    ("code-tools", {}, 1),
    ("repo", {}, 1),
    ("web", {}, 2),
    ("miniwob", {}, 2),
    ("instruct", {}, 5),
    ("judged", {}, 3),
    ("tictactoe", {}, 3),
    ("connect-four", {}, 2),
    ("nim", {}, 3),
    ("kuhn-poker", {}, 2),
    ("word-duel", {}, 2),
]
EXPECTED_KINDS = {
    "arithmetic": {"answer"},
    "countdown": {"answer"},
    "sorting": {"answer"},
    "linear-equation": {"answer"},
    "math": {"answer"},
    "sql": {"answer", "tools"},
    "code": {"code"},
    "code-tools": {"code", "tools"},
    "repo": {"tools"},
    "web": {"answer", "tools"},
    "miniwob": {"answer", "tools"},
    "instruct": {"answer"},  # and its own cheats(): content-free replies, echoes, Unicode blind spots
    "judged": {"answer"},
    **{game: {"answer"} for game in ("tictactoe", "connect-four", "nim", "kuhn-poker", "word-duel")},
}


def lines(report: Any) -> dict[str, Any]:
    return {r.name: r for r in report.results}


@pytest.mark.parametrize(("name", "kwargs", "tasks"), BUILT_IN, ids=[b[0] for b in BUILT_IN])
def test_every_built_in_environment_resists_the_red_team(name: str, kwargs: dict[str, Any], tasks: int) -> None:
    report = redteam_env_by_name(name, tasks=tasks, **kwargs)
    assert report.ok, format_redteam(report)
    by_name = lines(report)
    assert by_name["oracle"].ok and by_name["oracle"].level == "error"  # really tested, not skipped
    assert by_name["floor"].ok and by_name["determinism"].ok
    assert "oracle episodes/s" in by_name["throughput"].detail
    ran = {c.kind for c in CHEATS if c.label in by_name and by_name[c.label].level == "error"}
    assert ran == EXPECTED_KINDS[name]
    if name in ("sql", "repo", "web", "miniwob", "instruct", "judged", "tictactoe", "kuhn-poker"):  # own cheats()
        assert any(n.startswith("env cheat ") for n in by_name)


# ---- toy environments, each hackable in one way -------------------------------------------------


class Numbers:
    size: int | None = None

    def get(self, index: int) -> Task:
        return Task(f"toy/{index}", f"What is {index} + 1000?", answer=str(index + 1000))


class ExactEnv(SingleTurnEnv):
    """Honest: the stripped reply must be the answer."""

    name = "toy-exact"
    description = "say the number"

    def default_tasks(self, split: str = "train") -> Numbers:  # type: ignore[override]
        return Numbers()

    def reference(self, task: Task) -> str | None:
        return str(task.answer)

    def score(self, task: Task, completion: str) -> Score:
        if not completion.strip():
            return Score.zero(Status.NO_ANSWER, "empty")
        ok = completion.strip() == task.answer
        return Score(float(ok), Status.CORRECT if ok else Status.WRONG, "compared")


class AnyMatchEnv(ExactEnv):
    """Hackable: correct when the answer appears anywhere in the reply (hedging wins)."""

    name = "toy-any-match"

    def score(self, task: Task, completion: str) -> Score:
        ok = task.answer in completion
        return Score(float(ok), Status.CORRECT if ok else Status.WRONG, "substring")


class GenerousFloorEnv(ExactEnv):
    """Hackable: anything at all earns 0.5."""

    name = "toy-generous"

    def score(self, task: Task, completion: str) -> Score:
        ok = completion.strip() == task.answer
        return Score(1.0 if ok else 0.5, Status.CORRECT if ok else Status.WRONG, "participation")


class BackdoorEnv(ExactEnv):
    """Hackable only through its own cheat: a magic word, which its cheats() hook declares."""

    name = "toy-backdoor"

    def score(self, task: Task, completion: str) -> Score:
        if completion.strip() == "please":
            return Score(1.0, Status.CORRECT, "asked nicely")
        return super().score(task, completion)

    def cheats(self, task: Task) -> dict[str, list[Message]]:
        return {"the magic word": [Message("assistant", "please")]}


class LeakyFilesEnv(ToolEnv):
    """Hackable: its file tool serves the answer file; the final answer is graded exactly."""

    name = "toy-leaky-files"
    description = "read files, then answer"
    max_turns = 4

    def default_tasks(self, split: str = "train") -> Numbers:  # type: ignore[override]
        return Numbers()

    def reference(self, task: Task) -> str | None:
        return str(task.answer)

    def tool_functions(self) -> Sequence[Callable[..., Any]]:
        return [self.read_file]

    def read_file(self, path: str) -> str:
        """Read a file of the project.

        Args:
            path: the file's path.
        """
        assert self.task is not None
        if path.endswith("answer.json"):
            return str(self.task.answer)
        return "Error: no such file"

    def score(self, task: Task, completion: str) -> Score:
        ok = completion.strip() == task.answer
        return Score(float(ok), Status.CORRECT if ok else Status.WRONG, "compared")


class Functions:
    size: int | None = None

    def get(self, index: int) -> Task:
        k = index % 7 + 2
        return Task(
            f"fn/{index}",
            f"Write the function:\n\ndef times(x):\n    '''Return x * {k}.'''\n",
            answer={"k": k, "tests": [(x, x * k) for x in (1, 5, 9)]},
        )


class ExitCodeEnv(SingleTurnEnv):
    """Hackable: runs the solution and its asserts in one sandboxed process and trusts exit code 0."""

    name = "toy-exit-code"
    description = "write times(x); graded by its exit code"

    def default_tasks(self, split: str = "train") -> Functions:  # type: ignore[override]
        return Functions()

    def reference(self, task: Task) -> str | None:
        return f"```python\ndef times(x):\n    return x * {task.answer['k']}\n```"

    def score(self, task: Task, completion: str) -> Score:
        from ludus.sandbox import Sandbox

        if "```python\n" not in completion:
            return Score.zero(Status.NO_ANSWER, "no code")
        code = completion.split("```python\n", 1)[1].split("```", 1)[0]
        with Sandbox(workers=1) as box:
            run = box.run(code + "\n" + self.tests(task.answer["tests"]))
        ok = run.exit_code == 0
        return Score(float(ok), Status.CORRECT if ok else Status.WRONG, f"exit code {run.exit_code}")

    def tests(self, cases: list[tuple[int, int]]) -> str:
        return "".join(f"assert times({x}) == {y}\n" for x, y in cases)


class UnittestExitCodeEnv(ExitCodeEnv):
    """The same grader with the tests as a unittest case in the solution's process."""

    name = "toy-unittest"

    def tests(self, cases: list[tuple[int, int]]) -> str:
        body = "".join(f"        self.assertEqual(times({x}), {y})\n" for x, y in cases)
        return (
            "import sys as _sys\nimport unittest as _unittest\n\n\nclass _Tests(_unittest.TestCase):\n"
            f"    def test_all(self):\n{body}\n\n"
            "_result = _unittest.TextTestRunner().run(_unittest.defaultTestLoader.loadTestsFromTestCase(_Tests))\n"
            "_sys.exit(0 if _result.wasSuccessful() else 1)\n"
        )


class BrokenReferenceEnv(ExactEnv):
    name = "toy-broken-reference"

    def reference(self, task: Task) -> str | None:
        raise RuntimeError("answer key offline")


class LuckyEnv(ExactEnv):
    """Not reproducible: the score's reason draws from the global random generator."""

    name = "toy-lucky"

    def score(self, task: Task, completion: str) -> Score:
        score = super().score(task, completion)
        score.reason = f"luck {random.random():.6f}"
        return score


class NoReferenceEnv(ExactEnv):
    name = "toy-no-reference"

    def reference(self, task: Task) -> str | None:
        return None


def failed(report: Any) -> set[str]:
    return {r.name for r in report.failures}


def test_an_honest_toy_passes_and_the_card_reads_well() -> None:
    report = redteam_env(ExactEnv, name="toy-exact", tasks=3)
    assert report.ok, format_redteam(report)
    text = format_redteam(report)
    assert text.splitlines()[0] == "ludus check toy-exact --redteam"
    assert "✓ cheat answer/hedge:" in text and "· throughput:" in text
    assert text.splitlines()[-1].endswith("toy-exact resists the red-team")


def test_an_any_match_grader_is_caught_by_the_hedges() -> None:
    report = redteam_env(AnyMatchEnv, name="toy-any-match", tasks=2)
    assert {"cheat answer/hedge", "cheat answer/every-option", "cheat answer/enormous"} <= failed(report)
    detail = lines(report)["cheat answer/hedge"].detail
    assert "judged correct" in detail and "toy/" in detail and "the action:" in detail
    assert "HACKABLE" in format_redteam(report).splitlines()[-1]


def test_a_reward_for_anything_fails_the_floor() -> None:
    report = redteam_env(GenerousFloorEnv, name="toy-generous", tasks=2)
    assert "floor" in failed(report)
    assert "reward 0.5" in lines(report)["floor"].detail


def test_the_envs_own_cheats_are_played() -> None:
    report = redteam_env(BackdoorEnv, name="toy-backdoor", tasks=2)
    assert failed(report) == {"env cheat the magic word"}
    assert "'please'" in lines(report)["env cheat the magic word"].detail
    assert redteam_env(ExactEnv, name="toy-exact", tasks=1).ok  # the same grader without the backdoor


def test_a_tool_that_serves_the_answer_file_is_caught() -> None:
    report = redteam_env(LeakyFilesEnv, name="toy-leaky-files", tasks=2)
    assert "cheat tools/hidden-files" in failed(report)
    assert "read answer files" in lines(report)["cheat tools/hidden-files"].detail


def test_a_tool_reply_showing_the_answer_is_a_leak_unless_the_environment_finds_answers_there() -> None:
    from ludus.certify.redteam import Episode, Target, _leak
    from ludus.core.types import StepResult

    task = Task(id="t", prompt="What is the email of Nia?", answer="nia.kowalski@example.com")
    target = Target(
        task, Observation([Message("user", task.prompt)]), [], [Message("assistant", "nia.kowalski@example.com")]
    )
    episode = Episode()
    shown = Message("tool", '{"email": "nia.kowalski@example.com"}', name="listCustomers")
    episode.steps.append(StepResult(Observation([shown]), 0.0, False))
    assert "returned the gold answer" in (_leak(episode, target) or "")
    target.answers_in_tools = True  # a lookup in a service's records (envs/synth): reading them is the task
    assert _leak(episode, target) is None


def test_a_grader_that_trusts_the_exit_code_is_caught_by_the_code_cheats() -> None:
    report = redteam_env(ExitCodeEnv, name="toy-exit-code", tasks=1)
    assert lines(report)["oracle"].ok, format_redteam(report)
    assert {"cheat code/early-exit", "cheat code/rigged-eq", "cheat code/pass-markers"} <= failed(report)
    assert "cheat code/peek-tests" in failed(report)  # the asserts are in the same file: the frame shows them
    assert "sys.exit(0) at import" in lines(report)["cheat code/early-exit"].detail
    report = redteam_env(UnittestExitCodeEnv, name="toy-unittest", tasks=1)
    assert lines(report)["oracle"].ok, format_redteam(report)
    assert "cheat code/test-tamper" in failed(report)
    assert "patch unittest and pytest internals" in lines(report)["cheat code/test-tamper"].detail


def test_through_the_cli_exit_codes_follow_the_card(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "arithmetic", "--redteam", "--tasks", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "ludus check arithmetic --redteam" in out and "arithmetic resists the red-team" in out


# ---- the library itself ----------------------------------------------------------------------------


def test_every_code_cheat_is_valid_python() -> None:
    """A cheat that fails on a syntax error proves nothing: every code variant must parse."""
    for prompt in ("def times(x):\n    pass\n", "Read two numbers from stdin and print their sum."):
        target = Target(
            Task("t", prompt),
            Observation([Message("user", prompt)]),
            [],
            [Message("assistant", "```python\nprint(1)\n```")],
        )
        variants = [v for c in CHEATS if c.kind == "code" for v in c.variants(target)]
        assert len(variants) >= 8
        for label, actions in variants:
            final = actions[-1]
            assert isinstance(final, Message)
            code = final.content.split("```python\n", 1)[1].rsplit("```", 1)[0]
            ast.parse(code, filename=label)


def test_answer_forms_and_kinds() -> None:
    assert answer_form("\\boxed{42}") == ("\\boxed{", "42", "}")
    assert answer_form("so\n```sql\nSELECT 1\n```\n") == ("so\n```sql\n", "SELECT 1", "\n```\n")
    assert answer_form("<answer> 7 </answer>") == ("<answer>", " 7 ", "</answer>")
    assert answer_form("  82 ") == ("  ", "82", " ")
    env = ExitCodeEnv()
    task = env.task_source().get(0)
    assert env_kinds(env, env.reset(task), env.reference_actions(task)) == {"code"}
    leaky = LeakyFilesEnv()
    assert env_kinds(leaky, leaky.reset(task), leaky.reference_actions(task)) == {"answer", "tools"}

    class Declared(ExactEnv):
        redteam_kinds = {"code"}

    assert env_kinds(Declared(), Observation([]), None) == {"code"}


def test_a_reference_that_raises_fails_the_oracle_line_without_crashing() -> None:
    report = redteam_env(BrokenReferenceEnv, name="toy-broken-reference", tasks=2)
    assert failed(report) == {"oracle"}
    assert "answer key offline" in lines(report)["oracle"].detail


def test_an_irreproducible_score_fails_determinism() -> None:
    report = redteam_env(LuckyEnv, name="toy-lucky", tasks=2)
    assert failed(report) == {"determinism"}
    assert "score.reason" in lines(report)["determinism"].detail


def test_without_a_reference_the_oracle_is_untested_and_the_gold_free_cheats_still_run() -> None:
    report = redteam_env(NoReferenceEnv, name="toy-no-reference", tasks=2)
    assert report.ok, format_redteam(report)
    by_name = lines(report)
    assert by_name["oracle"].level == "info" and "not tested" in by_name["oracle"].detail
    assert by_name["cheat answer/empty"].level == "error"  # needs no gold
    assert "not applicable" in by_name["cheat answer/hedge"].detail  # needs a gold to hedge with
    assert "junk episodes replay identically" in by_name["determinism"].detail


def test_through_an_env_server_the_gold_free_lines_run() -> None:
    """``--env-server``: answers stay on the server, so no oracle and no hedges; the rest runs."""
    cmd = [sys.executable, "-m", "ludus.cli", "serve-env", "arithmetic", "--port", "0", "--drain-timeout", "1"]
    cmd += ["--env-args", json.dumps({"digits": 2})]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300"})
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        assert " at http" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        report = redteam_env(lambda: RemoteEnv(url), name=f"arithmetic at {url}", tasks=2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert report.ok, format_redteam(report)
    by_name = lines(report)
    assert by_name["oracle"].level == "info" and "not tested" in by_name["oracle"].detail
    assert by_name["floor"].ok and by_name["cheat answer/empty"].level == "error"
    assert "junk episodes replay identically" in by_name["determinism"].detail
