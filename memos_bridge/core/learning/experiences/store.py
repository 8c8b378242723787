"""The experience stage's SQL: what a chain run reads (the episode's unabsorbed feedback), where a lesson may go
(experiences sharing its subject), and the one transaction that writes every lesson of a feedback row.

All of a feedback row's lessons are written in one transaction that first checks no experience absorbed the row
yet: a retried `feedback.submit`, a re-run chain or recovery never creates or merges the same feedback twice, and a
row that teaches two conventions never ends up with only one of them stored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.capture import tool_signature
from memos_bridge.core.learning.experiences.rules import (
    ACTIVE_CONFIDENCE,
    CONFIRMING_SUPPORT,
    EXPERIENCE_TYPES,
    INDUCED_BY,
    MIN_GAIN,
    SKILL_ELIGIBLE_TYPES,
    STEP_CHARS,
    SUBJECT_TERMS,
    EpisodeFacts,
    ExperienceDraft,
    FeedbackFacts,
    feedback_text,
    lesson_of,
    merge_lines,
    merged_lesson,
    merged_polarity,
    merged_type,
    retrigger,
    subject_from_json,
    subject_json,
)
from memos_bridge.core.learning.experiences.verifier import FILE_NAME, parse_verifier
from memos_bridge.core.learning.l2_signature import call_failed
from memos_bridge.core.mappers import policy_dto
from memos_bridge.core.namespace import list_scope, row_scope
from memos_bridge.ids import new_id
from memos_bridge.rules.subjects import Subject, requested_outputs
from memos_bridge.rules.text import clip, numbered, numbered_steps, produced_numbers, to_text
from memos_bridge.storage.database import Database
from memos_bridge.storage.fts import fts_search
from memos_bridge.storage.json_lists import list_has_any
from memos_bridge.storage.models import EpisodeRow, FeedbackRow, PolicyRow, TraceRow, TurnRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob, vector_text

BUILDER: Final = "feedback.experience.v2"
#: Provenance caps: ids kept per list, evidence records kept in `meta.evidence`.
SOURCE_CAP: Final = 200
SOURCE_TRACES_PER_FEEDBACK: Final = 40
EVIDENCE_CAP: Final = 20
#: Tool names that write files: what they write is the attempt's output.
_WRITES: Final = re.compile(r"write|save|create|put|dump|output|edit", re.IGNORECASE)


#: "wrote answer.json", "saved to out.csv", "created report.md": a tool's report of a file it produced.
_PRODUCED: Final = re.compile(
    r"\b(?:wrote|written|saved|created|generated|exported)\b(?:\s+(?:to|into|as|file))?\s+$", re.I
)


def reported_written(tool_output: Any) -> list[str]:
    """The files a successful tool call says it produced ("wrote answer.json"): a script that writes the answer
    file names it only in its run's output, and that file says nothing about what a lesson is about."""
    text = to_text(tool_output)[:4000]
    return [m.group(0) for m in FILE_NAME.finditer(text) if _PRODUCED.search(text[max(0, m.start() - 30) : m.start()])]


#: A path or a file name as it stands in a call's input (its last part is the file's name).
_PATH_TOKEN: Final = re.compile(r"[\w.~/-]+")


def named_files(tool_input: Any) -> list[str]:
    """Every file a tool call's input names, as a bare file name: a path argument (`path=data/orders.csv`) or a
    file named inside a script or a command (`open('orders.csv')`)."""
    names = (token.rsplit("/", 1)[-1] for token in _PATH_TOKEN.findall(to_text(tool_input)[:8000].replace("\\", "/")))
    return list(dict.fromkeys(name for name in names if FILE_NAME.fullmatch(name)))


def written_files(tool_input: Any) -> list[str]:
    """The files a writing tool call wrote: the arguments that are a file name by themselves (`path=out.json`).
    A file named inside a longer argument is what the written text is about — a script's `open('orders.csv')` —
    and reading it as written made the task's input file look like its output, so lessons lost their subject.
    A plain command string (`echo … > out.txt`) has no separate arguments: every file it names counts."""
    if isinstance(tool_input, dict):
        names = [v.strip().replace("\\", "/").rsplit("/", 1)[-1] for v in tool_input.values() if isinstance(v, str)]
        return [name for name in names if FILE_NAME.fullmatch(name)]
    return [m.group(0) for m in FILE_NAME.finditer(to_text(tool_input))]


