"""The typed-experience stage: explicit feedback becomes a recallable lesson before the next task starts.

Runs right after reward in every learning chain (issue 5, seed 000 "feedback experience builder"). It acts
only on the episode's explicit feedback rows that no experience has absorbed yet, so re-running a chain —
late feedback, a retried `feedback.submit`, recovery — never creates or merges the same feedback twice
(an experience remembers the feedback it absorbed in `source_feedback_ids_json`).

For each new feedback row:

1. **Assess** (`experience_rules.assess`): significant only when explicit, actionable and strong enough;
   the objective outcome (verifier at full credit, then the scored episode, then the words) decides the
   type and polarity.
2. **Draft**: the rule template always; the `feedback.refine` prompt rewords it when an LLM is available
   (its answer is checked against the evidence, and the type never changes).
3. **Validate a repair**: a success on a task similar to an earlier repair instruction's (another,
   later episode), where the success followed that repair (it was recalled for the task, or its
   distinctive words show up in the episode), turns the repair into `repair_validated` — a success anchor.
4. **Merge** into the most similar typed experience the namespace owns (cosine ≥ 0.72 same type, ≥ 0.82
   across types, when the merged type stays coherent): sources unioned, new guidance lines added,
   polarity → mixed where evidence disagrees. Otherwise **create** one: a single significant verifier
   failure is enough.

Vectors encode title + trigger + procedure and are pushed to the in-memory index after each commit.
`get_policy` / `list_policies` serve `memory.get_policy` and `memory.list_policies`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
from sqlalchemy import String, cast, or_, select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.contract.errors import MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.capture import tool_signature
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.experience_rules import (
    ACTIVE_CONFIDENCE,
    CONFIRMING_SUPPORT,
    EXPERIENCE_TYPES,
    INDUCED_BY,
    MIN_GAIN,
    SKILL_ELIGIBLE_TYPES,
    STEP_CHARS,
    EpisodeFacts,
    ExperienceDraft,
    FeedbackFacts,
    apply_refinement,
    assess,
    draft_experience,
    feedback_text,
    guidance_of,
    lesson_lines,
    may_merge,
    merge_lines,
    merged_polarity,
    merged_type,
    repair_adherence,
    tag_patterns,
)
from memos_bridge.core.learning.experience_verifier import parse_verifier
from memos_bridge.core.learning.l2_signature import call_failed
from memos_bridge.core.learning.reward_stage import RewardReport
from memos_bridge.core.mappers import policy_dto
from memos_bridge.core.namespace import read_filter
from memos_bridge.ids import new_id
from memos_bridge.llm.prompts import FEEDBACK_REFINE
from memos_bridge.rules.text import clip, numbered_steps
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import EpisodeRow, FeedbackRow, PolicyRow, TraceRow, TurnRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob

log = logging.getLogger(__name__)

#: Merge thresholds (reference §6.8 MERGE_SIMILARITY and its cross-type variant).
MERGE_SIMILARITY: Final = 0.72
CROSS_TYPE_SIMILARITY: Final = 0.82
#: A later success validates a repair instruction when its task is this similar to the repair's task …
VALIDATION_TASK_SIMILARITY: Final = 0.72
#: … and it followed the repair: recalled for that task, or this share of the repair's distinctive words used.
VALIDATION_ADHERENCE: Final = 0.3
#: Experiences fetched from the vector index per merge / validation search.
MERGE_POOL: Final = 8
VALIDATION_POOL: Final = 32
#: Provenance caps: ids kept per list, evidence records kept in `meta.evidence`.
SOURCE_CAP: Final = 200
SOURCE_TRACES_PER_FEEDBACK: Final = 40
EVIDENCE_CAP: Final = 20
#: The refinement call; its deadline is `learning.refine_timeout_ms` (reference: 5 s; a host model answering
#: over the bridge needs more).
LLM_OP: Final = "feedback.refine"
BUILDER: Final = "feedback.experience.v1"


@dataclass
class ExperienceReport:
    """What one run did (ids, for the chain report, tests and logs)."""

    episode_id: str
    created: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    validated: list[str] = field(default_factory=list)
    #: Feedback ids that produced nothing, and why (not_explicit, not_actionable, below_significance).
    skipped: dict[str, str] = field(default_factory=dict)
    llm_calls: int = 0
    #: Why the run did nothing at all ("" when it looked at feedback).
    skipped_reason: str = ""


@dataclass(frozen=True)
class _State:
    owner: OwnerFilter
    episode: EpisodeFacts
    feedback: list[FeedbackFacts]  # explicit rows not absorbed by any experience yet
    recalled: frozenset[str]  # experience ids injected into this episode's turns


# ---------------------------------------------------------------- loading


def absorbed_feedback(db: Session, feedback_ids: Sequence[str]) -> set[str]:
    """The feedback ids some experience (any status) already lists among its sources."""
    ids = set(feedback_ids)
    if not ids:
        return set()
    column = cast(PolicyRow.source_feedback_ids_json, String)
    rows = db.scalars(select(PolicyRow.source_feedback_ids_json).where(or_(*(column.like(f'%"{i}"%') for i in ids))))
    return {fid for row in rows for fid in (row or []) if fid in ids}


def _episode_facts(episode: EpisodeRow, turns: Sequence[TurnRow], traces: Sequence[TraceRow]) -> EpisodeFacts:
    asks = [t.user_text for t in turns if t.user_text.strip()] or [t.user_text for t in traces if t.user_text.strip()]
    tools: list[str] = []
    steps: list[str] = []
    failed: list[str] = []
    reply = ""
    for trace in traces:
        for call in trace.tool_calls_json or []:
            if not isinstance(call, dict):
                continue
            name = str(call.get("name") or "tool")
            if name not in tools:
                tools.append(name)
            line = tool_signature(call, STEP_CHARS)
            target = failed if call_failed(call) else steps
            if line not in target:
                target.append(line)
        if trace.step_kind == "reply" and trace.agent_text.strip():
            reply = trace.agent_text
    return EpisodeFacts(
        episode_id=episode.id,
        task=asks[0] if asks else "",
        latest_request=asks[-1] if asks else "",
        tools=tuple(tools),
        steps=tuple(steps),
        failed_steps=tuple(failed),
        reply=reply,
        trace_ids=tuple(t.id for t in traces),
        r_task=episode.r_task,
        started_at=episode.started_at,
    )


def _recalled(turns: Sequence[TurnRow]) -> frozenset[str]:
    """Experience ids the episode's cached turn.start results injected."""
    out: set[str] = set()
    for turn in turns:
        result = turn.result_json if isinstance(turn.result_json, dict) else {}
        for hit in result.get("hits") or []:
            if isinstance(hit, dict) and hit.get("refKind") == "experience" and isinstance(hit.get("refId"), str):
                out.add(hit["refId"])
    return frozenset(out)


