"""Reference answers for the Brindlemoor Infirmary pharmacy family.

House conventions:
- units: the `amt` column of both files is recorded in micrograms (a milligram figure is amt / 1000).
- reversed: rows whose `flag` is X27 are dispenses reversed after entry; they are left out of every figure.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path


def _rows(data_dir: Path, name: str, naive: bool) -> list[dict[str, str]]:
    with (data_dir / name).open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not naive:
        rows = [r for r in rows if r["flag"] != "X27"]
    return rows


def _mg(value: str, naive: bool) -> float:
    return float(value) if naive else float(value) / 1000.0


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    if task_id == "ph-1":
        rows = _rows(data_dir, "dispense_log.csv", naive)
        return {"f2210_mg": round(sum(_mg(r["amt"], naive) for r in rows if r["fcode"] == "F-2210"), 4)}
    if task_id in ("ph-2", "ph-3"):
        rows = _rows(data_dir, "dispense_log.csv", naive)
        return {"onc4_units": sum(int(r["qty"]) for r in rows if r["ward"] == "ONC-4")}
    if task_id == "ph-4":
        rows = _rows(data_dir, "dispense_log.csv", naive)
        ward, _ = Counter(r["ward"] for r in rows).most_common(1)[0]
        return {"busiest_ward": ward}
    if task_id == "ph-5":
        rows = _rows(data_dir, "discharge_packs.csv", naive)
        return {"f7019_mg": round(sum(_mg(r["amt"], naive) for r in rows if r["fcode"] == "F-7019"), 4)}
    if task_id == "ph-6":
        rows = _rows(data_dir, "discharge_packs.csv", naive)
        return {"mean_tabs": round(sum(int(r["tabs"]) for r in rows) / len(rows), 4)}
    if task_id == "ph-7":
        rows = [r for r in _rows(data_dir, "dispense_log.csv", naive) if r["ward"] == "ICU-1"]
        return {"icu1_mean_mg": round(sum(_mg(r["amt"], naive) for r in rows) / len(rows), 4)}
    raise KeyError(task_id)
