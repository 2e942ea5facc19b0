"""``ludus envs``: every environment's name, description and origin, without importing the environments.

Environment families import torch, sympy or a sandbox, and listing them should not. So a
description is read from source: the literal ``description = "..."`` of the class, or of its
base classes, following ``from … import`` re-exports (a package's ``__init__``) file by file.
Only when the source does not settle it (a computed value, a decorator, bases that disagree) is
the class imported, and an environment that fails to import is listed with the error. The
packages an environment needs beyond Ludus (``Env.requires``) are read the same way, and an
environment whose package is missing is listed with the command that installs it; a family of
environments that cannot list them (reasoning-gym's ``rg:``, without reasoning-gym) is listed
with its reason.
"""

from __future__ import annotations

import argparse
import ast
import importlib.machinery
import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser
    from ludus.core.registry import EnvEntry

NO_DESCRIPTION = "(no description)"
MAX_HOPS = 20  # re-exports and base classes followed before giving up (and importing)


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("envs", help="list the available environments")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ludus.core.env import missing_requirements
    from ludus.core.registry import EnvLoadError, entries, unavailable_families

    source = SourceReader()
    table = Table("name", "description", "origin")
    for name, entry in entries().items():
        try:
            description = escape(describe(entry, source))
            missing = missing_requirements(requirements(entry, source))
        except EnvLoadError as exc:
            description, missing = f"[red]cannot load: {escape(str(exc))}[/]", {}
        if missing:
            install = "; ".join(dict.fromkeys(missing.values()))
            description += f"\n[yellow]not installed ({', '.join(missing)}): {escape(install)}[/]"
        table.add_row(name, description, entry.origin)
    for prefix, reason in unavailable_families().items():
        table.add_row(f"{prefix}:*", f"[yellow]{escape(reason)}[/]", f"family {prefix}")
    Console().print(table)
    return 0


def describe(entry: EnvEntry, source: SourceReader) -> str:
    """The environment's description, from its source if that spells it out, else from its imported class
    (which raises ``EnvLoadError`` if the class cannot be imported)."""
    if entry.description is not None:
        return entry.description
    if entry.origin != "registered":  # a class registered in this process is already imported
        try:
            return source.description(entry.target) or NO_DESCRIPTION
        except CannotTell:
            pass
    return entry.load().description or NO_DESCRIPTION


def requirements(entry: EnvEntry, source: SourceReader) -> dict[str, str]:
    """The environment's ``requires`` (module -> install command), from its source if that spells
    it out, else from its imported class. A family's members say nothing: the family itself is
    listed as unavailable when its package is missing."""
    if entry.description is not None:
        return {}
    if entry.origin != "registered":
        try:
            return source.requires(entry.target)
        except CannotTell:
            pass
    return dict(entry.load().requires)


class CannotTell(Exception):
    """The source alone does not settle the value; import the class instead."""


