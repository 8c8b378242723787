"""The last turn of a Claude Code session, read from its transcript: the reply and the tool calls with results.

Claude Code writes each session as JSON lines: `{"type": "user" | "assistant" | …, "message": {"role",
"content"}}`, where an assistant's content holds `text`, `thinking` and `tool_use` blocks (`id`, `name`,
`input`), and the tool's result comes back in a following `user` entry as a `tool_result` block (`tool_use_id`,
`content`, `is_error`). A turn starts at the last user entry that is a prompt (text, not tool results, not a
meta line the host injected). The `Stop` hook reads from there to the end, so `turn.end` gets every step with
its real output, not only the final reply.

Only the tail is read (the file grows for the whole session), and lines that do not parse are skipped: a
transcript being written while we read it must never fail the hook.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Bytes read from the end of the transcript; a turn longer than this keeps its most recent steps.
TAIL_BYTES = 4_000_000
#: Characters kept per tool input / output (the service clips and redacts again).
FIELD_CHARS = 20_000


@dataclass
class TranscriptTurn:
    """What the agent did in the transcript's last turn."""

    prompt: str | None = None
    reply: str = ""
    thinking: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def _entries(path: Path) -> list[dict[str, Any]]:
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if len(data) >= TAIL_BYTES and lines:
        lines = lines[1:]  # the first line was cut by the seek
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _blocks(entry: dict[str, Any]) -> list[dict[str, Any]]:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)] if isinstance(content, list) else []


def _is_prompt(entry: dict[str, Any]) -> bool:
    if entry.get("type") != "user" or entry.get("isMeta") or entry.get("isSidechain"):
        return False
    blocks = _blocks(entry)
    return bool(blocks) and all(block.get("type") == "text" for block in blocks)


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text_of(item) for item in value)
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return str(value["text"])
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


def last_turn(path: Path) -> TranscriptTurn:
    """The transcript's last turn (empty when the file is missing or holds no prompt)."""
    entries = _entries(path)
    start = max((i for i, entry in enumerate(entries) if _is_prompt(entry)), default=None)
    turn = TranscriptTurn()
    if start is None:
        return turn
    turn.prompt = "\n".join(_text_of(block.get("text")) for block in _blocks(entries[start]))
    calls: dict[str, dict[str, Any]] = {}
    replies: list[str] = []
    thinking: list[str] = []
    narration: list[str] = []
    for entry in entries[start + 1 :]:
        if entry.get("isSidechain"):
            continue
        for block in _blocks(entry):
            kind = block.get("type")
            if entry.get("type") == "assistant" and kind == "text":
                replies.append(_text_of(block.get("text")))
                narration.append(replies[-1])
            elif entry.get("type") == "assistant" and kind == "thinking":
                thinking.append(_text_of(block.get("thinking")))
            elif entry.get("type") == "assistant" and kind == "tool_use":
                call: dict[str, Any] = {
                    "name": str(block.get("name") or "tool")[:200],
                    "input": _clip_json(block.get("input")),
                    "toolCallId": str(block.get("id") or "")[:200] or None,
                }
                if narration:
                    call["assistantTextBefore"] = "\n".join(narration)[:FIELD_CHARS]
                    narration = []
                calls[str(block.get("id") or len(calls))] = call
                turn.tool_calls.append(call)
            elif kind == "tool_result":
                found = calls.get(str(block.get("tool_use_id")))
                if found is not None:
                    found["output"] = _text_of(block.get("content"))[:FIELD_CHARS]
                    if block.get("is_error"):
                        found["success"] = False
                        found["errorCode"] = found["output"][:500] or "error"
                    else:
                        found["success"] = True
    for call in turn.tool_calls:
        if call.get("toolCallId") is None:
            call.pop("toolCallId")
    turn.reply = replies[-1].strip() if replies else ""
    turn.thinking = "\n".join(thinking)[:FIELD_CHARS]
    return turn


def _clip_json(value: Any) -> Any:
    """A tool input as given, or as clipped text when it is very large."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= FIELD_CHARS else text[:FIELD_CHARS]
