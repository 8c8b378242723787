"""Reference answers for the larchmont_backups family (Larchmont Hosting backup snapshot exports).

House conventions:
- `hold`: a snapshot whose hold flag is set (CSV `hold` = Y, JSON `"hold": true`) is never pruned, whatever
  its expiry date.
- `base_chain`: a snapshot id ending in `-base` is the full backup its chain's incrementals depend on; it is
  kept as long as any incremental of the same chain is kept.
- `size_gib`: `size` is in GiB (binary, 2**30 bytes); 1 GiB = 1.073741824 GB.

A prune run on RUN_DATE removes the snapshots whose `expires` date is before RUN_DATE. The naive answer prunes
every expired snapshot and reads `size` as decimal GB.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RUN_DATE = "2024-11-01"
GIB_TO_GB = 1.073741824
CSV_FILE = "larchmont_snapshots_2024-11.csv"
JSON_FILE = "larchmont_eu_west_snapshots.json"
ALL_RULES = frozenset({"hold", "base_chain", "size_gib"})


def _snapshots(data_dir: Path, name: str) -> list[dict[str, Any]]:
    """Snapshots of either export as dicts with id, volume, chain, expires, size (float), hold (bool)."""
    path = Path(data_dir) / name
    if name.endswith(".json"):
        raw = json.loads(path.read_text(encoding="utf-8"))["snapshots"]
        return [{**s, "size": float(s["size"]), "hold": bool(s["hold"])} for s in raw]
    with open(path, newline="", encoding="utf-8") as fh:
        return [
            {
                "id": r["snapshot_id"],
                "volume": r["volume"],
                "chain": r["chain"],
                "expires": r["expires"],
                "size": float(r["size"]),
                "hold": r["hold"].strip().upper() == "Y",
            }
            for r in csv.DictReader(fh)
        ]


def _pruned(snaps: Iterable[dict[str, Any]], rules: frozenset[str]) -> list[dict[str, Any]]:
    """The snapshots the prune run deletes under the given conventions."""
    snaps = list(snaps)

    def deletable_alone(s: dict[str, Any]) -> bool:
        return s["expires"] < RUN_DATE and not ("hold" in rules and s["hold"])

    kept_incrementals: set[str] = {
        s["chain"] for s in snaps if not s["id"].endswith("-base") and not deletable_alone(s)
    }
    out = []
    for s in snaps:
        if not deletable_alone(s):
            continue
        if "base_chain" in rules and s["id"].endswith("-base") and s["chain"] in kept_incrementals:
            continue
        out.append(s)
    return out


def _gb(size: float, rules: frozenset[str]) -> float:
    return size * GIB_TO_GB if "size_gib" in rules else size


def _solve(task_id: str, data_dir: Path, rules: frozenset[str]) -> dict[str, Any]:
    if task_id in {"lb-1", "lb-2", "lb-3"}:
        snaps = _snapshots(data_dir, CSV_FILE)
        if task_id == "lb-1":
            return {"deletable_count": len(_pruned((s for s in snaps if s["volume"] == "db02"), rules))}
        if task_id == "lb-2":
            pruned = _pruned((s for s in snaps if s["volume"] == "web01"), rules)
            return {"deletable_ids": sorted(s["id"] for s in pruned)}
        pruned = _pruned((s for s in snaps if s["volume"] == "files04"), rules)
        return {"freed_gb": round(sum(_gb(s["size"], rules) for s in pruned), 2)}
    if task_id in {"lb-4", "lb-5"}:
        snaps = _snapshots(data_dir, JSON_FILE)
        pruned = _pruned(snaps, rules)
        if task_id == "lb-4":
            expired = [s for s in snaps if s["expires"] < RUN_DATE]
            return {"deleted_count": len(pruned), "expired_kept_count": len(expired) - len(pruned)}
        freed: dict[str, float] = defaultdict(float)
        for s in pruned:
            freed[s["volume"]] += _gb(s["size"], rules)
        top = max(freed, key=lambda v: freed[v])
        return {"top_volume": top, "freed_gb": round(freed[top], 2)}
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return _solve(task_id, Path(data_dir), frozenset() if naive else ALL_RULES)
