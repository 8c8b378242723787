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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lessons.agent_eval import ARMS, AgentSettings, ArmRun, Attempt, learnable, run_arm
from lessons.corpus import SPLITS, Family, load_corpus
from lessons.evaluate import NAMESPACES, SESSIONS
from skillflow.runner import served_model


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _rates(runs: Sequence[ArmRun], keep: Callable[[Attempt], bool]) -> dict[str, Any]:
    """Passes per arm over the attempts `keep` selects, with the two targets' figures when the arms are there."""
    chosen = {run.arm: [a for a in run.attempts if keep(a)] for run in runs}
    tasks = len(next(iter(chosen.values()))) if chosen else 0
    rates = {arm: sum(a.passed for a in kept) / tasks if tasks else 0.0 for arm, kept in chosen.items()}
    out: dict[str, Any] = {
        "tasks": tasks,
        "passed": {arm: sum(a.passed for a in kept) for arm, kept in chosen.items()},
        "rates": rates,
    }
    if {"none", "naive", "oracle"} <= set(rates):
        gain = rates["oracle"] - rates["none"]
        for arm, label in (("service", "service"), ("service-full", "serviceFull")):
            if arm in rates:
                out[f"{label}MinusNaivePoints"] = round(100 * (rates[arm] - rates["naive"]), 1)
                out[f"{label}ShareOfOracleGain"] = round((rates[arm] - rates["none"]) / gain, 3) if gain > 0 else None
    return out


def summary(runs: Sequence[ArmRun], families: Sequence[Family]) -> dict[str, Any]:
    """Every task, and the learnable ones alone (an earlier task of the family taught what they need)."""
    out = _rates(runs, lambda a: True)
    taught = {(family.name, task) for family in families for task in learnable(family)}
    out["learnable"] = _rates(runs, lambda a: (a.family, a.task) in taught)
    names = sorted({a.family for run in runs for a in run.attempts})
    out["perFamily"] = {
        name: {run.arm: sum(a.passed for a in run.attempts if a.family == name) for run in runs} for name in names
    }
    out["wallSeconds"] = {run.arm: run.wall_s for run in runs}
    out["meanMemoryChars"] = {
        run.arm: round(sum(a.memory_chars for a in run.attempts) / max(1, len(run.attempts))) for run in runs
    }
    out["leakedValues"] = {run.arm: sum(len(a.leaked) for a in run.attempts) for run in runs}
    return out


def _recorded_arms(path: Path, have: set[str], families: Sequence[Family]) -> list[ArmRun]:
    """The arms of an earlier run (its --out file) that this run did not run, on this run's families."""
    names = {family.name for family in families}
    runs: dict[str, ArmRun] = {}
    for record in json.loads(path.read_text(encoding="utf-8"))["attempts"]:
        if record["arm"] in have or record["family"] not in names:
            continue
        run = runs.setdefault(record["arm"], ArmRun(record["arm"]))
        run.attempts.append(Attempt(**record))
    for run in runs.values():
        run.wall_s = round(sum(a.seconds for a in run.attempts), 1)
    return list(runs.values())


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
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        help="add the arms not run now from an earlier --out file (same model, prompts and seed: none, naive and "
        "oracle do not depend on the service, so a service change needs only the service arm re-run)",
    )
    parser.add_argument(
        "--sessions",
        choices=SESSIONS,
        default="task",
        help="task: a session per task, hours apart; family: one session per family, tasks minutes apart",
    )
    parser.add_argument(
        "--namespaces",
        choices=NAMESPACES,
        default="shared",
        help="shared: every family in one namespace; family: each family in a workspace of its own, as the MCP "
        "server and hooks keep one per project",
    )
    parser.add_argument("--seed", type=int, default=AgentSettings.seed, help="the model's sampling seed")
    parser.add_argument(
        "--temperature", type=float, default=AgentSettings.temperature, help="first attempt's temperature"
    )
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
        settings = AgentSettings(base_url=url, seed=args.seed, temperature=args.temperature)
        runs: list[ArmRun] = []
        plan: list[tuple[str, str]] = []  # (arm, render)
        for arm in args.arm or ARMS:
            if arm == "service" and args.render == "both":
                plan += [("service", "compact"), ("service", "full")]
            else:
                plan.append((arm, "full" if args.render == "full" else "compact"))
        for arm, render in plan:
            run = run_arm(
                arm,
                families,
                settings,
                render=render,
                progress=_progress,
                sessions=args.sessions,
                namespaces=args.namespaces,
            )
            if arm == "service" and render == "full" and args.render == "both":
                run.arm = "service-full"
                for attempt in run.attempts:
                    attempt.arm = run.arm
            runs.append(run)
            print(f"{run.arm}: {run.passed}/{len(run.attempts)} passed ({run.wall_s:.0f} s)", flush=True)
    recorded: dict[str, ArmRun] = {}  # one arm over several --baseline files (one file per family) is one run
    for path in args.baseline:
        for run in _recorded_arms(path, {run.arm for run in runs}, families):
            merged = recorded.setdefault(run.arm, ArmRun(run.arm))
            merged.attempts += run.attempts
            merged.wall_s = round(merged.wall_s + run.wall_s, 1)
    runs += recorded.values()
    result = summary(runs, families)
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
