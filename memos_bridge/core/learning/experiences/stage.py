"""The typed-experience stage: explicit feedback becomes recallable lessons before the next task starts.

Runs right after reward in every learning chain. It acts only on the episode's explicit feedback rows that no
experience has absorbed yet, so re-running a chain — late feedback, a retried `feedback.submit`, recovery — never
creates or merges the same feedback twice (an experience remembers the feedback it absorbed in
`source_feedback_ids_json`).

For each new feedback row:

1. **Assess** (`rules.assess`): significant only when explicit, actionable and strong enough; its lessons are the
   feedback's actionable sentences, this attempt's values taken out, split by subject (one per convention).
2. **Draft** each lesson (`rules.draft_experiences`); the `feedback.refine` prompt may reword a draft when an LLM
   is available — kept only when it keeps the lesson's names, units and numbers.
3. **Place** each draft: a success on a task similar to an earlier repair instruction's, that followed it, turns
   the repair into `repair_validated` (a success anchor); a lesson about the same convention as an existing
   experience (same subject: a shared name with an agreeing unit, number or wording, found by vector and by
   subject terms, so another language is found too) merges into it, raising its support; otherwise it becomes
   a new experience. All drafts of a row are written in one transaction (`store.apply`).

Vectors encode title + trigger + procedure and are pushed to the in-memory index after each commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from memos_bridge.contract.errors import MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.experiences import store
from memos_bridge.core.learning.experiences.rules import (
    EpisodeFacts,
    ExperienceDraft,
    FeedbackFacts,
    apply_refinement,
    assess,
    draft_experiences,
    instance_context,
    lesson_of,
    may_merge,
    repair_adherence,
    tag_patterns,
)
from memos_bridge.core.learning.experiences.store import Plan, State, Written
from memos_bridge.core.learning.reward_stage import RewardReport
from memos_bridge.llm.prompts import FEEDBACK_REFINE
from memos_bridge.rules.kinds import kinds_meet, rule_kinds
from memos_bridge.rules.lessons import convention_overlap, particular_numbers
from memos_bridge.rules.subjects import FILE, Subject, owner_names, same_inputs
from memos_bridge.rules.text import clip
from memos_bridge.rules.tokens import token_similarity
from memos_bridge.rules.work import SAME_WORK_SIMILARITY, closeness
from memos_bridge.storage.vectors import vector_from_text

log = logging.getLogger(__name__)

#: Two lessons without a subject of their own (no names, units or numbers) are the same convention only when
#: this similar in meaning and sharing this much of their wording; learnt on the same inputs, a little less.
NO_SUBJECT_SIMILARITY: Final = 0.82
NO_SUBJECT_WORDS: Final = 0.25
SAME_INPUT_SIMILARITY: Final = 0.7
SAME_INPUT_WORDS: Final = 0.5
#: A later success validates a repair instruction when its task is this similar to the repair's task …
VALIDATION_TASK_SIMILARITY: Final = 0.72
#: … and it followed the repair: recalled for that task, or this share of the repair's distinctive words used.
VALIDATION_ADHERENCE: Final = 0.3
#: Experiences fetched from the vector index per merge / validation search.
MERGE_POOL: Final = 8
VALIDATION_POOL: Final = 32
#: The refinement call; its deadline is `learning.refine_timeout_ms`.
LLM_OP: Final = "feedback.refine"


@dataclass
class ExperienceReport:
    """What one run did (ids, for the chain report, tests and logs)."""

    episode_id: str
    created: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    validated: list[str] = field(default_factory=list)
    #: Feedback ids that produced nothing, and why (not_explicit, not_actionable, below_significance).
    skipped: dict[str, str] = field(default_factory=dict)
    llm_calls: int = 0
    #: Why the run did nothing at all ("" when it looked at feedback).
    skipped_reason: str = ""


async def experience_stage(ctx: LearningContext, episode_id: str, reward: RewardReport) -> ExperienceReport:
    """Build, merge or validate typed experiences from the episode's new explicit feedback (module docstring)."""
    report = ExperienceReport(episode_id)
    state = await ctx.db.read(lambda db: store.load(db, episode_id))
    if state is None:
        report.skipped_reason = "episode_not_found"
        return report
    if not state.feedback:
        report.skipped_reason = "no_new_feedback"
        return report
    r_task = reward.r_task if reward.r_task is not None else state.episode.r_task
    episode = replace(state.episode, r_task=r_task, outcome=reward.outcome, outcome_source=reward.source)
    domains = tag_patterns(ctx.settings.learning.world)
    for feedback in state.feedback:
        assessment = assess(feedback, episode)
        if not assessment.significant:
            report.skipped[feedback.id] = assessment.reason
            continue
        plans: list[Plan] = []
        for drafted in draft_experiences(feedback, episode, assessment, domains):
            draft = await _refine(ctx, report, episode, feedback, drafted)
            plans.append(await _plan(ctx, state, episode, feedback, draft, plans))
        written = await _write(ctx, state, plans, feedback, episode)
        for plan, done in zip(plans, written, strict=False):
            _announce(ctx, episode.episode_id, feedback.id, done)
            if plan.action == "validate" and done.merged and done.row.experience_type == "repair_validated":
                report.validated.append(done.row.id)
            elif done.merged:
                report.merged.append(done.row.id)
            else:
                report.created.append(done.row.id)
    log.info(
        "experiences %s: %d created, %d merged, %d validated, %d skipped (llm calls %d)",
        episode_id,
        len(report.created),
        len(report.merged),
        len(report.validated),
        len(report.skipped),
        report.llm_calls,
    )
    return report


