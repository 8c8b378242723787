"""Reference answers for the Marlowick Dental Studio appointment-book family.

House conventions:
- fee_cents: the `fee` column holds euro cents (minor units); divide by 100 for euros.
- utc_start: the `start` column is in UTC; the practice's local clock is UTC+2, so session boundaries
  (morning before 12:00, afternoon from 13:00 local) sit at 10:00 and 11:00 in the stored times.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

BOOK = "chairbook_export.csv"
LOCAL_OFFSET = timedelta(hours=2)


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with open(data_dir / BOOK, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _euros(row: dict[str, str], naive: bool) -> float:
    fee = float(row["fee"])
    return fee if naive else fee / 100.0


def _local_hour(row: dict[str, str], naive: bool) -> float:
    stamp = datetime.strptime(row["start"], "%Y-%m-%d %H:%M")
    if not naive:
        stamp += LOCAL_OFFSET
    return stamp.hour + stamp.minute / 60.0


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(Path(data_dir))
    if task_id in ("dn-1", "dn-2"):
        total = sum(_euros(r, naive) for r in rows if r["code"] == "HYG")
        return {"hygiene_fees_eur": round(total, 2)}
    if task_id == "dn-3":
        morning = sum(1 for r in rows if _local_hour(r, naive) < 12.0)
        return {"morning_share": round(morning / len(rows), 4)}
    if task_id == "dn-4":
        fillings = [float(r["mins"]) for r in rows if r["code"] == "FIL"]
        return {"mean_filling_minutes": round(sum(fillings) / len(fillings), 2)}
    if task_id == "dn-5":
        fees = [_euros(r, naive) for r in rows if r["code"] == "RCT"]
        return {"mean_root_canal_fee_eur": round(sum(fees) / len(fees), 2)}
    if task_id == "dn-6":
        total = sum(_euros(r, naive) for r in rows if _local_hour(r, naive) >= 13.0)
        return {"afternoon_fees_eur": round(total, 2)}
    raise KeyError(task_id)
