"""Reference answers for the Orrinshaw Car Hire fleet mileage and fuel family.

House conventions:
- us_gallons: the fuel quantity on a receipt is in US gallons (the fuel-card provider's unit); litres = gallons
  x 3.78541.
- void_suffix: a record whose reference ends in "-VD" was voided (keyed in error and re-keyed under the plain
  reference); it is left out of every total, mean or count.
"""

from __future__ import annotations

import csv
from pathlib import Path

LITRES_PER_US_GALLON = 3.78541
VOID_SUFFIX = "-VD"


def _rows(data_dir: Path, name: str, naive: bool) -> list[dict[str, str]]:
    with (Path(data_dir) / name).open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return rows if naive else [r for r in rows if not r["ref"].endswith(VOID_SUFFIX)]


def _litres(row: dict[str, str], naive: bool) -> float:
    qty = float(row["qty"])
    return qty if naive else qty * LITRES_PER_US_GALLON


def _km(row: dict[str, str]) -> int:
    return int(row["km_in"]) - int(row["km_out"])


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    if task_id == "cf-1":
        rows = [r for r in _rows(data_dir, "fuel_receipts.csv", naive) if r["car"] == "ORH-204"]
        return {"total_litres": round(sum(_litres(r, naive) for r in rows), 2)}
    if task_id in ("cf-2", "cf-3"):
        rows = [r for r in _rows(data_dir, "trip_sheet.csv", naive) if r["class"] == "compact"]
        return {"compact_km": sum(_km(r) for r in rows)}
    if task_id == "cf-4":
        rows = [r for r in _rows(data_dir, "trip_sheet.csv", naive) if r["class"] == "suv"]
        return {"longest_suv_trip_km": max(_km(r) for r in rows)}
    if task_id == "cf-5":
        rows = [r for r in _rows(data_dir, "trip_sheet.csv", naive) if r["class"] == "van"]
        return {"mean_van_trip_km": round(sum(_km(r) for r in rows) / len(rows), 2)}
    if task_id == "cf-6":
        rows = [r for r in _rows(data_dir, "fuel_receipts.csv", naive) if r["car"] == "ORH-211"]
        return {"mean_litres_per_fill": round(sum(_litres(r, naive) for r in rows) / len(rows), 2)}
    if task_id == "cf-7":
        rows = [r for r in _rows(data_dir, "fuel_receipts.csv", naive) if r["date"].startswith("2024-04")]
        return {"april_litres": round(sum(_litres(r, naive) for r in rows), 2)}
    raise KeyError(task_id)
