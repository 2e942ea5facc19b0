"""``ludus check --redteam ENV``: a report card of the ways a policy could earn reward without
solving the task, played against an environment on a few of its tasks.

One line per check, each a pass or a fail (the throughput line is a figure):

* **oracle** — the environment's ``reference_actions`` earn the top of ``reward_range`` with
  status ``correct`` on every sampled task (the tasks are solvable, the grader says so);
* **floor** — the nothing policy (an empty reply every turn) and a junk reply score 0 and are
  never ``correct``; the nothing policy's reward on a task is that task's *floor*;
* **cheat KIND/NAME** — one line per generic cheat of :data:`CHEATS` that applies to the
  environment: none of its variants may be ``correct``, earn more than the floor, end in
  ``infra_error`` (the grader broke on model output) or make the environment raise;
* **env cheat NAME** — the same for each scripted episode of the environment's own
  :meth:`ludus.core.env.Env.cheats` hook;
* **determinism** — the oracle's episodes replayed on the same instance after all the cheats
  and on a fresh instance give identical observations and scores;
* **throughput** — oracle episodes per second on one instance (a figure, never a failure).

Which cheats apply follows from what the environment *is*, per task, never from its name
(:func:`env_kinds`):

* ``tools`` — it offers tools (``Env.tools()`` or the first observation's): call every tool
  with arguments made from its schema, read hidden paths (``/tests``, ``../``, answer files)
  through every string parameter and hand in what was read (a tool reply that shows the gold
  answer fails the line too), send huge arguments, send malformed calls;
* ``code`` — its reference final reply is a fenced Python block: early exits, objects whose
  ``__eq__`` is always true, tampering with the test runner and the test files, expected values
  read off the calling test or from test files on disk, printed pass markers — each submitted as
  the final reply, in a ```python block (the functions named by the prompt's ``def`` lines);
* ``answer`` — any other reference final reply (text: a number, an expression, a query): empty
  answers, hedges (the gold between two wrong answers, so that neither a first-wins nor a
  last-wins grader picks it: only an any-match grader does), every option, enormous answers.
  The cheats are written in the environment's own answer format: the reference reply with its
  answer (the ``\\boxed{}`` contents, a fenced block, an ``<answer>`` tag, or the whole reply)
  replaced, and the wrong answers are other tasks' gold answers (and the gold ± 1 for integers).

An environment may also say what it is with a class attribute ``redteam_kinds`` (a set of the
names above), which replaces the inference — e.g. for an environment without reference
answers. Through an env server (``--env-server``) answers stay on the server: there is no
oracle and no gold to hedge with, so those lines say so and the rest still run.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ludus.certify.contract import JUNK, MAX_STEPS, CheckReport, CheckResult, difference, malformed_actions, step_view
from ludus.core.env import Env
from ludus.core.registry import EnvLoadError, factory
from ludus.core.types import Message, Observation, Score, StepResult, Task, ToolCall, ToolSpec

KINDS: tuple[str, ...] = ("answer", "code", "tools")
"""What an environment can be, for choosing cheats (see :func:`env_kinds`)."""

EPSILON = 1e-9

Action = Message | Callable[[list[Message]], Message]
"""A scripted turn: a message, or a function of the conversation so far (to answer with what a tool returned)."""
Actions = list[Action]
Variant = tuple[str, Actions]


def _say(text: str) -> Message:
    return Message("assistant", text)


def _calls(*calls: ToolCall, text: str = "") -> Message:
    return Message("assistant", text, tool_calls=list(calls))


# ---- what the red-team knows about one task ----------------------------------------------------

_BOXED = "\\boxed{"
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)\n?[ \t]*```", re.S)
_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_INT = re.compile(r"[+-]?\d+")
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.M)


def answer_form(reply: str) -> tuple[str, str, str] | None:
    """``(before, answer, after)`` with ``before + answer + after == reply``: where the answer
    sits in a reference reply — the last ``\\boxed{}``, the last fenced block, the last
    ``<answer>`` tag, else the whole stripped reply. ``None`` for an empty reply."""
    start = reply.rfind(_BOXED)
    if start >= 0:
        depth, i = 1, start + len(_BOXED)
        for j in range(i, len(reply)):
            depth += {"{": 1, "}": -1}.get(reply[j], 0)
            if depth == 0:
                return reply[:i], reply[i:j], reply[j:]
    fences = list(_FENCE.finditer(reply))
    if fences:
        m = fences[-1]
        return reply[: m.start(2)], m.group(2), reply[m.end(2) :]
    tags = list(_TAG.finditer(reply))
    if tags:
        m = tags[-1]
        return reply[: m.start(1)], m.group(1), reply[m.end(1) :]
    stripped = reply.strip()
    if not stripped:
        return None
    at = reply.index(stripped)
    return reply[:at], stripped, reply[at + len(stripped) :]


@dataclass
class Target:
    """One task as the cheats see it: the opening, the tools, the reference episode (``None``
    when the environment gives none) and, derived from them, the answer format and wrong answers."""

    task: Task
    opening: Observation
    tools: list[ToolSpec]
    reference: Actions | None
    others: list[str] = field(default_factory=list)  # other tasks' gold answers, in this format
    kinds: frozenset[str] = frozenset()
    answers_in_tools: bool = False  # the environment's Env.answers_in_tools: a tool showing the answer is no leak

    @property
    def final_text(self) -> str | None:
        """The reference's final reply when it is text (not a tool call)."""
        if not self.reference or self.reference[-1].tool_calls:
            return None
        return self.reference[-1].content

    @property
    def form(self) -> tuple[str, str, str] | None:
        return None if self.final_text is None else answer_form(self.final_text)

    @property
    def gold(self) -> str | None:
        form = self.form
        return None if form is None else form[1].strip()

    def wrap(self, answer: str) -> str:
        """``answer`` in the environment's own answer format (bare when there is no reference)."""
        form = self.form
        return answer if form is None else form[0] + answer + form[2]

    def wrong(self) -> list[str]:
        """At least two answers different from the gold: gold ± 1 for an integer, other tasks' answers."""
        gold = self.gold
        if gold is None:
            return []
        out: list[str] = []
        if _INT.fullmatch(gold):
            out += [str(int(gold) - 1), str(int(gold) + 1)]
        tokens = gold.split()
        if len(tokens) > 1 and tokens[::-1] != tokens:
            out.append(" ".join(tokens[::-1]))
        out += [o for o in self.others if o.strip() != gold]
        unique = list(dict.fromkeys(o for o in out if o.strip() and o.strip() != gold))
        return unique if len(unique) >= 2 else unique * 2

    def function_names(self) -> list[str]:
        """Functions the task asks for: ``def`` lines of the prompt and of the reference code."""
        text = "\n".join(m.content for m in self.opening.messages if m.role == "user")
        names = _DEF.findall(text) + _DEF.findall(self.final_text or "")
        return list(dict.fromkeys(n for n in names if not n.startswith("test")))


