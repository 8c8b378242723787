"""The L3 stage: world models — what several experiences of one domain reveal about the environment.

Runs after L2 (and the experience builder) in the per-episode chain, before skills (reference §6.6,
issue 5 "World models"). One run:

1. **Experiences** — the active experiences/policies of the episode's namespace that pass the floors
   (confidence ≥ 0.45 as seed 000 asks, gain, support), of any type and polarity: a failure tells as
   much about the environment as a success (`world_store.load_state`).
2. **Domains** — each experience gets one primary domain from the configurable table (tags first, then
   text, then its L2 signature; most specific domain wins, `world_evidence.DomainTable`). Only the
   domains of experiences this episode touched are (re)considered, so an episode's LLM budget pays for
   its own domains only.
3. **Cluster** — per domain, the strict cluster around the vector centroid (cosine ≥ 0.3) when it has
   `min_policies` (2) members, else the whole domain as a loose cluster with damped confidence; fewer
   than `min_policies` experiences → nothing (one experience is a lesson, not an environment).
4. **Unchanged?** — a live model that already absorbed exactly these experiences as they are now is left
   alone: idempotent re-runs, no LLM call.
5. **Abstract** — the `l3.abstraction` prompt when an LLM is available (entries validated and grounded,
   gaps filled from the rules), else the deterministic abstraction (`world_rules`). A draft without any
   environment fact or constraint is not stored.
6. **Merge or create** inside one write (`world_store.persist`): version + 1, evidence unioned,
   confidence + delta on a merge. The vector (title + body) goes into the in-memory index; retrieval only
   injects active models whose confidence reaches `min_confidence_for_retrieval`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from memos_bridge.contract.errors import MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.learning import world_store
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.world_evidence import Domain, DomainTable, ExperienceView
from memos_bridge.core.learning.world_rules import (
    Cluster,
    WorldDraft,
    abstract_by_rules,
    build_cluster,
    draft_from_llm,
    experience_block,
    same_input_groups,
)
from memos_bridge.llm.prompts import WORLD_ABSTRACTION
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob

log = logging.getLogger(__name__)

#: `op` of the abstraction call in `api_logs` and the facade's stats.
LLM_OP: Final = "l3.abstraction"


@dataclass
class WorldReport:
    """What one run did (ids, for the chain report, tests and logs)."""

    episode_id: str
    created: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    #: Models that already held exactly this evidence.
    unchanged: list[str] = field(default_factory=list)
    #: Domain → why no model was written for it (too_few_experiences, no_facts).
    skipped_domains: dict[str, str] = field(default_factory=dict)
    llm_used: bool = False
    llm_calls: int = 0
    #: Why the run did nothing at all ("" when it ran).
    skipped: str = ""


async def world_stage(ctx: LearningContext, episode_id: str, _reward: object = None) -> WorldReport:
    """`run_world` with the learning chain's stage signature `(ctx, episode_id, reward_report)`."""
    return await run_world(ctx, episode_id)


async def run_world(ctx: LearningContext, episode_id: str) -> WorldReport:
    """Abstract, merge or create the world models of the domains `episode_id` touched (module docstring)."""
    settings = ctx.settings.learning.world
    report = WorldReport(episode_id)
    if not settings.enabled:
        report.skipped = "disabled"
        return report
    dim = ctx.vectors.dim
    state = await ctx.db.read(lambda db: world_store.load_state(db, episode_id, dim, settings))
    if state is None:
        report.skipped = "episode_not_found"
        return report
    table = DomainTable.from_settings(settings)
    by_domain: dict[str, list[ExperienceView]] = {}
    domains: dict[str, Domain] = {}
    for view in state.views:
        domain = table.primary(view)
        if domain is not None:
            by_domain.setdefault(domain.key, []).append(view)
            domains[domain.key] = domain
    touched = [key for key, views in by_domain.items() if any(v.id in state.touched for v in views)]
    if not touched:
        report.skipped = "no_domain_experience"
        return report
    terms_of = {view.id: view.terms for view in state.views}
    for key in sorted(touched, key=lambda k: domains[k].rank):
        for group in same_input_groups(by_domain[key]):  # one domain word, different data: separate models
            if any(v.id in state.touched for v in group):
                await _run_domain(ctx, report, state.owner, domains[key], group, terms_of)
    log.info(
        "l3 %s: %d created, %d merged, %d unchanged, skipped %s",
        episode_id,
        len(report.created),
        len(report.merged),
        len(report.unchanged),
        report.skipped_domains or "-",
    )
    return report


