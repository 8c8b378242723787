"""Success-anchored skills: eligibility, family sections (Avoid/Check), the verifier gate, crystallisation with
and without an LLM, rebuilds, trials and η, archive/restore — on a real database with the real embedder.

The SEC 13F examples are seed 000's: a failed run whose verifier said "values are in thousands — do not
multiply by 1000", and a later run that passed ("parse infoTable, sum value per issuer, write answers.json").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from memos_bridge.config import SkillSettings
from memos_bridge.contract import dto
from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.learning import skill_lifecycle, skill_store
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.skill_crystallize import snake_name, split_steps, template_draft, unique_name
from memos_bridge.core.learning.skill_family import ExperienceView, anchor_reason, build_family, related
from memos_bridge.core.learning.skill_lifecycle import initial_eta, next_status, updated_eta
from memos_bridge.core.learning.skill_verify import restrict_tools, step_resonance, tool_coverage, verify
from memos_bridge.core.learning.skills import SkillReport, run_skills, skill_stage
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.storage.models import PolicyRow, SkillRow, SkillTrialRow, TurnRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob
from tests.llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000
AGENT = "tester"
OWNER = OwnerFilter(AGENT, "default", None)

PARSE = {"name": "bash", "input": {"cmd": "python parse_13f.py filing.xml"}, "output": "parsed 312 infoTable rows"}
SUM = {"name": "python", "input": {"code": "df.groupby('issuer').value.sum()"}, "output": "41 issuers"}
WRITE = {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"}

SUCCESS = {
    "experience_type": "success_pattern",
    "evidence_polarity": "positive",
    "skill_eligible": True,
    "title": "SEC 13F holdings: total value per issuer into answers.json",
    "trigger": "When a SEC 13F task asks for the total holding value per issuer",
    "procedure": "1. Parse every infoTable record of the 13F filing\n2. Sum value per issuer\n"
    "3. Write answers.json with the requested fields",
    "verification": "The verifier reports every answers.json field passed",
    "tags": ["sec13f"],
}
AVOID_THOUSANDS = {
    "experience_type": "failure_avoidance",
    "evidence_polarity": "negative",
    "title": "Avoid: multiplying 13F values by 1000",
    "trigger": "When aggregating SEC 13F infoTable values",
    "procedure": "Values in the 13F infoTable are already in thousands — do not multiply by 1000",
    "anti": ["Do not multiply 13F infoTable values by 1000: they are already in thousands"],
    "tags": ["sec13f"],
}
REPAIR_SCHEMA = {
    "experience_type": "repair_instruction",
    "evidence_polarity": "negative",
    "title": "Repair: use the answers.json schema of the current 13F task",
    "trigger": "When writing answers.json for a SEC 13F task",
    "procedure": "Confirm the answers.json fields the current 13F task asks for before writing it",
    "tags": ["sec13f"],
}
PREFER_TABS = {
    "experience_type": "preference",
    "evidence_polarity": "neutral",
    "title": "Prefer: sorted issuers in 13F answers",
    "trigger": "When writing SEC 13F answers",
    "procedure": "List issuers in alphabetical order in answers.json",
    "tags": ["sec13f"],
}


class FakeMs:
    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass
class World:
    core: MemoryCore
    clock: FakeMs
    events: list[CoreEventDTO] = field(default_factory=list)
    ts: int = T0
    made: int = 0

    @property
    def ctx(self) -> LearningContext:
        return self.core.learning.ctx

    def tick(self) -> int:
        self.ts += 1000
        return self.ts

    async def episode(
        self, text: str, tools: Sequence[dict[str, Any]], reply: str, session: str = "se_13f"
    ) -> tuple[str, list[str]]:
        started = await self.core.turn_start(
            dto.TurnInputDTO.model_validate(
                {"agent": AGENT, "sessionId": session, "userText": text, "ts": self.tick(), "episodeId": None}
            )
        )
        episode = started.query.episode_id
        assert episode is not None
        ended = await self.core.turn_end(
            dto.TurnResultDTO.model_validate(
                {
                    "agent": AGENT,
                    "sessionId": session,
                    "episodeId": episode,
                    "agentText": reply,
                    "toolCalls": list(tools),
                    "ts": self.tick(),
                }
            )
        )
        await self.core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
        return episode, ended.trace_ids

    async def experience(
        self,
        spec: dict[str, Any],
        *,
        episodes: Sequence[str],
        traces: Sequence[str] = (),
        status: str = "active",
        gain: float = 0.6,
        support: int = 1,
        updated_at: int | None = None,
        verifier_meta: Any = None,
    ) -> str:
        text = f"{spec['title']}\n{spec['trigger']}\n{spec['procedure']}"
        vec = (await self.core.embedder.embed([text]))[0]
        stamp = updated_at if updated_at is not None else self.clock()
        self.made += 1
        row = PolicyRow(
            id=f"po_test{self.made:04d}",
            title=spec["title"],
            trigger=spec["trigger"],
            procedure=spec["procedure"],
            verification=spec.get("verification", ""),
            boundary=spec.get("boundary", ""),
            status=status,
            support=support,
            gain=gain,
            experience_type=spec["experience_type"],
            evidence_polarity=spec["evidence_polarity"],
            salience=0.8,
            confidence=0.8,
            skill_eligible=spec.get("skill_eligible", False),
            tags_json=list(spec.get("tags", [])),
            source_episodes_json=list(episodes),
            source_trace_ids_json=list(traces),
            decision_guidance_json={
                "preference": list(spec.get("prefer", [])),
                "antiPattern": list(spec.get("anti", [])),
            },
            verifier_meta_json=verifier_meta,
            induced_by="test",
            vec=to_blob(vec),
            created_at=stamp,
            updated_at=stamp,
            **OWNER.as_columns(),
        )

        def add(db: Any) -> None:
            db.add(row)

        await self.core.db.write(add)
        self.core.vectors.upsert("policy", row)
        return row.id

    async def skills(self) -> list[SkillRow]:
        return await self.core.db.read(lambda db: list(db.scalars(select(SkillRow).order_by(SkillRow.rid))))

    async def skill(self, skill_id: str) -> SkillRow:
        row = await self.core.db.read(lambda db: db.scalar(select(SkillRow).where(SkillRow.id == skill_id)))
        assert row is not None
        return row

    async def policy(self, policy_id: str) -> PolicyRow:
        row = await self.core.db.read(lambda db: db.scalar(select(PolicyRow).where(PolicyRow.id == policy_id)))
        assert row is not None
        return row

    async def touch_policy(self, policy_id: str, **changes: Any) -> None:
        def work(db: Any) -> None:
            row = db.scalar(select(PolicyRow).where(PolicyRow.id == policy_id))
            for key, value in changes.items():
                setattr(row, key, value)
            row.updated_at = self.clock()

        await self.core.db.write(work)

    def of_type(self, event: EventType) -> list[CoreEventDTO]:
        return [e for e in self.events if e.type == event.value]

    def use_llm(self, provider: ScriptedProvider) -> None:
        self.ctx.llm = LLMFacade([provider])


@pytest.fixture
async def world(core_factory: Any) -> World:
    core = await core_factory()
    clock = FakeMs()
    core.learning.ctx.clock = clock
    made = World(core, clock)
    core.events.subscribe(made.events.append)
    return made


async def thirteen_f(world: World) -> dict[str, Any]:
    """Seed 000's pair: a failed 13F run (avoidance) and a later passing one (success pattern)."""
    failed, failed_traces = await world.episode(
        "Compute the total value of the 13F holdings per issuer and write answers.json",
        [PARSE, WRITE],
        "Wrote answers.json with every value multiplied by 1000.",
    )
    passed, passed_traces = await world.episode(
        "Compute the total value per issuer of this quarter's 13F filing into answers.json",
        [PARSE, SUM, WRITE],
        "Wrote answers.json: totals per issuer, values kept in thousands.",
    )
    world.clock.advance(10_000)
    avoid = await world.experience(AVOID_THOUSANDS, episodes=[failed], traces=failed_traces[-1:])
    world.clock.advance(10_000)
    success = await world.experience(SUCCESS, episodes=[passed], traces=passed_traces, gain=0.8)
    return {
        "failed": failed,
        "passed": passed,
        "failed_traces": failed_traces,
        "passed_traces": passed_traces,
        "avoid": avoid,
        "success": success,
    }


