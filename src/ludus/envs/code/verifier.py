"""Grading model-written code, deny by default, in the sandbox.

Formats (a task is a mapping; ``format`` names it, else it is inferred from the fields):

* ``humaneval`` — ``prompt``, ``entry_point``, ``test`` defining ``check(candidate)``. Each
  top-level assert of ``check`` is one test (so partial credit and test order mean something).
* ``mbpp`` — ``test_list`` of assert statements; optional ``test_setup_code``, ``test_imports``.
* ``stdio`` — ``inputs`` and ``outputs`` (lists of strings), or APPS's ``input_output`` JSON;
  each pair is one run of the program with that stdin.
* ``call`` — call-based APPS tasks: ``input_output`` JSON (or the row itself) with ``fn_name``,
  ``inputs`` (each the list of one call's arguments) and ``outputs``; the solution's function, or
  that method of a fresh ``Solution()``, is called once per input and its result compared as
  APPS compares it.
* ``pytest`` — ``test`` is a pytest file that imports the solution as module ``module``
  (default ``solution``).

How grading resists tricks (the red-team suite in tests/ tries each one):

* The solution runs in one sandboxed process and the tests in another, started fresh from a
  pristine copy of the tests that the solution never sees: it cannot read, edit or delete them,
  patch the test runner, or reach the grader's process. Test functions call the solution over
  a socket; only plain built-in values come back (``ludus.sandbox.plain``), rebuilt on the test
  side, so an object with a rigged ``__eq__`` cannot reach a comparison.
* Results travel on a channel only the test process holds — never the solution's stdout or
  exit code. Exiting early (``sys.exit``, ``os._exit``) or crashing just fails the tests left.
* Every expected test must report ``passed``; skipped, xfail, missing, crashed or timed-out
  tests count as failed. A sandbox failure is ``infra_error`` (masked in training), never 0 or 1.

Semantics are a plain ``python main.py``'s (see ``ludus.sandbox.inside``): the interpreter's
default recursion limit and an 8 MiB C stack, ``__name__ == "__main__"`` for stdin/stdout
programs. One difference is fixed on purpose: the hash seed (``hash_seed``, default 0, i.e.
``PYTHONHASHSEED=0``), so a score never depends on which worker ran the code; every score
records it in ``components["hash_seed"]``. A deeper recursion limit is a relaxation, asked for
by the verifier's ``limits.recursion`` or a task's ``recursion_limit`` field, and recorded in
the score (``components["recursion_limit"]`` and its reason).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import functools
import hashlib
import json
import math
import random
import re
import socket
import textwrap
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ludus.core.types import Score, Status
from ludus.sandbox import Execution, Limits, Sandbox, WorkerSpec
from ludus.sandbox.inside import recv_frame
from ludus.sandbox.pool import DEFAULT_WARM_IMPORTS, REPLY_GRACE_S, shipped

Format = Literal["humaneval", "mbpp", "stdio", "call", "pytest"]
FORMATS: tuple[Format, ...] = ("humaneval", "mbpp", "stdio", "call", "pytest")
HARNESS = Path(__file__).resolve().parent / "harness.py"
FLOAT_TOLERANCE = 1e-6  # stdio: numeric tokens equal within this absolute or relative difference


class TaskFormatError(ValueError):
    """A code task whose fields do not make a gradable task; the message names the field."""


@dataclass(frozen=True)
class TestCase:
    id: str
    code: str = ""  # a statement test (humaneval, mbpp)
    stdin: str = ""  # an input/output test (stdio)
    expected: str = ""


@dataclass(frozen=True)
class CodeTask:
    """A parsed task: what to prepend to the solution, the tests, and how to run them."""

    format: Format
    tests: tuple[TestCase, ...] = ()
    setup: str = ""
    prefix: str = ""  # HumanEval: the prompt, when the completion continues it
    entry_point: str | None = None
    test_file: str = ""  # pytest
    module: str = "solution"
    solution_class: str | None = None  # call: the class whose method is called, if the solution defines it
    recursion: int | None = None  # the task's own recursion limit (a relaxation), else python's default

    @property
    def test_ids(self) -> list[str]:
        return [t.id for t in self.tests]


# ---- tasks ----


def infer_format(row: Mapping[str, Any]) -> Format:
    fmt = row.get("format")
    if fmt is not None:
        if fmt not in FORMATS:
            raise TaskFormatError(f"field 'format' is {fmt!r}; expected one of {', '.join(FORMATS)}")
        return fmt
    if "entry_point" in row and "test" in row:
        return "humaneval"
    if "test_list" in row:
        return "mbpp"
    if "fn_name" in row:
        return "call"
    if "input_output" in row:
        spec = _apps_spec(row)
        if isinstance(spec, Mapping) and spec.get("fn_name"):
            return "call"
    if ("inputs" in row and "outputs" in row) or "input_output" in row:
        return "stdio"
    if isinstance(row.get("test"), str) and re.search(r"^\s*def test_", row["test"], re.M):
        return "pytest"
    raise TaskFormatError(
        "cannot tell the task's format: expected 'entry_point'+'test' (humaneval), 'test_list' (mbpp), "
        "'inputs'+'outputs' or 'input_output' (stdio), 'fn_name' in 'input_output' (call), or a pytest file "
        "in 'test'; or name it in 'format'"
    )


def _apps_spec(row: Mapping[str, Any]) -> Any:
    """APPS's ``input_output`` field, decoded (APPS keeps it as a JSON string); None if absent or not JSON."""
    spec = row.get("input_output")
    if isinstance(spec, str):
        try:
            return json.loads(spec)
        except ValueError:
            return None
    return spec


