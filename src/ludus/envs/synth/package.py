"""``ludus synth SPEC -o FOLDER``: a Python package holding one tool environment made from an
OpenAPI document, with a ``ludus.envs`` entry point, and its report of what was left out.

The package holds the document itself (the simulation reads it when the environment is made)
and a class of three lines; everything else is :class:`~ludus.envs.synth.env.SynthEnv`'s. The
document is checked whole before anything is written: operations the simulation cannot honour
are listed in ``SYNTH.md`` and printed, and a document from which no task can be made (no
resource left, or records that cannot fit their schemas) is refused, never written as a partial
environment.
"""

from __future__ import annotations

import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ludus.envs.synth.data import seed_records
from ludus.envs.synth.resources import Catalog, catalog
from ludus.envs.synth.spec import SpecError, load_spec
from ludus.envs.synth.tasks import KINDS, make_goal

NAME = re.compile(r"[a-z][a-z0-9-]{0,40}")


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
        return "\n".join(lines) + "\n"


def synthesize(spec_path: Path, out: Path, name: str | None = None, force: bool = False) -> Made:
    """Check ``spec_path`` and write its environment's package to ``out``."""
    spec = load_spec(spec_path)
    found = catalog(spec)
    if not found.resources:
        reasons = "; ".join(f"{s.where}: {s.why}" for s in found.skipped[:8]) or "it declares no operations"
        raise SpecError(f"{spec_path}: no resource can be simulated ({reasons})")
    records = seed_records(found, random.Random(0))  # DataError if records cannot fit their schemas
    rng = random.Random(0)
    kinds = sorted(
        {g.kind for g in (make_goal(found, records, rng) for _ in range(400)) if g is not None}, key=KINDS.index
    )
    if not kinds:
        raise SpecError(f"{spec_path}: its resources allow no task (no list, create, update or delete to work with)")
    env_name = name or _slug(spec.title)
    if not NAME.fullmatch(env_name):
        raise ValueError(f"--name must be lowercase letters, digits and '-', starting with a letter; got {env_name!r}")
    module = "ludus_synth_" + env_name.replace("-", "_")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise FileExistsError(f"{out} is not empty: choose another folder or pass --force to replace it")
        if not (out / "pyproject.toml").is_file() or not (out / "SYNTH.md").is_file():
            raise FileExistsError(f"{out} holds something other than a package ludus synth wrote: not replacing it")
        shutil.rmtree(out)
    package = out / module
    package.mkdir(parents=True)
    suffix = ".json" if spec_path.suffix.lower() == ".json" else ".yaml"
    shutil.copyfile(spec_path, package / f"api{suffix}")
    description = f"the {spec.title} API (simulated): {', '.join(r.name for r in found.resources)}"
    (package / "__init__.py").write_text(
        f'"""{spec.title}: a tool environment made by `ludus synth` from api{suffix}."""\n\n'
        "from pathlib import Path\n\n"
        "from ludus.envs.synth.env import SynthEnv\n\n\n"
        "class Env(SynthEnv):\n"
        f"    name = {env_name!r}\n"
        f"    description = {description!r}\n"
        f'    spec_path = Path(__file__).parent / "api{suffix}"\n'
    )
    (out / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{module.replace("_", "-")}"\n'
        'version = "0.1.0"\n'
        f'description = "{description}"\n'
        'dependencies = ["jsonschema>=4.18"]  # and ludus itself\n\n'
        '[project.entry-points."ludus.envs"]\n'
        f'{env_name} = "{module}:Env"\n\n'
        "[tool.setuptools]\n"
        f'packages = ["{module}"]\n\n'
        "[tool.setuptools.package-data]\n"
        f'{module} = ["api{suffix}"]\n'
    )
    made = Made(out, env_name, module, found, kinds)
    (out / "SYNTH.md").write_text(made.report())
    return made


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-")
    return slug if slug and slug[0].isalpha() else f"api-{slug}".strip("-")
