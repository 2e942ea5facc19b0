"""BFCL single-turn function calling: one assistant message of tool calls, graded by AST matching."""

from ludus.envs.bfcl.env import BFCLEnv

__all__ = ["BFCLEnv"]
