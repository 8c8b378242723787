"""`openai_compatible` provider: any `/v1/chat/completions` endpoint (Ollama, vLLM, LM Studio, llama.cpp
server, hosted APIs).

Only the small common subset of the protocol is used: `model`, `messages`, `temperature`, `max_tokens`,
`stream: false` and, when the caller has a schema, `response_format`. Servers differ in what
`response_format` they accept, so the provider degrades once and remembers it: `json_schema` (strict) →
`json_object` → none, stepping down when the server answers 400 to the richer form. When the schema cannot
be sent as `response_format`, it is embedded in the system message instead.

HTTP outcomes map onto the LLM error family (see `llm.errors` for the failure kinds):

| outcome | code | kind | retried here |
|---|---|---|---|
| 400 blaming `response_format` | — | — | at once, with the next weaker format |
| 429, 503 | `llm_rate_limited` | transient | yes, back-off honouring `Retry-After` |
| 500, 502, 504, dropped connection | `llm_unavailable` | transient | yes, back-off |
| 401, 402, 403, 404, billing/quota text (any status) | `llm_unavailable` | terminal | no |
| other 4xx | `llm_unavailable` | request | no |
| timeout | `llm_timeout` | transient | no (the deadline is spent) |
| connection refused / DNS | `llm_unavailable` | transient | no (fail fast; the breaker and fallback act) |
| 200 with an unreadable body | `llm_unavailable` | transient | no |

Retries are bounded by `max_retries`, by the call's deadline (a `Retry-After` longer than the time left
ends the call at once) and by the LLM budget: each retry is charged to it (`budget.charge_retry`) before it
is sent, and a spent budget ends the call with the error at hand. The API key is sent only in the
`Authorization` header and never logged or put into an error message.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import anyio
import httpx

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.base import ChatMessage, Completion
from memos_bridge.llm.budget import charge_retry
from memos_bridge.llm.errors import FailureKind, llm_error, looks_like_billing_error
from memos_bridge.llm.schema import ResponseSchema, schema_hint

log = logging.getLogger(__name__)

PROVIDER_NAME: Final = "openai_compatible"
_RETRY_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
_RATE_LIMIT_STATUSES: Final = frozenset({429, 503})
_TERMINAL_STATUSES: Final = frozenset({401, 402, 403, 404})
_ERROR_TEXT_CHARS: Final = 300

ResponseFormatLevel = Literal["json_schema", "json_object", "none"]
Sleep = Callable[[float], Awaitable[None]]


def chat_completions_url(base_url: str) -> str:
    """`http://host:11434/v1` → `…/v1/chat/completions`; a full endpoint URL is kept as given."""
    url = base_url.rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


def parse_retry_after(headers: httpx.Headers, *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, `Retry-After` (seconds or HTTP date); None when absent."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _error_text(response: httpx.Response) -> str:
    """The provider's error message (JSON `error.message` when present), clipped, for logs and errors."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:_ERROR_TEXT_CHARS]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            parts = [str(error.get(key)) for key in ("code", "type", "message") if error.get(key)]
            return " | ".join(parts)[:_ERROR_TEXT_CHARS]
        if isinstance(error, str):
            return error[:_ERROR_TEXT_CHARS]
    return response.text[:_ERROR_TEXT_CHARS]


