"""`ludus view` on large runs (issue 33: "first page < 1 s" on a run of >= 10,000 trajectories),
and the screenshots of docs/view.md.

For each run folder, several times over, a fresh `ludus view RUN --port 0` (its index cold) is
opened in headless Chromium, and the page measures from navigation start: the first table page
rendered, one trajectory opened from it, and the table sorted by status once the whole file is
indexed. Then the server's resident memory, against a server over a run of 20 trajectories: the
index holds each line's summary, never its messages.

    python benchmarks/view_first_page.py                          # makes 10,000- and 50,000-trajectory runs
    python benchmarks/view_first_page.py --runs runs/my-eval runs/my-train --repeats 3
    python benchmarks/view_first_page.py --screenshots docs/images     # docs/view.md's pictures (a few minutes)

`--screenshots` makes real runs of another kind instead — two short `ludus train` runs of the
default recipe, evaluations of their models on the same tasks (one graded again by `ludus
rescore` without partial credit), a web run with screenshots and a repo run with a diff — and
photographs the page over them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

from ludus.rollout.records import trajectory_files


def ludus(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ludus.cli", *args], check=True, stdout=subprocess.DEVNULL)


def make_run(root: Path, trajectories: int, model: str = "tiny") -> Path:
    """An evaluation of ``trajectories`` arithmetic tasks by the embedded model (3 tokens a reply)."""
    name = f"eval-{model}-{trajectories}"
    ludus("eval", "arithmetic", "--model", model, "--tasks", str(trajectories), "--max-tokens", "3",
          "--batch", "1000", "--runs", str(root), "--name", name)  # fmt: skip
    return root / name


@contextlib.contextmanager
def ludus_view(*folders: Path) -> Iterator[tuple[str, str, psutil.Process]]:
    """``ludus view FOLDER… --port 0`` as a user starts it: the address it prints, split into the
    server's URL and the token after ``#token=``, and its process."""
    command = [sys.executable, "-m", "ludus.cli", "view", *map(str, folders), "--port", "0"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            found = re.search(r"at (http://127\.0\.0\.1:\d+)/#token=(\S+)", line)
            if found:
                yield found.group(1), urllib.parse.unquote(found.group(2)), psutil.Process(process.pid)
                return
        raise RuntimeError(f"ludus view exited with {process.wait()} before printing its address")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)


def api(url: str, token: str, path: str, **params: Any) -> Any:
    reply = httpx.get(f"{url}{path}", params=params, headers={"Authorization": f"Bearer {token}"})
    reply.raise_for_status()
    return reply.json()


def indexed(url: str, token: str) -> None:
    while not all(f["complete"] for run in api(url, token, "/api/runs") for f in run["files"]):
        time.sleep(0.05)


def shown_at(page: Any, selector: str) -> float:
    """Milliseconds from navigation start to ``selector`` on the page (a locator: the page's
    Content-Security-Policy refuses the eval that ``wait_for_function`` polls with)."""
    page.locator(selector).first.wait_for()
    return page.evaluate("performance.now()")


