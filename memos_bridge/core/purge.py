"""`memory.purge`: the hard delete (a user's right to erasure), with nothing of the content left behind.

Forgetting hides; purging removes. A purge deletes the chosen rows and everything that would still carry
their words: the full-text index entries (FTS5 keeps deleted terms in old index segments until they are
merged, so the touched indexes are optimised), the vectors (database and in-memory indexes), cached
`turn.start` results (their injected text quotes memories), API log entries of the purged sessions (they
hold the queries), links, strength and history events, queued embedding retries, and the embedding cache.
SQLite's `secure_delete` is on for the purge so freed pages are zeroed rather than left readable, and the
write-ahead log is checkpointed and truncated afterwards so no old page image survives in it.

Scope: the ids given, else every row of the namespace given, else of the caller's session's namespace,
else of the default namespace — never another namespace's row, even by id. What is left is one audit
record with the counts (no content).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final, cast

import anyio.to_thread
from sqlalchemy import CursorResult, delete, select, text, update
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.namespace import bulk_scope
from memos_bridge.core.strength_rules import kind_of_id
from memos_bridge.storage.fts import FTS_SPECS, TOKENIZERS
from memos_bridge.storage.models import (
    ApiLogRow,
    AuditEventRow,
    DecisionRepairRow,
    EmbeddingRetryRow,
    EpisodeRow,
    FeedbackRow,
    L2CandidateRow,
    MemoryLinkRow,
    MemoryRow,
    PolicyRow,
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
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

ALL_KINDS: Final = ("session", "episode", "trace", "policy", "world_model", "skill", "memory")
#: Searchable kinds: model, and the column a `before` filter compares.
_SEARCHABLE: Final[dict[str, tuple[Any, Any]]] = {
    "trace": (TraceRow, TraceRow.ts),
    "policy": (PolicyRow, PolicyRow.created_at),
    "world_model": (WorldModelRow, WorldModelRow.created_at),
    "skill": (SkillRow, SkillRow.created_at),
    "memory": (MemoryRow, MemoryRow.created_at),
}
_ID_PREFIXES: Final[dict[str, str]] = {"se_": "session", "ep_": "episode"}


def _kind(memory_id: str) -> str | None:
    return _ID_PREFIXES.get(memory_id[:3]) or kind_of_id(memory_id)


class _Plan:
    """The ids to delete, per kind, gathered before anything is deleted."""

    def __init__(self) -> None:
        self.ids: dict[str, set[str]] = {kind: set() for kind in ALL_KINDS}

    def add(self, kind: str, ids: Iterable[str]) -> None:
        self.ids[kind].update(ids)


def _gather(db: Session, params: dto.MemoryPurgeParams, owner: OwnerFilter) -> _Plan:
    kinds = set(params.kinds or ALL_KINDS)
    plan = _Plan()
    if params.ids:
        for memory_id in params.ids:
            kind = _kind(memory_id)
            if kind is None:
                raise MemosError(ErrorCode.INVALID_ARGUMENT, f"not a memory id: {memory_id}", {"id": memory_id})
            if kind in kinds:
                plan.add(kind, [memory_id])
        _keep_owned(db, plan, owner)
    else:
        before = params.before
        for kind, (model, created) in _SEARCHABLE.items():
            if kind in kinds:
                stmt = select(model.id).where(owner.clause(model))
                plan.add(kind, db.scalars(stmt if before is None else stmt.where(created < before)))
        for kind, model, started in (
            ("session", SessionRow, SessionRow.started_at),
            ("episode", EpisodeRow, EpisodeRow.started_at),
        ):
            if kind in kinds:
                stmt = select(model.id).where(owner.clause(model))
                plan.add(kind, db.scalars(stmt if before is None else stmt.where(started < before)))
    # A session takes its episodes with it, an episode its steps: nothing may point at a deleted parent.
    if plan.ids["session"]:
        plan.add("episode", db.scalars(select(EpisodeRow.id).where(EpisodeRow.session_id.in_(plan.ids["session"]))))
    if plan.ids["episode"]:
        plan.add("trace", db.scalars(select(TraceRow.id).where(TraceRow.episode_id.in_(plan.ids["episode"]))))
    return plan


def _keep_owned(db: Session, plan: _Plan, owner: OwnerFilter) -> None:
    """Drop ids of rows outside the purge's namespace (or that do not exist): an id never reaches across."""
    models = {**{kind: model for kind, (model, _) in _SEARCHABLE.items()}, "session": SessionRow, "episode": EpisodeRow}
    for kind, ids in plan.ids.items():
        if ids:
            model = models[kind]
            plan.ids[kind] = set(db.scalars(select(model.id).where(model.id.in_(ids), owner.clause(model))))


def _chunks(ids: set[str], size: int = 500) -> Iterable[list[str]]:
    ordered = sorted(ids)
    for start in range(0, len(ordered), size):
        yield ordered[start : start + size]


def _count(db: Session, statement: Any) -> int:
    """Rows a DELETE or UPDATE touched."""
    result = cast(CursorResult[Any], db.execute(statement))
    return int(result.rowcount or 0)


def _delete_in(db: Session, column: Any, ids: set[str]) -> int:
    """DELETE the rows whose `column` is one of `ids`, in chunks (SQLite caps bound parameters)."""
    return sum(_count(db, delete(column.class_).where(column.in_(chunk))) for chunk in _chunks(ids))


