"""Reference answers for the skerrydown_landings family (standard library only).

House conventions:
- a season runs from 1 April to 31 March and is named by the year it starts in;
- a weight of 9999 is a placeholder for a landing not yet weighed and is left out of weight figures.
"""

from __future__ import annotations

import csv
from pathlib import Path

LEDGER = "landings_ledger.csv"
NOT_WEIGHED = 9999.0


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with open(Path(data_dir) / LEDGER, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _in_season(row: dict[str, str], season: int, naive: bool) -> bool:
    year, month = int(row["landed"][:4]), int(row["landed"][5:7])
    if naive:
        return year == season
    return (year == season and month >= 4) or (year == season + 1 and month < 4)


def _weights(rows: list[dict[str, str]], naive: bool) -> list[float]:
    values = [float(r["net_kg"]) for r in rows]
    return values if naive else [v for v in values if v != NOT_WEIGHED]


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(data_dir)
    if task_id == "fc-1":
        return {"boxes_2024": sum(int(r["boxes"]) for r in rows if _in_season(r, 2024, naive))}
    if task_id in ("fc-2", "fc-4"):
        values = _weights([r for r in rows if r["species"] == "hake"], naive)
        return {"hake_mean_kg": round(sum(values) / len(values), 2)}
    if task_id == "fc-3":
        return {"pollack_boxes": sum(int(r["boxes"]) for r in rows if r["species"] == "pollack")}
    if task_id == "fc-5":
        return {"largest_cod_kg": max(_weights([r for r in rows if r["species"] == "cod"], naive))}
    if task_id == "fc-6":
        values = _weights([r for r in rows if _in_season(r, 2024, naive)], naive)
        return {"net_kg_2024": round(sum(values), 1)}
    raise KeyError(task_id)
