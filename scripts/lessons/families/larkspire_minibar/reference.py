"""Larkspire Hotel minibar and in-room dining charges: right and naive answers.

House conventions:
- business_day: the night audit closes at 04:00, so a charge posted between 00:00 and 03:59 belongs to the
  previous business date (business date = date of posted_at minus four hours).
- comped_status: rows whose status is ZC were comped (waived) and never billed; they are left out of totals
  and means.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

AUDIT_CUTOFF = dt.timedelta(hours=4)
COMPED = "ZC"


def _charges(data_dir: Path) -> list[dict]:
    with open(data_dir / "charges.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["amount"] = float(row["amount"])
        row["posted"] = dt.datetime.strptime(row["posted_at"], "%Y-%m-%d %H:%M")
    return rows


def _billed(rows: list[dict], naive: bool) -> list[dict]:
    return rows if naive else [r for r in rows if r["st"] != COMPED]


def _date_of(row: dict, naive: bool) -> str:
    stamp = row["posted"] if naive else row["posted"] - AUDIT_CUTOFF
    return stamp.date().isoformat()


def _day_total(data_dir: Path, day: str, naive: bool) -> float:
    rows = _billed(_charges(data_dir), naive)
    return round(sum(r["amount"] for r in rows if _date_of(r, naive) == day), 2)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    data_dir = Path(data_dir)
    if task_id in ("ht-1", "ht-3"):
        return {"charges_sep14": _day_total(data_dir, "2024-09-14", naive)}
    if task_id == "ht-2":
        rows = _billed(_charges(data_dir), naive)
        return {"ird_total": round(sum(r["amount"] for r in rows if r["outlet"] == "IRD"), 2)}
    if task_id == "ht-4":
        with open(data_dir / "menu.csv", newline="", encoding="utf-8") as fh:
            prices = [float(r["list_price"]) for r in csv.DictReader(fh) if r["outlet"] == "MINIBAR"]
        return {"minibar_mean_list_price": round(sum(prices) / len(prices), 2)}
    if task_id == "ht-5":
        return {"charges_sep15": _day_total(data_dir, "2024-09-15", naive)}
    if task_id == "ht-6":
        rows = [r for r in _billed(_charges(data_dir), naive) if r["outlet"] == "MINIBAR"]
        return {"minibar_mean_charge": round(sum(r["amount"] for r in rows) / len(rows), 2)}
    if task_id == "ht-7":
        return {"charges_sep16": _day_total(data_dir, "2024-09-16", naive)}
    raise KeyError(task_id)
