"""The code verifier, its task formats and options, the code environments and `ludus verify code`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from load_support import a_cpu, crowded
from ludus.cli import main
from ludus.core.types import Message, ToolCall
from ludus.envs.code.env import CodeEnv, CodeToolEnv
from ludus.envs.code.tasks import load_code_tasks
from ludus.envs.code.verifier import (
    CodeVerifier,
    TaskFormatError,
    extract_code,
    infer_format,
    outputs_match,
    parse_task,
    solution_program,
)
from ludus.sandbox import Limits
from ludus.sandbox.plain import NotPlain, decode, encode
from ludus.tasks.loaders import TaskFileError

ADD = {
    "prompt": 'def add(a, b):\n    """Return a + b."""\n',
    "entry_point": "add",
    "test": "METADATA = {}\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"
    "    assert candidate(10, 5) == 15\n    assert candidate(0, 0) == 0\n\ncheck(add)\n",
}
SQUARE_MBPP = {
    "text": "Square a number.",
    "test_list": ["assert sq(2) == 4", "assert sq(3) == 9", "assert sq(-4) == 16"],
}
SUM_STDIO = {"inputs": ["1 2\n", "3 4\n", "10 -3\n"], "outputs": ["3\n", "7\n", "7\n"]}
DOUBLE_PYTEST = {
    "test": "import pytest\nfrom solution import double\n\ndef test_small():\n    assert double(2) == 4\n\n"
    "@pytest.mark.parametrize('x', [0, 5, -3])\ndef test_many(x):\n    assert double(x) == 2 * x\n"
}


@pytest.fixture(scope="module")
def verifier():
    with CodeVerifier(workers=2, test_timeout_s=2, limits=Limits(wall_s=10, cpu_s=10), backend="bwrap") as v:
        yield v


# ---- tasks and completions ----


def test_formats_are_inferred_or_named():
    assert infer_format(ADD) == "humaneval"
    assert infer_format(SQUARE_MBPP) == "mbpp"
    assert infer_format(SUM_STDIO) == "stdio"
    assert infer_format({"input_output": "{}"}) == "stdio"
    assert infer_format(DOUBLE_PYTEST) == "pytest"
    assert infer_format({**SUM_STDIO, "format": "stdio"}) == "stdio"
    with pytest.raises(TaskFormatError, match="format"):
        infer_format({"format": "cobol"})
    with pytest.raises(TaskFormatError, match="cannot tell"):
        infer_format({"question": "?"})


def test_humaneval_check_body_becomes_one_test_per_assert():
    task = parse_task(
        {
            "prompt": "def f(x):\n",
            "entry_point": "f",
            "test": "import math\ndef check(c):\n    import math\n    y = c(1)\n    assert y == 2\n"
            "    for i in range(3):\n        assert c(i) == i + 1\n    assert math.isclose(c(0.5), 1.5)\n",
        }
    )
    assert [t.id for t in task.tests] == ["assert_0", "assert_1", "assert_2"]
    assert task.tests[0].code == "y = c(1)\nassert y == 2"  # a statement using the candidate goes with its test
    assert "import math" in task.setup and "c = candidate" in task.setup


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"prompt": "x", "entry_point": "f", "test": "def check(candidate): pass"}, "no assert"),
        ({"prompt": "x", "entry_point": "f", "test": "def nope(candidate): assert 1"}, "check"),
        ({"prompt": "x", "entry_point": "1f", "test": "def check(c): assert 1"}, "entry_point"),
        ({"prompt": "x", "entry_point": "f", "test": "def check(c):\n assert ("}, "not valid Python"),
        ({"test_list": []}, "test_list"),
        ({"test_list": ["assert f(1) =="]}, "test_list"),
        ({"inputs": ["1"], "outputs": []}, "equal length"),
        ({"inputs": "1", "outputs": "1"}, "inputs"),
        ({"input_output": "{not json"}, "input_output"),
        ({"input_output": {"fn_name": "1f", "inputs": [[1]], "outputs": [1]}}, "fn_name"),
        ({"input_output": {"fn_name": "f", "inputs": [1], "outputs": [1]}}, "arguments"),
        ({"format": "stdio", "input_output": {"fn_name": "f", "inputs": [[1]], "outputs": [1]}}, "call"),
        ({**SUM_STDIO, "recursion_limit": 0}, "recursion_limit"),
        ({"format": "pytest", "test": "def test_x(:"}, "not valid Python"),
    ],
)
def test_malformed_tasks_name_the_field(row, field):
    with pytest.raises(TaskFormatError, match=field):
        parse_task(row)


def test_extract_code_takes_the_last_python_block():
    assert extract_code("Here:\n```python\nx = 1\n```\nand better:\n```py\nx = 2\n```\nDone.") == "x = 2\n"
    assert extract_code("```\nprint(1)\n```") == "print(1)\n"
    assert extract_code("    return a + b") == "    return a + b\n"  # a body continuing the prompt keeps its indent
    assert extract_code("```python\nunclosed = True\n") == "unclosed = True\n"
    assert extract_code("```js\nlet x\n```") is None
    assert extract_code("   \n") is None


def test_solution_program_continues_the_prompt_or_keeps_a_full_function():
    task = parse_task({**ADD, "prompt": "from typing import List\n\ndef add(a, b):\n"})
    assert solution_program(task, "    return a + b\n").startswith(
        "from typing import List\n\ndef add(a, b):\n    return"
    )
    full = solution_program(task, "def add(a, b):\n    return a + b\n")
    assert full == "from typing import List\ndef add(a, b):\n    return a + b\n"


def test_outputs_match_rules():
    assert outputs_match("3\n", "3")
    assert outputs_match("1 2  \n3\n\n", "1 2\n3")
    assert outputs_match("0.3333333\n", "0.33333333")
    assert not outputs_match("0.334\n", "0.333")
    assert not outputs_match("3 4", "3")
    assert outputs_match("inf", "inf")  # identical tokens compare as text
    assert not outputs_match("1e400", "inf")  # numbers only match when finite
    assert not outputs_match("YES", "yes")


def test_plain_values_round_trip_and_refuse_objects():
    value = {"a": [1, 2.5, None, True], (1, "x"): {3, 4}, "big": 2**100, "f": float("inf"), "b": b"\x00", "c": 1j}
    assert decode(encode(value)) == value
    assert type(decode(encode((1, [2])))) is tuple

    class Rigged(int):
        def __eq__(self, other):
            return True

    for bad in (Rigged(3), object(), [1, print], {"k": Rigged(1)}):
        with pytest.raises(NotPlain):
            encode(bad)
    for forged in ('{"int": 5}', '{"evil": 1}', '{"dict": [[[1], 2]]}', "NaN", '{"tuple": 1}'):
        with pytest.raises((NotPlain, ValueError)):
            decode(forged)


# ---- grading ----


@pytest.mark.parametrize(
    ("task", "good", "bad"),
    [
        (ADD, "    return a + b\n", "    return a - b\n"),
        (SQUARE_MBPP, "```python\ndef sq(x):\n    return x * x\n```", "def sq(x):\n    return abs(x) * 2\n"),
        (SUM_STDIO, "a, b = map(int, input().split())\nprint(a + b)", "print(7)"),
        (DOUBLE_PYTEST, "def double(x):\n    return x * 2", "def double(x):\n    return x + 2"),
    ],
    ids=["humaneval", "mbpp", "stdio", "pytest"],
)
def test_each_format_grades_right_and_wrong_solutions(verifier, task, good, bad):
    right = verifier.score(task, good)
    assert (right.value, right.status) == (1.0, "correct"), right
    assert right.components["passed"] == right.components["total"] >= 3
    wrong = verifier.score(task, bad)
    assert wrong.value == 0.0 and wrong.status == "wrong", wrong
    assert wrong.components["passed"] < wrong.components["total"]


def test_partial_credit_pays_the_fraction_passed():
    with CodeVerifier(workers=1, partial_credit=True, backend="bwrap") as v:
        score = v.score(SQUARE_MBPP, "def sq(x):\n    return 4 if x == 2 else 9")
    assert (score.value, score.status) == (pytest.approx(2 / 3), "partial")


def test_prune_stops_at_the_first_failure():
    with CodeVerifier(workers=1, prune=True, backend="bwrap") as v:
        score = v.score(SUM_STDIO, "print(3)")
    assert score.components == {"passed": 1.0, "total": 3.0, "hash_seed": 0.0}
    assert "case_1 failed" in score.reason


# each call leaves its number on the solution's stderr, whose last line the reason quotes
CALLS_LOGGED = {"test_list": [f"assert f({i}) == {i}" for i in range(5)]}
WRONG_AT_ONE = "import sys\ndef f(i):\n    print(f'call {i}', file=sys.stderr)\n    return -1 if i == 1 else i"


def test_a_binary_reward_stops_at_the_first_failing_test():
    with CodeVerifier(workers=1, backend="bwrap") as v:
        assert v.stops_at_first_failure
        score = v.score(CALLS_LOGGED, WRONG_AT_ONE)
        right = v.score(CALLS_LOGGED, WRONG_AT_ONE.replace("-1 if i == 1 else i", "i"))
    assert (score.value, score.status) == (0.0, "wrong"), score
    assert (score.components["passed"], score.components["total"]) == (1.0, 5.0)
    assert "(3 not run: grading stops at the first failure); test_1 failed" in score.reason
    assert "solution stderr: call 1" in score.reason  # tests 2-4 never called the solution
    assert (right.value, right.status, right.reason) == (1.0, "correct", "all 5 tests passed")


@pytest.mark.parametrize("options", [{"partial_credit": True}, {"prune": False}], ids=["partial-credit", "no-prune"])
def test_partial_credit_or_no_prune_runs_every_test(options):
    with CodeVerifier(workers=1, backend="bwrap", **options) as v:
        assert not v.stops_at_first_failure
        score = v.score(CALLS_LOGGED, WRONG_AT_ONE)
    assert (score.components["passed"], score.components["total"]) == (4.0, 5.0)
    assert "not run" not in score.reason and "solution stderr: call 4" in score.reason
    assert (score.value, score.status) == ((0.8, "partial") if options.get("partial_credit") else (0.0, "wrong"))


def test_a_binary_reward_stops_a_pytest_file_at_its_first_failure():
    task = {
        "test": "from solution import f\n\n"
        + "".join(f"def test_{i}():\n    assert f({i}) == {i}\n\n" for i in range(4))
    }
    with CodeVerifier(workers=1, backend="bwrap") as v:
        score = v.score(task, WRONG_AT_ONE)
    assert (score.value, score.status, score.components["passed"], score.components["total"]) == (0.0, "wrong", 1, 4)
    assert "(2 not run: grading stops at the first failure); tests_ludus/test_task.py::test_1 failed" in score.reason
    assert "solution stderr: call 1" in score.reason


def test_shuffle_changes_the_order_tests_run_in():
    task = {"test_list": [f"assert log({i}) == {i}" for i in range(8)]}
    solution = "import sys\ndef log(i):\n    print(i, file=sys.stderr)\n    return i"
    with CodeVerifier(workers=1, shuffle=True, prune=True, seed=3, backend="bwrap", cache_size=0) as v:
        failing = "def log(i):\n    return -1"
        reasons = {v.score(task, failing).reason.split(";")[1] for _ in range(6)}
        assert v.score(task, solution).value == 1.0
    assert len(reasons) > 1  # the first failing test differs between runs


def test_identical_pairs_come_from_the_cache(verifier):
    first = verifier.score(ADD, "    return a + b  # cached\n")
    sandbox = verifier._candidates
    verifier._candidates = None  # a cache miss would now have to build a fresh pool
    try:
        assert verifier.score(ADD, "    return a + b  # cached\n") is first
    finally:
        verifier._candidates = sandbox


def test_statuses_for_broken_solutions(verifier):
    assert verifier.score(ADD, "no code here ```sh\nls\n```").status == "no_answer"
    syntax = verifier.score(ADD, "def add(a, b)\n    return a + b")
    assert syntax.status == "wrong" and "SyntaxError" in syntax.reason
    loop = verifier.score(ADD, "    while True:\n        pass\n")
    assert loop.status == "timeout" and loop.value == 0.0
    assert verifier.score({"format": "mbpp"}, "x").status == "gold_error"
    raises = verifier.score(SQUARE_MBPP, "def sq(x):\n    raise ValueError('no')")
    assert raises.status == "wrong" and "ValueError" in raises.reason


def test_builtin_exceptions_keep_their_class_for_tests_that_expect_them(verifier):
    task = {"test_list": ["try:\n    f(-1)\n    assert False\nexcept ValueError:\n    pass", "assert f(2) == 2"]}
    assert verifier.score(task, "def f(x):\n    if x < 0: raise ValueError\n    return x").value == 1.0
    assert verifier.score(task, "def f(x):\n    if x < 0: raise TypeError\n    return x").value == 0.0


@pytest.mark.parametrize(
    ("task", "completion"),
    [
        (
            {
                "prompt": "def f(x):\n",
                "entry_point": "f",
                "test": "def check(candidate):\n    assert abs(candidate(1) - 7) < 1e-9\n",
            },
            "def abs(x):\n    return 0\ndef f(x):\n    return 99",
        ),
        (
            {"test_list": ["assert len(f(3)) == 3", "assert sorted(f(2)) == [0, 1]"]},
            "def len(x): return 3\ndef sorted(x): return [0, 1]\ndef f(n): return 'x'",
        ),
        (
            {"format": "pytest", "test": "from solution import *\n\ndef test_f():\n    assert len(f()) == 5\n"},
            "def len(x): return 5\ndef f(): return ''",
        ),
    ],
    ids=["humaneval-abs", "mbpp-len-sorted", "pytest-star-import-len"],
)
def test_a_solution_cannot_redefine_the_builtins_the_tests_use(verifier, task, completion):
    score = verifier.score(task, completion)
    assert (score.value, score.status) == (0.0, "wrong"), score


def test_a_crash_is_not_the_exception_a_lenient_test_expects(verifier):
    task = {"test_list": ["assert f(1) == 1", "try:\n    f(-1)\n    assert False\nexcept:\n    pass"]}
    assert verifier.score(task, "def f(x):\n    if x < 0: raise ValueError\n    return x").value == 1.0
    for exit_call in ("import os; os._exit(0)", "import time; time.sleep(60)"):
        score = verifier.score(task, f"def f(x):\n    if x < 0: {exit_call}\n    return x")
        assert score.value == 0.0 and score.components["passed"] == 1.0, score


def test_pytest_tests_that_swallow_a_crash_still_fail(verifier):
    task = {
        "format": "pytest",
        "test": "from solution import f, LIMIT\n\ndef test_a():\n    assert f(1) == 1\n\n"
        "def test_b():\n    try:\n        f(-1)\n    except BaseException:\n        pass\n",
    }
    assert verifier.score(task, "LIMIT = 3\ndef f(x):\n    if x < 0: raise ValueError\n    return x").value == 1.0
    crash = verifier.score(task, "LIMIT = 3\ndef f(x):\n    if x < 0: import os; os._exit(0)\n    return x")
    assert crash.value == 0.0 and crash.status == "wrong", crash


def test_a_value_that_hangs_the_test_side_is_the_solutions_failure_not_infra():
    task = {"test_list": ["assert f(1) == 1", "for _ in range(f(2)):\n    pass", "assert f(3) == 3"]}
    with CodeVerifier(workers=1, backend="bwrap", limits=Limits(wall_s=1, cpu_s=1)) as v:
        score = v.score(task, "def f(x):\n    return 10**17 if x == 2 else x")
        assert (score.value, score.status) == (0.0, "timeout"), score
        assert score.components == {"passed": 1.0, "total": 3.0, "hash_seed": 0.0}
        assert v.score(task, "def f(x):\n    return 0 if x == 2 else x").value == 1.0


def test_a_correct_solution_the_machine_starves_is_correct_not_a_timeout():
    """Four busy processes share the solution's CPU, so 0.5 s of CPU take ~2.5 s of wall-clock
    time: past the 1 s a call may take and the solution's 2 s wall limit. Both count what the
    solution did, never the machine's load, so the verdict is the idle machine's: correct (a
    wall-clock call timeout scored it ``timeout``). A call that spins is still a timeout."""
    cpu = a_cpu()
    pin = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\n"
    burn = "    end = time.process_time() + 0.5\n    while time.process_time() < end:\n        pass\n"
    add = {"prompt": "def add(a, b):\n", "entry_point": "add", "test": "def check(c):\n    assert c(2, 3) == 5\n"}
    program = pin + "if True:\n" + burn + "a, b = map(int, input().split())\nprint(a + b)\n"
    with CodeVerifier(workers=1, test_timeout_s=1, limits=Limits(wall_s=2, cpu_s=10), cache_size=0) as v:
        v.warm()
        with crowded(cpu, busy=4):
            function = v.score(add, pin + "def add(a, b):\n" + burn + "    return a + b\n")
            stdio = v.score({"inputs": ["2 3\n"], "outputs": ["5\n"]}, program)
            spin = v.score(add, pin + "def add(a, b):\n    while True:\n        pass\n")
    assert function.status == "correct", function
    assert stdio.status == "correct", stdio
    assert spin.status == "timeout" and "1 s of CPU time" in spin.reason, spin


def test_task_setup_errors_are_gold_errors_not_model_failures(verifier):
    task = {"test_list": ["assert f(1) == 1"], "test_setup_code": "import no_such_module_anywhere"}
    assert verifier.score(task, "def f(x): return x").status == "gold_error"


def test_score_many_keeps_order(verifier):
    pairs = [(SQUARE_MBPP, "def sq(x): return x*x"), (SQUARE_MBPP, "def sq(x): return x"), (ADD, "    return a+b\n")]
    assert [s.value for s in verifier.score_many(pairs)] == [1.0, 0.0, 1.0]


# ---- python's semantics, and the relaxations a score must show ----

DEEP_1500 = "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
DEEP_ADD = {
    "prompt": "def deep_add(a, b):\n",
    "entry_point": "deep_add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 5) == 10\n",
}
DEEP_STDIO = {"inputs": ["1 2\n"], "outputs": ["3\n"]}


def test_recursion_past_pythons_limit_fails_unless_the_relaxation_is_asked_for(verifier, tmp_path):
    function = DEEP_1500 + "def deep_add(a, b):\n    return a + b + depth(1500) - 1500\n"
    program = DEEP_1500 + "a, b = map(int, input().split())\nprint(a + b + depth(1500) - 1500)\n"
    for task, solution in ((DEEP_ADD, function), (DEEP_STDIO, program)):
        default = verifier.score(task, solution)  # dies with RecursionError under a plain `python`: so here
        assert (default.value, default.status) == (0.0, "wrong"), default
        assert "RecursionError" in default.reason and "recursion_limit" not in default.components
        own = verifier.score(task, "import sys\nsys.setrecursionlimit(2000)\n" + solution)  # as in python
        assert own.value == 1.0 and "recursion_limit" not in own.components, own
        per_task = verifier.score({**task, "recursion_limit": 2000}, solution)  # a field of the task
        assert per_task.value == 1.0 and per_task.components["recursion_limit"] == 2000.0, per_task
        assert "recursion limit 2000, set by the task" in per_task.reason
    with CodeVerifier(workers=1, backend="bwrap", limits=Limits(recursion=2000)) as relaxed:  # an option
        for task, solution in ((DEEP_ADD, function), (DEEP_STDIO, program)):
            score = relaxed.score(task, solution)
            assert score.value == 1.0 and score.components["recursion_limit"] == 2000.0, score
            assert "recursion limit 2000, set by the verifier" in score.reason
    # the same option on the command line
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"task": DEEP_ADD, "completion": function}) + "\n")
    for extra, reward in (([], 0.0), (["--recursion-limit", "2000"], 1.0)):
        assert (
            main(["verify", "code", str(source), "-o", str(out), "--workers", "1", "--backend", "bwrap", *extra]) == 0
        )
        row = json.loads(out.read_text())
        assert row["reward"] == reward and (("recursion limit 2000" in row["reason"]) == bool(extra)), row


def test_a_function_gets_the_headroom_it_has_under_python(verifier):
    deepest = (
        "def deepest(n=1):\n    try:\n        return deepest(n + 1)\n    except RecursionError:\n        return n\n"
    )
    limit = 1000  # CPython's default: called from a module's top level, deepest() reaches 999
    assert verifier.score({"test_list": [f"assert deepest() == {limit - 1}"]}, deepest).value == 1.0
    assert verifier.score({"inputs": [""], "outputs": [f"{limit - 1}"]}, deepest + "print(deepest())").value == 1.0


def _plain_hash(text: str, seed: str) -> int:
    """hash(text) in a plain `python` with PYTHONHASHSEED=seed (our own one-liner, not model code)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", f"print(hash({text!r}))"], capture_output=True, text=True, env=env)
    return int(done.stdout)


