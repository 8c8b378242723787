"""Writes the family's synthetic sales exports (`workspace/sales_jan_feb.csv`, `sales_mar_apr.csv`, `fx_rates.csv`,
and the few-row ones of the `llm` variant in `workspace-llm/`).

    python scripts/skillflow/families/sales_csv/generate.py            # rewrite the files
    python scripts/skillflow/families/sales_csv/generate.py --check    # exit 1 if they differ from the code

Invented orders from a seeded RNG, with the quirks the family's lessons are about: amounts in the order's own
currency (USD, EUR, GBP; `fx_rates.csv` has a USD rate per currency and month of 2024), order dates written
day-first (`DD/MM/YYYY`, about half of them with a day of 12 or less, so a month-first reading silently
moves them), and — in March/April only — cancelled orders among the completed ones.

The `llm` variant's exports are for a small real LLM that works the answer out by hand: one month per file
(January, March), three or four orders each with round prices, a USD and a EUR rate per month (no GBP), and
the same quirks: a EUR order among the USD ones, day-first dates with a day of 12 or less, and a cancelled
order in each file.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parent / "workspace"
LLM_WORKSPACE = Path(__file__).resolve().parent / "workspace-llm"
SEED = 2024
HEADER = "order_id,order_date,status,region,customer,product,quantity,unit_price,currency"
CUSTOMERS = [
    ("Alder & Co", "North", "USD"),
    ("Birchwood GmbH", "East", "EUR"),
    ("Cedar Retail", "South", "USD"),
    ("Dunmore Ltd", "West", "GBP"),
    ("Elm Street Foods", "North", "USD"),
    ("Fjord Handel AS", "East", "EUR"),
    ("Glenfield Stores", "West", "GBP"),
    ("Harbor Supply", "South", "USD"),
]
PRODUCTS = {
    "Widget": Decimal("12.50"),
    "Gadget": Decimal("49.99"),
    "Gizmo": Decimal("7.25"),
    "Sprocket": Decimal("3.40"),
}
# USD per unit of currency, per month of 2024 (index 0 = January).
FX = {
    "EUR": [Decimal(r) for r in ("1.0905", "1.0795", "1.0872", "1.0728", "1.0812", "1.0760", "1.0840", "1.1010")],
    "GBP": [Decimal(r) for r in ("1.2703", "1.2627", "1.2712", "1.2524", "1.2620", "1.2690", "1.2850", "1.2930")],
}
FX_MONTHS = 12


def _price(rng: random.Random, product: str, currency: str) -> Decimal:
    """A list price converted roughly into the order's currency, with a small random discount."""
    base = PRODUCTS[product] * Decimal(rng.choice(["1.00", "0.95", "0.90"]))
    factor = {"USD": Decimal("1"), "EUR": Decimal("0.92"), "GBP": Decimal("0.79")}[currency]
    return (base * factor).quantize(Decimal("0.01"))


def _orders(rng: random.Random, first_id: int, months: tuple[int, int], cancelled: int, count: int) -> list[str]:
    lines = []
    cancel_at = set(rng.sample(range(count), cancelled))
    for i in range(count):
        month = months[i % 2]
        # half the days are ambiguous (≤ 12), the others only parse day-first
        day = rng.randint(1, 12) if i % 3 != 2 else rng.randint(13, 28)
        customer, region, currency = rng.choice(CUSTOMERS)
        product = rng.choice(list(PRODUCTS))
        quantity = rng.randint(1, 40)
        status = "cancelled" if i in cancel_at else "completed"
        price = _price(rng, product, currency)
        lines.append(
            f"SO-{first_id + i},{day:02d}/{month:02d}/2024,{status},{region},{customer},{product},{quantity},"
            f"{price},{currency}"
        )
    return lines


def _fx_rates() -> str:
    rows = ["month,currency,usd_per_unit"]
    for month in range(1, FX_MONTHS + 1):
        rows.append(f"2024-{month:02d},USD,1.0000")
        for currency, rates in FX.items():
            rows.append(f"2024-{month:02d},{currency},{rates[min(month, len(rates)) - 1]}")
    return "\n".join(rows) + "\n"


def files() -> dict[str, str]:
    rng = random.Random(SEED)
    jan_feb = _orders(rng, 1001, (1, 2), cancelled=0, count=30)
    mar_apr = _orders(rng, 2001, (3, 4), cancelled=6, count=34)
    return {
        "sales_jan_feb.csv": "\n".join([HEADER, *jan_feb]) + "\n",
        "sales_mar_apr.csv": "\n".join([HEADER, *mar_apr]) + "\n",
        "fx_rates.csv": _fx_rates(),
    }


