"""The tiered hybrid retrieval engine.

Tiers: T1 skills; T2 traces, episode roll-ups ("similar past tasks") and experiences (policies of every
type); T3 world models. Each entry point has a plan (which tiers, how many per tier). For every tier the
channels run concurrently: vector (traces: summary and action vectors; others: one vector), full-text word
and trigram (SQLite FTS5; PostgreSQL tsvector and 3-gram indexes), pattern (LIKE, for 2-character words and
CJK bigrams), exact identifiers, and, for traces, structural error-signature match. Everything is filtered by
the caller's namespace inside each channel.

Candidates are fused and ranked in `fusion.py`, hydrated from the database (eligibility: archived rows
never, candidate/active policies, skills above the reliability floor, active world models), turned into
roll-ups where several steps of one past task matched, and rendered by `render.py`.

`retrieve_safely` turns any failure or an exhausted deadline into an empty result with a reason: a turn
never fails because of retrieval.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import numpy as np
from sqlalchemy.orm import Session

from memos_bridge.config import RetrievalSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core import reward, strength_rules
from memos_bridge.core.capture import extract_error_signatures, tool_signature
from memos_bridge.core.vector_store import FIELDS as VECTOR_FIELDS
from memos_bridge.core.vector_store import VectorJob, VectorStore
from memos_bridge.embedding.base import Embedder
from memos_bridge.llm.base import LLMProvider
from memos_bridge.retrieval import explain, fusion, work_gate
from memos_bridge.retrieval.fusion import Candidate, CandidateKind
from memos_bridge.retrieval.intent import InjectionPlan
from memos_bridge.retrieval.llm_filter import llm_filter
from memos_bridge.retrieval.query import KeywordQuery, keyword_query
from memos_bridge.retrieval.render import (
    EpisodeSnippet,
    ExperienceSnippet,
    MemorySnippet,
    RenderInput,
    RenderOptions,
    SkillSnippet,
    TraceSnippet,
    WorldSnippet,
    render_block,
    skill_summary,
    without_task_quote,
)
from memos_bridge.rules.block_filter import BlockValues
from memos_bridge.rules.lessons import specific_tokens
from memos_bridge.rules.scope import bears_on
from memos_bridge.rules.subjects import FILE, identifiers, mentions, requested_outputs, shares_words
from memos_bridge.rules.text import clip
from memos_bridge.storage import hotpath
from memos_bridge.storage.database import Database
from memos_bridge.storage.fts import FtsKind, Tokenizer, fts_search, pattern_search
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import vector_from_text
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

TIER_OF: dict[str, int] = {"skill": 1, "memory": 2, "trace": 2, "policy": 2, "world_model": 3}
CANDIDATE_KIND: dict[str, CandidateKind] = {
    "skill": "skill",
    "memory": "memory",
    "trace": "trace",
    "policy": "experience",
    "world_model": "world_model",
}
REF_KIND: dict[str, Any] = {
    "skill": "skill",
    "memory": "memory",
    "trace": "trace",
    "episode": "episode",
    "experience": "experience",
    "world_model": "world-model",
}
ALL_CHANNELS = fusion.VECTOR_CHANNELS | fusion.KEYWORD_CHANNELS | fusion.STRUCTURAL_CHANNELS
EPISODE_GOAL_MIN_SIM = 0.45
MAX_ROLLUPS = 3
# Of a turn's deadline, the part kept for hydration, ranking and rendering once the channels stop: a share of
# the time left (a busy machine slows the hydration read too), at least the floor, at most the ceiling.
RENDER_RESERVE_SHARE = 0.15
RENDER_RESERVE_MIN_S = 0.03
RENDER_RESERVE_MAX_S = 0.15


def render_reserve_s(left_s: float) -> float:
    """Seconds of `left_s` kept back from the channels for the work after them."""
    return min(RENDER_RESERVE_MAX_S, max(RENDER_RESERVE_MIN_S, left_s * RENDER_RESERVE_SHARE))


GOAL_MARGIN = 0.05  # a roll-up needs the task's goal to match about as well as its best step
WORLD_MIN_SIM = 0.15
WORLD_MIN_CONFIDENCE = 0.2  # reference minConfidenceForRetrieval, which its Tier-3 never applied
MIN_SKILL_ETA = 0.1
LONG_IDENTIFIER = 8
MAX_QUERY_CHARS = 1500


def kind_owner(kind: str, owner: OwnerFilter | None) -> OwnerFilter | None:
    """The namespace a kind is searched in. Memories written on purpose belong to the profile and workspace,
    not to the agent kind that wrote them: a rule remembered through the CLI or an MCP host applies to the
    Hermes agent of the same profile too. Every learnt kind stays with its agent kind."""
    if kind == "memory" and owner is not None:
        return owner.every_agent()
    return owner


def retrieval_text(text: str) -> str:
    """The part of a request that is embedded and searched (callers that prefetch its vector use it too)."""
    return text.strip()[:MAX_QUERY_CHARS]


@dataclass(frozen=True)
class VisibleContext:
    """What the host still has in its context window, so retrieval does not inject it again.

    The current episode is always visible. A host that compressed its context reports where the visible
    window starts (`contextHints.visibleContextStartTs`) or which user texts are still visible
    (`visibleContextUserTexts`); older steps of the same session are then recallable again.
    """

    session_id: str
    episode_id: str | None
    start_ts: int | None = None
    user_texts: frozenset[str] = frozenset()

    @classmethod
    def from_hints(cls, session_id: str, episode_id: str | None, hints: dict[str, Any] | None) -> VisibleContext:
        hints = hints or {}
        start = hints.get("visibleContextStartTs")
        texts = hints.get("visibleContextUserTexts")
        return cls(
            session_id=session_id,
            episode_id=episode_id,
            start_ts=int(start) if isinstance(start, int | float) and not isinstance(start, bool) else None,
            user_texts=frozenset(t for t in texts if isinstance(t, str)) if isinstance(texts, list) else frozenset(),
        )

    def hides(self, row: Any) -> bool:
        if self.episode_id and row.episode_id == self.episode_id:
            return True
        if row.session_id != self.session_id:
            return False
        if self.start_ts is not None and row.ts >= self.start_ts:
            return True
        return bool(self.user_texts) and row.user_text in self.user_texts


class QueryVector:
    """A query embedding started early (as soon as the request arrives) that the channels then await.

    `start` runs it in the caller's task group; `wait` returns the vector or raises what the embedder
    raised. If the computation was cancelled before it finished, `wait` reports the embedder as unavailable.
    """

    def __init__(self) -> None:
        self._done = anyio.Event()
        self._vector: np.ndarray | None = None
        self._error: MemosError | None = None
        self.text: str | None = None

    def start(self, group: anyio.abc.TaskGroup, embedder: Embedder, text: str) -> None:
        self.text = text
        group.start_soon(self._compute, embedder, text)

    async def _compute(self, embedder: Embedder, text: str) -> None:
        try:
            self._vector = np.asarray((await embedder.embed([text], role="query"))[0])
        except MemosError as exc:
            self._error = exc
        finally:
            self._done.set()

    async def wait(self) -> np.ndarray:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        if self._vector is None:
            raise MemosError(ErrorCode.EMBEDDING_UNAVAILABLE, "query embedding was cancelled")
        return self._vector


SqlCall = Callable[[Session], list[tuple[str, float]]]


@dataclass(frozen=True)
class Plan:
    reason: str
    caps: dict[int, int]
    include_low_value: bool = False


def plan_for(reason: str, settings: RetrievalSettings, top_k: dto.TopKDTO | None = None) -> Plan:
    """Tier plan of an entry point; `top_k` (memory.search) overrides any tier, skills included."""
    defaults = {1: settings.tier1_top_k, 2: settings.tier2_top_k, 3: settings.tier3_top_k}
    tiers = {
        "turn_start": (1, 2, 3),
        "tool_driven": (1, 2, 3),
        "skill_invoke": (1, 2),
        "decision_repair": (1, 2, 3),  # a repair adds guidance; the environment knowledge still applies
    }.get(reason, (1, 2, 3))
    caps = {tier: defaults[tier] for tier in tiers}
    if reason == "skill_invoke":
        caps[2] = min(caps[2], 2)
    if top_k is not None:
        for tier, value in ((1, top_k.tier1), (2, top_k.tier2), (3, top_k.tier3)):
            if value is not None:
                caps[tier] = value
    return Plan(reason, {t: c for t, c in caps.items() if c > 0}, include_low_value=reason == "decision_repair")


def pool_size(plan: Plan) -> int:
    """Candidates each vector channel returns for a plan: a few times the largest tier cap."""
    return max(max(plan.caps.values(), default=0) * 4, 20)


def _allowed_channels(filters: dict[str, Any] | None) -> frozenset[str] | None:
    """`filters.channels`: ["vector"], ["keyword"], or explicit channel names; None = all."""
    if not filters or not filters.get("channels"):
        return None
    wanted: set[str] = set()
    for name in filters["channels"]:
        if name == "vector":
            wanted |= fusion.VECTOR_CHANNELS
        elif name == "keyword":
            wanted |= fusion.KEYWORD_CHANNELS | fusion.STRUCTURAL_CHANNELS
        else:
            wanted.add(str(name))
    return frozenset(wanted)


class _Collector:
    """Candidates found so far, keyed by (kind, id)."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Candidate] = {}

    def record(self, kind: str, channel: str, results: list[tuple[str, float]]) -> None:
        for rank, (ref_id, score) in enumerate(results):
            cand = self.by_key.get((kind, ref_id))
            if cand is None:
                cand = self.by_key[(kind, ref_id)] = Candidate(
                    kind=CANDIDATE_KIND[kind], ref_id=ref_id, tier=TIER_OF[kind]
                )
            cand.add(channel, rank, score)