def purge_sync(db: Session, params: dto.MemoryPurgeParams) -> tuple[dict[str, int], int]:
    owner = bulk_scope(db, params.namespace, params.session_id)
    plan = _gather(db, params, owner)
    sqlite = db.get_bind().dialect.name == "sqlite"
    if sqlite:
        db.execute(_pragma("secure_delete=ON"))
    counts: dict[str, int] = {}
    try:
        ids = plan.ids
        sessions, episodes, traces = ids["session"], ids["episode"], ids["trace"]
        every = set().union(*ids.values())
        targets = {f"{kind}:{i}" for kind, kind_ids in ids.items() for i in kind_ids}
        counts["audit_events"] = _delete_in(db, AuditEventRow.target, targets)
        counts["strength_events"] = _delete_in(db, StrengthEventRow.target_id, every)
        counts["memory_links"] = _delete_in(db, MemoryLinkRow.from_id, every) + _delete_in(
            db, MemoryLinkRow.to_id, every
        )
        counts["embedding_retry_queue"] = _delete_in(db, EmbeddingRetryRow.target_id, every)
        counts["trace_policy_links"] = _delete_in(db, TracePolicyLinkRow.trace_id, traces) + _delete_in(
            db, TracePolicyLinkRow.policy_id, ids["policy"]
        )
        counts["skill_trials"] = _delete_in(db, SkillTrialRow.skill_id, ids["skill"]) + _delete_in(
            db, SkillTrialRow.episode_id, episodes
        )
        if not params.ids and not params.kinds and params.before is None:  # the whole namespace goes
            pool = delete(L2CandidateRow).where(owner.clause(L2CandidateRow))
            counts["l2_candidate_pool"] = _count(db, pool)
            counts["decision_repairs"] = _count(db, delete(DecisionRepairRow).where(owner.clause(DecisionRepairRow)))
        counts["feedback"] = _delete_in(db, FeedbackRow.episode_id, episodes) + _delete_in(
            db, FeedbackRow.trace_id, traces
        )
        counts["turns"] = _delete_in(db, TurnRow.episode_id, episodes)
        for kind, (model, _) in _SEARCHABLE.items():
            counts[model.__tablename__] = _delete_in(db, model.id, ids[kind])
        counts["episodes"] = _delete_in(db, EpisodeRow.id, episodes)
        counts["sessions"] = _delete_in(db, SessionRow.id, sessions)
        counts["api_logs"] = _purge_api_logs(db, sessions)
        # Cached turn.start results quote recalled memories: none of the namespace's survive a purge (a
        # retried turn.start then retrieves again, which is what it does after a restart anyway).
        db.execute(update(TurnRow).where(owner.clause(TurnRow)).values(result_json=None))
        if sqlite:
            for spec in FTS_SPECS.values():
                if ids.get(spec.kind):
                    for tokenizer in TOKENIZERS:
                        table = spec.fts_table(tokenizer)
                        db.execute(text(f'INSERT INTO "{table}"("{table}") VALUES (\'optimize\')'))
        audit = AuditEventRow(
            ts=now_ms(),
            actor="host",
            kind="memory.purge",
            target=f"namespace:{owner.profile_id}/{owner.workspace_id or ''}",
            detail_json={
                "counts": {k: v for k, v in counts.items() if v},
                "kinds": sorted(params.kinds or ALL_KINDS),
                "byIds": bool(params.ids),
                "before": params.before,
            },
        )
        db.add(audit)
        db.flush()
    finally:
        if sqlite:
            db.execute(_pragma("secure_delete=OFF"))
    return {k: v for k, v in counts.items() if v}, audit.id


def _purge_api_logs(db: Session, sessions: set[str]) -> int:
    """API log entries of the purged sessions (they hold the sessions' queries), on either backend: the JSON
    index expression is `json_extract` on SQLite and `->>` on PostgreSQL."""
    session_of = ApiLogRow.input_json["sessionId"].as_string()
    return sum(_count(db, delete(ApiLogRow).where(session_of.in_(chunk))) for chunk in _chunks(sessions))


def _pragma(value: str) -> Any:
    return text(f"PRAGMA {value}")


async def purge(ctx: LearningContext, params: dto.MemoryPurgeParams) -> dto.MemoryPurgeResult:
    if params.confirm is not True:
        raise MemosError(
            ErrorCode.INVALID_ARGUMENT, "memory.purge deletes for good: pass confirm: true", {"confirm": params.confirm}
        )
    counts, audit_id = await ctx.db.write(lambda db: purge_sync(db, params))
    ctx.vectors.invalidate()  # reloaded from the database on the next search, without the purged rows
    cache = getattr(ctx.embedder, "cache", None)
    if cache is not None:
        cache.clear()
    await checkpoint(ctx)
    log.info("purge: %s", counts)
    return dto.MemoryPurgeResult(purged=counts, audit_id=audit_id)


async def checkpoint(ctx: LearningContext) -> None:
    """Copy the WAL into the database and truncate it, so no page image from before the purge stays there."""
    engine = ctx.db.engine
    if engine.dialect.name != "sqlite":
        return

    def run() -> None:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

    await anyio.to_thread.run_sync(run)