#: Experiences fetched by subject (identifiers, numbers) when looking for the one a lesson belongs to.
SUBJECT_POOL: Final = 12


@dataclass(frozen=True)
class State:
    """What one run of the stage starts from."""

    owner: OwnerFilter
    episode: EpisodeFacts
    feedback: list[FeedbackFacts]  # explicit rows not absorbed by any experience yet
    recalled: frozenset[str]  # experience ids injected into this episode's turns


# ---------------------------------------------------------------- loading


def absorbed_feedback(db: Session, feedback_ids: Sequence[str]) -> set[str]:
    """The feedback ids some experience (any status) already lists among its sources."""
    ids = set(feedback_ids)
    if not ids:
        return set()
    clause = list_has_any(PolicyRow.source_feedback_ids_json, ids)
    if clause is None:
        return set()
    rows = db.scalars(select(PolicyRow.source_feedback_ids_json).where(clause))
    return {fid for row in rows for fid in (row or []) if fid in ids}


def _inputs(named: Sequence[str], written: Sequence[str], asks: Sequence[str]) -> tuple[str, ...]:
    """The files the episode worked on: those its tool calls named, less what it wrote and what a request asked
    to be written (a harness's answer file, named in every task's script, says nothing about the work)."""
    output = {name.casefold() for name in written}
    for ask in asks:
        output |= {name.casefold() for name in requested_outputs(ask)}
    return tuple(dict.fromkeys(name for name in named if name.casefold() not in output))


def _episode_facts(episode: EpisodeRow, turns: Sequence[TurnRow], traces: Sequence[TraceRow]) -> EpisodeFacts:
    asks = [t.user_text for t in turns if t.user_text.strip()] or [t.user_text for t in traces if t.user_text.strip()]
    tools: list[str] = []
    steps: list[str] = []
    failed: list[str] = []
    written: list[str] = []
    named: list[str] = []
    reply = next((t.agent_text for t in reversed(traces) if t.step_kind == "reply" and t.agent_text.strip()), "")
    # What the attempt produced (numbers its reply reports that no request gave): a kept step shows its
    # place, not that answer, which is wrong for any other task.
    results = produced_numbers([reply], asks)
    for trace in traces:
        for call in trace.tool_calls_json or []:
            if not isinstance(call, dict):
                continue
            name = str(call.get("name") or "tool")
            if name not in tools:
                tools.append(name)
            named.extend(named_files(call.get("input")))
            if _WRITES.search(name):
                written.extend(written_files(call.get("input")))
            if not call_failed(call):
                written.extend(reported_written(call.get("output")))
            line = tool_signature(call, STEP_CHARS, results)
            target = failed if call_failed(call) else steps
            if line not in target:
                target.append(line)
    return EpisodeFacts(
        episode_id=episode.id,
        task=asks[0] if asks else "",
        latest_request=asks[-1] if asks else "",
        tools=tuple(tools),
        steps=tuple(steps),
        failed_steps=tuple(failed),
        reply=reply,
        trace_ids=tuple(t.id for t in traces),
        r_task=episode.r_task,
        started_at=episode.started_at,
        written=tuple(dict.fromkeys(written)),
        session_id=episode.session_id or "",
        read=_inputs(named, written, asks),
    )


def _recalled(turns: Sequence[TurnRow]) -> frozenset[str]:
    """Experience ids the episode's cached turn.start results injected."""
    out: set[str] = set()
    for turn in turns:
        result = turn.result_json if isinstance(turn.result_json, dict) else {}
        for hit in result.get("hits") or []:
            if isinstance(hit, dict) and hit.get("refKind") == "experience" and isinstance(hit.get("refId"), str):
                out.add(hit["refId"])
    return frozenset(out)


def _task_ids(raw: Any) -> tuple[str, ...]:
    """Ids the host gave the task in the feedback payload (`raw.taskId` / `raw.task`)."""
    if not isinstance(raw, dict):
        return ()
    return tuple(str(raw[k]) for k in ("taskId", "task_id", "task") if isinstance(raw.get(k), str | int))