@dataclass(frozen=True)
class _Loaded:
    """What `Retriever._load_sync` read: eligible candidates, roll-up steps, linked policy guidance."""

    candidates: list[Candidate]
    steps: dict[str, list[Any]]
    guidance: list[Any]
    # the steps each candidate experience, and each candidate skill's source policy, was distilled from
    sources: dict[str, list[str]] = field(default_factory=dict)
    # the summary vector of each roll-up episode's first step (its goal), by trace id
    goals: dict[str, np.ndarray] = field(default_factory=dict)
    # what the subject gate decided for each candidate lesson or world model, with it (`retrieval.explain`)
    verdicts: dict[str, tuple[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ChannelSpec:
    """What a query's channels depend on: the text, the caller's namespace, the kinds searched, the allowed
    channels and the vector pool size. Nothing about the routed episode: that only decides which of the
    channels' finds are eligible (hydration)."""

    text: str
    owner: OwnerFilter | None
    kinds: tuple[str, ...]
    allowed: frozenset[str] | None
    pool: int

    def serves(self, other: ChannelSpec) -> bool:
        """Whether a run for this spec found everything a run for `other` would (its kinds included)."""
        return (
            self.text == other.text
            and self.owner == other.owner
            and self.allowed == other.allowed
            and self.pool >= other.pool
            and set(other.kinds) <= set(self.kinds)
        )


class ChannelRun:
    """Every channel of one query: the keyword channels (one worker-thread hop), the query embedding and then
    the vector channels, concurrently; finds accumulate in `collector` as each part finishes.

    `turn.start` starts a run before the turn is routed (for a session whose namespace it knows), so the
    channels overlap the routing write instead of waiting for it; retrieval then waits for the run with its
    own deadline and uses what it has found by then (`degraded` says what was missing).
    """

    def __init__(self, retriever: Retriever, spec: ChannelSpec, query_vector: QueryVector | None = None) -> None:
        self.spec = spec
        self._query_vector = query_vector if query_vector is not None and query_vector.text == spec.text else None
        self.collector = _Collector()
        self.degraded: list[str] = []
        self.tier_ms: dict[int, float] = {}
        self.query_vec: np.ndarray | None = None
        self._retriever = retriever
        self._done = anyio.Event()
        self.started = False

    def start(self, group: anyio.abc.TaskGroup) -> None:
        self.started = True
        group.start_soon(self.run)

    async def wait(self) -> None:
        await self._done.wait()

    async def run(self) -> None:
        self.started = True
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._keywords)  # they need no query vector: they run while it embeds
                self.query_vec = await self._embed()
                if self.query_vec is not None:
                    await self._vectors(self.query_vec)
        finally:
            self._done.set()

    def _add_time(self, kind: str, seconds: float) -> None:
        tier = TIER_OF[kind]
        self.tier_ms[tier] = self.tier_ms.get(tier, 0.0) + seconds * 1000

    async def _keywords(self) -> None:
        spec = self.spec
        keywords = keyword_query(spec.text)
        signatures = extract_error_signatures([spec.text], 6)
        jobs = [
            (kind, name, call)
            for kind in spec.kinds
            for name, call in self._retriever._channels(
                kind, keywords, signatures, kind_owner(kind, spec.owner), spec.allowed
            )
        ]
        if not jobs:
            return

        def run_sql(db: Session) -> list[tuple[str, str, list[tuple[str, float]] | None, float]]:
            """Every keyword channel in ONE worker-thread hop (dozens of hops cost more than the SQL)."""
            out: list[tuple[str, str, list[tuple[str, float]] | None, float]] = []
            for kind, name, call in jobs:
                started = time.perf_counter()
                try:
                    out.append((kind, name, call(db), time.perf_counter() - started))
                except Exception:
                    log.exception("retrieval channel %s/%s failed", kind, name)
                    out.append((kind, name, None, time.perf_counter() - started))
            return out

        for kind, name, found, seconds in await self._retriever._db.read(run_sql, abandon_on_cancel=True):
            self._add_time(kind, seconds)
            if found is None:
                self.degraded.append(f"{kind}:{name}")
            else:
                self.collector.record(kind, name, found)

    async def _embed(self) -> np.ndarray | None:
        allowed = self.spec.allowed
        if allowed is not None and not (allowed & fusion.VECTOR_CHANNELS):
            return None
        try:
            if self._query_vector is not None:
                return await self._query_vector.wait()
            return np.asarray((await self._retriever._embedder.embed([self.spec.text], role="query"))[0])
        except MemosError as exc:
            self.degraded.append(f"embedding:{exc.code.value}")  # keyword channels still run
            return None

    async def _vectors(self, query_vec: np.ndarray) -> None:
        """Every vector channel of the plan (traces: summary and action vectors; others: one vector)."""
        spec = self.spec
        settings = self._retriever._settings
        jobs = [
            VectorJob(
                kind,
                field,
                spec.pool,
                WORLD_MIN_SIM if kind == "world_model" else settings.min_trace_sim,
                owner=kind_owner(kind, spec.owner),
                own_owner=kind == "memory",
            )
            for kind in spec.kinds
            for field in VECTOR_FIELDS[kind]
            if spec.allowed is None or field in spec.allowed
        ]
        if not jobs:
            return
        started = time.perf_counter()
        try:
            results = await self._retriever._vectors.search_many(jobs, query_vec, spec.owner)
        except Exception:
            log.exception("vector channels failed")
            self.degraded.extend(f"{job.kind}:{job.field}" for job in jobs)
            return
        for job, found in zip(jobs, results, strict=True):
            self._add_time(job.kind, (time.perf_counter() - started) / len(jobs))
            if found:
                floor = max(job.min_score or 0.0, found[0][1] * 0.45)  # adaptive: far below the best is noise
                self.collector.record(job.kind, job.field, [(i, score) for i, score in found if score >= floor])


class Retriever:
    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        vectors: VectorStore,
        settings: RetrievalSettings,
        llm: LLMProvider | None = None,
    ) -> None:
        self._db = db
        self._embedder = embedder
        self._vectors = vectors
        self._settings = settings
        self._llm = llm if settings.llm_filter else None
        self.min_strength = 0.0  # memories weaker than this are not recalled (MemoryCore: strength.recall_floor)
        self.min_world_confidence = WORLD_MIN_CONFIDENCE  # MemoryCore: learning.world.min_confidence_for_retrieval
        self.priority_half_life_days = reward.DECAY_HALF_LIFE_DAYS  # MemoryCore: learning.reward.half_life_days

    # ------------------------------------------------------------ entry points

    async def retrieve_safely(
        self,
        query: dto.RetrievalQueryDTO,
        owner: OwnerFilter | None,
        *,
        visible: VisibleContext | None,
        deadline_at: int,
        top_k: dto.TopKDTO | None = None,
        injection: InjectionPlan | None = None,
        query_vector: QueryVector | None = None,
        repairs: list[dto.RepairDTO] | None = None,
        channels: ChannelRun | None = None,
    ) -> dto.RetrievalResultDTO:
        """Retrieve for `query`; `injection` (from the intent scheduler) may skip retrieval or narrow the tiers;
        `query_vector`, when started by the caller for the same `retrieval_text`, replaces the embedding;
        `channels`, a run the caller started early (`turn_start_channels`), replaces running them when it
        serves this query; `repairs` (the session's fresh decision repairs) are rendered first as decision
        guidance."""
        started = time.perf_counter()
        remaining_s = (deadline_at - now_ms()) / 1000
        stats = dto.RetrievalStatsDTO(scenario=injection.scenario if injection else None)
        hits: list[dto.RetrievalHitDTO] = []
        context = ""
        latency = dto.TierLatencyDTO()
        if injection is not None and not injection.retrieve:
            stats.skipped_reason = injection.scenario  # chitchat and /memos commands get no memories
        elif not query.query.strip():
            stats.skipped_reason = "empty_query"
        elif remaining_s <= 0:
            stats.skipped_reason = "deadline"
        else:
            try:
                with anyio.fail_after(remaining_s):
                    hits, context, found, latency = await self._retrieve(
                        query, owner, visible, top_k, injection, deadline_at, query_vector, repairs or [], channels
                    )
                found.scenario = stats.scenario
                stats = found
            except TimeoutError:
                stats = dto.RetrievalStatsDTO(skipped_reason="deadline", scenario=stats.scenario)
                log.warning("retrieval hit the deadline (%.0f ms)", remaining_s * 1000)
            except Exception:
                log.exception("retrieval failed; returning an empty result")
                stats = dto.RetrievalStatsDTO(skipped_reason="error", scenario=stats.scenario)
        skipped_by_intent = injection is not None and not injection.retrieve
        if not context and repairs and not skipped_by_intent:
            # nothing recalled (or retrieval failed): the session's fresh repairs are still worth injecting
            only = RenderInput(
                repair_preference=[r.preference for r in repairs],
                repair_anti_pattern=[r.anti_pattern for r in repairs],
            )
            context = render_block(only, reason="decision_repair", options=self._render_options(query.render))
        stats.total_ms = round((time.perf_counter() - started) * 1000, 2)
        return dto.RetrievalResultDTO(
            query=query, hits=hits, injected_context=context, tier_latency_ms=latency, stats=stats
        )

    def turn_start_channels(
        self, text: str, owner: OwnerFilter | None, tiers: frozenset[int], query_vector: QueryVector | None
    ) -> ChannelRun:
        """An unstarted run of a `turn.start` query's channels over `tiers` (a retrieval of any entry point
        with the same text, namespace and no more tiers is served by it)."""
        plan = plan_for("turn_start", self._settings)
        spec = ChannelSpec(
            text=retrieval_text(text),
            owner=owner,
            kinds=tuple(kind for kind, tier in TIER_OF.items() if tier in plan.caps and tier in tiers),
            allowed=None,
            pool=pool_size(plan),
        )
        return ChannelRun(self, spec, query_vector)

    async def search(self, params: dto.MemorySearchParams, owner: OwnerFilter | None) -> dto.RetrievalResultDTO:
        query = dto.RetrievalQueryDTO(
            agent=params.agent,
            namespace=params.namespace if isinstance(params.namespace, dto.RuntimeNamespace) else None,
            session_id=params.session_id,
            episode_id=params.episode_id,
            query=params.query,
            reason="tool_driven",
            filters=params.filters,
            top_k=params.top_k,
            deadline_at=params.deadline_at,
            render=params.render,
        )
        deadline = params.deadline_at or (now_ms() + self._settings.default_deadline_ms)
        return await self.retrieve_safely(query, owner, visible=None, deadline_at=deadline, top_k=params.top_k)

    # ------------------------------------------------------------ pipeline

    async def _retrieve(
        self,
        query: dto.RetrievalQueryDTO,
        owner: OwnerFilter | None,
        visible: VisibleContext | None,
        top_k: dto.TopKDTO | None,
        injection: InjectionPlan | None = None,
        deadline_at: int | None = None,
        query_vector: QueryVector | None = None,
        repairs: list[dto.RepairDTO] | None = None,
        channels: ChannelRun | None = None,
    ) -> tuple[list[dto.RetrievalHitDTO], str, dto.RetrievalStatsDTO, dto.TierLatencyDTO]:
        text = retrieval_text(query.query)
        plan = plan_for(query.reason or "turn_start", self._settings, top_k)
        if injection is not None:
            plan = Plan(
                plan.reason, {t: c for t, c in plan.caps.items() if t in injection.tiers}, plan.include_low_value
            )
        personal = injection is not None and injection.profile == "personal_fact"
        allowed = _allowed_channels(query.filters)
        if personal:  # a personal fact lives in what was said, not in how a tool was used
            allowed = (allowed or ALL_CHANNELS) - {"vec_action"}
        stats = dto.RetrievalStatsDTO()
        keywords = keyword_query(text)
        spec = ChannelSpec(
            text=text,
            owner=owner,
            kinds=tuple(kind for kind, tier in TIER_OF.items() if tier in plan.caps),
            allowed=allowed,
            pool=pool_size(plan),
        )
        early = channels is not None and channels.spec.serves(spec) and channels.started
        run = channels if early and channels is not None else ChannelRun(self, spec, query_vector)
        # The channels get the deadline minus a reserve for hydration, ranking and rendering; when they run
        # out of time, what they have found so far is used (stats.degraded says so) instead of nothing.
        time_left_s = None if deadline_at is None else (deadline_at - now_ms()) / 1000
        budget = None if time_left_s is None else time_left_s - render_reserve_s(time_left_s)
        with anyio.move_on_after(budget) as channel_scope:
            if early:
                await run.wait()  # started next to the routing write (turn.start)
            else:
                await run.run()
        if channel_scope.cancelled_caught:
            stats.degraded.append("deadline:partial")
        stats.degraded.extend(run.degraded)
        tier_ms = run.tier_ms
        query_vec = run.query_vec
        planned = {CANDIDATE_KIND[kind] for kind in spec.kinds}
        found = [c for c in run.collector.by_key.values() if c.kind in planned]

        loaded = await self._db.read(
            lambda db: self._load_sync(
                db,
                found,
                owner,
                visible,
                plan,
                keywords,
                rollups=query_vec is not None,
                request=text,
                query_vec=query_vec,
            )
        )
        candidates = self._roll_up_episodes(loaded.candidates, loaded.steps, query_vec, loaded.goals)
        rrf_k = self._settings.rrf_k
        stats.candidates = len(candidates)
        funnel = dto.RetrievalFunnelDTO(channels=channel_counts(found), candidates=len(candidates))
        ranked = fusion.relative_threshold(candidates, rrf_k, self._settings.min_trace_sim)
        funnel.thresholded = len(ranked)
        ranked = fusion.dedupe_repeats(ranked, rrf_k)
        funnel.deduped = len(ranked)
        select = fusion.select_with_rollups if plan.reason == "tool_driven" else fusion.select_lessons_apart
        picked = select(ranked, plan.caps, rrf_k)
        funnel.selected = len(picked)
        picked.sort(key=lambda c: (c.tier, -c.score(rrf_k)))
        if self._llm is not None and picked:
            left_s = ((deadline_at or now_ms() + 60_000) - now_ms()) / 1000 - 0.05  # keep a margin to render
            outcome = await llm_filter(
                text,
                picked,
                self._llm,
                max_keep=self._settings.llm_filter_max_keep,
                min_candidates=self._settings.llm_filter_min_candidates,
                timeout_s=min(self._settings.llm_filter_timeout_ms / 1000, left_s),
                rrf_k=rrf_k,
                episode_id=query.episode_id,
            )
            picked = outcome.kept
            stats.llm_filter = outcome.source
        picked = _without_distilled_steps(picked, loaded.sources)
        stats.returned = len(picked)
        hits = [self._hit(c, rrf_k) for c in picked]
        funnel.injected = len(hits)
        stats.funnel = funnel
        data = self._render_input(picked)
        for repair in repairs or []:
            data.repair_preference.append(repair.preference)
            data.repair_anti_pattern.append(repair.anti_pattern)
        own = {query.episode_id or "", *(r.episode_id or "" for r in repairs or [])} - {""}
        data.values = block_values(data, text, own)
        trace_ids = {c.ref_id for c in picked if c.kind == "trace"}
        recalled_policies = {c.ref_id for c in picked if c.kind == "experience"}
        if trace_ids:
            prefer, avoid = hotpath.merge_guidance(loaded.guidance, trace_ids, exclude=recalled_policies)
            data.linked_preference, data.linked_anti_pattern = prefer, avoid
        data.query = text
        context = render_block(data, reason=plan.reason, options=self._render_options(query.render))
        if self._settings.explain_log:
            explain.append(self._settings.explain_log, text, plan.reason, loaded.verdicts, picked, context)
        latency = dto.TierLatencyDTO(
            tier1=round(tier_ms.get(1, 0.0), 2),
            tier2=round(tier_ms.get(2, 0.0), 2),
            tier3=round(tier_ms.get(3, 0.0), 2),
        )
        return hits, context, stats, latency

    def _render_options(self, mode: str | None = None) -> RenderOptions:
        """The settings' rendering; `mode` (a call's `render`) overrides `retrieval.render_mode`."""
        return RenderOptions(
            snippet_max_chars=self._settings.snippet_max_chars,
            total_max_chars=self._settings.char_budget,
            skill_mode=self._settings.skill_injection_mode,
            mode=mode or self._settings.render_mode,
            compact_max_chars=min(self._settings.compact_max_chars, self._settings.char_budget),
        )

    def _channels(
        self,
        kind: str,
        keywords: KeywordQuery,
        signatures: list[str],
        owner: OwnerFilter | None,
        allowed: frozenset[str] | None,
    ) -> list[tuple[str, SqlCall]]:
        """One kind's SQL channels, each returning ranked (id, score); the caller runs them together in one
        worker thread."""
        fts_kind: FtsKind = kind  # type: ignore[assignment]
        keyword_top = self._settings.keyword_top_k
        channels: list[tuple[str, SqlCall]] = []

        def fts(tokenizer: Tokenizer, terms: str) -> Callable[[Session], list[tuple[str, float]]]:
            def run(db: Session) -> list[tuple[str, float]]:
                found = fts_search(db, fts_kind, terms, owner=owner, tokenizer=tokenizer, limit=keyword_top)
                return bm25_scores(found)

            return run

        if keywords.word:
            channels.append(("fts_word", fts("word", keywords.word)))
        if keywords.trigram:
            channels.append(("fts_trigram", fts("trigram", keywords.trigram)))
        if keywords.pattern:
            terms = list(keywords.pattern)
            channels.append(("pattern", lambda db: pattern_search(db, fts_kind, terms, owner=owner, limit=keyword_top)))
        if keywords.identifiers:
            # Trigram MATCH of a quoted identifier is a substring test served by the index (a LIKE scan
            # cost 200 ms at 100k traces); identifiers shorter than 3 characters never get here.
            channels.append(("exact", fts("trigram", " ".join(keywords.identifiers))))
        if kind == "trace" and signatures:

            def structural(db: Session) -> list[tuple[str, float]]:
                return [(i, 0.9) for i, _ in hotpath.traces_with_signatures(db, signatures, owner, keyword_top)]

            channels.append(("structural", structural))
        if allowed is not None:
            channels = [(name, call) for name, call in channels if name in allowed]
        return channels

    # ------------------------------------------------------------ hydration and roll-ups

    def _load_sync(
        self,
        db: Session,
        found: list[Candidate],
        owner: OwnerFilter | None,
        visible: VisibleContext | None,
        plan: Plan,
        keywords: KeywordQuery,
        *,
        rollups: bool,
        request: str = "",
        query_vec: np.ndarray | None = None,
    ) -> _Loaded:
        """Everything ranking needs from the database, in ONE worker-thread hop (a hop and a read transaction
        cost about what each of these reads costs): the candidates' rows, the corrections that supersede
        them, the steps of the past tasks that may become roll-ups and the decision guidance of policies
        linked to the candidate steps (ranking then keeps the guidance of the steps it picks), and the stored
        vectors of the candidates and of the roll-ups' goals."""
        links: list[tuple[str, str, str]] = []
        candidates = self._hydrate_sync(db, found, owner, visible, plan, links)
        candidates = self._follow_supersedes_sync(db, candidates, links, owner, visible, plan)
        candidates = self._identifier_gate(candidates, keywords)
        # the work gate judges what a turn is given; a search someone asked for is judged by its words alone
        turn = plan.reason != "tool_driven"
        session = visible.session_id if visible is not None else None
        context = RequestContext(query_vec, session, owner.workspace_id if owner else None) if turn else None
        verdicts: dict[str, tuple[str, Any]] = {}
        candidates = self._subject_gate(candidates, request, context, verdicts)
        steps = hotpath.episode_steps(db, self._rollup_episodes(candidates)) if rollups else {}
        trace_ids = [c.ref_id for c in candidates if c.kind == "trace"]
        distilled = [c.ref_id for c in candidates if c.kind == "experience"] + [
            policy_id
            for c in candidates
            if isinstance(c.payload, SkillSnippet)
            for policy_id in c.payload.source_policy_ids
        ]
        sources = hotpath.policy_source_traces(db, distilled) if trace_ids and distilled else {}
        candidates = self._with_vectors(db, candidates)
        goal_ids = [rows[0].id for rows in steps.values() if rows]
        goals = self._vectors.stored_vectors(db, "trace", "vec_summary", goal_ids) if goal_ids else {}
        return _Loaded(candidates, steps, hotpath.guidance_rows(db, trace_ids, owner), sources, goals, verdicts)

    def _hydrate_sync(
        self,
        db: Session,
        candidates: list[Candidate],
        owner: OwnerFilter | None,
        visible: VisibleContext | None,
        plan: Plan,
        links: list[tuple[str, str, str]] | None = None,
    ) -> list[Candidate]:
        """Load rows, drop what is not eligible, attach payloads and strength signals; with `links`, also
        collect the `supersedes` chains of the loaded candidates into it (same transaction)."""
        by_kind: dict[str, list[Candidate]] = {}
        for cand in candidates:
            by_kind.setdefault(_storage_kind(cand.kind), []).append(cand)
        limit = max(max(plan.caps.values(), default=0) * 6, 30)
        for group in by_kind.values():
            group.sort(key=lambda c: c.relevance(self._settings.rrf_k), reverse=True)
            del group[limit:]
        if links is not None:
            ids = [c.ref_id for group in by_kind.values() for c in group]
            links.extend(hotpath.supersede_chains(db, ids, strength_rules.MAX_SUPERSEDE_HOPS))
        now = now_ms()
        kept: list[Candidate] = []
        for kind, group in by_kind.items():
            rows = hotpath.rows_by_ids(db, kind, [c.ref_id for c in group], kind_owner(kind, owner))
            for cand in group:
                row = rows.get(cand.ref_id)
                if row is None or row.strength < self.min_strength or not self._eligible(kind, row, visible, plan):
                    continue
                self._attach(kind, cand, row, now)
                kept.append(cand)
        return kept

    def _with_vectors(self, db: Session, candidates: list[Candidate]) -> list[Candidate]:
        """Attach each candidate's stored vector (for MMR redundancy): from the in-memory indexes, or read in
        this transaction where the database holds the vectors (PostgreSQL with pgvector)."""
        by_kind: dict[str, list[Candidate]] = {}
        for cand in candidates:
            by_kind.setdefault(_storage_kind(cand.kind), []).append(cand)
        for kind, group in by_kind.items():
            stored = self._vectors.stored_vectors(
                db, kind, "vec_summary" if kind == "trace" else "vec", [c.ref_id for c in group]
            )
            for cand in group:
                cand.vector = stored.get(cand.ref_id)
        return candidates

    def _follow_supersedes_sync(
        self,
        db: Session,
        candidates: list[Candidate],
        links: list[tuple[str, str, str]],
        owner: OwnerFilter | None,
        visible: VisibleContext | None,
        plan: Plan,
    ) -> list[Candidate]:
        """A corrected memory never out-ranks its correction (`memory.link` … `supersedes`).

        A candidate superseded (down a chain of `links`) by a memory recallable here gives way to the newest
        such correction, which inherits its channels — so a correction that did not match the request itself
        is brought in at the rank of what it corrects. Rules in `strength_rules.resolve_supersedes`.
        """
        if not candidates or not links:
            return candidates
        by_id = {c.ref_id: c for c in candidates}
        outside = {(kind, new) for kind, new, _ in links if new not in by_id and TIER_OF.get(kind) in plan.caps}
        bare = [Candidate(kind=CANDIDATE_KIND[kind], ref_id=new, tier=TIER_OF[kind]) for kind, new in outside]
        brought = {c.ref_id: c for c in self._hydrate_sync(db, bare, owner, visible, plan)}
        replaced = strength_rules.resolve_supersedes(set(by_id) | set(brought), [(new, old) for _, new, old in links])
        for old_id, new_ids in replaced.items():
            old = by_id.pop(old_id, None) or brought.pop(old_id, None)
            for new_id in new_ids:
                correction = by_id.get(new_id) or brought[new_id]
                for channel, (rank, score) in (old.channels if old else {}).items():
                    correction.add(channel, rank, score)
        return list(by_id.values()) + [c for c in brought.values() if c.channels]

    def _eligible(self, kind: str, row: Any, visible: VisibleContext | None, plan: Plan) -> bool:
        if kind == "trace":
            if visible is not None and visible.hides(row):
                return False  # the host still has it in its context: injecting it again only costs tokens
            return bool(plan.include_low_value or row.value >= 0)
        if kind == "policy":
            return bool(row.status in ("active", "candidate"))
        if kind == "skill":
            return bool(row.status in ("active", "candidate") and row.eta >= MIN_SKILL_ETA)
        if kind == "memory":  # a time-bound fact stops being recalled when it expires (archived by the sweep)
            return bool(row.status == "active" and (row.expires_at is None or row.expires_at > now_ms()))
        return bool(row.status == "active" and row.confidence >= self.min_world_confidence)

    def _attach(self, kind: str, cand: Candidate, row: Any, now: int) -> None:
        if kind == "trace":
            # The live priority, from the step's value and its age now (the stored `priority` was decayed
            # once already, when the episode was scored: decaying it again counted the age twice).
            cand.strength = reward.priority_at(row.value, row.ts, now, half_life_days=self.priority_half_life_days)
            cand.dedupe_key = fusion.normalise_text(row.summary or "")
            cand.episode_id = row.episode_id
            cand.payload = TraceSnippet(
                ref_id=row.id,
                ts=row.ts,
                summary=row.summary,
                user_text=row.user_text if row.step_index == 0 else "",
                agent_text=row.agent_text,
                tool_lines=[tool_signature(call, 300) for call in (row.tool_calls_json or [])],
                request=row.user_text,
                value=float(row.value or 0.0),
                episode_id=row.episode_id or "",
            )
        elif kind == "policy":
            guidance = row.decision_guidance_json or {}
            cand.strength = max(row.salience, row.confidence, row.gain, 0.0)
            cand.dedupe_key = fusion.normalise_text(row.title)
            lesson = row.lesson_json if isinstance(row.lesson_json, dict) else {}
            cand.payload = ExperienceSnippet(
                ref_id=row.id,
                experience_type=row.experience_type,
                title=row.title,
                trigger=row.trigger,
                procedure=row.procedure,
                verification=row.verification,
                boundary=row.boundary,
                preference=list(guidance.get("preference", [])),
                anti_pattern=list(guidance.get("antiPattern", [])),
                updated_at=row.updated_at,
                lesson=[str(line) for line in lesson.get("lines") or []],
                roles=[str(role) for role in lesson.get("roles") or []],
                terms=[str(term) for term in lesson.get("terms") or []],
                words=[str(word) for word in lesson.get("words") or []],
                contexts=_context_vectors(lesson.get("contexts")),
                sessions=[str(session) for session in lesson.get("sessions") or []],
                inputs=[str(name) for name in lesson.get("inputs") or []],
                instance=[str(phrase) for phrase in lesson.get("instance") or []],
                answers=[str(answer) for answer in lesson.get("answers") or []],
                source_episodes=[str(e) for e in row.source_episodes_json or []],
                workspace=row.owner_workspace_id,
            )
        elif kind == "skill":
            guidance = (row.procedure_json or {}).get("decisionGuidance", {}) or {}
            cand.strength = row.eta
            cand.dedupe_key = fusion.normalise_text(row.name)
            cand.payload = SkillSnippet(
                ref_id=row.id,
                name=row.name,
                guide=row.invocation_guide,
                eta=row.eta,
                source_policy_ids=list(row.source_policies_json or []),
                preference=list(guidance.get("preference", [])),
                anti_pattern=list(guidance.get("antiPattern", [])),
                updated_at=row.updated_at,
            )
        elif kind == "memory":
            cand.strength = row.importance  # the caller's weight, a near-tie breaker like every strength
            cand.dedupe_key = fusion.normalise_text(row.content)
            cand.payload = MemorySnippet(
                ref_id=row.id, memory_type=row.memory_type, content=row.content, source=row.source
            )
        else:
            cand.strength = row.confidence
            cand.dedupe_key = fusion.normalise_text(row.title)
            cand.payload = WorldSnippet(ref_id=row.id, title=row.title, body=row.body)
        cand.strength = strength_rules.tie_signal(cand.strength, row.strength)  # evidence breaks near-ties only

    def _subject_gate(
        self,
        candidates: list[Candidate],
        request: str,
        context: RequestContext | None = None,
        verdicts: dict[str, tuple[str, Any]] | None = None,
    ) -> list[Candidate]:
        """A lesson (or a world model) is recalled for a request about its subject: one that names a term it is
        about (an identifier, a file it was learnt on, a unit), or whose meaning is close to it (vector cosine ≥
        `retrieval.lesson_min_similarity`). Without this, every lesson of a busy namespace reaches every task
        whose wording is vaguely alike (measured: half the tasks of unrelated task families got another
        family's lessons). A lesson that names no subject at all needs the close match in meaning. A skill is
        gated the same way when its summary names what it is about (files, fields, identifiers): a skill
        crystallised from one company's export is not for another company's log.

        An experience that records past tasks (a procedure induced from successes, a "what worked" note)
        rather than a lesson is judged like a past step by the names its title and trigger give, or, when it
        names none, by two of its own words in the request. (Without this, a success on one
        company's export brought its procedure into most other companies' tasks.)

        A past step (or past task) is about the files its request named: when the request names files and the
        step names others, the step is another task's and comes back only when its meaning is nearly the same
        (`SAME_STEP_SIMILARITY`). A file named together with many different files (the output file a harness
        asks every task for) is boilerplate and decides nothing. The few candidates of a request may all come
        from one earlier task, where the output file cannot be told from the subject that way; a file shared
        with a request that names other files than the memory's is not counted either (`_shared_output`).

        A lesson that keeps the requests it was learnt on (`ExperienceSnippet.contexts`) is judged by the work gate
        instead (`retrieval.work_gate`): by how close this request is to those requests, the lessons of one work
        together. Requests that name no file or company share no term with their lessons, and a lesson's own words
        are about data every project has ("readings", "times"): "two of its words" brought one project's lessons
        into another's tasks.

        `verdicts`, when given, receives each lesson's and world model's fate (`retrieval.explain`)."""
        verdicts = {} if verdicts is None else verdicts
        floor = self._settings.lesson_min_similarity
        files_of_steps = _step_files(candidates)
        boilerplate = _boilerplate_files(files_of_steps)
        files = _RequestFiles.of(request, boilerplate)  # once per request, not per candidate
        request_words = min(2, len(specific_tokens(request))) or 1  # a one-word query needs its one word
        works = _lessons_of_the_work(candidates, request, files, context)
        kept: list[Candidate] = []
        for cand in candidates:
            payload = cand.payload
            needed = floor
            if works is not None and cand.ref_id in works.judged:
                if cand.ref_id not in works.kept:
                    verdicts[cand.ref_id] = ("work", payload)
                elif not _bears_on(payload, request, context):
                    verdicts[cand.ref_id] = ("scope", payload)
                else:
                    verdicts[cand.ref_id] = ("kept", payload)
                    kept.append(cand)
                continue
            if isinstance(payload, TraceSnippet | EpisodeSnippet):
                own = [f for f in files_of_steps.get(cand.ref_id, []) if f not in boilerplate]
                deciding = [f for f in own if f not in files.outputs and f not in _shared_output(own, files.subject)]
                gated = bool(files.named and own) and not mentions(request, deciding)
                needed = SAME_STEP_SIMILARITY
            elif isinstance(payload, SkillSnippet):
                if context is not None and not bears_on(skill_summary(payload), request):
                    continue  # a turn gets a skill only when its rule can bear on the task (`rules.scope`)
                terms = skill_subject_terms(payload)
                gated = bool(terms) and not mentions(request, _deciding_terms(terms, files))
            elif isinstance(payload, ExperienceSnippet) and payload.experience_type in TASK_RECORD_TYPES:
                # A record of past tasks rather than a lesson (a procedure induced from successes, a "what
                # worked" note): like a past step, about the names it gives, or, naming none, its own words.
                named = _named_subjects(payload)
                if named:
                    gated = not mentions(request, _deciding_terms(named, files))
                else:
                    words = _record_words(payload)
                    gated = bool(words) and not shares_words(request, words, request_words)
                needed = SAME_STEP_SIMILARITY
            elif isinstance(payload, ExperienceSnippet) and not payload.lesson:
                gated = False  # a preference or rule stored without a lesson record: left to the ranking
            else:
                gated = isinstance(payload, ExperienceSnippet | WorldSnippet) and not _about(payload, request, files)
            lesson = isinstance(payload, ExperienceSnippet | WorldSnippet)
            if gated and _vector_score(cand) < needed:
                if lesson:
                    verdicts[cand.ref_id] = ("subject", payload)
                continue  # not about this request's subject: only a close match in meaning brings it
            if lesson:
                verdicts[cand.ref_id] = ("kept", payload)
            kept.append(cand)
        return kept

    def _identifier_gate(self, candidates: list[Candidate], keywords: KeywordQuery) -> list[Candidate]:
        """A query naming a long identifier wants steps that contain it, when any do. Lessons are left to the
        subject gate: one learnt on a sibling export (`…_apr12.txt` for a task on `…_apr13.txt`) applies as well."""
        if not any(len(i) >= LONG_IDENTIFIER for i in keywords.identifiers):
            return candidates
        if not any("exact" in c.channels for c in candidates if c.kind == "trace"):
            return candidates
        return [c for c in candidates if c.kind != "trace" or "exact" in c.channels]

    def _rollup_episodes(self, candidates: list[Candidate]) -> list[str]:
        """The (at most MAX_ROLLUPS) past tasks with several matching steps, best-matching first.

        Only the few best-matching tasks can win a slot; loading every episode's steps cost more than the
        rest of the query on conversational memories (many short episodes, many weak matches)."""
        by_episode: dict[str, list[Candidate]] = {}
        for cand in candidates:
            if cand.kind == "trace" and cand.episode_id:
                by_episode.setdefault(cand.episode_id, []).append(cand)
        rrf_k = self._settings.rrf_k
        ready = {episode: members for episode, members in by_episode.items() if len(members) >= 2}
        best_first = sorted(ready, key=lambda e: max(m.relevance(rrf_k) for m in ready[e]), reverse=True)
        return best_first[:MAX_ROLLUPS]

    def _roll_up_episodes(
        self,
        candidates: list[Candidate],
        steps: dict[str, list[Any]],
        query_vec: np.ndarray | None,
        goals: dict[str, np.ndarray],
    ) -> list[Candidate]:
        """A past task whose goal matches the request, with several matching steps, also competes as one
        "similar past task" (its ordered step list; `steps` holds those of `_rollup_episodes`).

        The goal is the episode's first step; a roll-up is made only when the request matches that goal
        about as well as its best single step (within GOAL_MARGIN). The steps stay candidates: replacing
        them by the roll-up hid the step that answers the request (LoCoMo recall@10: 0.49 when roll-ups
        replaced their steps, 0.54 with the goal rule, 0.63 additive). The roll-up scores as its best
        step — a long episode must not win by volume — and `fusion.select_with_rollups` drops it when
        steps of the same task were picked anyway (trace-vs-roll-up de-duplication).
        """
        if not steps or query_vec is None:
            return candidates
        members_of: dict[str, list[Candidate]] = {}
        for cand in candidates:
            if cand.kind == "trace" and cand.episode_id in steps:
                members_of.setdefault(cand.episode_id, []).append(cand)
        rolled: dict[str, Candidate] = {}
        for episode, members in members_of.items():
            trace_rows = steps.get(episode, [])
            goal = goals.get(trace_rows[0].id) if trace_rows else None
            if goal is None:
                continue
            goal_sim = float(np.dot(goal, query_vec))
            best_step_sim = max(_vector_score(m) for m in members)
            if goal_sim < EPISODE_GOAL_MIN_SIM or goal_sim < best_step_sim - GOAL_MARGIN:
                continue  # the request is about a detail of that task, not the task: keep the steps
            best = max(members, key=lambda m: m.relevance(self._settings.rrf_k))
            rollup = Candidate(kind="episode", ref_id=episode, tier=2, episode_id=episode, vector=goal)
            rollup.channels = dict(best.channels)
            rollup.strength = max(m.strength for m in members)
            rollup.payload = EpisodeSnippet(
                ref_id=episode,
                ts=trace_rows[0].ts,
                task=trace_rows[0].user_text or trace_rows[0].summary,
                steps=_step_list(trace_rows),
            )
            rolled[episode] = rollup
        if not rolled:
            return candidates
        return candidates + list(rolled.values())

    # ------------------------------------------------------------ output

    def _hit(self, cand: Candidate, rrf_k: int) -> dto.RetrievalHitDTO:
        payload = cand.payload
        snippet = ""
        if isinstance(payload, TraceSnippet):
            snippet = payload.summary
        elif isinstance(payload, EpisodeSnippet):
            snippet = clip(payload.task, 200)
        elif isinstance(payload, ExperienceSnippet):
            snippet = payload.title
        elif isinstance(payload, SkillSnippet):
            snippet = payload.name
        elif isinstance(payload, WorldSnippet):
            snippet = payload.title
        elif isinstance(payload, MemorySnippet):
            snippet = clip(payload.content, 200)
        return dto.RetrievalHitDTO(
            tier=cand.tier,
            ref_id=cand.ref_id,
            ref_kind=REF_KIND[cand.kind],
            score=round(cand.score(rrf_k), 4),
            snippet=snippet,
            source_trace_id=cand.ref_id if cand.kind == "trace" else None,
            channels=sorted(cand.channels),
        )

    @staticmethod
    def _render_input(picked: list[Candidate]) -> RenderInput:
        data = RenderInput()
        for cand in picked:
            payload = cand.payload
            if isinstance(payload, SkillSnippet):
                data.skills.append(payload)
            elif isinstance(payload, EpisodeSnippet):
                data.episodes.append(payload)
            elif isinstance(payload, TraceSnippet):
                data.traces.append(payload)
            elif isinstance(payload, ExperienceSnippet):
                data.experiences.append(payload)
            elif isinstance(payload, WorldSnippet):
                data.worlds.append(payload)
            elif isinstance(payload, MemorySnippet):
                data.memories.append(payload)
        return data