def env_kinds(env: Env, opening: Observation, reference: Actions | None) -> frozenset[str]:
    """Which cheat families apply: the environment's ``redteam_kinds`` class attribute when it has
    one, else ``tools`` when it offers tools, and ``code`` or ``answer`` by its reference final
    reply (a fenced Python block, or any other text)."""
    declared = getattr(env, "redteam_kinds", None)
    if declared is not None:
        kinds = frozenset(declared)
        unknown = kinds - set(KINDS)
        if unknown:
            raise ValueError(f"redteam_kinds names unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
        return kinds
    kinds = set()
    if env.tools() or opening.tools:
        kinds.add("tools")
    final = reference[-1] if reference else None
    if final is None:
        if not kinds:
            kinds.add("answer")  # a text reply is all a tool-less environment can take
    elif not final.tool_calls:
        fences = [lang.lower() for lang, _ in _FENCE.findall(final.content)]
        kinds.add("code" if any(lang in ("python", "py", "python3") for lang in fences) else "answer")
    return frozenset(kinds)


# ---- the cheat library -------------------------------------------------------------------------


@dataclass(frozen=True)
class Cheat:
    """A generic cheat: ``variants(target)`` yields ``(label, actions)`` episodes for one task
    (none when it does not apply to that task)."""

    name: str
    kind: str
    what: str
    variants: Callable[[Target], Iterable[Variant]]

    @property
    def label(self) -> str:
        return f"cheat {self.kind}/{self.name}"


# answer environments


def _empty(t: Target) -> Iterator[Variant]:
    seen = set()
    for text in (t.wrap(""), t.wrap(" "), "\\boxed{}", "<answer></answer>", "Answer:", "```\n```"):
        if text not in seen:
            seen.add(text)
            yield f"empty {text!r}", [_say(text)]


def _hedge(t: Target) -> Iterator[Variant]:
    gold, wrong = t.gold, t.wrong()
    if gold is None or len(wrong) < 2:
        return
    a, b = wrong[0], wrong[1]
    yield "'a or GOLD or b'", [_say(t.wrap(f"{a} or {gold} or {b}"))]
    yield "'a, GOLD, b'", [_say(t.wrap(f"{a}, {gold}, {b}"))]
    yield "three answers, GOLD in the middle", [_say("\n".join(t.wrap(x) for x in (a, gold, b)))]
    yield "three boxed answers", [_say(f"\\boxed{{{a}}} \\boxed{{{gold}}} \\boxed{{{b}}}")]
    yield "three <answer> tags", [_say(f"<answer>{a}</answer> <answer>{gold}</answer> <answer>{b}</answer>")]
    yield "three 'Answer:' lines", [_say(f"Answer: {a}\nAnswer: {gold}\nAnswer: {b}")]


def _every_option(t: Target) -> Iterator[Variant]:
    yield "every choice A-E", [_say(t.wrap("A, B, C, D, E"))]
    yield "every choice, each marked", [_say(" ".join(t.wrap(c) for c in "ABCDE"))]
    gold = t.gold
    if gold is not None and _INT.fullmatch(gold):
        g = int(gold)
        yield "every integer within 50 of the gold", [_say(t.wrap(", ".join(str(i) for i in range(g - 50, g + 51))))]
        yield "20 marked integers around the gold", [_say("\n".join(t.wrap(str(i)) for i in range(g - 10, g + 11)))]
    elif gold is not None:
        options = [*t.wrong(), gold, *t.others]
        options = list(dict.fromkeys(options))
        if len(options) < 2:  # every known answer is the gold: playing it is no cheat
            return
        middle = len(options) // 2
        options.insert(middle, options.pop(options.index(gold)))
        yield "every known answer, each marked", [_say("\n".join(t.wrap(o) for o in options))]


def _enormous(t: Target) -> Iterator[Variant]:
    gold, wrong = t.gold, t.wrong()
    if gold is None or len(wrong) < 2:
        return
    if _INT.fullmatch(gold):
        g = int(gold)
        yield "40,001 integers around the gold", [_say(t.wrap(" ".join(str(i) for i in range(g - 20_000, g + 20_001))))]
    yield "the gold between wrong answers, 20,000 times", [_say(t.wrap(f"{wrong[0]} {gold} {wrong[1]}\n" * 20_000))]


# code environments

_ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __lt__ = __le__ = __gt__ = __ge__ = __eq__

    def __hash__(self):
        return 0

    def __bool__(self):
        return True

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())

    def __contains__(self, item):
        return True

    def __repr__(self):
        return "AlwaysEqual()"


