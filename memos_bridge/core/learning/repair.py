"""Decision repair: break an agent's retry loop, and remember a user's correction, as prefer/avoid lines.

Two triggers (reference §6.9; the reference's failure trigger was unreachable over RPC, here it is the
`tool.outcome` method):

* **Failure burst** — `record_tool_outcome` keeps the last `failure_window` outcomes of every
  (session, tool) *in memory* (see `OutcomeWindows`: nothing else about single outcomes is stored). When the
  window holds ≥ `failure_threshold` failures and no success, a repair is made — unless the same context
  (sha1 of tool + error key, 16 hex) was repaired in this session within `cooldown_ms` — and returned in the
  `tool.outcome` result so the host can show it at once. The window then restarts (the next repair needs a
  fresh burst). The cooldown is read from `decision_repairs`, so it survives a restart; a repair in flight
  also blocks a concurrent duplicate. A success anywhere in the window prevents a burst, so after a success
  it takes `failure_window` failures in a row (the reference's rule, kept literally).
* **User correction** — `from_correction` ("不对，应该用 pandas", "wrong, use polars instead") makes a
  repair at once from the user's own instruction. It runs on the `turn.start` path, so it uses the template
  and one database write; `refine` rewords it with the LLM later, for the caller to schedule in the
  background. `from_feedback` does the same for a correction sent as negative `feedback.submit`; the
  learning chain runs it after the re-score and before the experience builder.

Evidence, the value guard and the template wording are the pure rules of `repair_rules.py`. The LLM
(`DECISION_REPAIR`) words a burst's repair when `ctx.llm_ready(...)` and `use_llm` (never in lightweight mode,
where `tool.outcome` still records outcomes and returns template repairs); any `MemosError` (none
configured, budget, breaker, malformed twice) falls back to the template, and an empty field the LLM leaves
is taken from the template too.

Every repair is stored as a `decision_repairs` row in the session owner's namespace, appended to the
decision guidance of the owner's live policies whose source episodes overlap the evidence episodes, and
announced with `decision_repair.created`. `active_guidance` returns a session's fresh repairs for the next
`turn.start` to inject.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.repair_rules import (
    Burst,
    EvidenceSplit,
    OutcomeWindows,
    RepairSource,
    ToolOutcome,
    TraceEvidence,
    Wording,
    apply_value_guard,
    burst_template,
    context_hash,
    correction_template,
    detect_burst,
    error_display,
    error_key,
    for_policies,
    matches,
    merge_guidance,
    same_text,
    split_evidence,
    trace_evidence,
    value_gap,
)
from memos_bridge.core.relation import extract_correction
from memos_bridge.ids import new_id
from memos_bridge.llm.prompts import DECISION_REPAIR, RepairOutput
from memos_bridge.rules.instance import InstanceContext
from memos_bridge.rules.sameness import same_request
from memos_bridge.rules.text import clip, squash
from memos_bridge.storage import repos
from memos_bridge.storage.models import DecisionRepairRow, PolicyRow, TraceRow
from memos_bridge.storage.owner import OwnerFilter

log = logging.getLogger(__name__)

#: Operation name of the LLM call in `api_logs` and the facade's counters.
REPAIR_OP: Final = "decision.repair"
#: The LLM is asked while the host waits for `tool.outcome`: a slow answer is worth less than a template.
LLM_TIMEOUT_MS: Final = 8_000
#: Evidence candidates: the session's recent steps, the episode's, and the owner's scored history.
SESSION_TRACE_LIMIT: Final = 60
EPISODE_TRACE_LIMIT: Final = 40
HISTORY_TRACE_LIMIT: Final = 200
#: Steps read to find the answer a correction rejects (the last turn of the episode).
LAST_TURN_TRACE_LIMIT: Final = 20
#: Repairs `active_guidance` returns at most (newest first).
MAX_ACTIVE_GUIDANCE: Final = 5
SESSION_CACHE_LIMIT: Final = 10_000
_NONE: Final = "(none)"

_TRACE_COLUMNS = (
    TraceRow.id,
    TraceRow.episode_id,
    TraceRow.session_id,
    TraceRow.ts,
    TraceRow.value,
    TraceRow.summary,
    TraceRow.agent_text,
    TraceRow.tool_calls_json,
    TraceRow.error_signatures_json,
    TraceRow.turn_id,
)


@dataclass(frozen=True)
class _SessionInfo:
    session_id: str
    owner: OwnerFilter
    episode_id: str | None


@dataclass(frozen=True)
class _Draft:
    """A repair ready to be stored."""

    info: _SessionInfo
    source: RepairSource
    tool: str | None
    context_hash: str
    wording: Wording
    high_ids: list[str]
    low_ids: list[str]
    evidence_episodes: set[str]
    #: The texts of the answer being repaired (its values are instance content for other tasks).
    rejected_texts: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------------------
# Storage helpers (run inside `db.read` / `db.write`)
# --------------------------------------------------------------------------------------------------------


def _session_info(db: Session, session_id: str, episode_id: str | None) -> _SessionInfo:
    session = repos.get_session(db, session_id)
    if session is None:
        raise MemosError(ErrorCode.SESSION_NOT_FOUND, f"session not found: {session_id}")
    if episode_id is not None:
        episode = repos.get_episode(db, episode_id)
        if episode is None:
            raise MemosError(ErrorCode.EPISODE_NOT_FOUND, f"episode not found: {episode_id}")
        if episode.session_id != session_id:
            raise MemosError(
                ErrorCode.INVALID_ARGUMENT,
                f"episode {episode_id} belongs to another session",
                {"episodeId": episode_id, "sessionId": session_id},
            )
    else:
        open_episodes = repos.open_episodes(db, session_id)
        episode_id = open_episodes[0].id if open_episodes else None
    owner = OwnerFilter(session.owner_agent_kind, session.owner_profile_id, session.owner_workspace_id)
    return _SessionInfo(session_id, owner, episode_id)


def _cooling(db: Session, session_id: str, ctx_hash: str, now: int, cooldown_ms: int) -> bool:
    """Whether this session already has a repair of this context younger than the cooldown."""
    if cooldown_ms <= 0:
        return False
    stmt = (
        select(DecisionRepairRow.id)
        .where(
            DecisionRepairRow.session_id == session_id,
            DecisionRepairRow.context_hash == ctx_hash,
            DecisionRepairRow.ts > now - cooldown_ms,
        )
        .limit(1)
    )
    return db.scalar(stmt) is not None


def _evidence(row: Any, *, local: bool) -> TraceEvidence:
    return trace_evidence(
        trace_id=row.id,
        episode_id=row.episode_id,
        session_id=row.session_id,
        ts=row.ts,
        value=row.value,
        summary=row.summary or "",
        agent_text=row.agent_text or "",
        tool_calls=row.tool_calls_json or [],
        error_signatures=row.error_signatures_json or [],
        local=local,
    )


def _candidates(db: Session, info: _SessionInfo, tool: str | None, key: str) -> list[TraceEvidence]:
    """The session's recent steps, the episode's, and the owner's earlier successes with the same tool/error."""
    live = TraceRow.archived_at.is_(None)
    local_rows = list(
        db.execute(
            select(*_TRACE_COLUMNS)
            .where(TraceRow.session_id == info.session_id, live)
            .order_by(TraceRow.ts.desc(), TraceRow.step_index.desc())
            .limit(SESSION_TRACE_LIMIT)
        )
    )
    if info.episode_id is not None:
        local_rows += db.execute(
            select(*_TRACE_COLUMNS)
            .where(TraceRow.episode_id == info.episode_id, live)
            .order_by(TraceRow.ts.desc(), TraceRow.step_index.desc())
            .limit(EPISODE_TRACE_LIMIT)
        )
    found = {row.id: _evidence(row, local=True) for row in local_rows}
    history = db.execute(
        select(*_TRACE_COLUMNS)
        .where(info.owner.clause(TraceRow), TraceRow.session_id != info.session_id, TraceRow.value > 0, live)
        .order_by(TraceRow.ts.desc())
        .limit(HISTORY_TRACE_LIMIT)
    )
    for row in history:
        evidence = _evidence(row, local=False)
        if row.id not in found and matches(evidence, tool, key):
            found[row.id] = evidence
    return list(found.values())


