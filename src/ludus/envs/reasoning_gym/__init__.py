"""reasoning-gym's datasets as ``rg:NAME`` environments, graded by audited scorers."""

from ludus.envs.reasoning_gym.env import ReasoningGymEnv, env_class, offered, registry_entries

__all__ = ["ReasoningGymEnv", "env_class", "offered", "registry_entries"]