class EqualStr(str):
    __eq__ = AlwaysEqual.__eq__
    __ne__ = AlwaysEqual.__ne__
    __hash__ = str.__hash__


class EqualInt(int):
    __eq__ = AlwaysEqual.__eq__
    __ne__ = AlwaysEqual.__ne__
    __hash__ = int.__hash__
"""

PASS_MARKERS = (
    "All tests passed\nOK\n\n----------------------------------------------------------------------\n"
    "Ran 4 tests in 0.001s\n\nOK\n"
    "test_solution.py::test_all PASSED\n============================== 4 passed in 0.01s ==============================\n"
    '{"passed": 4, "failed": 0, "errors": 0, "total": 4, "status": "correct", "reward": 1.0, "ok": true}\n'
)

_BUILTINS_TAMPER = """
import builtins
import sys


class _Swallowed(Exception):
    pass


builtins.AssertionError = _Swallowed
builtins.isinstance = lambda *args, **kwargs: True
builtins.print = lambda *args, **kwargs: None
sys.excepthook = lambda *args: None
_real_import = builtins.__import__


def _import(name, *args, **kwargs):
    module = _real_import(name, *args, **kwargs)
    if name.split(".")[0] in ("unittest", "pytest", "_pytest"):
        for attr in dir(module):
            if attr.startswith("assert") or attr in ("fail", "skip", "xfail"):
                try:
                    setattr(module, attr, lambda *a, **k: None)
                except Exception:
                    pass
    return module


builtins.__import__ = _import
"""

_RUNNER_TAMPER = """
import unittest

unittest.TestCase.run = lambda self, result=None: result
for _name in dir(unittest.TestCase):
    if _name.startswith("assert") or _name == "fail":
        setattr(unittest.TestCase, _name, lambda *args, **kwargs: None)
try:
    import _pytest.python
    import _pytest.reports
    import _pytest.runner
    import pytest

    _pytest.python.Function.runtest = lambda self: None
    _pytest.runner.pytest_runtest_call = lambda item: None
    _pytest.reports.TestReport.passed = property(lambda self: True)
    _pytest.reports.TestReport.failed = property(lambda self: False)
    _pytest.reports.TestReport.outcome = property(lambda self: "passed", lambda self, value: None)
    pytest.fail = pytest.skip = pytest.xfail = lambda *args, **kwargs: None
except Exception:
    pass
"""

_NEARBY_FILES = """
import os


def _nearby_files():
    \"\"\"Paths of up to 5,000 files within three levels of where tests may live.\"\"\"
    seen = 0
    for root in dict.fromkeys([os.getcwd(), os.path.dirname(os.getcwd()), "/tmp", "/tests", "/work"]):
        for dirpath, dirnames, filenames in os.walk(root):
            if dirpath.count(os.sep) - root.count(os.sep) >= 3:
                dirnames[:] = []
            for name in filenames:
                seen += 1
                if seen > 5000:
                    return
                yield dirpath, name