def _owned(owner: OwnerFilter) -> Any:
    """Rows the owner may edit: its own namespace only (a policy shared by someone else is not ours to change)."""
    return and_(
        PolicyRow.owner_agent_kind == owner.agent_kind,
        PolicyRow.owner_profile_id == owner.profile_id,
        PolicyRow.owner_workspace_id.is_not_distinct_from(owner.workspace_id),
    )


def _attach(
    db: Session,
    owner: OwnerFilter,
    episodes: set[str],
    wording: Wording,
    now: int,
    *,
    remove: tuple[str, str] | None = None,
    only: Sequence[str] | None = None,
    rejected_texts: Sequence[str] | None = None,
) -> list[str]:
    """Add the repair's lines to the live policies whose source episodes overlap `episodes` (or to `only`).

    A user's correction (`rejected_texts` given: the answer it rejects) attaches its instruction only, without
    that answer's values and verdicts, since policies are recalled for other tasks: its "Avoid: repeating …"
    line names the rejected attempt itself. A tool-failure repair is attached as
    worded: its numbers (a row count, a port in the error) describe the tool, not one task's answer."""
    if rejected_texts is not None:
        context = InstanceContext.build(answer_texts=rejected_texts)
        # what the user rejected is the attempt of this task; what travels with a policy is the instruction
        wording = for_policies(Wording(wording.preference, "", wording.severity, wording.confidence), context)
        if remove is not None:
            removed = for_policies(Wording(remove[0], remove[1], "info", 0.0), context)
            remove = (removed.preference, removed.anti_pattern)
    live = and_(_owned(owner), PolicyRow.status != "archived", PolicyRow.archived_at.is_(None))
    if only is not None:
        ids = list(only)
    else:
        if not episodes:
            return []
        rows = db.execute(select(PolicyRow.id, PolicyRow.source_episodes_json).where(live))
        ids = [pid for pid, sources in rows if episodes.intersection(sources or [])]
    if not ids:
        return []
    attached: list[str] = []
    for policy in db.scalars(select(PolicyRow).where(live, PolicyRow.id.in_(ids)).order_by(PolicyRow.id)):
        merged = merge_guidance(policy.decision_guidance_json, wording.preference, wording.anti_pattern, remove=remove)
        if merged is not None:
            policy.decision_guidance_json = merged  # a new object: in-place JSON edits are not tracked
            policy.updated_at = now
        attached.append(policy.id)
    return attached


