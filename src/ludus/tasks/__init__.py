"""Task sources: seeded procedural families with a difficulty knob, and dataset file loaders."""

from ludus.tasks.arithmetic import Arithmetic
from ludus.tasks.countdown import Countdown
from ludus.tasks.linear import LinearEquation
from ludus.tasks.loaders import FileTasks, TaskFileError, load_tasks
from ludus.tasks.procedural import Problem, ProceduralTasks, TaskFamily
from ludus.tasks.sorting import Sorting

FAMILIES: dict[str, type[TaskFamily]] = {cls.name: cls for cls in (Arithmetic, Countdown, Sorting, LinearEquation)}

__all__ = [
    "FAMILIES",
    "Arithmetic",
    "Countdown",
    "FileTasks",
    "LinearEquation",
    "Problem",
    "ProceduralTasks",
    "Sorting",
    "TaskFamily",
    "TaskFileError",
    "load_tasks",
]
