"""Ludus's browser environment against BrowserGym's, same MiniWoB++ tasks, same machine, same run.

    python benchmarks/web_env.py              # 1, 4 and 16 concurrent episodes; 5-10 minutes on 2 cores
    python benchmarks/web_env.py --quick      # 1 and 4, fewer episodes: about two minutes
    python benchmarks/web_env.py --leak 200   # 200 sequential Ludus episodes, then count Chromium processes

Both drive a real Chromium (the system's, ``/usr/bin/chromium``; ``--chromium`` to change it)
through Playwright's synchronous API on MiniWoB++ pages from the ``miniwob`` package:

* Ludus — ``ludus.envs.web.MiniWoBEnv``: one environment per worker thread, ``reset(task, seed)``
  then ``step`` with one ``scroll`` tool call per step.
* BrowserGym — ``browsergym-miniwob``'s registered ``browsergym/miniwob.<task>`` environments
  (``gym.make``, BrowserGym's own MiniWoB settings), one per worker thread, ``reset(seed=…)``
  then ``step("scroll(0, 200)")``. Run as shipped, with three changes this process needs: its
  Chromium is ``--chromium`` with ``--no-sandbox`` (root, and ``playwright install`` cannot
  download a browser here), ``MINIWOB_URL`` points at the ``miniwob`` package's pages (file://),
  and its one process-wide Playwright instance (``browsergym.core._get_global_playwright``)
  becomes one per thread — a sync Playwright instance works only on the thread that started it
  (on another: "RuntimeError: There is no current event loop in thread"), so without this
  BrowserGym cannot run two episodes on two threads of one process (its users run one process
  per episode). A BrowserGym environment is rebuilt when a worker moves to another task
  (``gym.make`` makes one environment per task); its ``reset`` launches new browsers anyway.

The workload: a fixed list of MiniWoB++ tasks both support; episode ``i`` is task
``TASKS[i % len]`` with seed ``i``: a reset and ``--steps`` scroll-down actions. Scrolling is the
cheap action both expose (Ludus ``scroll {"direction": "down"}``, BrowserGym ``scroll(0, 200)``,
a mouse-wheel event), and no task ends on it, so every episode runs its full length. Each
worker first plays one untimed episode (Playwright's driver and the first browser start there);
the timed window then runs ``--episodes`` episodes per worker, ``concurrency`` threads at once.

Figures per (framework, concurrency): reset latency p50/p99, step latency p50, steps per second
over the window (every completed ``step`` / wall time, resets included: what a rollout sees),
peak memory of the processes the framework started (Chromium and Playwright's node driver: the
benchmark's own Python process is left out) as the sum of RSS and of PSS, divided by the live
episodes, and the Chromium processes left behind: after every runner's ``close`` and the
framework's process-wide shutdown (within a 5 s grace), and after the framework's process exits.
Ludus keeps warm browsers for the whole process (one per 8 episodes) and ``env.close()`` closes
only the episode's browser context, so its browsers stop at ``BrowserService.shutdown()`` (which
Ludus also runs at exit); the episodes it still held after every ``close`` are reported too.
Every (framework, concurrency) runs in a fresh process of its own and the frameworks take turns
level by level. Processes are counted in this process's tree only (the benchmark and each child
are Linux child subreapers, so that orphans, such as Chromium's daemonized crashpad handlers or
a browser whose driver died, stay in the tree): Chromium run by other programs never counts.

Targets (issue 16): Ludus reset p50 ≤ 0.3 s; Ludus ≥ 5× BrowserGym's steps/s at equal concurrency.

Caveats, read before quoting a ratio:

* What a step returns differs. A BrowserGym step sleeps 0.5 s after every action (hard-coded in
  ``BrowserEnv.step``, for JavaScript callbacks), its MiniWoB tasks set Playwright ``slow_mo`` to
  100 ms (every Playwright call waits that long) and it always extracts a DOM snapshot, the
  accessibility tree and a screenshot. ``--browsergym-fast`` removes both delays: ``slow_mo`` 0
  (BrowserGym's documentation: "should only be set for debugging/testing") and no sleep (the
  0.5 s is hard-coded in 0.13.3, the newest BrowserGym that installs beside a Playwright newer
  than 1.44; 0.14 makes it ``pre_observation_delay``, here emulated by scaling the sleeps of
  ``browsergym.core.env``). Quote the ratio against both.
* A BrowserGym episode has two browsers (the task's and a chat window's), both launched at each
  reset; its memory per episode counts both, because that is what it runs.
* On a 2-core machine 16 concurrent browsers contend for CPU: the 16 level measures that too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

HERE = os.path.abspath(__file__)
TASKS = (
    "click-button",
    "click-link",
    "click-checkboxes",
    "enter-text",
    "focus-text",
    "click-dialog",
    "choose-list",
    "login-user",
)
LEVELS = (1, 4, 16)
QUICK_LEVELS = (1, 4)
CHROMIUM = "/usr/bin/chromium"
TARGET_RESET_P50_S, TARGET_STEPS_RATIO = 0.3, 5.0


def miniwob_html_dir() -> Path:
    """The MiniWoB++ task pages shipped in the ``miniwob`` package."""
    import miniwob

    return Path(miniwob.__file__).resolve().parent / "html" / "miniwob"


# ---- the two frameworks, behind one small interface ---------------------------------------------
class Runner(ABC):
    """One live environment, owned by one worker thread (sync Playwright is bound to its thread)."""

    name: ClassVar[str]

    @abstractmethod
    def reset(self, task: str, seed: int) -> str:
        """Start an episode of MiniWoB task ``task``; returns the observation's text."""

    @abstractmethod
    def step(self) -> bool:
        """One scroll-down action; returns whether the episode ended."""

    @abstractmethod
    def close(self) -> None:
        """End this runner's episode and what it alone holds."""

    @classmethod
    def shutdown(cls) -> None:
        """Stop what the framework keeps for the whole process (after every runner closed)."""

    @classmethod
    def live_episodes(cls) -> int | None:
        """Episodes (browser contexts) the framework still holds open, when it can tell."""
        return None


