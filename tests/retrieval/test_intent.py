"""Intent heuristics (EN + ZH), personal-fact detection, the injection scheduler, and the LLM fallback path."""

from __future__ import annotations

import anyio
import pytest

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.base import ChatMessage, Completion
from memos_bridge.retrieval.intent import (
    ALL_TIERS,
    InjectionPlan,
    Intent,
    classify_intent,
    classify_intent_heuristic,
    is_personal_fact_question,
    parse_llm_intent,
    schedule_injection,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------------------------------------
# Heuristics
# --------------------------------------------------------------------------------------------------------

HEURISTIC_CASES: list[tuple[str, str, float]] = [
    # empty
    ("", "chitchat", 0.9),
    ("   \n ", "chitchat", 0.9),
    # meta: memos commands and other leading slash commands
    ("/memos status", "meta", 0.98),
    ("/memory", "meta", 0.98),
    ("/memo list recent", "meta", 0.98),
    ("/clear", "meta", 0.98),
    ("／memos 状态", "meta", 0.98),
    # chitchat EN (punctuation and emoji allowed)
    ("hi", "chitchat", 0.9),
    ("Hello!", "chitchat", 0.9),
    ("thanks!! 🙏", "chitchat", 0.9),
    ("Thank you so much :)", "chitchat", 0.9),
    ("ok", "chitchat", 0.9),
    ("Okay 👍", "chitchat", 0.9),
    ("great, thanks", "chitchat", 0.9),
    ("cool", "chitchat", 0.9),
    ("bye", "chitchat", 0.9),
    ("Good morning!", "chitchat", 0.9),
    ("hi there, how are you?", "chitchat", 0.9),
    ("👍", "chitchat", 0.9),
    # chitchat ZH
    ("你好", "chitchat", 0.9),
    ("谢谢！", "chitchat", 0.9),
    ("好的", "chitchat", 0.9),
    ("嗯", "chitchat", 0.9),
    ("嗯嗯", "chitchat", 0.9),
    ("收到", "chitchat", 0.9),
    ("再见", "chitchat", 0.9),
    ("早上好～", "chitchat", 0.9),
    ("好的，谢谢", "chitchat", 0.9),
    ("太棒了👍", "chitchat", 0.9),
    # memory probe EN
    ("Do you remember what we decided about the schema?", "memory_probe", 0.88),
    ("did I tell you about my trip?", "memory_probe", 0.88),
    ("What did we discuss yesterday?", "memory_probe", 0.88),
    ("last time you suggested redis, why?", "memory_probe", 0.88),
    ("Earlier you said to use uv", "memory_probe", 0.88),
    ("can you recall the port we used?", "memory_probe", 0.88),
    ("remind me what the deadline was", "memory_probe", 0.88),
    ("recall what we agreed on", "memory_probe", 0.88),
    # memory probe ZH
    ("上次我们聊到哪了", "memory_probe", 0.88),
    ("我们之前聊过这个", "memory_probe", 0.88),
    ("你还记得我的名字吗", "memory_probe", 0.88),
    ("回忆一下昨天的讨论", "memory_probe", 0.88),
    ("记得吗？那个 bug", "memory_probe", 0.88),
    ("之前说的那个方案怎么样了", "memory_probe", 0.88),
    # task EN (imperative verb, possibly after fillers)
    ("fix the failing test in parser.py", "task", 0.75),
    ("Please write a function to parse dates", "task", 0.75),
    ("can you refactor this class", "task", 0.75),
    ("explain this error", "task", 0.75),
    ("deploy to staging", "task", 0.75),
    # task ZH
    ("帮我写一个排序函数", "task", 0.75),
    ("请修复这个bug", "task", 0.75),
    ("实现一个LRU缓存", "task", 0.75),
    ("分析一下这个日志", "task", 0.75),
    ("生成单元测试", "task", 0.75),
    # long messages
    (" ".join(["word"] * 40), "task", 0.6),
    ("这是一个很长的句子" * 5, "task", 0.6),
    # no signal
    ("why is the sky blue", "unknown", 0.4),
    ("is it raining", "unknown", 0.4),
    ("请问现在几点", "unknown", 0.4),
]

# Tricky negatives: look like one kind, are another.
TRICKY_CASES: list[tuple[str, str]] = [
    ("ok now fix the tests", "task"),  # starts with an ack, but asks for work
    ("thanks, also add a test", "task"),
    ("great, now run the tests", "task"),
    ("好的，帮我生成测试", "task"),
    ("谢谢，再帮我写个脚本", "task"),
    ("hi, do you remember my name?", "memory_probe"),  # greeting + probe
    ("hello world program in rust", "unknown"),  # "hello" is not a greeting here
    ("implement precision and recall metrics", "task"),  # "recall" is not a memory reference
    ("remember to run the tests before committing", "unknown"),  # an instruction, not a probe
    ("在提交之前运行测试", "unknown"),  # 之前 = "before", not "previously"
    ("what did I do wrong here?", "unknown"),
    ("/usr/bin/python is broken", "unknown"),  # a path, not a slash command
    ("/tmp is full", "unknown"),
]


@pytest.mark.parametrize(("text", "kind", "confidence"), HEURISTIC_CASES)
def test_heuristic_table(text: str, kind: str, confidence: float) -> None:
    intent = classify_intent_heuristic(text)
    assert (intent.kind, intent.confidence) == (kind, confidence), intent
    assert intent.source == "heuristic"
    assert intent.reason


@pytest.mark.parametrize(("text", "kind"), TRICKY_CASES)
def test_heuristic_tricky_negatives(text: str, kind: str) -> None:
    assert classify_intent_heuristic(text).kind == kind


def test_long_run_of_thanks_is_not_chitchat() -> None:
    """The 48-character cap keeps a long message out of the skip path even if every word is an ack."""
    intent = classify_intent_heuristic("thank you " * 6)
    assert intent.kind != "chitchat"


def test_heuristic_never_raises_on_odd_input() -> None:
    for text in ["\x00", "？？？", "'", "/", "/ memos", "🙂" * 100, "a" * 10_000, "我" * 10_000]:
        assert isinstance(classify_intent_heuristic(text), Intent)


# --------------------------------------------------------------------------------------------------------
# Personal-fact questions
# --------------------------------------------------------------------------------------------------------

PERSONAL_FACT = [
    "what is my name?",
    "What's my favorite color",
    "where do I live",
    "when is my birthday",
    "do I have a dog?",
    "who is my manager?",
    "how old am I",
    "do you remember my wife's name?",
    "我的名字是什么",
    "我住在哪",
    "我叫什么",
    "我的生日是哪天",
    "你还记得我的狗叫什么吗",
]
NOT_PERSONAL_FACT = [
    "how do I fix my build?",
    "how to set up my environment",
    "what does my function return",
    "why are my tests failing",
    "do I have to restart the server?",
    "what did we decide about the schema",
    "fix the bug",
    "",
    "我的代码怎么修复",
    "我的程序为什么报错",
    "如何配置我的服务器",
    "上次我们聊了什么",
]


@pytest.mark.parametrize("text", PERSONAL_FACT)
def test_personal_fact_questions(text: str) -> None:
    assert is_personal_fact_question(text)


@pytest.mark.parametrize("text", NOT_PERSONAL_FACT)
def test_not_personal_fact_questions(text: str) -> None:
    assert not is_personal_fact_question(text)


def test_personal_fact_question_is_a_weak_memory_probe() -> None:
    """Without a past-reference phrase it is a memory probe, but weak enough that an LLM still decides."""
    intent = classify_intent_heuristic("what is my name?")
    assert intent.kind == "memory_probe"
    assert intent.confidence < 0.85


# --------------------------------------------------------------------------------------------------------
# Scheduler
# --------------------------------------------------------------------------------------------------------


def _plan(kind: str, confidence: float, text: str = "x", relation: str | None = None) -> InjectionPlan:
    return schedule_injection(Intent(kind, confidence, "test"), text, relation)  # type: ignore[arg-type]


def test_confident_chitchat_skips() -> None:
    plan = _plan("chitchat", 0.9, "hi")
    assert (plan.scenario, plan.retrieve, plan.tiers) == ("chitchat", False, frozenset())


def test_weak_chitchat_retrieves_everything() -> None:
    plan = _plan("chitchat", 0.5, "hi?")
    assert (plan.scenario, plan.retrieve, plan.tiers) == ("unknown_safe", True, ALL_TIERS)


def test_chitchat_threshold_is_inclusive() -> None:
    assert _plan("chitchat", 0.6).retrieve is False


def test_meta_skips_even_with_a_relation() -> None:
    plan = _plan("meta", 0.98, "/memos status", relation="new_task")
    assert (plan.scenario, plan.retrieve, plan.tiers) == ("meta", False, frozenset())


def test_memory_probe_personal_fact_uses_tier_2_profile() -> None:
    plan = _plan("memory_probe", 0.88, "do you remember my name?")
    assert plan.scenario == "memory_probe"
    assert plan.retrieve
    assert plan.tiers == frozenset({2})
    assert plan.profile == "personal_fact"


def test_memory_probe_personal_fact_zh() -> None:
    plan = _plan("memory_probe", 0.88, "我住在哪")
    assert (plan.tiers, plan.profile) == (frozenset({2}), "personal_fact")


def test_memory_probe_general_uses_tiers_1_and_2() -> None:
    plan = _plan("memory_probe", 0.88, "what did we decide about the schema?", relation="new_task")
    assert (plan.scenario, plan.tiers, plan.profile) == ("memory_probe", frozenset({1, 2}), "default")


def test_procedural_memory_probe_is_not_personal_fact() -> None:
    plan = _plan("memory_probe", 0.88, "last time, how did I fix my build?")
    assert (plan.tiers, plan.profile) == (frozenset({1, 2}), "default")


@pytest.mark.parametrize(
    ("kind", "relation", "scenario"),
    [
        ("task", "new_task", "new_task"),
        ("unknown", "new_task", "new_task"),
        ("task", "revision", "follow_up"),
        ("task", "follow_up", "follow_up"),
        ("unknown", "follow_up", "follow_up"),
        ("task", "unknown", "follow_up"),
        ("unknown", None, "unknown_safe"),
        ("task", None, "task"),
    ],
)
def test_relation_and_intent_scenarios(kind: str, relation: str | None, scenario: str) -> None:
    plan = _plan(kind, 0.75, "fix it", relation)
    assert plan.scenario == scenario
    assert plan.retrieve
    assert plan.tiers == ALL_TIERS
    assert plan.profile == "default"


def test_end_to_end_heuristic_to_plan() -> None:
    for text, scenario, retrieve in [
        ("谢谢", "chitchat", False),
        ("/memos forget", "meta", False),
        ("你还记得我叫什么吗", "memory_probe", True),
        ("write a parser", "task", True),
        ("hmm, interesting point about tides", "unknown_safe", True),
    ]:
        plan = schedule_injection(classify_intent_heuristic(text), text)
        assert (plan.scenario, plan.retrieve) == (scenario, retrieve), text


# --------------------------------------------------------------------------------------------------------
# LLM path
# --------------------------------------------------------------------------------------------------------


class ScriptedLLM:
    """Returns a fixed text; records calls. `delay_s` and `error` simulate a slow or failing provider."""

    name = "scripted"

    def __init__(
        self, text: str = "", *, delay_s: float = 0.0, error: Exception | None = None, available: bool = True
    ) -> None:
        self.text = text
        self.delay_s = delay_s
        self.error = error
        self._available = available
        self.calls: list[list[ChatMessage]] = []
        self.kwargs: list[dict[str, object]] = []

    def available(self) -> bool:
        return self._available

    async def complete(
        self,
        messages: list[ChatMessage],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_ms: int | None = None,
    ) -> Completion:
        self.calls.append(messages)
        self.kwargs.append({"temperature": temperature, "max_tokens": max_tokens, "timeout_ms": timeout_ms})
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        return Completion(text=self.text, provider=self.name)


WEAK_TEXT = "why is the sky blue"  # heuristic: unknown 0.4
WEAK_TASK = "fix the flaky test"  # heuristic: task 0.75


@pytest.mark.anyio
async def test_llm_decides_when_heuristic_is_weak() -> None:
    llm = ScriptedLLM('{"kind": "task", "confidence": 0.9, "reason": "asks a question"}')
    intent = await classify_intent(WEAK_TEXT, llm)
    assert intent == Intent("task", 0.9, "asks a question", "llm")
    assert len(llm.calls) == 1
    system, user = llm.calls[0]
    assert system.role == "system" and "memory_probe" in system.content and "JSON" in system.content
    assert (user.role, user.content) == ("user", WEAK_TEXT)
    assert llm.kwargs[0]["timeout_ms"] == 6000


@pytest.mark.anyio
async def test_llm_fenced_json_with_prose() -> None:
    llm = ScriptedLLM('Sure! Here you go:\n```json\n{"kind": "memory_probe", "confidence": 0.7, "reason": "past"}\n```')
    intent = await classify_intent(WEAK_TASK, llm)
    assert (intent.kind, intent.confidence, intent.source) == ("memory_probe", 0.7, "llm")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "reply",
    [
        "I think this is a task.",
        "",
        "{not json}",
        '{"kind": "banana", "confidence": 0.9}',
        '{"confidence": 0.9}',
        '["task"]',
        '{"kind": 3}',
    ],
)
async def test_malformed_llm_output_falls_back_to_heuristic(reply: str) -> None:
    intent = await classify_intent(WEAK_TASK, ScriptedLLM(reply))
    assert intent == classify_intent_heuristic(WEAK_TASK)
    assert intent.source == "heuristic"


