"""Decision repair: failure bursts over `tool.outcome`, user corrections, wording, attachment, injection."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.client import RpcError, ServiceClient
from memos_bridge.config import load_settings
from memos_bridge.contract import dto
from memos_bridge.contract.dto import CoreEventDTO
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.events import EventBus
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.repair import RepairService
from memos_bridge.core.learning.repair_rules import (
    GUIDANCE_CAP,
    OutcomeWindows,
    ToolOutcome,
    TraceEvidence,
    apply_value_guard,
    bare,
    detect_burst,
    general_line,
    merge_guidance,
    rejected_part,
    split_evidence,
    trace_evidence,
)
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.embedding.hash_provider import HashEmbedder
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.host import NoLLM
from memos_bridge.rules.instance import InstanceContext
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import DecisionRepairRow, EpisodeRow, PolicyRow, SessionRow, TraceRow
from memos_bridge.storage.owner import OwnerFilter
from tests.llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000
OWNER = OwnerFilter("tester", "default", None)
KEY_ERROR = "KeyError: 'nameOfIssuer'\n  File parse_13f.py, line 12"


class FakeMs:
    """Epoch milliseconds that only move when a test says so."""

    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass
class Env:
    db: Database
    clock: FakeMs
    events: list[CoreEventDTO] = field(default_factory=list)
    service: RepairService | None = None
    ctx: LearningContext | None = None

    @property
    def repair(self) -> RepairService:
        assert self.service is not None
        return self.service

    def use_llm(self, provider: Any) -> None:
        assert self.ctx is not None
        self.ctx.llm = LLMFacade([provider])

    def rows(self) -> list[DecisionRepairRow]:
        return self.db.read_sync(lambda db: list(db.scalars(select(DecisionRepairRow).order_by(DecisionRepairRow.ts))))

    def policy(self, policy_id: str) -> PolicyRow:
        row = self.db.read_sync(lambda db: db.scalar(select(PolicyRow).where(PolicyRow.id == policy_id)))
        assert row is not None
        return row


@pytest.fixture
def env(tmp_path: Path, database_for: Any) -> Iterator[Env]:
    home = tmp_path / "home"
    home.mkdir(parents=True)
    settings = load_settings(home, env={}, overrides={"storage": {"url": database_for(home)}})
    settings.home.mkdir(parents=True, exist_ok=True)
    db = Database(settings.database_url)
    db.open()
    bus = EventBus()
    clock = FakeMs()
    ctx = LearningContext(
        db, VectorStore(db, 8), HashEmbedder(settings.embedding), LLMFacade([NoLLM()]), bus, settings, clock=clock
    )
    state = Env(db=db, clock=clock, ctx=ctx)
    bus.subscribe(state.events.append)
    state.service = RepairService(ctx)
    seed_session(db, "se_a")
    try:
        yield state
    finally:
        db.close()


# ----------------------------------------------------------------------------------------------- seeding


def seed_session(db: Database, session_id: str, *, agent: str = "tester", episode: str | None = None) -> str:
    episode_id = episode or f"ep_{session_id[3:]}"

    def work(s: Session) -> None:
        if s.get(SessionRow, session_id) is None:
            s.add(
                SessionRow(id=session_id, agent=agent, started_at=T0 - 10_000, last_seen_at=T0, owner_agent_kind=agent)
            )
        s.add(EpisodeRow(id=episode_id, session_id=session_id, started_at=T0 - 5_000, owner_agent_kind=agent))

    db.write_sync(work)
    return episode_id


def add_trace(
    db: Database,
    trace_id: str,
    *,
    session: str = "se_a",
    episode: str = "ep_a",
    ts: int = T0 - 1_000,
    value: float = 0.0,
    call: dict[str, Any] | None = None,
    signatures: tuple[str, ...] = (),
    summary: str = "",
    agent_text: str = "",
    turn_id: int | None = None,
    step_index: int = 0,
    owner: str = "tester",
) -> None:
    db.write_sync(
        lambda s: s.add(
            TraceRow(
                id=trace_id,
                episode_id=episode,
                session_id=session,
                ts=ts,
                turn_id=turn_id if turn_id is not None else ts,
                step_index=step_index,
                step_kind="tool" if call else "reply",
                step_key=trace_id,
                summary=summary,
                agent_text=agent_text,
                tool_calls_json=[call] if call else [],
                error_signatures_json=list(signatures),
                value=value,
                owner_agent_kind=owner,
            )
        )
    )


def add_policy(
    db: Database,
    policy_id: str,
    episodes: list[str],
    *,
    status: str = "active",
    owner: str = "tester",
    guidance: dict[str, list[str]] | None = None,
) -> None:
    db.write_sync(
        lambda s: s.add(
            PolicyRow(
                id=policy_id,
                title=policy_id,
                status=status,
                source_episodes_json=episodes,
                decision_guidance_json=guidance or {"preference": [], "antiPattern": []},
                created_at=T0 - 50_000,
                updated_at=T0 - 50_000,
                owner_agent_kind=owner,
            )
        )
    )


def outcome(tool: str, success: bool, *, error: str | None = None, session: str = "se_a", **extra: Any) -> Any:
    return dto.ToolOutcomeParams.model_validate(
        {"sessionId": session, "tool": tool, "success": success, "error": error, "ts": T0, **extra}
    )


async def fail(env: Env, tool: str = "bash", times: int = 1, **kwargs: Any) -> list[dto.ToolOutcomeResult]:
    error = kwargs.pop("error", KEY_ERROR)
    return [await env.repair.record_tool_outcome(outcome(tool, False, error=error, **kwargs)) for _ in range(times)]


# ----------------------------------------------------------------------------------------------- bursts


async def test_three_failures_in_the_window_return_and_persist_a_repair(env: Env) -> None:
    first, second, third = await fail(env, times=3)
    assert first.repair is None and second.repair is None
    repair = third.repair
    assert repair is not None
    assert repair.source == "failure_burst" and repair.severity == "warn" and repair.tool == "bash"
    assert repair.episode_id == "ep_a"  # the session's open episode, since none was named
    # Template content is specific: the tool, the failure count and the error, in both lines.
    assert repair.anti_pattern.startswith("Avoid: ") and "bash failed 3 times" in repair.anti_pattern
    assert "KeyError: 'nameOfIssuer'" in repair.anti_pattern
    assert repair.preference == (
        "Prefer: checking bash's error (KeyError: 'nameOfIssuer') before retrying; "
        "change the arguments or use another approach"
    )
    (row,) = env.rows()
    assert row.id == repair.id and row.id.startswith("dr_") and row.ts == T0
    assert (row.owner_agent_kind, row.owner_profile_id, row.owner_workspace_id) == ("tester", "default", None)
    assert row.session_id == "se_a" and row.source == "failure_burst" and row.tool == "bash"
    assert len(row.context_hash) == 16 and int(row.context_hash, 16) >= 0
    assert row.preference == repair.preference and row.anti_pattern == repair.anti_pattern
    (event,) = [e for e in env.events if e.type == "decision_repair.created"]
    assert event.payload["repairId"] == repair.id and event.payload["source"] == "failure_burst"
    # The window restarts after a repair: one more failure is not a new burst.
    assert (await fail(env))[0].repair is None


async def test_a_success_in_the_window_prevents_a_repair(env: Env) -> None:
    await fail(env, times=2)
    await env.repair.record_tool_outcome(outcome("bash", True))
    # The window of the last 5 outcomes holds the success until five failures have followed it.
    results = await fail(env, times=5)  # F F S F | F S F F | S F F F | S F F F F | F F F F F
    assert [r.repair is not None for r in results] == [False, False, False, False, True]


async def test_the_cooldown_blocks_a_second_repair_of_the_same_context(env: Env) -> None:
    assert (await fail(env, times=3))[-1].repair is not None
    env.clock.advance(10_000)
    assert all(r.repair is None for r in await fail(env, times=3))
    env.clock.advance(60_000)  # 70 s after the first repair: the cooldown (60 s) is over
    again = (await fail(env))[0].repair
    assert again is not None
    assert len(env.rows()) == 2 and env.rows()[0].context_hash == env.rows()[1].context_hash


async def test_another_error_is_another_context(env: Env) -> None:
    assert (await fail(env, times=3))[-1].repair is not None
    other = await fail(env, times=3, error="PermissionError: [Errno 13] /etc/shadow")
    assert other[-1].repair is not None and "PermissionError" in other[-1].repair.anti_pattern
    assert len({row.context_hash for row in env.rows()}) == 2


async def test_tools_and_sessions_do_not_mix(env: Env) -> None:
    seed_session(env.db, "se_b")
    for _ in range(2):
        assert (await fail(env, "bash"))[0].repair is None
        assert (await fail(env, "python"))[0].repair is None
        assert (await fail(env, "bash", session="se_b"))[0].repair is None
    repair = (await fail(env, "bash"))[0].repair
    assert repair is not None and repair.tool == "bash" and "python" not in repair.anti_pattern
    assert [row.session_id for row in env.rows()] == ["se_a"]


async def test_concurrent_outcomes_make_one_repair(env: Env) -> None:
    await fail(env, times=2)
    results: list[dto.ToolOutcomeResult] = []

    async def one() -> None:
        results.extend(await fail(env))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    assert sum(r.repair is not None for r in results) == 1
    assert len(env.rows()) == 1


async def test_unknown_ids_are_rejected(env: Env) -> None:
    with pytest.raises(MemosError) as missing:
        await env.repair.record_tool_outcome(outcome("bash", False, session="se_nope"))
    assert missing.value.code is ErrorCode.SESSION_NOT_FOUND
    with pytest.raises(MemosError) as episode:
        await env.repair.record_tool_outcome(outcome("bash", False, episodeId="ep_nope"))
    assert episode.value.code is ErrorCode.EPISODE_NOT_FOUND
    seed_session(env.db, "se_b")
    with pytest.raises(MemosError) as foreign:
        await env.repair.record_tool_outcome(outcome("bash", False, episodeId="ep_b"))
    assert foreign.value.code is ErrorCode.INVALID_ARGUMENT


# ----------------------------------------------------------------------------------------------- evidence


async def test_the_avoid_line_names_the_failing_call_from_the_session(env: Env) -> None:
    call = {"name": "bash", "input": {"cmd": "python parse_13f.py"}, "output": KEY_ERROR, "errorCode": "KeyError"}
    add_trace(env.db, "tr_bad", call=call, signatures=("KeyError: <str>",))
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None
    assert "python parse_13f.py" in repair.anti_pattern and "bash failed 3 times" in repair.anti_pattern
    assert env.rows()[0].low_value_traces_json == ["tr_bad"]


async def test_a_strong_earlier_success_becomes_the_preference(env: Env) -> None:
    seed_session(env.db, "se_old", episode="ep_old")
    good = {"name": "bash", "input": {"cmd": "python parse_13f.py --ns it"}, "output": "parsed 312 rows"}
    add_trace(env.db, "tr_good", session="se_old", episode="ep_old", value=0.9, call=good)
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None
    assert repair.preference.startswith("Prefer: what worked before instead of retrying bash")
    assert "python parse_13f.py --ns it" in repair.preference
    assert repair.confidence == pytest.approx(0.6)
    assert env.rows()[0].high_value_traces_json == ["tr_good"]


async def test_the_value_guard_drops_a_weak_contrast_but_still_repairs(env: Env) -> None:
    seed_session(env.db, "se_old", episode="ep_old")
    meh = {"name": "bash", "input": {"cmd": "python parse_13f.py --ns it"}, "output": "parsed 3 rows"}
    add_trace(env.db, "tr_meh", session="se_old", episode="ep_old", value=0.3, call=meh)
    bad = {"name": "bash", "input": {"cmd": "python parse_13f.py"}, "output": KEY_ERROR, "errorCode": "KeyError"}
    add_trace(env.db, "tr_bad", call=bad, signatures=("KeyError: <str>",))
    # |mean(high) − mean(low)| = |0.3 − 0| < 0.5: the earlier step is no contrast, but the burst is repaired.
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None
    assert "--ns it" not in repair.preference and repair.preference.startswith("Prefer: checking bash's error")
    assert "python parse_13f.py" in repair.anti_pattern and repair.confidence == pytest.approx(0.45)
    (row,) = env.rows()
    assert row.high_value_traces_json == [] and row.low_value_traces_json == ["tr_bad"]


def test_apply_value_guard_keeps_a_clear_contrast_only() -> None:
    def evidence(trace_id: str, value: float, *, failed: bool = False) -> TraceEvidence:
        call = {"name": "bash", "output": "boom", "success": not failed}
        return trace_evidence(
            trace_id=trace_id,
            episode_id="ep",
            session_id="se",
            ts=T0,
            value=value,
            summary="",
            agent_text="",
            tool_calls=[call],
            error_signatures=(),
            local=True,
        )

    strong = split_evidence([evidence("good", 0.9), evidence("bad", 0.0, failed=True)], "bash", "")
    assert apply_value_guard(strong, 0.5) is strong
    weak = split_evidence([evidence("good", 0.1), evidence("bad", 0.0, failed=True)], "bash", "")
    guarded = apply_value_guard(weak, 0.5)
    assert guarded.high == () and guarded.high_pass == "none" and [t.id for t in guarded.low] == ["bad"]
    no_high = split_evidence([evidence("bad", -0.2, failed=True)], "bash", "")
    assert apply_value_guard(no_high, 0.5) is no_high


async def test_a_burst_after_an_ordinary_success_in_the_session_is_repaired(core_factory: Any) -> None:
    """No LLM: the earlier task scores +0.1 (transcript heuristic). Its successful bash step used to count as
    "high-value evidence" 0.1 away from the failures, under the 0.5 guard, so the burst got no repair."""
    core = await core_factory()
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate(
            {"agent": "t", "sessionId": "se_r", "userText": "Count the python modules in the repository", "ts": T0}
        )
    )
    first = started.query.episode_id
    assert first is not None
    await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": "t",
                "sessionId": "se_r",
                "episodeId": first,
                "toolCalls": [{"name": "bash", "input": {"cmd": "ls *.py"}, "output": "a.py b.py"}],
                "agentText": "There are two python modules.",
                "ts": T0 + 5_000,
            }
        )
    )
    await core.close_episode(dto.EpisodeCloseParams(episode_id=first))
    await core.flush()
    scored = await core.db.read(lambda db: db.get(EpisodeRow, first))
    assert scored is not None and scored.r_task == pytest.approx(0.1)
    again = await core.turn_start(
        dto.TurnInputDTO.model_validate(
            {"agent": "t", "sessionId": "se_r", "userText": "new task: parse holdings.xml", "ts": T0 + 10_000}
        )
    )
    second = again.query.episode_id
    assert second is not None and second != first
    repairs = []
    for i in range(5):
        params = {"sessionId": "se_r", "episodeId": second, "tool": "bash", "success": False, "ts": T0 + 11_000 + i}
        result = await core.tool_outcome(dto.ToolOutcomeParams.model_validate({**params, "error": KEY_ERROR}))
        repairs.append(result.repair)
    assert [r is not None for r in repairs] == [False, False, True, False, False]
    repair = repairs[2]
    assert repair is not None and repair.episode_id == second
    assert "bash failed 3 times" in repair.anti_pattern and "ls *.py" not in repair.preference


async def test_other_namespaces_and_unrelated_history_are_not_evidence(env: Env) -> None:
    seed_session(env.db, "se_x", agent="someone-else", episode="ep_x")
    good = {"name": "bash", "input": {"cmd": "secret"}, "output": "ok"}
    add_trace(env.db, "tr_foreign", session="se_x", episode="ep_x", value=0.9, call=good, owner="someone-else")
    seed_session(env.db, "se_old", episode="ep_old")
    add_trace(env.db, "tr_git", session="se_old", episode="ep_old", value=0.9, call={"name": "git", "output": "ok"})
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None and "secret" not in repair.preference and "git" not in repair.preference
    assert env.rows()[0].high_value_traces_json == []


# ----------------------------------------------------------------------------------------------- LLM


async def test_the_llm_words_the_repair_when_ready(env: Env) -> None:
    answer = {
        "preference": "Prefer passing the namespace: python parse_13f.py --ns it",
        "anti_pattern": "Avoid re-running parse_13f.py without --ns after a KeyError",
        "severity": "warn",
        "confidence": 0.9,
    }
    provider = ScriptedProvider(json.dumps(answer))
    env.use_llm(provider)
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None
    assert repair.preference == answer["preference"] and repair.anti_pattern == answer["anti_pattern"]
    assert repair.confidence == pytest.approx(0.9)
    assert len(provider.calls) == 1
    prompt = provider.calls[0][-1].content
    assert "bash failed: KeyError: 'nameOfIssuer'" in prompt


async def test_malformed_llm_output_falls_back_to_the_template(env: Env) -> None:
    provider = ScriptedProvider("I think you should try harder", "still not json")
    env.use_llm(provider)
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None
    assert len(provider.calls) == 2  # the facade's one corrective retry, then the template
    assert repair.preference.startswith("Prefer: checking bash's error (KeyError")


async def test_an_llm_outage_falls_back_to_the_template(env: Env) -> None:
    env.use_llm(ScriptedProvider(MemosError(ErrorCode.LLM_UNAVAILABLE, "down")))
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None and "bash failed 3 times" in repair.anti_pattern


async def test_use_llm_off_never_calls_the_llm(env: Env) -> None:
    provider = ScriptedProvider('{"preference": "x", "anti_pattern": "y"}')
    env.use_llm(provider)
    env.repair.settings = env.repair.settings.model_copy(update={"use_llm": False})
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None and provider.calls == []


# ----------------------------------------------------------------------------------------------- corrections


def seed_rejected_turn(env: Env) -> None:
    call = {"name": "python", "input": {"code": "pd.read_csv('13f.csv')"}, "output": "ok"}
    add_trace(env.db, "tr_t1", call=call, turn_id=T0 - 2_000, ts=T0 - 1_900)
    add_trace(env.db, "tr_t2", agent_text="Loaded it with pandas.", turn_id=T0 - 2_000, ts=T0 - 1_800, step_index=1)
    add_trace(env.db, "tr_old", agent_text="earlier turn", turn_id=T0 - 9_000, ts=T0 - 8_000)


async def test_an_english_correction_makes_a_repair_from_the_instruction(env: Env) -> None:
    seed_rejected_turn(env)
    repair = await env.repair.from_correction(
        "se_a", "ep_a", OWNER, "use polars instead of pandas", "wrong, use polars instead of pandas"
    )
    assert repair is not None
    assert repair.source == "user_correction" and repair.preference == "Prefer: use polars instead of pandas"
    assert repair.anti_pattern == "Avoid: pandas (the user corrected this)"
    assert repair.tool == "python" and repair.severity == "info"
    (row,) = env.rows()
    assert sorted(row.low_value_traces_json) == ["tr_t1", "tr_t2"]  # the rejected turn, not older ones
    assert row.owner_agent_kind == "tester" and row.episode_id == "ep_a"


async def test_a_chinese_correction_without_extracted_text_is_found_again(env: Env) -> None:
    seed_rejected_turn(env)
    repair = await env.repair.from_correction("se_a", "ep_a", OWNER, None, "不对，应该用 pandas 读取")
    assert repair is not None and repair.preference == "Prefer: 应该用 pandas 读取"
    # No "instead of" in the words: the avoid line names the rejected action itself.
    assert repair.anti_pattern.startswith("Avoid: repeating python(") and "read_csv" in repair.anti_pattern


async def test_a_chinese_correction_names_what_it_replaces(env: Env) -> None:
    repair = await env.repair.from_correction(
        "se_a", "ep_a", OWNER, "用 requests 代替 urllib", "不对，用 requests 代替 urllib"
    )
    assert repair is not None
    assert repair.preference == "Prefer: 用 requests 代替 urllib"
    assert repair.anti_pattern == "Avoid: urllib (the user corrected this)"
    assert repair.tool is None


async def test_a_bare_rejection_is_not_a_repair(env: Env) -> None:
    assert await env.repair.from_correction("se_a", "ep_a", OWNER, None, "不对") is None
    assert await env.repair.from_correction("se_a", "ep_a", OWNER, None, "wrong") is None
    assert env.rows() == []


async def test_corrections_bypass_the_value_guard(env: Env) -> None:
    seed_session(env.db, "se_old", episode="ep_old")
    add_trace(env.db, "tr_meh", session="se_old", episode="ep_old", value=0.3, call={"name": "python", "output": "ok"})
    seed_rejected_turn(env)
    repair = await env.repair.from_correction("se_a", "ep_a", OWNER, "use polars instead of pandas", "no, use polars")
    assert repair is not None


async def test_refine_rewords_a_correction_with_the_llm(env: Env) -> None:
    add_policy(env.db, "po_a", ["ep_a"])
    seed_rejected_turn(env)
    repair = await env.repair.from_correction("se_a", "ep_a", OWNER, "use polars instead of pandas", "wrong")
    assert repair is not None
    assert await env.repair.refine(repair.id) is None  # no LLM ready: the template stays
    answer = {"preference": "Prefer polars.read_csv for 13F files", "anti_pattern": "Avoid pandas.read_csv here"}
    provider = ScriptedProvider(json.dumps(answer))
    env.use_llm(provider)
    refined = await env.repair.refine(repair.id, "wrong, use polars instead of pandas")
    assert refined is not None and refined.preference == answer["preference"]
    assert "wrong, use polars instead of pandas" in provider.calls[0][-1].content
    # a policy is recalled for other tasks: it takes the instruction, not what this task's attempt did wrong
    guidance = env.policy("po_a").decision_guidance_json
    assert guidance == {"preference": [answer["preference"]], "antiPattern": []}


# ----------------------------------------------------------------------------------------------- attachment


async def test_repairs_attach_to_live_policies_of_overlapping_episodes(env: Env) -> None:
    seed_session(env.db, "se_old", episode="ep_old")
    good = {"name": "bash", "input": {"cmd": "python parse_13f.py --ns it"}, "output": "parsed 312 rows"}
    add_trace(env.db, "tr_good", session="se_old", episode="ep_old", value=0.9, call=good)
    add_policy(env.db, "po_hit", ["ep_old", "ep_zzz"])
    add_policy(env.db, "po_cur", ["ep_a"], status="candidate")
    add_policy(env.db, "po_miss", ["ep_zzz"])
    add_policy(env.db, "po_archived", ["ep_old"], status="archived")
    add_policy(env.db, "po_foreign", ["ep_old"], owner="someone-else")
    repair = (await fail(env, times=3))[-1].repair
    assert repair is not None
    (row,) = env.rows()
    assert row.attached_policy_ids_json == ["po_cur", "po_hit"]
    hit = env.policy("po_hit")
    assert hit.decision_guidance_json == {
        "preference": [repair.preference.removeprefix("Prefer: ")],  # the list is typed: no label stored
        "antiPattern": [repair.anti_pattern.removeprefix("Avoid: ")],
    }
    assert hit.updated_at == T0
    for untouched in ("po_miss", "po_archived", "po_foreign"):
        assert env.policy(untouched).decision_guidance_json == {"preference": [], "antiPattern": []}
    (event,) = [e for e in env.events if e.type == "decision_repair.created"]
    assert event.payload["attachedPolicyIds"] == ["po_cur", "po_hit"]


async def test_a_correction_reaches_policies_without_the_rejected_answers_values(env: Env) -> None:
    """The session's repair keeps the values (it repairs this very answer); the policies it is attached to are
    recalled for other tasks, so they get the general part only."""
    add_policy(env.db, "po_ep", ["ep_a"])
    add_trace(env.db, "tr_ans", agent_text="Done: the total is 1873400.", turn_id=T0 - 2_000, ts=T0 - 1_900)
    said = "Wrong: you wrote 1873400, it should be 18734.00. The amount_cents field is in cents, divide by 100."
    repair = await env.repair.from_correction("se_a", "ep_a", OWNER, said, "wrong, " + said)
    assert repair is not None and "18734.00" in repair.preference  # the session sees the whole correction
    guidance = env.policy("po_ep").decision_guidance_json
    attached = " ".join([*guidance["preference"], *guidance["antiPattern"]])
    assert "divide by 100" in attached and "amount_cents" in attached
    assert "1873400" not in attached and "18734.00" not in attached


def test_general_line_keeps_rules_and_drops_verdicts() -> None:
    context = InstanceContext.build(answer_texts=["wrote 5512 to result.json"])
    assert general_line("Prefer: divide by 2.20462 to get kilograms", context) == (
        "Prefer: divide by 2.20462 to get kilograms"
    )
    assert general_line("Avoid: Verifier: FAIL for pw-3", context) == ""
    assert "5512" not in general_line("Prefer: 5512 is wrong; the weight column is in pounds.", context)


async def test_attached_lines_are_deduplicated_and_capped(env: Env) -> None:
    old = [f"Prefer: old line {i}" for i in range(GUIDANCE_CAP)]
    add_policy(env.db, "po_full", ["ep_a"], guidance={"preference": old, "antiPattern": []})
    first = (await fail(env, times=3))[-1].repair
    env.clock.advance(120_000)
    second = (await fail(env, times=3))[-1].repair  # same wording after the cooldown
    assert first is not None and second is not None and first.preference == second.preference
    guidance = env.policy("po_full").decision_guidance_json
    assert len(guidance["preference"]) == GUIDANCE_CAP
    line = first.preference.removeprefix("Prefer: ")
    assert guidance["preference"][-1] == line and guidance["preference"].count(line) == 1
    assert "Prefer: old line 0" not in guidance["preference"]  # the oldest made room
    assert guidance["antiPattern"] == [first.anti_pattern.removeprefix("Avoid: ")]


def test_merge_guidance_rules() -> None:
    base = {"preference": ["a"], "antiPattern": ["Avoid: b"], "other": 1}
    assert merge_guidance(base, "prefer:  A", "AVOID: b") is None  # same text (label/case/space-insensitive)
    merged = merge_guidance(base, "Prefer: c", "Avoid: b")
    assert merged == {"preference": ["a", "c"], "antiPattern": ["Avoid: b"], "other": 1}  # stored unlabelled
    swapped = merge_guidance(base, "Prefer: a2", "Avoid: b2", remove=("Prefer: a", "Avoid: b"))
    assert swapped == {"preference": ["a2"], "antiPattern": ["b2"], "other": 1}
    assert merge_guidance(None, "Prefer: x", "避免：y") == {"preference": ["x"], "antiPattern": ["y"]}
    assert bare("Avoid: Avoid: twice") == "Avoid: twice" and bare("Preferably use uv") == "Preferably use uv"


# ----------------------------------------------------------------------------------------------- injection


async def test_active_guidance_is_fresh_newest_first_and_deduplicated(env: Env) -> None:
    ttl = env.repair.settings.guidance_ttl_ms
    seed_rejected_turn(env)
    first = await env.repair.from_correction("se_a", "ep_a", OWNER, "use polars instead of pandas", "wrong")
    env.clock.advance(1_000)
    burst = (await fail(env, times=3))[-1].repair
    env.clock.advance(61_000)  # past the cooldown: the same correction again stores a second, identical row
    again = await env.repair.from_correction("se_a", "ep_a", OWNER, "use polars instead of pandas", "wrong")
    assert first is not None and burst is not None and again is not None and len(env.rows()) == 3

    now = env.clock.now
    active = await env.repair.active_guidance("se_a", now)
    assert [r.id for r in active] == [again.id, burst.id]  # newest first, the older duplicate dropped
    later = await env.repair.active_guidance("se_a", T0 + 1_000 + ttl)
    assert [r.id for r in later] == [again.id]  # the first two are no longer younger than the TTL
    assert await env.repair.active_guidance("se_a", now + ttl + 1) == []
    assert await env.repair.active_guidance("se_b", now) == []


# ----------------------------------------------------------------------------------------------- pure rules


def test_windows_are_bounded_and_per_tool() -> None:
    windows = OutcomeWindows(size=5, max_windows=2)
    failure = ToolOutcome("Bash", False, "boom", "boom", 0, None)
    assert len(windows.record("s1", failure)) == 1
    assert len(windows.record("s1", failure)) == 2
    assert len(windows.record("s1", ToolOutcome("bash", False, "", "", 0, None))) == 3  # case-insensitive tool
    windows.record("s2", failure)
    windows.record("s3", failure)
    assert len(windows) == 2  # s1's window was the least recently used
    assert len(windows.record("s1", failure)) == 1


def test_detect_burst_picks_the_most_frequent_error() -> None:
    def f(key: str) -> ToolOutcome:
        return ToolOutcome("bash", False, f"{key} shown", key, 0, "ep")

    burst = detect_burst([f("A"), f("B"), f("B")], 3)
    assert burst is not None and burst.error_key == "B" and burst.error == "B shown" and burst.count == 3
    assert detect_burst([f("A"), f("B")], 3) is None


@pytest.mark.parametrize(
    ("instruction", "rejected"),
    [
        ("use polars instead of pandas", "pandas"),
        ("Prefer ripgrep over grep", "grep"),
        ("use requests rather than urllib.", "urllib"),
        ("用 requests 代替 urllib", "urllib"),
        ("应该是 utf-8 而不是 gbk", "gbk"),
        ("不要用 pip，用 uv 安装", "用 pip"),
        ("use polars", None),
    ],
)
def test_rejected_part(instruction: str, rejected: str | None) -> None:
    assert rejected_part(instruction) == rejected


# ----------------------------------------------------------------------------------------------- JSON-RPC


def test_tool_outcome_over_json_rpc(tmp_path: Path) -> None:
    with ServiceClient.spawn(tmp_path / "home") as client:
        session = client.call("session.open", {"agent": "tester"})["sessionId"]
        params = {"sessionId": session, "tool": "bash", "success": False, "error": KEY_ERROR, "ts": T0}
        assert client.call("tool.outcome", params) == {"ok": True}
        assert client.call("tool.outcome", {**params, "ts": T0 + 1}) == {"ok": True}
        result = client.call("tool.outcome", {**params, "ts": T0 + 2})
        assert set(result) == {"ok", "repair"} and result["ok"] is True
        repair = result["repair"]
        assert set(repair) >= {"id", "ts", "source", "severity", "preference", "antiPattern", "tool", "confidence"}
        assert repair["source"] == "failure_burst" and repair["tool"] == "bash" and repair["id"].startswith("dr_")
        assert "bash" in repair["preference"] and "KeyError" in repair["antiPattern"]

        with pytest.raises(RpcError) as missing_tool:
            client.call("tool.outcome", {"sessionId": session, "success": False, "ts": T0})
        assert missing_tool.value.code == -32602 and missing_tool.value.memos_code == "invalid_argument"
        with pytest.raises(RpcError) as unknown:
            client.call("tool.outcome", {**params, "sessionId": "se_unknown"})
        assert unknown.value.memos_code == "session_not_found"
