"""An agent backed by an OpenAI-compatible chat endpoint (a local llama.cpp / xllamacpp server, vLLM, Ollama, …).

One model call per task, a second only when the first gave no answer block: the system prompt fixes the answer
format, the user message carries the memory block the service injected (empty without memory), the task's
text and the task's input files (clipped so the whole prompt stays under `max_prompt_chars`). Decoding is
greedy (temperature 0, a fixed seed) and bounded (`max_tokens`). The model works the answer out by hand first
and must end with a ```json fenced block holding the full content of the task's output file; the agent takes
the last such block, and only a JSON object is written to the workspace.

Small models need two nudges to do that (measured with Qwen2.5-Coder-1.5B, see docs/skillflow-qwen1.5b.md):

* the reply is **prefilled** (`prefill`, sent as the start of the assistant message, which llama.cpp's server
  continues): without it the 1.5B model jumps straight to a JSON guess or writes code it cannot run;
* when the reply stops (or runs out of tokens) before any ```json block, one **continuation** call sends the
  reply back as the assistant's text plus an opening ```json fence, bounded by `answer_tokens`, so the answer
  it had worked out still reaches the verifier. A server that ignores prefills just answers anew.

Anything else (invalid JSON, a timeout, an HTTP error) writes nothing, so the family's verifier fails the task.
The model calls are reported as one tool step (`llm.chat`) followed by the `write_file` step when an answer
was written; the notes carry the call count, the summed `usage` tokens, the wall time and why an answer was
refused.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree

import httpx

from skillflow.agents import MEMORY_HEADER, OUTPUT_CHARS, REPLY_CHARS, AgentInput, AgentResult, clip, tool_call
from skillflow.lessons import find_lessons

SYSTEM_PROMPT = (
    "You are a careful data analyst. You get a task, the content of its input files and possibly notes from "
    "earlier tasks. The notes record mistakes made before: apply every note that fits the task. You cannot run "
    "code, so never write any: work the answer out by hand, briefly. Do not copy the input files: refer to each "
    "row by its id or name, one short line per row with the numbers you use and the result. Then end with "
    "exactly one fenced block that starts with ```json and holds the complete content of the output file as "
    "one JSON object. Nothing after it."
)
DEFAULT_PREFILL = "1. Rows:\nRow 1:"
_ANSWER_FENCE = "\n\n```json\n"
_OPEN = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$")
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of `text` as (language tag in lower case, body), in order.

    Fences are matched line by line, so a ```python block followed by a ```json block yields two blocks (a
    pattern over the whole text would pair the first block's closing fence with the second's opening one).
    A block still open at the end of the reply (the model stopped before closing it) is included.
    """
    blocks: list[tuple[str, str]] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if lang is None:
            opened = _OPEN.match(line)
            if opened:
                lang, body = opened.group(1).lower(), []
        elif _CLOSE.match(line):
            blocks.append((lang, "\n".join(body)))
            lang = None
        else:
            body.append(line)
    if lang is not None:
        blocks.append((lang, "\n".join(body)))
    return blocks


def ends_inside_block(text: str) -> bool:
    """Whether `text` stops inside a fenced block (its last fence opens one)."""
    inside = False
    for line in text.splitlines():
        if not inside and _OPEN.match(line):
            inside = True
        elif inside and _CLOSE.match(line):
            inside = False
    return inside


def continuation(reply: str) -> str | None:
    """The assistant prefix that lets the model finish its answer, or None when the reply needs none.

    A reply with no ```json block gets one opened after it; a reply cut off inside its ```json block (it ran
    out of tokens) is sent back as it is, to be finished; a complete block, valid or not, is left alone.
    """
    blocks = fenced_blocks(reply)
    if not any(lang == "json" for lang, _ in blocks):
        return reply.rstrip() + _ANSWER_FENCE
    if ends_inside_block(reply) and blocks[-1][0] == "json":
        return reply
    return None


class AnswerError(ValueError):
    """The model's reply holds no usable final answer."""


