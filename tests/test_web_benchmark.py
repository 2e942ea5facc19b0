"""benchmarks/web_env.py keeps working: its harness, briefly, on one MiniWoB++ task.

BrowserGym is a benchmark-only anchor (the ``bench`` extra) and both runners need a Chromium, so
these tests skip without them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support import script_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "web_env.py"
CHROMIUM = os.environ.get("LUDUS_CHROMIUM", "/usr/bin/chromium")

needs_chromium = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) or shutil.which("chromium")), reason=f"no Chromium at {CHROMIUM}"
)


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("miniwob", reason="the miniwob package (the web extra) is not installed")
    # the harness counts every Chromium under this process: stop the ones other tests' environments keep warm
    from ludus.envs.web.browser import BrowserService

    if BrowserService._shared is not None:
        BrowserService._shared.shutdown()
    with script_module(SCRIPT, "web_env_benchmark") as module:
        yield module


def check(result, episodes: int, steps: int) -> None:
    assert result.errors == []
    assert result.episodes == episodes and result.steps == episodes * steps  # scrolling never ends an episode
    assert 0 < result.reset_p50_s <= result.reset_p99_s
    assert result.steps_per_s > 0 and result.step_p50_s > 0
    assert result.peak_chromium > 0 and result.peak_pss_mib > 0 and result.peak_rss_mib >= result.peak_pss_mib
    assert result.chromium_after_close == 0  # every browser closed


@needs_chromium
def test_browsergym_runner_and_harness(bench, capsys):
    pytest.importorskip(
        "browsergym.miniwob", reason="browsergym-miniwob is a bench-only extra: pip install -e '.[bench]'"
    )
    result = bench.run_level(
        lambda: bench.BrowserGymRunner(chromium=CHROMIUM),
        concurrency=1,
        episodes_per_worker=2,
        steps=1,
        tasks=["click-button"],
        warmup=False,
        name="browsergym",
    )
    check(result, episodes=2, steps=1)
    row = bench.asdict(result) | {"chromium_after_exit": 0}
    bench.report([row], [1])
    out = capsys.readouterr().out
    assert "browsergym" in out and "reset p50" in out


@needs_chromium
def test_ludus_runner_and_harness(bench):
    web = pytest.importorskip("ludus.envs.web", reason="Ludus's web environments are not installed")
    if not hasattr(web, "MiniWoBEnv"):
        pytest.skip("ludus.envs.web.MiniWoBEnv does not exist yet")
    result = bench.run_level(
        bench.LudusRunner, concurrency=1, episodes_per_worker=2, steps=1, tasks=["click-button"], warmup=False
    )
    check(result, episodes=2, steps=1)
