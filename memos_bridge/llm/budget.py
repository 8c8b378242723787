"""LLM call budgets: at most N calls per episode and per rolling hour.

A budget is the user's cost ceiling, so it is enforced where calls are made (the facade), in both full and
lightweight mode, and a call *reserves* its slot before it is sent: concurrent callers cannot overshoot.
Every attempt counts — a corrective retry and a fallback to the host are calls too, and so is every
request a provider re-sends on its own (openai_compatible's HTTP retries, the host provider's rate-limit
back-off), which the provider reports with `charge_retry()` before sending it — because each one can cost
tokens. Zero means "no limit". Exhaustion is reported as `llm_budget_exhausted`, which callers treat
exactly like "no LLM configured".
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.breaker import Clock

HOUR_S: Final = 3600.0
#: Episodes whose counters are remembered; older ones are forgotten (they are long finished).
MAX_TRACKED_EPISODES: Final = 10_000


class CallBudget:
    """Per-episode and per-hour call counters with reservation semantics."""

    def __init__(self, per_episode: int, per_hour: int, *, clock: Clock = time.monotonic) -> None:
        self.per_episode = per_episode
        self.per_hour = per_hour
        self._clock = clock
        self._recent: deque[float] = deque()
        self._episodes: OrderedDict[str, int] = OrderedDict()
        self.refused = 0

    def _prune(self, now: float) -> None:
        while self._recent and now - self._recent[0] >= HOUR_S:
            self._recent.popleft()

    def check(self, episode_id: str | None) -> str | None:
        """Why a call would be refused now (`None` when it would be admitted); reserves nothing."""
        now = self._clock()
        self._prune(now)
        if self.per_hour and len(self._recent) >= self.per_hour:
            return f"hourly LLM budget of {self.per_hour} calls is used up"
        if self.per_episode and episode_id is not None and self._episodes.get(episode_id, 0) >= self.per_episode:
            return f"LLM budget of {self.per_episode} calls for episode {episode_id} is used up"
        return None

    def reserve(self, episode_id: str | None) -> None:
        """Count one call, or raise `llm_budget_exhausted` without counting it."""
        reason = self.check(episode_id)
        if reason is not None:
            self.refused += 1
            raise MemosError(ErrorCode.LLM_BUDGET_EXHAUSTED, reason, {"episodeId": episode_id})
        self._recent.append(self._clock())
        if episode_id is not None:
            self._episodes[episode_id] = self._episodes.get(episode_id, 0) + 1
            self._episodes.move_to_end(episode_id)
            while len(self._episodes) > MAX_TRACKED_EPISODES:
                self._episodes.popitem(last=False)

    def used_by(self, episode_id: str) -> int:
        return self._episodes.get(episode_id, 0)

    def snapshot(self) -> dict[str, Any]:
        now = self._clock()
        self._prune(now)
        return {
            "perEpisode": self.per_episode,
            "perHour": self.per_hour,
            "usedThisHour": len(self._recent),
            "refused": self.refused,
        }


#: How the call in progress pays for a provider's own retries (set by the facade around each provider
#: attempt; a context variable, because concurrent calls share one provider object).
_retry_charge: ContextVar[Callable[[], None] | None] = ContextVar("memos_llm_retry_charge", default=None)


@contextmanager
def charging_retries(charge: Callable[[], None]) -> Iterator[None]:
    """While the block runs, `charge_retry()` calls `charge` (which reserves a slot or raises)."""
    token = _retry_charge.set(charge)
    try:
        yield
    finally:
        _retry_charge.reset(token)


def charge_retry() -> None:
    """A provider is about to re-send a request of the call in progress: count it against that call's
    budgets, or raise `llm_budget_exhausted` (the provider then gives up with the error it had). Outside a
    facade call (a provider used on its own) there is no budget and nothing happens."""
    charge = _retry_charge.get()
    if charge is not None:
        charge()
