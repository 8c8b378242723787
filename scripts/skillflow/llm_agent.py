"""An agent backed by an OpenAI-compatible chat endpoint (a local llama.cpp / xllamacpp server, vLLM, Ollama, …).

One model call per task: the system prompt fixes the answer format, the user message carries the memory block
the service injected (empty without memory), the task's text and the task's input files (clipped so the whole
prompt stays under `max_prompt_chars`). Decoding is greedy (temperature 0, a fixed seed) and bounded
(`max_tokens`). The model may reason first but must end with a ```json fenced block holding the full content
of the task's output file; the agent takes the last such block, and only a JSON object is written to the
workspace. Anything else (no block, invalid JSON, a timeout, an HTTP error) writes nothing, so the family's
verifier fails the task.

The model call is reported as a tool step (`llm.chat`) followed by the `write_file` step when an answer was
written; the notes carry the call count, the `usage` tokens, the wall time and why an answer was refused.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

from skillflow.agents import MEMORY_HEADER, OUTPUT_CHARS, REPLY_CHARS, AgentInput, AgentResult, tool_call
from skillflow.lessons import find_lessons

SYSTEM_PROMPT = (
    "You are a careful data analyst. You get a task, the content of its input files and possibly notes from "
    "earlier tasks. Follow the notes: they record mistakes that were made before. Think step by step and keep "
    "the reasoning short, then end your reply with exactly one fenced block that starts with ```json and holds "
    "the complete content of the output file as one JSON object. Write nothing after that block."
)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


class AnswerError(ValueError):
    """The model's reply holds no usable final answer."""


def extract_answer(text: str) -> dict[str, Any]:
    """The JSON object in the last fenced block of `text` (```json preferred, a bare ``` accepted).

    Raises `AnswerError` when there is no fenced block, the last one is not valid JSON, or it is not an object.
    """
    blocks = _FENCE.findall(text)
    if not blocks:
        raise AnswerError("no ```json block in the reply")
    try:
        value = json.loads(blocks[-1])
    except json.JSONDecodeError as exc:
        raise AnswerError(f"the last ```json block is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    if not isinstance(value, dict):
        raise AnswerError(f"the answer is a JSON {type(value).__name__}, not an object")
    return value


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


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
        """Memory block, task text and the input files, the files clipped to keep the prompt bounded."""
        # the memory block may take at most half the prompt; the files share what is left
        injected = _clip(job.injected.strip(), self.settings.max_prompt_chars // 2)
        memory = f"{MEMORY_HEADER}\n\n{injected}\n\n" if injected else ""
        head = f"{memory}Task:\n{job.user_text.strip()}\n\n"
        tail = (
            f"Write the content of {job.task.output} as the final ```json block (one JSON object with exactly the "
            "fields the task names)."
        )
        budget = self.settings.max_prompt_chars - len(SYSTEM_PROMPT) - len(head) - len(tail)
        files = [job.workspace / name for name in job.task.files if (job.workspace / name).is_file()]
        parts: list[str] = []
        per_file = max(0, budget // max(1, len(files))) if files else 0
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            header = f"File {path.name}:\n```\n"
            room = max(0, per_file - len(header) - 6)
            parts.append(f"{header}{_clip(text, room)}\n```\n\n")
        return head + "".join(parts) + tail

    def chat(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """One chat completion; the raw JSON response."""
        body = {
            "model": self.settings.model,
            "messages": messages,
            "temperature": self.settings.temperature,
            "seed": self.settings.seed,
            "max_tokens": self.settings.max_tokens,
        }
        response = self._client.post("chat/completions", json=body)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def attempt(self, job: AgentInput) -> AgentResult:
        user = self.user_message(job)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
        notes: dict[str, Any] = {
            "model": self.settings.model,
            "llmCalls": 1,
            "promptTokens": 0,
            "completionTokens": 0,
            "promptChars": len(SYSTEM_PROMPT) + len(user),
            "maxTokens": self.settings.max_tokens,
            "lessonsInMemory": sorted({e.pitfall for e in find_lessons(job.injected, job.family.pitfalls)}),
        }
        arguments = {"model": self.settings.model, "promptChars": notes["promptChars"], "maxTokens": notes["maxTokens"]}
        started = time.monotonic()
        content = ""
        error: str | None = None
        try:
            data = self.chat(messages)
            choice = (data.get("choices") or [{}])[0]
            content = str((choice.get("message") or {}).get("content") or "")
            usage = data.get("usage") or {}
            notes["promptTokens"] = int(usage.get("prompt_tokens") or 0)
            notes["completionTokens"] = int(usage.get("completion_tokens") or 0)
            notes["finishReason"] = choice.get("finish_reason")
        except httpx.TimeoutException:
            error = "timeout"
            notes["error"] = f"timed out after {self.settings.timeout_s:g}s"
        except (httpx.HTTPError, ValueError) as exc:
            error = "LLM_ERROR"
            notes["error"] = _clip(f"{type(exc).__name__}: {exc}", OUTPUT_CHARS)
        notes["durationMs"] = int((time.monotonic() - started) * 1000)
        steps = [tool_call("llm.chat", arguments, _clip(content, OUTPUT_CHARS) or notes.get("error"), error=error)]
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
                        "write_file", {"path": job.task.output, "content": _clip(text, 300)}, f"wrote {len(text)} bytes"
                    )
                )
                notes["answerValid"] = True
        reply = _clip(content.strip(), REPLY_CHARS) or f"(no answer: {notes.get('error', 'empty reply')})"
        return AgentResult(reply=reply, steps=steps, notes=notes)
