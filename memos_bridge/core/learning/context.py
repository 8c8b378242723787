"""What every learning stage needs, bundled once so stage signatures stay short and tests can build one.

Stages are plain async functions of a `LearningContext` and an episode id. They read and write through
`db` (worker threads, one writer), keep the in-memory vector indexes current through `vectors`, ask the LLM
only through `llm` (the facade: budgets, breakers, validation and `api_logs` come with it) and fall back to
their deterministic path whenever `llm.available(episode_id)` is false or a call raises `MemosError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from memos_bridge.config import Settings
from memos_bridge.core.events import EventBus
from memos_bridge.core.vector_store import VectorStore
from memos_bridge.embedding.base import Embedder
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.storage.database import Database
from memos_bridge.timeutil import now_ms


@dataclass
class LearningContext:
    db: Database
    vectors: VectorStore
    embedder: Embedder
    llm: LLMFacade
    events: EventBus
    settings: Settings
    clock: Callable[[], int] = field(default=now_ms)  # epoch ms; tests pass a fake clock

    def llm_ready(self, episode_id: str | None, enabled: bool = True) -> bool:
        """Whether a stage should try the LLM now (configured on, reachable, within budget)."""
        return enabled and self.llm.available(episode_id)
