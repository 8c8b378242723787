"""World models through the JSON-RPC boundary: memory.list_world_models, memory.get_world and the
"Environment knowledge" section of turn.start, against a spawned service.

The first test builds the world model in-process on the service's own data home (two seed-000 SEC 13F
experiences → the rule abstraction), then reads it through a spawned service. The second runs the whole
loop — two 13F tasks failed with verifier feedback via `feedback.submit`, the chain builds the experiences
and the world model, the third task's `turn.start` injects it — with no LLM and with a scripted host LLM; it
needs the experience and world stages in the learning chain (`LearningService.stages`).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from memos_bridge.client import RpcError, ServiceClient
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.learning.world import run_world
from memos_bridge.embedding.base import Embedder
from memos_bridge.llm.host import NoLLM
from memos_bridge.storage.database import Database
from tests.conftest import SwitchableEmbedder, make_settings
from tests.core.learning.test_world import (
    AVOID_THOUSANDS,
    SEC13F_CONFIG,
    SUCCESS,
    WORLD_13F,
    _experience,
    _setup_episode,
)

AGENT = "tester"
#: These tests read the full block (sections, ids, type labels); turns default to the compact one.
FULL = {"MEMOS_BRIDGE_RETRIEVAL__RENDER_MODE": "full"}
NO_LLM = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LLM__PROVIDER": "none", **FULL}
HOST_LLM = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", **FULL}
ASK_13F = "SEC 13F task: total the infoTable holdings per issuer and write answers.json"


def configure_13f(home: Path) -> None:
    """The SEC 13F domain in the data home's config.toml, as a host configures a domain of its own (the service
    ships none)."""
    home.mkdir(parents=True, exist_ok=True)
    quoted = ", ".join(json.dumps(p) for p in SEC13F_CONFIG["patterns"])
    aliases = ", ".join(json.dumps(a) for a in SEC13F_CONFIG["aliases"])
    (home / "config.toml").write_text(
        "[learning.world.extra_domains.sec13f]\n"
        f"label = {json.dumps(SEC13F_CONFIG['label'])}\naliases = [{aliases}]\npatterns = [{quoted}]\n",
        encoding="utf-8",
    )


def _deadline() -> int:
    """A generous retrieval budget: a loaded CI machine must not turn a recall test into a deadline test."""
    return int(time.time() * 1000) + 30_000


def _build_world(home: Path, embedder: Embedder) -> str:
    """Two SEC 13F experiences and their world model, written into `home`'s database in-process."""

    async def build() -> str:
        settings = make_settings(home, learning=WORLD_13F)
        home.mkdir(parents=True, exist_ok=True)
        db = Database(settings.database_url)
        db.open()
        try:
            core = MemoryCore(settings, db, SwitchableEmbedder(embedder), NoLLM())  # type: ignore[arg-type]
            await _experience(core, SUCCESS, [_setup_episode(core, "ep_success")], policy_id="po_success")
            await _experience(core, AVOID_THOUSANDS, [_setup_episode(core, "ep_units")], policy_id="po_units")
            report = await run_world(core.learning.ctx, "ep_units")
            assert len(report.created) == 1
            return report.created[0]
        finally:
            db.close()

    return anyio.run(build)


def test_world_models_are_listed_fetched_and_injected_over_rpc(tmp_path: Path, real_embedder: Embedder) -> None:
    home = tmp_path / "home"
    configure_13f(home)
    world_id = _build_world(home, real_embedder)
    with ServiceClient.spawn(home, env=NO_LLM) as client:
        listed = client.call("memory.list_world_models", {}, timeout=60)
        (model,) = listed["worldModels"]
        assert model["id"] == world_id and model["version"] == 1 and model["status"] == "active"
        assert "sec13f" in model["domainTags"] and sorted(model["policyIds"]) == ["po_success", "po_units"]
        assert model["inducedBy"] == "rules" and model["confidence"] >= 0.2
        environment = model["structure"]["environment"]
        assert environment and all(set(e["evidenceIds"]) <= {"po_success", "po_units"} for e in environment)
        assert any("thousands of USD" in e["description"] for e in environment)
        assert model["structure"]["constraints"] and model["structure"]["inference"]

        assert client.call("memory.get_world", {"id": world_id}) == model
        assert client.call("memory.get_world", {"id": "wm_missing"}) is None
        assert client.call("memory.list_world_models", {"status": "archived"}) == {"worldModels": []}
        other = {"namespace": {"agentKind": "someone-else"}}
        assert client.call("memory.list_world_models", other) == {"worldModels": []}
        with pytest.raises(RpcError) as bad:
            client.call("memory.list_world_models", {"status": "deleted"})
        assert bad.value.code == -32602

        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        result = client.call(
            "turn.start",
            {"agent": AGENT, "sessionId": session, "userText": ASK_13F, "ts": 1_000, "deadlineAt": _deadline()},
            timeout=60,
        )
        context = result["injectedContext"]
        assert "## Environment knowledge" in context and f"id={world_id}" in context
        assert any(hit["refKind"] == "world-model" and hit["refId"] == world_id for hit in result["hits"])


