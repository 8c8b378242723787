"""Decision repairs reach the agent: a failure burst or a user correction shows up in the next turn.start."""

from __future__ import annotations

import re
from typing import Any

import pytest

from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from memos_bridge.storage.owner import OwnerFilter

pytestmark = pytest.mark.anyio


async def start(core: MemoryCore, session: str, text: str, ts: int) -> dto.RetrievalResultDTO:
    return await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": text, "ts": ts})
    )


async def end(core: MemoryCore, session: str, episode: str, ts: int, **extra: Any) -> None:
    await core.turn_end(
        dto.TurnResultDTO.model_validate({"agent": "t", "sessionId": session, "episodeId": episode, "ts": ts, **extra})
    )


async def test_a_failure_burst_is_injected_into_the_next_turn(core_factory: Any) -> None:
    core = await core_factory()
    first = await start(core, "se_b", "Install the project's dependencies and run the test suite", 1_000)
    episode = first.query.episode_id
    assert episode is not None
    failing = {"name": "pip_install", "input": {"pkg": "numpy==1.19"}, "output": "error: Failed building wheel"}
    await end(core, "se_b", episode, 2_000, toolCalls=[{**failing, "errorCode": "BUILD_FAILED"}] * 3)
    repair = None
    for i in range(3):
        outcome = await core.tool_outcome(
            dto.ToolOutcomeParams.model_validate(
                {
                    "sessionId": "se_b",
                    "episodeId": episode,
                    "tool": "pip_install",
                    "success": False,
                    "error": "BUILD_FAILED",
                    "ts": 2_000 + i,
                }
            )
        )
        repair = outcome.repair or repair
    assert repair is not None and "pip_install" in (repair.anti_pattern + repair.preference)
    nxt = await start(core, "se_b", "ok, what should I try now?", 3_000)
    assert nxt.query.reason == "decision_repair"
    block = nxt.injected_context
    assert "Decision repair: read before your next action" in block
    avoid = re.sub(r"^Avoid:\s*", "", repair.anti_pattern)
    prefer = re.sub(r"^Prefer:\s*", "", repair.preference)
    assert f"Avoid: {avoid[:60]}" in block and f"Prefer: {prefer[:60]}" in block
    assert "Prefer: Prefer:" not in block and "Avoid: Avoid:" not in block


async def test_a_user_correction_becomes_guidance_in_the_same_turn(core_factory: Any) -> None:
    core = await core_factory()
    first = await start(core, "se_c", "Load sales.csv and plot monthly revenue", 1_000)
    episode = first.query.episode_id
    assert episode is not None
    await end(
        core,
        "se_c",
        episode,
        2_000,
        agentText="Plotted it with pandas.",
        toolCalls=[{"name": "python", "input": {"code": "import pandas"}, "output": "ok"}],
    )
    corrected = await start(core, "se_c", "不对，应该用 polars 而不是 pandas", 3_000)
    assert corrected.query.episode_id == episode  # a revision stays in the task
    assert "polars" in corrected.injected_context and "Prefer:" in corrected.injected_context
    # chitchat gets no memories at all, repairs included
    chat = await start(core, "se_c", "thanks!", 4_000)
    assert chat.injected_context == ""


async def test_a_correction_in_feedback_becomes_guidance_for_the_next_turn(core_factory: Any) -> None:
    core = await core_factory()
    first = await start(core, "se_f", "Load sales.csv and plot monthly revenue", 1_000)
    episode = first.query.episode_id
    assert episode is not None
    await end(core, "se_f", episode, 2_000, agentText="Plotted it with pandas.")
    await core.submit_feedback(
        dto.FeedbackSubmitParams.model_validate(
            {
                "episodeId": episode,
                "polarity": "negative",
                "magnitude": 0.8,
                "rationale": "Wrong: use polars instead of pandas for these files.",
            }
        )
    )
    nxt = await start(core, "se_f", "ok, redo the chart", 3_000)
    assert "Prefer: use polars instead of pandas" in nxt.injected_context
    # positive feedback, or negative feedback without an instruction, makes no repair
    assert len(await core.repair.active_guidance("se_f", core.repair.ctx.clock())) == 1


async def test_sessions_without_fresh_repairs_cost_no_read_after_the_first(core_factory: Any) -> None:
    core = await core_factory()
    reads = 0
    read = core.repair.ctx.db.read

    async def counting(fn: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read(fn, **kwargs)

    core.repair.ctx.db.read = counting  # type: ignore[method-assign]
    now = core.repair.ctx.clock()
    assert await core.repair.active_guidance("se_quiet", now) == []
    assert await core.repair.active_guidance("se_quiet", now + 1) == []
    assert reads == 1
    owner = OwnerFilter("t", "default", None)
    made = await core.repair.from_correction("se_quiet", None, owner, "use polars", "不对，应该用 polars")
    assert made is not None
    assert [r.id for r in await core.repair.active_guidance("se_quiet", made.ts)] == [made.id]  # a new one is seen