def _load(db: Session, episode_id: str) -> _State | None:
    """The episode's explicit feedback that no experience absorbed yet, and — only when there is some — the
    episode itself (this runs on every chain; most have nothing new to learn from)."""
    episode = db.get(EpisodeRow, episode_id)
    if episode is None:
        return None
    owner = OwnerFilter(episode.owner_agent_kind, episode.owner_profile_id, episode.owner_workspace_id)
    rows = list(
        db.scalars(
            select(FeedbackRow)
            .where(FeedbackRow.episode_id == episode_id, FeedbackRow.channel != "implicit")
            .order_by(FeedbackRow.ts, FeedbackRow.id)
        )
    )
    absorbed = absorbed_feedback(db, [r.id for r in rows])
    fresh = [row for row in rows if row.id not in absorbed]
    if not fresh:
        return _State(owner, EpisodeFacts(episode.id, ""), [], frozenset())
    turns = list(db.scalars(select(TurnRow).where(TurnRow.episode_id == episode_id).order_by(TurnRow.turn_id)))
    traces = list(
        db.scalars(
            select(TraceRow)
            .where(TraceRow.episode_id == episode_id, TraceRow.archived_at.is_(None))
            .order_by(TraceRow.ts, TraceRow.step_index, TraceRow.rid)
        )
    )
    feedback = [
        FeedbackFacts(
            id=row.id,
            ts=row.ts,
            polarity=row.polarity,
            magnitude=float(row.magnitude),
            explicit=True,
            text=feedback_text(row.rationale, row.raw_json),
            verifier=parse_verifier(row.raw_json),
            trace_id=row.trace_id,
            trace_ids=tuple(t for t in (row.raw_json or {}).get("traceIds") or () if isinstance(t, str))
            if isinstance(row.raw_json, dict) and isinstance(row.raw_json.get("traceIds"), list)
            else (),
        )
        for row in fresh
    ]
    return _State(owner, _episode_facts(episode, turns, traces), feedback, _recalled(turns))


