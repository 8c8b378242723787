"""Core pipeline in-process: episode routing, capture idempotency, embedding back-fill."""

from __future__ import annotations

from typing import Any

import pytest

from memos_bridge.contract import dto
from memos_bridge.contract.errors import MemosError
from memos_bridge.core.facade import MemoryCore
from memos_bridge.storage import repos

pytestmark = pytest.mark.anyio

HOUR = 3_600_000


async def _start(core: MemoryCore, session: str, text: str, ts: int, **extra: Any) -> dto.RetrievalResultDTO:
    return await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": text, "ts": ts, **extra})
    )


async def _end(core: MemoryCore, session: str, episode: str, ts: int, **extra: Any) -> dto.TurnEndResult:
    return await core.turn_end(
        dto.TurnResultDTO.model_validate({"agent": "t", "sessionId": session, "episodeId": episode, "ts": ts, **extra})
    )


async def test_follow_up_within_the_gap_stays_in_the_episode(core_factory: Any) -> None:
    core = await core_factory()
    first = await _start(core, "se_a", "set up the postgres database", 0)
    again = await _start(core, "se_a", "and add an index on users.email", HOUR)
    assert again.query.episode_id == first.query.episode_id


async def test_a_gap_over_the_merge_window_starts_a_new_episode(core_factory: Any) -> None:
    core = await core_factory()
    first = await _start(core, "se_a", "set up the postgres database", 0)
    later = await _start(core, "se_a", "write the release notes", 3 * HOUR)
    assert later.query.episode_id != first.query.episode_id
    old = await core.list_episodes(dto.ListEpisodesParams(session_id="se_a"))
    closed = {e.id: e for e in old.episodes}[first.query.episode_id or ""]
    assert closed.status == "closed" and closed.close_reason == "gap"


async def test_the_turn_cap_counts_user_turns_not_tool_calls(core_factory: Any) -> None:
    core = await core_factory(session={"max_turns_per_episode": 2})
    r1 = await _start(core, "se_a", "task one", 1)
    episode = r1.query.episode_id or ""
    tools = [{"name": "bash", "input": f"step {i}", "output": "ok"} for i in range(6)]
    await _end(core, "se_a", episode, 2, agentText="did six things", toolCalls=tools)
    r2 = await _start(core, "se_a", "task one, part two", 3)
    assert r2.query.episode_id == episode  # six tool calls did not count as turns
    r3 = await _start(core, "se_a", "task one, part three", 4)
    assert r3.query.episode_id != episode


async def test_explicit_episode_id_reopens_a_closed_episode(core_factory: Any) -> None:
    core = await core_factory()
    r1 = await _start(core, "se_a", "task", 1)
    episode = r1.query.episode_id or ""
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    r2 = await _start(core, "se_a", "one more thing about that task", 2, episodeId=episode)
    assert r2.query.episode_id == episode
    listed = await core.list_episodes(dto.ListEpisodesParams(session_id="se_a"))
    assert listed.episodes[0].status == "open"


async def test_episode_of_another_session_is_rejected(core_factory: Any) -> None:
    core = await core_factory()
    r1 = await _start(core, "se_a", "task", 1)
    with pytest.raises(MemosError) as err:
        await _start(core, "se_b", "task", 2, episodeId=r1.query.episode_id)
    assert err.value.code.value == "invalid_argument"


async def test_turn_end_without_turn_start_records_the_turn(core_factory: Any) -> None:
    core = await core_factory()
    await core.open_session(dto.SessionOpenParams(agent="t", session_id="se_a"))
    episode = (await core.open_episode(dto.EpisodeOpenParams(session_id="se_a"))).episode_id
    end = await _end(core, "se_a", episode, 5, userText="rename the column", agentText="Renamed it.")
    trace = await core.get_trace(dto.GetByIdParams(id=end.trace_id))
    assert trace is not None and trace.user_text == "rename the column" and trace.turn_id == 5


