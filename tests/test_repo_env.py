"""The SWE-style repository environment: safe file tools, commands in the sandbox, grading,
the procedural bug injector (checked in the sandbox for every bug), the oracle through the
real rollout engine, and the SWE-bench-style loader."""

import contextlib
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from load_support import a_cpu, crowded, pinned_children
from ludus.core.registry import env_class
from ludus.core.types import Message, Status, Task, ToolCall
from ludus.envs.repo.env import RepoEnv
from ludus.envs.repo.tasks import BUG_KINDS, RepoTasks, apply_patch, bug_catalogue, load_repo_tasks
from ludus.envs.repo.verifier import grading_tree, is_test_path
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.rollout.engine import RolloutEngine, requests
from ludus.sandbox.load import descendants
from ludus.tasks.loaders import TaskFileError

N = len(bug_catalogue())


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name, arguments, id=f"c_{name}")


def step(env: RepoEnv, *calls: ToolCall):
    return env.step(Message("assistant", "", tool_calls=list(calls)))


def tool(env: RepoEnv, name: str, **arguments) -> str:
    result = step(env, call(name, **arguments))
    assert not result.done
    return result.observation.messages[0].content


@pytest.fixture
def env(tmp_path):
    made = RepoEnv(tmp_root=str(tmp_path))
    yield made
    made.close()


def task_with(bug: str, seed: int = 0):
    source = RepoTasks(seed)
    return next(t for t in map(source.get, range(N)) if t.info["bug"] == bug)


# ---- the generator ----


def test_generator_is_deterministic_covers_every_kind_and_hides_the_tests():
    a, b = RepoTasks(3), RepoTasks(3)
    tasks = [a.get(i) for i in range(N)]
    assert [t.to_dict() for t in tasks] == [b.get(i).to_dict() for i in range(N)]
    assert {t.info["bug_kind"] for t in tasks} == set(BUG_KINDS)
    assert {(t.info["library"], t.info["bug"]) for t in tasks} == set(bug_catalogue())
    assert RepoTasks(3, "eval").get(0).to_dict() != tasks[0].to_dict()
    for t in tasks:
        hidden = t.answer["hidden_tests"]
        assert not set(hidden) & set(t.answer["files"])
        assert all(test_id.split("::")[0] in hidden for test_id in t.answer["fail_to_pass"])
        fixed = apply_patch(t.answer["files"], t.answer["gold_patch"])
        assert fixed != t.answer["files"] and set(fixed) == set(t.answer["files"])


def test_every_bug_is_caught_by_fail_to_pass_tests_and_spared_by_pass_to_pass_ones(env):
    """Over every (library, bug) pair and two seeds: F2P fail on the buggy tree and pass on the
    fixed one; P2P pass on both — run in the sandbox by the grader's own runner."""

    def check(task: Task, fixed: bool) -> None:
        ans = task.answer
        f2p, p2p = ans["fail_to_pass"], ans["pass_to_pass"]
        buggy = {p: t.encode() for p, t in ans["files"].items()}
        tree = {p: t.encode() for p, t in apply_patch(ans["files"], ans["gold_patch"]).items()} if fixed else buggy
        hidden = {p: t.encode() for p, t in ans["hidden_tests"].items()}
        report = env.runner.run_tests(grading_tree(tree, buggy, hidden), f2p + p2p)
        assert not report.problem, (task.info, report.problem)
        for t in f2p:
            assert (report.outcomes[t].outcome == "passed") == fixed, (task.info, fixed, t, report.outcomes[t])
        for t in p2p:
            assert report.outcomes[t].outcome == "passed", (task.info, fixed, t, report.outcomes[t])

    jobs = [(RepoTasks(seed).get(i), fixed) for seed in (0, 1) for i in range(N) for fixed in (False, True)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda job: check(*job), jobs))


# ---- file tools ----


