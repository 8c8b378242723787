"""`memory.retrieval_log`: what recent `turn.start` calls injected and why, for the viewer's retrieval log.

Nothing new is recorded for it: every answered `turn.start` already stores its whole result on its turn row
(`turns.result_json`, kept so that a retry after a restart gets the same answer), including the retrieval
stats and their funnel. Reading that cache shows exactly what the host received, not a re-run that could
differ. Turns without a cached result (a purge clears them, and turns recorded by `turn.end` alone never had
one) are skipped.

The whole call's duration is not part of the result; it is on the `api_logs` row the same write stored. That
row is matched by session, episode, query and the result's `stats.totalMs` (a float measured per call, so two
turns practically never share it); an entry whose row is missing or ambiguous simply has no duration.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.namespace import list_scope
from memos_bridge.storage.models import ApiLogRow, TurnRow

log = logging.getLogger(__name__)

#: The `api_logs` tool name and input type `turn.start` logs under.
TURN_START_TOOL: Final = "memos_search"
TURN_START_TYPE: Final = "turn_start"
#: How far (ms) a log row's server time may lie from the turn's host time and still be looked at. Host and
#: service share a clock in practice; the window only keeps the scan on the `called_at` index.
LOG_SLACK_MS: Final = 3_600_000

_MatchKey = tuple[str, str, str, float]


def retrieval_log_sync(db: Session, params: dto.RetrievalLogParams) -> dto.RetrievalLogResult:
    owner = list_scope(db, params.namespace, session_id=params.session_id)
    stmt = (
        select(
            TurnRow.id,
            TurnRow.started_at,
            TurnRow.session_id,
            TurnRow.episode_id,
            TurnRow.user_text,
            TurnRow.result_json,
        )
        .where(TurnRow.result_json.is_not(None))
        .order_by(TurnRow.started_at.desc(), TurnRow.id.desc())
        .limit(params.limit)
        .offset(params.offset)
    )
    if owner is not None:
        stmt = stmt.where(owner.clause(TurnRow))
    if params.session_id:
        stmt = stmt.where(TurnRow.session_id == params.session_id)
    entries = [
        _entry(row_id, ts, session_id, episode_id, text, result)
        for row_id, ts, session_id, episode_id, text, result in db.execute(stmt)
        if isinstance(result, dict)
    ]
    if entries:
        durations = _durations(db, entries)
        for entry in entries:
            entry.duration_ms = durations.get(_key(entry))
    return dto.RetrievalLogResult(entries=entries)


def _entry(
    row_id: int, ts: int, session_id: str, episode_id: str, text: str, result: dict[str, Any]
) -> dto.RetrievalLogEntryDTO:
    hits = [hit for hit in result.get("hits") or [] if isinstance(hit, dict)]
    return dto.RetrievalLogEntryDTO(
        turn_id=row_id,
        ts=ts,
        session_id=session_id,
        episode_id=episode_id,
        query=text,
        hit_count=len(hits),
        hit_ids=[str(hit.get("refId", "")) for hit in hits],
        stats=_stats(result.get("stats")),
        injected_context=str(result.get("injectedContext") or ""),
    )


def _stats(raw: Any) -> dto.RetrievalStatsDTO | None:
    """The cached stats, or None when a result cached by another version no longer fits the model: one odd
    row must not make the whole log unreadable."""
    if not isinstance(raw, dict):
        return None
    try:
        return dto.RetrievalStatsDTO.model_validate(raw)
    except ValidationError:
        log.debug("cached retrieval stats do not validate; left out", exc_info=True)
        return None


def _key(entry: dto.RetrievalLogEntryDTO) -> _MatchKey | None:
    if entry.stats is None:
        return None
    return (entry.session_id, entry.episode_id, entry.query[:500], float(entry.stats.total_ms))


def _durations(db: Session, entries: list[dto.RetrievalLogEntryDTO]) -> dict[_MatchKey | None, int]:
    """Duration of each entry's turn.start from its `api_logs` row, in ONE query over the log rows of the
    page's sessions near the page's times; keys seen on more than one row are dropped as ambiguous."""
    times = [entry.ts for entry in entries]
    session_of = ApiLogRow.input_json["sessionId"].as_string()
    stmt = select(
        session_of,
        ApiLogRow.input_json["episodeId"].as_string(),
        ApiLogRow.input_json["query"].as_string(),
        ApiLogRow.output_json[("stats", "totalMs")].as_float(),
        ApiLogRow.duration_ms,
    ).where(
        ApiLogRow.called_at.between(min(times) - LOG_SLACK_MS, max(times) + LOG_SLACK_MS),
        ApiLogRow.tool_name == TURN_START_TOOL,
        ApiLogRow.input_json["type"].as_string() == TURN_START_TYPE,
        session_of.in_({entry.session_id for entry in entries}),
    )
    found: dict[_MatchKey | None, int] = {}
    ambiguous: set[_MatchKey] = set()
    for session_id, episode_id, query, total_ms, duration in db.execute(stmt):
        if session_id is None or episode_id is None or total_ms is None:
            continue
        key: _MatchKey = (session_id, episode_id, query or "", float(total_ms))
        if key in found:
            ambiguous.add(key)
        found[key] = int(duration)
    for key in ambiguous:
        del found[key]
    return found
