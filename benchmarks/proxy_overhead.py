"""What ``ludus proxy`` costs an agent: the same model behind ``ludus serve-model`` (direct) and
behind ``ludus proxy`` (every call recorded under its episode), side by side in the same run.

    python benchmarks/proxy_overhead.py            # about 4 minutes; --quick: about a minute

Both servers are the real commands, each in a process of its own on 127.0.0.1, started once and
alive for the whole run: the same embedded model (``--model tiny``, seed 0, so the same
weights), the same ``--max-batch``, one torch thread each (``--threads``). The model is tiny on
purpose: a call costs it about as much as the HTTP round trip, so whatever the proxy adds shows.
The proxy keeps no ``--out`` file (an ended episode is then not synced to disk). A server's CPU
time is its threads' time on a CPU from the kernel's scheduler statistics, to the nanosecond.

1. Per-call overhead. A sync ``openai.OpenAI`` client, one call at a time: ``--episodes``
   conversations of ``--turns`` calls (``max_tokens`` ``--overhead-tokens``), each made twice,
   call by call in turn (who goes first alternates): to serve-model, and to the proxy in an
   episode opened and ended through the admin API as an agent harness does. Per call: the
   median and p90 of the wall time the client saw on each, of proxy − direct (call by call: the
   same turn of the same conversation), each server's CPU time per call; the episode's open and
   end on their own, and ``GET /health`` (an HTTP round trip that does nothing) for scale.
   Target: < 1 ms per call.
2. Throughput at ``--agents`` concurrent agents (64). ``openai.AsyncOpenAI`` agents, each with a
   client of its own (its own connection, as agents in processes of their own have) and a
   conversation of ``--turns`` calls (its replies and a new user message appended each turn,
   ``max_tokens`` ``--tokens``, no seed: seeded calls sample alone), all at once, against
   serve-model and through the proxy; there the harness opens every agent's episode before the
   calls and ends it after (with a client of ``HARNESS_CONNECTIONS`` connections), timed apart.
   ``--rounds`` rounds, the order alternating, after one warm-up round of each. Completion
   tokens per second over the calls (from the replies' usage), each run and the median ratio
   proxy / direct (target: ≥ 0.95), and the same counting the episodes' open and end.

Not a test (tests/test_proxy_benchmark.py runs both parts briefly so that the script keeps
working).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from ludus.sandbox.load import schedstat, threads

TOKEN = "proxy-overhead-benchmark-admin-token"
MODEL = "tiny"
SYSTEM = "You are an agent. Answer the task."
OVERHEAD_TARGET_MS, THROUGHPUT_TARGET = 1.0, 0.95
HARNESS_CONNECTIONS = 8


# ---- the servers ---------------------------------------------------------------------------------
@dataclass(eq=False)
class Server:
    """A ``ludus`` server command running on 127.0.0.1 (``url`` is its root, without /v1)."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]

    def cpu_seconds(self) -> float:
        """CPU seconds of the server's threads so far, to the nanosecond: the kernel's scheduler
        statistics per thread (/proc/PID/task/TID/schedstat; /proc/PID/stat counts whole ticks,
        10 ms, more than a call costs)."""
        return sum((schedstat(self.proc.pid, tid) or (0, 0))[0] for tid in threads(self.proc.pid)) / 1e9


def ludus_command() -> list[str]:
    script = Path(sys.executable).with_name("ludus")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ludus.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_flags(max_len: int, max_batch: int) -> list[str]:
    """The same model and batch for both servers: a fresh tiny model of seed 0."""
    return [
        "--model",
        MODEL,
        "--model-args",
        json.dumps({"max_len": max_len, "seed": 0}),
        "--max-batch",
        str(max_batch),
    ]


