"""Evidence-typed strength, forgetting, pinning and supersedes links, in-process with a fake clock."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from memos_bridge.config import StrengthSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import MemosError
from memos_bridge.core import strength_rules as rules
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.learning.reward_stage import RewardReport
from memos_bridge.core.strength import LAST_RUN_KEY, strength_stage
from memos_bridge.ids import new_id
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.retrieval import fusion
from memos_bridge.storage.models import (
    AuditEventRow,
    KvRow,
    MemoryLinkRow,
    PolicyRow,
    SkillRow,
    StrengthEventRow,
    TraceRow,
)
from memos_bridge.storage.vectors import to_blob
from memos_bridge.timeutil import now_ms

from ..llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

DAY = 86_400_000
S = StrengthSettings()


# ------------------------------------------------------------------------------------------ pure rules


def test_verified_evidence_adds_the_boost_up_to_the_cap() -> None:
    for kind in ("test_passed", "diff_accepted", "user_confirmed"):
        assert rules.apply_evidence(0.5, kind, protected=False, settings=S) == pytest.approx(0.65)  # type: ignore[arg-type]
    assert rules.apply_evidence(0.95, "test_passed", protected=False, settings=S) == pytest.approx(1.0)
    assert rules.apply_evidence(1.0, "test_passed", protected=False, settings=S) == 1.0


def test_failure_multiplies_and_self_report_changes_nothing() -> None:
    assert rules.apply_evidence(0.5, "failure", protected=False, settings=S) == pytest.approx(0.35)
    assert rules.apply_evidence(0.12, "failure", protected=False, settings=S) == pytest.approx(0.084)
    assert rules.apply_evidence(0.5, "self_report", protected=False, settings=S) == 0.5


def test_a_protected_memory_stops_at_the_recall_floor() -> None:
    strength = 0.5
    for _ in range(20):
        strength = rules.apply_evidence(strength, "failure", protected=True, settings=S)
    assert strength == pytest.approx(S.recall_floor)
    assert rules.is_recallable(strength, S)
    # above the floor a failure still bites
    assert rules.apply_evidence(0.5, "failure", protected=True, settings=S) == pytest.approx(0.35)


def test_decay_multiplies_down_to_the_floor_and_never_lifts() -> None:
    assert rules.decayed(0.5, S) == pytest.approx(0.425)
    assert rules.decayed(0.11, S) == pytest.approx(S.recall_floor)
    assert rules.decayed(0.05, S) == 0.05  # weakened by failures: decay does not lift it to the floor
    assert rules.last_activity(5, None, 9, 7) == 9
    assert rules.idle_cutoff(100 * DAY, 14) == 86 * DAY


def test_tie_signal_is_neutral_at_the_default_strength_and_bounded() -> None:
    assert rules.tie_signal(0.3, 0.5) == pytest.approx(0.3)
    assert rules.tie_signal(0.3, 0.65) == pytest.approx(0.45)
    assert rules.tie_signal(0.9, 1.0) == 1.0
    assert rules.tie_signal(0.0, 0.1) == 0.0


@given(
    relevant=st.floats(0.3, 1.0),
    gap=st.floats(fusion.NEAR_TIE + 1e-6, 0.6),
    weak=st.floats(0.0, 1.0),
    strong=st.floats(0.0, 1.0),
    signal=st.floats(0.0, 1.0),
)
def test_strength_never_lets_a_less_relevant_memory_beat_a_more_relevant_one(
    relevant: float, gap: float, weak: float, strong: float, signal: float
) -> None:
    better = fusion.Candidate(kind="trace", ref_id="tr_a", tier=2)
    better.add("vec_summary", 0, relevant)
    worse = fusion.Candidate(kind="trace", ref_id="tr_b", tier=2)
    worse.add("vec_summary", 0, max(relevant - gap, 0.0))
    better.strength = rules.tie_signal(0.0, weak)
    worse.strength = rules.tie_signal(signal, strong)
    assert better.score(60) > worse.score(60)


def test_strength_breaks_an_exact_tie() -> None:
    a = fusion.Candidate(kind="trace", ref_id="tr_a", tier=2)
    b = fusion.Candidate(kind="trace", ref_id="tr_b", tier=2)
    for cand in (a, b):
        cand.add("vec_summary", 0, 0.6)
    a.strength, b.strength = rules.tie_signal(0.2, 0.8), rules.tie_signal(0.2, 0.5)
    assert a.score(60) > b.score(60)


def test_resolve_supersedes() -> None:
    # both present: the old one gives way to its correction
    assert rules.resolve_supersedes({"a", "b"}, [("b", "a")]) == {"a": ["b"]}
    # a chain: the newest recallable correction wins, the middle one gives way too
    assert rules.resolve_supersedes({"a", "b", "c"}, [("b", "a"), ("c", "b")]) == {"a": ["c"], "b": ["c"]}
    # the newest is not recallable: the middle one stands in
    assert rules.resolve_supersedes({"a", "b"}, [("b", "a"), ("c", "b")]) == {"a": ["b"]}
    # no recallable correction: the old memory stays
    assert rules.resolve_supersedes({"a"}, [("b", "a")]) == {}
    # two corrections of one memory
    assert rules.resolve_supersedes({"a", "b", "c"}, [("b", "a"), ("c", "a")]) == {"a": ["b", "c"]}
    # a loop (never stored, but harmless): nobody is the newest, nothing is replaced
    assert rules.resolve_supersedes({"a", "b"}, [("b", "a"), ("a", "b")]) == {}


def test_cycle_detection_and_id_kinds() -> None:
    edges = [("b", "a"), ("c", "b")]
    assert rules.creates_cycle(edges, "a", "c")  # c already supersedes a (through b)
    assert rules.creates_cycle(edges, "a", "a")
    assert not rules.creates_cycle(edges, "d", "c")
    assert rules.kind_of_id("tr_01ABC") == "trace" and rules.kind_of_id("wm_x") == "world_model"
    assert rules.kind_of_id("ep_x") is None
    assert rules.is_user_authored("explicit", {"note": 1})
    assert not rules.is_user_authored("explicit", {"verifier": {"passed": 1, "total": 2}})
    assert not rules.is_user_authored("implicit", None)


# ------------------------------------------------------------------------------------------ helpers


class Clock:
    def __init__(self, at: int) -> None:
        self.at = at

    def __call__(self) -> int:
        return self.at


async def _core(core_factory: Any, at: int, **overrides: Any) -> tuple[MemoryCore, Clock]:
    core: MemoryCore = await core_factory(**overrides)
    clock = Clock(at)
    core.learning.ctx.clock = clock
    return core, clock


async def _trace(core: MemoryCore, session: str, text: str, reply: str, ts: int) -> str:
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": text, "ts": ts})
    )
    ended = await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": "t",
                "sessionId": session,
                "episodeId": started.query.episode_id,
                "ts": ts + 1,
                "agentText": reply,
            }
        )
    )
    await core.flush()
    return ended.trace_ids[-1]


async def _search(core: MemoryCore, text: str) -> list[str]:
    result = await core.search(dto.MemorySearchParams(query=text))
    await core.flush()  # the access write is queued behind the reply
    return [hit.ref_id for hit in result.hits]


async def _row(core: MemoryCore, model: Any, memory_id: str) -> Any:
    return await core.db.read(lambda db: db.scalar(select(model).where(model.id == memory_id)))


async def _reinforce(core: MemoryCore, memory_id: str, evidence: str, evidence_id: str, kind: str = "trace") -> Any:
    params = {"id": memory_id, "kind": kind, "evidence": evidence, "evidenceId": evidence_id}
    return await core.reinforce(dto.MemoryReinforceParams.model_validate(params))


def _ref(memory_id: str, kind: str = "trace") -> dto.MemoryRefParams:
    return dto.MemoryRefParams.model_validate({"id": memory_id, "kind": kind})


async def _policy(
    core: MemoryCore, title: str, *, kind: str = "success_pattern", feedback: list[str] | None = None
) -> str:
    policy_id = new_id("policy")
    vec = (await core.embedder.embed([title]))[0]
    now = core.learning.ctx.clock()
    row = PolicyRow(
        id=policy_id,
        title=title,
        trigger=title,
        procedure=title,
        status="active",
        experience_type=kind,
        source_feedback_ids_json=feedback or [],
        vec=to_blob(vec),
        created_at=now,
        updated_at=now,
        owner_agent_kind="t",
        owner_profile_id="default",
    )
    await core.db.write(lambda db: db.add(row))
    core.vectors.upsert("policy", row)
    return policy_id


# ------------------------------------------------------------------------------------------ evidence


async def test_reinforce_kinds_are_typed_and_idempotent_per_evidence_id(core_factory: Any) -> None:
    t0 = now_ms()
    core, clock = await _core(core_factory, t0)
    trace = await _trace(core, "se_a", "rotate the TLS certificates on the staging cluster", "Rotated them.", t0)
    first = await _reinforce(core, trace, "test_passed", "run-1")
    assert first.applied and first.strength == pytest.approx(0.65)
    retry = await _reinforce(core, trace, "test_passed", "run-1")
    assert not retry.applied and retry.strength == pytest.approx(0.65)
    assert (await _reinforce(core, trace, "diff_accepted", "pr-7")).strength == pytest.approx(0.8)
    clock.at = t0 + DAY
    report = await _reinforce(core, trace, "self_report", "claim-1")
    assert report.applied and report.strength == pytest.approx(0.8)
    failed = await _reinforce(core, trace, "failure", "run-2")
    assert failed.strength == pytest.approx(0.56)
    row = await _row(core, TraceRow, trace)
    assert row.strength == pytest.approx(0.56) and not row.protected
    assert row.access_count >= 1 and row.last_accessed_at == t0 + DAY  # self_report counts as an access
    assert row.last_evidence_at == t0 + DAY
    events = await core.db.read(
        lambda db: list(db.scalars(select(StrengthEventRow).where(StrengthEventRow.target_id == trace)))
    )
    assert [(e.evidence, e.evidence_id) for e in events] == [
        ("test_passed", "run-1"),
        ("diff_accepted", "pr-7"),
        ("self_report", "claim-1"),
        ("failure", "run-2"),
    ]
    assert [round(e.delta, 4) for e in events] == [0.15, 0.15, 0.0, -0.24]
    # the same evidence id for another memory is its own event
    other = await _trace(core, "se_b", "bump the helm chart version for the api", "Bumped.", t0)
    assert (await _reinforce(core, other, "test_passed", "run-1")).applied


async def test_user_confirmed_protects_and_unknown_ids_are_not_found(core_factory: Any) -> None:
    core, _ = await _core(core_factory, now_ms())
    policy = await _policy(core, "Always run the migrations before deploying the api")
    confirmed = await _reinforce(core, policy, "user_confirmed", "u-1", kind="policy")
    assert confirmed.strength == pytest.approx(0.65)
    assert (await _row(core, PolicyRow, policy)).protected
    for _ in range(10):
        last = await _reinforce(core, policy, "failure", new_id("feedback"), kind="policy")
    assert last.strength == pytest.approx(S.recall_floor)
    with pytest.raises(MemosError) as missing:
        await _reinforce(core, "tr_NOPE", "test_passed", "x")
    assert missing.value.code.value == "trace_not_found"
    with pytest.raises(MemosError) as wrong_kind:
        await _reinforce(core, policy, "test_passed", "x", kind="skill")
    assert wrong_kind.value.code.value == "skill_not_found"
    hidden = dto.MemoryReinforceParams.model_validate(
        {"id": policy, "kind": "policy", "evidence": "test_passed", "evidenceId": "y", "namespace": {"agentKind": "z"}}
    )
    with pytest.raises(MemosError) as invisible:
        await core.reinforce(hidden)
    assert invisible.value.code.value == "policy_not_found"


# ------------------------------------------------------------------------------------------ recall = access


async def test_recall_counts_access_and_never_changes_strength(core_factory: Any) -> None:
    t0 = now_ms()
    core, clock = await _core(core_factory, t0)
    trace = await _trace(core, "se_a", "configure the nginx reverse proxy for the billing api", "Done: proxy_pass.", t0)
    clock.at = t0 + 3 * DAY
    assert trace in await _search(core, "nginx reverse proxy for the billing api")
    row = await _row(core, TraceRow, trace)
    assert row.access_count == 1 and row.last_accessed_at == t0 + 3 * DAY and row.strength == 0.5
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate(
            {"agent": "t", "sessionId": "se_b", "userText": "set up the nginx reverse proxy for billing", "ts": t0}
        )
    )
    await core.flush()
    assert trace in [hit.ref_id for hit in started.hits]
    row = await _row(core, TraceRow, trace)
    assert row.access_count == 2 and row.strength == 0.5


async def test_with_the_llm_filter_only_what_it_keeps_counts_as_accessed(core_factory: Any) -> None:
    t0 = now_ms()
    provider = ScriptedProvider('{"ranked": [2], "sufficient": true}')
    core, _ = await _core(core_factory, t0, llm=LLMFacade([provider]), retrieval={"llm_filter": True})
    texts = ["rotate the api signing keys in vault", "rotate the database passwords in vault"]
    traces = [await _trace(core, f"se_{i}", text, "Rotated.", t0) for i, text in enumerate(texts)]
    core.retriever._llm = None  # the mechanical ranking first: both memories are candidates
    assert set(traces) <= set(await _search(core, "rotate secrets in vault"))
    before = {t: (await _row(core, TraceRow, t)).access_count for t in traces}
    core.retriever._llm = core.llm
    result = await core.search(dto.MemorySearchParams(query="rotate secrets in vault"))
    await core.flush()
    assert result.stats is not None and result.stats.llm_filter == "llm" and len(result.hits) == 1
    kept = result.hits[0].ref_id
    after = {t: (await _row(core, TraceRow, t)) for t in traces}
    assert {t: r.access_count - before[t] for t, r in after.items()} == {t: int(t == kept) for t in traces}
    assert {r.strength for r in after.values()} == {0.5}


async def test_a_recalled_past_task_counts_one_access_for_each_of_its_steps(core_factory: Any) -> None:
    t0 = now_ms()
    core, clock = await _core(core_factory, t0)
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": "se_a", "userText": "set up postgres", "ts": t0})
    )
    tools = [{"name": "bash", "input": {"cmd": f"step {i}"}, "output": "ok"} for i in range(2)]
    ended = await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {"agent": "t", "sessionId": "se_a", "episodeId": started.query.episode_id, "ts": t0 + 1}
            | {"agentText": "Postgres is up.", "toolCalls": tools}
        )
    )
    assert len(ended.trace_ids) == 3
    clock.at = t0 + 5
    hits = [
        dto.RetrievalHitDTO(tier=2, ref_id=ended.episode_id, ref_kind="episode", score=0.5, snippet=""),
        dto.RetrievalHitDTO(tier=2, ref_id=ended.trace_ids[0], ref_kind="trace", score=0.5, snippet=""),
    ]
    write = core.strength.access_write(hits)
    assert write is not None and core.strength.access_write([]) is None
    await core.db.write(write)
    rows = [await _row(core, TraceRow, trace) for trace in ended.trace_ids]
    assert [r.access_count for r in rows] == [1, 1, 1] and {r.last_accessed_at for r in rows} == {t0 + 5}
    assert {r.strength for r in rows} == {0.5}


# ------------------------------------------------------------------------------------------ forgetting


async def test_decay_after_idle_days_archive_after_90_pin_exempts_restore_returns(core_factory: Any) -> None:
    t0 = now_ms()
    core, clock = await _core(core_factory, t0)
    idle = await _trace(core, "se_a", "compile the protobuf schemas for the payments service", "Compiled.", t0)
    pinned = await _trace(core, "se_b", "renew the letsencrypt certificate on the mail server", "Renewed.", t0)
    await core.pin(_ref(pinned))

    assert (await core.decay(dto.MemoryDecayParams(now=t0 + 13 * DAY))).decayed == 0
    first = await core.decay(dto.MemoryDecayParams(now=t0 + 15 * DAY))
    assert first.decayed == 1 and first.archived == 0
    assert (await _row(core, TraceRow, idle)).strength == pytest.approx(0.425)
    await core.decay(dto.MemoryDecayParams(now=t0 + 16 * DAY))
    assert (await _row(core, TraceRow, idle)).strength == pytest.approx(0.425 * 0.85)

    # an access resets the idle clock
    clock.at = t0 + 20 * DAY
    assert idle in await _search(core, "compile the protobuf schemas for payments")
    assert (await core.decay(dto.MemoryDecayParams(now=t0 + 30 * DAY))).decayed == 0

    gone = await core.decay(dto.MemoryDecayParams(now=t0 + 111 * DAY))
    assert gone.archived == 1
    row = await _row(core, TraceRow, idle)
    assert row.archived_at == t0 + 111 * DAY and row.strength == pytest.approx(0.425 * 0.85)  # never deleted
    assert idle not in await _search(core, "compile the protobuf schemas for payments")
    packet = await core.turn_start(
        dto.TurnInputDTO.model_validate(
            {"agent": "t", "sessionId": "se_c", "userText": "compile the protobuf schemas for payments", "ts": t0}
        )
    )
    assert idle not in [hit.ref_id for hit in packet.hits] and "protobuf" not in packet.injected_context
    kept = await _row(core, TraceRow, pinned)
    assert kept.archived_at is None and kept.strength == 0.5 and kept.pinned and kept.protected

    clock.at = t0 + 111 * DAY
    await core.restore(_ref(idle))
    assert idle in await _search(core, "compile the protobuf schemas for payments")
    assert (await core.decay(dto.MemoryDecayParams(now=t0 + 112 * DAY))).archived == 0  # not re-archived at once
    audit = await core.db.read(lambda db: [a.kind for a in db.scalars(select(AuditEventRow))])
    assert "memory.pin" in audit and "memory.restore" in audit

    # unpinned, it ages from the unpin time (not from before it was pinned)
    clock.at = t0 + 200 * DAY
    await core.unpin(_ref(pinned))
    assert not (await _row(core, TraceRow, pinned)).pinned
    later = await core.decay(dto.MemoryDecayParams(now=t0 + 210 * DAY))
    assert later.decayed == 0 and later.archived == 1  # `idle` again (99 days); `pinned` only 10 days idle
    assert (await _row(core, TraceRow, pinned)).strength == 0.5
    assert (await core.decay(dto.MemoryDecayParams(now=t0 + 215 * DAY))).decayed == 1
    assert (await _row(core, TraceRow, pinned)).strength == pytest.approx(0.425)


async def test_decay_of_learned_memories_and_the_lifecycle_restore(core_factory: Any) -> None:
    t0 = now_ms()
    core, clock = await _core(core_factory, t0)
    policy = await _policy(core, "Confirm the answers.json schema before aggregating 13F holdings")
    assert (await core.decay(dto.MemoryDecayParams(now=t0 + 95 * DAY))).archived == 1
    assert (await _row(core, PolicyRow, policy)).archived_at is not None
    assert policy not in await _search(core, "answers.json schema for 13F holdings")
    # One status on the wire: archived by the forgetting job reads "archived", in get and in list filters.
    got = await core.get_policy(dto.GetByIdParams(id=policy))
    assert got is not None and got.status == "archived" and got.archived_at == t0 + 95 * DAY
    active = await core.list_policies(dto.ListPoliciesParams.model_validate({"status": "active"}))
    archived = await core.list_policies(dto.ListPoliciesParams.model_validate({"status": "archived"}))
    assert policy not in [p.id for p in active.policies] and policy in [p.id for p in archived.policies]
    # a policy archived by its L2 lifecycle comes back as a candidate
    await core.db.write(lambda db: db.execute(PolicyRow.__table__.update().values(status="archived")))
    clock.at = t0 + 95 * DAY
    await core.restore(_ref(policy, "policy"))
    row = await _row(core, PolicyRow, policy)
    assert row.archived_at is None and row.status == "candidate"
    assert policy in await _search(core, "answers.json schema for 13F holdings")


async def test_skills_decay_by_last_use_and_keep_their_own_lifecycle_restore(core_factory: Any) -> None:
    t0 = now_ms()
    core, clock = await _core(core_factory, t0)
    common = {"status": "active", "created_at": t0, "updated_at": t0, "owner_agent_kind": "t"}
    used = SkillRow(id=new_id("skill"), name="parse_13f", last_used_at=t0 + 80 * DAY, **common)
    unused = SkillRow(id=new_id("skill"), name="vacuum_db", **common)
    retired = SkillRow(id=new_id("skill"), name="old_way", **{**common, "status": "archived"}, archived_at=t0)
    await core.db.write(lambda db: db.add_all([used, unused, retired]))
    assert (await core.decay(dto.MemoryDecayParams(now=t0 + 95 * DAY))).archived == 1  # `retired` is not counted
    assert (await _row(core, SkillRow, unused.id)).archived_at == t0 + 95 * DAY
    listed = await core.list_skills(dto.SkillListParams.model_validate({"status": "active"}))
    assert unused.id not in [skill.id for skill in listed.skills] and used.id in [skill.id for skill in listed.skills]
    got_skill = await core.get_skill(dto.SkillGetParams(id=unused.id))
    assert got_skill is not None and got_skill.status == "archived"
    assert (await _row(core, SkillRow, used.id)).archived_at is None  # used 15 days ago: only decayed
    assert (await _row(core, SkillRow, used.id)).strength == pytest.approx(0.425)
    clock.at = t0 + 95 * DAY
    await core.restore(_ref(unused.id, "skill"))
    assert (await _row(core, SkillRow, unused.id)).archived_at is None
    with pytest.raises(MemosError) as lifecycle:
        await core.restore(_ref(retired.id, "skill"))
    assert lifecycle.value.code.value == "conflict"
    assert (await _row(core, SkillRow, retired.id)).archived_at == t0  # left as the lifecycle set it


async def test_the_service_runs_the_decay_job_on_its_interval(core_factory: Any) -> None:
    core, _ = await _core(core_factory, now_ms(), strength={"decay_interval_s": 0.05})
    core.learning.ctx.clock = now_ms
    old = await _trace(core, "se_a", "vacuum the analytics warehouse tables", "Vacuumed.", now_ms() - 100 * DAY)
    runs: list[dto.MemoryDecayResult] = []
    decay = core.strength.decay

    async def counted(params: dto.MemoryDecayParams) -> dto.MemoryDecayResult:
        result = await decay(params)
        runs.append(result)
        return result

    core.strength.decay = counted  # type: ignore[method-assign]
    with anyio.move_on_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(core.strength.run_decay_loop)
            while len(runs) < 2:
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    assert runs[0].archived == 1 and runs[1].archived == 0  # one run archived it; the next had nothing to do
    assert (await _row(core, TraceRow, old)).archived_at is not None
    last = await core.db.read(lambda db: db.get(KvRow, LAST_RUN_KEY))
    assert last is not None and last.value_json["at"] >= last.value_json["now"] - 1000


# ------------------------------------------------------------------------------------------ protection


async def test_user_authored_rules_are_protected_and_survive_failures(core_factory: Any) -> None:
    t0 = now_ms()
    core, _ = await _core(core_factory, t0)
    trace = await _trace(core, "se_a", "write the quarterly report summary", "Here it is.", t0)
    episode = (await _row(core, TraceRow, trace)).episode_id

    async def feedback(text: str, **extra: Any) -> str:
        params = {"episodeId": episode, "polarity": "negative", "rationale": text, **extra}
        return (await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))).id

    user = await feedback("Always answer in bullet points, never in long paragraphs.")
    verifier = await feedback("field mismatch", raw={"verifier": {"passed": 1, "total": 4}})
    implicit = await feedback("user re-asked", channel="implicit")
    mine = await _policy(core, "Answer in bullet points, not paragraphs", kind="preference", feedback=[user])
    avoid = await _policy(core, "Avoid long paragraphs in summaries", kind="failure_avoidance", feedback=[user])
    graded = await _policy(core, "Use bullet points in verifier answers", kind="preference", feedback=[verifier])
    guessed = await _policy(core, "Bullet points for summaries maybe", kind="preference", feedback=[implicit])
    mixed = await _policy(core, "Summaries in bullet points pass review", feedback=[user, verifier])

    report = await strength_stage(core.learning.ctx, episode, RewardReport(episode_id=episode))
    assert sorted(report["protected"]) == sorted([mine, avoid])  # the user's own words only, whatever the type
    assert (await strength_stage(core.learning.ctx, episode, RewardReport(episode_id=episode))) == {"protected": []}
    for policy in (mine, avoid, graded, guessed, mixed):
        for i in range(8):
            await _reinforce(core, policy, "failure", f"fail-{i}", kind="policy")
    strengths = {p: (await _row(core, PolicyRow, p)).strength for p in (mine, avoid, graded, guessed, mixed)}
    assert strengths[mine] == pytest.approx(S.recall_floor) and strengths[avoid] == pytest.approx(S.recall_floor)
    assert all(strengths[p] < S.recall_floor for p in (graded, guessed, mixed))
    found = await _search(core, "answer in bullet points")
    assert mine in found and not {graded, guessed, mixed} & set(found)


@pytest.mark.parametrize(
    ("rule", "kind"),
    [
        ("Never force-push to main.", "failure_avoidance"),
        ("Do not force push to main; open a PR instead.", "repair_instruction"),
    ],
)
async def test_the_seeds_force_push_rule_said_in_feedback_survives_reported_failures(
    core_factory: Any, rule: str, kind: str
) -> None:
    """Seed 004's own example, end to end: the user's rule arrives through feedback.submit, becomes a typed
    experience of whatever type, is protected, and stays recallable after the agent reports failures."""
    t0 = now_ms()
    core, _ = await _core(core_factory, t0)
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate(
            {"agent": "t", "sessionId": "se_git", "userText": "publish the hotfix branch to main", "ts": t0}
        )
    )
    await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": "t",
                "sessionId": "se_git",
                "episodeId": started.query.episode_id,
                "toolCalls": [{"name": "bash", "input": {"cmd": "git push --force origin main"}, "output": "ok"}],
                "agentText": "Force-pushed the hotfix to main.",
                "ts": t0 + 1,
            }
        )
    )
    params = {"episodeId": started.query.episode_id, "polarity": "negative", "magnitude": 1.0, "rationale": rule}
    await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))
    (experience,) = (await core.list_policies(dto.ListPoliciesParams.model_validate({}))).policies
    assert experience.experience_type == kind
    assert (await _row(core, PolicyRow, experience.id)).protected is True
    for i in range(10):
        await _reinforce(core, experience.id, "failure", f"agent-failure-{i}", kind="policy")
    assert (await _row(core, PolicyRow, experience.id)).strength >= S.recall_floor
    assert experience.id in await _search(core, "force push the release to main")


# ------------------------------------------------------------------------------------------ links


async def test_a_correction_wins_over_what_it_supersedes(core_factory: Any) -> None:
    t0 = now_ms()
    core, _ = await _core(core_factory, t0)
    wrong = await _trace(
        core, "se_a", "how do I deploy the api to production", "Deploy with git push --force to the prod branch.", t0
    )
    fixed = await _trace(
        core, "se_b", "deploy the api to production safely", "Never force-push: open a release PR and tag it.", t0
    )
    unrelated = await _trace(core, "se_c", "the office wifi password changed", "It is on the whiteboard now.", t0)
    before = await _search(core, "how do I deploy the api to production")
    assert wrong in before and fixed in before and before.index(wrong) < before.index(fixed)

    link = {"fromId": fixed, "toId": wrong, "relation": "supersedes"}
    await core.link(dto.MemoryLinkParams.model_validate(link))
    await core.link(dto.MemoryLinkParams.model_validate(link))  # idempotent
    count = await core.db.read(lambda db: db.scalar(select(func.count()).select_from(MemoryLinkRow)))
    assert count == 1
    after = await _search(core, "how do I deploy the api to production")
    assert fixed in after and wrong not in after

    # only the corrected memory matches: its correction is brought in at its place
    assert unrelated not in await _search(core, "how do I deploy the api to production")
    await core.link(dto.MemoryLinkParams.model_validate({"fromId": unrelated, "toId": fixed, "relation": "supersedes"}))
    chained = await _search(core, "how do I deploy the api to production")
    assert unrelated in chained and fixed not in chained and wrong not in chained

    # an archived correction cannot be honoured: the memory it corrects stands in
    await core.decay(dto.MemoryDecayParams(now=t0 + 100 * DAY))
    await core.restore(_ref(fixed))
    assert fixed in await _search(core, "how do I deploy the api to production")

    with pytest.raises(MemosError) as loop:
        await core.link(
            dto.MemoryLinkParams.model_validate({"fromId": wrong, "toId": unrelated, "relation": "supersedes"})
        )
    assert loop.value.code.value == "invalid_argument"
    with pytest.raises(MemosError) as itself:
        await core.link(dto.MemoryLinkParams.model_validate({"fromId": wrong, "toId": wrong, "relation": "related"}))
    assert itself.value.code.value == "invalid_argument"
    with pytest.raises(MemosError) as missing:
        await core.link(dto.MemoryLinkParams.model_validate({"fromId": wrong, "toId": "po_NOPE", "relation": "cause"}))
    assert missing.value.code.value == "policy_not_found"
    with pytest.raises(MemosError) as foreign:
        await core.link(dto.MemoryLinkParams.model_validate({"fromId": wrong, "toId": "ep_1", "relation": "cause"}))
    assert foreign.value.code.value == "not_found"


async def test_a_strong_irrelevant_memory_never_beats_a_relevant_weak_one(core_factory: Any) -> None:
    t0 = now_ms()
    core, _ = await _core(core_factory, t0)
    relevant = await _trace(
        core, "se_a", "configure the nginx reverse proxy timeout for the api", "Set proxy_read_timeout 60s.", t0
    )
    other = await _trace(core, "se_b", "configure the postgres connection pool size", "Set pool_size 20.", t0)
    for i in range(4):
        await _reinforce(core, relevant, "failure", f"f{i}")
        await _reinforce(core, other, "test_passed", f"t{i}")
    assert (await _row(core, TraceRow, relevant)).strength == pytest.approx(0.5 * 0.7**4)
    assert (await _row(core, TraceRow, other)).strength == 1.0
    hits = await _search(core, "nginx reverse proxy timeout")
    assert hits[0] == relevant
    # one more failure and it falls under the recall floor
    await _reinforce(core, relevant, "failure", "f-last")
    assert relevant not in await _search(core, "nginx reverse proxy timeout")
    await core.pin(_ref(relevant))  # pinning lifts it back to the floor
    assert relevant in await _search(core, "nginx reverse proxy timeout")
