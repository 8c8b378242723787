"""`memory.analytics`: per-day series over a window of UTC days, for the viewer's analytics page.

Every series is one SQL statement that groups by day (`(time - window start) // one day`, the same integer
arithmetic on SQLite and PostgreSQL) inside the window, so the cost follows the number of days and kinds, not
the number of rows read back; the window's time columns bound each scan. The window is `days` whole UTC days
ending with the day of `now`, so a chart's last bar is today, partly elapsed.

What each series counts:

* **written** — rows created per day for each kind (trace, experience = policies, world_model, skill, memory
  = remembered), whatever their status now: a memory forgotten since was still written that day. Visibility
  is `memory.stats`'s: the namespace's rows plus rows shared with every namespace.
* **turns / recallHitRate** — `turn.start` calls by the day of their `ts`, read from the results cached on
  the turn rows (as `memory.stats`' hit rate is), and the share of those that injected at least one memory.
  Turns whose cached result was dropped (a purge) are not counted.
* **verifiedTasks / verifiedSuccessRate** — episodes that got a verifier result (`feedback.submit` with
  `raw.verifier`), counted once, on the day of their latest one; success is full credit (passed = total, or a
  score of 1), read with the reward stage's own parser (`reward.verifier_from_raw`, `full_credit`), so this
  page and the episode's reward never disagree. The objective verdict is used rather than the episode's
  R_task because R_task also mixes in user feedback and heuristics when there is no verifier. Only verifier
  rows are parsed in Python (one per judged task, not a big table), because mirroring that parser in SQL
  would let the two drift.
* **llm** — the `api_logs` rows the LLM facade writes for every attempt (`llm:<op>`), per operation: attempts,
  failed or malformed attempts, and the token counts the providers reported. A provider that reports no
  usage is logged with 0 tokens, so a sum of 0 is reported as null (unknown), not as "no tokens used". A
  namespace sees the calls made for its episodes; calls made for no episode (`llm.test`, some consolidation)
  are only in the every-namespace view.
* **turnStartLatencyMs** — nearest-rank percentiles of the `api_logs` durations of `turn.start` (the whole
  call: routing, retrieval and rendering), for the namespace's sessions. Retries answered from the cache
  are not logged, so n counts the turn.starts that retrieved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import case, false, func, select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core import reward, stats
from memos_bridge.core.namespace import list_scope
from memos_bridge.core.retrieval_log import TURN_START_TOOL, TURN_START_TYPE
from memos_bridge.core.stats import DAY_MS
from memos_bridge.storage.models import (
    ApiLogRow,
    EpisodeRow,
    FeedbackRow,
    SessionRow,
    TurnRow,
)
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.timeutil import now_ms

#: Kind → (model, the column its creation time is in), as `memory.stats` measures ages; the wire calls a policy
#: what people know it as, an experience.
WRITTEN: Final[dict[str, tuple[Any, Any]]] = {
    ("experience" if kind == "policy" else kind): columns for kind, columns in stats.KINDS.items()
}
LLM_PREFIX: Final = "llm:"
PERCENTILES: Final = (50, 95, 99)


def window(now: int, days: int) -> tuple[int, list[str]]:
    """(start of the window in epoch ms, its UTC dates oldest first): `days` days ending with `now`'s day."""
    today = datetime.fromtimestamp(now / 1000, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=days - 1)
    return int(first.timestamp() * 1000), [(first + timedelta(days=i)).strftime("%Y-%m-%d") for i in range(days)]


