"""Reference answers for the report_format family (Alderbrook Outfitters' order export).

House conventions: percentages and shares are reported as numbers from 0 to 100 (13.4, not 0.134);
quarters are fiscal — the fiscal year starts on 1 July and is named after the calendar year it ends in,
labelled FY<yy>-Q<n> (July–September 2023 is FY24-Q1). The naive answer reports fractions and uses
calendar quarters labelled <yyyy>-Q<n> (and reads "FY24-Q3" as July–September 2024).
"""

from __future__ import annotations

import csv
import datetime as dt
from collections import defaultdict
from pathlib import Path
from typing import Any


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with open(data_dir / "alderbrook_orders_2023-2024.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _quarter(day: str, naive: bool) -> str:
    d = dt.date.fromisoformat(day)
    if naive:
        return f"{d.year}-Q{(d.month - 1) // 3 + 1}"
    fiscal_year = d.year + 1 if d.month >= 7 else d.year
    return f"FY{fiscal_year % 100:02d}-Q{((d.month - 7) % 12) // 3 + 1}"


def _pct(fraction: float, naive: bool) -> float:
    return round(fraction if naive else fraction * 100, 1)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    rows = _rows(data_dir)
    if task_id == "rf-1":
        revenue: dict[str, float] = defaultdict(float)
        for r in rows:
            revenue[_quarter(r["order_date"], naive)] += float(r["revenue"])
        best = max(revenue, key=lambda q: revenue[q])
        return {"quarter": best, "revenue": round(revenue[best], 2)}
    if task_id == "rf-2":
        online = [r for r in rows if r["channel"] == "online"]
        return {"online_return_rate": _pct(sum(r["returned"] == "Y" for r in online) / len(online), naive)}
    if task_id == "rf-3":
        by_region: dict[str, float] = defaultdict(float)
        for r in rows:
            by_region[r["region"]] += float(r["revenue"])
        top = max(by_region, key=lambda k: by_region[k])
        return {"top_region": top, "share": _pct(by_region[top] / sum(by_region.values()), naive)}
    if task_id == "rf-4":
        # FY24-Q2 is October-December 2023; read as a calendar quarter it is April-June 2024
        wanted = "2024-Q2" if naive else "FY24-Q2"
        picked = [r for r in rows if _quarter(r["order_date"], naive) == wanted]
        return {"order_count": len(picked), "revenue": round(sum(float(r["revenue"]) for r in picked), 2)}
    if task_id == "rf-5":
        orders: dict[str, list[bool]] = defaultdict(list)
        for r in rows:
            orders[_quarter(r["order_date"], naive)].append(r["returned"] == "Y")
        rates = {q: sum(v) / len(v) for q, v in orders.items()}
        best = max(rates, key=lambda q: rates[q])
        return {"quarter": best, "return_rate": _pct(rates[best], naive)}
    raise KeyError(task_id)
