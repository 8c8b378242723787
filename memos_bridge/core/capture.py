"""Step capture: turn one `turn.end` into normalised, summarised, tagged step drafts.

A user turn's tool calls are one step each and the final assistant reply is one more step; all share the
turn's `turnId`. Everything here is pure and deterministic (no I/O), so it is cheap to test and the same
input always yields the same step keys — which is what makes a retried `turn.end` idempotent.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from memos_bridge.config import CaptureSettings
from memos_bridge.contract.dto import ToolCallDTO, TurnResultDTO
from memos_bridge.rules.text import (
    args_text,
    clamp_head_tail,
    clip,
    first_line,
    first_sentence,
    restates,
    squash,
    to_text,
)

StepKindName = Literal["tool", "reply", "note"]


@dataclass
class StepDraft:
    """One step ready to be embedded and stored."""

    index: int
    kind: StepKindName
    ts: int
    user_text: str
    agent_text: str
    tool_calls: list[dict[str, Any]]
    thinking: str | None
    reflection: str | None
    failed: bool
    key: str = ""
    summary: str = ""
    tags: list[str] = field(default_factory=list)
    error_signatures: list[str] = field(default_factory=list)
    alpha: float | None = None  # adapter-supplied reflection weight (contextHints.alpha), reward uses it first

    def summary_embed_text(self) -> str:
        """What the step was about: its one-line summary (already led by the user's ask)."""
        return self.summary

    def action_embed_text(self) -> str:
        """What the agent did: the tool signature with its outcome, or the reply's opening.

        Kept short on purpose: embedding cost grows linearly with tokens (≈4k tokens/s on 2 cores), and
        the opening of an output or reply carries most of what similarity search can use; the full text
        stays searchable through the full-text index.
        """
        parts = [tool_signature(call, ACTION_EMBED_CHARS) for call in self.tool_calls]
        if self.agent_text:
            parts.append(clip(self.agent_text, ACTION_EMBED_CHARS))
        if not parts and self.kind == "note":  # nothing was done: the words said are the content
            parts.append(clip(self.user_text, ACTION_EMBED_CHARS))
        return clip("\n".join(parts), ACTION_EMBED_CHARS) if parts else self.summary

    def embed_texts(self, step_vectors: str) -> tuple[str, str]:
        """The texts of the step's summary and action vectors.

        With `step_vectors="one"` an action or a reply step embeds one text for both (the embedder runs it
        once): its summary — the ask with what was done and how it ended, the part a new request is compared
        with; the rest of the action line stays searchable through the full-text channels. A line said with
        no action keeps two views, its summary and its words up to the action line's length, because there
        the words are the memory (dropping the longer view cost dialogue recall: LoCoMo dense recall@10 0.53
        → 0.49); both are one text, embedded once, when the line is short. `"two"` embeds every step's
        action line apart, at about twice capture's model cost.
        """
        if step_vectors == "two" or self.kind == "note":
            return self.summary_embed_text(), self.action_embed_text()
        return self.summary, self.summary


ACTION_EMBED_CHARS = 320


# ---------------------------------------------------------------- failure detection

_ERRORISH_PREFIX = re.compile(r"^\s*(error|failed|failure|exception|traceback|fatal)\b", re.IGNORECASE)
_EXIT_CODE = re.compile(r"\b(?:exit(?:ed)?(?: with)?(?: status| code)?|return code)\s*[:=]?\s*(-?\d+)", re.I)


def tool_call_failed(call: ToolCallDTO) -> bool:
    """A call failed when the host says so, or its output plainly reports an error."""
    if call.success is not None:
        return not call.success
    if call.error_code:
        return True
    output = call.output
    if isinstance(output, dict):
        if output.get("error") or output.get("is_error") or output.get("isError"):
            return True
        status = output.get("exit_code", output.get("exitCode", output.get("returncode")))
        if isinstance(status, int) and status != 0:
            return True
    text = to_text(output)
    if _ERRORISH_PREFIX.match(text):
        return True
    match = _EXIT_CODE.search(text[:2000])
    return bool(match and match.group(1) not in ("0", "-0"))


# ---------------------------------------------------------------- error signatures

_EXC = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Warning|Fault|Failure))\b(?::[ \t]*([^\n]{0,160}))?")
_ERRNO = re.compile(
    r"\b(E(?:NOENT|ACCES|PERM|EXIST|CONNREFUSED|CONNRESET|TIMEDOUT|ADDRINUSE|NOTDIR|ISDIR|NOSPC|PIPE))\b"
)
_SNAKE_CODE = re.compile(r"\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+){1,6})\b")
_HTTP = re.compile(r"\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?: code)?)[ :=]*([45]\d\d)\b", re.IGNORECASE)
_COMPILER = re.compile(r"\berror\[?(E\d{3,5})\]?|\b(TS\d{4,5})\b")
_NPM = re.compile(r"npm ERR! code ([A-Z0-9_]+)")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-]+){2,}[\\/]?")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b")
_NUM = re.compile(r"\b\d+(?:\.\d+)?\b")
_ERROR_LINE = re.compile(r"error|failed|failure|exception|traceback|fatal|错误|失败|异常", re.IGNORECASE)


