"""Reference answers for the clinic_visits family (Harbourside Family Clinic).

House conventions: `checked_in` timestamps are UTC while the clinic works in local time, UTC+10
(Brisbane, no daylight saving); `referral_date` is written day-first, DD/MM/YYYY.
The naive answer uses the timestamps as local clock times and reads dates month-first (MM/DD/YYYY).
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

OFFSET = dt.timedelta(hours=10)


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _local(value: str, naive: bool) -> dt.datetime:
    stamp = dt.datetime.strptime(value, "%Y-%m-%d %H:%M")
    return stamp if naive else stamp + OFFSET


def _date(value: str, naive: bool) -> dt.date:
    return dt.datetime.strptime(value, "%m/%d/%Y" if naive else "%d/%m/%Y").date()


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    visits = _rows(data_dir, "harbourside_visits_2024.csv")
    referrals = _rows(data_dir, "harbourside_referrals_2024.csv")
    if task_id == "cv-1":
        day = dt.date(2024, 3, 8)
        return {"visit_count": sum(_local(v["checked_in"], naive).date() == day for v in visits)}
    if task_id == "cv-2":
        dates = [_date(r["referral_date"], naive) for r in referrals]
        return {"april_referrals": sum(d.year == 2024 and d.month == 4 for d in dates)}
    if task_id == "cv-3":
        times = [_local(v["checked_in"], naive) for v in visits]
        return {
            "early_visits": sum(t.hour < 9 for t in times),
            "last_checkin": max(t.strftime("%H:%M") for t in times),
        }
    if task_id == "cv-4":
        dated = sorted((_date(r["referral_date"], naive), r["referral_id"]) for r in referrals)
        return {"first_referral": dated[0][1], "span_days": (dated[-1][0] - dated[0][0]).days}
    if task_id == "cv-5":
        referred = {r["patient_id"]: _date(r["referral_date"], naive) for r in referrals}
        same = sum(
            1
            for v in visits
            if v["patient_id"] in referred and _local(v["checked_in"], naive).date() == referred[v["patient_id"]]
        )
        return {"same_day_visits": same}
    raise KeyError(task_id)
