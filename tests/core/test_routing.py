"""Episode routing through turn.start: relation classes in both languages, reopen, LLM second opinion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.storage.models import EpisodeRow
from tests.llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

HOUR = 3_600_000


async def start(core: MemoryCore, session: str, text: str, ts: int) -> str:
    result = await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": text, "ts": ts})
    )
    assert result.query.episode_id is not None
    return result.query.episode_id


async def reply(core: MemoryCore, session: str, episode: str, text: str, ts: int) -> None:
    await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {"agent": "t", "sessionId": session, "episodeId": episode, "agentText": text, "ts": ts}
        )
    )


async def episode(core: MemoryCore, episode_id: str) -> EpisodeRow:
    row = await core.db.read(lambda db: db.get(EpisodeRow, episode_id))
    assert row is not None
    return row


def queued(core: MemoryCore, episode_id: str) -> str | None:
    """The trigger the learning queue holds for this episode (waiting for its feedback window), if any."""
    entry = core.learning.queue._pending.get(episode_id)
    return entry.trigger if entry is not None else None


async def task(core: MemoryCore, session: str, text: str, answer: str, ts: int) -> str:
    episode_id = await start(core, session, text, ts)
    await reply(core, session, episode_id, answer, ts + 1000)
    return episode_id


NGINX = ("Configure nginx as a reverse proxy for the app on port 8080", "Added proxy_pass and reloaded nginx.")


@pytest.mark.parametrize(
    ("text", "same"),
    [
        ("Also enable gzip compression for it", True),
        ("wrong, use port 9090 instead", True),
        ("new task: write a haiku about autumn leaves", False),
        ("Let's move on to something else: summarise this PDF about tax law", False),
        ("那它的日志在哪里？", True),
        ("不对，应该用 443 端口", True),
        ("换个任务，帮我写一封求职信", False),
    ],
)
async def test_relation_decides_append_or_new_episode(core_factory: Any, text: str, same: bool) -> None:
    core = await core_factory()
    first = await task(core, "se_r", *NGINX, ts=1_000_000)
    second = await start(core, "se_r", text, 1_060_000)
    assert (second == first) is same
    if not same:
        closed = await episode(core, first)
        assert closed.status == "closed" and closed.close_reason == "new_task"
        assert queued(core, first) == "finalized:new_task"  # the finished task's learning chain is queued
        opened = await episode(core, second)
        assert opened.meta_json["boundary"]["previousEpisodeId"] == first
        assert opened.meta_json["boundary"]["relation"] == "new_task"


async def test_gap_and_user_turn_cap_still_split(core_factory: Any) -> None:
    core = await core_factory(session={"max_turns_per_episode": 3})
    first = await task(core, "se_g", *NGINX, ts=1_000_000)
    after_gap = await start(core, "se_g", "Also enable gzip compression for it", 1_000_000 + 3 * HOUR)
    assert after_gap != first and (await episode(core, first)).close_reason == "gap"
    assert queued(core, first) == "finalized:gap"
    # tool-less follow-ups: the cap counts user turns (3), not steps
    for i in range(2):
        same = await start(core, "se_g", f"also add header number {i} to the config", 1_000_000 + 3 * HOUR + i + 1)
        assert same == after_gap
    capped = await start(core, "se_g", "also add one more header please", 1_000_000 + 3 * HOUR + 10)
    assert capped != after_gap and (await episode(core, after_gap)).close_reason == "turn_cap"
    assert queued(core, after_gap) == "finalized:turn_cap"
    await core.flush()  # and the queued chains run for both finished episodes
    assert core.learning.last_reports[first].trigger == "finalized:gap"
    assert core.learning.last_reports[after_gap].trigger == "finalized:turn_cap"
    assert (await episode(core, first)).meta_json["reward"]["status"] == "done"
    assert queued(core, capped) is None  # the open one is not learned from yet


async def test_a_correction_right_after_a_closed_task_reopens_it(core_factory: Any) -> None:
    core = await core_factory()
    first = await task(core, "se_c", *NGINX, ts=1_000_000)
    await core.close_episode(dto.EpisodeCloseParams(episode_id=first))
    again = await start(core, "se_c", "不对，应该监听 443 端口并启用 TLS", 1_100_000)
    assert again == first
    row = await episode(core, first)
    assert row.status == "open" and row.meta_json["reopenedBy"] == "negation_revision"
    # an unrelated request after a closed task starts a fresh one
    await core.close_episode(dto.EpisodeCloseParams(episode_id=first))
    fresh = await start(core, "se_c", "What is the capital of Australia?", 1_200_000)
    assert fresh != first


def _relation_llm(relation: str, confidence: float) -> ScriptedProvider:
    return ScriptedProvider(json.dumps({"relation": relation, "confidence": confidence, "reason": "scripted"}))


async def test_the_llm_settles_unsure_turns_only(core_factory: Any) -> None:
    provider = _relation_llm("new_task", 0.95)
    core = await core_factory(llm=LLMFacade([provider]))
    first = await task(core, "se_l", *NGINX, ts=1_000_000)
    # no cue either way: the heuristic is unsure, the LLM is asked and its confident new_task splits
    second = await start(core, "se_l", "Draft the quarterly budget spreadsheet for marketing", 1_060_000)
    assert len(provider.calls) == 1 and second != first
    # an explicit cue is final: no LLM call
    third = await start(core, "se_l", "new task: plan a birthday party", 1_120_000)
    assert len(provider.calls) == 1 and third != second


async def test_a_low_confidence_llm_new_task_does_not_split(core_factory: Any) -> None:
    provider = _relation_llm("new_task", 0.6)
    core = await core_factory(llm=LLMFacade([provider]))
    first = await task(core, "se_m", *NGINX, ts=1_000_000)
    second = await start(core, "se_m", "Check the upstream health endpoint too", 1_060_000)
    assert len(provider.calls) == 1 and second == first


async def test_a_failing_llm_leaves_routing_to_the_heuristics(core_factory: Any) -> None:
    from memos_bridge.contract.errors import ErrorCode, MemosError

    provider = ScriptedProvider(MemosError(ErrorCode.LLM_TIMEOUT, "slow"))
    core = await core_factory(llm=LLMFacade([provider]))
    first = await task(core, "se_f", *NGINX, ts=1_000_000)
    second = await start(core, "se_f", "Check the upstream health endpoint too", 1_060_000)
    assert provider.calls and second == first
