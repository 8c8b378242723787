"""Reference answers for the Orbit Mobility family."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NEEDS = {
    "om-1": {"lonlat"},
    "om-2": {"unlock"},
    "om-3": {"lonlat"},
    "om-4": {"unlock"},
    "om-5": {"lonlat", "unlock"},
}
STANDARD_UNLOCK_FEE = 1.00


def _rides(data_dir: Path) -> list[dict[str, Any]]:
    return json.loads((data_dir / "orbit_rides_export.json").read_text(encoding="utf-8"))["data"]


def _lat_lon(point: dict[str, Any], ignore: set[str]) -> tuple[float, float]:
    first, second = point["coords"]
    # coords are [longitude, latitude]; the naive reading takes them as [lat, lon]
    return (first, second) if "lonlat" in ignore else (second, first)


def _unlock(ride: dict[str, Any], ignore: set[str]) -> float:
    if "unlock_fee" in ride:
        return float(ride["unlock_fee"])
    return 0.0 if "unlock" in ignore else STANDARD_UNLOCK_FEE  # omitted = standard fee


def compute(task_id: str, data_dir: Path, ignore: set[str]) -> dict[str, Any]:
    rides = _rides(data_dir)
    if task_id == "om-1":
        return {"north_starts": sum(_lat_lon(r["start"], ignore)[0] > 52.52 for r in rides)}
    if task_id == "om-2":
        return {"unlock_total": round(sum(_unlock(r, ignore) for r in rides), 2)}
    if task_id == "om-3":
        west = min(rides, key=lambda r: _lat_lon(r["start"], ignore)[1])
        return {"ride": west["id"], "start_lon": round(_lat_lon(west["start"], ignore)[1], 5)}
    if task_id == "om-4":
        day = [r for r in rides if r["start"]["at"].startswith("2024-06-14")]
        revenue = sum(_unlock(r, ignore) + r["minutes"] * r["minute_fare"] for r in day)
        return {"revenue": round(revenue, 2)}
    if task_id == "om-5":
        south = [r for r in rides if _lat_lon(r["end"], ignore)[0] < 52.5]
        return {"rides": len(south), "unlock_total": round(sum(_unlock(r, ignore) for r in south), 2)}
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return compute(task_id, data_dir, set(NEEDS[task_id]) if naive else set())
