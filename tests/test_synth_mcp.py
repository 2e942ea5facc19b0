"""`ludus synth --mcp COMMAND --rubric RUBRIC` (issue 36): a tool environment around a real MCP
server (tests/data/mcp_calendar_server.py, written with the SDK's MCPServer, run over stdio).

The package installs and passes `ludus check --redteam`; the oracle scores 1 and doing nothing 0;
a server that fails at start, hangs, dies or writes junk is one clear sentence (at synth time) or
`infra_error` (in an episode), in bounded time, and leaves no process of its own behind (its
child included); rubrics that cannot grade are refused before anything is written."""

from __future__ import annotations

import importlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ludus.cli import main
from ludus.core.types import Message, Status, ToolCall

SERVER = Path(__file__).parent / "data" / "mcp_calendar_server.py"
RUBRIC = """\
instructions: "You keep a calendar through its tools."
tasks:
  - tool: add_event
    goal: "Put '{title}' in the calendar on {date}."
    checks:
      - call: {tool: find_events, arguments: {date: "{date}"}}
        expect: {equals: {result: [{id: 1, title: "{title}", date: "{date}", kind: meeting}]}}
  - tool: add_event
    goal: "Add the {kind} '{title}' on {date}, then say how many events that day has."
    arguments:
      title: {one_of: ["Dentist", "Team lunch", "Yoga class"]}
    checks:
      - call: {tool: find_events, arguments: {date: "{date}"}}
        expect: {contains: '"kind": "{kind}"'}
      - answer: {equals: 1}
"""


def command(*flags: str) -> str:
    return shlex.join([sys.executable, str(SERVER), *flags])


def alive(pids_file: Path) -> list[int]:
    """The processes recorded in ``pids_file`` that still run (a zombie has ended)."""
    if not pids_file.exists():
        return []
    out = []
    for pid in map(int, pids_file.read_text().split()):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z":
            out.append(pid)
    return out


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The calendar's package, written once by `ludus synth --mcp`."""
    base = tmp_path_factory.mktemp("calendar")
    rubric = base / "rubric.yaml"
    rubric.write_text(RUBRIC)
    out = base / "pkg"
    assert main(["synth", "--mcp", command(), "--rubric", str(rubric), "-o", str(out)]) == 0
    return out


@pytest.fixture
def Env(package):  # noqa: N802 - the package's class
    sys.path.insert(0, str(package))
    try:
        yield importlib.import_module("ludus_synth_calendar").Env
    finally:
        sys.path.remove(str(package))


@pytest.fixture
def pids(tmp_path, monkeypatch):
    """Every server process (and its child) records its id here."""
    path = tmp_path / "pids"
    monkeypatch.setenv("MCP_CALENDAR_FLAGS", f"--child --pid-file {path}")
    return path


def task_of(env, kind: int):
    source = env.task_source("train")
    return next(t for t in map(source.get, range(50)) if t.info["task"] == kind)


def play(env, task, messages):
    env.reset(task)
    for message in messages:
        result = env.step(message)
        if result.done:
            return result
    raise AssertionError("the episode did not end")


# ---- the package -------------------------------------------------------------------------------


