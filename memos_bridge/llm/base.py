"""The LLM provider interface. Every stage that uses an LLM also has a deterministic path without one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


@dataclass
class Completion:
    text: str
    provider: str
    model: str | None = None
    duration_ms: float = 0.0
    usage: dict[str, Any] = field(default_factory=dict)


class LLMProvider(Protocol):
    name: str

    def available(self) -> bool:
        """Whether a call can be attempted now (e.g. a host is connected)."""
        ...

    async def complete(
        self,
        messages: list[ChatMessage],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_ms: int | None = None,
    ) -> Completion: ...