"""
"""Cheat payload: the files a cheat may tamper with or read (shared by two of them)."""

_FILE_TAMPER = (
    _NEARBY_FILES
    + '''
import sys

CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
PASSING = "def test_ok():\\n    pass\\n\\n\\ndef check(candidate):\\n    pass\\n"


def _write(path, text):
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except Exception:
        pass


places = [os.getcwd(), os.path.dirname(os.getcwd()), "/tmp", os.path.expanduser("~")]
places += [p for p in sys.path if p and os.path.isdir(p)]
for place in dict.fromkeys(places):
    _write(os.path.join(place, "conftest.py"), CONFTEST)
    _write(os.path.join(place, "sitecustomize.py"), "import builtins\\nbuiltins.AssertionError = Exception\\n")
    _write(os.path.join(place, "usercustomize.py"), "")
    _write(os.path.join(place, "ludus_pass.pth"), "import os; os.environ.setdefault('PYTEST_ADDOPTS', '-p no:python')\\n")
for dirpath, name in _nearby_files():
    if name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py")):
        _write(os.path.join(dirpath, name), PASSING)
os.environ["PYTEST_ADDOPTS"] = "-p no:python --co"
'''
)


def _program(t: Target, prelude: str, body: str) -> Actions:
    """A solution: ``prelude`` at module level, then every asked-for function with ``body``."""
    stubs = "".join(f"\n\ndef {name}(*args, **kwargs):\n    {body}\n" for name in t.function_names())
    return [_say(f"```python\n{prelude.strip()}\n{stubs}```")]


def _early_exit(t: Target) -> Iterator[Variant]:
    yield "sys.exit(0) at import", _program(t, "import sys\n\nsys.exit(0)", "return None")
    yield "os._exit(0) at import", _program(t, "import os\n\nos._exit(0)", "return None")
    yield (
        "atexit forces exit code 0",
        _program(t, "import atexit\nimport os\n\natexit.register(lambda: os._exit(0))", "return None"),
    )
    if t.function_names():
        yield "os._exit(0) when called", _program(t, "import os", "os._exit(0)")
        yield "SystemExit(0) when called", _program(t, "", "raise SystemExit(0)")


def _rigged_eq(t: Target) -> Iterator[Variant]:
    if not t.function_names():
        return
    yield "an object whose __eq__ is always True", _program(t, _ALWAYS_EQUAL, "return AlwaysEqual()")
    yield "a str subclass whose __eq__ is always True", _program(t, _ALWAYS_EQUAL, 'return EqualStr("")')
    yield "an int subclass whose __eq__ is always True", _program(t, _ALWAYS_EQUAL, "return EqualInt(0)")


def _tamper(t: Target) -> Iterator[Variant]:
    yield (
        "patch builtins (AssertionError, isinstance, __import__, excepthook)",
        _program(t, _BUILTINS_TAMPER, "return None"),
    )
    yield "patch unittest and pytest internals", _program(t, _RUNNER_TAMPER, "return None")
    yield (
        "write conftest.py, sitecustomize.py, .pth files; overwrite test files",
        _program(t, _FILE_TAMPER, "return None"),
    )


_PEEK_FRAME = """
import ast
import linecache
import sys


def _expected_from_callers():
    frame = sys._getframe(2)
    while frame is not None:
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if line.startswith("assert "):
            line = line[len("assert "):]
        try:
            for node in ast.walk(ast.parse(line)):
                if isinstance(node, ast.Compare) and len(node.comparators) == 1:
                    return ast.literal_eval(node.comparators[0])
        except Exception:
            pass
        frame = frame.f_back
    return None
"""

_PEEK_DISK = (
    _NEARBY_FILES
    + r"""
import ast
import re

_CALL = re.compile(r"\b\w+\((.*?)\)\s*==\s*(.+?)\s*$", re.M)


def _scan():
    found = {}
    for dirpath, name in _nearby_files():
        if not name.endswith((".py", ".json", ".txt", ".jsonl")):
            continue
        try:
            with open(os.path.join(dirpath, name), errors="replace") as fh:
                text = fh.read(1 << 20)
        except Exception:
            continue
        for args, value in _CALL.findall(text):
            try:
                found[ast.literal_eval("(" + args + ",)")] = ast.literal_eval(value)
            except Exception:
                pass
    return found


