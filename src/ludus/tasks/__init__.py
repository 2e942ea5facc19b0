"""What the environment families share: seeded procedural task families with a difficulty knob,
task-file loaders, and answer extraction (``\\boxed{}`` and other markers)."""

from ludus.tasks.answers import boxed_contents, find_answers
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
    "boxed_contents",
    "find_answers",
    "load_tasks",
]