# ---------------------------------------------------------------- the whole loop

TOOLS = [
    {"name": "bash", "input": {"cmd": "python parse_13f.py filing.xml"}, "output": "parsed 312 infoTable rows"},
    {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"},
]
TASKS = [
    (
        "SEC 13F task sec13f_total_value: total the value of all infoTable holdings into answers.json",
        "Values in the 13F infoTable are already in thousands of USD; do not multiply value by 1000.",
        {
            "task": "sec13f_total_value",
            "passed": 1,
            "total": 5,
            "expected": {"total_value": 1234},
            "actual": {"total_value": 1234000},
        },
    ),
    (
        "SEC 13F task sec13f_top_classes: write the top security classes of the 13F holdings into answers.json",
        "Do not reuse the previous task's answers.json schema: expected top_class_labels and top_class_counts.",
        {
            "task": "sec13f_top_classes",
            "passed": 0,
            "total": 4,
            "expected": {"top_class_labels": ["COM"], "top_class_counts": [41]},
            "actual": {"stock_holding": 1234},
        },
    ),
]


def _abstraction(user: str) -> dict[str, Any]:
    """A host model's l3.abstraction answer citing the experiences it was shown."""
    ids = re.findall(r"\[(po_[0-9A-Z]+)\]", user)
    return {
        "name": "SEC 13F filing tasks (host model)",
        "domain_tags": ["sec13f"],
        "environment": [
            {"label": "Units", "description": "13F infoTable values are in thousands of USD", "evidence_ids": ids}
        ],
        "inference": [],
        "constraints": [
            {"label": "Schema", "description": "Each 13F task defines its own answers.json fields", "evidence_ids": ids}
        ],
        "body": "13F infoTable values are in thousands of USD; each task has its own answers.json schema.",
        "confidence": 0.8,
    }


def _host_llm(asked: list[str]) -> Any:
    def answer(params: dict[str, Any]) -> dict[str, Any]:
        system, user = params["messages"][0]["content"], params["messages"][-1]["content"]
        if "ENVIRONMENT" in system and "EXPERIENCES:" in user:
            asked.append("l3.abstraction")
            return {"text": json.dumps(_abstraction(user))}
        return {"text": "{}"}  # every other prompt falls back to its deterministic path

    return answer


@pytest.mark.parametrize("llm", ["none", "host"])
def test_two_failed_13f_tasks_give_a_world_model_the_third_task_recalls(home: Path, llm: str) -> None:
    asked: list[str] = []
    configure_13f(home)
    with ServiceClient.spawn(home, env=NO_LLM if llm == "none" else HOST_LLM) as client:
        if llm == "host":
            client.on_request("host.llm.complete", _host_llm(asked))
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        ts = 1_000
        for text, rationale, verifier in TASKS:
            started = client.call(
                "turn.start",
                {"agent": AGENT, "sessionId": session, "userText": f"new task: {text}", "ts": ts},
                timeout=60,
            )
            episode = started["query"]["episodeId"]
            end = {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": ts + 1_000}
            client.call("turn.end", {**end, "agentText": "Wrote answers.json.", "toolCalls": TOOLS}, timeout=60)
            client.call("episode.close", {"episodeId": episode})
            feedback = {
                "episodeId": episode,
                "channel": "explicit",
                "polarity": "negative",
                "magnitude": 1.0,
                "rationale": rationale,
                "raw": {"verifier": verifier},
                "evidenceId": f"verifier-{verifier['task']}",
            }
            client.call("feedback.submit", feedback, timeout=120)
            ts += 10_000_000
        client.call("memory.flush", {}, timeout=120)
        models = client.call("memory.list_world_models", {"status": "active"})["worldModels"]
        (model,) = [m for m in models if "sec13f" in m["domainTags"]]
        assert len(model["policyIds"]) >= 2 and model["structure"]["environment"]
        cited = {
            i for e in model["structure"]["environment"] + model["structure"]["constraints"] for i in e["evidenceIds"]
        }
        assert cited and cited <= set(model["policyIds"])
        if llm == "host":
            assert "l3.abstraction" in asked and model["inducedBy"] == "llm"
            assert model["title"] == "SEC 13F filing tasks (host model)"
        else:
            assert model["inducedBy"] == "rules" and "thousands of USD" in model["body"]
            assert "Per-task output schema" in json.dumps(model["structure"]["constraints"])
        third = client.call(
            "turn.start",
            {
                "agent": AGENT,
                "sessionId": session,
                "userText": f"new task: {ASK_13F}",
                "ts": ts,
                "deadlineAt": _deadline(),
            },
            timeout=60,
        )
        context = third["injectedContext"]
        assert "## Environment knowledge" in context and model["id"] in context, third["stats"]