def _field(row: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in row:
        raise TaskFormatError(f"missing field {name!r}")
    value = row[name]
    if not isinstance(value, kind):
        raise TaskFormatError(f"field {name!r} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def parse_task(row: Mapping[str, Any] | CodeTask) -> CodeTask:
    """A ``CodeTask`` from a row of any of the five formats. Raises ``TaskFormatError``.

    Any format may carry ``recursion_limit``: the solution then runs with that recursion limit
    instead of python's default (a relaxation, recorded in its score)."""
    if isinstance(row, CodeTask):
        return row
    if not isinstance(row, Mapping):
        raise TaskFormatError(f"a task must be a JSON object, got {type(row).__name__}")
    task = _parse_format(row)
    recursion = row.get("recursion_limit")
    if recursion is None:
        return task
    if not isinstance(recursion, int) or isinstance(recursion, bool) or not 1 <= recursion <= 10_000_000:
        raise TaskFormatError(f"field 'recursion_limit' must be an integer from 1 to 10,000,000, got {recursion!r}")
    return replace(task, recursion=recursion)


def _parse_format(row: Mapping[str, Any]) -> CodeTask:
    fmt = infer_format(row)
    if fmt == "humaneval":
        return _humaneval(row)
    if fmt == "mbpp":
        tests = _field(row, "test_list", list)
        if not tests or not all(isinstance(t, str) for t in tests):
            raise TaskFormatError("field 'test_list' must be a non-empty list of assert statements")
        setup = "\n".join([*row.get("test_imports", []), row.get("test_setup_code", "") or ""])
        for i, t in enumerate(tests):
            _compiles(t, f"test_list[{i}]")
        _compiles(setup, "test_setup_code")
        return CodeTask("mbpp", tuple(TestCase(f"test_{i}", code=t) for i, t in enumerate(tests)), setup=setup)
    if fmt == "stdio":
        inputs, outputs = _stdio_pairs(row)
        cases = tuple(
            TestCase(f"case_{i}", stdin=a, expected=b) for i, (a, b) in enumerate(zip(inputs, outputs, strict=True))
        )
        return CodeTask("stdio", cases)
    if fmt == "call":
        return _call_based(row)
    test_file = _field(row, "test", str)
    _compiles(test_file, "test")
    module = row.get("module", "solution")
    if not isinstance(module, str) or not module.isidentifier():
        raise TaskFormatError("field 'module' must be a Python module name")
    return CodeTask("pytest", test_file=test_file, module=module)


def _compiles(source: str, field_name: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise TaskFormatError(f"field {field_name!r} is not valid Python: {exc.msg} (line {exc.lineno})") from None


def _stdio_pairs(row: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    if "input_output" in row:
        spec = row["input_output"]
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except json.JSONDecodeError as exc:
                raise TaskFormatError(f"field 'input_output' is not valid JSON: {exc}") from None
        if not isinstance(spec, Mapping):
            raise TaskFormatError("field 'input_output' must hold an object with 'inputs' and 'outputs'")
        if spec.get("fn_name"):
            raise TaskFormatError("'input_output' has 'fn_name': a call-based task, whose format is 'call'")
        row = spec
    inputs, outputs = _field(row, "inputs", list), _field(row, "outputs", list)
    if not inputs or len(inputs) != len(outputs):
        raise TaskFormatError(
            f"'inputs' and 'outputs' must be non-empty and of equal length ({len(inputs)} vs {len(outputs)})"
        )
    as_text = [
        [x if isinstance(x, str) else "\n".join(map(str, x)) if isinstance(x, list) else None for x in xs]
        for xs in (inputs, outputs)
    ]
    if any(x is None for xs in as_text for x in xs):
        raise TaskFormatError("'inputs' and 'outputs' must be strings (or lists of lines)")
    return as_text[0], as_text[1]


# call-based APPS: how APPS's own harness compares a call's result with the expected output.
# JSON cannot carry tuples or integer dict keys: a tuple result counts as a list, a list of
# tuples as a list of lists, and dict keys in the data that read as integers are taken as such
# (in the first argument and in the output, as APPS does). APPS's outputs are usually wrapped in
# a one-item list, so a result also matches the first item of an expected list.
CALL_CHECK = """
import json as _ludus_json


def _ludus_int_keys(value):
    if isinstance(value, dict):
        try:
            return {int(k): v for k, v in value.items()}
        except (TypeError, ValueError):
            return value
    return value


def _ludus_call_case(candidate, args_json, expected_json):
    args, expected = _ludus_json.loads(args_json), _ludus_json.loads(expected_json)
    if args and isinstance(args[0], dict):
        args = [_ludus_int_keys(args[0]), *args[1:]]
    if isinstance(expected, dict):
        expected = [_ludus_int_keys(expected)]
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
        expected = [_ludus_int_keys(expected[0]), *expected[1:]]
    output = candidate(*args)
    if isinstance(output, tuple):
        output = list(output)
    ok = output == expected or (isinstance(expected, list) and len(expected) > 0 and output == expected[0])
    if not ok and isinstance(output, list) and output and isinstance(output[0], tuple):
        ok = isinstance(expected, list) and len(expected) > 0 and [list(x) for x in output] == expected[0]
    assert ok, f"expected {expected_json[:80]}, got {output!r:.80}"
"""
# What APPS's harness (and LeetCode) has imported before a call-based solution runs: starter
# code such as ``def twoSum(self, nums: List[int]) -> List[int]`` needs ``List`` to exist.
CALL_HEADER = (
    "import sys, math, heapq, bisect, itertools, collections, functools, string, re\n"
    "from typing import *\n"
    "from collections import *\n"
    "from itertools import *\n"
    "from functools import *\n"
    "from heapq import *\n"
    "from bisect import *\n"
    "from math import sqrt, ceil, floor, gcd, log, log2, exp, fabs, sin, cos, tan, inf\n"
)


def _call_based(row: Mapping[str, Any]) -> CodeTask:
    spec = row
    if "input_output" in row:
        spec = _apps_spec(row)
        if not isinstance(spec, Mapping):
            raise TaskFormatError("field 'input_output' must hold a JSON object with 'fn_name', 'inputs', 'outputs'")
    fn_name = spec.get("fn_name")
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise TaskFormatError(f"field 'fn_name' must be a function name, got {fn_name!r}")
    inputs, outputs = _field(spec, "inputs", list), _field(spec, "outputs", list)
    if not inputs or len(inputs) != len(outputs):
        raise TaskFormatError(
            f"'inputs' and 'outputs' must be non-empty and of equal length ({len(inputs)} vs {len(outputs)})"
        )
    tests = []
    for i, (args, expected) in enumerate(zip(inputs, outputs, strict=True)):
        if not isinstance(args, list):
            raise TaskFormatError(f"'inputs'[{i}] must be the list of one call's arguments, got {type(args).__name__}")
        call = f"_ludus_call_case(candidate, {json.dumps(args)!r}, {json.dumps(expected)!r})"
        tests.append(TestCase(f"case_{i}", code=call))
    return CodeTask("call", tuple(tests), setup=CALL_CHECK, entry_point=fn_name, solution_class="Solution")


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


class _Segments:
    """Statements' own source text, dedented; several times cheaper than ``ast.unparse`` (and
    than ``ast.get_source_segment``, which splits the whole source again for every node)."""

    def __init__(self, source: str):
        self.lines = [line.encode() for line in source.splitlines(keepends=True)]  # AST offsets count bytes

    def __call__(self, node: ast.stmt) -> str:
        if getattr(node, "decorator_list", None) or node.end_lineno is None or node.end_col_offset is None:
            return ast.unparse(node)
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return self.lines[first][node.col_offset : node.end_col_offset].decode()
        head = b" " * node.col_offset + self.lines[first][node.col_offset :]
        text = b"".join([head, *self.lines[first + 1 : last], self.lines[last][: node.end_col_offset]])
        return textwrap.dedent(text.decode())


def _prompt_helpers(prompt: str, entry_point: str) -> list[str]:
    """The prompt's top-level statements other than the function to write (imports, helpers)."""
    tree, source = None, prompt
    for source in (prompt, prompt.rstrip() + "\n    pass\n"):  # a prompt may end at the bare signature
        try:
            tree = ast.parse(source)
            break
        except SyntaxError:
            continue
    if tree is None:
        return []
    segment = _Segments(source)
    return [
        segment(n)
        for n in tree.body
        if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point)
        and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))  # a module docstring
    ]


def _humaneval(row: Mapping[str, Any]) -> CodeTask:
    prompt = _field(row, "prompt", str)
    entry_point = _field(row, "entry_point", str)
    if not entry_point.isidentifier():
        raise TaskFormatError(f"field 'entry_point' must be a function name, got {entry_point!r}")
    test = _field(row, "test", str)
    tree = _compiles(test, "test")
    segment = _Segments(test)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not check.args.args:
        raise TaskFormatError("field 'test' must define check(candidate)")
    param = check.args.args[0].arg
    module_level = [
        n
        for n in tree.body
        if n is not check
        and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and _mentions(n.value.func, "check"))
    ]
    # the tests may call helpers the prompt defines (HumanEval/32 calls poly, /38 encode_cyclic):
    # the test side gets them from the trusted prompt, never from the solution
    setup, tests, pending = [*_prompt_helpers(prompt, entry_point), *(segment(n) for n in module_level)], [], []
    for node in check.body:
        has_assert = any(isinstance(n, ast.Assert) for n in ast.walk(node))
        if has_assert:
            tests.append("\n".join([*pending, segment(node)]))
            pending = []
        elif _mentions(node, param):
            pending.append(segment(node))  # runs with the test that follows it
        elif not isinstance(node, ast.Return):
            setup.append(segment(node))
    if pending:
        tests.append("\n".join(pending))
    if not tests:
        raise TaskFormatError("check(candidate) in field 'test' contains no assert")
    if param != "candidate":
        setup.append(f"{param} = candidate")
    cases = tuple(TestCase(f"assert_{i}", code=t) for i, t in enumerate(tests))
    return CodeTask("humaneval", cases, setup="\n".join(setup), prefix=prompt, entry_point=entry_point)


