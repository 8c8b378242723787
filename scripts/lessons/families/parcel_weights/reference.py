"""Reference answers for the parcel_weights family (Larkspur Parcel Co. exports).

House conventions: `weight` is in pounds (1 lb = 0.4536 kg); `cost` is in US cents.
The naive answer takes `weight` as kilograms and `cost` as dollars.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

LB_TO_KG = 0.4536


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _kg(row: dict[str, str], naive: bool) -> float:
    w = float(row["weight"])
    return w if naive else w * LB_TO_KG


def _usd(row: dict[str, str], naive: bool) -> float:
    c = float(row["cost"])
    return c if naive else c / 100


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    parcels = _rows(data_dir, "larkspur_parcels_2024.csv")
    if task_id == "pw-1":
        total = sum(_kg(r, naive) for r in parcels if r["dest_country"] == "DE")
        return {"total_kg": round(total, 2)}
    if task_id == "pw-2":
        costs = [_usd(r, naive) for r in parcels if r["service"] == "express"]
        return {"avg_cost_usd": round(sum(costs) / len(costs), 2)}
    if task_id == "pw-3":
        kgs = [_kg(r, naive) for r in parcels]
        return {"over_10kg_count": sum(k > 10 for k in kgs), "heaviest_kg": round(max(kgs), 2)}
    if task_id == "pw-4":
        returns = [r for r in _rows(data_dir, "larkspur_returns_2024.csv") if r["reason"] == "refused"]
        return {
            "refused_kg": round(sum(_kg(r, naive) for r in returns), 2),
            "refused_usd": round(sum(_usd(r, naive) for r in returns), 2),
        }
    if task_id == "pw-5":
        spend: dict[str, float] = defaultdict(float)
        for r in parcels:
            spend[r["ship_date"][:7]] += _usd(r, naive)
        month = max(spend, key=lambda m: spend[m])
        return {"top_month": month, "spend_usd": round(spend[month], 2)}
    raise KeyError(task_id)
