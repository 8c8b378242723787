"""Reference answers for the Tessaway Bikes trip-records family.

House conventions:
- utc: every start timestamp in both files is UTC; the scheme's days and hours are local time, UTC+10
  (no daylight saving), so add 10 hours before taking a date or an hour.
- no_reading: a dist_m of 65535 means the odometer was not read (no distance); such rides are left out of
  distance sums and means.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

OFFSET = timedelta(hours=10)
NO_READING = 65535


def _local(stamp: str, naive: bool) -> datetime:
    moment = datetime.fromisoformat(stamp.replace(" ", "T"))
    return moment if naive else moment + OFFSET


def _trips(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / "trips_may.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _rides(data_dir: Path) -> list[dict]:
    text = (data_dir / "ebike_rides.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _km(rows, key: str, naive: bool) -> list[float]:
    return [int(r[key]) / 1000.0 for r in rows if naive or int(r[key]) != NO_READING]


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    if task_id == "bk-1":
        rows = [r for r in _trips(data_dir) if _local(r["start_ts"], naive).date().isoformat() == "2024-05-14"]
        return {"minutes_on_14_may": round(sum(float(r["duration_min"]) for r in rows), 2)}
    if task_id == "bk-2":
        kms = _km(_rides(data_dir), "dist_m", naive)
        return {"mean_ebike_km": round(sum(kms) / len(kms), 4)}
    if task_id == "bk-3":
        return {"total_minutes": round(sum(float(r["duration_min"]) for r in _trips(data_dir)), 2)}
    if task_id in ("bk-4", "bk-5"):
        rows = [r for r in _rides(data_dir) if 7 <= _local(r["start"], naive).hour <= 9]
        return {"peak_mean_minutes": round(sum(float(r["mins"]) for r in rows) / len(rows), 4)}
    if task_id == "bk-6":
        return {"total_km": round(sum(_km(_trips(data_dir), "dist_m", naive)), 3)}
    if task_id == "bk-7":
        rows = [r for r in _trips(data_dir) if _local(r["start_ts"], naive).date().isoformat() == "2024-05-15"]
        return {"km_on_15_may": round(sum(_km(rows, "dist_m", naive)), 3)}
    raise KeyError(task_id)
