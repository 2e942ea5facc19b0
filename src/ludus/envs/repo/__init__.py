"""The ``repo`` family (SWE-style): fix an issue in a small repository with file and shell
tools, graded by hidden fail-to-pass and pass-to-pass tests in the sandbox (docs/repo.md).
Procedural libraries with injected bugs (:class:`RepoTasks`) or SWE-bench-style rows
(:func:`load_repo_tasks`)."""

from ludus.envs.repo.env import RepoEnv
from ludus.envs.repo.tasks import RepoTasks, load_repo_tasks

__all__ = ["RepoEnv", "RepoTasks", "load_repo_tasks"]