def _feedback_facts(row: FeedbackRow) -> FeedbackFacts:
    raw = row.raw_json if isinstance(row.raw_json, dict) else None
    bound = raw.get("traceIds") if raw is not None else None
    return FeedbackFacts(
        id=row.id,
        ts=row.ts,
        polarity=row.polarity,
        magnitude=float(row.magnitude),
        explicit=True,
        text=feedback_text(row.rationale, row.raw_json),
        verifier=parse_verifier(row.raw_json),
        trace_id=row.trace_id,
        trace_ids=tuple(t for t in bound if isinstance(t, str)) if isinstance(bound, list) else (),
        task_ids=_task_ids(raw),
    )


def load(db: Session, episode_id: str) -> State | None:
    """The episode's explicit feedback that no experience absorbed yet, and — only when there is some — the
    episode itself (this runs on every chain; most have nothing new to learn from)."""
    episode = db.get(EpisodeRow, episode_id)
    if episode is None:
        return None
    owner = OwnerFilter(episode.owner_agent_kind, episode.owner_profile_id, episode.owner_workspace_id)
    rows = list(
        db.scalars(
            select(FeedbackRow)
            .where(FeedbackRow.episode_id == episode_id, FeedbackRow.channel != "implicit")
            .order_by(FeedbackRow.ts, FeedbackRow.id)
        )
    )
    absorbed = absorbed_feedback(db, [r.id for r in rows])
    fresh = [row for row in rows if row.id not in absorbed]
    if not fresh:
        return State(owner, EpisodeFacts(episode.id, ""), [], frozenset())
    turns = list(db.scalars(select(TurnRow).where(TurnRow.episode_id == episode_id).order_by(TurnRow.turn_id)))
    traces = list(
        db.scalars(
            select(TraceRow)
            .where(TraceRow.episode_id == episode_id, TraceRow.archived_at.is_(None))
            .order_by(TraceRow.ts, TraceRow.step_index, TraceRow.rid)
        )
    )
    return State(owner, _episode_facts(episode, turns, traces), [_feedback_facts(r) for r in fresh], _recalled(turns))


def owned_live(db: Session, owner: OwnerFilter, ids: Sequence[str]) -> dict[str, PolicyRow]:
    """Typed experiences among `ids` that the namespace owns and that are not archived."""
    if not ids:
        return {}
    rows = db.scalars(
        select(PolicyRow).where(
            PolicyRow.id.in_(list(ids)),
            PolicyRow.archived_at.is_(None),
            PolicyRow.status.in_(("active", "candidate")),
            PolicyRow.experience_type.in_(sorted(EXPERIENCE_TYPES)),
        )
    )
    return {row.id: row for row in rows if owner.owns(row)}


def by_subject(db: Session, owner: OwnerFilter, terms: Sequence[str]) -> list[str]:
    """Ids of experiences whose text contains one of `terms` (identifiers, convention numbers): the same
    convention taught in another language has little in common with the first wording but its names and numbers,
    and a vector search of an English-only model would not rank it near."""
    wanted = [t for t in dict.fromkeys(terms) if len(t) >= 3]
    if not wanted:
        return []
    query = " OR ".join('"' + t.replace('"', '""') + '"' for t in wanted[:8])
    found = fts_search(db, "policy", query, owner=owner, tokenizer="trigram", limit=SUBJECT_POOL)
    return [policy_id for policy_id, _ in found]


def row_subject(row: PolicyRow) -> Subject:
    stored = row.lesson_json.get("subject") if isinstance(row.lesson_json, dict) else None
    return subject_from_json(stored, f"{row.title}\n{row.procedure}")


# ---------------------------------------------------------------- writing

Action = Literal["create", "merge", "validate"]


@dataclass(frozen=True)
class Plan:
    """Where one drafted lesson goes: a new experience, a merge into `target`, or the validation of the repair
    instruction `target` (with the evidence that the success followed it)."""

    draft: ExperienceDraft
    vec: np.ndarray | None
    action: Action
    target: str | None = None
    evidence: dict[str, Any] | None = None
    #: the unit vector of the request the lesson was learnt on (what recall compares a new request with)
    context: np.ndarray | None = None