def normalise_error_message(message: str) -> str:
    """Strip the parts of an error message that vary between occurrences of the same failure."""
    message = _QUOTED.sub("<str>", message)
    message = _PATH.sub("<path>", message)
    message = _HEX.sub("<hex>", message)
    message = _NUM.sub("<n>", message)
    return clip(squash(message), 120)


def extract_error_signatures(texts: list[str], limit: int) -> list[str]:
    """Structural fingerprints of failures (exception types, errno and error codes, exit and HTTP codes).

    Only error contexts are passed in (failed tool outputs, error codes, error-looking lines), so an
    UPPER_SNAKE constant in ordinary code does not become a signature.
    """
    found: list[str] = []

    def add(sig: str) -> None:
        if not sig or sig in found:
            return
        head = sig.split(":", 1)[0]
        if ":" in sig and head in found:  # "KeyError: <str>" is more specific than a bare "KeyError"
            found[found.index(head)] = sig
            return
        if ":" not in sig and any(f.split(":", 1)[0] == sig for f in found):
            return
        if len(found) < limit:
            found.append(sig)

    for text in texts:
        sample = text[:8000]
        for match in _EXC.finditer(sample):
            message = normalise_error_message(match.group(2) or "")
            add(f"{match.group(1)}: {message}" if message else match.group(1))
        for match in _ERRNO.finditer(sample):
            add(match.group(1))
        for match in _NPM.finditer(sample):
            add(f"npm:{match.group(1)}")
        for match in _COMPILER.finditer(sample):
            add(match.group(1) or match.group(2))
        for match in _HTTP.finditer(sample):
            add(f"HTTP_{match.group(1)}")
        for match in _EXIT_CODE.finditer(sample):
            if match.group(1) not in ("0", "-0"):
                add(f"EXIT_{match.group(1)}")
        for match in _SNAKE_CODE.finditer(sample):
            code = match.group(1)
            if any(word in code for word in ("ERR", "FAIL", "INVALID", "DENIED", "NOT_FOUND", "TIMEOUT")):
                add(code)
    return found


def _error_contexts(step: StepDraft, calls: list[ToolCallDTO]) -> list[str]:
    texts: list[str] = []
    for call in calls:
        if call.error_code:
            texts.append(call.error_code)
        if tool_call_failed(call):
            texts.append(to_text(call.output))
    for text in (step.agent_text, step.reflection or ""):
        texts.extend(line for line in text.splitlines() if _ERROR_LINE.search(line))
    return texts


# ---------------------------------------------------------------- tags