#: A tool call in a procedure ("read_file(", "`bash(`"): its name says how, not what the experience is about.
_TOOL_CALL = re.compile(r"\b([A-Za-z_][\w.-]*)\(")
#: The names on either side of an arrow in a tool chain ("read_file → write_file").
_CHAIN_LINK = re.compile(r"([\w.-]+)\s*(?:→|->)\s*([\w.-]+)?")


def block_values(data: RenderInput, request: str, own_episodes: set[str]) -> BlockValues:
    """What the block must not carry (`rules.block_filter`): the attempts behind what was recalled — what a lesson's
    attempts answered and were expected to answer, a past step's reply (never shown), and the phrases the learning
    filter took out of a lesson's feedback, a past step's tool calls (shown only where a recalled lesson states
    the same value as its rule) — except those of this task and of the task it repeats (`own_episodes`)."""
    answers: list[str] = []
    attempts: list[str] = []
    own: list[str] = []
    for exp in data.experiences:
        if own_episodes & set(exp.source_episodes):
            own += [*exp.answers, *exp.instance]
        else:  # what the attempts answered never shows; what the filter took out shows only as a rule's value
            answers += exp.answers
            attempts += exp.instance
    for trace in data.traces:
        if trace.episode_id in own_episodes:
            own += [trace.agent_text, *trace.tool_lines]
        else:
            answers.append(trace.agent_text)
            attempts += trace.tool_lines
    rules = [line for exp in data.experiences for line in exp.lesson]
    rules += [m.content for m in data.memories]
    return BlockValues.build(answers, attempts=attempts, request=request, rules=rules, own=own)


