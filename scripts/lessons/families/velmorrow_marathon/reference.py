"""Reference answers for the Velmorrow City Marathon chip-timing family.

House conventions:
- no_read: a net time of 35999 seconds is the timing system's placeholder for "no start-mat read"; the runner's
  net time is unknown and the row is left out of every net-time statistic.
- utc_clock: finish_clock values are the finish mat's clock in UTC; race-day local time is UTC+2.
"""

from __future__ import annotations

import csv
from pathlib import Path

NO_READ = 35999
LOCAL_OFFSET_S = 2 * 3600


def _rows(data_dir: Path) -> list[dict[str, str]]:
    with (Path(data_dir) / "chip_results.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _clock_s(text: str) -> int:
    h, m, s = (int(part) for part in text.split(":"))
    return h * 3600 + m * 60 + s


def _fmt(seconds: int) -> str:
    seconds %= 24 * 3600
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _local_s(row: dict[str, str], naive: bool) -> int:
    return _clock_s(row["finish_clock"]) + (0 if naive else LOCAL_OFFSET_S)


def _nets(rows: list[dict[str, str]], naive: bool) -> list[int]:
    nets = [int(r["net_s"]) for r in rows]
    return nets if naive else [n for n in nets if n != NO_READ]


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict:
    rows = _rows(data_dir)
    if task_id == "mt-1":
        nets = _nets([r for r in rows if r["age_group"] == "M40"], naive)
        return {"mean_net_minutes": round(sum(nets) / len(nets) / 60, 2)}
    if task_id in ("mt-2", "mt-3"):
        return {"last_finish_local": _fmt(max(_local_s(r, naive) for r in rows))}
    if task_id == "mt-4":
        nets = _nets([r for r in rows if r["wave"] == "W3"], naive)
        return {"fastest_net_minutes": round(min(nets) / 60, 2)}
    if task_id == "mt-5":
        nets = _nets([r for r in rows if r["age_group"].startswith("F")], naive)
        return {"slowest_net_minutes": round(max(nets) / 60, 2)}
    if task_id == "mt-6":
        cutoff = _clock_s("12:30:00")
        early = sum(1 for r in rows if _local_s(r, naive) < cutoff)
        return {"share_before_1230_pct": round(100 * early / len(rows), 2)}
    if task_id == "mt-7":
        cutoff = _clock_s("12:00:00")
        nets = _nets([r for r in rows if _local_s(r, naive) < cutoff], naive)
        return {"mean_net_minutes": round(sum(nets) / len(nets) / 60, 2)}
    raise KeyError(task_id)
