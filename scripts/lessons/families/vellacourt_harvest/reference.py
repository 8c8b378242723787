"""Reference answers for the Vellacourt Estate harvest and pressing family.

House conventions:
- vintage_august: a vintage year runs from 1 August to 31 July; fruit picked or pressed in January-July belongs
  to the previous calendar year's vintage (the winter ice-wine picks).
- dx_dumped: a harvest load with disposition code DX was dumped at the sorting table and counts in no total.
"""

from __future__ import annotations

import csv
from pathlib import Path


def _harvest(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / "harvest_log.csv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _press(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / "press_cycles.tsv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _vintage(date: str, naive: bool) -> int:
    year, month = int(date[:4]), int(date[5:7])
    if naive:
        return year
    return year if month >= 8 else year - 1


def _kept(row: dict[str, str], naive: bool) -> bool:
    return naive or row["disp"] != "DX"


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    if task_id in ("vy-1", "vy-2"):
        vals = [float(r["juice_l"]) for r in _press(data_dir) if _vintage(r["pressed_on"], naive) == 2023]
        return {"juice_litres": round(sum(vals), 1)}
    if task_id == "vy-3":
        vals = [int(r["net_kg"]) for r in _harvest(data_dir) if r["variety"] == "Pinot Noir" and _kept(r, naive)]
        return {"pinot_noir_kg": sum(vals)}
    if task_id == "vy-4":
        vals = [int(r["cycle_min"]) for r in _press(data_dir) if r["press"] == "Heron"]
        return {"mean_cycle_min": round(sum(vals) / len(vals), 2)}
    if task_id == "vy-5":
        vals = [float(r["juice_l"]) for r in _press(data_dir) if _vintage(r["pressed_on"], naive) == 2022]
        return {"mean_juice_per_cycle": round(sum(vals) / len(vals), 2)}
    if task_id == "vy-6":
        vals = [
            int(r["net_kg"]) for r in _harvest(data_dir) if _vintage(r["picked_on"], naive) == 2023 and _kept(r, naive)
        ]
        return {"fruit_kg": sum(vals)}
    raise KeyError(task_id)
