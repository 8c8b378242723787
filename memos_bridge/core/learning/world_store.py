"""Storage side of L3: the experiences a run reads, merge-or-create of world models, wire DTOs.

Each function takes a `Session` and runs inside `db.read` / `db.write` (worker thread, one writer).

* `load_state` — the episode's namespace, its active experiences that pass the floors, and which of them
  the episode touched (its id in their source episodes, or a trace of it linked to them);
* `unchanged_model` — the world model that already absorbed exactly this cluster (same experiences, same
  content digests, kept in `kv` as `l3.absorbed.<id>`): re-runs of a chain (late feedback, recovery) and
  gain-only updates change nothing and cost no LLM call;
* `persist` — decides merge vs create *inside* the write transaction, so two chains abstracting the same
  domain at once end in one model: merge into the live model whose experience overlap is ≥
  `policy_overlap_merge` (shared / smaller set), else into the same-domain model most similar to the
  draft (cosine ≥ `merge_min_similarity`), else create. A merge unions entries (new wording first,
  evidence unioned), experiences, episodes and tags, replaces title and body, raises confidence by
  `confidence_delta` (or to the draft's, if higher) and bumps the version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from memos_bridge.config import WorldSettings
from memos_bridge.contract import dto
from memos_bridge.core.learning.world_evidence import ExperienceView
from memos_bridge.core.learning.world_rules import (
    Cluster,
    WorldDraft,
    render_body,
    structure_from_json,
    structure_to_json,
    union_structure,
)
from memos_bridge.ids import new_id
from memos_bridge.rules.subjects import same_inputs
from memos_bridge.storage.models import (
    EpisodeRow,
    FeedbackRow,
    KvRow,
    PolicyRow,
    TracePolicyLinkRow,
    TraceRow,
    WorldModelRow,
)
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import from_blob, vector_from_text

#: Live experiences of a namespace read per run (most recently updated first).
POLICY_SCAN: Final = 2000
#: Live world models of a namespace considered as merge targets.
MODEL_SCAN: Final = 200
#: Feedback texts read per experience (its latest), and characters kept of each.
FEEDBACK_PER_POLICY: Final = 5
FEEDBACK_CHARS: Final = 800
#: Source episodes and tags kept on a world model.
EPISODE_CAP: Final = 200
TAG_CAP: Final = 6
ABSORBED_KEY: Final = "l3.absorbed.{world_id}"
STATUS_ACTIVE: Final = "active"
STATUS_ARCHIVED: Final = "archived"


def _own(model: type[PolicyRow] | type[WorldModelRow], owner: OwnerFilter) -> Any:
    """Rows of exactly this namespace (shared rows of others are read, never written into)."""
    return (
        (model.owner_agent_kind == owner.agent_kind)
        & (model.owner_profile_id == owner.profile_id)
        & model.owner_workspace_id.is_not_distinct_from(owner.workspace_id)
    )


def _vector(blob: bytes | None, dim: int) -> np.ndarray | None:
    if blob is None:
        return None
    try:
        vec = from_blob(blob, dim)
    except ValueError:  # written by another model: unusable until re-embedded
        return None
    return vec if np.isfinite(vec).all() and vec.any() else None


#: The policy columns a view is built from (`load_state` reads these, not whole ORM rows: building and
#: tracking up to `POLICY_SCAN` ORM objects on every run was most of this stage's cost in a large store).
VIEW_COLUMNS: Final = (
    PolicyRow.id,
    PolicyRow.experience_type,
    PolicyRow.evidence_polarity,
    PolicyRow.title,
    PolicyRow.trigger,
    PolicyRow.procedure,
    PolicyRow.verification,
    PolicyRow.boundary,
    PolicyRow.decision_guidance_json,
    PolicyRow.verifier_meta_json,
    PolicyRow.tags_json,
    PolicyRow.signature,
    PolicyRow.confidence,
    PolicyRow.gain,
    PolicyRow.support,
    PolicyRow.source_episodes_json,
    PolicyRow.source_feedback_ids_json,
    PolicyRow.lesson_json,
    PolicyRow.updated_at,
    PolicyRow.vec,
)


def view_of(row: PolicyRow | Row[Any], dim: int, feedback: dict[str, str] | None = None) -> ExperienceView:
    """A detached view of a policy row (an ORM row or a row of `VIEW_COLUMNS`); `feedback` maps feedback ids
    to their text."""
    guidance = row.decision_guidance_json if isinstance(row.decision_guidance_json, dict) else {}
    feedback_ids = tuple(str(f) for f in (row.source_feedback_ids_json or []))
    return ExperienceView(
        id=row.id,
        experience_type=row.experience_type or "procedural",
        polarity=row.evidence_polarity or "neutral",
        title=row.title or "",
        trigger=row.trigger or "",
        procedure=row.procedure or "",
        verification=row.verification or "",
        boundary=row.boundary or "",
        preference=tuple(str(line) for line in guidance.get("preference", []) or []),
        anti_pattern=tuple(str(line) for line in guidance.get("antiPattern", []) or []),
        verifier_meta=row.verifier_meta_json,
        tags=tuple(str(tag) for tag in (row.tags_json or [])),
        signature=row.signature or "",
        confidence=float(row.confidence),
        gain=float(row.gain),
        support=int(row.support),
        source_episodes=tuple(str(e) for e in (row.source_episodes_json or [])),
        source_feedback_ids=feedback_ids,
        feedback_notes=tuple(text for f in feedback_ids[-FEEDBACK_PER_POLICY:] if (text := (feedback or {}).get(f))),
        lesson_builder=isinstance(row.lesson_json, dict),
        terms=tuple(str(t) for t in (row.lesson_json.get("terms") or [])) if isinstance(row.lesson_json, dict) else (),
        contexts=_contexts(row.lesson_json),
        updated_at=int(row.updated_at),
        vec=_vector(row.vec, dim),
    )


def _contexts(lesson: Any) -> tuple[NDArray[np.float32], ...]:
    """The decoded request vectors of a lesson record (none for other policies)."""
    if not isinstance(lesson, dict):
        return ()
    decoded = (vector_from_text(str(text)) for text in lesson.get("contexts") or [])
    return tuple(vec for vec in decoded if vec is not None)


def feedback_texts(db: Session, ids: Iterable[str]) -> dict[str, str]:
    """Feedback id → its words (rationale, and the text fields of its raw payload), capped."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    out: dict[str, str] = {}
    for row in db.scalars(select(FeedbackRow).where(FeedbackRow.id.in_(wanted))):
        raw = row.raw_json if isinstance(row.raw_json, dict) else {}
        parts = [row.rationale or "", *(raw.get(k) for k in ("text", "feedback", "message", "comment"))]
        text = "\n".join(dict.fromkeys(p.strip() for p in parts if isinstance(p, str) and p.strip()))
        if text:
            out[row.id] = text[:FEEDBACK_CHARS]
    return out


