"""`memory.analytics` on rows written directly: LLM usage per stage and namespace, tokens, speed at 10k memories.

The end-to-end test drives the real service, where no LLM answers; here the `api_logs` rows the LLM facade
writes are stored by hand, so the token sums and the per-namespace attribution are checked too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.analytics import DAY_MS, analytics_sync, window
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import ApiLogRow, EpisodeRow, MemoryRow, SessionRow

NOW = 1_710_072_000_000  # 2024-03-10 12:00 UTC
ALICE = dto.RuntimeNamespace(profile_id="alice")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'memos.db'}")
    database.open()
    yield database
    database.close()


def _owned(profile: str) -> dict[str, str]:
    return {"owner_agent_kind": "hermes", "owner_profile_id": profile}


def _seed(db: Session) -> None:
    for profile in ("alice", "bob"):
        db.add(SessionRow(id=f"se_{profile}", agent="hermes", started_at=NOW, last_seen_at=NOW, **_owned(profile)))
        db.flush()
        db.add(EpisodeRow(id=f"ep_{profile}", session_id=f"se_{profile}", started_at=NOW, **_owned(profile)))
    db.flush()

    def llm(op: str, episode: str | None, ok: bool, tokens: tuple[int, int] | None, at: int = NOW) -> None:
        output: dict[str, object] = {"error": "llm_timeout"}
        if ok:
            output = {"tokensIn": tokens[0], "tokensOut": tokens[1]} if tokens else {}
        db.add(
            ApiLogRow(
                tool_name=f"llm:{op}",
                input_json={"op": op, "episodeId": episode},
                output_json=output,
                duration_ms=100,
                success=ok,
                called_at=at,
            )
        )

    llm("l2.induction", "ep_alice", True, (1200, 300))
    llm("l2.induction", "ep_alice", True, (800, 200))
    llm("l2.induction", "ep_alice", False, None)
    llm("session.intent", "ep_alice", True, (0, 0))  # a provider without usage reports is logged with zeros
    llm("l2.induction", "ep_bob", True, (5000, 5000))
    llm("llm.test", None, True, (10, 1))  # no episode: the every-namespace view only
    llm("l2.induction", "ep_alice", True, (7, 7), at=NOW - 8 * DAY_MS)  # before the window


def test_llm_usage_per_stage_in_the_namespace_of_its_episode(db: Database) -> None:
    db.write_sync(_seed)
    mine = db.read_sync(lambda s: analytics_sync(s, dto.AnalyticsParams(namespace=ALICE, days=7, now=NOW)))
    assert [u.model_dump() for u in mine.llm] == [
        {"stage": "l2.induction", "calls": 3, "failures": 1, "tokensIn": 2000, "tokensOut": 500},
        {"stage": "session.intent", "calls": 1, "failures": 0, "tokensIn": None, "tokensOut": None},
    ]
    every = db.read_sync(lambda s: analytics_sync(s, dto.AnalyticsParams(namespace="*", days=7, now=NOW)))
    assert {u.stage: u.calls for u in every.llm} == {"l2.induction": 4, "llm.test": 1, "session.intent": 1}
    assert mine.turn_start_latency_ms == dto.LatencySummaryDTO(n=0)
    assert mine.turns == [0] * 7 and mine.recall_hit_rate == [None] * 7


def test_ten_thousand_memories_are_counted_per_day_quickly(db: Database) -> None:
    start, days = window(NOW, 30)
    rows = [
        {
            "id": f"me_{i:05d}",
            "content": f"memory {i}",
            "created_at": start + (i % 30) * DAY_MS + 1_000,
            "updated_at": NOW,
            "owner_agent_kind": "cli",  # remembered memories count for every agent kind of the profile
            "owner_profile_id": "alice",
        }
        for i in range(10_000)
    ]
    db.write_sync(lambda s: s.execute(insert(MemoryRow), rows))
    started = time.perf_counter()
    result = db.read_sync(lambda s: analytics_sync(s, dto.AnalyticsParams(namespace=ALICE, days=30, now=NOW)))
    elapsed = time.perf_counter() - started
    assert result.days == days and sum(result.written["memory"]) == 10_000
    assert result.written["memory"][0] == 334 and result.written["memory"][-1] == 333
    assert elapsed < 1.0, f"analytics took {elapsed:.3f} s"
