"""Reference answers for the kingsmere_render family (Kingsmere Render Farm job exports).

House conventions: `render_time` is in milliseconds (divide by 1000 for seconds, by 60000 for minutes);
rows whose `project` is TEST are internal test renders and are left out of every figure.
The naive answer reads `render_time` as seconds and keeps the TEST rows.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

JOBS = "kingsmere_jobs_2024.csv"


def _rows(data_dir: Path, naive: bool) -> list[dict[str, str]]:
    with open(data_dir / JOBS, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return rows if naive else [r for r in rows if r["project"] != "TEST"]


def _seconds(row: dict[str, str], naive: bool) -> float:
    value = float(row["render_time"])
    return value if naive else value / 1000


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    jobs = _rows(data_dir, naive)
    if task_id == "kr-1":
        total = sum(_seconds(r, naive) for r in jobs if r["project"] == "AURORA")
        return {"aurora_minutes": round(total / 60, 2)}
    if task_id == "kr-2":
        return {"total_cost_gbp": round(sum(float(r["cost"]) for r in jobs), 2)}
    if task_id == "kr-3":
        secs = [_seconds(r, naive) for r in jobs if r["node"] == "node-03"]
        return {"avg_seconds": round(sum(secs) / len(secs), 1)}
    if task_id == "kr-4":
        longest = max(_seconds(r, naive) for r in jobs if r["project"] == "BRAMBLE")
        return {"longest_seconds": round(longest, 1)}
    if task_id == "kr-5":
        return {"node04_frames": sum(int(r["frames"]) for r in jobs if r["node"] == "node-04")}
    raise KeyError(task_id)
