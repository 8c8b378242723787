"""Reference answers for the saltmarsh_ferries family (Saltmarsh Ferry Company).

House conventions:
  nm     -- the `distance` column of the crossing log is in nautical miles (1 nmi = 1.852 km).
  impgal -- every `fuel` column (crossings and bunkering) is in imperial gallons (1 gal = 4.54609 L).
naive=True reads distance as kilometres and fuel as litres.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

KM_PER_NMI = 1.852
LITRES_PER_IMP_GAL = 4.54609
CROSSINGS = "saltmarsh_crossings_2024-05.csv"
BUNKERING = "saltmarsh_bunkering_2024-05.csv"


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with (data_dir / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _km(row: dict[str, str], naive: bool) -> float:
    value = float(row["distance"])
    return value if naive else value * KM_PER_NMI


def _litres(row: dict[str, str], naive: bool) -> float:
    value = float(row["fuel"])
    return value if naive else value * LITRES_PER_IMP_GAL


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    crossings = _rows(data_dir, CROSSINGS)
    if task_id == "sf-1":
        total = sum(_km(r, naive) for r in crossings if r["route"] == "HQ-PI")
        return {"total_km": round(total, 1)}
    if task_id == "sf-2":
        deliveries = _rows(data_dir, BUNKERING)
        total = sum(_litres(r, naive) for r in deliveries if r["vessel"] == "Samphire")
        return {"litres": round(total)}
    if task_id == "sf-3":
        mine = [r for r in crossings if r["vessel"] == "Tern"]
        litres = sum(_litres(r, naive) for r in mine)
        km = sum(_km(r, naive) for r in mine)
        return {"litres_per_km": round(litres / km, 3)}
    if task_id == "sf-4":
        legs = [_km(r, naive) for r in crossings if r["route"] == "PI-SK"]
        return {"avg_km": round(sum(legs) / len(legs), 2), "max_km": round(max(legs), 2)}
    if task_id == "sf-5":
        mine = [r for r in crossings if r["route"] == "HQ-SK"]
        litres = sum(_litres(r, naive) for r in mine)
        passengers = sum(int(r["passengers"]) for r in mine)
        return {"litres_per_passenger": round(litres / passengers, 2)}
    raise KeyError(task_id)
