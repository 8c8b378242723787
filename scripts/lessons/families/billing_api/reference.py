"""Reference answers for the billing_api family (Quillon Cloud billing API exports).

House conventions: `amount` is in minor units (US cents); invoices with `status: "void"` were cancelled
and never count — not in totals, not in invoice counts. The naive answer reads `amount` as dollars and
keeps void invoices.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

MAY = "quillon_invoices_2024-05.json"
JUNE = "quillon_invoices_2024-06.json"


def _invoices(data_dir: Path, name: str, naive: bool) -> list[dict[str, Any]]:
    data = json.loads((data_dir / name).read_text(encoding="utf-8"))["data"]
    return data if naive else [i for i in data if i["status"] != "void"]


def _usd(invoice: dict[str, Any], naive: bool) -> float:
    return float(invoice["amount"]) if naive else invoice["amount"] / 100


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    if task_id == "bi-1":
        top = max(_invoices(data_dir, JUNE, naive), key=lambda i: i["amount"])
        return {"invoice_id": top["id"], "amount_usd": round(_usd(top, naive), 2)}
    if task_id == "bi-2":
        return {"total_usd": round(sum(_usd(i, naive) for i in _invoices(data_dir, MAY, naive)), 2)}
    if task_id == "bi-3":
        both = _invoices(data_dir, MAY, naive) + _invoices(data_dir, JUNE, naive)
        return {"invoice_count": sum(i["customer"] == "cus_Lm27" for i in both)}
    if task_id == "bi-4":
        counts = Counter(i["customer"] for i in _invoices(data_dir, JUNE, naive))
        customer, n = counts.most_common(1)[0]
        return {"top_customer": customer, "invoice_count": n}
    if task_id == "bi-5":
        paid = [_usd(i, naive) for i in _invoices(data_dir, JUNE, naive) if i["status"] == "paid"]
        return {"avg_paid_usd": round(sum(paid) / len(paid), 2)}
    raise KeyError(task_id)
