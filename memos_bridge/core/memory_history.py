"""`memory.history`: every event on one memory, oldest first, from the records the service already keeps.

Three sources, merged by time:
- the row itself says when and from what it was created (a step's turn, an experience's feedback and
  steps, a skill's experiences) — unless an explicit `created` audit event exists (remembered memories);
- audit events with target `<kind>:<id>`: remember/merge, update (old → new), forget, restore, pin, unpin,
  flag, expiry, and the archive of a decay run;
- strength events: each reinforcement (test passed, failure, …) and each decay step, with the strength
  after it — so a memory that left recall because failures pushed it under the floor says so here;
- links (`memory.link`): each typed edge to or from it, as "linked";
- recall: the most recent turns whose `turn.start` injected it, with the request it was recalled for (from
  the turns' cached results, within the memory's own profile and workspace).

Purged memories have no history left but the purge's own audit record (counts, no content).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import String, cast, or_, select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.memories import load_row
from memos_bridge.core.namespace import row_scope
from memos_bridge.rules.text import clip
from memos_bridge.storage.models import AuditEventRow, MemoryLinkRow, StrengthEventRow, TurnRow

#: Audit actions of the pin/unpin/restore methods → history event names.
_ACTIONS: Final[dict[str, str]] = {
    "memory.pin": "pinned",
    "memory.unpin": "unpinned",
    "memory.restore": "restored",
}
#: Within one millisecond, a creation comes first and an archive last: it is the effect of the evidence or
#: decay step recorded at the same time.
_ORDER_AT_SAME_TIME: Final[dict[str, int]] = {"created": 0, "archived": 2, "expired": 2}
#: Recall events listed per memory (the most recent ones): a memory recalled on every turn would drown the
#: rest of its history.
RECALLS_SHOWN: Final = 20
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


def _links(db: Session, kind: str, memory_id: str) -> list[dto.MemoryHistoryEventDTO]:
    rows = db.scalars(
        select(MemoryLinkRow).where(
            or_(
                (MemoryLinkRow.from_kind == kind) & (MemoryLinkRow.from_id == memory_id),
                (MemoryLinkRow.to_kind == kind) & (MemoryLinkRow.to_id == memory_id),
            )
        )
    )
    events = []
    for link in rows:
        outgoing = link.from_id == memory_id
        other = {"kind": link.to_kind, "id": link.to_id} if outgoing else {"kind": link.from_kind, "id": link.from_id}
        detail = {"relation": link.relation, "direction": "to" if outgoing else "from", **other}
        events.append(dto.MemoryHistoryEventDTO(ts=link.created_at, event="linked", actor="host", detail=detail))
    return events


def _recalls(db: Session, row: Any) -> list[dto.MemoryHistoryEventDTO]:
    """The latest turns whose injected memories included this one, and what each asked. Ids are unique random
    strings, so finding the id in a turn's cached result is finding a hit on it."""
    stmt = (
        select(TurnRow.started_at, TurnRow.session_id, TurnRow.episode_id, TurnRow.user_text)
        .where(
            TurnRow.result_json.is_not(None),
            cast(TurnRow.result_json, String).like(f"%{row.id}%"),
            TurnRow.owner_profile_id == row.owner_profile_id,
            TurnRow.owner_workspace_id.is_not_distinct_from(row.owner_workspace_id),
        )
        .order_by(TurnRow.started_at.desc(), TurnRow.id.desc())
        .limit(RECALLS_SHOWN)
    )
    return [
        dto.MemoryHistoryEventDTO(
            ts=started,
            event="recalled",
            actor="service:turn.start",
            detail={"query": clip(text, 200), "sessionId": session_id, "episodeId": episode_id},
        )
        for started, session_id, episode_id, text in db.execute(stmt)
    ]


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
    events += _links(db, params.kind, params.id)
    events += _recalls(db, row)
    events.sort(key=lambda event: (event.ts, _ORDER_AT_SAME_TIME.get(event.event, 1)))
    return dto.MemoryHistoryResult(id=params.id, kind=params.kind, events=events[-params.limit :])
