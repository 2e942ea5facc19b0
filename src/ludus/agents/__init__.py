"""Agents people already have, trained as they are: :class:`AgentEnv` (docs/agents.md)."""

from ludus.agents.env import AgentEnv
from ludus.agents.runner import AgentContext, AgentOutcome

__all__ = ["AgentContext", "AgentEnv", "AgentOutcome"]
