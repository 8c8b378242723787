"""The reward stage: score one finished episode and spread the credit over its steps.

Reads the episode's turns, steps and feedback; decides whether it is worth scoring (skip gate); computes
R_human (verifier → LLM axes → feedback → transcript heuristic, `core/reward.py`); weighs each step with α
(adapter value → reflection heuristic → one batched LLM call for the steps still without a usable weight);
back-propagates V over the steps and writes value, α, r_human and priority on every trace plus `r_task`,
the outcome and a `meta.reward` record on the episode. Re-running (late feedback) overwrites, never adds.

LLM use is bounded: at most three calls per run (R_human, one reflection batch, the episode title and
summary), all skipped when the facade says no LLM is available (none configured, breaker open, budget
spent) — the deterministic paths then produce the same fields.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.contract.errors import MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core import reward
from memos_bridge.core.capture import tool_signature
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.llm.prompts import EPISODE_SUMMARIZE, R_HUMAN_SCORE, REFLECTION_SCORE, StepScore
from memos_bridge.rules.text import clip
from memos_bridge.storage.models import EpisodeRow, FeedbackRow, TraceRow, TurnRow

log = logging.getLogger(__name__)

MAX_LLM_STEPS = 24  # steps sent to one reflection batch (the rest keep their heuristic α)
STEP_CHARS = 300
FEEDBACK_LINES = 8


@dataclass
class RewardReport:
    episode_id: str
    skipped: bool = False
    skip_reason: str = ""
    r_task: float | None = None
    outcome: str = "unknown"
    source: str = "none"
    values: list[float] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)
    llm_calls: int = 0


@dataclass(frozen=True)
class _EpisodeData:
    episode: EpisodeRow
    traces: list[TraceRow]
    turns: list[TurnRow]
    feedback: list[FeedbackRow]


def _load(db: Session, episode_id: str) -> _EpisodeData | None:
    episode = db.get(EpisodeRow, episode_id)
    if episode is None:
        return None
    traces = list(
        db.scalars(
            select(TraceRow)
            .where(TraceRow.episode_id == episode_id, TraceRow.archived_at.is_(None))
            .order_by(TraceRow.ts, TraceRow.step_index, TraceRow.rid)
        )
    )
    turns = list(db.scalars(select(TurnRow).where(TurnRow.episode_id == episode_id).order_by(TurnRow.turn_id)))
    trace_ids = [t.id for t in traces]
    feedback_stmt = select(FeedbackRow).where(FeedbackRow.episode_id == episode_id)
    if trace_ids:
        feedback_stmt = select(FeedbackRow).where(
            (FeedbackRow.episode_id == episode_id) | (FeedbackRow.trace_id.in_(trace_ids))
        )
    feedback = list(db.scalars(feedback_stmt.order_by(FeedbackRow.ts)))
    for row in (episode, *traces, *turns, *feedback):
        db.expunge(row)
    return _EpisodeData(episode, traces, turns, feedback)


def digest_of(turns: list[TurnRow], traces: list[TraceRow], host_context: str = "") -> reward.EpisodeDigest:
    """The episode as the reward math sees it: per user turn, its ask, tools (with failures) and reply."""
    by_turn: dict[int, list[TraceRow]] = {}
    for trace in traces:
        by_turn.setdefault(trace.turn_id, []).append(trace)
    asks = {turn.turn_id: turn.user_text for turn in turns}
    digest_turns: list[reward.DigestTurn] = []
    for turn_id in sorted(set(asks) | set(by_turn)):
        steps = by_turn.get(turn_id, [])
        tools: list[reward.ToolUse] = []
        reply = ""
        for step in steps:
            for call in step.tool_calls_json or []:
                if isinstance(call, dict):
                    failed = bool(call.get("errorCode")) or call.get("success") is False
                    tools.append(
                        reward.ToolUse(str(call.get("name", "tool")), failed, str(call.get("errorCode") or ""))
                    )
            if step.step_kind == "reply" and step.agent_text:
                reply = step.agent_text
        user_text = asks.get(turn_id) or next((s.user_text for s in steps if s.user_text), "")
        digest_turns.append(reward.DigestTurn(user_text=user_text, assistant_text=reply, tools=tuple(tools)))
    return reward.EpisodeDigest(turns=tuple(digest_turns), host_context=host_context)


def feedback_signals(rows: list[FeedbackRow]) -> list[reward.FeedbackSignal]:
    """Stored feedback as reward inputs; a verifier result in `raw.verifier` (or `raw`) is kept as such."""
    out: list[reward.FeedbackSignal] = []
    for row in rows:
        raw = row.raw_json if isinstance(row.raw_json, dict) else {}
        verifier = reward.verifier_from_raw(raw.get("verifier")) if isinstance(raw.get("verifier"), dict) else None
        polarity = row.polarity if row.polarity in ("positive", "negative", "neutral") else "neutral"
        channel: Literal["explicit", "implicit"] = "implicit" if row.channel == "implicit" else "explicit"
        out.append(
            reward.FeedbackSignal(
                polarity=polarity,  # type: ignore[arg-type]
                magnitude=float(row.magnitude),
                channel=channel,
                ts=row.ts,
                verifier=verifier,
            )
        )
    return out


def _feedback_lines(rows: list[FeedbackRow]) -> str:
    lines = []
    for row in rows[-FEEDBACK_LINES:]:
        text = row.rationale or ""
        if not text and isinstance(row.raw_json, dict):
            text = str(row.raw_json.get("text") or row.raw_json.get("verifier") or "")
        lines.append(f"[{row.channel}/{row.polarity} {row.magnitude:.2f}] {clip(text, 800)}")
    return "\n".join(lines) or "(none)"


def _step_line(index: int, trace: TraceRow) -> str:
    tools = "; ".join(tool_signature(call, 120) for call in (trace.tool_calls_json or []))
    parts = [f"{index}. {clip(trace.summary or trace.agent_text or trace.user_text, STEP_CHARS)}"]
    if tools:
        parts.append(f"   tools: {tools}")
    if trace.reflection:
        parts.append(f"   reflection: {clip(trace.reflection, STEP_CHARS)}")
    return "\n".join(parts)


def _adapter_alpha(trace: TraceRow) -> float | None:
    value = (trace.meta_json or {}).get("alpha")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


async def run_reward(ctx: LearningContext, episode_id: str, trigger: str) -> RewardReport:
    """Score `episode_id` and persist the values; `trigger` (finalized, explicit_feedback, recovery...) is
    recorded in `meta.reward` for the operator."""
    settings = ctx.settings.learning.reward
    report = RewardReport(episode_id)
    data = await ctx.db.read(lambda db: _load(db, episode_id))
    if data is None or not data.traces:
        report.skipped, report.skip_reason = True, "no_traces" if data else "no_episode"
        return report
    digest = digest_of(data.turns, data.traces, str((data.episode.meta_json or {}).get("hostContext", "")))
    signals = feedback_signals(data.feedback)
    explicit = any(s.channel == "explicit" for s in signals)
    gate = reward.skip_gate(digest)
    if gate.skip and not explicit:  # feedback on a short episode is still worth its lesson
        report.skipped, report.skip_reason = True, gate.reason
        await ctx.db.write(lambda db: _mark_skipped(db, episode_id, gate.reason, trigger, ctx.clock()))
        ctx.events.emit(EventType.REWARD_SKIPPED, {"episodeId": episode_id, "reason": gate.reason})
        return report

    summary = reward.build_task_summary(digest)
    use_llm = settings.llm_scoring and ctx.llm_ready(episode_id)
    axes: reward.AxisScores | None = None
    if use_llm and reward.latest_verifier(signals) is None:  # a verifier outranks the LLM: do not ask
        try:
            answer = await ctx.llm.complete_json(
                R_HUMAN_SCORE,
                {"summary": summary, "feedback": _feedback_lines(data.feedback)},
                op="reward.r_human",
                episode_id=episode_id,
            )
            report.llm_calls += 1
            axes = reward.AxisScores(answer.goal_achievement, answer.process_quality, answer.user_satisfaction)
        except MemosError as exc:
            log.info("R_human LLM scoring unavailable (%s); using the deterministic score", exc.code.value)
    human = reward.score_human(axes=axes, feedback=signals, digest=digest)
    # A re-score (late feedback, a reopened task finalised again) of the same steps reuses the LLM's title
    # and reflection weights: only the reward changes, so only R_human is worth asking again.
    trace_key = hashlib.sha1("\n".join(t.id for t in data.traces).encode()).hexdigest()[:16]
    previous = (data.episode.meta_json or {}).get("reward") or {}
    same_steps = previous.get("status") == "done" and previous.get("traceKey") == trace_key
    titled = previous.get("summary") if same_steps else None
    if titled is None and use_llm:
        titled = await _summarise(ctx, episode_id, summary, report)
    reuse = list(previous.get("alphaSources") or []) if same_steps else []

    alphas = await _alphas(ctx, episode_id, data.traces, summary, human, use_llm, report, reuse)
    now = ctx.clock()
    ages = [max(now - t.ts, 0) / reward.MS_PER_DAY for t in data.traces]
    scored = reward.score_episode(
        human,
        [a.alpha for a in alphas],
        step_ages_days=ages,
        verifier=reward.latest_verifier(signals),
        gamma=settings.gamma,
        half_life_days=settings.half_life_days,
        alpha_floor=settings.alpha_floor,
    )
    record = {
        "status": "done",
        "trigger": trigger,
        "ts": now,
        "rHuman": round(human.r_human, 4),
        "source": human.source,
        "reason": human.reason,
        "axes": None
        if human.axes is None
        else {"goal": human.axes.goal, "process": human.axes.process, "satisfaction": human.axes.satisfaction},
        "outcome": scored.outcome,
        "outcomeReason": scored.outcome_reason,
        "alphaSources": [a.source for a in alphas],
        "traceCount": len(data.traces),
        "traceKey": trace_key,
        "feedbackCount": len(data.feedback),
        "llmCalls": report.llm_calls,
    }
    if titled is not None:
        record["summary"] = titled
    trace_ids = [t.id for t in data.traces]
    await ctx.db.write(lambda db: _persist(db, episode_id, trace_ids, scored, human.r_human, record))
    report.r_task, report.outcome, report.source = scored.r_task, scored.outcome, human.source
    report.values, report.trace_ids = list(scored.values), trace_ids
    ctx.events.emit(
        EventType.REWARD_UPDATED,
        {"episodeId": episode_id, "rTask": scored.r_task, "outcome": scored.outcome, "source": human.source},
    )
    return report


async def _summarise(
    ctx: LearningContext, episode_id: str, summary: str, report: RewardReport
) -> dict[str, str] | None:
    """An LLM title and summary of the finished task (for episode lists and previews); the deterministic
    task summary stays the scoring input either way."""
    try:
        answer = await ctx.llm.complete_json(
            EPISODE_SUMMARIZE, {"transcript": summary}, op="episode.summarize", episode_id=episode_id
        )
    except MemosError as exc:
        log.info("episode summary unavailable (%s)", exc.code.value)
        return None
    report.llm_calls += 1
    return {"title": answer.title, "text": answer.summary}


async def _alphas(
    ctx: LearningContext,
    episode_id: str,
    traces: list[TraceRow],
    summary: str,
    human: reward.HumanScore,
    use_llm: bool,
    report: RewardReport,
    reuse: list[str],
) -> list[reward.AlphaScore]:
    """α per step; one LLM batch covers the steps the adapter and the reflection heuristic left at 0.

    `reuse` holds the α sources of an earlier run over the same steps: its LLM weights (stored on the
    traces) are taken again instead of asking again."""
    floor = ctx.settings.learning.reward.alpha_floor
    llm_scores: dict[int, StepScore] = {}
    if len(reuse) == len(traces):
        for i, (trace, source) in enumerate(zip(traces, reuse, strict=True)):
            if source == "llm":
                llm_scores[i] = StepScore(idx=i + 1, alpha=trace.alpha, usable=trace.alpha > 0)
        use_llm = False
    wanted = [i for i, t in enumerate(traces) if reward.needs_llm_alpha(_adapter_alpha(t), t.reflection, floor)]
    if use_llm and wanted and len(traces) > 1:  # a single step takes R whatever its α
        shown = wanted[:MAX_LLM_STEPS]
        try:
            answer = await ctx.llm.complete_json(
                REFLECTION_SCORE,
                {
                    "task": clip(summary, 1500),
                    "steps": "\n".join(_step_line(n + 1, traces[i]) for n, i in enumerate(shown)),
                    "outcome": f"{human.source}: R = {human.r_human:+.2f} ({human.reason})",
                },
                op="reflection.score",
                episode_id=episode_id,
            )
            report.llm_calls += 1
            for score in answer.scores:
                if 1 <= score.idx <= len(shown):
                    llm_scores[shown[score.idx - 1]] = score
        except MemosError as exc:
            log.info("reflection scoring unavailable (%s); heuristic α only", exc.code.value)
    out: list[reward.AlphaScore] = []
    for i, trace in enumerate(traces):
        graded = llm_scores.get(i)
        out.append(
            reward.resolve_alpha(
                adapter_alpha=_adapter_alpha(trace),
                reflection=trace.reflection,
                llm_alpha=None if graded is None else graded.alpha,
                llm_usable=None if graded is None else graded.usable,
                floor=floor,
            )
        )
    return out


def _persist(
    db: Session,
    episode_id: str,
    trace_ids: list[str],
    scored: reward.EpisodeReward,
    r_human: float,
    record: dict[str, Any],
) -> None:
    rows = {t.id: t for t in db.scalars(select(TraceRow).where(TraceRow.id.in_(trace_ids)))}
    for index, trace_id in enumerate(trace_ids):
        row = rows.get(trace_id)
        if row is None:
            continue  # deleted meanwhile
        row.value = scored.values[index]
        row.alpha = scored.alphas[index]
        row.r_human = r_human
        row.priority = scored.priorities[index]
    episode = db.get(EpisodeRow, episode_id)
    if episode is not None:
        episode.r_task = scored.r_task
        episode.meta_json = {**(episode.meta_json or {}), "reward": record}


def _mark_skipped(db: Session, episode_id: str, reason: str, trigger: str, now: int) -> None:
    episode = db.get(EpisodeRow, episode_id)
    if episode is None:
        return
    record = {"status": "skipped", "reason": reason, "trigger": trigger, "ts": now}
    episode.meta_json = {**(episode.meta_json or {}), "reward": record}
    episode.r_task = None
