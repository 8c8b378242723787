"""Reference answers for the fenwold_seed_library family.

House conventions shared by every file of the seed library's records:
- seed amounts (the `amount` column) are written in tenths of a gram (decigrams): divide by 10 for grams;
- dates are written day first, DD/MM/YYYY;
- a record whose id starts with a tilde (~) has been struck out and is left out of every count and total.

`solve(task_id, data_dir, naive=False)` returns the right answer, or the one an agent that ignores the
conventions gets (amounts taken as grams, dates read month first, struck-out rows kept).
"""

from __future__ import annotations

import csv
from pathlib import Path


def _rows(data_dir: Path, name: str, naive: bool) -> list[dict[str, str]]:
    with open(Path(data_dir) / name, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if naive:
        return rows
    first = next(iter(rows[0])) if rows else ""
    return [r for r in rows if not r[first].startswith("~")]


def _month(date: str, naive: bool) -> int:
    """The month of a DD/MM/YYYY date (naive: read as MM/DD/YYYY)."""
    a, b, _year = date.split("/")
    return int(a) if naive else int(b)


def _year(date: str) -> int:
    return int(date.split("/")[2])


def _grams(amount: str, naive: bool) -> float:
    return float(amount) if naive else float(amount) / 10.0


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    data_dir = Path(data_dir)
    if task_id == "fw-1":
        # donations.csv: grams of bean seed received (no struck-out bean rows; units matter)
        rows = [r for r in _rows(data_dir, "donations.csv", naive) if r["crop"] == "bean"]
        return {"bean_seed_grams": round(sum(_grams(r["amount"], naive) for r in rows), 2)}
    if task_id == "fw-2":
        # visits.csv: visits in April 2024 (no struck-out rows fall in April either way)
        rows = [
            r
            for r in _rows(data_dir, "visits.csv", naive)
            if _month(r["visited_on"], naive) == 4 and _year(r["visited_on"]) == 2024
        ]
        return {"april_visits": len(rows)}
    if task_id in ("fw-3", "fw-5"):
        # germination.csv: overall germination rate, sprouted / sown over all tests, in percent
        rows = _rows(data_dir, "germination.csv", naive)
        sown = sum(int(r["sown"]) for r in rows)
        sprouted = sum(int(r["sprouted"]) for r in rows)
        return {"germination_percent": round(100.0 * sprouted / sown, 2)}
    if task_id == "fw-4":
        # loans.csv: grams lent out in March 2024 (no struck-out rows fall in March either way)
        rows = [
            r
            for r in _rows(data_dir, "loans.csv", naive)
            if _month(r["lent_on"], naive) == 3 and _year(r["lent_on"]) == 2024
        ]
        return {"grams_lent_march": round(sum(_grams(r["amount"], naive) for r in rows), 2)}
    if task_id == "fw-6":
        # donations.csv: how many different donors (struck-out rows are by donors who also gave otherwise)
        rows = _rows(data_dir, "donations.csv", naive)
        return {"donor_count": len({r["donor"] for r in rows})}
    if task_id == "fw-7":
        # returns.csv: total grams of seed brought back
        rows = _rows(data_dir, "returns.csv", naive)
        return {"grams_returned": round(sum(_grams(r["amount"], naive) for r in rows), 2)}
    raise KeyError(task_id)
