"""Decision repairs reach the agent: a failure burst or a user correction shows up in the next turn.start."""

from __future__ import annotations

import re
from typing import Any

import pytest

from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from memos_bridge.storage.models import EpisodeRow
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
    core = await core_factory(retrieval={"render_mode": "full"})  # the full block's decision-repair header
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


CORRECTION = "Wrong: use polars instead of pandas for these files."


async def _plotted_with_pandas(core: MemoryCore, session: str) -> str:
    first = await start(core, session, "Load sales.csv and plot monthly revenue", 1_000)
    episode = first.query.episode_id
    assert episode is not None
    calls = [{"name": "python", "input": {"code": "import pandas; df = pandas.read_csv('sales.csv')"}, "output": "ok"}]
    await end(core, session, episode, 2_000, agentText="Plotted it with pandas.", toolCalls=calls)
    return episode


async def test_a_feedback_correction_is_repaired_after_the_rescore_and_before_the_experience_builder(
    core_factory: Any,
) -> None:
    core = await core_factory()
    seen: list[str] = []
    core.events.subscribe(lambda event: seen.append(event.type))
    episode = await _plotted_with_pandas(core, "se_o")
    params = {"episodeId": episode, "polarity": "negative", "magnitude": 0.8, "rationale": CORRECTION}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    # store → re-score → decision repair → experience builder → the later stages
    assert list(core.learning.last_reports[episode].stages)[:3] == ["repair", "experiences", "l2"]
    order = [t for t in seen if t in ("feedback.received", "reward.updated", "decision_repair.created")]
    assert order == ["feedback.received", "reward.updated", "decision_repair.created"]
    assert seen.index("decision_repair.created") < seen.index("l2.policy.induced")  # the experience came after
    (experience,) = (await core.list_policies(dto.ListPoliciesParams.model_validate({}))).policies
    assert experience.experience_type != "procedural" and experience.source_episode_ids == [episode]
    # nothing was appended to the experience after it was built (the repair ran before it existed)
    assert not any(line.startswith("Prefer: use polars") for line in experience.preference)


async def test_feedback_submit_drains_the_queue(core_factory: Any) -> None:
    core = await core_factory()
    waiting = await _plotted_with_pandas(core, "se_w")
    await core.close_episode(dto.EpisodeCloseParams(episode_id=waiting))
    assert core.learning.queue.pending == [waiting]  # inside its 30 s feedback window
    other = await _plotted_with_pandas(core, "se_x")
    params = {"episodeId": other, "polarity": "positive", "magnitude": 1.0, "rationale": "Great, thanks."}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    assert core.learning.queue.pending == [] and core.learning.queue.running == []
    scored = await core.db.read(lambda db: db.get(EpisodeRow, waiting))
    assert scored is not None and scored.meta_json["reward"]["status"] == "done"


async def _judged(core: MemoryCore, session: str, text: str, ts: int, rationale: str) -> str:
    """A task in `session`, answered with code that types in its data, then rejected with `rationale`."""
    first = await start(core, session, text, ts)
    episode = first.query.episode_id
    assert episode is not None
    code = "rows = [412.5, 980.25, 77.75]\nprint(sum(rows))"
    calls = [{"name": "python", "input": {"code": code}, "output": "1470.5"}]
    await end(core, session, episode, ts + 1_000, agentText="The total is 1470.5.", toolCalls=calls)
    params = {"episodeId": episode, "polarity": "negative", "magnitude": 1.0, "rationale": rationale, "ts": ts + 2_000}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    return episode


async def test_a_correction_serves_its_task_and_its_retry_not_the_sessions_next_task(core_factory: Any) -> None:
    """One host session, one task after another: the correction of the first (with the rejected attempt's code
    and values) reaches a retry of that task, never the next task of the session."""
    core = await core_factory()
    request = "What is the total pallet weight in the depot ledger?"
    first = await _judged(core, "se_long", request, 1_000, "Wrong: it should be 1320.5, use the net column instead.")
    other = await start(core, "se_long", "How many pallets went to the north depot last week?", 10_000)
    assert other.query.episode_id != first  # the verdict closed the first task
    assert "1320.5" not in other.injected_context and "412.5" not in other.injected_context
    assert "Avoid: repeating" not in other.injected_context
    verdict = {"episodeId": other.query.episode_id, "polarity": "positive", "magnitude": 1.0, "ts": 11_000}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(verdict))
    retry = await start(core, "se_long", request, 20_000)  # asked again, verbatim, in a new episode
    assert retry.query.episode_id not in (first, other.query.episode_id)
    assert "net column" in retry.injected_context


async def test_a_tool_failure_repair_still_serves_the_next_task_of_the_session(core_factory: Any) -> None:
    core = await core_factory()
    first = await start(core, "se_tools", "Install the project's dependencies and run the test suite", 1_000)
    episode = first.query.episode_id
    assert episode is not None
    for i in range(3):
        outcome = await core.tool_outcome(
            dto.ToolOutcomeParams.model_validate(
                {
                    "sessionId": "se_tools",
                    "episodeId": episode,
                    "tool": "pip_install",
                    "success": False,
                    "error": "BUILD_FAILED",
                    "ts": 2_000 + i,
                }
            )
        )
    assert outcome.repair is not None
    params = {"episodeId": episode, "polarity": "negative", "magnitude": 1.0, "rationale": "Failed.", "ts": 3_000}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    nxt = await start(core, "se_tools", "Build the documentation site and publish it", 4_000)
    assert nxt.query.episode_id != episode
    assert "pip_install" in nxt.injected_context
