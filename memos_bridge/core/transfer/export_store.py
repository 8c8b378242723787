"""The SQL of an export: every row of one namespace, in the order an import can insert it.

Scoping is by ownership only. The shared-row rule of reads (`OwnerFilter.clause` also admits rows another
namespace made public) is deliberately not used: an export is a copy of what the namespace owns, and must
never carry another namespace's rows, shared or not. Remembered memories belong to a profile and workspace,
not to an agent kind (`memory_scope`), exactly as recall reads them.

Children follow their parents: an episode is written only when its session is, a step only when its
episode is, a link only when both of its ends are, history (audit and strength events) only for rows that
are written. A file is therefore complete in itself, whatever `kinds` or `includeForgotten` left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import ColumnElement, Select, and_, func, select, true
from sqlalchemy.orm import Session

from memos_bridge.core.memories import memory_scope
from memos_bridge.core.transfer.records import BY_KIND, SEARCHABLE, RecordSpec
from memos_bridge.storage.models import (
    AuditEventRow,
    DecisionRepairRow,
    EpisodeRow,
    FeedbackRow,
    MemoryLinkRow,
    MemoryRow,
    PolicyRow,
    SchemaMigrationRow,
    SessionRow,
    SkillRow,
    SkillTrialRow,
    StrengthEventRow,
    TracePolicyLinkRow,
    TraceRow,
    TurnRow,
    WorldModelRow,
)
from memos_bridge.storage.owner import OwnerFilter

#: The kinds `memory.export` accepts, and what each needs with it to be importable on its own.
EXPORT_KINDS: Final = ("session", "episode", "trace", "feedback", "policy", "world_model", "skill", "memory")
NEEDS: Final[dict[str, tuple[str, ...]]] = {
    "episode": ("session",),
    "trace": ("episode", "session"),
    "feedback": ("episode", "session"),
}
#: Kinds whose rows are searchable (and may be forgotten), by record kind.
_SEARCHABLE_MODELS: Final[dict[str, Any]] = {
    "trace": TraceRow,
    "policy": PolicyRow,
    "world_model": WorldModelRow,
    "skill": SkillRow,
    "memory": MemoryRow,
}
_CHUNK: Final = 500
_BATCH: Final = 500


def close_kinds(kinds: Iterable[str] | None) -> frozenset[str]:
    """The export kinds asked for (all by default) plus the parents their rows cannot be imported without."""
    asked = set(EXPORT_KINDS if kinds is None else kinds)
    for kind in list(asked):
        asked.update(NEEDS.get(kind, ()))
    return frozenset(asked)


@dataclass(frozen=True)
class ExportScope:
    owner: OwnerFilter
    kinds: frozenset[str]
    include_forgotten: bool


def schema_version(db: Session) -> int:
    return int(db.scalar(select(func.max(SchemaMigrationRow.version))) or 0)


def owned(model: Any, owner: OwnerFilter) -> ColumnElement[bool]:
    """The rows `owner` owns (shared rows of other namespaces excluded)."""
    return and_(
        true() if owner.agent_kind is None else model.owner_agent_kind == owner.agent_kind,
        model.owner_profile_id == owner.profile_id,
        model.owner_workspace_id.is_not_distinct_from(owner.workspace_id),
    )


def _scope_of(kind: str, owner: OwnerFilter) -> OwnerFilter:
    return memory_scope(owner) if kind == "memory" else owner


def searchable_stmt(kind: str, scope: ExportScope) -> Select[Any]:
    """A searchable kind's rows of the namespace, oldest first (`rid` order, so the import keeps it)."""
    model = _SEARCHABLE_MODELS[kind]
    stmt = select(model).where(owned(model, _scope_of(kind, scope.owner)))
    if not scope.include_forgotten:
        stmt = stmt.where(model.forgotten_at.is_(None))
    return stmt.order_by(model.rid)


def _stream(db: Session, stmt: Select[Any]) -> Iterator[Any]:
    return iter(db.scalars(stmt.execution_options(yield_per=_BATCH)))


def _chunked(
    db: Session, build: Callable[[list[str]], Select[Any]], values: Iterable[str], order: Callable[[Any], Any]
) -> list[Any]:
    """Rows matching `values` (an IN list, in chunks: SQLite caps bound parameters), in `order`."""
    ordered = sorted(set(values))
    rows: list[Any] = []
    for start in range(0, len(ordered), _CHUNK):
        rows.extend(db.scalars(build(ordered[start : start + _CHUNK])))
    return sorted(rows, key=order)


