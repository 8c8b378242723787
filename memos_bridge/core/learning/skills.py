"""The skill stage: success-anchored skills from an episode's experiences, and the episode's skill trials.

Runs last in the learning chain (after L2, typed experiences and world models), per episode, and again
whenever late feedback re-scores it. One run for episode E:

1. **Trials** (`skill_lifecycle`) — skills E's `turn.start`s recalled become trials of E, and E's trials
   (those and the `skill.get {recordTrial}` ones) are resolved by E's outcome, moving η and status.
2. **Planning** — for each live experience E fed (source episode, source feedback or linked step):
   the reference's gates (active, gain, support), then a success anchor: the strongest qualifying anchor
   of its task family, itself included (`skill_family`). None → the experience yields no
   skill and `meta.skill.skipped = "no_success_anchor"` is recorded on it (event `skill.skipped`): a
   failure avoidance, a repair instruction or a preference alone never becomes a skill. With an anchor,
   the family is gathered around it and matched to the skill already anchored there (same id, rebuilt)
   or to none (a new skill). Live skills of the namespace whose source experiences changed after them
   are planned too, so a correction that reached an experience through another episode still reaches
   the skill.
   **A person's rejection sticks.** A family with no live skill is not crystallised when any of its
   members is an experience a rejected skill (`skill.review reject`) rests on — its anchors or its other
   sources (`meta.skill.skipped = "skill_rejected"`). More evidence for the same task merges into those
   experiences or gathers around them (a family is whatever is related to its anchor). While the rejected
   skill's anchor is in the family, its only skill being archived would stop a new one anyway; but once
   that anchor is gone (archived, forgotten) a new success of the same task gathers around the rejected
   skill's other sources (its Avoid and Check experiences) and, without this rule, would be crystallised
   again as a new candidate from them. A rejected skill is archived, so it is never rebuilt either (only
   live skills are). A family made only of experiences the rejected skill never used is new material and
   may become a skill.
3. **Building** — a skill whose family (members and their content, `Family.digest`) is unchanged is only
   reconciled (`updated_at` moves on, so retrieval stops showing its sources as updates). Otherwise the
   evidence is gathered, the template and (when available) the LLM draft are written, the LLM draft is
   used only if the deterministic verifier passes it (else the template, which is verified too), and the
   skill is stored: new ones as `candidate`, rebuilt ones as the next version of the same row.
   `meta.skill` on every member records the skill and the member's role (anchor, avoid, check, prefer).

Without an LLM every step runs; only the wording of the draft differs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from memos_bridge.contract.errors import MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.learning import skill_store
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.reward_stage import RewardReport
from memos_bridge.core.learning.skill_crystallize import (
    EvidenceTrace,
    SkillDraft,
    draft_from_llm,
    evidence_texts,
    evidence_tools,
    llm_variables,
    procedure_payload,
    render_guide,
    select_evidence,
    template_draft,
)
from memos_bridge.core.learning.skill_family import (
    NO_SUCCESS_ANCHOR,
    ExperienceView,
    Family,
    best_anchor,
    build_family,
    gate,
    is_anchor,
    related,
)
from memos_bridge.core.learning.skill_lifecycle import STATUS_ARCHIVED, emit_change, resolve_trials_sync
from memos_bridge.core.learning.skill_verify import VerifierReport, restrict_tools, verify
from memos_bridge.llm.prompts import SKILL_CRYSTALLIZE
from memos_bridge.storage.vectors import to_blob

log = logging.getLogger(__name__)

#: Experiences fetched from the vector index when gathering a family.
FAMILY_POOL: Final = 32
LLM_OP: Final = "skill.crystallize"
SKILL_ARCHIVED: Final = "skill_archived"
VERIFIER_REJECTED: Final = "verifier_rejected"
ANCHOR_LOST: Final = "anchor_lost"
SKILL_REJECTED: Final = "skill_rejected"


@dataclass
class SkillReport:
    """What one run did (ids, for the chain report, tests and logs)."""

    episode_id: str
    #: (trial id, pass|fail) of the trials this run resolved.
    trials: list[tuple[str, str]] = field(default_factory=list)
    #: (skill id, from, to) of lifecycle status changes.
    status_changes: list[tuple[str, str, str]] = field(default_factory=list)
    crystallized: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    reconciled: list[str] = field(default_factory=list)
    #: experience id → why it yields no skill now.
    skipped: dict[str, str] = field(default_factory=dict)
    #: Drafts the verifier turned down (`draft`: llm | rules, with the report).
    rejected: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    #: Why the run did nothing ("" when it ran).
    skipped_run: str = ""


@dataclass
class _Plan:
    family: Family
    skill: skill_store.SkillView | None


class _Run:
    """One run's state: the context, the episode's namespace, loaded experiences, notes to write."""

    def __init__(self, ctx: LearningContext, scope: skill_store.EpisodeScope, report: SkillReport) -> None:
        self.ctx = ctx
        self.scope = scope
        self.report = report
        self.settings = ctx.settings.learning.skill
        self.views: dict[str, ExperienceView] = {}
        self.notes: dict[str, dict[str, Any]] = {}
        self.member_notes: dict[str, dict[str, Any]] = {}
        self._rejected: list[skill_store.SkillView] | None = None

    async def rejected_by_person(self, family: Family) -> skill_store.SkillView | None:
        """The rejected skill whose material `family` shares, if any (module docstring, step 2)."""
        if self._rejected is None:
            owner = self.scope.owner
            self._rejected = await self.ctx.db.read(lambda db: skill_store.rejected_skills(db, owner))
        members = set(family.source_ids())
        return next((skill for skill in self._rejected if skill.material() & members), None)

    # -------------------------------------------------------------- loading

    async def experiences(self, ids: Iterable[str]) -> list[ExperienceView]:
        wanted = list(dict.fromkeys(ids))
        missing = [i for i in wanted if i not in self.views]
        if missing:
            dim = self.ctx.vectors.dim
            for view in await self.ctx.db.read(lambda db: skill_store.load_experiences(db, missing, dim)):
                self.views[view.id] = view
        return [self.views[i] for i in wanted if i in self.views]

    async def pool(self, center: ExperienceView) -> list[ExperienceView]:
        """Experiences of the namespace that may be of `center`'s family (vector neighbours, shared tags or
        source episodes); `related` decides."""
        ids: list[str] = []
        if center.vec is not None:
            hits = await self.ctx.vectors.search(
                "policy", "vec", center.vec, FAMILY_POOL, center.owner, min_score=self.settings.family_tag_similarity
            )
            ids.extend(i for i, _ in hits)

        def read(db: Any) -> list[str]:
            tagged = skill_store.family_candidate_ids(db, center.owner, center.tags, center.source_episodes)
            return skill_store.owned_ids(db, center.owner, [*ids, *tagged])

        owned = await self.ctx.db.read(read)
        return [v for v in await self.experiences(owned) if v.id != center.id and related(center, v, self.settings)]

    async def family(self, primary: ExperienceView) -> Family:
        return build_family(primary, await self.pool(primary), self.settings)

    # -------------------------------------------------------------- notes and events

    def skip(self, exp: ExperienceView, reason: str, detail: dict[str, Any] | None = None) -> None:
        self.report.skipped[exp.id] = reason
        self.notes[exp.id] = {"skipped": reason, "ts": self.ctx.clock(), **(detail or {})}
        self.ctx.events.emit(
            EventType.SKILL_SKIPPED,
            {"episodeId": self.scope.episode_id, "policyId": exp.id, "reason": reason, **(detail or {})},
        )

    def members(self, family: Family, skill_id: str) -> None:
        now = self.ctx.clock()
        for role, ids in family.roles().items():
            for policy_id in ids:
                self.report.skipped.pop(policy_id, None)
                self.member_notes[policy_id] = {
                    "skillId": skill_id,
                    "role": role.rstrip("s"),
                    "primary": policy_id == family.primary.id,
                    "ts": now,
                }

    async def write_notes(self) -> None:
        notes = {**self.notes, **self.member_notes}  # being part of a skill outranks an earlier skip
        if notes:
            await self.ctx.db.write(lambda db: skill_store.record_policy_notes(db, notes))


# ---------------------------------------------------------------- planning


async def _plan_for(run: _Run, exp: ExperienceView) -> _Plan | None:
    """The skill `exp` leads to, or None (skip recorded)."""
    reason = gate(exp, run.settings)
    if reason is not None:
        run.skip(exp, reason)
        return None
    # The strongest anchor of the family leads (itself included), so every member of one family plans the
    # same skill whichever of them the episode touched first.
    primary = best_anchor([exp, *await run.pool(exp)], run.settings)
    if primary is None:
        run.skip(exp, NO_SUCCESS_ANCHOR, {"experienceType": exp.experience_type, "polarity": exp.polarity})
        return None
    family = await run.family(primary)
    anchor_ids = [a.id for a in family.anchors]
    skills = await run.ctx.db.read(lambda db: skill_store.skills_anchored_on(db, run.scope.owner, anchor_ids))
    live = [s for s in skills if s.status != STATUS_ARCHIVED]
    if not live:
        rejected = await run.rejected_by_person(family)
        if rejected is not None:
            run.skip(exp, SKILL_REJECTED, {"skillId": rejected.id})
            return None
    if not live and skills:
        run.skip(exp, SKILL_ARCHIVED, {"skillId": skills[0].id})
        return None
    skill = next((s for s in live if s.primary_id == primary.id), live[0] if live else None)
    if skill is not None and skill.primary_id != primary.id:
        # Keep the skill's own anchor as its primary while that still qualifies: a rebuild should not turn
        # a skill into a different one because another success of the family came along.
        own = next(iter(await run.experiences([skill.primary_id])), None)
        if own is not None and is_anchor(own, run.settings):
            family = await run.family(own)
    return _Plan(family, skill)


async def _stale_plan(run: _Run, skill: skill_store.SkillView) -> _Plan | None:
    """A live skill whose sources changed after it: rebuild around its anchor (or the best remaining one)."""
    anchors = await run.experiences([skill.primary_id, *skill.anchor_ids])
    primary = next((a for a in anchors if a.id == skill.primary_id and is_anchor(a, run.settings)), None)
    primary = primary or best_anchor(anchors, run.settings)
    if primary is None:
        run.report.skipped[skill.id] = ANCHOR_LOST
        return None
    return _Plan(await run.family(primary), skill)


# ---------------------------------------------------------------- building


def _verify(run: _Run, draft: SkillDraft, tools: list[str], texts: list[str]) -> VerifierReport:
    return verify(
        [step.text() for step in draft.steps],
        draft.tools,
        evidence_tools=tools,
        evidence_texts=texts,
        coverage_min=run.settings.verifier_coverage,
        resonance_min=run.settings.verifier_resonance,
    )


def _reject(run: _Run, family: Family, draft: SkillDraft, verdict: VerifierReport) -> dict[str, Any]:
    record = {"policyId": family.primary.id, "draft": draft.induced_by, "name": draft.name, **verdict.as_json()}
    run.report.rejected.append(record)
    run.ctx.events.emit(EventType.SKILL_REJECTED, {"episodeId": run.scope.episode_id, **record})
    return record


async def _embed(run: _Run, text: str) -> bytes | None:
    try:
        vectors = await run.ctx.embedder.embed([text], role="document")
    except MemosError as exc:
        log.info("skill vector unavailable (%s); the skill is found by keywords until a rebuild", exc.code.value)
        return None
    return to_blob(vectors[0])


@dataclass
class _Drafted:
    draft: SkillDraft
    verdict: VerifierReport
    provenance: dict[str, Any]
    evidence: list[EvidenceTrace]
    counter: list[EvidenceTrace]


async def _draft(run: _Run, plan: _Plan) -> _Drafted | None:
    """The verified draft with its verifier report, provenance notes and evidence; None when even the
    template fails the verifier."""
    family, skill = plan.family, plan.skill
    dim = run.ctx.vectors.dim
    traces, counter_ids = await run.ctx.db.read(lambda db: skill_store.load_evidence(db, family, dim))
    evidence, counter = select_evidence(
        traces,
        family.primary.vec,
        limit=run.settings.evidence_limit,
        char_cap=run.settings.trace_char_cap,
        counter_ids=counter_ids,
    )
    exclude = skill.id if skill else None
    taken = await run.ctx.db.read(lambda db: skill_store.names_taken(db, run.scope.owner, exclude))
    template = template_draft(family, evidence, taken)
    if skill is not None:
        template.name = skill.name  # a skill keeps its name across versions
    tools = evidence_tools(evidence)
    texts = evidence_texts(family, evidence)
    provenance: dict[str, Any] = {"evidence": len(evidence), "counterExamples": len(counter)}
    if run.ctx.llm_ready(run.scope.episode_id, run.settings.use_llm):
        try:
            output = await run.ctx.llm.complete_json(
                SKILL_CRYSTALLIZE,
                llm_variables(family, template, evidence, counter, taken),
                op=LLM_OP,
                episode_id=run.scope.episode_id,
            )
            run.report.llm_calls += 1
            candidate = draft_from_llm(output, template, taken)
            if candidate is None:
                provenance["llmDraft"] = "unusable"
            else:
                if skill is not None:
                    candidate.name = skill.name
                verdict = _verify(run, candidate, tools, texts)
                if verdict.passed:
                    candidate.tools = restrict_tools(candidate.tools, tools)
                    return _Drafted(candidate, verdict, provenance, evidence, counter)
                provenance["llmDraft"] = _reject(run, family, candidate, verdict)
        except MemosError as exc:
            log.info("skill drafting LLM unavailable (%s); using the template", exc.code.value)
            provenance["llmDraft"] = f"unavailable:{exc.code.value}"
    verdict = _verify(run, template, tools, texts)
    if not verdict.passed:
        _reject(run, family, template, verdict)
        return None
    template.tools = restrict_tools(template.tools, tools)
    return _Drafted(template, verdict, provenance, evidence, counter)


async def _build(run: _Run, plan: _Plan) -> None:
    family, skill = plan.family, plan.skill
    settings = run.settings
    now = run.ctx.clock()
    if skill is not None and skill.digest == family.digest():
        if any(m.updated_at > skill.updated_at for m in family.members) or not skill.has_vec:
            vec = None if skill.has_vec else await _embed(run, skill.name.replace("_", " "))
            row = await run.ctx.db.write(lambda db: skill_store.reconcile_skill(db, skill.id, now, vec))
            if row is not None:
                run.ctx.vectors.upsert("skill", row)
                run.report.reconciled.append(skill.id)
        return
    drafted = await _draft(run, plan)
    if drafted is None:
        run.skip(family.primary, VERIFIER_REJECTED)
        return
    draft = drafted.draft
    guide = render_guide(draft)
    verifier = {**drafted.verdict.as_json(), **drafted.provenance}
    procedure = procedure_payload(draft, family, drafted.evidence, drafted.counter, verifier)
    vec = await _embed(run, f"{draft.name.replace('_', ' ')}\n{draft.summary}")
    skill_id = skill.id if skill else None
    persisted = await run.ctx.db.write(
        lambda db: skill_store.persist_skill(
            db,
            skill_id=skill_id,
            family=family,
            draft=draft,
            guide=guide,
            procedure=procedure,
            vec=vec,
            settings=settings,
            now=now,
        )
    )
    row = persisted.row
    run.ctx.vectors.upsert("skill", row)
    (run.report.crystallized if persisted.created else run.report.rebuilt).append(row.id)
    run.members(family, row.id)
    run.ctx.events.emit(
        EventType.SKILL_CRYSTALLIZED if persisted.created else EventType.SKILL_REBUILT,
        {
            "episodeId": run.scope.episode_id,
            "skillId": row.id,
            "name": row.name,
            "version": row.version,
            "status": row.status,
            "eta": round(row.eta, 4),
            "inducedBy": draft.induced_by,
            "anchorIds": list(row.evidence_anchors_json),
            "sourcePolicyIds": list(row.source_policies_json),
        },
    )
    if not persisted.created and row.status != persisted.previous_status:
        run.report.status_changes.append((row.id, persisted.previous_status, row.status))


# ---------------------------------------------------------------- the stage


async def run_skills(ctx: LearningContext, episode_id: str, outcome: str) -> SkillReport:
    """Resolve the episode's trials, then crystallise, rebuild or skip (module docstring)."""
    report = SkillReport(episode_id)
    scope = await ctx.db.read(lambda db: skill_store.load_scope(db, episode_id))
    if scope is None:
        report.skipped_run = "episode_not_found"
        return report
    run = _Run(ctx, scope, report)
    settings = run.settings
    now = ctx.clock()

    # 1. Trials.
    resolved, changes = await ctx.db.write(lambda db: resolve_trials_sync(db, episode_id, outcome, settings, now))
    for trial in resolved:
        report.trials.append((trial.trial_id, trial.status))
    etas = {change.skill.id: change.skill.eta for change in changes}
    for trial in resolved:
        ctx.events.emit(
            EventType.SKILL_TRIAL_RESOLVED,
            {
                "episodeId": episode_id,
                "trialId": trial.trial_id,
                "skillId": trial.skill_id,
                "status": trial.status,
                "eta": round(etas[trial.skill_id], 4) if trial.skill_id in etas else None,
            },
        )
    for change in changes:
        emit_change(ctx, change, episode_id)
        if change.status_changed:
            report.status_changes.append((change.skill.id, change.previous_status, change.skill.status))

    # 2. Plans: experiences the episode fed, then skills whose sources moved on.
    touched = await ctx.db.read(lambda db: skill_store.touched_policy_ids(db, scope))
    plans: dict[str, _Plan] = {}
    claimed: set[str] = set()  # anchors some plan already builds on: one family, one skill

    def add(plan: _Plan | None) -> None:
        if plan is None:
            return
        key = plan.skill.id if plan.skill else plan.family.primary.id
        anchors = {a.id for a in plan.family.anchors}
        if key in plans or (plan.skill is None and anchors & claimed):
            return
        plans[key] = plan
        claimed.update(anchors)

    for exp in await run.experiences(touched):
        add(await _plan_for(run, exp))
    for skill in await ctx.db.read(lambda db: skill_store.stale_skills(db, scope.owner)):
        if skill.id not in plans:
            add(await _stale_plan(run, skill))

    # 3. Build.
    for plan in plans.values():
        await _build(run, plan)
    await run.write_notes()
    log.info(
        "skills %s: %d trials, %d crystallized, %d rebuilt, %d reconciled, %d skipped, %d rejected",
        episode_id,
        len(report.trials),
        len(report.crystallized),
        len(report.rebuilt),
        len(report.reconciled),
        len(report.skipped),
        len(report.rejected),
    )
    return report


async def skill_stage(ctx: LearningContext, episode_id: str, reward: RewardReport) -> SkillReport:
    """`run_skills` with the learning chain's stage signature `(ctx, episode_id, reward_report)`."""
    return await run_skills(ctx, episode_id, reward.outcome)