@contextlib.contextmanager
def running(name: str, argv: list[str], torch_threads: int) -> Iterator[Server]:
    """``ludus ARGV`` in a process of its own, once its ``/health`` answers; killed at the end."""
    port = free_port()
    log = tempfile.TemporaryFile()
    env = {**os.environ, "OMP_NUM_THREADS": str(torch_threads)}
    proc = subprocess.Popen(
        [*ludus_command(), *argv, "--port", str(port)], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
    )
    server = Server(name, f"http://127.0.0.1:{port}", proc)
    try:
        for _ in range(1200):  # two minutes at most: the command imports torch and builds the model
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(
                    f"{name} exited with {proc.returncode}:\n{log.read()[-3000:].decode(errors='replace')}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/health", timeout=1.0).status_code == 200:
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"{name} did not answer /health within two minutes")
        yield server
    finally:
        proc.kill()
        proc.wait()
        log.close()


@contextlib.contextmanager
def servers(max_len: int, max_batch: int, torch_threads: int) -> Iterator[tuple[Server, Server]]:
    """``ludus serve-model`` and ``ludus proxy`` over the same model, both running."""
    flags = model_flags(max_len, max_batch)
    with tempfile.TemporaryDirectory() as folder:
        token_file = Path(folder) / "proxy.token"
        token_file.write_text(TOKEN)
        with (
            running("serve-model", ["serve-model", *flags, "--name", MODEL], torch_threads) as direct,
            running(
                "proxy", ["proxy", *flags, "--name", MODEL, "--token-file", str(token_file)], torch_threads
            ) as proxy,
        ):
            yield direct, proxy


def task(i: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Task {i}: what is {i % 97} + 5?"}]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- 1. per-call overhead -------------------------------------------------------------------------
@dataclass
class Timings:
    """Part 1's measurements: seconds per call as the client saw them (the proxy's call ``i`` and
    serve-model's call ``i`` are the same turn of the same conversation, made one after the
    other), each server's CPU over its calls, and the episode's admin requests."""

    direct: list[float] = field(default_factory=list)
    proxy: list[float] = field(default_factory=list)
    direct_cpu_s: float = 0.0
    proxy_cpu_s: float = 0.0
    opens: list[float] = field(default_factory=list)  # POST /ludus/episodes
    ends: list[float] = field(default_factory=list)  # POST /ludus/episodes/KEY/end
    admin_cpu_s: float = 0.0  # the proxy's CPU over the opens and ends
    health: list[float] = field(default_factory=list)  # GET /health on the proxy: an HTTP round trip, no work


class Conversation:
    """One agent's conversation: each call sends it so far, its reply and a new user message are appended."""

    def __init__(self, client: openai.OpenAI, i: int):
        self.client, self.messages = client, task(i)

    def call(self, max_tokens: int) -> float:
        """Seconds the call took, as the client saw it."""
        started = time.perf_counter()
        reply = self.client.chat.completions.create(model=MODEL, messages=self.messages, max_tokens=max_tokens)
        took = time.perf_counter() - started
        self.messages += [
            {"role": "assistant", "content": reply.choices[0].message.content or ""},
            {"role": "user", "content": "Go on."},
        ]
        return took


def per_call(direct: Server, proxy: Server, episodes: int, turns: int, max_tokens: int) -> Timings:
    """``episodes`` conversations, each made twice call by call: to serve-model and, in an episode
    opened and ended through the admin API, to the proxy; who goes first alternates every call."""
    measured = Timings()
    with httpx.Client(timeout=120.0) as http:
        direct_client = openai.OpenAI(base_url=f"{direct.url}/v1", api_key="unused", max_retries=0, http_client=http)
        proxy_client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="unset", max_retries=0, http_client=http)
        admin = {"authorization": f"Bearer {TOKEN}"}

        def timed(server: Server, request: Callable[[], httpx.Response]) -> tuple[httpx.Response, float, float]:
            cpu, started = server.cpu_seconds(), time.perf_counter()
            response = request()
            took = time.perf_counter() - started
            response.raise_for_status()
            return response, took, server.cpu_seconds() - cpu

        def episode(i: int, into: Timings) -> None:
            opened, took, cpu = timed(
                proxy, lambda: http.post(f"{proxy.url}/ludus/episodes", json={"task_id": i}, headers=admin)
            )
            key = opened.json()["key"]
            into.opens.append(took)
            into.admin_cpu_s += cpu
            pair = {
                direct: Conversation(direct_client, i),
                proxy: Conversation(proxy_client.with_options(api_key=key), i),
            }
            for turn in range(turns):
                for server in (direct, proxy) if (i + turn) % 2 == 0 else (proxy, direct):
                    before = server.cpu_seconds()
                    took = pair[server].call(max_tokens)
                    cpu = server.cpu_seconds() - before
                    if server is direct:
                        into.direct.append(took)
                        into.direct_cpu_s += cpu
                    else:
                        into.proxy.append(took)
                        into.proxy_cpu_s += cpu
            _, took, cpu = timed(
                proxy, lambda: http.post(f"{proxy.url}/ludus/episodes/{key}/end", json={"reward": 1.0}, headers=admin)
            )
            into.ends.append(took)
            into.admin_cpu_s += cpu
            into.health.append(timed(proxy, lambda: http.get(f"{proxy.url}/health"))[1])

        for i in range(3):  # warm-up, not counted: connections, first forward passes
            episode(-1 - i, Timings())
        for i in range(episodes):
            episode(i, measured)
    return measured


