"""Reference answers for the glimmerhook_crashes family (standard library only).

House conventions:
- uptime is counted in rendered frames at 60 frames per second, not in seconds;
- severity S1 is the most severe level (S4 the mildest).
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

EXPORT = "crash_export_0914.csv"
FPS = 60


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with open(Path(data_dir) / EXPORT, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _seconds(row: dict[str, str], naive: bool) -> float:
    value = float(row["uptime"])
    return value if naive else value / FPS


def _worst(naive: bool) -> str:
    return "S4" if naive else "S1"


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(data_dir)
    if task_id == "gm-1":
        hits = sum(1 for r in rows if r["sev"] == _worst(naive))
        return {"most_severe_pct": round(100.0 * hits / len(rows), 2)}
    if task_id in ("gm-2", "gm-3"):
        values = [_seconds(r, naive) for r in rows if r["platform"] == "handheld"]
        return {"handheld_mean_uptime_s": round(sum(values) / len(values), 2)}
    if task_id == "gm-4":
        scene, _ = Counter(r["scene"] for r in rows).most_common(1)[0]
        return {"top_scene": scene}
    if task_id == "gm-5":
        counts = Counter(r["build"] for r in rows if r["sev"] == _worst(naive))
        build, _ = counts.most_common(1)[0]
        return {"worst_build": build}
    if task_id == "gm-6":
        values = [_seconds(r, naive) for r in rows if r["sev"] == _worst(naive)]
        return {"most_severe_mean_uptime_s": round(sum(values) / len(values), 2)}
    raise KeyError(task_id)
