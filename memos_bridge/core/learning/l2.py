"""The L2 stage: turn an episode's valuable steps into reusable policies (reference §6.5, issue 4).

Runs after the reward stage has written values on the episode's traces, and again whenever late feedback
re-scores the episode. One run:

1. **Eligible traces** — value ≥ `min_trace_value`, a usable vector, not linked to a policy yet.
2. **Association** — each is compared with the live policies visible to the episode's namespace (vector
   pool of 16); the score is the cosine plus the pattern-signature bonus, gated when the primary tag and
   the error code both differ (`l2_signature`). The best score ≥ `min_similarity` links the trace to that
   policy (`trace_policy_links`, `l2.trace.associated`).
3. **Pool** — the others enter `l2_candidate_pool` under their signature, with a TTL (refreshed on
   re-sight, one row per trace and signature, so re-runs never duplicate).
4. **Induction** — each bucket this run fed that has evidence from ≥ `min_episodes_for_induction`
   distinct episodes, largest first: if one of its traces already matches a policy (top 5 ≥ the
   threshold; policies induced earlier in this run included) the bucket is promoted into it, no LLM;
   otherwise a draft is written — by the LLM when available, else (or when its answer is unusable) by the
   deterministic inducer (`l2_induce`) — and stored as a `candidate` policy whose vector is the
   normalised centroid of the evidence, unless it nearly duplicates a stored policy, which then absorbs
   its evidence instead (`l2.policy.induced` for new ones).
5. **Gain and status** of every policy the episode touches (`l2_gain`, `l2_store.update_gains`):
   support grows by the links created in this run only, the EMA step is idempotent per episode, and
   candidate → active → archived transitions follow (`l2.policy.updated`). Archived policies leave the
   vector index.

Idempotent: a second run over the same episode finds its traces linked or pooled, creates nothing, adds
no support, and recomputes the same gains.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import numpy as np

from memos_bridge.contract.errors import MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.learning import l2_store
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.l2_gain import STATUS_ARCHIVED
from memos_bridge.core.learning.l2_induce import (
    MAX_RULE_EPISODES,
    PolicyDraft,
    PolicyText,
    TraceView,
    draft_from_llm,
    find_near_duplicate,
    induce_by_rules,
    pack_evidence,
)
from memos_bridge.core.learning.l2_signature import MISSING, PatternSignature, trace_policy_score
from memos_bridge.llm.prompts import L2_INDUCTION
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob

log = logging.getLogger(__name__)

#: Policies fetched per trace for association (reference "pool 16").
ASSOCIATION_POOL: Final = 16
#: Policies fetched per bucket trace for the cheap duplicate check before drafting (reference top-5).
DUP_CHECK_TOP: Final = 5
#: `op` of the induction call in `api_logs` and the facade's stats.
LLM_OP: Final = "l2.induction"
MS_PER_DAY: Final = 86_400_000


@dataclass(frozen=True)
class PolicyUpdate:
    """A touched policy after this run: its new gain, support and status."""

    policy_id: str
    gain: float
    support: int
    status: str
    previous_status: str


@dataclass
class L2Report:
    """What one run did (ids, for the chain report, tests and logs)."""

    episode_id: str
    #: (trace id, policy id, score) of the links association created.
    associated: list[tuple[str, str, float]] = field(default_factory=list)
    #: New candidate policies.
    induced: list[str] = field(default_factory=list)
    #: Existing policies a near-duplicate draft was merged into.
    merged: list[str] = field(default_factory=list)
    #: Existing policies a bucket was promoted into by the cheap duplicate check (no draft written).
    promoted: list[str] = field(default_factory=list)
    updated: list[PolicyUpdate] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    #: Traces put into (or refreshed in) the candidate pool.
    pooled: list[str] = field(default_factory=list)
    #: Whether at least one stored draft came from the LLM, and how many induction calls were made.
    llm_used: bool = False
    llm_calls: int = 0
    #: Why the run did nothing ("" when it ran).
    skipped: str = ""


# ---------------------------------------------------------------- scoring


async def _policy_hits(ctx: LearningContext, trace: TraceView, owner: OwnerFilter, k: int) -> list[tuple[str, float]]:
    """Vector hits (policy id, cosine) of one trace among the policies its namespace can see."""
    if trace.vec is None:
        return []
    return await ctx.vectors.search("policy", "vec", trace.vec, k, owner)


async def _score_traces(
    ctx: LearningContext, traces: Sequence[TraceView], owner: OwnerFilter, k: int
) -> list[tuple[TraceView, str | None, float]]:
    """(trace, best policy or None, best score) with the signature bonus and gate applied."""
    hits = [await _policy_hits(ctx, trace, owner, k) for trace in traces]
    ids = {policy_id for row in hits for policy_id, _ in row}
    signatures = await ctx.db.read(lambda db: l2_store.policy_signatures(db, ids)) if ids else {}
    out: list[tuple[TraceView, str | None, float]] = []
    for trace, row in zip(traces, hits, strict=True):
        signature = trace.signature
        best_id: str | None = None
        best = 0.0
        for policy_id, cosine in row:
            if policy_id not in signatures:  # archived or gone since the index saw it
                continue
            score = trace_policy_score(cosine, signature, PatternSignature.parse(signatures[policy_id]))
            if best_id is None or score > best:
                best_id, best = policy_id, score
        out.append((trace, best_id, best))
    return out


def _centroid(traces: Sequence[TraceView]) -> bytes | None:
    vectors = [t.vec for t in traces if t.vec is not None]
    if not vectors:
        return None
    mean = np.mean(np.stack(vectors), axis=0)
    norm = float(np.linalg.norm(mean))
    return to_blob(mean / norm) if norm > 0 else None


# ---------------------------------------------------------------- the stage


async def run_l2(ctx: LearningContext, episode_id: str) -> L2Report:
    """Associate, pool, induce and re-weigh policies for one scored episode (see the module docstring)."""
    settings = ctx.settings.learning.l2
    report = L2Report(episode_id)
    dim = ctx.vectors.dim
    state = await ctx.db.read(lambda db: l2_store.load_episode(db, episode_id, dim))
    if state is None:
        report.skipped = "episode_not_found"
        return report
    owner = state.owner
    new_links: Counter[str] = Counter()

    # 1–3. Association, else pool.
    eligible = [
        t
        for t in state.traces
        if t.value >= settings.min_trace_value and t.vec is not None and t.id not in state.linked_trace_ids
    ]
    scored = await _score_traces(ctx, eligible, owner, ASSOCIATION_POOL)
    matches = [(t, pid, s) for t, pid, s in scored if pid is not None and s >= settings.min_similarity]
    unmatched = [(t, s) for t, pid, s in scored if pid is None or s < settings.min_similarity]
    now = ctx.clock()
    ttl_ms = int(settings.candidate_ttl_days * MS_PER_DAY)
    written = await ctx.db.write(lambda db: l2_store.record_associations(db, owner, matches, unmatched, now, ttl_ms))
    report.associated = written.links
    report.pooled = written.pooled
    for trace_id, policy_id, score in written.links:
        new_links[policy_id] += 1
        ctx.events.emit(
            EventType.L2_TRACE_ASSOCIATED,
            {"episodeId": episode_id, "traceId": trace_id, "policyId": policy_id, "score": round(score, 4)},
        )

    # 4. Induction over the buckets this run fed.
    await _induce(ctx, report, owner, written.signatures, new_links, now)

    # 5–6. Gain and status of every policy this episode touches.
    episode_trace_ids = [t.id for t in state.traces]
    touched = set(new_links) | await ctx.db.read(lambda db: l2_store.linked_policies(db, episode_trace_ids))
    updates = await ctx.db.write(
        lambda db: l2_store.update_gains(db, touched, new_links, episode_id, settings, ctx.clock())
    )
    for update in updates:
        report.updated.append(
            PolicyUpdate(update.policy_id, update.gain, update.support, update.status, update.previous_status)
        )
        if update.status != update.previous_status:
            ctx.vectors.upsert("policy", update.row)  # an archived policy leaves the index
            if update.status == STATUS_ARCHIVED:
                report.archived.append(update.policy_id)
        ctx.events.emit(
            EventType.L2_POLICY_UPDATED,
            {
                "episodeId": episode_id,
                "policyId": update.policy_id,
                "gain": round(update.gain, 4),
                "support": update.support,
                "status": update.status,
                "previousStatus": update.previous_status,
            },
        )
    log.info(
        "l2 %s: %d associated, %d pooled, %d induced, %d merged, %d promoted, %d updated, %d archived",
        episode_id,
        len(report.associated),
        len(report.pooled),
        len(report.induced),
        len(report.merged),
        len(report.promoted),
        len(report.updated),
        len(report.archived),
    )
    return report


async def l2_stage(ctx: LearningContext, episode_id: str, _reward: object = None) -> L2Report:
    """`run_l2` with the learning chain's stage signature `(ctx, episode_id, reward_report)`."""
    return await run_l2(ctx, episode_id)


