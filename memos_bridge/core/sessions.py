"""Sessions and episodes: opening, closing, and routing a user turn to an episode.

An episode is one task. `route_episode_sync` decides where a new user turn goes (explicit id, relation of
the text to the open episode, or a reopened recent one); finalising an episode hands it to the learning
queue through `SessionService.finalized_hooks`.

The `*_sync` functions run inside one write transaction and return the events to emit after commit, so a
rolled-back transaction never announces anything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from memos_bridge.config import SessionSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.events import EventBus, EventScope, scope_of
from memos_bridge.core.namespace import owner_for
from memos_bridge.core.relation import EpisodeContext, RelationDecision, classify_relation
from memos_bridge.ids import new_id
from memos_bridge.storage import hotpath, repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.locks import write_first_wins
from memos_bridge.storage.models import EpisodeRow, SessionRow, TurnRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.timeutil import now_ms

PendingEvent = tuple[EventType, dict[str, Any], EventScope]
EpisodeFinalizedHook = Callable[[str, str], None]
SessionOpenedHook = Callable[[str, OwnerFilter], None]  # (session id, its namespace)


@dataclass
class Outbox:
    """Events produced inside a transaction, emitted only after it commits."""

    events: list[PendingEvent] = field(default_factory=list)
    finalized: list[tuple[str, str]] = field(default_factory=list)  # (episode id, reason)

    def add(self, event_type: EventType, payload: dict[str, Any], row: SessionRow | EpisodeRow) -> None:
        """Queue an event about `row` (a session or an episode), in that row's namespace."""
        self.events.append((event_type, payload, scope_of(row)))


def owner_of(row: SessionRow | EpisodeRow) -> OwnerFilter:
    return OwnerFilter(
        agent_kind=row.owner_agent_kind, profile_id=row.owner_profile_id, workspace_id=row.owner_workspace_id
    )


def ensure_session_sync(
    db: Session, outbox: Outbox, session_id: str, agent: str, namespace: dto.RuntimeNamespace | None, now: int
) -> SessionRow:
    """Return the session, creating it when a host starts turns without an explicit `session.open`."""
    row = repos.get_session(db, session_id)
    if row is None:
        owner = owner_for(agent, namespace)
        row = SessionRow(
            id=session_id,
            agent=agent,
            started_at=now,
            last_seen_at=now,
            meta_json={},
            owner_agent_kind=owner.agent_kind,
            owner_profile_id=owner.profile_id,
            owner_workspace_id=owner.workspace_id,
        )
        repos.add(db, row)
        outbox.add(EventType.SESSION_OPENED, {"sessionId": session_id, "agent": agent}, row)
    else:
        row.last_seen_at = max(row.last_seen_at, now)
        row.closed_at = None
    return row


def new_episode_sync(db: Session, outbox: Outbox, session: SessionRow, now: int, meta: dict[str, Any]) -> EpisodeRow:
    episode = EpisodeRow(
        id=new_id("episode"),
        session_id=session.id,
        started_at=now,
        status="open",
        topic_state="active",
        turn_count=0,
        trace_ids_json=[],
        meta_json=meta,
        owner_agent_kind=session.owner_agent_kind,
        owner_profile_id=session.owner_profile_id,
        owner_workspace_id=session.owner_workspace_id,
    )
    repos.add(db, episode)
    outbox.add(EventType.EPISODE_OPENED, {"sessionId": session.id, "episodeId": episode.id}, episode)
    return episode


def finalize_episode_sync(outbox: Outbox, episode: EpisodeRow, reason: str, now: int) -> None:
    if episode.status == "closed":
        return
    episode.status = "closed"
    episode.topic_state = "ended"
    episode.close_reason = reason
    episode.ended_at = now
    outbox.add(
        EventType.EPISODE_CLOSED,
        {"sessionId": episode.session_id, "episodeId": episode.id, "reason": reason},
        episode,
    )
    outbox.finalized.append((episode.id, reason))


def reopen_episode_sync(outbox: Outbox, episode: EpisodeRow) -> None:
    if episode.status == "open":
        return
    episode.status = "open"
    episode.topic_state = "active"
    episode.ended_at = None
    episode.meta_json = {**(episode.meta_json or {}), "reopenedFrom": episode.close_reason}
    episode.close_reason = None
    outbox.add(
        EventType.EPISODE_OPENED, {"sessionId": episode.session_id, "episodeId": episode.id, "reopened": True}, episode
    )


def require_session_sync(db: Session, session_id: str) -> SessionRow:
    row = repos.get_session(db, session_id)
    if row is None:
        raise MemosError(ErrorCode.SESSION_NOT_FOUND, f"session not found: {session_id}")
    return row


def episode_of_session_sync(db: Session, session: SessionRow, episode_id: str) -> EpisodeRow:
    """The episode, which must exist and belong to `session` (a host must not mix up its sessions)."""
    episode = repos.get_episode(db, episode_id)
    if episode is None:
        raise MemosError(ErrorCode.EPISODE_NOT_FOUND, f"episode not found: {episode_id}")
    if episode.session_id != session.id:
        raise MemosError(
            ErrorCode.INVALID_ARGUMENT,
            f"episode {episode_id} belongs to another session",
            {"episodeId": episode_id, "sessionId": session.id},
        )
    return episode


