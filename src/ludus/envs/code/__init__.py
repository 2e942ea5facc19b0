"""The ``code`` family: write a function or program, graded by its tests in the sandbox
(docs/code.md). ``from ludus.envs.code import CodeVerifier`` is the grader's one import path;
``load_code_tasks`` reads HumanEval, MBPP, stdin/stdout and pytest task files."""

from ludus.envs.code.env import CodeEnv, CodeToolEnv
from ludus.envs.code.tasks import FunctionTasks, load_code_tasks
from ludus.envs.code.verifier import CodeTask, CodeVerifier, TaskFormatError, parse_task, verify_code

__all__ = [
    "CodeEnv",
    "CodeTask",
    "CodeToolEnv",
    "CodeVerifier",
    "FunctionTasks",
    "TaskFormatError",
    "load_code_tasks",
    "parse_task",
    "verify_code",
]