async def test_two_user_turns_in_one_millisecond_get_distinct_turn_ids(core_factory: Any) -> None:
    core = await core_factory()
    r1 = await _start(core, "se_a", "first", 7)
    e1 = await _end(core, "se_a", r1.query.episode_id or "", 8, agentText="one")
    r2 = await _start(core, "se_a", "second", 7)
    e2 = await _end(core, "se_a", r2.query.episode_id or "", 8, agentText="two")
    t1 = await core.get_trace(dto.GetByIdParams(id=e1.trace_id))
    t2 = await core.get_trace(dto.GetByIdParams(id=e2.trace_id))
    assert t1 is not None and t2 is not None and t1.turn_id != t2.turn_id


async def test_capture_survives_an_embedder_outage_and_back_fill_restores_vectors(core_factory: Any) -> None:
    core = await core_factory()
    core.embedder.down = True
    r1 = await _start(core, "se_a", "configure the haproxy load balancer", 1)
    assert r1.stats is not None and any(d.startswith("embedding") for d in r1.stats.degraded)
    end = await _end(core, "se_a", r1.query.episode_id or "", 2, agentText="Added a backend pool to haproxy.cfg.")
    row = await core.db.read(lambda db: repos.get_trace(db, end.trace_id))
    assert row is not None and row.vec_summary is None and row.vec_action is None
    assert await core.db.read(repos.pending_embedding_retries) == 2
    # still findable by text while vectors are missing
    found = await core.search(dto.MemorySearchParams(query="haproxy backend pool"))
    assert [h.ref_id for h in found.hits] == [end.trace_id]
    assert "vec_summary" not in found.hits[0].channels

    postponed = await core.backfill.run_due()
    assert postponed.failed == 2 and await core.db.read(repos.pending_embedding_retries) == 2
    core.embedder.down = False
    done = await core.backfill.run_due(now=10**15)
    assert done.embedded == 2 and await core.db.read(repos.pending_embedding_retries) == 0
    row = await core.db.read(lambda db: repos.get_trace(db, end.trace_id))
    assert row is not None and row.vec_summary is not None and row.vec_action is not None
    found = await core.search(dto.MemorySearchParams(query="load balancer backend configuration"))
    assert found.hits and "vec_summary" in found.hits[0].channels


async def test_retrieval_respects_an_already_passed_deadline(core_factory: Any) -> None:
    core = await core_factory()
    result = await _start(core, "se_a", "anything", 1, deadlineAt=1)
    assert result.hits == [] and result.stats is not None and result.stats.skipped_reason == "deadline"


async def test_shared_rows_are_visible_to_other_namespaces(core_factory: Any) -> None:
    core = await core_factory()
    ns_a = {"profileId": "alice"}
    r1 = await _start(core, "se_a", "rotate the TLS certificates with certbot", 1, namespace=ns_a)
    end = await _end(core, "se_a", r1.query.episode_id or "", 2, agentText="Ran certbot renew and reloaded nginx.")

    def share(db: Any) -> None:
        row = repos.get_trace(db, end.trace_id)
        assert row is not None
        row.share_scope = "public"

    await core.db.write(share)
    core.vectors.invalidate()  # reload so the index sees the new share scope
    r2 = await _start(core, "se_b", "rotate the TLS certificates with certbot", 10, namespace={"profileId": "bob"})
    assert end.trace_id in [h.ref_id for h in r2.hits]


async def test_concurrent_turn_ends_without_turn_start_keep_every_turn(core_factory: Any) -> None:
    import anyio

    core = await core_factory()
    await core.open_session(dto.SessionOpenParams(agent="t", session_id="se_a"))
    episode = (await core.open_episode(dto.EpisodeOpenParams(session_id="se_a"))).episode_id
    results: dict[int, dto.TurnEndResult] = {}

    async def send(i: int) -> None:
        results[i] = await _end(core, "se_a", episode, 100 + i, userText=f"dialogue line number {i}")

    async with anyio.create_task_group() as group:
        for i in range(8):
            group.start_soon(send, i)
    ids = [results[i].trace_id for i in range(8)]
    assert len(set(ids)) == 8
    timeline = await core.timeline(dto.TimelineParams(episode_id=episode))
    assert sorted(t.user_text for t in timeline.traces) == sorted(f"dialogue line number {i}" for i in range(8))
    again = await _end(core, "se_a", episode, 500, userText="dialogue line number 3")  # a retry
    assert again.trace_id == results[3].trace_id


