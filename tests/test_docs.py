"""Every command and snippet of the README and docs/ runs as written, or its doc says why it cannot run here.

Each fenced block of README.md and docs/*.md is one test, ``test_block[docs/sql.md:9]`` (the line of
its opening fence). Shell and Python blocks run as they are, in a working directory of the doc's own
that starts empty and that its blocks share, one after another. A ``<!-- doc-test: ... -->``
comment on the line before a block says how else to treat it; docs/design.md, "Tested docs", is the
convention. A block that does not run and has no marker saying why fails, and so does a marker this
file does not know. Commands named in prose (`` `ludus eval ENV --tasks N` ``) and in every block,
run or not, are checked against the ``ludus`` parsers themselves, without running them.

The docs run side by side, three at a time (each doc's blocks in order); a block's time-out is only a
backstop, so that a hang fails rather than stalls the suite.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
SHELLS = {"bash", "sh", "shell"}


def json_or_lines(text: str) -> None:
    """A JSON value, or JSON lines (one value a line: a ``.jsonl`` file)."""
    try:
        json.loads(text)
    except json.JSONDecodeError:
        for line in filter(str.strip, text.splitlines()):
            json.loads(line)


DATA = {"yaml": yaml.safe_load, "json": json_or_lines, "jsonl": json_or_lines, "toml": tomllib.loads}
ACTIONS = {"skip", "output", "file", "continue", "shorten", "exit", "server", "config", "copy", "before"}
# what `shorten` appends to each command: argparse keeps the last value of a flag, so these win
SHORTER = {
    "ludus train": "--steps 1 --warmstart-steps 2 --warmstart-batch 2 --prompts-per-step 2 --group-size 2 "
    "--eval-size 2 --threads 1",
    "ludus eval": "--tasks 2",
    "ludus check": "--tasks 1",
    "ludus export": "-n 4",
    "ludus train-rm": "--epochs 1",
}
SETUP_LINE = re.compile(r"^\s*(pip install|\.?/?scripts/system-deps)\b")
EXTRA = re.compile(r"ludus\[([\w,-]+)\]")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # servers here are on 127.0.0.1
BLOCK_TIMEOUT_S = 900  # a backstop against hangs, far above any block's time
WORKERS = 3  # docs at once: one more than the 2 cores we aim at, so that no core idles while a long doc ends
# each example and the test that runs it (examples run by a doc block here are found in the docs)
EXAMPLE_TESTS = {
    "reverse_env.py": "test_readme.py",
    "rlhf.py": "test_reward_model.py",
    "trl_grpo.py": "test_integrations_trl.py",
    "verl_reward.py": "test_integrations_verl.py",
}


# ---- reading the docs ------------------------------------------------------------------------
@dataclass(frozen=True)
class Marker:
    actions: dict[str, str] = field(default_factory=dict)
    line: int = 0  # where the comment starts (0: no marker)
    problem: str = ""  # a marker that cannot be read

    def __contains__(self, action: str) -> bool:
        return action in self.actions

    def get(self, action: str, default: str = "") -> str:
        return self.actions.get(action, default)


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # the opening fence, counted from 1
    lang: str
    text: str
    marker: Marker

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in SHELLS or self.lang == "python"


FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*doc-test:(.*?)-->", re.S | re.M)  # at a line's start: not one quoted in prose


def read_marker(text: str, line: int) -> Marker:
    """``action: value; action; ...``; ``skip: REASON`` comes last and its reason runs to the end."""
    actions: dict[str, str] = {}
    items = text.split(";")
    while items:
        item = items.pop(0).strip()
        name, _, value = item.partition(":")
        name = name.strip()
        if name == "skip":
            value, items = ";".join([value, *items]), []
        if not item:
            continue
        if name not in ACTIONS:
            return Marker(line=line, problem=f"unknown action {name!r} (known: {', '.join(sorted(ACTIONS))})")
        value = " ".join(value.split())
        actions[name] = f"{actions[name]}; {value}" if name in actions else value
    return Marker(actions, line)


def marker_before(lines: list[str], fence: int) -> Marker:
    """The ``doc-test`` comment that ends on the line just above the fence (index ``fence``)."""
    end = fence - 1
    if end < 0 or not lines[end].rstrip().endswith("-->"):
        return Marker()
    start = end
    while start > 0 and not lines[start].startswith("<!--"):
        start -= 1
    found = MARKER.search("\n".join(lines[start : end + 1]))
    return read_marker(found.group(1), start + 1) if found else Marker()


@functools.cache
def read(doc: Path) -> str:
    """The doc as this session read it first: every test reads the same text."""
    return doc.read_text()


@functools.cache
def blocks(doc: Path) -> tuple[Block, ...]:
    lines = read(doc).splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = next(
            (j for j in range(i + 1, len(lines)) if re.fullmatch(rf" {{0,3}}{fence[0]}{{{len(fence)},}}\s*", lines[j])),
            len(lines),
        )
        text = "".join(line[indent:] + "\n" for line in lines[i + 1 : end])
        found.append(Block(doc, i + 1, opening["lang"].lower(), text, marker_before(lines, i)))
        i = end + 1
    return tuple(found)


ALL_BLOCKS = [block for doc in DOCS for block in blocks(doc)]


# ---- what a block runs -----------------------------------------------------------------------
def command_end(text: str, start: int) -> int:
    """Where the simple command starting at ``start`` ends: an unquoted comment, ``;``, ``&``, ``|``,
    ``)`` or line end (a ``\\`` line continuation goes on)."""
    quote, i = "", start
    while i < len(text):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "\\" and text[i + 1 : i + 2] == "\n":
            i += 1
        elif c in ";&|)\n" or (c == "#" and text[i - 1].isspace()):
            break
        i += 1
    while i > start and text[i - 1].isspace():
        i -= 1
    return i


def invocations(text: str, program: str) -> list[tuple[int, int]]:
    """Start and end of every command that runs ``program`` (``ludus train``, ``python examples/rlhf.py``)."""
    words = r"\s+".join(map(re.escape, program.split()))
    starts = [m.start(2) for m in re.finditer(rf"(^|[\s;&|(]|\$\()({words})(?![\w./-])", text, re.M)]
    return [(s, command_end(text, s)) for s in starts]


def shorten(text: str, marker: Marker) -> str:
    """``shorten``: the flags of SHORTER, then the marker's own (``shorten: ludus eval --tasks 4``),
    appended to each command they name."""
    if "shorten" not in marker and "config" not in marker:
        return text
    extra = [part.strip() for part in marker.get("shorten").split(";") if part.strip()]
    for spec in [f"{program} {flags}" for program, flags in SHORTER.items()] + extra:
        words = spec.split()
        cut = next((k for k, w in enumerate(words) if w.startswith("-")), len(words))
        program, flags = " ".join(words[:cut]), " ".join(words[cut:])
        for _, end in reversed(invocations(text, program)):
            text = f"{text[:end]} {flags}{text[end:]}"
    return text


def setup_problems(text: str) -> list[str]:
    """Set-up lines (``pip install``, ``scripts/system-deps``) are not run (this suite runs in the
    ``dev`` install, offline); what they name must exist."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    problems = []
    for line in text.splitlines():
        if not SETUP_LINE.match(line):
            continue
        for named in EXTRA.findall(line):
            problems += [
                f"{line.strip()!r}: no extra {e!r} in pyproject.toml" for e in named.split(",") if e not in extras
            ]
        if "system-deps" in line and not (ROOT / "scripts" / "system-deps").exists():
            problems.append(f"{line.strip()!r}: scripts/system-deps does not exist")
    return problems