# ---------------------------------------------------------------- the stage


async def experience_stage(ctx: LearningContext, episode_id: str, reward: RewardReport) -> ExperienceReport:
    """Build, merge or validate typed experiences from the episode's new explicit feedback (module docstring)."""
    report = ExperienceReport(episode_id)
    state = await ctx.db.read(lambda db: _load(db, episode_id))
    if state is None:
        report.skipped_reason = "episode_not_found"
        return report
    if not state.feedback:
        report.skipped_reason = "no_new_feedback"
        return report
    r_task = reward.r_task if reward.r_task is not None else state.episode.r_task
    episode = replace(state.episode, r_task=r_task, outcome=reward.outcome, outcome_source=reward.source)
    for feedback in state.feedback:
        assessment = assess(feedback, episode)
        if not assessment.significant:
            report.skipped[feedback.id] = assessment.reason
            continue
        drafted = draft_experience(feedback, episode, assessment, tag_patterns(ctx.settings.learning.world))
        draft = await _refine(ctx, report, episode, feedback, drafted)
        await _place(ctx, report, state, episode, feedback, draft)
    log.info(
        "experiences %s: %d created, %d merged, %d validated, %d skipped (llm calls %d)",
        episode_id,
        len(report.created),
        len(report.merged),
        len(report.validated),
        len(report.skipped),
        report.llm_calls,
    )
    return report


async def _place(
    ctx: LearningContext,
    report: ExperienceReport,
    state: _State,
    episode: EpisodeFacts,
    feedback: FeedbackFacts,
    draft: ExperienceDraft,
) -> None:
    """Validate a repair, merge into a similar experience, or create one (in that order)."""
    vec, task_vec = await _embed(ctx, [draft.embed_text(), episode.task or draft.trigger])
    now = ctx.clock()
    if draft.experience_type == "success_pattern" and task_vec is not None:
        target = await _repair_followed(ctx, state, episode, feedback, task_vec)
        if target is not None:
            policy_id, evidence = target
            done = await ctx.db.write(lambda db: _validate(db, policy_id, draft, feedback, episode, evidence, now))
            if done is not None:
                _announce(ctx, episode.episode_id, feedback.id, done, merged=True)
                report.validated.append(policy_id)
                return
    merge_id = await _merge_target(ctx, state.owner, draft, vec) if vec is not None else None
    if merge_id is not None:
        done = await ctx.db.write(lambda db: _merge(db, merge_id, draft, feedback, episode, vec, now))
        if done is not None:
            _announce(ctx, episode.episode_id, feedback.id, done, merged=True)
            report.merged.append(merge_id)
            return
    created = await ctx.db.write(lambda db: _create(db, state.owner, draft, feedback, episode, vec, now))
    if created is not None:
        _announce(ctx, episode.episode_id, feedback.id, created, merged=False)
        report.created.append(created.row.id)


