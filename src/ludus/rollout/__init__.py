"""Running episodes at scale, and measuring what they show (docs/rollout.md).

* :class:`RolloutEngine` — many episodes in flight, batched generation overlapping environment
  work, infrastructure failures retried then masked; :func:`requests` numbers, keys and seeds
  episodes the one way the engine, the trainer and the sampler share.
* Hosts — where environments run: :class:`ThreadHost` (threads of this process) or
  :class:`~ludus.rollout.ray_host.RayHost` (Ray actors; the ``ray`` extra, imported on demand).
* :func:`evaluate` / :func:`summarize` — mean reward, accuracy, pass@k, best-of-N, per category.
* :class:`OraclePolicy` / :class:`NothingPolicy` — scripted policies that prove an environment's
  tasks solvable and its reward discriminating.
* :func:`redteam_env` — ``ludus check --redteam``: the oracle, the floor and a library of
  generic cheats played against an environment, one report-card line each.

Names load on first use, so that an environment server (which needs only the hosts) imports
no torch.
"""

from ludus.core.lazy import lazy_exports

_EXPORTS = {
    "EnvHost": "hosts",
    "EnvSession": "hosts",
    "ThreadHost": "hosts",
    "EpisodeRequest": "engine",
    "JsonlSink": "engine",
    "RolloutConfig": "engine",
    "RolloutEngine": "engine",
    "requests": "engine",
    "Summary": "evaluate",
    "evaluate": "evaluate",
    "pass_at_k": "evaluate",
    "summarize": "evaluate",
    "NothingPolicy": "scripted",
    "OraclePolicy": "scripted",
    "CHEATS": "redteam",
    "Cheat": "redteam",
    "format_redteam": "redteam",
    "redteam_env": "redteam",
    "redteam_env_by_name": "redteam",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
