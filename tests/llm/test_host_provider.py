"""The `host` provider: rate-limit back-off (bounded, hinted, budgeted) and a host without an LLM."""

from __future__ import annotations

from typing import Any

import pytest

from memos_bridge.contract.errors import METHOD_NOT_FOUND, ErrorCode, MemosError
from memos_bridge.llm.base import ChatMessage
from memos_bridge.llm.budget import CallBudget
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.host import HostLLM

pytestmark = pytest.mark.anyio

MESSAGES = [ChatMessage("user", "hi")]


def _rate_limited(retry_after_ms: int | None = None) -> MemosError:
    """What `Peer.request` raises when the host answers with `data.code = llm_rate_limited`."""
    data: dict[str, Any] = {"name": "MemosError", "code": "llm_rate_limited", "message": "slow down"}
    if retry_after_ms is not None:
        data["details"] = {"retryAfterMs": retry_after_ms}
    remote = {"code": -32000, "message": "slow down", "data": data}
    return MemosError(
        ErrorCode.LLM_RATE_LIMITED, "remote rate limit", {"method": "host.llm.complete", "remote": remote}
    )


class FakeHost:
    """Answers `host.llm.complete` from a script: exceptions are raised, dicts returned."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.params: list[dict[str, Any]] = []

    async def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        assert method == "host.llm.complete"
        self.params.append(params)
        reply = self.script[min(len(self.params), len(self.script)) - 1]
        if isinstance(reply, BaseException):
            raise reply
        return reply


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _provider(host: FakeHost, **kwargs: Any) -> tuple[HostLLM, Sleeps]:
    sleeps = Sleeps()
    return HostLLM(lambda: host, 10_000, sleep=sleeps, **kwargs), sleeps


async def test_a_rate_limited_host_is_asked_again_after_a_back_off() -> None:
    host = FakeHost(_rate_limited(), _rate_limited(retry_after_ms=1_500), {"text": "pong"})
    provider, sleeps = _provider(host, max_retries=2, backoff_ms=200)
    completion = await provider.complete(MESSAGES, timeout_ms=10_000)
    assert completion.text == "pong" and len(host.params) == 3
    assert 0.1 <= sleeps.delays[0] <= 0.2 and sleeps.delays[1] == pytest.approx(1.5)  # jittered, then the hint
    assert host.params[2]["timeoutMs"] < 10_000  # later attempts get only the time that is left


async def test_retries_are_bounded_by_count_time_and_budget() -> None:
    host = FakeHost(_rate_limited())
    provider, sleeps = _provider(host, max_retries=2, backoff_ms=1)
    with pytest.raises(MemosError) as many:
        await provider.complete(MESSAGES)
    assert many.value.code is ErrorCode.LLM_RATE_LIMITED and len(host.params) == 3
    # a hint longer than the call's timeout ends the call at once
    host = FakeHost(_rate_limited(retry_after_ms=60_000))
    provider, sleeps = _provider(host, max_retries=2, backoff_max_ms=120_000)
    with pytest.raises(MemosError):
        await provider.complete(MESSAGES, timeout_ms=2_000)
    assert len(host.params) == 1 and sleeps.delays == []
    # through the facade every retry is a call on the episode's budget
    host = FakeHost(_rate_limited(), _rate_limited(), {"text": "late"})
    provider, _ = _provider(host, max_retries=3, backoff_ms=1)
    facade = LLMFacade([provider], budget=CallBudget(2, 0))
    with pytest.raises(MemosError) as refused:
        await facade.complete(MESSAGES, op="test", episode_id="ep_1")
    assert refused.value.code is ErrorCode.LLM_RATE_LIMITED and len(host.params) == 2
    assert facade.stats()["ops"]["test"]["retries"] == 1 and facade.stats()["ops"]["test"]["budget_refused"] == 1


async def test_other_failures_are_not_retried_and_a_host_without_an_llm_is_remembered() -> None:
    host = FakeHost(MemosError(ErrorCode.LLM_TIMEOUT, "slow"))
    provider, sleeps = _provider(host)
    with pytest.raises(MemosError) as timeout:
        await provider.complete(MESSAGES)
    assert timeout.value.code is ErrorCode.LLM_TIMEOUT and len(host.params) == 1 and sleeps.delays == []
    missing = {"code": METHOD_NOT_FOUND, "message": "Method not found"}
    host = FakeHost(MemosError(ErrorCode.INTERNAL, "no handler", {"remote": missing}))
    provider, _ = _provider(host)
    with pytest.raises(MemosError) as unavailable:
        await provider.complete(MESSAGES)
    assert unavailable.value.code is ErrorCode.LLM_UNAVAILABLE and provider.available() is False
