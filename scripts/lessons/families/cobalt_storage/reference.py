"""Reference answers for the Cobalt Cloud Storage family."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

NEEDS = {
    "cs-1": {"hold"},
    "cs-2": {"internal"},
    "cs-3": {"hold"},
    "cs-4": {"internal"},
    "cs-5": {"hold", "internal"},
}


def _volumes(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / "cobalt_volumes.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _deletable(volume: dict[str, str], ignore: set[str]) -> bool:
    # LH = legal hold: never delete, whatever the age
    return "hold" in ignore or "LH" not in volume["flags"].split(";")


def _customer(volume: dict[str, str], ignore: set[str]) -> bool:
    # @cobaltcloud.example owners are Cobalt's own internal/test accounts
    return "internal" in ignore or not volume["owner"].endswith("@cobaltcloud.example")


def compute(task_id: str, data_dir: Path, ignore: set[str]) -> dict[str, Any]:
    volumes = _volumes(data_dir)
    if task_id == "cs-1":
        doomed = [v for v in volumes if v["last_access"] < "2024-01-01" and _deletable(v, ignore)]
        return {"deleted": len(doomed), "freed_gb": sum(int(v["size_gb"]) for v in doomed)}
    if task_id == "cs-2":
        mine = [v for v in volumes if _customer(v, ignore)]
        return {"customers": len({v["owner"] for v in mine}), "customer_gb": sum(int(v["size_gb"]) for v in mine)}
    if task_id == "cs-3":
        doomed = [v for v in volumes if v["owner"] == "ops@brightdock.example" and _deletable(v, ignore)]
        return {"deleted": len(doomed), "freed_gb": sum(int(v["size_gb"]) for v in doomed)}
    if task_id == "cs-4":
        sizes = [int(v["size_gb"]) for v in volumes if v["region"] == "us-east" and _customer(v, ignore)]
        return {"avg_gb": round(sum(sizes) / len(sizes), 1)}
    if task_id == "cs-5":
        doomed = [v for v in volumes if v["last_access"] < "2024-01-01" and _deletable(v, ignore)]
        hit = {v["owner"] for v in doomed if _customer(v, ignore)}
        return {
            "customers_affected": len(hit),
            "customer_gb_deleted": sum(int(v["size_gb"]) for v in doomed if _customer(v, ignore)),
        }
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return compute(task_id, data_dir, set(NEEDS[task_id]) if naive else set())
