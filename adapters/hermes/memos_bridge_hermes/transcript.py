"""Turn Hermes' OpenAI-style message list into `turn.end` tool calls and reasoning.

Hermes hands `sync_turn` the conversation as of the completed turn (`messages`): assistant messages with
`tool_calls` (`{id, function: {name, arguments}}`), their `reasoning` (or `reasoning_content`), `tool` messages
answering them by `tool_call_id`, and the final assistant reply. The service learns per step, so each tool call
becomes one step that carries its arguments, its result (clipped), whether it failed, and the reasoning and
narration the model emitted right before it. A memory provider cannot bind Hermes' plugin hooks
(`post_tool_call`, `post_llm_call`), so the transcript is the one place all of this is available.

Calls of the provider's own `memos_*` tools are left out: recall plumbing is not task work, and storing it
would make the next recall find "searched memory for X" steps instead of what was done.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

OUTPUT_LIMIT = 4000
ARGUMENT_LIMIT = 4000
_ERROR_PREFIXES = ("error", "failed", "failure", "exception", "traceback", "fatal")


@dataclass
class TurnCapture:
    """What `turn.end` needs beyond the user and assistant texts."""

    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    agent_thinking: str | None = None


@dataclass(frozen=True)
class Delegation:
    """A sub-task handed to a Hermes subagent (from `on_delegation`)."""

    task: str
    result: str
    child_session_id: str = ""
    ts: int = 0


def content_text(content: Any) -> str:
    """Plain text of a message `content`: a string, or the text parts of a multimodal list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def clip(text: str, limit: int) -> str:
    """Keep head 55 % and tail 45 % of an over-long text, with a marker (errors tend to sit at the end)."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.55)
    tail = limit - head - 20
    return f"{text[:head]}\n…[{len(text) - head - tail} chars]…\n{text[-tail:]}"


def _reasoning(message: Mapping[str, Any]) -> str | None:
    for key in ("reasoning", "reasoning_content", "thinking"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return clip(raw, ARGUMENT_LIMIT)
    return raw


def tool_failure(output: str) -> str | None:
    """An error description when a tool result says it failed (`{"error": …}`, `success: false`, "Error: …")."""
    stripped = output.strip()
    if not stripped:
        return None
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, Mapping):
            error = data.get("error")
            if error:
                return clip(error if isinstance(error, str) else json.dumps(error, ensure_ascii=False), 200)
            if data.get("success") is False or data.get("ok") is False:
                return clip(str(data.get("message") or "success: false"), 200)
            exit_code = data.get("exit_code", data.get("returncode"))
            if isinstance(exit_code, int) and exit_code != 0:
                return f"EXIT_{exit_code}"
            return None
    first_line = stripped.splitlines()[0].lower()
    if first_line.startswith(_ERROR_PREFIXES):
        return clip(stripped.splitlines()[0], 200)
    return None


def turn_slice(messages: Sequence[Mapping[str, Any]], user_text: str) -> list[Mapping[str, Any]]:
    """The messages answering this turn's user message (the last one with this text, else the last user message),
    up to the next user message."""
    last_user = -1
    matching = -1
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            last_user = index
            if user_text and content_text(message.get("content")).strip() == user_text.strip():
                matching = index
    start = matching if matching >= 0 else last_user
    end = next((i for i in range(start + 1, len(messages)) if messages[i].get("role") == "user"), len(messages))
    return list(messages[start + 1 : end])


def extract_turn(
    messages: Sequence[Mapping[str, Any]] | None,
    user_text: str,
    *,
    skip_tools: Iterable[str] = (),
    delegations: Sequence[Delegation] = (),
) -> TurnCapture:
    """Tool calls (in the model's order) and the final reasoning of the turn that answered `user_text`."""
    capture = TurnCapture()
    skipped = set(skip_tools)
    by_id: dict[str, dict[str, Any]] = {}
    for message in turn_slice(messages or [], user_text):
        role = message.get("role")
        if role == "assistant":
            reasoning = _reasoning(message)
            narration = content_text(message.get("content")).strip()
            calls = message.get("tool_calls") or []
            if not calls:
                capture.agent_thinking = reasoning or capture.agent_thinking
                continue
            for index, call in enumerate(calls):
                if not isinstance(call, Mapping):
                    continue
                function = call.get("function") if isinstance(call.get("function"), Mapping) else call
                assert isinstance(function, Mapping)
                name = str(function.get("name") or "").strip()
                if not name or name in skipped:
                    continue
                entry: dict[str, Any] = {"name": name[:200], "input": _arguments(function.get("arguments"))}
                call_id = call.get("id") or call.get("call_id")
                if call_id:
                    entry["toolCallId"] = str(call_id)
                    by_id[str(call_id)] = entry
                if index == 0 and reasoning:
                    entry["thinkingBefore"] = clip(reasoning, OUTPUT_LIMIT)
                if index == 0 and narration:
                    entry["assistantTextBefore"] = clip(narration, OUTPUT_LIMIT)
                capture.tool_calls.append(entry)
        elif role == "tool":
            entry_for = by_id.get(str(message.get("tool_call_id") or ""))
            if entry_for is None:
                continue
            output = content_text(message.get("content"))
            entry_for["output"] = clip(output, OUTPUT_LIMIT)
            failure = tool_failure(output)
            entry_for["success"] = failure is None
            if failure is not None:
                entry_for["errorCode"] = failure
    _attach_delegations(capture, delegations)
    return capture


def _attach_delegations(capture: TurnCapture, delegations: Sequence[Delegation]) -> None:
    """Record each finished sub-task on the `delegate_task` call that started it (or as a call of its own)."""
    open_calls = [call for call in capture.tool_calls if call["name"] == "delegate_task"]
    for delegation in delegations:
        record = {"task": delegation.task, "childSessionId": delegation.child_session_id or None}
        target = open_calls.pop(0) if open_calls else None
        if target is None:
            target = {"name": "delegate_task", "input": {"goal": delegation.task}}
            if delegation.ts:
                target["endedAt"] = delegation.ts
            capture.tool_calls.append(target)
        if isinstance(target.get("input"), dict):
            target["input"] = {**target["input"], "delegation": record}
        else:
            target["input"] = {"arguments": target.get("input"), "delegation": record}
        target["output"] = clip(delegation.result, OUTPUT_LIMIT)
        target.setdefault("success", bool(delegation.result.strip()))
