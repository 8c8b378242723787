"""Typed experiences through the JSON-RPC boundary (the seed 000 test plan), with the real service spawned.

`feedback.submit` runs the whole learning chain before it replies, so every assertion right after it sees
the experience; `memory.get_policy` / `memory.list_policies` show the typed fields; the next `turn.start`
of a similar task recalls the lesson (the SkillFlow two-task sequence), with no LLM and with a host LLM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import ServiceClient

AGENT = "skillflow"
#: These tests read the full block (sections, ids, type labels); turns default to the compact one.
FULL = {"MEMOS_BRIDGE_RETRIEVAL__RENDER_MODE": "full"}
NO_LLM = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LLM__PROVIDER": "none", **FULL}
HOST_LLM = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", **FULL}
TASK_1 = "SEC 13F task 1: parse the infoTable rows of filing_a.xml and write the value per issuer to answers.json"
TASK_2 = "SEC 13F task 2: parse the infoTable rows of filing_b.xml and write the value per issuer to answers.json"
TOOLS = [
    {"name": "bash", "input": {"cmd": "python parse_13f.py filing.xml"}, "output": "parsed 312 infoTable rows"},
    {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"},
]
AVOID_SCHEMA = "Do not reuse the previous task's answers.json schema."
THOUSANDS = {
    "task": "sec13f_issuer_values",
    "passed": 2,
    "total": 5,
    "expected": {"total_value": 1234},
    "actual": {"total_value": 1234000},
}


def run_task(
    client: ServiceClient, task: str, ts: int, *, tools: Any = None, reply: str = "Wrote answers.json."
) -> tuple[str, dict[str, Any]]:
    """One SkillFlow trial: its own session, one turn; returns (episodeId, the turn.start result)."""
    session = client.call("session.open", {"agent": AGENT})["sessionId"]
    started: dict[str, Any] = client.call(
        "turn.start", {"agent": AGENT, "sessionId": session, "userText": task, "ts": ts}, timeout=60
    )
    episode: str = started["query"]["episodeId"]
    end = {
        "agent": AGENT,
        "sessionId": session,
        "episodeId": episode,
        "toolCalls": TOOLS if tools is None else tools,
        "agentText": reply,
        "ts": ts + 5_000,
    }
    client.call("turn.end", end, timeout=60)
    return episode, started


def feedback(client: ServiceClient, episode: str, polarity: str, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = client.call(
        "feedback.submit", {"episodeId": episode, "polarity": polarity, "magnitude": 1.0, **extra}, timeout=90
    )
    return result


def experiences(client: ServiceClient, **filters: Any) -> list[dict[str, Any]]:
    listed = client.call("memory.list_policies", {"limit": 100, **filters})["policies"]
    return [p for p in listed if p["inducedBy"] == "feedback.experience"]


#: What the scripted host model titles each experience type (the rest of its answer is the rule draft).
LLM_TITLES = {
    "failure_avoidance": "Keep each 13F task's own answers.json schema",
    "repair_instruction": "Report 13F values in thousands",
    "success_pattern": "Count 13F holdings per security class",
}
_DRAFT_FIELD = re.compile(r"^(title|trigger|procedure|verification|boundary|avoid|prefer):\s?(.*)$")


def _rule_draft(user: str) -> dict[str, str]:
    """The RULE DRAFT section of a feedback.refine prompt, field by field."""
    fields: dict[str, str] = {}
    current = ""
    for line in user.split("RULE DRAFT:\n", 1)[1].splitlines():
        match = _DRAFT_FIELD.match(line)
        if match:
            current = match.group(1)
            fields[current] = match.group(2)
        elif current:
            fields[current] = f"{fields[current]}\n{line}".strip()
    return fields


def _seed_plan_host_llm(asked: list[str]) -> Any:
    """A host model for the whole seed plan: it rewrites each experience draft under its own title (keeping
    the draft's concrete lines, as the prompt asks), scores reward and reflections, titles the episode;
    every other prompt gets an unusable answer, so that stage takes its deterministic path."""

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        system, user = params["messages"][0]["content"], params["messages"][-1]["content"]
        reply: dict[str, Any] = {}
        if "Turn that feedback into ONE experience" in system:
            asked.append("feedback.refine")
            kind = user.split("EXPERIENCE TYPE:\n", 1)[1].split("\n", 1)[0].strip()
            draft = _rule_draft(user)
            reply = {
                "title": LLM_TITLES[kind],
                "trigger": draft.get("trigger", ""),
                "procedure": draft.get("procedure", ""),
                "verification": draft.get("verification", ""),
                "boundary": draft.get("boundary", ""),
                "avoid": [AVOID_SCHEMA] if kind == "failure_avoidance" else [],
                "prefer": [],
                "confidence": 0.8,
            }
        elif "goal_achievement" in system:
            asked.append("reward.r_human")
            reply = {"goal_achievement": -0.5, "process_quality": 0, "user_satisfaction": -0.5, "label": "failure"}
        elif '"scores"' in system:
            reply = {"scores": [{"idx": 1, "alpha": 0.5, "usable": True}]}
        elif "Summarise one finished task" in system:
            reply = {"title": "13F filing task", "summary": "Parsed the filing.", "outcome": "unknown"}
        return {"text": json.dumps(reply)}

    return answer


@pytest.mark.parametrize("llm", ["none", "host"])
def test_the_seed_test_plan_through_json_rpc(home: Path, llm: str) -> None:
    asked: list[str] = []
    with ServiceClient.spawn(home, env=NO_LLM if llm == "none" else HOST_LLM) as client:
        if llm == "host":
            client.on_request("host.llm.complete", _seed_plan_host_llm(asked))
        # failed verifier feedback → failure_avoidance (recallable, never skill evidence)
        first, _ = run_task(client, TASK_1, 1_000)
        failing = {"task": "sec13f_issuer_values", "passed": 0, "total": 4, "failingFields": ["top_class_labels"]}
        stored = feedback(client, first, "negative", rationale=AVOID_SCHEMA, raw={"verifier": failing})
        [avoid] = experiences(client, experienceType="failure_avoidance")
        assert avoid["evidencePolarity"] == "negative" and avoid["skillEligible"] is False
        assert avoid["status"] == "active" and avoid["salience"] >= 0.9
        assert avoid["sourceFeedbackIds"] == [stored["id"]] and avoid["sourceEpisodeIds"] == [first]
        assert avoid["verifierMeta"]["failingFields"] == ["top_class_labels"] and "xml" in avoid["tags"]
        assert avoid["lesson"]["lines"] == [AVOID_SCHEMA] and "top_class_labels" not in avoid["procedure"]
        assert client.call("memory.get_policy", {"id": avoid["id"]}) == avoid
        # avoidance alone → no skill, and the reason is visible over RPC
        assert client.call("skill.list", {})["skills"] == []
        assert avoid["skillNote"]["skipped"] == "no_success_anchor" and "skillId" not in avoid["skillNote"]
        assert client.call("memory.get_policy", {"id": "po_missing"}) is None

        # expected/actual mismatch → repair_instruction: the feedback's words, the factor observed, no values
        second, _ = run_task(client, "Write the 13F value per issuer for filing_c.xml to answers.json", 20_000)
        feedback(client, second, "negative", rationale="values must be in thousands", raw={"verifier": THOUSANDS})
        [repair] = experiences(client, experienceType="repair_instruction")
        assert repair["lesson"]["lines"] == ["values must be in thousands"]
        assert repair["verification"] == "The answer was 1,000× the expected value." or llm == "host"
        assert "1234" not in repair["procedure"] + repair["title"]
        assert repair["skillEligible"] is False and repair["verifierMeta"]["mismatches"][0]["kind"] == "scale"

        # passed verifier → success_pattern (a skill anchor)
        third, _ = run_task(client, "Count the holdings per security class in filing_d.xml into answers.json", 40_000)
        text = "This is correct; the 13F parser handled all holdings and matched verifier output."
        feedback(client, third, "positive", rationale=text, raw={"verifier": {"passed": 5, "total": 5}})
        [success] = experiences(client, experienceType="success_pattern")
        assert success["evidencePolarity"] == "positive" and success["skillEligible"] is True

        # a plain negative trace, bare "wrong" / "不对", a repeated evidenceId: nothing new
        before = len(experiences(client))
        broken = [{"name": "bash", "input": {"cmd": "python parse_13f.py"}, "errorCode": "KeyError: 'value'"}]
        fourth, _ = run_task(client, "Parse filing_e.xml into answers.json", 60_000, tools=broken, reply="Failed.")
        client.call("episode.close", {"episodeId": fourth})
        client.call("memory.flush", {}, timeout=90)
        feedback(client, fourth, "negative", rationale="wrong")
        feedback(client, fourth, "negative", rationale="不对")
        assert len(experiences(client)) == before
        again = {"rationale": AVOID_SCHEMA, "raw": {"verifier": failing}, "evidenceId": "skillflow-1-verifier"}
        feedback(client, first, "negative", **again)  # new evidence: merged into the same lesson
        feedback(client, first, "negative", **again)  # the same evidenceId again: counted once
        merged = client.call("memory.get_policy", {"id": avoid["id"]})
        assert merged["support"] == 2 and len(merged["sourceFeedbackIds"]) == 2
        assert len(experiences(client)) == before

        # high-salience negative → recalled for a similar task, under Avoid
        _, started = run_task(client, TASK_2, 80_000)
        assert avoid["id"] in {h["refId"] for h in started["hits"] if h["refKind"] == "experience"}
        assert f"Avoid: {AVOID_SCHEMA}" in started["injectedContext"]

        # who wrote the lessons: the host model's titles over the rule drafts' concrete lines, or the rules
        for lesson in (avoid, repair, success):
            llm_title = LLM_TITLES[lesson["experienceType"]]
            assert lesson["title"].endswith(llm_title) is (llm == "host"), lesson["title"]
        if llm == "host":
            assert asked.count("feedback.refine") >= 3 and "reward.r_human" in asked
            ops = client.call("core.health")["llmUsage"]["ops"]
            assert ops["feedback.refine"]["calls"] >= 3 and ops["feedback.refine"]["failures"] == 0


def _host_llm(params: dict[str, Any]) -> dict[str, Any]:
    system = params["messages"][0]["content"]
    if "Turn that feedback into ONE experience" in system:
        answer: dict[str, Any] = {
            "title": "Report 13F values in thousands",
            "trigger": "SEC 13F tasks that write issuer values to answers.json",
            "procedure": "1. Divide every raw value by 1000 so answers.json reports thousands.\n"
            "2. Re-run the verifier check on total_value.",
            "verification": "total_value equals the verifier's expected value (1234, not 1234000)",
            "avoid": ["Writing raw dollar values (1234000) into answers.json"],
            "prefer": [],
            "confidence": 0.85,
        }
    elif "goal_achievement" in system:
        answer = {"goal_achievement": -1, "process_quality": 0, "user_satisfaction": -1, "label": "failure"}
    elif '"scores"' in system:
        answer = {"scores": [{"idx": 1, "alpha": 0.5, "usable": True}]}
    else:
        answer = {"relation": "new_task", "confidence": 0.9}
    return {"text": json.dumps(answer)}


@pytest.mark.parametrize("llm", ["none", "host"])
def test_skillflow_two_tasks_the_second_recalls_the_first_lesson(home: Path, llm: str) -> None:
    with ServiceClient.spawn(home, env=NO_LLM if llm == "none" else HOST_LLM) as client:
        if llm == "host":
            client.on_request("host.llm.complete", _host_llm)
        first, _ = run_task(client, TASK_1, 1_000)
        verdict = feedback(
            client,
            first,
            "negative",
            rationale="values must be in thousands",
            raw={"verifier": THOUSANDS, "source": "skillflow.verifier"},
            evidenceId="skillflow-task-1",
        )
        assert verdict["episodeId"] == first
        [lesson] = experiences(client)
        assert lesson["experienceType"] == "repair_instruction" and lesson["sourceFeedbackIds"] == [verdict["id"]]
        _, started = run_task(client, TASK_2, 100_000)
        assert lesson["id"] in {h["refId"] for h in started["hits"]}
        block = started["injectedContext"]
        assert "[correction (not yet confirmed by a success)]" in block and "thousands" in block
        if llm == "host":  # the host model's rewording keeps the lesson's key term (thousands): it is used
            assert lesson["title"] == "Report 13F values in thousands"
            assert "Divide every raw value by 1000" in block
        else:
            assert lesson["procedure"] == "1. values must be in thousands"
        assert "1234000" not in block  # the attempt's value stays on the feedback record
