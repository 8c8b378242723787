"""The learning side of the core: the per-episode chain, explicit feedback, flush and startup recovery.

The chain for one episode is reward → decision repair (for corrections sent as feedback) → typed
experiences (from explicit feedback) → L2 policies → L3 world models → skills → strength (protection of the
user's own rules). It runs from the `LearningQueue` after an episode ends, or at once when feedback
arrives. In lightweight mode nothing here runs except storing feedback: capture and retrieval only, the
minimum cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import anyio
from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.events import EventScope, scope_of
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.experiences import experience_stage
from memos_bridge.core.learning.l2 import l2_stage
from memos_bridge.core.learning.queue import ForegroundGate, LearningQueue
from memos_bridge.core.learning.reward_stage import RewardReport, run_reward
from memos_bridge.core.learning.skills import skill_stage
from memos_bridge.core.learning.stage_timing import StageTimings
from memos_bridge.core.learning.world import world_stage
from memos_bridge.core.mappers import feedback_dto
from memos_bridge.core.reward import priority_at
from memos_bridge.core.sessions import Outbox, finalize_episode_sync
from memos_bridge.core.strength import strength_stage
from memos_bridge.ids import new_id
from memos_bridge.storage.activity import last_activity
from memos_bridge.storage.locks import write_first_wins
from memos_bridge.storage.models import EpisodeRow, FeedbackRow, TraceRow
from memos_bridge.storage.priority import settling

log = logging.getLogger(__name__)

RECOVERY_BATCH = 500
#: How long a chain's storage work keeps waiting for calm between a host's turns (`storage.priority.settling`)
#: before it only yields as other background work does: the most a burst of turns can delay a verdict's
#: lessons by this courtesy, on top of the chain's own time.
CHAIN_SETTLE_BUDGET_S = 2.0

Stage = Callable[[LearningContext, str, RewardReport], Awaitable[object]]
CorrectionRepair = Callable[[dto.FeedbackDTO], Awaitable[dto.RepairDTO | None]]


@dataclass
class ChainReport:
    episode_id: str
    trigger: str
    reward: RewardReport | None = None
    stages: dict[str, object] = field(default_factory=dict)


class LearningService:
    def __init__(
        self,
        ctx: LearningContext,
        *,
        lightweight: bool,
        publish: Callable[[Outbox], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx = ctx
        self.lightweight = lightweight
        self._publish = publish
        self.gate = ForegroundGate()
        self.queue = LearningQueue(
            self._chain,
            window_s=ctx.settings.learning.reward.feedback_window_s,
            concurrency=ctx.settings.learning.concurrency,
            gate=self.gate,
        )
        #: Stages after reward, in order, each `(ctx, episode_id, reward_report)`; skipped episodes stop early.
        # Order matters: experiences need the fresh reward; L2 must not see feedback lessons as its own
        # policies; world models abstract the experiences; skills need the whole family (success anchor +
        # lessons) and resolve trials with the outcome; strength protects the user's own rules last.
        self.stages: list[tuple[str, Stage]] = [
            ("experiences", experience_stage),
            ("l2", l2_stage),
            ("world", world_stage),
            ("skills", skill_stage),
            ("strength", strength_stage),
        ]
        #: Makes a decision repair from a correction sent as feedback (`RepairService.from_feedback`, wired by
        #: `MemoryCore`); the chain runs it after the re-score and before the experience builder.
        self.correction_repair: CorrectionRepair | None = None
        self._corrections: dict[str, list[dto.FeedbackDTO]] = {}
        self.last_reports: dict[str, ChainReport] = {}
        self._monotonic = monotonic
        self._started = monotonic()
        self._touched: dict[str, float] = {}
        #: Wall and CPU time of each stage's recent runs, for `core.health`.
        self.timings = StageTimings()

    # ------------------------------------------------------------------ the chain

    def _timed(self, stage: str) -> AbstractContextManager[None]:
        """Record one run of `stage`; it ran alone when no turn entered and no other chain ran meanwhile."""
        return self.timings.measure(
            stage,
            activity=lambda: (self.gate.entered, self.timings.started),
            idle=lambda: self.gate.active == 0 and len(self.queue.running) <= 1,
        )

    async def _chain(self, episode_id: str, trigger: str) -> ChainReport:
        """Run the stages for one episode; their events belong to the episode's namespace."""
        with settling(CHAIN_SETTLE_BUDGET_S):
            scope = await self.ctx.db.read(lambda db: _episode_scope(db, episode_id))
            if scope is None:
                return await self._run_stages(episode_id, trigger)
            with self.ctx.events.scoped(scope):
                return await self._run_stages(episode_id, trigger)

    async def _run_stages(self, episode_id: str, trigger: str) -> ChainReport:
        report = ChainReport(episode_id, trigger)
        self.last_reports[episode_id] = report
        if len(self.last_reports) > 256:
            self.last_reports.pop(next(iter(self.last_reports)))
        with self._timed("wait"):
            await self.gate.wait_quiet()
        with self._timed("reward"):
            report.reward = await run_reward(self.ctx, episode_id, trigger)
        with self._timed("repair") if episode_id in self._corrections else nullcontext():
            repairs = await self._repair_corrections(episode_id)  # a trivial (skipped) episode's too
        if repairs:
            report.stages["repair"] = repairs
        if report.reward.skipped:
            return report
        for name, stage in self.stages:
            with self._timed("wait"):
                await self.gate.wait_quiet()
            try:
                with self._timed(name):
                    report.stages[name] = await stage(self.ctx, episode_id, report.reward)
            except Exception:  # one failing stage must not stop the ones after it
                log.exception("learning stage %s failed for %s", name, episode_id)
                report.stages[name] = "failed"
        return report

    async def _repair_corrections(self, episode_id: str) -> list[str]:
        """The decision repairs of the corrections that arrived as feedback for this episode, oldest first."""
        waiting = self._corrections.pop(episode_id, [])
        made: list[str] = []
        for feedback in waiting:
            if self.correction_repair is None:
                break
            try:
                repair = await self.correction_repair(feedback)
            except Exception:  # the repair is an extra: the lessons after it must still be learned
                log.exception("decision repair from feedback %s failed", feedback.id)
                continue
            if repair is not None:
                made.append(repair.id)
        return made

    def on_finalized(self, episode_id: str, reason: str) -> None:
        """Hook for `SessionService`: an episode ended (gap, cap, new task, close, recovery)."""
        if not self.lightweight:
            self.queue.episode_finalized(episode_id, reason)

    async def flush(self) -> dto.FlushResult:
        await self.queue.flush()
        self.ctx.events.emit(EventType.LEARNING_FLUSHED, {"chainsRun": self.queue.stats.chains_run})
        return dto.FlushResult(chains_run=self.queue.stats.chains_run, pending=len(self.queue.pending))

    # ------------------------------------------------------------------ feedback

    async def submit_feedback(self, params: dto.FeedbackSubmitParams) -> dto.FeedbackDTO:
        """Store the verdict (once per evidenceId) and update the judged step at once; then, before replying,
        re-score the episode, make a decision repair when the verdict is a correction, run the experience
        builder and everything after it, and drain the queue, so the next turn.start sees every lesson.

        A retry (an evidenceId already stored) returns the stored verdict and does nothing else: it was
        counted, repaired and learned from the first time."""
        if not params.episode_id and not params.trace_id:
            raise MemosError(ErrorCode.INVALID_ARGUMENT, "feedback.submit needs episodeId or traceId")
        # The evidenceId is unique in the database: a retry through another service at the same moment loses the
        # race, runs again and finds this row (created False), so it is counted and learned from once.
        row, created = await write_first_wins(
            self.ctx.db, lambda db: self._store_feedback(db, params), what="feedback.submit"
        )
        feedback = feedback_dto(row)
        self.ctx.events.enter(scope_of(row))
        if not created:
            return feedback
        self.ctx.events.emit(
            EventType.FEEDBACK_RECEIVED,
            {"feedbackId": row.id, "episodeId": row.episode_id, "traceId": row.trace_id, "polarity": row.polarity},
        )
        if not self.lightweight and row.episode_id:
            if self.correction_repair is not None:
                self._corrections.setdefault(row.episode_id, []).append(feedback)
            await self.queue.run_now(row.episode_id, "explicit_feedback")
            await self.queue.flush()  # other finished episodes waiting for their window are learned too
        return feedback

    def _store_feedback(self, db: Session, params: dto.FeedbackSubmitParams) -> tuple[FeedbackRow, bool]:
        if params.evidence_id:
            existing = db.scalar(select(FeedbackRow).where(FeedbackRow.evidence_id == params.evidence_id))
            if existing is not None:
                return existing, False
        trace = db.scalar(select(TraceRow).where(TraceRow.id == params.trace_id)) if params.trace_id else None
        if params.trace_id and trace is None:
            raise MemosError(ErrorCode.TRACE_NOT_FOUND, f"trace not found: {params.trace_id}")
        episode_id = params.episode_id or (trace.episode_id if trace else None)
        episode = db.get(EpisodeRow, episode_id) if episode_id else None
        if episode is None:
            raise MemosError(ErrorCode.EPISODE_NOT_FOUND, f"episode not found: {episode_id}")
        if trace is not None and trace.episode_id != episode.id:
            raise MemosError(
                ErrorCode.INVALID_ARGUMENT,
                f"trace {trace.id} is not part of episode {episode.id}",
                {"traceId": trace.id, "episodeId": episode.id},
            )
        row = FeedbackRow(
            id=new_id("feedback"),
            ts=params.ts if params.ts is not None else self.ctx.clock(),
            episode_id=episode.id,
            trace_id=trace.id if trace else None,
            channel=params.channel,
            polarity=params.polarity,
            magnitude=params.magnitude,
            rationale=params.rationale,
            raw_json=params.raw,
            evidence_id=params.evidence_id,
            owner_agent_kind=episode.owner_agent_kind,
            owner_profile_id=episode.owner_profile_id,
            owner_workspace_id=episode.owner_workspace_id,
        )
        db.add(row)
        db.flush()
        if trace is not None:
            _update_judged_trace(db, trace, self.ctx.clock(), self.ctx.settings.learning.reward.half_life_days)
        return row, True

    # ------------------------------------------------------------------ recovery

    def recovery_window_ms(self) -> int:
        """How long an episode left open by a crash stays resumable: the merge window (a later turn would
        start a new task anyway), or `stale_topic_ms` when there is no gap rule; 0 = never finalised here."""
        settings = self.ctx.settings.session
        return settings.merge_max_gap_ms or settings.stale_topic_ms

    async def recover(self) -> dict[str, int]:
        """After a restart, settle what the previous process left behind (reference: startup recovery).

        * Open episodes with steps whose stored last activity is older than `recovery_window_ms` are
          finalised (`recovered`) and learned from like any ended task: nobody can resume them any more, and
          leaving them open would lose the task (the host may come back with a new session).
        * Recent or empty open episodes only become `interrupted`: a returning host resumes them; the stale
          sweep finalises them once they stay idle (measured from their stored last activity).
        * Finished episodes that never got scored (a crash before their chain ran) are queued again.

        Runs in the background (the server starts it next to serving); the first answer never waits for it.
        """
        window = self.recovery_window_ms()
        now = self.ctx.clock()

        def sweep(db: Session) -> tuple[Outbox, int, list[str]]:
            outbox = Outbox()
            interrupted = 0
            left_open = list(db.scalars(select(EpisodeRow).where(EpisodeRow.status == "open")))
            last = last_activity(db, [episode.id for episode in left_open])
            for episode in left_open:
                if episode.id in self._touched:
                    continue  # a host already resumed it in this process (recovery normally runs first)
                idle = now - last.get(episode.id, episode.started_at)
                if episode.trace_ids_json and window > 0 and idle > window:
                    finalize_episode_sync(outbox, episode, "recovered", now)
                elif episode.topic_state == "active":
                    episode.topic_state = "interrupted"
                    interrupted += 1
            finalized = {episode_id for episode_id, _ in outbox.finalized}
            unscored = [
                episode.id
                for episode in db.scalars(
                    select(EpisodeRow)
                    .where(EpisodeRow.status == "closed", EpisodeRow.r_task.is_(None))
                    .order_by(EpisodeRow.ended_at.desc())
                    .limit(RECOVERY_BATCH)
                )
                if not (episode.meta_json or {}).get("reward")
                and episode.trace_ids_json
                and episode.id not in finalized  # queued by its finalisation already
            ]
            return outbox, interrupted, unscored

        outbox, interrupted, unscored = await self.ctx.db.write(sweep)
        self._publish(outbox)  # the finalised episodes reach the queue through the session hooks
        if not self.lightweight:
            for episode_id in unscored:
                self.queue.episode_finalized(episode_id, "recovery")
        counts = {"finalized": len(outbox.finalized), "interrupted": interrupted, "requeued": len(unscored)}
        if any(counts.values()):
            log.info("startup recovery: %s", counts)
        return counts

    # ------------------------------------------------------------------ stale topics

    def touch(self, episode_id: str) -> None:
        """A turn used this episode now (service clock: once a host works in this process, idleness is
        measured on the service's own clock, whatever its `ts` values say)."""
        self._touched[episode_id] = self._monotonic()

    async def sweep_stale(self) -> list[str]:
        """Finalise open episodes nobody used for `session.stale_topic_ms`, so a host that vanished still gets
        its last task learned (the reference had this sweep but never called it). An episode used in this
        process is idle since its last use (service time); one that is not — left by an earlier process, or
        written without turns — since its stored last activity, and at least since the service started
        (so a host clock far ahead cannot keep it open for ever)."""
        stale_s = self.ctx.settings.session.stale_topic_ms / 1000
        now = self._monotonic()
        wall = self.ctx.clock()

        def work(db: Session) -> Outbox:
            outbox = Outbox()
            left_open = list(db.scalars(select(EpisodeRow).where(EpisodeRow.status == "open")))
            untouched = [episode.id for episode in left_open if episode.id not in self._touched]
            last = last_activity(db, untouched) if untouched else {}
            for episode in left_open:
                touched = self._touched.get(episode.id)
                if touched is not None:
                    idle = now - touched
                else:
                    stored = (wall - last.get(episode.id, episode.started_at)) / 1000
                    idle = max(now - self._started, stored)
                if idle > stale_s:
                    finalize_episode_sync(outbox, episode, "stale", wall)
            return outbox

        if stale_s <= 0:
            return []
        outbox = await self.ctx.db.write(work)
        self._publish(outbox)  # finalised episodes reach on_finalized through the session hooks
        for episode_id, _ in outbox.finalized:
            self._touched.pop(episode_id, None)
        return [episode_id for episode_id, _ in outbox.finalized]

    async def run_sweeper(self) -> None:
        """Sweep stale topics every few minutes (start in the server's task group)."""
        interval = max(1.0, min(300.0, self.ctx.settings.session.stale_topic_ms / 4000))
        while True:
            await anyio.sleep(interval)
            try:
                await self.sweep_stale()
            except Exception:
                log.exception("stale-topic sweep failed")


