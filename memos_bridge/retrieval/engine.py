"""Retrieval over captured traces: vector (summary + action) and full-text (word + trigram) channels.

The channels run concurrently; results are fused with reciprocal-rank fusion on top of the best channel
score, filtered by a relative threshold (a memory found by several channels bypasses it), and rendered
into the injected block. The tiered engine with skills, experiences and world models extends this.

Everything is filtered by the caller's namespace inside each channel, and `retrieve_safely` turns any
failure or an exhausted deadline into an empty result with a reason: a turn never fails because of
retrieval.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import anyio
import numpy as np
from sqlalchemy.orm import Session

from memos_bridge.config import RetrievalSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import MemosError
from memos_bridge.core.text import args_text, to_text
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.embedding.base import Embedder
from memos_bridge.retrieval.query import keyword_query
from memos_bridge.retrieval.render import TraceSnippet, render_block
from memos_bridge.storage import repos
from memos_bridge.storage.database import Database
from memos_bridge.storage.fts import Tokenizer, fts_search
from memos_bridge.storage.models import TraceRow
from memos_bridge.storage.owner import OwnerFilter, OwnerKey
from memos_bridge.timeutil import now_ms

log = logging.getLogger(__name__)

RRF_WEIGHT = 0.4
RELATIVE_FLOOR = 0.2
ADAPTIVE_VEC_RATIO = 0.45
HEADERS = {"turn_start": "Relevant memories from earlier work", "tool_driven": "Memory search results"}


@dataclass
class _Candidate:
    ref_id: str
    channels: dict[str, tuple[int, float]] = field(default_factory=dict)  # channel -> (rank, score)

    @property
    def base(self) -> float:
        return max(score for _, score in self.channels.values())

    def fused(self, rrf_k: int) -> float:
        return self.base + RRF_WEIGHT * sum(1.0 / (rrf_k + rank + 1) for rank, _ in self.channels.values())


def _visible(row: TraceRow, owner: OwnerFilter | None) -> bool:
    return owner is None or owner.can_see(row)


class Retriever:
    def __init__(self, db: Database, embedder: Embedder, vectors: VectorStore, settings: RetrievalSettings) -> None:
        self._db = db
        self._embedder = embedder
        self._vectors = vectors
        self._settings = settings

    async def retrieve_safely(
        self,
        query: dto.RetrievalQueryDTO,
        owner: OwnerFilter | None,
        *,
        exclude_episode_id: str | None,
        deadline_at: int,
        top_k: int | None = None,
    ) -> dto.RetrievalResultDTO:
        started = time.perf_counter()
        remaining_s = (deadline_at - now_ms()) / 1000
        stats = dto.RetrievalStatsDTO()
        hits: list[dto.RetrievalHitDTO] = []
        context = ""
        latency = dto.TierLatencyDTO()
        if not query.query.strip():
            stats.skipped_reason = "empty_query"
        elif remaining_s <= 0:
            stats.skipped_reason = "deadline"
        else:
            try:
                with anyio.fail_after(remaining_s):
                    hits, context, stats = await self._retrieve(query, owner, exclude_episode_id, top_k)
                latency.tier2 = round((time.perf_counter() - started) * 1000, 2)
            except TimeoutError:
                stats = dto.RetrievalStatsDTO(skipped_reason="deadline")
                log.warning("retrieval hit the deadline (%.0f ms)", remaining_s * 1000)
            except Exception:
                log.exception("retrieval failed; returning an empty result")
                stats = dto.RetrievalStatsDTO(skipped_reason="error")
        stats.total_ms = round((time.perf_counter() - started) * 1000, 2)
        return dto.RetrievalResultDTO(
            query=query, hits=hits, injected_context=context, tier_latency_ms=latency, stats=stats
        )

    async def _retrieve(
        self,
        query: dto.RetrievalQueryDTO,
        owner: OwnerFilter | None,
        exclude_episode_id: str | None,
        top_k: int | None,
    ) -> tuple[list[dto.RetrievalHitDTO], str, dto.RetrievalStatsDTO]:
        text = query.query.strip()[:1500]
        limit = self._settings.tier2_top_k if top_k is None else top_k
        pool = max(limit * 4, 20)
        stats = dto.RetrievalStatsDTO()
        candidates: dict[str, _Candidate] = {}

        def record(channel: str, results: list[tuple[str, float]]) -> None:
            for rank, (ref_id, score) in enumerate(results):
                candidates.setdefault(ref_id, _Candidate(ref_id)).channels[channel] = (rank, score)

        async def vector_channels() -> None:
            try:
                query_vec = (await self._embedder.embed([text], role="query"))[0]
            except MemosError as exc:
                stats.degraded.append(f"embedding:{exc.code.value}")
                return
            for field_name, channel in (("vec_summary", "vec_summary"), ("vec_action", "vec_action")):
                found = await self._vectors.search(
                    field_name, np.asarray(query_vec), pool, owner, min_score=self._settings.min_trace_sim
                )
                if found:
                    floor = max(self._settings.min_trace_sim, found[0][1] * ADAPTIVE_VEC_RATIO)
                    record(channel, [(i, s) for i, s in found if s >= floor])

        keywords = keyword_query(text)

        async def keyword_channel(tokenizer: Tokenizer, terms: str) -> None:
            def run(db: Session) -> list[tuple[str, float]]:
                return fts_search(
                    db, "trace", terms, owner=owner, tokenizer=tokenizer, limit=self._settings.keyword_top_k
                )

            try:
                found = await self._db.read(run)
            except Exception:
                log.exception("full-text channel %s failed", tokenizer)
                stats.degraded.append(f"fts_{tokenizer}")
                return
            # bm25 order → rank-based base score, as in the reference ranker
            record(f"fts_{tokenizer}", [(ref_id, 1.0 / (rank + 1)) for rank, (ref_id, _) in enumerate(found)])

        async with anyio.create_task_group() as group:
            group.start_soon(vector_channels)
            if keywords.word:
                group.start_soon(keyword_channel, "word", keywords.word)
            if keywords.trigram:
                group.start_soon(keyword_channel, "trigram", keywords.trigram)

        ranked = sorted(candidates.values(), key=lambda c: c.fused(self._settings.rrf_k), reverse=True)
        stats.candidates = len(ranked)
        if ranked:
            top = ranked[0].fused(self._settings.rrf_k)
            ranked = [
                c for c in ranked if c.fused(self._settings.rrf_k) >= RELATIVE_FLOOR * top or len(c.channels) >= 2
            ]
        rows = await self._db.read(lambda db: repos.traces_by_ids(db, [c.ref_id for c in ranked[: limit * 3]], owner))
        hits: list[dto.RetrievalHitDTO] = []
        snippets: list[TraceSnippet] = []
        seen_summaries: set[str] = set()
        for cand in ranked:
            row = rows.get(cand.ref_id)
            if row is None or row.episode_id == exclude_episode_id or not _visible(row, owner):
                continue
            dedupe_key = (row.summary or "").strip().lower()
            if dedupe_key in seen_summaries:
                continue  # the same step captured again (e.g. a repeated question) adds nothing
            seen_summaries.add(dedupe_key)
            snippet = TraceSnippet(
                ref_id=row.id,
                ts=row.ts,
                summary=row.summary,
                user_text=row.user_text if row.step_index == 0 else "",
                agent_text=row.agent_text,
                tool_lines=[_tool_line(call) for call in (row.tool_calls_json or [])],
            )
            snippets.append(snippet)
            key = OwnerKey.of_row(row)
            hits.append(
                dto.RetrievalHitDTO(
                    tier=2,
                    ref_id=row.id,
                    ref_kind="trace",
                    score=round(cand.fused(self._settings.rrf_k), 4),
                    snippet=row.summary,
                    source_trace_id=row.id,
                    channels=sorted(cand.channels),
                    owner_agent_kind=key.agent_kind,
                    owner_profile_id=key.profile_id,
                    owner_workspace_id=key.workspace_id,
                    share_scope=row.share_scope,
                )
            )
            if len(hits) >= limit:
                break
        stats.returned = len(hits)
        context = render_block(
            snippets,
            header=HEADERS.get(query.reason or "turn_start", HEADERS["turn_start"]),
            snippet_max_chars=self._settings.snippet_max_chars,
            total_max_chars=self._settings.total_max_chars,
        )
        return hits, context, stats

    async def search(self, params: dto.MemorySearchParams, owner: OwnerFilter | None) -> dto.RetrievalResultDTO:
        query = dto.RetrievalQueryDTO(
            agent=params.agent,
            namespace=params.namespace,
            session_id=params.session_id,
            episode_id=params.episode_id,
            query=params.query,
            reason="tool_driven",
            filters=params.filters,
            top_k=params.top_k,
            deadline_at=params.deadline_at,
        )
        deadline = params.deadline_at or (now_ms() + self._settings.default_deadline_ms)
        top_k = params.top_k.tier2 if params.top_k and params.top_k.tier2 is not None else None
        return await self.retrieve_safely(query, owner, exclude_episode_id=None, deadline_at=deadline, top_k=top_k)


def _tool_line(call: dict[str, object]) -> str:
    name = call.get("name", "tool")
    args = args_text(call.get("input"))[:120]
    outcome = call.get("errorCode") or to_text(call.get("output"))[:160]
    return f"{name}({args}) → {outcome}"
