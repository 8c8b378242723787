"""Circuit breaker per LLM provider.

Background work (reward, L2, skills) calls the LLM on its own schedule, so nothing naturally stops it
from hammering a provider that can only fail. The breaker does:

* **closed** — calls pass. A `terminal` failure (bad key, billing) opens it at once for the long
  cool-down; `failure_threshold` consecutive `transient` failures open it for the short one.
* **open** — calls are refused without touching the provider until the cool-down has elapsed.
* **half-open** — exactly one probe call is let through. Success closes the breaker; a failure re-opens
  it (terminal → long cool-down again, otherwise the short one). A probe whose caller was cancelled
  before it could report is released, so the next caller may probe instead of the breaker sticking.

`request` failures (the provider answered but rejected this one request) prove the provider is alive,
so they count as success. Time comes from an injectable monotonic clock so tests drive the cool-downs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from memos_bridge.llm.errors import FailureKind

#: Monotonic seconds; `time.monotonic` in production, a fake in tests.
Clock = Callable[[], float]


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerPolicy:
    """Thresholds of one breaker (see `LLMSettings` for the documented defaults)."""

    failure_threshold: int = 5
    transient_cooldown_s: float = 60.0
    terminal_cooldown_s: float = 600.0


class CircuitBreaker:
    """Closed / open / half-open state of one provider. Not thread-safe: it lives on the event loop."""

    def __init__(self, name: str, policy: BreakerPolicy | None = None, *, clock: Clock = time.monotonic) -> None:
        self.name = name
        self.policy = policy or BreakerPolicy()
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._open_until = 0.0
        self._consecutive_failures = 0
        self._probe_in_flight = False
        self._last_failure: FailureKind | None = None
        self._last_reason = ""
        self._opened_count = 0

    @property
    def state(self) -> BreakerState:
        """The current state; an open breaker whose cool-down has passed reads as half-open."""
        if self._state is BreakerState.OPEN and self._clock() >= self._open_until:
            return BreakerState.HALF_OPEN
        return self._state

    def would_allow(self) -> bool:
        """Whether `allow()` would let a call through now, without taking the half-open probe."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        return state is BreakerState.HALF_OPEN and not self._probe_in_flight

    def allow(self) -> bool:
        """Admit one call. In half-open state the first caller becomes the probe; others are refused."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.OPEN or self._probe_in_flight:
            return False
        self._state = BreakerState.HALF_OPEN
        self._probe_in_flight = True
        return True

    def record_success(self) -> None:
        self._state = BreakerState.CLOSED
        self._consecutive_failures = 0
        self._probe_in_flight = False

    def record_failure(self, kind: FailureKind, reason: str = "") -> None:
        """Account for a failed call; may open the breaker."""
        if kind == "request":
            self.record_success()
            return
        self._last_failure = kind
        self._last_reason = reason[:200]
        self._consecutive_failures += 1
        if kind == "terminal":
            self._open(self.policy.terminal_cooldown_s)
        elif self._probe_in_flight or self._consecutive_failures >= self.policy.failure_threshold:
            self._open(self.policy.transient_cooldown_s)

    def release(self) -> None:
        """The admitted call ended without a verdict (cancelled): let another caller probe."""
        self._probe_in_flight = False

    def retry_in_s(self) -> float:
        """Seconds until an open breaker admits a probe (0 when it would now)."""
        return max(0.0, self._open_until - self._clock()) if self._state is BreakerState.OPEN else 0.0

    def _open(self, cooldown_s: float) -> None:
        self._state = BreakerState.OPEN
        self._open_until = self._clock() + cooldown_s
        self._probe_in_flight = False
        self._opened_count += 1

    def snapshot(self) -> dict[str, Any]:
        """State for health/stats output."""
        return {
            "state": self.state.value,
            "consecutiveFailures": self._consecutive_failures,
            "retryInS": round(self.retry_in_s(), 3),
            "lastFailure": self._last_failure,
            "lastReason": self._last_reason,
            "openedCount": self._opened_count,
        }
