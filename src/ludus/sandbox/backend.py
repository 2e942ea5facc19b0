"""How a sandbox worker process is started: under bubblewrap (the default) or, only when
bubblewrap is missing or broken, as a plain process with a loud warning.

The bubblewrap command gives the worker: no network (a fresh network namespace with only a
loopback device), its own PID, IPC and UTS namespaces, no capabilities (in the host's namespaces), a new session (no
terminal injection), death with its parent, a read-only view of only what Python needs
(``/usr``, the interpreter's prefix and site-packages, a few ``/etc`` files), a private
``/tmp``, a minimal read-only ``/dev``, and an empty environment. The ludus package is hidden from it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Backend = Literal["bwrap", "process"]

ETC_FILES = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "ssl", "mime.types"]
TOP_LEVEL = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"]
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be provided on this machine."""


@dataclass(frozen=True)
class Isolation:
    """Which backend is active and why (``ludus doctor`` prints this)."""

    backend: Backend
    reason: str
    bwrap: str | None = None
    version: str | None = None


class UnisolatedWarning(RuntimeWarning):
    """Model-written code will run without bubblewrap isolation."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def detect() -> Isolation:
    """Probe bubblewrap once per process: is it installed, and does it start a sandbox here?"""
    path = bwrap_path()
    if path is None:
        return Isolation(
            "process",
            "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; "
            "Fedora: dnf install bubblewrap); model-written code would run UNISOLATED",
        )
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip() or None
    probe = subprocess.run(
        [*bwrap_args(python_paths()), "--", interpreter(), "-I", "-S", "-c", "print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "ok":
        detail = (probe.stderr or probe.stdout).strip().splitlines()
        return Isolation(
            "process",
            f"bubblewrap is installed but cannot start a sandbox here ({detail[-1] if detail else probe.returncode}); "
            "user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces)",
            path,
            version,
        )
    return Isolation("bwrap", "bubblewrap starts sandboxes here", path, version)


def choose(backend: Backend | Literal["auto"]) -> Isolation:
    """The isolation for a requested backend; ``auto`` falls back to ``process`` with a warning."""
    found = detect()
    if backend == "process" or (backend == "auto" and found.backend == "process"):
        why = found.reason if found.backend == "process" else "the process backend was requested"
        warnings.warn(f"ludus sandbox: running model code WITHOUT isolation: {why}", UnisolatedWarning, stacklevel=3)
        return Isolation("process", why, found.bwrap, found.version)
    if backend == "bwrap" and found.backend != "bwrap":
        raise SandboxUnavailable(found.reason)
    return found


def interpreter() -> str:
    """This interpreter's path as the sandbox can reach it: ``sys.executable`` may hold ``..``
    (``../.venv/bin/python``), which no longer resolves once only bound folders exist. Not the
    real path: a virtual environment's interpreter is a symbolic link, and following it would
    lose the environment's site-packages."""
    return os.path.normpath(os.path.abspath(sys.executable))