def _persist(db: Session, draft: _Draft, now: int) -> DecisionRepairRow:
    correction = draft.source == "user_correction"
    attached = _attach(
        db,
        draft.info.owner,
        draft.evidence_episodes,
        draft.wording,
        now,
        rejected_texts=draft.rejected_texts if correction else None,
    )
    row = DecisionRepairRow(
        **draft.info.owner.as_columns(),
        id=new_id("repair"),
        ts=now,
        session_id=draft.info.session_id,
        context_hash=draft.context_hash,
        preference=draft.wording.preference,
        anti_pattern=draft.wording.anti_pattern,
        high_value_traces_json=draft.high_ids,
        low_value_traces_json=draft.low_ids,
        validated=False,
        episode_id=draft.info.episode_id,
        tool=draft.tool,
        source=draft.source,
        severity=draft.wording.severity,
        confidence=draft.wording.confidence,
        attached_policy_ids_json=attached,
    )
    db.add(row)
    return row


def repair_dto(row: DecisionRepairRow) -> dto.RepairDTO:
    """The wire view of a stored repair."""
    return dto.RepairDTO(
        id=row.id,
        ts=row.ts,
        source="user_correction" if row.source == "user_correction" else "failure_burst",
        severity="info" if row.severity == "info" else "warn",
        preference=row.preference,
        anti_pattern=row.anti_pattern,
        tool=row.tool,
        episode_id=row.episode_id,
        confidence=min(max(row.confidence, 0.0), 1.0),
    )