@dataclass(frozen=True)
class Written:
    row: PolicyRow
    merged: bool
    previous_type: str | None = None
    previous_status: str | None = None


def _union(existing: Sequence[str] | None, new: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*(existing or []), *new]))[-SOURCE_CAP:]


def _source_traces(feedback: FeedbackFacts, episode: EpisodeFacts) -> list[str]:
    """The steps the host bound the verdict to (`raw.traceIds`, those of this episode: a `traceId` alone is only
    the last of them), else the judged step it names, else the episode's steps (the verifier judged all)."""
    own = set(episode.trace_ids)
    bound = [t for t in dict.fromkeys(feedback.trace_ids) if t in own]
    if bound:
        return bound[-SOURCE_TRACES_PER_FEEDBACK:]
    if feedback.trace_id:
        return [feedback.trace_id]
    return list(episode.trace_ids[-SOURCE_TRACES_PER_FEEDBACK:])


def _evidence_record(feedback: FeedbackFacts, episode: EpisodeFacts, draft: ExperienceDraft) -> dict[str, Any]:
    return {
        "feedbackId": feedback.id,
        "episodeId": episode.episode_id,
        "type": draft.experience_type,
        "polarity": draft.polarity,
        "salience": draft.salience,
        "ts": feedback.ts,
    }


def apply(
    db: Session, owner: OwnerFilter, plans: Sequence[Plan], feedback: FeedbackFacts, episode: EpisodeFacts, now: int
) -> list[Written]:
    """Every lesson of one feedback row, in one transaction; nothing when another run absorbed the row first."""
    if absorbed_feedback(db, [feedback.id]):
        return []
    written: list[Written] = []
    touched: set[str] = set()
    for plan in plans:
        target = db.scalar(select(PolicyRow).where(PolicyRow.id == plan.target)) if plan.target else None
        live = target is not None and target.archived_at is None and target.status != "archived"
        if plan.action == "validate" and live and target is not None and target.experience_type == "repair_instruction":
            written.append(_validate(target, plan, feedback, episode, now, first=target.id not in touched))
        elif plan.action in ("merge", "validate") and live and target is not None:
            written.append(_merge(target, plan, feedback, episode, now, first=target.id not in touched))
        else:
            written.append(_create(db, owner, plan, feedback, episode, now))
        touched.add(written[-1].row.id)
    return written


def _create(
    db: Session, owner: OwnerFilter, plan: Plan, feedback: FeedbackFacts, episode: EpisodeFacts, now: int
) -> Written:
    draft = plan.draft
    row = PolicyRow(
        title=draft.title,
        trigger=draft.trigger,
        procedure=draft.procedure,
        verification=draft.verification,
        boundary=draft.boundary,
        support=1,
        gain=max(MIN_GAIN, draft.salience),
        status="active" if draft.confidence >= ACTIVE_CONFIDENCE else "candidate",
        experience_type=draft.experience_type,
        evidence_polarity=draft.polarity,
        salience=draft.salience,
        confidence=draft.confidence,
        source_episodes_json=[episode.episode_id],
        source_feedback_ids_json=[feedback.id],
        source_trace_ids_json=_source_traces(feedback, episode),
        induced_by=INDUCED_BY,
        decision_guidance_json={"preference": draft.preference, "antiPattern": draft.anti_pattern},
        verifier_meta_json=draft.verifier_meta,
        skill_eligible=draft.skill_eligible,
        signature="",
        tags_json=draft.tags,
        meta_json={
            "builder": BUILDER,
            "draftedBy": draft.drafted_by,
            "sources": draft.sources,
            "task": clip(episode.task, 400),
            "episodeStartedAt": episode.started_at,
            "evidence": [_evidence_record(feedback, episode, draft)],
        },
        lesson_json={**draft.lesson_record(), **_contexts({}, plan, episode)},
        vec=to_blob(plan.vec) if plan.vec is not None else None,
        created_at=now,
        updated_at=now,
        last_evidence_at=now,
        **owner.as_columns(),
    )
    row.id = new_id("policy")
    db.add(row)
    db.flush()
    return Written(row, merged=False)