_KEYWORDS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        "docker": r"\bdocker(file)?\b|\bcontainer\b",
        "kubernetes": r"\bkubernetes\b|\bk8s\b|\bkubectl\b",
        "pip": r"\bpip3?\b|\bpypi\b",
        "npm": r"\bnpm\b|\byarn\b|\bpnpm\b",
        "database": r"\bdatabase\b|\bpostgres(ql)?\b|\bsqlite\b|\bmysql\b",
        "sql": r"\bsql\b|\bselect\s+\S+\s+from\b",
        "shell": r"\bbash\b|\bshell\b|\bzsh\b|\bterminal\b",
        "git": r"\bgit\b|\bcommit\b|\brebase\b",
        "python": r"\bpython3?\b|\.py\b|\bpytest\b",
        "typescript": r"\btypescript\b|\.tsx?\b",
        "javascript": r"\bjavascript\b|\bnode(js)?\b|\.m?js\b",
        "rust": r"\brust\b|\bcargo\b",
        "http": r"\bhttps?\b|\bapi\b|\bendpoint\b",
        "network": r"\bnetwork\b|\bdns\b|\bproxy\b|\btimeout\b",
        "auth": r"\bauth\w*\b|\btoken\b|\bcredential",
        "test": r"\btests?\b|\bpytest\b|\bunit test\b",
        "csv": r"\bcsv\b|\bspreadsheet\b",
        "json": r"\bjson\b",
        "file": r"\bfile\b|\bdirectory\b|\bfolder\b",
    }.items()
}
_TOOL_TAG = re.compile(r"[^a-z0-9_.\-]+")


def extract_tags(step: StepDraft, limit: int) -> list[str]:
    """Tool names, failure marker and domain keywords; 3–32 characters each, at most `limit`."""
    tags: list[str] = []

    def add(tag: str) -> None:
        tag = tag.strip("_.-")
        if 3 <= len(tag) <= 32 and tag not in tags and len(tags) < limit:
            tags.append(tag)

    for call in step.tool_calls:
        add(_TOOL_TAG.sub("_", str(call.get("name", "")).lower()))
    if step.failed:
        add("error")
    haystack = " ".join(
        [step.user_text[:2000], step.agent_text[:2000], *(tool_signature(c, 600) for c in step.tool_calls)]
    )
    for name, pattern in _KEYWORDS.items():
        if pattern.search(haystack):
            add(name)
    return tags


# ---------------------------------------------------------------- summaries


