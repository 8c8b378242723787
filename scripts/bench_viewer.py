#!/usr/bin/env python3
"""How fast the viewer's pages are with a real amount of memory: server time and weight per page.

    python scripts/bench_viewer.py                    # 10,000 steps + 1,000 remembered memories
    python scripts/bench_viewer.py --steps 2000 --out docs/eval/viewer.json

Builds a data home the way an export/import would carry it (one real export as the template, its records
cloned with fresh ids and varied text, imported through `memory.import`, which embeds and indexes everything),
starts `memos-bridge serve --viewer`, then requests every page `--repeat` times and prints, per page, the
median and worst server time (the `Server-Timing: app` header: method calls plus rendering) and the page's
bytes, next to the same page on an empty home measured in the same run. Target: every page under 300 ms
server time at 10k memories.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from memos_bridge.client import ServiceClient
from memos_bridge.ids import new_id

PAGES = [
    "/",
    "/memories",
    "/memories?kind=trace",
    "/memories?q=parcel+weights+kilograms",
    "/tasks",
    "/experiences",
    "/skills",
    "/world",
    "/analytics",
    "/retrieval",
    "/settings",
]
TOPICS = ["parcel weights", "TLS certificate", "payments test", "incident report", "schema migration", "backup job"]
TOOLS = ["bash", "read_file", "python", "write_file"]


def _serve(home: Path) -> tuple[ServiceClient, str]:
    log = home.parent / f"{home.name}.log"
    client = ServiceClient.spawn(home, extra_args=["--viewer", "127.0.0.1:0"], stderr=log.open("wb"))
    client.call("core.health")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"viewer on (http://\S+)", log.read_text())
        if found:
            return client, found.group(1).rstrip("/")
        time.sleep(0.1)
    raise SystemExit("the viewer did not start")


def _template(work: Path) -> dict[str, dict[str, Any]]:
    """One record of each kind, from a real export (so the clones always match the current schema)."""
    with ServiceClient.spawn(work / "template") as client:
        session = client.call("session.open", {"agent": "bench"})["sessionId"]
        client.call("memory.remember", {"content": "template memory", "sessionId": session})
        started = client.call("turn.start", {"agent": "bench", "sessionId": session, "userText": "t", "ts": 1000})
        end = {"agent": "bench", "sessionId": session, "episodeId": started["query"]["episodeId"], "ts": 1001}
        client.call("turn.end", {**end, "agentText": "done", "toolCalls": [{"name": "bash", "output": "ok"}]})
        path = Path(client.call("memory.export", {"path": str(work / "template.jsonl")})["path"])
    records: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        records.setdefault(record.get("kind", "header"), record)
    return records


def _seed_file(work: Path, steps: int, memories: int, rng: random.Random) -> Path:
    template = _template(work)
    header = dict(template["header"])
    session = dict(template["session"]["row"], id=new_id("session"))
    now = int(time.time() * 1000)
    lines = [header, {"kind": "session", "row": session}]
    per_task = 4
    for task in range(steps // per_task):
        topic = rng.choice(TOPICS)
        ts = now - rng.randint(0, 29) * 86_400_000 - rng.randint(0, 86_000_000)
        episode_id = new_id("episode")
        trace_ids = [new_id("trace") for _ in range(per_task)]
        text = f"{topic}: task {task} for client {rng.randint(1, 500)}"
        lines.append(
            {
                "kind": "episode",
                "row": {
                    **template["episode"]["row"],
                    "id": episode_id,
                    "session_id": session["id"],
                    "started_at": ts,
                    "trace_ids_json": trace_ids,
                },
            }
        )
        lines.append(
            {
                "kind": "turn",
                "row": {
                    **template["turn"]["row"],
                    "session_id": session["id"],
                    "episode_id": episode_id,
                    "turn_id": ts,
                    "user_text": text,
                    "started_at": ts,
                    "ended_at": ts + 1,
                },
            }
        )
        for index, trace_id in enumerate(trace_ids):
            tool = rng.choice(TOOLS)
            summary = f"{text}: {tool} step {index} found {rng.randint(1, 999)} rows about {topic}"
            lines.append(
                {
                    "kind": "trace",
                    "row": {
                        **template["trace"]["row"],
                        "id": trace_id,
                        "episode_id": episode_id,
                        "session_id": session["id"],
                        "ts": ts + index,
                        "turn_id": ts,
                        "step_index": index,
                        "step_key": new_id("trace"),
                        "user_text": text,
                        "summary": summary,
                        "tool_calls_json": [{"name": tool, "output": summary}],
                    },
                }
            )
    for number in range(memories):
        topic = rng.choice(TOPICS)
        content = f"Fact {number} about the {topic}: value {rng.randint(1, 10_000)} in unit {rng.choice('ABCDEFG')}"
        lines.append(
            {
                "kind": "memory",
                "row": {
                    **template["memory"]["row"],
                    "id": new_id("memory"),
                    "content": content,
                    "created_at": now - rng.randint(0, 29) * 86_400_000,
                },
            }
        )
    header["counts"] = dict(Counter(str(line["kind"]) for line in lines[1:]))  # the import checks them
    path = work / "seed.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def _measure(url: str, repeat: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=url, timeout=120) as http:
        for page in PAGES:
            times, size = [], 0
            for _ in range(repeat):
                response = http.get(page)
                response.raise_for_status()
                timing = re.search(r"app;dur=([\d.]+)", response.headers.get("server-timing", ""))
                times.append(float(timing.group(1)) if timing else float("nan"))
                size = len(response.content)
            out[page] = {"medianMs": round(statistics.median(times), 1), "maxMs": round(max(times), 1), "bytes": size}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000, help="captured steps (traces)")
    parser.add_argument("--memories", type=int, default=1_000, help="remembered memories")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="memos-viewer-bench-"))

    empty_client, empty_url = _serve(work / "empty")
    try:
        empty = _measure(empty_url, args.repeat)
    finally:
        empty_client.close()

    seed = _seed_file(work, args.steps, args.memories, random.Random(7))
    client, url = _serve(work / "full")
    try:
        began = time.perf_counter()
        print(f"importing {args.steps} steps and {args.memories} memories…", file=sys.stderr, flush=True)
        imported = client.call("memory.import", {"path": str(seed)}, timeout=3600)["imported"]
        client.call("memory.flush", {}, timeout=600)
        print(f"imported {imported} in {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
        full = _measure(url, args.repeat)
    finally:
        client.close()

    print(f"{'page':40} {'empty ms':>9} {'full ms':>9} {'worst':>8} {'KB':>7}")
    for page in PAGES:
        row = full[page]
        before = empty[page]["medianMs"]
        print(f"{page:40} {before:9.1f} {row['medianMs']:9.1f} {row['maxMs']:8.1f} {row['bytes'] / 1024:7.1f}")
    worst = max(row["maxMs"] for row in full.values())
    met = worst < 300
    print(
        f"target (every page under 300 ms server time at {args.steps + args.memories} memories): "
        f"{'met' if met else 'NOT met'} (worst {worst:.0f} ms)"
    )
    if args.out:
        result = {"steps": args.steps, "memories": args.memories, "imported": imported, "empty": empty, "full": full}
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
