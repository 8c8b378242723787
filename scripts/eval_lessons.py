#!/usr/bin/env python3
"""Lesson generalization: every corpus family through the real JSON-RPC service, per split and feedback style.

    python scripts/eval_lessons.py                          # both splits, every style + mixed, both baselines
    python scripts/eval_lessons.py --split report --style mixed --style user_zh
    python scripts/eval_lessons.py --split dev --family parcel_weights --show   # print each injected text
    python scripts/eval_lessons.py --out docs/eval/lessons.json

Prints, per split: the service's figures per style, per family, and the baselines (`paste`: every earlier
feedback of the family verbatim; `bm25`: the two best-matching earlier feedback texts) on the same work; then
the targets on the report split. See `scripts/lessons/evaluate.py` for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lessons.corpus import SPLITS, Family, load_corpus
from lessons.evaluate import (
    LOST_STAGES,
    NAMESPACES,
    RUN_STYLES,
    SESSIONS,
    SHAPES,
    Measures,
    RunResult,
    count_experiences,
    run_baseline,
    run_service,
    summarise,
)

#: The report split's targets.
TARGETS = {"recall": 0.95, "leakedValues": 0, "inventedLines": 0, "unrelatedRate": 0.05}


def _row(label: str, m: Measures) -> str:
    return (
        f"  {label:<22} recall {m.recalled:>3}/{m.needed:<3} {m.recall:6.1%}"
        f"   unrelated {m.unrelated_tasks:>2}/{m.tasks:<3} {m.unrelated_rate:5.1%}   extra {m.extra:>3}"
        f"   leaked {m.leaked:>3}   invented {m.invented:>3}"
        f"   chars {m.mean_chars:6.0f} (max {m.max_chars})"
        + (
            "   lost at: " + ", ".join(f"{stage} {m.lost[stage]}" for stage in LOST_STAGES if stage in m.lost)
            if m.lost
            else ""
        )
    )


def report(
    results: Sequence[RunResult], out: Any = sys.stdout, families: dict[str, Sequence[Family]] | None = None
) -> dict[str, Any]:
    """Print the tables and return the JSON summary."""
    summary: dict[str, Any] = {}
    for split in SPLITS:
        mine = [r for r in results if r.split == split]
        if not mine:
            continue
        print(f"\n== {split} split", file=out)
        service = [r for r in mine if r.arm == "service"]
        records = [rec for r in service for rec in r.records]
        total = Measures()
        for rec in records:
            total.add(rec)
        print(" service, per style:", file=out)
        by_style = summarise(records, lambda r: r.style if r.style else "?")
        run_style = {rec.task: r.style for r in service for rec in r.records}
        del run_style
        for result in service:
            m = Measures()
            for rec in result.records:
                m.add(rec)
            print(_row(f"{result.style} ({result.wall_s:.0f} s)", m), file=out)
        print(_row("all", total), file=out)
        counts: dict[str, Any] = {}
        if families and split in families:
            print(" typed experiences per run (conventions taught = conventions needed by a taught task):", file=out)
            for result in service:
                count = count_experiences(families[split], result.experiences).as_json()
                counts[result.style] = count
                print(
                    f"  {result.style:<22} {count['experiences']:>3} experiences for {count['conventionsTaught']}"
                    f" conventions ({count['experiencesPerConvention']:.2f} each), covering"
                    f" {count['conventionsCovered']}; mixed {count['mixedExperiences']},"
                    f" carrying none {count['unattributedExperiences']}",
                    file=out,
                )
        print(" service, per family (all styles):", file=out)
        by_family = summarise(records, lambda r: r.family)
        for name, m in sorted(by_family.items()):
            print(_row(name, m), file=out)
        print(" service, per feedback style of the taught task:", file=out)
        for name, m in sorted(by_style.items()):
            print(_row(name, m), file=out)
        baselines: dict[str, Any] = {}
        for arm in ("paste", "bm25"):
            runs = [r for r in mine if r.arm == arm]
            if not runs:
                continue
            m = Measures()
            for result in runs:
                for rec in result.records:
                    m.add(rec)
            baselines[arm] = m.as_json()
            print(_row(f"baseline {arm}", m), file=out)
        summary[split] = {
            "service": total.as_json(),
            "perRun": {r.style: _measures(r).as_json() for r in service},
            "perFamily": {k: v.as_json() for k, v in by_family.items()},
            "baselines": baselines,
            "experiences": counts,
            "wallSeconds": round(sum(r.wall_s for r in service), 1),
        }
    if "report" in summary:
        got = summary["report"]["service"]
        checks = {
            "recall": got["recall"] >= TARGETS["recall"],
            "leakedValues": got["leakedValues"] <= TARGETS["leakedValues"],
            "inventedLines": got["inventedLines"] <= TARGETS["inventedLines"],
            "unrelatedRate": got["unrelatedRate"] <= TARGETS["unrelatedRate"],
        }
        summary["report"]["targetsMet"] = checks
        print(
            "\nreport split targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in checks.items()),
            file=out,
        )
    return summary


class _Tracer:
    """Prints, after each task, the feedback it drew, what its block carried and every experience that is new or
    changed since the task before (`--trace`)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[Any, ...]] = {}

    def __call__(self, client: Any, family: Family, task: Any, record: Any) -> None:
        print(f"\n=== {family.name}/{task.id} [{record.style}] recalled {record.recalled} of {record.needed}")
        if record.unrelated or record.leaked:
            print(f"   unrelated {record.unrelated} leaked {record.leaked}")
        print("   block: " + (record.injected.replace("\n", "\n          ") if record.injected else "(empty)"))
        print(f"   feedback: {task.feedback_text(record.style)!r}")
        policies = client.call("memory.list_policies", {"limit": 500})["policies"]
        for policy in policies:
            if policy.get("inducedBy") != "feedback.experience":
                continue
            key = (policy.get("support"), policy.get("title"), policy.get("procedure"))
            if self.seen.get(policy["id"]) == key:
                continue
            mark = "+" if policy["id"] not in self.seen else "~"
            self.seen[policy["id"]] = key
            body = str(policy.get("procedure") or "").replace("\n", " | ")
            print(f"   {mark} {policy['id'][-6:]} s={policy.get('support')} {policy.get('experienceType')}: {body}")


