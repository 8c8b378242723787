"""After warm-up the service freezes what start-up left alive, so full garbage collections stay short."""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable

import pytest

from memos_bridge.core.facade import MemoryCore
from memos_bridge.server import _warm_up_then_freeze

pytestmark = pytest.mark.anyio


async def test_warm_up_freezes_the_start_up_heap(core_factory: Callable[..., Awaitable[MemoryCore]]) -> None:
    core = await core_factory()
    gc.unfreeze()
    try:
        await _warm_up_then_freeze(core)
        assert core.embedder.status().loaded  # the model and indexes load first, so they are frozen too
        frozen = gc.get_freeze_count()
        assert frozen > 50_000  # the interpreter, SQLAlchemy, pydantic, the model's wrappers
        # A full collection walks the objects it tracks: now a small fraction of what start-up left alive.
        assert len(gc.get_objects()) < frozen / 5
    finally:
        gc.unfreeze()
