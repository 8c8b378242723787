"""When an episode was last worked on, from what is stored: for startup recovery and the stale-topic sweep.

An episode left open by an earlier process has no in-memory trace of its last use; what the database holds
(its start, its user turns, its steps) is the only evidence of how long it has been idle.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from memos_bridge.storage.models import EpisodeRow, TraceRow, TurnRow

_CHUNK = 500


def last_activity(db: Session, episode_ids: Sequence[str]) -> dict[str, int]:
    """The newest stored time (ms) of each episode: its start, its latest user turn or its latest step (the
    instants routing measures a gap from). Unknown ids are left out."""
    found: dict[str, int] = {}
    for start in range(0, len(episode_ids), _CHUNK):
        chunk = list(episode_ids[start : start + _CHUNK])
        for episode_id, started in db.execute(
            select(EpisodeRow.id, EpisodeRow.started_at).where(EpisodeRow.id.in_(chunk))
        ):
            found[episode_id] = int(started)
        later = (
            select(TurnRow.episode_id, func.max(TurnRow.turn_id))
            .where(TurnRow.episode_id.in_(chunk))
            .group_by(TurnRow.episode_id),
            select(TraceRow.episode_id, func.max(TraceRow.ts))
            .where(TraceRow.episode_id.in_(chunk))
            .group_by(TraceRow.episode_id),
        )
        for query in later:
            for episode_id, ts in db.execute(query):
                if episode_id in found and ts is not None:
                    found[episode_id] = max(found[episode_id], int(ts))
    return found
