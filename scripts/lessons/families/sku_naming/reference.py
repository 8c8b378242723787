"""Reference answers for the sku_naming family (Marigold Home Goods).

House conventions: SKUs are case-insensitive (mg-000417 is MG-000417); the number of a SKU is zero-padded
to 6 digits (MG-4512 is MG-004512); legacy codes beginning OLD- are mapped to current SKUs through
marigold_legacy_skus.csv. The naive answer joins on the SKU string exactly as written and drops what does
not match the catalog.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any


def _rows(data_dir: Path, name: str) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


class _Skus:
    def __init__(self, data_dir: Path, naive: bool) -> None:
        self.naive = naive
        self.catalog = {r["sku"]: r for r in _rows(data_dir, "marigold_catalog.csv")}
        self.legacy = {r["old_sku"].upper(): r["new_sku"] for r in _rows(data_dir, "marigold_legacy_skus.csv")}

    def normal(self, sku: str) -> str:
        if self.naive:
            return sku
        sku = sku.strip().upper()
        sku = self.legacy.get(sku, sku)
        prefix, _, number = sku.partition("-")
        return f"{prefix}-{number.zfill(6)}" if number.isdigit() else sku

    def item(self, sku: str) -> dict[str, str] | None:
        return self.catalog.get(self.normal(sku))


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    skus = _Skus(data_dir, naive)
    if task_id == "sk-1":
        orders = _rows(data_dir, "marigold_orders_2024-04.csv")
        units = sum(int(o["qty"]) for o in orders if (i := skus.item(o["sku"])) and i["name"] == "Linen Throw Pillow")
        return {"units_sold": units}
    if task_id == "sk-2":
        orders = _rows(data_dir, "marigold_orders_2024-05.csv")
        revenue = sum(int(o["qty"]) * float(i["price"]) for o in orders if (i := skus.item(o["sku"])))
        return {"revenue": round(revenue, 2)}
    if task_id == "sk-3":
        counted = [
            (skus.item(r["sku"]), int(r["counted"])) for r in _rows(data_dir, "marigold_stock_count_2024-06.csv")
        ]
        known = [(i, n) for i, n in counted if i]
        return {
            "kitchen_units": sum(n for i, n in known if i["category"] == "kitchen"),
            "lowest_item": min(known, key=lambda pair: pair[1])[0]["name"],
        }
    if task_id == "sk-4":
        units: dict[str, int] = defaultdict(int)
        for o in _rows(data_dir, "marigold_orders_2024-06.csv"):
            if i := skus.item(o["sku"]):
                units[i["category"]] += int(o["qty"])
        return {"textiles_units": units["textiles"], "lighting_units": units["lighting"]}
    if task_id == "sk-5":
        returned: dict[str, int] = defaultdict(int)
        for r in _rows(data_dir, "marigold_returns_2024-q2.csv"):
            if i := skus.item(r["sku"]):
                returned[i["name"]] += int(r["qty"])
        name = max(returned, key=lambda n: returned[n])
        return {"top_product": name, "units": returned[name]}
    raise KeyError(task_id)
