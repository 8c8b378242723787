"""Reference answers for the Wickhollow FM playout-log family.

House conventions:
- frames: `span` is counted in broadcast frames, 25 frames to a second (not seconds).
- cue_only: rows whose `st` is CUE were only loaded into the player and never went to air; leave them out.
"""

from __future__ import annotations

import csv
from pathlib import Path

FPS = 25
LOG_SAT = "playout_2024-04-06.csv"
LOG_SUN = "playout_2024-04-07.csv"


def _rows(data_dir: Path, name: str, naive: bool) -> list[dict[str, str]]:
    with open(data_dir / name, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if naive:
        return rows
    return [r for r in rows if r["st"] != "CUE"]


def _seconds(row: dict[str, str], naive: bool) -> float:
    value = float(row["span"])
    return value if naive else value / FPS


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    if task_id == "rd-1":
        rows = [r for r in _rows(data_dir, LOG_SAT, naive) if r["cls"] == "ID"]
        return {"mean_ident_seconds": round(sum(_seconds(r, naive) for r in rows) / len(rows), 2)}
    if task_id in ("rd-2", "rd-3"):
        rows = _rows(data_dir, LOG_SAT, naive)
        music = sum(1 for r in rows if r["cls"] == "MUS")
        return {"music_share_pct": round(100 * music / len(rows), 2)}
    if task_id == "rd-4":
        rows = [r for r in _rows(data_dir, LOG_SUN, naive) if r["cls"] == "TALK"]
        return {"longest_talk_cart": max(rows, key=lambda r: float(r["span"]))["cart"]}
    if task_id == "rd-5":
        rows = [r for r in _rows(data_dir, LOG_SUN, naive) if r["cls"] == "SPT"]
        return {"sponsor_minutes": round(sum(_seconds(r, naive) for r in rows) / 60, 2)}
    if task_id == "rd-6":
        rows = [r for r in _rows(data_dir, LOG_SAT, naive) if r["cls"] == "MUS"]
        return {"mean_track_seconds": round(sum(_seconds(r, naive) for r in rows) / len(rows), 2)}
    raise KeyError(task_id)
