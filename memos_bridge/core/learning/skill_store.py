"""Storage side of the skill stage: what an episode touched, experiences and traces as snapshots, skills.

Every function takes a `Session` and runs inside `db.read` / `db.write`. Reads return detached
snapshots (`ExperienceView`, `TraceSnapshot`, `SkillView`) so the async stage never holds ORM rows
across awaits. JSON-list membership (`source_episodes_json` contains an id) is tested with a LIKE on the
column's text, which SQLite and PostgreSQL both evaluate; ids never contain quotes or wildcards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from memos_bridge.config import SkillSettings
from memos_bridge.core import reward
from memos_bridge.core.learning.skill_crystallize import SkillDraft, TraceSnapshot, unique_name
from memos_bridge.core.learning.skill_family import ExperienceView, Family
from memos_bridge.core.learning.skill_lifecycle import (
    REVIEW_APPROVED,
    REVIEW_REJECTED,
    STATUS_ARCHIVED,
    STATUS_CANDIDATE,
    initial_eta,
    next_status,
    set_status,
)
from memos_bridge.ids import new_id
from memos_bridge.storage.json_lists import list_has, list_has_any
from memos_bridge.storage.models import (
    EpisodeRow,
    FeedbackRow,
    PolicyRow,
    SkillRow,
    TracePolicyLinkRow,
    TraceRow,
    WorldModelRow,
)
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import from_blob

#: Steps read per source episode when an anchor names no traces of its own (reference: 20).
TRACES_PER_EPISODE: Final = 20
#: Family candidates found by shared tags or episodes, newest first.
TAG_CANDIDATES: Final = 64
#: Evidence anchors kept on a skill.
MAX_ANCHORS: Final = 10


def _vector(blob: bytes | None, dim: int) -> NDArray[np.float32] | None:
    """A stored vector, or None when missing or written by a model of another size."""
    if blob is None:
        return None
    try:
        return from_blob(blob, dim)
    except ValueError:
        return None


def _owned(model: Any, owner: OwnerFilter) -> ColumnElement[bool]:
    return and_(
        model.owner_agent_kind == owner.agent_kind,
        model.owner_profile_id == owner.profile_id,
        model.owner_workspace_id.is_not_distinct_from(owner.workspace_id),
    )


# ---------------------------------------------------------------- the episode


@dataclass(frozen=True)
class EpisodeScope:
    episode_id: str
    owner: OwnerFilter
    trace_ids: tuple[str, ...]
    feedback_ids: tuple[str, ...]


def load_scope(db: Session, episode_id: str) -> EpisodeScope | None:
    episode = db.get(EpisodeRow, episode_id)
    if episode is None:
        return None
    owner = OwnerFilter(episode.owner_agent_kind, episode.owner_profile_id, episode.owner_workspace_id)
    trace_ids = tuple(db.scalars(select(TraceRow.id).where(TraceRow.episode_id == episode_id)))
    feedback_ids = tuple(db.scalars(select(FeedbackRow.id).where(FeedbackRow.episode_id == episode_id)))
    return EpisodeScope(episode_id, owner, trace_ids, feedback_ids)


def touched_policy_ids(db: Session, scope: EpisodeScope) -> list[str]:
    """Live experiences of the episode's namespace that this episode fed: it is a source episode, one of its
    feedback rows is a source, or one of its steps is linked to it."""
    clauses: list[ColumnElement[bool]] = [list_has(PolicyRow.source_episodes_json, scope.episode_id)]
    feedback = list_has_any(PolicyRow.source_feedback_ids_json, scope.feedback_ids)
    if feedback is not None:
        clauses.append(feedback)
    if scope.trace_ids:
        linked = select(TracePolicyLinkRow.policy_id).where(TracePolicyLinkRow.trace_id.in_(scope.trace_ids))
        clauses.append(PolicyRow.id.in_(linked))
    stmt = (
        select(PolicyRow.id)
        .where(_owned(PolicyRow, scope.owner), PolicyRow.status != STATUS_ARCHIVED, or_(*clauses))
        .order_by(PolicyRow.updated_at.desc(), PolicyRow.id)
    )
    return list(db.scalars(stmt))


# ---------------------------------------------------------------- experiences


VERIFIED_REWARD_SOURCES = frozenset({"verifier", "feedback"})


def _successful_episodes(db: Session, episode_ids: Iterable[str]) -> set[str]:
    """Episodes whose success is *verified*: a verifier at full credit, or the user's own explicit positive
    feedback (reward source "verifier" or "feedback"). An LLM's or the transcript heuristic's opinion that
    a task went well is not evidence enough to crystallise a skill (seed 003: only verified evidence)."""
    ids = list(dict.fromkeys(episode_ids))
    if not ids:
        return set()
    rows = db.execute(select(EpisodeRow.id, EpisodeRow.meta_json).where(EpisodeRow.id.in_(ids))).all()
    out: set[str] = set()
    for episode_id, meta in rows:
        record = (meta or {}).get("reward") if isinstance(meta, dict) else None
        if (
            isinstance(record, dict)
            and record.get("outcome") == "success"
            and record.get("source") in VERIFIED_REWARD_SOURCES
        ):
            out.add(episode_id)
    return out


def _verifier_passed(meta: Any) -> bool:
    result = reward.verifier_from_raw(meta)
    return result is not None and result.full_credit


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value if isinstance(v, str | int | float)) if isinstance(value, list) else ()


#: The policy columns a view is built from: plain rows of these cost a fraction of whole ORM objects, and a
#: run reads every experience of a skill family.
_VIEW_COLUMNS: Final = (
    PolicyRow.id,
    PolicyRow.title,
    PolicyRow.trigger,
    PolicyRow.procedure,
    PolicyRow.verification,
    PolicyRow.boundary,
    PolicyRow.experience_type,
    PolicyRow.evidence_polarity,
    PolicyRow.status,
    PolicyRow.gain,
    PolicyRow.support,
    PolicyRow.confidence,
    PolicyRow.skill_eligible,
    PolicyRow.owner_agent_kind,
    PolicyRow.owner_profile_id,
    PolicyRow.owner_workspace_id,
    PolicyRow.updated_at,
    PolicyRow.archived_at,
    PolicyRow.tags_json,
    PolicyRow.decision_guidance_json,
    PolicyRow.source_episodes_json,
    PolicyRow.source_trace_ids_json,
    PolicyRow.verifier_meta_json,
    PolicyRow.vec,
)


def load_experiences(db: Session, ids: Sequence[str], dim: int) -> list[ExperienceView]:
    """Snapshots of the live policies `ids` (order kept), with their objective-success flag."""
    if not ids:
        return []
    found = db.execute(select(*_VIEW_COLUMNS).where(PolicyRow.id.in_(list(ids)), PolicyRow.status != STATUS_ARCHIVED))
    rows = {row.id: row for row in found}
    episodes = _successful_episodes(db, (ep for row in rows.values() for ep in _strings(row.source_episodes_json)))
    out: list[ExperienceView] = []
    for policy_id in dict.fromkeys(ids):
        row = rows.get(policy_id)
        if row is None or row.archived_at is not None:
            continue
        guidance = row.decision_guidance_json if isinstance(row.decision_guidance_json, dict) else {}
        sources = _strings(row.source_episodes_json)
        out.append(
            ExperienceView(
                id=row.id,
                title=row.title or "",
                trigger=row.trigger or "",
                procedure=row.procedure or "",
                verification=row.verification or "",
                boundary=row.boundary or "",
                experience_type=row.experience_type or "procedural",
                polarity=row.evidence_polarity or "neutral",
                status=row.status,
                gain=float(row.gain),
                support=int(row.support),
                confidence=float(row.confidence),
                skill_eligible=bool(row.skill_eligible),
                owner=OwnerFilter(row.owner_agent_kind, row.owner_profile_id, row.owner_workspace_id),
                updated_at=int(row.updated_at),
                tags=_strings(row.tags_json),
                preference=_strings(guidance.get("preference")),
                anti_pattern=_strings(guidance.get("antiPattern")),
                source_episodes=sources,
                source_trace_ids=_strings(row.source_trace_ids_json),
                verifier_meta=row.verifier_meta_json,
                verified_success=_verifier_passed(row.verifier_meta_json) or bool(set(sources) & episodes),
                vec=_vector(row.vec, dim),
            )
        )
    return out


def family_candidate_ids(db: Session, owner: OwnerFilter, tags: Iterable[str], episodes: Iterable[str]) -> list[str]:
    """Live experiences of the namespace sharing a tag or a source episode (the vector side is searched in
    the in-memory index by the stage)."""
    clauses = [
        c
        for c in (list_has_any(PolicyRow.tags_json, tags), list_has_any(PolicyRow.source_episodes_json, episodes))
        if c is not None
    ]
    if not clauses:
        return []
    stmt = (
        select(PolicyRow.id)
        .where(_owned(PolicyRow, owner), PolicyRow.status != STATUS_ARCHIVED, or_(*clauses))
        .order_by(PolicyRow.updated_at.desc())
        .limit(TAG_CANDIDATES)
    )
    return list(db.scalars(stmt))


def owned_ids(db: Session, owner: OwnerFilter, ids: Iterable[str]) -> list[str]:
    """The subset of `ids` that belongs to the namespace itself (vector hits include shared rows)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return []
    return list(db.scalars(select(PolicyRow.id).where(PolicyRow.id.in_(wanted), _owned(PolicyRow, owner))))