def _context_vectors(stored: Any) -> list[np.ndarray]:
    """The stored request vectors of a lesson record, decoded (unreadable ones skipped)."""
    out: list[np.ndarray] = []
    for text in stored or []:
        vec = vector_from_text(str(text))
        if vec is not None:
            out.append(vec)
    return out


def _tool_names(exp: ExperienceSnippet) -> frozenset[str]:
    """The tools a task record calls (case-folded): they say how it was done, not what it was about."""
    return _tools_in(exp.procedure, exp.title)


@functools.lru_cache(maxsize=2048)
def _tools_in(procedure: str, title: str) -> frozenset[str]:
    """`_tool_names` of a record's texts, remembered: the same records come back turn after turn."""
    tools = {m.group(1).casefold() for m in _TOOL_CALL.finditer(f"{procedure} {title}")}
    return frozenset(tools | {name.casefold() for pair in _CHAIN_LINK.findall(title) for name in pair if name})


def _named_subjects(exp: ExperienceSnippet) -> list[str]:
    """What a task record (a procedure induced from successes, a "what worked" note) is about: the names its
    title and trigger give (files, fields, identifiers), without the tools it calls and without the earlier
    request a trigger quotes."""
    tools = _tool_names(exp)
    named = identifiers(without_task_quote(f"{exp.title}\n{exp.trigger}"))
    return [name for name in named if name.casefold() not in tools]


