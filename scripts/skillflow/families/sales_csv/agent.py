"""How the simulated agent solves the CSV sales tasks, habits included.

A model of a capable agent that aggregates the exports correctly but, on a first attempt, has three habits
(the family's pitfalls): it adds up `quantity × unit_price` whatever the currency (`fx`), parses
`order_date` like a US date whenever that is possible (`dates`: 08/01/2024 read as 1 August) and counts
every row whatever its status (`cancelled`). The runner's simulated agent drops a habit only when recalled
memory teaches the lesson; this module never sees the verifier or the expected answer — it reads the
workspace files.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from skillflow.agents import Solution, tool_call
from skillflow.family import Task

Line = dict[str, Any]


def cents(amount: Decimal) -> float:
    return float(amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def parse_date(text: str, day_first: bool) -> date:
    """Day-first when told so; otherwise the first reading that works, month-first first (the US habit)."""
    a, b, year = (int(p) for p in text.split("/"))
    if not day_first:
        try:
            return date(year, a, b)
        except ValueError:
            pass
    return date(year, b, a)


class _Work:
    """One attempt: the habits in force, the loaded lines and the notes that become the agent's steps."""

    def __init__(self, task: Task, workspace: Path, habits: frozenset[str]) -> None:
        self.habits = habits
        self.steps: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.rates: dict[tuple[str, str], Decimal] = {}
        if "fx" not in habits:
            with (workspace / "fx_rates.csv").open(newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
            self.rates = {(r["month"], r["currency"]): Decimal(r["usd_per_unit"]) for r in rows}
            self.steps.append(tool_call("read_file", {"path": "fx_rates.csv"}, f"{len(rows)} monthly USD rates"))
        self.lines: list[Line] = []
        for name in task.params["sales"]:
            with (workspace / name).open(newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
            self.steps.append(
                tool_call("read_file", {"path": name}, f"{len(rows)} orders; columns {', '.join(rows[0])}")
            )
            self.lines += [self._line(r) for r in rows]
        if "cancelled" not in habits:
            self.lines = [line for line in self.lines if line["status"] != "cancelled"]
            self.notes.append("left out cancelled orders")
        self.notes.append("amounts converted to USD at the order month's rate" if self.rates else "summed the amounts")
        self.notes.append("order_date read as DD/MM/YYYY" if "dates" not in habits else "parsed order_date")

    def _line(self, row: dict[str, str]) -> Line:
        when = parse_date(row["order_date"], day_first="dates" not in self.habits)
        month = f"{when.year}-{when.month:02d}"
        amount = Decimal(row["quantity"]) * Decimal(row["unit_price"])
        if "fx" not in self.habits:
            amount *= self.rates[(month, row["currency"])]
        return {**row, "month": month, "amount": amount, "units": int(row["quantity"])}

    def total(self, key: str, value: str = "amount") -> dict[str, Any]:
        sums: dict[str, Any] = defaultdict(int)
        for line in self.lines:
            sums[line[key]] += line[value]
        return dict(sorted(sums.items()))


def _monthly_revenue(work: _Work) -> dict[str, Any]:
    months = work.total("month")
    return {
        "monthly_revenue_usd": {m: cents(v) for m, v in months.items()},
        "total_revenue_usd": cents(sum(months.values())),
    }


def _region_revenue(work: _Work) -> dict[str, Any]:
    regions = work.total("region")
    best = max(regions, key=lambda k: (regions[k], k))
    return {"revenue_by_region_usd": {k: cents(v) for k, v in regions.items()}, "top_region": best}


def _units_by_month(work: _Work) -> dict[str, Any]:
    table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for line in work.lines:
        table[line["month"]][line["product"]] += line["units"]
    overall = work.total("product", "units")
    return {
        "units_by_month": {m: dict(sorted(p.items())) for m, p in sorted(table.items())},
        "best_selling_product": max(overall, key=lambda p: (overall[p], p)),
    }


def _average_order_value(work: _Work) -> dict[str, Any]:
    revenue = work.total("month")
    orders: dict[str, int] = defaultdict(int)
    for line in work.lines:
        orders[line["month"]] += 1
    return {
        "average_order_value_usd": {m: cents(v / orders[m]) for m, v in revenue.items()},
        "orders_per_month": dict(sorted(orders.items())),
    }


def _top_customers(work: _Work) -> dict[str, Any]:
    revenue = work.total("customer")
    ranked = sorted(revenue.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return {
        "top_customers": [{"customer": c, "revenue_usd": cents(v)} for c, v in ranked],
        "customer_count": len(revenue),
    }


SOLVERS: dict[str, Callable[[_Work], dict[str, Any]]] = {
    "monthly_revenue": _monthly_revenue,
    "region_revenue": _region_revenue,
    "units_by_month": _units_by_month,
    "average_order_value": _average_order_value,
    "top_customers": _top_customers,
}


def solve(task: Task, workspace: Path, habits: frozenset[str]) -> Solution:
    """Read the exports, compute the answer with the habits still in force, describe the steps."""
    work = _Work(task, workspace, habits)
    answer = SOLVERS[task.params["kind"]](work)
    code = f"aggregate order lines for {task.params['kind']}"
    steps = [*work.steps, tool_call("python", {"code": code}, "; ".join(work.notes))]
    reply = f"Wrote {task.output} with {', '.join(answer)}: " + "; ".join(work.notes) + "."
    return Solution(outputs={task.output: answer}, steps=steps, reply=reply)