# ---------------------------------------------------------------- evidence traces


def _snapshot(row: TraceRow, dim: int) -> TraceSnapshot:
    return TraceSnapshot(
        id=row.id,
        episode_id=row.episode_id,
        value=float(row.value),
        user_text=row.user_text or "",
        agent_text=row.agent_text or "",
        summary=row.summary or "",
        tool_calls=tuple(c for c in (row.tool_calls_json or []) if isinstance(c, dict)),
        vec=_vector(row.vec_summary, dim),
    )


def load_evidence(db: Session, family: Family, dim: int) -> tuple[list[TraceSnapshot], set[str]]:
    """(candidate traces, ids of the counter-example traces of the family's failure avoidances).

    Anchors' own traces (`source_trace_ids`, `trace_policy_links`) first; when they name none, the steps
    of their source episodes.
    """
    anchor_ids = [a.id for a in family.anchors]
    named = [tid for a in family.anchors for tid in a.source_trace_ids]
    named += list(db.scalars(select(TracePolicyLinkRow.trace_id).where(TracePolicyLinkRow.policy_id.in_(anchor_ids))))
    counter_ids = {tid for exp in family.avoid for tid in exp.source_trace_ids}
    wanted = list(dict.fromkeys([*named, *counter_ids]))
    rows = list(db.scalars(select(TraceRow).where(TraceRow.id.in_(wanted), TraceRow.archived_at.is_(None))))
    if not any(row.id in named for row in rows):
        for episode_id in dict.fromkeys(ep for a in family.anchors for ep in a.source_episodes):
            rows.extend(
                db.scalars(
                    select(TraceRow)
                    .where(TraceRow.episode_id == episode_id, TraceRow.archived_at.is_(None))
                    .order_by(TraceRow.ts, TraceRow.step_index, TraceRow.rid)
                    .limit(TRACES_PER_EPISODE)
                )
            )
    unique = {row.id: row for row in rows}
    return [_snapshot(row, dim) for row in unique.values()], counter_ids & set(unique)