def _record_words(exp: ExperienceSnippet) -> list[str]:
    """The distinctive words of a task record's title that names nothing (no file or identifier), without the
    tools it called: "billing", "gateway", "rolled" of "Billing-gateway rolled back curl …: read_file →
    write_file". A request about the same thing uses two of them."""
    tools = _tool_names(exp)
    tokens = [t for t in specific_tokens(exp.title) if t.casefold() not in tools]
    words = [w for w in tokens if w.isascii() and w.isalpha() and len(w) >= 2]
    words += [w for part in tokens if "-" in part for w in part.split("-") if len(w) >= 2]
    return list(dict.fromkeys(words))[:RECORD_WORDS]


#: Words of a task record that names nothing kept for judging what it is about.
RECORD_WORDS = 6


def _about(
    payload: ExperienceSnippet | WorldSnippet, request: str, files: _RequestFiles | None = None, *, words: bool = True
) -> bool:
    """Whether the request is about what a lesson or world model is about (its terms, or for a lesson that names
    nothing, two of its own words unless `words` is off). A boilerplate file among its terms (every task's output
    file) says nothing about its subject."""
    terms = _deciding_terms(_subject_terms(payload), files or _RequestFiles.of(request, frozenset()))
    if terms:
        return mentions(request, terms)
    return (
        words
        and isinstance(payload, ExperienceSnippet)
        and bool(payload.words)
        and shares_words(request, payload.words)
    )


