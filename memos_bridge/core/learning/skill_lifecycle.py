"""Skill reliability η, trials and status, and the `skill.*` wire methods.

**Trials.** A skill used during an episode is a trial of that skill, resolved by the episode's outcome:
fetched with `skill.get {recordTrial}` (a pending `skill_trials` row at once), or recalled by a
`turn.start` of the episode (found in the turn's stored result when the episode's chain runs; that result
is written behind, a fraction of a second after the turn, so only a chain started in that instant misses
the recall). One trial
per skill and episode, however often it was fetched. The chain's skill stage resolves them: outcome
`success` → pass; `failure` or `partial` → fail (a partial pass is not a success); `unknown` → the trial
stays pending, so late feedback that re-scores the episode still resolves it — and re-resolves it when
the new score changes the verdict.

**η** (the reference's pseudo-observation rule, §6.7). The prior η counts as one observation: with A
attempts and P passes recorded on the skill, the prior is reconstructed as `η0 = clamp01(η·(1+A) − P)`
and, after recounting the resolved trials to A′ and P′, `η = (η0 + P′)/(1 + A′)`. Recounting (rather
than incrementing) makes a re-resolved trial replace its old verdict instead of adding a second one.
The initial η of a new skill is `max(floor, 0.5·clamp01(gain) + 0.5·min(1, support/minSupport))`.

**Status.** candidate → active after a passed trial, or once its anchors gathered `promote_support`;
any tried skill whose η falls below `archive_eta` → archived; `skill.archive` archives at once.
Archived skills leave the vector index and are never recalled (retrieval checks status and η). Neither
changes `updated_at`, which stays the time the skill was last reconciled with its source experiences
(retrieval's provenance de-duplication compares it with theirs). Nothing
revives an archived skill except `skill.restore`, which counts as a human vouching for it: η is lifted
to at least the retrieval floor plus `eta_delta` (the reference's unwired thumbs-up step).

**Reviews** (`skill.review`). A skill is learnt without anyone reading it, so a person gets the last word.
Approve makes it active (η lifted to at least the retrieval floor plus `eta_delta`, so it is recalled) and a
rebuild keeps it active (`skill_store.persist_skill`). Reject archives it and stores the verdict on the row;
from then on nothing automatic brings it back: trials never revive an archived skill (`next_status`), decay
only archives, `memory.restore` / `memory.pin` refuse lifecycle-archived skills, `memory.set_status`
refuses to activate a rejected one, and the skill stage does not crystallise its task family again
(`skills.py`). Only a person lifts a rejection: a later approve, or `skill.restore` (which clears it). Each
review, restore and status set by a person is a history event of the skill (`memory.history`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from memos_bridge.config import SkillSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core import strength_rules
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.namespace import list_scope, read_filter, row_scope
from memos_bridge.ids import new_id
from memos_bridge.storage.models import AuditEventRow, EpisodeRow, SessionRow, SkillRow, SkillTrialRow, TurnRow
from memos_bridge.storage.owner import OwnerFilter

log = logging.getLogger(__name__)

STATUS_CANDIDATE: Final = "candidate"
STATUS_ACTIVE: Final = "active"
STATUS_ARCHIVED: Final = "archived"
#: Episode outcome → trial verdict; an outcome not listed (unknown) leaves the trial pending.
TRIAL_VERDICT: Final[dict[str, str]] = {"success": "pass", "failure": "fail", "partial": "fail"}
RESOLVED: Final = ("pass", "fail")
#: `review_status` values: a person's verdict (`skill.review`).
REVIEW_APPROVED: Final = "approved"
REVIEW_REJECTED: Final = "rejected"
#: Who a person's control is recorded as in a skill's history.
PERSON: Final = "user"


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def initial_eta(gain: float, support: int, settings: SkillSettings) -> float:
    """η of a skill nobody has tried yet (reference packaging rule)."""
    support_term = 1.0 if settings.min_support <= 0 else min(1.0, support / settings.min_support)
    return max(settings.min_eta_for_retrieval, 0.5 * _clamp01(gain) + 0.5 * support_term)


def updated_eta(eta: float, prev_attempts: int, prev_passes: int, attempts: int, passes: int) -> float:
    """η after the trial counts moved from (prev_attempts, prev_passes) to (attempts, passes)."""
    prior = _clamp01(eta * (1 + prev_attempts) - prev_passes)
    return _clamp01((prior + passes) / (1 + attempts))


def next_status(current: str, eta: float, attempts: int, passes: int, support: int, settings: SkillSettings) -> str:
    """The lifecycle rule (module docstring)."""
    if current == STATUS_ARCHIVED:
        return STATUS_ARCHIVED
    if attempts >= 1 and eta < settings.archive_eta:
        return STATUS_ARCHIVED
    if current == STATUS_CANDIDATE and (passes >= 1 or support >= settings.promote_support):
        return STATUS_ACTIVE
    return current


@dataclass(frozen=True)
class SkillChange:
    """A skill whose η or status moved, for events and the vector index."""

    skill: SkillRow
    previous_status: str
    previous_eta: float
    reason: str
    note: str | None = None  # the caller's own words (skill.archive {reason})

    @property
    def status_changed(self) -> bool:
        return self.skill.status != self.previous_status


@dataclass(frozen=True)
class ResolvedTrial:
    trial_id: str
    skill_id: str
    episode_id: str
    status: str


def set_status(skill: SkillRow, status: str, now: int) -> None:
    """Status with its `archived_at` twin (the vector index and hydration check both)."""
    skill.status = status
    if status == STATUS_ARCHIVED:
        skill.archived_at = skill.archived_at or now
    else:
        skill.archived_at = None


# ---------------------------------------------------------------- trials


def record_trial_sync(
    db: Session,
    skill: SkillRow,
    *,
    episode_id: str,
    session_id: str | None,
    turn_id: int | None,
    source: str,
    now: int,
    trace_id: str | None = None,
    tool_call_id: str | None = None,
) -> SkillTrialRow | None:
    """A pending trial of `skill` in `episode_id`, unless the episode already has one (None then)."""
    existing = db.scalar(
        select(SkillTrialRow.id).where(SkillTrialRow.skill_id == skill.id, SkillTrialRow.episode_id == episode_id)
    )
    if existing is not None:
        return None
    trial = SkillTrialRow(
        id=new_id("trial"),
        skill_id=skill.id,
        session_id=session_id,
        episode_id=episode_id,
        turn_id=turn_id,
        trace_id=trace_id,
        tool_call_id=tool_call_id,
        status="pending",
        created_at=now,
        evidence_json={"source": source},
        owner_agent_kind=skill.owner_agent_kind,
        owner_profile_id=skill.owner_profile_id,
        owner_workspace_id=skill.owner_workspace_id,
    )
    db.add(trial)
    skill.usage_count += 1
    skill.last_used_at = now
    db.flush()
    return trial


def recalled_skill_ids(result: Any) -> list[str]:
    """Skill ids among the hits of a stored `turn.start` result."""
    if not isinstance(result, dict):
        return []
    hits = result.get("hits")
    if not isinstance(hits, list):
        return []
    return list(
        dict.fromkeys(
            str(hit["refId"])
            for hit in hits
            if isinstance(hit, dict) and hit.get("refKind") == "skill" and hit.get("refId")
        )
    )


def record_recalled_sync(db: Session, episode_id: str, now: int) -> list[str]:
    """Trials for the skills the episode's `turn.start`s recalled (ids of the trials created)."""
    created: list[str] = []
    turns = db.scalars(select(TurnRow).where(TurnRow.episode_id == episode_id).order_by(TurnRow.turn_id))
    for turn in turns:
        for skill_id in recalled_skill_ids(turn.result_json):
            skill = db.scalar(select(SkillRow).where(SkillRow.id == skill_id))
            if skill is None or skill.status == STATUS_ARCHIVED:
                continue
            trial = record_trial_sync(
                db,
                skill,
                episode_id=episode_id,
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                source="recall",
                now=now,
            )
            if trial is not None:
                created.append(trial.id)
    return created


