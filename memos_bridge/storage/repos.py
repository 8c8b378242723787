"""Queries used by core: small synchronous functions over a SQLAlchemy `Session`.

They run inside `Database.read`/`Database.write` (worker threads). Each does one job and returns ORM rows
or plain values; turning rows into wire DTOs is core's business (`core/mappers.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import ColumnElement, bindparam, case, false, func, insert, or_, select, true
from sqlalchemy.orm import Session

from memos_bridge.storage.models import (
    ApiLogRow,
    EmbeddingRetryRow,
    EpisodeRow,
    FeedbackRow,
    MemoryRow,
    PolicyRow,
    SessionRow,
    SkillRow,
    TraceRow,
    TurnRow,
    WorldModelRow,
)
from memos_bridge.storage.owner import SHARED_SCOPES, OwnerFilter, OwnerKey


def visible(owner: OwnerFilter | None, model: Any) -> ColumnElement[bool]:
    """Namespace predicate; no filter when the caller names no namespace (operator view)."""
    return true() if owner is None else owner.clause(model)


# ---------------------------------------------------------------- sessions


def get_session(db: Session, session_id: str) -> SessionRow | None:
    return db.get(SessionRow, session_id)


def add(db: Session, row: Any) -> None:
    db.add(row)
    db.flush()


# ---------------------------------------------------------------- episodes


def get_episode(db: Session, episode_id: str) -> EpisodeRow | None:
    return db.get(EpisodeRow, episode_id)


def open_episodes(db: Session, session_id: str) -> list[EpisodeRow]:
    """The session's open episodes, newest first (routing reads this on every turn: prebuilt statement)."""
    return list(db.scalars(_OPEN_EPISODES, {"session_id": session_id}))


_OPEN_EPISODES = (
    select(EpisodeRow)
    .where(EpisodeRow.session_id == bindparam("session_id"), EpisodeRow.status == "open")
    .order_by(EpisodeRow.started_at.desc())
)


def list_episodes(
    db: Session,
    owner: OwnerFilter | None,
    *,
    session_id: str | None,
    status: str | None,
    limit: int,
    offset: int,
) -> list[EpisodeRow]:
    stmt = select(EpisodeRow).where(visible(owner, EpisodeRow))
    if session_id:
        stmt = stmt.where(EpisodeRow.session_id == session_id)
    if status:
        stmt = stmt.where(EpisodeRow.status == status)
    stmt = stmt.order_by(EpisodeRow.started_at.desc(), EpisodeRow.id.desc()).limit(limit).offset(offset)
    return list(db.scalars(stmt))


def namespace_summaries(db: Session) -> list[tuple[str, str, str | None, int, int | None]]:
    """(agent kind, profile, workspace, sessions, last seen) per namespace that holds sessions, most recent first."""
    last_seen = func.max(SessionRow.last_seen_at)
    stmt = (
        select(
            SessionRow.owner_agent_kind,
            SessionRow.owner_profile_id,
            SessionRow.owner_workspace_id,
            func.count(SessionRow.id),
            last_seen,
        )
        .group_by(SessionRow.owner_agent_kind, SessionRow.owner_profile_id, SessionRow.owner_workspace_id)
        .order_by(last_seen.desc())
    )
    return [(str(a), str(p), w, int(n), None if seen is None else int(seen)) for a, p, w, n, seen in db.execute(stmt)]


def list_feedback(
    db: Session, owner: OwnerFilter | None, *, episode_id: str | None, limit: int, offset: int
) -> list[FeedbackRow]:
    """Feedback in a namespace (optionally on one episode), newest first."""
    stmt = select(FeedbackRow).where(visible(owner, FeedbackRow))
    if episode_id:
        stmt = stmt.where(FeedbackRow.episode_id == episode_id)
    stmt = stmt.order_by(FeedbackRow.ts.desc(), FeedbackRow.id.desc()).limit(limit).offset(offset)
    return list(db.scalars(stmt))