#: A request this close to one a lesson was learnt on is that task again: its own lessons bear on it.
SAME_TASK_SIMILARITY = 0.9


def _bears_on(payload: Any, request: str, context: RequestContext | None) -> bool:
    """Whether a lesson of the request's work can bear on this task (`rules.scope`): the work's lessons come back
    together, and a clock rule shown to a task that involves no time of day is applied by a small model all the
    same. The task it was learnt on, asked again, always gets it."""
    if not isinstance(payload, ExperienceSnippet) or bears_on(" ".join(payload.lesson), request):
        return True
    vector = context.vector if context is not None else None
    return vector is not None and any(float(np.dot(vector, c)) >= SAME_TASK_SIMILARITY for c in payload.contexts)


@dataclass(frozen=True)
class RequestContext:
    """What a lesson's contexts are compared with: the request's unit vector, the session it came in and the
    project workspace it acts in (None: profile-wide)."""

    vector: np.ndarray | None
    session_id: str | None = None
    workspace: str | None = None


@dataclass(frozen=True)
class _WorkVerdict:
    judged: frozenset[str]  # the lessons the work gate decided on (those that keep their contexts)
    kept: frozenset[str]


def _lessons_of_the_work(
    candidates: list[Candidate], request: str, files: _RequestFiles, context: RequestContext | None
) -> _WorkVerdict | None:
    """The work gate's verdict on the candidate lessons that keep the requests they were learnt on
    (`retrieval.work_gate`); None without a request vector (the subject gate alone decides then)."""
    if context is None or context.vector is None:
        return None
    views: list[work_gate.LessonView] = []
    for cand in candidates:
        payload = cand.payload
        if (
            isinstance(payload, ExperienceSnippet)
            and payload.contexts
            and payload.lesson
            and payload.experience_type not in TASK_RECORD_TYPES
        ):
            named = _about(payload, request, files, words=False)
            own_project = context.workspace is not None and payload.workspace == context.workspace
            views.append(
                work_gate.LessonView(
                    cand.ref_id, payload.contexts, payload.terms, payload.sessions, named, payload.inputs, own_project
                )
            )
    if not views:
        return None
    view = work_gate.RequestView(context.vector, request, context.session_id, files.subject)
    return _WorkVerdict(frozenset(v.ref_id for v in views), frozenset(work_gate.select(views, view)))


