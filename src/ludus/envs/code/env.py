"""Code environments: write a function or program; the sandboxed code verifier grades it.

* ``code`` — single turn: one reply, graded on all of the task's tests.
* ``code-tools`` — multi-turn: the model may call ``run_tests(code)``, which runs only the
  *visible* tests (the first ``visible_tests`` of the task) and returns their results; its
  final reply is graded on all the tests, hidden ones included. For ``pytest`` tasks the
  file cannot be split, so ``run_tests`` runs the whole file.

Tasks come from a file of any of the five formats (``path=``, see
:func:`ludus.envs.code.tasks.load_code_tasks`), from a data set an installed package ships
(``path="humaneval"``), or, without either, from a procedural family of small function-writing
problems.

Code runs as under a plain ``python`` (python's recursion limit, an 8 MiB C stack); the one
fixed difference is ``hash_seed`` (``PYTHONHASHSEED``, default 0). ``recursion_limit`` relaxes
the recursion limit for every task; scores record both.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from ludus.core.env import JsonTypes, SingleTurnEnv, Split, TaskSource, ToolEnv
from ludus.core.types import Score, Status, Task
from ludus.envs.code.tasks import FunctionTasks, load_code_tasks
from ludus.envs.code.verifier import CodeVerifier, Format, TaskFormatError, parse_task
from ludus.sandbox import Limits
from ludus.tasks.loaders import split_files
from ludus.tasks.procedural import ProceduralTasks

_verifiers: dict[tuple[Any, ...], CodeVerifier] = {}
_verifiers_lock = threading.Lock()


def shared_verifier(*, wall_s: float, recursion_limit: int | None = None, **options: Any) -> CodeVerifier:
    """One verifier (and so one set of warm sandbox workers) per distinct configuration in a
    process: rollouts build an environment per episode, and each must not start its own pool.
    The workers end with the process (see ``ludus.sandbox.pool``)."""
    key = (wall_s, recursion_limit, *sorted(options.items()))
    with _verifiers_lock:
        if key not in _verifiers:
            limits = Limits(wall_s=wall_s, cpu_s=wall_s, recursion=recursion_limit)
            _verifiers[key] = CodeVerifier(limits=limits, **options)
        return _verifiers[key]


class CodeEnv(SingleTurnEnv):
    name = "code"
    description = "write a Python function or program; graded by its tests in the sandbox"
    system_prompt = "Write a correct Python solution. Reply with the code in one ```python block."
    # no tasks from clients: a task's tests are the grader's own code, run with the grader's
    # trust (a reply is the untrusted half), so a client's tests would run less isolated than replies
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = None

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        path: str | None = None,
        eval_path: str | None = None,
        format: Format | None = None,
        prompt_field: str | None = None,
        seed: int = 0,
        partial_credit: bool = False,
        shuffle: bool = False,
        prune: bool | None = None,
        test_timeout_s: float = 5.0,
        wall_s: float = 30.0,
        workers: int | None = None,
        backend: str = "auto",
        recursion_limit: int | None = None,
        hash_seed: int | None = 0,
    ):
        self.files = split_files(
            path, eval_path, lambda p: load_code_tasks(p, format=format, prompt_field=prompt_field)
        )
        super().__init__(tasks)
        self.seed = seed
        self.verifier = shared_verifier(
            partial_credit=partial_credit,
            shuffle=shuffle,
            prune=prune,
            seed=seed,
            test_timeout_s=test_timeout_s,
            wall_s=wall_s,
            workers=workers,
            backend=backend,
            recursion_limit=recursion_limit,
            hash_seed=hash_seed,
        )

    def default_tasks(self, split: Split = "train") -> TaskSource:
        if split in self.files:
            return self.files[split]()
        return ProceduralTasks(FunctionTasks(), seed=self.seed, split=split)

    def reference(self, task: Task) -> str | None:
        answer = task.answer if isinstance(task.answer, dict) else {}
        solution = answer.get("canonical_solution")
        if solution is None and answer.get("format") == "mbpp":  # MBPP keeps its reference solution in code
            solution = answer.get("code")
        if solution is None and isinstance(answer.get("solutions"), str):  # APPS: a JSON list of solutions
            try:
                solutions = json.loads(answer["solutions"])
            except ValueError:
                solutions = None
            solution = solutions[0] if isinstance(solutions, list) and solutions else None
        return f"```python\n{solution}```" if isinstance(solution, str) else None

    def score(self, task: Task, completion: str) -> Score:
        if not isinstance(task.answer, dict):
            return Score.zero(Status.GOLD_ERROR, f"task {task.id} has no code task in its answer")
        return self.verifier.score(task.answer, completion)


class CodeToolEnv(CodeEnv, ToolEnv):
    name = "code-tools"
    description = "write code with a run_tests tool for the visible tests; graded on hidden tests too"
    system_prompt = (
        "Write a correct Python solution. You may call run_tests(code) to run the visible tests. "
        "When done, reply with the final code in one ```python block and no tool call."
    )
    max_turns = 6

    def __init__(self, tasks: TaskSource | None = None, *, visible_tests: int = 1, max_turns: int = 6, **kwargs: Any):
        if visible_tests < 1:
            raise ValueError(f"visible_tests must be at least 1, got {visible_tests}")
        super().__init__(tasks, **kwargs)
        self.visible_tests, self.max_turns = visible_tests, max_turns

    def tool_functions(self) -> Sequence[Callable[..., Any]]:
        return [self.run_tests]

    def run_tests(self, code: str) -> str:
        """Run the visible tests of the task on your code and report which pass.

        Args:
            code: the complete solution, as you would submit it.
        """
        assert self.task is not None
        try:
            parsed = parse_task(self.task.answer)
        except TaskFormatError as exc:
            return f"Error: this task is malformed ({exc})"
        visible = parsed if parsed.format == "pytest" else replace(parsed, tests=parsed.tests[: self.visible_tests])
        score = self.verifier.score(visible, code if "```" in code else f"```python\n{code}\n```")
        if score.status == Status.INFRA_ERROR:
            return f"Error: the test runner failed ({score.reason}); try again"
        return score.reason