async def test_a_known_sessions_channels_start_before_routing_and_serve_the_retrieval(
    core_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memos_bridge.retrieval.engine import ChannelRun

    core = await core_factory()
    r1 = await _start(core, "se_a", "rotate the TLS certificates with certbot", 1)
    await _end(core, "se_a", r1.query.episode_id or "", 2, agentText="Ran certbot renew and reloaded nginx.")
    runs: list[ChannelRun] = []
    original = ChannelRun.run

    async def counted(self: ChannelRun) -> None:
        runs.append(self)
        await original(self)

    monkeypatch.setattr(ChannelRun, "run", counted)
    began: list[bool] = []
    begin = core.turns._begin_turn_sync

    def observed(db: Any, params: Any, decide: Any) -> Any:
        began.append(bool(runs))  # were the channels already running when routing began?
        return begin(db, params, decide)

    monkeypatch.setattr(core.turns, "_begin_turn_sync", observed)
    r2 = await _start(core, "se_b", "how did we renew the TLS certificates", 3 * HOUR)  # unknown session
    assert began == [False] and len(runs) == 1  # channels waited for routing, ran once
    r3 = await _start(core, "se_b", "and which command reloaded nginx after certbot", 3 * HOUR + 1)
    assert began == [False, True] and len(runs) == 2  # started before routing, and not run a second time
    assert r1.query.episode_id not in (r2.query.episode_id, r3.query.episode_id)
    assert any(h.ref_kind == "trace" for h in r3.hits)  # the early run's finds reached the result


async def test_a_stale_remembered_namespace_never_leaks_another_namespaces_memories(core_factory: Any) -> None:
    from memos_bridge.storage.owner import OwnerFilter

    core = await core_factory()
    alice = {"profileId": "alice"}
    r1 = await _start(core, "se_a", "rotate the TLS certificates with certbot", 1, namespace=alice)
    secret = await _end(core, "se_a", r1.query.episode_id or "", 2, agentText="Ran certbot renew for alice.")
    await _start(core, "se_b", "hello there, new project", 10, namespace={"profileId": "bob"})
    core.turns._owners["se_b"] = OwnerFilter(agent_kind="t", profile_id="alice", workspace_id=None)  # stale
    r2 = await _start(core, "se_b", "rotate the TLS certificates with certbot", 20, namespace={"profileId": "bob"})
    assert secret.trace_id not in [h.ref_id for h in r2.hits]
    assert "alice" not in r2.injected_context


@pytest.mark.parametrize("step_vectors", ["one", "two"])
async def test_capture_runs_the_model_once_per_step_unless_told_twice(core_factory: Any, step_vectors: str) -> None:
    """`embedding.step_vectors = "one"` (the default) stores one vector in both trace columns, embedded once
    per step; "two" embeds the action line apart."""
    core = await core_factory(embedding={"step_vectors": step_vectors})
    texts: list[str] = []
    inner = core.embedder.embed  # type: ignore[attr-defined]

    async def counting(batch: Any, role: Any = "document") -> Any:
        texts.extend(batch)
        return await inner(batch, role)

    core.embedder.embed = counting  # type: ignore[method-assign]
    started = await _start(core, "se_v", "why does the 13F parse fail", 0)
    end = await _end(
        core,
        "se_v",
        started.query.episode_id or "",
        1,
        userText="why does the 13F parse fail",
        agentText="The infoTable elements carry a namespace; parse with it.",
        toolCalls=[{"name": "bash", "input": {"cmd": "python parse.py"}, "output": "KeyError: 'nameOfIssuer'"}],
    )
    rows = [await core.db.read(lambda db, i=i: repos.get_trace(db, i)) for i in end.trace_ids]
    step_texts = [t for t in texts if t != "why does the 13F parse fail"]  # the turn.start query, if any
    assert len(step_texts) == len(rows) * (1 if step_vectors == "one" else 2)
    for row in rows:
        assert row is not None and row.vec_summary and row.vec_action
        assert (row.vec_summary == row.vec_action) == (step_vectors == "one")