#: Experience types that record how past tasks went (induced from successes) rather than a lesson someone gave.
TASK_RECORD_TYPES: frozenset[str] = frozenset({"procedural", "success_pattern"})

#: A past step about other files than the request's still comes back when its meaning is this close: the same
#: request on a renamed file. Tasks that share a harness's wording ("Write {…} to answer.json") score 0.6–0.75
#: against each other whatever their subject, so the lessons' floor is too low for steps.
SAME_STEP_SIMILARITY = 0.85


@dataclass(frozen=True)
class _RequestFiles:
    """The files of a request, sorted once for the subject gate: `named` (every file it names but boilerplate),
    `outputs` (those it asks to be written: "Write … to answer.json", every task of a harness names its answer
    file) and `subject` (named, without the outputs: what it is about)."""

    named: list[str]
    outputs: frozenset[str]
    subject: list[str]
    boilerplate: frozenset[str]

    @classmethod
    def of(cls, request: str, boilerplate: frozenset[str]) -> _RequestFiles:
        named = [f for f in _files(request) if f not in boilerplate]
        outputs = frozenset(requested_outputs(request))
        return cls(named, outputs, [f for f in named if f not in outputs], boilerplate)


def _deciding_terms(terms: list[str], files: _RequestFiles) -> list[str]:
    """The subject terms of a lesson, world model or skill that can tie it to the request: without boilerplate
    files or the file the request asks to be written, and without the files it shares with a request about other
    files (`_shared_output`); its own files still tie it to a request about the same file or a sibling file of
    the same house."""
    skipped = files.boilerplate | files.outputs
    kept = [term for term in terms if term.casefold() not in skipped]
    own = [term.casefold() for term in kept if _files(term) == [term.casefold()]]
    shared = _shared_output(own, files.subject)
    return [term for term in kept if term.casefold() not in shared]