class OpenAICompatLLM:
    """Chat completions over HTTP with bounded retries, deadline and `response_format` degradation."""

    name = PROVIDER_NAME
    #: The facade passes `response_schema=` to providers that declare this.
    accepts_response_schema = True

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeout_ms: int = 45_000,
        max_retries: int = 3,
        backoff_ms: int = 500,
        backoff_max_ms: int = 20_000,
        json_schema_mode: bool = True,
        max_tokens: int = 1024,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self._url = chat_completions_url(base_url)
        self._api_key = api_key
        self.model = model
        self._timeout_ms = timeout_ms
        self._max_retries = max_retries
        self._backoff_s = backoff_ms / 1000
        self._backoff_max_s = backoff_max_ms / 1000
        self._max_tokens = max_tokens
        self._client = client
        self._owns_client = client is None
        self._sleep = sleep
        self.format_level: ResponseFormatLevel = "json_schema" if json_schema_mode else "json_object"

    def available(self) -> bool:
        return bool(self._url)

    async def aclose(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.aclose()
        self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # Proxies from the environment are ignored: the endpoint is usually local, and a corporate
            # proxy variable must not silently route prompts elsewhere. trust_env=False also skips .netrc.
            self._client = httpx.AsyncClient(trust_env=False)
            self._owns_client = True
        return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _payload(
        self,
        messages: list[ChatMessage],
        model: str | None,
        temperature: float | None,
        max_tokens: int | None,
        schema: ResponseSchema | None,
        level: ResponseFormatLevel,
    ) -> dict[str, Any]:
        wire = [{"role": m.role, "content": m.content} for m in messages]
        if schema is not None and level != "json_schema":
            wire = _with_schema_hint(wire, schema)
        payload: dict[str, Any] = {
            "messages": wire,
            "temperature": 0.0 if temperature is None else temperature,
            "max_tokens": max_tokens or self._max_tokens,
            "stream": False,
        }
        chosen_model = model or self.model
        if chosen_model:  # llama.cpp and LM Studio serve the loaded model when none is named
            payload["model"] = chosen_model
        if schema is not None and level == "json_schema":
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "schema": schema.schema, "strict": schema.strict},
            }
        elif schema is not None and level == "json_object":
            payload["response_format"] = {"type": "json_object"}
        return payload

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
        """One completion within `timeout_ms` (all retries included)."""
        budget_s = (timeout_ms or self._timeout_ms) / 1000
        started = time.monotonic()
        deadline = started + budget_s
        try:
            with anyio.fail_after(budget_s):
                data = await self._send_with_retries(
                    messages, model, temperature, max_tokens, response_schema, deadline
                )
        except TimeoutError as exc:
            raise llm_error(
                ErrorCode.LLM_TIMEOUT, f"no answer within {budget_s:.1f} s", "transient", provider=self.name
            ) from exc
        return self._completion(data, (time.monotonic() - started) * 1000)

    async def _send_with_retries(
        self,
        messages: list[ChatMessage],
        model: str | None,
        temperature: float | None,
        max_tokens: int | None,
        schema: ResponseSchema | None,
        deadline: float,
    ) -> dict[str, Any]:
        attempt = 0
        while True:
            level = self.format_level
            payload = self._payload(messages, model, temperature, max_tokens, schema, level)
            try:
                response = await self._http().post(
                    self._url,
                    json=payload,
                    headers=self._headers(),
                    timeout=max(0.05, deadline - time.monotonic()),
                )
            except httpx.TimeoutException as exc:
                raise llm_error(ErrorCode.LLM_TIMEOUT, "request timed out", "transient", provider=self.name) from exc
            except (httpx.ConnectError, httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
                raise llm_error(
                    ErrorCode.LLM_UNAVAILABLE, f"cannot connect: {type(exc).__name__}", "transient", provider=self.name
                ) from exc
            except httpx.TransportError as exc:  # dropped connection mid-request: worth one more try
                error: MemosError = llm_error(
                    ErrorCode.LLM_UNAVAILABLE, f"transport error: {type(exc).__name__}", "transient", provider=self.name
                )
                retry_after: float | None = None
            else:
                if response.status_code == 200:
                    return self._body(response)
                if response.status_code == 400 and schema is not None and level != "none" and _about_format(response):
                    self._downgrade(level, response)
                    continue  # not a retry: the same request in a form this server accepts
                error, retry_after = self._classify(response)
                if response.status_code not in _RETRY_STATUSES or _failure(error) == "terminal":
                    raise error
            if attempt >= self._max_retries:
                raise error
            delay = self._backoff(attempt, retry_after)
            if time.monotonic() + delay >= deadline:
                raise error  # the server asked for more time than the call has left
            try:
                charge_retry()  # a retry can cost tokens like the first request: the call's budget pays for it
            except MemosError as refused:
                log.info("%s: %s; not retried: %s", self.name, error.message, refused.message)
                raise error from refused
            attempt += 1
            log.info("%s: %s; retry %d/%d in %.2f s", self.name, error.message, attempt, self._max_retries, delay)
            await self._sleep(delay)

    def _downgrade(self, level: ResponseFormatLevel, response: httpx.Response) -> None:
        self.format_level = "json_object" if level == "json_schema" else "none"
        log.warning(
            "%s rejected response_format %s (%s); using %s from now on",
            self.name,
            level,
            _error_text(response),
            self.format_level,
        )

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._backoff_max_s)
        exponential: float = self._backoff_s * 2.0**attempt
        return min(self._backoff_max_s, exponential * random.uniform(0.5, 1.0))

    def _classify(self, response: httpx.Response) -> tuple[MemosError, float | None]:
        status = response.status_code
        text = _error_text(response)
        retry_after = parse_retry_after(response.headers)
        message = f"HTTP {status}: {text}" if text else f"HTTP {status}"
        if status in _TERMINAL_STATUSES or looks_like_billing_error(text):
            return llm_error(ErrorCode.LLM_UNAVAILABLE, message, "terminal", provider=self.name, status=status), None
        if status in _RATE_LIMIT_STATUSES:
            code = ErrorCode.LLM_RATE_LIMITED
            kind: FailureKind = "transient"
        elif status >= 500:
            code, kind = ErrorCode.LLM_UNAVAILABLE, "transient"
        else:
            code, kind = ErrorCode.LLM_UNAVAILABLE, "request"
        error = llm_error(code, message, kind, provider=self.name, status=status, retry_after_s=retry_after)
        return error, retry_after

    def _body(self, response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError as exc:
            raise llm_error(
                ErrorCode.LLM_UNAVAILABLE, "unreadable response body (not JSON)", "transient", provider=self.name
            ) from exc
        if isinstance(data, dict) and "error" in data and "choices" not in data:
            # Some proxies answer 200 with an error object.
            text = str(data["error"])[:_ERROR_TEXT_CHARS]
            kind: FailureKind = "terminal" if looks_like_billing_error(text) else "transient"
            raise llm_error(ErrorCode.LLM_UNAVAILABLE, f"provider error: {text}", kind, provider=self.name)
        if not isinstance(data, dict):
            raise llm_error(
                ErrorCode.LLM_UNAVAILABLE, "response body is not an object", "transient", provider=self.name
            )
        return data

    def _completion(self, data: dict[str, Any], duration_ms: float) -> Completion:
        try:
            message = data["choices"][0]["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise llm_error(
                ErrorCode.LLM_UNAVAILABLE, "response has no choices[0].message", "transient", provider=self.name
            ) from exc
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if not isinstance(content, str):
            content = ""
        usage_raw = data.get("usage")
        usage: dict[str, Any] = {}
        if isinstance(usage_raw, dict):
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                value = usage_raw.get(key)
                if isinstance(value, int):
                    usage[key] = value
        model = data.get("model")
        return Completion(
            text=content,
            provider=self.name,
            model=model if isinstance(model, str) else self.model,
            duration_ms=duration_ms,
            usage=usage,
        )


_FORMAT_WORDS: Final = ("response_format", "json_schema", "json_object", "schema", "format", "grammar", "strict")


def _about_format(response: httpx.Response) -> bool:
    """Whether a 400 blames the requested output format (or says nothing): only then is stepping down worth it.

    A 400 about something else (context too long) must not cost the structured output of later calls.
    """
    text = _error_text(response).lower()
    return not text.strip() or any(word in text for word in _FORMAT_WORDS)


def _failure(error: MemosError) -> str | None:
    details = error.details
    return details.get("failure") if isinstance(details, dict) else None


def _with_schema_hint(wire: list[dict[str, str]], schema: ResponseSchema) -> list[dict[str, str]]:
    """Append the schema hint to the system message (or add one) when `response_format` cannot carry it."""
    hint = schema_hint(schema.schema)
    if wire and wire[0]["role"] == "system":
        return [{"role": "system", "content": wire[0]["content"] + "\n\n" + hint}, *wire[1:]]
    return [{"role": "system", "content": hint}, *wire]
