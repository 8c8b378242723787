"""`memory.history`: every event on one memory, oldest first, from the records the service already keeps.

Three sources, merged by time:
- the row itself says when and from what it was created (a step's turn, an experience's feedback and
  steps, a skill's experiences) — unless an explicit `created` audit event exists (remembered memories);
- audit events with target `<kind>:<id>`: remember/merge, update (old → new), forget, restore, pin, unpin,
  flag, expiry, and the archive of a decay run;
- strength events: each reinforcement (test passed, failure, …) and each decay step, with the strength
  after it — so a memory that left recall because failures pushed it under the floor says so here.

Purged memories have no history left but the purge's own audit record (counts, no content).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.memories import load_row
from memos_bridge.core.namespace import row_scope
from memos_bridge.storage.models import AuditEventRow, StrengthEventRow

#: Audit actions of the pin/unpin/restore methods → history event names.
_ACTIONS: Final[dict[str, str]] = {
    "memory.pin": "pinned",
    "memory.unpin": "unpinned",
    "memory.restore": "restored",
}
#: Within one millisecond, a creation comes first and an archive last: it is the effect of the evidence or
#: decay step recorded at the same time.
_ORDER_AT_SAME_TIME: Final[dict[str, int]] = {"created": 0, "archived": 2, "expired": 2}
#: Audit actors → who the history names.
_ACTORS: Final[dict[str, str]] = {"rpc": "host"}


def _created(kind: str, row: Any) -> dto.MemoryHistoryEventDTO:
    """The creation event the row itself records: when, and from which evidence."""
    detail: dict[str, Any] = {}
    if kind == "trace":
        detail = {"episodeId": row.episode_id, "sessionId": row.session_id, "turnId": row.turn_id}
        actor, ts = "service:capture", row.ts
    elif kind == "policy":
        detail = {
            "feedbackIds": list(row.source_feedback_ids_json or []),
            "traceIds": list(row.source_trace_ids_json or []),
            "episodeIds": list(row.source_episodes_json or []),
            "inducedBy": row.induced_by,
        }
        actor, ts = f"service:{row.induced_by or 'learning'}", row.created_at
    elif kind == "skill":
        detail = {"policyIds": list(row.source_policies_json or [])}
        actor, ts = "service:skills", row.created_at
    elif kind == "world_model":
        detail = {"policyIds": list(row.policy_ids_json or []), "inducedBy": row.induced_by}
        actor, ts = "service:world", row.created_at
    else:
        actor, ts = row.source, row.created_at
    return dto.MemoryHistoryEventDTO(ts=ts, event="created", actor=actor, detail=detail)


def _strength_event(event: StrengthEventRow) -> dto.MemoryHistoryEventDTO:
    name = "decayed" if event.evidence == "decay" else "reinforced"
    return dto.MemoryHistoryEventDTO(
        ts=event.ts,
        event=name,
        actor="service:decay" if name == "decayed" else "host",
        detail={
            "evidence": event.evidence,
            "evidenceId": event.evidence_id,
            "delta": round(event.delta, 4),
            "strengthAfter": round(event.strength_after, 4),
        },
    )


def history_sync(db: Session, params: dto.MemoryHistoryParams) -> dto.MemoryHistoryResult:
    owner = row_scope(db, params.namespace)
    row = load_row(db, params.kind, params.id, owner)
    target = f"{params.kind}:{params.id}"
    audits = list(db.scalars(select(AuditEventRow).where(AuditEventRow.target == target)))
    events = [
        dto.MemoryHistoryEventDTO(
            ts=audit.ts,
            event=_ACTIONS.get(audit.kind, audit.kind),
            actor=_ACTORS.get(audit.actor, audit.actor),
            detail=dict(audit.detail_json or {}),
        )
        for audit in audits
    ]
    if not any(event.event == "created" for event in events):
        events.append(_created(params.kind, row))
    strength = select(StrengthEventRow).where(
        StrengthEventRow.target_kind == params.kind, StrengthEventRow.target_id == params.id
    )
    events += [_strength_event(event) for event in db.scalars(strength)]
    events.sort(key=lambda event: (event.ts, _ORDER_AT_SAME_TIME.get(event.event, 1)))
    return dto.MemoryHistoryResult(id=params.id, kind=params.kind, events=events[-params.limit :])