def _measures(result: RunResult) -> Measures:
    m = Measures()
    for rec in result.records:
        m.add(rec)
    return m


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--split",
        choices=SPLITS,
        action="append",
        help="split(s) to run (default: dev and report; `fresh` only when named: run it once, read aggregates only)",
    )
    parser.add_argument("--style", choices=RUN_STYLES, action="append", help="feedback style(s) (default: all)")
    parser.add_argument("--family", action="append", default=[], help="only these families (repeatable)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the paste and BM25 baselines")
    parser.add_argument("--show", action="store_true", help="print every injected text and what it carried")
    parser.add_argument("--service-env", action="append", default=[], metavar="KEY=VALUE", help="service env var")
    parser.add_argument("--out", type=Path, help="write the summary and every record as JSON")
    parser.add_argument("--service-logs", type=Path, metavar="DIR", help="keep each run's service log in DIR")
    parser.add_argument(
        "--learner",
        action="store_true",
        help="the scripted agent passes a task when every lesson it needs came back (verified success feedback), "
        "so families grow skills; measures whether lessons still come back once they do",
    )
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="files",
        help="how the scripted agent works: files (reads the input, writes the answer file) or script (writes and "
        "runs a script that reads the inputs, as a coding agent does)",
    )
    parser.add_argument(
        "--sessions",
        choices=SESSIONS,
        default="task",
        help="task: a session per task, hours apart; family: one session per family, tasks minutes apart",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="after each task print its feedback and the experiences it created or changed (dev families only)",
    )
    parser.add_argument(
        "--namespaces",
        choices=NAMESPACES,
        default="shared",
        help="shared: every family in one namespace (default); family: each family in a workspace of its own, as "
        "the MCP server and hooks keep one per project",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="place every needed lesson that did not come back: not found, work gate, scope, subject gate, ranking "
        "or block (aggregates per split and style; safe for held-out splits)",
    )
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.service_env)
    results: list[RunResult] = []
    started = time.perf_counter()
    by_split: dict[str, Sequence[Family]] = {}
    for split in args.split or ("dev", "report"):
        families = load_corpus(split=split, names=args.family)
        if not families:
            continue
        by_split[split] = families
        for style in args.style or RUN_STYLES:
            print(f"[{split}] {style}: {len(families)} families …", file=sys.stderr, flush=True)
            log = args.service_logs / f"{split}-{style}.log" if args.service_logs else None
            if args.trace and split != "dev":
                raise SystemExit("--trace reads failures line by line: dev families only")
            result = run_service(
                families,
                style,
                learner=args.learner,
                shape=args.shape,
                env=env,
                keep_log=log,
                sessions=args.sessions,
                after_task=_Tracer() if args.trace else None,
                explain=args.explain,
                namespaces=args.namespaces,
            )
            results.append(result)
            if args.show:
                for rec in result.records:
                    print(
                        f"\n--- {rec.family}/{rec.task} ({rec.style}) needed={rec.needed} recalled={rec.recalled}"
                        f" extra={rec.extra} unrelated={rec.unrelated} leaked={rec.leaked} invented={rec.invented}"
                    )
                    print(rec.injected or "(nothing injected)")
            if not args.no_baselines:
                results.extend(run_baseline(families, style, arm) for arm in ("paste", "bm25"))
    summary = report(results, families=by_split)
    summary["wallSeconds"] = round(time.perf_counter() - started, 1)
    print(f"\nwall time {summary['wallSeconds']:.0f} s", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "summary": summary,
            "runs": [
                {
                    "split": r.split,
                    "style": r.style,
                    "arm": r.arm,
                    "wallSeconds": r.wall_s,
                    "records": [rec.__dict__ for rec in r.records] if r.arm == "service" else [],
                    "experiences": r.experiences,
                }
                for r in results
            ],
        }
        args.out.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
