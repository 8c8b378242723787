"""Reference answers for the holloway_reagents family (Holloway Reagents, a lab-chemicals distributor).

House conventions:
  quarantine -- a lot whose code ends in "-Q" is quarantined: never counted as stock, never shipped.
  shelflife  -- a lot may ship on a date only if it has at least 30 days left before its expiry date.
naive=True counts every lot in the file (none has expired by the task dates).
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import Any

LOTS = "holloway_stock_lots.csv"
ORDERS = "holloway_open_orders.csv"
MIN_DAYS_LEFT = 30


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with (data_dir / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _shippable(data_dir: Path, on: dt.date, naive: bool) -> list[dict[str, str]]:
    lots = _rows(data_dir, LOTS)
    if naive:
        return lots
    return [
        r
        for r in lots
        if not r["lot"].endswith("-Q") and (dt.date.fromisoformat(r["expires"]) - on).days >= MIN_DAYS_LEFT
    ]


def _units(lots: list[dict[str, str]], product: str) -> int:
    return sum(int(r["qty"]) for r in lots if r["product"] == product)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    june3 = dt.date(2024, 6, 3)
    if task_id == "hr-1":
        return {"units": _units(_shippable(data_dir, june3, naive), "Acetone 2.5 L")}
    if task_id == "hr-2":
        lots = [r for r in _shippable(data_dir, june3, naive) if r["product"] == "Sodium chloride 1 kg"]
        return {"lots": len(lots), "units": sum(int(r["qty"]) for r in lots)}
    if task_id == "hr-3":
        order = next(r for r in _rows(data_dir, ORDERS) if r["order"] == "HO-5521")
        units = _units(_shippable(data_dir, june3, naive), order["product"])
        return {"shippable_units": units, "can_fill": units >= int(order["qty"])}
    if task_id == "hr-4":
        return {"units": sum(int(r["qty"]) for r in _shippable(data_dir, dt.date(2024, 6, 10), naive))}
    if task_id == "hr-5":
        lots = _shippable(data_dir, june3, naive)
        ok = [r["order"] for r in _rows(data_dir, ORDERS) if _units(lots, r["product"]) >= int(r["qty"])]
        return {"orders": sorted(ok)}
    raise KeyError(task_id)