@pytest.mark.anyio
async def test_llm_timeout_falls_back() -> None:
    llm = ScriptedLLM('{"kind": "chitchat", "confidence": 1}', delay_s=5.0)
    with anyio.fail_after(2):
        intent = await classify_intent(WEAK_TASK, llm, timeout_s=0.05)
    assert (intent.kind, intent.source) == ("task", "heuristic")
    assert len(llm.calls) == 1


@pytest.mark.anyio
async def test_llm_memos_error_falls_back() -> None:
    llm = ScriptedLLM(error=MemosError(ErrorCode.LLM_UNAVAILABLE, "no host"))
    intent = await classify_intent(WEAK_TEXT, llm)
    assert (intent.kind, intent.confidence, intent.source) == ("unknown", 0.4, "heuristic")


@pytest.mark.anyio
async def test_llm_unexpected_error_falls_back() -> None:
    intent = await classify_intent(WEAK_TEXT, ScriptedLLM(error=RuntimeError("provider bug")))
    assert intent.source == "heuristic"


@pytest.mark.anyio
@pytest.mark.parametrize("text", ["", "/memos status", "thanks!", "你好", "do you remember the port?", "上次的方案"])
async def test_strong_heuristic_never_calls_llm(text: str) -> None:
    llm = ScriptedLLM('{"kind": "task", "confidence": 1}')
    intent = await classify_intent(text, llm)
    assert intent.source == "heuristic"
    assert intent.confidence >= 0.85
    assert llm.calls == []