def record_turn_sync(
    db: Session, session: SessionRow, episode: EpisodeRow, ts: int, user_text: str, turn_key: str | None
) -> TurnRow:
    """Store a user turn in `episode` and count it; its turn id is `ts`, bumped past any id in use."""
    turn_id = ts
    while hotpath.turn_id_taken(db, episode.id, turn_id):
        turn_id += 1  # two user turns in the same millisecond still get distinct turn ids
    turn = TurnRow(
        session_id=session.id,
        episode_id=episode.id,
        turn_id=turn_id,
        turn_key=turn_key,
        user_text=user_text,
        user_text_hash=text_hash(user_text),
        started_at=ts,
        status="started",
        owner_agent_kind=session.owner_agent_kind,
        owner_profile_id=session.owner_profile_id,
        owner_workspace_id=session.owner_workspace_id,
    )
    repos.add(db, turn)
    episode.turn_count += 1
    return turn


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


Decide = Callable[[str, EpisodeContext], RelationDecision]
"""(open episode id, its context) -> relation of the new turn; the default is the heuristic classifier."""


def episode_context_sync(db: Session, episode: EpisodeRow, turn_ts: int) -> EpisodeContext:
    """What the relation classifier needs to know about `episode`, read in the routing transaction."""
    row = hotpath.episode_context(db, episode.id)
    last_turn = row.last_turn_id if row.last_turn_id is not None else episode.started_at
    last_ts = max(last_turn, row.last_trace_ts or 0)
    return EpisodeContext(
        first_user_text=row.first_user_text or "",
        last_user_text=row.last_user_text or "",
        last_assistant_text=row.last_reply_text or "",
        user_turns=episode.turn_count,
        ms_since_last_activity=max(turn_ts - last_ts, 0),
        judged=row.last_verdict_ts is not None and row.last_verdict_ts >= last_turn,
    )


def heuristic_decide(settings: SessionSettings, user_text: str) -> Decide:
    def decide(_episode_id: str, context: EpisodeContext) -> RelationDecision:
        return classify_relation(
            user_text,
            context,
            merge_max_gap_ms=settings.merge_max_gap_ms,
            max_user_turns=settings.max_turns_per_episode,
        )

    return decide


REOPEN_RELATIONS = frozenset({"revision", "follow_up"})


def route_episode_sync(
    db: Session,
    outbox: Outbox,
    session: SessionRow,
    requested: str | None,
    turn_ts: int,
    settings: SessionSettings,
    user_text: str = "",
    decide: Decide | None = None,
) -> tuple[EpisodeRow, RelationDecision | None]:
    """Pick the episode a new user turn belongs to, and say why.

    * An explicit `episodeId` wins (a closed one is reopened: a late turn for a finished task belongs to it).
    * Otherwise the session's open episode is classified against the new text (`core/relation.py`: gap and
      user-turn cap are hard rules; explicit cues such as "new task"/"换个任务"; negations as revisions;
      pronoun follow-ups; topic shift): `new_task` finalises it and starts a new episode, anything else
      appends.
    * With no open episode, a revision or a cued follow-up of the session's most recently closed episode
      (within the merge window) reopens it — "不对，应该…" right after a task ended belongs to that task.
    """
    if requested:
        episode = episode_of_session_sync(db, session, requested)
        reopen_episode_sync(outbox, episode)
        return episode, None
    decide = decide or heuristic_decide(settings, user_text)
    now = now_ms()
    for index, episode in enumerate(repos.open_episodes(db, session.id)):
        if index > 0:  # only one open episode per session: close strays left by crashes or races
            finalize_episode_sync(outbox, episode, "superseded", now)
            continue
        decision = decide(episode.id, episode_context_sync(db, episode, turn_ts))
        if decision.starts_new_episode:
            finalize_episode_sync(outbox, episode, _close_reason(decision), now)
            return _new_episode_after(db, outbox, session, turn_ts, decision, episode.id), decision
        if episode.topic_state != "active":
            episode.topic_state = "active"  # an interrupted topic resumed
        return episode, decision
    recent = repos.latest_closed_episode(db, session.id)
    if recent is not None and recent.trace_ids_json:
        context = episode_context_sync(db, recent, turn_ts)
        decision = decide(recent.id, context)
        within = not settings.merge_max_gap_ms or (context.ms_since_last_activity or 0) <= settings.merge_max_gap_ms
        cued = decision.reason not in ("no_signal", "empty_episode")
        if within and cued and decision.relation in REOPEN_RELATIONS:
            reopen_episode_sync(outbox, recent)
            recent.meta_json = {**(recent.meta_json or {}), "reopenedBy": decision.reason}
            return recent, decision
    return new_episode_sync(db, outbox, session, turn_ts, {}), None


