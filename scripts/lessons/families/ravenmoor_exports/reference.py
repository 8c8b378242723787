"""Reference answers for the ravenmoor_exports family (Ravenmoor Exports shipment and charter exports).

House conventions: in `weight_kg` the dot is the thousands separator (1.250 is 1250 kg; values are whole
kilograms); the `port` field packs every port of call into one value separated by "|" (BGN|HAM called at
both). The naive answer reads `weight_kg` with float() as it stands and compares `port` whole with ==.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

SHIPMENTS = "ravenmoor_shipments_2024.csv"
CHARTERS = "ravenmoor_charters_2024.csv"


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _kg(row: dict[str, str], naive: bool) -> float:
    text = row["weight_kg"]
    return float(text) if naive else float(text.replace(".", ""))


def _calls_at(row: dict[str, str], port: str, naive: bool) -> bool:
    return row["port"] == port if naive else port in row["port"].split("|")


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    shipments = _rows(data_dir, SHIPMENTS)
    charters = _rows(data_dir, CHARTERS)
    if task_id == "rm-1":
        return {"timber_kg": round(sum(_kg(r, naive) for r in shipments if r["cargo"] == "timber"), 2)}
    if task_id == "rm-2":
        return {"ham_shipments": sum(_calls_at(r, "HAM", naive) for r in shipments)}
    if task_id == "rm-3":
        return {"rtm_kg": round(sum(_kg(r, naive) for r in shipments if _calls_at(r, "RTM", naive)), 2)}
    if task_id == "rm-4":
        return {"max_kg": round(max(_kg(r, naive) for r in charters if r["vessel"] == "Nordlys"), 2)}
    if task_id == "rm-5":
        days = [float(r["days"]) for r in charters if _calls_at(r, "BGN", naive)]
        return {"avg_days": round(sum(days) / len(days), 2)}
    raise KeyError(task_id)
