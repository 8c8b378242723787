"""The learning chain in-process: finalisation → queue → reward; feedback, flush, lightweight, recovery."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.facade import MemoryCore
from memos_bridge.llm.budget import CallBudget
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.storage.models import EpisodeRow, TraceRow
from memos_bridge.timeutil import now_ms
from tests.llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

MINUTE = 60_000
HOUR = 60 * MINUTE
TASK = "Parse holdings.xml and write the total market value per issuer to answers.json"


async def run_task(
    core: MemoryCore, session: str, ts: int, *, tools: int = 2, fail_last: bool = False, hints: Any = None
) -> tuple[str, list[str]]:
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": TASK, "ts": ts})
    )
    episode = started.query.episode_id
    assert episode is not None
    calls = [
        {"name": "read_file", "input": {"path": f"holdings_{i}.xml"}, "output": "<infoTable>...</infoTable>"}
        for i in range(tools)
    ]
    if fail_last:
        calls.append({"name": "write_json", "input": {"path": "answers.json"}, "errorCode": "EACCES"})
    end = await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": "t",
                "sessionId": session,
                "episodeId": episode,
                "toolCalls": calls,
                "agentText": "Summed the values per issuer and wrote answers.json.",
                "reflection": "I realised the values are in thousands because the schema says so.",
                "contextHints": hints,
                "ts": ts + 5_000,
            }
        )
    )
    return episode, end.trace_ids


async def episode_row(core: MemoryCore, episode_id: str) -> EpisodeRow:
    row = await core.db.read(lambda db: db.get(EpisodeRow, episode_id))
    assert row is not None
    return row


async def traces(core: MemoryCore, episode_id: str) -> list[TraceRow]:
    return await core.db.read(
        lambda db: list(
            db.scalars(select(TraceRow).where(TraceRow.episode_id == episode_id).order_by(TraceRow.ts, TraceRow.rid))
        )
    )


async def feedback(core: MemoryCore, episode: str, polarity: str, magnitude: float = 1.0, **extra: Any) -> Any:
    params = {"episodeId": episode, "polarity": polarity, "magnitude": magnitude, **extra}
    return await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))


async def test_an_ended_episode_waits_for_its_window_then_flush_scores_it(core_factory: Any) -> None:
    core = await core_factory()
    episode, ids = await run_task(core, "se_1", 1_000_000)
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    assert core.learning.queue.pending == [episode]
    assert (await episode_row(core, episode)).r_task is None  # the feedback window is still open
    flushed = await core.flush()
    assert flushed.pending == 0 and flushed.chains_run == 1
    row = await episode_row(core, episode)
    record = row.meta_json["reward"]
    # no LLM, no feedback: the transcript heuristic (last tool call succeeded) gives a small positive R
    assert record["status"] == "done" and record["source"] == "heuristic" and row.r_task == pytest.approx(0.1)
    values = [t.value for t in await traces(core, episode)]
    assert len(values) == len(ids) == 3
    assert values[-1] == pytest.approx(0.1) and all(0 <= v <= 0.1 for v in values)


async def test_feedback_runs_the_chain_now_and_late_feedback_rescores(core_factory: Any) -> None:
    core = await core_factory()
    episode, _ = await run_task(core, "se_2", 1_000_000)
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    await core.flush()
    assert (await episode_row(core, episode)).r_task == pytest.approx(0.1)
    # late, negative verifier feedback on the closed episode: re-scored before the reply
    verdict = await feedback(core, episode, "negative", 1.0, raw={"verifier": {"passed": 0, "total": 4}})
    assert verdict.episode_id == episode
    row = await episode_row(core, episode)
    assert row.r_task == pytest.approx(-1.0) and row.meta_json["reward"]["trigger"] == "explicit_feedback"
    assert row.meta_json["reward"]["outcome"] == "failure"
    steps = await traces(core, episode)
    assert steps[-1].value == pytest.approx(-1.0) and all(t.priority == 0 for t in steps)
    # partial verifier credit is never a success
    await feedback(core, episode, "positive", 1.0, raw={"verifier": {"passed": 3, "total": 4}}, ts=2_000_000_000_000)
    assert (await episode_row(core, episode)).meta_json["reward"]["outcome"] == "partial"


async def test_feedback_with_the_same_evidence_id_counts_once(core_factory: Any) -> None:
    core = await core_factory()
    episode, _ = await run_task(core, "se_3", 1_000_000)
    first = await feedback(core, episode, "positive", 0.8, evidenceId="run-42")
    runs = core.learning.queue.stats.chains_run
    again = await feedback(core, episode, "positive", 0.8, evidenceId="run-42")
    assert again.id == first.id and core.learning.queue.stats.chains_run == runs


async def test_feedback_on_a_step_sets_its_value_and_binds_the_episode(core_factory: Any) -> None:
    core = await core_factory(lightweight=True)
    episode, ids = await run_task(core, "se_4", 1_000_000)
    stored = await core.submit_feedback(
        dto.FeedbackSubmitParams.model_validate({"traceId": ids[0], "polarity": "negative", "magnitude": 0.5})
    )
    assert stored.episode_id == episode
    step = (await traces(core, episode))[0]
    assert step.value == pytest.approx(-1.0)  # Σ±m/Σm = −1
    assert step.priority == 0.0  # max(V, 0)·decay: a rejected step never outranks one that worked
    # lightweight: no reward runs, nothing is queued
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    assert core.learning.queue.pending == [] and (await episode_row(core, episode)).r_task is None


async def test_a_judged_step_gets_the_priority_its_value_earns(core_factory: Any) -> None:
    core = await core_factory(lightweight=True)  # the judged step only: no back-propagation afterwards
    now = now_ms()
    episode, ids = await run_task(core, "se_4b", now - 30 * 24 * HOUR)  # steps a half-life old
    params = {"traceId": ids[0], "polarity": "positive", "magnitude": 0.8}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    step = (await traces(core, episode))[0]
    assert step.value == pytest.approx(1.0) and step.priority == pytest.approx(0.5, abs=0.01)  # 1·0.5^(30/30)
    # a later negative verdict on the same step: V = (0.8 − 1.0)/1.8 < 0 → priority 0, not max(old, |V|)
    params = {"traceId": ids[0], "polarity": "negative", "magnitude": 1.0}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    step = (await traces(core, episode))[0]
    assert step.value == pytest.approx(-0.2 / 1.8) and step.priority == 0.0


async def test_feedback_errors_are_clear(core_factory: Any) -> None:
    core = await core_factory()
    with pytest.raises(MemosError) as missing:
        await core.submit_feedback(dto.FeedbackSubmitParams.model_validate({"polarity": "positive"}))
    assert missing.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(MemosError) as unknown:
        await feedback(core, "ep_nope", "positive")
    assert unknown.value.code is ErrorCode.EPISODE_NOT_FOUND


async def test_a_trivial_episode_is_skipped(core_factory: Any) -> None:
    core = await core_factory()
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": "se_5", "userText": "hi", "ts": 1_000})
    )
    episode = started.query.episode_id
    assert episode is not None
    await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {"agent": "t", "sessionId": "se_5", "episodeId": episode, "agentText": "Hello!", "ts": 2_000}
        )
    )
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    await core.flush()
    row = await episode_row(core, episode)
    assert row.meta_json["reward"]["status"] == "skipped" and row.r_task is None


async def test_adapter_alpha_and_reflection_shape_the_backprop(core_factory: Any) -> None:
    core = await core_factory()
    episode, _ = await run_task(core, "se_6", 1_000_000, hints={"alpha": 0.9})
    await feedback(core, episode, "positive", 1.0)
    steps = await traces(core, episode)
    # last step (the reply, adapter α 0.9) takes R = 1; the tool steps have no reflection: α = 0 → γ-discounted
    assert [round(t.value, 4) for t in steps] == [0.81, 0.9, 1.0]
    assert steps[-1].alpha == pytest.approx(0.9) and steps[0].alpha == 0


def _scripted_llm() -> ScriptedProvider:
    def answer(messages: list[Any]) -> str:
        system = messages[0].content
        if "goal_achievement" in system:
            return json.dumps(
                {"goal_achievement": 1.0, "process_quality": 0.5, "user_satisfaction": 0.0, "label": "success"}
            )
        if '"scores"' in system:
            return json.dumps({"scores": [{"idx": 1, "alpha": 0.8, "usable": True}]})
        if "Summarise one finished task" in system:
            return json.dumps({"title": "13F totals per issuer", "summary": "Summed values.", "outcome": "success"})
        if "ONE reusable procedure" in system:
            return json.dumps(
                {
                    "title": "Total 13F holdings per issuer",
                    "trigger": "asked to aggregate 13F holdings XML",
                    "procedure": "1. read each holdings file 2. sum values per issuer 3. write answers.json",
                    "verification": "answers.json has one total per issuer",
                    "confidence": 0.7,
                }
            )
        return json.dumps({"relation": "follow_up", "confidence": 0.5})

    return ScriptedProvider(answer)


async def test_with_an_llm_the_axes_and_alpha_come_from_it_in_two_calls(core_factory: Any) -> None:
    provider = _scripted_llm()
    core = await core_factory(llm=LLMFacade([provider]))
    episode, _ = await run_task(core, "se_7", 1_000_000, tools=9)  # a 10-step episode
    before = len(provider.calls)
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    await core.flush()
    row = await episode_row(core, episode)
    record = row.meta_json["reward"]
    assert record["source"] == "llm" and record["llmCalls"] == 3
    assert record["summary"]["title"] == "13F totals per issuer"
    # the whole chain of a 10-step episode: R_human + one reflection batch + summary + at most one L2 induction
    assert len(provider.calls) - before <= 4
    assert core.llm.stats()["ops"]["l2.induction"]["calls"] == 1
    assert row.r_task == pytest.approx(0.45 + 0.15)
    steps = await traces(core, episode)
    assert steps[0].alpha == pytest.approx(0.8) and record["alphaSources"][0] == "llm"
    ops = core.llm.stats()["ops"]
    assert ops["reward.r_human"]["calls"] == 1 and ops["reflection.score"]["calls"] == 1
    # late feedback on the same steps re-asks only for R_human; title and α are reused
    await feedback(core, episode, "positive", 1.0)
    ops = core.llm.stats()["ops"]
    assert ops["reward.r_human"]["calls"] == 2
    assert ops["reflection.score"]["calls"] == 1 and ops["episode.summarize"]["calls"] == 1
    assert (await traces(core, episode))[0].alpha == pytest.approx(0.8)


async def test_a_failed_or_malformed_llm_falls_back_to_the_deterministic_score(core_factory: Any) -> None:
    provider = ScriptedProvider("not json at all")
    core = await core_factory(llm=LLMFacade([provider]))
    episode, _ = await run_task(core, "se_8", 1_000_000)
    await feedback(core, episode, "negative", 0.6)
    row = await episode_row(core, episode)
    assert row.meta_json["reward"]["source"] == "feedback" and row.r_task == pytest.approx(-0.6)


async def _restarted(core_factory: Any, crashed: MemoryCore, **overrides: Any) -> MemoryCore:
    """A second core on the same data home, as after a crash and a restart (nothing of the first one's memory)."""
    restarted: MemoryCore = await core_factory(home=crashed.settings.home, **overrides)
    return restarted


async def test_recovery_learns_from_crashed_episodes_and_interrupts_recent_ones(core_factory: Any) -> None:
    core = await core_factory()
    now = now_ms()
    done, _ = await run_task(core, "se_9", now - 4 * HOUR)
    await core.close_episode(dto.EpisodeCloseParams(episode_id=done))  # "crash" before the window ended
    crashed, _ = await run_task(core, "se_10", now - 3 * HOUR)  # open, with steps, idle for 3 h
    recent, _ = await run_task(core, "se_11", now - 10 * MINUTE)  # open, with steps, idle for 10 min
    await core.open_session(dto.SessionOpenParams(agent="t", session_id="se_empty"))
    empty = (await core.open_episode(dto.EpisodeOpenParams(session_id="se_empty"))).episode_id
    await core.db.write(lambda db: setattr(db.get(EpisodeRow, empty), "started_at", now - 5 * HOUR))
    # the crashed process never ran a chain; a second core on the same database starts
    restarted = await _restarted(core_factory, core)
    counts = await restarted.learning.recover()
    assert counts == {"finalized": 1, "interrupted": 2, "requeued": 1}
    crashed_row = await episode_row(core, crashed)
    assert crashed_row.status == "closed" and crashed_row.close_reason == "recovered"
    for episode_id in (recent, empty):  # recent, or with nothing to learn from: resumable
        row = await episode_row(core, episode_id)
        assert row.status == "open" and row.topic_state == "interrupted"
    assert sorted(restarted.learning.queue.pending) == sorted([done, crashed])
    await restarted.learning.flush()
    for episode_id, trigger in ((done, "finalized:recovery"), (crashed, "finalized:recovered")):
        row = await episode_row(core, episode_id)
        assert row.r_task == pytest.approx(0.1) and row.meta_json["reward"]["trigger"] == trigger
    assert (await episode_row(core, recent)).r_task is None


async def test_the_stale_sweep_finalises_abandoned_topics_on_service_time(core_factory: Any) -> None:
    core = await core_factory(session={"stale_topic_ms": 60_000})
    clock = [100.0]
    core.learning._monotonic = lambda: clock[0]
    core.learning._started = clock[0]
    active, _ = await run_task(core, "se_11", 1_000_000)
    idle, _ = await run_task(core, "se_12", 1_000_000)
    core.learning.touch(idle)
    core.learning.touch(active)
    clock[0] += 50
    core.learning.touch(active)
    clock[0] += 20  # idle: 70 s untouched; active: 20 s
    assert await core.learning.sweep_stale() == [idle]
    assert (await episode_row(core, idle)).close_reason == "stale"
    assert core.learning.queue.pending == [idle]


async def test_the_stale_sweep_measures_episodes_of_an_earlier_process_from_their_stored_activity(
    core_factory: Any,
) -> None:
    core = await core_factory()
    now = now_ms()
    old, _ = await run_task(core, "se_15", now - 90 * MINUTE)
    fresh, _ = await run_task(core, "se_16", now - 5 * MINUTE)
    restarted = await _restarted(core_factory, core, session={"stale_topic_ms": HOUR})
    assert await restarted.learning.recover() == {"finalized": 0, "interrupted": 2, "requeued": 0}
    # just started: the service's own idle time is ~0, but the stored last activity says 90 min
    assert await restarted.learning.sweep_stale() == [old]
    assert (await episode_row(core, old)).close_reason == "stale"
    assert (await episode_row(core, fresh)).status == "open"
    # a host that comes back to the fresh one in this process is measured on the service clock from then on
    restarted.learning.touch(fresh)
    assert await restarted.learning.sweep_stale() == []


async def test_session_close_finalises_and_learns_before_replying(core_factory: Any) -> None:
    core = await core_factory()
    episode, _ = await run_task(core, "se_13", 1_000_000)
    await core.close_session(dto.SessionCloseParams(session_id="se_13"))
    row = await episode_row(core, episode)
    assert row.status == "closed" and row.close_reason == "session_closed"
    assert row.meta_json["reward"]["status"] == "done" and core.learning.queue.pending == []


async def test_the_llm_budget_per_episode_holds_in_the_chain(core_factory: Any) -> None:
    provider = _scripted_llm()
    core = await core_factory(llm=LLMFacade([provider], budget=CallBudget(1, 0)))
    episode, _ = await run_task(core, "se_14", 1_000_000, tools=9)
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    await core.flush()
    assert len(provider.calls) == 1  # R_human; reflection, summary and induction fell back to rules
    assert (await episode_row(core, episode)).meta_json["reward"]["alphaSources"][0] == "none"
