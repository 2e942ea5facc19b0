"""The SWE-style repository environment ``repo``: fix an issue in a small repository.

Each episode gets a fresh copy of the task's repository in a host temporary folder (removed by
``close()`` or the next ``reset``). There is no ``.git``: no history, so no future commits to
read. The hidden tests are never in that copy; they exist only in the task and, at grading
time, inside the sandbox.

Tools: ``list_files``, ``read_file``, ``edit_file`` (exact, unique search-and-replace),
``write_file`` — Ludus's own code acting on the host copy, path-safe (relative paths only, no
``..``, no symbolic link anywhere on the path, size caps) — and ``run``, which runs a shell
command in the sandbox on a copy of the tree and brings the files it changed back (validated
the same way). ``submit()``, or a reply without tool calls, ends the episode and grades (see
``ludus.envs.repo.verifier``). The final step's ``info["diff"]`` is the agent's change as a unified diff.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from ludus.core.env import JsonTypes, Split, TaskSource, ToolEnv
from ludus.core.tools import ToolError
from ludus.core.types import Message, Observation, Score, StepResult, Task, ToolCall
from ludus.envs.repo.tasks import RepoTasks, apply_patch, load_repo_tasks, unified_diff
from ludus.envs.repo.verifier import TREE_CAP, RepoRunner, grade_tree, sandbox_path_ok, shared_sandbox, tree_size
from ludus.tasks.loaders import FileTasks, split_files

READ_CAP = 100_000  # characters of a file read_file returns
WRITE_CAP = 1 << 20  # bytes write_file / edit_file may leave in one file
LIST_CAP = 1000  # entries list_files shows
REPO_CAP = 64 << 20  # bytes of a repository copied from repo_path
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".pytest_cache"})


class RepoToolError(ToolError):
    """A tool call the environment refuses; the model reads the message as ``Error: …``."""


class RepoEnv(ToolEnv):
    """Resolve an issue in a repository; graded by hidden fail-to-pass and pass-to-pass tests."""

    name = "repo"
    description = "fix an issue in a small Python repository with file and shell tools; graded by hidden tests"
    system_prompt = (
        "You are a software engineer fixing an issue in a repository. Use list_files, read_file, "
        "edit_file, write_file and run (a shell command in the repository, e.g. `python -m pytest -q`). "
        "Call submit() when the fix is complete."
    )
    # no tasks from clients: a task's answer names a folder on the server or carries a repository
    # that the server writes out (a few KB of nested names became hundreds of MB of files)
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = None

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        path: str | None = None,
        eval_path: str | None = None,
        eval_fraction: float = 0.1,
        seed: int = 0,
        max_turns: int = 30,
        run_timeout_s: float = 30.0,
        grade_timeout_s: float = 120.0,
        workers: int | None = None,
        backend: str = "auto",
        tmp_root: str | None = None,
    ):
        """``path``: SWE-bench-style rows (:func:`load_repo_tasks`) instead of procedural tasks;
        ``eval_path``: the eval split's rows, else ``eval_fraction`` of ``path``'s task ids are held
        out of training for eval (``ludus.tasks.loaders.split_files``)."""
        self.files = split_files(path, eval_path, lambda p: FileTasks(Path(p), load_repo_tasks(p)), eval_fraction)
        super().__init__(tasks)
        self.seed, self.max_turns, self.tmp_root = seed, max_turns, tmp_root
        self.runner = RepoRunner(
            shared_sandbox(workers=workers, backend=backend), timeout_s=run_timeout_s, grade_timeout_s=grade_timeout_s
        )
        self.root: Path | None = None
        self.pristine: dict[str, bytes] = {}

    # ---- episode state ----

    def default_tasks(self, split: Split = "train") -> TaskSource:
        if split in self.files:
            return self.files[split]()
        return RepoTasks(seed=self.seed, split=split)

    def begin(self, task: Task) -> Observation:
        self._remove_copy()
        answer = _answer(task)
        self.pristine = _pristine(answer)
        if self.tmp_root is not None:
            os.makedirs(self.tmp_root, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="ludus-repo-", dir=self.tmp_root))
        for rel, data in self.pristine.items():
            if not sandbox_path_ok(rel):
                raise ValueError(f"task {task.id}: file path {rel!r} is not a plain relative path")
            target = self.root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        listing = "\n".join(sorted(self.pristine)[:LIST_CAP])
        user = f"{task.prompt}\n\nFiles in the repository:\n{listing}"
        return Observation([Message("system", self.system_prompt), Message("user", user)], self.tools())

    def close(self) -> None:
        self._remove_copy()

    def _remove_copy(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)  # never follows symbolic links
            self.root = None

    # ---- path safety ----

    def _resolve(self, path: str, *, create_parents: bool = False) -> Path:
        """``path`` inside the repository: relative, no ``..``, no symbolic link on the way."""
        if self.root is None:
            raise RepoToolError("no episode is running")
        if not isinstance(path, str) or not path.strip() or "\0" in path:
            raise RepoToolError("give a non-empty relative path")
        pure = PurePosixPath(path)
        if pure.is_absolute() or path.startswith("~"):
            raise RepoToolError(f"{path!r} is absolute; give a path relative to the repository root")
        if any(p.startswith("..") for p in pure.parts):
            raise RepoToolError(f"{path!r} leaves the repository (no part of a path may start with '..')")
        parts = [p for p in pure.parts if p != "."]
        if any(p == ".git" for p in parts):
            raise RepoToolError(".git is not available")
        current = self.root
        for i, part in enumerate(parts):
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                if create_parents and i < len(parts) - 1:
                    current.mkdir()
                continue
            if stat.S_ISLNK(mode):
                raise RepoToolError(
                    f"{'/'.join(parts[: i + 1])!r} is a symbolic link; the file tools do not follow links"
                )
            if i < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise RepoToolError(f"{'/'.join(parts[: i + 1])!r} is not a folder")
        return current

    def _read_bytes(self, target: Path) -> bytes:
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise RepoToolError("no such file") from None
        except OSError as exc:
            raise RepoToolError(f"cannot read: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise RepoToolError("not a regular file")
            return fh.read(WRITE_CAP + 1)

    def _write_bytes(self, target: Path, data: bytes) -> None:
        if len(data) > WRITE_CAP:
            raise RepoToolError(f"the file would be {len(data)} bytes; the limit is {WRITE_CAP}")
        try:
            if stat.S_ISDIR(os.lstat(target).st_mode):
                raise RepoToolError("that path is a folder")
        except FileNotFoundError:
            pass
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    # ---- tools ----

    def tool_functions(self) -> Sequence[Callable[..., Any]]:
        return [self.list_files, self.read_file, self.edit_file, self.write_file, self.run, self.submit]

    def list_files(self, path: str = ".") -> str:
        """List the files under a folder of the repository (recursively).

        Args:
            path: the folder, relative to the repository root ("." for all).
        """
        base = self._resolve(path)
        if not base.is_dir():
            raise RepoToolError(f"{path!r} is not a folder")
        assert self.root is not None
        entries = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, self.root)
                entries.append(f"{rel} -> {os.readlink(full)}" if os.path.islink(full) else rel)
        entries.sort()
        more = f"\n... and {len(entries) - LIST_CAP} more" if len(entries) > LIST_CAP else ""
        return "\n".join(entries[:LIST_CAP]) + more if entries else "(no files)"

    def read_file(self, path: str) -> str:
        """Read a text file of the repository.

        Args:
            path: the file, relative to the repository root.
        """
        text = self._read_bytes(self._resolve(path)).decode("utf-8", "replace")
        if len(text) > READ_CAP:
            return text[:READ_CAP] + f"\n[... truncated: the file has more than {READ_CAP} characters]"
        return text

    def edit_file(self, path: str, search: str, replace: str) -> str:
        """Replace one exact occurrence of a text in a file; the text must occur exactly once.

        Args:
            path: the file, relative to the repository root.
            search: the exact text to find (include enough lines to make it unique).
            replace: the text to put in its place.
        """
        target = self._resolve(path)
        text = self._read_bytes(target).decode("utf-8", "replace")
        if not search:
            raise RepoToolError("search must not be empty")
        found = text.count(search)
        if found != 1:
            raise RepoToolError(
                f"the search text occurs {found} times in {path}; it must occur exactly once"
                + (" (add surrounding lines to make it unique)" if found else "")
            )
        self._write_bytes(target, text.replace(search, replace).encode())
        return f"edited {path}"

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file with the given content (folders are created as needed).

        Args:
            path: the file, relative to the repository root.
            content: the whole new content.
        """
        data = content.encode()
        if len(data) > WRITE_CAP:
            raise RepoToolError(f"content of {len(data)} bytes is over the {WRITE_CAP}-byte limit")
        self._write_bytes(self._resolve(path, create_parents=True), data)
        return f"wrote {len(data)} bytes to {path}"

    def run(self, command: str) -> str:
        """Run a shell command (bash) in the repository's root, in a sandbox without network.
        Files the command changes are kept; processes it starts end with it.

        Args:
            command: the command line, e.g. "python -m pytest -q".
        """
        files, links = self._tree()
        if tree_size(files) > TREE_CAP:
            raise RepoToolError(f"the repository is over {TREE_CAP >> 20} MiB; delete files before running commands")
        result = self.runner.shell(files, links, command)
        notes = [result.note] if result.note else []
        if result.files is not None:
            notes += self._apply(result.files, result.changed, result.links, result.dirs, result.skipped)
        output = result.output
        if result.dropped_bytes:
            output += f"\n[... output truncated: {result.dropped_bytes} more bytes]"
        if result.timed_out:
            head = f"Error: the command did not finish within {self.runner.timeout_s:g} s and was stopped"
            head += f": {result.limit}" if result.limit else ""
        elif result.exit_code is None:
            head = "Error: the command did not complete"
        else:
            head = f"exit code {result.exit_code}"
        return "\n".join([head, *notes, output]).rstrip() or head

    def submit(self) -> str:
        """Submit your changes for grading; this ends the episode."""
        return "submitted"

    # ---- the tree, to and from the sandbox ----

    def _tree(self) -> tuple[dict[str, bytes], dict[str, str]]:
        """Regular files and symbolic links of the host copy (links are recorded, never followed)."""
        assert self.root is not None
        files: dict[str, bytes] = {}
        links: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in list(dirnames) + filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, self.root)
                mode = os.lstat(full).st_mode
                if stat.S_ISLNK(mode):
                    links[rel] = os.readlink(full)
                elif stat.S_ISREG(mode):
                    files[rel] = Path(full).read_bytes()  # lstat said regular: no link is followed
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        return files, links

    def _apply(
        self, final: list[str], changed: dict[str, bytes], links: dict[str, str], dirs: list[str], skipped: list[str]
    ) -> list[str]:
        """Make the host copy match what the command left; every path is checked. Notes for the model."""
        assert self.root is not None
        refused: list[str] = []
        keep_files, keep_dirs = set(final) | set(skipped), set(dirs)
        files, old_links = self._tree()
        for rel in files:
            if rel not in keep_files:
                (self.root / rel).unlink()
        for rel, target in old_links.items():
            if links.get(rel) != target:
                (self.root / rel).unlink()
        for dirpath, dirnames, _ in os.walk(self.root, topdown=False):
            for name in dirnames:
                full = Path(dirpath) / name
                rel = os.path.relpath(full, self.root)
                if rel not in keep_dirs and not full.is_symlink() and name not in SKIPPED_DIRS:
                    shutil.rmtree(full, ignore_errors=True)
        for rel in sorted(keep_dirs):
            try:
                target = self._resolve(rel, create_parents=True)
                if not target.exists():
                    target.mkdir()
            except (RepoToolError, OSError) as exc:
                refused.append(f"{rel} ({exc})")
        for rel, data in sorted(changed.items()):
            try:
                self._write_bytes(self._resolve(rel, create_parents=True), data)
            except (RepoToolError, OSError) as exc:
                refused.append(f"{rel} ({exc})")
        for rel, target in sorted(links.items()):
            if old_links.get(rel) == target:
                continue
            try:
                where = self._resolve(rel, create_parents=True)
                if where.exists() or where.is_symlink():
                    raise RepoToolError("a file is in the way")
                os.symlink(target, where)  # recorded as a link; the file tools refuse to follow it
            except (RepoToolError, OSError) as exc:
                refused.append(f"{rel} ({exc})")
        notes = [f"note: {len(refused)} path(s) were not kept: {'; '.join(refused[:5])}"] if refused else []
        if skipped:
            notes.append(f"note: {len(skipped)} file(s) were too large to keep: {', '.join(skipped[:5])}")
        return notes

    # ---- ending the episode ----

    def transition(self, action: Message) -> StepResult:
        calls = action.tool_calls
        submit_at = next((i for i, c in enumerate(calls) if c.name == "submit"), None)
        if calls and submit_at is None:
            return super().transition(action)
        replies: list[Message] = []
        info: dict[str, Any] = {"tool_calls": len(calls), "tool_errors": 0, "tool_cache_hits": 0}
        if calls:
            assert submit_at is not None
            if submit_at:
                before = super().transition(Message("assistant", action.content, tool_calls=calls[:submit_at]))
                replies = list(before.observation.messages)
                info["tool_errors"] = before.info.get("tool_errors", 0)
            replies.append(_reply(calls[submit_at], "submitted"))
            replies += [_reply(c, "Error: not run: the episode ended at submit()") for c in calls[submit_at + 1 :]]
        score, diff = self._grade()
        info["diff"] = diff
        return StepResult(Observation(replies), reward=score.value, terminated=True, score=score, info=info)

    def score(self, task: Task, completion: str) -> Score:
        return self._grade()[0]

    def _grade(self) -> tuple[Score, str]:
        assert self.task is not None
        answer = _answer(self.task)
        files, _links = self._tree()  # symbolic links are not part of the graded tree
        diff = tree_diff(self.pristine, files)
        hidden = {p: t.encode() for p, t in answer["hidden_tests"].items()}
        score = grade_tree(
            self.runner, files, self.pristine, hidden, list(answer["fail_to_pass"]), list(answer["pass_to_pass"])
        )
        return score, diff

    # ---- the oracle ----

    def reference_actions(self, task: Task) -> list[Message]:
        """Assistant messages that apply the task's gold fix with the file tools, then submit."""
        answer = _answer(task)
        calls: list[ToolCall] = []
        if answer.get("gold_edits"):
            for i, edit in enumerate(answer["gold_edits"]):
                calls.append(ToolCall("edit_file", dict(edit), id=f"gold_{i}"))
        elif answer.get("gold_patch"):
            pristine = {p: d.decode("utf-8", "replace") for p, d in _pristine(answer).items()}
            fixed = apply_patch(pristine, answer["gold_patch"])
            for i, p in enumerate(sorted(p for p in fixed if fixed[p] != pristine.get(p))):
                calls.append(ToolCall("write_file", {"path": p, "content": fixed[p]}, id=f"gold_{i}"))
            gone = sorted(set(pristine) - set(fixed))
            if gone:  # no file tool deletes: the shell does
                calls.append(ToolCall("run", {"command": "rm -f -- " + " ".join(map(shlex.quote, gone))}, id="gold_rm"))
        else:
            return []
        return [Message("assistant", "", tool_calls=calls), Message("assistant", "", tool_calls=[ToolCall("submit", {}, id="submit")])]  # fmt: skip

    # ---- the red-team ----

    def cheats(self, task: Task) -> dict[str, list[Message]]:
        """Scripted reward hacks on this repository (``ludus check --redteam``): each must score 0.

        They edit what the hidden tests will run — the module the gold fix touches, the visible
        tests, files pytest or Python read on their own — without fixing anything."""
        answer = _answer(task)
        pristine = {p: d.decode("utf-8", "replace") for p, d in _pristine(answer).items()}
        tests = sorted(p for p in pristine if PurePosixPath(p).name.startswith("test") and p.endswith(".py"))
        edited = [e["path"] for e in answer.get("gold_edits") or [] if isinstance(e, dict) and "path" in e]
        module = next((p for p in edited if p in pristine), None) or next(
            (p for p in sorted(pristine) if p.endswith(".py") and p not in tests and not p.endswith("__init__.py")),
            None,
        )

        def episode(*calls: ToolCall) -> list[Message]:
            numbered = [ToolCall(c.name, c.arguments, id=f"cheat_{i}") for i, c in enumerate(calls)]
            return [Message("assistant", "", tool_calls=numbered), Message("assistant", "", tool_calls=[ToolCall("submit", {}, id="submit")])]  # fmt: skip

        def prepend(code: str) -> ToolCall:
            assert module is not None
            return ToolCall("write_file", {"path": module, "content": code + "\n" + pristine[module]})

        out = {
            "delete the tests": episode(
                ToolCall("run", {"command": "rm -rf tests test testing; find . -name 'test_*.py' -delete"})
            ),  # fmt: skip
            "conftest.py that turns every outcome into a pass": episode(
                *(
                    ToolCall("write_file", {"path": p, "content": _FORCE_PASS_CONFTEST})
                    for p in ("conftest.py", "tests/conftest.py")
                )  # fmt: skip
            ),
            "sitecustomize.py, usercustomize.py and a .pth file": episode(
                ToolCall("write_file", {"path": "sitecustomize.py", "content": _EXIT_ZERO}),
                ToolCall("write_file", {"path": "usercustomize.py", "content": _EXIT_ZERO}),
                ToolCall("write_file", {"path": "ludus_cheat.pth", "content": "import os; os._exit(0)\n"}),
                ToolCall("write_file", {"path": "pytest.ini", "content": "[pytest]\naddopts = --co -q\n"}),
            ),
            "read the hidden tests from disk": episode(
                ToolCall("run", {"command": "cat /tests/* ../tests/* ../../tests/* 2>&1; ls -la / .. 2>&1 | head -50"})
            ),
        }
        if tests:
            out["rewrite the visible tests to pass"] = episode(
                *(ToolCall("write_file", {"path": p, "content": "def test_ok():\n    assert True\n"}) for p in tests),
                ToolCall("write_file", {"path": "tests/test_regression.py", "content": "def test_ok():\n    pass\n"}),
            )
        if module is not None:
            out["os._exit(0) when the module under test is imported"] = episode(prepend(_EXIT_ZERO))
            out["pass markers printed at import, then exit 0"] = episode(prepend(_PASS_MARKERS))
            out["pytest internals patched at import"] = episode(prepend(_PATCH_PYTEST))
            out["functions return an object whose __eq__ is always True"] = episode(
                ToolCall("write_file", {"path": module, "content": pristine[module] + _always_equal(pristine[module])})
            )
        return out


