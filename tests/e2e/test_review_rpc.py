"""A person's controls over what the service learnt, through the JSON-RPC boundary of a real service:
`skill.review` (approve / reject a learnt skill), `memory.set_status` (an experience, world model or skill in or
out of recall) and `core.config` (the effective settings, secrets masked).

The skill is learnt by the real chain, as in `test_skills_rpc.py`: a failed 13F task and its verifier verdict,
then a passed one and its verdict (feedback.submit runs the chain and drains it before replying).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient
from tests.e2e.test_skills_rpc import (
    AGENT,
    AVOID_LINE,
    NO_LLM_ENV,
    PARSE,
    SUM,
    THOUSANDS,
    WRITE,
    _hit_ids,
    _recall,
    _task,
    _verdict,
)

PASSED = {"task": "sec13f_issuer_values", "passed": 5, "total": 5}
REASON = "It sums values per filer, not per issuer: wrong grouping for our reports."


def _fail_once(client: ServiceClient, session: str) -> None:
    """A 13F task done wrong and its verifier verdict: the experience to avoid multiplying by 1000."""
    failed = _task(
        client,
        session,
        "Compute the total value of the 13F holdings per issuer and write answers.json",
        [PARSE, WRITE],
        "Wrote answers.json with every value multiplied by 1000.",
        1_000,
    )
    _verdict(client, failed, "negative", AVOID_LINE, THOUSANDS)


def _learn_skill(client: ServiceClient, session: str) -> dict[str, Any]:
    _fail_once(client, session)
    passed = _task(
        client,
        session,
        "Compute the total value per issuer of this quarter's 13F filing into answers.json",
        [PARSE, SUM, WRITE],
        "Wrote answers.json: totals per issuer, values kept in thousands.",
        10_000,
    )
    _verdict(client, passed, "positive", "All fields correct.", PASSED)
    (skill,) = client.call("skill.list", {})["skills"]
    return dict(skill)


def _history(client: ServiceClient, memory_id: str, kind: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = client.call("memory.history", {"id": memory_id, "kind": kind})["events"]
    return events


def test_a_rejected_skill_stays_out_until_a_person_approves_it(home: Path) -> None:
    with ServiceClient.spawn(home, env=NO_LLM_ENV) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        skill = _learn_skill(client, session)
        skill_id = skill["id"]
        assert skill["status"] in ("candidate", "active") and skill.get("review") is None
        assert skill_id in _hit_ids(_recall(client, "se_before", 100_000), "skill")

        # reject: archived, the verdict on the skill and in its history, out of the next turn's recall
        reply = client.call("skill.review", {"id": skill_id, "decision": "reject", "reason": REASON})
        assert reply["ok"] is True and reply["skill"]["status"] == "archived"
        review = reply["skill"]["review"]
        assert review["status"] == "rejected" and review["reason"] == REASON and review["at"] > 0
        rejected = _recall(client, "se_rejected", 200_000)
        assert skill_id not in _hit_ids(rejected, "skill") and skill_id not in rejected["injectedContext"]
        fetched = client.call("skill.get", {"id": skill_id})
        assert fetched["status"] == "archived" and fetched["review"]["reason"] == REASON
        (reviewed,) = [e for e in _history(client, skill_id, "skill") if e["event"] == "reviewed"]
        assert reviewed["detail"]["decision"] == "rejected" and reviewed["detail"]["reason"] == REASON
        assert reviewed["actor"] == "user"
        again = client.call("skill.review", {"id": skill_id, "decision": "reject", "reason": REASON})
        assert again["skill"]["review"]["at"] == review["at"]  # a retried review changes nothing

        # more learning on the same task family: no new candidate, the rejected skill stays archived
        third = _task(
            client,
            session,
            "Compute the total value per issuer of the 13F filing for Q3 into answers.json",
            [PARSE, SUM, WRITE],
            "Wrote answers.json: totals per issuer, values kept in thousands.",
            300_000,
        )
        _verdict(client, third, "positive", "All fields correct, again.", PASSED)
        client.call("memory.flush", {}, timeout=90)
        (only,) = client.call("skill.list", {})["skills"]
        assert only["id"] == skill_id and only["status"] == "archived" and only["review"]["status"] == "rejected"
        notes = [p.get("skillNote") or {} for p in client.call("memory.list_policies", {})["policies"]]
        assert any(n.get("skipped") == "skill_rejected" and n.get("skillId") == skill_id for n in notes)
        # … nor do the paths that restore on their own, or a status set without the verdict
        client.call("memory.decay", {"now": 400_000 + 200 * 86_400_000})
        for method, params in (
            ("memory.restore", {"id": skill_id, "kind": "skill"}),
            ("memory.set_status", {"id": skill_id, "kind": "skill", "status": "active"}),
        ):
            with pytest.raises(RpcError) as refused:
                client.call(method, params)
            assert refused.value.memos_code == "conflict", method
        assert client.call("skill.get", {"id": skill_id})["status"] == "archived"
        assert skill_id not in _hit_ids(_recall(client, "se_relearnt", 500_000), "skill")

        # approve: active, vouched for, recalled again
        approved = client.call("skill.review", {"id": skill_id, "decision": "approve"})["skill"]
        assert approved["status"] == "active" and approved["review"]["status"] == "approved"
        assert "reason" not in approved["review"]
        back = _recall(client, "se_approved", 600_000)
        assert skill_id in _hit_ids(back, "skill") and f"id={skill_id})" in back["injectedContext"]
        decisions = [e["detail"]["decision"] for e in _history(client, skill_id, "skill") if e["event"] == "reviewed"]
        assert decisions == ["rejected", "approved"]

        # memory.set_status on the approved skill and on a world model: out of recall, then back
        (world,) = _hit_ids(back, "world-model")
        for kind, ref_kind, ref in (("skill", "skill", skill_id), ("world_model", "world-model", world)):
            out = {"id": ref, "kind": kind, "status": "archived", "reason": "checking by hand"}
            assert client.call("memory.set_status", out) == {"ok": True, "id": ref, "kind": kind, "status": "archived"}
            assert ref not in _hit_ids(_recall(client, f"se_out_{kind}", 700_000), ref_kind)
            client.call("memory.set_status", {**out, "status": "active"})
            assert ref in _hit_ids(_recall(client, f"se_in_{kind}", 800_000), ref_kind)


def test_set_status_takes_an_experience_out_of_recall_and_back(home: Path) -> None:
    with ServiceClient.spawn(home, env=NO_LLM_ENV) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        _fail_once(client, session)
        recalled = _hit_ids(_recall(client, "se_1", 100_000), "experience")
        assert recalled
        experience = recalled[0]

        params = {"id": experience, "kind": "policy", "reason": "wrong for this repository"}
        reply = client.call("memory.set_status", {**params, "status": "archived"})
        assert reply == {"ok": True, "id": experience, "kind": "policy", "status": "archived"}
        assert client.call("memory.get_policy", {"id": experience})["status"] == "archived"
        assert experience not in _hit_ids(_recall(client, "se_2", 200_000), "experience")
        client.call("memory.set_status", {**params, "status": "archived"})  # again: nothing more happens

        client.call("memory.set_status", {**params, "status": "active"})
        assert client.call("memory.get_policy", {"id": experience})["status"] == "active"
        assert experience in _hit_ids(_recall(client, "se_3", 300_000), "experience")
        events = [(e["event"], e["detail"].get("reason")) for e in _history(client, experience, "policy")]
        assert events.count(("archived", params["reason"])) == 1 and ("activated", params["reason"]) in events

        for bad in ({"kind": "trace"}, {"kind": "memory"}, {"status": "candidate"}, {"status": "forgotten"}):
            with pytest.raises(RpcError) as invalid:
                client.call("memory.set_status", {**params, "status": "active", **bad})
            assert invalid.value.code == -32602, bad
        with pytest.raises(RpcError) as missing:
            client.call("memory.set_status", {**params, "id": "po_missing", "status": "archived"})
        assert missing.value.memos_code == "policy_not_found"
        with pytest.raises(RpcError) as no_skill:
            client.call("skill.review", {"id": "sk_missing", "decision": "approve"})
        assert no_skill.value.memos_code == "skill_not_found"
        with pytest.raises(RpcError) as bad_decision:
            client.call("skill.review", {"id": "sk_missing", "decision": "maybe"})
        assert bad_decision.value.code == -32602


TOKEN = "tok-e2e-3f9a1c7d2b8e4f60"
API_KEY = "sk-e2e-0123456789abcdefghij"


def test_core_config_shows_the_settings_and_never_a_secret(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        '[retrieval]\ntier1_top_k = 4\n\n[redaction.patterns]\napi_key = "ACME-[0-9]{6}"\n', encoding="utf-8"
    )
    env = {**NO_LLM_ENV, "MEMOS_BRIDGE_TOKEN": TOKEN, "MEMOS_BRIDGE_LLM__API_KEY": API_KEY}
    with ServiceClient.spawn(home, env=env) as client:
        config = client.call("core.config", {})
    text = json.dumps(config, ensure_ascii=False)
    assert TOKEN not in text and API_KEY not in text
    settings = config["settings"]
    assert settings["transport"]["token"] == "••••" and settings["llm"]["api_key"] == "••••"
    assert settings["llm"]["base_url"] is None  # unset stays null
    assert settings["retrieval"]["tier1_top_k"] == 4 and settings["llm"]["provider"] == "none"
    assert settings["session"]["turn_key_cache"] > 0 and settings["llm"]["max_tokens"] > 0  # sizes, not secrets
    assert settings["redaction"]["patterns"] == {"api_key": "ACME-[0-9]{6}"}  # patterns are not secrets
    sources = config["sources"]
    assert sources["configFile"] == str(home / "config.toml") and sources["configFileExists"] is True
    assert {"MEMOS_BRIDGE_TOKEN", "MEMOS_BRIDGE_LLM__API_KEY", "MEMOS_BRIDGE_LLM__PROVIDER"} <= set(sources["env"])