async def _embed(ctx: LearningContext, texts: list[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Unit vectors of the draft and of the task; (None, None) when the embedder is down (the experience is
    still stored, found by full-text search, and cannot be merged this time)."""
    try:
        matrix = np.asarray(await ctx.embedder.embed(texts, role="document"), dtype=np.float32)
    except MemosError as exc:
        log.warning("experience embedding unavailable (%s); storing without a vector", exc.code.value)
        return None, None
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.where(norms > 0, norms, 1.0)
    return unit[0], unit[1]


async def _refine(
    ctx: LearningContext,
    report: ExperienceReport,
    episode: EpisodeFacts,
    feedback: FeedbackFacts,
    draft: ExperienceDraft,
) -> ExperienceDraft:
    """The LLM's wording when available, wanted and grounded; the rule draft otherwise."""
    if not ctx.settings.learning.refine_use_llm or not ctx.llm_ready(episode.episode_id):
        return draft
    verifier = "(none)"
    if draft.verifier_meta is not None:
        verifier = clip(str(draft.verifier_meta), 2000)
    variables = {
        "experience_type": draft.experience_type,
        "task": clip(episode.task, 800) or "(unknown)",
        "tools": "\n".join(episode.steps[:8]) or ", ".join(episode.tools) or "(none)",
        "feedback": clip(feedback.text, 2000) or "(structured verifier data only)",
        "verifier": verifier,
        "draft": "\n".join(
            [
                f"title: {draft.title}",
                f"trigger: {draft.trigger}",
                f"procedure:\n{draft.procedure}",
                f"verification: {draft.verification}",
                f"boundary: {draft.boundary}",
                f"avoid: {draft.anti_pattern}",
                f"prefer: {draft.preference}",
            ]
        ),
    }
    try:
        answer = await ctx.llm.complete_json(
            FEEDBACK_REFINE,
            variables,
            op=LLM_OP,
            episode_id=episode.episode_id,
            timeout_ms=ctx.settings.learning.refine_timeout_ms,
        )
    except MemosError as exc:
        log.info("feedback refinement unavailable (%s); using the rule draft", exc.code.value)
        return draft
    report.llm_calls += 1
    evidence = "\n".join([feedback.text, episode.task, *episode.steps, draft.procedure, verifier])
    refined = apply_refinement(draft, answer, evidence)
    if refined is None:
        log.info("feedback refinement for %s was unusable; using the rule draft", feedback.id)
    return refined or draft


# ---------------------------------------------------------------- finding the experience to update


def _owned_live(db: Session, owner: OwnerFilter, ids: Sequence[str]) -> dict[str, PolicyRow]:
    """Typed experiences among `ids` that the namespace owns and that are not archived."""
    if not ids:
        return {}
    rows = db.scalars(
        select(PolicyRow).where(
            PolicyRow.id.in_(list(ids)),
            PolicyRow.archived_at.is_(None),
            PolicyRow.status.in_(("active", "candidate")),
            PolicyRow.experience_type.in_(sorted(EXPERIENCE_TYPES)),
        )
    )
    return {row.id: row for row in rows if owner.owns(row)}


async def _merge_target(
    ctx: LearningContext, owner: OwnerFilter, draft: ExperienceDraft, vec: np.ndarray
) -> str | None:
    """The most similar owned experience the draft may merge into (same type ≥ 0.72, else ≥ 0.82)."""
    hits = await ctx.vectors.search("policy", "vec", vec, MERGE_POOL, owner)
    rows = await ctx.db.read(lambda db: _owned_live(db, owner, [pid for pid, _ in hits]))
    for policy_id, cosine in hits:
        row = rows.get(policy_id)
        if row is not None and may_merge(
            row.experience_type, draft.experience_type, cosine, MERGE_SIMILARITY, CROSS_TYPE_SIMILARITY
        ):
            return policy_id
    return None


async def _repair_followed(
    ctx: LearningContext, state: _State, episode: EpisodeFacts, feedback: FeedbackFacts, task_vec: np.ndarray
) -> tuple[str, dict[str, Any]] | None:
    """The repair instruction this success validates: learnt on another, earlier episode of a similar task,
    and followed here (recalled into this episode, or its distinctive words used). Best task match wins."""
    hits = await ctx.vectors.search("policy", "vec", task_vec, VALIDATION_POOL, state.owner)
    rows = await ctx.db.read(lambda db: _owned_live(db, state.owner, [pid for pid, _ in hits]))
    repairs = [
        row
        for row in rows.values()
        if row.experience_type == "repair_instruction"
        and episode.episode_id not in (row.source_episodes_json or [])
        and int((row.meta_json or {}).get("episodeStartedAt") or 0) <= episode.started_at
    ]
    if not repairs:
        return None
    tasks = [str((row.meta_json or {}).get("task") or row.trigger) for row in repairs]
    try:
        task_vecs = np.asarray(await ctx.embedder.embed(tasks, role="document"), dtype=np.float32)
    except MemosError:
        return None
    norms = np.linalg.norm(task_vecs, axis=1)
    episode_text = "\n".join([episode.task, episode.latest_request, *episode.steps, episode.reply, feedback.text])
    best: tuple[float, str, dict[str, Any]] | None = None
    for row, vec, norm in zip(repairs, task_vecs, norms, strict=True):
        similarity = float(np.dot(vec, task_vec) / norm) if norm > 0 else 0.0
        if similarity < VALIDATION_TASK_SIMILARITY:
            continue
        guidance = row.decision_guidance_json or {}
        fix_text = "\n".join([row.procedure, *map(str, guidance.get("preference") or [])])
        adherence = repair_adherence(fix_text, row.trigger, episode_text)
        recalled = row.id in state.recalled
        if not recalled and adherence < VALIDATION_ADHERENCE:
            continue
        evidence = {"taskSimilarity": round(similarity, 4), "adherence": round(adherence, 4), "recalled": recalled}
        if best is None or similarity > best[0]:
            best = (similarity, row.id, evidence)
    return None if best is None else (best[1], best[2])


# ---------------------------------------------------------------- writing


@dataclass(frozen=True)
class _Written:
    row: PolicyRow
    previous_type: str | None = None
    previous_status: str | None = None


def _union(existing: Sequence[str] | None, new: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*(existing or []), *new]))[-SOURCE_CAP:]