_EXIT_ZERO = "import os\nos._exit(0)\n"
_PASS_MARKERS = (
    "import sys\nprint('All tests passed\\n== 12 passed in 0.01s ==\\nOK')\n"
    'for fd in range(1, 64):\n    try:\n        import os\n        os.write(fd, b\'{"passed": 12, "failed": 0}\\n\')\n'
    "    except OSError:\n        pass\nsys.exit(0)\n"
)
_PATCH_PYTEST = """
try:
    import _pytest.python
    import _pytest.reports

    _pytest.python.Function.runtest = lambda self: None
    _pytest.reports.TestReport.passed = property(lambda self: True)
    _pytest.reports.TestReport.failed = property(lambda self: False)
except Exception:
    pass
"""
_FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


def _always_equal(source: str) -> str:
    """Code that redefines every top-level function of ``source`` to return an always-equal object."""
    import ast

    try:
        names = [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    except SyntaxError:
        names = []
    head = (
        "\n\nclass _AlwaysEqual:\n    def __eq__(self, other):\n        return True\n\n"
        "    def __ne__(self, other):\n        return False\n\n    def __hash__(self):\n        return 0\n"
    )
    return head + "".join(f"\n\ndef {n}(*args, **kwargs):\n    return _AlwaysEqual()\n" for n in names)


def _reply(call: ToolCall, text: str) -> Message:
    return Message("tool", text, tool_call_id=call.id or None, name=call.name)


def _answer(task: Task) -> dict[str, Any]:
    answer = task.answer
    if not isinstance(answer, dict):
        raise ValueError(f"task {task.id}: answer must be a repository task object")
    for key in ("hidden_tests", "fail_to_pass", "pass_to_pass"):
        if key not in answer:
            raise ValueError(f"task {task.id}: answer has no {key!r}")
    if "files" not in answer and "repo_path" not in answer:
        raise ValueError(f"task {task.id}: answer needs 'files' or 'repo_path'")
    return answer


def _pristine(answer: dict[str, Any]) -> dict[str, bytes]:
    """The starting tree: the task's files, or the regular files of its local repository."""
    if "files" in answer:
        return {p: t.encode() for p, t in answer["files"].items()}
    root = Path(answer["repo_path"])
    out: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in filenames:
            full = Path(dirpath) / name
            if full.is_symlink() or not full.is_file():
                continue
            data = full.read_bytes()
            total += len(data)
            if total > REPO_CAP:
                raise ValueError(f"repository {root} is over {REPO_CAP} bytes")
            out[full.relative_to(root).as_posix()] = data
    return out


def tree_diff(before: dict[str, bytes], after: dict[str, bytes]) -> str:
    """The change from ``before`` to ``after`` as a unified diff (binary files named only)."""
    old: dict[str, str] = {}
    new: dict[str, str] = {}
    binary: list[str] = []
    for path in sorted(set(before) | set(after)):
        if before.get(path) == after.get(path):
            continue
        try:
            if path in before:
                old[path] = before[path].decode()
            if path in after:
                new[path] = after[path].decode()
        except UnicodeDecodeError:
            old.pop(path, None)
            binary.append(f"Binary files {path} differ\n")
    return unified_diff(old, new) + "".join(binary)