def print_per_call(measured: Timings, episodes: int, turns: int, max_tokens: int) -> float:
    """The table of part 1; returns the median of proxy − direct, call by call, in ms."""
    n = len(measured.direct)
    print(
        f"\n1. per call: a sync openai client, one call at a time; {episodes} conversations × {turns} calls = {n} "
        f"calls on each server, call by call in turn, max_tokens {max_tokens}"
    )
    print(f"{'':<22} {'median ms':>10} {'p90 ms':>9} {'server CPU ms':>14}")

    def line(label: str, median_ms: float, p90_ms: float, cpu_ms: float | None = None) -> None:
        cpu = f"{cpu_ms:>14.2f}" if cpu_ms is not None else ""
        print(f"{label:<22} {median_ms:>10.2f} {p90_ms:>9.2f} {cpu}")

    def row(label: str, times: list[float], cpu_ms: float | None = None) -> None:
        line(label, statistics.median(times) * 1e3, percentile(times, 0.9) * 1e3, cpu_ms)

    row("serve-model (direct)", measured.direct, measured.direct_cpu_s / n * 1e3)
    row("proxy", measured.proxy, measured.proxy_cpu_s / n * 1e3)
    median = statistics.median(p - d for p, d in zip(measured.proxy, measured.direct, strict=True)) * 1e3
    p90 = (percentile(measured.proxy, 0.9) - percentile(measured.direct, 0.9)) * 1e3
    line("proxy − direct", median, p90, (measured.proxy_cpu_s - measured.direct_cpu_s) / n * 1e3)
    row("episode open", measured.opens)
    row("episode end", measured.ends)
    print(f"{'(open + end)':<22} {'':>10} {'':>9} {measured.admin_cpu_s / episodes * 1e3:>14.2f}")
    row("GET /health", measured.health)
    verdict = "met" if median < OVERHEAD_TARGET_MS else "MISSED"
    print(
        "(proxy − direct: the median of the differences call by call — the same turn of the same conversation —, "
        "the difference of the p90s, of the CPU per call; server CPU per call, per episode for open + end; "
        "GET /health: the proxy's HTTP round trip doing nothing, for scale)"
    )
    print(f"overhead per call: median {median:.2f} ms (target < {OVERHEAD_TARGET_MS:g} ms: {verdict})")
    return median


# ---- 2. throughput at many agents -------------------------------------------------------------------
@dataclass
class Run:
    target: str
    calls_s: float  # the agents' calls, all at once
    admin_s: float  # the proxy only: opening the episodes before, ending them after
    calls: int
    completion_tokens: int
    server_cpu_s: float  # over the calls
    admin_cpu_s: float  # the server's, over opening and ending the episodes
    client_cpu_s: float
    mean_batch: float | None  # the proxy only: prompts per generate call, as its episodes recorded them

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.calls_s

    @property
    def tokens_per_s_with_episodes(self) -> float:
        return self.completion_tokens / (self.calls_s + self.admin_s)


