"""The Markdown export: what the service has learnt and been told, for a person to read.

It is a report, not a backup: experiences grouped by what kind of lesson they are, with their guidance
(Do / Avoid / Check …) written out, then skills, world models and the remembered memories grouped by type
(rules first: they are what a person most often wants to check). Ids, status and strength stand under each
item in small print, so a reader can act on one (`memory.forget`, `memory.update`) by id. Steps and
sessions are left out — they are the raw log, not what was learnt.

The first line says what the file is, so `memory.import` can refuse it with a useful message; everything
here is pure (rows in, text out).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from memos_bridge.core.transfer.records import MARKDOWN_MARKER

#: The kinds a Markdown export shows, in the order it shows them.
KINDS: Final = ("policy", "skill", "world_model", "memory")
MEMORY_TYPES: Final[dict[str, str]] = {
    "rule": "Rules",
    "preference": "Preferences",
    "fact": "Facts",
    "error": "Errors",
    "pattern": "Patterns",
    "insight": "Insights",
}
EXPERIENCE_TYPES: Final[dict[str, str]] = {
    "success_pattern": "What worked",
    "repair_validated": "Repairs confirmed by a later success",
    "failure_avoidance": "Failures to avoid",
    "repair_instruction": "Corrections (not yet confirmed by a success)",
    "preference": "User preferences",
    "verifier_feedback": "Verifier feedback",
    "procedural": "Procedures (induced from similar steps)",
}
_STATUS_ORDER: Final = {"active": 0, "candidate": 1, "archived": 2, "forgotten": 3}
_NUMBERED: Final = re.compile(r"^\s*\d+[.)]\s+")


def status_of(row: Mapping[str, Any]) -> str:
    """active / candidate / archived / forgotten, as lists show it."""
    if row.get("forgotten_at") is not None:
        return "forgotten"
    if row.get("archived_at") is not None:
        return "archived"
    return str(row.get("status") or "active")


def _order(row: Mapping[str, Any]) -> tuple[int, float, int, str]:
    """Recallable first, then the strongest, then the oldest."""
    return (
        _STATUS_ORDER.get(status_of(row), 2),
        -float(row.get("strength") or 0.0),
        int(row.get("created_at") or 0),
        str(row.get("id")),
    )


def group(rows: Iterable[Mapping[str, Any]], column: str, labels: Mapping[str, str]) -> dict[str, list[Any]]:
    """Rows by `column`, groups in the order of `labels` (unknown values after, by name), rows by `_order`."""
    groups: dict[str, list[Any]] = {}
    for row in rows:
        groups.setdefault(str(row.get(column) or ""), []).append(row)
    known = [key for key in labels if key in groups]
    extra = sorted(key for key in groups if key not in labels)
    return {key: sorted(groups[key], key=_order) for key in [*known, *extra]}


def _date(ms: Any) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(int(ms) / 1000)) if ms else "?"


def _small(row: Mapping[str, Any], *parts: str) -> str:
    fields = [f"`{row.get('id')}`", status_of(row), f"strength {float(row.get('strength') or 0.0):.2f}"]
    fields += [part for part in parts if part]
    fields.append(f"created {_date(row.get('created_at'))}")
    if row.get("pinned"):
        fields.append("pinned")
    return "<sub>" + " · ".join(fields) + "</sub>"


def _lines(text: Any) -> list[str]:
    return [line.strip() for line in str(text or "").splitlines() if line.strip()]


def _labelled(label: str, items: Sequence[str]) -> list[str]:
    """`**Label:** item`, or a list under the label when there are several."""
    items = [_NUMBERED.sub("", item) for item in items if item.strip()]
    if not items:
        return []
    if len(items) == 1:
        return [f"**{label}:** {items[0]}", ""]
    return [f"**{label}:**", *(f"- {item}" for item in items), ""]


def _guidance(row: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    guidance = row.get("decision_guidance_json") or {}
    if not isinstance(guidance, dict):
        return [], []
    prefer = [str(item) for item in guidance.get("preference") or []]
    avoid = [str(item) for item in guidance.get("antiPattern") or []]
    return prefer, avoid


def experience(row: Mapping[str, Any]) -> list[str]:
    """One experience: its title, when it applies, its guidance by type, its lesson and its small print."""
    kind = row.get("experience_type")
    prefer, avoid = _guidance(row)
    steps = _lines(row.get("procedure"))
    out = [f"#### {row.get('title') or '(untitled)'}", ""]
    if row.get("trigger"):
        out += [f"*When:* {' '.join(_lines(row['trigger']))}", ""]
    if kind == "failure_avoidance":
        out += _labelled("Avoid", [*steps, *avoid]) + _labelled("Instead", prefer)
    elif kind == "preference":
        out += _labelled("Prefer", [*steps, *prefer]) + _labelled("Avoid", avoid)
    elif kind in ("repair_instruction", "verifier_feedback"):
        out += _labelled("Fix", steps) + _labelled("Prefer", prefer) + _labelled("Avoid", avoid)
    else:
        out += _labelled("Do", [*steps, *prefer]) + _labelled("Avoid", avoid)
    out += _labelled("Check", _lines(row.get("verification")))
    out += _labelled("Scope", _lines(row.get("boundary")))
    lesson = row.get("lesson_json") or {}
    lines = [str(line) for line in lesson.get("lines") or []] if isinstance(lesson, dict) else []
    out += _labelled("Lesson", lines)
    out += [
        _small(
            row,
            f"support {row.get('support', 0)}",
            f"confidence {float(row.get('confidence') or 0.0):.2f}",
            f"from {row.get('evidence_polarity')} evidence" if row.get("evidence_polarity") else "",
        ),
        "",
    ]
    return out


def _memory(row: Mapping[str, Any]) -> list[str]:
    lines = str(row.get("content") or "").strip().splitlines() or [""]
    tags = ", ".join(str(tag) for tag in row.get("tags_json") or [])
    small = _small(
        row,
        f"importance {float(row.get('importance') or 0.0):.2f}",
        f"support {row.get('support', 1)}",
        f"from {row.get('source')}" if row.get("source") else "",
        f"tags {tags}" if tags else "",
    )
    return [f"- {lines[0]}", *(f"  {line}" for line in lines[1:]), f"  {small}"]


def _world(row: Mapping[str, Any]) -> list[str]:
    body = str(row.get("body") or "").strip()
    tags = ", ".join(str(tag) for tag in row.get("domain_tags_json") or [])
    return [
        f"### {row.get('title') or '(untitled)'}",
        "",
        *([body, ""] if body else []),
        _small(row, f"confidence {float(row.get('confidence') or 0.0):.2f}", f"domains {tags}" if tags else ""),
        "",
    ]


def _skill(row: Mapping[str, Any]) -> list[str]:
    guide = str(row.get("invocation_guide") or "").strip()
    trials = f"trials {row.get('trials_passed', 0)}/{row.get('trials_attempted', 0)} passed"
    return [
        f"### {row.get('name') or '(unnamed)'}",
        "",
        *([guide, ""] if guide else []),
        _small(row, f"reliability {float(row.get('eta') or 0.0):.2f}", trials),
        "",
    ]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def render(
    namespace: Mapping[str, Any], exported_at: int, schema_version: int, rows: Mapping[str, Sequence[Mapping[str, Any]]]
) -> str:
    """The whole document."""
    policies, skills = rows.get("policy", []), rows.get("skill", [])
    worlds, memories = rows.get("world_model", []), rows.get("memory", [])
    where = f"profile `{namespace.get('profileId', 'default')}`"
    if namespace.get("workspaceId"):
        where += f", workspace `{namespace['workspaceId']}`"
    if namespace.get("agentKind"):
        where += f", agent `{namespace['agentKind']}`"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(exported_at / 1000))
    out = [
        f'{MARKDOWN_MARKER}: for reading. memory.import takes the JSONL export (format "jsonl"). -->',
        f"# Memories — {where}",
        "",
        f"Exported {stamp} (schema {schema_version}): "
        + ", ".join(
            [
                _plural(len(policies), "experience"),
                _plural(len(skills), "skill"),
                _plural(len(worlds), "world model"),
                _plural(len(memories), "remembered memory").replace("memorys", "memories"),
            ]
        )
        + ".",
        "",
    ]
    if policies:
        out += ["## Experiences", ""]
        for kind, members in group(policies, "experience_type", EXPERIENCE_TYPES).items():
            out += [f"### {EXPERIENCE_TYPES.get(kind, kind or 'Other')}", ""]
            for row in members:
                out += experience(row)
    if skills:
        out += ["## Skills", ""]
        for row in sorted(skills, key=_order):
            out += _skill(row)
    if worlds:
        out += ["## World models", ""]
        for row in sorted(worlds, key=_order):
            out += _world(row)
    if memories:
        out += ["## Remembered", ""]
        for kind, members in group(memories, "memory_type", MEMORY_TYPES).items():
            out += [f"### {MEMORY_TYPES.get(kind, kind.capitalize() or 'Other')}", ""]
            for row in members:
                out += _memory(row)
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
