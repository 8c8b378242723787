"""Reference answers for the Thistlecombe Academy markbook family.

House conventions:
- half_marks: the coursework column `cw` is stored in half-marks (the stored value is twice the mark).
- absent_999: an exam `paper` mark of 999 means the candidate was absent; such rows are left out of exam figures.
"""

from __future__ import annotations

import csv
from pathlib import Path

ABSENT = 999


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / "markbook.csv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _cw(row: dict[str, str], naive: bool) -> float:
    value = float(row["cw"])
    return value if naive else value / 2


def _sat(row: dict[str, str], naive: bool) -> bool:
    return naive or int(row["paper"]) != ABSENT


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(data_dir)
    if task_id == "ex-1":
        vals = [_cw(r, naive) for r in rows if r["subject"] == "Geography"]
        return {"mean_coursework": round(sum(vals) / len(vals), 3)}
    if task_id in ("ex-2", "ex-3"):
        vals = [float(r["paper"]) for r in rows if r["form"] == "11B" and _sat(r, naive)]
        return {"mean_paper": round(sum(vals) / len(vals), 3)}
    if task_id == "ex-4":
        vals = [float(r["attend_pct"]) for r in rows if r["subject"] == "Chemistry"]
        return {"mean_attendance": round(sum(vals) / len(vals), 3)}
    if task_id == "ex-5":
        return {"top_coursework": max(_cw(r, naive) for r in rows if r["subject"] == "History")}
    if task_id == "ex-6":
        vals = [_cw(r, naive) + float(r["paper"]) for r in rows if r["subject"] == "Physics" and _sat(r, naive)]
        return {"mean_combined": round(sum(vals) / len(vals), 3)}
    raise KeyError(task_id)