def recount_sync(db: Session, skill: SkillRow, settings: SkillSettings, now: int, reason: str) -> SkillChange | None:
    """Recount the skill's resolved trials, update η and status; None when nothing moved."""
    rows = db.execute(
        select(SkillTrialRow.status, func.count())
        .where(SkillTrialRow.skill_id == skill.id, SkillTrialRow.status.in_(RESOLVED))
        .group_by(SkillTrialRow.status)
    ).all()
    counts = {status: int(count) for status, count in rows}
    attempts = counts.get("pass", 0) + counts.get("fail", 0)
    passes = counts.get("pass", 0)
    if attempts == skill.trials_attempted and passes == skill.trials_passed:
        return None
    previous_status, previous_eta = skill.status, skill.eta
    skill.eta = updated_eta(skill.eta, skill.trials_attempted, skill.trials_passed, attempts, passes)
    skill.trials_attempted, skill.trials_passed = attempts, passes
    set_status(skill, next_status(skill.status, skill.eta, attempts, passes, skill.support, settings), now)
    return SkillChange(skill, previous_status, previous_eta, reason)


def resolve_trials_sync(
    db: Session, episode_id: str, outcome: str, settings: SkillSettings, now: int
) -> tuple[list[ResolvedTrial], list[SkillChange]]:
    """Record the episode's recalled skills as trials, then resolve its trials by `outcome`."""
    record_recalled_sync(db, episode_id, now)
    verdict = TRIAL_VERDICT.get(outcome)
    if verdict is None:
        return [], []
    resolved: list[ResolvedTrial] = []
    touched: dict[str, SkillRow] = {}
    for trial in db.scalars(select(SkillTrialRow).where(SkillTrialRow.episode_id == episode_id)):
        if trial.status == verdict:
            continue
        trial.status = verdict
        trial.resolved_at = now
        evidence = trial.evidence_json if isinstance(trial.evidence_json, dict) else {}
        trial.evidence_json = {**evidence, "outcome": outcome}
        resolved.append(ResolvedTrial(trial.id, trial.skill_id, episode_id, verdict))
        skill = db.scalar(select(SkillRow).where(SkillRow.id == trial.skill_id))
        if skill is not None:
            touched[skill.id] = skill
    db.flush()
    changes = [
        change
        for skill in touched.values()
        if (change := recount_sync(db, skill, settings, now, f"trial:{verdict}")) is not None
    ]
    return resolved, changes