def _close_reason(decision: RelationDecision) -> str:
    """Stable close reasons: the gap and cap rules keep their historical names."""
    return {"gap_exceeded": "gap", "turn_cap": "turn_cap"}.get(decision.reason, "new_task")


def _new_episode_after(
    db: Session, outbox: Outbox, session: SessionRow, turn_ts: int, decision: RelationDecision, previous: str
) -> EpisodeRow:
    boundary = {
        "relation": decision.relation,
        "reason": decision.reason,
        "confidence": decision.confidence,
        "source": decision.source,
        "previousEpisodeId": previous,
    }
    return new_episode_sync(db, outbox, session, turn_ts, {"boundary": boundary})


class SessionService:
    """session.* and episode.* methods."""

    def __init__(self, db: Database, events: EventBus, settings: SessionSettings) -> None:
        self._db = db
        self._events = events
        self._settings = settings
        self.finalized_hooks: list[EpisodeFinalizedHook] = []
        #: Told each session `session.open` returns, with its namespace: the session's first `turn.start`
        #: can then start its searches before its routing write instead of after it.
        self.opened_hooks: list[SessionOpenedHook] = []

    def publish(self, outbox: Outbox, *, request: bool = False) -> None:
        """Emit the outbox's events and run the finalisation hooks, after its transaction committed.

        `request`: the outbox belongs to the request being served, whose connection thereby joins the
        namespace of the rows it touched (so it receives their events)."""
        if request:
            for scope in dict.fromkeys(scope for _type, _payload, scope in outbox.events):
                self._events.enter(scope)
        for event_type, payload, scope in outbox.events:
            self._events.emit(event_type, payload, scope=scope)
        for episode_id, reason in outbox.finalized:
            for hook in self.finalized_hooks:
                hook(episode_id, reason)

    async def open_session(self, params: dto.SessionOpenParams) -> dto.SessionOpenResult:
        session_id = params.session_id or new_id("session")

        def work(db: Session) -> tuple[Outbox, EventScope, OwnerFilter]:
            outbox = Outbox()
            existing = repos.get_session(db, session_id)
            if existing is not None and params.namespace is not None:
                wanted = owner_for(params.agent, params.namespace)
                if wanted != owner_of(existing):
                    raise MemosError(
                        ErrorCode.CONFLICT,
                        f"session {session_id} exists in another namespace",
                        {"sessionId": session_id},
                    )
            row = ensure_session_sync(db, outbox, session_id, params.agent, params.namespace, now_ms())
            if params.meta:
                row.meta_json = {**(row.meta_json or {}), **params.meta}
            return outbox, scope_of(row), owner_of(row)

        # A host re-opening its session through another service at the same moment: the loser finds the row.
        outbox, scope, owner = await write_first_wins(self._db, work, what="session.open")
        self._events.enter(scope)  # an existing session has no event to publish, yet its opener joins it
        self.publish(outbox)
        for hook in self.opened_hooks:
            hook(session_id, owner)
        return dto.SessionOpenResult(session_id=session_id)

    async def close_session(self, params: dto.SessionCloseParams) -> dto.OkResult:
        def work(db: Session) -> Outbox:
            outbox = Outbox()
            row = require_session_sync(db, params.session_id)
            now = now_ms()
            for episode in repos.open_episodes(db, row.id):
                finalize_episode_sync(outbox, episode, "session_closed", now)
            row.closed_at = now
            outbox.add(EventType.SESSION_CLOSED, {"sessionId": row.id}, row)
            return outbox

        self.publish(await self._db.write(work), request=True)
        return dto.OkResult()

    async def open_episode(self, params: dto.EpisodeOpenParams) -> dto.EpisodeOpenResult:
        def work(db: Session) -> tuple[Outbox, str]:
            outbox = Outbox()
            session = require_session_sync(db, params.session_id)
            now = now_ms()
            for episode in repos.open_episodes(db, session.id):
                finalize_episode_sync(outbox, episode, "new_episode", now)
            meta: dict[str, Any] = {"openedBy": "episode.open"}
            if params.episode_id:
                meta["adapterSuppliedId"] = params.episode_id
            if params.user_message:
                meta["userMessage"] = params.user_message
            episode = new_episode_sync(db, outbox, session, now, meta)
            return outbox, episode.id

        outbox, episode_id = await self._db.write(work)
        self.publish(outbox, request=True)
        return dto.EpisodeOpenResult(episode_id=episode_id)

    async def close_episode(self, params: dto.EpisodeCloseParams) -> dto.OkResult:
        def work(db: Session) -> Outbox:
            outbox = Outbox()
            episode = repos.get_episode(db, params.episode_id)
            if episode is None:
                raise MemosError(ErrorCode.EPISODE_NOT_FOUND, f"episode not found: {params.episode_id}")
            finalize_episode_sync(outbox, episode, "explicit", now_ms())
            return outbox

        self.publish(await self._db.write(work), request=True)
        return dto.OkResult()