def _source_traces(feedback: FeedbackFacts, episode: EpisodeFacts) -> list[str]:
    """The steps the host bound the verdict to (`raw.traceIds`, those of this episode: a `traceId` alone is
    only the last of them), else the judged step it names, else the episode's steps (the verifier judged all)."""
    own = set(episode.trace_ids)
    bound = [t for t in dict.fromkeys(feedback.trace_ids) if t in own]
    if bound:
        return bound[-SOURCE_TRACES_PER_FEEDBACK:]
    if feedback.trace_id:
        return [feedback.trace_id]
    return list(episode.trace_ids[-SOURCE_TRACES_PER_FEEDBACK:])


def _evidence_record(feedback: FeedbackFacts, episode: EpisodeFacts, draft: ExperienceDraft) -> dict[str, Any]:
    return {
        "feedbackId": feedback.id,
        "episodeId": episode.episode_id,
        "type": draft.experience_type,
        "polarity": draft.polarity,
        "salience": draft.salience,
        "ts": feedback.ts,
    }


def _create(
    db: Session,
    owner: OwnerFilter,
    draft: ExperienceDraft,
    feedback: FeedbackFacts,
    episode: EpisodeFacts,
    vec: np.ndarray | None,
    now: int,
) -> _Written | None:
    if absorbed_feedback(db, [feedback.id]):
        return None  # another chain run got there first
    row = PolicyRow(
        title=draft.title,
        trigger=draft.trigger,
        procedure=draft.procedure,
        verification=draft.verification,
        boundary=draft.boundary,
        support=1,
        gain=max(MIN_GAIN, draft.salience),
        status="active" if draft.confidence >= ACTIVE_CONFIDENCE else "candidate",
        experience_type=draft.experience_type,
        evidence_polarity=draft.polarity,
        salience=draft.salience,
        confidence=draft.confidence,
        source_episodes_json=[episode.episode_id],
        source_feedback_ids_json=[feedback.id],
        source_trace_ids_json=_source_traces(feedback, episode),
        induced_by=INDUCED_BY,
        decision_guidance_json={"preference": draft.preference, "antiPattern": draft.anti_pattern},
        verifier_meta_json=draft.verifier_meta,
        skill_eligible=draft.skill_eligible,
        signature="",
        tags_json=draft.tags,
        meta_json={
            "builder": BUILDER,
            "draftedBy": draft.drafted_by,
            "sources": draft.sources,
            "task": clip(episode.task, 400),
            "episodeStartedAt": episode.started_at,
            "evidence": [_evidence_record(feedback, episode, draft)],
        },
        vec=to_blob(vec) if vec is not None else None,
        created_at=now,
        updated_at=now,
        last_evidence_at=now,
        **owner.as_columns(),
    )
    row.id = new_id("policy")
    db.add(row)
    db.flush()
    return _Written(row)


