"""Reference answers for the quarrydale_tickets family (Quarrydale Tickets orders and refunds API exports).

House conventions: money fields (`amount`, `refund_amount`) are in pence, the minor unit (divide by 100 for
pounds); -1 in a numeric field (`seats`, `amount`, `days_to_refund`, ...) means the value is missing, so the
row is skipped. The naive answer reads money as pounds and counts -1 as a value.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

ORDERS = "quarrydale_orders_api.csv"
REFUNDS = "quarrydale_refunds_api.csv"
MISSING = -1


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _values(rows: list[dict[str, str]], column: str, naive: bool) -> list[float]:
    """The column's numbers; the -1 sentinel is dropped unless naive."""
    values = [float(r[column]) for r in rows]
    return values if naive else [v for v in values if v != MISSING]


def _gbp(values: list[float], naive: bool) -> list[float]:
    return values if naive else [v / 100 for v in values]


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    orders = _rows(data_dir, ORDERS)
    refunds = _rows(data_dir, REFUNDS)
    if task_id == "qt-1":
        app = [r for r in orders if r["channel"] == "app"]
        return {"total_gbp": round(sum(_gbp([float(r["amount"]) for r in app], naive)), 2)}
    if task_id == "qt-2":
        seats = _values([r for r in orders if r["event_code"] == "QD-JAZZ"], "seats", naive)
        return {"avg_seats": round(sum(seats) / len(seats), 2)}
    if task_id == "qt-3":
        amounts = _gbp(_values([r for r in orders if r["event_code"] == "QD-ROCK"], "amount", naive), naive)
        return {"avg_gbp": round(sum(amounts) / len(amounts), 2)}
    if task_id == "qt-4":
        cancelled = [float(r["refund_amount"]) for r in refunds if r["reason"] == "event_cancelled"]
        return {"max_refund_gbp": round(max(_gbp(cancelled, naive)), 2)}
    if task_id == "qt-5":
        days = _values([r for r in refunds if r["reason"] == "duplicate_charge"], "days_to_refund", naive)
        return {"avg_days": round(sum(days) / len(days), 2)}
    raise KeyError(task_id)
