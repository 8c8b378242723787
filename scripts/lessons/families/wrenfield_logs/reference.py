"""Reference answers for the wrenfield_logs family (Wrenfield Telecom service logs and host inventory).

House conventions:
- a service log is split by rotation: `gateway.log.1`, `gateway.log.2`, ... are older parts of the same
  log as `gateway.log` and must be read with it;
- the `ts` field of a log line is a Unix epoch timestamp in milliseconds (UTC);
- hosts whose name ends in `-old` are decommissioned and are left out of host counts and per-host stats.

The naive answer reads only the file named in the prompt, takes `ts` as seconds, and counts `-old` hosts.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections import Counter
from pathlib import Path
from typing import Any

LINE = re.compile(r'^ts=(\d+) host=(\S+) level=(\S+) msg="(.*)"$')


def _log_files(data_dir: Path, name: str, naive: bool) -> list[Path]:
    """The live log and, unless naive, its rotated parts `name.1`, `name.2`, ... (oldest first)."""
    live = data_dir / name
    if naive:
        return [live]
    rotated = [p for p in data_dir.glob(f"{name}.*") if p.name[len(name) + 1 :].isdigit()]
    rotated.sort(key=lambda p: int(p.name[len(name) + 1 :]), reverse=True)
    return [*rotated, live]


def _entries(data_dir: Path, name: str, naive: bool) -> list[tuple[int, str, str, str]]:
    rows: list[tuple[int, str, str, str]] = []
    for path in _log_files(data_dir, name, naive):
        for line in path.read_text(encoding="utf-8").splitlines():
            m = LINE.match(line.strip())
            if m:
                rows.append((int(m.group(1)), m.group(2), m.group(3), m.group(4)))
    rows.sort(key=lambda r: r[0])
    return rows


def _seconds(ts_delta: int, naive: bool) -> float:
    return float(ts_delta) if naive else ts_delta / 1000


def _active(host: str, naive: bool) -> bool:
    return naive or not host.lower().endswith("-old")


def _top(counter: Counter[str]) -> tuple[str, int]:
    host, count = max(counter.items(), key=lambda kv: (kv[1], kv[0]))
    return host, count


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    data_dir = Path(data_dir)
    if task_id == "wf-1":
        errors = Counter(h for _, h, lvl, _ in _entries(data_dir, "gateway.log", naive) if lvl == "ERROR")
        host, _ = _top(errors)
        return {"errors": sum(errors.values()), "top_host": host}
    if task_id == "wf-2":
        rows = _entries(data_dir, "auth.log", naive)
        error_ts = [ts for ts, _, lvl, _ in rows if lvl == "ERROR"]
        recovered = next(ts for ts, _, _, msg in rows if msg == "ldap backend recovered" and ts > error_ts[0])
        gaps = [b - a for a, b in itertools.pairwise(error_ts)]
        return {
            "outage_minutes": round(_seconds(recovered - error_ts[0], naive) / 60, 2),
            "longest_error_gap_s": round(_seconds(max(gaps), naive), 2),
        }
    if task_id == "wf-3":
        with open(data_dir / "hosts.csv", newline="", encoding="utf-8") as fh:
            hosts = [r for r in csv.DictReader(fh) if _active(r["hostname"], naive)]
        regions = Counter(r["region"] for r in hosts)
        region, count = _top(regions)
        return {"total_hosts": len(hosts), "top_region": region, "top_region_hosts": count}
    if task_id == "wf-4":
        rows = _entries(data_dir, "gateway.log", naive)
        span = _seconds(rows[-1][0] - rows[0][0], naive) / 3600
        return {"entries": len(rows), "span_hours": round(span, 2)}
    if task_id == "wf-5":
        errors = Counter(
            h for _, h, lvl, _ in _entries(data_dir, "radius.log", naive) if lvl == "ERROR" and _active(h, naive)
        )
        host, count = _top(errors)
        return {"top_host": host, "errors": count}
    raise KeyError(task_id)