def test_the_hash_seed_is_fixed_and_every_score_says_so(verifier):
    task = {"test_list": [f"assert h() == {_plain_hash('ludus', '0')}"]}
    solution = "def h():\n    return hash('ludus')\n"
    score = verifier.score(task, solution)  # graded as under PYTHONHASHSEED=0 python, on any worker
    assert score.value == 1.0 and score.components["hash_seed"] == 0.0, score
    with CodeVerifier(workers=1, backend="bwrap", hash_seed=7) as seven:
        other = seven.score(task, solution)
        assert other.value == 0.0 and other.components["hash_seed"] == 7.0, other
        task_7 = {"test_list": [f"assert h() == {_plain_hash('ludus', '7')}"]}
        assert seven.score(task_7, solution).value == 1.0
    with pytest.raises(ValueError, match="hash_seed"):
        CodeVerifier(hash_seed=2**32)


def test_stdio_programs_run_as_main_and_function_solutions_do_not(verifier):
    main_guard = "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()\n"
    assert verifier.score(SUM_STDIO, main_guard).value == 1.0
    threaded = "import threading\n" + main_guard.replace("    main()", "    threading.Thread(target=main).start()")
    assert verifier.score(SUM_STDIO, threaded).value == 1.0  # the interpreter waits for it, as python does
    assert verifier.score(SUM_STDIO, main_guard.replace("__main__", "solution")).value == 0.0
    # a function solution is imported, not run: its main block stays quiet (as in HumanEval's harness)
    demo = "def add(a, b):\n    return a + b\n\nif __name__ == '__main__':\n    raise SystemExit(add(input(), 1))\n"
    assert verifier.score(ADD, demo).value == 1.0


