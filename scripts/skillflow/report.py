"""The run's outputs: a JSON report, a printed table per family and (with matplotlib) a cumulative-success plot.

The JSON report keeps everything needed to judge a run afterwards without the data home: per task the verdict
with and without memory, the agent's steps and notes, what `turn.start` recalled (hit ids and kinds, the
injected text, which lessons it carried) and what the service had learnt after the task's feedback; per family
the success counts, the cumulative curves and the final experiences, skills and world models.
"""

from __future__ import annotations

import importlib
import itertools
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skillflow.family import Family
from skillflow.protocol import FamilyRun, Trial

REPORT_VERSION = 1
KIND_SHORT = {"skill": "skill", "experience": "exp", "trace": "trace", "episode": "task", "world-model": "world"}


def cumulative(successes: Sequence[bool]) -> list[int]:
    """Successes so far after each task."""
    return list(itertools.accumulate(int(s) for s in successes))


AGENT_USAGE_KEYS = ("llmCalls", "promptTokens", "completionTokens", "durationMs")


def agent_usage(notes: dict[str, Any]) -> dict[str, int] | None:
    """The agent's own LLM calls, tokens and time from its notes (None for agents that call no LLM)."""
    if "llmCalls" not in notes:
        return None
    return {k: int(notes.get(k) or 0) for k in AGENT_USAGE_KEYS}


def _sum_usage(items: Sequence[dict[str, int] | None]) -> dict[str, int] | None:
    present = [u for u in items if u is not None]
    if not present:
        return None
    return {k: sum(u.get(k, 0) for u in present) for k in AGENT_USAGE_KEYS}


def trial_json(trial: Trial) -> dict[str, Any]:
    check = trial.check
    out: dict[str, Any] = {
        "task": trial.task,
        "title": trial.title,
        "userText": trial.user_text,
        "passed": check.passed,
        "score": check.score,
        "passedChecks": check.passed_checks,
        "total": check.total,
        "failing": list(check.failing),
        "diagnosed": list(check.diagnosed),
        "message": check.message,
        "expected": check.expected,
        "actual": check.actual,
        "agent": {"reply": trial.agent.reply, "steps": trial.agent.steps, "notes": trial.agent.notes},
        "agentUsage": agent_usage(trial.agent.notes),
        "wallMs": trial.wall_ms,
    }
    if trial.episode_id is not None:
        out.update(
            episodeId=trial.episode_id,
            newEpisode=trial.new_episode,
            traceIds=trial.trace_ids,
            feedbackId=trial.feedback_id,
            evidenceId=trial.evidence_id,
            recall=trial.recall,
            memoryAfter=trial.memory_after,
        )
    return out