@dataclass(frozen=True)
class WorldState:
    owner: OwnerFilter
    views: list[ExperienceView]
    touched: set[str]


def load_state(db: Session, episode_id: str, dim: int, settings: WorldSettings) -> WorldState | None:
    """The episode's namespace, its eligible experiences and the ids of those the episode touched."""
    episode = db.get(EpisodeRow, episode_id)
    if episode is None:
        return None
    owner = OwnerFilter(episode.owner_agent_kind, episode.owner_profile_id, episode.owner_workspace_id)
    rows = db.execute(
        select(*VIEW_COLUMNS)
        .where(
            _own(PolicyRow, owner),
            PolicyRow.status == STATUS_ACTIVE,
            PolicyRow.archived_at.is_(None),
            PolicyRow.confidence >= settings.min_policy_confidence,
            PolicyRow.gain >= settings.min_policy_gain,
            PolicyRow.support >= settings.min_policy_support,
        )
        .order_by(PolicyRow.updated_at.desc(), PolicyRow.rid.desc())
        .limit(POLICY_SCAN)
    )
    policies = list(rows)
    wanted = {str(f) for row in policies for f in (row.source_feedback_ids_json or [])[-FEEDBACK_PER_POLICY:]}
    texts = feedback_texts(db, wanted)
    views = [view_of(row, dim, texts) for row in policies]
    trace_ids = list(db.scalars(select(TraceRow.id).where(TraceRow.episode_id == episode_id)))
    linked: set[str] = set()
    if trace_ids:
        linked = set(db.scalars(select(TracePolicyLinkRow.policy_id).where(TracePolicyLinkRow.trace_id.in_(trace_ids))))
    touched = {v.id for v in views if episode_id in v.source_episodes or v.id in linked}
    return WorldState(owner, views, touched)


# ---------------------------------------------------------------- merge targets


def _live_models(db: Session, owner: OwnerFilter) -> list[WorldModelRow]:
    return list(
        db.scalars(
            select(WorldModelRow)
            .where(
                _own(WorldModelRow, owner), WorldModelRow.status != STATUS_ARCHIVED, WorldModelRow.archived_at.is_(None)
            )
            .order_by(WorldModelRow.updated_at.desc(), WorldModelRow.rid.desc())
            .limit(MODEL_SCAN)
        )
    )


