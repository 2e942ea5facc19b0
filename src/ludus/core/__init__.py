"""Core types and the environment API. Imports nothing else of ludus, and no heavy libraries."""

from ludus.core.env import Env, EnvStateError, MissingDependency, SingleTurnEnv, Split, TaskSource, ToolEnv
from ludus.core.registry import EnvLoadError, UnknownEnvError, make, register
from ludus.core.rubric import Criterion, Rubric
from ludus.core.tools import Tool, ToolCache, ToolError, ToolSchemaError, tool, tool_spec, validate_arguments
from ludus.core.types import (
    InfraError,
    Message,
    Observation,
    Score,
    Status,
    StepResult,
    Task,
    ToolCall,
    ToolSpec,
    Trajectory,
    Turn,
)

__all__ = [
    "Criterion",
    "Env",
    "EnvLoadError",
    "EnvStateError",
    "InfraError",
    "Message",
    "MissingDependency",
    "Observation",
    "Rubric",
    "Score",
    "SingleTurnEnv",
    "Split",
    "Status",
    "StepResult",
    "Task",
    "TaskSource",
    "Tool",
    "ToolCache",
    "ToolCall",
    "ToolEnv",
    "ToolError",
    "ToolSchemaError",
    "ToolSpec",
    "Trajectory",
    "Turn",
    "UnknownEnvError",
    "make",
    "register",
    "tool",
    "tool_spec",
    "validate_arguments",
]
