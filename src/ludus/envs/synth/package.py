"""``ludus synth SPEC -o FOLDER``: a Python package holding one tool environment made from an
OpenAPI document, with a ``ludus.envs`` entry point, and its report of what was left out.
``ludus synth --mcp COMMAND --rubric RUBRIC -o FOLDER`` writes the same kind of package around a
user's MCP server (:func:`synthesize_mcp`; the environment is ``ludus.envs.synth.mcp.McpEnv``).

The package holds the document itself (the simulation reads it when the environment is made)
and a class of three lines; everything else is :class:`~ludus.envs.synth.env.SynthEnv`'s. The
document is checked whole before anything is written: operations the simulation cannot honour
are listed in ``SYNTH.md`` and printed, and a document from which no task can be made (no
resource left, or records that cannot fit their schemas) is refused, never written as a partial
environment.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ludus.envs.synth.data import DataError, seed_records
from ludus.envs.synth.resources import Catalog, catalog
from ludus.envs.synth.spec import Spec, SpecError, load_spec
from ludus.envs.synth.tasks import KINDS, Goal, GoalError, expected_state, make_goal

NAME = re.compile(r"[a-z][a-z0-9-]{0,40}")
WRITTEN = ("pyproject.toml", "SYNTH.md")  # besides the package folder; --force replaces only a folder of these
BUILT = re.compile(r"ludus_synth_[a-z0-9_]+|[A-Za-z0-9_.-]+\.egg-info|build|dist|__pycache__")  # and what pip adds
MALFORMED = (TypeError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError, re.error)


@dataclass
class Made:
    folder: Path
    env_name: str
    module: str
    catalog: Catalog
    kinds: list[str]  # the kinds of task the document allows

    def report(self) -> str:
        """The Markdown report written to ``SYNTH.md`` (and printed)."""
        c = self.catalog
        ops = [op for r in c.resources for op in r.operations.values()]
        lines = [f"# {self.env_name}: {c.title}", "",
                 f"Environment `{self.env_name}` (`{self.module}.Env`): {len(ops)} operation(s) as tools over "
                 f"{len(c.resources)} simulated resource(s); tasks: {', '.join(self.kinds)}.", "", "## Resources", ""]  # fmt: skip
        for r in c.resources:
            verbs = ", ".join(f"{verb} (`{op.name}`)" for verb, op in r.operations.items())
            extra = []
            if r.filters:
                extra.append(f"filters {', '.join(r.filters)}")
            if r.paging:
                extra.append(f"pages by {' and '.join(r.paging)}")
            lines.append(f"- `{r.collection}`: {verbs}{'; ' + '; '.join(extra) if extra else ''}")
        lines += ["", "## Left out", ""]
        lines += [f"- {s.where}: {s.why}" for s in c.skipped] or ["Nothing: every operation is simulated."]
        lines += ["", "## Changed", ""]
        lines += [f"- {s.where}: {s.why}" for s in c.notes] or ["Nothing."]
        return "\n".join(printable(line) for line in lines) + "\n"


def printable(text: str) -> str:
    """``text`` (from the document) safe to print to a terminal and to keep on one line: control
    and format characters (an escape sequence that retitles the terminal or clears it, a line
    break) are written as ``\\uXXXX``."""
    return "".join(
        f"\\u{ord(c):04x}" if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") else c for c in text
    )


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for c in text:
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif unicodedata.category(c) in ("Cc", "Cs") or c == "\x7f":
            out.append(f"\\u{ord(c):04x}" if unicodedata.category(c) != "Cs" else "\\ufffd")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def synthesize(spec_path: Path, out: Path, name: str | None = None, force: bool = False) -> Made:
    """Check ``spec_path`` and write its environment's package to ``out``."""
    try:
        spec, found, kinds = _check(spec_path)
    except (SpecError, DataError) as exc:  # their messages quote the document: printed to a terminal
        raise type(exc)(printable(str(exc))) from None
    except MALFORMED as exc:  # a schema of the wrong shape (an enum that is a mapping, a bound of infinity)
        raise SpecError(printable(f"{spec_path}: a schema the simulation cannot read ({type(exc).__name__}: "
                                  f"{str(exc)[:200]})")) from None  # fmt: skip
    env_name = name or _slug(spec.title)
    if not NAME.fullmatch(env_name):
        raise ValueError(f"--name must be lowercase letters, digits and '-', starting with a letter; got {env_name!r}")
    module = "ludus_synth_" + env_name.replace("-", "_")
    # before --force removes anything (the document may be the old package's); one that refers to other files is
    # carried bundled, those files in it (spec.py's bundle()), so the package reads the same without them
    document = spec.bundled() if spec.files else spec_path.read_bytes()
    _clear(out, force)
    package = out / module
    package.mkdir(parents=True)
    suffix = ".json" if spec.files or spec_path.suffix.lower() == ".json" else ".yaml"
    (package / f"api{suffix}").write_bytes(document)
    title = printable(spec.title)[:200]
    description = printable(f"the {spec.title[:200]} API (simulated): {', '.join(r.name for r in found.resources)}")
    docstring = f"{title}: a tool environment made by `ludus synth` from api{suffix}."
    (package / "__init__.py").write_text(
        f"{docstring!r}\n\n"  # a string literal, whatever the title holds: never code
        "from pathlib import Path\n\n"
        "from ludus.envs.synth.env import SynthEnv\n\n\n"
        "class Env(SynthEnv):\n"
        f"    name = {env_name!r}\n"
        f"    description = {description!r}\n"
        f'    spec_path = Path(__file__).parent / "api{suffix}"\n',
        encoding="utf-8",
    )
    write_pyproject(out, module, env_name, description, ["jsonschema>=4.18"], [f"api{suffix}"])
    made = Made(out, env_name, module, found, kinds)
    (out / "SYNTH.md").write_text(made.report(), encoding="utf-8")
    return made