@pytest.mark.slow  # ~70 s on two loaded cores: each of the check's ~75 scored episodes starts a server
def test_the_package_installs_and_passes_the_red_team(package, tmp_path):
    files = {p.name for p in (package / "ludus_synth_calendar").iterdir()}
    assert {"__init__.py", "server.json", "tools.json", "rubric.yaml"} <= files
    server = json.loads((package / "ludus_synth_calendar" / "server.json").read_text())
    assert server["command"] == [sys.executable, str(SERVER)] and Path(server["cwd"]).is_absolute()
    tools = json.loads((package / "ludus_synth_calendar" / "tools.json").read_text())
    assert [t["name"] for t in tools["tools"]] == ["add_event", "find_events", "delete_event"]
    report = (package / "SYNTH.md").read_text()
    assert "`delete_event`: Remove an event. — no task: the rubric asks none" in report
    assert "`find_events`: The events on one day. — checks" in report and "weaker guarantee" in report
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
    subprocess.run([*pip, str(package)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    check = subprocess.run([sys.executable, "-m", "ludus.cli", "check", "calendar", "--redteam", "--tasks", "1"],
                           env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert "meets the environment contract" in check.stdout and "resists the red-team" in check.stdout


def test_the_oracle_scores_one_doing_nothing_or_the_wrong_thing_zero(Env, pids):
    env = Env()
    try:
        plain, counted = task_of(env, 0), task_of(env, 1)
        assert plain.prompt.startswith("You keep a calendar through its tools. Put '")
        assert "<answer>" in counted.prompt and counted.info["arguments"]["title"] in (
            "Dentist",
            "Team lunch",
            "Yoga class",
        )
        for task in (plain, counted):
            result = play(env, task, env.reference_actions(task))
            assert result.score.status == Status.CORRECT and result.reward == 1.0, result.score
            assert play(env, task, [Message("assistant", "Done.")]).score.status == Status.WRONG
        args = plain.info["arguments"]
        wrong = {**args, "date": "2020-01-01"}
        result = play(env, plain, [Message("assistant", "", [ToolCall("add_event", wrong, id="a")]), Message("assistant", "Done.")])  # fmt: skip
        assert result.score.status == Status.WRONG and "check 1 (find_events)" in result.score.reason
        twice = [Message("assistant", "", [ToolCall("add_event", args, id="a"), ToolCall("add_event", args, id="b")])]
        assert play(env, plain, [*twice, Message("assistant", "Done.")]).score.status == Status.WRONG
        calls = env.reference_actions(counted)[:1]  # the right call, then a wrong count
        assert play(env, counted, [*calls, Message("assistant", "<answer>2</answer>")]).score.status == Status.WRONG
        env.reset(plain)  # a tool error is the server's message, not an infra error
        step = env.step(Message("assistant", "", [ToolCall("delete_event", {"event_id": 7}, id="d")]))
        assert step.observation.messages[0].content.startswith("Error: ") and "no event 7" in step.observation.messages[0].content  # fmt: skip
        assert step.info["tool_errors"] == 1 and not step.done
    finally:
        env.close()
    assert alive(pids) == [] and len(pids.read_text().split()) >= 2


def test_what_the_server_says_is_written_as_text_never_as_code(tmp_path):
    hostile = 'Cal"\nimport os; os.environ["PWNED"] = "1"  # \x1b]0;title\x07 [project]'
    rubric, out = tmp_path / "rubric.yaml", tmp_path / "out"
    rubric.write_text(RUBRIC)
    assert main(["synth", "--mcp", command("--name", hostile), "--rubric", str(rubric), "-o", str(out)]) == 0
    module = next(p.name for p in out.iterdir() if p.name.startswith("ludus_synth_"))
    assert module == "ludus_synth_cal_import_os_os_environ_pwned_1_0_title"  # a slug of the name
    sys.path.insert(0, str(out))
    try:
        made = importlib.import_module(module).Env
    finally:
        sys.path.remove(str(out))
    assert "PWNED" not in os.environ and made.description.startswith("the Cal")
    assert "\x1b" not in (out / "SYNTH.md").read_text() and "\\u001b" in (out / "SYNTH.md").read_text()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    for force in ([], ["--force"]):  # refused before the server starts, and nothing removed
        assert main(["synth", "--mcp", command(), "--rubric", str(rubric), "-o", str(kept), *force]) == 2
    assert (kept / "notes.txt").read_text() == "mine"
    assert main(["synth", "--mcp", command(), "--rubric", str(rubric), "-o", str(out), "--force", "--name", "cal"]) == 0
    assert (out / "ludus_synth_cal" / "server.json").exists() and not (out / module).exists()


# ---- servers that fail -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        (
            "--exit-at-start",
            "exited with code 3 while starting (initialize, tools/list); its last line on stderr: 'calendar: cannot open the calendar file'",
        ),  # fmt: skip
        ("--hang-at-start", "did not answer within 1 s while starting"),
        (
            "--junk",
            "wrote a line to stdout that is not JSON-RPC while starting (initialize, tools/list) ('Calendar server 1.0 starting')",
        ),  # fmt: skip
    ],
)
def test_a_server_that_fails_at_start_is_one_clear_sentence(tmp_path, capsys, flag, said):
    rubric, out, pids = tmp_path / "rubric.yaml", tmp_path / "out", tmp_path / "pids"
    rubric.write_text(RUBRIC)
    started = time.monotonic()
    code = main(["synth", "--mcp", command(flag, "--child", "--pid-file", str(pids)), "--rubric", str(rubric),
                 "-o", str(out), "--timeout", "1"])  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"cannot list the MCP server's tools: the MCP server {said}" in err, err
    assert time.monotonic() - started < 20 and not out.exists()
    assert alive(pids) == [] and len(pids.read_text().split()) == 2


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ("--hang-on add_event", "the MCP server did not answer within 1 s on tools/call add_event"),
        ("--crash-on add_event", "the MCP server exited with code 9 on tools/call add_event"),
        (
            "--hang-on find_events",
            "check 1 (find_events): the MCP server did not answer within 1 s on tools/call find_events",
        ),  # fmt: skip
        ("--without find_events", "the MCP server no longer lists the tool 'find_events' this environment's tasks use"),
    ],
)
def test_a_server_that_fails_in_an_episode_is_infra_error(Env, pids, monkeypatch, flags, said):
    monkeypatch.setenv("MCP_CALENDAR_FLAGS", f"{os.environ['MCP_CALENDAR_FLAGS']} {flags}")
    env = Env(call_timeout=1.0)
    try:
        task = task_of(env, 0)
        started = time.monotonic()
        result = play(env, task, env.reference_actions(task))
        assert result.score.status == Status.INFRA_ERROR and said in result.score.reason, result.score
        assert time.monotonic() - started < 20
        assert env.server is None  # the episode's server is gone; the next episode starts another
    finally:
        env.close()
    assert alive(pids) == []