async def _write(
    ctx: LearningContext, state: State, plans: list[Plan], feedback: FeedbackFacts, episode: EpisodeFacts
) -> list[Written]:
    now = ctx.clock()
    return await ctx.db.write(lambda db: store.apply(db, state.owner, plans, feedback, episode, now))


async def _plan(
    ctx: LearningContext,
    state: State,
    episode: EpisodeFacts,
    feedback: FeedbackFacts,
    draft: ExperienceDraft,
    earlier: list[Plan],
) -> Plan:
    """Validate a repair, merge into the experience of the same convention, or create one (in that order)."""
    vec, task_vec = await _embed(ctx, [draft.embed_text(), episode.task or draft.trigger])
    context = task_vec if episode.task else None
    if draft.experience_type == "success_pattern" and task_vec is not None:
        target = await _repair_followed(ctx, state, episode, feedback, task_vec)
        if target is not None:
            return Plan(draft, vec, "validate", target[0], target[1], context)
    merge_id = await _merge_target(ctx, state, draft, vec, {p.target for p in earlier if p.target}, context)
    if merge_id is not None:
        return Plan(draft, vec, "merge", merge_id, context=context)
    return Plan(draft, vec, "create", context=context)


async def _embed(ctx: LearningContext, texts: list[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Unit vectors of the draft and of the task; (None, None) when the embedder is down (the experience is still
    stored, found by full-text search and by its subject terms)."""
    try:
        matrix = np.asarray(await ctx.embedder.embed(texts, role="document"), dtype=np.float32)
    except MemosError as exc:
        log.warning("experience embedding unavailable (%s); storing without a vector", exc.code.value)
        return None, None
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.where(norms > 0, norms, 1.0)
    return unit[0], unit[1]


async def _refine(
    ctx: LearningContext,
    report: ExperienceReport,
    episode: EpisodeFacts,
    feedback: FeedbackFacts,
    draft: ExperienceDraft,
) -> ExperienceDraft:
    """The LLM's wording when available, wanted and faithful; the rule draft otherwise."""
    if not ctx.settings.learning.refine_use_llm or not ctx.llm_ready(episode.episode_id):
        return draft
    verifier = "(none)"
    if draft.verifier_meta is not None:
        verifier = clip(str({k: v for k, v in draft.verifier_meta.items() if k != "hints"}), 1200)
    variables = {
        "experience_type": draft.experience_type,
        "task": clip(episode.task, 800) or "(unknown)",
        "tools": "\n".join(episode.steps[:8]) or ", ".join(episode.tools) or "(none)",
        "feedback": clip(feedback.text, 2000) or "(structured verifier data only)",
        "verifier": verifier,
        "draft": "\n".join(
            [
                f"title: {draft.title}",
                f"trigger: {draft.trigger}",
                f"procedure:\n{draft.procedure}",
                f"verification: {draft.verification}",
                f"boundary: {draft.boundary}",
            ]
        ),
    }
    try:
        answer = await ctx.llm.complete_json(
            FEEDBACK_REFINE,
            variables,
            op=LLM_OP,
            episode_id=episode.episode_id,
            timeout_ms=ctx.settings.learning.refine_timeout_ms,
        )
    except MemosError as exc:
        log.info("feedback refinement unavailable (%s); using the rule draft", exc.code.value)
        return draft
    report.llm_calls += 1
    evidence = "\n".join([feedback.text, episode.task, *episode.steps, draft.procedure])
    refined = apply_refinement(draft, answer, evidence, instance_context(feedback, episode))
    if refined is None:
        log.info("feedback refinement for %s was unusable or dropped a key term; using the rule draft", feedback.id)
    return refined or draft


# ---------------------------------------------------------------- finding the experience to update


def same_convention(
    draft: ExperienceDraft, row: Any, cosine: float, task: np.ndarray | None = None, *, project: bool = False
) -> bool:
    """Whether `draft` teaches the convention the stored experience `row` holds (module docstring, step 3).

    The two were learnt on the same work when they name a file in common, or when the request `draft` was learnt
    on (`task`, its unit vector) is close to one the stored lesson keeps (`rules.work`); when it is not, and no
    file is shared, they never merge ("the clock is UTC" on two projects is two lessons). A stored lesson with
    neither terms nor contexts (an old record) is taken to share the work, as before contexts were kept. With
    `project` (both learnt in one project workspace, which a host named) other files do not keep them apart, and
    requests in other words need only a particular in common (a sentinel, a code, a field): a project's
    convention taught again on another of its files is the same convention, and two of its conventions that share
    no particular stay two."""
    if not may_merge(row.experience_type, draft.experience_type):
        return False
    stored = store.row_subject(row)
    mine_text = " ".join(draft.lesson or [draft.title])
    their_text = " ".join(lesson_of(row.lesson_json, row.procedure))
    words = token_similarity(mine_text, their_text)
    record = row.lesson_json if isinstance(row.lesson_json, dict) else {}
    theirs = [str(t) for t in record.get("terms") or []]
    contexts = [v for v in (vector_from_text(str(c)) for c in record.get("contexts") or []) if v is not None]
    close = closeness(task, contexts)
    mine_inputs, their_inputs = _inputs(draft.terms), _inputs(theirs)
    shared_inputs = same_inputs(mine_inputs, their_inputs)
    if mine_inputs and their_inputs and not shared_inputs and not project:
        return False  # learnt on other files or for another company: other work, however alike the requests
    # Requests less alike: the same work only when the two lessons share what no other work would (a value of
    # three or more digits such as a sentinel, a code such as a marker) and the requests are still related (in one
    # project, its tasks on other files are asked in other words: the particular alone); a look-alike rule of
    # other work ("the clock is UTC") is that work's own.
    if close is not None and close < SAME_WORK_SIMILARITY and not shared_inputs:
        related = (project or close >= RELATED_WORK_SIMILARITY) and _shared_particulars(draft.subject, stored)
        if not related:
            return False
    same_context = shared_inputs or close is not None or (not theirs and not contexts)
    kinds = (rule_kinds(mine_text), rule_kinds(their_text))
    if draft.subject.terms() or stored.terms() or (same_context and kinds_meet(*kinds)):
        return convention_overlap(draft.subject, stored, words, same_context, kinds)
    if same_context and (cosine >= SAME_INPUT_SIMILARITY or words >= SAME_INPUT_WORDS):
        return True  # "These sheets write dates day-first" / "Remember the day comes first in these sheets"
    return cosine >= NO_SUBJECT_SIMILARITY and words >= NO_SUBJECT_WORDS


#: Below `SAME_WORK_SIMILARITY`, requests this close may still be one work if their lessons share a particular.
RELATED_WORK_SIMILARITY: Final = 0.35
#: Acronyms every project's data uses: sharing one says nothing about which work two lessons are from.
_COMMON_CODES: Final = frozenset(
    "utc gmt id ids csv tsv json jsonl xml api url http https sql kg lb km mm cm ml gb mb kb usd eur gbp iso".split()
)


def _shared_particulars(a: Subject, b: Subject) -> bool:
    """Whether two lessons share a particular: a number of three or more significant digits, or a code or name
    that is not a common acronym."""
    names = {n for n in a.names & b.names if n not in _COMMON_CODES and len(n) >= 2}
    return bool(particular_numbers(a) & particular_numbers(b) or names)


def _inputs(terms: list[str]) -> list[str]:
    """The terms that say which inputs a lesson was learnt on: its files and the company the task named (a field
    name or a unit such as "UTC" is in every project's data)."""
    return [term for term in terms if FILE.fullmatch(term) or owner_names(term) == [term]]


async def _merge_target(
    ctx: LearningContext,
    state: State,
    draft: ExperienceDraft,
    vec: np.ndarray | None,
    exclude: set[str],
    task: np.ndarray | None = None,
) -> str | None:
    """The owned experience of the same convention: candidates from the vector index and from the subject terms
    (another language shares the names and numbers, not the words), best vector match first."""
    hits = await ctx.vectors.search("policy", "vec", vec, MERGE_POOL, state.owner) if vec is not None else []
    cosine = dict(hits)
    terms = [*draft.subject.identifiers, *draft.subject.numbers]
    found = await ctx.db.read(lambda db: store.by_subject(db, state.owner, terms))
    ids = list(dict.fromkeys([*(pid for pid, _ in hits), *found]))
    rows = await ctx.db.read(lambda db: store.owned_live(db, state.owner, ids))
    vectors = (
        ctx.vectors.vectors_of("policy", "vec", [pid for pid in ids if pid not in cosine]) if vec is not None else {}
    )
    for policy_id in ids:
        row = rows.get(policy_id)
        if row is None or policy_id in exclude:
            continue
        score = cosine.get(policy_id)
        if score is None:
            other = vectors.get(policy_id)
            score = float(np.dot(other, vec)) if other is not None and vec is not None else 0.0
        if same_convention(draft, row, score, task, project=state.owner.workspace_id is not None):
            return policy_id
    return None


async def _repair_followed(
    ctx: LearningContext, state: State, episode: EpisodeFacts, feedback: FeedbackFacts, task_vec: np.ndarray
) -> tuple[str, dict[str, Any]] | None:
    """The repair instruction this success validates: learnt on another, earlier episode of a similar task, and
    followed here (recalled into this episode, or its distinctive words used). Best task match wins."""
    hits = await ctx.vectors.search("policy", "vec", task_vec, VALIDATION_POOL, state.owner)
    rows = await ctx.db.read(lambda db: store.owned_live(db, state.owner, [pid for pid, _ in hits]))
    repairs = [
        row
        for row in rows.values()
        if row.experience_type == "repair_instruction"
        and episode.episode_id not in (row.source_episodes_json or [])
        and int((row.meta_json or {}).get("episodeStartedAt") or 0) <= episode.started_at
    ]
    if not repairs:
        return None
    tasks = [str((row.meta_json or {}).get("task") or row.trigger) for row in repairs]
    try:
        task_vecs = np.asarray(await ctx.embedder.embed(tasks, role="document"), dtype=np.float32)
    except MemosError:
        return None
    norms = np.linalg.norm(task_vecs, axis=1)
    episode_text = "\n".join([episode.task, episode.latest_request, *episode.steps, episode.reply, feedback.text])
    best: tuple[float, str, dict[str, Any]] | None = None
    for row, vec, norm in zip(repairs, task_vecs, norms, strict=True):
        similarity = float(np.dot(vec, task_vec) / norm) if norm > 0 else 0.0
        if similarity < VALIDATION_TASK_SIMILARITY:
            continue
        fix_text = "\n".join(lesson_of(row.lesson_json, row.procedure))
        adherence = repair_adherence(fix_text, row.trigger, episode_text)
        recalled = row.id in state.recalled
        if not recalled and adherence < VALIDATION_ADHERENCE:
            continue
        evidence = {"taskSimilarity": round(similarity, 4), "adherence": round(adherence, 4), "recalled": recalled}
        if best is None or similarity > best[0]:
            best = (similarity, row.id, evidence)
    return None if best is None else (best[1], best[2])


def _announce(ctx: LearningContext, episode_id: str, feedback_id: str, written: Written) -> None:
    row = written.row
    ctx.vectors.upsert("policy", row)
    payload: dict[str, Any] = {
        "episodeId": episode_id,
        "policyId": row.id,
        "title": row.title,
        "experienceType": row.experience_type,
        "evidencePolarity": row.evidence_polarity,
        "status": row.status,
        "inducedBy": "feedback.experience",
        "feedbackId": feedback_id,
    }
    if written.merged:
        payload.update(previousType=written.previous_type, previousStatus=written.previous_status, support=row.support)
    ctx.events.emit(EventType.L2_POLICY_UPDATED if written.merged else EventType.L2_POLICY_INDUCED, payload)