def _section(guide: str, title: str) -> str:
    """The lines of one `## title` section of a Markdown guide."""
    lines = guide.splitlines()
    start = lines.index(f"## {title}")
    out = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------------
# Pure rules
# --------------------------------------------------------------------------------------------------------


def _view(**fields: Any) -> ExperienceView:
    base: dict[str, Any] = {
        "id": "po_x",
        "title": "t",
        "trigger": "",
        "procedure": "",
        "verification": "",
        "boundary": "",
        "experience_type": "procedural",
        "polarity": "positive",
        "status": "active",
        "gain": 0.5,
        "support": 1,
        "confidence": 0.5,
        "skill_eligible": False,
        "owner": OWNER,
        "updated_at": 0,
    }
    return ExperienceView(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"experience_type": "success_pattern"}, "success_pattern"),
        ({"experience_type": "repair_validated", "polarity": "mixed"}, "repair_validated"),
        ({"experience_type": "success_pattern", "polarity": "negative"}, None),
        ({"experience_type": "failure_avoidance", "polarity": "positive", "skill_eligible": True}, None),
        ({"experience_type": "repair_instruction", "verified_success": True}, None),
        ({"experience_type": "preference", "skill_eligible": True}, None),
        ({"experience_type": "procedural"}, None),  # an L2 procedure nobody verified
        ({"experience_type": "procedural", "verified_success": True}, "verified_success"),
        ({"experience_type": "verifier_feedback", "polarity": "neutral", "verified_success": True}, None),
        ({"experience_type": "verifier_feedback", "skill_eligible": True}, "skill_eligible"),
    ],
)
def test_success_anchor_rules(fields: dict[str, Any], expected: str | None) -> None:
    assert anchor_reason(_view(**fields)) == expected


def test_family_needs_closeness_or_a_shared_tag_with_some_closeness() -> None:
    settings = SkillSettings()
    a = _view(id="a", tags=("sec13f",), vec=np.array([1.0, 0.0], dtype="float32"))
    near = _view(id="b", vec=np.array([0.8, 0.6], dtype="float32"))  # cos 0.8
    tagged_far = _view(id="c", tags=("sec13f",), vec=np.array([0.3, 0.954], dtype="float32"))
    tagged_opposite = _view(id="d", tags=("sec13f",), vec=np.array([0.0, 1.0], dtype="float32"))
    untagged_far = _view(id="e", vec=np.array([0.3, 0.954], dtype="float32"))
    assert related(a, near, settings) and related(a, tagged_far, settings)
    assert not related(a, tagged_opposite, settings) and not related(a, untagged_far, settings)


