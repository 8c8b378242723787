"""Reference answers for the Nightjar Bakeries family."""

from __future__ import annotations

import csv
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

NEEDS = {
    "nj-1": {"bizday"},
    "nj-2": {"week"},
    "nj-3": {"promo_end", "bizday"},
    "nj-4": {"week", "bizday"},
    "nj-5": {"promo_end", "week"},
}


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with (data_dir / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _day(rung_at: str, ignore: set[str]) -> date:
    stamp = datetime.strptime(rung_at, "%Y-%m-%d %H:%M")
    if "bizday" not in ignore:
        stamp -= timedelta(hours=5)  # the business day turns over at 05:00
    return stamp.date()


def _week(anchor: date, ignore: set[str]) -> tuple[date, date]:
    first_weekday = 0 if "week" in ignore else 2  # Monday (ISO) vs Wednesday
    start = anchor - timedelta(days=(anchor.weekday() - first_weekday) % 7)
    return start, start + timedelta(days=6)


def _promo_days(promo: dict[str, str], ignore: set[str]) -> list[date]:
    start, end = date.fromisoformat(promo["start"]), date.fromisoformat(promo["end"])
    last = end if "promo_end" in ignore else end - timedelta(days=1)  # end is exclusive
    return [start + timedelta(days=i) for i in range((last - start).days + 1)]


def compute(task_id: str, data_dir: Path, ignore: set[str]) -> dict[str, Any]:
    sales = _rows(data_dir, "nightjar_pos_sales.csv")
    promos = {p["promo_code"]: p for p in _rows(data_dir, "nightjar_promos.csv")}

    def total(store: str, days: set[date]) -> list[float]:
        return [float(s["total"]) for s in sales if s["store"] == store and _day(s["rung_at"], ignore) in days]

    if task_id == "nj-1":
        return {"elm_total": round(sum(total("ELM", {date(2024, 3, 8)})), 2)}
    if task_id == "nj-2":
        start, end = _week(date(2024, 3, 11), ignore)
        days = {start + timedelta(days=i) for i in range(7)}
        return {"quay_week_total": round(sum(total("QUAY", days)), 2)}
    if task_id == "nj-3":
        picked = total("ELM", set(_promo_days(promos["HOTCROSS"], ignore)))
        return {"receipts": len(picked), "promo_total": round(sum(picked), 2)}
    if task_id == "nj-4":
        start, end = _week(date(2024, 3, 8), ignore)
        days = {start + timedelta(days=i) for i in range(7)}
        return {"elm_week_total": round(sum(total("ELM", days)), 2)}
    if task_id == "nj-5":
        start, end = _week(date(2024, 3, 8), ignore)
        overlap = sorted(d for d in _promo_days(promos["SPRINGLOAF"], ignore) if start <= d <= end)
        return {"overlap_days": len(overlap), "first_day": overlap[0].isoformat()}
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return compute(task_id, data_dir, set(NEEDS[task_id]) if naive else set())
