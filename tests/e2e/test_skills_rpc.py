"""Skills through the JSON-RPC boundary: skill.list / get / archive / restore, and what turn.start injects when a
skill and the experiences it was built from are recalled together (provenance de-duplication).

The service records two SEC 13F tasks; the typed experiences the experience builder would derive from their
verifier feedback are then stored, and the skill stage crystallises the skill, in-process on the same data
home (the lead wires the stage into the chain); a second service run recalls them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select

from memos_bridge.client import RpcError, ServiceClient
from memos_bridge.config import load_settings
from memos_bridge.core.events import EventBus
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.skills import run_skills
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.embedding.base import Embedder
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.host import NoLLM
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import PolicyRow, SkillRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.vectors import to_blob

AGENT = "tester"
# Room for the two experiences next to the past tasks' steps in tier 2 (the default is 5).
#: These tests read the full block (sections, ids, type labels); turns default to the compact one.
ENV = {
    "MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0",
    "MEMOS_BRIDGE_RETRIEVAL__TIER2_TOP_K": "8",
    "MEMOS_BRIDGE_RETRIEVAL__RENDER_MODE": "full",
}
PARSE = {"name": "bash", "input": {"cmd": "python parse_13f.py filing.xml"}, "output": "parsed 312 infoTable rows"}
SUM = {"name": "python", "input": {"code": "df.groupby('issuer').value.sum()"}, "output": "41 issuers"}
WRITE = {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"}
AVOID_LINE = "Do not multiply 13F infoTable values by 1000: they are already in thousands"
NEW_AVOID_LINE = "Do not round 13F values before summing them per issuer"
QUERY = "New SEC 13F task: aggregate the infoTable values per issuer into answers.json"


def _task(client: ServiceClient, session: str, text: str, tools: list[dict[str, Any]], reply: str, ts: int) -> str:
    started = client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts}, timeout=60)
    episode: str = started["query"]["episodeId"]
    client.call(
        "turn.end",
        {
            "agent": AGENT,
            "sessionId": session,
            "episodeId": episode,
            "agentText": reply,
            "toolCalls": tools,
            "ts": ts + 1,
        },
        timeout=60,
    )
    client.call("episode.close", {"episodeId": episode})
    return episode


async def _seed(home: Path, embedder: Embedder, failed: str, passed: str) -> dict[str, str]:
    """The experiences of both tasks, the skill crystallised from them, then a correction of the avoidance that
    the skill has not absorbed yet (its guidance is newer than the skill)."""
    settings = load_settings(home, env={})
    db = Database(settings.database_url)
    db.open()
    try:
        ctx = LearningContext(db, VectorStore(db, embedder.dim), embedder, LLMFacade([NoLLM()]), EventBus(), settings)
        owner = OwnerFilter(AGENT, "default", None)
        specs = {
            "avoid": (
                "failure_avoidance",
                "negative",
                "Avoid: multiplying 13F values by 1000",
                "When aggregating SEC 13F infoTable values into per-issuer totals",
                "Values in the 13F infoTable are already in thousands; keep them as they are",
                [AVOID_LINE],
                failed,
            ),
            "success": (
                "success_pattern",
                "positive",
                "SEC 13F holdings: total value per issuer into answers.json",
                "When a SEC 13F task asks for the total holding value per issuer",
                "1. Parse every infoTable record of the 13F filing\n2. Sum value per issuer\n"
                "3. Write answers.json with the requested fields",
                [],
                passed,
            ),
        }
        ids: dict[str, str] = {}
        for key, (kind, polarity, title, trigger, procedure, anti, episode) in specs.items():
            vec = (await embedder.embed([f"{title}\n{trigger}\n{procedure}"]))[0]
            row = PolicyRow(
                id=f"po_e2e_{key}",
                title=title,
                trigger=trigger,
                procedure=procedure,
                verification="The verifier reports every answers.json field passed" if key == "success" else "",
                status="active",
                support=1,
                gain=0.8,
                experience_type=kind,
                evidence_polarity=polarity,
                salience=0.9,
                confidence=0.9,
                skill_eligible=kind == "success_pattern",
                tags_json=["sec13f"],
                source_episodes_json=[episode],
                decision_guidance_json={"preference": [], "antiPattern": anti},
                vec=to_blob(vec),
                created_at=ctx.clock(),
                updated_at=ctx.clock(),
                **owner.as_columns(),
            )
            await db.write(lambda s, row=row: s.add(row))
            ids[key] = row.id
        report = await run_skills(ctx, passed, "success")
        assert len(report.crystallized) == 1, report
        ids["skill"] = report.crystallized[0]

        def correct(s: Any) -> None:
            skill = s.scalar(select(SkillRow).where(SkillRow.id == ids["skill"]))
            avoid = s.scalar(select(PolicyRow).where(PolicyRow.id == ids["avoid"]))
            avoid.decision_guidance_json = {"preference": [], "antiPattern": [AVOID_LINE, NEW_AVOID_LINE]}
            avoid.updated_at = skill.updated_at + 5_000

        await db.write(correct)
        return ids
    finally:
        db.close()


def _entry(block: str, ref_id: str) -> str:
    """The numbered entry of the injected block that names `ref_id` ('' when none does)."""
    for entry in re.split(r"\n(?=\d+\. )", block):
        if f"id={ref_id})" in entry.splitlines()[0]:
            return entry
    return ""


def _recall(client: ServiceClient, session: str, ts: int) -> dict[str, Any]:
    result: dict[str, Any] = client.call(
        "turn.start", {"agent": AGENT, "sessionId": session, "userText": QUERY, "ts": ts}, timeout=60
    )
    return result


def _hit_ids(result: dict[str, Any], kind: str) -> list[str]:
    return [h["refId"] for h in result["hits"] if h["refKind"] == kind]


def test_skills_over_json_rpc_with_provenance_deduplication(home: Path, real_embedder: Embedder) -> None:
    with ServiceClient.spawn(home, env=ENV) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        failed = _task(
            client,
            session,
            "Compute the total value of the 13F holdings per issuer and write answers.json",
            [PARSE, WRITE],
            "Wrote answers.json with every value multiplied by 1000.",
            1_000,
        )
        passed = _task(
            client,
            session,
            "Compute the total value per issuer of this quarter's 13F filing into answers.json",
            [PARSE, SUM, WRITE],
            "Wrote answers.json: totals per issuer, values kept in thousands.",
            10_000,
        )
        client.call("memory.flush", {}, timeout=60)
    ids = anyio.run(_seed, home, real_embedder, failed, passed)
    skill_id = ids["skill"]

    with ServiceClient.spawn(home, env=ENV) as client:
        # skill.list / skill.get
        listed = client.call("skill.list", {})["skills"]
        assert [s["id"] for s in listed] == [skill_id]
        assert client.call("skill.list", {"status": "archived"})["skills"] == []
        skill = client.call("skill.get", {"id": skill_id})
        assert skill["status"] == "candidate" and skill["evidenceAnchors"] == [ids["success"]]
        assert sorted(skill["sourcePolicyIds"]) == sorted([ids["success"], ids["avoid"]])
        assert AVOID_LINE in skill["decisionGuidance"]["antiPattern"]
        assert "## Avoid\n- " + AVOID_LINE in skill["invocationGuide"]
        assert skill["procedure"]["steps"][0]["title"] == "Parse every infoTable record of the 13F filing"
        assert skill["summary"].startswith("SEC 13F holdings")
        assert client.call("skill.get", {"id": "sk_missing"}) is None

        # A skill recalled together with the experiences it was built from: the unchanged source (the success
        # pattern) is dropped from the block, the corrected one (the avoidance, newer than the skill) is shown
        # as an update carrying only its guidance.
        result = _recall(client, "se_recall", 100_000)
        assert skill_id in _hit_ids(result, "skill")
        experiences = _hit_ids(result, "experience")
        assert ids["success"] in experiences and ids["avoid"] in experiences
        block = result["injectedContext"]
        assert f"id={skill_id})" in block and "## Candidate skills" in block
        assert _entry(block, ids["success"]) == ""
        update = _entry(block, ids["avoid"])
        assert "[update to a recalled skill]" in update.splitlines()[0]
        assert NEW_AVOID_LINE in update
        assert "Trigger:" not in update and "keep them as they are" not in update  # no full experience body
        assert f"Avoid: {AVOID_LINE}" in block  # the skill's own Avoid guidance

        # recordTrial: needs an episode; by session it is the session's open episode
        with pytest.raises(RpcError) as bad:
            client.call("skill.get", {"id": skill_id, "recordTrial": True})
        assert bad.value.code == -32602 and bad.value.memos_code == "invalid_argument"
        used = client.call("skill.get", {"id": skill_id, "recordTrial": True, "sessionId": "se_recall"})
        assert used["usageCount"] == 1 and used["lastUsedAt"] is not None

        # archive: out of recall, so the experiences come back in full
        assert client.call("skill.archive", {"id": skill_id}) == {"ok": True}
        assert client.call("skill.archive", {"id": skill_id}) == {"ok": True}
        assert [s["id"] for s in client.call("skill.list", {"status": "archived"})["skills"]] == [skill_id]
        archived = _recall(client, "se_archived", 200_000)
        assert skill_id not in _hit_ids(archived, "skill")
        assert "Trigger:" in _entry(archived["injectedContext"], ids["success"])

        # restore: recalled again
        assert client.call("skill.restore", {"id": skill_id}) == {"ok": True}
        restored = client.call("skill.get", {"id": skill_id})
        assert restored["status"] == "candidate" and restored.get("archivedAt") is None
        again = _recall(client, "se_restored", 300_000)
        assert skill_id in _hit_ids(again, "skill")
        assert _entry(again["injectedContext"], ids["success"]) == ""

        with pytest.raises(RpcError) as missing:
            client.call("skill.archive", {"id": "sk_missing"})
        assert missing.value.memos_code == "skill_not_found"
        with pytest.raises(RpcError) as unknown:
            client.call("skill.list", {"status": "retired"})
        assert unknown.value.code == -32602


NO_LLM_ENV = {**ENV, "MEMOS_BRIDGE_LLM__PROVIDER": "none"}
THOUSANDS = {
    "task": "sec13f_issuer_values",
    "passed": 2,
    "total": 5,
    "expected": {"total_value": 1234},
    "actual": {"total_value": 1234000},
}


def _verdict(client: ServiceClient, episode: str, polarity: str, rationale: str, verifier: dict[str, Any]) -> None:
    params = {"episodeId": episode, "polarity": polarity, "magnitude": 1.0, "rationale": rationale}
    client.call("feedback.submit", {**params, "raw": {"verifier": verifier}}, timeout=90)


def _updates(block: str) -> list[str]:
    return [e for e in re.split(r"\n(?=\d+\. )", block) if "[update to a recalled skill]" in e.splitlines()[0]]


def test_skills_from_feedback_submit_end_to_end(home: Path) -> None:
    """No hand-seeded rows: a failed task and its verdict, a passed task and its verdict (feedback.submit runs
    the chain: experiences, the skill), then a recall. The skill's sources are de-duplicated; guidance that
    reaches them after the skill (a decision repair) is shown as an update with only the new lines; the next
    chain absorbs it into the skill and the update disappears."""
    with ServiceClient.spawn(home, env=NO_LLM_ENV) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        failed = _task(
            client,
            session,
            "Compute the total value of the 13F holdings per issuer and write answers.json",
            [PARSE, WRITE],
            "Wrote answers.json with every value multiplied by 1000.",
            1_000,
        )
        _verdict(client, failed, "negative", AVOID_LINE, THOUSANDS)
        assert client.call("skill.list", {})["skills"] == []  # a lesson to avoid is no skill on its own
        passed = _task(
            client,
            session,
            "Compute the total value per issuer of this quarter's 13F filing into answers.json",
            [PARSE, SUM, WRITE],
            "Wrote answers.json: totals per issuer, values kept in thousands.",
            10_000,
        )
        _verdict(
            client, passed, "positive", "All fields correct.", {"task": "sec13f_issuer_values", "passed": 5, "total": 5}
        )
        (skill,) = client.call("skill.list", {})["skills"]
        sources = set(skill["sourcePolicyIds"])
        lessons = {p["id"]: p for p in client.call("memory.list_policies", {})["policies"] if p["id"] in sources}
        assert any(p["experienceType"] in ("success_pattern", "repair_validated") for p in lessons.values())
        assert all(p["skillNote"]["skillId"] == skill["id"] for p in lessons.values())
        assert any("thousands" in line for line in skill["decisionGuidance"]["antiPattern"])

        # recall: the skill, and its sources only through it (provenance de-duplication)
        result = _recall(client, "se_recall", 100_000)
        assert skill["id"] in _hit_ids(result, "skill")
        recalled = set(_hit_ids(result, "experience")) & sources
        assert recalled  # the sources were found …
        assert all(_entry(result["injectedContext"], i) == "" for i in recalled)  # … and not shown again
        assert _updates(result["injectedContext"]) == []

        # a decision repair in the next task reaches the skill's sources after the skill was built
        third = client.call(
            "turn.start",
            {
                "agent": AGENT,
                "sessionId": session,
                "userText": "new task: total the 13F values of filing_z.xml",
                "ts": 200_000,
            },
            timeout=60,
        )["query"]["episodeId"]
        outcome = {
            "sessionId": session,
            "episodeId": third,
            "tool": "bash",
            "success": False,
            "error": "KeyError: 'value'",
        }
        repair = [client.call("tool.outcome", {**outcome, "ts": 200_001 + i}) for i in range(3)][-1]["repair"]
        new_line = repair["antiPattern"].removeprefix("Avoid: ")
        updated = _recall(client, "se_recall_2", 300_000)
        block = updated["injectedContext"]
        updates = _updates(block)
        assert updates and all(f"Avoid: {new_line[:60]}" in entry for entry in updates)
        for entry in updates:  # only what is new: no trigger, no procedure, none of the lines the skill carries
            body = entry.split("\n\n", 1)[0].splitlines()[1:]  # the entry's lines, not the next section
            assert body and all(line.strip().startswith(("Avoid:", "Prefer:", "Check:")) for line in body), entry
            assert AVOID_LINE not in entry
        assert "Avoid: Avoid:" not in block and "Prefer: Prefer:" not in block

        # the next chain that runs the skill stage absorbs the guidance into the skill: no update any more
        failing = {"name": "bash", "input": {"cmd": "python parse_13f.py filing_z.xml"}, "errorCode": "KeyError"}
        end = {"agent": AGENT, "sessionId": session, "episodeId": third, "ts": 200_010}
        client.call("turn.end", {**end, "toolCalls": [failing] * 3, "agentText": "The parser keeps failing."})
        client.call("episode.close", {"episodeId": third})
        client.call("memory.flush", {}, timeout=90)
        absorbed = _recall(client, "se_recall_3", 400_000)
        assert skill["id"] in _hit_ids(absorbed, "skill") and _updates(absorbed["injectedContext"]) == []
        rebuilt = client.call("skill.get", {"id": skill["id"]})
        assert any(new_line[:40] in line for line in rebuilt["decisionGuidance"]["antiPattern"])

        # the reference adapter's extra fields are accepted (they used to be -32602 unknown fields)
        fetch = {"id": skill["id"], "recordTrial": True, "sessionId": "se_recall_3", "traceId": "tr_1"}
        used = client.call("skill.get", {**fetch, "turnId": 400_000, "toolCallId": "call_1"})
        assert used["usageCount"] == rebuilt["usageCount"] + 1
        assert client.call("skill.archive", {"id": skill["id"], "reason": "replaced by a newer skill"}) == {"ok": True}
        assert client.call("skill.get", {"id": skill["id"]})["status"] == "archived"
