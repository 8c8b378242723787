"""Reference answers for the marrowgate_loans family (standard library only).

House conventions:
- renewals: rows of the loan export whose evt code is E4 are renewals of a loan already counted, not new loans.
- cents: money amounts (fine_amt in the loan export, amt in the fines ledger) are integer cents.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _loans(data_dir: Path, naive: bool) -> list[dict[str, str]]:
    rows = _rows(data_dir / "circ_export.csv")
    return rows if naive else [r for r in rows if r["evt"] != "E4"]


def _money(value: str, naive: bool) -> float:
    return float(value) if naive else int(value) / 100


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    data_dir = Path(data_dir)
    if task_id in ("lb-1", "lb-3"):
        days = [int(r["loan_days"]) for r in _loans(data_dir, naive) if r["branch"] == "Easthollow"]
        return {"mean_loan_days": round(sum(days) / len(days), 3)}
    if task_id == "lb-2":
        fines = [_money(r["amt"], naive) for r in _rows(data_dir / "fines_ledger.csv") if r["reason"] == "OVERDUE"]
        return {"overdue_total": round(sum(fines), 2)}
    if task_id == "lb-4":
        counts = Counter(r["branch"] for r in _rows(data_dir / "fines_ledger.csv"))
        return {"busiest_branch": counts.most_common(1)[0][0]}
    if task_id == "lb-5":
        loans = _loans(data_dir, naive)
        dvds = sum(1 for r in loans if r["item_type"] == "DVD")
        return {"dvd_share_pct": round(100 * dvds / len(loans), 2)}
    if task_id == "lb-6":
        fines = [_money(r["amt"], naive) for r in _rows(data_dir / "fines_ledger.csv") if r["branch"] == "Kilnworth"]
        return {"mean_fine": round(sum(fines) / len(fines), 3)}
    if task_id == "lb-7":
        loans = _loans(data_dir, naive)
        total = sum(_money(r["fine_amt"], naive) for r in loans)
        return {"fine_per_loan": round(total / len(loans), 3)}
    raise KeyError(task_id)
