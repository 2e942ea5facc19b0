"""Verifiable instruction following (IFEval's constraint kinds), graded by code without a judge:
the constraints and their checkers (:mod:`.constraints`), the seeded tasks and the IFEval-format
loader (:mod:`.tasks`), the environment (:mod:`.env`)."""

from ludus.envs.instruct.constraints import IFEVAL_IDS, check, describe
from ludus.envs.instruct.env import InstructEnv
from ludus.envs.instruct.tasks import InstructFamily, load_ifeval

__all__ = ["IFEVAL_IDS", "InstructEnv", "InstructFamily", "check", "describe", "load_ifeval"]
