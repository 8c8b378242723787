"""Reference answers for the thornbury_auctions family (Thornbury & Vale Auctioneers).

House conventions:
  lotref -- a lot is reported by its reference: "THB-" and the lot number zero-padded to four digits.
  name   -- a buyer is reported as "SURNAME, I." (surname upper-case, comma, first initial and a full stop).
  order  -- every list in an answer is ordered by money, largest first (hammer price for lots, total spend
            for buyers).
naive=True reports bare lot numbers, names as registered, and lists in file order.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

SALE = "thornbury_sale_0412.csv"
PADDLES = "thornbury_paddles_0412.csv"


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with (data_dir / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _lot(number: str, naive: bool) -> Any:
    return int(number) if naive else f"THB-{int(number):04d}"


def _name(full: str, naive: bool) -> str:
    if naive:
        return full
    first, *_, last = full.split()
    return f"{last.upper()}, {first[0].upper()}."


def _spend(data_dir: Path) -> dict[str, int]:
    """Total hammer per paddle, in order of first purchase in the sale file."""
    totals: dict[str, int] = defaultdict(int)
    for row in _rows(data_dir, SALE):
        if row["hammer"]:
            totals[row["paddle"]] += int(row["hammer"])
    return dict(totals)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    sale = _rows(data_dir, SALE)
    names = {r["paddle"]: r["bidder_name"] for r in _rows(data_dir, PADDLES)}
    if task_id == "ta-1":
        top = max((r for r in sale if r["hammer"]), key=lambda r: int(r["hammer"]))
        return {"lot": _lot(top["lot"], naive), "hammer": int(top["hammer"])}
    if task_id == "ta-2":
        totals = _spend(data_dir)
        paddle = max(totals, key=lambda p: totals[p])
        return {"buyer": _name(names[paddle], naive), "total": totals[paddle]}
    if task_id == "ta-3":
        mine = [r for r in sale if r["paddle"] == "214"]
        if not naive:
            mine.sort(key=lambda r: -int(r["hammer"]))
        return {"lots": [_lot(r["lot"], naive) for r in mine]}
    if task_id == "ta-4":
        totals = _spend(data_dir)
        big = [p for p, total in totals.items() if total > 1500]
        if not naive:
            big.sort(key=lambda p: -totals[p])
        return {"buyers": [_name(names[p], naive) for p in big]}
    if task_id == "ta-5":
        unsold = [r for r in sale if not r["hammer"]]
        top = max(unsold, key=lambda r: int(r["estimate_low"]))
        return {"lot": _lot(top["lot"], naive)}
    raise KeyError(task_id)
