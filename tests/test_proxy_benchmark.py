"""benchmarks/proxy_overhead.py keeps working: both of its parts, briefly, against the real
``ludus serve-model`` and ``ludus proxy`` commands."""

import statistics
from pathlib import Path

import httpx
import pytest

from support import script_module

pytest.importorskip("uvicorn")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "proxy_overhead.py"


@pytest.fixture(scope="module")
def bench():
    with script_module(SCRIPT, "proxy_overhead_benchmark") as module:
        yield module


@pytest.fixture(scope="module")
def servers(bench):
    with bench.servers(max_len=128, max_batch=8, torch_threads=1) as pair:
        yield pair


def test_per_call_times_the_same_calls_on_both_servers_and_each_episode(bench, servers, capsys):
    direct, proxy = servers
    measured = bench.per_call(direct, proxy, episodes=2, turns=2, max_tokens=2)
    assert len(measured.direct) == len(measured.proxy) == 4
    assert len(measured.opens) == len(measured.ends) == len(measured.health) == 2
    assert min(measured.direct + measured.proxy + measured.opens + measured.ends) > 0
    assert measured.direct_cpu_s > 0 and measured.proxy_cpu_s > 0 and measured.admin_cpu_s > 0
    overhead = bench.print_per_call(measured, episodes=2, turns=2, max_tokens=2)
    assert overhead == pytest.approx(
        statistics.median(p - d for p, d in zip(measured.proxy, measured.direct, strict=True)) * 1e3
    )
    assert "overhead per call: median" in capsys.readouterr().out
    assert httpx.get(f"{proxy.url}/health").json()["episodes_open"] == 0  # every episode it opened, it ended


def test_throughput_runs_the_agents_on_both_and_the_proxy_records_every_call(bench, servers, capsys):
    direct, proxy = servers
    pairs = bench.throughput(direct, proxy, count=4, turns=2, max_tokens=3, rounds=1)
    assert len(pairs) == 1
    plain, recorded = pairs[0]
    assert (plain.target, recorded.target) == ("serve-model", "proxy")
    for run in (plain, recorded):
        assert run.calls == 8 and 0 < run.completion_tokens <= 8 * 3
        assert run.calls_s > 0 and run.server_cpu_s > 0
    assert plain.mean_batch is None and plain.admin_s == 0
    assert recorded.mean_batch is not None and 1 <= recorded.mean_batch <= 4  # batches of the 4 agents' calls
    assert recorded.admin_s > 0 and recorded.admin_cpu_s > 0
    ratio = bench.print_throughput(pairs, count=4, turns=2, max_tokens=3)
    assert ratio == pytest.approx(recorded.tokens_per_s / plain.tokens_per_s)
    assert "tokens/s proxy / direct" in capsys.readouterr().out
    assert httpx.get(f"{proxy.url}/health").json()["episodes_open"] == 0
