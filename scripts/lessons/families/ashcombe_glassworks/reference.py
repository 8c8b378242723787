"""Reference answers for the glass studio family.

House conventions across every file of the studio's system:
- money columns (amount, quote, deposit, fee, unit_cost) are integer pence;
- clock times are recorded in UTC, while the studio works to UK summer time (BST, UTC+1) in June/July;
- any record whose id starts with "X9-" is a test/demo entry and is left out everywhere.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

TEST_PREFIX = "X9-"
BST = timedelta(hours=1)


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _real(rows: list[dict], key: str, naive: bool) -> list[dict]:
    return rows if naive else [r for r in rows if not str(r[key]).startswith(TEST_PREFIX)]


def _money(pence: float, naive: bool) -> float:
    return round(pence if naive else pence / 100, 2)


def _local(stamp: str, naive: bool) -> datetime:
    moment = datetime.strptime(stamp, "%Y-%m-%d %H:%M")
    return moment if naive else moment + BST


def _shop_by_channel(data_dir: Path, naive: bool) -> dict:
    rows = _csv(data_dir / "shop_sales.csv")
    totals = {"counter": 0, "online": 0}
    for row in rows:
        totals[row["channel"]] += int(row["amount"])
    return {"counter_gbp": _money(totals["counter"], naive), "online_gbp": _money(totals["online"], naive)}


def _early_firings(data_dir: Path, naive: bool) -> dict:
    rows = _csv(data_dir / "kiln_firings.csv")
    count = sum(1 for r in rows if _local(r["started"], naive).hour < 7)
    return {"early_starts": count}


def _open_quotes(data_dir: Path, naive: bool) -> dict:
    rows = _real(_jsonl(data_dir / "commissions.jsonl"), "ref", naive)
    total = sum(r["quote"] for r in rows if r["status"] == "open")
    return {"open_quoted_gbp": _money(total, naive)}


def _clear_batch(data_dir: Path, naive: bool) -> dict:
    rows = _csv(data_dir / "glass_stock.csv")
    total = sum(float(r["kg_on_hand"]) for r in rows if r["material"] == "clear batch")
    return {"clear_batch_kg": round(total, 2)}


def _evening_fees(data_dir: Path, naive: bool) -> dict:
    rows = _jsonl(data_dir / "studio_bookings.jsonl")
    total = sum(r["fee"] for r in rows if _local(r["start"], naive).hour >= 18)
    return {"evening_fees_gbp": _money(total, naive)}


def _k2_mean_peak(data_dir: Path, naive: bool) -> dict:
    rows = _real(_csv(data_dir / "kiln_firings.csv"), "firing_id", naive)
    peaks = [float(r["peak_temp_c"]) for r in rows if r["kiln"] == "K2"]
    return {"k2_mean_peak_c": round(sum(peaks) / len(peaks), 1)}


SOLVERS = {
    "agw-1": _shop_by_channel,
    "agw-2": _early_firings,
    "agw-3": _open_quotes,
    "agw-4": _clear_batch,
    "agw-5": _evening_fees,
    "agw-6": _open_quotes,
    "agw-7": _k2_mean_peak,
}


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    return SOLVERS[task_id](Path(data_dir), naive)
