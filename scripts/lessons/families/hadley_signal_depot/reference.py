"""Reference answers for the signal maintenance depot family.

House conventions shared by every file of the depot's system:
- a record whose id ends in "-X" is void (cancelled) and counts for nothing;
- 9999 in a numeric column is a placeholder for "no reading / not recorded";
- timestamps are depot local time and the depot day runs 06:00 to 06:00, so a
  record stamped before 06:00 belongs to the previous date.

`solve(task_id, data_dir, naive=False)` returns the right answer, or (naive=True)
the one an agent that ignores these conventions computes.
"""

from __future__ import annotations

import csv
from datetime import date, datetime, timedelta
from pathlib import Path

SENTINEL = 9999.0
DAY_START_HOUR = 6


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(Path(data_dir) / name, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _void(record_id: str) -> bool:
    return record_id.strip().endswith("-X")


def _stamp(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%Y-%m-%d %H:%M")


def _day(text: str, naive: bool) -> date:
    moment = _stamp(text)
    if not naive and moment.hour < DAY_START_HOUR:
        moment -= timedelta(days=1)
    return moment.date()


def _values(rows: list[dict[str, str]], column: str, naive: bool) -> list[float]:
    values = [float(r[column]) for r in rows]
    return values if naive else [v for v in values if v != SENTINEL]


def _live(rows: list[dict[str, str]], id_column: str, naive: bool) -> list[dict[str, str]]:
    return rows if naive else [r for r in rows if not _void(r[id_column])]


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 2)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    data_dir = Path(data_dir)
    if task_id == "hsd-1":
        rows = _live(_rows(data_dir, "faults.csv"), "ticket_id", naive)
        return {"track_circuit_tickets": sum(r["asset_type"] == "track circuit" for r in rows)}
    if task_id in ("hsd-2", "hsd-4"):
        rows = _live(_rows(data_dir, "readings.csv"), "reading_id", naive)
        rows = [r for r in rows if r["circuit"] == "TC-07"]
        return {"mean_insulation_mohm": _mean(_values(rows, "insulation_mohm", naive))}
    if task_id == "hsd-3":
        rows = _live(_rows(data_dir, "shifts.csv"), "shift_id", naive)
        rows = [r for r in rows if _day(r["started_at"], naive) == date(2024, 3, 14)]
        return {"crew_hours": round(sum(_values(rows, "hours_worked", naive)), 2)}
    if task_id == "hsd-5":
        rows = _live(_rows(data_dir, "inspections.csv"), "insp_id", naive)
        return {"failed_inspections": sum(r["result"] == "FAIL" for r in rows)}
    if task_id == "hsd-6":
        rows = _live(_rows(data_dir, "parts.csv"), "issue_id", naive)
        rows = [r for r in rows if _day(r["issued_at"], naive) == date(2024, 3, 15)]
        return {"units_issued": int(sum(_values(rows, "qty", naive)))}
    if task_id == "hsd-7":
        rows = _live(_rows(data_dir, "inspections.csv"), "insp_id", naive)
        rows = [r for r in rows if r["asset_id"] == "PM-14"]
        return {"mean_torque_nm": _mean(_values(rows, "torque_nm", naive))}
    raise KeyError(f"unknown task {task_id!r}")