def _summary(run: FamilyRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    successes = run.successes
    return {
        "successes": sum(successes),
        "total": len(successes),
        "rate": round(sum(successes) / len(successes), 4) if successes else 0.0,
        "perTask": successes,
        "cumulative": cumulative(successes),
        "agentUsage": _sum_usage([agent_usage(t.agent.notes) for t in run.trials]),
        "wallMs": sum(t.wall_ms or 0 for t in run.trials),
    }


def learnt(state: dict[str, Any] | None) -> dict[str, Any]:
    """Counts of what the service built: typed experiences by type, L2 policies, skills, world models."""
    state = state or {}
    experiences = state.get("experiences") or []
    return {
        "experiences": len(experiences),
        "experiencesByType": dict(Counter(str(e.get("experienceType")) for e in experiences)),
        "l2Policies": len(state.get("policies") or []),
        "skills": len(state.get("skills") or []),
        "worldModels": len(state.get("worldModels") or []),
        "llmCalls": int(state.get("llmCalls") or 0),
        "llmTokensIn": int(state.get("llmTokensIn") or 0),
        "llmTokensOut": int(state.get("llmTokensOut") or 0),
    }


def family_report(family: Family, with_memory: FamilyRun | None, without_memory: FamilyRun | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "family": family.name,
        "title": family.title,
        "tasks": [t.id for t in family.tasks],
        "pitfalls": {p.id: p.title for p in family.pitfalls.values()},
        "summary": {"withMemory": _summary(with_memory), "withoutMemory": _summary(without_memory)},
    }
    if with_memory is not None:
        out["withMemory"] = {
            "dataHome": with_memory.data_home,
            "sessionId": with_memory.session_id,
            "warnings": with_memory.warnings,
            "learnt": learnt(with_memory.final_memory),
            "finalMemory": with_memory.final_memory,
            "trials": [trial_json(t) for t in with_memory.trials],
        }
    if without_memory is not None:
        out["withoutMemory"] = {"trials": [trial_json(t) for t in without_memory.trials]}
    return out


def build_report(families: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    return {"version": REPORT_VERSION, **meta, "families": families}


# ---------------------------------------------------------------- table


def _verdict(trial: dict[str, Any] | None) -> str:
    if trial is None:
        return "-"
    return f"{'PASS' if trial['passed'] else 'FAIL'} {trial['passedChecks']}/{trial['total']}"


def _recalled(recall: dict[str, Any] | None) -> str:
    if not recall:
        return "-"
    kinds = Counter(KIND_SHORT.get(str(h.get("refKind")), str(h.get("refKind"))) for h in recall.get("hits") or [])
    return ", ".join(f"{n} {k}" for k, n in kinds.items()) or "nothing"


def _state(memory: dict[str, Any] | None) -> str:
    if not memory:
        return "-"
    return f"{len(memory['experiences'])}/{len(memory['skills'])}/{len(memory['worldModels'])}"


def _rate(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "not run"
    return f"{summary['successes']}/{summary['total']} ({summary['rate']:.0%})"


def _usage_cell(trial: dict[str, Any] | None) -> str:
    """calls/prompt tokens/completion tokens of the agent's LLM, or "-"."""
    usage = (trial or {}).get("agentUsage")
    if not usage:
        return "-"
    return f"{usage['llmCalls']}/{usage['promptTokens']}/{usage['completionTokens']}"


def _seconds(trial: dict[str, Any] | None) -> str:
    wall = (trial or {}).get("wallMs")
    return "-" if wall is None else f"{wall / 1000:.1f}"


def _service_delta(trial: dict[str, Any] | None, before: dict[str, Any] | None) -> str:
    """The service's LLM calls/tokens in/out spent during this task (from the snapshots around it)."""
    after = (trial or {}).get("memoryAfter")
    if not after:
        return "-"
    prior = before or {}
    keys = ("llmCalls", "llmTokensIn", "llmTokensOut")
    return "/".join(str(int(after.get(k) or 0) - int(prior.get(k) or 0)) for k in keys)


def _trials(report: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    return {t["task"]: t for t in (report.get(key) or {}).get("trials", [])}


def _has_agent_llm(report: dict[str, Any]) -> bool:
    trials = [*_trials(report, "withMemory").values(), *_trials(report, "withoutMemory").values()]
    return any(t.get("agentUsage") for t in trials)


def table_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """One family's table: a header row, then one row per task."""
    with_trials = _trials(report, "withMemory")
    without_trials = _trials(report, "withoutMemory")
    has_agent_llm = _has_agent_llm(report)
    rows: list[tuple[str, ...]] = [
        ("#", "task", "without", "with", "recalled at turn.start", "lessons in recall", "exp/skill/world")
    ]
    if has_agent_llm:
        rows[0] += ("agent LLM w/o", "agent LLM with", "service LLM", "s w/o", "s with")
    before: dict[str, Any] | None = None
    for i, task in enumerate(report["tasks"], 1):
        w = with_trials.get(task)
        wo = without_trials.get(task)
        recall = w.get("recall") if w else None
        lessons = (", ".join(recall.get("lessonsPresent") or []) or "-") if recall else "-"
        row: tuple[str, ...] = (
            str(i),
            task,
            _verdict(wo),
            _verdict(w),
            _recalled(recall),
            lessons,
            _state(w.get("memoryAfter") if w else None),
        )
        if has_agent_llm:
            row += (_usage_cell(wo), _usage_cell(w), _service_delta(w, before), _seconds(wo), _seconds(w))
        rows.append(row)
        before = (w or {}).get("memoryAfter") or before
    return rows


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Success, cumulative curves, what was learnt and the LLM usage of one family, one fact per line."""
    summary = report["summary"]
    lines = [f"success: without memory {_rate(summary['withoutMemory'])}, with memory {_rate(summary['withMemory'])}"]
    for label, key in (("without", "withoutMemory"), ("with", "withMemory")):
        if summary[key] is not None:
            lines.append(f"cumulative {label} memory: {' '.join(map(str, summary[key]['cumulative']))}")
    if "withMemory" in report:
        info = report["withMemory"]["learnt"]
        types = ", ".join(f"{t} ×{n}" for t, n in sorted(info["experiencesByType"].items())) or "none"
        lines.append(
            f"learnt: {info['experiences']} typed experiences ({types}), {info['l2Policies']} L2 policies, "
            f"{info['skills']} skills, {info['worldModels']} world models; LLM calls {info['llmCalls']}"
            + (f" ({info['llmTokensIn']} tokens in, {info['llmTokensOut']} out)" if info["llmCalls"] else "")
        )
        lines += [f"warning: {w}" for w in report["withMemory"]["warnings"]]
    if _has_agent_llm(report):
        lines.append("agent LLM and service LLM columns: calls/prompt tokens/completion tokens; s: wall seconds")
        for label, key in (("without", "withoutMemory"), ("with", "withMemory")):
            part = summary[key]
            if part is not None and part.get("agentUsage"):
                u = part["agentUsage"]
                lines.append(
                    f"agent LLM {label} memory: {u['llmCalls']} calls, {u['promptTokens']} prompt + "
                    f"{u['completionTokens']} completion tokens, {u['durationMs'] / 1000:.1f} s in calls; "
                    f"wall {part['wallMs'] / 1000:.1f} s"
                )
    return lines


def format_table(report: dict[str, Any]) -> str:
    """A plain-text table of one family's report."""
    rows = table_rows(report)
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [f"{report['family']} — {report['title']} ({len(report['tasks'])} tasks)"]
    lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += [f"  {line}" for line in summary_lines(report)]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def format_markdown(report: dict[str, Any], command: str | None = None) -> str:
    """The whole run as Markdown: the command, then per family its table and summary lines (for docs/)."""
    lines = ["# SkillFlow run", ""]
    if command:
        lines += ["```bash", command, "```", ""]
    agent = report.get("agent") or {}
    lines.append(
        f"Agent: {agent.get('kind')} ({agent.get('command') or 'built in'}); variant: {report.get('variant') or '-'}; "
        f"wall time {report.get('wallMs', 0) / 1000:.0f} s."
    )
    for family in report["families"]:
        rows = table_rows(family)
        lines += ["", f"## {family['family']} — {family['title']}", ""]
        lines.append("| " + " | ".join(_cell(c) for c in rows[0]) + " |")
        lines.append("|" + "---|" * len(rows[0]))
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows[1:]]
        lines += [""] + [f"* {line}" for line in summary_lines(family)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plot


def plot(report: dict[str, Any], path: Path) -> str:
    """The cumulative success curves as a PNG (one panel per family); a message saying what happened."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib to get one)"
    matplotlib.use("Agg")
    pyplot: Any = importlib.import_module("matplotlib.pyplot")
    families = report["families"]
    figure, axes = pyplot.subplots(1, len(families), figsize=(5 * len(families), 3.8), squeeze=False)
    for axis, family in zip(axes[0], families, strict=True):
        tasks = list(range(1, len(family["tasks"]) + 1))
        for key, label, style in (("withMemory", "with memory", "o-"), ("withoutMemory", "without memory", "s--")):
            summary = family["summary"][key]
            if summary is not None:
                axis.plot(tasks, summary["cumulative"], style, label=f"{label} ({summary['successes']}/{len(tasks)})")
        axis.set_title(family["title"])
        axis.set_xlabel("task")
        axis.set_ylabel("cumulative successes")
        axis.set_xticks(tasks)
        axis.set_ylim(0, len(tasks))
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return f"plot: {path}"