def test_file_tools_read_edit_write_and_list(env):
    task = task_with("mean_empty")
    obs = env.reset(task)
    pkg = task.info["package"]
    assert "tests/test_regression.py" not in obs.messages[-1].content  # hidden tests are not listed
    assert f"{pkg}/summary.py" in tool(env, "list_files")
    source = tool(env, "read_file", path=f"{pkg}/summary.py")
    assert "def mean(values)" in source
    assert "occurs 0 times" in tool(env, "edit_file", path=f"{pkg}/summary.py", search="no such text", replace="x")
    assert "occurs 3 times" in tool(env, "edit_file", path=f"{pkg}/summary.py", search="if ", replace="x")
    assert tool(env, "edit_file", path=f"{pkg}/summary.py", search="def median(", replace="def median2(").startswith(
        "edited"
    )
    assert "def median2(" in tool(env, "read_file", path=f"{pkg}/summary.py")
    assert tool(env, "write_file", path="notes/new/todo.txt", content="hello").startswith("wrote 5 bytes")
    assert tool(env, "read_file", path="./notes/new/todo.txt") == "hello"
    assert "Error" in tool(env, "read_file", path="missing.txt")
    assert "Error" in tool(env, "write_file", path="big.txt", content="x" * (2 << 20))


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.txt", "a/../../outside.txt", "~/x", ".git/config", ""])
def test_paths_outside_the_repository_are_refused(env, tmp_path, path):
    env.reset(task_with("mean_empty"))
    for name, args in (
        ("read_file", {}),
        ("write_file", {"content": "x"}),
        ("edit_file", {"search": "a", "replace": "b"}),
    ):
        text = tool(env, name, path=path, **args)
        assert text.startswith("Error"), (name, path, text)
    assert not (tmp_path / "outside.txt").exists()


def test_run_executes_in_the_sandbox_and_brings_changes_back(env):
    task = task_with("mean_empty")
    env.reset(task)
    pkg = task.info["package"]
    out = tool(
        env,
        "run",
        command=f"echo hi; ls; rm README.md; mkdir -p d; printf data > d/f.txt; sed -i 's/def mean(/def mean0(/' {pkg}/summary.py; exit 3",
    )
    assert out.startswith("exit code 3") and "hi" in out
    files = tool(env, "list_files")
    assert "README.md" not in files and "d/f.txt" in files
    assert tool(env, "read_file", path="d/f.txt") == "data"
    assert "def mean0(" in tool(env, "read_file", path=f"{pkg}/summary.py")
    assert env.root is not None and not (env.root / "README.md").exists()
    out = tool(env, "run", command="python -m pytest -q 2>&1 | tail -3")
    assert "passed" in out or "failed" in out or "error" in out


def test_run_output_is_truncated_and_a_time_limit_is_an_error_observation(tmp_path):
    env = RepoEnv(tmp_root=str(tmp_path), run_timeout_s=2)
    try:
        env.reset(task_with("mean_empty"))
        out = tool(env, "run", command="yes 0123456789 | head -c 100000")
        assert "output truncated" in out and len(out) < 20_000
        out = tool(env, "run", command="echo started > started.txt; sleep 30")
        assert out.startswith("Error: the command did not finish within 2 s")
        assert tool(env, "read_file", path="started.txt") == "started\n"  # changes before the limit are kept
    finally:
        env.close()