def _absorb(
    row: PolicyRow, plan: Plan, feedback: FeedbackFacts, episode: EpisodeFacts, now: int, *, first: bool
) -> None:
    """What every update does: sources, support (once per feedback row), salience, confidence, tags, the lesson
    lines and subject, guidance, verifier data."""
    draft = plan.draft
    row.source_feedback_ids_json = _union(row.source_feedback_ids_json, [feedback.id])
    row.source_episodes_json = _union(row.source_episodes_json, [episode.episode_id])
    row.source_trace_ids_json = _union(row.source_trace_ids_json, _source_traces(feedback, episode))
    if first:
        row.support = row.support + 1
    row.salience = max(row.salience, draft.salience)
    row.confidence = max(row.confidence, draft.confidence)
    row.gain = max(row.gain, row.salience, MIN_GAIN)
    row.tags_json = _union(row.tags_json, draft.tags)
    meta = dict(row.meta_json or {})
    stored = dict(row.lesson_json) if isinstance(row.lesson_json, dict) else {}
    old_lesson = lesson_of(stored, row.procedure)
    lesson = merged_lesson(old_lesson, draft.lesson)
    subject = row_subject(row).union(draft.subject)
    roles = list(stored.get("roles") or ([""] * len(old_lesson)))
    for line, role in zip(draft.lesson, draft.roles, strict=False):
        if line in lesson and line not in old_lesson:
            roles.append(role)
    terms = list(dict.fromkeys([*(stored.get("terms") or []), *draft.terms]))[:SUBJECT_TERMS]
    row.lesson_json = {
        "lines": lesson,
        "roles": roles,
        "subject": subject_json(subject),
        "terms": terms,
        "words": [] if terms else list(dict.fromkeys([*(stored.get("words") or []), *draft.words]))[:12],
        "instance": list(dict.fromkeys([*(stored.get("instance") or []), *draft.instance]))[-12:],
        "answers": list(dict.fromkeys([*(stored.get("answers") or []), *draft.answers]))[-12:],
        **_contexts(stored, plan, episode),
    }
    if lesson != old_lesson:
        steps = [step for step in numbered_steps(row.procedure) if step not in old_lesson]
        row.procedure = numbered([*lesson, *steps])
    row.trigger = retrigger(row.trigger, terms)
    guidance = dict(row.decision_guidance_json or {})
    row.decision_guidance_json = {
        **guidance,
        "preference": merge_lines(guidance.get("preference") or [], draft.preference, exclude=lesson),
        "antiPattern": merge_lines(guidance.get("antiPattern") or [], draft.anti_pattern, exclude=lesson),
    }
    if draft.verifier_meta is not None:
        row.verifier_meta_json = draft.verifier_meta
    meta["evidence"] = [*(meta.get("evidence") or []), _evidence_record(feedback, episode, draft)][-EVIDENCE_CAP:]
    meta["sources"] = _union(meta.get("sources"), draft.sources)
    row.meta_json = meta
    if row.confidence >= ACTIVE_CONFIDENCE or row.support >= CONFIRMING_SUPPORT:
        row.status = "active"  # trusted, or confirmed by another verdict
    row.updated_at = now
    row.last_evidence_at = now


#: Requests (and their sessions) a lesson keeps as the contexts it was learnt in: the newest ones.
MAX_CONTEXTS: Final = 6
#: Input files a lesson keeps (the files its episodes' tool calls worked on): the newest ones.
MAX_INPUTS: Final = 12


def _contexts(stored: dict[str, Any], plan: Plan, episode: EpisodeFacts) -> dict[str, Any]:
    """The `contexts`, `sessions` and `inputs` of a lesson record: the requests it was learnt on, as vectors (a
    request like one of them is about the same work, whether or not it names a file or a company), their sessions
    (a host's session is usually one piece of work), and the files those episodes' tool calls read (two lessons
    learnt on the same input file are of one work however differently their requests were worded). Kept newest
    last, at most `MAX_CONTEXTS` / `MAX_INPUTS`."""
    contexts = [str(c) for c in stored.get("contexts") or []]
    sessions = [str(s) for s in stored.get("sessions") or []]
    inputs = [str(f) for f in stored.get("inputs") or []]
    if plan.context is not None:
        contexts = [*contexts, vector_text(plan.context)][-MAX_CONTEXTS:]
    if episode.session_id:
        sessions = [*[s for s in sessions if s != episode.session_id], episode.session_id][-MAX_CONTEXTS:]
    if episode.read:
        fresh = {f.casefold() for f in episode.read}
        inputs = [*[f for f in inputs if f.casefold() not in fresh], *episode.read][-MAX_INPUTS:]
    return {"contexts": contexts, "sessions": sessions, "inputs": inputs}


