"""`memory.reflect`: consolidate now, instead of waiting for the learning queue and the decay job.

The learning loop normally runs on its own schedule: an episode's chain fires when its feedback window
ends, induction of reusable policies waits for evidence from several episodes, skills crystallise when a
family has a success anchor, and expired memories are archived by the next decay run. A person who just
corrected or imported a lot (or a benchmark between phases) wants all of that done before the next task.
One reflect run:

1. archives remembered memories whose expiry passed (the same sweep the decay job runs);
2. fires every pending learning chain now (feedback windows cut short) and waits for them;
3. re-runs the learning chain of the namespace's most recent scored episodes, oldest first, so L2
   induction, world models and skill crystallisation see all the evidence gathered since each episode
   was first learned from (every stage is idempotent: a re-run adds no support and duplicates nothing
   it already made);
4. folds near-duplicate remembered memories of one type into the oldest of them (an import or an edit
   can make two say the same thing); the absorbed one is archived with a history event, never deleted;
5. reports what changed: per kind, the change of each status count between before and after.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.learning.service import LearningService
from memos_bridge.core.memories import NEAR_DUPLICATE, MemoryService, audit, memory_scope
from memos_bridge.core.namespace import bulk_scope
from memos_bridge.core.stats import stats_sync
from memos_bridge.rules.sameness import same_statement
from memos_bridge.storage.models import EpisodeRow, MemoryRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import from_blob

log = logging.getLogger(__name__)


def _owned(model: Any, owner: OwnerFilter) -> list[Any]:
    """Rows the namespace owns (shared rows of other namespaces are theirs to consolidate)."""
    where = [
        model.owner_profile_id == owner.profile_id,
        model.owner_workspace_id.is_not_distinct_from(owner.workspace_id),
    ]
    if owner.agent_kind is not None:
        where.append(model.owner_agent_kind == owner.agent_kind)
    return where


def _recent_scored(db: Session, owner: OwnerFilter, limit: int) -> list[str]:
    """The most recent episodes that have a task reward (closed, or open with feedback already learned from),
    oldest first: the order they were learned in."""
    stmt = (
        select(EpisodeRow.id)
        .where(*_owned(EpisodeRow, owner), EpisodeRow.r_task.is_not(None))
        .order_by(EpisodeRow.started_at.desc(), EpisodeRow.id.desc())
        .limit(limit)
    )
    return list(reversed(db.scalars(stmt).all()))


def _counts(db: Session, owner: OwnerFilter) -> dict[str, dict[str, int]]:
    namespace = dto.RuntimeNamespace(
        agent_kind=owner.agent_kind, profile_id=owner.profile_id, workspace_id=owner.workspace_id
    )
    return stats_sync(db, dto.MemoryStatsParams(namespace=namespace)).counts


def _changes(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    changes: dict[str, dict[str, int]] = {}
    for kind in sorted(set(before) | set(after)):
        old, new = before.get(kind, {}), after.get(kind, {})
        delta = {status: new.get(status, 0) - old.get(status, 0) for status in sorted(set(old) | set(new))}
        delta = {status: n for status, n in delta.items() if n}
        if delta:
            changes[kind] = delta
    return changes


def _absorb(db: Session, keep: MemoryRow, other: MemoryRow, now: int) -> None:
    """Fold `other` into `keep`: support adds up, the higher importance, tags and protection carry over;
    `other` is archived (restorable) and both histories say so."""
    keep.support += other.support
    keep.importance = max(keep.importance, other.importance)
    keep.tags_json = list(dict.fromkeys([*(keep.tags_json or []), *(other.tags_json or [])]))
    keep.protected = keep.protected or other.protected
    keep.pinned = keep.pinned or other.pinned
    keep.updated_at = now
    other.archived_at = now
    other.status = "archived"
    audit(db, "memory", keep.id, "merged", now, "service:reflect", absorbed=other.id, content=other.content)
    audit(db, "memory", other.id, "archived", now, "service:reflect", reason="duplicate", mergedInto=keep.id)


def fold_duplicates_sync(db: Session, owner: OwnerFilter, dim: int, now: int) -> list[str]:
    """Merge remembered memories of one type that say the same thing (vector cosine ≥ `NEAR_DUPLICATE` and
    `same_statement`) into the oldest of them; returns the ids absorbed (archived, restorable)."""
    scope = memory_scope(owner)
    rows = list(
        db.scalars(
            select(MemoryRow)
            .where(scope.clause(MemoryRow), MemoryRow.archived_at.is_(None), MemoryRow.forgotten_at.is_(None))
            .order_by(MemoryRow.created_at, MemoryRow.rid)
        )
    )
    by_type: dict[str, list[MemoryRow]] = defaultdict(list)
    for row in rows:
        if row.vec is not None and scope.owns(row):
            by_type[row.memory_type].append(row)
    absorbed: list[str] = []
    for group in by_type.values():
        if len(group) < 2:
            continue
        matrix = np.stack([from_blob(row.vec, dim) for row in group if row.vec is not None])
        similar = matrix @ matrix.T
        gone: set[int] = set()
        for i, keep in enumerate(group):
            if i in gone:
                continue
            for j in range(i + 1, len(group)):
                other = group[j]
                if j in gone or similar[i, j] < NEAR_DUPLICATE or not same_statement(keep.content, other.content):
                    continue
                gone.add(j)
                _absorb(db, keep, other, now)
                absorbed.append(other.id)
    return absorbed


async def reflect(
    learning: LearningService, memories: MemoryService, params: dto.MemoryReflectParams
) -> dto.MemoryReflectResult:
    ctx = learning.ctx
    owner = await ctx.db.read(lambda db: bulk_scope(db, params.namespace, params.session_id))
    before = await ctx.db.read(lambda db: _counts(db, owner))
    expired = await memories.expire()
    chains_before = learning.queue.stats.chains_run
    await learning.flush()
    chains_run = learning.queue.stats.chains_run - chains_before
    episodes = await ctx.db.read(lambda db: _recent_scored(db, owner, params.episodes))
    for episode_id in episodes:
        await learning.queue.run_now(episode_id, "reflect")
    now = ctx.clock()
    absorbed = await ctx.db.write(lambda db: fold_duplicates_sync(db, owner, ctx.vectors.dim, now))
    for memory_id in absorbed:
        ctx.vectors.remove("memory", memory_id)
    after = await ctx.db.read(lambda db: _counts(db, owner))
    log.info(
        "reflect: %d pending chains, %d episodes revisited, %d merged, %d expired",
        chains_run,
        len(episodes),
        len(absorbed),
        expired,
    )
    return dto.MemoryReflectResult(
        episodes=len(episodes),
        chains_run=chains_run,
        merged=len(absorbed),
        expired=expired,
        changes=_changes(before, after),
    )