def test_a_busy_machine_never_turns_a_command_into_a_timeout(tmp_path):
    """The sandbox shares one CPU with 4 busy processes: a command needing ~1.5 s of CPU takes ~8 s
    of wall time, past its 3 s limit. The limit counts CPU and own time, so it finishes; a command
    that sleeps by itself is still stopped at the limit, and the model is told."""
    env = RepoEnv(tmp_root=str(tmp_path), run_timeout_s=3)
    cpu = a_cpu()
    try:
        env.reset(task_with("mean_empty"))
        assert tool(env, "run", command="echo warm").startswith("exit code 0")  # the sandbox's worker is up
        with pinned_children(cpu), crowded(cpu, busy=4):
            busy = tool(env, "run", command="python -c 'print(sum(range(40_000_000)))' > sum.txt")
            asleep = tool(env, "run", command="echo started > started.txt; sleep 30")
        assert busy.startswith("exit code 0"), busy
        assert tool(env, "read_file", path="sum.txt") == f"{40_000_000 * 39_999_999 // 2}\n"
        assert asleep.startswith("Error: the command did not finish within 3 s") and "wall-clock" in asleep, asleep
        assert tool(env, "read_file", path="started.txt") == "started\n"
    finally:
        env.close()


def test_a_failed_sandbox_ends_the_episode_as_infra_error_not_a_tool_error(env):
    """The sandbox's worker dies under a command: the model did nothing wrong, so the episode is
    ``infra_error`` (retried, then masked), never an error message for the model."""
    env.reset(task_with("mean_empty"))

    def cmdline(pid: int) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    def kill_the_worker() -> None:
        """Parents first: the worker goes before it can report on the execution."""
        for _ in range(600):
            sandbox = [p for p in descendants([os.getpid()]) if b"ludus_inside" in cmdline(p)]
            if any(b"sleep 7; echo late" in cmdline(c) for p in sandbox for c in descendants([p])):
                for pid in sandbox:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    result = step(env, call("run", command="sleep 7; echo late"))
    killer.join()
    assert result.done and result.score.status == Status.INFRA_ERROR, result.score
    assert "RepoSandboxError" in result.score.reason


def test_run_keeps_no_file_over_the_cap_and_no_git_folder(env):
    env.reset(task_with("mean_empty"))
    out = tool(
        env, "run", command="head -c 2000000 /dev/zero > big.bin; git init -q . 2>/dev/null; echo ok > small.txt"
    )
    assert "too large to keep: big.bin" in out
    files = tool(env, "list_files")
    assert "small.txt" in files and "big.bin" not in files and ".git" not in files


def test_close_removes_the_episode_copy_and_reset_starts_fresh(env):
    env.reset(task_with("mean_empty"))
    first = env.root
    tool(env, "write_file", path="x.txt", content="1")
    env.reset(task_with("mean_empty"))
    assert first is not None and not first.exists()
    assert "Error" in tool(env, "read_file", path="x.txt")
    second = env.root
    env.close()
    assert second is not None and not second.exists()


# ---- grading, the diff, the oracle ----


def test_fix_scores_one_with_a_diff_and_submit_ends_the_episode(env):
    task = task_with("median_floor_division")
    env.reset(task)
    edit = task.answer["gold_edits"][0]
    result = step(env, call("edit_file", **edit), call("submit"), call("read_file", path="README.md"))
    assert result.terminated and result.score.status == Status.CORRECT and result.reward == 1.0
    assert [m.content for m in result.observation.messages][1:] == [
        "submitted",
        "Error: not run: the episode ended at submit()",
    ]
    diff = result.info["diff"]
    assert (
        diff.startswith(f"--- a/{task.info['package']}/summary.py")
        and "+    return (ordered[mid - 1] + ordered[mid]) / 2" in diff
    )


def test_a_final_message_without_tool_calls_grades_too(env):
    env.reset(task_with("median_floor_division"))
    result = env.step("I think it is fixed.")
    assert result.terminated and result.score.status == Status.WRONG and result.reward == 0.0
    assert "test_median_even_count" in result.score.reason and result.info["diff"] == ""


