"""Circuit breaker: terminal errors open it long, transient runs open it short, half-open admits one probe."""

from __future__ import annotations

from memos_bridge.llm.breaker import BreakerPolicy, BreakerState, CircuitBreaker

from .fakes import FakeClock

POLICY = BreakerPolicy(failure_threshold=3, transient_cooldown_s=60.0, terminal_cooldown_s=600.0)


def _breaker() -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    return CircuitBreaker("p", POLICY, clock=clock), clock


def test_a_terminal_error_opens_at_once_for_the_long_cooldown() -> None:
    breaker, clock = _breaker()
    assert breaker.allow()
    breaker.record_failure("terminal", "HTTP 401")
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow() and not breaker.would_allow()
    clock.advance(599)
    assert not breaker.allow()
    assert breaker.retry_in_s() == 1
    clock.advance(1)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.would_allow()


def test_half_open_admits_exactly_one_probe_and_success_closes() -> None:
    breaker, clock = _breaker()
    breaker.record_failure("terminal")
    clock.advance(600)
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # everyone else waits for its verdict
    assert not breaker.would_allow()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.allow() and breaker.allow()


def test_a_failed_terminal_probe_reopens_for_the_long_cooldown() -> None:
    breaker, clock = _breaker()
    breaker.record_failure("terminal")
    clock.advance(600)
    assert breaker.allow()
    breaker.record_failure("terminal")
    assert breaker.state is BreakerState.OPEN
    clock.advance(599)
    assert not breaker.allow()
    clock.advance(1)
    assert breaker.allow()


def test_a_failed_transient_probe_reopens_for_the_short_cooldown() -> None:
    breaker, clock = _breaker()
    breaker.record_failure("terminal")
    clock.advance(600)
    assert breaker.allow()
    breaker.record_failure("transient")
    assert breaker.state is BreakerState.OPEN
    clock.advance(60)
    assert breaker.allow()


def test_consecutive_transient_failures_open_for_the_short_cooldown() -> None:
    breaker, clock = _breaker()
    breaker.record_failure("transient")
    breaker.record_failure("transient")
    assert breaker.state is BreakerState.CLOSED
    breaker.record_failure("transient")
    assert breaker.state is BreakerState.OPEN
    clock.advance(59.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()


def test_a_success_resets_the_transient_count() -> None:
    breaker, _ = _breaker()
    breaker.record_failure("transient")
    breaker.record_failure("transient")
    breaker.record_success()
    breaker.record_failure("transient")
    breaker.record_failure("transient")
    assert breaker.state is BreakerState.CLOSED


def test_a_rejected_request_proves_the_provider_is_alive() -> None:
    breaker, _ = _breaker()
    breaker.record_failure("transient")
    breaker.record_failure("transient")
    breaker.record_failure("request")  # e.g. a 400 "context too long"
    breaker.record_failure("transient")
    assert breaker.state is BreakerState.CLOSED


def test_a_cancelled_probe_is_released() -> None:
    breaker, clock = _breaker()
    breaker.record_failure("terminal")
    clock.advance(600)
    assert breaker.allow()
    breaker.release()
    assert breaker.allow()


def test_snapshot_reports_state_and_reason() -> None:
    breaker, _ = _breaker()
    breaker.record_failure("terminal", "HTTP 402: billing")
    snap = breaker.snapshot()
    assert snap["state"] == "open"
    assert snap["lastFailure"] == "terminal"
    assert snap["lastReason"] == "HTTP 402: billing"
    assert snap["openedCount"] == 1
    assert snap["retryInS"] == 600
