"""Reference answers for the Copperwhistle Brewing fermentation tank log family.

House conventions:
- probe_fault: a temperature of 3276.7 is the controller's probe-fault code, not a reading; drop those rows
  from any temperature figure.
- cip_rows: rows logged during a clean-in-place cycle (phase CIP) describe the cleaning solution, not beer;
  leave them out of every tank statistic.
"""

from __future__ import annotations

import csv
from pathlib import Path

LOG = "tank_log.csv"
PROBE_FAULT = "3276.7"


def _rows(data_dir: Path, naive: bool) -> list[dict[str, str]]:
    with open(data_dir / LOG, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not naive:
        rows = [r for r in rows if r["phase"] != "CIP"]
    return rows


def _temps(rows: list[dict[str, str]], naive: bool) -> list[float]:
    return [float(r["temp_c"]) for r in rows if naive or r["temp_c"] != PROBE_FAULT]


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 2)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(Path(data_dir), naive)
    if task_id in ("br-1", "br-2"):
        return {"mean_ferm_temp_c": _mean(_temps([r for r in rows if r["phase"] == "FERM"], naive))}
    if task_id == "br-3":
        return {"fv3_mean_plato": _mean([float(r["plato"]) for r in rows if r["tank"] == "FV3"])}
    if task_id == "br-4":
        best = max(rows, key=lambda r: float(r["plato"]))
        return {"batch": best["batch"]}
    if task_id == "br-5":
        return {"mean_cond_temp_c": _mean(_temps([r for r in rows if r["phase"] == "COND"], naive))}
    if task_id == "br-6":
        return {"fv4_mean_temp_c": _mean(_temps([r for r in rows if r["tank"] == "FV4"], naive))}
    raise KeyError(task_id)
