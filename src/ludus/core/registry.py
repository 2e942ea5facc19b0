"""Find environments by name: every installed package's ``ludus.envs`` entry points, Ludus's own included.

A package makes its environment available to ``ludus train --env NAME`` by declaring, in its
``pyproject.toml``::

    [project.entry-points."ludus.envs"]
    my-env = "my_package.module:MyEnv"

Ludus's built-in families are declared the same way in Ludus's own ``pyproject.toml``, so
adding a family touches its folder and one line there. Entries are import paths: a module
is imported only when its environment is made or described, which keeps ``ludus envs`` fast.

A package that offers many environments at once (reasoning-gym's hundred datasets as ``rg:NAME``)
declares one ``ludus.env_families`` entry point instead: a function returning ``(name, target,
description)`` for each, or raising ``ImportError`` saying what to install. It is called only
for a name with a colon, or to list everything.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from ludus.core.env import Env
from ludus.core.lazy import import_target
from ludus.core.rubric import graded_by_rubric

ENTRY_POINT_GROUP = "ludus.envs"
FAMILY_GROUP = "ludus.env_families"
DISTRIBUTION = "ludus"  # entry points of this distribution are the built-ins

_registered: dict[str, type[Env]] = {}


class UnknownEnvError(KeyError):
    """No environment has this name. The message lists close matches and how to see all."""

    def __str__(self) -> str:  # KeyError would print the message with quotes
        return str(self.args[0])


class EnvLoadError(ImportError):
    """An environment is registered but its code could not be imported or is not an Env."""


@dataclass(frozen=True)
class EnvEntry:
    name: str
    target: str  # "module:Class"
    origin: str  # "builtin", "entry point (package X)", "family X", or "registered"
    description: str | None = None  # known without importing the class (a family's members)

    def load(self) -> type[Env]:
        if self.name in _registered:
            return _registered[self.name]
        try:
            obj = import_target(self.target)
        except Exception as exc:
            raise EnvLoadError(
                f"environment {self.name!r} ({self.origin}) points to {self.target}, which failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(obj, type) and issubclass(obj, Env)):
            raise EnvLoadError(f"environment {self.name!r} points to {self.target}, which is not a ludus Env subclass")
        return obj


def register(name: str, env_cls: type[Env]) -> None:
    """Register an environment class in this process (tests, notebooks). Packages should
    use the ``ludus.envs`` entry point instead, so every process finds it."""
    if not (isinstance(env_cls, type) and issubclass(env_cls, Env)):
        raise TypeError(f"register({name!r}, ...) needs an Env subclass, got {env_cls!r}")
    _registered[name] = env_cls


@functools.cache
def _declared() -> dict[str, EnvEntry]:
    """Every ``ludus.envs`` entry point of the installed packages, read once per process (reading
    them costs milliseconds; an environment server makes one environment per session). Ludus's
    own win over another package's entry of the same name, so a third-party package cannot
    replace a built-in."""
    found: dict[str, EnvEntry] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        if dist is not None and dist.name == DISTRIBUTION:
            found[ep.name] = EnvEntry(ep.name, ep.value, "builtin")
        elif ep.name not in found or found[ep.name].origin != "builtin":
            origin = f"entry point ({dist.name})" if dist is not None else "entry point"
            found[ep.name] = EnvEntry(ep.name, ep.value, origin)
    return found


@functools.cache
def _family_members() -> tuple[dict[str, EnvEntry], dict[str, str]]:
    """The members of every ``ludus.env_families`` entry point, and for each family that cannot list
    them (its package is missing) the reason, by name prefix."""
    found: dict[str, EnvEntry] = {}
    missing: dict[str, str] = {}
    for ep in entry_points(group=FAMILY_GROUP):
        try:
            members = ep.load()()
        except ImportError as exc:
            missing[ep.name] = str(exc)
            continue
        for name, target, description in members:
            found.setdefault(name, EnvEntry(name, target, f"family {ep.name}", description))
    return found, missing


def unavailable_families() -> dict[str, str]:
    """Each ``ludus.env_families`` prefix that cannot list its environments, with the reason
    (what to install)."""
    return dict(_family_members()[1])


def _registered_entry(name: str) -> EnvEntry:
    cls = _registered[name]
    return EnvEntry(name, f"{cls.__module__}:{cls.__qualname__}", "registered")


def entries() -> dict[str, EnvEntry]:
    """Every known environment by name; one registered in this process wins over an entry point."""
    found = {**_family_members()[0], **_declared()}
    found.update({name: _registered_entry(name) for name in _registered})
    return dict(sorted(found.items()))


def get_entry(name: str) -> EnvEntry:
    # a registered or declared name is found without listing the families (which imports them)
    if name in _registered:
        return _registered_entry(name)
    if name in _declared():
        return _declared()[name]
    members, missing = _family_members() if ":" in name else ({}, {})
    if name in members:
        return members[name]
    prefix = name.partition(":")[0]
    if prefix in missing:
        raise UnknownEnvError(f"no environment named {name!r}: family {prefix!r} is unavailable: {missing[prefix]}")
    known = entries()
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    if not known:
        hint += " (No environment is declared at all: is ludus installed, e.g. `pip install -e .`?)"
    raise UnknownEnvError(f"no environment named {name!r}.{hint} Run `ludus envs` to list them all.")


def env_class(name: str) -> type[Env]:
    return get_entry(name).load()


def make(name: str, **kwargs: Any) -> Env:
    """Create the environment registered as ``name`` with keyword arguments for its constructor;
    ``rubric=[...]`` (any environment that grades through ``score``) replaces its grader with a
    rubric (:func:`ludus.core.rubric.graded_by_rubric`)."""
    return factory(name, kwargs)()


def factory(name: str, env_args: dict[str, Any]) -> EnvFactory:
    """A picklable maker of ``name`` with ``env_args`` (what trainers, hosts, Ray actors and env
    servers call once per environment); the class is loaded now, so a wrong name fails here, and
    so does a rubric for an environment that cannot take one."""
    if not isinstance(env_args, dict):
        raise TypeError(f"env_args must be a mapping of constructor arguments, got {env_args!r}")
    args = dict(env_args)
    made = EnvFactory(env_class(name), args, args.pop("rubric", None))
    if made.rubric is not None:
        graded_by_rubric(made.cls)  # refuses an environment that grades in its own transition
    return made


@dataclass(frozen=True, eq=False)  # hashed by identity: hosts key their environments by factory
class EnvFactory:
    """``cls(**kwargs)``, graded by ``rubric`` when there is one. It holds the environment's own
    class, not the graded one made from it, so that it pickles by name (Ray actors, env servers)."""

    cls: type[Env]
    kwargs: dict[str, Any]
    rubric: list[dict[str, Any]] | None = None

    def __call__(self) -> Env:
        if self.rubric is None:
            return self.cls(**self.kwargs)
        return graded_by_rubric(self.cls)(**self.kwargs, rubric=self.rubric)