def overlap(a: Iterable[str], b: Iterable[str]) -> float:
    """Shared experiences over the smaller set: a cluster that grew around a model overlaps it fully."""
    left, right = set(a), set(b)
    if not left or not right:
        return 0.0
    return len(left & right) / min(len(left), len(right))


def _related(row: WorldModelRow, domain: str, cluster_ids: Sequence[str], settings: WorldSettings) -> bool:
    return domain in (row.domain_tags_json or []) or overlap(cluster_ids, row.policy_ids_json or []) >= (
        settings.policy_overlap_merge
    )


def _same_data(row: WorldModelRow, cluster: Cluster, terms_of: Mapping[str, Sequence[str]]) -> bool:
    """Whether a model may absorb `cluster`: it shares members with it, or its members were learnt on inputs
    the cluster's share (or either side recorded none). A domain word in common is not enough: "tests" in a
    lab's assay export and in a CI log are different worlds. `terms_of`: the inputs of the experiences the run
    already read (a member no longer live counts as recording none)."""
    members = [str(i) for i in (row.policy_ids_json or [])]
    if set(cluster.ids) & set(members) or not cluster.terms:
        return True
    theirs = {term for member in members for term in terms_of.get(member, ())}
    return not theirs or same_inputs(cluster.terms, theirs)


def _absorbed(db: Session, world_id: str) -> dict[str, str]:
    row = db.get(KvRow, ABSORBED_KEY.format(world_id=world_id))
    value = row.value_json if row is not None else None
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def unchanged_model(db: Session, owner: OwnerFilter, cluster: Cluster, settings: WorldSettings) -> str | None:
    """The id of a live, related model that already absorbed every member of `cluster` as it is now."""
    for row in _live_models(db, owner):
        if not _related(row, cluster.domain.key, cluster.ids, settings):
            continue
        absorbed = _absorbed(db, row.id)
        if all(absorbed.get(member.id) == member.digest() for member in cluster.members):
            return row.id
    return None


def pick_target(
    rows: Sequence[WorldModelRow],
    domain: str,
    cluster_ids: Sequence[str],
    vec: np.ndarray | None,
    settings: WorldSettings,
    dim: int,
) -> WorldModelRow | None:
    """Merge target: best experience overlap ≥ the merge share, else best same-domain cosine ≥ the floor."""
    by_overlap = [(overlap(cluster_ids, row.policy_ids_json or []), row) for row in rows]
    best_overlap = max(by_overlap, key=lambda item: (item[0], domain in (item[1].domain_tags_json or [])), default=None)
    if best_overlap is not None and best_overlap[0] >= settings.policy_overlap_merge:
        return best_overlap[1]
    if vec is None:
        return None
    scored = []
    for row in rows:
        other = _vector(row.vec, dim)
        if other is not None and domain in (row.domain_tags_json or []):
            scored.append((float(np.dot(vec, other)), row))
    best = max(scored, key=lambda item: item[0], default=None)
    return best[1] if best is not None and best[0] >= settings.merge_min_similarity else None


# ---------------------------------------------------------------- writing


@dataclass
class StoredWorld:
    row: WorldModelRow
    created: bool
    #: Title + body changed from the draft's (a merge): the vector must be recomputed.
    text_changed: bool


def _union(existing: Iterable[str] | None, new: Iterable[str], cap: int) -> list[str]:
    return list(dict.fromkeys([*(existing or []), *new]))[-cap:]


def _remember(db: Session, world_id: str, members: Sequence[ExperienceView], now: int) -> None:
    key = ABSORBED_KEY.format(world_id=world_id)
    absorbed = {**_absorbed(db, world_id), **{m.id: m.digest() for m in members}}
    row = db.get(KvRow, key)
    if row is None:
        db.add(KvRow(key=key, value_json=absorbed, updated_at=now))
    else:
        row.value_json, row.updated_at = absorbed, now


