"""benchmarks/env_server.py keeps working: its load function, briefly, against a Ludus server only."""

import asyncio
from pathlib import Path

import pytest

from support import script_module

pytest.importorskip("uvicorn")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "env_server.py"


@pytest.fixture(scope="module")
def bench():
    with script_module(SCRIPT, "env_server_benchmark") as module:
        yield module


@pytest.fixture(scope="module")
def server(bench):
    port = bench.free_port()
    proc = bench.start_server("ludus", port)
    yield port, proc
    bench.stop_server(proc)


def check(result, sessions):
    assert result["connected"] == sessions
    assert result["ok"] > 0 and result["failed"] == 0 and result["success"] == 1.0
    assert result["rps"] > 0 and result["p50_ms"] > 0 and result["p99_ms"] >= result["p50_ms"]
    assert result["server_cores"] > 0 and result["server_cpu_us_per_request"] > 0
    assert result["loop_lag_max_ms"] is not None and result["loop_lag_max_ms"] >= 0


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_load_against_ludus(bench, server, transport):
    if transport == "ws":
        pytest.importorskip("websockets")
    port, proc = server
    result = asyncio.run(bench.run_load("ludus", transport, port, 4, 0.8, warmup_s=0.2, server_pid=proc.pid))
    check(result, 4)


def test_the_environment_is_the_same_task_on_both_shapes(bench):
    """What the client sends grades to reward 1 on the Ludus environment, and the OpenEnv
    request shapes carry the same answer."""
    env = bench.LudusSum()
    obs = env.reset(seed=7)
    assert obs.messages[-1].content == bench.prompt(7)
    body = bench.shape("ludus", "http").step("s", 7)[1]
    assert env.step(body["action"]["content"]).reward == 1.0
    assert bench.shape("openenv", "ws").step("s", 7)[1]["data"]["answer"] == bench.answer(7)