@functools.lru_cache(maxsize=4096)
def _parse_json(text: str) -> CodeTask:
    return parse_task(json.loads(text))


def _parse_once(task: Mapping[str, Any] | CodeTask) -> CodeTask:
    """``parse_task``, remembered by the task's JSON: a GRPO group grades one task G times."""
    if isinstance(task, CodeTask):
        return task
    try:
        text = json.dumps(task, sort_keys=True)
    except (TypeError, ValueError):  # not JSON data: parse (and report) it as it is
        return parse_task(task)
    return _parse_json(text)


# ---- completions ----

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: str) -> str | None:
    """The code in a completion: the last fenced Python (or unlabelled) block, else the whole
    text. None when there is no code at all."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(completion)]
    python = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    code = python[-1] if python else completion if not blocks else None
    if code is None or not code.strip():
        return None
    return code.rstrip() + "\n"


def solution_program(task: CodeTask, code: str) -> str:
    """HumanEval completions either repeat the function or continue the prompt's body; call-based
    solutions get the imports APPS's harness gives them."""
    if task.format == "call":
        return CALL_HEADER + code
    if task.format != "humaneval":
        return code
    defines = re.search(rf"^\s*(async\s+)?def\s+{re.escape(task.entry_point or '')}\s*\(", code, re.M)
    if defines:
        imports = [line for line in task.prefix.splitlines() if re.match(r"(from\s+\S+\s+)?import\s", line)]
        return "\n".join([*imports, code])
    return task.prefix + code