# ---- rubrics that cannot grade -------------------------------------------------------------------

ADD = "  - tool: add_event\n    goal: \"Put '{title}' on {date}.\"\n"
FIND = '      - call: {tool: find_events, arguments: {date: "{date}"}}\n        expect: {contains: "{title}"}\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks: []\n", "tasks: must be a list of at least one task"),
        ("task:\n" + ADD, "the top level: unknown key 'task' (known: instructions, tasks)"),
        (
            "tasks:\n" + ADD.replace("{title}", "{titel}") + "    checks:\n" + FIND,
            "tasks[0].goal: {titel} names no argument of add_event (it takes: title, date, kind)",
        ),
        ("tasks:\n" + ADD.replace("'{title}'", "'{title'") + "    checks:\n" + FIND, "a lone '{'"),
        (
            "tasks:\n" + ADD.replace("add_event", "add_events") + "    checks:\n" + FIND,
            "tasks[0].tool: the server lists no tool 'add_events' (it lists: add_event, find_events, delete_event)",
        ),
        (
            "tasks:\n" + ADD + "    checks:\n" + FIND.replace("find_events", "list_events"),
            "the server lists no tool 'list_events'",
        ),  # fmt: skip
        (
            "tasks:\n" + ADD + "    checks:\n" + FIND.replace("contains", "contain"),
            "tasks[0].checks[0].expect: unknown key 'contain' (known: contains, not_contains, equals, is_error)",
        ),
        ("tasks:\n" + ADD + "    checks:\n" + FIND.replace("{date: ", "{day: "), "'day' is no argument of find_events"),
        ("tasks:\n" + ADD + "    checks: []\n", "a task without one would pay anything"),
        ("tasks:\n" + ADD, "tasks[0]: 'checks' is required"),
        ("tasks:\n" + ADD + "    checks:\n      - answer: {equals: '{title}'}\n", "needs a `call` check"),
        (
            "tasks:\n" + ADD + "    checks:\n" + FIND + "      - answer: {equals: 1}\n      - answer: {equals: 2}\n",
            "more than one `answer`",
        ),  # fmt: skip
        (
            "tasks:\n" + ADD + "    arguments: {kind: {value: concert}}\n    checks:\n" + FIND,
            'tasks[0].arguments.kind: "concert" does not fit the argument\'s schema',
        ),
        ("tasks:\n" + ADD + "    checks:\n" + FIND.replace('{contains: "{title}"}', "{}"), "names nothing to expect"),
        ("x: &a [1]\ny: *a\n", "YAML aliases (*a) are not read"),
        ("tasks: [\n", "is not YAML that can be read"),
    ],
)
def test_rubrics_that_cannot_grade_are_refused(package, text, message):
    from ludus.envs.synth.mcp import RubricError, read_rubric

    tools = json.loads((package / "ludus_synth_calendar" / "tools.json").read_text())["tools"]
    with pytest.raises(RubricError) as caught:
        read_rubric(text.encode(), tools, "rubric.yaml")
    assert message in str(caught.value), str(caught.value)


