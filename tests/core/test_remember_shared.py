"""`memory.remember` of the same statement through several services on one PostgreSQL database: one row."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from sqlalchemy import func, select

from memos_bridge.contract import dto
from memos_bridge.storage.models import MemoryRow

pytestmark = pytest.mark.anyio


async def test_the_same_statement_remembered_at_once_through_two_services_is_one_memory(
    core_factory: Any, postgres_url: str
) -> None:
    """Each service reads before it inserts; without a lock both read "none" and both insert. Twelve calls
    per service at once make that race all but certain when nothing serialises them."""
    first = await core_factory(storage={"url": postgres_url})
    second = await core_factory(storage={"url": postgres_url})
    params = dto.MemoryRememberParams.model_validate(
        {"content": "The staging database listens on port 5434.", "type": "fact", "source": "user"}
    )
    results: list[dto.MemoryRememberResult] = []

    async def remember(core: Any) -> None:
        results.append(await core.remember(params))

    async with anyio.create_task_group() as group:
        for _ in range(12):
            group.start_soon(remember, first)
            group.start_soon(remember, second)
    rows = await first.db.read(lambda db: db.scalar(select(func.count()).select_from(MemoryRow)))
    assert rows == 1
    assert len({r.id for r in results}) == 1 and sum(not r.merged for r in results) == 1
    support = await first.db.read(lambda db: db.scalar(select(MemoryRow.support)))
    assert support == 24