def emit_change(ctx: LearningContext, change: SkillChange, episode_id: str | None = None) -> None:
    """Index and event bookkeeping after a committed η/status change."""
    if change.status_changed:
        ctx.vectors.upsert("skill", change.skill)  # archived skills leave the index, restored ones return
        ctx.events.emit(
            EventType.SKILL_STATUS_CHANGED,
            {
                "skillId": change.skill.id,
                "episodeId": episode_id,
                "from": change.previous_status,
                "to": change.skill.status,
                "eta": round(change.skill.eta, 4),
                "reason": change.reason,
                **({"note": change.note} if change.note else {}),
            },
        )


# ---------------------------------------------------------------- wire methods


def _status(value: str) -> dto.SkillStatus:
    if value == STATUS_ACTIVE:
        return "active"
    if value == STATUS_ARCHIVED:
        return "archived"
    return "candidate"


def _status_is(model: Any, status: str) -> ColumnElement[bool]:
    """Rows whose wire status is `status`: archived by the forgetting job (archived_at) counts as archived."""
    if status == STATUS_ARCHIVED:
        return or_(model.status == STATUS_ARCHIVED, model.archived_at.is_not(None))
    return and_(model.status == status, model.archived_at.is_(None))


def review_dto(row: SkillRow) -> dto.SkillReviewDTO | None:
    if row.review_status == REVIEW_APPROVED:
        return dto.SkillReviewDTO(status="approved", reason=row.review_reason, at=row.reviewed_at or 0)
    if row.review_status == REVIEW_REJECTED:
        return dto.SkillReviewDTO(status="rejected", reason=row.review_reason, at=row.reviewed_at or 0)
    return None