class LudusRunner(Runner):
    name = "ludus"

    def __init__(self, chromium: str = CHROMIUM, **_: Any) -> None:
        os.environ.setdefault("LUDUS_CHROMIUM", chromium)  # read by ludus.envs.web.browser.find_chromium
        from ludus.core.types import Message, ToolCall
        from ludus.envs.web import MiniWoBEnv

        self._message, self._tool_call = Message, ToolCall
        self.env = MiniWoBEnv()
        self._tasks: dict[str, Any] = {}
        self._calls = 0

    def reset(self, task: str, seed: int) -> str:
        if task not in self._tasks:
            self._tasks[task] = type(self.env).task_for(task)
        obs = self.env.reset(self._tasks[task], seed)
        return obs.messages[-1].content

    def step(self) -> bool:
        self._calls += 1
        call = self._tool_call("scroll", {"direction": "down"}, id=f"c{self._calls}")
        return self.env.step(self._message("assistant", "", tool_calls=[call])).done

    def close(self) -> None:
        self.env.close()

    @classmethod
    def shutdown(cls) -> None:
        # Ludus keeps warm browsers for the whole process (one per 8 episodes); env.close() ends
        # the episode's context only, and this stops the browsers (Ludus does it at exit too)
        from ludus.envs.web import BrowserService

        if BrowserService._shared is not None:
            BrowserService._shared.shutdown()

    @classmethod
    def live_episodes(cls) -> int | None:
        from ludus.envs.web import BrowserService

        return None if BrowserService._shared is None else BrowserService._shared.stats()["tabs"]


_patched_browsergym = False
_patch_lock = threading.Lock()
_bg_local = threading.local()  # this thread's Playwright for BrowserGym


BROWSERGYM_DELAY_S = 0.5  # BrowserGym's sleep after every action, before it reads the page


class _ScaledSleep:
    """``browsergym.core.env``'s view of the ``time`` module with its fixed sleeps scaled to
    ``delay`` (BrowserGym 0.14's ``pre_observation_delay``, which 0.13 hard-codes to 0.5 s)."""

    def __init__(self, delay: float) -> None:
        self.factor = delay / BROWSERGYM_DELAY_S

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if seconds * self.factor > 0:
            time.sleep(seconds * self.factor)


