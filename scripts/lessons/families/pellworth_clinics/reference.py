"""Reference answers for the pellworth_clinics family (Pellworth Clinics visit and lab-result exports).

House conventions: `visit_date` is written day-first (DD/MM/YYYY); `released_at` is recorded in UTC while the
clinics run on local time UTC+10:00 (no daylight saving). The naive answer reads `visit_date` month-first
(MM/DD/YYYY) and takes `released_at` as local time.
"""

from __future__ import annotations

import csv
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

VISITS = "pellworth_visits_2024.csv"
LAB = "pellworth_lab_results_2024.csv"
LOCAL_OFFSET = timedelta(hours=10)


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _visit_date(row: dict[str, str], naive: bool) -> date:
    fmt = "%m/%d/%Y" if naive else "%d/%m/%Y"
    return datetime.strptime(row["visit_date"], fmt).date()


def _released(row: dict[str, str], naive: bool) -> datetime:
    stamp = datetime.strptime(row["released_at"], "%Y-%m-%d %H:%M")
    return stamp if naive else stamp + LOCAL_OFFSET


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    if task_id == "pc-1":
        days = [_visit_date(r, naive) for r in _rows(data_dir, VISITS)]
        return {"march_visits": sum(d.year == 2024 and d.month == 3 for d in days)}
    if task_id == "pc-2":
        stamps = [_released(r, naive) for r in _rows(data_dir, LAB)]
        return {"released_count": sum(s.date() == date(2024, 4, 8) for s in stamps)}
    if task_id == "pc-3":
        days = [_visit_date(r, naive) for r in _rows(data_dir, VISITS) if r["clinic"] == "Northgate"]
        return {"last_visit": max(days).isoformat()}
    if task_id == "pc-4":
        rows = _rows(data_dir, LAB)
        return {
            "march_visits": sum(_visit_date(r, naive).month == 3 for r in rows),
            "released_mar8": sum(_released(r, naive).date() == date(2024, 3, 8) for r in rows),
        }
    if task_id == "pc-5":
        stamps = [_released(r, naive) for r in _rows(data_dir, LAB) if r["clinic"] == "Harbour"]
        return {"morning_releases": sum(s.hour < 12 for s in stamps)}
    raise KeyError(task_id)
