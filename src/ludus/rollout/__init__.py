"""Running episodes at scale, and measuring what they show (docs/rollout.md).

* :class:`RolloutEngine` — many episodes in flight, batched generation overlapping environment
  work, infrastructure failures retried then masked; :func:`requests` numbers, keys and seeds
  episodes the one way the engine, the trainer and the sampler share.
* Hosts — where environments run: :class:`ThreadHost` (threads of this process) or
  :class:`~ludus.rollout.ray_host.RayHost` (Ray actors; the ``ray`` extra, imported on demand).
* :func:`evaluate` / :func:`summarize` — mean reward, accuracy, pass@k, best-of-N, per category.
* :class:`OraclePolicy` / :class:`NothingPolicy` — scripted policies that prove an environment's
  tasks solvable and its reward discriminating.
"""

from ludus.rollout.engine import EpisodeRequest, JsonlSink, RolloutConfig, RolloutEngine, requests
from ludus.rollout.evaluate import Summary, evaluate, pass_at_k, summarize
from ludus.rollout.hosts import EnvHost, EnvSession, ThreadHost
from ludus.rollout.scripted import NothingPolicy, OraclePolicy

__all__ = [
    "EnvHost",
    "EnvSession",
    "EpisodeRequest",
    "JsonlSink",
    "NothingPolicy",
    "OraclePolicy",
    "RolloutConfig",
    "RolloutEngine",
    "Summary",
    "ThreadHost",
    "evaluate",
    "pass_at_k",
    "requests",
    "summarize",
]
