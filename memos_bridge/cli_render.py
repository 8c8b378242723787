"""How `memos-bridge memories …` shows results to people: rich tables, panels and one-line summaries.

Everything a memory says (its content, title, tags) goes into `Text` objects, never into markup strings:
a memory that contains `[bold]` or `[/]` is shown as written instead of being read as styling (or breaking
the output). Each function takes the method's JSON result as the service returned it (camelCase keys).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

Renderer = Callable[[Console, Any], None]

CLIP = 72
"""Characters of a memory's text in a table row (the whole text is in `show`)."""


# ---------------------------------------------------------------- small formatters


def clip(text: str | None, width: int = CLIP) -> str:
    """One line of at most `width` characters."""
    line = " ".join((text or "").split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def when(ms: int | None) -> str:
    """Epoch milliseconds as local time (what the person at the terminal reads dates in)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")


def number(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def status_of(item: dict[str, Any]) -> str:
    """The one status every method reports: forgotten, then archived, then the lifecycle status."""
    if item.get("forgottenAt"):
        return "forgotten"
    if item.get("archivedAt"):
        return "archived"
    return str(item.get("status") or "active")


def counts(values: dict[str, int]) -> str:
    """`{memories: 1, traces: 0}` → `memories=1` (zeros left out)."""
    shown = [f"{name}={n}" for name, n in sorted(values.items()) if n]
    return ", ".join(shown) or "nothing"


def line(text: str | None) -> Text:
    """A table cell of one line, cut with an ellipsis where the column ends (the whole text is in `show`)."""
    return Text(clip(text), no_wrap=True, overflow="ellipsis")


def _table(*columns: str, title: str | None = None) -> Table:
    """A table whose `text` column is the only one that gives up width on a narrow terminal (see `line`)."""
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    for name in columns:
        if name == "id":
            table.add_column(name, no_wrap=True, min_width=15)
        elif name == "text":
            table.add_column(name, overflow="fold", min_width=20)
        else:
            table.add_column(name, no_wrap=True)
    return table


# ---------------------------------------------------------------- lists and search

#: Per kind: the list result's key, and for each row (type column, text, importance column).
_ROWS: dict[str, tuple[str, Callable[[dict[str, Any]], tuple[str, str, str]]]] = {
    "memory": (
        "memories",
        lambda m: (m["type"], m["content"], number(m.get("importance"))),
    ),
    "policy": (
        "policies",
        lambda p: (p.get("experienceType") or "experience", f"{p['title']}: {p.get('procedure', '')}", "-"),
    ),
    "world_model": ("worldModels", lambda w: ("world model", f"{w['title']}: {w.get('body', '')}", "-")),
    "skill": ("skills", lambda s: ("skill", f"{s['name']}: {s.get('summary') or s.get('invocationGuide', '')}", "-")),
    "trace": (
        "traces",
        lambda t: (f"step ({t.get('stepKind', '?')})", t.get("summary") or t.get("userText", ""), "-"),
    ),
}


_PLURALS = {
    "memory": "remembered memories",
    "policy": "experiences",
    "world_model": "world models",
    "skill": "skills",
    "trace": "steps",
}


def listing(kind: str) -> Renderer:
    """The table `list --kind KIND` prints."""
    key, row = _ROWS[kind]

    def render(console: Console, result: dict[str, Any]) -> None:
        items: list[dict[str, Any]] = result.get(key, [])
        if not items:
            console.print(f"no {_PLURALS[kind]} to list")
            return
        table = _table("id", "type", "status", "strength", "importance", "text")
        for item in items:
            kind_name, text, weight = row(item)
            strength = item.get("strength", item.get("eta"))
            table.add_row(item["id"], kind_name, status_of(item), number(strength), weight, line(text))
        console.print(table)
        console.print(f"{len(items)} shown")

    return render


def search(console: Console, result: dict[str, Any]) -> None:
    hits: list[dict[str, Any]] = result.get("hits", [])
    if not hits:
        stats = result.get("stats") or {}
        reason = stats.get("skippedReason")
        console.print(f"nothing found{f' ({reason})' if reason else ''}")
        return
    table = _table("id", "kind", "tier", "score", "found by", "text")
    for hit in hits:
        table.add_row(
            hit["refId"],
            hit["refKind"],
            str(hit["tier"]),
            number(hit["score"], 3),
            ", ".join(dict.fromkeys(channel.split("_")[0] for channel in hit.get("channels", []))),
            line(hit.get("snippet")),
        )
    console.print(table)


# ---------------------------------------------------------------- one memory

#: Per kind: (title key, main text key, the fields listed under it).
_PANELS: dict[str, tuple[str | None, str, tuple[str, ...]]] = {
    "memory": (
        None,
        "content",
        ("type", "status", "strength", "importance", "support", "source", "pinned", "protected", "tags", "expiresAt"),
    ),
    "policy": (
        "title",
        "procedure",
        (
            "experienceType",
            "status",
            "strength",
            "salience",
            "confidence",
            "support",
            "gain",
            "pinned",
            "trigger",
            "verification",
            "boundary",
            "tags",
            "inducedBy",
        ),
    ),
    "world_model": (
        "title",
        "body",
        ("status", "strength", "confidence", "version", "pinned", "domainTags", "inducedBy"),
    ),
    "skill": (
        "name",
        "invocationGuide",
        ("status", "eta", "support", "gain", "trialsAttempted", "trialsPassed", "usageCount", "version"),
    ),
    "trace": (
        "summary",
        "agentText",
        ("stepKind", "status", "strength", "value", "priority", "pinned", "protected", "tags", "userText"),
    ),
}
#: Fields that say where a memory came from (the rows it was made from).
_SOURCES = (
    "sessionId",
    "episodeId",
    "sourceTraceIds",
    "sourceEpisodeIds",
    "sourceFeedbackIds",
    "policyIds",
    "sourcePolicyIds",
    "sourceWorldModelIds",
)


def _value(key: str, value: Any) -> str:
    if key.endswith("At") or key == "ts":
        return when(value)
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return number(value, 3)


def item_panel(kind: str) -> Renderer:
    """The panel `show ID` prints: the text, its scores and status, where it came from, its recall."""
    title_key, text_key, fields = _PANELS[kind]

    def render(console: Console, shown: dict[str, Any]) -> None:
        item: dict[str, Any] = shown["item"]
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for key in fields:
            if key == "status":
                grid.add_row("status", status_of(item))
            elif key in item and item[key] not in (None, "", []):
                grid.add_row(key, Text(_value(key, item[key])))
        for key in ("ts", "createdAt", "updatedAt", "archivedAt", "forgottenAt"):
            if item.get(key):
                grid.add_row(key, when(item[key]))
        if "accessCount" in item:
            recalled = item["accessCount"]
            last = f", last {when(item.get('lastAccessedAt'))}" if recalled else ""
            grid.add_row("recalled", f"{recalled} time{'' if recalled == 1 else 's'}{last}")
        for key in _SOURCES:
            if item.get(key):
                grid.add_row(key, Text(_value(key, item[key])))
        for link in shown.get("links") or []:
            arrow = "→" if link.get("direction") == "to" else "←"
            grid.add_row(f"link {link.get('relation')}", f"{arrow} {link.get('kind')} {link.get('id')}")
        for recall in reversed(shown.get("recalled") or []):
            query = clip(str(recall.get("detail", {}).get("query", "")), 80)
            grid.add_row("recalled for", Text(f"{when(recall['ts'])}  {query}"))
        created = shown.get("created")
        if created:
            detail = {k: v for k, v in created.get("detail", {}).items() if v not in (None, "", [])}
            origin = f"{created['actor']} at {when(created['ts'])}"
            grid.add_row("created by", Text(origin + (f" — {_detail(detail)}" if detail else "")))
        parts: list[Any] = []
        if title_key and item.get(title_key):
            parts.append(Text(str(item[title_key]), style="bold"))
        parts.append(Text(str(item.get(text_key) or "")))
        parts.append(Text(""))
        parts.append(grid)
        label = kind.replace("_", " ")
        console.print(Panel(Group(*parts), title=f"{label} {item['id']}", title_align="left", expand=True))

    return render


def changed_parts(old: str, new: str, width: int = 40) -> tuple[str, str]:
    """`old` and `new` clipped to `width` around where they start to differ, so a long text edited near its
    end still shows the edit ("…port 5433, not 5432." → "…port 5434 since the migration.")."""
    if len(old) <= width and len(new) <= width:
        return old, new
    start = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    cut = max(0, start - width // 4)
    lead = "…" if cut else ""
    return clip(lead + old[cut:], width), clip(lead + new[cut:], width)


def _detail(detail: dict[str, Any]) -> str:
    """A history event's detail on one line; an update shows each field as old → new (clipped)."""
    changes = detail.get("changes")
    if isinstance(changes, dict):
        return "; ".join(
            "{}: {} → {}".format(field, *changed_parts(str(change.get("old")), str(change.get("new"))))
            if isinstance(change, dict)
            else f"{field}: {change}"
            for field, change in changes.items()
        )
    return ", ".join(f"{key}={_value(key, value)}" for key, value in detail.items() if value not in (None, "", []))


def history(console: Console, result: dict[str, Any]) -> None:
    events: list[dict[str, Any]] = result.get("events", [])
    label = f"history of {result['kind'].replace('_', ' ')} {result['id']}"
    table = _table("when", "event", "by", "text", title=label)
    for event in events:
        table.add_row(when(event["ts"]), event["event"], event["actor"], Text(_detail(event.get("detail", {}))))
    console.print(table)


# ---------------------------------------------------------------- changes


def remembered(console: Console, result: dict[str, Any]) -> None:
    if result.get("merged"):
        console.print(Text(f"merged into {result['id']} (an equal or near-equal memory was already stored)"))
    else:
        console.print(Text(f"remembered {result['id']}"))


def updated(console: Console, result: dict[str, Any]) -> None:
    changed = result.get("changed") or []
    if changed:
        console.print(Text(f"updated {result['id']}: {', '.join(changed)}"))
    else:
        console.print(Text(f"{result['id']} already read so: nothing changed"))


def forgotten(memory_id: str) -> Renderer:
    def render(console: Console, result: dict[str, Any]) -> None:
        console.print(Text(f"forgot {memory_id} (hidden from recall, search and lists until restored)"))
        flagged = result.get("flagged") or []
        if flagged:
            console.print(Text(f"flagged for review (made from it): {', '.join(flagged)}"))

    return render


def restored(memory_id: str) -> Renderer:
    def render(console: Console, _result: Any) -> None:
        console.print(Text(f"restored {memory_id}"))

    return render


def purged(console: Console, result: dict[str, Any]) -> None:
    console.print(Text(f"purged {counts(result.get('purged', {}))} (audit record {result.get('auditId')})"))


def exported(console: Console, result: dict[str, Any]) -> None:
    total = sum(result.get("counts", {}).values())
    console.print(Text(f"exported {total} records ({counts(result.get('counts', {}))}) to {result['path']}"))
    console.print(Text(f"{result['format']}, {size(result.get('bytes', 0))}"))


def imported(console: Console, result: dict[str, Any]) -> None:
    console.print(Text(f"imported {counts(result.get('imported', {}))}"))
    if any(result.get("skipped", {}).values()):
        console.print(Text(f"skipped (already present) {counts(result['skipped'])}"))
    if any(result.get("purged", {}).values()):
        console.print(Text(f"purged first {counts(result['purged'])}"))


def reflected(console: Console, result: dict[str, Any]) -> None:
    console.print(
        f"revisited {result['episodes']} episodes, ran {result['chainsRun']} pending learning chains, "
        f"merged {result['merged']} near-duplicate memories, archived {result['expired']} expired ones"
    )
    changes = {kind: delta for kind, delta in result.get("changes", {}).items() if any(delta.values())}
    if changes:
        table = _table("kind", "text", title="status changes")
        for kind, delta in sorted(changes.items()):
            table.add_row(kind, ", ".join(f"{status} {n:+d}" for status, n in sorted(delta.items()) if n))
        console.print(table)


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


# ---------------------------------------------------------------- stats

_STATUS_ORDER = ("active", "candidate", "archived", "forgotten")


def status_table(per_kind: dict[str, dict[str, int]], title: str | None = None) -> Table:
    """Kinds × statuses (the known ones first), with a total column."""
    seen = {status for statuses in per_kind.values() for status in statuses}
    columns = [s for s in _STATUS_ORDER if s in seen] + sorted(seen - set(_STATUS_ORDER))
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    table.add_column("kind", no_wrap=True)
    for name in [*columns, "total"]:
        table.add_column(name, justify="right")
    for kind, statuses in per_kind.items():
        table.add_row(kind, *(str(statuses.get(s, 0)) for s in columns), str(sum(statuses.values())))
    return table


def _bars(bins: Iterable[dict[str, Any]]) -> Table:
    rows = list(bins)
    top = max((b["count"] for b in rows), default=0) or 1
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(justify="right")
    table.add_column()
    for b in rows:
        table.add_row(b["label"], str(b["count"]), "█" * round(20 * b["count"] / top))
    return table


def stats(console: Console, result: dict[str, Any]) -> None:
    console.print(status_table(result.get("counts", {}), title="memories by kind and status"))
    types = {kind: t for kind, t in result.get("types", {}).items() if t}
    for kind, by_type in types.items():
        console.print(Text(f"{kind} types (active): {counts(by_type)}"))
    console.print()
    console.print(Text("strength of recallable memories", style="bold"))
    console.print(_bars(result.get("strength", [])))
    console.print(Text("age of recallable memories", style="bold"))
    console.print(_bars(result.get("ageDays", [])))
    rate = result.get("recallHitRate")
    shown = "-" if rate is None else f"{rate:.0%}"
    console.print(
        Text(
            f"recall hit rate: {shown} ({result.get('turnsWithRecall', 0)} of the last {result.get('turns', 0)} turns)"
        )
    )