def wire_status(row: SkillRow) -> dto.SkillStatus:
    """The status clients see: archived by the forgetting job (archived_at) counts as archived."""
    return "archived" if row.archived_at is not None else _status(row.status)


def skill_dto(row: SkillRow) -> dto.SkillDTO:
    procedure = dict(row.procedure_json or {})
    guidance = procedure.get("decisionGuidance") or {}
    return dto.SkillDTO(
        id=row.id,
        name=row.name,
        status=wire_status(row),
        invocation_guide=row.invocation_guide,
        decision_guidance=dto.GuidanceDTO(
            preference=list(guidance.get("preference", [])), anti_pattern=list(guidance.get("antiPattern", []))
        ),
        evidence_anchors=list(row.evidence_anchors_json or []),
        eta=row.eta,
        support=row.support,
        gain=row.gain,
        trials_attempted=row.trials_attempted,
        trials_passed=row.trials_passed,
        source_policy_ids=list(row.source_policies_json or []),
        source_world_model_ids=list(row.source_world_json or []),
        version=row.version,
        usage_count=row.usage_count,
        last_used_at=row.last_used_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        summary=str(procedure.get("summary", "")),
        procedure=procedure or None,
        archived_at=row.archived_at,
        forgotten_at=row.forgotten_at,
        review=review_dto(row),
    )


def _skill(db: Session, skill_id: str, owner: OwnerFilter | None = None) -> SkillRow:
    row = db.scalar(select(SkillRow).where(SkillRow.id == skill_id))
    if row is None or (owner is not None and not owner.can_see(row)):
        raise MemosError(ErrorCode.SKILL_NOT_FOUND, f"skill not found: {skill_id}", {"id": skill_id})
    return row


def _history(db: Session, skill_id: str, event: str, now: int, **detail: Any) -> None:
    """One event of the skill's history (`memory.history`), recorded as a person's action."""
    db.add(AuditEventRow(ts=now, actor=PERSON, kind=event, target=f"skill:{skill_id}", detail_json=detail))


async def list_skills(ctx: LearningContext, params: dto.SkillListParams) -> dto.SkillListResult:
    """Skills visible to the namespace, most recently updated first, optionally of one status."""

    def work(db: Session) -> list[dto.SkillDTO]:
        owner = list_scope(db, params.namespace, session_id=params.session_id)
        stmt = select(SkillRow)
        if owner is not None:
            stmt = stmt.where(owner.clause(SkillRow))
        if params.status is not None:
            stmt = stmt.where(_status_is(SkillRow, params.status))
        if not params.include_forgotten:
            stmt = stmt.where(SkillRow.forgotten_at.is_(None))
        stmt = stmt.order_by(SkillRow.updated_at.desc(), SkillRow.rid.desc()).limit(params.limit).offset(params.offset)
        return [skill_dto(row) for row in db.scalars(stmt)]

    return dto.SkillListResult(skills=await ctx.db.read(work))


def _trial_episode(db: Session, params: dto.SkillGetParams) -> EpisodeRow:
    if params.episode_id:
        episode = db.get(EpisodeRow, params.episode_id)
        if episode is None:
            raise MemosError(ErrorCode.EPISODE_NOT_FOUND, f"episode not found: {params.episode_id}")
        return episode
    if not params.session_id:
        raise MemosError(ErrorCode.INVALID_ARGUMENT, "recordTrial needs episodeId or sessionId")
    if db.get(SessionRow, params.session_id) is None:
        raise MemosError(ErrorCode.SESSION_NOT_FOUND, f"session not found: {params.session_id}")
    episode = db.scalar(
        select(EpisodeRow)
        .where(EpisodeRow.session_id == params.session_id, EpisodeRow.status == "open")
        .order_by(EpisodeRow.started_at.desc())
        .limit(1)
    )
    if episode is None:
        raise MemosError(
            ErrorCode.EPISODE_NOT_FOUND,
            f"session {params.session_id} has no open episode to record the trial in",
            {"sessionId": params.session_id},
        )
    return episode