async def _induce(
    ctx: LearningContext,
    report: L2Report,
    owner: OwnerFilter,
    signatures: set[str],
    new_links: Counter[str],
    now: int,
) -> None:
    settings = ctx.settings.learning.l2
    if not signatures:
        return
    dim = ctx.vectors.dim
    buckets = await ctx.db.read(
        lambda db: l2_store.load_buckets(db, owner, signatures, now, dim, settings.min_trace_value)
    )
    ready = [b for b in buckets if len(b.episodes) >= settings.min_episodes_for_induction]
    # Largest first (reference); among equals, patterns without an error code first: their draft is the
    # whole procedure, while an error bucket's draft is the recovery part of it, which then merges in.
    ready.sort(key=lambda b: (-len(b.episodes), -len(b.traces), not b.signature.endswith(f"|{MISSING}"), b.signature))
    # Rule drafts of the buckets stored in this run → their policy: a later bucket whose rule draft is a
    # near-duplicate of an earlier one describes the same procedure (typically another step of the same
    # episode) and joins that policy without a second LLM call.
    fingerprints: list[PolicyText] = []
    for bucket in ready:
        # Cheap duplicate check: a policy (perhaps induced a moment ago) already covers this pattern.
        scored = await _score_traces(ctx, bucket.traces, owner, DUP_CHECK_TOP)
        best = max(
            ((pid, score) for _, pid, score in scored if pid is not None), key=lambda item: item[1], default=None
        )
        if best is not None and best[1] >= settings.min_similarity:
            policy_id = best[0]
            linked = await ctx.db.write(partial(l2_store.promote_bucket, policy_id=policy_id, bucket=bucket, now=now))
            if linked is not None:
                new_links[policy_id] += len(linked)
                if policy_id not in report.promoted:
                    report.promoted.append(policy_id)
                continue
        rules = await _rule_draft(ctx, bucket)
        same = find_near_duplicate(rules, fingerprints)
        if same is not None:
            linked = await ctx.db.write(
                partial(l2_store.promote_bucket, policy_id=same, bucket=bucket, now=now, caveats=rules.caveats)
            )
            if linked is not None:
                new_links[same] += len(linked)
                if same not in report.merged:
                    report.merged.append(same)
                continue
        draft = await _llm_draft(ctx, report, bucket, rules)
        signature = bucket.signature
        vec = _centroid(bucket.traces)
        stored = await ctx.db.write(
            partial(
                l2_store.store_draft, owner=owner, draft=draft, signature=signature, bucket=bucket, vec=vec, now=now
            )
        )
        if stored is None:
            continue
        policy_id = stored.policy.id
        new_links[policy_id] += len(stored.linked)
        fingerprints.append(PolicyText(policy_id, rules.title, rules.trigger, rules.procedure, rules.verification))
        if draft.induced_by == "llm":
            report.llm_used = True
        if stored.merged:
            if policy_id not in report.merged:
                report.merged.append(policy_id)
            continue
        ctx.vectors.upsert("policy", stored.policy)
        report.induced.append(policy_id)
        ctx.events.emit(
            EventType.L2_POLICY_INDUCED,
            {
                "episodeId": report.episode_id,
                "policyId": policy_id,
                "title": stored.policy.title,
                "signature": signature,
                "inducedBy": draft.induced_by,
                "evidenceTraceIds": [t.id for t in bucket.traces],
                "sourceEpisodes": sorted(bucket.episodes),
            },
        )