def _clear(out: Path, force: bool, remove: bool = True) -> None:
    """Make room for a package at ``out``: a folder that is empty or missing, or (with ``force``)
    one holding only a package ludus synth wrote, removed when ``remove``; else FileExistsError."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file, not a folder: choose another place for the package")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise FileExistsError(f"{out} is not empty: choose another folder or pass --force to replace it")
        if not _written_by_synth(out):
            raise FileExistsError(f"{out} holds something other than a package ludus synth wrote: not replacing it")
        if remove:
            shutil.rmtree(out)


def _check(spec_path: Path) -> tuple[Spec, Catalog, list[str]]:
    """The document read, its resources, and the kinds of task they allow; SpecError or DataError
    for a document no environment can be made from."""
    spec = load_spec(spec_path)
    found = catalog(spec)
    if not found.resources:
        reasons = "; ".join(f"{s.where}: {s.why}" for s in found.skipped[:8]) or "it declares no operations"
        raise SpecError(f"{spec_path}: no resource can be simulated ({reasons})")
    records = seed_records(found, random.Random(0))  # DataError if records cannot fit their schemas
    rng = random.Random(0)
    goals = [g for g in (make_goal(found, records, rng) for _ in range(400)) if g is not None]
    kinds = sorted({g.kind for g in goals if _workable(found, records, g)}, key=KINDS.index)
    if not kinds:
        raise SpecError(f"{spec_path}: its resources allow no task (no list, create, update or delete to work with)")
    return spec, found, kinds


def _workable(found: Catalog, records: dict[str, Any], goal: Goal) -> bool:
    """Whether the service takes ``goal``'s oracle calls and they change what the kind says."""
    try:
        expected_state(found, records, goal)
    except GoalError:
        return False
    return True