def python_paths() -> list[str]:
    """Folders the sandboxed interpreter must see: its prefixes, stdlib and site-packages."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        str(Path(sys.executable).resolve().parent.parent),
        sysconfig.get_paths()["stdlib"],
        *site.getsitepackages(),
    }
    real = sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})
    # keep only the outermost folders
    return [p for p in real if not any(p != q and p.startswith(q + os.sep) for q in real)]


def site_packages() -> list[str]:
    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def hidden_paths() -> list[str]:
    """The installed ludus package, if it lies inside a bound folder: the sandbox sees an empty folder."""
    spec = importlib.util.find_spec("ludus")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [os.path.realpath(p) for p in spec.submodule_search_locations]


def bwrap_args(binds: list[str]) -> list[str]:
    args = [
        bwrap_path() or "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",  # with --unshare-user the worker holds no capabilities; --cap-drop ALL would
        # also empty the bounding set, which forbids the per-execution user namespaces (uid_map writes)
        "--hostname",
        "sandbox",
        "--clearenv",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
    ]
    for name, value in ENV.items():
        args += ["--setenv", name, value]
    for top in TOP_LEVEL:
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        path = Path("/etc") / name
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for path in binds:
        if not any(path == t or path.startswith(f"/{t}/") for t in TOP_LEVEL):
            args += ["--ro-bind", path, path]
    for path in hidden_paths():
        if any(path.startswith(b + os.sep) for b in binds) or path.startswith("/usr/"):
            args += ["--tmpfs", path, "--remount-ro", path]
    # the folders bwrap made to hold the binds (/, /etc, /dev) must not become shared scratch space
    return [*args, "--remount-ro", "/dev", "--remount-ro", "/"]


def worker_command(
    isolation: Isolation, boot_code: str, ctrl_fd: int, cgroups: list[Path], env: dict[str, str] | None = None
) -> list[str]:
    """The worker's command line. Its environment is exactly ``ENV`` plus ``env`` (bubblewrap
    clears the rest; the process backend is given it), so instead of -I (which would also ignore
    PYTHONHASHSEED) the interpreter runs with -s -P: no user site-packages, no script folder on
    sys.path."""
    python = [interpreter(), "-s", "-P", "-S", "-B", "-c", boot_code, str(ctrl_fd)]
    if isolation.backend == "bwrap":
        setenv = [arg for name, value in (env or {}).items() for arg in ("--setenv", name, value)]
        command = [*bwrap_args(python_paths()), *setenv, "--", *python]
    else:
        command = python
    if cgroups:  # join the cgroups before anything of the worker runs; its executions die first on OOM
        join = " && ".join(f'echo $$ > "${i}/cgroup.procs"' for i in range(1, len(cgroups) + 1))
        join += " && { echo -1000 > /proc/self/oom_score_adj || true; } 2>/dev/null"  # refused on some kernels
        command = ["/bin/sh", "-c", f'{join} && shift {len(cgroups)} && exec "$@"', "sh", *map(str, cgroups), *command]
    return command


# ---- totals for root: processes and memory ----
# RLIMIT_NPROC does not apply to processes of the real root user, even inside user namespaces,
# and a sandbox started by root runs as (mapped) root. RLIMIT_AS caps each process, not their
# sum. So when ludus runs as root, each worker joins its own cgroups: pids.max caps all its
# processes (a fork bomb stops there) and the memory limit caps their total (64 processes of
# 1 GiB each cannot take the machine down; the kernel's OOM killer acts inside the group).

_cgroup_counter = 0
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_bases() -> dict[str, Path]:
    """Where to create worker cgroups, per controller: under our own cgroup (v1) or the v2 root."""
    bases: dict[str, Path] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in ("pids", "memory"):
            if controller in controllers.split(",") and (CGROUP_ROOT / controllers).is_dir():
                bases[controller] = CGROUP_ROOT / controllers / path.lstrip("/")
    if not bases and {"pids", "memory"} <= set(_read(CGROUP_ROOT / "cgroup.controllers").split()):
        bases = {"pids": CGROUP_ROOT, "memory": CGROUP_ROOT}  # v2: one group holds both limits
    return bases


def worker_cgroups(max_pids: int, memory_bytes: int) -> list[Path]:
    """Fresh cgroups capping one worker's processes and memory; empty when not root or not writable."""
    global _cgroup_counter
    if os.geteuid() != 0:
        return []  # RLIMIT_NPROC does the job; memory is bounded by processes x RLIMIT_AS
    _cgroup_counter += 1
    name = f"ludus-{os.getpid()}-{_cgroup_counter}"
    groups: dict[Path, list[tuple[str, str]]] = {}
    for controller, base in _cgroup_bases().items():
        v2 = base == CGROUP_ROOT
        setting = (
            ("pids.max", str(max_pids))
            if controller == "pids"
            else (("memory.max", str(memory_bytes)) if v2 else ("memory.limit_in_bytes", str(memory_bytes)))
        )
        groups.setdefault(base / name, []).append(setting)
    made = []
    for group, settings in groups.items():
        try:
            if group.parent == CGROUP_ROOT:
                (CGROUP_ROOT / "cgroup.subtree_control").write_text("+pids +memory")
            group.mkdir()
            made.append(group)
            for file, value in settings:
                (group / file).write_text(value)
        except OSError:
            continue
    return made


def remove_cgroup(group: Path | None) -> None:
    if group is None:
        return
    for _ in range(50):  # the kernel frees the cgroup a moment after its last process is reaped
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def process_limit_note() -> str:
    """How the process and total-memory limits are enforced here, for ``ludus doctor``."""
    if os.geteuid() != 0:
        return "RLIMIT_NPROC in each execution's user namespace; memory: RLIMIT_AS per process"
    groups = worker_cgroups(16, 1 << 30)
    controls = sorted(
        {
            f.name.split(".")[0]
            for g in groups
            for f in g.iterdir()
            if f.name in ("pids.max", "memory.max", "memory.limit_in_bytes")
        }
    )
    for group in groups:
        remove_cgroup(group)
    if "pids" in controls:
        return f"cgroups per worker ({', '.join(controls)}), as root ignores RLIMIT_NPROC"
    return "processes NOT LIMITED: running as root (RLIMIT_NPROC does not apply) and no writable pids cgroup"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def worker_env(isolation: Isolation, env: dict[str, str] | None = None) -> dict[str, str] | None:
    """The environment the worker process is started with: bubblewrap's own is the host's (it
    clears it for the worker, see worker_command); a plain process gets ``ENV`` plus ``env``."""
    return None if isolation.backend == "bwrap" else {**ENV, **(env or {})}
