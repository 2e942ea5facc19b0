"""The map of the house (docs/design.md) stays true: every module imports only the rooms below its own."""

import ast
from pathlib import Path

import pytest

import ludus

SRC = Path(ludus.__file__).parent

# room -> the rooms it may import (its own included); an environment family is a room of its own
ALLOWED = {
    "core": {"core"},
    "sandbox": {"core", "sandbox"},
    "tasks": {"core", "tasks"},
    "envs": {"core"},  # the package face only: it names the families lazily, as strings
    "family": {"core", "sandbox", "tasks", "rewards"},  # + the family itself
    "policies": {"core", "policies"},
    "rewards": {"core", "policies", "rewards"},
    "rollout": {"core", "policies", "rollout"},
    "certify": {"core", "certify"},  # ludus check: drives environments through the contract alone
    "train": {"core", "policies", "rewards", "rollout", "train"},
    "serve": {"core", "policies", "rewards", "rollout", "serve"},
    # AgentEnv: environments of other families only by name, through the registry
    "agents": {"core", "sandbox", "policies", "serve", "agents"},
}


def _room(module: str) -> str:
    """``ludus.envs.sql.env`` -> ``envs.sql``; ``ludus.train.grpo`` -> ``train``."""
    parts = module.split(".")[1:]
    if parts[:1] == ["envs"] and len(parts) > 1:
        return f"envs.{parts[1]}"
    return parts[0] if parts else ""


def _imports(path: Path) -> set[str]:
    """Every ``ludus`` module a file imports, at the top or inside a function; a name imported from
    another family's package itself (``from ludus.envs.math import MathVerifier``) is its public face,
    recorded as ``face:ludus.envs.math``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.count(".") == 2 and node.module.startswith("ludus.envs."):
                found.add(f"face:{node.module}")
                continue
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found |= {n for n in names if n.startswith("ludus.")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ludus.")}
    return found


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def test_dependencies_point_downward_only():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        room = _room(_module(path))
        if room in ("", "cli", "integrations"):  # the top: it may use everything
            continue
        allowed = ALLOWED["family"] | {room} if room.startswith("envs.") else ALLOWED[room]
        for imported in _imports(path):
            if imported.startswith("face:"):
                if room.startswith("envs."):  # a family may use another family's public face
                    continue
                imported = imported.removeprefix("face:")
            target = _room(imported)
            if target not in allowed:
                wrong.append(f"{_module(path)} ({room}) imports {imported} ({target})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_every_room_is_on_the_map():
    rooms = {_room(_module(p)) for p in SRC.rglob("*.py")} - {""}
    families = {r for r in rooms if r.startswith("envs.")}
    assert families >= {"envs.procedural", "envs.math", "envs.code", "envs.sql", "envs.repo"}
    assert rooms - families <= set(ALLOWED) | {"cli", "integrations"}
    design = (SRC.parents[1] / "docs" / "design.md").read_text()
    for room in sorted(rooms):
        assert f"{room.replace('.', '/')}/" in design, f"docs/design.md does not describe {room}/"


@pytest.mark.parametrize(
    "room",
    [
        "core",
        "sandbox",
        "tasks",
        "policies",
        "rewards",
        "rollout",
        "certify",
        "train",
        "serve",
        "agents",
        "integrations",
        "cli",
    ],
)
def test_a_room_has_no_import_circle(room):
    """Inside a room too, imports go one way, at the top or inside a function: a module that the
    registry needs (the rubric) does not import the registry back, nor the hosts the placement
    that picks among them."""
    modules = {_module(p): p for p in (SRC / room).rglob("*.py")}
    needs = {}
    for module, path in modules.items():
        found = {i.removeprefix("face:") for i in _imports(path)}
        needs[module] = {m for m in modules if m != module and any(i == m or i.startswith(m + ".") for i in found)}
    needs.pop(f"ludus.{room}")  # the package face imports its modules; none of them imports the face

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            m == goal or (m not in seen and not seen.add(m) and reaches(m, goal, seen)) for m in needs.get(start, ())
        )

    circles = sorted(m for m in needs if reaches(m, m, set()))
    assert not circles, f"modules of {room} that import themselves back: {circles}"