def test_verifier_tool_coverage_and_step_resonance() -> None:
    evidence = ["user: total the 13F holdings per issuer\ntool: bash(cmd=python parse_13f.py) → parsed infoTable rows"]
    assert tool_coverage(["bash", "`write_file`"], ["bash", "write_file"]) == (1.0, [])
    assert tool_coverage(["curl", "psql", "bash"], ["bash"]) == (pytest.approx(1 / 3), ["curl", "psql"])
    assert tool_coverage([], ["bash"]) == (1.0, [])
    resonance, ungrounded = step_resonance(
        ["Parse the infoTable rows with parse_13f.py", "Deploy the kubernetes cluster to production"], evidence
    )
    assert resonance == 0.5 and ungrounded == [2]
    report = verify(
        ["Parse the infoTable rows", "Sum holdings per issuer"],
        ["curl", "psql"],
        evidence_tools=["bash"],
        evidence_texts=evidence,
        coverage_min=0.5,
        resonance_min=0.5,
    )
    assert not report.passed and report.reasons == ("tool_coverage",) and report.unseen_tools == ("curl", "psql")
    assert verify([], [], evidence_tools=[], evidence_texts=evidence, coverage_min=0.5, resonance_min=0.5).reasons == (
        "no_steps",
        "evidence_resonance",
    )
    assert restrict_tools(["bash", "curl", "bash"], ["BASH"]) == ["bash"]


def test_step_splitting_and_names() -> None:
    assert split_steps("SEC 13F task should first confirm the answers.json schema, then parse all infoTable rows.") == [
        "SEC 13F task should first confirm the answers.json schema",
        "parse all infoTable rows",
    ]
    assert split_steps("1. parse\n2. sum\n- write") == ["parse", "sum", "write"]
    assert split_steps("parse the filing → sum per issuer; write answers.json") == [
        "parse the filing",
        "sum per issuer",
        "write answers.json",
    ]
    name = snake_name("SEC 13F holdings: total value per issuer into answers.json")
    assert name == "sec_13f_holdings"
    long = snake_name("Parse every infoTable record of the quarterly SEC 13F filing for each manager")
    assert long == "parse_every_infotable_record" and len(long) <= 32
    assert snake_name("汇总 13F 持仓") == "汇总_13f_持仓"
    assert unique_name(name, {name, f"{name}_2"}) == f"{name}_3"
    assert snake_name("!!!") == "skill"


def test_eta_pseudo_observation_and_status_rules() -> None:
    settings = SkillSettings()
    assert initial_eta(0.8, 1, settings) == pytest.approx(0.9)
    assert initial_eta(-1.0, 0, settings) == pytest.approx(settings.min_eta_for_retrieval)
    # the prior counts as one observation: a pass from 0.5 → (0.5 + 1) / 2
    assert updated_eta(0.5, 0, 0, 1, 1) == pytest.approx(0.75)
    # then a fail: prior reconstructed as 0.75·2 − 1 = 0.5 → (0.5 + 1) / 3
    assert updated_eta(0.75, 1, 1, 2, 1) == pytest.approx(0.5)
    # re-resolving the only trial from pass to fail replaces it: (0.5 + 0) / 2
    assert updated_eta(0.75, 1, 1, 1, 0) == pytest.approx(0.25)
    assert next_status("candidate", 0.75, 1, 1, 1, settings) == "active"
    assert next_status("candidate", 0.4, 1, 0, 1, settings) == "candidate"
    assert next_status("candidate", 0.5, 0, 0, 2, settings) == "active"  # support promotes
    assert next_status("active", 0.05, 3, 0, 1, settings) == "archived"
    assert next_status("candidate", 0.05, 0, 0, 1, settings) == "candidate"  # untried: never archived by η
    assert next_status("archived", 0.9, 5, 5, 9, settings) == "archived"  # only skill.restore revives


# --------------------------------------------------------------------------------------------------------
# Eligibility on stored experiences
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_llm", [False, True], ids=["no_llm", "scripted_llm"])
@pytest.mark.parametrize("spec", [AVOID_THOUSANDS, REPAIR_SCHEMA, PREFER_TABS])
async def test_avoidance_repair_or_preference_alone_never_yields_a_skill(
    world: World, spec: dict[str, Any], with_llm: bool
) -> None:
    episode, traces = await world.episode(
        "Compute the total value of the 13F holdings per issuer and write answers.json",
        [PARSE, WRITE],
        "Wrote answers.json with every value multiplied by 1000.",
    )
    provider = _llm(_skill_reply(["bash"]))
    if with_llm:
        world.use_llm(provider)
    policy_id = await world.experience(spec, episodes=[episode], traces=traces, gain=0.9, support=3)
    report = await run_skills(world.ctx, episode, "failure")
    assert await world.skills() == [] and provider.calls == []  # nothing to draft: no model call either
    assert report.crystallized == [] and report.skipped == {policy_id: "no_success_anchor"}
    meta = (await world.policy(policy_id)).meta_json["skill"]
    assert meta["skipped"] == "no_success_anchor" and meta["ts"] == world.clock()
    skipped = world.of_type(EventType.SKILL_SKIPPED)
    assert [e.payload["reason"] for e in skipped] == ["no_success_anchor"]
    assert skipped[0].payload["policyId"] == policy_id


