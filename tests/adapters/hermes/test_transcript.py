"""Hermes' OpenAI-style messages become `turn.end` tool calls with results, failures and reasoning."""

from __future__ import annotations

import json
from typing import Any

from memos_bridge_hermes.transcript import Delegation, clip, extract_turn, tool_failure

USER = "Parse holdings.xml and write answers.json"


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "an earlier question"},
    {"role": "assistant", "content": "an earlier answer"},
    {"role": "user", "content": USER},
    {
        "role": "assistant",
        "content": "Reading the file first.",
        "reasoning": "I need the XML structure",
        "tool_calls": [_call("c1", "read_file", {"path": "holdings.xml"}), _call("c2", "memos_search", {"query": "x"})],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "<holdings/>"},
    {"role": "tool", "tool_call_id": "c2", "content": "{}"},
    {"role": "assistant", "content": "", "tool_calls": [_call("c3", "terminal", {"command": "python parse.py"})]},
    {"role": "tool", "tool_call_id": "c3", "content": "Traceback (most recent call last):\nKeyError: 'cusip'"},
    {"role": "assistant", "content": [{"type": "text", "text": "Done."}], "reasoning_content": "wrap up"},
]


def test_tool_calls_results_failures_and_reasoning() -> None:
    capture = extract_turn(MESSAGES, USER, skip_tools={"memos_search"})
    names = [call["name"] for call in capture.tool_calls]
    assert names == ["read_file", "terminal"]  # the provider's own memory tools are not task steps
    read, run = capture.tool_calls
    assert read["input"] == {"path": "holdings.xml"} and read["output"] == "<holdings/>" and read["success"] is True
    assert read["thinkingBefore"] == "I need the XML structure"
    assert read["assistantTextBefore"] == "Reading the file first."
    assert read["toolCallId"] == "c1"
    assert run["success"] is False and run["errorCode"].startswith("Traceback")
    assert capture.agent_thinking == "wrap up"


def test_only_this_turn_is_read() -> None:
    capture = extract_turn(MESSAGES, "an earlier question")
    assert capture.tool_calls == []


def test_failure_signals() -> None:
    assert tool_failure('{"error": "permission denied"}') == "permission denied"
    assert tool_failure('{"success": false, "message": "no such file"}') == "no such file"
    assert tool_failure('{"exit_code": 137, "output": ""}') == "EXIT_137"
    assert tool_failure('{"exit_code": 0, "output": "ok"}') is None
    assert tool_failure("Error: file not found") == "Error: file not found"
    assert tool_failure("all good") is None


def test_delegations_attach_to_their_delegate_task_call() -> None:
    messages = [
        {"role": "user", "content": "summarise the repo"},
        {"role": "assistant", "content": "", "tool_calls": [_call("d1", "delegate_task", {"goal": "read README"})]},
        {"role": "tool", "tool_call_id": "d1", "content": "summary pending"},
        {"role": "assistant", "content": "Here is the summary."},
    ]
    capture = extract_turn(
        messages,
        "summarise the repo",
        delegations=[Delegation("read README", "README describes a CLI", "child-1"), Delegation("extra", "x", "c2")],
    )
    first, second = capture.tool_calls
    assert first["input"]["goal"] == "read README" and first["input"]["delegation"]["childSessionId"] == "child-1"
    assert first["output"] == "README describes a CLI"
    assert second["name"] == "delegate_task" and second["input"]["delegation"]["task"] == "extra"


def test_clip_keeps_head_and_tail() -> None:
    text = "A" * 5000 + "TAIL"
    clipped = clip(text, 1000)
    assert len(clipped) <= 1000 + 40 and clipped.startswith("A") and clipped.endswith("TAIL")
