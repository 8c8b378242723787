"""The per-episode LLM budget covers turn-time calls too (intent classifier, relevance filter), and
lightweight mode never calls the LLM for decision repair."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from memos_bridge.llm.base import ChatMessage
from memos_bridge.llm.budget import CallBudget
from memos_bridge.llm.facade import LLMFacade
from tests.llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000
PROXY_STEPS = [
    {"name": "read_file", "input": {"path": "nginx.conf"}, "output": "server { listen 80; }"},
    {"name": "edit_file", "input": {"path": "nginx.conf"}, "output": "added proxy_pass http://api:8080"},
    {"name": "bash", "input": {"cmd": "nginx -s reload"}, "output": "reloaded"},
]


def _answers(messages: list[ChatMessage]) -> str:
    system = messages[0].content
    if "label one user message" in system:
        return json.dumps({"kind": "task", "confidence": 0.9, "reason": "asks for work"})
    if "recalled memories help" in system:
        return json.dumps({"ranked": [1, 2], "sufficient": True})
    return json.dumps({"preference": "Prefer: x", "antiPattern": "Avoid: y", "severity": "warn", "confidence": 0.5})


async def _turn(core: MemoryCore, session: str, text: str, ts: int, episode: str | None = None) -> Any:
    params: dict[str, Any] = {"agent": "t", "sessionId": session, "userText": text, "ts": ts}
    if episode is not None:
        params["episodeId"] = episode
    return await core.turn_start(dto.TurnInputDTO.model_validate(params))


async def _remember_proxy_work(core: MemoryCore) -> None:
    started = await _turn(core, "se_past", "Configure the nginx reverse proxy for the api", T0)
    await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": "t",
                "sessionId": "se_past",
                "episodeId": started.query.episode_id,
                "toolCalls": PROXY_STEPS,
                "agentText": "nginx now proxies /api to the api container on port 8080.",
                "ts": T0 + 5_000,
            }
        )
    )
    await core.flush()


async def test_intent_llm_calls_count_against_the_turns_episode(core_factory: Any) -> None:
    provider = ScriptedProvider(_answers)
    core = await core_factory(llm=LLMFacade([provider], budget=CallBudget(1, 0)), retrieval={"intent_llm": True})
    first = await _turn(core, "se_a", "the proxy settings again", T0)  # heuristics unsure: the LLM is asked
    episode = first.query.episode_id
    assert len(provider.calls) == 1
    await _turn(core, "se_a", "ok so the proxy then", T0 + 1_000, episode=episode)
    assert len(provider.calls) == 1  # the episode's one call is spent: heuristics decide
    assert core.llm.stats()["ops"]["session.intent"]["budget_refused"] == 1
    other = await _turn(core, "se_b", "hmm, and the other thing?", T0 + 2_000)  # another episode, its own budget
    assert other.query.episode_id != episode and len(provider.calls) == 2


async def test_lightweight_mode_keeps_the_budget_and_repairs_without_the_llm(core_factory: Any) -> None:
    provider = ScriptedProvider(_answers)
    core = await core_factory(
        llm=LLMFacade([provider], budget=CallBudget(1, 0)), lightweight=True, retrieval={"llm_filter": True}
    )
    await _remember_proxy_work(core)
    assert provider.calls == []  # lightweight: nothing learned, no LLM in capture
    first = await _turn(core, "se_now", "Configure the nginx reverse proxy for the web app", T0 + 60_000)
    episode = first.query.episode_id
    assert first.stats.llm_filter == "llm" and len(provider.calls) == 1
    again = await _turn(core, "se_now", "Configure the nginx reverse proxy again", T0 + 61_000, episode=episode)
    assert again.stats.llm_filter == "cutoff" and len(provider.calls) == 1  # the episode's budget is spent
    assert again.hits  # the cutoff still recalls the past work
    # tool.outcome in lightweight mode: the outcome is recorded and a burst gets a template repair, no LLM
    await core.open_session(dto.SessionOpenParams(agent="t", session_id="se_tools"))
    tool_episode = (await core.open_episode(dto.EpisodeOpenParams(session_id="se_tools"))).episode_id
    results = []
    for i in range(3):
        params = {"sessionId": "se_tools", "episodeId": tool_episode, "tool": "bash", "success": False}
        results.append(
            await core.tool_outcome(
                dto.ToolOutcomeParams.model_validate({**params, "error": "EXIT_127 command not found", "ts": T0 + i})
            )
        )
    repair = results[-1].repair
    assert repair is not None and repair.preference.startswith("Prefer: checking bash's error")
    assert len(provider.calls) == 1 and "decision.repair" not in core.llm.stats()["ops"]
