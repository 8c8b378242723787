"""Reference answers for the weighbridge-ticket family.

House conventions:
- net_divisions: net_wt counts 10 kg weighbridge divisions, not kilograms (tonnes = net_wt * 10 / 1000).
- unweighed_9999: a net_wt of 9999 is a placeholder for a load that was not weighed; such tickets are left out of
  every weight sum, mean and maximum.
"""

from __future__ import annotations

import csv
from pathlib import Path

SENTINEL = 9999


def _rows(data_dir: Path) -> list[dict]:
    with open(data_dir / "weighbridge_tickets.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["net"] = int(row["net_wt"])
    return rows


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(Path(data_dir))
    weighed = rows if naive else [r for r in rows if r["net"] != SENTINEL]

    def tonnes(value: float) -> float:
        return value / 1000 if naive else value * 10 / 1000

    if task_id == "wr-1":
        return {"total_tonnes": round(tonnes(sum(r["net"] for r in weighed if r["tip_date"] == "2025-03-04")), 2)}
    if task_id in ("wr-2", "wr-3"):
        heaviest = max(weighed, key=lambda r: r["net"])
        return {"vehicle": heaviest["vehicle"]}
    if task_id == "wr-4":
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["route"]] = counts.get(r["route"], 0) + 1
        route = max(counts, key=counts.get)
        return {"route": route, "tickets": counts[route]}
    if task_id == "wr-5":
        garden = sum(r["net"] for r in weighed if r["stream"] == "GRN")
        return {"garden_share": round(garden / sum(r["net"] for r in weighed), 4)}
    if task_id == "wr-6":
        loads = [r["net"] for r in weighed if r["stream"] == "REF" and r["route"] == "NTH-1"]
        return {"mean_tonnes": round(tonnes(sum(loads) / len(loads)), 3)}
    if task_id == "wr-7":
        return {"recycling_tonnes": round(tonnes(sum(r["net"] for r in weighed if r["stream"] == "REC")), 2)}
    raise KeyError(task_id)
