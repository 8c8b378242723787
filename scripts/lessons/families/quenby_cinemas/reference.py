"""Reference answers for the Quenby Picturehouses box-office family.

House conventions:
- gst: `takings` include 10% GST; box-office revenue is always reported ex-GST (takings / 1.1).
- test_sessions: sessions whose reference starts with "ZZ" are projection-test / staff-training runs and are left
  out of every admissions and revenue figure.
"""

from __future__ import annotations

import csv
from pathlib import Path

FILE = "screenings.csv"


def _rows(data_dir: Path, naive: bool) -> list[dict[str, str]]:
    with (data_dir / FILE).open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not naive:
        rows = [r for r in rows if not r["session"].upper().startswith("ZZ")]
    return rows


def _revenue(row: dict[str, str], naive: bool) -> float:
    takings = float(row["takings"])
    return takings if naive else takings / 1.1


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    data_dir = Path(data_dir)
    rows = _rows(data_dir, naive)
    if task_id == "cn-1":
        total = sum(_revenue(r, naive) for r in rows if r["site"] == "Elmstead")
        return {"revenue": round(total, 2)}
    if task_id in ("cn-2", "cn-3"):
        return {"admissions": sum(int(r["admissions"]) for r in rows if r["show_date"] == "2024-05-11")}
    if task_id == "cn-4":
        return {"max_admissions": max(int(r["admissions"]) for r in rows if r["film"] == "Paper Moons")}
    if task_id == "cn-5":
        picked = [_revenue(r, naive) for r in rows if r["film"] == "Gullwing"]
        return {"mean_revenue": round(sum(picked) / len(picked), 2)}
    if task_id == "cn-6":
        picked = [int(r["admissions"]) for r in rows if r["site"] == "Harbourside"]
        return {"mean_admissions": round(sum(picked) / len(picked), 2)}
    if task_id == "cn-7":
        total = sum(_revenue(r, naive) for r in rows if r["show_date"] == "2024-05-12")
        return {"revenue": round(total, 2)}
    raise KeyError(task_id)
