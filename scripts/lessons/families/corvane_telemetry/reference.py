"""Reference answers for the corvane_telemetry family (standard library only).

House conventions:
- utc_stamps: every stamp in the exports is UTC; the sites keep UTC+10 (no daylight saving), so a calendar day
  at a site runs from 14:00 UTC the previous day to 14:00 UTC.
- sentinel_65535: a reading of 65535 means the inverter reported nothing for that interval (no data), not a value.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

SENTINEL = 65535
SITE_OFFSET = timedelta(hours=10)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _day(stamp: str, naive: bool) -> str:
    moment = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    return (moment if naive else moment + SITE_OFFSET).date().isoformat()


def _values(rows: list[dict[str, str]], column: str, naive: bool) -> list[float]:
    values = [float(r[column]) for r in rows]
    return values if naive else [v for v in values if v != SENTINEL]


def _energy_on(data_dir: Path, name: str, day: str, naive: bool) -> dict:
    rows = [r for r in _rows(data_dir / name) if _day(r["stamp"], naive) == day]
    return {"energy_kwh": round(sum(_values(rows, "e_wh", naive)) / 1000, 3)}


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    data_dir = Path(data_dir)
    if task_id in ("sv-1", "sv-3"):
        return _energy_on(data_dir, "site14_export.csv", "2024-06-11", naive)
    if task_id == "sv-2":
        temps = _values(_rows(data_dir / "site14_export.csv"), "hs_temp", naive)
        return {"mean_hs_temp_c": round(sum(temps) / len(temps), 3)}
    if task_id == "sv-4":
        rows = [r for r in _rows(data_dir / "site14_export.csv") if r["inverter"] == "INV-14B"]
        return {"peak_pac_w": max(int(r["pac_w"]) for r in rows)}
    if task_id == "sv-5":
        rows = [r for r in _rows(data_dir / "site22_export.csv") if r["inverter"] == "INV-22C"]
        power = _values(rows, "pac_w", naive)
        return {"mean_pac_w": round(sum(power) / len(power), 2)}
    if task_id == "sv-6":
        return _energy_on(data_dir, "site22_export.csv", "2024-09-07", naive)
    raise KeyError(task_id)
