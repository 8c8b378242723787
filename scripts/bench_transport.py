#!/usr/bin/env python3
"""Transport and capture benchmarks for memos-bridge; prints its figures.

    python scripts/bench_transport.py            # full run (~2-3 minutes on 2 cores)
    python scripts/bench_transport.py --quick    # smaller counts, for a smoke check

Figures (targets from the foundation issue):
- spawn → first `core.health` answer (target < 1.5 s), median of several cold starts;
- `core.ping` throughput over stdio (target ≥ 2,000 req/s) and over TCP, with a window of requests in flight;
- `turn.end` capture throughput in steps/s with the real embedding model (target ≥ 150 steps/s);
- resident memory (RSS) of the service after 10k traces, and turn.start latency at that size.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memos_bridge.client import ServiceClient

WORDS = (
    "parse infoTable holdings issuer cusip value shares quarter filing namespace xml lookup pandas csv "
    "docker build image layer cache pip install wheel resolver version conflict pytest fixture timeout "
    "kubernetes deploy rollout helm chart secret config map ingress nginx proxy header gzip certificate "
    "git rebase merge conflict branch commit hook lint ruff mypy type error import module path env "
    "database migration index query plan vacuum wal checkpoint sqlite postgres schema column constraint"
).split()
TOOLS = ("bash", "read_file", "write_file", "grep", "python")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def windowed(client: ServiceClient, method: str, params_list: list[Any], window: int) -> float:
    """Send all requests keeping `window` in flight; return requests per second."""
    started = time.perf_counter()
    inflight: deque[Future[Any]] = deque()
    for params in params_list:
        if len(inflight) >= window:
            inflight.popleft().result(timeout=300)
        inflight.append(client.call_async(method, params))
    while inflight:
        inflight.popleft().result(timeout=300)
    return len(params_list) / (time.perf_counter() - started)


def bench_startup(runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            started = time.perf_counter()
            client = ServiceClient.spawn(home)
            client.call("core.health", timeout=60)
            times.append(time.perf_counter() - started)
            client.close()
    return statistics.median(times), max(times)


def start_daemon(home: str) -> tuple[subprocess.Popen[bytes], int]:
    env = {**os.environ, "MEMOS_BRIDGE_HOME": home}
    env.pop("MEMOS_BRIDGE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memos_bridge", "serve", "--tcp", "127.0.0.1:0", "--home", home],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline().decode()
        match = re.search(r":(\d+)\s*$", line)
        if match:
            return proc, int(match.group(1))
        if not line:
            raise RuntimeError("daemon did not start")


def capture_turns(
    client: ServiceClient, count: int, seed: int, window: int, ts0: int, terse: bool = False
) -> tuple[float, int]:
    """Open a few sessions and send `count` turn.end calls of 5 steps each; return (steps/s, steps).

    Default steps are realistic (12-word asks, 20-word tool outputs, 30-word replies); `terse` steps
    (4/5/8 words) show how throughput depends on text length: the embedding model is the bound.
    """
    ask, out, reply = (4, 5, 8) if terse else (12, 20, 30)
    rng = random.Random(seed)
    episodes = []
    for _ in range(8):
        session = client.call("session.open", {"agent": "bench"})["sessionId"]
        episode = client.call("episode.open", {"sessionId": session})["episodeId"]
        episodes.append((session, episode))
    params_list = []
    for i in range(count):
        session, episode = episodes[i % len(episodes)]
        calls = [
            {
                "name": rng.choice(TOOLS),
                "input": {"cmd": sentence(rng, 6)},
                "output": sentence(rng, out) if rng.random() > 0.2 else f"Error: {sentence(rng, out // 2)}",
            }
            for _ in range(4)
        ]
        params_list.append(
            {
                "agent": "bench",
                "sessionId": session,
                "episodeId": episode,
                "ts": ts0 + i,
                "userText": f"turn {i}: {sentence(rng, ask)}",
                "agentText": sentence(rng, reply),
                "toolCalls": calls,
            }
        )
    rate = windowed(client, "turn.end", params_list, window)
    return rate * 5, count * 5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    pings = 2_000 if args.quick else 20_000
    traces_target = 2_000 if args.quick else 10_000
    print(
        f"memos-bridge transport benchmark ({'quick' if args.quick else 'full'}), python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus"
    )

    median, worst = bench_startup(3 if args.quick else 5)
    print(f"spawn → first core.health:    median {median * 1000:.0f} ms, max {worst * 1000:.0f} ms  (target < 1500 ms)")

    with tempfile.TemporaryDirectory() as home:
        client = ServiceClient.spawn(home)
        client.call("core.health")
        windowed(client, "core.ping", [None] * 500, 100)  # warm-up
        stdio_rate = windowed(client, "core.ping", [None] * pings, 100)
        print(
            f"core.ping over stdio:         {stdio_rate:,.0f} req/s  ({pings} requests, 100 in flight; target ≥ 2,000)"
        )
        health_rate = windowed(client, "core.health", [None] * (pings // 4), 100)
        print(f"core.health over stdio:       {health_rate:,.0f} req/s")

        warm_session = client.call("session.open", {"agent": "bench"})["sessionId"]
        client.call(
            "turn.start",
            {"agent": "bench", "sessionId": warm_session, "userText": "warm up", "ts": 1},
            timeout=120,
        )  # loads the model before timing capture
        steps_rate, steps = capture_turns(client, 200 if args.quick else 400, seed=1, window=8, ts0=10_000)
        print(
            f"turn.end capture:             {steps_rate:,.0f} steps/s  ({steps} steps, 5 per call, "
            f"real embeddings, 8 calls in flight; target ≥ 150)"
        )
        terse_rate, terse_steps = capture_turns(
            client, 100 if args.quick else 200, seed=7, window=8, ts0=20_000, terse=True
        )
        print(f"turn.end capture, terse:      {terse_rate:,.0f} steps/s  ({terse_steps} steps of 4-8 words)")
        steps += terse_steps

        total = steps
        seed = 2
        while total < traces_target:
            _, added = capture_turns(
                client, min(400, (traces_target - total) // 5), seed=seed, window=8, ts0=1_000_000 * seed
            )
            total += added
            seed += 1
        proc = client.process
        assert proc is not None
        rss = rss_mib(proc.pid)
        rng = random.Random(99)
        latencies = []
        session = client.call("session.open", {"agent": "bench"})["sessionId"]
        for i in range(30):
            started = time.perf_counter()
            client.call(
                "turn.start",
                {
                    "agent": "bench",
                    "sessionId": session,
                    "ts": 10**12 + i * 10**8,
                    "userText": sentence(rng, 10),
                },
            )
            latencies.append((time.perf_counter() - started) * 1000)
        latencies.sort()
        print(f"RSS after {total:,} traces:      {rss:,.0f} MiB")
        print(
            f"turn.start at {total:,} traces:  p50 {statistics.median(latencies):.1f} ms, "
            f"p95 {latencies[int(len(latencies) * 0.95) - 1]:.1f} ms (retrieval incl. query embedding)"
        )
        client.close()

    with tempfile.TemporaryDirectory() as home:
        proc, port = start_daemon(home)
        try:
            tcp = ServiceClient.connect_tcp("127.0.0.1", port)
            windowed(tcp, "core.ping", [None] * 500, 100)
            tcp_rate = windowed(tcp, "core.ping", [None] * pings, 100)
            print(f"core.ping over TCP:           {tcp_rate:,.0f} req/s  ({pings} requests, 100 in flight)")
            tcp.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