def patch_browsergym(chromium: str = CHROMIUM, delay: float = BROWSERGYM_DELAY_S) -> None:
    """Make BrowserGym runnable here, in this process only: ``MINIWOB_URL``, the system Chromium
    with ``--no-sandbox``, and one Playwright instance per thread instead of one per process;
    ``delay`` other than 0.5 s changes its sleep after each action (``--browsergym-delay``)."""
    global _patched_browsergym
    with _patch_lock:
        if _patched_browsergym:
            return
        os.environ.setdefault("MINIWOB_URL", miniwob_html_dir().as_uri() + "/")
        import browsergym.core.chat as bg_chat
        import browsergym.core.env as bg_env
        import browsergym.miniwob  # noqa: F401 - registers browsergym/miniwob.* with gymnasium
        import playwright.sync_api

        def per_thread_playwright() -> playwright.sync_api.Playwright:
            pw = getattr(_bg_local, "pw", None)
            if pw is None:
                pw = playwright.sync_api.sync_playwright().start()
                launch = pw.chromium.launch

                def launch_system_chromium(**kwargs: Any) -> playwright.sync_api.Browser:
                    kwargs.setdefault("executable_path", chromium)
                    kwargs["args"] = [*(kwargs.get("args") or []), "--no-sandbox"]
                    return launch(**kwargs)

                pw.chromium.launch = launch_system_chromium  # type: ignore[method-assign]
                _bg_local.pw = pw
            return pw

        # both modules imported the function by name: patch where it is looked up
        bg_env._get_global_playwright = per_thread_playwright
        bg_chat._get_global_playwright = per_thread_playwright
        if delay != BROWSERGYM_DELAY_S:
            bg_env.time = _ScaledSleep(delay)  # type: ignore[assignment]
        _patched_browsergym = True


class BrowserGymRunner(Runner):
    name = "browsergym"

    def __init__(
        self, chromium: str = CHROMIUM, slow_mo: int | None = None, delay: float = BROWSERGYM_DELAY_S, **_: Any
    ) -> None:
        patch_browsergym(chromium, delay)
        self.slow_mo = slow_mo  # None: the task's own (100 ms for MiniWoB)
        self.env: Any = None
        self.task: str | None = None

    def reset(self, task: str, seed: int) -> str:
        import gymnasium as gym

        if task != self.task:
            if self.env is not None:
                self.env.close()
            kwargs = {} if self.slow_mo is None else {"slow_mo": self.slow_mo}
            self.env = gym.make(f"browsergym/miniwob.{task}", **kwargs)
            self.task = task
        obs, _info = self.env.reset(seed=seed)
        return obs["goal"]

    def step(self) -> bool:
        _obs, _reward, terminated, truncated, _info = self.env.step("scroll(0, 200)")
        return bool(terminated or truncated)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
        pw = getattr(_bg_local, "pw", None)  # this thread's driver: stopped so that its node process exits
        if pw is not None:
            _bg_local.pw = None
            pw.stop()


RUNNERS: dict[str, type[Runner]] = {"ludus": LudusRunner, "browsergym": BrowserGymRunner}


# ---- processes and memory ----------------------------------------------------------------------
def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def become_subreaper() -> None:
    """Orphans of this process's descendants (Chromium's crashpad handlers daemonize; a leaked
    browser outlives its driver) are re-parented here instead of to init, so they stay countable."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap() -> None:
    """Collect exited orphans adopted as a subreaper (no other child of ours is running then)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def chromium_processes(pids: Sequence[int]) -> list[int]:
    """The live (not zombie) Chromium processes among ``pids``."""
    out = []
    for pid in pids:
        stat = _read(f"/proc/{pid}/stat")
        if stat and stat.rsplit(")", 1)[1].split()[0] != "Z" and "chrom" in _read(f"/proc/{pid}/comm").lower():
            out.append(pid)
    return out


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            if stat:
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def memory_mib(pids: Sequence[int]) -> tuple[float, float]:
    """Summed RSS and PSS (shared pages split between their users) of ``pids``, MiB."""
    page = os.sysconf("SC_PAGE_SIZE")
    rss = pss = 0
    for pid in pids:
        statm = _read(f"/proc/{pid}/statm").split()
        if len(statm) > 1:
            rss += int(statm[1]) * page
        for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
            if line.startswith("Pss:"):
                pss += int(line.split()[1]) * 1024
                break
    return rss / 2**20, pss / 2**20