async def _run_domain(
    ctx: LearningContext,
    report: WorldReport,
    owner: OwnerFilter,
    domain: Domain,
    views: list[ExperienceView],
    terms_of: Mapping[str, Sequence[str]],
) -> None:
    settings = ctx.settings.learning.world
    cluster = build_cluster(domain, views, settings)
    if cluster is None:
        report.skipped_domains[domain.key] = "too_few_experiences"
        return
    unchanged = await ctx.db.read(lambda db: world_store.unchanged_model(db, owner, cluster, settings))
    if unchanged is not None:
        report.unchanged.append(unchanged)
        return
    draft = await _draft(ctx, report, cluster)
    if not draft.has_facts:
        report.skipped_domains[domain.key] = "no_facts"
        return
    vec = await _embed(ctx, draft.title, draft.body)
    stored = await ctx.db.write(
        partial(
            world_store.persist,
            owner=owner,
            cluster=cluster,
            draft=draft,
            vec=vec,
            settings=settings,
            dim=ctx.vectors.dim,
            now=ctx.clock(),
            terms_of=terms_of,
        )
    )
    row = stored.row
    if stored.text_changed:  # a merge re-rendered title and body: the vector follows the text
        merged_vec = await _embed(ctx, row.title, row.body)
        if merged_vec is not None:
            world_id = row.id
            refreshed = await ctx.db.write(lambda db: world_store.set_vector(db, world_id, merged_vec))
            row = refreshed if refreshed is not None else row
    ctx.vectors.upsert("world_model", row)
    (report.created if stored.created else report.merged).append(row.id)
    ctx.events.emit(
        EventType.WORLD_MODEL_CREATED if stored.created else EventType.WORLD_MODEL_UPDATED,
        {
            "episodeId": report.episode_id,
            "worldModelId": row.id,
            "domain": domain.key,
            "version": row.version,
            "confidence": row.confidence,
            "inducedBy": row.induced_by,
            "policyIds": list(row.policy_ids_json or []),
        },
    )


async def _draft(ctx: LearningContext, report: WorldReport, cluster: Cluster) -> WorldDraft:
    """The LLM's draft when it is available and usable (gaps filled from the rules), else the rule draft."""
    settings = ctx.settings.learning.world
    rules = abstract_by_rules(cluster, settings)
    if not ctx.llm_ready(report.episode_id, settings.use_llm):
        return rules
    shown = cluster.members[: settings.llm_policies]
    variables = {
        "domain": f"{cluster.domain.label} ({cluster.domain.key})",
        "experiences": "\n\n".join(experience_block(m, settings.policy_char_cap) for m in shown),
    }
    try:
        output = await ctx.llm.complete_json(WORLD_ABSTRACTION, variables, op=LLM_OP, episode_id=report.episode_id)
    except MemosError as exc:
        log.info("l3 abstraction LLM unavailable (%s); using the rule abstraction", exc.code.value)
        return rules
    report.llm_calls += 1
    draft = draft_from_llm(output, rules, cluster, settings)
    if draft is None:
        log.info("l3 abstraction answer had no grounded facts; using the rule abstraction")
        return rules
    report.llm_used = True
    return draft


async def _embed(ctx: LearningContext, title: str, body: str) -> bytes | None:
    """Vector of title + body; None when the embedder is down (full-text search still finds the model)."""
    try:
        matrix = await ctx.embedder.embed([f"{title}\n{body}"], role="document")
    except MemosError as exc:
        log.warning("world model embedding unavailable (%s); stored without a vector", exc.code.value)
        return None
    return to_blob(matrix[0])
