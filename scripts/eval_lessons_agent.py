#!/usr/bin/env python3
"""A real local model as the agent on corpus families, four memory arms: none / naive / service / oracle.

    python scripts/eval_lessons_agent.py --llm-serve qwen2.5-coder-1.5b --out docs/eval/lessons-agent.json
    python scripts/eval_lessons_agent.py --llm-url http://127.0.0.1:8080/v1 --family kestrel_freight --arm service

Prints each trial as it ends, then per family and in total: passes per arm, the service's margin over the naive
arm, and the share of the oracle's gain over no memory that the service reaches. See `scripts/lessons/agent_eval.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lessons.agent_eval import ARMS, AgentSettings, ArmRun, run_arm
from lessons.corpus import SPLITS, load_corpus
from skillflow.runner import served_model


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def summary(runs: Sequence[ArmRun]) -> dict[str, Any]:
    tasks = len(runs[0].attempts) if runs else 0
    rates = {run.arm: run.passed / tasks if tasks else 0.0 for run in runs}
    out: dict[str, Any] = {"tasks": tasks, "passed": {run.arm: run.passed for run in runs}, "rates": rates}
    if {"none", "naive", "oracle"} <= set(rates):
        gain = rates["oracle"] - rates["none"]
        for arm, label in (("service", "service"), ("service-full", "serviceFull")):
            if arm in rates:
                out[f"{label}MinusNaivePoints"] = round(100 * (rates[arm] - rates["naive"]), 1)
                out[f"{label}ShareOfOracleGain"] = round((rates[arm] - rates["none"]) / gain, 3) if gain > 0 else None
    families = sorted({a.family for run in runs for a in run.attempts})
    out["perFamily"] = {
        family: {run.arm: sum(a.passed for a in run.attempts if a.family == family) for run in runs}
        for family in families
    }
    out["wallSeconds"] = {run.arm: run.wall_s for run in runs}
    out["meanMemoryChars"] = {
        run.arm: round(sum(a.memory_chars for a in run.attempts) / max(1, len(run.attempts))) for run in runs
    }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=SPLITS, default="report")
    parser.add_argument("--family", action="append", default=[], help="only these families (repeatable)")
    parser.add_argument("--arm", action="append", choices=ARMS, help="arms to run (default: all four)")
    parser.add_argument(
        "--render",
        choices=("compact", "full", "both"),
        default="compact",
        help="the service arm's block (both: the service arm twice, the full block as `service-full`)",
    )
    parser.add_argument("--llm-url", help="an OpenAI-compatible base URL ending in /v1")
    parser.add_argument("--llm-serve", metavar="MODEL", help="start `memos-bridge llm serve --model MODEL` for the run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    families = load_corpus(split=args.split, names=args.family)
    if not families:
        raise SystemExit("no family matches")
    began = time.perf_counter()
    with contextlib.ExitStack() as stack:
        url = args.llm_url
        if args.llm_serve:
            log = stack.enter_context(Path(f"/tmp/lessons-llm-serve-{args.llm_serve}.log").open("w", encoding="utf-8"))
            url = stack.enter_context(served_model(args.llm_serve, None, args.threads, log))
            print(f"llm serve: {args.llm_serve} at {url}", file=sys.stderr, flush=True)
        if not url:
            raise SystemExit("give --llm-url or --llm-serve")
        settings = AgentSettings(base_url=url)
        runs: list[ArmRun] = []
        plan: list[tuple[str, str]] = []  # (arm, render)
        for arm in args.arm or ARMS:
            if arm == "service" and args.render == "both":
                plan += [("service", "compact"), ("service", "full")]
            else:
                plan.append((arm, "full" if args.render == "full" else "compact"))
        for arm, render in plan:
            run = run_arm(arm, families, settings, render=render, progress=_progress)
            if arm == "service" and render == "full" and args.render == "both":
                run.arm = "service-full"
                for attempt in run.attempts:
                    attempt.arm = run.arm
            runs.append(run)
            print(f"{run.arm}: {run.passed}/{len(run.attempts)} passed ({run.wall_s:.0f} s)", flush=True)
    result = summary(runs)
    result["wallSecondsTotal"] = round(time.perf_counter() - began, 1)
    result["families"] = [f.name for f in families]
    result["render"] = args.render
    print(json.dumps({k: v for k, v in result.items() if k != "perFamily"}, indent=1))
    for family, row in result["perFamily"].items():
        print(
            f"  {family:<22} "
            + "  ".join(
                f"{arm} {row.get(arm, 0)}/{sum(1 for f in families if f.name == family for _ in f.tasks)}"
                for arm in row
            )
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"summary": result, "attempts": [a.__dict__ for run in runs for a in run.attempts]}
        args.out.write_text(json.dumps(payload, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
