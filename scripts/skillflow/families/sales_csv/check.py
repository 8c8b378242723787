"""Verifier of the CSV sales family: recomputes each task's answers.json from the exports and grades the agent's.

The reference converts every order line to USD with the `fx_rates.csv` rate of its currency and order month,
reads `order_date` day-first (DD/MM/YYYY), leaves cancelled orders out, and rounds money half-up to cents once,
at the end. For diagnosis it can also produce the answer with the family's pitfalls made (`fx`: amounts
summed in their own currencies, `dates`: month-first reading whenever the day is 12 or less, `cancelled`:
cancelled orders counted), so the feedback can name the mistake (see `skillflow.verify`); a misread month that
the rates file does not list converts at the rate of the order's real month.
"""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from skillflow.family import Pitfall, Task, load_family
from skillflow.verify import CheckResult, grade, read_output, variants_of

FAMILY_DIR = Path(__file__).resolve().parent
CENT = Decimal("0.01")

Row = dict[str, str]


def money(amount: Decimal) -> float:
    """Rounded half-up to cents, as a JSON number."""
    return float(amount.quantize(CENT, rounding=ROUND_HALF_UP))


def read_rows(path: Path) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


class Ledger:
    """The task's order lines and rates, read the way a given set of mistakes reads them."""

    def __init__(self, task: Task, workspace: Path, mistakes: frozenset[str]) -> None:
        self.mistakes = mistakes
        rates_file = workspace / "fx_rates.csv"
        # the `script` variant's exports are all in US dollars and come without a rates file
        self.rates = (
            {(r["month"], r["currency"]): Decimal(r["usd_per_unit"]) for r in read_rows(rates_file)}
            if rates_file.is_file()
            else {}
        )
        rows = [r for name in task.params["sales"] for r in read_rows(workspace / name)]
        self.rows = rows if "cancelled" in mistakes else [r for r in rows if r["status"] != "cancelled"]

    def month(self, row: Row, *, misread: bool = True) -> str:
        day, month, year = (int(part) for part in row["order_date"].split("/"))
        if misread and "dates" in self.mistakes and day <= 12:
            day, month = month, day  # read as MM/DD/YYYY
        return f"{year}-{month:02d}"

    def usd(self, row: Row) -> Decimal:
        amount = Decimal(row["quantity"]) * Decimal(row["unit_price"])
        if "fx" in self.mistakes:
            return amount
        if not self.rates and row["currency"] == "USD":
            return amount
        rate = self.rates.get((self.month(row), row["currency"]))
        if rate is None:
            # a month-first misreading can land on a month the rates file does not list (the `llm` variant's
            # lists only its own months): the agent making that mistake still converts, at some rate; take the
            # rate of the order's real month
            rate = self.rates[(self.month(row, misread=False), row["currency"])]
        return amount * rate

    def revenue_by(self, key: Callable[[Row], str]) -> dict[str, Decimal]:
        totals: dict[str, Decimal] = defaultdict(Decimal)
        for row in self.rows:
            totals[key(row)] += self.usd(row)
        return dict(sorted(totals.items()))


def _monthly_revenue(ledger: Ledger) -> dict[str, Any]:
    months = ledger.revenue_by(ledger.month)
    return {
        "monthly_revenue_usd": {m: money(v) for m, v in months.items()},
        "total_revenue_usd": money(sum(months.values(), Decimal(0))),
    }


def _region_revenue(ledger: Ledger) -> dict[str, Any]:
    regions = ledger.revenue_by(lambda r: r["region"])
    return {
        "revenue_by_region_usd": {k: money(v) for k, v in regions.items()},
        "top_region": max(regions, key=lambda k: (regions[k], k)),
    }


def _units_by_month(ledger: Ledger) -> dict[str, Any]:
    units: dict[str, Counter[str]] = defaultdict(Counter)
    for row in ledger.rows:
        units[ledger.month(row)][row["product"]] += int(row["quantity"])
    overall = sum(units.values(), Counter[str]())
    return {
        "units_by_month": {m: dict(sorted(c.items())) for m, c in sorted(units.items())},
        "best_selling_product": max(overall, key=lambda p: (overall[p], p)),
    }


def _average_order_value(ledger: Ledger) -> dict[str, Any]:
    revenue = ledger.revenue_by(ledger.month)
    orders = Counter(ledger.month(r) for r in ledger.rows)
    return {
        "average_order_value_usd": {m: money(v / orders[m]) for m, v in revenue.items()},
        "orders_per_month": dict(sorted(orders.items())),
    }


def _top_customers(ledger: Ledger) -> dict[str, Any]:
    revenue = ledger.revenue_by(lambda r: r["customer"])
    ranked = sorted(revenue.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "top_customers": [{"customer": c, "revenue_usd": money(v)} for c, v in ranked[:3]],
        "customer_count": len(revenue),
    }


KINDS: dict[str, Callable[[Ledger], dict[str, Any]]] = {
    "monthly_revenue": _monthly_revenue,
    "region_revenue": _region_revenue,
    "units_by_month": _units_by_month,
    "average_order_value": _average_order_value,
    "top_customers": _top_customers,
}


def reference(task: Task, workspace: Path, mistakes: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The task's answer, with the given pitfalls made (none: the correct answer)."""
    return KINDS[task.params["kind"]](Ledger(task, workspace, mistakes))


def _pitfalls(variant: str | None = None) -> Mapping[str, Pitfall]:
    return load_family(FAMILY_DIR, variant=variant).pitfalls


def check(task: Task, workspace: Path) -> CheckResult:
    """Grade `workspace/answers.json` against the reference, diagnosing the family's pitfalls."""
    pitfalls = _pitfalls(task.variant)
    actual, error = read_output(workspace, task.output)
    variants = variants_of(lambda mistakes: reference(task, workspace, mistakes), pitfalls)
    return grade(task, reference(task, workspace), actual, pitfalls=pitfalls, variants=variants, read_error=error)