def extract_answer(text: str) -> dict[str, Any]:
    """The JSON object in the last fenced block of `text` (```json preferred, a bare ``` accepted).

    Raises `AnswerError` when there is no fenced block, the last one is not valid JSON, or it is not an object.
    """
    blocks = fenced_blocks(text)
    tagged = [body for lang, body in blocks if lang == "json"]
    bare = [body for lang, body in blocks if not lang]
    chosen = tagged or bare
    if not chosen:
        raise AnswerError("no ```json block in the reply")
    try:
        value = json.loads(chosen[-1])
    except json.JSONDecodeError as exc:
        raise AnswerError(f"the last ```json block is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    if not isinstance(value, dict):
        raise AnswerError(f"the answer is a JSON {type(value).__name__}, not an object")
    return value


def _csv_rows(text: str) -> list[dict[str, str]] | None:
    try:
        rows = [r for r in csv.reader(io.StringIO(text)) if r]
    except csv.Error:
        return None
    if len(rows) < 2 or any(len(r) != len(rows[0]) for r in rows[1:]):
        return None
    return [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]


def _xml_rows(text: str) -> list[dict[str, str]] | None:
    """The records of an XML table: the root's children, when they all have the same tag, each flattened to
    its leaf elements (tag without namespace → text)."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError:
        return None
    records = list(root)
    if len(records) < 2 or len({r.tag for r in records}) != 1:
        return None
    return [
        {leaf.tag.rsplit("}", 1)[-1]: (leaf.text or "").strip() for leaf in record.iter() if len(leaf) == 0}
        for record in records
    ]


def render_file(name: str, text: str) -> str:
    """A table (CSV, or XML whose root holds records of one tag) as one labelled line per record — `Row 2:
    order_id=SO-1002, status=cancelled, ...` with the file's own column or element names — so a small model
    never has to line values up with a header or count nested tags; anything else as it is."""
    lower = name.lower()
    rows = _csv_rows(text) if lower.endswith(".csv") else _xml_rows(text) if lower.endswith(".xml") else None
    if not rows:
        return text
    return "".join(
        f"Row {i}: " + ", ".join(f"{k}={v}" for k, v in row.items()) + "\n" for i, row in enumerate(rows, start=1)
    )


def continue_chat(
    client: httpx.Client,
    messages: list[dict[str, str]],
    prefix: str,
    notes: dict[str, Any],
    *,
    model: str,
    temperature: float,
    seed: int,
    max_tokens: int,
) -> str:
    """One `/chat/completions` call that continues `prefix` (sent as the assistant's unfinished reply when not
    empty); the reply text as the server gave it. The call, its `usage` tokens and its finish reason are added
    to `notes` (`llmCalls`, `promptTokens`, `completionTokens`, `finishReason`)."""
    sent = [*messages, {"role": "assistant", "content": prefix}] if prefix else messages
    body = {"model": model, "messages": sent, "temperature": temperature, "seed": seed, "max_tokens": max_tokens}
    response = client.post("chat/completions", json=body)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    notes["llmCalls"] += 1
    choice = (data.get("choices") or [{}])[0]
    usage = data.get("usage") or {}
    notes["promptTokens"] += int(usage.get("prompt_tokens") or 0)
    notes["completionTokens"] += int(usage.get("completion_tokens") or 0)
    notes["finishReason"] = choice.get("finish_reason")
    return str((choice.get("message") or {}).get("content") or "")


@dataclass(frozen=True)
class LLMSettings:
    """Where the model is and how it is asked."""

    base_url: str
    model: str = "local"
    max_tokens: int = 900
    temperature: float = 0.0
    seed: int = 7
    timeout_s: float = 300.0
    max_prompt_chars: int = 12_000
    #: The start of the assistant's reply ("" = none); the model continues it.
    prefill: str = DEFAULT_PREFILL
    #: Completion bound of the continuation call that asks only for the ```json block (0 = never continue).
    answer_tokens: int = 400


class LLMAgent:
    """Sends memory + task + input files to an OpenAI-compatible endpoint and writes its fenced JSON answer."""

    name = "llm"

    def __init__(self, settings: LLMSettings, *, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        self.command = f"{settings.base_url} model={settings.model}"  # what the report shows as the agent
        self._client = httpx.Client(
            base_url=settings.base_url.rstrip("/") + "/", timeout=settings.timeout_s, transport=transport
        )

    def close(self) -> None:
        self._client.close()

    def user_message(self, job: AgentInput) -> str:
        """Task text, the input files (clipped to keep the prompt bounded), then the memory block, then the
        answer instructions: a small model follows what it read last, so the recalled lessons come right before
        it starts to answer."""
        # the memory block may take at most half the prompt; the files share what is left
        injected = clip(job.injected.strip(), self.settings.max_prompt_chars // 2)
        memory = f"{MEMORY_HEADER}\n\n{injected}\n\n" if injected else ""
        head = f"Task:\n{job.user_text.strip()}\n\n"
        tail = (
            "Answer in three parts. 1. Rows: one short line per input row, `Row N: <every field that matters for "
            "the task> -> <calculation> = <result>`. 2. Fields: one line per output field, `<field>: <the row "
            "results it uses, sorted or filtered as the task asks> = <value>`. 3. The content of "
            f"{job.task.output} as the final ```json block (one JSON object with exactly the fields the task names)."
        )
        fixed = len(SYSTEM_PROMPT) + len(head) + len(memory) + len(tail) + len(self.settings.prefill)
        budget = self.settings.max_prompt_chars - fixed
        files = [job.workspace / name for name in job.task.files if (job.workspace / name).is_file()]
        parts: list[str] = []
        per_file = max(0, budget // max(1, len(files))) if files else 0
        for path in files:
            text = render_file(path.name, path.read_text(encoding="utf-8", errors="replace"))
            header = f"File {path.name}:\n```\n"
            room = max(0, per_file - len(header) - 6)
            parts.append(f"{header}{clip(text, room)}\n```\n\n")
        return head + "".join(parts) + memory + tail

    def _complete(self, messages: list[dict[str, str]], prefix: str, max_tokens: int, notes: dict[str, Any]) -> str:
        """`prefix` (sent as the assistant's unfinished reply, when not empty) plus the model's continuation.

        llama.cpp's server returns the prefix with the continuation; a server that does not is given it back.
        Usage and the finish reason are added to `notes`.
        """
        settings = self.settings
        content = continue_chat(
            self._client,
            messages,
            prefix,
            notes,
            model=settings.model,
            temperature=settings.temperature,
            seed=settings.seed,
            max_tokens=max_tokens or settings.max_tokens,
        )
        if prefix and not content.startswith(prefix.strip()):
            # not echoed: a continuation goes on where the prefix stopped, a fresh block on a line of its own
            content = prefix + ("\n" if content.startswith("```") else "") + content
        return content

    def attempt(self, job: AgentInput) -> AgentResult:
        user = self.user_message(job)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
        notes: dict[str, Any] = {
            "model": self.settings.model,
            "llmCalls": 0,
            "promptTokens": 0,
            "completionTokens": 0,
            "promptChars": len(SYSTEM_PROMPT) + len(user) + len(self.settings.prefill),
            "maxTokens": self.settings.max_tokens,
            "continued": False,
            "lessonsInMemory": sorted({e.pitfall for e in find_lessons(job.injected, job.family.pitfalls)}),
        }
        arguments = {"model": self.settings.model, "promptChars": notes["promptChars"], "maxTokens": notes["maxTokens"]}
        started = time.monotonic()
        content = ""
        error: str | None = None
        try:
            content = self._complete(messages, self.settings.prefill, self.settings.max_tokens, notes)
            follow_up = continuation(content) if self.settings.answer_tokens else None
            if follow_up is not None:
                # it stopped (or ran out of tokens) before the answer block or inside it: ask for just that
                notes["continued"] = True
                content = self._complete(messages, follow_up, self.settings.answer_tokens, notes)
        except httpx.TimeoutException:
            error = "timeout"
            notes["error"] = f"timed out after {self.settings.timeout_s:g}s"
        except (httpx.HTTPError, ValueError) as exc:
            error = "LLM_ERROR"
            notes["error"] = clip(f"{type(exc).__name__}: {exc}", OUTPUT_CHARS)
        notes["durationMs"] = int((time.monotonic() - started) * 1000)
        steps = [tool_call("llm.chat", arguments, clip(content, OUTPUT_CHARS) or notes.get("error"), error=error)]
        notes["answerValid"] = False
        if error is None:
            try:
                answer = extract_answer(content)
            except AnswerError as exc:
                notes["error"] = str(exc)
            else:
                text = json.dumps(answer, indent=2, ensure_ascii=False) + "\n"
                (job.workspace / job.task.output).write_text(text, encoding="utf-8")
                steps.append(
                    tool_call(
                        "write_file", {"path": job.task.output, "content": clip(text, 300)}, f"wrote {len(text)} bytes"
                    )
                )
                notes["answerValid"] = True
        reply = clip(content.strip(), REPLY_CHARS) or f"(no answer: {notes.get('error', 'empty reply')})"
        return AgentResult(reply=reply, steps=steps, notes=notes)
