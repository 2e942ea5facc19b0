"""Where a command's environments run — threads here, env servers or Ray actors — as one value.

    placement = EnvPlacement(32, env_servers=("http://10.0.0.5:8100",))
    make_env, first = placement.env_factory("sql", None)   # checked; ``first`` is yours to use and close
    host = placement.host()                                # for RolloutEngine(..., host=host)

``ludus eval``, ``ludus check`` and ``ludus train`` all go through it, so an environment is
checked and a host is made the one way. It sits above the hosts it picks from (``hosts``,
``ray_host``, ``remote``), which never import it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ludus.core import registry
from ludus.core.env import Env
from ludus.rollout.hosts import EnvHost, ThreadHost


class EnvArgsError(ValueError):
    """``env_args`` that the environment refuses (it raised ``TypeError`` or ``ValueError`` when made)."""


def _token_from_environment() -> str | None:
    return os.environ.get("LUDUS_ENV_TOKEN") or None


@dataclass(frozen=True)
class EnvPlacement:
    """Where environments run: ``threads`` threads here (the default), sessions on
    ``env_servers`` (with ``token``, by default ``$LUDUS_ENV_TOKEN``, read once), or ``ray_actors``
    Ray actors (``ray_address`` joins a cluster; none starts a local instance) sharing ``threads``
    calls at once among them."""

    threads: int = 32
    env_servers: tuple[str, ...] = ()
    token: str | None = field(default_factory=_token_from_environment, repr=False)
    ray: bool = False
    ray_address: str | None = None
    ray_actors: int = 2

    def __post_init__(self) -> None:
        if self.env_servers and self.ray:
            raise ValueError("environments run on env servers or on Ray actors, not both: drop one of the two")
        if self.ray_actors < 1:
            raise ValueError(f"Ray actors must be at least 1, got {self.ray_actors}")

    def env_factory(self, name: str, env_args: Mapping[str, Any] | None) -> tuple[Callable[[], Env], Env]:
        """``(factory, first)``: a maker of environment ``name`` checked by making one, ``first``,
        which the caller uses (its tasks, a warm start) and closes. With env servers, each made
        environment is a :class:`~ludus.rollout.remote.RemoteEnv` on the first server, which must
        serve ``name`` and, unless ``env_args`` is ``None`` (take the server's), with these
        ``env_args`` (:func:`~ludus.rollout.remote.env_server_factory`). Here, ``env_args`` that
        the environment refuses raise :class:`EnvArgsError`; an unknown or uninstalled environment
        raises the registry's error."""
        if self.env_servers:
            from ludus.rollout.remote import env_server_factory

            return env_server_factory(self.env_servers[0], name, env_args, token=self.token)
        make = registry.factory(name, dict(env_args or {}))
        try:
            first = make()
        except (TypeError, ValueError) as exc:
            raise EnvArgsError(f"env_args do not fit environment {name!r}: {exc}") from exc
        return make, first

    def host(self) -> EnvHost:
        """The host that runs the environments: a :class:`ThreadHost`, a
        :class:`~ludus.rollout.remote.ServerHost` or a :class:`~ludus.rollout.ray_host.RayHost`.
        Yours to ``shutdown()``."""
        if self.env_servers:
            from ludus.rollout.remote import ServerHost

            return ServerHost(self.env_servers, token=self.token)
        if self.ray:
            from ludus.rollout.ray_host import RayHost

            per_actor = -(-self.threads // self.ray_actors)  # the same calls at once in all as without Ray
            # on this machine alone, the actors share its cores; on a cluster each reserves one
            cpus = 1.0 if self.ray_address else min(1.0, (os.cpu_count() or 1) / self.ray_actors)
            return RayHost(self.ray_actors, per_actor, address=self.ray_address, num_cpus_per_actor=cpus)
        return ThreadHost(self.threads)
