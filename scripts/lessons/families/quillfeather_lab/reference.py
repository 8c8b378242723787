"""Reference answers for the Quillfeather Diagnostics family."""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path
from typing import Any

NEEDS = {
    "qf-1": {"rerun"},
    "qf-2": {"channel"},
    "qf-3": {"rerun"},
    "qf-4": {"channel"},
    "qf-5": {"rerun", "channel"},
}


def _results(data_dir: Path) -> list[dict[str, str]]:
    with (data_dir / "quill_assay_results.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _analyser(name: str, ignore: set[str]) -> str:
    # QX-7a and QX-7b are two channels of analyser QX-7
    return name if "channel" in ignore else re.sub(r"(?<=\d)[a-z]$", "", name)


def _final(rows: list[dict[str, str]], analyte: str, ignore: set[str]) -> dict[str, dict[str, str]]:
    """sample -> the row that reports its result (a ...R re-run supersedes the original)."""
    picked: dict[str, dict[str, str]] = {}
    for row in rows:
        if row["analyte"] != analyte:
            continue
        sample = row["sample_id"]
        if "rerun" in ignore:
            picked[sample] = row
            continue
        base = sample[:-1] if sample.endswith("R") else sample
        if sample.endswith("R") or base not in picked:
            picked[base] = row
    return picked


def compute(task_id: str, data_dir: Path, ignore: set[str]) -> dict[str, Any]:
    rows = _results(data_dir)
    if task_id == "qf-1":
        return {"glu_samples": len(_final(rows, "GLU", ignore))}
    if task_id == "qf-2":
        counts = Counter(_analyser(r["analyser"], ignore) for r in rows)
        name, n = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        return {"analyser": name, "tests": n}
    if task_id == "qf-3":
        values = [float(r["result"]) for r in _final(rows, "GLU", ignore).values()]
        return {"mean_glu": round(sum(values) / len(values), 2)}
    if task_id == "qf-4":
        return {"analysers": len({_analyser(r["analyser"], ignore) for r in rows})}
    if task_id == "qf-5":
        final = list(_final(rows, "CRP", ignore).values())
        counts = Counter(_analyser(r["analyser"], ignore) for r in final)
        name = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        return {"analyser": name, "mean_crp": round(sum(float(r["result"]) for r in final) / len(final), 2)}
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return compute(task_id, data_dir, set(NEEDS[task_id]) if naive else set())