@pytest.mark.anyio
async def test_no_llm_or_unavailable_llm_uses_heuristic() -> None:
    assert await classify_intent(WEAK_TASK, None) == classify_intent_heuristic(WEAK_TASK)
    llm = ScriptedLLM('{"kind": "chitchat", "confidence": 1}', available=False)
    assert (await classify_intent(WEAK_TASK, llm)).source == "heuristic"
    assert llm.calls == []


@pytest.mark.anyio
async def test_llm_chitchat_answer_feeds_the_scheduler() -> None:
    llm = ScriptedLLM('{"kind": "chitchat", "confidence": 0.8, "reason": "small talk"}')
    intent = await classify_intent("what a day it has been", llm)
    assert schedule_injection(intent, "what a day it has been").retrieve is False


@pytest.mark.parametrize(
    ("reply", "kind", "confidence"),
    [
        ('{"kind": "TASK", "confidence": 1.7, "reason": "x"}', "task", 1.0),
        ('{"kind": "task", "confidence": 250}', "task", 1.0),
        ('{"kind": "task", "confidence": -3}', "task", 0.0),
        ('{"kind": "memory-probe", "confidence": "0.66"}', "memory_probe", 0.66),
        ('{"kind": "meta", "confidence": "85%"}', "meta", 0.85),
        ('{"kind": "unknown"}', "unknown", 0.5),
        ('{"kind": "chitchat", "confidence": true}', "chitchat", 0.5),
        ('{"kind": "chitchat", "confidence": null}', "chitchat", 0.5),
        ('noise {"a": 1 {"kind": "task", "confidence": 0.3}', "task", 0.3),
        ('{"intent": "task", "confidence": 0.4}', "task", 0.4),
    ],
)
def test_parse_llm_intent_is_tolerant(reply: str, kind: str, confidence: float) -> None:
    parsed = parse_llm_intent(reply)
    assert parsed is not None
    assert parsed.kind == kind
    assert parsed.confidence == pytest.approx(confidence)
    assert 0.0 <= parsed.confidence <= 1.0
    assert parsed.source == "llm"
