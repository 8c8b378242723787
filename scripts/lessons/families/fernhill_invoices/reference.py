"""Reference answers for the fernhill_invoices family (Fernhill Joinery's invoice export, price list and orders).

House conventions:
- `unit_price_gbp` in the price list is per piece and *includes* 20 % VAT; invoice amounts are net, so the net
  price of a piece is unit_price_gbp / 1.2.
- `qty` (in the invoice export and in orders) counts boxes of 12 pieces, not pieces.
- Rows whose `type` is CRN are credit notes: their qty and amount are positive but must be subtracted.

The naive answer takes the list price as net, `qty` as pieces, and adds every row regardless of `type`.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

VAT_FACTOR = 1.2
BOX = 12
INVOICES = "fernhill_invoices_2024q1.csv"
PRICES = "fernhill_price_list.tsv"
ORDER = "fernhill_order_FJ-Q-2207.json"


def _invoices(data_dir: Path) -> list[dict[str, str]]:
    with open(data_dir / INVOICES, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _net_prices(data_dir: Path, naive: bool) -> dict[str, float]:
    with open(data_dir / PRICES, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return {r["sku"]: float(r["unit_price_gbp"]) / (1 if naive else VAT_FACTOR) for r in rows}


def _category(data_dir: Path) -> dict[str, str]:
    with open(data_dir / PRICES, newline="", encoding="utf-8") as fh:
        return {r["sku"]: r["category"] for r in csv.DictReader(fh, delimiter="\t")}


def _pieces(qty: str, naive: bool) -> int:
    return int(qty) * (1 if naive else BOX)


def _sign(row: dict[str, str], naive: bool) -> int:
    return -1 if row["type"] == "CRN" and not naive else 1


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    data_dir = Path(data_dir)
    if task_id == "fh-1":
        prices = _net_prices(data_dir, naive)
        cats = _category(data_dir)
        timber = [p for sku, p in prices.items() if cats[sku] == "timber"]
        return {
            "hinge_net_gbp": round(prices["FJ-HNG-75"], 2),
            "timber_avg_net_gbp": round(sum(timber) / len(timber), 2),
        }
    if task_id == "fh-2":
        by_customer: dict[str, int] = defaultdict(int)
        for r in _invoices(data_dir):
            if r["sku"] == "FJ-DWL-10":
                by_customer[r["customer"]] += _sign(r, naive) * _pieces(r["qty"], naive)
        top = max(by_customer, key=lambda c: by_customer[c])
        return {"dowel_pieces": sum(by_customer.values()), "top_customer": top}
    if task_id == "fh-3":
        revenue: dict[str, float] = defaultdict(float)
        for r in _invoices(data_dir):
            revenue[r["customer"]] += _sign(r, naive) * float(r["amount_net_gbp"])
        top = max(revenue, key=lambda c: revenue[c])
        return {"top_customer": top, "net_revenue_gbp": round(revenue[top], 2)}
    if task_id == "fh-4":
        prices = _net_prices(data_dir, naive)
        order = json.loads((data_dir / ORDER).read_text(encoding="utf-8"))
        total = sum(_pieces(str(line["qty"]), naive) * prices[line["sku"]] for line in order["lines"])
        return {"order_net_gbp": round(total, 2)}
    if task_id == "fh-5":
        pieces = 0
        revenue = 0.0
        for r in _invoices(data_dir):
            if r["sku"] == "FJ-HNG-75":
                pieces += _sign(r, naive) * _pieces(r["qty"], naive)
                revenue += _sign(r, naive) * float(r["amount_net_gbp"])
        return {"net_hinges": pieces, "net_revenue_gbp": round(revenue, 2)}
    raise KeyError(task_id)
