"""`turn.start` goes ahead of other hosts' queued captures for the single SQLite writer."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from tests.core.units import record_units

pytestmark = pytest.mark.anyio


async def _start(core: MemoryCore, session: str, text: str, ts: int) -> dto.RetrievalResultDTO:
    return await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": text, "ts": ts})
    )


async def test_a_turn_start_write_is_admitted_before_queued_capture_writes(core_factory: Any) -> None:
    core = await core_factory(capture={"concurrency": 8})
    episodes = [(f"se_{i}", (await _start(core, f"se_{i}", f"build report {i}", 1)).query.episode_id) for i in range(4)]

    writes = record_units(core.db, "write_sync")  # who got the writer, in order, once it is released
    release = threading.Event()

    def hold_the_writer(_session: Session) -> None:
        release.wait(30)

    async def capture(session: str, episode: str | None) -> None:
        await core.turn_end(
            dto.TurnResultDTO.model_validate(
                {
                    "agent": "t",
                    "sessionId": session,
                    "episodeId": episode,
                    "ts": 2,
                    "agentText": f"report for {session} written",
                    "toolCalls": [{"name": "bash", "input": "python build.py", "output": "12 rows ok"}],
                }
            )
        )

    async with anyio.create_task_group() as group:
        group.start_soon(core.db.write, hold_the_writer)
        while not writes:
            await anyio.sleep(0.005)
        for session, episode in episodes:
            group.start_soon(capture, session, episode)
        with anyio.fail_after(30):  # every capture has embedded its steps and stands in the writer queue
            while core.db.waiting()["write"] < len(episodes):
                await anyio.sleep(0.01)
        group.start_soon(_start, core, "se_host", "what did the build reports say", 3)
        with anyio.fail_after(30):
            while core.db.waiting()["write"] < len(episodes) + 1:
                await anyio.sleep(0.01)
        release.set()

    after_release = writes[1:]
    assert "_begin_turn" in after_release[0], after_release
    assert sum("_turn_end" in name for name in after_release) == len(episodes)


async def test_at_most_capture_concurrency_captures_run_at_once_and_none_is_lost(core_factory: Any) -> None:
    core = await core_factory(capture={"concurrency": 2})
    episodes = [(f"se_{i}", (await _start(core, f"se_{i}", f"task {i}", 1)).query.episode_id) for i in range(6)]
    inside = 0
    most_inside = 0
    original = core.turns._embed_steps

    async def counting_embed(steps: Any) -> Any:
        nonlocal inside, most_inside
        inside += 1
        most_inside = max(most_inside, inside)
        try:
            await anyio.sleep(0.05)  # long enough for every other capture to arrive meanwhile
            return await original(steps)
        finally:
            inside -= 1

    core.turns._embed_steps = counting_embed  # type: ignore[method-assign]
    results: list[dto.TurnEndResult] = []

    async def capture(session: str, episode: str | None) -> None:
        results.append(
            await core.turn_end(
                dto.TurnResultDTO.model_validate(
                    {"agent": "t", "sessionId": session, "episodeId": episode, "ts": 2, "agentText": f"{session} done"}
                )
            )
        )

    async with anyio.create_task_group() as group:
        for session, episode in episodes:
            group.start_soon(capture, session, episode)
    assert most_inside == 2
    assert len(results) == len(episodes) and all(len(r.trace_ids) == 1 for r in results)


async def test_a_session_opened_first_searches_before_its_first_routing_write(core_factory: Any) -> None:
    """`session.open` tells the turn service the session's namespace, so the first `turn.start` starts its
    keyword and vector searches while its routing write still waits for the writer (here: held)."""
    core = await core_factory()
    opened = await core.open_session(dto.SessionOpenParams.model_validate({"agent": "t"}))
    assert core.turns.knows_owner(opened.session_id)

    reads = record_units(core.db, "read_sync")
    release, held = threading.Event(), threading.Event()

    def hold_the_writer(_session: Session) -> None:
        held.set()
        release.wait(30)

    async with anyio.create_task_group() as group:
        group.start_soon(core.db.write, hold_the_writer)
        while not held.is_set():
            await anyio.sleep(0.005)
        group.start_soon(_start, core, opened.session_id, "compare the parcel weights in kilograms", 1)
        with anyio.move_on_after(10):
            while not any("run_sql" in name for name in reads):
                await anyio.sleep(0.005)
        searched_while_held = any("run_sql" in name for name in reads)
        release.set()
    assert searched_while_held, reads