def resident_mib(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def measure(browser: Any, run: Path) -> dict[str, float]:
    """One cold start: milliseconds to the first page, to one trajectory and to a sorted page;
    seconds to the whole index; the server's resident MiB once indexed."""
    with ludus_view(run) as (url, token, server):
        started = time.monotonic()
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(f"{url}/#token={token}", wait_until="commit")
        first = shown_at(page, "#rows tbody tr")
        before = page.evaluate("performance.now()")
        page.click("#rows tbody tr")
        opened = shown_at(page, ".message.assistant")
        indexed(url, token)
        index_s = time.monotonic() - started
        page.goto(f"{url}/#/table")
        page.wait_for_selector("#rows tbody tr")
        before_sort = page.evaluate("performance.now()")
        page.click("th[data-sort=status]")
        sorted_at = shown_at(page, "th.sorted-asc[data-sort=status]")
        context.close()
        return {
            "first_ms": first,
            "open_ms": opened - before,
            "sort_ms": sorted_at - before_sort,
            "index_s": index_s,
            "rss_mib": resident_mib(server),
        }


# ---- the screenshots of docs/view.md ----------------------------------------------------------------
RECIPE_ENV_ARGS = {"digits": 2, "ops": "+", "digit_credit": 0.5}  # ludus train's default recipe


def make_docs_runs(root: Path, minutes: float) -> list[Path]:
    """The runs docs/view.md shows, in the order ``ludus view`` is given them."""
    for seed in (0, 1):
        ludus("train", "--runs-dir", str(root), "--name", f"recipe-seed{seed}", "--seed", str(seed),
              "--time-limit-min", str(minutes), "--threads", "1")  # fmt: skip
        ludus("eval", "arithmetic", "--model", str(root / f"recipe-seed{seed}" / "final"), "--tasks", "300",
              "--env-args", json.dumps(RECIPE_ENV_ARGS), "--runs", str(root), "--name", f"eval-seed{seed}")  # fmt: skip
    ludus("rescore", str(root / "eval-seed0"), "--env-args", json.dumps({**RECIPE_ENV_ARGS, "digit_credit": 0}))
    ludus("eval", "web", "--model", "oracle", "--tasks", "1", "--runs", str(root), "--name", "web",
          "--env-args", json.dumps({"screenshots": str(root / "web" / "screenshots")}))  # fmt: skip
    ludus("eval", "repo", "--model", "oracle", "--tasks", "1", "--runs", str(root), "--name", "repo")
    return [root / name for name in ("eval-seed0", "eval-seed1", "recipe-seed0", "recipe-seed1", "web", "repo")]


def images_drawn(page: Any) -> list[int]:
    """The natural widths of the page's screenshots, once each is fetched (with the token, into an
    object URL) and decoded."""
    from playwright.sync_api import expect

    expect(page.locator("img.shot:not([src])")).to_have_count(0)
    return page.locator("img.shot").evaluate_all(
        "shots => Promise.all(shots.map((i) => i.decode().then(() => i.naturalWidth)))"
    )


def photograph(browser: Any, url: str, token: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(f"{url}/#token={token}")

    def take(name: str, fragment: str, ready: str, scroll_to: str | None = None) -> None:
        page.goto(f"{url}/{fragment}")
        page.wait_for_selector(ready)
        images_drawn(page)
        if scroll_to:
            page.locator(scroll_to).first.scroll_into_view_if_needed()
        page.screenshot(path=str(out / f"view-{name}.png"))
        print(out / f"view-{name}.png", flush=True)

    take("table", "#/table?run=0&status=wrong&sort=reward&desc=1", "#rows tbody tr")
    take("curves", "#/curves", ".chart svg polyline")
    first = api(url, token, "/api/compare", a=0, b=1, limit=1)["tasks"][0]
    pair = {"a": 0, "b": 1, "task": first["task_id"], "ao": first["a"]["offset"], "bo": first["b"]["offset"]}
    take("compare", "#/compare?" + urllib.parse.urlencode(pair), "#side-b .message")
    take("screenshot", "#/trajectory?run=4&file=trajectories.jsonl&offset=0", "img.shot", "img.shot")
    take("diff", "#/trajectory?run=5&file=trajectories.jsonl&offset=0", ".card.change", ".card.change")
    page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", type=Path, help="run folders to open (default: make them)")
    parser.add_argument("--sizes", nargs="*", type=int, default=[10_000, 50_000], help="trajectories of the runs made")
    parser.add_argument("--repeats", type=int, default=5, help="cold starts per run (default 5)")
    parser.add_argument("--screenshots", type=Path, metavar="DIR", help="take docs/view.md's pictures into DIR instead")
    parser.add_argument(
        "--minutes", type=float, default=1.0, help="with --screenshots: RL minutes of each training run"
    )
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from playwright.sync_api import sync_playwright

    from ludus.envs.web.browser import find_chromium, launch_args

    # tmpfs: an evaluation syncs every trajectory to disk as it ends, which is most of its time on a disk
    scratch = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="ludus-view-bench-", dir=scratch) as root, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(), args=launch_args())
        if args.screenshots:
            with ludus_view(*make_docs_runs(Path(root), args.minutes)) as (url, token, _):
                photograph(browser, url, token, args.screenshots)
        else:
            benchmark(
                browser, args.runs or [make_run(Path(root), size) for size in args.sizes], Path(root), args.repeats
            )
        browser.close()


def benchmark(browser: Any, runs: list[Path], root: Path, repeats: int) -> None:
    small = make_run(root, 20, model="oracle")
    baseline = statistics.median(measure(browser, small)["rss_mib"] for _ in range(3))
    print(f"server memory over a run of 20 trajectories: {baseline:.0f} MiB\n")
    print(
        "| run | lines | file MiB | first page ms (median, min–max) | open one ms | sort all ms "
        "| whole index s | server MiB (over the 20-line run) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        files = trajectory_files(run)
        lines = sum(sum(1 for _ in p.open("rb")) for p in files)
        size = sum(p.stat().st_size for p in files) / 2**20
        results = [measure(browser, run) for _ in range(repeats)]

        def median(key: str, results: list[dict[str, float]] = results) -> float:
            return statistics.median(r[key] for r in results)

        firsts = [r["first_ms"] for r in results]
        rss = median("rss_mib")
        print(
            f"| {run.name} | {lines:,} | {size:.1f} | {median('first_ms'):.0f} ({min(firsts):.0f}–{max(firsts):.0f}) "
            f"| {median('open_ms'):.0f} | {median('sort_ms'):.0f} | {median('index_s'):.2f} "
            f"| {rss:.0f} (+{rss - baseline:.0f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
