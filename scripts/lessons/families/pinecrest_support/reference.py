"""Reference answers for the Pinecrest Support family."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

NEEDS = {
    "pc-1": {"hmm"},
    "pc-2": {"surname"},
    "pc-3": {"hmm", "surname"},
    "pc-4": {"hmm"},
    "pc-5": {"surname"},
}


def _calls(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / "pinecrest_call_log.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _duration(minutes: int, ignore: set[str]) -> Any:
    # durations are reported as H:MM (hours, colon, two-digit minutes)
    return minutes if "hmm" in ignore else f"{minutes // 60}:{minutes % 60:02d}"


def _agent(full_name: str, ignore: set[str]) -> str:
    # agent names are reported as "Surname, I."
    if "surname" in ignore:
        return full_name
    first, last = full_name.rsplit(" ", 1)
    return f"{last}, {first[0]}."


def compute(task_id: str, data_dir: Path, ignore: set[str]) -> dict[str, Any]:
    calls = _calls(data_dir)
    if task_id == "pc-1":
        total = sum(int(c["minutes"]) for c in calls if c["team"] == "Blue" and c["opened_at"].startswith("2024-04-02"))
        return {"blue_handle_time": _duration(total, ignore)}
    if task_id == "pc-2":
        solved = Counter(c["agent"] for c in calls if c["outcome"] == "solved")
        agent, n = sorted(solved.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        return {"top_agent": _agent(agent, ignore), "solved": n}
    if task_id == "pc-3":
        longest = max(calls, key=lambda c: int(c["minutes"]))
        return {"agent": _agent(longest["agent"], ignore), "duration": _duration(int(longest["minutes"]), ignore)}
    if task_id == "pc-4":
        green = [int(c["minutes"]) for c in calls if c["team"] == "Green"]
        return {"green_avg_handle": _duration(round(sum(green) / len(green)), ignore)}
    if task_id == "pc-5":
        totals: dict[str, int] = defaultdict(int)
        tickets: Counter[str] = Counter()
        for c in calls:
            totals[c["agent"]] += int(c["minutes"])
            tickets[c["agent"]] += 1
        agent = min(totals, key=lambda a: (totals[a], a))
        return {"agent": _agent(agent, ignore), "tickets": tickets[agent]}
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return compute(task_id, data_dir, set(NEEDS[task_id]) if naive else set())