class Oracle(Policy):
    """Plays the environment's reference actions for the task in the conversation (or nothing)."""

    def __init__(self, tasks, do_nothing: bool = False):
        super().__init__()
        self.by_prompt = {t.prompt: t for t in tasks}
        self.do_nothing = do_nothing
        self.env = RepoEnv()

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        out = []
        for messages in conversations:
            if self.do_nothing:
                out.append(Completion("Done.", [1], [2], [0.0], "stop"))
                continue
            task = next(t for p, t in self.by_prompt.items() if messages[1].content.startswith(p))
            turn = sum(m.role == "assistant" for m in messages)
            action = self.env.reference_actions(task)[turn]
            out.append(Completion("", [1], [2], [0.0], "tool_calls", action.tool_calls))
        return out


def test_the_oracle_solves_every_procedural_task_through_the_engine_and_doing_nothing_scores_zero(tmp_path):
    tasks = [RepoTasks(seed).get(i) for seed in (5,) for i in range(N)]
    engine = RolloutEngine(Oracle(tasks), lambda: RepoEnv(tmp_root=str(tmp_path)), SamplingParams(max_tokens=4))
    trajectories = engine.run(requests(tasks))
    assert [(t.task.info["bug"], t.score.status) for t in trajectories] == [(t.info["bug"], "correct") for t in tasks]
    assert {t.task.info["bug_kind"] for t in trajectories} == set(BUG_KINDS)
    lazy = RolloutEngine(
        Oracle(tasks, do_nothing=True), lambda: RepoEnv(tmp_root=str(tmp_path)), SamplingParams(max_tokens=4)
    )
    idle = lazy.run(requests(tasks[:4]))
    assert [(t.score.value, t.score.status) for t in idle] == [(0.0, "wrong")] * 4
    for _ in range(200):  # the engine closes environments in the background, without waiting
        if not list(tmp_path.iterdir()):
            break
        time.sleep(0.05)
    assert list(tmp_path.iterdir()) == []  # every episode's copy was removed


def test_registered_by_name():
    assert env_class("repo") is RepoEnv


# ---- the grading tree ----


def test_grading_tree_restores_tests_and_drops_hooks():
    pristine = {"pkg/a.py": b"A", "tests/test_a.py": b"T", "tests/data.txt": b"D", "setup.cfg": b"S"}
    final = {
        "pkg/a.py": b"A2",
        "tests/test_a.py": b"hacked",
        "tests/conftest.py": b"hook",
        "conftest.py": b"hook",
        "pkg/conftest.py": b"hook",
        "sitecustomize.py": b"x",
        "pkg/usercustomize.py": b"x",
        "evil.pth": b"x",
        "pytest.ini": b"x",
        "tox.ini": b"x",
        "setup.cfg": b"[tool:pytest]",
        "pkg/test_new.py": b"x",
        "pkg/__pycache__/a.cpython-311.pyc": b"x",
        "other_test.py": b"x",
    }
    tree = grading_tree(final, pristine, {"tests/test_hidden.py": b"H"})
    assert tree == {
        "pkg/a.py": b"A2",
        "tests/test_a.py": b"T",
        "tests/data.txt": b"D",
        "setup.cfg": b"S",
        "tests/test_hidden.py": b"H",
    }
    clash = grading_tree({"pkg": b"file where a folder must be", "x/..y": b"x"}, {"pkg/test_a.py": b"T"}, {})
    assert clash == {"pkg/test_a.py": b"T"}
    assert is_test_path("tests/helpers.py") and is_test_path("a/b_test.py") and not is_test_path("pkg/testing_utils.py")


# ---- SWE-bench-style rows ----


def _local_repo(root: Path) -> dict:
    (root / "calc").mkdir(parents=True)
    (root / "calc" / "__init__.py").write_text("")
    (root / "calc" / "ops.py").write_text("def add(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_ops.py").write_text(
        "from calc.ops import neg\n\n\ndef test_neg():\n    assert neg(2) == -2\n"
    )
    test_patch = (
        "--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n@@ -1,5 +1,9 @@\n-from calc.ops import neg\n"
        "+from calc.ops import add, neg\n \n \n def test_neg():\n     assert neg(2) == -2\n+\n+\n+def test_add():\n"
        "+    assert add(2, 3) == 5\n"
    )
    patch = (
        "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    )
    return {
        "instance_id": "calc-1",
        "repo_path": "repo",
        "problem_statement": "add(2, 3) returns -1",
        "FAIL_TO_PASS": ["tests/test_ops.py::test_add"],
        "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_neg"]),
        "test_patch": test_patch,
        "patch": patch,
    }