def without_setup_lines(text: str) -> str:
    return "".join(": set-up line, not run\n" if SETUP_LINE.match(line) else line for line in text.splitlines(True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DocRun:
    """One doc's blocks, in order, in its own working directory; servers stay up until the doc ends."""

    def __init__(self, doc: Path, workdir: Path, cache: Path):
        self.doc, self.workdir = doc, workdir
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(workdir),  # modules a doc writes (a package of your own) import as installed
            "LUDUS_CACHE": str(cache),
            "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": "1",  # three docs share the cores: a second torch thread per process only spins
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        for name in ("LUDUS_ENV_TOKEN", "LUDUS_POSTGRES_DSN"):
            self.env.pop(name, None)
        self.ports: dict[str, str] = {}  # the doc's port -> the free one its server listens on
        self.servers: list[subprocess.Popen] = []
        self.runs = 0  # processes run so far: each writes output-<n>.log
        self.previous = ""  # the last Python block's whole program, for `continue`

    def run(self) -> dict[int, str]:
        """Each block's line -> what went wrong ("" when it ran as it should)."""
        results = {}
        try:
            for block in blocks(self.doc):
                try:
                    results[block.line] = self.block(block)
                except Exception as exc:  # noqa: BLE001 - a harness error is that block's failure
                    results[block.line] = f"{type(exc).__name__}: {exc}"
        finally:
            for process in self.servers:
                end_group(process, signal.SIGTERM)
        return results

    def substitute(self, text: str) -> str:
        for documented, free in self.ports.items():
            text = re.sub(rf"(?<=[:\s=]){documented}(?!\d)", free, text)
        return text

    def block(self, block: Block) -> str:
        marker = block.marker
        if "skip" in marker or "output" in marker or marker.problem:
            return ""
        port, _, server_command = marker.get("server").partition(" ")
        if port:  # a free port for the server, written in place of the doc's here and in every later block
            self.ports[port] = str(free_port())
        if server_command:  # a server this block needs
            problem = self.serve(self.substitute(server_command), port, block.line)
            if problem:
                return problem
        text = self.substitute(block.text)
        for path in marker.get("copy").split():
            source, target = ROOT / path, self.workdir / path
            target.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
        if block.lang in DATA:
            problem = parse_data(block.lang, text)
            if problem:
                return problem
        if "file" in marker:
            path = self.workdir / marker.get("file")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if "before" in marker:
            problem = self.shell(self.substitute(marker.get("before")), 0)
            if problem:
                return f"before: {problem}"
        if "config" in marker:
            name = marker.get("file") or f"doc-test-{block.line}.yaml"
            if "file" not in marker:
                (self.workdir / name).write_text(text)
            return self.shell(shorten(f"ludus train --config {name}", marker), 0)
        if not block.runnable:
            return ""
        expected = int(marker.get("exit") or 0)
        program = (self.previous if "continue" in marker else "") + text
        if block.lang == "python":
            self.previous = program
        if block.lang == "python":
            path = self.workdir / (marker.get("file") or f"doc_block_{block.line}.py")
            path.write_text(program)
            return self.process([sys.executable, str(path)], expected)
        problems = setup_problems(program)
        if problems:
            return "\n".join(problems)
        self.install_without_dependencies(program)
        script = shorten(without_setup_lines(program), marker)
        if port and not server_command:  # the block is the server
            return self.serve(script, port, block.line)
        return self.shell(script, expected)

    def install_without_dependencies(self, program: str) -> None:
        """``pip install --no-deps NAME==VERSION``: that package from the tests' own install of it
        (``support.package_without_dependencies``, as tests/test_bfcl.py has it), on PYTHONPATH."""
        from support import package_without_dependencies

        for requirement in re.findall(r"^\s*pip install --no-deps (\S+==\S+)\s*$", program, re.M):
            folder = package_without_dependencies(requirement, requirement.split("==")[0].replace("-", "_"))
            self.env["PYTHONPATH"] += f"{os.pathsep}{folder}"

    def shell(self, script: str, expected: int) -> str:
        return self.process(["bash", "-e", "-o", "pipefail", "-c", script], expected)

    def start(self, argv: list[str], log: Path) -> subprocess.Popen:
        """``argv`` in a process group of its own, its output to ``log``."""
        with log.open("w") as out:
            return subprocess.Popen(
                argv, cwd=self.workdir, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def process(self, argv: list[str], expected: int) -> str:
        """Run ``argv`` to its end; whatever it left running in its group is killed."""
        self.runs += 1
        log = self.workdir / f"output-{self.runs}.log"
        process = self.start(argv, log)
        finished = wait_for_exit(process, BLOCK_TIMEOUT_S)
        end_group(process, signal.SIGKILL)
        if not finished:
            return f"still running after {BLOCK_TIMEOUT_S} s: {argv[-1][:2000]}\n{log.read_text()[-4000:]}"
        if process.returncode == expected:
            return ""
        output = log.read_text()[-4000:]
        return (
            f"exit code {process.returncode}, expected {expected}:\n{argv[-1][:2000]}\n--- output (end) ---\n{output}"
        )

    def serve(self, script: str, port: str, line: int) -> str:
        """``server: PORT [COMMAND]``: COMMAND (or the block itself) keeps running until the doc ends."""
        log = self.workdir / f"server-{line}.log"
        process = self.start(["bash", "-c", script], log)
        self.servers.append(process)
        url = f"http://127.0.0.1:{self.ports[port]}/health"
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while time.monotonic() < deadline:
            if has_exited(process):
                return f"the server exited:\n{script}\n{log.read_text()[-4000:]}"
            try:
                with NO_PROXY.open(url, timeout=5) as reply:
                    if reply.status == 200:
                        return ""
            except OSError:
                time.sleep(0.2)
        return f"the server did not answer {url} within {BLOCK_TIMEOUT_S} s:\n{log.read_text()[-4000:]}"


def has_exited(process: subprocess.Popen) -> bool:
    """Whether the process ended, without reaping it: until ``end_group`` reaps it, its id stays
    its process group's, so killing the group can never reach a stranger that got the id."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def wait_for_exit(process: subprocess.Popen, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while not has_exited(process):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def end_group(process: subprocess.Popen, first: signal.Signals) -> None:
    """Ends the process and what is left of its group: ``first`` (a server's SIGTERM lets it shut
    down), up to 30 s for the process to exit, then SIGKILL for the whole group; then reaps it."""
    if first != signal.SIGKILL:
        os.killpg(process.pid, first)
        wait_for_exit(process, 30)
    os.killpg(process.pid, signal.SIGKILL)  # the leader, a zombie at worst, keeps the group's id ours
    process.wait()


def parse_data(lang: str, text: str) -> str:
    try:
        DATA[lang](text)
    except Exception as exc:  # noqa: BLE001 - any parse error is the doc's
        return f"the {lang} block does not parse: {exc}"
    return ""


def commands_run(doc: Path) -> list[str]:
    """The doc's commands and Python programs that run: how long the doc takes, roughly."""
    found = []
    for block in blocks(doc):
        if "skip" in block.marker or "output" in block.marker:
            continue
        found += [block.marker.get(action) for action in ("before", "config", "server") if action in block.marker]
        if block.lang == "python":
            found.append(block.text)
        elif block.lang in SHELLS:
            found += [line for line in block.text.splitlines() if re.match(r"\s*(ludus|python3?) ", line)]
    return found


# ---- the tests ---------------------------------------------------------------------------------
class DocRuns:
    """The docs whose blocks this session selected, run side by side once, on first demand."""

    def __init__(self, docs: list[Path], root: Path):
        cache = root / "cache"
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="doc")
        self.futures: dict[Path, Future[dict[int, str]]] = {}
        for doc in sorted(docs, key=lambda d: -len(commands_run(d))):  # the longest first
            workdir = root / doc.stem
            workdir.mkdir()
            self.futures[doc] = self.pool.submit(DocRun(doc, workdir, cache).run)

    def result(self, block: Block) -> str:
        return self.futures[block.doc].result()[block.line]


@pytest.fixture(scope="module")
def doc_runs(request, tmp_path_factory):
    selected = {
        item.callspec.params["block"].doc
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_block" and item.module.__name__ == __name__
    }
    runs = DocRuns(sorted(selected), tmp_path_factory.mktemp("docs"))
    yield runs
    runs.pool.shutdown(wait=True, cancel_futures=True)  # after `-x`, the docs not started yet never start


def marker_problem(block: Block) -> str:
    marker = block.marker
    if marker.problem:
        return marker.problem
    if "skip" in marker and len(marker.get("skip").split()) < 3:
        return "`skip` needs a reason of a few words: what this machine lacks (a GPU, a model download, network)"
    if "exit" in marker and not marker.get("exit").lstrip("-").isdigit():
        return "`exit` takes the expected exit code"
    if "file" in marker and not marker.get("file"):
        return "`file` takes the path to write the block to"
    if "continue" in marker and block.lang != "python":
        return "`continue` joins Python blocks; shell blocks share their working directory already"
    if "skip" in marker or "output" in marker:
        return ""
    if not block.runnable and "file" not in marker and "config" not in marker:
        return (
            f"a {block.lang or 'plain'} block does not run by itself: say what it is with "
            "<!-- doc-test: file: NAME --> (a later block reads it), config (a training config), "
            "output (what something prints, or a picture) or skip: REASON"
        )
    return ""


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.id)
def test_block(block, doc_runs):
    problem = marker_problem(block)
    assert not problem, f"{block.id}: {problem}"
    if block.lang in DATA:  # skipped or not, data must parse
        problem = parse_data(block.lang, block.text)
        assert not problem, f"{block.id}: {problem}"
    if "skip" in block.marker:
        pytest.skip(block.marker.get("skip"))
    if "output" in block.marker:
        return
    failure = doc_runs.result(block)
    assert not failure, f"{block.id}: {failure}"


def test_every_marker_sits_just_before_a_block():
    attached = {(b.doc, b.marker.line) for b in ALL_BLOCKS if b.marker.line}
    stray = []
    for doc in DOCS:
        text = read(doc)
        for found in MARKER.finditer(text):
            line = text.count("\n", 0, found.start()) + 1
            if (doc, line) not in attached:
                stray.append(f"{doc.relative_to(ROOT)}:{line}")
    assert not stray, f"doc-test markers not on the line just before a code block: {stray}"


def test_no_indented_code_blocks():
    """An indented code block escapes this file: every example is fenced."""
    found = []
    for doc in DOCS:
        lines, fenced, prose = read(doc).splitlines(), False, ""
        for number, line in enumerate(lines, 1):
            if FENCE.match(line):
                fenced = not fenced
            if fenced:
                continue
            if line.startswith("    ") and not prose.strip() and line.strip():
                found.append(f"{doc.relative_to(ROOT)}:{number}: {line.strip()[:60]}")
            prose = line if not line.startswith("    ") or prose.strip() else prose
    assert not found, "indented code blocks (fence them, with a doc-test marker if needed):\n" + "\n".join(found)


# ---- commands named in prose and in blocks: checked against the parsers -----------------------
@functools.cache
def ludus_parsers() -> dict[str, argparse.ArgumentParser]:
    from ludus.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for parser in commands.choices.values():
        while parser._deferred:  # `ludus train`'s config-field flags are added when it parses
            parser._deferred.pop(0)(parser)
    return dict(commands.choices)


FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
PLACEHOLDER = re.compile(r"--[A-Z][A-Z_-]*$")  # `--FIELD VALUE`: any config field


def without_quotes(text: str) -> str:
    return re.sub(r"'[^']*'|\"[^\"]*\"", "''", text)


def flag_problems(where: str, command: str, words: str) -> list[str]:
    parsers = ludus_parsers()
    if command not in parsers:
        return [f"{where}: `ludus {command}` is no command (commands: {', '.join(parsers)})"]
    known = parsers[command]._option_string_actions
    return [
        f"{where}: `ludus {command}` has no flag {flag}"
        for flag in FLAG.findall(without_quotes(words))
        if flag not in known and not PLACEHOLDER.match(flag)
    ]


def shell_commands(block: Block) -> list[tuple[str, str]]:
    """``(subcommand, its words)`` of every ``ludus`` command in a shell block."""
    text = block.text
    found = []
    for start, end in invocations(text, "ludus"):
        words = text[start:end].split(None, 2)
        if len(words) > 1 and not words[1].startswith("-"):
            found.append((words[1], words[2] if len(words) > 2 else ""))
    return found


INLINE = re.compile(r"`(ludus [^`]+)`")


def inline_commands(doc: Path) -> list[tuple[str, str, str]]:
    """``(where, subcommand, words)`` of each `` `ludus …` `` span in the prose, and of each bare
    `` `--flag` `` in a table row whose first cell names the command."""
    found = []
    fenced = False
    for number, line in enumerate(read(doc).splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        where = f"{doc.relative_to(ROOT)}:{number}"
        spans = INLINE.findall(line)
        for span in spans:
            words = span.split(None, 2)
            if len(words) > 1 and not words[1].startswith("-"):
                found.append((where, words[1], words[2] if len(words) > 2 else ""))
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2 and INLINE.search(cells[1]):
            command = INLINE.search(cells[1]).group(1).split()[1]
            flags = re.findall(r"`(--?[a-z][\w-]*)(?: [^`]*)?`", "|".join(cells[2:]))
            found += [(where, command, flag) for flag in flags]
    return found


def test_every_ludus_command_in_the_docs_exists_with_its_flags():
    problems = []
    for doc in DOCS:
        for where, command, words in inline_commands(doc):
            problems += flag_problems(where, command, words)
    for block in ALL_BLOCKS:
        if block.lang in SHELLS:
            for command, words in shell_commands(block):
                problems += flag_problems(block.id, command, words)
    assert not problems, "\n".join(problems)


def example_commands() -> list[tuple[str, str, str]]:
    """``(where, example, its words)`` of every ``python examples/NAME.py …`` in the docs and in
    the examples' own docstrings."""
    sources = [(doc.relative_to(ROOT), read(doc)) for doc in DOCS]
    sources += [(p.relative_to(ROOT), p.read_text()) for p in sorted((ROOT / "examples").glob("*.py"))]
    found = []
    for where, text in sources:
        for m in re.finditer(r"python3? (examples/[\w.]+\.py)([^`\n#]*)", text):
            found.append((f"{where}:{text.count(chr(10), 0, m.start()) + 1}", m[1], m[2]))
    return found


def test_example_commands_use_the_flags_the_examples_have():
    helps: dict[str, str] = {}
    problems = []
    for where, example, words in example_commands():
        if not (ROOT / example).exists():
            problems.append(f"{where}: {example} does not exist")
            continue
        if example not in helps:
            helps[example] = subprocess.run(
                [sys.executable, str(ROOT / example), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
            ).stdout
        flags = set(FLAG.findall(helps[example]))
        problems += [
            f"{where}: {example} has no flag {f}" for f in FLAG.findall(without_quotes(words)) if f not in flags
        ]
    assert not problems, "\n".join(problems)


def test_every_example_is_run_by_the_tests():
    """Each ``examples/*.py`` runs in a doc block here (its command in a block that is not skipped)
    or in the test named for it in EXAMPLE_TESTS."""
    in_blocks = {
        m[1]
        for b in ALL_BLOCKS
        if b.runnable and "skip" not in b.marker
        for m in re.finditer(r"python3? examples/([\w.]+\.py)", b.text)
    }
    missing = []
    for example in sorted(p.name for p in (ROOT / "examples").glob("*.py")):
        test = EXAMPLE_TESTS.get(example)
        if example in in_blocks or (test and example in (ROOT / "tests" / test).read_text()):
            continue
        missing.append(example)
    assert not missing, f"examples no test runs: {missing}"


# ---- the harness itself --------------------------------------------------------------------------
def test_a_block_that_cannot_run_needs_a_marker_and_a_skip_needs_a_reason():
    doc = ROOT / "README.md"
    assert "does not run by itself" in marker_problem(Block(doc, 1, "yaml", "a: 1\n", Marker()))
    assert "does not run by itself" in marker_problem(Block(doc, 1, "", "a picture\n", Marker()))
    assert "needs a reason" in marker_problem(Block(doc, 1, "bash", "ludus envs\n", read_marker(" skip: ", 1)))
    assert "unknown action" in marker_problem(Block(doc, 1, "bash", "ludus envs\n", read_marker(" sikp: a typo", 1)))
    assert not marker_problem(Block(doc, 1, "yaml", "a: 1\n", read_marker(" file: a.yaml ", 1)))
    assert read_marker(" copy: x; skip: no GPU; nor a model ", 1).actions == {
        "copy": "x",
        "skip": "no GPU; nor a model",
    }


def test_shorten_appends_to_each_command_it_names_before_comments_and_operators():
    text = "ludus train --env x   # a note\nludus eval y && ludus train-rm --data p\nludus eval z | tail -1\n"
    shorter = shorten(text, read_marker(" shorten: ludus eval --tasks 9", 1))
    train, rm, evaluate = SHORTER["ludus train"], SHORTER["ludus train-rm"], SHORTER["ludus eval"]
    assert shorter == (
        f"ludus train --env x {train}   # a note\n"
        f"ludus eval y {evaluate} --tasks 9 && ludus train-rm --data p {rm}\n"
        f"ludus eval z {evaluate} --tasks 9 | tail -1\n"
    )
    assert shorten(text, Marker()) == text


def test_blocks_run_in_order_share_their_folder_and_leave_no_process(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        '<!-- doc-test: file: data/n.json -->\n```json\n{"n": 41}\n```\n\n'
        "```python\nimport json\nn = json.load(open('data/n.json'))['n'] + 1\n```\n\n"
        "<!-- doc-test: continue -->\n```python\nprint(n)\nopen('answer.txt', 'w').write(str(n))\n```\n\n"
        '```bash\ntest "$(cat answer.txt)" = 42\nsleep 1000 &\necho $! > sleeper.pid\n```\n\n'
        "<!-- doc-test: exit: 3 -->\n```bash\nexit 3\n```\n\n"
        "```bash\nfalse\ntrue\n```\n"
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    results = DocRun(doc, workdir, tmp_path / "cache").run()
    assert list(results.values())[:5] == ["", "", "", "", ""]
    assert results[max(results)].startswith("exit code 1, expected 0")  # -e: a failing line fails the block
    sleeper = Path(f"/proc/{(workdir / 'sleeper.pid').read_text().strip()}/stat")
    # the block's background job went with its group (dead, or a zombie its new parent has yet to reap)
    assert not sleeper.exists() or sleeper.read_text().rsplit(")", 1)[1].split()[0] == "Z"
