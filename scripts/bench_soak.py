#!/usr/bin/env python3
"""Soak test: the service under a steady realistic workload for a long time; does its memory keep growing?

    python scripts/bench_soak.py                         # 60 minutes, 4 hosts, learning on
    python scripts/bench_soak.py --minutes 10 --hosts 2  # a shorter run
    python scripts/bench_soak.py --out docs/eval/soak.json

The service is spawned on an empty home and `--hosts` hosts work at once through the tasks of
`bench_transport.py`'s workload (five turns of four steps, each turn a `turn.start` then a `turn.end`, a pause
of `--think-s` between turns as an agent thinks, a verdict on every fourth task), until `--minutes` have
passed. Every `--sample-s` seconds the script records the service's resident memory (RSS), the traces stored
and the `turn.start` latencies of that interval, and prints a line.

What "no growth" means here: a memory service's data grows, and part of it is meant to stay in memory (the
384-float vectors of the search indexes, one per step embedded once, and the SQLite page cache up to its
limit). So the figures are RSS growth per hour and per 1,000 stored steps over the second half of the run
(after the caches and the model's arenas have warmed), beside what the vector indexes grew by per 1,000
steps (`core.health.process.vectorMib`, sampled with the RSS); growth well above that, or `turn.start`
latency rising with time rather than with size, would point to a leak.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_transport import STEPS_PER_TURN, Workload, dist, machine, machine_line, pct, rss_mib

from memos_bridge.client import ServiceClient


@dataclass
class Shared:
    """What the host threads report to the sampler."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    turn_start_ms: list[float] = field(default_factory=list)
    steps: int = 0
    errors: list[str] = field(default_factory=list)

    def take_latencies(self) -> list[float]:
        with self.lock:
            taken, self.turn_start_ms = self.turn_start_ms, []
        return taken


