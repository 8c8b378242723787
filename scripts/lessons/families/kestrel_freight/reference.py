"""Reference answers for the Kestrel Freight family."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

NEEDS = {
    "kf-1": {"trailer"},
    "kf-2": {"ditto"},
    "kf-3": {"trailer"},
    "kf-4": {"ditto"},
    "kf-5": {"ditto", "trailer"},
}


def _manifest(data_dir: Path, name: str, ignore: set[str]) -> list[dict[str, str]]:
    lines = (data_dir / name).read_text(encoding="utf-8").splitlines()
    header = lines[0].split("|")
    rows: list[dict[str, str]] = []
    previous: dict[str, str] = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        row = dict(zip(header, line.split("|"), strict=True))
        if row["shipment"] == "99" and "trailer" not in ignore:
            continue  # control trailer: record totals, not a shipment
        if "ditto" not in ignore:
            row = {k: (previous.get(k, v) if v == "=" else v) for k, v in row.items()}
        rows.append(row)
        previous = row
    return rows


def compute(task_id: str, data_dir: Path, ignore: set[str]) -> dict[str, Any]:
    apr12 = _manifest(data_dir, "kestrel_manifest_apr12.txt", ignore)
    apr13 = _manifest(data_dir, "kestrel_manifest_apr13.txt", ignore)
    if task_id == "kf-1":
        return {"total_charge": round(sum(float(r["charge"]) for r in apr12), 2)}
    if task_id == "kf-2":
        jfk = [r for r in apr12 if r["dest"] == "JFK"]
        return {"jfk_shipments": len(jfk), "jfk_weight_kg": round(sum(float(r["weight_kg"]) for r in jfk), 1)}
    if task_id == "kf-3":
        return {"shipments": len(apr13), "pieces": sum(int(r["pieces"]) for r in apr13)}
    if task_id == "kf-4":
        counts = Counter(r["carrier"] for r in apr13 if r["carrier"] not in ("", "="))
        carrier, n = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        return {"carrier": carrier, "shipments": n}
    if task_id == "kf-5":
        rest = [r for r in apr12 + apr13 if r["origin"] != "LHR"]
        return {"non_lhr_shipments": len(rest), "non_lhr_charge": round(sum(float(r["charge"]) for r in rest), 2)}
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return compute(task_id, data_dir, set(NEEDS[task_id]) if naive else set())
