"""Reference answers for the supplier_feeds family (Brackenfield Hardware supplier feeds).

House conventions: the feeds are semicolon-delimited and numbers use a decimal comma ("12,50" is 12.5,
"2" is 2.0); the last line of every feed is a control-total trailer (item_code 99999999) that is not an
item. The naive answer drops the comma as if it were a thousands separator ("12,50" -> 1250) and keeps
the trailer as an ordinary row.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

TOLLAND = "brackenfield_feed_tolland_2024-06.csv"
HEXLEY = "brackenfield_feed_hexley_2024-06.csv"
TRAILER = "99999999"


def _rows(data_dir: Path, name: str, naive: bool) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter=";"))
    return rows if naive else [r for r in rows if r["item_code"] != TRAILER]


def _num(value: str, naive: bool) -> float:
    return float(value.replace(",", "")) if naive else float(value.replace(",", "."))


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    if task_id == "sf-1":
        prices = [_num(r["unit_price"], naive) for r in _rows(data_dir, TOLLAND, naive) if r["category"] == "fasteners"]
        return {"avg_price": round(sum(prices) / len(prices), 2)}
    if task_id == "sf-2":
        rows = _rows(data_dir, HEXLEY, naive)
        return {"item_count": len(rows), "total_qty": sum(int(r["qty_on_hand"]) for r in rows)}
    if task_id == "sf-3":
        rows = _rows(data_dir, TOLLAND, naive)
        return {"stock_value": round(sum(_num(r["unit_price"], naive) * int(r["qty_on_hand"]) for r in rows), 2)}
    if task_id == "sf-4":
        top = max(_rows(data_dir, TOLLAND, naive), key=lambda r: int(r["qty_on_hand"]))
        return {"item_code": top["item_code"], "qty": int(top["qty_on_hand"])}
    if task_id == "sf-5":
        low = min(_rows(data_dir, HEXLEY, naive), key=lambda r: _num(r["unit_price"], naive))
        return {"item_code": low["item_code"], "unit_price": round(_num(low["unit_price"], naive), 2)}
    raise KeyError(task_id)