def _shared_output(own: list[str], request_files: list[str]) -> set[str]:
    """The files a memory shares with the request when each side also names a file the other does not ("from
    kingsmere_jobs.csv … to answer.json" against "from larchmont_snapshots.csv … to answer.json"): what they
    share is then what every task names (an output file), not the subject, and must not tie them. Empty when
    one side's files contain the other's: then the shared files are the subject."""
    mine, theirs = set(own), set(request_files)
    return mine & theirs if mine - theirs and theirs - mine else set()


def _files(text: str) -> list[str]:
    """The file names a text mentions, each once, in order."""
    return list(dict.fromkeys(m.group(0).casefold() for m in FILE.finditer(text)))


def _step_files(candidates: list[Candidate]) -> dict[str, list[str]]:
    """The files each candidate past step (its request and summary) or past task named, by candidate id."""
    out: dict[str, list[str]] = {}
    for cand in candidates:
        if isinstance(cand.payload, TraceSnippet):
            out[cand.ref_id] = _files(f"{cand.payload.request}\n{cand.payload.summary}")
        elif isinstance(cand.payload, EpisodeSnippet):
            out[cand.ref_id] = _files(cand.payload.task)
    return out


def _boilerplate_files(files_of_steps: dict[str, list[str]]) -> frozenset[str]:
    """Files the candidate steps name together with three or more different other files (the output file a
    harness asks every task for): they say nothing about a subject, while a data file is named with the few
    files of its own task. Computed over this query's candidates, so it adapts to whatever a namespace's
    tasks have in common."""
    partners: dict[str, set[str]] = {}
    for found in files_of_steps.values():
        for name in found:
            partners.setdefault(name, set()).update(other for other in found if other != name)
    return frozenset(name for name, others in partners.items() if len(others) >= 3)


def skill_subject_terms(skill: SkillSnippet) -> list[str]:
    """What a skill is about: the names its summary (the first paragraph of its guide: the lesson and its
    trigger, not the request it was learnt on) gives, without the files it asks to be written: every task of a
    harness writes its answer file, and a request that says "answer as a JSON object" names that file by its
    words (measured: another family's skill reached a task that shared nothing else with it)."""
    summary = skill_summary(skill)
    outputs = requested_outputs(summary)
    return [term for term in identifiers(summary) if term.casefold() not in outputs]


def _subject_terms(payload: Any) -> list[str]:
    """What a recalled lesson or world model is about: a lesson's stored terms; the names a world model's title
    gives its domain (the files and fields its experiences share). Other memories are not gated by subject."""
    if isinstance(payload, ExperienceSnippet):
        return payload.terms
    if isinstance(payload, WorldSnippet):
        return identifiers(payload.title)
    return []


def channel_counts(found: list[Candidate]) -> dict[str, int]:
    """Candidates per channel as the channels returned them (before eligibility and ranking), in a stable
    order: the funnel's first step, which tells a reader whether a channel found nothing or its finds were
    dropped later."""
    counts: dict[str, int] = {}
    for cand in found:
        for channel in cand.channels:
            counts[channel] = counts.get(channel, 0) + 1
    return dict(sorted(counts.items()))


def _without_distilled_steps(picked: list[Candidate], sources: dict[str, list[str]]) -> list[Candidate]:
    """Drop the recalled steps that a recalled experience or skill was distilled from: the lesson stands for
    them, and the raw steps of another task (its script, its answer's numbers and field names) are what a
    small model copies instead of doing this task (measured with a 1.5B agent, docs/skillflow-qwen1.5b.md)."""
    covered: set[str] = set()
    for cand in picked:
        # a procedure induced from steps (no lesson of its own) does not stand for them: what the step's reply
        # says was done is the useful part ("Done before: …" in a compact block)
        payload = cand.payload
        record = isinstance(payload, ExperienceSnippet) and payload.experience_type in TASK_RECORD_TYPES
        if cand.kind == "experience" and not (record and not payload.lesson):
            covered.update(sources.get(cand.ref_id, ()))
        elif isinstance(cand.payload, SkillSnippet):
            for policy_id in cand.payload.source_policy_ids:
                covered.update(sources.get(policy_id, ()))
    if not covered:
        return picked
    return [c for c in picked if not (c.kind == "trace" and c.ref_id in covered)]


def bm25_scores(found: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """bm25 relative to the best match, in (0, 1]: equally good matches score alike (a rank-based
    1/(rank+1) would push the sixth of ten equally good matches under the relative threshold)."""
    if not found:
        return []
    top = found[0][1]
    if top <= 0:
        return [(ref_id, 1.0 / (rank + 1)) for rank, (ref_id, _) in enumerate(found)]
    return [(ref_id, max(score, 0.0) / top) for ref_id, score in found]


def _vector_score(cand: Candidate) -> float:
    return max((score for ch, (_, score) in cand.channels.items() if ch in fusion.VECTOR_CHANNELS), default=0.0)


def _storage_kind(kind: CandidateKind) -> str:
    return {"experience": "policy"}.get(kind, kind)


def _step_list(rows: list[Any], limit_chars: int = 800) -> list[str]:
    out: list[str] = []
    used = 0
    for row in rows:
        line = clip(row.summary or row.agent_text or row.user_text, 160)
        if used + len(line) > limit_chars:
            out.append("…")
            break
        out.append(line)
        used += len(line)
    return out