def percentile(ordered: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence (a value that occurred, never an interpolation)."""
    if not ordered:
        return None
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def rate(hits: Sequence[int], totals: Sequence[int]) -> list[float | None]:
    """hits / totals per day, rounded; None for a day without any."""
    return [round(h / t, 4) if t else None for h, t in zip(hits, totals, strict=True)]


def analytics_sync(db: Session, params: dto.AnalyticsParams) -> dto.AnalyticsResultDTO:
    now = params.now if params.now is not None else now_ms()
    start, days = window(now, params.days)
    end = start + len(days) * DAY_MS
    owner = list_scope(db, params.namespace, session_id=params.session_id)
    series = _Series(db, start, end, len(days))
    turns, hits = series.turns(owner)
    verified, passed = series.verified(owner)
    return dto.AnalyticsResultDTO(
        days=days,
        written={kind: series.written(model, born, kind, owner) for kind, (model, born) in WRITTEN.items()},
        turns=turns,
        recall_hit_rate=rate(hits, turns),
        verified_tasks=verified,
        verified_success_rate=rate(passed, verified),
        llm=series.llm(owner),
        turn_start_latency_ms=series.latency(owner),
    )


class _Series:
    """The window and the statements of each series."""

    def __init__(self, db: Session, start: int, end: int, days: int) -> None:
        self.db, self.start, self.end, self.days = db, start, end, days

    def _day(self, column: Any) -> Any:
        return (column - self.start) // DAY_MS

    def _in_window(self, column: Any) -> Any:
        return column.between(self.start, self.end - 1)

    def _per_day(self, rows: Any) -> list[int]:
        out = [0] * self.days
        for day, count in rows:
            if day is not None and 0 <= int(day) < self.days:
                out[int(day)] += int(count or 0)
        return out

    def written(self, model: Any, born: Any, kind: str, owner: OwnerFilter | None) -> list[int]:
        day = self._day(born)
        stmt = select(day, func.count()).where(self._in_window(born)).group_by(day)
        if owner is not None:
            # remembered memories belong to the profile and workspace, not to the agent kind that wrote them
            stmt = stmt.where((owner.every_agent() if kind == "memory" else owner).clause(model))
        return self._per_day(self.db.execute(stmt))

    def turns(self, owner: OwnerFilter | None) -> tuple[list[int], list[int]]:
        day = self._day(TurnRow.started_at)
        # a cached result injected something when its first hit has a refId (every hit has one)
        hit = TurnRow.result_json[("hits", 0, "refId")].as_string().is_not(None)
        stmt = (
            select(day, func.count(), func.sum(case((hit, 1), else_=0)))
            .where(self._in_window(TurnRow.started_at), TurnRow.result_json.is_not(None))
            .group_by(day)
        )
        if owner is not None:
            stmt = stmt.where(owner.clause(TurnRow))
        rows = self.db.execute(stmt).all()
        return self._per_day((d, n) for d, n, _ in rows), self._per_day((d, h) for d, _, h in rows)

    def verified(self, owner: OwnerFilter | None) -> tuple[list[int], list[int]]:
        stmt = (
            select(FeedbackRow.id, FeedbackRow.episode_id, FeedbackRow.ts, FeedbackRow.raw_json)
            .where(self._in_window(FeedbackRow.ts), FeedbackRow.raw_json["verifier"].as_string().is_not(None))
            .order_by(FeedbackRow.ts, FeedbackRow.id)
        )
        if owner is not None:
            stmt = stmt.where(owner.clause(FeedbackRow))
        latest: dict[str, tuple[int, bool]] = {}  # episode → (day of its latest verdict, full credit)
        for feedback_id, episode_id, ts, raw in self.db.execute(stmt):
            block = raw.get("verifier") if isinstance(raw, dict) else None
            result = reward.verifier_from_raw(block) if isinstance(block, dict) else None
            if result is None or result.credit is None:
                continue
            latest[episode_id or feedback_id] = ((ts - self.start) // DAY_MS, result.full_credit)
        total, passed = [0] * self.days, [0] * self.days
        for day, success in latest.values():
            total[day] += 1
            passed[day] += int(success)
        return total, passed

    def llm(self, owner: OwnerFilter | None) -> list[dto.LlmStageUsageDTO]:
        failed = func.sum(case((ApiLogRow.success == false(), 1), else_=0))
        tokens_in = func.sum(func.coalesce(ApiLogRow.output_json["tokensIn"].as_integer(), 0))
        tokens_out = func.sum(func.coalesce(ApiLogRow.output_json["tokensOut"].as_integer(), 0))
        stmt = (
            select(ApiLogRow.tool_name, func.count(), failed, tokens_in, tokens_out)
            .where(self._in_window(ApiLogRow.called_at), ApiLogRow.tool_name.startswith(LLM_PREFIX))
            .group_by(ApiLogRow.tool_name)
            .order_by(ApiLogRow.tool_name)
        )
        if owner is not None:
            # an LLM call belongs to the namespace of the episode it was made for (its session's owner)
            episode_of = ApiLogRow.input_json["episodeId"].as_string()
            stmt = (
                stmt.join(EpisodeRow, EpisodeRow.id == episode_of)
                .join(SessionRow, SessionRow.id == EpisodeRow.session_id)
                .where(owner.clause(SessionRow))
            )
        return [
            dto.LlmStageUsageDTO(
                stage=name.removeprefix(LLM_PREFIX),
                calls=int(calls),
                failures=int(failures or 0),
                tokens_in=int(t_in) if t_in else None,
                tokens_out=int(t_out) if t_out else None,
            )
            for name, calls, failures, t_in, t_out in self.db.execute(stmt)
        ]

    def latency(self, owner: OwnerFilter | None) -> dto.LatencySummaryDTO:
        stmt = (
            select(ApiLogRow.duration_ms)
            .where(
                self._in_window(ApiLogRow.called_at),
                ApiLogRow.tool_name == TURN_START_TOOL,
                ApiLogRow.input_json["type"].as_string() == TURN_START_TYPE,
            )
            .order_by(ApiLogRow.duration_ms)
        )
        if owner is not None:
            session_of = ApiLogRow.input_json["sessionId"].as_string()
            stmt = stmt.join(SessionRow, SessionRow.id == session_of).where(owner.clause(SessionRow))
        ordered = [int(ms) for ms in self.db.scalars(stmt)]
        p50, p95, p99 = (percentile(ordered, p) for p in PERCENTILES)
        return dto.LatencySummaryDTO(n=len(ordered), p50=p50, p95=p95, p99=p99)
