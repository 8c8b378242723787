"""LLM relevance filter: model order, empty selection respected, documented fallback cutoff."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.base import ChatMessage, Completion
from memos_bridge.retrieval.fusion import Candidate
from memos_bridge.retrieval.llm_filter import llm_filter, parse_selection
from memos_bridge.retrieval.render import TraceSnippet

from .test_engine import capture, start

pytestmark = pytest.mark.anyio


class ScriptedLLM:
    name = "scripted"

    def __init__(self, reply: str = "", *, delay: float = 0.0, error: bool = False) -> None:
        self.reply, self.delay, self.error = reply, delay, error
        self.calls: list[list[ChatMessage]] = []

    def available(self) -> bool:
        return True

    async def complete(self, messages: list[ChatMessage], **_: Any) -> Completion:
        self.calls.append(messages)
        if self.delay:
            await anyio.sleep(self.delay)
        if self.error:
            raise MemosError(ErrorCode.LLM_UNAVAILABLE, "down")
        return Completion(text=self.reply, provider=self.name)


def _cands(scores: list[float]) -> list[Candidate]:
    out = []
    for i, score in enumerate(scores):
        c = Candidate(kind="trace", ref_id=f"tr_{i}", tier=2)
        c.add("vec_summary", i, score)
        c.payload = TraceSnippet(ref_id=c.ref_id, ts=0, summary=f"memory {i}", user_text="", agent_text="")
        out.append(c)
    return out


async def _run(llm: Any, cands: list[Candidate], **kw: Any) -> Any:
    opts: dict[str, Any] = {"max_keep": 2, "min_candidates": 2, "timeout_s": 1.0, "rrf_k": 60, **kw}
    return await llm_filter("the request", cands, llm, **opts)


async def test_keeps_at_most_n_in_the_models_order() -> None:
    llm = ScriptedLLM('```json\n{"ranked": [3, 1, 2], "sufficient": true}\n```')
    out = await _run(llm, _cands([0.9, 0.8, 0.7]))
    assert [c.ref_id for c in out.kept] == ["tr_2", "tr_0"] and out.source == "llm" and out.sufficient is True
    assert "[3] (trace) memory 2" in llm.calls[0][1].content


async def test_an_empty_selection_is_respected() -> None:
    out = await _run(ScriptedLLM('{"ranked": [], "sufficient": false}'), _cands([0.9, 0.8]))
    assert out.kept == [] and out.source == "llm"


@pytest.mark.parametrize(
    "llm", [ScriptedLLM("no json here"), ScriptedLLM(error=True), ScriptedLLM('{"ranked": [1]}', delay=5)]
)
async def test_failures_fall_back_to_the_score_cutoff(llm: ScriptedLLM) -> None:
    out = await _run(llm, _cands([1.0, 0.75, 0.5]), timeout_s=0.2)
    assert out.source == "cutoff" and [c.ref_id for c in out.kept] == ["tr_0", "tr_1"]


async def test_passthrough_without_llm_or_with_too_few_candidates() -> None:
    cands = _cands([0.9, 0.2])
    assert (await _run(None, cands)).kept == cands
    llm = ScriptedLLM('{"ranked": []}')
    assert (await _run(llm, cands[:1])).source == "passthrough" and not llm.calls


def test_parse_selection_ignores_invented_and_repeated_numbers() -> None:
    assert parse_selection('{"ranked": [2, 2, 9, "1", "x"]}', 3) == ([2, 1], None)
    assert parse_selection('{"selected": [1]}', 3) == ([1], None)
    assert parse_selection("[1, 2]", 3) is None


async def test_engine_uses_the_filter_when_enabled(core_factory: Any) -> None:
    llm = ScriptedLLM('{"ranked": [], "sufficient": false}')
    core = await core_factory(llm=llm, retrieval={"llm_filter": True, "llm_filter_min_candidates": 1})
    await capture(core, "se_a", "configure the nginx reverse proxy", "Added proxy_pass and reloaded nginx.")
    result = await start(core, "configure the nginx reverse proxy")
    assert llm.calls and result.hits == [] and result.injected_context == ""
    assert result.stats is not None and result.stats.llm_filter == "llm"