async def test_the_reference_gates_come_before_the_anchor(world: World) -> None:
    episode, traces = await world.episode("Total the 13F holdings per issuer", [PARSE], "Done.")
    inactive = await world.experience(SUCCESS, episodes=[episode], traces=traces, status="candidate")
    report = await run_skills(world.ctx, episode, "success")
    assert report.skipped == {inactive: "not_active"} and await world.skills() == []


async def test_a_verified_procedure_anchors_but_an_unverified_one_does_not(world: World) -> None:
    episode, traces = await world.episode("Total the 13F holdings per issuer", [PARSE, WRITE], "Done.")
    procedural = {**SUCCESS, "experience_type": "procedural", "skill_eligible": False}
    unverified = await world.experience(procedural, episodes=[episode], traces=traces)
    report = await run_skills(world.ctx, episode, "success")
    assert report.skipped == {unverified: "no_success_anchor"}
    await world.touch_policy(unverified, verifier_meta_json={"verifier": {"passed": 5, "total": 5}})
    report = await run_skills(world.ctx, episode, "success")
    assert len(report.crystallized) == 1 and (await world.skills())[0].evidence_anchors_json == [unverified]
    # partial credit is not a verified success
    other, other_traces = await world.episode("Total the 13F holdings per manager", [PARSE], "Done.", session="se_2")
    partial = await world.experience(
        {
            **procedural,
            "title": "Quarterly revenue per region",
            "trigger": "When asked for the revenue of each sales region",
            "procedure": "1. Load sales.csv\n2. Sum revenue per region",
            "tags": ["sales"],
        },
        episodes=[other],
        traces=other_traces,
        verifier_meta={"passed": 4, "total": 5},
    )
    report = await run_skills(world.ctx, other, "partial")
    assert report.skipped.get(partial) == "no_success_anchor"


# --------------------------------------------------------------------------------------------------------
# Crystallisation (no LLM)
# --------------------------------------------------------------------------------------------------------


async def test_success_plus_avoidance_yields_a_skill_whose_avoid_section_holds_the_avoidance(world: World) -> None:
    seed = await thirteen_f(world)
    report = await run_skills(world.ctx, seed["passed"], "success")
    assert report.rejected == [] and report.llm_calls == 0
    (skill,) = await world.skills()
    assert report.crystallized == [skill.id]
    assert skill.status == "candidate" and skill.version == 1
    assert skill.eta == pytest.approx(initial_eta(0.8, 1, SkillSettings()))
    assert skill.evidence_anchors_json == [seed["success"]]
    assert set(skill.source_policies_json) == {seed["success"], seed["avoid"]}
    procedure = skill.procedure_json
    assert procedure["inducedBy"] == "rules" and procedure["primaryPolicyId"] == seed["success"]
    assert procedure["roles"]["avoid"] == [seed["avoid"]]
    avoid = procedure["decisionGuidance"]["antiPattern"]
    assert any("multiply" in line and "1000" in line for line in avoid)
    assert [s["title"] for s in procedure["steps"]] == [
        "Parse every infoTable record of the 13F filing",
        "Sum value per issuer",
        "Write answers.json with the requested fields",
    ]
    assert set(procedure["tools"]) <= {"bash", "python", "write_file"} and "bash" in procedure["tools"]
    assert set(procedure["evidenceTraceIds"]) <= set(seed["passed_traces"])
    assert procedure["counterExampleTraceIds"] == seed["failed_traces"][-1:]
    assert procedure["examples"] == [
        {
            "input": "Compute the total value per issuer of this quarter's 13F filing into answers.json",
            "expected": "Wrote answers.json: totals per issuer, values kept in thousands.",
        }
    ]
    assert procedure["verifier"]["passed"] is True and procedure["verifier"]["resonance"] == 1.0
    guide = skill.invocation_guide
    assert guide.startswith("# SEC 13F holdings: total value per issuer into answers.json\n\nSEC 13F holdings")
    assert "multiply" in _section(guide, "Avoid") and "1000" in _section(guide, "Avoid")
    assert "multiply" not in _section(guide, "Procedure")
    assert "every answers.json field passed" in _section(guide, "Check")
    assert skill.vec is not None and skill.name == "sec_13f_holdings"
    # the skill is in the vector index, and its members know about it
    hits = await world.ctx.vectors.search("skill", "vec", (await world.core.embedder.embed(["13F totals"]))[0], 5, None)
    assert skill.id in [i for i, _ in hits]
    assert (await world.policy(seed["avoid"])).meta_json["skill"] == {
        "skillId": skill.id,
        "role": "avoid",
        "primary": False,
        "ts": world.clock(),
    }
    assert (await world.policy(seed["success"])).meta_json["skill"]["primary"] is True
    (event,) = world.of_type(EventType.SKILL_CRYSTALLIZED)
    assert event.payload["skillId"] == skill.id and event.payload["inducedBy"] == "rules"