def iter_export(db: Session, scope: ExportScope) -> Iterator[tuple[RecordSpec, Any]]:
    """(record spec, ORM row) for every row the export writes, in file order."""
    ids: dict[str, set[str]] = {kind: set() for kind in BY_KIND}
    owner = scope.owner

    def emit(kind: str, rows: Iterable[Any], keep: Callable[[Any], bool] = lambda _row: True) -> Iterator[Any]:
        spec = BY_KIND[kind]
        for row in rows:
            if keep(row):
                if spec.key is not None:
                    ids[kind].add(getattr(row, spec.key))
                yield spec, row

    if "session" in scope.kinds:
        sessions = select(SessionRow).where(owned(SessionRow, owner)).order_by(SessionRow.started_at, SessionRow.id)
        yield from emit("session", _stream(db, sessions))
    if "episode" in scope.kinds:
        episodes = select(EpisodeRow).where(owned(EpisodeRow, owner)).order_by(EpisodeRow.started_at, EpisodeRow.id)
        yield from emit("episode", _stream(db, episodes), lambda row: row.session_id in ids["session"])
        turns = select(TurnRow).where(owned(TurnRow, owner)).order_by(TurnRow.id)
        yield from emit("turn", _stream(db, turns), lambda row: row.episode_id in ids["episode"])
    if "trace" in scope.kinds:
        yield from emit(
            "trace",
            _stream(db, searchable_stmt("trace", scope)),
            lambda row: row.episode_id in ids["episode"] and row.session_id in ids["session"],
        )
    if "feedback" in scope.kinds:
        feedback = select(FeedbackRow).where(owned(FeedbackRow, owner)).order_by(FeedbackRow.ts, FeedbackRow.id)
        yield from emit("feedback", _stream(db, feedback))
    if "policy" in scope.kinds:
        yield from emit("policy", _stream(db, searchable_stmt("policy", scope)))
        # the prefer/avoid pairs a repair made (they are also folded into the experiences' guidance)
        repairs = (
            select(DecisionRepairRow)
            .where(owned(DecisionRepairRow, owner))
            .order_by(DecisionRepairRow.ts, DecisionRepairRow.id)
        )
        yield from emit("decision_repair", _stream(db, repairs))
    for kind in ("world_model", "skill", "memory"):
        if kind in scope.kinds:
            yield from emit(kind, _stream(db, searchable_stmt(kind, scope)))
    yield from _links(db, ids, emit)
    if "skill" in scope.kinds:
        trials = (
            select(SkillTrialRow)
            .where(owned(SkillTrialRow, owner))
            .order_by(SkillTrialRow.created_at, SkillTrialRow.id)
        )
        yield from emit("skill_trial", _stream(db, trials), lambda row: row.skill_id in ids["skill"])
    yield from _history(db, ids, emit)


Emit = Callable[..., Iterator[tuple[RecordSpec, Any]]]


def _links(db: Session, ids: dict[str, set[str]], emit: Emit) -> Iterator[tuple[RecordSpec, Any]]:
    """Typed links between two written rows, and the step ↔ experience links of written experiences."""
    written = {i for kind in SEARCHABLE for i in ids[kind]}
    links = _chunked(
        db,
        lambda chunk: select(MemoryLinkRow).where(MemoryLinkRow.from_id.in_(chunk)),
        written,
        lambda row: row.id,
    )
    yield from emit("memory_link", links, lambda row: row.to_id in written)
    pairs = _chunked(
        db,
        lambda chunk: select(TracePolicyLinkRow).where(TracePolicyLinkRow.policy_id.in_(chunk)),
        ids["policy"],
        lambda row: (row.created_at, row.policy_id, row.trace_id),
    )
    yield from emit("trace_policy_link", pairs, lambda row: row.trace_id in ids["trace"])


def _history(db: Session, ids: dict[str, set[str]], emit: Emit) -> Iterator[tuple[RecordSpec, Any]]:
    """Audit events targeting a written row (`<kind>:<id>`), then its strength events."""
    targets = {f"{kind}:{i}" for kind in ("session", "episode", *SEARCHABLE) for i in ids[kind]}
    audits = _chunked(
        db, lambda chunk: select(AuditEventRow).where(AuditEventRow.target.in_(chunk)), targets, lambda r: r.id
    )
    yield from emit("audit_event", audits)
    written = {i for kind in SEARCHABLE for i in ids[kind]}
    events = _chunked(
        db,
        lambda chunk: select(StrengthEventRow).where(StrengthEventRow.target_id.in_(chunk)),
        written,
        lambda row: row.id,
    )
    yield from emit("strength_event", events, lambda row: row.target_id in ids.get(row.target_kind, ()))


def readable_rows(db: Session, scope: ExportScope, kinds: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Column values of the kinds a Markdown export shows (experiences, world models, skills, memories)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in kinds:
        spec = BY_KIND[kind]
        columns = [name for name in spec.columns if name not in spec.vectors]
        out[kind] = [{name: getattr(row, name) for name in columns} for row in db.scalars(searchable_stmt(kind, scope))]
    return out