def test_a_task_whose_arguments_cannot_be_drawn_is_left_out_with_the_reason():
    from ludus.envs.synth.mcp import read_rubric

    tools = [
        {
            "name": "add_event",
            "description": "",
            "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}},
        },  # fmt: skip
        {
            "name": "odd",
            "description": "",
            "inputSchema": {
                "type": "object",
                "required": ["n"],
                "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 2}},
            },
        },  # fmt: skip
    ]
    check = "    checks:\n      - call: {tool: add_event, arguments: {title: x}}\n        expect: {is_error: false}\n"
    text = f"tasks:\n  - tool: odd\n    goal: 'Use {{n}}.'\n{check}  - tool: add_event\n    goal: 'Add {{title}}.'\n{check}"
    rubric = read_rubric(text.encode(), tools)
    assert [t.tool for t in rubric.tasks] == ["add_event"]
    assert rubric.left_out[0].problem.startswith("its arguments cannot be drawn: no arguments drawn in 50 tries fit")


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ('{not_contains: "{title}"}', "its checks pass before anything is done"),
        ('{contains: "{title} (moved)"}', "after the task's call add_event("),
    ],
)
def test_a_rubric_whose_checks_do_not_tell_is_refused_when_tried(tmp_path, capsys, expect, message):
    rubric, out = tmp_path / "rubric.yaml", tmp_path / "out"
    rubric.write_text("tasks:\n" + ADD + "    checks:\n" + FIND.replace('{contains: "{title}"}', expect))
    assert main(["synth", "--mcp", command(), "--rubric", str(rubric), "-o", str(out)]) == 2
    assert message in " ".join(capsys.readouterr().err.split()) and not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mcp", "python server.py"], "--mcp needs --rubric RUBRIC.yaml"),
        (["api.yaml", "--mcp", "python server.py", "--rubric", "r.yaml"], "not both and not neither"),
        ([], "not both and not neither"),
        (["api.yaml", "--rubric", "r.yaml"], "--rubric goes with --mcp"),
        (["--mcp", "", "--rubric", "r.yaml"], "--mcp needs a command"),
        (["--mcp", "no-such-program-here", "--rubric", "r.yaml"], "no program 'no-such-program-here' on PATH"),
    ],
)
def test_the_command_line_says_what_is_missing(tmp_path, capsys, argv, message):
    assert main(["synth", *argv, "-o", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out").exists()