class SourceReader:
    """Reads literal class attributes from Python source without importing it; parsed files are kept."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[ast.Module, str]] = {}

    def description(self, target: str) -> str:
        """The literal ``description`` of the class at ``target`` ("module:Class")."""
        return literal_string(self._statement(target, "description"))

    def requires(self, target: str) -> dict[str, str]:
        """The literal ``requires`` of the class at ``target`` (``Env`` declares ``{}``)."""
        return literal_mapping(self._statement(target, "requires"))

    def _statement(self, target: str, attribute: str) -> ast.stmt:
        """The statement that gives the class at ``target`` its ``attribute``."""
        module, _, name = target.partition(":")
        if not name or "." in name:
            raise CannotTell(target)
        defined_in, cls = self._class(module, name, 0)
        statement = self._attribute(defined_in, cls, attribute, 0)
        if statement is None:
            raise CannotTell(f"{target} has no {attribute} in its source")
        return statement

    def _class(self, module: str, name: str, hops: int) -> tuple[str, ast.ClassDef]:
        """Where class ``name`` of ``module`` is defined, following from-imports: that module and the class."""
        if hops > MAX_HOPS:
            raise CannotTell(f"{module}.{name}: too many hops")
        tree, package = self._parse(module)
        statement = last_binding(tree.body, name)
        if isinstance(statement, ast.ClassDef):
            return module, statement
        if isinstance(statement, ast.ImportFrom):
            alias = next((a for a in statement.names if (a.asname or a.name) == name), None)
            if alias is not None:  # None: a star import
                return self._class(absolute_module(statement, package), alias.name, hops + 1)
        raise CannotTell(f"{module}.{name} is not a class statement or a from-import")

    def _attribute(self, module: str, cls: ast.ClassDef, attribute: str, hops: int) -> ast.stmt | None:
        """The statement that binds ``attribute`` in ``cls`` or up its bases; None if none does.
        With several bases, every one must lead to the same statement (or none): one class of the
        whole ancestry binds it, so the method resolution order can find no other."""
        if cls.decorator_list:
            raise CannotTell(f"{cls.name} is decorated")
        statement = last_binding(cls.body, attribute)
        if statement is not None:
            return statement
        found = set()
        for base in cls.bases:
            if not isinstance(base, ast.Name):
                raise CannotTell(f"{cls.name} has bases other than plain names")
            base_module, base_class = self._class(module, base.id, hops + 1)
            found.add(self._attribute(base_module, base_class, attribute, hops + 1))
        found.discard(None)
        if len(found) > 1:
            raise CannotTell(f"{cls.name}'s bases bind {attribute} differently")
        return found.pop() if found else None

    def _parse(self, module: str) -> tuple[ast.Module, str]:
        """The module's syntax tree and the package its relative imports start from."""
        if module not in self._parsed:
            spec = find_spec_without_importing(module)
            if spec is None or not spec.has_location or not (spec.origin or "").endswith(".py"):
                raise CannotTell(f"no Python source for {module}")
            try:
                with open(spec.origin, "rb") as f:
                    tree = ast.parse(f.read(), filename=spec.origin)
            except (OSError, SyntaxError, ValueError) as exc:
                raise CannotTell(f"cannot read {spec.origin}: {exc}") from exc
            is_package = spec.submodule_search_locations is not None
            self._parsed[module] = (tree, module if is_package else module.rpartition(".")[0])
        return self._parsed[module]


def find_spec_without_importing(module: str) -> importlib.machinery.ModuleSpec | None:
    """``importlib.util.find_spec`` imports a dotted name's parent packages, whose ``__init__``
    may import a whole family; this looks each level up in its parent's folders instead."""
    parent, _, _ = module.rpartition(".")
    try:
        if not parent:
            return importlib.util.find_spec(module)  # a top-level name: found without importing anything
        parent_spec = find_spec_without_importing(parent)
        if parent_spec is None or parent_spec.submodule_search_locations is None:
            return None
        return importlib.machinery.PathFinder.find_spec(module, parent_spec.submodule_search_locations)
    except (ImportError, ValueError, KeyError):  # ValueError: an imported module without __spec__; KeyError: a
        # namespace package (a folder without __init__.py) asks for its parent package in sys.modules
        return None


def last_binding(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The statement of ``body`` that binds ``name`` last, or None. A binding inside a compound
    statement (``if``, ``try``, ``with`` …) is not one we can follow, so it is returned as is."""
    found = None
    for statement in body:
        if may_bind(statement, name):
            found = statement
    return found


def may_bind(node: ast.AST, name: str) -> bool:
    """Whether running ``node`` in a module or class body may (re)bind or delete ``name``."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name  # their bodies are other scopes
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any(a.name == "*" or (a.asname or a.name.partition(".")[0]) == name for a in node.names)
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return False  # a bare annotation binds nothing
    if isinstance(node, ast.Name):
        return node.id == name and not isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.ExceptHandler) and node.name == name:
        return True
    return any(may_bind(child, name) for child in ast.iter_child_nodes(node))


def literal_string(statement: ast.stmt) -> str:
    """The string a simple ``name = "..."`` (or ``name: T = "..."``) assigns."""
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        value = statement.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    raise CannotTell(f"line {statement.lineno} is not a literal string assignment")


def literal_mapping(statement: ast.stmt) -> dict[str, str]:
    """The mapping of strings a simple ``name = {"...": "..."}`` (or ``name: T = {...}``) assigns."""
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and isinstance(statement.value, ast.Dict):
        try:
            value = ast.literal_eval(statement.value)
        except ValueError:
            value = None
        if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return value
    raise CannotTell(f"line {statement.lineno} is not a literal mapping of strings")


def absolute_module(statement: ast.ImportFrom, package: str) -> str:
    """The module a (possibly relative) ``from … import`` names, seen from ``package``."""
    if statement.level == 0:
        return statement.module or ""
    parts = package.split(".") if package else []
    if statement.level - 1 >= len(parts):
        raise CannotTell(f"line {statement.lineno}: relative import beyond the top-level package")
    base = ".".join(parts[: len(parts) - statement.level + 1])
    return f"{base}.{statement.module}" if statement.module else base
