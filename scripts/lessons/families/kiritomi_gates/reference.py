"""Reference answers for the lift-pass gate scan family.

House conventions:
- utc_times: scan times are written in UTC; the resort runs on Japan Standard Time (UTC+9), so a scan's resort
  day and local hour come from the time plus nine hours.
- rc_00: only a scan whose result code is "00" opened the turnstile; any other code is a refused scan and is not a
  ride.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

OFFSET = timedelta(hours=9)


def _rows(data_dir: Path) -> list[dict]:
    with open(data_dir / "gate_scans.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["ts"] = datetime.strptime(row["scan_time"], "%Y-%m-%d %H:%M:%S")
        row["vert"] = int(row["vert_m"])
    return rows


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(Path(data_dir))

    def local(row: dict) -> datetime:
        return row["ts"] if naive else row["ts"] + OFFSET

    def ride(row: dict) -> bool:
        return True if naive else row["gate_rc"] == "00"

    if task_id in ("lp-1", "lp-2"):
        day = [r for r in rows if local(r).date().isoformat() == "2025-02-16"]
        first = min(day, key=local)
        return {"pass_no": first["pass_no"], "gate": first["gate"]}
    if task_id == "lp-3":
        return {"season_vertical_m": sum(r["vert"] for r in rows if r["pass_cat"] == "SEA" and ride(r))}
    if task_id == "lp-4":
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["gate"]] = counts.get(r["gate"], 0) + 1
        gate = max(counts, key=counts.get)
        return {"gate": gate, "attempts": counts[gate]}
    if task_id == "lp-5":
        early = sum(1 for r in rows if local(r).hour < 10)
        return {"early_share": round(early / len(rows), 4)}
    if task_id == "lp-6":
        day_rides = [r["vert"] for r in rows if r["pass_cat"] == "DAY" and ride(r)]
        return {"mean_vertical_m": round(sum(day_rides) / len(day_rides), 2)}
    if task_id == "lp-7":
        return {"vertical_m": sum(r["vert"] for r in rows if local(r).date().isoformat() == "2025-02-15" and ride(r))}
    raise KeyError(task_id)