def persist(
    db: Session,
    owner: OwnerFilter,
    cluster: Cluster,
    draft: WorldDraft,
    vec: bytes | None,
    settings: WorldSettings,
    dim: int,
    now: int,
    terms_of: Mapping[str, Sequence[str]] | None = None,
) -> StoredWorld:
    """Merge the draft into its target or insert it (see the module docstring); `terms_of` maps the live
    experiences to the inputs they were learnt on (a model learnt on other data is no target)."""
    terms_of = terms_of or {}
    episodes = [e for m in cluster.members for e in m.source_episodes]
    rows = [
        row
        for row in _live_models(db, owner)
        if _related(row, cluster.domain.key, cluster.ids, settings) and _same_data(row, cluster, terms_of)
    ]
    target = pick_target(rows, cluster.domain.key, cluster.ids, _vector(vec, dim), settings, dim)
    if target is None:
        row = WorldModelRow(
            id=new_id("world_model"),
            title=draft.title,
            body=draft.body,
            policy_ids_json=list(cluster.ids),
            structure_json=structure_to_json(draft.structure),
            domain_tags_json=list(draft.domain_tags),
            confidence=draft.confidence,
            source_episodes_json=_union([], episodes, EPISODE_CAP),
            induced_by=draft.induced_by,
            vec=vec,
            status=STATUS_ACTIVE,
            version=1,
            created_at=now,
            updated_at=now,
            last_evidence_at=now,
            **owner.as_columns(),
        )
        db.add(row)
        db.flush()
        _remember(db, row.id, cluster.members, now)
        return StoredWorld(row, created=True, text_changed=False)
    merged = union_structure(draft.structure, structure_from_json(target.structure_json), settings.max_entries)
    body = draft.body if draft.induced_by == "llm" else render_body(cluster, merged, settings.body_max_chars)
    target.structure_json = structure_to_json(merged)
    target.title = draft.title
    target.body = body
    target.policy_ids_json = _union(target.policy_ids_json, cluster.ids, POLICY_SCAN)
    target.source_episodes_json = _union(target.source_episodes_json, episodes, EPISODE_CAP)
    target.domain_tags_json = list(dict.fromkeys([*draft.domain_tags, *(target.domain_tags_json or [])]))[:TAG_CAP]
    target.confidence = round(min(1.0, max(target.confidence + settings.confidence_delta, draft.confidence)), 4)
    target.version = (target.version or 1) + 1
    target.induced_by = draft.induced_by
    if vec is not None:  # else keep the old vector until the next merge re-embeds
        target.vec = vec
    target.updated_at = now
    target.last_evidence_at = now
    _remember(db, target.id, cluster.members, now)
    return StoredWorld(target, created=False, text_changed=body != draft.body)


def set_vector(db: Session, world_id: str, vec: bytes) -> WorldModelRow | None:
    row = db.scalar(select(WorldModelRow).where(WorldModelRow.id == world_id))
    if row is not None:
        row.vec = vec
    return row


# ---------------------------------------------------------------- wire


def world_dto(row: WorldModelRow) -> dto.WorldModelDTO:
    structure = structure_from_json(row.structure_json)
    return dto.WorldModelDTO(
        id=row.id,
        title=row.title,
        body=row.body,
        structure=dto.WorldStructureDTO(
            **{
                name: [
                    dto.WorldEntryDTO(label=e.label, description=e.description, evidence_ids=e.evidence_ids)
                    for e in entries
                ]
                for name, entries in structure.items()
            }
        ),
        domain_tags=list(row.domain_tags_json or []),
        policy_ids=list(row.policy_ids_json or []),
        source_episode_ids=list(row.source_episodes_json or []),
        confidence=float(row.confidence),
        version=int(row.version),
        status=STATUS_ARCHIVED if row.status == STATUS_ARCHIVED or row.archived_at is not None else STATUS_ACTIVE,
        induced_by=row.induced_by or "",
        strength=float(row.strength),
        pinned=bool(row.pinned),
        archived_at=row.archived_at,
        forgotten_at=row.forgotten_at,
        created_at=int(row.created_at),
        updated_at=int(row.updated_at),
    )


def get_world(db: Session, world_id: str, owner: OwnerFilter | None) -> dto.WorldModelDTO | None:
    """One world model by id; None when missing or not visible to `owner` (None = operator's view)."""
    row = db.scalar(select(WorldModelRow).where(WorldModelRow.id == world_id))
    if row is None or (owner is not None and not owner.can_see(row)):
        return None
    return world_dto(row)


def list_worlds(
    db: Session,
    owner: OwnerFilter | None,
    status: str | None,
    limit: int,
    offset: int,
    include_forgotten: bool = False,
) -> dto.WorldModelsResult:
    """World models visible to `owner`, most recently updated first; `status` archived includes decayed ones."""
    stmt = select(WorldModelRow)
    if owner is not None:
        stmt = stmt.where(owner.clause(WorldModelRow))
    if status == STATUS_ACTIVE:
        stmt = stmt.where(WorldModelRow.status != STATUS_ARCHIVED, WorldModelRow.archived_at.is_(None))
    elif status == STATUS_ARCHIVED:
        stmt = stmt.where((WorldModelRow.status == STATUS_ARCHIVED) | WorldModelRow.archived_at.is_not(None))
    if not include_forgotten:
        stmt = stmt.where(WorldModelRow.forgotten_at.is_(None))
    rows = db.scalars(
        stmt.order_by(WorldModelRow.updated_at.desc(), WorldModelRow.rid.desc()).limit(limit).offset(offset)
    )
    return dto.WorldModelsResult(world_models=[world_dto(row) for row in rows])
