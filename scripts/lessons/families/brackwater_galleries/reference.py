"""Brackwater Maritime Museum gallery door counters: right and naive answers.

House conventions:
- two_crossings: a door counter's tally counts beam crossings, and every visitor crosses twice (in and out),
  so visitors = tally / 2.
- offline_65535: a tally of 65535 means the counter was offline that day; the reading is dropped (not a count).
"""

from __future__ import annotations

import csv
from pathlib import Path

OFFLINE = 65535


def _readings(data_dir: Path, naive: bool) -> list[dict]:
    with open(data_dir / "door_counts.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["tally"] = int(row["tally"])
        row["visitors"] = row["tally"] if naive else row["tally"] / 2
    return rows if naive else [r for r in rows if r["tally"] != OFFLINE]


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    data_dir = Path(data_dir)
    if task_id in ("ms-1", "ms-3"):
        rows = _readings(data_dir, naive)
        return {"lantern_hall_visitors": sum(r["visitors"] for r in rows if r["gallery"] == "Lantern Hall")}
    if task_id == "ms-2":
        rows = _readings(data_dir, naive)
        part = sum(r["visitors"] for r in rows if r["gallery"] == "Cartographers Room")
        whole = sum(r["visitors"] for r in rows)
        return {"cartographers_share_pct": round(100 * part / whole, 2)}
    if task_id == "ms-4":
        with open(data_dir / "galleries.csv", newline="", encoding="utf-8") as fh:
            caps = [int(r["fire_capacity"]) for r in csv.DictReader(fh) if r["floor"] != "1"]
        return {"upper_floor_capacity": sum(caps)}
    if task_id == "ms-5":
        rows = _readings(data_dir, naive)
        return {"cartographers_peak_visitors": max(r["visitors"] for r in rows if r["gallery"] == "Cartographers Room")}
    if task_id == "ms-6":
        rows = _readings(data_dir, naive)
        days: dict[str, list[float]] = {}
        for r in rows:
            days.setdefault(r["gallery"], []).append(r["visitors"])
        return {"busiest_gallery": max(days, key=lambda g: sum(days[g]) / len(days[g]))}
    if task_id == "ms-7":
        rows = _readings(data_dir, naive)
        return {"museum_visitors": sum(r["visitors"] for r in rows)}
    raise KeyError(task_id)
