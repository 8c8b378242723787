"""L3 world models: the declarative rewriting, domains, verifier facts, the rule and LLM abstractions, and the
stage (create, merge, idempotent re-runs, domain and namespace separation, retrieval floors) — on a real
database with the real embedder, with no LLM and with a scripted one.

The SEC 13F experiences are seed 000's: a success ("confirm the answers.json schema, then parse all
infoTable rows"), an avoidance ("do not reuse the previous task's answers.json schema" — the verifier
expected top_class_labels/top_class_counts) and a unit lesson ("do not multiply value by 1000 — values are
in thousands of USD"; expected 1234, got 1234000).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from memos_bridge.config import DomainSpec, WorldSettings
from memos_bridge.contract import dto
from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.events import EventType
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.learning.world import WorldReport, run_world, world_stage
from memos_bridge.core.learning.world_evidence import DomainTable, ExperienceView, parse_verifier_meta, scale_factor
from memos_bridge.core.learning.world_rules import (
    Cluster,
    Entry,
    abstract_by_rules,
    build_cluster,
    draft_from_llm,
    merge_entries,
    rules_confidence,
    same_input_groups,
)
from memos_bridge.core.learning.world_text import (
    classify,
    clauses,
    declarative,
    gerund,
    gerund_phrase,
    identifiers,
)
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.prompts import WorldAbstractionOutput
from memos_bridge.storage.models import EpisodeRow, FeedbackRow, KvRow, PolicyRow, SessionRow, WorldModelRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob
from tests.llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

#: The SEC 13F domain as a host configures it (the SkillFlow family declares the same in its `worldDomain`): the
#: service ships no task family's domain.
SEC13F_CONFIG: dict[str, Any] = {
    "label": "SEC 13F filings",
    "aliases": ["13f", "sec-13f", "13f-hr", "infotable", "cusip", "edgar"],
    "patterns": [
        r"\bsec[\s_-]*13f",
        r"(?<![a-z0-9])13f(?![a-z0-9])",
        r"\bcusip",
        r"\binfo[\s_-]?table",
        r"\bholdings?\b",
    ],
}
SEC13F = DomainSpec(**SEC13F_CONFIG)
WORLD_13F: dict[str, Any] = {"world": {"extra_domains": {"sec13f": SEC13F_CONFIG}}}


def world_settings(**extra: DomainSpec) -> WorldSettings:
    return WorldSettings(extra_domains={"sec13f": SEC13F, **extra})


T0 = 1_700_000_000_000
AGENT = "tester"
OWNER = OwnerFilter(AGENT, "default", None)
OTHER = OwnerFilter("someone-else", "default", None)

SUCCESS: dict[str, Any] = {
    "experience_type": "success_pattern",
    "evidence_polarity": "positive",
    "title": "SEC 13F: confirm the answers.json schema, then parse all infoTable rows",
    "trigger": "A SEC 13F holdings task that writes answers.json",
    "procedure": "1. Confirm the target answers.json schema for the current task.\n2. Parse all infoTable rows.\n"
    "3. Aggregate according to the requested fields.",
    "verification": "answers.json has exactly the fields the task asks for",
    "tags": ["sec13f", "json"],
    "verifier": {"task": "sec13f_total_value", "passed": 5, "total": 5, "outcome": "pass"},
}
AVOID_SCHEMA: dict[str, Any] = {
    "experience_type": "failure_avoidance",
    "evidence_polarity": "negative",
    "title": "Avoid: reusing the previous task's answers.json schema",
    "trigger": "A SEC 13F task that writes answers.json",
    "procedure": "Do not reuse the previous task's answers.json schema.",
    "anti": ["Do not reuse the previous task's answers.json fields"],
    "tags": ["sec13f"],
    "verifier": {
        "task": "sec13f_top_classes",
        "passed": 0,
        "total": 4,
        "mismatches": [
            {"kind": "missing", "field": "top_class_labels"},
            {"kind": "missing", "field": "top_class_counts"},
            {"kind": "unexpected", "field": "stock_holding"},
        ],
        "file": "answers.json",
    },
}
AVOID_THOUSANDS: dict[str, Any] = {
    "experience_type": "failure_avoidance",
    "evidence_polarity": "negative",
    "title": "13F values are in thousands of USD",
    "trigger": "When totalling SEC 13F infoTable values",
    "procedure": "Do not multiply value by 1000 / values are in thousands of USD",
    "tags": ["sec13f"],
    "verifier": {
        "task": "sec13f_total_value",
        "passed": 1,
        "total": 5,
        "mismatches": [
            {"kind": "scale", "field": "total_value", "expected": "1234", "actual": "1234000", "detail": "thousands"}
        ],
        "hints": ["Values in the 13F infoTable are reported in thousands of USD."],
    },
}
DOCKER_CACHE: dict[str, Any] = {
    "experience_type": "failure_avoidance",
    "evidence_polarity": "negative",
    "title": "Docker layer cache hides requirement changes",
    "trigger": "Building a Docker image after editing requirements.txt",
    "procedure": "Do not reuse the cached pip layer after requirements.txt changed / the Dockerfile copies "
    "requirements.txt before the code",
    "tags": ["docker"],
}
DOCKER_ALPINE: dict[str, Any] = {
    "experience_type": "success_pattern",
    "evidence_polarity": "positive",
    "title": "Alpine images need build tools for native wheels",
    "trigger": "pip install fails inside a Docker alpine image",
    "procedure": "Install build-base in the Dockerfile before pip install.",
    "boundary": "The alpine base image has no compiler by default",
    "tags": ["docker", "python"],
}


#: How the seed experiences' guidance starts; none of it may start a world-model statement.
IMPERATIVES = frozenset({"do", "don't", "avoid", "never", "confirm", "parse", "aggregate", "reuse", "multiply", "use"})


# ---------------------------------------------------------------- language


def test_gerunds_follow_english_spelling() -> None:
    cases = {"multiply": "multiplying", "parse": "parsing", "stop": "stopping", "tie": "tying", "see": "seeing"}
    cases |= {"commit": "committing", "open": "opening", "sum": "summing", "check": "checking", "reuse": "reusing"}
    assert {verb: gerund(verb) for verb in cases} == cases
    assert gerund_phrase("multiply value by 1000 and sum the rows") == "multiplying value by 1000 and summing the rows"
    assert gerund_phrase("hardcode the path", after_negation=True) == "hardcoding the path"
    assert gerund_phrase("the previous schema", after_negation=True) == "using the previous schema"


def test_guidance_splits_into_classified_clauses() -> None:
    found = clauses("Do not multiply value by 1000 / values are in thousands of USD")
    assert [(c.kind, c.text) for c in found] == [
        ("avoid", "multiply value by 1000"),
        ("fact", "values are in thousands of USD"),
    ]
    assert classify("Parse all infoTable rows").kind == "do"
    assert classify("Expected top_class_labels, but the answer used stock_holding").kind == "mismatch"
    assert classify("The verifier checks exact fields and values").kind == "requirement"
    assert (
        classify("Make sure that answers.json has the requested fields").text == "answers.json has the requested fields"
    )
    assert classify("SEC 13F family tasks").kind == "phrase"  # a scope, not a statement
    assert classify("multiplying by 1000", anti_pattern=True).kind == "avoid"
    assert classify("values are in thousands", anti_pattern=True).kind == "fact"  # the reason, not the action
    assert clauses("source: ep_01HXABCDEFGH / fb_01HXABCDEFGH") == []
    assert [c.kind for c in clauses("不要把 value 乘以 1000；数值单位是千美元")] == ["avoid", "fact"]


def test_instructions_become_statements() -> None:
    assert declarative("Do not multiply value by 1000") == "Multiplying value by 1000 leads to failures."
    assert declarative("Confirm the schema before aggregating").startswith("Confirming the schema")
    assert declarative("values are in thousands") == "Values are in thousands."
    assert identifiers("parse_13f.py writes answers.json with top_class_labels from infoTable; po_01HXABCDEFGH") == [
        "parse_13f.py",
        "answers.json",
        "top_class_labels",
        "infoTable",
    ]


# ---------------------------------------------------------------- domains and verifier facts


def _view(spec: dict[str, Any], view_id: str, **extra: Any) -> ExperienceView:
    return ExperienceView(
        id=view_id,
        experience_type=spec["experience_type"],
        polarity=spec["evidence_polarity"],
        title=spec["title"],
        trigger=spec.get("trigger", ""),
        procedure=spec.get("procedure", ""),
        verification=spec.get("verification", ""),
        boundary=spec.get("boundary", ""),
        anti_pattern=tuple(spec.get("anti", ())),
        verifier_meta=spec.get("verifier"),
        tags=tuple(spec.get("tags", ())),
        confidence=extra.pop("confidence", 0.8),
        source_episodes=extra.pop("episodes", (f"ep_{view_id}",)),
        **extra,
    )


def test_domains_come_from_tags_then_text_then_signature_most_specific_first() -> None:
    settings = world_settings(terraform=DomainSpec(label="Terraform", patterns=[r"\bterraform\b"]))
    table = DomainTable.from_settings(settings)
    primary = table.primary
    assert primary(_view(AVOID_SCHEMA, "a")).key == "sec13f"  # type: ignore[union-attr]
    assert primary(_view(DOCKER_ALPINE, "b")).key == "docker"  # type: ignore[union-attr]  # docker before python
    both = {**AVOID_SCHEMA, "tags": ["python", "13F"]}
    assert primary(_view(both, "c")).key == "sec13f"  # type: ignore[union-attr]  # alias, and more specific
    untagged = {**AVOID_THOUSANDS, "tags": []}
    assert primary(_view(untagged, "d")).key == "sec13f"  # type: ignore[union-attr]  # from the text
    plain = {"experience_type": "procedural", "evidence_polarity": "positive", "title": "list files", "tags": []}
    assert primary(_view(plain, "e")) is None
    assert primary(_view(plain, "f", signature="pip|bash|bash|_")).key == "python"  # type: ignore[union-attr]
    tf = {**plain, "title": "terraform plan before apply on aws"}
    assert primary(_view(tf, "g")).key == "terraform"  # type: ignore[union-attr]  # extra domains first


def test_the_domain_table_is_shared_between_runs_until_its_settings_change() -> None:
    """Each L3 run classifies every eligible experience; the table (and what it learnt about texts) is reused
    while the domain settings are the same, and a changed pattern gets a fresh table, never a stale answer."""
    table = DomainTable.from_settings(world_settings())
    assert DomainTable.from_settings(world_settings()) is table
    text = "Parse every infoTable row before answering"
    assert [d.key for d in table.of_text(text)] == ["sec13f"]
    assert [d.key for d in table.of_text(text)] == ["sec13f"]  # remembered: same answer, a list of its own
    table.of_text(text).clear()
    assert [d.key for d in table.of_text(text)] == ["sec13f"]
    narrower = SEC13F.model_copy(update={"patterns": [r"\bcusip"]})
    changed = DomainTable.from_settings(WorldSettings(extra_domains={"sec13f": narrower}))
    assert changed is not table and "sec13f" not in [d.key for d in changed.of_text(text)]


def test_verifier_payloads_reduce_to_environment_facts() -> None:
    facts = parse_verifier_meta(AVOID_THOUSANDS["verifier"])
    assert facts is not None and facts.task == "sec13f_total_value" and facts.verdict == "1/5 checks passed"
    assert [(m.field, m.factor) for m in facts.mismatches] == [("total_value", 1000.0)]
    assert facts.notes == ("Values in the 13F infoTable are reported in thousands of USD.",)
    schema = parse_verifier_meta(AVOID_SCHEMA["verifier"])
    assert schema is not None and schema.missing_fields == ("top_class_labels", "top_class_counts")
    assert schema.unexpected == ("stock_holding",) and schema.file == "answers.json"
    nested = parse_verifier_meta(
        {
            "verifier": {
                "taskName": "t",
                "expected": {"total": 5, "rows": [1, 2]},
                "actual": {"total": 5000, "rows": [1]},
            }
        }
    )
    assert nested is not None and nested.expected_fields == ("total", "rows")
    assert {(m.field, m.factor) for m in nested.mismatches} == {("total", 1000.0), ("rows", None)}
    assert parse_verifier_meta({"unrelated": 1}) is None and parse_verifier_meta("text") is None
    assert scale_factor(1234, 1234000) == 1000.0 and scale_factor(2, 3) is None and scale_factor(500, 0.5) == 0.001


# ---------------------------------------------------------------- the rule abstraction


def _seed_cluster(settings: WorldSettings) -> Cluster:
    table = DomainTable.from_settings(settings)
    members = [_view(SUCCESS, "po_s"), _view(AVOID_SCHEMA, "po_a", confidence=0.9), _view(AVOID_THOUSANDS, "po_t")]
    cluster = build_cluster(table.get("sec13f"), members, settings)  # type: ignore[arg-type]
    assert cluster is not None
    return cluster


def _all_entries(structure: Any) -> list[Entry]:
    return [entry for name in ("environment", "inference", "constraints") for entry in structure[name]]


def test_rules_abstract_the_seed_13f_experiences_into_declarative_knowledge() -> None:
    settings = world_settings()
    draft = abstract_by_rules(_seed_cluster(settings), settings)
    environment = {e.description: e.evidence_ids for e in draft.structure["environment"]}
    inference = {e.description: e.evidence_ids for e in draft.structure["inference"]}
    constraints = {e.description: e.evidence_ids for e in draft.structure["constraints"]}
    thousands = next(d for d in environment if "in thousands of USD" in d)
    assert environment[thousands] == ["po_t"]
    assert "An answer was 1,000 times the value the verifier expected." in environment  # observed, not interpreted
    shared = next(d for d in environment if d.startswith("Tasks of this family work with"))
    assert "answers.json" in shared and "infoTable" in shared
    assert any(d.startswith("Multiplying value by 1000 led to failed results") for d in inference)
    assert any(d.startswith("Reusing the previous task's answers.json schema led to failed results") for d in inference)
    assert any(d.startswith("Parsing all infoTable rows was part of runs that passed") for d in inference)
    per_task = next(d for d in constraints if d.startswith("Output fields differ between tasks"))
    assert sorted(constraints[per_task]) == ["po_a", "po_t"]
    # a world model is recalled text: no task's values, ids or output fields in it
    everything = json.dumps([e.description for e in _all_entries(draft.structure)])
    assert not any(value in everything for value in ("1234", "sec13f_total_value", "top_class_labels"))
    members = {"po_s", "po_a", "po_t"}
    for entry in _all_entries(draft.structure):
        assert entry.evidence_ids and set(entry.evidence_ids) <= members
        first = entry.description.split(" ", 1)[0].lower()  # declarative facts only
        assert first not in IMPERATIVES and classify(entry.description).kind not in ("do", "avoid"), entry.description
    assert draft.has_facts and draft.domain_tags == ["sec13f"] and draft.induced_by == "rules"
    assert draft.title.startswith("SEC 13F filings environment")
    assert "**Environment**" in draft.body and "**Constraints**" in draft.body
    assert len(draft.body) <= settings.body_max_chars


def test_confidence_is_a_noisy_or_over_episodes_and_loose_clusters_are_damped() -> None:
    settings = world_settings()
    table = DomainTable.from_settings(settings)
    domain = table.get("sec13f")
    assert domain is not None
    two = Cluster(domain, [_view(SUCCESS, "a", confidence=0.8), _view(AVOID_SCHEMA, "b", confidence=0.8)])
    assert rules_confidence(two) == pytest.approx(1 - 0.6 * 0.6)
    same_episode = Cluster(
        domain,
        [_view(SUCCESS, "a", confidence=0.8, episodes=("ep_1",)), _view(AVOID_SCHEMA, "b", episodes=("ep_1",))],
    )
    assert rules_confidence(same_episode) == pytest.approx(0.4)  # one task is one piece of evidence
    loose = Cluster(domain, two.members, loose=True, cohesion=0.5)
    assert rules_confidence(loose) == pytest.approx((1 - 0.36) * 0.8)
    assert build_cluster(domain, [_view(SUCCESS, "a")], settings) is None  # one experience is not a world


def test_strict_cluster_drops_outliers_and_falls_back_to_a_loose_one() -> None:
    settings = world_settings()
    domain = DomainTable.from_settings(settings).get("sec13f")
    assert domain is not None
    x, y = np.eye(4, 384, dtype=np.float32)[0], np.eye(4, 384, dtype=np.float32)[1]
    near = [_view(SUCCESS, "a", vec=x), _view(AVOID_SCHEMA, "b", vec=x), _view(AVOID_THOUSANDS, "c", vec=-x)]
    strict = build_cluster(domain, near, settings)
    assert strict is not None and not strict.loose and sorted(strict.ids) == ["a", "b"]
    apart = [_view(SUCCESS, "a", vec=x), _view(AVOID_SCHEMA, "b", vec=-x), _view(AVOID_THOUSANDS, "c", vec=y)]
    loose = build_cluster(domain, apart, settings)  # centroid y: only "c" is close to it
    assert loose is not None and loose.loose and len(loose.ids) == 3
    assert loose.cohesion == pytest.approx(1 / 3) and loose.damping == pytest.approx(0.6 + 0.4 / 3)


def test_same_statements_merge_with_their_evidence() -> None:
    merged = merge_entries(
        [
            Entry("Unit", "Values are in thousands of USD.", ["a"]),
            Entry("x", "Values are reported in thousands of USD.", ["b"]),
            Entry("Other", "The verifier compares fields exactly.", ["c"]),
        ],
        cap=8,
    )
    assert [(e.description, e.evidence_ids) for e in merged] == [
        ("Values are in thousands of USD.", ["a", "b"]),
        ("The verifier compares fields exactly.", ["c"]),
    ]


def test_llm_entries_are_validated_grounded_and_rewritten() -> None:
    settings = world_settings()
    cluster = _seed_cluster(settings)
    rules = abstract_by_rules(cluster, settings)
    output = WorldAbstractionOutput.model_validate(
        {
            "title": "SEC 13F task family",
            "domain_tags": ["SEC 13F", "finance"],
            "environment": [
                {"label": "Units", "description": "infoTable values are in thousands of USD", "evidenceIds": ["po_t"]},
                {"label": "Made up", "description": "The moon is made of cheese", "evidence_ids": ["po_zzz"]},
            ],
            "constraints": [
                {
                    "label": "Schema",
                    "description": "Confirm the answers.json schema of the current task",
                    "evidence_ids": ["nope"],
                }
            ],
            "inference": [],
            "body": "SEC 13F tasks share filings but differ in output schema.",
            "confidence": 0.9,
        }
    )
    draft = draft_from_llm(output, rules, cluster, settings)
    assert draft is not None and draft.induced_by == "llm" and draft.title == "SEC 13F task family"
    assert [(e.description, e.evidence_ids) for e in draft.structure["environment"]] == [
        ("infoTable values are in thousands of USD.", ["po_t"])  # the ungrounded claim is gone
    ]
    (schema,) = draft.structure["constraints"]
    assert schema.description.startswith("Confirming the answers.json schema") and schema.evidence_ids[0] == "po_s"
    assert draft.structure["inference"] == rules.structure["inference"]  # the gap filled from the rules
    assert draft.domain_tags == ["sec13f", "sec-13f", "finance"] and draft.confidence == pytest.approx(0.9)
    empty = WorldAbstractionOutput.model_validate({"name": "x", "environment": [{"description": "unrelated words"}]})
    assert draft_from_llm(empty, rules, cluster, settings) is None


# ---------------------------------------------------------------- the stage


def _setup_episode(core: MemoryCore, episode_id: str, owner: OwnerFilter = OWNER) -> str:
    session_id = f"se_{episode_id}"

    def add(db: Any) -> None:
        if db.get(SessionRow, session_id) is None:
            db.add(
                SessionRow(id=session_id, agent=owner.agent_kind, started_at=T0, last_seen_at=T0, **owner.as_columns())
            )
            db.flush()
        db.add(EpisodeRow(id=episode_id, session_id=session_id, started_at=T0, status="closed", **owner.as_columns()))

    core.db.write_sync(add)
    return episode_id


async def _experience(
    core: MemoryCore,
    spec: dict[str, Any],
    episodes: Sequence[str],
    *,
    policy_id: str,
    confidence: float = 0.8,
    status: str = "active",
    owner: OwnerFilter = OWNER,
    feedback_ids: Sequence[str] = (),
    terms: Sequence[str] = (),
) -> str:
    text = f"{spec['title']}\n{spec.get('trigger', '')}\n{spec.get('procedure', '')}"
    vec = (await core.embedder.embed([text], role="document"))[0]
    row = PolicyRow(
        id=policy_id,
        title=spec["title"],
        trigger=spec.get("trigger", ""),
        procedure=spec.get("procedure", ""),
        verification=spec.get("verification", ""),
        boundary=spec.get("boundary", ""),
        support=1,
        gain=max(0.02, confidence),
        status=status,
        experience_type=spec["experience_type"],
        evidence_polarity=spec["evidence_polarity"],
        salience=confidence,
        confidence=confidence,
        source_episodes_json=list(episodes),
        source_feedback_ids_json=list(feedback_ids),
        decision_guidance_json={"preference": [], "antiPattern": list(spec.get("anti", []))},
        verifier_meta_json=spec.get("verifier"),
        skill_eligible=spec["experience_type"] == "success_pattern",
        tags_json=list(spec.get("tags", [])),
        induced_by="feedback.experience",
        lesson_json={"terms": list(terms)} if terms else None,
        vec=to_blob(vec),
        created_at=T0,
        updated_at=T0,
        **owner.as_columns(),
    )
    core.db.write_sync(lambda db: db.add(row))
    core.learning.ctx.vectors.upsert("policy", row)
    return policy_id


def _models(core: MemoryCore) -> list[WorldModelRow]:
    return list(core.db.read_sync(lambda db: list(db.scalars(select(WorldModelRow).order_by(WorldModelRow.rid)))))


def _events(core: MemoryCore) -> list[CoreEventDTO]:
    seen: list[CoreEventDTO] = []
    core.events.subscribe(seen.append)
    return seen


def _structure_ids(row: WorldModelRow, section: str) -> set[str]:
    return {i for entry in row.structure_json[section] for i in entry["evidenceIds"]}


async def test_two_13f_experiences_make_a_sec13f_world_model_and_a_third_merges(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F)
    seen = _events(core)
    ctx = core.learning.ctx
    await _experience(core, SUCCESS, [_setup_episode(core, "ep_one")], policy_id="po_success")
    lone = await run_world(ctx, "ep_one")
    assert lone.skipped_domains == {"sec13f": "too_few_experiences"} and _models(core) == []

    await _experience(core, AVOID_SCHEMA, [_setup_episode(core, "ep_two")], policy_id="po_schema")
    report = await world_stage(ctx, "ep_two", None)
    assert isinstance(report, WorldReport) and len(report.created) == 1 and not report.llm_used
    (model,) = _models(core)
    assert model.id == report.created[0] and model.version == 1 and model.status == "active"
    assert "sec13f" in model.domain_tags_json and sorted(model.policy_ids_json) == ["po_schema", "po_success"]
    assert sorted(model.source_episodes_json) == ["ep_one", "ep_two"] and model.induced_by == "rules"
    assert model.structure_json["environment"] and model.structure_json["constraints"]
    cited = _structure_ids(model, "environment") | _structure_ids(model, "constraints")
    assert cited == {"po_schema", "po_success"}
    assert "top_class_labels" not in json.dumps(model.structure_json)  # one task's output fields stay out
    assert model.vec is not None and model.body.startswith("SEC 13F filings: abstracted from 2 experiences")
    first_confidence = model.confidence
    hits = await ctx.vectors.search("world_model", "vec", np.frombuffer(model.vec, dtype=np.float32), 3, OWNER)
    assert hits and hits[0][0] == model.id
    created = [e for e in seen if e.type == EventType.WORLD_MODEL_CREATED.value]
    assert created and created[0].payload["worldModelId"] == model.id and created[0].payload["domain"] == "sec13f"

    again = await run_world(ctx, "ep_two")  # a re-run (late feedback, recovery) with nothing new
    assert again.unchanged == [model.id] and not again.created and not again.merged
    assert _models(core)[0].version == 1

    await _experience(core, AVOID_THOUSANDS, [_setup_episode(core, "ep_three")], policy_id="po_thousands")
    merged = await run_world(ctx, "ep_three")
    assert merged.merged == [model.id] and not merged.created
    (after,) = _models(core)
    assert after.id == model.id and after.version == 2 and after.confidence > first_confidence
    assert after.confidence >= first_confidence + ctx.settings.learning.world.confidence_delta - 1e-9
    assert sorted(after.policy_ids_json) == ["po_schema", "po_success", "po_thousands"]
    assert "po_thousands" in _structure_ids(after, "environment")
    assert "thousands of USD" in after.body and after.vec != model.vec
    assert any(e.type == EventType.WORLD_MODEL_UPDATED.value and e.payload["version"] == 2 for e in seen)
    absorbed = core.db.read_sync(lambda db: db.get(KvRow, f"l3.absorbed.{model.id}"))
    assert absorbed is not None and set(absorbed.value_json) == {"po_schema", "po_success", "po_thousands"}


async def test_changed_experience_content_merges_again_but_bookkeeping_does_not(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F)
    ctx = core.learning.ctx
    await _experience(core, SUCCESS, [_setup_episode(core, "ep_a")], policy_id="po_a")
    await _experience(core, AVOID_THOUSANDS, [_setup_episode(core, "ep_b")], policy_id="po_b")
    (created,) = (await run_world(ctx, "ep_b")).created

    def bump_gain(db: Any) -> None:
        row = db.scalar(select(PolicyRow).where(PolicyRow.id == "po_b"))
        row.gain, row.support, row.updated_at = 0.9, 4, T0 + 5

    core.db.write_sync(bump_gain)
    assert (await run_world(ctx, "ep_b")).unchanged == [created]

    def new_guidance(db: Any) -> None:
        row = db.scalar(select(PolicyRow).where(PolicyRow.id == "po_b"))
        row.decision_guidance_json = {"preference": [], "antiPattern": ["Do not round values to millions"]}
        row.source_feedback_ids_json = ["fb_new"]

    core.db.write_sync(new_guidance)
    again = await run_world(ctx, "ep_b")
    assert again.merged == [created] and _models(core)[0].version == 2
    assert "Rounding values to millions" in json.dumps(_models(core)[0].structure_json["inference"])


async def test_the_feedback_an_experience_came_from_adds_its_environment_facts(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F)
    ep = _setup_episode(core, "ep_fb")
    rationale = (
        "The parser handled 312 infoTable holdings. "
        "Values in the 13F infoTable are already in thousands of USD; do not multiply value by 1000."
    )

    def add_feedback(db: Any) -> None:
        db.add(
            FeedbackRow(
                id="fb_units",
                ts=T0,
                episode_id=ep,
                channel="explicit",
                polarity="negative",
                magnitude=1.0,
                rationale=rationale,
                raw_json={"verifier": AVOID_THOUSANDS["verifier"]},
                **OWNER.as_columns(),
            )
        )

    core.db.write_sync(add_feedback)
    lesson = {**AVOID_THOUSANDS, "title": "Avoid scaling 13F values", "procedure": "Do not multiply value by 1000"}
    lesson["verifier"] = {"task": "sec13f_total_value", "passed": 1, "total": 5}
    await _experience(core, lesson, [ep], policy_id="po_units", feedback_ids=["fb_units"])
    await _experience(core, SUCCESS, [_setup_episode(core, "ep_ok")], policy_id="po_ok")
    (created,) = (await run_world(core.learning.ctx, ep)).created
    (model,) = _models(core)
    facts = {e["description"]: e["evidenceIds"] for e in model.structure_json["environment"]}
    assert facts.get("Values in the 13F infoTable are already in thousands of USD.") == ["po_units"]
    assert "handled" not in json.dumps(model.structure_json)  # what happened once is not how things are
    assert model.id == created


async def test_domains_and_namespaces_never_mix(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F)
    ctx = core.learning.ctx
    shared = _setup_episode(core, "ep_mixed")
    await _experience(core, SUCCESS, [shared], policy_id="po_13f_a")
    await _experience(core, AVOID_SCHEMA, [_setup_episode(core, "ep_13f")], policy_id="po_13f_b")
    await _experience(core, DOCKER_ALPINE, [shared], policy_id="po_docker_a")
    await _experience(core, DOCKER_CACHE, [_setup_episode(core, "ep_docker")], policy_id="po_docker_b")
    _setup_episode(core, "ep_other", OTHER)
    await _experience(core, AVOID_THOUSANDS, ["ep_other"], policy_id="po_other", owner=OTHER)
    report = await run_world(ctx, "ep_mixed")
    assert len(report.created) == 2
    by_domain = {row.domain_tags_json[0]: row for row in _models(core)}
    assert set(by_domain) == {"sec13f", "docker"}
    assert sorted(by_domain["sec13f"].policy_ids_json) == ["po_13f_a", "po_13f_b"]
    assert sorted(by_domain["docker"].policy_ids_json) == ["po_docker_a", "po_docker_b"]
    assert "infoTable" not in by_domain["docker"].body and "Docker" in by_domain["docker"].title
    other = await run_world(ctx, "ep_other")  # a lone experience in its own namespace: no model, no leak
    assert other.skipped_domains == {"sec13f": "too_few_experiences"} and len(_models(core)) == 2


def test_experiences_of_one_domain_split_by_the_inputs_they_were_learnt_on() -> None:
    api = _view(DOCKER_ALPINE, "a1", terms=("Dockerfile.api",))
    api_twin = _view(DOCKER_CACHE, "a2", terms=("Dockerfile.api", "requirements.txt"))
    chained = _view(DOCKER_CACHE, "a3", terms=("requirements.txt",))  # linked to a1 through a2
    ci = _view(DOCKER_CACHE, "b1", terms=("build.yml",))
    siblings = (
        _view(DOCKER_CACHE, "c1", terms=("acme_orders_2024.csv",)),
        _view(DOCKER_CACHE, "c2", terms=("acme_returns_2024.csv",)),
    )
    bare = _view(DOCKER_ALPINE, "n1")
    groups = same_input_groups([api, ci, api_twin, bare, chained, *siblings])
    assert sorted(sorted(v.id for v in g) for g in groups) == [
        ["a1", "a2", "a3", "n1"],
        ["b1", "n1"],
        ["c1", "c2", "n1"],
    ]
    assert [[v.id for v in g] for g in same_input_groups([bare, _view(DOCKER_CACHE, "n2")])] == [["n1", "n2"]]


async def test_one_domain_word_over_different_data_makes_separate_models(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F)
    ctx = core.learning.ctx
    first = _setup_episode(core, "ep_first")
    await _experience(core, DOCKER_ALPINE, [first], policy_id="po_api_a", terms=["Dockerfile.api"])
    await _experience(core, DOCKER_CACHE, [first], policy_id="po_api_b", terms=["Dockerfile.api"])
    await _experience(core, DOCKER_ALPINE, [first], policy_id="po_ci_a", terms=["build.yml"])
    await _experience(core, DOCKER_CACHE, [first], policy_id="po_ci_b", terms=["build.yml"])
    report = await run_world(ctx, first)
    assert len(report.created) == 2
    assert sorted(sorted(row.policy_ids_json) for row in _models(core)) == [
        ["po_api_a", "po_api_b"],
        ["po_ci_a", "po_ci_b"],
    ]
    later = _setup_episode(core, "ep_later")  # a third lesson on the CI file joins the CI model, not the other
    await _experience(core, DOCKER_CACHE, [later], policy_id="po_ci_c", terms=["build.yml"])
    again = await run_world(ctx, later)
    assert again.created == [] and len(again.merged) == 1
    merged = next(row for row in _models(core) if row.id == again.merged[0])
    assert sorted(merged.policy_ids_json) == ["po_ci_a", "po_ci_b", "po_ci_c"]


async def test_inactive_and_weak_experiences_do_not_count(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F)
    ep = _setup_episode(core, "ep_x")
    await _experience(core, SUCCESS, [ep], policy_id="po_ok")
    await _experience(core, AVOID_SCHEMA, [ep], policy_id="po_weak", confidence=0.3)
    await _experience(core, AVOID_THOUSANDS, [ep], policy_id="po_archived", status="archived")
    report = await run_world(core.learning.ctx, ep)
    assert report.skipped_domains == {"sec13f": "too_few_experiences"} and _models(core) == []
    assert (await run_world(core.learning.ctx, "ep_missing")).skipped == "episode_not_found"
    quiet = await core_factory(learning={"world": {"enabled": False, **WORLD_13F["world"]}})
    assert (await run_world(quiet.learning.ctx, ep)).skipped == "disabled"


async def test_with_a_scripted_llm_the_abstraction_is_the_models(core_factory: Any) -> None:
    answer = {
        "name": "SEC 13F filing tasks",
        "domain_tags": ["sec13f", "finance"],
        "environment": [
            {
                "label": "Units",
                "description": "Values in the 13F infoTable are reported in thousands of USD",
                "evidence_ids": ["po_t"],
            },
            {"label": "Invented", "description": "Quarterly filings are due in March", "evidence_ids": ["po_x"]},
        ],
        "inference": [
            {"label": "Scaling", "description": "Multiplying values by 1000 inflates totals", "evidence_ids": ["po_t"]}
        ],
        "constraints": [
            {
                "label": "Schema",
                "description": "Each task defines its own answers.json fields",
                "evidence_ids": ["po_a", "po_t"],
            }
        ],
        "body": "SEC 13F tasks share filing data; each has its own output schema; values are in thousands.",
        "confidence": 0.7,
    }
    provider = ScriptedProvider(json.dumps(answer))
    core: MemoryCore = await core_factory(llm=LLMFacade([provider]), learning=WORLD_13F)
    await _experience(core, AVOID_SCHEMA, [_setup_episode(core, "ep_a")], policy_id="po_a")
    await _experience(core, AVOID_THOUSANDS, [_setup_episode(core, "ep_t")], policy_id="po_t")
    report = await run_world(core.learning.ctx, "ep_t")
    assert report.llm_used and report.llm_calls == 1 and len(provider.calls) == 1
    system, user = provider.calls[0][0].content, provider.calls[0][1].content
    assert "imperative" in system and "[po_a]" in user and "[po_t]" in user and "sec13f" in user
    (model,) = _models(core)
    assert model.induced_by == "llm" and model.title == "SEC 13F filing tasks" and model.body == answer["body"]
    descriptions = [e["description"] for e in model.structure_json["environment"]]
    assert descriptions == ["Values in the 13F infoTable are reported in thousands of USD."]  # ungrounded dropped
    assert model.structure_json["constraints"][0]["evidenceIds"] == ["po_a", "po_t"]
    assert model.confidence == pytest.approx(0.7)  # two members always form a strict cluster: no damping
    assert model.domain_tags_json[:2] == ["sec13f", "finance"]


async def test_an_unusable_or_failing_llm_falls_back_to_the_rules(core_factory: Any) -> None:
    nonsense = {"name": "x", "environment": [{"description": "nothing grounded here at all"}], "confidence": 0.9}
    for reply in (json.dumps(nonsense), "not json at all", RuntimeError("provider down")):
        provider = ScriptedProvider(reply)
        core: MemoryCore = await core_factory(llm=LLMFacade([provider]), learning=WORLD_13F)
        await _experience(core, SUCCESS, [_setup_episode(core, "ep_s")], policy_id="po_s")
        await _experience(core, AVOID_THOUSANDS, [_setup_episode(core, "ep_t")], policy_id="po_t")
        report = await run_world(core.learning.ctx, "ep_t")
        assert len(report.created) == 1 and not report.llm_used
        (model,) = _models(core)
        assert model.induced_by == "rules" and model.structure_json["environment"]
        assert provider.calls  # it was asked


# ---------------------------------------------------------------- retrieval


async def test_only_active_confident_world_models_reach_turn_start(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F, retrieval={"render_mode": "full"})  # its sections
    await _experience(core, SUCCESS, [_setup_episode(core, "ep_s")], policy_id="po_s")
    await _experience(core, AVOID_THOUSANDS, [_setup_episode(core, "ep_t")], policy_id="po_t")
    (model_id,) = (await run_world(core.learning.ctx, "ep_t")).created
    session = (await core.open_session(dto.SessionOpenParams(agent=AGENT))).session_id
    ts = [T0]

    async def recalled() -> str:
        ts[0] += 10_000_000  # each question starts a new task
        text = "SEC 13F task: total the infoTable holdings per issuer into answers.json"
        result = await core.turn_start(dto.TurnInputDTO(agent=AGENT, session_id=session, user_text=text, ts=ts[0]))
        return result.injected_context

    shown = await recalled()
    assert "## Environment knowledge" in shown and model_id in shown and "thousands of USD" in shown

    def set_model(**values: Any) -> None:
        def work(db: Any) -> None:
            row = db.scalar(select(WorldModelRow).where(WorldModelRow.id == model_id))
            for key, value in values.items():
                setattr(row, key, value)

        core.db.write_sync(work)
        core.vectors.invalidate()

    set_model(confidence=0.1)  # below learning.world.min_confidence_for_retrieval (0.2)
    assert model_id not in await recalled()
    set_model(confidence=0.8, status="archived")
    assert model_id not in await recalled()
    set_model(status="active")
    assert model_id in await recalled()


async def test_wire_reads_map_rows_to_dtos(core_factory: Any) -> None:
    core: MemoryCore = await core_factory(learning=WORLD_13F)
    await _experience(core, SUCCESS, [_setup_episode(core, "ep_s")], policy_id="po_s")
    await _experience(core, AVOID_SCHEMA, [_setup_episode(core, "ep_a")], policy_id="po_a")
    (model_id,) = (await run_world(core.learning.ctx, "ep_a")).created
    got = await core.get_world(dto.GetByIdParams(id=model_id))
    assert got is not None and got.id == model_id and got.version == 1 and got.status == "active"
    assert got.structure.constraints and all(e.evidence_ids for e in got.structure.constraints)
    assert sorted(got.policy_ids) == ["po_a", "po_s"] and got.induced_by == "rules"
    wire = got.to_wire()
    assert "evidenceIds" in wire["structure"]["environment"][0] and "domainTags" in wire
    assert await core.get_world(dto.GetByIdParams(id="wm_missing")) is None
    other_ns = dto.RuntimeNamespace(agent_kind="someone-else")
    assert await core.get_world(dto.GetByIdParams(id=model_id, namespace=other_ns)) is None
    listed = await core.list_world_models(dto.ListWorldModelsParams())
    assert [m.id for m in listed.world_models] == [model_id]
    assert (await core.list_world_models(dto.ListWorldModelsParams(status="archived"))).world_models == []
    assert (await core.list_world_models(dto.ListWorldModelsParams(namespace=other_ns))).world_models == []


async def _judged_task(
    core: MemoryCore, session: str, ts: int, request: str, file: str, feedback: dict[str, Any]
) -> str:
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": AGENT, "sessionId": session, "userText": request, "ts": ts})
    )
    episode = started.query.episode_id
    assert episode is not None
    calls = [
        {"name": "read_file", "input": {"path": file}, "output": "(read)"},
        {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"},
    ]
    end = {"agent": AGENT, "sessionId": session, "episodeId": episode, "toolCalls": calls, "ts": ts + 5_000}
    end["agentText"] = 'Wrote answers.json with {"total_value": 8812400}.'
    await core.turn_end(dto.TurnResultDTO.model_validate(end))
    params = {"episodeId": episode, "magnitude": 1.0, "ts": ts + 9_000, **feedback}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    return episode


async def test_a_failure_lesson_and_a_verified_success_on_two_filings_of_one_kind_make_one_world_model(
    core_factory: Any,
) -> None:
    """The seed's own example through the pipeline: a lesson learnt on one filing, then a verified success on another
    filing of the same kind (other filer, other file name) make one world model, with no values of either task; a
    task of other work in the same namespace does not join it."""
    core: MemoryCore = await core_factory(learning={**WORLD_13F, "reward": {"feedback_window_s": 0}})
    lesson = "The value field of every 13F infoTable is in thousands of USD; do not multiply it by 1000."
    first = await _judged_task(
        core,
        "se_f1",
        T0,
        "Parse the 13F filing acme_13f_2024q1.xml and write the total holding value to answers.json.",
        "acme_13f_2024q1.xml",
        {
            "polarity": "negative",
            "rationale": lesson,
            "raw": {
                "verifier": {
                    "passed": 0,
                    "total": 1,
                    "expected": {"total_value": 8812.4},
                    "actual": {"total_value": 8812400},
                }
            },
        },
    )
    second = await _judged_task(
        core,
        "se_f2",
        T0 + 4 * 3_600_000,
        "Parse the 13F filing beacon_13f_2024q2.xml and write the total holding value to answers.json.",
        "beacon_13f_2024q2.xml",
        {
            "polarity": "positive",
            "rationale": "Correct, all checks passed.",
            "raw": {"verifier": {"passed": 1, "total": 1}},
        },
    )
    await core.flush()
    models = [m for m in _models(core) if m.status == "active"]
    assert len(models) == 1, [(m.title, m.policy_ids_json) for m in models]
    (model,) = models
    assert {first, second} <= set(model.source_episodes_json)
    text = json.dumps([model.title, model.body, model.structure_json])
    assert "8812" not in text and "acme" not in text.casefold() and "beacon" not in text.casefold()
    # two companies' order exports, alike requests, a lesson each: no file of one kind, no shared world model
    orders = [
        await _judged_task(
            core,
            f"se_o{index}",
            T0 + (8 + 4 * index) * 3_600_000,
            f"What is the total amount of the paid orders in {file}? Write it to answers.json.",
            file,
            {"polarity": "negative", "rationale": rule},
        )
        for index, (file, rule) in enumerate(
            [
                ("harlow_orders_2023.csv", "amount is in cents; divide by 100"),
                ("quay_tickets_2024.csv", "amount is in pence; divide by 100"),
            ]
        )
    ]
    await core.flush()
    assert all(len(set(orders) & set(model.source_episodes_json)) <= 1 for model in _models(core))
