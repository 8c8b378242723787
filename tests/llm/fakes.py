"""Test doubles for the LLM layer: a fake clock and a scripted provider."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from memos_bridge.llm.base import ChatMessage, Completion
from memos_bridge.llm.schema import ResponseSchema

Reply = str | BaseException | Callable[[list[ChatMessage]], str]


class FakeClock:
    """Monotonic seconds that only move when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ScriptedProvider:
    """Answers from a script, one entry per call (the last one repeats); records every call.

    An entry is the reply text, an exception to raise, or a function of the messages.
    """

    def __init__(
        self,
        *replies: Reply,
        name: str = "scripted",
        available: bool = True,
        delay_s: float = 0.0,
        usage: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.replies = list(replies) or ['{"ok": true}']
        self.is_available = available
        self.delay_s = delay_s
        self.usage = usage or {}
        self.calls: list[list[ChatMessage]] = []
        self.kwargs: list[dict[str, Any]] = []

    def available(self) -> bool:
        return self.is_available

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
        self.kwargs.append(
            {"model": model, "temperature": temperature, "max_tokens": max_tokens, "timeout_ms": timeout_ms}
        )
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        reply = self.replies[min(len(self.calls), len(self.replies)) - 1]
        if isinstance(reply, BaseException):
            raise reply
        text = reply(messages) if callable(reply) else reply
        return Completion(text=text, provider=self.name, model=f"{self.name}-model", usage=dict(self.usage))


class SchemaAwareProvider(ScriptedProvider):
    """A scripted provider that, like `openai_compatible`, takes the schema as a request parameter."""

    accepts_response_schema = True

    def __init__(self, *replies: Reply, **kwargs: Any) -> None:
        super().__init__(*replies, **kwargs)
        self.schemas: list[ResponseSchema | None] = []

    async def complete(
        self,
        messages: list[ChatMessage],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_ms: int | None = None,
        response_schema: ResponseSchema | None = None,
    ) -> Completion:
        self.schemas.append(response_schema)
        return await super().complete(
            messages, model=model, temperature=temperature, max_tokens=max_tokens, timeout_ms=timeout_ms
        )