# The `llm` variant, written out: (order_id, date DD/MM/YYYY, status, region, customer, product, qty, price, currency).
LLM_ORDERS = {
    "sales_jan.csv": [
        ("SO-1001", "05/01/2024", "completed", "South", "Cedar Retail", "Gizmo", 2, "10.00", "USD"),
        ("SO-1002", "09/01/2024", "cancelled", "North", "Elm Street Foods", "Gadget", 3, "20.00", "USD"),
        ("SO-1003", "22/01/2024", "completed", "East", "Birchwood GmbH", "Widget", 4, "5.00", "EUR"),
    ],
    "sales_mar.csv": [
        ("SO-2001", "11/03/2024", "completed", "West", "Dunmore Ltd", "Gadget", 2, "15.00", "EUR"),
        ("SO-2002", "04/03/2024", "cancelled", "South", "Harbor Supply", "Gizmo", 5, "10.00", "USD"),
        ("SO-2003", "27/03/2024", "completed", "South", "Harbor Supply", "Widget", 3, "10.00", "USD"),
        ("SO-2004", "15/03/2024", "completed", "North", "Alder & Co", "Gizmo", 2, "13.50", "USD"),
    ],
}
LLM_EUR = {1: "1.1000", 2: "1.2000", 3: "1.1000"}


def _exports(orders_by_file: Mapping[str, Sequence[tuple[object, ...]]]) -> dict[str, str]:
    """Written-out orders as CSV exports (header first), by file name."""
    return {
        name: "\n".join([HEADER, *(",".join(str(v) for v in order) for order in orders)]) + "\n"
        for name, orders in orders_by_file.items()
    }


def llm_files() -> dict[str, str]:
    out = _exports(LLM_ORDERS)
    out["fx_rates.csv"] = (
        "\n".join(
            ["month,currency,usd_per_unit"]
            + [f"2024-{m:02d},{c},{r}" for m, eur in LLM_EUR.items() for c, r in (("USD", "1.0000"), ("EUR", eur))]
        )
        + "\n"
    )
    return out


# The `script` variant, for a model that answers with a Python script: US dollars only (no rates file), every
# day 12 or less, so a month-first parse gives a wrong month silently instead of failing, and a cancelled order
# in each export.
SCRIPT_WORKSPACE = Path(__file__).resolve().parent / "workspace-script"
SCRIPT_ORDERS = {
    "sales_jan.csv": [
        ("SO-1001", "05/01/2024", "completed", "South", "Cedar Retail", "Gizmo", 2, "10.00", "USD"),
        ("SO-1002", "09/01/2024", "cancelled", "North", "Elm Street Foods", "Gadget", 3, "20.00", "USD"),
        ("SO-1003", "11/01/2024", "completed", "East", "Birchwood GmbH", "Widget", 4, "5.00", "USD"),
    ],
    "sales_mar.csv": [
        ("SO-2001", "11/03/2024", "completed", "West", "Dunmore Ltd", "Gadget", 2, "15.00", "USD"),
        ("SO-2002", "04/03/2024", "cancelled", "South", "Harbor Supply", "Gizmo", 5, "10.00", "USD"),
        ("SO-2003", "07/03/2024", "completed", "South", "Harbor Supply", "Widget", 4, "10.00", "USD"),
        ("SO-2004", "02/03/2024", "completed", "North", "Alder & Co", "Gizmo", 2, "13.50", "USD"),
    ],
}


def script_files() -> dict[str, str]:
    return _exports(SCRIPT_ORDERS)


def _outputs() -> dict[Path, str]:
    """Every generated file by its path: the family's workspace and the `llm` and `script` variants'."""
    return (
        {WORKSPACE / n: t for n, t in files().items()}
        | {LLM_WORKSPACE / n: t for n, t in llm_files().items()}
        | {SCRIPT_WORKSPACE / n: t for n, t in script_files().items()}
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only compare the files with the generator")
    args = parser.parse_args(argv)
    outputs = _outputs()
    stale = [str(p.relative_to(WORKSPACE.parent)) for p, t in outputs.items() if not p.is_file() or p.read_text() != t]
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {', '.join(str(p.relative_to(WORKSPACE.parent)) for p in outputs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