# call-based APPS rows, as the data set has them: input_output and solutions are JSON text
APPS_FUNCTION = {
    "question": "Return the sum of a list and the list of its prefix sums.",
    "starter_code": "def sums(xs):\n",
    "input_output": json.dumps(
        {"fn_name": "sums", "inputs": [[[1, 2, 3]], [[]], [[5]]], "outputs": [[[6, [1, 3, 6]]], [[0, []]], [[5, [5]]]]}
    ),
    "solutions": json.dumps(
        [
            "def sums(xs):\n    out, t = [], 0\n    for x in xs:\n        t += x\n        out.append(t)\n    return (t, out)\n"
        ]
    ),
}
APPS_CLASS = {
    "question": "Given nums and target, return the indices of the two numbers that add up to target.",
    "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
    "input_output": json.dumps(
        {
            "fn_name": "twoSum",
            "inputs": [[[2, 7, 11, 15], 9], [[3, 2, 4], 6], [[3, 3], 6]],
            "outputs": [[0, 1], [1, 2], [0, 1]],
        }
    ),
}
TWO_SUM = (
    "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
    "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
    "                return [seen[target - x], i]\n            seen[x] = i\n"
)
COUNT_KEYS = {  # JSON has no integer keys: APPS's dicts come back with int keys
    "input_output": {"fn_name": "invert", "inputs": [[{"1": "a", "2": "b"}]], "outputs": [{"a": 1, "b": 2}]},
}


