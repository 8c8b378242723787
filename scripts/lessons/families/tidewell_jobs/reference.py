"""Reference answers for the Tidewell Labs `tw` CLI family."""

from __future__ import annotations

import configparser
import re
from pathlib import Path
from typing import Any

NEEDS = {
    "tw-1": {"workspace"},
    "tw-2": {"workspace", "partition"},
    "tw-3": {"workspace", "partition"},
    "tw-4": {"workspace"},
    "tw-5": {"workspace", "partition"},
}


def _config(data_dir: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(data_dir / "tidewell_jobs.ini", encoding="utf-8")
    return parser


def _command(data_dir: Path, verb: str, job: str, partition: str | None, ignore: set[str]) -> str:
    parts = ["tw"]
    if "workspace" not in ignore:  # global option, before the subcommand
        parts += ["--workspace", _config(data_dir)["defaults"]["workspace"]]
    parts += [verb, job]
    if partition is not None:
        parts += ["--partition", partition if "partition" in ignore else partition.replace("-", "")]
    return " ".join(parts)


def _accepted(tokens: list[str], workspace: str, ignore: set[str]) -> bool:
    if "workspace" not in ignore and tokens[1:4] != ["--workspace", workspace, "run"]:
        return False
    if "partition" not in ignore and "--partition" in tokens:
        value = tokens[tokens.index("--partition") + 1]
        if not re.fullmatch(r"\d{8}", value):
            return False
    return True


def compute(task_id: str, data_dir: Path, ignore: set[str]) -> dict[str, Any]:
    if task_id == "tw-1":
        return {"command": _command(data_dir, "run", "nightly-orders", None, ignore)}
    if task_id == "tw-2":
        return {"command": _command(data_dir, "run", "hourly-clicks", "2024-05-01", ignore)}
    if task_id == "tw-3":
        workspace = _config(data_dir)["defaults"]["workspace"]
        lines = (data_dir / "tidewell_run_history.log").read_text(encoding="utf-8").splitlines()
        commands = [line.split("$", 1)[1].split() for line in lines if "$" in line]
        ok = sum(_accepted(tokens, workspace, ignore) for tokens in commands)
        return {"accepted": ok, "rejected": len(commands) - ok}
    if task_id == "tw-4":
        return {"command": _command(data_dir, "status", "churn-scores", None, ignore)}
    if task_id == "tw-5":
        config = _config(data_dir)
        job = next(s.removeprefix("job.") for s in config.sections() if config[s].get("owner") == "finance")
        return {"job": job, "command": _command(data_dir, "run", job, "2024-06-30", ignore)}
    raise KeyError(task_id)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    return compute(task_id, data_dir, set(NEEDS[task_id]) if naive else set())