def _stated_lines(row: PolicyRow) -> list[str]:
    do, avoid, check = lesson_lines(row.experience_type, row.procedure, [], [])
    return [*do, *avoid, *check]


def _absorb(row: PolicyRow, draft: ExperienceDraft, feedback: FeedbackFacts, episode: EpisodeFacts, now: int) -> None:
    """What every update does: sources, support, salience, confidence, tags, guidance, verifier data."""
    row.source_feedback_ids_json = _union(row.source_feedback_ids_json, [feedback.id])
    row.source_episodes_json = _union(row.source_episodes_json, [episode.episode_id])
    row.source_trace_ids_json = _union(row.source_trace_ids_json, _source_traces(feedback, episode))
    row.support = row.support + 1
    row.salience = max(row.salience, draft.salience)
    row.confidence = max(row.confidence, draft.confidence)
    row.gain = max(row.gain, row.salience, MIN_GAIN)
    row.tags_json = _union(row.tags_json, draft.tags)
    prefer, avoid = guidance_of(draft)
    guidance = dict(row.decision_guidance_json or {})
    stated = _stated_lines(row)
    row.decision_guidance_json = {
        **guidance,
        "preference": merge_lines(guidance.get("preference") or [], prefer, exclude=stated),
        "antiPattern": merge_lines(guidance.get("antiPattern") or [], avoid, exclude=stated),
    }
    if draft.verifier_meta is not None:
        row.verifier_meta_json = draft.verifier_meta
    meta = dict(row.meta_json or {})
    meta["evidence"] = [*(meta.get("evidence") or []), _evidence_record(feedback, episode, draft)][-EVIDENCE_CAP:]
    meta["sources"] = _union(meta.get("sources"), draft.sources)
    row.meta_json = meta
    if row.confidence >= ACTIVE_CONFIDENCE or row.support >= CONFIRMING_SUPPORT:
        row.status = "active"  # trusted, or confirmed by another verdict
    row.updated_at = now
    row.last_evidence_at = now


def _live(db: Session, policy_id: str, feedback_id: str) -> PolicyRow | None:
    row = db.scalar(select(PolicyRow).where(PolicyRow.id == policy_id))
    if row is None or row.archived_at is not None or row.status == "archived":
        return None
    if absorbed_feedback(db, [feedback_id]):
        return None
    return row


def _merge(
    db: Session,
    policy_id: str,
    draft: ExperienceDraft,
    feedback: FeedbackFacts,
    episode: EpisodeFacts,
    vec: np.ndarray | None,
    now: int,
) -> _Written | None:
    """Merge the draft's evidence into an experience; an avoidance that learns the fix becomes a repair
    instruction (its avoid lines move to the guidance, the fix becomes the procedure)."""
    row = _live(db, policy_id, feedback.id)
    if row is None:
        return None
    previous_type, previous_status = row.experience_type, row.status
    kind = merged_type(previous_type, draft.experience_type) or previous_type
    if previous_type == "failure_avoidance" and kind == "repair_instruction":
        guidance = dict(row.decision_guidance_json or {})
        old = numbered_steps(row.procedure)
        row.decision_guidance_json = {**guidance, "antiPattern": merge_lines(old, guidance.get("antiPattern") or [])}
        row.title, row.trigger, row.procedure = draft.title, draft.trigger, draft.procedure
        row.verification = draft.verification
        if vec is not None:
            row.vec = to_blob(vec)
    row.experience_type = kind
    row.evidence_polarity = merged_polarity(row.evidence_polarity, draft.polarity)
    row.skill_eligible = kind in SKILL_ELIGIBLE_TYPES
    _absorb(row, draft, feedback, episode, now)
    return _Written(row, previous_type, previous_status)