def test_call_based_apps_tasks_grade_functions_and_solution_classes(verifier, tmp_path):
    assert parse_task(APPS_FUNCTION).format == "call" and infer_format(APPS_CLASS) == "call"
    right_function = json.loads(APPS_FUNCTION["solutions"])[0]
    cases = [
        (APPS_FUNCTION, right_function, 1.0),  # a tuple result matches the list APPS's JSON holds
        (APPS_FUNCTION, right_function.replace("return (t, out)", "return (t, out[:-1])"), 0.0),
        (APPS_FUNCTION, "def sums(xs):\n    return [sum(xs), xs]\n", 0.0),
        (APPS_CLASS, TWO_SUM, 1.0),  # List comes from the imports APPS's harness provides
        (APPS_CLASS, TWO_SUM.replace("[seen[target - x], i]", "[i, seen[target - x]]"), 0.0),
        (APPS_CLASS, "def twoSum(nums, target):\n    return [0, 1]\n", 0.0),  # right twice out of three
        (COUNT_KEYS, "def invert(d):\n    return {v: k for k, v in d.items()}\n", 1.0),
        (COUNT_KEYS, "def invert(d):\n    return {v: str(k) for k, v in d.items()}\n", 0.0),
    ]
    for task, solution, reward in cases:
        score = verifier.score(task, f"```python\n{solution}```")
        assert score.value == reward, (solution, score)
    # from a file, as APPS rows come: the prompt shows the starter code; the reference is a solution
    path = tmp_path / "apps.jsonl"
    path.write_text(json.dumps(APPS_FUNCTION) + "\n" + json.dumps(APPS_CLASS) + "\n")
    tasks = load_code_tasks(path)
    assert [t.info["format"] for t in tasks.rows()] == ["call", "call"]
    assert "def twoSum(self" in tasks.get(1).prompt
    env = CodeEnv(path=str(path), eval_path=str(path), workers=1, backend="bwrap")
    reference = env.reference(tasks.get(0))
    assert reference is not None and env.score(tasks.get(0), reference).value == 1.0