def tool_signature(call: dict[str, Any], limit: int, results: frozenset[str] = frozenset()) -> str:
    """`name(key=value …) → outcome` of a stored tool call, clipped to `limit` characters. Arguments and an
    outcome that restate `results` (numbers the attempt reported as its answer) are left out, for steps
    that are kept as a procedure for other tasks."""
    args = clip(args_text(call.get("input"), results), max(limit // 3, 20))
    if call.get("errorCode"):
        outcome = f"error: {call['errorCode']}"
    elif restates(call.get("output"), results):
        outcome = ""
    else:
        outcome = clip(to_text(call.get("output")), max(limit // 2, 20))
    text = f"{call.get('name', 'tool')}({args})"
    return clip(f"{text} → {outcome}" if outcome else text, limit)


def summarise_step(step: StepDraft, max_chars: int) -> str:
    """One line worth remembering: what was asked and what happened, in the user's words where possible."""
    ask = clip(first_line(step.user_text), 60)
    if step.kind == "tool" and step.tool_calls:
        call = step.tool_calls[0]
        args = clip(args_text(call.get("input")), 48)
        head = f"{call.get('name', 'tool')}({args})"
        if step.failed:
            detail = step.error_signatures[0] if step.error_signatures else clip(to_text(call.get("output")), 50)
            outcome = f"failed: {detail}" if detail else "failed"
        else:
            outcome = clip(first_line(to_text(call.get("output"))), 50) or "ok"
        line = f"{head} → {outcome}"
        return clip(f"{ask}: {line}" if ask else line, max_chars)
    if step.kind == "reply":
        answer = first_sentence(step.agent_text)
        return clip(f"{ask} → {answer}" if ask else answer, max_chars)
    # A turn with no agent action is something said (a fact, a preference, a dialogue line): keep as much
    # of it as the summary allows, since it IS the memory.
    return clip(squash(step.user_text), max_chars) if step.user_text.strip() else "(empty turn)"


# ---------------------------------------------------------------- extraction


def _normalise_call(call: ToolCallDTO, settings: CaptureSettings) -> dict[str, Any]:
    """Wire-shaped tool call with long inputs and outputs clamped (head + tail)."""
    data = call.to_wire()
    if call.input is not None:
        text = to_text(call.input)
        if len(text) > settings.max_tool_input_chars:
            data["input"] = clamp_head_tail(text, settings.max_tool_input_chars)
    if call.output is not None:
        text = to_text(call.output)
        if len(text) > settings.max_tool_output_chars or not isinstance(call.output, str):
            data["output"] = clamp_head_tail(text, settings.max_tool_output_chars)
    for key in ("thinkingBefore", "assistantTextBefore"):
        if key in data:
            data[key] = clamp_head_tail(str(data[key]), settings.max_text_chars)
    return data


def _step_key(turn_id: int, step: StepDraft) -> str:
    """Content signature of a step: identical retries produce identical keys (ts deliberately excluded)."""
    material = json.dumps(
        [turn_id, step.index, step.kind, step.user_text, step.agent_text, step.tool_calls, step.thinking or ""],
        ensure_ascii=False,
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(material.encode("utf-8")).hexdigest()


def adapter_alpha(hints: dict[str, Any] | None) -> float | None:
    """`contextHints.alpha` in [0, 1]: the host's own weight for how much this turn's decision mattered."""
    value = (hints or {}).get("alpha")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(max(float(value), 0.0), 1.0)


def extract_steps(turn: TurnResultDTO, user_text: str, turn_id: int, settings: CaptureSettings) -> list[StepDraft]:
    """Split a turn into steps: one per tool call, then the final reply (or a note when nothing else)."""
    user = clamp_head_tail(user_text.strip(), settings.max_text_chars)
    steps: list[StepDraft] = []
    previous_text = ""
    for call in turn.tool_calls:
        narration = clamp_head_tail((call.assistant_text_before or "").strip(), settings.max_text_chars)
        if narration == previous_text:
            narration = ""  # the host repeated the same narration before consecutive calls
        previous_text = narration or previous_text
        steps.append(
            StepDraft(
                index=len(steps),
                kind="tool",
                ts=call.started_at or call.ended_at or turn.ts,
                user_text=user,
                agent_text=narration,
                tool_calls=[_normalise_call(call, settings)],
                thinking=(call.thinking_before or None),
                reflection=None,
                failed=tool_call_failed(call),
            )
        )
    reply = clamp_head_tail(turn.agent_text.strip(), settings.max_text_chars)
    if reply and reply != previous_text:
        steps.append(
            StepDraft(
                index=len(steps),
                kind="reply",
                ts=turn.ts,
                user_text=user,
                agent_text=reply,
                tool_calls=[],
                thinking=clamp_head_tail(turn.agent_thinking, settings.max_text_chars) if turn.agent_thinking else None,
                reflection=turn.reflection or None,
                failed=False,
            )
        )
    elif not steps and user:
        steps.append(
            StepDraft(
                index=0,
                kind="note",
                ts=turn.ts,
                user_text=user,
                agent_text="",
                tool_calls=[],
                thinking=turn.agent_thinking or None,
                reflection=turn.reflection or None,
                failed=False,
            )
        )
    if steps and turn.reflection and steps[-1].reflection is None:
        steps[-1].reflection = turn.reflection
    if steps:
        steps[-1].alpha = adapter_alpha(turn.context_hints)
    calls_by_index = {i: [turn.tool_calls[i]] for i in range(len(turn.tool_calls))}
    for step in steps:
        step.error_signatures = extract_error_signatures(
            _error_contexts(step, calls_by_index.get(step.index, []) if step.kind == "tool" else []),
            settings.max_error_signatures,
        )
        step.summary = summarise_step(step, settings.summary_max_chars)
        step.tags = extract_tags(step, settings.max_tags)
        step.key = _step_key(turn_id, step)
    return steps