async def get_skill(ctx: LearningContext, params: dto.SkillGetParams) -> dto.SkillDTO | None:
    """One skill, or None when it does not exist or the namespace cannot see it; with `recordTrial` the fetch
    is also a (pending) trial in the episode, unless the skill is archived (an archived skill is not offered).

    `traceId` / `turnId` / `toolCallId` (sent by adapters written for the reference) are stored on that trial.
    Without `recordTrial` they are accepted and ignored: a read never records a trial here, while the
    reference recorded one whenever any option was present."""
    now = ctx.clock()

    def read(db: Session) -> dto.SkillDTO | None:
        owner = row_scope(db, params.namespace, session_id=params.session_id, episode_id=params.episode_id)
        row = db.scalar(select(SkillRow).where(SkillRow.id == params.id))
        if row is None or (owner is not None and not owner.can_see(row)):
            return None
        return skill_dto(row)

    def record(db: Session) -> dto.SkillDTO | None:
        owner = row_scope(db, params.namespace, session_id=params.session_id, episode_id=params.episode_id)
        row = db.scalar(select(SkillRow).where(SkillRow.id == params.id))
        if row is None or (owner is not None and not owner.can_see(row)):
            return None
        episode = _trial_episode(db, params)
        if row.status != STATUS_ARCHIVED:
            record_trial_sync(
                db,
                row,
                episode_id=episode.id,
                session_id=episode.session_id,
                turn_id=params.turn_id,
                source="get",
                now=now,
                trace_id=params.trace_id,
                tool_call_id=params.tool_call_id,
            )
        return skill_dto(row)

    if not params.record_trial:
        return await ctx.db.read(read)
    return await ctx.db.write(record)


async def archive_skill(ctx: LearningContext, params: dto.SkillArchiveParams) -> dto.OkResult:
    """Archive at once (idempotent): out of the vector index and of retrieval, restorable. A `reason` goes
    into the `skill.status.changed` event (`note`) and the log."""
    now = ctx.clock()

    def work(db: Session) -> SkillChange | None:
        row = _skill(db, params.id)
        if row.status == STATUS_ARCHIVED:
            return None
        change = SkillChange(row, row.status, row.eta, "skill.archive", note=params.reason)
        set_status(row, STATUS_ARCHIVED, now)
        return change

    change = await ctx.db.write(work)
    if change is not None:
        if params.reason:
            log.info("skill %s archived by request: %s", params.id, params.reason)
        emit_change(ctx, change)
    return dto.OkResult()


async def restore_skill(ctx: LearningContext, params: dto.SkillIdParams) -> dto.OkResult:
    """Bring an archived skill back (idempotent): active when a trial or its support vouches for it, else
    candidate; η lifted to at least the retrieval floor plus `eta_delta` (module docstring)."""
    settings = ctx.settings.learning.skill
    now = ctx.clock()

    def work(db: Session) -> SkillChange | None:
        row = _skill(db, params.id)
        if row.status != STATUS_ARCHIVED and row.archived_at is None:
            return None
        change = SkillChange(row, row.status, row.eta, "skill.restore")
        row.eta = min(1.0, max(row.eta, settings.min_eta_for_retrieval) + settings.eta_delta)
        vouched = row.trials_passed >= 1 or row.support >= settings.promote_support
        set_status(row, STATUS_ACTIVE if vouched else STATUS_CANDIDATE, now)
        detail: dict[str, Any] = {"via": "skill.restore", "to": row.status}
        if row.review_status == REVIEW_REJECTED:
            # A person bringing back a skill a person rejected overrides that verdict; the history keeps both.
            detail["liftedReview"] = REVIEW_REJECTED
            row.review_status = row.review_reason = row.reviewed_at = None
        _history(db, row.id, "restored", now, **detail)
        return change

    change = await ctx.db.write(work)
    if change is not None:
        emit_change(ctx, change)
    return dto.OkResult()


