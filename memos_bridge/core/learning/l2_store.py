"""The L2 stage's units of work: each function takes a SQLAlchemy `Session` and runs inside `db.read` or
`db.write` (worker thread). Kept apart from the orchestration in `l2.py` so that the async flow reads as the
algorithm and every statement the stage issues is in one place.

Every write re-checks what it depends on inside its own transaction (link exists? pool row still
unpromoted? policy still live?): writes are serialised, so check-then-insert here is atomic, and two
episodes learning concurrently can never link a trace twice or promote a pool row twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from memos_bridge.config import L2Settings
from memos_bridge.core.learning.l2_gain import (
    STATUS_ARCHIVED,
    GainResult,
    compute_gain,
    next_status,
    reward_scale,
)
from memos_bridge.core.learning.l2_induce import PolicyDraft, PolicyText, TraceView, find_near_duplicate
from memos_bridge.core.learning.l2_signature import pool_key
from memos_bridge.ids import new_id
from memos_bridge.storage.models import (
    EpisodeRow,
    KvRow,
    L2CandidateRow,
    PolicyRow,
    TracePolicyLinkRow,
    TraceRow,
)
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import from_blob

#: Newest links forming a policy's with-set, and newest traces per episode in its without-set (reference).
WITH_SET_CAP: Final = 50
WITHOUT_PER_EPISODE_CAP: Final = 50
#: Stored policies a new draft is compared with for near-duplicates (the most recently updated).
NEAR_DUP_SCAN: Final = 500
#: Caps of a policy's provenance lists and guidance lines (a popular policy must not grow without bound).
SOURCE_CAP: Final = 200
GUIDANCE_CAP: Final = 8
#: Traces of one episode loaded as context for the rule inducer.
CONTEXT_TRACES: Final = 80
#: KV key of a policy's gain bookkeeping (see `update_gains`).
GAIN_STATE_KEY: Final = "l2.gain.{policy_id}"


# ---------------------------------------------------------------- reads


def trace_view(row: TraceRow, dim: int | None) -> TraceView:
    """A detached snapshot; the vector is `vec_summary` (else `vec_action`) decoded at `dim` (None: skip)."""
    vec = None
    if dim is not None:
        for blob in (row.vec_summary, row.vec_action):
            if blob is None:
                continue
            try:
                vec = from_blob(blob, dim)
            except ValueError:  # written by another model: not usable until re-embedded
                continue
            if np.isfinite(vec).all() and vec.any():
                break
            vec = None
    return TraceView(
        id=row.id,
        episode_id=row.episode_id,
        ts=row.ts,
        step_index=row.step_index,
        step_kind=row.step_kind,
        user_text=row.user_text or "",
        agent_text=row.agent_text or "",
        summary=row.summary or "",
        reflection=row.reflection,
        tool_calls=tuple(call for call in (row.tool_calls_json or []) if isinstance(call, dict)),
        value=float(row.value),
        alpha=float(row.alpha),
        tags=tuple(str(tag) for tag in (row.tags_json or [])),
        error_signatures=tuple(str(sig) for sig in (row.error_signatures_json or [])),
        vec=vec,
    )


@dataclass
class EpisodeState:
    """The episode as L2 starts from: its namespace, its steps, and which of them are already linked."""

    owner: OwnerFilter
    traces: list[TraceView]
    linked_trace_ids: set[str]


def load_episode(db: Session, episode_id: str, dim: int) -> EpisodeState | None:
    episode = db.get(EpisodeRow, episode_id)
    if episode is None:
        return None
    owner = OwnerFilter(episode.owner_agent_kind, episode.owner_profile_id, episode.owner_workspace_id)
    rows = db.scalars(
        select(TraceRow)
        .where(TraceRow.episode_id == episode_id, TraceRow.archived_at.is_(None))
        .order_by(TraceRow.ts, TraceRow.step_index, TraceRow.rid)
    )
    traces = [trace_view(row, dim) for row in rows]
    linked = db.scalars(
        select(TracePolicyLinkRow.trace_id).where(TracePolicyLinkRow.trace_id.in_([t.id for t in traces]))
    )
    return EpisodeState(owner, traces, set(linked))


L2_TYPE = "procedural"
"""The experience type of L2-induced policies (the column's default)."""


def policy_signatures(db: Session, policy_ids: Iterable[str]) -> dict[str, str]:
    """Signature text of each live (candidate/active) L2 policy among `policy_ids`.

    Typed experiences built from feedback (failure lessons, preferences...) share the table and the vector
    index but are not L2's to associate, merge or re-gain: only `procedural` rows are returned."""
    ids = list(set(policy_ids))
    if not ids:
        return {}
    rows = db.execute(
        select(PolicyRow.id, PolicyRow.signature).where(
            PolicyRow.id.in_(ids), PolicyRow.status != STATUS_ARCHIVED, PolicyRow.experience_type == L2_TYPE
        )
    ).all()
    return {row_id: signature or "" for row_id, signature in rows}


@dataclass
class Bucket:
    """Unpromoted, unexpired pool rows of one signature in one namespace, with their evidence traces."""

    signature: str
    pool_ids: list[str]
    traces: list[TraceView]

    @property
    def episodes(self) -> set[str]:
        return {t.episode_id for t in self.traces}


def load_buckets(
    db: Session, owner: OwnerFilter, signatures: Iterable[str], now: int, dim: int, min_value: float
) -> list[Bucket]:
    """Buckets of `signatures`; evidence whose value has since fallen below `min_value` is left out."""
    sigs = sorted(set(signatures))
    if not sigs:
        return []
    rows = list(
        db.scalars(
            select(L2CandidateRow)
            .where(
                L2CandidateRow.signature.in_(sigs),
                owner.clause(L2CandidateRow),
                L2CandidateRow.policy_id.is_(None),
                L2CandidateRow.expires_at > now,
            )
            .order_by(L2CandidateRow.created_at, L2CandidateRow.id)
        )
    )
    wanted = {tid for row in rows for tid in (row.evidence_trace_ids_json or [])}
    traces = {
        row.id: trace_view(row, dim)
        for row in db.scalars(select(TraceRow).where(TraceRow.id.in_(wanted), TraceRow.archived_at.is_(None)))
    }
    buckets: dict[str, Bucket] = {}
    taken: set[tuple[str, str]] = set()
    for row in rows:
        bucket = buckets.setdefault(row.signature, Bucket(row.signature, [], []))
        evidence = [
            traces[tid]
            for tid in row.evidence_trace_ids_json or []
            if tid in traces and traces[tid].value >= min_value and (row.signature, tid) not in taken
        ]
        if evidence:
            bucket.pool_ids.append(row.id)
            bucket.traces.extend(evidence)
            taken.update((row.signature, t.id) for t in evidence)
    return [b for b in buckets.values() if b.traces]


def load_contexts(db: Session, episode_ids: Sequence[str]) -> dict[str, list[TraceView]]:
    """The steps of each evidence episode in order (no vectors: the rule inducer reads text)."""
    out: dict[str, list[TraceView]] = {}
    for episode_id in episode_ids:
        rows = db.scalars(
            select(TraceRow)
            .where(TraceRow.episode_id == episode_id, TraceRow.archived_at.is_(None))
            .order_by(TraceRow.ts, TraceRow.step_index, TraceRow.rid)
            .limit(CONTEXT_TRACES)
        )
        out[episode_id] = [trace_view(row, None) for row in rows]
    return out


# ---------------------------------------------------------------- association and pool


@dataclass
class AssociationWrite:
    """What `record_associations` did."""

    links: list[tuple[str, str, float]] = field(default_factory=list)
    pooled: list[str] = field(default_factory=list)
    signatures: set[str] = field(default_factory=set)


def _policy(db: Session, policy_id: str) -> PolicyRow | None:
    return db.scalar(select(PolicyRow).where(PolicyRow.id == policy_id))


def _link(db: Session, trace_id: str, policy_id: str, episode_id: str, now: int) -> bool:
    """Insert the link unless it exists; True when it was created."""
    if db.get(TracePolicyLinkRow, (trace_id, policy_id)) is not None:
        return False
    db.add(TracePolicyLinkRow(trace_id=trace_id, policy_id=policy_id, episode_id=episode_id, created_at=now))
    db.flush()
    return True


def record_associations(
    db: Session,
    owner: OwnerFilter,
    matches: Sequence[tuple[TraceView, str, float]],
    unmatched: Sequence[tuple[TraceView, float]],
    now: int,
    ttl_ms: int,
) -> AssociationWrite:
    """Link matched traces (their pool rows count as promoted); pool or refresh the others.

    Re-sighting refreshes the TTL of the trace's own row and of the rest of its unexpired bucket: a
    pattern that keeps coming back should not lose its older evidence one row at a time.

    The work is done set-wise, a few statements per call whatever the number of traces: this runs in the
    single write transaction every host's capture also waits for, so each statement per trace (a task has
    tens of steps) was time the writer was held from them.
    """
    out = AssociationWrite()
    _link_matches(db, matches, now, out)
    _pool_unmatched(db, owner, unmatched, now, now + ttl_ms, out)
    for signature in sorted(out.signatures):  # once per pattern, not once per step that fed it
        db.execute(
            update(L2CandidateRow)
            .where(
                L2CandidateRow.signature == signature,
                owner.clause(L2CandidateRow),
                L2CandidateRow.policy_id.is_(None),
                L2CandidateRow.expires_at > now,
            )
            .values(expires_at=now + ttl_ms)
        )
    return out


def _link_matches(
    db: Session, matches: Sequence[tuple[TraceView, str, float]], now: int, out: AssociationWrite
) -> None:
    """Link each matched trace to its policy unless the policy is gone or archived, or the link exists; the
    trace's unpromoted pool rows now belong to that policy."""
    if not matches:
        return
    wanted = {pid for _, pid, _ in matches}
    statuses: dict[str, str] = {
        pid: status
        for pid, status in db.execute(select(PolicyRow.id, PolicyRow.status).where(PolicyRow.id.in_(wanted)))
    }
    live = [(t, pid, score) for t, pid, score in matches if pid in statuses and statuses[pid] != STATUS_ARCHIVED]
    if not live:
        return
    linked: set[tuple[str, str]] = {
        (trace_id, policy_id)
        for trace_id, policy_id in db.execute(
            select(TracePolicyLinkRow.trace_id, TracePolicyLinkRow.policy_id).where(
                TracePolicyLinkRow.trace_id.in_({t.id for t, _, _ in live})
            )
        )
    }
    promoted: dict[str, list[str]] = {}
    for trace, policy_id, score in live:
        promoted.setdefault(policy_id, []).append(trace.id)
        if (trace.id, policy_id) in linked:
            continue
        linked.add((trace.id, policy_id))
        db.add(TracePolicyLinkRow(trace_id=trace.id, policy_id=policy_id, episode_id=trace.episode_id, created_at=now))
        out.links.append((trace.id, policy_id, score))
    db.flush()
    for policy_id, trace_ids in promoted.items():
        db.execute(
            update(L2CandidateRow)
            .where(L2CandidateRow.trace_id.in_(trace_ids), L2CandidateRow.policy_id.is_(None))
            .values(policy_id=policy_id)
        )


def _pool_unmatched(
    db: Session,
    owner: OwnerFilter,
    unmatched: Sequence[tuple[TraceView, float]],
    now: int,
    expires: int,
    out: AssociationWrite,
) -> None:
    """Pool each unmatched trace under its signature (one row per pattern and trace), or refresh its row."""
    if not unmatched:
        return
    keys = {trace.id: pool_key(str(trace.signature), trace.id) for trace, _ in unmatched}
    # A trace whose signature changed since it was pooled (e.g. a reflection added later) moves rows. A key
    # names its trace (it ends with the trace id), so no row of one trace is another trace's key.
    db.execute(
        delete(L2CandidateRow).where(
            L2CandidateRow.trace_id.in_(list(keys)),
            L2CandidateRow.id.not_in(list(keys.values())),
            L2CandidateRow.policy_id.is_(None),
        )
    )
    rows = {row.id: row for row in db.scalars(select(L2CandidateRow).where(L2CandidateRow.id.in_(list(keys.values()))))}
    for trace, score in unmatched:
        signature = str(trace.signature)
        key = keys[trace.id]
        row = rows.get(key)
        if row is None:
            rows[key] = L2CandidateRow(
                id=key,
                trace_id=trace.id,
                evidence_trace_ids_json=[trace.id],
                signature=signature,
                similarity=score,
                expires_at=expires,
                created_at=now,
                **owner.as_columns(),
            )
            db.add(rows[key])
        elif row.policy_id is None:
            row.expires_at, row.similarity = expires, score
        else:
            continue  # already promoted (its link was removed with a deleted policy): leave it be
        out.pooled.append(trace.id)
        out.signatures.add(signature)
    db.flush()


# ---------------------------------------------------------------- induction


def _union(existing: Sequence[str] | None, new: Iterable[str]) -> list[str]:
    merged = list(dict.fromkeys([*(existing or []), *new]))
    return merged[-SOURCE_CAP:]


def attach_bucket(db: Session, policy: PolicyRow, bucket: Bucket, now: int) -> list[str]:
    """Promote the bucket's pool rows into `policy`, link its evidence, extend the provenance.

    Returns the trace ids newly linked (already linked ones are not counted again).
    """
    for pool_id in bucket.pool_ids:
        row = db.get(L2CandidateRow, pool_id)
        if row is not None and row.policy_id is None:
            row.policy_id = policy.id
    linked = [t.id for t in bucket.traces if _link(db, t.id, policy.id, t.episode_id, now)]
    policy.source_episodes_json = _union(policy.source_episodes_json, (t.episode_id for t in bucket.traces))
    policy.source_trace_ids_json = _union(policy.source_trace_ids_json, (t.id for t in bucket.traces))
    policy.updated_at = now
    return linked


def bucket_still_open(db: Session, bucket: Bucket) -> bool:
    """Whether no other run promoted this bucket in the meantime."""
    rows = db.scalars(select(L2CandidateRow).where(L2CandidateRow.id.in_(bucket.pool_ids))).all()
    return any(row.policy_id is None for row in rows)


def _add_caveats(policy: PolicyRow, caveats: Sequence[str]) -> None:
    if not caveats:
        return
    guidance = dict(policy.decision_guidance_json or {})
    anti = list(dict.fromkeys([*guidance.get("antiPattern", []), *caveats]))[:GUIDANCE_CAP]
    policy.decision_guidance_json = {**guidance, "antiPattern": anti}


def promote_bucket(
    db: Session, policy_id: str, bucket: Bucket, now: int, caveats: Sequence[str] = ()
) -> list[str] | None:
    """The bucket joins an existing policy (its caveats too). None when that policy is gone or archived,
    or another run promoted the bucket meanwhile."""
    policy = _policy(db, policy_id)
    if policy is None or policy.status == STATUS_ARCHIVED or not bucket_still_open(db, bucket):
        return None
    _add_caveats(policy, caveats)
    return attach_bucket(db, policy, bucket, now)


@dataclass
class StoredDraft:
    policy: PolicyRow
    merged: bool
    linked: list[str]


def store_draft(
    db: Session,
    owner: OwnerFilter,
    draft: PolicyDraft,
    signature: str,
    bucket: Bucket,
    vec: bytes | None,
    now: int,
) -> StoredDraft | None:
    """Insert the draft as a candidate policy, or merge it into a near-duplicate of the namespace.

    None when another run promoted the bucket meanwhile.
    """
    if not bucket_still_open(db, bucket):
        return None
    stored = db.execute(
        select(PolicyRow.id, PolicyRow.title, PolicyRow.trigger, PolicyRow.procedure, PolicyRow.verification)
        .where(
            PolicyRow.owner_agent_kind == owner.agent_kind,
            PolicyRow.owner_profile_id == owner.profile_id,
            PolicyRow.owner_workspace_id.is_not_distinct_from(owner.workspace_id),
            PolicyRow.status != STATUS_ARCHIVED,
            PolicyRow.experience_type == L2_TYPE,
        )
        .order_by(PolicyRow.updated_at.desc())
        .limit(NEAR_DUP_SCAN)
    ).all()
    duplicate_id = find_near_duplicate(draft, (PolicyText(*row) for row in stored))
    if duplicate_id is not None:
        policy = _policy(db, duplicate_id)
        if policy is not None:
            _add_caveats(policy, draft.caveats)
            return StoredDraft(policy, True, attach_bucket(db, policy, bucket, now))
    policy = PolicyRow(
        id=new_id("policy"),
        title=draft.title,
        trigger=draft.trigger,
        procedure=draft.procedure,
        verification=draft.verification,
        boundary=draft.boundary,
        support=0,
        gain=0.0,
        status="candidate",
        experience_type="procedural",
        evidence_polarity="positive",
        confidence=draft.confidence,
        source_episodes_json=[],
        source_trace_ids_json=[],
        induced_by=draft.induced_by,
        decision_guidance_json={"preference": [], "antiPattern": draft.caveats[:GUIDANCE_CAP]},
        signature=signature,
        vec=vec,
        created_at=now,
        updated_at=now,
        last_evidence_at=now,
        **owner.as_columns(),
    )
    db.add(policy)
    db.flush()
    return StoredDraft(policy, False, attach_bucket(db, policy, bucket, now))


# ---------------------------------------------------------------- gain and status


@dataclass(frozen=True)
class GainUpdate:
    policy_id: str
    previous_status: str
    status: str
    support: int
    gain: float
    result: GainResult
    row: PolicyRow


def _gain_state(db: Session, policy: PolicyRow, episode_id: str, now: int) -> tuple[float, int]:
    """(gain, support) before this episode's contribution — what the EMA step starts from.

    Kept in `kv` per policy: which episode updated it last and the values before. A re-run for the same
    episode (idempotent re-run, or late feedback re-scoring it) recomputes that episode's step from the
    same starting point instead of applying the EMA a second time on top of itself.
    """
    key = GAIN_STATE_KEY.format(policy_id=policy.id)
    row = db.get(KvRow, key)
    state: dict[str, Any] = row.value_json if row is not None and isinstance(row.value_json, dict) else {}
    if state.get("episodeId") == episode_id:
        return float(state.get("gainBefore", 0.0)), int(state.get("supportBefore", 0))
    value = {"episodeId": episode_id, "gainBefore": policy.gain, "supportBefore": policy.support}
    if row is None:
        db.add(KvRow(key=key, value_json=value, updated_at=now))
    else:
        row.value_json, row.updated_at = value, now
    return policy.gain, policy.support


def _reward_scale(db: Session, episode_ids: Sequence[str]) -> float:
    """`reward_scale` of the episodes the gain's evidence comes from (their stored reward sources)."""
    rows = db.execute(select(EpisodeRow.meta_json).where(EpisodeRow.id.in_(list(episode_ids))))
    return reward_scale(((meta or {}).get("reward") or {}).get("source") for (meta,) in rows)


def _with_and_without(db: Session, policy_id: str, episode_id: str) -> tuple[list[float], list[float], float]:
    links = db.execute(
        select(TraceRow.id, TraceRow.value, TraceRow.episode_id)
        .join(TracePolicyLinkRow, TracePolicyLinkRow.trace_id == TraceRow.id)
        .where(TracePolicyLinkRow.policy_id == policy_id, TraceRow.archived_at.is_(None))
        .order_by(TracePolicyLinkRow.created_at.desc(), TraceRow.ts.desc(), TraceRow.rid.desc())
        .limit(WITH_SET_CAP)
    ).all()
    with_ids = {trace_id for trace_id, _, _ in links}
    episodes = list(dict.fromkeys([episode_id, *(ep for _, _, ep in links)]))
    without: list[float] = []
    for ep in episodes:
        rows = db.execute(
            select(TraceRow.value)
            .where(TraceRow.episode_id == ep, TraceRow.archived_at.is_(None), TraceRow.id.not_in(with_ids))
            .order_by(TraceRow.ts.desc(), TraceRow.rid.desc())
            .limit(WITHOUT_PER_EPISODE_CAP)
        ).all()
        without.extend(float(value) for (value,) in rows)
    return [float(value) for _, value, _ in links], without, _reward_scale(db, episodes)


def update_gains(
    db: Session,
    policy_ids: Iterable[str],
    new_links: Counter[str],
    episode_id: str,
    settings: L2Settings,
    now: int,
) -> list[GainUpdate]:
    """Gain, support and status of every touched live policy (reference §6.5 steps 5–6)."""
    updates: list[GainUpdate] = []
    for policy_id in sorted(set(policy_ids)):
        policy = _policy(db, policy_id)
        if policy is None or policy.status == STATUS_ARCHIVED:
            continue
        with_values, without_values, scale = _with_and_without(db, policy_id, episode_id)
        if not with_values:
            continue
        previous_gain, previous_support = _gain_state(db, policy, episode_id, now)
        result = compute_gain(
            with_values,
            without_values,
            previous_gain=previous_gain,
            previous_support=previous_support,
            ema_alpha=settings.gain_ema_alpha,
            scale=scale,
        )
        support = policy.support + new_links.get(policy_id, 0)
        previous_status = policy.status
        status = next_status(previous_status, support, result.gain, settings)
        policy.gain, policy.support, policy.status = result.gain, support, status
        policy.updated_at = now
        if new_links.get(policy_id, 0):
            policy.last_evidence_at = now
        if status == STATUS_ARCHIVED and policy.archived_at is None:
            policy.archived_at = now
        updates.append(GainUpdate(policy_id, previous_status, status, support, result.gain, result, policy))
    return updates


def linked_policies(db: Session, trace_ids: Sequence[str]) -> set[str]:
    if not trace_ids:
        return set()
    rows = db.scalars(select(TracePolicyLinkRow.policy_id).where(TracePolicyLinkRow.trace_id.in_(list(trace_ids))))
    return set(rows)