def _merge(
    row: PolicyRow, plan: Plan, feedback: FeedbackFacts, episode: EpisodeFacts, now: int, *, first: bool
) -> Written:
    """The same convention taught again: the experience gains the new wording when it adds something, the
    evidence and the support; an avoidance that learns what to do instead becomes a repair instruction."""
    previous_type, previous_status = row.experience_type, row.status
    kind = merged_type(previous_type, plan.draft.experience_type) or previous_type
    row.experience_type = kind
    row.evidence_polarity = merged_polarity(row.evidence_polarity, plan.draft.polarity)
    row.skill_eligible = kind in SKILL_ELIGIBLE_TYPES
    if row.vec is None and plan.vec is not None:
        row.vec = to_blob(plan.vec)
    _absorb(row, plan, feedback, episode, now, first=first)
    return Written(row, True, previous_type, previous_status)


def _validate(
    row: PolicyRow, plan: Plan, feedback: FeedbackFacts, episode: EpisodeFacts, now: int, *, first: bool
) -> Written:
    """A repair instruction followed by a later success becomes `repair_validated` (a success anchor)."""
    previous_type, previous_status = row.experience_type, row.status
    row.experience_type = "repair_validated"
    row.evidence_polarity = "mixed"
    row.skill_eligible = True
    boundary = row.boundary.replace("Not yet confirmed by a successful run.", "").strip()
    row.boundary = clip(
        f"Confirmed by a later successful run: “{clip(episode.task, 80)}” (episode {episode.episode_id}). {boundary}",
        400,
    )
    _absorb(row, plan, feedback, episode, now, first=first)
    row.meta_json = {
        **(row.meta_json or {}),
        "validatedBy": {
            "feedbackId": feedback.id,
            "episodeId": episode.episode_id,
            "ts": feedback.ts,
            **(plan.evidence or {}),
        },
    }
    return Written(row, True, previous_type, previous_status)


# ---------------------------------------------------------------- reads for the wire


async def get_policy(db: Database, params: dto.GetByIdParams) -> dto.PolicyDTO | None:
    """`memory.get_policy`: the row, or None when missing or not visible to the caller's namespace."""

    def work(session: Session) -> dto.PolicyDTO | None:
        owner = row_scope(session, params.namespace, session_id=params.session_id)
        row = session.scalar(select(PolicyRow).where(PolicyRow.id == params.id))
        if row is None or (owner is not None and not owner.can_see(row)):
            return None
        return policy_dto(row)

    return await db.read(work)


async def list_policies(db: Database, params: dto.ListPoliciesParams) -> dto.PoliciesResult:
    """`memory.list_policies`: most recently updated first, by status and experience type when given."""

    def work(session: Session) -> dto.PoliciesResult:
        owner = list_scope(session, params.namespace, session_id=params.session_id)
        stmt = select(PolicyRow)
        if owner is not None:
            stmt = stmt.where(owner.clause(PolicyRow))
        if params.status == "archived":
            stmt = stmt.where(or_(PolicyRow.status == "archived", PolicyRow.archived_at.is_not(None)))
        elif params.status is not None:  # archived by the forgetting job counts as archived (policy_dto)
            stmt = stmt.where(PolicyRow.status == params.status, PolicyRow.archived_at.is_(None))
        if params.experience_type is not None:
            stmt = stmt.where(PolicyRow.experience_type == params.experience_type)
        if not params.include_forgotten:
            stmt = stmt.where(PolicyRow.forgotten_at.is_(None))
        stmt = stmt.order_by(PolicyRow.updated_at.desc(), PolicyRow.rid.desc()).limit(params.limit)
        rows = session.scalars(stmt.offset(params.offset))
        return dto.PoliciesResult(policies=[policy_dto(row) for row in rows])

    return await db.read(work)