async def agents(server: Server, recorded: bool, count: int, turns: int, max_tokens: int, first: int) -> Run:
    """``count`` agents at once, each with its own client (its own connection, as agents in
    processes of their own have) and a conversation of ``turns`` calls. Through the proxy the
    harness opens every agent's episode before and ends it after, timed apart from the calls."""
    admin = {"authorization": f"Bearer {TOKEN}"}
    # the harness's own client: a few connections (httpx scans its whole pool for every request)
    limits = httpx.Limits(max_connections=HARNESS_CONNECTIONS, max_keepalive_connections=HARNESS_CONNECTIONS)
    async with httpx.AsyncClient(base_url=server.url, headers=admin, timeout=300.0, limits=limits) as harness:

        async def open_episode(i: int) -> str:
            opened = await harness.post("/ludus/episodes", json={"task_id": f"task-{i}"})
            opened.raise_for_status()
            return opened.json()["key"]

        async def end_episode(key: str) -> list[int]:
            ended = await harness.post(f"/ludus/episodes/{key}/end", json={"reward": 1.0})
            ended.raise_for_status()
            return [call["batch"] for call in ended.json()["info"]["calls"]]

        async def agent(i: int, client: openai.AsyncOpenAI) -> int:
            messages, tokens = task(i), 0
            for _ in range(turns):
                reply = await client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens)
                tokens += reply.usage.completion_tokens if reply.usage else 0
                messages += [
                    {"role": "assistant", "content": reply.choices[0].message.content or ""},
                    {"role": "user", "content": "Go on."},
                ]
            return tokens

        client_before, names = _own_cpu_seconds(), range(first, first + count)
        keys, batches, admin_s, admin_cpu = ["unused"] * count, [], 0.0, 0.0
        if recorded:
            cpu, started = server.cpu_seconds(), time.perf_counter()
            keys = await asyncio.gather(*map(open_episode, names))
            admin_s, admin_cpu = time.perf_counter() - started, server.cpu_seconds() - cpu
        certificates = ssl.create_default_context()  # read once: each client loading them costs ~60 ms of CPU
        clients = [
            openai.AsyncOpenAI(
                base_url=f"{server.url}/v1",
                api_key=key,
                max_retries=0,
                timeout=300.0,
                http_client=openai.DefaultAsyncHttpxClient(verify=certificates),
            )
            for key in keys
        ]
        cpu, started = server.cpu_seconds(), time.perf_counter()
        tokens = await asyncio.gather(*(agent(i, c) for i, c in zip(names, clients, strict=True)))
        calls_s, server_cpu = time.perf_counter() - started, server.cpu_seconds() - cpu
        if recorded:
            cpu, started = server.cpu_seconds(), time.perf_counter()
            batches = [b for bs in await asyncio.gather(*map(end_episode, keys)) for b in bs]
            admin_s, admin_cpu = admin_s + time.perf_counter() - started, admin_cpu + server.cpu_seconds() - cpu
            if len(batches) != count * turns:
                raise RuntimeError(f"the proxy recorded {len(batches)} calls of the {count * turns} made")
        client_cpu = _own_cpu_seconds() - client_before
        for client in clients:
            await client.close()
    return Run(
        server.name,
        calls_s,
        admin_s,
        count * turns,
        sum(tokens),
        server_cpu,
        admin_cpu,
        client_cpu,
        statistics.fmean(batches) if batches else None,
    )


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def throughput(
    direct: Server, proxy: Server, count: int, turns: int, max_tokens: int, rounds: int
) -> list[tuple[Run, Run]]:
    """``rounds`` pairs of runs (direct, proxy), alternating who goes first, after a warm-up pair."""

    def one(server: Server, r: int) -> Run:
        return asyncio.run(agents(server, server is proxy, count, turns, max_tokens, first=r * count))

    one(direct, -1), one(proxy, -1)
    pairs = []
    for r in range(rounds):
        if r % 2 == 0:
            d = one(direct, r)
            p = one(proxy, r)
        else:
            p = one(proxy, r)
            d = one(direct, r)
        pairs.append((d, p))
    return pairs