# ---- loaders, environments, CLI ----


def test_load_code_tasks_reads_every_format_and_names_bad_rows(tmp_path):
    good = tmp_path / "tasks.jsonl"
    rows = [
        ADD,
        SQUARE_MBPP,
        {**SUM_STDIO, "question": "Add two numbers."},
        {**DOUBLE_PYTEST, "prompt": "Write double."},
    ]
    good.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tasks = load_code_tasks(good)
    assert [tasks.get(i).info["format"] for i in range(4)] == ["humaneval", "mbpp", "stdio", "pytest"]
    assert "assert sq(2) == 4" in tasks.get(1).prompt and "assert sq(3)" not in tasks.get(1).prompt
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ADD) + "\n" + json.dumps({"test_list": ["assert f("]}) + "\n")
    with pytest.raises(TaskFileError, match="line 2.*test_list"):
        load_code_tasks(bad)
    no_prompt = tmp_path / "noprompt.jsonl"
    no_prompt.write_text(json.dumps(SUM_STDIO) + "\n")
    with pytest.raises(TaskFileError, match="line 1.*prompt"):
        load_code_tasks(no_prompt)


def test_code_env_grades_a_file_task(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(SQUARE_MBPP) + "\n")
    env = CodeEnv(path=str(path), workers=1, backend="bwrap")
    obs = env.reset(env.default_tasks().get(0), seed=0)
    assert "Square a number." in obs.messages[-1].content
    result = env.step("```python\ndef sq(x):\n    return x ** 2\n```")
    assert result.terminated and result.reward == 1.0
    # rollouts build one environment per episode: they share one verifier and its warm workers
    assert CodeEnv(path=str(path), workers=1, backend="bwrap").verifier is env.verifier
    assert CodeEnv(path=str(path), workers=1, backend="bwrap", prune=True).verifier is not env.verifier


