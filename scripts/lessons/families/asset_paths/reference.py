"""Reference answers for the asset_paths family (Saltmarsh Games' asset manifest).

House conventions: `size` is in KiB (1 MiB = 1024 KiB); anything under `archive/` is retired and excluded
from every count and total; manifest paths are relative to the repository's `assets/` directory, so a
repository path is `assets/` + path. The naive answer reads sizes as bytes, keeps archive/ and gives the
manifest path as it stands.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

ROOT = "assets/"


def _rows(data_dir: Path, naive: bool) -> list[dict[str, str]]:
    with open(data_dir / "saltmarsh_asset_manifest.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return rows if naive else [r for r in rows if not r["path"].startswith("archive/")]


def _mib(kib_total: float, naive: bool) -> float:
    return kib_total / (1024 * 1024) if naive else kib_total / 1024


def _repo_path(path: str, naive: bool) -> str:
    return path if naive else ROOT + path


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    rows = _rows(data_dir, naive)
    if task_id == "ap-1":
        total = sum(float(r["size"]) for r in rows if r["path"].startswith("textures/"))
        return {"textures_mib": round(_mib(total, naive), 2)}
    if task_id == "ap-2":
        return {"ogg_count": sum(r["path"].endswith(".ogg") for r in rows)}
    if task_id == "ap-3":
        top = max((r for r in rows if r["path"].startswith("models/")), key=lambda r: float(r["size"]))
        return {"path": _repo_path(top["path"], naive), "owner": top["owner"]}
    if task_id == "ap-4":
        return {"total_mib": round(_mib(sum(float(r["size"]) for r in rows), naive), 2), "file_count": len(rows)}
    if task_id == "ap-5":
        latest = max(rows, key=lambda r: r["modified"])
        return {"latest_path": _repo_path(latest["path"], naive)}
    raise KeyError(task_id)