class MemorySampler:
    """Peak memory of this process's descendants (browsers and drivers), sampled every ``period`` s."""

    def __init__(self, period: float = 0.5) -> None:
        self.period, self.peak_rss, self.peak_pss, self.peak_chromium = period, 0.0, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period)

    def sample(self) -> None:
        pids = descendants(os.getpid())
        rss, pss = memory_mib(pids)
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
        chromium = len(chromium_processes(pids))
        self.peak_chromium = max(self.peak_chromium, chromium)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---- the harness -------------------------------------------------------------------------------
@dataclass
class LevelResult:
    framework: str
    concurrency: int
    episodes: int
    steps: int
    window_s: float
    reset_p50_s: float
    reset_p99_s: float
    step_p50_s: float
    steps_per_s: float
    episodes_per_s: float
    open_s: float  # the slowest worker's construction + warm-up episode
    peak_rss_mib: float
    peak_pss_mib: float
    peak_chromium: int
    chromium_after_close: int | None = None
    chromium_after_exit: int | None = None
    open_after_close: int | None = None  # episodes the framework still held once every runner closed
    errors: list[str] = field(default_factory=list)

    @property
    def rss_per_episode(self) -> float:
        return self.peak_rss_mib / self.concurrency

    @property
    def pss_per_episode(self) -> float:
        return self.peak_pss_mib / self.concurrency


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_level(
    factory: Callable[[], Runner],
    concurrency: int,
    episodes_per_worker: int,
    steps: int,
    tasks: Sequence[str] = TASKS,
    warmup: bool = True,
    name: str = "",
    grace_s: float = 5.0,
    shutdown: Callable[[], None] | None = None,
    live_episodes: Callable[[], int | None] | None = None,
) -> LevelResult:
    """``concurrency`` threads, each with its own runner, play ``episodes_per_worker`` episodes;
    then the framework's process-wide part is shut down and leftover Chromium is counted."""
    shutdown = shutdown or getattr(factory, "shutdown", None)
    live_episodes = live_episodes or getattr(factory, "live_episodes", None)
    total = concurrency * episodes_per_worker
    lock = threading.Lock()
    next_episode = [0]
    resets: list[float] = []
    step_times: list[float] = []
    errors: list[str] = []
    open_times: list[float] = []
    ready = threading.Barrier(concurrency + 1)
    go = threading.Event()
    done_at: list[float] = []

    def worker() -> None:
        runner: Runner | None = None
        try:
            started = time.perf_counter()
            runner = factory()
            if warmup:
                runner.reset(tasks[0], 10_000)
                runner.step()
            open_times.append(time.perf_counter() - started)
        except Exception as e:  # a worker that cannot start: counted, the others go on
            errors.append(f"open: {type(e).__name__}: {e}"[:300])
        ready.wait()
        go.wait()
        try:
            while runner is not None:
                with lock:
                    i = next_episode[0]
                    if i >= total:
                        break
                    next_episode[0] += 1
                try:
                    t0 = time.perf_counter()
                    runner.reset(tasks[i % len(tasks)], i)
                    t1 = time.perf_counter()
                    mine = []
                    for _ in range(steps):
                        s0 = time.perf_counter()
                        ended = runner.step()
                        mine.append(time.perf_counter() - s0)
                        if ended:
                            break
                    with lock:
                        resets.append(t1 - t0)
                        step_times.extend(mine)
                except Exception as e:
                    errors.append(f"episode {i}: {type(e).__name__}: {e}"[:300])
        finally:
            done_at.append(time.perf_counter())
            if runner is not None:
                try:
                    runner.close()
                except Exception as e:
                    errors.append(f"close: {type(e).__name__}: {e}"[:300])

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    with MemorySampler() as memory:
        for t in threads:
            t.start()
        ready.wait()
        started = time.perf_counter()
        go.set()
        for t in threads:
            t.join()
        memory.sample()
    open_after_close = live_episodes() if live_episodes else None
    if shutdown:
        try:
            shutdown()
        except Exception as e:
            errors.append(f"shutdown: {type(e).__name__}: {e}"[:300])
    window = (max(done_at) if done_at else time.perf_counter()) - started
    deadline = time.monotonic() + grace_s
    while (after_close := len(chromium_processes(descendants(os.getpid())))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return LevelResult(
        framework=name or getattr(factory, "name", "?"),
        concurrency=concurrency,
        episodes=len(resets),
        steps=len(step_times),
        window_s=window,
        reset_p50_s=percentile(resets, 0.5),
        reset_p99_s=percentile(resets, 0.99),
        step_p50_s=percentile(step_times, 0.5),
        steps_per_s=len(step_times) / window if window > 0 else 0.0,
        episodes_per_s=len(resets) / window if window > 0 else 0.0,
        open_s=max(open_times) if open_times else float("nan"),
        peak_rss_mib=memory.peak_rss,
        peak_pss_mib=memory.peak_pss,
        peak_chromium=memory.peak_chromium,
        chromium_after_close=after_close,
        open_after_close=open_after_close,
        errors=errors,
    )


def make_factory(framework: str, args: argparse.Namespace) -> Callable[[], Runner]:
    cls = RUNNERS[framework]
    kwargs: dict[str, Any] = {"chromium": args.chromium}
    if framework == "browsergym":
        kwargs["slow_mo"], kwargs["delay"] = args.browsergym_slow_mo, args.browsergym_delay

    def factory() -> Runner:
        return cls(**kwargs)

    factory.name = framework  # type: ignore[attr-defined]
    factory.shutdown = cls.shutdown  # type: ignore[attr-defined]
    factory.live_episodes = cls.live_episodes  # type: ignore[attr-defined]
    return factory


# ---- the orchestration: one process per (framework, level) -------------------------------------
def child_main(args: argparse.Namespace) -> None:
    result = run_level(
        make_factory(args.framework, args),
        args.concurrency,
        args.episodes,
        args.steps,
        tasks=args.tasks,
        name=args.framework,
    )
    print(json.dumps(asdict(result)), flush=True)


def _child_args(args: argparse.Namespace) -> list[str]:
    out = ["--steps", str(args.steps), "--chromium", args.chromium, "--tasks", *args.tasks]
    if args.browsergym_slow_mo is not None:
        out += ["--browsergym-slow-mo", str(args.browsergym_slow_mo)]
    out += ["--browsergym-delay", str(args.browsergym_delay)]
    return out


def run_child(role: list[str], args: argparse.Namespace, timeout: float) -> tuple[dict[str, Any] | None, str, int]:
    """Runs ``role`` in a fresh process; returns its JSON line, its stderr's tail and the Chromium
    processes left once it has exited (this process is a subreaper: orphans come here). Those are
    then killed, so that the next level starts clean."""
    try:
        done = subprocess.run(
            [sys.executable, HERE, *role, *_child_args(args)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("{")), None)
        result, tail = (json.loads(line) if line else None), done.stderr[-2000:]
        if done.returncode != 0 and result is None:
            tail = f"exit {done.returncode}: {tail}"
    except subprocess.TimeoutExpired as e:
        result, tail = None, f"timed out after {timeout:.0f} s: {(e.stderr or b'')[-2000:]!r}"
    time.sleep(1.0)
    reap()
    left = chromium_processes(descendants(os.getpid()))
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    time.sleep(0.2)
    reap()
    return result, tail, len(left)


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None or value != value else format(value, spec)


def report(rows: list[dict[str, Any]], levels: Sequence[int]) -> None:
    print()
    print(
        f"{'framework':<11} {'conc':>4} {'episodes':>8} {'steps':>6} {'reset p50':>9} {'reset p99':>9} "
        f"{'step p50':>8} {'steps/s':>8} {'ep/s':>6} {'RSS MiB/ep':>10} {'PSS MiB/ep':>10} {'chromium':>8} "
        f"{'left close':>10} {'left exit':>9} {'held':>4} {'errors':>6}"
    )
    for r in rows:
        print(
            f"{r['framework']:<11} {r['concurrency']:>4} {r['episodes']:>8} {r['steps']:>6} "
            f"{_fmt(r['reset_p50_s'], '.3f'):>9} {_fmt(r['reset_p99_s'], '.3f'):>9} {_fmt(r['step_p50_s'], '.3f'):>8} "
            f"{r['steps_per_s']:>8.2f} {r['episodes_per_s']:>6.2f} {r['peak_rss_mib'] / r['concurrency']:>10.0f} "
            f"{r['peak_pss_mib'] / r['concurrency']:>10.0f} {r['peak_chromium']:>8} "
            f"{_fmt(r['chromium_after_close'], 'd'):>10} {_fmt(r['chromium_after_exit'], 'd'):>9} "
            f"{_fmt(r.get('open_after_close'), 'd'):>4} {len(r['errors']):>6}"
        )
    print(
        "(seconds; steps/s: every completed step / the window's wall time, resets included; MiB/ep: peak memory of "
        "the browsers and drivers the framework started / concurrent episodes; chromium: peak Chromium processes; "
        "left: Chromium processes after close and shutdown (5 s grace) and after the process exited; held: "
        "episodes the framework still held open after every close, where it can tell)"
    )
    for r in rows:
        for err in r["errors"][:3]:
            print(f"  {r['framework']} @ {r['concurrency']}: {err}")
    print()
    by = {(r["framework"], r["concurrency"]): r for r in rows}
    for level in levels:
        lu, bg = by.get(("ludus", level)), by.get(("browsergym", level))
        if lu and bg and bg["steps_per_s"] and lu["steps_per_s"]:
            ratio = lu["steps_per_s"] / bg["steps_per_s"]
            print(
                f"Ludus / BrowserGym at {level:>2} concurrent: steps/s {ratio:.1f}× (target ≥ {TARGET_STEPS_RATIO:.0f}×: "
                f"{'met' if ratio >= TARGET_STEPS_RATIO else 'NOT met'}); reset p50 "
                f"{bg['reset_p50_s'] / lu['reset_p50_s']:.1f}× faster; PSS per episode "
                f"{bg['peak_pss_mib'] / max(lu['peak_pss_mib'], 1e-9):.1f}× less"
            )
        if lu and lu["episodes"]:
            p50 = lu["reset_p50_s"]
            print(
                f"Ludus reset p50 at {level:>2} concurrent: {p50:.3f} s (target ≤ {TARGET_RESET_P50_S} s: "
                f"{'met' if p50 <= TARGET_RESET_P50_S else 'NOT met'})"
            )


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("playwright", "browsergym-core", "browsergym-miniwob", "miniwob", "gymnasium"):
        with contextlib.suppress(PackageNotFoundError):
            out.append(f"{dist} {version(dist)}")
    return ", ".join(out)


def chromium_version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        return done.stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        return f"not found at {path}"


def leak_main(args: argparse.Namespace) -> None:
    """``--leak N`` in a child: one environment, N sequential episodes, Chromium counted as it goes."""
    runner = RUNNERS[args.framework](
        chromium=args.chromium, slow_mo=args.browsergym_slow_mo, delay=args.browsergym_delay
    )
    counts, errors = [], []
    started = time.perf_counter()
    for i in range(args.leak):
        try:
            runner.reset(args.tasks[i % len(args.tasks)], i)
            for _ in range(args.steps):
                if runner.step():
                    break
        except Exception as e:
            errors.append(f"episode {i}: {type(e).__name__}: {e}"[:300])
        if i == 0 or (i + 1) % max(1, args.leak // 10) == 0:
            counts.append((i + 1, len(chromium_processes(descendants(os.getpid())))))
    runner.close()
    still_open = runner.live_episodes()
    runner.shutdown()
    deadline = time.monotonic() + 5
    while (after := len(chromium_processes(descendants(os.getpid())))) and time.monotonic() < deadline:
        time.sleep(0.2)
    print(
        json.dumps(
            {
                "episodes": args.leak,
                "seconds": time.perf_counter() - started,
                "counts": counts,
                "after_close": after,
                "open_after_close": still_open,
                "errors": errors,
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"levels {QUICK_LEVELS}, 2 episodes per worker")
    parser.add_argument("--levels", type=int, nargs="+", help=f"concurrent episodes (default {LEVELS})")
    parser.add_argument("--episodes", type=int, help="timed episodes per worker (default 4; --quick 2)")
    parser.add_argument("--steps", type=int, default=5, help="scroll steps per episode (default 5)")
    parser.add_argument("--frameworks", nargs="+", default=["ludus", "browsergym"], choices=sorted(RUNNERS))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), help="MiniWoB++ tasks, used in turn")
    parser.add_argument("--chromium", default=CHROMIUM, help=f"the Chromium binary (default {CHROMIUM})")
    parser.add_argument(
        "--browsergym-slow-mo", type=int, help="override BrowserGym's Playwright slow_mo in ms (default: the task's)"
    )
    parser.add_argument(
        "--browsergym-delay",
        type=float,
        default=BROWSERGYM_DELAY_S,
        help="BrowserGym's sleep after each action, s (default 0.5, its own; 0.14 names it pre_observation_delay)",
    )
    parser.add_argument("--browsergym-fast", action="store_true", help="BrowserGym tuned: slow_mo 0 and delay 0")
    parser.add_argument("--leak", type=int, metavar="N", help="N sequential episodes of one environment, then count")
    parser.add_argument("--json", help="also write every level's figures to this file")
    args = parser.parse_args()
    if args.browsergym_fast:
        args.browsergym_slow_mo, args.browsergym_delay = 0, 0.0
    become_subreaper()
    print(
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}; "
        f"{chromium_version(args.chromium)}; {versions()}; tasks {' '.join(args.tasks)}; {args.steps} steps per "
        f"episode; BrowserGym slow_mo "
        f"{'the task default' if args.browsergym_slow_mo is None else f'{args.browsergym_slow_mo} ms'}, sleep after "
        f"each action {args.browsergym_delay:g} s",
        flush=True,
    )
    if args.leak:
        frameworks = [f for f in args.frameworks if f == "ludus"] or args.frameworks[:1]
        for framework in frameworks:
            result, tail, left = run_child(["_leak", framework, str(args.leak)], args, timeout=60 + 30 * args.leak)
            if result is None:
                print(f"{framework}: the leak run failed: {tail}")
                continue
            growth = ", ".join(f"{n}: {c}" for n, c in result["counts"])
            print(
                f"{framework}: {result['episodes']} sequential episodes in {result['seconds']:.1f} s; Chromium processes "
                f"after episode n — {growth}; episodes still open after close {result['open_after_close']}; Chromium "
                f"after close and shutdown {result['after_close']}; after exit {left}; "
                f"errors {len(result['errors'])}"
            )
            for err in result["errors"][:3]:
                print(f"  {err}")
        return
    levels = args.levels or list(QUICK_LEVELS if args.quick else LEVELS)
    episodes = args.episodes or (2 if args.quick else 4)
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for level in levels:
        for framework in args.frameworks:  # frameworks take turns level by level: both see the same machine
            role = ["_run", framework, str(level), str(episodes)]
            result, tail, left = run_child(role, args, timeout=300 + 20 * episodes * (args.steps + 3) * level)
            if result is None:
                print(f"  {framework} at {level}: failed — {tail.strip()[-800:]}", flush=True)
                continue
            result["chromium_after_exit"] = left
            rows.append(result)
            print(
                f"  {framework:<10} {level:>2} concurrent: reset p50 {result['reset_p50_s']:.3f} s, "
                f"{result['steps_per_s']:.2f} steps/s, {result['peak_pss_mib'] / level:.0f} MiB PSS per episode, "
                f"{len(result['errors'])} errors ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
    rows.sort(key=lambda r: (args.frameworks.index(r["framework"]), r["concurrency"]))
    report(rows, levels)
    print(f"\nload average {os.getloadavg()[0]:.2f}; total {time.monotonic() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def _entry() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("_run", "_leak"):
        parser = argparse.ArgumentParser()
        parser.add_argument("role")
        parser.add_argument("framework", choices=sorted(RUNNERS))
        if sys.argv[1] == "_run":
            parser.add_argument("concurrency", type=int)
            parser.add_argument("episodes", type=int)
        else:
            parser.add_argument("leak", type=int)
        parser.add_argument("--steps", type=int, default=5)
        parser.add_argument("--tasks", nargs="+", default=list(TASKS))
        parser.add_argument("--chromium", default=CHROMIUM)
        parser.add_argument("--browsergym-slow-mo", type=int)
        parser.add_argument("--browsergym-delay", type=float, default=BROWSERGYM_DELAY_S)
        args = parser.parse_args()
        become_subreaper()
        (child_main if args.role == "_run" else leak_main)(args)
        return
    main()


if __name__ == "__main__":
    _entry()