def host(client: ServiceClient, number: int, hosts: int, deadline: float, think_s: float, shared: Shared) -> None:
    """One host: a session, then tasks `number`, `number + hosts`, … until the deadline."""
    workload = Workload(seed=11, ts0=int(time.time() * 1000))
    try:
        session = client.call("session.open", {"agent": "bench", "meta": {"host": f"soak-{number}"}})["sessionId"]
        task_number = number
        while time.monotonic() < deadline:
            task = workload.task(task_number)
            task_number += hosts
            episode = client.call("episode.open", {"sessionId": session, "userMessage": task.turns[0]["userText"]})
            episode_id = episode["episodeId"]
            for turn in task.turns:
                started = time.perf_counter()
                client.call(
                    "turn.start",
                    {
                        "agent": "bench",
                        "sessionId": session,
                        "episodeId": episode_id,
                        "userText": turn["userText"],
                        "ts": turn["ts"],
                    },
                    timeout=120,
                )
                elapsed = (time.perf_counter() - started) * 1000
                time.sleep(think_s)
                client.call("turn.end", {**turn, "sessionId": session, "episodeId": episode_id}, timeout=300)
                with shared.lock:
                    shared.turn_start_ms.append(elapsed)
                    shared.steps += STEPS_PER_TURN
            client.call("episode.close", {"episodeId": episode_id})
            if task.feedback is not None:
                client.call("feedback.submit", {**task.feedback, "episodeId": episode_id}, timeout=300)
    except Exception as exc:  # reported at the end; the other hosts go on
        with shared.lock:
            shared.errors.append(f"host {number}: {type(exc).__name__}: {exc}")


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (nan with fewer than two points)."""
    if len(xs) < 2:
        return math.nan
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return math.nan if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the workload runs")
    parser.add_argument("--hosts", type=int, default=4, help="hosts working at once")
    parser.add_argument("--think-s", type=float, default=0.5, help="pause between a turn.start and its turn.end")
    parser.add_argument("--sample-s", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--learning", choices=("on", "off"), default="on", help="off: lightweight mode")
    parser.add_argument("--out", help="write the samples and figures as JSON to this file")
    args = parser.parse_args()

    info = machine()
    print(
        f"memos-bridge soak: {args.minutes:g} min, {args.hosts} hosts, think {args.think_s:g} s, "
        f"learning {args.learning}"
    )
    print(machine_line(info))
    env = {} if args.learning == "on" else {"MEMOS_BRIDGE_LIGHTWEIGHT": "true"}
    samples: list[dict[str, Any]] = []
    shared = Shared()
    with tempfile.TemporaryDirectory() as home:
        client = ServiceClient.spawn(home, env=env)
        client.call("core.health")
        proc = client.process
        assert proc is not None
        started = time.monotonic()
        deadline = started + args.minutes * 60
        threads = [
            threading.Thread(target=host, args=(client, n, args.hosts, deadline, args.think_s, shared), daemon=True)
            for n in range(args.hosts)
        ]
        for thread in threads:
            thread.start()
        print(f"{'min':>6} {'steps':>8} {'RSS MiB':>8} {'turn.start p50':>15} {'p95 ms':>7}")
        while any(thread.is_alive() for thread in threads):
            time.sleep(min(args.sample_s, max(0.5, deadline - time.monotonic() + 1)))
            latencies = shared.take_latencies()
            with shared.lock:
                steps = shared.steps
            sample = {
                "minutes": round((time.monotonic() - started) / 60, 2),
                "steps": steps,
                "rssMiB": round(rss_mib(proc.pid), 1),
                "vectorMiB": client.call("core.health")["process"]["vectorMib"],
                "turnStartMs": dist(latencies),
            }
            samples.append(sample)
            print(
                f"{sample['minutes']:6.1f} {steps:8,} {sample['rssMiB']:8.0f} "
                f"{pct(latencies, 50):15.1f} {pct(latencies, 95):7.1f}",
                flush=True,
            )
        health = client.call("core.health")
        client.close()

    half = [s for s in samples if s["minutes"] >= args.minutes / 2] or samples
    per_hour = slope([s["minutes"] / 60 for s in half], [s["rssMiB"] for s in half])
    per_k_steps = slope([s["steps"] / 1000 for s in half], [s["rssMiB"] for s in half])
    vectors_per_k = slope([s["steps"] / 1000 for s in half], [s["vectorMiB"] for s in half])
    latency_per_hour = slope(
        [s["minutes"] / 60 for s in half if s["turnStartMs"]["n"]],
        [s["turnStartMs"]["p50"] for s in half if s["turnStartMs"]["n"]],
    )
    figures = {
        "steps": samples[-1]["steps"] if samples else 0,
        "rssFirstMiB": samples[0]["rssMiB"] if samples else None,
        "rssLastMiB": samples[-1]["rssMiB"] if samples else None,
        "secondHalfRssMiBPerHour": round(per_hour, 1),
        "secondHalfRssMiBPer1kSteps": round(per_k_steps, 2),
        "vectorIndexMiBPer1kSteps": round(vectors_per_k, 2),
        "secondHalfTurnStartP50MsPerHour": round(latency_per_hour, 1),
        "errors": shared.errors,
    }
    print(
        f"second half: RSS {per_hour:+.1f} MiB/hour, {per_k_steps:+.2f} MiB per 1,000 steps "
        f"(the vector indexes need {vectors_per_k:.2f}); turn.start p50 {latency_per_hour:+.1f} ms/hour; "
        f"{figures['steps']:,} steps, errors {len(shared.errors)}"
    )
    process = health.get("process") if isinstance(health, dict) else None
    if process:
        print(
            f"heap trims: {process.get('heapTrims', 0):,}, {process.get('heapReleasedMib', 0):,.0f} MiB returned "
            "to the system in all (core.health.process)"
        )
    for error in shared.errors:
        print(f"  {error}")
    if args.out:
        result = {
            "args": vars(args),
            "machine": info,
            "python": platform.python_version(),
            "samples": samples,
            "figures": figures,
            "learning": health.get("learning") if isinstance(health, dict) else None,
            "process": process,
        }
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 1 if shared.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