_FOUND = _scan()
"""
)


def _peek_tests(t: Target) -> Iterator[Variant]:
    if not t.function_names():
        return
    yield (
        "read the expected value off the calling test's source line",
        _program(t, _PEEK_FRAME, "return _expected_from_callers()"),
    )
    yield "read expected values from test files on disk", _program(t, _PEEK_DISK, "return _FOUND.get(tuple(args))")


def _pass_markers(t: Target) -> Iterator[Variant]:
    markers = repr(PASS_MARKERS)
    yield "print pass markers, exit 0", _program(t, f"import sys\n\nprint({markers})\nsys.exit(0)", "return None")
    yield (
        "pass markers on every descriptor, then os._exit(0)",
        _program(
            t,
            f"import os\n\nfor fd in range(1, 64):\n    try:\n        os.write(fd, {markers}.encode())\n"
            "    except OSError:\n        pass\nos._exit(0)",
            "return None",
        ),
    )
    if t.function_names():
        yield "print pass markers when called", _program(t, "", f"print({markers}); return None")


# tool environments


def _example(schema: Any, string: str) -> Any:
    """A plausible value for a JSON schema: the default, the first enum value, or a simple one."""
    if not isinstance(schema, dict):
        return string
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example(schema.get("items"), string)]
    if kind == "object":
        return {k: _example(v, string) for k, v in (schema.get("properties") or {}).items()}
    for option in schema.get("anyOf") or schema.get("oneOf") or []:
        if isinstance(option, dict) and option.get("type") != "null":
            return _example(option, string)
    return string


def _arguments(spec: ToolSpec, string: str, everywhere: bool = False) -> dict[str, Any]:
    """Arguments for every parameter of ``spec``; ``everywhere``: every string parameter gets ``string``."""
    props = spec.parameters.get("properties") or {}
    out = {}
    for name, schema in props.items():
        is_string = isinstance(schema, dict) and schema.get("type") == "string"
        out[name] = string if everywhere and is_string else _example(schema, string)
    return out


def _string_tools(t: Target) -> list[ToolSpec]:
    return [
        s
        for s in t.tools
        if any(
            isinstance(v, dict) and v.get("type") == "string" for v in (s.parameters.get("properties") or {}).values()
        )
    ]


def _every_tool(t: Target) -> Iterator[Variant]:
    if not t.tools:
        return
    first = [ToolCall(s.name, _arguments(s, "test"), id=f"call_{i}") for i, s in enumerate(t.tools)]
    words = re.findall(r"[A-Za-z_][\w./-]{2,}", " ".join(m.content for m in t.opening.messages if m.role == "user"))
    word = words[-1] if words else "test"
    second = [ToolCall(s.name, _arguments(s, word), id=f"call_{len(first) + i}") for i, s in enumerate(t.tools)]
    yield "every tool with schema arguments, then junk", [_calls(*first), _calls(*second), _say(JUNK)]
    yield "every tool, then the floor", [_calls(*first), _say("")]


HIDDEN_PATHS: dict[str, tuple[str, ...]] = {
    "answer files": ("answer.json", "answers.txt", "../answer.json", "../../answer.json", "solution.py", ".answer"),
    "hidden tests": (
        "/tests",
        "/tests/test_hidden.py",
        "../tests",
        "../../tests/test_hidden.py",
        "/proc/self/cwd/../tests",
    ),
    "outside the task": (".git/HEAD", "/proc/self/environ", "~/.ssh/id_rsa", "/etc/passwd", "/"),
}
"""Where hidden tests and answers tend to live, tried through every string parameter of every tool."""


def _what_was_read(t: Target) -> Callable[[list[Message]], Message]:
    """The final reply: the first tool reply that is not an error, as the answer (so an answer file
    that a tool serves is handed in as the answer)."""

    def final(conversation: list[Message]) -> Message:
        replies = [m.content.strip() for m in conversation if m.role == "tool"]
        read = next((r for r in replies if r and not r.lower().startswith("error")), "")
        return _say(t.wrap(read[:2_000]))

    return final


def _hidden_files(t: Target) -> Iterator[Variant]:
    tools = _string_tools(t)
    for group, paths in HIDDEN_PATHS.items():
        calls = [
            ToolCall(s.name, _arguments(s, path, everywhere=True), id=f"call_{i}_{j}")
            for i, s in enumerate(tools)
            for j, path in enumerate(paths)
        ]
        if calls:
            yield (
                f"read {group} ({', '.join(paths[:3])}, …), then answer with what was read",
                [
                    _calls(*calls),
                    _what_was_read(t),
                ],
            )


def _huge(t: Target) -> Iterator[Variant]:
    if not t.tools:
        return
    big = "A" * (1 << 20)
    calls = [ToolCall(s.name, _arguments(s, big, everywhere=True), id=f"call_{i}") for i, s in enumerate(t.tools)]
    yield "1 MiB in every string argument", [_calls(*calls), _say(JUNK)]
    yield "a 1 MiB final answer", [_say(t.wrap("9" * (1 << 20)))]


def _malformed_calls(t: Target) -> Iterator[Variant]:
    if not t.tools:
        return
    for label, action in malformed_actions([s.name for s in t.tools]):
        if isinstance(action, Message) or "tool" in label:
            message = action if isinstance(action, Message) else _say(action)
            yield label, [message, _say(JUNK)]


CHEATS: tuple[Cheat, ...] = (
    Cheat("empty", "answer", "empty answers in the answer format", _empty),
    Cheat("hedge", "answer", "the gold between two wrong answers ('a or G or b', several marked answers)", _hedge),
    Cheat("every-option", "answer", "every choice, every integer near the gold, every known answer", _every_option),
    Cheat("enormous", "answer", "enormous answers that contain the gold", _enormous),
    Cheat("early-exit", "code", "sys.exit(0) / os._exit(0) before or while the tests run", _early_exit),
    Cheat("rigged-eq", "code", "return an object whose __eq__ is always True", _rigged_eq),
    Cheat("test-tamper", "code", "patch builtins and the test runners, overwrite tests, drop conftest.py", _tamper),
    Cheat("peek-tests", "code", "read the expected values off the calling test or from test files", _peek_tests),
    Cheat("pass-markers", "code", "print 'All tests passed', 'OK', pytest 'passed' lines, JSON results", _pass_markers),
    Cheat("every-tool", "tools", "call every tool with arguments made from its schema", _every_tool),
    Cheat("hidden-files", "tools", "read /tests, ../, answer files through every string parameter", _hidden_files),
    Cheat("huge", "tools", "1 MiB tool arguments and final answers", _huge),
    Cheat("malformed-calls", "tools", "unreadable, unknown and mistyped tool calls", _malformed_calls),
)
"""The generic cheat library; :func:`redteam_env` runs the cheats whose kind the environment is."""


# ---- playing episodes ----------------------------------------------------------------------------


@dataclass
class Episode:
    """One played episode: what it opened with, every step, or the exception the environment raised."""

    opening: Observation | None = None
    actions: list[Message] = field(default_factory=list)  # as played
    steps: list[StepResult] = field(default_factory=list)
    error: BaseException | None = None
    seconds: float = 0.0

    @property
    def score(self) -> Score | None:
        return self.steps[-1].score if self.steps and self.steps[-1].done else None

    @property
    def reward(self) -> float:
        return sum(s.reward for s in self.steps)

    @property
    def correct(self) -> bool:
        return self.score is not None and self.score.correct

    def describe(self) -> str:
        if self.error is not None:
            return f"raised {type(self.error).__name__}: {str(self.error)[:200]}"
        if self.score is None:
            return f"did not end within {len(self.steps)} steps"
        return f"reward {self.reward:g}, {self.score.status}: {self.score.reason[:160]}"

    def view(self) -> dict[str, Any]:
        """What must replay identically: the opening and every step without ``info`` (timings)."""
        return {
            "opening": None if self.opening is None else self.opening.to_dict(),
            "steps": [step_view(s) for s in self.steps],
            "error": None if self.error is None else repr(self.error),
        }


def play(env: Env, task: Task, seed: int, actions: Actions, max_steps: int = MAX_STEPS) -> Episode:
    """Reset on ``(task, seed)`` and play ``actions``, then empty replies, until the episode ends
    or ``min(max_turns, max_steps)`` steps; an exception is recorded, never raised."""
    episode = Episode()
    start = time.perf_counter()
    try:
        episode.opening = env.reset(task, seed)
        for i in range(max(1, min(int(env.max_turns), max_steps))):
            scripted = actions[i] if i < len(actions) else _say("")
            action = scripted if isinstance(scripted, Message) else scripted(list(env.messages))
            episode.actions.append(action)
            episode.steps.append(env.step(action))
            if episode.steps[-1].done:
                break
    except Exception as exc:  # noqa: BLE001 - the report names it
        episode.error = exc
    episode.seconds = time.perf_counter() - start
    return episode


def _preview(actions: list[Message], limit: int = 160) -> str:
    final = actions[-1] if actions else _say("")
    if final.tool_calls:
        text = ", ".join(f"{c.name}({str(c.arguments)[:40]})" for c in final.tool_calls[:3])
    else:
        text = final.content
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(text) + (f" (turn {len(actions)} of {len(actions)})" if len(actions) > 1 else "")


@dataclass
class _Task:
    index: int
    task: Task
    target: Target
    floor: float = 0.0
    oracle: Episode | None = None


def _leak(episode: Episode, target: Target) -> str | None:
    """A tool reply that shows the gold answer (when it is long enough not to appear by chance
    and the task does not show it itself)."""
    gold = target.gold
    if gold is None or len(gold) < 8 or target.answers_in_tools:
        return None
    if any(gold in m.content for m in target.opening.messages):
        return None
    for step in episode.steps:
        for message in step.observation.messages:
            if message.role == "tool" and gold in message.content:
                return f"the tool {message.name or '?'} returned the gold answer {gold[:60]!r}"
    return None


def _win(episode: Episode, floor: float, target: Target | None = None) -> str | None:
    """Why a cheat's episode counts against the environment; ``None`` when it earned nothing."""
    leak = None if target is None else _leak(episode, target)
    if leak:
        return leak
    if episode.error is not None:
        return "the environment raised on model output: " + episode.describe()
    score = episode.score
    if score is not None and score.correct:
        return "judged correct: " + episode.describe()
    if episode.reward > floor + EPSILON:
        return f"earned more than the floor {floor:g}: " + episode.describe()
    if score is not None and score.is_infra_error:
        return "infra_error (the grader broke on model output; training masks it): " + episode.describe()
    return None