def outputs_match(actual: str, expected: str, tolerance: float = FLOAT_TOLERANCE) -> bool:
    """stdout against the expected output: equal after trimming trailing spaces and blank
    lines, or token by token with numbers equal within ``tolerance`` (absolute or relative)."""
    a, e = actual.split(), expected.split()
    if len(a) != len(e):
        return False
    for x, y in zip(a, e, strict=True):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not (math.isfinite(fx) and math.isfinite(fy) and math.isclose(fx, fy, rel_tol=tolerance, abs_tol=tolerance)):
            return False
    return True


# ---- the verifier ----

# In the call formats the solution's own time also holds the test runner's work (it waits for
# each call), and so the runner's waits for a CPU: the machine's doing. The solution gets this
# share of wall_s more own time for them; stopped with the runner having waited longer than
# that, its timeout says nothing about it (infra_error). See _grade_calls.
RUNNER_WAIT_ALLOWANCE = 1.0


@dataclass
class CodeVerifier:
    """Scores (task, completion) pairs by running the tests in the sandbox.

    ``partial_credit`` pays the fraction of tests passed (else all or nothing); ``shuffle``
    runs tests in a random order (seeded by ``seed``); ``prune`` stops at the first failure
    (``None``, the default: when the reward is all or nothing, which needs no count);
    identical (task, completion) pairs are answered from a cache of ``cache_size`` entries.
    ``limits`` bound the solution's process (all its tests together); ``test_timeout_s``
    bounds the CPU time of each call into it. Time limits count the solution's own doing, never
    the machine's load (see ``ludus.sandbox.Limits``): a run the machine starved past the
    sandbox's backstop is ``infra_error``, never ``timeout``.

    Code runs as under a plain ``python`` (see the module's docstring): ``limits.recursion``
    (or a task's ``recursion_limit``) raises the recursion limit above python's default, and
    the score says so; ``hash_seed`` is the fixed ``PYTHONHASHSEED`` of every execution
    (``None``: one drawn per sandbox worker), recorded in ``components["hash_seed"]``.
    """

    partial_credit: bool = False
    shuffle: bool = False
    prune: bool | None = None
    seed: int = 0
    cache_size: int = 10_000
    limits: Limits = field(default_factory=lambda: Limits(wall_s=30.0, cpu_s=30.0))
    test_timeout_s: float = 5.0
    workers: int | None = None
    backend: Literal["auto", "bwrap", "process"] = "auto"
    hash_seed: int | None = 0

    def __post_init__(self) -> None:
        WorkerSpec(hash_seed=self.hash_seed)  # checks it now, not when the first pool starts
        self._cache: OrderedDict[str, Score] = OrderedDict()
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)
        self._candidates: Sandbox | None = None
        self._harness: dict[str, Sandbox] = {}  # test runners, with or without pytest loaded

    # pools start on first use, so constructing a verifier is free
    def _pools(self, pytest: bool = False) -> tuple[Sandbox, Sandbox]:
        """The solutions' pool and a test-runner pool (one that has pytest loaded, if asked)."""
        with self._lock:
            if self._candidates is None:
                self._candidates = Sandbox(
                    self.limits,
                    workers=self.workers,
                    backend_name=self.backend,
                    spec=WorkerSpec(hash_seed=self.hash_seed),
                )
            key = "pytest" if pytest else "statements"
            if key not in self._harness:
                warm = (*DEFAULT_WARM_IMPORTS, "pytest") if pytest else DEFAULT_WARM_IMPORTS
                spec = WorkerSpec(
                    modules=(shipped("ludus_code_harness", HARNESS),), warm_imports=warm, hash_seed=self.hash_seed
                )
                # the runner waits on the solution, so its own time must outlast the solution's backstop
                limits = replace(self.limits, wall_s=self.limits.backstop_s + 10, cpu_s=self.limits.cpu_s + 10)
                self._harness[key] = Sandbox(limits, workers=self.workers, backend_name=self.backend, spec=spec)
            return self._candidates, self._harness[key]

    def warm(self, pytest: bool = False) -> None:
        """Start every sandbox worker now (the solutions' pool and a test-runner pool, with
        pytest if asked), all at once, rather than each on its first use."""
        pools = self._pools(pytest)
        with ThreadPoolExecutor(len(pools)) as pool:
            for future in [pool.submit(p.warm) for p in pools]:
                future.result()

    def close(self) -> None:
        for pool in (self._candidates, *self._harness.values()):
            if pool is not None:
                pool.close()

    @property
    def stops_at_first_failure(self) -> bool:
        """``prune``, else whether the reward is all or nothing: a binary reward needs no count,
        and running every test after the first failure made a wrong answer (the common case
        early in RL) cost more to grade than a right one."""
        return self.prune if self.prune is not None else not self.partial_credit

    def __enter__(self) -> CodeVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def score(self, task: Mapping[str, Any] | CodeTask, completion: str) -> Score:
        try:
            parsed = _parse_once(task)
        except TaskFormatError as exc:
            return Score.zero(Status.GOLD_ERROR, f"malformed task: {exc}")
        if not isinstance(completion, str):
            return Score.zero(Status.FORMAT_ERROR, f"the completion must be text, got {type(completion).__name__}")
        code = extract_code(completion)
        if code is None:
            return Score.zero(Status.NO_ANSWER, "no code in the completion")
        if self.cache_size <= 0:
            return self._grade(parsed, solution_program(parsed, code))
        key = hashlib.sha256(json.dumps([repr(parsed), code], sort_keys=True).encode()).hexdigest()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        score = self._grade(parsed, solution_program(parsed, code))
        if score.status != Status.INFRA_ERROR:
            with self._lock:
                self._cache[key] = score
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return score

    async def ascore(self, task: Mapping[str, Any] | CodeTask, completion: str) -> Score:
        return await asyncio.to_thread(self.score, task, completion)

    def score_many(self, pairs: Iterable[tuple[Mapping[str, Any] | CodeTask, str]]) -> list[Score]:
        """Score many pairs concurrently (one per sandbox worker), in input order."""
        pairs = list(pairs)
        candidates, _ = self._pools()
        with ThreadPoolExecutor(max_workers=candidates.size) as pool:
            return list(pool.map(lambda pair: self.score(*pair), pairs))

    def _order(self, tests: Sequence[TestCase]) -> list[TestCase]:
        ordered = list(tests)
        if self.shuffle:
            with self._lock:
                self._rng.shuffle(ordered)
        return ordered

    def _grade(self, task: CodeTask, program: str) -> Score:
        score = self._grade_stdio(task, program) if task.format == "stdio" else self._grade_calls(task, program)
        if score.status == Status.INFRA_ERROR:
            return score
        components = dict(score.components)
        if self.hash_seed is not None:
            components["hash_seed"] = float(self.hash_seed)
        reason = score.reason
        recursion = task.recursion or self.limits.recursion
        if recursion is not None:  # a relaxation of python's semantics: the score must show it
            components["recursion_limit"] = float(recursion)
            who = "the task" if task.recursion else "the verifier"
            reason = f"{reason} [recursion limit {recursion}, set by {who}; python's default applies otherwise]"
        return Score(score.value, score.status, reason, components, score.extracted)

    def _solution_limits(self, task: CodeTask) -> Limits:
        return self.limits if task.recursion is None else replace(self.limits, recursion=task.recursion)

    # stdin/stdout: one fresh execution per case; the comparison happens here, on the host
    def _grade_stdio(self, task: CodeTask, program: str) -> Score:
        candidates, _ = self._pools()
        outcomes: dict[str, tuple[str, str]] = {}
        for case in self._order(task.tests):
            run = candidates.run(program, stdin=case.stdin, limits=self._solution_limits(task))
            if run.status == "infra_error":
                return Score.zero(Status.INFRA_ERROR, f"{case.id}: {run.reason}")
            outcomes[case.id] = _judge_run(run, case.expected)
            if outcomes[case.id][0] != "passed" and self.stops_at_first_failure:
                break
        return self._verdict(task.test_ids, outcomes, extra="")

    # function calls: the solution serves calls in one sandbox, the tests run in another
    def _grade_calls(self, task: CodeTask, program: str) -> Score:
        candidates, harness = self._pools(pytest=task.format == "pytest")
        ordered = self._order(task.tests)
        payload = {
            "runner": "pytest" if task.format == "pytest" else "statements",
            "tests": [{"id": t.id, "code": t.code} for t in ordered],
            "setup": task.setup,
            "bind": _bindings(task),
            "bind_by_name": task.format == "mbpp",
            "solution_class": task.solution_class,
            "test_file": task.test_file,
            "module": task.module,
            "prune": self.stops_at_first_failure,
            "shuffle_seed": self._rng.randrange(2**32) if self.shuffle else None,
        }
        solution_end, tests_end = socket.socketpair()
        results_host, results_harness = socket.socketpair()
        limits = self._solution_limits(task)
        allowance_s = RUNNER_WAIT_ALLOWANCE * limits.wall_s
        try:
            solution = candidates.start(
                program,
                serve=True,
                pass_fds=[solution_end.fileno()],
                call_cpu_s=self.test_timeout_s,
                module_name=task.module,
                limits=replace(limits, wall_s=limits.wall_s + allowance_s),
            )
            tests = harness.start(
                call="ludus_code_harness:run",
                trusted=True,
                payload=payload,
                pass_fds=[tests_end.fileno(), results_harness.fileno()],
            )
        finally:
            for sock in (solution_end, tests_end, results_harness):
                sock.close()
        # the runner's frames, read while it runs (they may exceed a socket buffer) until its
        # sandbox closes the channel: when the runner exits, is killed, or its worker dies
        reply = _read_report(results_host, harness.limits.backstop_s + REPLY_GRACE_S)
        test_run = tests.wait()
        solution.kill()  # the tests are over: whatever the solution still does is cut short
        solution_run = solution.wait()
        if test_run.status == "infra_error":
            return Score.zero(Status.INFRA_ERROR, f"test runner: {test_run.reason}")
        if solution_run.status == "infra_error":
            return Score.zero(Status.INFRA_ERROR, f"solution sandbox: {solution_run.reason}")
        runner_own_s = test_run.wall_s - test_run.cpu_wait_s
        if solution_run.stopped_by == "wall" and test_run.cpu_wait_s > allowance_s and runner_own_s < limits.wall_s:
            # between calls the solution sleeps while the test runner works, and that counts as its
            # own time. Stopped at wall_s + allowance with the runner having waited for a CPU less
            # than the allowance, it used wall_s of its own time even without the wait: its
            # timeout. A runner that waited longer, and whose own work took less than the limit,
            # may have run it out by the machine's doing. (A runner busy past the limit on its
            # own — a value that sends a test into an endless loop — ran it out by the
            # solution's doing: that stays a timeout.)
            return Score.zero(
                Status.INFRA_ERROR,
                f"the solution's time ran out while the test runner waited {test_run.cpu_wait_s:.1f} s for a "
                "CPU: the machine was overloaded",
            )
        report = next(
            (f for f in reversed(reply) if isinstance(f, dict) and ("loaded" in f or "harness_error" in f)), None
        )
        if report is None and any(isinstance(f, dict) and f.get("started") for f in reply):
            # the tests had started and the runner never finished: a test hung or blew up on what
            # the solution returned. The tests without a result failed; this is not infra_error.
            cut = "timeout" if test_run.status == "timeout" else "crashed"
            done = {f["result"]: f for f in reply if isinstance(f, dict) and "result" in f}
            report = {
                "loaded": True,
                "results": {
                    t.id: done.get(
                        t.id, {"outcome": cut, "message": f"test runner {test_run.status}: {test_run.reason}"}
                    )
                    for t in task.tests
                },
            }
        if not isinstance(report, dict) or "harness_error" in report:
            detail = (
                report.get("harness_error", "")
                if isinstance(report, dict)
                else test_run.reason or test_run.stderr[-300:]
            )
            return Score.zero(Status.INFRA_ERROR, f"the test runner failed: {detail}")
        stderr_tail = solution_run.stderr.strip().splitlines()[-1:] if solution_run.stderr.strip() else []
        if not report.get("loaded"):
            status = Status.TIMEOUT if solution_run.status == "timeout" else Status.WRONG
            return Score.zero(
                status,
                f"the solution did not load: {report.get('load_error', '')}"[:1000],
                passed=0.0,
                total=float(len(task.tests) or 1),
            )
        if "setup_error" in report:
            if report.get("setup_called_solution") or task.format == "pytest":
                return Score.zero(
                    Status.WRONG,
                    f"test setup failed: {report['setup_error']}",
                    passed=0.0,
                    total=float(len(task.tests) or 1),
                )
            return Score.zero(Status.GOLD_ERROR, f"the task's test setup fails on its own: {report['setup_error']}")
        results = report.get("results") if isinstance(report.get("results"), dict) else {}
        expected = task.test_ids if task.format != "pytest" else [str(x) for x in report.get("expected", [])]
        outcomes = {
            tid: (str(r.get("outcome")), str(r.get("message", ""))) for tid, r in results.items() if isinstance(r, dict)
        }
        if solution_run.status == "timeout":  # the test waiting on it saw it end: its time limit ended it
            outcomes = {tid: ("timeout", m) if o == "crashed" else (o, m) for tid, (o, m) in outcomes.items()}
        extra = (
            f" (solution {solution_run.status}: {solution_run.reason})"
            if solution_run.status in ("timeout", "memory")
            else ""
        )
        if stderr_tail and not extra:
            extra = f" (solution stderr: {stderr_tail[0][:200]})"
        return self._verdict(expected, outcomes, extra)

    def _verdict(self, expected: Sequence[str], outcomes: Mapping[str, tuple[str, str]], extra: str) -> Score:
        total = len(expected)
        if total == 0:
            return Score.zero(Status.GOLD_ERROR, "the task has no tests")
        passed = sum(1 for tid in expected if outcomes.get(tid, ("missing", ""))[0] == "passed")
        components = {"passed": float(passed), "total": float(total)}
        if passed == total:
            return Score(1.0, Status.CORRECT, f"all {total} tests passed", components)
        # stopped at the first failure, the tests after it have no result (pytest -x: "missing")
        stopped = self.stops_at_first_failure
        ran = {tid: result for tid, result in outcomes.items() if not (stopped and result[0] == "missing")}
        failures = [tid for tid in expected if tid in ran and ran[tid][0] != "passed"]
        failing = failures[0] if failures else next(tid for tid in expected if tid not in ran)
        outcome, message = ran.get(failing, ("missing", "no result"))
        not_run = sum(1 for tid in expected if tid not in ran)
        counted = f"{passed}/{total} tests passed"
        if stopped and not_run:
            counted += f" ({not_run} not run: grading stops at the first failure)"
        reason = f"{counted}; {failing} {outcome}" + (f": {message}" if message else "") + extra
        if self.partial_credit and passed:
            return Score(passed / total, Status.PARTIAL, reason[:1000], components)
        status = Status.TIMEOUT if outcome == "timeout" else Status.WRONG
        return Score(0.0, status, reason[:1000], components)


