"""Reference answers for the coralbay_dive_centre family (Coralbay Dive Centre, Queensland).

House conventions:
  utc   -- `logged_at` in the dive log is UTC; the centre's day is Queensland time, UTC+10 (AEST, no DST).
  excel -- `trip_day` in the bookings export is an Excel serial date: day 0 is 1899-12-30.
  week  -- the centre's dive weeks run Sunday to Saturday and are named by their Sunday.
naive=True takes the UTC date as the day, reads the serial as "day 1 = 1900-01-01", and uses ISO
(Monday-to-Sunday) weeks.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections import defaultdict
from pathlib import Path
from typing import Any

DIVES = "coralbay_dive_log_2024-03.csv"
BOOKINGS = "coralbay_bookings_2024-03.csv"
LOCAL_OFFSET = dt.timedelta(hours=10)


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with (data_dir / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _dive_day(row: dict[str, str], naive: bool) -> dt.date:
    stamp = dt.datetime.fromisoformat(row["logged_at"])
    return stamp.date() if naive else (stamp + LOCAL_OFFSET).date()


def _trip_day(row: dict[str, str], naive: bool) -> dt.date:
    serial = int(row["trip_day"])
    epoch = dt.date(1899, 12, 31) if naive else dt.date(1899, 12, 30)
    return epoch + dt.timedelta(days=serial)


def _week_start(day: dt.date, naive: bool) -> dt.date:
    if naive:  # ISO week: Monday
        return day - dt.timedelta(days=day.weekday())
    return day - dt.timedelta(days=(day.weekday() + 1) % 7)  # Sunday


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    if task_id == "cd-1":
        target = dt.date(2024, 3, 10)
        dives = [r for r in _rows(data_dir, DIVES) if _dive_day(r, naive) == target]
        return {"dives": len(dives), "divers": sum(int(r["divers"]) for r in dives)}
    if task_id == "cd-2":
        target = dt.date(2024, 3, 14)
        rows = [r for r in _rows(data_dir, BOOKINGS) if _trip_day(r, naive) == target]
        return {"booked_divers": sum(int(r["party_size"]) for r in rows)}
    if task_id == "cd-3":
        week = _week_start(dt.date(2024, 3, 13), naive)
        rows = [r for r in _rows(data_dir, DIVES) if _week_start(_dive_day(r, naive), naive) == week]
        return {"divers": sum(int(r["divers"]) for r in rows)}
    if task_id == "cd-4":
        per_day: dict[dt.date, int] = defaultdict(int)
        for r in _rows(data_dir, BOOKINGS):
            per_day[_trip_day(r, naive)] += int(r["party_size"])
        best = max(sorted(per_day), key=lambda d: per_day[d])
        return {"date": best.isoformat(), "booked_divers": per_day[best]}
    if task_id == "cd-5":
        per_week: dict[dt.date, int] = defaultdict(int)
        for r in _rows(data_dir, DIVES):
            if r["boat"] != "Reef Runner":
                continue
            per_week[_week_start(_dive_day(r, naive), naive)] += int(r["divers"])
        best = max(sorted(per_week), key=lambda d: per_week[d])
        return {"week_start": best.isoformat(), "divers": per_week[best]}
    raise KeyError(task_id)
