"""turn.start and turn.end: routing, idempotency, retrieval within a deadline, and step capture.

Idempotency:
- `turn.start` with a `turnKey`: the first call records the turn (in the `turns` table, so this survives a
  restart) and its result; a retry with the same key and text returns the same result and records nothing;
  the same key with different text is a `conflict`. Concurrent retries share one in-flight computation.
- `turn.end`: every step has a content key; a retried call finds its steps already stored and returns the
  same trace ids.
- Both hold across services that share one database (PostgreSQL), where a host may retry against another
  service than the first: turn keys and step keys are unique in the database, routing locks the session's
  row and capture the episode's row while they read-then-write, and a write that still loses a race to the
  same key runs again and returns the winner's rows (`storage/locks.py`).

A turn never fails because retrieval failed or ran out of time: the result is then empty and
`stats.skippedReason` says why.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.abc
import numpy as np
from sqlalchemy.orm import Session

from memos_bridge.config import Settings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.background import BackgroundWork, Write, WriteBehind
from memos_bridge.core.capture import StepDraft, extract_steps
from memos_bridge.core.events import EventBus, scope_of
from memos_bridge.core.learning.queue import ForegroundGate
from memos_bridge.core.learning.repair import RepairService
from memos_bridge.core.relation import RelationDecision
from memos_bridge.core.routing import llm_decide
from memos_bridge.core.sessions import (
    Decide,
    Outbox,
    SessionService,
    ensure_session_sync,
    episode_of_session_sync,
    owner_of,
    record_turn_sync,
    reopen_episode_sync,
    require_session_sync,
    route_episode_sync,
    text_hash,
)
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.embedding.base import Embedder
from memos_bridge.ids import new_id
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.host import NoLLM
from memos_bridge.retrieval.engine import ChannelRun, QueryVector, Retriever, VisibleContext, retrieval_text
from memos_bridge.retrieval.intent import ALL_TIERS, classify_intent, classify_intent_heuristic, schedule_injection
from memos_bridge.storage import hotpath, repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.locks import lock_rows, write_first_wins
from memos_bridge.storage.models import EmbeddingRetryRow, EpisodeRow, SessionRow, TraceRow, TurnRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.priority import PrioritySlots, interactive
from memos_bridge.storage.vectors import to_blob
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

OWNER_CACHE_SESSIONS = 4096  # sessions whose namespace is remembered for early retrieval channels


@dataclass
class _InFlight:
    """A keyed turn.start being computed or finished; retries wait on `done`."""

    text_hash: str
    done: anyio.Event
    result: dto.RetrievalResultDTO | None = None
    failed: bool = False


@dataclass
class _BegunTurn:
    owner: OwnerFilter
    session_id: str
    episode_id: str
    turn_row_id: int
    cached_result: dict[str, object] | None
    outbox: Outbox
    relation: RelationDecision | None = None


class TurnService:
    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        vectors: VectorStore,
        retriever: Retriever,
        sessions: SessionService,
        events: EventBus,
        settings: Settings,
        background: BackgroundWork,
        llm: LLMFacade | None = None,
    ) -> None:
        self._background = background
        self.write_behind = WriteBehind(db, background)
        self._llm = llm or LLMFacade([NoLLM()])
        self._db = db
        self._embedder = embedder
        self._vectors = vectors
        self._retriever = retriever
        self._sessions = sessions
        self._events = events
        self._settings = settings
        self._inflight: OrderedDict[tuple[str, str], _InFlight] = OrderedDict()
        self._capture_slots = PrioritySlots(settings.capture.concurrency)
        self._owners: OrderedDict[str, OwnerFilter] = OrderedDict()  # session id → namespace (early channels)
        self.gate = ForegroundGate()  # MemoryCore shares the learning queue's gate: learning waits for turns
        self.on_activity: Callable[[str], None] = lambda _episode_id: None  # the stale-topic sweep's clock
        self.repairs: RepairService | None = None  # set by MemoryCore: corrections and fresh repairs
        # Set by MemoryCore: the deferred write that counts an access of each returned memory (core/strength.py).
        self.on_recalled: Callable[[list[dto.RetrievalHitDTO]], Write | None] = lambda _hits: None

    # ------------------------------------------------------------ turn.start

    async def turn_start(self, params: dto.TurnInputDTO) -> dto.RetrievalResultDTO:
        """The call a host blocks its agent on: its database and embedding work go ahead of capture."""
        with self.gate.foreground(), interactive():
            return await self._keyed_turn_start(params)

    async def _keyed_turn_start(self, params: dto.TurnInputDTO) -> dto.RetrievalResultDTO:
        if params.turn_key is None:
            return await self._turn_start(params)
        key = (params.session_id, params.turn_key)
        digest = text_hash(params.user_text)
        existing = self._inflight.get(key)
        if existing is not None:
            if existing.text_hash != digest:
                raise self._conflict(params)
            await existing.done.wait()
            if existing.result is not None:
                return existing.result
            # the first attempt failed and was forgotten; fall through and compute again
        entry = _InFlight(text_hash=digest, done=anyio.Event())
        self._inflight[key] = entry
        self._inflight.move_to_end(key)
        while len(self._inflight) > self._settings.session.turn_key_cache:
            self._inflight.popitem(last=False)
        try:
            entry.result = await self._turn_start(params)
            return entry.result
        except BaseException:
            entry.failed = True
            if self._inflight.get(key) is entry:
                del self._inflight[key]  # a failed start can be retried with the same key
            raise
        finally:
            entry.done.set()

    @staticmethod
    def _conflict(params: dto.TurnInputDTO) -> MemosError:
        return MemosError(
            ErrorCode.CONFLICT,
            "turnKey was already used with a different userText",
            {"sessionId": params.session_id, "turnKey": params.turn_key},
        )

    def _begin_turn_sync(self, db: Session, params: dto.TurnInputDTO, decide: Decide | None) -> _BegunTurn:
        outbox = Outbox()
        session = ensure_session_sync(db, outbox, params.session_id, params.agent, params.namespace, params.ts)
        lock_rows(db, SessionRow, [session.id])  # the session's turns are routed one at a time, in any service
        if params.turn_key:
            previous = repos.find_turn_by_key(db, session.id, params.turn_key)
            if previous is not None:
                if previous.user_text_hash != text_hash(params.user_text):
                    raise self._conflict(params)
                return _BegunTurn(
                    owner_of(session),
                    session.id,
                    previous.episode_id,
                    previous.id,
                    previous.result_json,
                    outbox,
                )
        episode, relation = route_episode_sync(
            db, outbox, session, params.episode_id, params.ts, self._settings.session, params.user_text, decide
        )
        turn = record_turn_sync(db, session, episode, params.ts, params.user_text, params.turn_key)
        return _BegunTurn(owner_of(session), session.id, episode.id, turn.id, None, outbox, relation)

    async def _turn_start(self, params: dto.TurnInputDTO) -> dto.RetrievalResultDTO:
        """Start what needs only the text while the turn is routed and recorded, then retrieve.

        The query embedding always starts at once. The retrieval channels (keyword SQL, then the vector
        searches) need the session's namespace too: for a session seen before it is known, so they start
        at once as well, and the routing write (a few ms on SQLite's single writer) no longer delays them.
        """
        query_vector = QueryVector()
        result: dto.RetrievalResultDTO | None = None
        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            channels = None
            if params.user_text.strip():
                query_vector.start(group, self._embedder, retrieval_text(params.user_text))
                channels = self._early_channels(group, params, query_vector)
            try:
                result = await self._record_and_retrieve(params, query_vector, channels)
            except Exception as exc:  # re-raised below as itself, not wrapped in an ExceptionGroup
                failure = exc
            group.cancel_scope.cancel()  # work nobody needs any more (cached result, chitchat)
        if failure is not None:
            raise failure
        assert result is not None
        return result

    def knows_owner(self, session_id: str) -> bool:
        """Whether a `turn.start` in this session would start its searches before its routing write."""
        return session_id in self._owners

    def _early_channels(
        self, group: anyio.abc.TaskGroup, params: dto.TurnInputDTO, query_vector: QueryVector
    ) -> ChannelRun | None:
        """The turn's retrieval channels, started now when the session's namespace is already known.

        A session's namespace never changes (`session.open` refuses another one), and retrieval checks that
        the run was made for the namespace routing returns before using it, so a stale entry only costs a
        second run. The tiers are the heuristic scheduler's (the LLM intent classifier, when on, may choose
        others: then every tier is searched). Chitchat and meta commands start nothing.
        """
        owner = self._owners.get(params.session_id)
        if owner is None:
            return None
        if self._settings.retrieval.intent_llm:
            tiers = ALL_TIERS
        else:
            plan = schedule_injection(classify_intent_heuristic(params.user_text), params.user_text)
            if not plan.retrieve:
                return None
            tiers = plan.tiers
        run = self._retriever.turn_start_channels(params.user_text, owner, tiers, query_vector)
        run.start(group)
        return run

    def remember_owner(self, session_id: str, owner: OwnerFilter) -> None:
        """Note a session's namespace (it never changes), so its next `turn.start` searches at once."""
        self._owners[session_id] = owner
        self._owners.move_to_end(session_id)
        while len(self._owners) > OWNER_CACHE_SESSIONS:
            self._owners.popitem(last=False)

    async def _record_and_retrieve(
        self, params: dto.TurnInputDTO, query_vector: QueryVector, channels: ChannelRun | None
    ) -> dto.RetrievalResultDTO:
        started = time.perf_counter()
        deadline_at = params.deadline_at or (now_ms() + self._settings.retrieval.default_deadline_ms)
        decide = None
        if params.episode_id is None and params.user_text.strip() and not self._settings.lightweight:
            budget_ms = min(self._settings.session.classify_timeout_ms, max((deadline_at - now_ms()) // 2, 0))
            if budget_ms >= 100:  # an unsure heuristic may ask the LLM, within half the turn's deadline
                decide = await llm_decide(
                    self._db,
                    self._llm,
                    self._settings.session,
                    params.session_id,
                    params.user_text,
                    params.ts,
                    budget_ms,
                )
        begun = await self._begin_turn(params, decide)
        self._events.enter(scope_of(begun.owner))
        self._sessions.publish(begun.outbox)
        self.remember_owner(begun.session_id, begun.owner)
        self.on_activity(begun.episode_id)
        if begun.cached_result is not None:
            return dto.RetrievalResultDTO.model_validate(begun.cached_result)
        query = dto.RetrievalQueryDTO(
            agent=params.agent,
            namespace=params.namespace,
            session_id=begun.session_id,
            episode_id=begun.episode_id,
            query=params.user_text,
            reason="turn_start",
            context_hints=params.context_hints,
            deadline_at=params.deadline_at,
            render=params.render,
        )
        if self._settings.retrieval.intent_llm and not self._settings.lightweight and self._llm.available():
            intent = await classify_intent(params.user_text, self._llm, episode_id=begun.episode_id)
        else:
            intent = classify_intent_heuristic(params.user_text)
        relation = begun.relation.relation if begun.relation is not None else None
        plan = schedule_injection(intent, params.user_text, "follow_up" if relation == "append" else relation)
        repairs = await self._repairs_for(begun, params)
        if repairs:
            query.reason = "decision_repair"  # fresh repairs: that plan (low-value traces too) and its header
        result = await self._retriever.retrieve_safely(
            query,
            begun.owner,
            visible=VisibleContext.from_hints(begun.session_id, begun.episode_id, params.context_hints),
            deadline_at=deadline_at,
            injection=plan,
            query_vector=query_vector,
            repairs=repairs,
            channels=channels,
        )
        self._events.emit(
            EventType.RETRIEVAL_HIT if result.hits else EventType.RETRIEVAL_EMPTY,
            {"sessionId": begun.session_id, "episodeId": begun.episode_id, "hits": len(result.hits)},
        )
        wire = result.to_wire()
        duration = int((time.perf_counter() - started) * 1000)

        def save(db: Session) -> None:
            hotpath.save_turn_result(db, begun.turn_row_id, wire)
            repos.log_api_call(
                db,
                "memos_search",
                {
                    "type": "turn_start",
                    "sessionId": begun.session_id,
                    "episodeId": begun.episode_id,
                    "query": params.user_text[:500],
                },
                {"hits": len(result.hits), "stats": wire.get("stats")},
                duration,
                True,
                now_ms(),
            )

        # The saved result only serves a retry after a restart (in-process retries use `_inflight`), so the
        # write is not worth making the host wait for; a shutdown drains it.
        await self.write_behind.add("turn.start:save", save)
        access = self.on_recalled(result.hits)
        if access is not None:
            await self.write_behind.add("turn.start:access", access)
        return result

    async def _begin_turn(self, params: dto.TurnInputDTO, decide: Decide | None) -> _BegunTurn:
        """Route and record the turn in one write, which also commits the deferred writes earlier turns
        queued (their results and access counts).

        Why here: SQLite has one writer. Flushed apart, those writes ran just after a turn's answer, which
        under back-to-back turns is when the next turn's routing write arrives, and it then waited for them
        (5 ms on average, 16 ms at p95, at 10k steps). In this transaction they cost their own statements
        and no extra commit or wait. When this transaction does not commit, the writes go back to the queue
        for the next flush.
        """
        pending = self.write_behind.take()
        again: list[tuple[str, Write]] = []

        def begin(db: Session) -> _BegunTurn:
            # first, so a retried turn finds the result its first run queued
            again[:] = self.write_behind.apply(db, pending) if pending else []
            return self._begin_turn_sync(db, params, decide)

        try:
            begun = await write_first_wins(self._db, begin, what="turn.start")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.write_behind.put_back(pending)
            raise
        await self.write_behind.put_back(again)
        return begun

    async def _repairs_for(self, begun: _BegunTurn, params: dto.TurnInputDTO) -> list[dto.RepairDTO]:
        """A correction in this turn becomes a repair now (template: this is the hot path; the LLM rewords
        it in the background), and the session's fresh repairs that serve this turn's task are injected
        (`RepairService.active_guidance`: tool failures of the session, corrections of this task or of the task
        it asks again)."""
        if self.repairs is None or self._settings.lightweight:
            return []
        relation = begun.relation
        if relation is not None and relation.is_correction:
            made = await self.repairs.from_correction(
                begun.session_id, begun.episode_id, begun.owner, relation.correction_text, params.user_text
            )
            if made is not None and self._llm.available(begun.episode_id):
                repairs = self.repairs
                await self._background.submit("repair.refine", lambda: repairs.refine(made.id, params.user_text))
        return await self.repairs.active_guidance(
            begun.session_id, self.repairs.ctx.clock(), begun.episode_id, params.user_text
        )

    # ------------------------------------------------------------ turn.end

    def _resolve_turn_sync(
        self, db: Session, params: dto.TurnResultDTO, *, create: bool
    ) -> tuple[EpisodeRow, TurnRow | None]:
        """The episode and the user turn this turn.end answers; None when the turn must be created first."""
        if create:  # another service creating the same turn now waits, then finds it
            lock_rows(db, EpisodeRow, [params.episode_id])
        session = require_session_sync(db, params.session_id)
        episode = episode_of_session_sync(db, session, params.episode_id)
        new_text = params.user_text
        if new_text:
            # The host names the user turn: match it by text, so concurrent turn.end calls for different
            # turns never share a turn and a retry finds the turn it created before.
            turn = repos.find_turn_by_text(db, episode.id, text_hash(new_text))
        else:
            turn = repos.latest_turn(db, episode.id)  # the turn turn.start recorded
        if turn is None:
            if not create:
                return episode, None
            turn = record_turn_sync(db, session, episode, params.ts, new_text or "", None)
        return episode, turn

    def _plan_capture_sync(
        self, db: Session, params: dto.TurnResultDTO
    ) -> tuple[EpisodeRow, TurnRow | None, list[StepDraft], set[str]]:
        """Read-only: resolve the turn, split it into steps and find which steps are already stored."""
        episode, turn = self._resolve_turn_sync(db, params, create=False)
        if turn is None:
            return episode, None, [], set()
        steps = extract_steps(params, turn.user_text, turn.turn_id, self._settings.capture)
        return episode, turn, steps, set(repos.traces_by_keys(db, episode.id, [s.key for s in steps]))

    async def turn_end(self, params: dto.TurnResultDTO) -> dto.TurnEndResult:
        """Capture is bounded (`capture.concurrency`): under many hosts the queued captures wait here, not
        in front of other hosts' `turn.start` work for the database, the embedder and the CPU."""
        with self.gate.foreground():
            async with self._capture_slots.slot(urgent=False):
                return await self._turn_end(params)

    async def _turn_end(self, params: dto.TurnResultDTO) -> dto.TurnEndResult:
        started = time.perf_counter()
        # The common case (turn.start recorded the turn) needs one read here and one write below.
        episode, resolved, steps, known = await self._db.read(lambda db: self._plan_capture_sync(db, params))
        if resolved is None:
            episode, resolved = await write_first_wins(
                self._db, lambda db: self._resolve_turn_sync(db, params, create=True), what="turn.end"
            )
            assert resolved is not None
            steps = extract_steps(params, resolved.user_text, resolved.turn_id, self._settings.capture)
        turn = resolved
        self._events.enter(scope_of(episode))
        self.on_activity(episode.id)
        fresh = [s for s in steps if s.key not in known]
        vectors, embed_error = await self._embed_steps(fresh)

        def store(db: Session) -> tuple[list[str], list[TraceRow], Outbox]:
            outbox = Outbox()
            lock_rows(db, EpisodeRow, [episode.id])  # a retry in another service waits and finds these steps
            row = repos.get_episode(db, episode.id)
            assert row is not None  # episodes are only archived, never deleted while in use
            reopen_episode_sync(outbox, row)
            existing = repos.traces_by_keys(db, row.id, [s.key for s in steps])
            created: list[TraceRow] = []
            ids: list[str] = []
            for step in steps:
                if step.key in existing:
                    ids.append(existing[step.key].id)
                    continue
                trace = self._trace_row(row, turn, step, vectors)
                db.add(trace)  # flushed together below: one multi-row INSERT instead of one per step
                if step.key not in vectors:
                    self._queue_embedding_retry(db, trace, step, self._settings.embedding.step_vectors)
                created.append(trace)
                ids.append(trace.id)
            if created:
                db.flush()
                row.trace_ids_json = [*(row.trace_ids_json or []), *(t.id for t in created)]
            hotpath.end_turn(db, turn.id, params.ts)
            repos.log_api_call(
                db,
                "memory_add",
                {"sessionId": params.session_id, "episodeId": row.id, "steps": len(steps)},
                {
                    "created": len(created),
                    "deduplicated": len(steps) - len(created),
                    "embedError": embed_error,
                },
                int((time.perf_counter() - started) * 1000),
                True,
                now_ms(),
            )
            return ids, created, outbox

        ids, created, store_outbox = await write_first_wins(self._db, store, what="turn.end")
        for trace in created:
            self._vectors.upsert("trace", trace)
        self._sessions.publish(store_outbox)
        for trace in created:
            self._events.emit(
                EventType.TRACE_CREATED,
                {
                    "traceId": trace.id,
                    "episodeId": trace.episode_id,
                    "sessionId": trace.session_id,
                    "turnId": trace.turn_id,
                    "stepKind": trace.step_kind,
                    "summary": trace.summary,
                },
            )
        return dto.TurnEndResult(trace_id=ids[-1] if ids else "", trace_ids=ids, episode_id=episode.id)

    async def _embed_steps(self, steps: list[StepDraft]) -> tuple[dict[str, tuple[bytes, bytes]], str | None]:
        """Summary and action vectors for each step, in one batch; on failure capture goes on without."""
        if not steps:
            return {}, None
        pairs = [step.embed_texts(self._settings.embedding.step_vectors) for step in steps]
        texts = list(dict.fromkeys(text for pair in pairs for text in pair))  # equal texts embedded once
        try:
            matrix = await self._embedder.embed(texts, role="document")
        except MemosError as exc:
            log.warning("capture without vectors (queued for retry): %s", exc.message)
            return {}, exc.code.value
        blobs = {text: to_blob(np.asarray(matrix[i])) for i, text in enumerate(texts)}
        vectors = {
            step.key: (blobs[summary], blobs[action]) for step, (summary, action) in zip(steps, pairs, strict=True)
        }
        return vectors, None

    def _trace_row(
        self,
        episode: EpisodeRow,
        turn: TurnRow,
        step: StepDraft,
        vectors: dict[str, tuple[bytes, bytes]],
    ) -> TraceRow:
        vec_summary, vec_action = vectors.get(step.key, (None, None))
        return TraceRow(
            id=new_id("trace"),
            episode_id=episode.id,
            session_id=episode.session_id,
            ts=step.ts,
            turn_id=turn.turn_id,
            step_index=step.index,
            step_kind=step.kind,
            step_key=step.key,
            user_text=step.user_text,
            agent_text=step.agent_text,
            summary=step.summary,
            tool_calls_json=step.tool_calls,
            reflection=step.reflection,
            agent_thinking=step.thinking,
            tags_json=step.tags,
            error_signatures_json=step.error_signatures,
            vec_summary=vec_summary,
            vec_action=vec_action,
            meta_json={
                **({"failed": True} if step.failed else {}),
                **({"alpha": step.alpha} if step.alpha is not None else {}),
            },
            owner_agent_kind=episode.owner_agent_kind,
            owner_profile_id=episode.owner_profile_id,
            owner_workspace_id=episode.owner_workspace_id,
        )

    @staticmethod
    def _queue_embedding_retry(db: Session, trace: TraceRow, step: StepDraft, step_vectors: str) -> None:
        now = now_ms()
        for field_name, text in zip(("vec_summary", "vec_action"), step.embed_texts(step_vectors), strict=True):
            db.add(
                EmbeddingRetryRow(
                    target_kind="trace",
                    target_id=trace.id,
                    vector_field=field_name,
                    source_text=text,
                    embed_role="document",
                    status="pending",
                    next_attempt_at=now,
                    created_at=now,
                    updated_at=now,
                )
            )
