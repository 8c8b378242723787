"""Tolerant JSON extraction: what models really print around their JSON, and what must stay rejected."""

from __future__ import annotations

import time
from typing import Any

import pytest

from memos_bridge.llm.jsonparse import (
    JsonExtractError,
    extract_json,
    extract_json_object,
    iter_json_values,
    repair,
    strip_think,
)

RECOVERABLE: list[tuple[str, Any]] = [
    ('{"a": 1}', {"a": 1}),
    ('  \n{"a": 1}\n', {"a": 1}),
    ('```json\n{"a": 1}\n```', {"a": 1}),
    ('```\n{"a": 1}\n```', {"a": 1}),
    ('Sure! Here is the JSON:\n```json\n{"a": [1, 2]}\n```\nLet me know.', {"a": [1, 2]}),
    ('The answer is {"kind": "task", "confidence": 0.9} as requested.', {"kind": "task", "confidence": 0.9}),
    ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),
    ("{'kind': 'task', 'confidence': 0.5}", {"kind": "task", "confidence": 0.5}),
    ('{"ok": True, "missing": None, "no": False}', {"ok": True, "missing": None, "no": False}),
    ('<think>maybe {"wrong": 1}?</think>{"right": 2}', {"right": 2}),
    ('<thinking>\nlet me see\n</thinking>\n```json\n{"x": "y"}\n```', {"x": "y"}),
    ('noise {"a": 1 {"kind": "task", "confidence": 0.3}', {"kind": "task", "confidence": 0.3}),
    ("[1, 2, 3]", [1, 2, 3]),
    ('prefix [{"idx": 1}, {"idx": 2},] suffix', [{"idx": 1}, {"idx": 2}]),
    ('{"text": "braces } and { inside a string", "n": 1}', {"text": "braces } and { inside a string", "n": 1}),
    ('{"quote": "it\'s fine"}', {"quote": "it's fine"}),
    ('{"esc": "a \\"quoted\\" word"}', {"esc": 'a "quoted" word'}),
    ('{"zh": "不对，应该用 uv", "n": 1}', {"zh": "不对，应该用 uv", "n": 1}),
    ('[note: don\'t panic] then {"a": 1}', {"a": 1}),  # an apostrophe in prose opens no string
    ('broken ] {"a": 1}', {"a": 1}),
]


@pytest.mark.parametrize(("text", "expected"), RECOVERABLE)
def test_recovers_the_value(text: str, expected: Any) -> None:
    assert extract_json(text) == expected


UNRECOVERABLE = [
    "",
    "   ",
    "I think this is a task.",
    "{not json}",
    '{"a": 1',  # unterminated: never closed for the model
    "<think>only thinking, then the tokens ran out {",
    "{'mixed': 'a \"quoted\" word'}",  # single-quoted string holding double quotes: not repaired
]


@pytest.mark.parametrize("text", UNRECOVERABLE)
def test_rejects_what_cannot_be_recovered_safely(text: str) -> None:
    with pytest.raises(JsonExtractError):
        extract_json(text)


def test_values_come_in_order_and_nested_values_are_not_repeated() -> None:
    values = list(iter_json_values('first {"a": {"b": 1}} then [2] and {"c": 3}'))
    assert values == [{"a": {"b": 1}}, [2], {"c": 3}]


def test_a_whole_scalar_answer_counts_but_a_number_in_prose_does_not() -> None:
    assert extract_json("42") == 42
    with pytest.raises(JsonExtractError):
        extract_json("the answer is 42")


def test_extract_object_skips_arrays() -> None:
    assert extract_json_object('[1, 2] then {"k": "v"}') == {"k": "v"}
    with pytest.raises(JsonExtractError):
        extract_json_object("[1, 2]")


def test_strip_think_handles_closed_and_unclosed_blocks() -> None:
    assert strip_think("<think>a</think>answer") == "answer"
    assert strip_think("<THINK>a</THINK>x<think>b</think>y") == "xy"
    assert strip_think("answer first <think>never closed") == "answer first "


def test_repair_leaves_double_quoted_text_alone() -> None:
    assert repair('{"v": "True, None,]"}') == '{"v": "True, None,]"}'
    assert repair("{'k': 'v',}") == '{"k": "v"}'


def test_huge_bracket_heavy_prose_is_linear_and_safe() -> None:
    started = time.perf_counter()
    assert list(iter_json_values("[" * 50_000 + ' {"ok": 1}')) == [{"ok": 1}]
    assert list(iter_json_values("[" * 5_000 + "]" * 5_000)) == []  # too deep for json: no RecursionError
    assert time.perf_counter() - started < 2.0