def _episode_scope(db: Session, episode_id: str) -> EventScope | None:
    episode = db.get(EpisodeRow, episode_id)
    return None if episode is None else scope_of(episode)


def _update_judged_trace(db: Session, trace: TraceRow, now: int, half_life_days: float) -> None:
    """The step a verdict names gets value = Σ±magnitude / Σmagnitude over its feedback at once (the
    episode's back-propagation then refines every step), and the priority that value earns,
    `max(V, 0)·0.5^(age/half-life)`. The reference kept `max(priority, |V|)`, which ranked a step the user
    rejected at priority 1 — above every step that worked; a negative step keeps priority 0 (it still
    feeds anti-patterns and is never deleted)."""
    rows = list(db.scalars(select(FeedbackRow).where(FeedbackRow.trace_id == trace.id)))
    sign = {"positive": 1.0, "negative": -1.0}
    weighted = [(sign[r.polarity], r.magnitude) for r in rows if r.polarity in sign and r.magnitude > 0]
    total = sum(m for _, m in weighted)
    if total <= 0:
        return
    value = max(-1.0, min(1.0, sum(s * m for s, m in weighted) / total))
    trace.value = value
    trace.r_human = value
    trace.priority = priority_at(value, trace.ts, now, half_life_days=half_life_days)
