"""Reference answers for the Tavrin Air crew-roster family.

House conventions:
- utc_times: `report_at` timestamps are UTC; every crew member is based at the UTC+8 hub, and a duty's day is its
  base-local date (add 8 hours before taking the date).
- rest_sentinel: a `rest_prior_hrs` of -1 means the rest was not recorded; such rows are left out of rest figures.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

FILE = "duties.csv"
BASE_OFFSET = timedelta(hours=8)


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / FILE).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _day(row: dict[str, str], naive: bool) -> str:
    at = datetime.strptime(row["report_at"], "%Y-%m-%dT%H:%M")
    if not naive:
        at += BASE_OFFSET
    return at.date().isoformat()


def _rests(rows: list[dict[str, str]], naive: bool) -> list[float]:
    values = [float(r["rest_prior_hrs"]) for r in rows]
    return values if naive else [v for v in values if v != -1]


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(Path(data_dir))
    if task_id == "cr-1":
        return {"duty_hours": round(sum(float(r["duty_hrs"]) for r in rows if _day(r, naive) == "2024-09-14"), 2)}
    if task_id in ("cr-2", "cr-3"):
        rests = _rests([r for r in rows if r["rank"] == "FO"], naive)
        return {"mean_rest_hours": round(sum(rests) / len(rests), 2)}
    if task_id == "cr-4":
        return {"duty_hours": round(sum(float(r["duty_hrs"]) for r in rows if r["rank"] == "CPT"), 2)}
    if task_id == "cr-5":
        hours = [float(r["duty_hrs"]) for r in rows if _day(r, naive) == "2024-09-15"]
        return {"mean_duty_hours": round(sum(hours) / len(hours), 2)}
    if task_id == "cr-6":
        rests = _rests([r for r in rows if r["rank"] == "FA"], naive)
        return {"mean_rest_hours": round(sum(rests) / len(rests), 2)}
    if task_id == "cr-7":
        rests = _rests([r for r in rows if _day(r, naive) == "2024-09-14"], naive)
        return {"mean_rest_hours": round(sum(rests) / len(rests), 2)}
    raise KeyError(task_id)