def _bindings(task: CodeTask) -> dict[str, str]:
    """The names the tests call the solution by: ``candidate``, and for HumanEval the entry point's
    own name too (HumanEval/33's test calls ``sort_third`` directly) unless it is a builtin's."""
    if not task.entry_point:
        return {}
    names = {"candidate": task.entry_point}
    if task.format == "humaneval" and not hasattr(builtins, task.entry_point):
        names[task.entry_point] = task.entry_point
    return names


def _judge_run(run: Execution, expected: str) -> tuple[str, str]:
    if run.status != "ok":
        return run.status, run.reason
    if run.exit_code != 0:
        tail = run.stderr.strip().splitlines()[-1:] or [""]
        return "error", f"exit code {run.exit_code}: {tail[0][:200]}"
    if not outputs_match(run.stdout, expected):
        return "failed", f"expected {expected.strip()[:80]!r}, got {run.stdout.strip()[:80]!r}"
    return "passed", ""


def _read_report(sock: socket.socket, timeout_s: float) -> list[Any]:
    """Every frame the test runner sends, until its end of the channel closes (see
    harness.run), or ``timeout_s`` passes without one (the worker is then declared dead)."""
    frames: list[Any] = []
    sock.settimeout(timeout_s)
    with sock:
        try:
            while True:
                message, _ = recv_frame(sock)
                if message is None:
                    return frames
                frames.append(message)
        except (OSError, ValueError):
            return frames


def task_object(value: Any) -> dict[str, Any]:
    """The task of a ``ludus verify code`` line: a JSON object (checked in full when scored)."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object with the task's fields, got {type(value).__name__}")
    return value


def code_annotation(row: dict[str, Any], score: Score) -> None:
    passed, total = score.components.get("passed"), score.components.get("total")
    row.update(
        reward=score.value,
        status=score.status,
        passed=None if passed is None else int(passed),
        total=None if total is None else int(total),
        reason=score.reason,
    )


def verify_code(task: Mapping[str, Any], completion: str, **options: Any) -> Score:
    """One-off convenience; for many samples keep a ``CodeVerifier`` (its sandbox stays warm)."""
    with CodeVerifier(**options) as verifier:
        return verifier.score(task, completion)
