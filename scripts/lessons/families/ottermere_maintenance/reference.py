"""Reference answers for the Ottermere Property Services work-order family.

House conventions:
- utc_raised: `raised` timestamps are UTC; the portfolio runs on local time UTC+10 (no daylight saving),
  so a work order's day is the local day (add 10 hours before taking the date).
- labour_999: `labour_hrs` of 999 means the timesheet has not been entered yet; those rows are missing
  labour and are left out of labour sums and averages.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

EXPORT = "ottermere_wo_2024w03.csv"
LOCAL_OFFSET = timedelta(hours=10)
NOT_ENTERED = 999.0


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with open(data_dir / EXPORT, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _local_day(row: dict[str, str], naive: bool) -> str:
    stamp = datetime.strptime(row["raised"], "%Y-%m-%d %H:%M")
    return (stamp if naive else stamp + LOCAL_OFFSET).strftime("%Y-%m-%d")


def _labour(rows: list[dict[str, str]], naive: bool) -> list[float]:
    values = [float(r["labour_hrs"]) for r in rows]
    return values if naive else [v for v in values if v != NOT_ENTERED]


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(data_dir)
    if task_id in ("wo-1", "wo-2"):
        hours = _labour([r for r in rows if r["trade"] == "PLUMB"], naive)
        return {"mean_labour_hours": round(sum(hours) / len(hours), 2)}
    if task_id == "wo-3":
        picked = [r for r in rows if _local_day(r, naive) == "2024-01-16"]
        return {"parts_cost_total": round(sum(float(r["parts_cost"]) for r in picked), 2)}
    if task_id == "wo-4":
        picked = [r for r in rows if r["trade"] == "ELEC"]
        return {"elec_parts_total": round(sum(float(r["parts_cost"]) for r in picked), 2)}
    if task_id == "wo-5":
        hours = _labour([r for r in rows if r["trade"] == "CARP"], naive)
        return {"carpentry_labour_hours": round(sum(hours), 2)}
    if task_id == "wo-6":
        hours = _labour([r for r in rows if _local_day(r, naive) == "2024-01-18"], naive)
        return {"labour_hours_total": round(sum(hours), 2)}
    raise KeyError(task_id)
