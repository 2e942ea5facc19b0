"""``judged``: open-ended requests graded by an LLM judge through a rubric (docs/rewards.md)."""

from ludus.envs.judged.env import JudgedEnv

__all__ = ["JudgedEnv"]
