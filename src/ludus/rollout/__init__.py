"""Running episodes at scale, and measuring what they show (docs/rollout.md).

* :class:`RolloutEngine` — many episodes in flight, batched generation overlapping environment
  work, infrastructure failures retried then masked; :func:`requests` numbers, keys and seeds
  episodes the one way the engine, the trainer and the sampler share.
* Hosts — where environments run: :class:`ThreadHost` (threads of this process),
  :class:`~ludus.rollout.ray_host.RayHost` (Ray actors; the ``ray`` extra, imported on demand) or
  :class:`~ludus.rollout.remote.ServerHost` (env servers); :class:`EnvPlacement` says which, and
  checks the environment, the one way every command does.
* :func:`evaluate` / :func:`summarize` — mean reward, accuracy, pass@k, best-of-N, per category.
* :class:`OraclePolicy` / :class:`NothingPolicy` — scripted policies that prove an environment's
  tasks solvable and its reward discriminating.

Names load on first use, so that an environment server (which needs only the hosts) imports
no torch.
"""

from ludus.core.lazy import lazy_exports

_EXPORTS = {
    "EnvCalls": "hosts",
    "EnvHost": "hosts",
    "HostedEnv": "hosts",
    "ThreadHost": "hosts",
    "EnvPlacement": "placement",
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
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
