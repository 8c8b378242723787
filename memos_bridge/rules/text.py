"""Small text utilities shared by capture, retrieval and rendering."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

_WS = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_CJK = re.compile(f"[{CJK_CHARS}]")
CJK_RUN = re.compile(f"[{CJK_CHARS}]+")

TRUNCATION_MARKER = " …[truncated {n} chars]… "


def squash(text: str) -> str:
    """Collapse runs of whitespace to one space and strip."""
    return _WS.sub(" ", text).strip()


def clamp_head_tail(text: str, limit: int, head_share: float = 0.55) -> str:
    """Keep the head and the tail of a long text (errors and conclusions tend to sit at the end).

    The result is at most `limit` characters including the marker that says how much was cut.
    """
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    marker = TRUNCATION_MARKER.format(n=cut)
    budget = max(limit - len(marker), 2)
    head = int(budget * head_share)
    tail = budget - head
    # Recompute the cut now that the marker's own length is known, so the number is honest.
    marker = TRUNCATION_MARKER.format(n=len(text) - head - tail)
    return text[:head] + marker + text[len(text) - tail :]


def clip(text: str, limit: int) -> str:
    """Clip to `limit` characters with an ellipsis, on a word boundary when one is near."""
    window = 4 * limit + 16
    if len(text) > window:  # squash only what can end up in the result (texts can be many KB)
        head = squash(text[:window])
        text = head if len(head) > limit else squash(text)
    else:
        text = squash(text)
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 1)]
    space = cut.rfind(" ")
    if space >= limit * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def first_sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    return squash(_SENTENCE_END.split(text, maxsplit=1)[0])


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return squash(line)
    return ""


_STEP_NUMBER = re.compile(r"^\s*\d+[.)]\s*")


def unnumbered(line: str) -> str:
    """`line` without a leading "1." / "2)" step number."""
    return _STEP_NUMBER.sub("", line)


_TOOL_CALL_LINE = re.compile(r"^[\w.:/-]{1,64}\(.*\)(?:\s*→.*)?$", re.S)
#: A procedure step that only says which tool to call ("Call `read_file(path=x.csv)`", "Run `tool(…)` → ok").
_CALL_STEP = re.compile(r"^(?:call|run|use|invoke)\s+`([^`]+)`[.;]?$", re.IGNORECASE | re.S)


def is_tool_call_line(line: str) -> bool:
    """Whether a line is nothing but a tool call in the `name(key=value …) → outcome` form capture writes, or a
    procedure step that only names one ("Call `name(…)`"): it records which tool ran, not what to do differently,
    so a small block for a small model leaves it out."""
    text = unnumbered(line).strip()
    step = _CALL_STEP.match(text)
    return bool(_TOOL_CALL_LINE.match(step.group(1).strip() if step else text))


def numbered_steps(procedure: str) -> list[str]:
    """The steps of a numbered procedure ("1. …\n2. …"), numbers and blank lines dropped."""
    return [unnumbered(line).strip() for line in procedure.splitlines() if line.strip()]


def numbered(steps: Sequence[str]) -> str:
    """`steps` as a numbered procedure ("1. …\n2. …"), the inverse of `numbered_steps`."""
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1))


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def to_text(value: Any) -> str:
    """Tool inputs/outputs arrive as any JSON; give a compact, stable text form."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)


#: A number standing on its own ("58.42", "2024" of "2024-01"), not a piece of a name ("server.log.3", "10kg",
#: "x0.45", "eu-west-1").
_BARE_NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:[.,]\d+)*(?![\w.]*[A-Za-z_])")


def bare_numbers(text: str) -> set[str]:
    """The numbers of `text` that stand on their own (values, not parts of identifiers), without sign or
    thousands separators."""
    return {m.group(0).lstrip("-").replace(",", "") for m in _BARE_NUMBER.finditer(text)}


def produced_numbers(reported: Iterable[str], given: Iterable[str]) -> frozenset[str]:
    """What attempts produced: the bare numbers their replies (`reported`) state that their requests (`given`)
    did not."""
    return frozenset(set().union(*map(bare_numbers, reported)) - set().union(*map(bare_numbers, given)))


def restates(value: Any, results: frozenset[str]) -> bool:
    """Whether `value` holds one of `results` (numbers an attempt produced): then it is that attempt's answer,
    not a step another task can repeat."""
    return bool(results) and not bare_numbers(to_text(value)).isdisjoint(results)


def args_text(value: Any, results: frozenset[str] = frozenset()) -> str:
    """Tool arguments as `key=value` pairs: readable in summaries and far fewer tokens than JSON
    punctuation when embedded ({"cmd": "ls"} → cmd=ls). A value that restates one of `results` is shown as
    `key=<key>` (what a learnt procedure shows instead of another task's answer)."""
    if isinstance(value, dict):
        return " ".join(
            f"{key}=<{key}>" if restates(v, results) else f"{key}={v if isinstance(v, str) else to_text(v)}"
            for key, v in value.items()
        )
    return "<input>" if restates(value, results) else to_text(value)
