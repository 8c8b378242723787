#!/usr/bin/env python3
"""Many hosts at once over TCP: does `turn.start` stay quick while other clients' capture runs?

    python scripts/bench_load.py                      # 50 clients x 6 turn pairs, learning on
    python scripts/bench_load.py --clients 20 --turns 10 --out docs/eval/load.json

Starts a real `memos-bridge serve --tcp` daemon (with a token, so the operator view can count what was
stored), measures `turn.start` alone first (one client, the idle baseline), then runs N clients in parallel,
each doing M turn pairs (`turn.start` + `turn.end` with three tool calls), a new task every third turn.
Prints per-call p50/p95, turn pairs per second, errors, lost traces (acknowledged steps that the database
does not hold), and the ratios, both measured in this run so machine noise cancels:

- steady state: `turn.start` p95 of every turn after a client's first, under load / p95 idle. Target <= 3,
  with zero errors and zero lost traces.
- the herd: every client's first `turn.start` leaves a barrier at the same instant, N calls at once. No
  scheduler can answer all of them in idle time on two cores; the figure is their p95 over what answering
  them strictly one at a time at idle speed would give (0.95 x N x idle p50): <= 1 means the service is no
  slower than that.
- `turnStartP95LoadedOverIdle` mixes both (the herd is 1/M of the samples).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_transport import collector_paused

from memos_bridge.client import ServiceClient

TOPICS = [
    "rotate the TLS certificate of the billing gateway",
    "total the parcel weights of the March export in kilograms",
    "fix the flaky integration test in the payments service",
    "summarise yesterday's incident report for the on-call channel",
    "migrate the user table to the new schema without downtime",
    "find why the nightly backup job skipped the media bucket",
]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


WARMUP_TURNS = 3


def _wait_until_warm(port: int, token: str) -> None:
    """The embedding model loads in the background after start: wait until it has, so the idle baseline
    measures `turn.start`, not the model load."""
    with ServiceClient.connect_tcp("127.0.0.1", port, token=token) as client:
        deadline = time.monotonic() + 180
        while not client.call("core.health")["embedder"].get("loaded") and time.monotonic() < deadline:
            time.sleep(0.2)


def _start_daemon(home: Path, token: str) -> tuple[subprocess.Popen[bytes], int]:
    env = {**os.environ, "MEMOS_BRIDGE_HOME": str(home), "MEMOS_BRIDGE_TOKEN": token}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memos_bridge", "serve", "--tcp", "127.0.0.1:0", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        match = re.search(r"listening on \S+:(\d+)", line)
        if match:
            return proc, int(match.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("the daemon did not start")


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux `/proc`; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Worker(threading.Thread):
    """One host: its own connection and session, M turn pairs, latencies per call."""

    def __init__(
        self, index: int, port: int, token: str, turns: int, barrier: threading.Barrier, think_ms: float = 0.0
    ) -> None:
        super().__init__(daemon=True)
        self.index, self.port, self.token, self.turns, self.barrier = index, port, token, turns, barrier
        self.think_ms = think_ms
        self.rng = random.Random(index)
        self.start_ms: list[float] = []
        self.end_ms: list[float] = []
        self.errors: list[str] = []
        self.acknowledged: list[str] = []

    def run(self) -> None:
        try:
            client = ServiceClient.connect_tcp("127.0.0.1", self.port, token=self.token)
        except Exception as exc:
            self.errors.append(f"connect: {exc!r}")
            self.barrier.wait()
            return
        with client:
            session = client.call("session.open", {"agent": "bench"})["sessionId"]
            self.barrier.wait()
            ts = 1_700_000_000_000 + self.index * 10_000_000
            for turn in range(self.turns):
                topic = TOPICS[(self.index + turn // 3) % len(TOPICS)]
                text = f"{'new task: ' if turn % 3 == 0 else ''}{topic} (client {self.index}, turn {turn})"
                ts += 60_000
                try:
                    t0 = time.perf_counter()
                    started = client.call(
                        "turn.start", {"agent": "bench", "sessionId": session, "userText": text, "ts": ts}, timeout=120
                    )
                    self.start_ms.append((time.perf_counter() - t0) * 1000)
                    if self.think_ms:  # the agent's own work between the two calls (its LLM, its tools)
                        time.sleep(self.rng.uniform(0, self.think_ms) / 1000)
                    t0 = time.perf_counter()
                    ended = client.call("turn.end", _turn_end(session, started, topic, ts), timeout=120)
                    self.end_ms.append((time.perf_counter() - t0) * 1000)
                    self.acknowledged += [t for t in ended.get("traceIds", []) if t]
                except Exception as exc:
                    self.errors.append(repr(exc))


def _turn_end(session: str, started: dict[str, Any], topic: str, ts: int) -> dict[str, Any]:
    calls = [
        {"name": "bash", "input": {"cmd": f"grep -rn '{topic.split()[1]}' ."}, "output": f"3 matches for {topic}"},
        {"name": "read_file", "input": {"path": "README.md"}, "output": f"notes about {topic} and its owners"},
        {"name": "bash", "input": {"cmd": "make test"}, "output": "12 passed, 0 failed in 4.2 s"},
    ]
    return {
        "agent": "bench",
        "sessionId": session,
        "episodeId": started["query"]["episodeId"],
        "agentText": f"Done: {topic}. Ran the checks and wrote a short summary of what changed.",
        "toolCalls": calls,
        "ts": ts + 30_000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--turns", type=int, default=6, help="turn pairs per client")
    parser.add_argument("--idle-turns", type=int, default=20, help="turn.start calls of the idle baseline")
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="each agent works a random 0..THINK ms between turn.start and turn.end (default 0: back to back)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    token = secrets.token_hex(16)
    home = Path(tempfile.mkdtemp(prefix="memos-load-")) / "home"
    proc, port = _start_daemon(home, token)
    try:
        _wait_until_warm(port, token)
        idle = Worker(-1, port, token, args.idle_turns + WARMUP_TURNS, threading.Barrier(1))
        idle.run()
        del idle.start_ms[:WARMUP_TURNS]  # first calls pay for caches and the index load
        barrier = threading.Barrier(args.clients)
        workers = [Worker(i, port, token, args.turns, barrier, args.think_ms) for i in range(args.clients)]
        # This process's own garbage collector must not pause its 50 client threads mid-call: each client
        # keeps the service's event notifications, and a full collection of that heap took 100-300 ms that
        # the clocks below would count as service latency. Nothing here builds reference cycles that matter
        # for a run of this length.
        with collector_paused():
            cpu_before = _cpu_seconds(proc.pid)
            client_cpu_before = time.process_time()
            began = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            wall = time.perf_counter() - began
        cpu_after = _cpu_seconds(proc.pid)
        client_cpu_s = time.process_time() - client_cpu_before
        cpu_s = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
        with ServiceClient.connect_tcp("127.0.0.1", port, token=token) as operator:
            operator.call("memory.flush", {}, timeout=600)
            acknowledged = {t for w in [idle, *workers] for t in w.acknowledged}
            stored: set[str] = set()
            offset = 0
            while True:
                page = operator.call("memory.list_traces", {"namespace": "*", "limit": 500, "offset": offset})
                stored |= {t["id"] for t in page["traces"]}
                if len(page["traces"]) < 500:
                    break
                offset += 500
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    starts = [ms for w in workers for ms in w.start_ms]
    # Every client's first turn.start leaves the barrier at the same instant (a thundering herd of N
    # calls on a 2-core machine); the later ones arrive as the clients' own pace spreads them out.
    herd = [w.start_ms[0] for w in workers if w.start_ms]
    steady = [ms for w in workers for ms in w.start_ms[1:]]
    ends = [ms for w in workers for ms in w.end_ms]
    errors = [e for w in [idle, *workers] for e in w.errors]
    idle_p95 = _percentile(idle.start_ms, 0.95)
    idle_p50 = statistics.median(idle.start_ms)
    loaded_p95 = _percentile(starts, 0.95)
    result = {
        "clients": args.clients,
        "turnsPerClient": args.turns,
        "thinkMs": args.think_ms,
        "idleTurnStart": {"p50": round(idle_p50, 1), "p95": round(idle_p95, 1)},
        "turnStart": {"p50": round(_percentile(starts, 0.5), 1), "p95": round(loaded_p95, 1)},
        "turnStartFirstTurn": {"p50": round(_percentile(herd, 0.5), 1), "p95": round(_percentile(herd, 0.95), 1)},
        "turnStartLaterTurns": {
            "p50": round(_percentile(steady, 0.5), 1),
            "p95": round(_percentile(steady, 0.95), 1),
        },
        "turnStartP95ByTurn": [
            round(_percentile([w.start_ms[i] for w in workers if len(w.start_ms) > i], 0.95), 1)
            for i in range(args.turns)
        ],
        "turnEnd": {"p50": round(_percentile(ends, 0.5), 1), "p95": round(_percentile(ends, 0.95), 1)},
        "turnPairsPerSecond": round(len(ends) / wall, 2),
        "wallSeconds": round(wall, 1),
        "errors": len(errors),
        "lostTraces": len(acknowledged - stored),
        "turnStartP95LoadedOverIdle": round(loaded_p95 / idle_p95, 2) if idle_p95 else None,
        "laterTurnsP95OverIdle": round(_percentile(steady, 0.95) / idle_p95, 2) if idle_p95 and steady else None,
        "herdP95OverOneAtATime": round(_percentile(herd, 0.95) / (0.95 * len(herd) * idle_p50), 2)
        if herd and idle_p50
        else None,
        "serviceCpuMsPerPair": round(cpu_s * 1000 / len(ends), 1) if cpu_s is not None and ends else None,
        "serviceCpuCoresBusy": round(cpu_s / wall, 2) if cpu_s is not None else None,
        "benchClientsCpuCoresBusy": round(client_cpu_s / wall, 2),
        "cores": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    for error in errors[:5]:
        print("error:", error, file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    met = not errors and not result["lostTraces"] and (result["laterTurnsP95OverIdle"] or 99) <= 3
    print(f"target (0 errors, 0 lost traces, steady-state ratio <= 3): {'met' if met else 'NOT met'}")
    herd_ratio = result["herdP95OverOneAtATime"]
    if herd_ratio is not None:
        verdict = "no slower than" if herd_ratio <= 1 else "slower than"
        print(f"herd of {len(herd)} first calls: p95 {herd_ratio}x one-at-a-time at idle speed ({verdict} that)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