# ---------------------------------------------------------------- skills


@dataclass(frozen=True)
class SkillView:
    id: str
    name: str
    status: str
    primary_id: str
    anchor_ids: tuple[str, ...]
    source_ids: tuple[str, ...]
    digest: str
    updated_at: int
    has_vec: bool

    def material(self) -> frozenset[str]:
        """Every experience the skill rests on: its primary anchor, its anchors and its other sources."""
        return frozenset(i for i in (self.primary_id, *self.anchor_ids, *self.source_ids) if i)


def _skill_view(row: SkillRow) -> SkillView:
    procedure = row.procedure_json if isinstance(row.procedure_json, dict) else {}
    anchors = _strings(row.evidence_anchors_json)
    return SkillView(
        id=row.id,
        name=row.name,
        status=row.status,
        primary_id=str(procedure.get("primaryPolicyId") or (anchors[0] if anchors else "")),
        anchor_ids=anchors,
        source_ids=_strings(row.source_policies_json),
        digest=str(procedure.get("sourceDigest", "")),
        updated_at=int(row.updated_at),
        has_vec=row.vec is not None,
    )


def skills_anchored_on(db: Session, owner: OwnerFilter, policy_ids: Iterable[str]) -> list[SkillView]:
    """Skills of the namespace (any status) that use one of `policy_ids` as a success anchor."""
    clause = list_has_any(SkillRow.evidence_anchors_json, policy_ids)
    if clause is None:
        return []
    rows = db.scalars(select(SkillRow).where(_owned(SkillRow, owner), clause).order_by(SkillRow.created_at))
    return [_skill_view(row) for row in rows]


def rejected_skills(db: Session, owner: OwnerFilter) -> list[SkillView]:
    """Skills of the namespace a person rejected (`skill.review`) and has not approved or restored since."""
    stmt = select(SkillRow).where(_owned(SkillRow, owner), SkillRow.review_status == REVIEW_REJECTED)
    return [_skill_view(row) for row in db.scalars(stmt)]


def stale_skills(db: Session, owner: OwnerFilter) -> list[SkillView]:
    """Live skills of the namespace with a source experience updated after them."""
    skills = [
        _skill_view(row)
        for row in db.scalars(select(SkillRow).where(_owned(SkillRow, owner), SkillRow.status != STATUS_ARCHIVED))
    ]
    sources = {pid for skill in skills for pid in skill.source_ids}
    if not sources:
        return []
    updated = dict(db.execute(select(PolicyRow.id, PolicyRow.updated_at).where(PolicyRow.id.in_(sources))).all())
    return [s for s in skills if any(int(updated.get(pid, 0)) > s.updated_at for pid in s.source_ids)]


