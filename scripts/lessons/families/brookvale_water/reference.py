"""Reference answers for the Brookvale Water Cooperative family."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with (data_dir / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _m3(raw: float, naive: bool) -> float:
    # usage is recorded in litres; the naive reading takes it as cubic metres
    return raw if naive else raw / 1000.0


def _celsius(raw: float, naive: bool) -> float:
    # bearing_temp is recorded in tenths of a degree Celsius
    return raw if naive else raw / 10.0


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    reads = _rows(data_dir, "brookvale_meter_reads.csv")
    sensors = _rows(data_dir, "brookvale_pump_sensors.csv")
    if task_id == "bw-1":
        total = sum(_m3(float(r["usage"]), naive) for r in reads if r["district"] == "North")
        return {"north_m3": round(total, 2)}
    if task_id == "bw-2":
        top = max(_celsius(float(r["bearing_temp"]), naive) for r in sensors if r["pump_id"] == "P-2")
        return {"max_temp_c": round(top, 1)}
    if task_id == "bw-3":
        values = [_m3(float(r["usage"]), naive) for r in reads if r["meter_id"] == "M-104"]
        return {"avg_m3": round(sum(values) / len(values), 3)}
    if task_id == "bw-4":
        temps = [_celsius(float(r["bearing_temp"]), naive) for r in sensors]
        return {"hot_readings": sum(t > 45 for t in temps), "mean_temp_c": round(sum(temps) / len(temps), 1)}
    if task_id == "bw-5":
        total = sum(_m3(float(r["usage"]), naive) for r in reads if r["district"] == "South")
        temps = [_celsius(float(r["bearing_temp"]), naive) for r in sensors if r["district"] == "South"]
        return {"south_m3": round(total, 2), "south_temp_c": round(sum(temps) / len(temps), 1)}
    raise KeyError(task_id)
