"""ORM rows → wire DTOs."""

from __future__ import annotations

from typing import Any

from memos_bridge.contract.dto import (
    EpisodeDTO,
    FeedbackDTO,
    LessonDTO,
    LessonSubjectDTO,
    PolicyDTO,
    PolicySkillNoteDTO,
    ToolCallDTO,
    TraceDTO,
)
from memos_bridge.rules.text import clip
from memos_bridge.storage.models import EpisodeRow, FeedbackRow, PolicyRow, TraceRow


def _tool_calls(raw: Any) -> list[ToolCallDTO]:
    calls = []
    for item in raw or []:
        try:
            calls.append(ToolCallDTO.model_validate(item))
        except ValueError:
            continue  # a malformed legacy row must not break a read
    return calls


def trace_dto(row: TraceRow, episode_status: tuple[str, float | None] | None = None) -> TraceDTO:
    status, r_task = episode_status if episode_status else (None, None)
    return TraceDTO(
        id=row.id,
        episode_id=row.episode_id,
        session_id=row.session_id,
        ts=row.ts,
        turn_id=row.turn_id,
        step_index=row.step_index,
        step_kind=row.step_kind,
        user_text=row.user_text,
        agent_text=row.agent_text,
        summary=row.summary,
        tool_calls=_tool_calls(row.tool_calls_json),
        reflection=row.reflection,
        agent_thinking=row.agent_thinking,
        value=row.value,
        alpha=row.alpha,
        r_human=row.r_human,
        priority=row.priority,
        tags=list(row.tags_json or []),
        error_signatures=list(row.error_signatures_json or []),
        share_scope=row.share_scope,
        strength=row.strength,
        pinned=row.pinned,
        archived_at=row.archived_at,
        forgotten_at=row.forgotten_at,
        protected=row.protected,
        access_count=row.access_count,
        last_accessed_at=row.last_accessed_at,
        last_evidence_at=row.last_evidence_at,
        episode_status=status,
        r_task=r_task,
    )


def episode_dto(row: EpisodeRow, preview: str = "") -> EpisodeDTO:
    return EpisodeDTO(
        id=row.id,
        session_id=row.session_id,
        status=row.status,
        topic_state=row.topic_state,
        started_at=row.started_at,
        ended_at=row.ended_at,
        turn_count=row.turn_count,
        trace_ids=list(row.trace_ids_json or []),
        r_task=row.r_task,
        close_reason=row.close_reason,
        preview=clip(preview, 120),
    )


def policy_dto(row: PolicyRow) -> PolicyDTO:
    """A policy or typed experience with every typed field (type, polarity, salience, sources, verifier data)."""
    guidance = row.decision_guidance_json if isinstance(row.decision_guidance_json, dict) else {}
    polarity = row.evidence_polarity if row.evidence_polarity in ("positive", "negative", "mixed") else "neutral"
    return PolicyDTO(
        id=row.id,
        title=row.title,
        trigger=row.trigger,
        procedure=row.procedure,
        verification=row.verification,
        boundary=row.boundary,
        support=row.support,
        gain=row.gain,
        # Archived by the forgetting job (archived_at) or by its lifecycle (status): one status on the wire.
        status=row.status if row.status in ("candidate", "active") and row.archived_at is None else "archived",
        experience_type=row.experience_type,
        evidence_polarity=polarity,
        salience=row.salience,
        confidence=row.confidence,
        skill_eligible=row.skill_eligible,
        preference=[str(line) for line in guidance.get("preference") or []],
        anti_pattern=[str(line) for line in guidance.get("antiPattern") or []],
        source_episode_ids=list(row.source_episodes_json or []),
        source_feedback_ids=list(row.source_feedback_ids_json or []),
        source_trace_ids=list(row.source_trace_ids_json or []),
        verifier_meta=row.verifier_meta_json,
        strength=row.strength,
        pinned=row.pinned,
        created_at=row.created_at,
        updated_at=row.updated_at,
        tags=list(row.tags_json or []),
        induced_by=row.induced_by,
        archived_at=row.archived_at,
        forgotten_at=row.forgotten_at,
        skill_note=_skill_note((row.meta_json or {}).get("skill")),
        lesson=_lesson(row.lesson_json),
    )


def _lesson(stored: object) -> LessonDTO | None:
    """The stored lesson record as the wire shows it (known keys only: a record written by a newer version may
    hold more)."""
    if not isinstance(stored, dict):
        return None
    raw_subject = stored.get("subject")
    subject: dict[str, object] = raw_subject if isinstance(raw_subject, dict) else {}

    def strings(data: dict[str, object], key: str) -> list[str]:
        value = data.get(key)
        return [str(item) for item in value] if isinstance(value, list) else []

    return LessonDTO(
        lines=strings(stored, "lines"),
        roles=strings(stored, "roles"),
        subject=LessonSubjectDTO(
            identifiers=strings(subject, "identifiers"),
            units=strings(subject, "units"),
            numbers=strings(subject, "numbers"),
        ),
        terms=strings(stored, "terms"),
        words=strings(stored, "words"),
        instance=strings(stored, "instance"),
    )


def _skill_note(note: object) -> PolicySkillNoteDTO | None:
    """`meta.skill` as the skill stage wrote it (`skill_store.record_policy_notes`), as far as it is readable."""
    if not isinstance(note, dict):
        return None
    skipped, skill_id, role = note.get("skipped"), note.get("skillId"), note.get("role")
    primary, ts = note.get("primary"), note.get("ts")
    return PolicySkillNoteDTO(
        skipped=skipped if isinstance(skipped, str) else None,
        skill_id=skill_id if isinstance(skill_id, str) else None,
        role=role if isinstance(role, str) else None,
        primary=primary if isinstance(primary, bool) else None,
        ts=ts if isinstance(ts, int) and not isinstance(ts, bool) else None,
    )


def feedback_dto(row: FeedbackRow) -> FeedbackDTO:
    return FeedbackDTO(
        id=row.id,
        ts=row.ts,
        episode_id=row.episode_id,
        trace_id=row.trace_id,
        channel="implicit" if row.channel == "implicit" else "explicit",
        polarity=row.polarity,
        magnitude=row.magnitude,
        rationale=row.rationale,
        raw=row.raw_json,
        evidence_id=row.evidence_id,
    )