async def test_the_avoidance_episode_folds_into_the_existing_skill_and_a_rerun_changes_nothing(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    # the failed episode's chain now finds the avoidance's anchor and its skill: nothing new to build
    report = await run_skills(world.ctx, seed["failed"], "failure")
    assert report.crystallized == [] and report.rebuilt == [] and report.skipped == {}
    again = await run_skills(world.ctx, seed["passed"], "success")
    assert again.crystallized == again.rebuilt == again.reconciled == []
    assert [s.version for s in await world.skills()] == [skill.version]


async def test_check_and_prefer_sections_come_from_repairs_and_preferences_of_the_family(world: World) -> None:
    seed = await thirteen_f(world)
    repair = await world.experience(REPAIR_SCHEMA, episodes=[seed["failed"]])
    prefer = await world.experience(PREFER_TABS, episodes=[seed["failed"]])
    unrelated = await world.experience(
        {
            **AVOID_THOUSANDS,
            "title": "Avoid pip --user",
            "trigger": "When installing Python packages",
            "procedure": "Do not install with pip --user inside a virtualenv",
            "tags": ["python"],
            "anti": [],
        },
        episodes=["ep_elsewhere"],
    )
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    assert skill.procedure_json["roles"]["check"] == [repair]
    assert skill.procedure_json["roles"]["prefer"] == [prefer]
    assert unrelated not in skill.source_policies_json
    assert "answers.json fields the current 13F task asks for" in _section(skill.invocation_guide, "Check")
    assert "alphabetical" in _section(skill.invocation_guide, "Prefer")
    assert "pip" not in skill.invocation_guide


# --------------------------------------------------------------------------------------------------------
# Crystallisation with a scripted LLM, and the verifier gate
# --------------------------------------------------------------------------------------------------------


def _skill_reply(tools: list[str], steps: list[dict[str, str]] | None = None) -> str:
    return json.dumps(
        {
            "name": "sec13f_issuer_totals",
            "display_title": "13F issuer totals",
            "summary": "Totals the holding value per issuer of a SEC 13F filing into answers.json.",
            "parameters": [{"name": "filing", "description": "the 13F XML file"}],
            "preconditions": ["The filing XML is in the workspace"],
            "steps": steps
            or [
                {"title": "Parse the infoTable", "body": "Run parse_13f.py on the filing to read every infoTable row."},
                {"title": "Sum value per issuer", "body": "Group the rows by issuer and sum value."},
                {"title": "Write answers.json", "body": "Write the totals with the requested fields."},
            ],
            "examples": [{"input": "13F filing for Q2", "expected": "answers.json with 41 issuers"}],
            "tools": tools,
            "decision_guidance": {"preference": ["Keep values in thousands"], "anti_pattern": []},
            "tags": ["sec13f"],
        }
    )


def _llm(reply: str) -> ScriptedProvider:
    def answer(messages: list[Any]) -> str:
        assert "reusable skill" in messages[0].content
        return reply

    return ScriptedProvider(answer)


async def test_with_an_llm_its_draft_is_used_and_the_family_avoidance_is_kept(world: World) -> None:
    seed = await thirteen_f(world)
    provider = _llm(_skill_reply(["bash", "write_file"]))
    world.use_llm(provider)
    report = await run_skills(world.ctx, seed["passed"], "success")
    assert report.llm_calls == 1 and len(provider.calls) == 1 and report.rejected == []
    prompt = provider.calls[0][1].content
    assert "multiply" in prompt and "1000" in prompt and "TOOLS:\nbash" in prompt  # avoid lines, tool whitelist
    (skill,) = await world.skills()
    procedure = skill.procedure_json
    assert skill.name == "sec13f_issuer_totals" and procedure["inducedBy"] == "llm"
    assert procedure["tools"] == ["bash", "write_file"]
    avoid = procedure["decisionGuidance"]["antiPattern"]
    assert any("1000" in line for line in avoid)  # the model returned none; the family's is kept
    assert "Keep values in thousands" in procedure["decisionGuidance"]["preference"]
    assert "1000" in _section(skill.invocation_guide, "Avoid")
    assert _section(skill.invocation_guide, "Parameters").strip() == "- `filing`: the 13F XML file"
    assert skill.invocation_guide.split("\n\n")[1].startswith("Totals the holding value per issuer")


async def test_the_verifier_rejects_a_draft_naming_tools_never_seen_and_the_template_is_stored(world: World) -> None:
    seed = await thirteen_f(world)
    world.use_llm(_llm(_skill_reply(["curl", "psql"])))
    report = await run_skills(world.ctx, seed["passed"], "success")
    (rejected,) = report.rejected
    assert rejected["draft"] == "llm" and rejected["reasons"] == ["tool_coverage"]
    assert rejected["unseenTools"] == ["curl", "psql"] and rejected["coverage"] == 0.0
    (event,) = world.of_type(EventType.SKILL_REJECTED)
    assert event.payload["policyId"] == seed["success"]
    (skill,) = await world.skills()
    procedure = skill.procedure_json
    assert procedure["inducedBy"] == "rules" and not {"curl", "psql"} & set(procedure["tools"])
    assert procedure["verifier"]["llmDraft"]["reasons"] == ["tool_coverage"]
    assert "curl" not in skill.invocation_guide


async def test_invented_steps_fail_resonance(world: World) -> None:
    seed = await thirteen_f(world)
    invented = [
        {"title": "Provision a kubernetes cluster", "body": "Create three nodes in the cloud console."},
        {"title": "Rotate the database credentials", "body": "Update the vault secrets."},
        {"title": "Parse the infoTable rows", "body": ""},
    ]
    world.use_llm(_llm(_skill_reply(["bash"], invented)))
    report = await run_skills(world.ctx, seed["passed"], "success")
    assert report.rejected[0]["reasons"] == ["evidence_resonance"]
    assert report.rejected[0]["ungroundedSteps"] == [1, 2]
    (skill,) = await world.skills()
    assert "kubernetes" not in skill.invocation_guide


async def test_an_unavailable_or_malformed_llm_falls_back_to_the_template(world: World) -> None:
    seed = await thirteen_f(world)
    world.use_llm(ScriptedProvider("not json at all", "still not json"))
    report = await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    assert report.crystallized == [skill.id] and skill.procedure_json["inducedBy"] == "rules"
    assert skill.procedure_json["verifier"]["llmDraft"] == "unavailable:llm_output_malformed"


# --------------------------------------------------------------------------------------------------------
# Rebuilds
# --------------------------------------------------------------------------------------------------------


async def test_a_source_experience_changed_after_the_skill_rebuilds_it(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (before,) = await world.skills()
    world.clock.advance(60_000)
    new_line = "Do not round 13F values before summing them per issuer"
    await world.touch_policy(
        seed["avoid"],
        decision_guidance_json={"preference": [], "antiPattern": [*AVOID_THOUSANDS["anti"], new_line]},
    )
    report = await run_skills(world.ctx, seed["failed"], "failure")
    (after,) = await world.skills()
    assert report.rebuilt == [before.id] and after.id == before.id and after.version == before.version + 1
    assert after.name == before.name and after.updated_at == world.clock()
    assert new_line in _section(after.invocation_guide, "Avoid")
    assert (await world.policy(seed["avoid"])).updated_at <= after.updated_at  # retrieval drops it again
    (event,) = world.of_type(EventType.SKILL_REBUILT)
    assert event.payload["version"] == 2


async def test_a_changed_source_reached_through_another_episode_still_rebuilds(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    other, _ = await world.episode("What is the weather like?", [], "Sunny.", session="se_other")
    world.clock.advance(60_000)
    await world.touch_policy(
        seed["success"], procedure=SUCCESS["procedure"] + "\n4. Validate answers.json against the schema"
    )
    report = await run_skills(world.ctx, other, "unknown")
    (skill,) = await world.skills()
    assert report.rebuilt == [skill.id] and skill.version == 2
    assert "Validate answers.json against the schema" in _section(skill.invocation_guide, "Procedure")


async def test_a_newer_source_with_the_same_content_only_reconciles(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (before,) = await world.skills()
    world.clock.advance(60_000)
    await world.touch_policy(seed["success"], gain=0.9)  # what L2's gain update does: no new content
    report = await run_skills(world.ctx, seed["passed"], "success")
    (after,) = await world.skills()
    assert report.reconciled == [before.id] and report.rebuilt == []
    assert after.version == before.version and after.updated_at == world.clock()


async def test_a_new_family_member_joins_by_rebuild(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    world.clock.advance(60_000)
    third, traces = await world.episode("13F answers again", [PARSE, WRITE], "Wrong schema.", session="se_3")
    repair = await world.experience(REPAIR_SCHEMA, episodes=[third], traces=traces)
    report = await run_skills(world.ctx, third, "failure")
    (skill,) = await world.skills()
    assert report.rebuilt == [skill.id] and repair in skill.source_policies_json


async def test_an_archived_skill_is_not_rebuilt_or_duplicated(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    await skill_lifecycle.archive_skill(world.ctx, dto.SkillArchiveParams(id=skill.id))
    world.clock.advance(60_000)
    await world.touch_policy(seed["success"], procedure="1. Parse the filing\n2. Sum per issuer")
    report = await run_skills(world.ctx, seed["passed"], "success")
    assert report.skipped == {seed["success"]: "skill_archived"}
    assert [(s.id, s.version, s.status) for s in await world.skills()] == [(skill.id, 1, "archived")]


# --------------------------------------------------------------------------------------------------------
# Trials, η and status; archive and restore
# --------------------------------------------------------------------------------------------------------


async def _skill_with_eta(world: World, eta: float) -> tuple[SkillRow, dict[str, Any]]:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()

    def set_eta(db: Any) -> None:
        db.scalar(select(SkillRow).where(SkillRow.id == skill.id)).eta = eta

    await world.core.db.write(set_eta)
    return await world.skill(skill.id), seed


async def _get(world: World, skill_id: str, episode: str) -> dto.SkillDTO:
    got = await skill_lifecycle.get_skill(
        world.ctx, dto.SkillGetParams(id=skill_id, record_trial=True, episode_id=episode)
    )
    assert got is not None
    return got


async def test_a_passed_trial_raises_eta_and_activates_the_skill(world: World) -> None:
    skill, _ = await _skill_with_eta(world, 0.5)
    episode, _ = await world.episode("Total the 13F holdings of the new filing", [PARSE, WRITE], "Done.", "se_t")
    fetched = await _get(world, skill.id, episode)
    assert fetched.usage_count == 1 and fetched.last_used_at == world.clock()
    await _get(world, skill.id, episode)  # a second fetch in the same episode is the same trial
    report = await run_skills(world.ctx, episode, "success")
    after = await world.skill(skill.id)
    assert [status for _, status in report.trials] == ["pass"]
    assert (after.trials_attempted, after.trials_passed) == (1, 1)
    assert after.eta == pytest.approx(0.75) and after.status == "active"
    assert report.status_changes == [(skill.id, "candidate", "active")]
    resolved = world.of_type(EventType.SKILL_TRIAL_RESOLVED)
    assert resolved[0].payload["status"] == "pass" and resolved[0].payload["eta"] == 0.75
    # the chain's stage signature works the same
    from memos_bridge.core.learning.reward_stage import RewardReport

    again = await skill_stage(world.ctx, episode, RewardReport(episode, outcome="success"))
    assert isinstance(again, SkillReport) and again.trials == []


async def test_failed_trials_lower_eta_until_the_skill_is_archived(world: World) -> None:
    skill, _ = await _skill_with_eta(world, 0.15)
    episode, _ = await world.episode("Total the 13F holdings of filing B", [PARSE], "Gave up.", "se_f")
    await _get(world, skill.id, episode)
    await run_skills(world.ctx, episode, "partial")  # a partial pass is a failed trial
    after = await world.skill(skill.id)
    assert after.eta == pytest.approx(0.075) and after.status == "archived" and after.archived_at == world.clock()
    hits = await world.ctx.vectors.search("skill", "vec", (await world.core.embedder.embed(["13F totals"]))[0], 5, None)
    assert skill.id not in [i for i, _ in hits]
    changed = world.of_type(EventType.SKILL_STATUS_CHANGED)
    assert changed[-1].payload["to"] == "archived" and changed[-1].payload["reason"] == "trial:fail"


async def test_an_unknown_outcome_leaves_the_trial_pending_and_late_feedback_resolves_it(world: World) -> None:
    skill, _ = await _skill_with_eta(world, 0.5)
    episode, _ = await world.episode("Total the 13F holdings of filing C", [PARSE], "Done.", "se_u")
    await _get(world, skill.id, episode)
    report = await run_skills(world.ctx, episode, "unknown")
    assert report.trials == [] and (await world.skill(skill.id)).eta == 0.5
    await run_skills(world.ctx, episode, "failure")
    assert (await world.skill(skill.id)).eta == pytest.approx(0.25)
    # late feedback flips the verdict: the trial is replaced, not counted twice
    report = await run_skills(world.ctx, episode, "success")
    after = await world.skill(skill.id)
    assert [s for _, s in report.trials] == ["pass"]
    assert (after.trials_attempted, after.trials_passed) == (1, 1) and after.eta == pytest.approx(0.75)


async def test_a_skill_recalled_by_turn_start_is_a_trial_of_that_episode(world: World) -> None:
    skill, _ = await _skill_with_eta(world, 0.5)
    started = await world.core.turn_start(
        dto.TurnInputDTO.model_validate(
            {
                "agent": AGENT,
                "sessionId": "se_r",
                "userText": "Total the SEC 13F holdings value per issuer",
                "ts": world.tick(),
            }
        )
    )
    episode = started.query.episode_id
    assert episode is not None
    assert skill.id in [h.ref_id for h in started.hits if h.ref_kind == "skill"]
    await world.core.flush()  # the turn's stored result is written behind

    def stored(db: Any) -> Any:
        return db.scalar(select(TurnRow.result_json).where(TurnRow.episode_id == episode))

    assert await world.core.db.read(stored) is not None
    report = await run_skills(world.ctx, episode, "success")
    trials = await world.core.db.read(lambda db: list(db.scalars(select(SkillTrialRow))))
    assert [(t.skill_id, t.episode_id, t.status, t.evidence_json["source"]) for t in trials] == [
        (skill.id, episode, "pass", "recall")
    ]
    assert report.trials == [(trials[0].id, "pass")]


async def test_get_with_record_trial_needs_an_episode(world: World) -> None:
    skill, _ = await _skill_with_eta(world, 0.5)
    with pytest.raises(MemosError) as missing:
        await skill_lifecycle.get_skill(world.ctx, dto.SkillGetParams(id=skill.id, record_trial=True))
    assert missing.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(MemosError) as unknown:
        await skill_lifecycle.get_skill(
            world.ctx, dto.SkillGetParams(id=skill.id, record_trial=True, episode_id="ep_nope")
        )
    assert unknown.value.code is ErrorCode.EPISODE_NOT_FOUND
    # by session: the session's open episode
    started = await world.core.turn_start(
        dto.TurnInputDTO.model_validate(
            {"agent": AGENT, "sessionId": "se_s", "userText": "13F again", "ts": world.tick()}
        )
    )
    # the reference's trial context (traceId, turnId, toolCallId) is kept on the trial
    reference = {"id": skill.id, "recordTrial": True, "sessionId": "se_s", "traceId": "tr_x", "turnId": 42}
    params = dto.SkillGetParams.model_validate({**reference, "toolCallId": "call_7"})
    await skill_lifecycle.get_skill(world.ctx, params)
    trials = await world.core.db.read(lambda db: list(db.scalars(select(SkillTrialRow))))
    assert [t.episode_id for t in trials] == [started.query.episode_id]
    assert (trials[0].trace_id, trials[0].turn_id, trials[0].tool_call_id) == ("tr_x", 42, "call_7")
    assert await skill_lifecycle.get_skill(world.ctx, dto.SkillGetParams(id="sk_missing")) is None
    other = dto.RuntimeNamespace(agent_kind="someone-else")
    assert await skill_lifecycle.get_skill(world.ctx, dto.SkillGetParams(id=skill.id, namespace=other)) is None


async def test_archive_and_restore(world: World) -> None:
    skill, _ = await _skill_with_eta(world, 0.05)
    ctx = world.ctx
    await skill_lifecycle.archive_skill(ctx, dto.SkillArchiveParams(id=skill.id, reason="superseded by v2"))
    await skill_lifecycle.archive_skill(ctx, dto.SkillArchiveParams(id=skill.id))  # idempotent
    archived = await world.skill(skill.id)
    assert archived.status == "archived" and archived.archived_at == world.clock()
    assert archived.updated_at == skill.updated_at
    listed = await skill_lifecycle.list_skills(ctx, dto.SkillListParams(status="archived"))
    assert [s.id for s in listed.skills] == [skill.id] and listed.skills[0].archived_at == world.clock()
    assert (await skill_lifecycle.list_skills(ctx, dto.SkillListParams(status="active"))).skills == []
    await skill_lifecycle.restore_skill(ctx, dto.SkillIdParams(id=skill.id))
    restored = await world.skill(skill.id)
    assert restored.status == "candidate" and restored.archived_at is None
    assert restored.eta == pytest.approx(SkillSettings().min_eta_for_retrieval + SkillSettings().eta_delta)
    hits = await ctx.vectors.search("skill", "vec", (await world.core.embedder.embed(["13F totals"]))[0], 5, None)
    assert skill.id in [i for i, _ in hits]
    statuses = [(e.payload["from"], e.payload["to"]) for e in world.of_type(EventType.SKILL_STATUS_CHANGED)]
    assert statuses == [("candidate", "archived"), ("archived", "candidate")]
    assert world.of_type(EventType.SKILL_STATUS_CHANGED)[0].payload["note"] == "superseded by v2"
    with pytest.raises(MemosError) as missing:
        await skill_lifecycle.archive_skill(ctx, dto.SkillArchiveParams(id="sk_missing"))
    assert missing.value.code is ErrorCode.SKILL_NOT_FOUND


# --------------------------------------------------------------------------------------------------------
# Through the learning chain (feedback.submit runs it before replying)
# --------------------------------------------------------------------------------------------------------


async def test_a_verifier_verdict_on_an_episode_resolves_the_trial_of_the_skill_it_fetched(world: World) -> None:
    core = world.core
    skill, _ = await _skill_with_eta(world, 0.5)
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate(
            {"agent": AGENT, "sessionId": "se_v", "userText": "Compute 13F totals per issuer", "ts": world.tick()}
        )
    )
    episode = started.query.episode_id
    assert episode is not None
    await core.get_skill(dto.SkillGetParams(id=skill.id, record_trial=True, session_id="se_v"))
    await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": AGENT,
                "sessionId": "se_v",
                "episodeId": episode,
                "agentText": "Wrote answers.json.",
                "toolCalls": [PARSE, SUM, WRITE],
                "ts": world.tick(),
            }
        )
    )
    await core.submit_feedback(
        dto.FeedbackSubmitParams.model_validate(
            {
                "episodeId": episode,
                "channel": "explicit",
                "polarity": "negative",
                "magnitude": 1.0,
                "rationale": "2 of 5 fields wrong",
                "raw": {"verifier": {"passed": 3, "total": 5}},
            }
        )
    )
    after = await world.skill(skill.id)
    assert (after.trials_attempted, after.trials_passed) == (1, 0) and after.eta == pytest.approx(0.25)
    chain = core.learning.last_reports[episode].stages["skills"]
    assert isinstance(chain, SkillReport) and [s for _, s in chain.trials] == ["fail"]


async def test_two_anchors_of_one_family_make_one_skill_led_by_the_stronger(world: World) -> None:
    seed = await thirteen_f(world)
    weaker = await world.experience(
        {
            **SUCCESS,
            "experience_type": "repair_validated",
            "evidence_polarity": "mixed",
            "title": "Repair (sec13f): keep infoTable values in thousands",
            "procedure": "Keep the 13F infoTable values in thousands when summing per issuer",
        },
        episodes=[seed["passed"]],
        gain=0.3,
    )
    report = await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    assert report.crystallized == [skill.id] and report.rebuilt == []
    assert skill.evidence_anchors_json == [seed["success"], weaker]
    assert skill.procedure_json["primaryPolicyId"] == seed["success"]
    steps = [s["title"] for s in skill.procedure_json["steps"]]
    assert steps[0] == "Parse every infoTable record of the 13F filing" and "thousands" in steps[-1]
    assert skill.support == 2 and skill.status == "active"  # two anchors' support promote it at once


async def test_a_second_chain_crystallising_the_same_anchor_rebuilds_instead_of_duplicating(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    dim = world.ctx.vectors.dim
    views = await world.core.db.read(lambda db: skill_store.load_experiences(db, [seed["success"], seed["avoid"]], dim))
    family = build_family(views[0], views[1:], SkillSettings())
    draft = template_draft(family, [], set())
    draft.name = "a_different_name"
    persisted = await world.core.db.write(
        lambda db: skill_store.persist_skill(
            db,
            skill_id=None,  # planned as new by a chain that had not seen the skill yet
            family=family,
            draft=draft,
            guide="# guide\n",
            procedure={},
            vec=None,
            settings=SkillSettings(),
            now=world.clock(),
        )
    )
    assert not persisted.created and persisted.row.id == skill.id
    assert (persisted.row.version, persisted.row.name) == (2, skill.name)
    assert len(await world.skills()) == 1