def test_swe_rows_load_and_the_oracle_solves_them(tmp_path):
    row = _local_repo(tmp_path / "repo")
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = load_repo_tasks(tmp_path / "rows.jsonl")
    assert task.id == "calc-1" and "def test_add" in task.answer["hidden_tests"]["tests/test_ops.py"]
    env = RepoEnv(path=str(tmp_path / "rows.jsonl"), tmp_root=str(tmp_path / "eps"))
    try:
        env.reset(seed=0)
        assert "def test_add" not in tool(env, "read_file", path="tests/test_ops.py")
        result = env.step(Message("assistant", "", tool_calls=[]))
        assert result.score.status == Status.WRONG and "test_add" in result.score.reason
        env.reset(seed=0)
        for action in env.reference_actions(task):
            result = env.step(action)
        assert result.score.status == Status.CORRECT, result.score.reason
    finally:
        env.close()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"repo_path": "nowhere"}, "repo_path"),
        ({"problem_statement": ""}, "problem_statement"),
        ({"FAIL_TO_PASS": ["/abs/test.py::t"]}, "FAIL_TO_PASS"),
        ({"PASS_TO_PASS": "not json"}, "PASS_TO_PASS"),
        (
            {"test_patch": "--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n@@ -1,1 +1,1 @@\n-nope\n+x\n"},
            "test_patch",
        ),
        ({"patch": 5}, "patch"),
    ],
)
def test_malformed_rows_name_the_file_line_and_field(tmp_path, change, field):
    row = _local_repo(tmp_path / "repo")
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n\n" + json.dumps({**row, **change}) + "\n")
    with pytest.raises(TaskFileError) as err:
        load_repo_tasks(tmp_path / "rows.jsonl")
    assert err.value.field == field and "line 3" in str(err.value) and "rows.jsonl" in str(err.value)


def _split_ids(env: RepoEnv, split: str) -> list[str]:
    source = env.task_source(split)  # type: ignore[arg-type]
    return [source.get(i).id for i in range(source.size or 0)]


def test_a_rows_file_alone_holds_its_eval_tasks_out_of_training(tmp_path):
    row = _local_repo(tmp_path / "repo")
    ids = [f"calc-{i}" for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({**row, "instance_id": i}) + "\n" for i in ids))
    env = RepoEnv(path=str(tmp_path / "rows.jsonl"), eval_fraction=0.25, tmp_root=str(tmp_path / "eps"))
    train, held = _split_ids(env, "train"), _split_ids(env, "eval")
    assert train and held and not set(train) & set(held) and sorted(train + held) == sorted(ids)
    env.reset(seed=0)
    assert env.task is not None and env.task.id == train[0]
    env.close()


def test_a_rows_file_with_eval_path_trains_on_all_of_path(tmp_path):
    row = _local_repo(tmp_path / "repo")
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({**row, "instance_id": f"t{i}"}) + "\n" for i in range(3)))
    (tmp_path / "eval.jsonl").write_text(json.dumps({**row, "instance_id": "e0"}) + "\n")
    env = RepoEnv(path=str(tmp_path / "train.jsonl"), eval_path=str(tmp_path / "eval.jsonl"))
    assert _split_ids(env, "train") == ["t0", "t1", "t2"] and _split_ids(env, "eval") == ["e0"]
    with pytest.raises(TaskFileError, match="pass eval_path"):
        RepoEnv(path=str(tmp_path / "eval.jsonl")).task_source("eval")