def first_user_texts(db: Session, episode_ids: Sequence[str]) -> dict[str, str]:
    """The first user text of each episode (for list previews), one query."""
    if not episode_ids:
        return {}
    first = (
        select(TurnRow.episode_id, func.min(TurnRow.id).label("first_id"))
        .where(TurnRow.episode_id.in_(episode_ids))
        .group_by(TurnRow.episode_id)
        .subquery()
    )
    stmt = select(TurnRow.episode_id, TurnRow.user_text).join(first, TurnRow.id == first.c.first_id)
    return {episode_id: text for episode_id, text in db.execute(stmt)}


# ---------------------------------------------------------------- turns


def find_turn_by_key(db: Session, session_id: str, turn_key: str) -> TurnRow | None:
    stmt = select(TurnRow).where(TurnRow.session_id == session_id, TurnRow.turn_key == turn_key)
    return db.scalars(stmt).first()


def latest_turn(db: Session, episode_id: str) -> TurnRow | None:
    stmt = select(TurnRow).where(TurnRow.episode_id == episode_id).order_by(TurnRow.id.desc()).limit(1)
    return db.scalars(stmt).first()


def latest_closed_episode(db: Session, session_id: str) -> EpisodeRow | None:
    stmt = (
        select(EpisodeRow)
        .where(EpisodeRow.session_id == session_id, EpisodeRow.status == "closed")
        .order_by(EpisodeRow.ended_at.desc(), EpisodeRow.started_at.desc())
        .limit(1)
    )
    return db.scalars(stmt).first()


def find_turn_by_text(db: Session, episode_id: str, user_text_hash: str) -> TurnRow | None:
    """The most recent turn of the episode with exactly this user text."""
    stmt = (
        select(TurnRow)
        .where(TurnRow.episode_id == episode_id, TurnRow.user_text_hash == user_text_hash)
        .order_by(TurnRow.id.desc())
        .limit(1)
    )
    return db.scalars(stmt).first()


# ---------------------------------------------------------------- traces


def traces_by_keys(db: Session, episode_id: str, keys: Iterable[str]) -> dict[str, TraceRow]:
    keys = list(keys)
    if not keys:
        return {}
    stmt = select(TraceRow).where(TraceRow.episode_id == episode_id, TraceRow.step_key.in_(keys))
    return {row.step_key: row for row in db.scalars(stmt)}


def get_trace(db: Session, trace_id: str) -> TraceRow | None:
    return db.scalars(select(TraceRow).where(TraceRow.id == trace_id)).first()


def timeline(
    db: Session, episode: EpisodeRow, *, limit: int, offset: int, include_forgotten: bool = False
) -> list[TraceRow]:
    """Episode order (the episode's trace list), not timestamp order: hosts may send skewed clocks. Forgotten
    steps are left out before paging, so a page is never short because of them."""
    ordered_ids = list(episode.trace_ids_json or [])
    if not ordered_ids:
        return []
    stmt = select(TraceRow).where(TraceRow.id.in_(ordered_ids))
    if not include_forgotten:
        stmt = stmt.where(TraceRow.forgotten_at.is_(None))
    rows = {row.id: row for row in db.scalars(stmt)}
    return [rows[i] for i in ordered_ids if i in rows][offset : offset + limit]


def list_traces(
    db: Session,
    owner: OwnerFilter | None,
    *,
    session_id: str | None,
    episode_id: str | None,
    substring: str | None,
    limit: int,
    offset: int,
    include_forgotten: bool = False,
) -> list[TraceRow]:
    stmt = select(TraceRow).where(visible(owner, TraceRow))
    if not include_forgotten:
        stmt = stmt.where(TraceRow.forgotten_at.is_(None))
    if session_id:
        stmt = stmt.where(TraceRow.session_id == session_id)
    if episode_id:
        stmt = stmt.where(TraceRow.episode_id == episode_id)
    if substring:
        pattern = "%" + substring.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        stmt = stmt.where(
            or_(
                TraceRow.user_text.like(pattern, escape="\\"),
                TraceRow.agent_text.like(pattern, escape="\\"),
                TraceRow.summary.like(pattern, escape="\\"),
            )
        )
    stmt = stmt.order_by(TraceRow.ts.desc(), TraceRow.rid.desc()).limit(limit).offset(offset)
    return list(db.scalars(stmt))