def _validate(
    db: Session,
    policy_id: str,
    draft: ExperienceDraft,
    feedback: FeedbackFacts,
    episode: EpisodeFacts,
    evidence: dict[str, Any],
    now: int,
) -> _Written | None:
    """A repair instruction followed by a later success becomes `repair_validated` (a success anchor)."""
    row = _live(db, policy_id, feedback.id)
    if row is None or row.experience_type != "repair_instruction":
        return None
    previous_type, previous_status = row.experience_type, row.status
    row.experience_type = "repair_validated"
    row.evidence_polarity = "mixed"
    row.skill_eligible = True
    boundary = row.boundary.replace("Not yet confirmed by a successful run.", "").strip()
    row.boundary = clip(
        f"Confirmed by a later successful run: “{clip(episode.task, 80)}” (episode {episode.episode_id}). {boundary}",
        400,
    )
    _absorb(row, draft, feedback, episode, now)
    row.meta_json = {
        **(row.meta_json or {}),
        "validatedBy": {"feedbackId": feedback.id, "episodeId": episode.episode_id, "ts": feedback.ts, **evidence},
    }
    return _Written(row, previous_type, previous_status)


def _announce(ctx: LearningContext, episode_id: str, feedback_id: str, written: _Written, *, merged: bool) -> None:
    row = written.row
    ctx.vectors.upsert("policy", row)
    payload: dict[str, Any] = {
        "episodeId": episode_id,
        "policyId": row.id,
        "title": row.title,
        "experienceType": row.experience_type,
        "evidencePolarity": row.evidence_polarity,
        "status": row.status,
        "inducedBy": INDUCED_BY,
        "feedbackId": feedback_id,
    }
    if merged:
        payload.update(previousType=written.previous_type, previousStatus=written.previous_status, support=row.support)
    ctx.events.emit(EventType.L2_POLICY_UPDATED if merged else EventType.L2_POLICY_INDUCED, payload)


# ---------------------------------------------------------------- reads for the wire


async def get_policy(db: Database, params: dto.GetByIdParams) -> dto.PolicyDTO | None:
    """`memory.get_policy`: the row, or None when missing or not visible to the caller's namespace."""
    owner = read_filter(params.namespace)

    def work(session: Session) -> dto.PolicyDTO | None:
        row = session.scalar(select(PolicyRow).where(PolicyRow.id == params.id))
        if row is None or (owner is not None and not owner.can_see(row)):
            return None
        return policy_dto(row)

    return await db.read(work)


async def list_policies(db: Database, params: dto.ListPoliciesParams) -> dto.PoliciesResult:
    """`memory.list_policies`: most recently updated first, by status and experience type when given."""
    owner = read_filter(params.namespace)

    def work(session: Session) -> dto.PoliciesResult:
        stmt = select(PolicyRow)
        if owner is not None:
            stmt = stmt.where(owner.clause(PolicyRow))
        if params.status is not None:
            stmt = stmt.where(PolicyRow.status == params.status)
        if params.experience_type is not None:
            stmt = stmt.where(PolicyRow.experience_type == params.experience_type)
        stmt = stmt.order_by(PolicyRow.updated_at.desc(), PolicyRow.rid.desc()).limit(params.limit)
        rows = session.scalars(stmt.offset(params.offset))
        return dto.PoliciesResult(policies=[policy_dto(row) for row in rows])

    return await db.read(work)