def names_taken(db: Session, owner: OwnerFilter, exclude_id: str | None) -> set[str]:
    """Skill names in use by the (agent kind, profile) — the unique constraint's scope, workspaces included."""
    stmt = select(SkillRow.name).where(
        SkillRow.owner_agent_kind == owner.agent_kind, SkillRow.owner_profile_id == owner.profile_id
    )
    if exclude_id is not None:
        stmt = stmt.where(SkillRow.id != exclude_id)
    return set(db.scalars(stmt))


def world_models_citing(db: Session, owner: OwnerFilter, policy_ids: Iterable[str]) -> list[str]:
    clause = list_has_any(WorldModelRow.policy_ids_json, policy_ids)
    if clause is None:
        return []
    stmt = select(WorldModelRow.id).where(_owned(WorldModelRow, owner), WorldModelRow.status != STATUS_ARCHIVED, clause)
    return list(db.scalars(stmt))


@dataclass(frozen=True)
class Persisted:
    row: SkillRow
    created: bool
    previous_status: str


def persist_skill(
    db: Session,
    *,
    skill_id: str | None,
    family: Family,
    draft: SkillDraft,
    guide: str,
    procedure: dict[str, Any],
    vec: bytes | None,
    settings: SkillSettings,
    now: int,
) -> Persisted:
    """Insert a new candidate skill, or rebuild `skill_id` in place (same id, version + 1).

    A rebuild keeps η and status when the skill has resolved trials (they speak for it) or a person approved
    it (`skill.review`: the approval is about the task the skill does, which a rebuild does not change), else
    both start over from the anchors (initial η; candidate until a trial passes or support promotes it).
    """
    owner = family.primary.owner
    anchors = [a.id for a in family.anchors][:MAX_ANCHORS]
    support = sum(a.support for a in family.anchors)
    gain = family.primary.gain
    worlds = world_models_citing(db, owner, family.source_ids())
    row = db.scalar(select(SkillRow).where(SkillRow.id == skill_id)) if skill_id else None
    if row is None:
        # Another chain (the queue runs two at once) may have crystallised this anchor since the plan was made.
        row = db.scalar(
            select(SkillRow)
            .where(
                _owned(SkillRow, owner),
                SkillRow.status != STATUS_ARCHIVED,
                list_has(SkillRow.evidence_anchors_json, family.primary.id),
            )
            .limit(1)
        )
    created = row is None
    wanted = draft.name if row is None else row.name  # a skill keeps its name across versions
    taken = names_taken(db, owner, None if row is None else row.id)
    name = wanted if wanted not in taken else unique_name(wanted, taken)
    if row is None:
        row = SkillRow(
            id=new_id("skill"),
            name=name,
            status=STATUS_CANDIDATE,
            version=1,
            trials_attempted=0,
            trials_passed=0,
            usage_count=0,
            created_at=now,
            **owner.as_columns(),
        )
        db.add(row)
    else:
        row.version += 1
        row.name = name
    previous_status = row.status if not created else STATUS_CANDIDATE
    row.invocation_guide = guide
    row.procedure_json = procedure
    row.support, row.gain = support, gain
    row.source_policies_json = family.source_ids()
    row.source_world_json = worlds
    row.evidence_anchors_json = anchors
    if vec is not None:
        row.vec = vec
    if row.trials_attempted == 0 and row.review_status != REVIEW_APPROVED:
        row.eta = initial_eta(gain, support, settings)
        set_status(row, STATUS_CANDIDATE, now)
    set_status(row, next_status(row.status, row.eta, row.trials_attempted, row.trials_passed, support, settings), now)
    row.updated_at = now
    row.last_evidence_at = now
    db.flush()
    return Persisted(row, created, previous_status)


def reconcile_skill(db: Session, skill_id: str, now: int, vec: bytes | None) -> SkillRow | None:
    """The skill already says what its sources say: mark it reconciled (`updated_at`), fill a missing vector."""
    row = db.scalar(select(SkillRow).where(SkillRow.id == skill_id))
    if row is None:
        return None
    row.updated_at = now
    if vec is not None and row.vec is None:
        row.vec = vec
    return row


def record_policy_notes(db: Session, notes: dict[str, dict[str, Any]]) -> None:
    """`meta.skill` on each experience: why it yields no skill, or which skill uses it in which role.
    `updated_at` is left alone: a note is not new content (retrieval compares `updated_at` with skills')."""
    if not notes:
        return
    for row in db.scalars(select(PolicyRow).where(PolicyRow.id.in_(list(notes)))):
        meta = dict(row.meta_json or {})
        meta["skill"] = notes[row.id]
        row.meta_json = meta