def episode_status(db: Session, episode_ids: Iterable[str]) -> dict[str, tuple[str, float | None]]:
    ids = list(set(episode_ids))
    if not ids:
        return {}
    stmt = select(EpisodeRow.id, EpisodeRow.status, EpisodeRow.r_task).where(EpisodeRow.id.in_(ids))
    return {i: (status, r_task) for i, status, r_task in db.execute(stmt)}


SEARCHABLE_MODELS: dict[str, Any] = {
    "trace": TraceRow,
    "policy": PolicyRow,
    "skill": SkillRow,
    "world_model": WorldModelRow,
    "memory": MemoryRow,
}
VECTOR_COLUMNS: dict[str, tuple[str, ...]] = {
    "trace": ("vec_summary", "vec_action"),
    "policy": ("vec",),
    "skill": ("vec",),
    "world_model": ("vec",),
    "memory": ("vec",),
}


def iter_vectors(
    db: Session,
    kind: str,
    field: str,
    batch: int = 5000,
    *,
    mark_same_as: str | None = None,
    unlike: str | None = None,
) -> Iterator[tuple[str, bytes, OwnerKey, bool]]:
    """(id, vector blob, owner key, marked) of every live row of `kind` with that vector, streamed in batches.

    Archived rows (archived_at set, or status 'archived' where the kind has a status) are left out: they
    are restorable but never recalled. `mark_same_as` marks the rows whose vector in that other column is the
    same; `unlike` leaves out the rows whose vector in that other column is the same (each blob compared in
    SQL, so the other column's bytes are never read into Python).
    """
    model = SEARCHABLE_MODELS[kind]
    column = getattr(model, field)
    marked = case((column == getattr(model, mark_same_as), True), else_=False) if mark_same_as else false()
    stmt = select(
        model.id,
        column,
        model.owner_agent_kind,
        model.owner_profile_id,
        model.owner_workspace_id,
        model.share_scope,
        marked,
    ).where(column.is_not(None), model.archived_at.is_(None))
    if unlike is not None:
        other = getattr(model, unlike)
        stmt = stmt.where(or_(other.is_(None), other != column))
    if hasattr(model, "status"):
        stmt = stmt.where(model.status != "archived")
    rows = db.execute(stmt.execution_options(yield_per=batch))
    for row_id, blob, agent_kind, profile, workspace, scope, same in rows:
        yield row_id, blob, OwnerKey(agent_kind, profile, workspace, scope in SHARED_SCOPES), bool(same)


# ---------------------------------------------------------------- logs


def log_api_call(
    db: Session,
    tool_name: str,
    input_json: Any,
    output_json: Any,
    duration_ms: int,
    success: bool,
    called_at: int,
) -> None:
    # A Core insert of a prebuilt statement: one row per turn.start and per LLM call, where the ORM's unit
    # of work (object, flush, identity map) cost more than the insert itself.
    db.execute(
        _API_LOG_INSERT,
        {
            "tool_name": tool_name,
            "input_json": input_json,
            "output_json": output_json,
            "duration_ms": duration_ms,
            "success": success,
            "called_at": called_at,
        },
    )


_API_LOG_INSERT = insert(ApiLogRow)


# ---------------------------------------------------------------- embedding retry queue


def due_embedding_retries(db: Session, now: int, limit: int) -> list[EmbeddingRetryRow]:
    stmt = (
        select(EmbeddingRetryRow)
        .where(EmbeddingRetryRow.status == "pending", EmbeddingRetryRow.next_attempt_at <= now)
        .order_by(EmbeddingRetryRow.next_attempt_at, EmbeddingRetryRow.id)
        .limit(limit)
    )
    return list(db.scalars(stmt))


def pending_embedding_retries(db: Session) -> int:
    stmt = select(func.count()).select_from(EmbeddingRetryRow).where(EmbeddingRetryRow.status == "pending")
    return int(db.scalar(stmt) or 0)
