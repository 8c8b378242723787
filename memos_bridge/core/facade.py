"""MemoryCore: the one object the RPC layer talks to.

It wires storage, the embedder, the vector indexes, retrieval and the session/turn services together and
exposes one coroutine per contract method. It knows nothing about JSON-RPC or connections; the host LLM is
reached through the provider it was given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel
from sqlalchemy.orm import Session

from memos_bridge import __version__
from memos_bridge.config import Settings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core import analytics, purge, reflect, retrieval_log, stats, transfer
from memos_bridge.core import status as status_control
from memos_bridge.core.backfill import EmbeddingBackfill
from memos_bridge.core.background import BackgroundWork
from memos_bridge.core.cluster import EventRelay, follow_vectors, node_name
from memos_bridge.core.config_view import core_config
from memos_bridge.core.events import EventBus, scope_of
from memos_bridge.core.learning import experiences, skill_lifecycle, world_store
from memos_bridge.core.learning.claims import ChainClaims
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.repair import RepairService
from memos_bridge.core.learning.service import LearningService
from memos_bridge.core.mappers import episode_dto, feedback_dto, trace_dto
from memos_bridge.core.memories import MemoryService
from memos_bridge.core.memory_history import history_sync
from memos_bridge.core.namespace import list_scope, owner_for, row_scope
from memos_bridge.core.sessions import SessionService
from memos_bridge.core.strength import StrengthService
from memos_bridge.core.turns import TurnService
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.embedding.base import Embedder
from memos_bridge.heap import TrimStats, resident_mib
from memos_bridge.llm.apilog import DatabaseApiLogSink
from memos_bridge.llm.base import ChatMessage, LLMProvider
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.factory import build_llm_facade
from memos_bridge.retrieval.engine import Retriever
from memos_bridge.rules.secrets import Redactor
from memos_bridge.storage import repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.locks import is_shared
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)


class MemoryCore:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        embedder: Embedder,
        llm: LLMProvider,
        events: EventBus | None = None,
        connections: Any = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.embedder = embedder
        # `llm` is the host provider (or a ready facade, in tests); every LLM call goes through the facade,
        # which adds the configured provider, budgets, breakers and api_logs rows.
        self.llm = (
            llm if isinstance(llm, LLMFacade) else build_llm_facade(settings.llm, llm, sink=DatabaseApiLogSink(db))
        )
        self.events = events or EventBus()
        self.redactor = Redactor(
            enabled=settings.redaction.enabled,
            extra_patterns=settings.redaction.patterns,
            allow=settings.redaction.allow,
        )
        self._connections = connections  # callable returning the live connection count, set by the server
        #: `(host, port) -> (url, started)`: serves the web viewer from this process (set by the server).
        self.viewer_launcher: Callable[[str, int], Awaitable[tuple[str, bool]]] | None = None
        self._started = time.monotonic()
        self._schema_version: int | None = None
        self._backend: dto.StorageHealthDTO | None = None
        self.background = BackgroundWork()
        #: What the server's heap trimmer did (`memos_bridge.heap`), reported by `core.health`.
        self.heap_trims = TrimStats()
        self.vectors = VectorStore(db, embedder.dim)
        self.retriever = Retriever(db, embedder, self.vectors, settings.retrieval, self.llm)
        self.sessions = SessionService(db, self.events, settings.session)
        self.backfill = EmbeddingBackfill(db, embedder, self.vectors)
        self.turns = TurnService(
            db, embedder, self.vectors, self.retriever, self.sessions, self.events, settings, self.background, self.llm
        )
        self.learning = LearningService(
            LearningContext(db, self.vectors, embedder, self.llm, self.events, settings),
            lightweight=settings.lightweight,
            publish=self.sessions.publish,
        )
        self.sessions.finalized_hooks.append(self.learning.on_finalized)
        self.sessions.opened_hooks.append(self.turns.remember_owner)
        self.turns.gate = self.learning.gate
        self.turns.write_behind.quiet = self.learning.gate.wait_quiet
        self.turns.on_activity = self.learning.touch
        self.repair = RepairService(self.learning.ctx)
        self.learning.correction_repair = self.repair.from_feedback
        self.turns.repairs = self.repair
        self.strength = StrengthService(self.learning.ctx, quiet=self.learning.gate.wait_quiet)
        self.turns.on_recalled = self.strength.access_write  # recall counts access, never strength
        self.memories = MemoryService(self.learning.ctx)
        self.strength.expire = self.memories.expire  # each decay run archives the expired memories first
        self.retriever.min_strength = settings.strength.recall_floor
        self.retriever.min_world_confidence = settings.learning.world.min_confidence_for_retrieval
        self.retriever.priority_half_life_days = settings.learning.reward.half_life_days
        #: This process among the services that share its database (`core/cluster.py`); on PostgreSQL the
        #: learning queue claims chains in the database and events travel between the services.
        self.node = node_name()
        self.relay: EventRelay | None = None
        if db.is_open and is_shared(db.engine):
            self.learning.queue.claims = ChainClaims(db, self.node)
            self.relay = EventRelay(
                db, self.events, self.node, follow=lambda events: follow_vectors(db, self.vectors, events)
            )

    # ------------------------------------------------------------ lifecycle

    async def warmup(self) -> None:
        """Background warm-up after the server answers: load the model and the vector indexes."""
        try:
            await self.embedder.warmup()
            await self.vectors.load_all()
        except Exception:
            log.exception("warm-up failed; requests will retry lazily")

    async def run_shared(self) -> None:
        """Exchange events with the other services of a shared database until cancelled (start it in the
        server's task group; returns at once when the database is this process's alone)."""
        if self.relay is not None:
            await self.relay.run()

    async def drain(self) -> None:
        """Finish every piece of accepted work: the learning queue first (it may defer writes), then the
        deferred writes. The server calls this before it stops."""
        await self.learning.flush()
        await self.background.drain()
        await self.turns.write_behind.flush()

    async def shutdown(self) -> None:
        self.events.emit(EventType.SYSTEM_SHUTDOWN, {})
        await self.llm.aclose()
        self.embedder.close()
        self.db.close()

    # ------------------------------------------------------------ core.*

    async def _cached_schema_version(self) -> int:
        """Migrations only run at open, so the version is read once (off the event loop)."""
        if self._schema_version is None:
            self._schema_version = await anyio.to_thread.run_sync(self.db.schema_version)
        return self._schema_version

    async def _cached_backend(self) -> dto.StorageHealthDTO:
        """The backend does not change while the service runs: read once."""
        if self._backend is None:
            self._backend = dto.StorageHealthDTO.model_validate(await anyio.to_thread.run_sync(self.db.backend))
        return self._backend

    async def ping(self, _params: dto.EmptyParams | None = None) -> dto.PingResult:
        return dto.PingResult(ts=now_ms())

    async def health(self, _params: dto.EmptyParams | None = None) -> dto.CoreHealthDTO:
        embed = self.embedder.status()
        return dto.CoreHealthDTO(
            ok=True,
            version=__version__,
            uptime_ms=int((time.monotonic() - self._started) * 1000),
            schema_version=await self._cached_schema_version(),
            lightweight=self.settings.lightweight,
            paths=dto.HealthPathsDTO(
                home=str(self.settings.home),
                config=str(self.settings.config_path),
                db=self.redactor.redact(self.settings.database_url, count=False),
                logs=str(self.settings.logs_dir),
            ),
            llm=dto.ModelHealthDTO(
                available=self.llm.available(), provider=self.llm.name, model=self.llm.name, loaded=True
            ),
            embedder=dto.ModelHealthDTO(
                available=embed.available,
                provider=embed.provider,
                model=embed.model,
                loaded=embed.loaded,
                dim=embed.dim,
                last_ok_at=embed.last_ok_at,
                last_error=embed.last_error,
            ),
            connections=self._connections() if callable(self._connections) else 0,
            learning=dto.LearningHealthDTO(
                pending=len(self.learning.queue.pending),
                running=len(self.learning.queue.running),
                chains_run=self.learning.queue.stats.chains_run,
                chains_failed=self.learning.queue.stats.chains_failed,
                last_error=self.learning.queue.stats.last_error,
                stages=self.learning.timings.health() or None,
            ),
            llm_usage=self.llm.stats(),
            redactions=self._redaction_health(),
            storage=await self._cached_backend(),
            process=dto.ProcessHealthDTO(
                rss_mib=None if (rss := resident_mib()) is None else round(rss, 1),
                heap_trims=self.heap_trims.runs,
                heap_released_mib=round(self.heap_trims.released_mib, 1),
                vector_rows=(rows := self.vectors.held_rows()),
                vector_mib=round(rows * self.vectors.dim * 4 / 2**20, 1),
            ),
        )

    @property
    def home(self) -> Path:
        """The data home: the folder whose files (exports) the service may read and write for any caller."""
        return self.settings.home

    def redact(self, params: BaseModel) -> BaseModel:
        """`params` with every secret replaced (the same object when it held none): applied to each request
        before any method sees it."""
        return self.redactor.redact_model(params)

    def _redaction_health(self) -> dto.RedactionHealthDTO:
        counts = self.redactor.counts()
        return dto.RedactionHealthDTO(enabled=self.redactor.enabled, total=sum(counts.values()), by_kind=counts)

    async def namespaces(self, _params: dto.EmptyParams | None = None) -> dto.NamespacesResult:
        def work(db: Session) -> dto.NamespacesResult:
            return dto.NamespacesResult(
                namespaces=[
                    dto.NamespaceSummaryDTO(
                        agent_kind=agent, profile_id=profile, workspace_id=workspace, sessions=count, last_seen_at=seen
                    )
                    for agent, profile, workspace, count, seen in repos.namespace_summaries(db)
                ]
            )

        return await self.db.read(work)

    async def config(self, _params: dto.EmptyParams | None = None) -> dto.CoreConfigResult:
        """The effective settings, secrets masked (read-only: settings change by file or env and a restart)."""
        return core_config(self.settings)

    async def start_viewer(self, params: dto.ViewerStartParams) -> dto.ViewerStartResult:
        """Serve the web viewer from this process; the server that runs the core sets `viewer_launcher` (a core
        used without a server, in tests or a script, has no viewer to start)."""
        if self.viewer_launcher is None:
            raise MemosError(ErrorCode.INVALID_ARGUMENT, "this process cannot serve the viewer")
        url, started = await self.viewer_launcher(params.host, params.port)
        return dto.ViewerStartResult(url=url, started=started)

    async def llm_test(self, params: dto.LlmTestParams) -> dto.LlmTestResult:
        started = time.perf_counter()
        try:
            completion = await self.llm.complete(
                [ChatMessage("user", params.prompt)], timeout_ms=params.timeout_ms, max_tokens=64, op="llm.test"
            )
        except MemosError as exc:
            return dto.LlmTestResult(
                ok=False,
                provider=self.llm.name,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
                error=dto.ErrorData(code=exc.code.value, message=exc.message),
            )
        return dto.LlmTestResult(
            ok=True,
            provider=completion.provider,
            text=completion.text,
            model=completion.model,
            duration_ms=round(completion.duration_ms, 2),
        )

    # ------------------------------------------------------------ sessions / turns

    async def open_session(self, params: dto.SessionOpenParams) -> dto.SessionOpenResult:
        return await self.sessions.open_session(params)

    async def close_session(self, params: dto.SessionCloseParams) -> dto.OkResult:
        result = await self.sessions.close_session(params)
        await self.learning.flush()  # the session's last task is learned before the host moves on
        return result

    async def open_episode(self, params: dto.EpisodeOpenParams) -> dto.EpisodeOpenResult:
        return await self.sessions.open_episode(params)

    async def close_episode(self, params: dto.EpisodeCloseParams) -> dto.OkResult:
        return await self.sessions.close_episode(params)

    async def turn_start(self, params: dto.TurnInputDTO) -> dto.RetrievalResultDTO:
        return await self.turns.turn_start(params)

    async def turn_end(self, params: dto.TurnResultDTO) -> dto.TurnEndResult:
        return await self.turns.turn_end(params)

    # ------------------------------------------------------------ learning

    async def submit_feedback(self, params: dto.FeedbackSubmitParams) -> dto.FeedbackDTO:
        return await self.learning.submit_feedback(params)

    async def tool_outcome(self, params: dto.ToolOutcomeParams) -> dto.ToolOutcomeResult:
        return await self.repair.record_tool_outcome(params)

    async def flush(self, _params: dto.EmptyParams | None = None) -> dto.FlushResult:
        result = await self.learning.flush()
        await self.background.drain()
        await self.turns.write_behind.flush()
        return result

    # ------------------------------------------------------------ memory reads

    async def search(self, params: dto.MemorySearchParams) -> dto.RetrievalResultDTO:
        owner = await self.db.read(
            lambda db: list_scope(
                db, params.namespace, agent=params.agent, session_id=params.session_id, episode_id=params.episode_id
            )
        )
        result = await self.retriever.search(params, owner)
        access = self.strength.access_write(result.hits)
        if access is not None:
            await self.turns.write_behind.add("memory.search:access", access)
        return result

    async def get_trace(self, params: dto.GetByIdParams) -> dto.TraceDTO | None:
        def work(db: Session) -> dto.TraceDTO | None:
            owner = row_scope(db, params.namespace, session_id=params.session_id)
            row = repos.get_trace(db, params.id)
            if row is None or (owner is not None and not owner.can_see(row)):
                return None
            return trace_dto(row, repos.episode_status(db, [row.episode_id]).get(row.episode_id))

        return await self.db.read(work)

    async def timeline(self, params: dto.TimelineParams) -> dto.TracesResult:
        def work(db: Session) -> dto.TracesResult:
            owner = row_scope(db, params.namespace, session_id=params.session_id)
            episode = repos.get_episode(db, params.episode_id)
            if episode is None or (owner is not None and not owner.can_see(episode)):
                raise MemosError(ErrorCode.EPISODE_NOT_FOUND, f"episode not found: {params.episode_id}")
            rows = repos.timeline(
                db, episode, limit=params.limit, offset=params.offset, include_forgotten=params.include_forgotten
            )
            status = (episode.status, episode.r_task)
            return dto.TracesResult(traces=[trace_dto(row, status) for row in rows])

        return await self.db.read(work)

    async def list_traces(self, params: dto.ListTracesParams) -> dto.TracesResult:
        def work(db: Session) -> dto.TracesResult:
            owner = list_scope(db, params.namespace, session_id=params.session_id, episode_id=params.episode_id)
            rows = repos.list_traces(
                db,
                owner,
                session_id=params.session_id,
                episode_id=params.episode_id,
                substring=params.q,
                limit=params.limit,
                offset=params.offset,
                include_forgotten=params.include_forgotten,
            )
            statuses = repos.episode_status(db, (row.episode_id for row in rows))
            return dto.TracesResult(traces=[trace_dto(row, statuses.get(row.episode_id)) for row in rows])

        return await self.db.read(work)

    async def list_feedback(self, params: dto.ListFeedbackParams) -> dto.FeedbackListResult:
        def work(db: Session) -> dto.FeedbackListResult:
            owner = list_scope(db, params.namespace, session_id=params.session_id, episode_id=params.episode_id)
            rows = repos.list_feedback(
                db, owner, episode_id=params.episode_id, limit=params.limit, offset=params.offset
            )
            return dto.FeedbackListResult(feedback=[feedback_dto(row) for row in rows])

        return await self.db.read(work)

    async def list_episodes(self, params: dto.ListEpisodesParams) -> dto.ListEpisodesResult:
        def work(db: Session) -> dto.ListEpisodesResult:
            owner = list_scope(db, params.namespace, session_id=params.session_id)
            rows = repos.list_episodes(
                db,
                owner,
                session_id=params.session_id,
                status=params.status,
                limit=params.limit,
                offset=params.offset,
            )
            previews = repos.first_user_texts(db, [row.id for row in rows])
            return dto.ListEpisodesResult(
                episode_ids=[row.id for row in rows],
                episodes=[episode_dto(row, _preview(row, previews)) for row in rows],
            )

        return await self.db.read(work)

    async def get_policy(self, params: dto.GetByIdParams) -> dto.PolicyDTO | None:
        return await experiences.get_policy(self.db, params)

    async def list_policies(self, params: dto.ListPoliciesParams) -> dto.PoliciesResult:
        return await experiences.list_policies(self.db, params)

    async def get_world(self, params: dto.GetByIdParams) -> dto.WorldModelDTO | None:
        return await self.db.read(
            lambda db: world_store.get_world(
                db, params.id, row_scope(db, params.namespace, session_id=params.session_id)
            )
        )

    async def list_world_models(self, params: dto.ListWorldModelsParams) -> dto.WorldModelsResult:
        return await self.db.read(
            lambda db: world_store.list_worlds(
                db,
                list_scope(db, params.namespace, session_id=params.session_id),
                params.status,
                params.limit,
                params.offset,
                include_forgotten=params.include_forgotten,
            )
        )

    # ------------------------------------------------------------ strength, forgetting, pinning, links

    async def reinforce(self, params: dto.MemoryReinforceParams) -> dto.MemoryReinforceResult:
        return await self.strength.reinforce(params)

    async def decay(self, params: dto.MemoryDecayParams) -> dto.MemoryDecayResult:
        return await self.strength.decay(params)

    async def pin(self, params: dto.MemoryRefParams) -> dto.OkResult:
        return await self.strength.pin(params)

    async def unpin(self, params: dto.MemoryRefParams) -> dto.OkResult:
        return await self.strength.unpin(params)

    async def restore(self, params: dto.MemoryRefParams) -> dto.OkResult:
        return await self.strength.restore(params)

    async def link(self, params: dto.MemoryLinkParams) -> dto.OkResult:
        return await self.strength.link(params)

    async def set_status(self, params: dto.MemorySetStatusParams) -> dto.MemorySetStatusResult:
        return await status_control.set_status(self.learning.ctx, params)

    # ------------------------------------------------------------ memories written on purpose, edits

    async def remember(self, params: dto.MemoryRememberParams) -> dto.MemoryRememberResult:
        return await self.memories.remember(params)

    async def get_memory(self, params: dto.GetByIdParams) -> dto.RememberedMemoryDTO | None:
        return await self.memories.get_memory(params)

    async def list_memories(self, params: dto.ListMemoriesParams) -> dto.MemoriesResult:
        return await self.memories.list_memories(params)

    async def update_memory(self, params: dto.MemoryUpdateParams) -> dto.MemoryUpdateResult:
        memory_id, changed = await self.memories.update(params)
        current = await self.get_any(params.kind, memory_id)
        return dto.MemoryUpdateResult(
            id=memory_id,
            kind=params.kind,
            changed=changed,
            memory={} if current is None else current.model_dump(mode="json", by_alias=True, exclude_none=True),
        )

    async def get_any(self, kind: str, memory_id: str) -> BaseModel | None:
        """A memory of any kind by id, as its kind's get method returns it (the id alone names its namespace)."""
        by_id = dto.GetByIdParams(id=memory_id)
        if kind == "memory":
            return await self.get_memory(by_id)
        if kind == "policy":
            return await self.get_policy(by_id)
        if kind == "world_model":
            return await self.get_world(by_id)
        if kind == "skill":
            return await self.get_skill(dto.SkillGetParams(id=memory_id))
        return await self.get_trace(by_id)

    async def forget(self, params: dto.MemoryForgetParams) -> dto.MemoryForgetResult:
        return await self.memories.forget(params)

    async def history(self, params: dto.MemoryHistoryParams) -> dto.MemoryHistoryResult:
        return await self.db.read(lambda db: history_sync(db, params))

    async def purge(self, params: dto.MemoryPurgeParams) -> dto.MemoryPurgeResult:
        return await purge.purge(self.learning.ctx, params)

    async def export(self, params: dto.MemoryExportParams) -> dto.MemoryExportResult:
        return await transfer.export_memories(self.learning.ctx, params)

    async def import_memories(self, params: dto.MemoryImportParams) -> dto.MemoryImportResult:
        return await transfer.import_memories(self.learning.ctx, params)

    async def reflect(self, params: dto.MemoryReflectParams) -> dto.MemoryReflectResult:
        return await reflect.reflect(self.learning, self.memories, params)

    async def stats(self, params: dto.MemoryStatsParams) -> dto.MemoryStatsResult:
        return await self.db.read(lambda db: stats.stats_sync(db, params))

    async def retrieval_log(self, params: dto.RetrievalLogParams) -> dto.RetrievalLogResult:
        # A turn's cached result and log row are written just after its answer: store the queued ones first,
        # so a viewer refreshed right after a turn shows it.
        await self.turns.write_behind.flush()
        return await self.db.read(lambda db: retrieval_log.retrieval_log_sync(db, params))

    async def analytics(self, params: dto.AnalyticsParams) -> dto.AnalyticsResultDTO:
        # The same for the LLM facade's queued log rows (bounded wait: a stuck queue must not stall a chart).
        await self.turns.write_behind.flush()
        await self.llm.flush_logs(timeout_s=1.0)
        return await self.db.read(lambda db: analytics.analytics_sync(db, params))

    # ------------------------------------------------------------ skills

    async def list_skills(self, params: dto.SkillListParams) -> dto.SkillListResult:
        return await skill_lifecycle.list_skills(self.learning.ctx, params)

    async def get_skill(self, params: dto.SkillGetParams) -> dto.SkillDTO | None:
        return await skill_lifecycle.get_skill(self.learning.ctx, params)

    async def archive_skill(self, params: dto.SkillArchiveParams) -> dto.OkResult:
        return await skill_lifecycle.archive_skill(self.learning.ctx, params)

    async def restore_skill(self, params: dto.SkillIdParams) -> dto.OkResult:
        return await skill_lifecycle.restore_skill(self.learning.ctx, params)

    async def review_skill(self, params: dto.SkillReviewParams) -> dto.SkillReviewResult:
        return await skill_lifecycle.review_skill(self.learning.ctx, params)

    # ------------------------------------------------------------ events

    async def subscribe_events(self, params: dto.EventsSubscribeParams) -> dto.OkResult:
        """The caller's connection receives a further namespace's events (the `"*"` gate is the handler's)."""
        if params.namespace == dto.ALL_NAMESPACES:
            self.events.watch_all()
        else:
            owner = owner_for("unknown", params.namespace)
            self.events.enter(scope_of(owner))
        return dto.OkResult()


def _preview(row: Any, first_user_texts: dict[str, str]) -> str:
    """The LLM's task title when the episode has one (set by the reward stage), else its first request."""
    titled = ((row.meta_json or {}).get("reward") or {}).get("summary") or {}
    return str(titled.get("title") or first_user_texts.get(row.id, ""))