async def _rule_draft(ctx: LearningContext, bucket: l2_store.Bucket) -> PolicyDraft:
    """The deterministic inducer's draft, over the bucket's best evidence episodes in context."""
    settings = ctx.settings.learning.l2
    best_by_episode: dict[str, float] = {}
    for trace in bucket.traces:
        best_by_episode[trace.episode_id] = max(best_by_episode.get(trace.episode_id, trace.value), trace.value)
    episode_ids = sorted(best_by_episode, key=lambda ep: -best_by_episode[ep])[:MAX_RULE_EPISODES]
    contexts = await ctx.db.read(lambda db: l2_store.load_contexts(db, episode_ids))
    signature = PatternSignature.parse(bucket.signature) or PatternSignature()
    return induce_by_rules(signature, bucket.traces, contexts, settings.min_trace_value)


async def _llm_draft(
    ctx: LearningContext, report: L2Report, bucket: l2_store.Bucket, rules: PolicyDraft
) -> PolicyDraft:
    """The LLM's draft when it is available and usable (its gaps filled from `rules`), else `rules`."""
    settings = ctx.settings.learning.l2
    if not ctx.llm_ready(report.episode_id, settings.use_llm):
        return rules
    evidence, _ = pack_evidence(bucket.traces, settings.trace_char_cap)
    variables: dict[str, Any] = {"signature": bucket.signature, "evidence": evidence}
    report.llm_calls += 1
    try:
        output = await ctx.llm.complete_json(L2_INDUCTION, variables, op=LLM_OP, episode_id=report.episode_id)
    except MemosError as exc:
        log.info("l2 induction for %s fell back to rules: %s", bucket.signature, exc.code.value)
        return rules
    return draft_from_llm(output, rules) or rules
