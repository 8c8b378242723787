"""LLMFacade with scripted providers: validation and retry, deadlines, budgets, breakers, fallback, logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import Field
from sqlalchemy import select

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.apilog import DatabaseApiLogSink, MemoryApiLogSink
from memos_bridge.llm.breaker import BreakerPolicy
from memos_bridge.llm.budget import CallBudget
from memos_bridge.llm.errors import NO_LLM_CODES, llm_error
from memos_bridge.llm.facade import LLMFacade, usage_tokens
from memos_bridge.llm.host import NoLLM
from memos_bridge.llm.prompts import RELATION_CLASSIFY, Prompt, RelationOutput, TextPrompt, _Output
from memos_bridge.llm.schema import Text40
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import ApiLogRow

from .fakes import FakeClock, SchemaAwareProvider, ScriptedProvider

pytestmark = pytest.mark.anyio


class Verdict(_Output):
    label: Text40
    score: float = Field(..., ge=0, le=1)


VERDICT = Prompt(
    id="test.verdict",
    version=3,
    description="test prompt",
    system="Judge the text. Reply with JSON.",
    user_template="TEXT: ${text}",
    schema=Verdict,
)
GOOD = '{"label": "fine", "score": 0.8}'
RELATION_VARS = {"first_user": "fix the build", "last_user": "fix the build", "last_agent": "done", "text": "thanks"}


def _facade(*providers: Any, **kwargs: Any) -> tuple[LLMFacade, MemoryApiLogSink]:
    sink = MemoryApiLogSink()
    return LLMFacade(list(providers), sink=sink, **kwargs), sink


def _terminal(provider: str = "openai_compatible") -> MemosError:
    return llm_error(ErrorCode.LLM_UNAVAILABLE, "HTTP 401: bad key", "terminal", provider=provider, status=401)


# ----------------------------------------------------------------------------------------------- answers


async def test_a_valid_answer_is_validated_and_logged() -> None:
    provider = ScriptedProvider(GOOD, usage={"prompt_tokens": 12, "completion_tokens": 5})
    facade, sink = _facade(provider)
    result = await facade.complete_json(VERDICT, {"text": "hello"}, op="judge", episode_id="ep_1")
    assert result == Verdict(label="fine", score=0.8)
    system, user = provider.calls[0]
    assert user.content == "TEXT: hello"
    assert "Judge the text." in system.content and '"label"' in system.content  # schema embedded for the host
    assert provider.kwargs[0]["temperature"] == 0.0
    (entry,) = sink.entries
    assert entry.tool_name == "llm:judge" and entry.success is True
    assert entry.input == {
        "prompt": "test.verdict",
        "version": 3,
        "op": "judge",
        "episodeId": "ep_1",
        "provider": "scripted",
        "attempt": 1,
    }
    assert entry.output["result"] == {"label": "fine", "score": 0.8}
    assert (entry.output["tokensIn"], entry.output["tokensOut"]) == (12, 5)
    stats = facade.stats()["ops"]["judge"]
    assert (stats["calls"], stats["failures"], stats["malformed"]) == (1, 0, 0)
    assert (stats["tokens_in"], stats["tokens_out"]) == (12, 5)


async def test_tolerant_parsing_and_clipping_need_no_retry() -> None:
    reply = '<think>hmm</think>Sure:\n```json\n{"label": "' + "x" * 100 + '", "score": 7,}\n```'
    provider = ScriptedProvider(reply)
    facade, _ = _facade(provider)
    with pytest.raises(MemosError):  # score 7 is out of range: this schema does not clamp
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    provider = ScriptedProvider(reply.replace('"score": 7', '"score": 0.5'))
    facade, _ = _facade(provider)
    result = await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert len(result.label) == 40 and result.label.endswith("…")
    assert len(provider.calls) == 1


async def test_malformed_then_valid_retries_once_with_a_correction() -> None:
    provider = ScriptedProvider("I would say it is fine.", GOOD)
    facade, sink = _facade(provider)
    result = await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert result.score == 0.8
    assert len(provider.calls) == 2
    retry = provider.calls[1]
    assert [m.role for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[2].content == "I would say it is fine."
    assert "could not be used" in retry[3].content and "JSON" in retry[3].content
    assert [(e.success, e.input["attempt"]) for e in sink.entries] == [(False, 1), (True, 2)]
    assert sink.entries[0].output["error"] == "llm_output_malformed"
    assert facade.stats()["ops"]["judge"]["malformed"] == 1


async def test_schema_violation_is_explained_in_the_correction() -> None:
    provider = ScriptedProvider('{"label": "x"}', GOOD)
    facade, _ = _facade(provider)
    await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert "score" in provider.calls[1][3].content


async def test_malformed_twice_raises_llm_output_malformed_without_fallback() -> None:
    primary = ScriptedProvider("nope", "still nope", name="primary")
    host = ScriptedProvider(GOOD, name="host")
    facade, sink = _facade(primary, host)
    with pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert info.value.code is ErrorCode.LLM_OUTPUT_MALFORMED
    assert len(primary.calls) == 2 and host.calls == []
    assert [e.success for e in sink.entries] == [False, False]
    assert info.value.code in NO_LLM_CODES


async def test_a_provider_timeout_raises_llm_timeout_quickly() -> None:
    provider = ScriptedProvider(GOOD, delay_s=5.0)
    facade, sink = _facade(provider)
    with anyio.fail_after(2):
        with pytest.raises(MemosError) as info:
            await facade.complete_json(VERDICT, {"text": "t"}, op="judge", timeout_ms=100)
    assert info.value.code is ErrorCode.LLM_TIMEOUT
    assert len(provider.calls) == 1
    assert provider.kwargs[0]["timeout_ms"] == 100
    (entry,) = sink.entries
    assert entry.success is False and entry.output["error"] == "llm_timeout"
    assert 50 <= entry.duration_ms < 1000


async def test_a_deadline_spent_on_the_primary_is_not_passed_on_to_the_host() -> None:
    primary = ScriptedProvider(GOOD, name="slow", delay_s=5.0)
    host = ScriptedProvider(GOOD, name="host")
    facade, _ = _facade(primary, host)
    with anyio.fail_after(2), pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge", timeout_ms=100)
    assert info.value.code is ErrorCode.LLM_TIMEOUT
    assert host.calls == []


async def test_a_failing_primary_leaves_the_rest_of_the_deadline_to_the_host() -> None:
    clock = FakeClock()
    primary = ScriptedProvider(_terminal(), name="openai_compatible")
    host = ScriptedProvider(GOOD, name="host")
    facade, _ = _facade(primary, host, clock=clock)

    def spend(messages: Any) -> str:
        clock.advance(9.0)  # the primary took 9 of the 10 seconds before failing
        raise _terminal()

    primary.replies = [spend]
    await facade.complete_json(VERDICT, {"text": "t"}, op="judge", timeout_ms=10_000)
    assert host.kwargs[0]["timeout_ms"] == 1000


async def test_an_unexpected_provider_exception_becomes_llm_unavailable() -> None:
    facade, _ = _facade(ScriptedProvider(RuntimeError("bug")))
    with pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert info.value.code is ErrorCode.LLM_UNAVAILABLE


async def test_schema_aware_providers_get_the_schema_as_a_parameter() -> None:
    provider = SchemaAwareProvider('{"relation": "follow-up", "confidence": "90%"}')
    facade, _ = _facade(provider)
    result = await facade.complete_json(RELATION_CLASSIFY, RELATION_VARS, op="relation")
    assert result == RelationOutput(relation="follow_up", confidence=0.9, reason="")
    schema = provider.schemas[0]
    assert schema is not None and schema.name == "session_relation_classify" and schema.strict
    assert schema.schema["additionalProperties"] is False
    assert set(schema.schema["required"]) == {"relation", "confidence", "reason"}
    assert "JSON schema" not in provider.calls[0][0].content  # no textual hint on top of the parameter


async def test_complete_text_strips_thinking_and_retries_an_empty_answer() -> None:
    provider = ScriptedProvider("<think>...</think>  ", "I ran the tests because the build was red.")
    facade, sink = _facade(provider)
    why = TextPrompt(
        id="test.why", version=1, description="plain text", system="Say why.", user_template="${task}: ${step}"
    )
    text = await facade.complete_text(why, {"task": "t", "step": "s"}, op="synth")
    assert text == "I ran the tests because the build was red."
    assert [e.success for e in sink.entries] == [False, True]


async def test_raw_complete_passes_messages_unchanged() -> None:
    from memos_bridge.llm.base import ChatMessage

    provider = ScriptedProvider("pong")
    facade, sink = _facade(provider)
    completion = await facade.complete([ChatMessage("user", "ping")], max_tokens=8, op="llm.test")
    assert completion.text == "pong" and provider.calls[0] == [ChatMessage("user", "ping")]
    assert provider.kwargs[0]["max_tokens"] == 8
    assert sink.entries[0].tool_name == "llm:llm.test" and sink.entries[0].input["prompt"] is None


async def test_missing_prompt_variable_is_a_programming_error() -> None:
    facade, _ = _facade(ScriptedProvider(GOOD))
    with pytest.raises(ValueError, match="text"):
        await facade.complete_json(VERDICT, {}, op="judge")


# ----------------------------------------------------------------------------------------------- budgets


async def test_budget_per_episode_is_enforced_without_calling_the_provider() -> None:
    provider = ScriptedProvider(GOOD)
    facade, _ = _facade(provider, budget=CallBudget(per_episode=2, per_hour=0))
    for _ in range(2):
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge", episode_id="ep_a")
    assert not facade.available("ep_a") and facade.available("ep_b") and facade.available()
    with pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge", episode_id="ep_a")
    assert info.value.code is ErrorCode.LLM_BUDGET_EXHAUSTED and info.value.code in NO_LLM_CODES
    assert len(provider.calls) == 2
    await facade.complete_json(VERDICT, {"text": "t"}, op="judge", episode_id="ep_b")
    assert facade.stats()["ops"]["judge"]["budget_refused"] == 1


async def test_a_corrective_retry_counts_against_the_episode_budget() -> None:
    provider = ScriptedProvider("junk", GOOD)
    facade, _ = _facade(provider, budget=CallBudget(per_episode=1, per_hour=0))
    with pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge", episode_id="ep_a")
    assert info.value.code is ErrorCode.LLM_BUDGET_EXHAUSTED
    assert len(provider.calls) == 1


async def test_budget_per_hour_rolls_with_the_clock() -> None:
    clock = FakeClock()
    provider = ScriptedProvider(GOOD)
    facade, _ = _facade(provider, budget=CallBudget(per_episode=0, per_hour=3, clock=clock), clock=clock)
    for _ in range(3):
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
        clock.advance(600)
    assert not facade.available()
    with pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert info.value.code is ErrorCode.LLM_BUDGET_EXHAUSTED
    clock.advance(1800)  # the first call is now an hour old
    assert facade.available()
    await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert len(provider.calls) == 4
    assert facade.stats()["budget"]["usedThisHour"] == 3


# ----------------------------------------------------------------------------------------------- chain


async def test_a_terminal_error_falls_back_to_the_host_and_pauses_the_provider() -> None:
    clock = FakeClock()
    primary = ScriptedProvider(_terminal(), name="openai_compatible")
    host = ScriptedProvider(GOOD, name="host")
    policy = BreakerPolicy(failure_threshold=3, transient_cooldown_s=60, terminal_cooldown_s=600)
    facade, sink = _facade(primary, host, breaker_policy=policy, clock=clock)

    assert (await facade.complete_json(VERDICT, {"text": "t"}, op="judge")).label == "fine"
    assert [(e.input["provider"], e.success) for e in sink.entries] == [("openai_compatible", False), ("host", True)]
    assert sink.entries[0].output == {"error": "llm_unavailable", "message": "HTTP 401: bad key", "failure": "terminal"}
    assert facade.stats()["ops"]["judge"]["fallbacks"] == 1

    await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert len(primary.calls) == 1 and len(host.calls) == 2  # circuit open: the primary is not even asked

    clock.advance(600)  # cool-down over: one probe goes to the primary (still failing), then the host
    await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert len(primary.calls) == 2 and len(host.calls) == 3
    assert facade.breaker(0).snapshot()["state"] == "open"


async def test_without_a_fallback_an_open_circuit_is_reported() -> None:
    clock = FakeClock()
    primary = ScriptedProvider(_terminal(), name="openai_compatible")
    facade, _ = _facade(primary, clock=clock)
    with pytest.raises(MemosError) as first:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert first.value.code is ErrorCode.LLM_UNAVAILABLE
    assert not facade.available()
    with pytest.raises(MemosError) as second:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert second.value.code is ErrorCode.LLM_CIRCUIT_OPEN and second.value.code in NO_LLM_CODES
    assert len(primary.calls) == 1


async def test_transient_failures_open_the_breaker_after_the_threshold() -> None:
    clock = FakeClock()
    down = llm_error(ErrorCode.LLM_RATE_LIMITED, "HTTP 429", "transient", provider="p")
    primary = ScriptedProvider(down, name="p")
    facade, _ = _facade(primary, breaker_policy=BreakerPolicy(failure_threshold=2), clock=clock)
    for _ in range(2):
        with pytest.raises(MemosError) as info:
            await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
        assert info.value.code is ErrorCode.LLM_RATE_LIMITED
    with pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert info.value.code is ErrorCode.LLM_CIRCUIT_OPEN
    assert len(primary.calls) == 2


async def test_an_unavailable_primary_is_skipped_for_the_host() -> None:
    primary = ScriptedProvider(GOOD, name="openai_compatible", available=False)
    host = ScriptedProvider(GOOD, name="host")
    facade, sink = _facade(primary, host)
    assert facade.available()
    await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert primary.calls == [] and len(host.calls) == 1
    assert [e.input["provider"] for e in sink.entries] == ["host"]


async def test_no_provider_available_raises_llm_unavailable_without_logging() -> None:
    facade, sink = _facade(NoLLM())
    assert not facade.available() and facade.name == "none"
    with pytest.raises(MemosError) as info:
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    assert info.value.code is ErrorCode.LLM_UNAVAILABLE
    assert sink.entries == []


async def test_cancellation_releases_the_half_open_probe() -> None:
    clock = FakeClock()
    primary = ScriptedProvider(_terminal(), GOOD, name="p")
    facade, _ = _facade(primary, clock=clock)
    with pytest.raises(MemosError):
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge")
    clock.advance(600)
    primary.delay_s = 5.0
    with anyio.move_on_after(0.05):
        await facade.complete_json(VERDICT, {"text": "t"}, op="judge", timeout_ms=10_000)
    primary.delay_s = 0.0
    assert facade.breaker(0).would_allow()  # the cancelled probe did not wedge the breaker
    assert (await facade.complete_json(VERDICT, {"text": "t"}, op="judge")).label == "fine"
    assert facade.breaker(0).snapshot()["state"] == "closed"


# ----------------------------------------------------------------------------------------------- api_logs


async def test_database_sink_writes_api_log_rows(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'logs.db'}")
    db.open()
    try:
        sink = DatabaseApiLogSink(db)
        facade = LLMFacade([ScriptedProvider("junk", GOOD, name="host")], sink=sink)
        await facade.complete_json(VERDICT, {"text": "secret user text"}, op="judge", episode_id="ep_9")
        assert await facade.flush_logs()
        rows = db.read_sync(lambda s: list(s.scalars(select(ApiLogRow).order_by(ApiLogRow.id))))
    finally:
        db.close()
    assert [(r.tool_name, r.success) for r in rows] == [("llm:judge", False), ("llm:judge", True)]
    assert rows[0].output_json["error"] == "llm_output_malformed"
    assert rows[1].input_json["episodeId"] == "ep_9" and rows[1].input_json["attempt"] == 2
    assert rows[1].output_json["result"] == {"label": "fine", "score": 0.8}
    assert all(r.called_at > 0 for r in rows)
    assert "secret user text" not in json.dumps([r.input_json for r in rows])


def test_usage_tokens_reads_both_spellings() -> None:
    assert usage_tokens({"prompt_tokens": 3, "completion_tokens": 4}) == (3, 4)
    assert usage_tokens({"promptTokens": 5, "completionTokens": 6}) == (5, 6)
    assert usage_tokens({"prompt_tokens": True}) == (0, 0)
