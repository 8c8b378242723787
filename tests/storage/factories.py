"""Row builders shared by the storage tests (minimal valid rows, owner-stamped)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from memos_bridge.storage.models import EpisodeRow, PolicyRow, SessionRow, SkillRow, TraceRow, WorldModelRow
from memos_bridge.storage.owner import OwnerFilter

OWNER = OwnerFilter("hermes", "default", None)
OTHER = OwnerFilter("claude", "default", None)


def add_session(db: Session, session_id: str = "se_1", owner: OwnerFilter = OWNER) -> SessionRow:
    row = SessionRow(id=session_id, agent=owner.agent_kind, started_at=1, last_seen_at=1, **owner.as_columns())
    db.add(row)
    return row


def add_episode(
    db: Session, episode_id: str = "ep_1", session_id: str = "se_1", owner: OwnerFilter = OWNER
) -> EpisodeRow:
    row = EpisodeRow(id=episode_id, session_id=session_id, started_at=1, **owner.as_columns())
    db.add(row)
    return row


def add_trace(
    db: Session,
    trace_id: str,
    *,
    episode_id: str = "ep_1",
    session_id: str = "se_1",
    owner: OwnerFilter = OWNER,
    **fields: Any,
) -> TraceRow:
    values: dict[str, Any] = {"ts": 1, "turn_id": 1, "step_key": trace_id, **owner.as_columns(), **fields}
    row = TraceRow(id=trace_id, episode_id=episode_id, session_id=session_id, **values)
    db.add(row)
    return row


def add_policy(db: Session, policy_id: str, owner: OwnerFilter = OWNER, **fields: Any) -> PolicyRow:
    row = PolicyRow(id=policy_id, created_at=1, updated_at=1, **owner.as_columns(), **fields)
    db.add(row)
    return row


def add_world_model(db: Session, wm_id: str, owner: OwnerFilter = OWNER, **fields: Any) -> WorldModelRow:
    row = WorldModelRow(id=wm_id, created_at=1, updated_at=1, **owner.as_columns(), **fields)
    db.add(row)
    return row


def add_skill(db: Session, skill_id: str, owner: OwnerFilter = OWNER, **fields: Any) -> SkillRow:
    values: dict[str, Any] = {"name": skill_id, **fields}
    row = SkillRow(id=skill_id, created_at=1, updated_at=1, **owner.as_columns(), **values)
    db.add(row)
    return row


def seed_episode(db: Session, owner: OwnerFilter = OWNER, suffix: str = "1") -> tuple[str, str]:
    """A session and an episode in `owner`'s namespace; returns (session id, episode id)."""
    session_id, episode_id = f"se_{suffix}", f"ep_{suffix}"
    add_session(db, session_id, owner)
    add_episode(db, episode_id, session_id, owner)
    return session_id, episode_id