def test_code_tools_env_runs_only_visible_tests_then_grades_hidden_ones(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(SQUARE_MBPP) + "\n")
    env = CodeToolEnv(path=str(path), workers=1, backend="bwrap", visible_tests=1)
    env.reset(env.default_tasks().get(0), seed=0)
    overfit = "def sq(x):\n    return 4"
    call = ToolCall("run_tests", {"code": overfit}, id="c1")
    tool_step = env.step(Message("assistant", "", tool_calls=[call]))
    assert not tool_step.terminated
    assert tool_step.observation.messages[0].content == "all 1 tests passed"
    final = env.step(f"```python\n{overfit}\n```")
    assert final.terminated and final.reward == 0.0 and final.score.components["total"] == 3.0


def test_cli_verify_code_scores_lines_and_reports_malformed_ones(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    lines = [
        json.dumps({"task": ADD, "completion": "    return a + b\n"}),
        "{broken json",
        json.dumps({"task": {**SUM_STDIO, "format": "stdio"}, "completion": "print(3)"}),
        json.dumps({"task": "not an object", "completion": "x"}),
        json.dumps({"completion": "no task"}),
        json.dumps(
            {
                "task": {"inputs": ["1"], "outputs": ["1"]},
                "completion": "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 50)",
            }
        ),
    ]
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["verify", "code", str(source), "-o", str(out), "--workers", "2", "--backend", "bwrap"]) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["reward"], r["status"], r["passed"], r["total"]) for r in written] == [
        (1.0, "correct", 4, 4),
        (0.0, "wrong", 1, 3),
        (0.0, "wrong", 0, 1),
    ]
    assert all(r["reason"] for r in written)
    printed = capsys.readouterr().err  # the report goes to stderr, the scored lines to -o or stdout
    for number in (2, 4, 5):
        assert f"skipped line {number}" in printed


def test_cli_doctor_reports_bubblewrap(capsys):
    assert main(["doctor"]) == 0
    printed = capsys.readouterr().err
    assert "bwrap" in printed and "namespaces" in printed


@pytest.mark.parametrize("name", ["code", "code-tools"])
def test_code_environments_meet_the_contract(name):
    from ludus.certify.contract import check_env_by_name, format_report

    report = check_env_by_name(name, backend="bwrap", workers=2)
    assert report.ok, format_report(report)
    assert not report.warnings
