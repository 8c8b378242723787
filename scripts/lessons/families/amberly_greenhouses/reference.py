"""Reference answers for the amberly_greenhouses family (Amberly Greenhouses irrigation and misting logs).

House conventions: `water` is in millilitres (1000 ml = 1 litre); `temp` is in tenths of a degree Celsius
(divide by 10). The naive answer takes `water` as litres and `temp` as degrees Celsius.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

IRRIGATION = "amberly_irrigation_2024.csv"
MISTING = "amberly_misting_2024.csv"


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _litres(row: dict[str, str], naive: bool) -> float:
    water = float(row["water"])
    return water if naive else water / 1000


def _celsius(row: dict[str, str], naive: bool) -> float:
    temp = float(row["temp"])
    return temp if naive else temp / 10


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    if task_id == "ag-1":
        rows = [r for r in _rows(data_dir, IRRIGATION) if r["house"] == "H2"]
        return {"total_litres": round(sum(_litres(r, naive) for r in rows), 2)}
    if task_id == "ag-2":
        temps = [_celsius(r, naive) for r in _rows(data_dir, IRRIGATION) if r["crop"] == "tomato"]
        return {"avg_temp_c": round(sum(temps) / len(temps), 2)}
    if task_id == "ag-3":
        rows = [r for r in _rows(data_dir, MISTING) if r["zone"] == "north"]
        return {
            "north_litres": round(sum(_litres(r, naive) for r in rows), 2),
            "north_max_temp_c": round(max(_celsius(r, naive) for r in rows), 1),
        }
    if task_id == "ag-4":
        temps = [_celsius(r, naive) for r in _rows(data_dir, MISTING) if r["house"] == "H3"]
        return {"min_temp_c": round(min(temps), 1)}
    if task_id == "ag-5":
        litres = [_litres(r, naive) for r in _rows(data_dir, IRRIGATION) if r["crop"] == "pepper"]
        return {"avg_litres": round(sum(litres) / len(litres), 2)}
    raise KeyError(task_id)