def _vouch(row: SkillRow, ctx: LearningContext, now: int) -> None:
    """A person wants the skill recalled: active, unhidden, reliable and strong enough for retrieval's floors
    (η at least the floor plus `eta_delta`, strength at least the recall floor), and aging from now on."""
    settings = ctx.settings.learning.skill
    row.eta = max(row.eta, min(1.0, settings.min_eta_for_retrieval + settings.eta_delta))
    row.strength = strength_rules.lift_to_floor(row.strength, ctx.settings.strength)
    row.forgotten_at = None
    row.last_accessed_at = now
    set_status(row, STATUS_ACTIVE, now)


async def review_skill(ctx: LearningContext, params: dto.SkillReviewParams) -> dto.SkillReviewResult:
    """A person's approve or reject (module docstring, Reviews). Repeating the same review (same decision and
    reason, skill already in the matching state) changes nothing and records nothing."""
    owner = read_filter(params.namespace)
    verdict = REVIEW_APPROVED if params.decision == "approve" else REVIEW_REJECTED
    target = STATUS_ACTIVE if verdict == REVIEW_APPROVED else STATUS_ARCHIVED
    now = ctx.clock()

    def work(db: Session) -> tuple[SkillChange | None, dto.SkillDTO]:
        row = _skill(db, params.id, owner)
        before = wire_status(row)
        settled = before == target and (verdict == REVIEW_REJECTED or row.forgotten_at is None)
        if settled and row.review_status == verdict and row.review_reason == params.reason:
            return None, skill_dto(row)
        change = SkillChange(row, before, row.eta, "skill.review", note=params.reason)
        if verdict == REVIEW_APPROVED:
            _vouch(row, ctx, now)
        else:
            set_status(row, STATUS_ARCHIVED, now)
        row.review_status, row.review_reason, row.reviewed_at = verdict, params.reason, now
        _history(db, row.id, "reviewed", now, decision=verdict, reason=params.reason, **{"from": before, "to": target})
        return change, skill_dto(row)

    change, skill = await ctx.db.write(work)
    if change is not None:
        log.info("skill %s %s by a person: %s", params.id, verdict, params.reason or "(no reason given)")
        emit_change(ctx, change)
    return dto.SkillReviewResult(skill=skill)


async def set_skill_status(
    ctx: LearningContext, skill_id: str, status: str, reason: str | None, owner: OwnerFilter | None
) -> None:
    """`memory.set_status` on a skill: archive it (as `skill.archive`) or activate it (a person's vouch, as an
    approval without the verdict). A skill a person rejected is not activated here: lifting a rejection takes
    `skill.review approve` or `skill.restore`, so it is always a deliberate act on that verdict."""
    now = ctx.clock()

    def work(db: Session) -> SkillChange | None:
        row = _skill(db, skill_id, owner)
        before = wire_status(row)
        if status == STATUS_ARCHIVED:
            if before == STATUS_ARCHIVED:
                return None
            change = SkillChange(row, before, row.eta, "memory.set_status", note=reason)
            set_status(row, STATUS_ARCHIVED, now)
            _history(db, row.id, "archived", now, reason=reason, via="memory.set_status", **{"from": before})
            return change
        if row.review_status == REVIEW_REJECTED:
            raise MemosError(
                ErrorCode.CONFLICT,
                f"skill {skill_id} was rejected by a person: approve it with skill.review (or skill.restore) instead",
                {"id": skill_id, "kind": "skill", "review": REVIEW_REJECTED},
            )
        if before == STATUS_ACTIVE and row.forgotten_at is None:
            return None
        change = SkillChange(row, before, row.eta, "memory.set_status", note=reason)
        _vouch(row, ctx, now)
        _history(db, row.id, "activated", now, reason=reason, via="memory.set_status", **{"from": before})
        return change

    change = await ctx.db.write(work)
    if change is not None:
        emit_change(ctx, change)