def print_throughput(pairs: list[tuple[Run, Run]], count: int, turns: int, max_tokens: int) -> float:
    """The table of part 2; returns the median ratio proxy / direct of the calls' tokens/s."""
    print(
        f"\n2. throughput: {count} AsyncOpenAI agents at once, {turns} calls each, max_tokens {max_tokens}; "
        "rounds alternate who goes first"
    )
    print(
        f"{'round':<6} {'server':<12} {'calls s':>8} {'tokens/s':>9} {'srv CPU ms/call':>16} {'client CPU s':>13} "
        f"{'batch':>6} {'proxy/direct':>13} {'episodes s':>11} {'srv CPU ms/episode':>19} {'with episodes':>14}"
    )
    ratios, whole = [], []
    for r, (d, p) in enumerate(pairs, 1):
        ratios.append(p.tokens_per_s / d.tokens_per_s)
        whole.append(p.tokens_per_s_with_episodes / d.tokens_per_s)
        for run in (d, p) if r % 2 == 1 else (p, d):
            batch = f"{run.mean_batch:6.1f}" if run.mean_batch is not None else f"{'-':>6}"
            episodes = f"{run.admin_s:>11.2f} {run.admin_cpu_s / count * 1e3:>19.2f} {whole[-1]:>14.3f}"
            print(
                f"{r:<6} {run.target:<12} {run.calls_s:>8.2f} {run.tokens_per_s:>9.0f} "
                f"{run.server_cpu_s / run.calls * 1e3:>16.2f} {run.client_cpu_s:>13.2f} {batch}"
                + (f" {ratios[-1]:>13.3f} {episodes}" if run is p else "")
            )
    median = statistics.median(ratios)
    verdict = "met" if median >= THROUGHPUT_TARGET else "MISSED"
    print(
        "(calls s: the agents' calls, all at once; batch: prompts per generate call, as the proxy recorded them; "
        "episodes s: opening the 64 episodes before the calls and ending them after, at once)"
    )
    print(
        f"tokens/s proxy / direct, the calls: median {median:.3f} over {len(ratios)} rounds "
        f"({', '.join(f'{x:.3f}' for x in ratios)}; target ≥ {THROUGHPUT_TARGET}: {verdict})"
    )
    print(
        f"  counting the time to open and end the episodes over HTTP: median {statistics.median(whole):.3f} "
        f"({', '.join(f'{x:.3f}' for x in whole)})"
    )
    cpu = [(p.server_cpu_s / p.calls) / (d.server_cpu_s / d.calls) for d, p in pairs]
    print(
        f"server CPU per call, proxy / direct (the figure the machine's load moves least): median "
        f"{statistics.median(cpu):.3f} ({', '.join(f'{x:.3f}' for x in cpu)})"
    )
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run: 20 conversations, 64 agents × 2 rounds")
    parser.add_argument("--episodes", type=int, default=60, help="conversations of part 1 (default 60)")
    parser.add_argument("--turns", type=int, default=4, help="calls per conversation (default 4)")
    parser.add_argument("--overhead-tokens", type=int, default=4, help="max_tokens of part 1's calls (default 4)")
    parser.add_argument("--agents", type=int, default=64, help="concurrent agents of part 2 (default 64)")
    parser.add_argument("--tokens", type=int, default=16, help="max_tokens of part 2's calls (default 16)")
    parser.add_argument("--rounds", type=int, default=8, help="direct/proxy pairs of part 2 (default 8)")
    parser.add_argument("--max-batch", type=int, default=64, help="both servers' --max-batch (default 64)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each server (default 1)")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.rounds = 20, 2
    max_len = 64 + args.turns * (max(args.tokens, args.overhead_tokens) * 3 + 16)  # replies of odd bytes grow as text
    load = os.getloadavg()
    print(
        f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"Python {sys.version.split()[0]}, openai {openai.__version__}; model tiny (max_len {max_len}, seed 0), --max-batch {args.max_batch}, "
        f"{args.threads} torch thread(s) per server"
    )
    with servers(max_len, args.max_batch, args.threads) as (direct, proxy):
        measured = per_call(direct, proxy, args.episodes, args.turns, args.overhead_tokens)
        print_per_call(measured, args.episodes, args.turns, args.overhead_tokens)
        pairs = throughput(direct, proxy, args.agents, args.turns, args.tokens, args.rounds)
        print_throughput(pairs, args.agents, args.turns, args.tokens)
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
