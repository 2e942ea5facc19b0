"""Reward sources that belong to no one environment family (docs/rewards.md).

* :class:`Judge` — an LLM grading one reply, a pair or a whole group against criteria
  (``judge.py``), with :class:`ScriptedJudgeServer`, a deterministic judge for tests and offline runs
* :class:`RewardModel` — a Bradley-Terry reward model (``ludus train-rm``); ``rm:PATH`` in a rubric

Families may import this room; names load on first use, so ``import ludus.rewards`` loads no torch.
"""

from ludus.core.lazy import lazy_exports

_EXPORTS = {
    "Judge": "judge",
    "MalformedVerdict": "judge",
    "Preference": "judge",
    "Verdict": "judge",
    "parse_verdict": "judge",
    "shared_judge": "judge",
    "ScriptedJudgeServer": "scripted_judge",
    "RewardModel": "reward_model",
    "rm_reward": "reward_model",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