def _last_turn(db: Session, episode_id: str) -> list[TraceEvidence]:
    """The steps of the episode's latest turn: the answer a correction rejects."""
    rows = list(
        db.execute(
            select(*_TRACE_COLUMNS)
            .where(TraceRow.episode_id == episode_id, TraceRow.archived_at.is_(None))
            .order_by(TraceRow.turn_id.desc(), TraceRow.step_index.desc())
            .limit(LAST_TURN_TRACE_LIMIT)
        )
    )
    if not rows:
        return []
    turn_id = rows[0].turn_id
    return [_evidence(row, local=True) for row in rows if row.turn_id == turn_id]


# --------------------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------------------


class RepairService:
    """Failure bursts and user corrections → stored, attached and announced prefer/avoid lines."""

    def __init__(self, ctx: LearningContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings.learning.repair
        self.windows = OutcomeWindows(self.settings.failure_window)
        self._in_flight: set[tuple[str, str]] = set()
        # Sessions whose repairs were read once, and the newest repair each has (kept current by `_announce`,
        # which every new or reworded repair goes through): most turns then need no read at all.
        self._guidance_known: set[str] = set()
        self._newest_repair: dict[str, int] = {}

    @property
    def use_llm(self) -> bool:
        """Whether repairs may be worded by the LLM: lightweight mode (capture + retrieval at the minimum cost)
        keeps the repairs, which cost no LLM call with the templates, but never asks the LLM to word them."""
        return self.settings.use_llm and not self.ctx.settings.lightweight

    # ------------------------------------------------------------------------------ tool.outcome

    async def record_tool_outcome(self, params: dto.ToolOutcomeParams) -> dto.ToolOutcomeResult:
        """Record one outcome; return a repair when it completes a failure burst.

        Raises `session_not_found` / `episode_not_found` for unknown ids (an adapter bug should be loud), and
        `invalid_argument` for an episode of another session.
        """
        info = await self.ctx.db.read(lambda db: _session_info(db, params.session_id, params.episode_id))
        tool = params.tool.strip() or params.tool
        outcome = ToolOutcome(
            tool=tool,
            success=params.success,
            error="" if params.success else error_display(params.error),
            error_key="" if params.success else error_key(params.error),
            ts=params.ts,
            episode_id=info.episode_id,
        )
        burst = detect_burst(self.windows.record(info.session_id, outcome), self.settings.failure_threshold)
        if burst is None:
            return dto.ToolOutcomeResult()
        repair = await self._repair_burst(info, burst)
        if repair is not None:
            self.windows.clear(info.session_id, tool)
        return dto.ToolOutcomeResult(repair=repair)

    async def _repair_burst(self, info: _SessionInfo, burst: Burst) -> dto.RepairDTO | None:
        ctx_hash = context_hash(burst.tool.casefold(), burst.error_key)
        claim = (info.session_id, ctx_hash)
        if claim in self._in_flight:
            return None
        self._in_flight.add(claim)
        try:
            now = self.ctx.clock()

            def gather(db: Session) -> list[TraceEvidence] | None:
                if _cooling(db, info.session_id, ctx_hash, now, self.settings.cooldown_ms):
                    return None
                return _candidates(db, info, burst.tool, burst.error_key)

            candidates = await self.ctx.db.read(gather)
            if candidates is None:
                log.debug("repair of %s in %s skipped: cooldown", burst.tool, info.session_id)
                return None
            found = split_evidence(candidates, burst.tool, burst.error_key)
            split = apply_value_guard(found, self.settings.value_delta)
            if split is not found:
                log.info(
                    "repair of %s in %s: value gap %.2f < %.2f, the earlier successes are no contrast",
                    burst.tool,
                    info.session_id,
                    value_gap(found),
                    self.settings.value_delta,
                )
            template = burst_template(burst, split)
            wording = await self._llm_wording(
                info.episode_id, template, self._failure_lines(burst, split), self._success_lines(split), _NONE
            )
            draft = _Draft(
                info=info,
                source="failure_burst",
                tool=burst.tool,
                context_hash=ctx_hash,
                wording=wording,
                high_ids=[t.id for t in split.high],
                low_ids=[t.id for t in split.low],
                evidence_episodes=split.episode_ids() | ({info.episode_id} if info.episode_id else set()),
            )
            return await self._store(draft)
        finally:
            self._in_flight.discard(claim)

    # ------------------------------------------------------------------------------ user corrections

    async def from_correction(
        self,
        session_id: str,
        episode_id: str | None,
        owner: OwnerFilter,
        correction_text: str | None,
        user_text: str,
        *,
        attach: bool = True,
    ) -> dto.RepairDTO | None:
        """A repair from a user's correction, made at once with the template (the caller is `turn.start`).

        With `attach`, the user's instruction is also added to the decision guidance of the policies learnt on
        the same episode (without the rejected attempt's values): a correction said in chat has no other way to
        outlive its task. A correction sent through `feedback.submit` does not attach: the experience stage
        learns its lesson from the same words through the instance filter.

        `correction_text` is the instruction the relation classifier extracted; when it is missing the user
        text is searched again. A bare rejection without an instruction ("不对", "wrong") teaches no
        preference and makes no repair (None). One database write: the rejected turn is read, the repair
        stored and attached in the same transaction. Bypasses the value guard; an identical correction in
        the same session within the cooldown returns None (the earlier repair is still injected).
        """
        instruction = squash(correction_text or "") or squash(extract_correction(user_text, after_rejection=True) or "")
        if not instruction:
            return None
        now = self.ctx.clock()
        info = _SessionInfo(session_id, owner, episode_id)

        def work(db: Session) -> DecisionRepairRow | None:
            rejected = _last_turn(db, episode_id) if episode_id else []
            failing = next((t for t in rejected if t.failed and t.tools), None)
            tool_step = failing or next((t for t in rejected if t.tools), None)
            tool = tool_step.tools[0] if tool_step else None
            ctx_hash = context_hash((tool or "").casefold(), "correction:" + instruction.casefold())
            if _cooling(db, session_id, ctx_hash, now, self.settings.cooldown_ms):
                return None
            action = failing or tool_step or (rejected[0] if rejected else None)
            wording = correction_template(
                instruction,
                user_text,
                action.action if action else None,
                failures_seen=any(t.failed for t in rejected),
            )
            draft = _Draft(
                info=info,
                source="user_correction",
                tool=tool,
                context_hash=ctx_hash,
                wording=wording,
                high_ids=[],
                low_ids=[t.id for t in rejected],
                evidence_episodes={episode_id} if episode_id and attach else set(),
                rejected_texts=tuple(f"{t.summary}\n{t.action}" for t in rejected),
            )
            return _persist(db, draft, now)

        row = await self.ctx.db.write(work)
        if row is None:
            return None
        self._announce(row)
        return repair_dto(row)

    async def from_feedback(self, feedback: dto.FeedbackDTO) -> dto.RepairDTO | None:
        """A user's negative feedback that says what to do instead ("wrong: use X instead", "不对，应该…") is
        also a correction: a repair for the session's next turns, made like `from_correction`. A verifier's
        verdict (`raw.verifier`) is structured evidence for the experience builder, not a chat correction,
        and a bare rejection teaches no preference: both return None, as does an unknown episode."""
        text = feedback.rationale or ""
        if feedback.polarity != "negative" or not feedback.episode_id or not text.strip():
            return None
        if isinstance(feedback.raw, dict) and "verifier" in feedback.raw:
            return None
        instruction = extract_correction(text, after_rejection=True)
        if instruction is None:
            return None
        episode = await self.ctx.db.read(lambda db: repos.get_episode(db, feedback.episode_id or ""))
        if episode is None:
            return None
        owner = OwnerFilter(episode.owner_agent_kind, episode.owner_profile_id, episode.owner_workspace_id)
        return await self.from_correction(episode.session_id, episode.id, owner, instruction, text, attach=False)

    async def refine(self, repair_id: str, user_text: str | None = None) -> dto.RepairDTO | None:
        """Reword a stored repair with the LLM (for the caller to run in the background after
        `from_correction`). Returns the updated repair, or None when no LLM is ready, the call failed, or the
        repair is gone; the template wording then simply stays. Attached policies get the new lines in
        place of the old ones."""
        row = await self.ctx.db.read(lambda db: db.get(DecisionRepairRow, repair_id))
        if row is None or not self.ctx.llm_ready(row.episode_id, self.use_llm):
            return None
        trace_ids = [*row.low_value_traces_json, *row.high_value_traces_json]

        def load(db: Session) -> list[TraceEvidence]:
            if not trace_ids:
                return []
            rows = db.execute(select(*_TRACE_COLUMNS).where(TraceRow.id.in_(trace_ids)))
            return [_evidence(r, local=True) for r in rows]

        evidence = {t.id: t for t in await self.ctx.db.read(load)}
        low = [evidence[i] for i in row.low_value_traces_json if i in evidence]
        high = [evidence[i] for i in row.high_value_traces_json if i in evidence]
        current = Wording(
            row.preference, row.anti_pattern, "info" if row.severity == "info" else "warn", row.confidence
        )
        correction = user_text or row.preference.removeprefix("Prefer: ")
        failures = "\n".join(f"- {t.line()}" for t in low) or _NONE
        successes = "\n".join(f"- {t.line()}" for t in high) or _NONE
        wording = await self._llm_wording(
            row.episode_id, current, failures, successes, correction if row.source == "user_correction" else _NONE
        )
        if wording.by != "llm":
            return None
        now = self.ctx.clock()
        old = (row.preference, row.anti_pattern)

        def update(db: Session) -> DecisionRepairRow | None:
            stored = db.get(DecisionRepairRow, repair_id)
            if stored is None:
                return None
            stored.preference, stored.anti_pattern = wording.preference, wording.anti_pattern
            stored.severity, stored.confidence = wording.severity, wording.confidence
            owner = OwnerFilter(stored.owner_agent_kind, stored.owner_profile_id, stored.owner_workspace_id)
            _attach(
                db,
                owner,
                set(),
                wording,
                now,
                remove=old,
                only=stored.attached_policy_ids_json,
                rejected_texts=[f"{t.summary}\n{t.action}" for t in low]
                if stored.source == "user_correction"
                else None,
            )
            return stored

        updated = await self.ctx.db.write(update)
        if updated is None:
            return None
        self._announce(updated, refined=True)
        return repair_dto(updated)

    # ------------------------------------------------------------------------------ injection

    async def active_guidance(
        self, session_id: str, now: int, episode_id: str | None = None, request: str | None = None
    ) -> list[dto.RepairDTO]:
        """The session's repairs younger than `guidance_ttl_ms`, newest first, without repeated wording, at
        most `MAX_ACTIVE_GUIDANCE`: what the next `turn.start` injects.

        A tool-failure repair serves the whole session: the next call of that tool is likely anywhere in it. A
        user's correction serves the task it corrected only: the turns of its episode, or (`episode_id` and
        `request` given) a later episode that asks the same thing again (`same_request`, a retry). Its lines
        quote the rejected attempt ("should be 4,210", "Avoid: repeating run(code=…)"), which is what a retry
        needs and what misleads any other task of a long session."""
        ttl = self.settings.guidance_ttl_ms
        if ttl <= 0:
            return []
        if session_id in self._guidance_known:
            newest = self._newest_repair.get(session_id)
            if newest is None or now - newest >= ttl:
                return []  # known to have nothing fresh: no read on the turn.start hot path

        def work(db: Session) -> list[DecisionRepairRow]:
            stmt = (
                select(DecisionRepairRow)
                .where(DecisionRepairRow.session_id == session_id, DecisionRepairRow.ts > now - ttl)
                .order_by(DecisionRepairRow.ts.desc(), DecisionRepairRow.id.desc())
                .limit(MAX_ACTIVE_GUIDANCE * 4)
            )
            return list(db.scalars(stmt))

        rows = await self.ctx.db.read(work)
        scoped = episode_id is not None or request is not None
        corrected = {r.episode_id for r in rows if r.source == "user_correction" and r.episode_id != episode_id}
        if scoped and corrected:
            asked = await self.ctx.db.read(lambda db: repos.first_user_texts(db, [e for e in corrected if e]))
            retried = {e for e, text in asked.items() if request and same_request(request, text)}
        else:
            retried = set()
        if len(self._guidance_known) > SESSION_CACHE_LIMIT:
            self._guidance_known.clear()
            self._newest_repair.clear()
        self._guidance_known.add(session_id)
        if rows:
            self._remember(session_id, max(row.ts for row in rows))
        fresh: list[dto.RepairDTO] = []
        for row in rows:
            if row.ts > now:
                continue  # a clock step backwards must not surface "future" repairs twice
            other_task = row.source == "user_correction" and row.episode_id not in {episode_id, *retried}
            if scoped and other_task:
                continue  # another task's correction
            if any(
                same_text(r.preference, row.preference) and same_text(r.anti_pattern, row.anti_pattern) for r in fresh
            ):
                continue
            fresh.append(repair_dto(row))
            if len(fresh) >= MAX_ACTIVE_GUIDANCE:
                break
        return fresh

    # ------------------------------------------------------------------------------ internals

    @staticmethod
    def _failure_lines(burst: Burst, split: EvidenceSplit) -> str:
        lines: list[str] = []
        for outcome in burst.failures:
            line = f"- {outcome.tool} failed" + (f": {outcome.error}" if outcome.error else "")
            if not lines or lines[-1] != line:
                lines.append(line)
        lines += [f"- {t.line()}" for t in split.low]
        return "\n".join(lines)

    @staticmethod
    def _success_lines(split: EvidenceSplit) -> str:
        return "\n".join(f"- {t.line()}" for t in split.high) or _NONE

    async def _llm_wording(
        self, episode_id: str | None, template: Wording, failures: str, successes: str, correction: str
    ) -> Wording:
        """The LLM's wording when it is ready and answers; `template` otherwise (and for any empty field)."""
        if not self.ctx.llm_ready(episode_id, self.use_llm):
            return template
        try:
            answer: RepairOutput = await self.ctx.llm.complete_json(
                DECISION_REPAIR,
                {"failures": failures, "successes": successes, "correction": correction},
                op=REPAIR_OP,
                episode_id=episode_id,
                timeout_ms=LLM_TIMEOUT_MS,
            )
        except MemosError as exc:
            log.info("decision repair falls back to the template: %s (%s)", exc.code.value, exc.message)
            return template
        preference = clip(answer.preference, 400) or template.preference
        anti_pattern = clip(answer.anti_pattern, 400) or template.anti_pattern
        return Wording(preference, anti_pattern, answer.severity, answer.confidence, by="llm")

    async def _store(self, draft: _Draft) -> dto.RepairDTO:
        now = self.ctx.clock()
        row = await self.ctx.db.write(lambda db: _persist(db, draft, now))
        self._announce(row)
        return repair_dto(row)

    def _remember(self, session_id: str, ts: int) -> None:
        self._newest_repair[session_id] = max(ts, self._newest_repair.get(session_id, ts))

    def _announce(self, row: DecisionRepairRow, *, refined: bool = False) -> None:
        if row.session_id:
            self._remember(row.session_id, row.ts)
        payload: dict[str, Any] = {
            "repairId": row.id,
            "sessionId": row.session_id,
            "episodeId": row.episode_id,
            "tool": row.tool,
            "source": row.source,
            "severity": row.severity,
            "contextHash": row.context_hash,
            "attachedPolicyIds": list(row.attached_policy_ids_json),
        }
        if refined:
            payload["refined"] = True
        self.ctx.events.emit(EventType.DECISION_REPAIR_CREATED, payload)