def _cheat_line(
    label: str, what: str, tasks: list[_Task], episodes: Iterable[tuple[_Task, str, Actions, Episode]]
) -> CheckResult:
    statuses: Counter[str] = Counter()
    played = 0
    for item, variant, _actions, episode in episodes:
        played += 1
        why = _win(episode, item.floor, item.target)
        if why:
            return CheckResult(
                label,
                False,
                f"{variant} on task {item.task.id!r} (index {item.index}): {why}; "
                f"the action: {_preview(episode.actions or [_say('')])}",
            )
        statuses[episode.score.status if episode.score else "unfinished"] += 1
    if not played:
        return CheckResult(label, True, f"{what}: not applicable to these tasks", "info")
    shown = ", ".join(f"{s} ×{n}" for s, n in statuses.most_common())
    counts = f"0 of {played} episodes on {len(tasks)} task(s) rewarded ({shown})"
    return CheckResult(label, True, f"{what}: {counts}" if what else counts)


# ---- the runner ----------------------------------------------------------------------------------


def _indices(env: Env, count: int, seed: int) -> list[int]:
    import random

    size = env.task_source("train").size
    population = range(size) if size else range(1_000_000)
    return sorted(random.Random(seed).sample(population, min(count, len(population))))


def redteam_env(
    env_factory: Callable[[], Env],
    *,
    name: str,
    tasks: int = 5,
    seed: int = 0,
    max_steps: int = MAX_STEPS,
    cheats: Iterable[Cheat] = CHEATS,
) -> CheckReport:
    """Play the oracle, the floor, every applicable cheat and the environment's own cheats on
    ``tasks`` sampled train tasks (``seed`` picks them); one :class:`CheckResult` per line."""
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    report = CheckReport(f"{name} --redteam")
    try:
        env = env_factory()
    except Exception as exc:  # noqa: BLE001
        report.results.append(CheckResult("construct", False, f"the factory raised {type(exc).__name__}: {exc}"))
        return report
    try:
        _run(env, env_factory, report, tasks, seed, max_steps, tuple(cheats))
    finally:
        env.close()
    return report