def _written_by_synth(out: Path) -> bool:
    """Whether ``out`` holds only what ``ludus synth`` writes there (and what installing it adds),
    its pyproject naming a ``ludus_synth_`` package: nothing else may be removed by --force."""
    entries = list(out.iterdir())
    if not all(e.name in WRITTEN or BUILT.fullmatch(e.name) for e in entries):
        return False
    if not all((out / name).is_file() and not (out / name).is_symlink() for name in WRITTEN):
        return False
    pyproject = (out / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    return '[project.entry-points."ludus.envs"]' in pyproject and 'packages = ["ludus_synth_' in pyproject


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    slug = slug if slug and slug[0].isalpha() else f"api-{slug}"
    return slug[:41].strip("-")


# ---- from an MCP server ---------------------------------------------------------------------


@dataclass
class McpMade:
    folder: Path
    env_name: str
    module: str
    text: str  # SYNTH.md

    def report(self) -> str:
        return self.text


def synthesize_mcp(
    command: str, rubric_path: Path, out: Path, name: str | None = None, force: bool = False, timeout: float = 30.0
) -> McpMade:
    """Start the MCP server ``command`` (split as a shell would, run in the current folder), list
    its tools, check the rubric against them, try each of its tasks, and write the package."""
    from ludus.core.env import require
    from ludus.envs.synth.mcp import MAX_RUBRIC_BYTES, McpEnv, plan, resolve_command

    require(McpEnv.requires, "ludus synth --mcp")
    if name is not None and not NAME.fullmatch(name):
        raise ValueError(f"--name must be lowercase letters, digits and '-', starting with a letter; got {name!r}")
    if not timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {timeout}")
    cwd = Path.cwd()
    argv = resolve_command(command, cwd)
    if rubric_path.is_dir():
        raise ValueError(f"--rubric {rubric_path} is a folder, not a rubric file")
    with rubric_path.open("rb") as file:  # before --force removes anything: the rubric may be the old package's
        rubric = file.read(MAX_RUBRIC_BYTES + 1)  # what is past the limit is refused, not read (/dev/zero)
    if len(rubric) > MAX_RUBRIC_BYTES:
        raise ValueError(f"--rubric {rubric_path} is larger than {MAX_RUBRIC_BYTES:,} bytes")
    if force and out.is_symlink():
        raise FileExistsError(
            f"{out} is a symbolic link: --force replaces a folder ludus synth wrote, not a link to one"
        )
    _clear(out, force, remove=False)  # refused before the server is started
    if force and out.exists():  # the server's own files must not be in what --force removes
        inside = [w for w in argv if os.path.isabs(w) and Path(w).resolve().is_relative_to(out.resolve())]
        if inside:
            raise ValueError(f"--mcp runs {inside[0]!r}, which is in {out}: --force would remove it")
    found = plan(argv, cwd, rubric, rubric_path.name, timeout)
    env_name = name or _slug(found.server.get("name") or "mcp-server")
    if not NAME.fullmatch(env_name):
        raise ValueError(f"--name must be lowercase letters, digits and '-', starting with a letter; got {env_name!r}")
    module = "ludus_synth_" + env_name.replace("-", "_")
    _clear(out, force)
    package = out / module
    package.mkdir(parents=True)
    server = printable(found.server.get("name") or "MCP")[:200]
    tools = [t["name"] for t in found.tools]
    description = printable(f"the {server} MCP server: {', '.join(tools)}"[:500])
    (package / "server.json").write_text(
        json.dumps({"command": found.argv, "cwd": found.cwd}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (package / "tools.json").write_text(
        json.dumps({"server": found.server, "tools": found.tools}, indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    (package / "rubric.yaml").write_bytes(rubric)
    docstring = f"{server}: a tool environment made by `ludus synth --mcp` (server.json, tools.json, rubric.yaml)."
    (package / "__init__.py").write_text(
        f"{docstring!r}\n\n"  # a string literal, whatever the server's name holds: never code
        "from pathlib import Path\n\n"
        "from ludus.envs.synth.mcp import McpEnv\n\n\n"
        "class Env(McpEnv):\n"
        f"    name = {env_name!r}\n"
        f"    description = {description!r}\n"
        "    folder = Path(__file__).parent\n",
        encoding="utf-8",
    )
    write_pyproject(out, module, env_name, description, ["mcp>=2.3,<3", "jsonschema>=4.18"],
                    ["server.json", "tools.json", "rubric.yaml"])  # fmt: skip
    made = McpMade(out, env_name, module, found.report(env_name, module))
    (out / "SYNTH.md").write_text(made.text, encoding="utf-8")
    return made


def write_pyproject(
    out: Path, module: str, env_name: str, description: str, dependencies: list[str], data: list[str]
) -> None:
    """The package's ``pyproject.toml``: its ``ludus.envs`` entry point and the files it carries
    (``dependencies`` besides ludus itself)."""
    (out / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{module.replace("_", "-")}"\n'
        'version = "0.1.0"\n'
        f"description = {toml_string(description)}\n"
        f"dependencies = {json.dumps(dependencies)}  # and ludus itself\n\n"
        '[project.entry-points."ludus.envs"]\n'
        f'{env_name} = "{module}:Env"\n\n'
        "[tool.setuptools]\n"
        f'packages = ["{module}"]\n\n'
        "[tool.setuptools.package-data]\n"
        f"{module} = {json.dumps(data)}\n",
        encoding="utf-8",
    )
