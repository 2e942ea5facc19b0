"""BFCL function calling: single-turn items graded by AST matching (``BFCLEnv``) and multi-turn items on
BFCL's API simulators, graded by state and results (``BFCLMultiTurnEnv``)."""

from ludus.envs.bfcl.env import BFCLEnv
from ludus.envs.bfcl.multi_turn import BFCLMultiTurnEnv

__all__ = ["BFCLEnv", "BFCLMultiTurnEnv"]