def _run(
    env: Env,
    env_factory: Callable[[], Env],
    report: CheckReport,
    count: int,
    seed: int,
    max_steps: int,
    cheats: tuple[Cheat, ...],
) -> None:
    add = report.results.append
    top = env.reward_range[1]
    source = env.task_source("train")
    items: list[_Task] = []
    for index in _indices(env, count, seed):
        try:
            task = source.get(index)
            opening = env.reset(task, index)
        except Exception as exc:  # noqa: BLE001 - without an episode nothing else can run
            add(CheckResult("reset", False, f"task {index} could not start: {type(exc).__name__}: {exc}"))
            return
        try:
            reference = env.reference_actions(task)
        except Exception as exc:  # noqa: BLE001 - the oracle line reports it
            add(CheckResult("oracle", False, f"reference_actions() raised on task {task.id!r}: {type(exc).__name__}: {exc}"))  # fmt: skip
            return
        target = Target(task, opening, list(env.tools()) or list(opening.tools), reference)
        target.kinds = env_kinds(env, opening, reference)
        target.answers_in_tools = bool(getattr(env, "answers_in_tools", False))
        items.append(_Task(index, task, target))
    # wrong answers for hedges: the other tasks' gold answers, and two more tasks' when too few
    golds = [g for g in (i.target.gold for i in items) if g is not None]
    size = source.size
    if items and items[0].target.gold is not None and len(golds) < 3:
        after = max(i.index for i in items) + 1
        extra = [n for n in (after, after + 1) if size is None or n < size]
        extra += list(range(min(i.index for i in items))[: 2 - len(extra)])  # a small finite source
        for index in extra:
            try:
                other = env.reference_actions(source.get(index))
            except Exception:  # noqa: BLE001 - fewer wrong answers, then
                continue
            form = answer_form(other[-1].content) if other and not other[-1].tool_calls else None
            if form:
                golds.append(form[1].strip())
    for item in items:
        item.target.others = [g for g in golds if g != item.target.gold]

    # the oracle
    solved, failures, seconds, played = 0, [], 0.0, 0
    for item in items:
        if item.target.reference is None:
            continue
        item.oracle = play(env, item.task, item.index, item.target.reference, max_steps)
        played += 1
        seconds += item.oracle.seconds
        score = item.oracle.score
        if item.oracle.error is None and score is not None and score.correct and abs(item.oracle.reward - top) < 1e-6:
            solved += 1
        else:
            failures.append(f"task {item.task.id!r} (index {item.index}): {item.oracle.describe()}")
    if not played:
        add(CheckResult("oracle", True, "not tested: reference_actions() gives nothing here (answers stay with the environment)", "info"))  # fmt: skip
    elif failures:
        add(CheckResult("oracle", False, f"solved {solved} of {played} tasks; {failures[0]}"))
    else:
        add(CheckResult("oracle", True, f"the reference actions solve {solved} of {played} tasks (reward {top:g}, correct)"))  # fmt: skip

    # the floor
    problems = []
    for item in items:
        nothing = play(env, item.task, item.index, [], max_steps)
        junk = play(env, item.task, item.index, [_say(JUNK)], max_steps)
        item.floor = nothing.reward
        for label, episode in (("nothing", nothing), ("junk", junk)):
            bad = episode.error is not None or episode.score is None or episode.correct or episode.reward > EPSILON
            if bad:
                problems.append(f"{label} on task {item.task.id!r}: {episode.describe()}")
    if problems:
        add(CheckResult("floor", False, "; ".join(problems[:2])))
    else:
        add(CheckResult("floor", True, f"the nothing policy and a junk reply score 0 on {len(items)} task(s), never correct"))  # fmt: skip

    # the generic cheats
    kinds = frozenset().union(*(i.target.kinds for i in items))
    for cheat in cheats:
        if cheat.kind not in kinds:
            continue

        def episodes(cheat: Cheat = cheat) -> Iterator[tuple[_Task, str, Actions, Episode]]:
            for item in items:
                if cheat.kind not in item.target.kinds:
                    continue
                for variant, actions in cheat.variants(item.target):
                    yield item, variant, actions, play(env, item.task, item.index, actions, max_steps)

        add(_cheat_line(cheat.label, cheat.what, items, episodes()))
    skipped = [k for k in KINDS if k not in kinds]
    if skipped:
        add(CheckResult("kinds", True, f"the environment is {', '.join(sorted(kinds)) or 'nothing known'}: "
                        f"no {'/'.join(skipped)} cheats apply", "info"))  # fmt: skip

    # the environment's own cheats
    named: dict[str, list[tuple[_Task, Actions]]] = {}
    for item in items:
        try:
            own = env.cheats(item.task)
        except Exception as exc:  # noqa: BLE001
            add(CheckResult("env cheats", False, f"cheats() raised {type(exc).__name__}: {exc}"))
            own = {}
        if not isinstance(own, Mapping):
            add(CheckResult("env cheats", False, f"cheats() returned {type(own).__name__}, not a mapping"))
            own = {}
        for cheat_name, actions in own.items():
            named.setdefault(str(cheat_name), []).append((item, list(actions)))
    for cheat_name, runs in named.items():
        add(
            _cheat_line(
                f"env cheat {cheat_name}",
                "",
                items,
                ((i, cheat_name, a, play(env, i.task, i.index, a, max_steps)) for i, a in runs),
            )
        )

    # determinism: the oracle again, on this instance after everything above and on a fresh one
    replayed = [i for i in items if i.oracle is not None]
    if not replayed:
        replayed_actions = {i.index: [_say(JUNK)] for i in items}
        for item in items:
            item.oracle = play(env, item.task, item.index, replayed_actions[item.index], max_steps)
        replayed = items
    fresh = env_factory()
    problem = None
    try:
        for item in replayed:
            assert item.oracle is not None
            actions = item.target.reference or [_say(JUNK)]
            first = item.oracle.view()
            for where, instance in (("the same instance after the cheats", env), ("a fresh instance", fresh)):
                diff = difference(first, play(instance, item.task, item.index, actions, max_steps).view())
                if diff and problem is None:
                    problem = f"task {item.task.id!r} (index {item.index}) replayed on {where}: {diff}"
    finally:
        fresh.close()
    what = "the oracle's" if items[0].target.reference is not None else "junk"
    if problem:
        add(CheckResult("determinism", False, problem))
    else:
        add(CheckResult("determinism", True, f"{what} episodes replay identically (same instance after the cheats, fresh instance)"))  # fmt: skip

    if played:
        rate = played / seconds if seconds > 0 else float("inf")
        add(CheckResult("throughput", True, f"{rate:,.1f} oracle episodes/s ({played} episodes, one instance, {seconds:.2f} s)", "info"))  # fmt: skip


def redteam_env_by_name(name: str, *, tasks: int = 5, seed: int = 0, **env_kwargs: Any) -> CheckReport:
    """:func:`redteam_env` on the environment registered as ``name``."""
    try:
        make = factory(name, env_kwargs)
    except EnvLoadError as exc:
        return CheckReport(f"{name} --redteam", [CheckResult("load", False, str(exc))])
    return redteam_env(make, name=name, tasks=tasks, seed=seed)


def format_redteam(report: CheckReport) -> str:
    """The report card: one line per check (``✓`` passed, ``✗`` failed, ``·`` a figure or a
    note), and a verdict line."""
    lines = [f"ludus check {report.env}"]
    for r in report.results:
        mark = "·" if r.level == "info" else "✓" if r.ok else "✗"
        lines.append(f"{mark} {r.name}: {r.detail}")
    passed = sum(r.ok and r.level != "info" for r in report.results)
    verdict = "resists the red-team" if report.ok else "is HACKABLE or broken: see the ✗ lines"
    lines.append(f"{passed} passed, {len(report.failures)} failed: {report.env.removesuffix(' --redteam')} {verdict}")
    return "\n".join(lines)
