"""Objects imported by name when first needed: package faces (PEP 562), so that importing a
package (``ludus.envs``, ``ludus.train``) loads none of its heavy modules until a name is used,
and the ``"module:attr"`` targets that entry points and configurations name."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def import_target(target: str) -> Any:
    """The object ``"module:attr.attr"`` names (an entry point's value; the module is imported now)."""
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps a public name to the submodule
    (relative to ``package``) that defines it."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return import_target(f"{package}.{module}:{name}")

    return __getattr__
