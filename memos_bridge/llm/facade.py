"""`LLMFacade`: the one door through which the service talks to language models.

Callers (intent, relevance filter, summaries, reward, L2, repair) ask for a *validated answer to a
prompt*; everything that makes LLM calls safe to automate happens here, once:

* rendering the prompt (`llm.prompts`) and sending its output schema as a hint — `response_format:
  json_schema` to providers that accept it, the schema as text in the system message to the others;
* tolerant parsing (`llm.jsonparse`) and pydantic validation, with ONE corrective retry on a malformed
  answer; a second malformed answer raises `llm_output_malformed` so the caller runs its deterministic
  path;
* one deadline per call covering every attempt (`timeout_ms`, default `LLMSettings.timeout_ms`);
* the provider chain: the configured provider first, then (with `fallback_to_host`) the host's
  `host.llm.complete` when the first is unavailable, circuit-broken or failing;
* a circuit breaker per provider (`llm.breaker`), and call budgets per episode and per hour
  (`llm.budget`) that raise `llm_budget_exhausted`;
* an `api_logs` entry for every attempt (successes, failures, malformed answers and retries) and per-op
  counters in `stats()`.

Every error it raises is a `MemosError` whose code is in `NO_LLM_CODES`: a caller catches `MemosError`
and behaves as if no LLM were configured. The facade also satisfies the `LLMProvider` protocol
(`complete(messages, …)`), so code that only needs raw text (`llm.test`) goes through the same budgets,
breakers and logs.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol, TypeVar, cast

import anyio
from pydantic import BaseModel

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.apilog import ApiLogEntry, ApiLogSink, NullApiLogSink
from memos_bridge.llm.base import ChatMessage, Completion, LLMProvider
from memos_bridge.llm.breaker import BreakerPolicy, CircuitBreaker, Clock
from memos_bridge.llm.budget import CallBudget, charging_retries
from memos_bridge.llm.errors import failure_kind
from memos_bridge.llm.jsonparse import strip_think
from memos_bridge.llm.prompts import Prompt, TextPrompt
from memos_bridge.llm.schema import MalformedOutput, ResponseSchema, response_schema, schema_hint, validate_output

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: Characters of a parsed result or an error message kept in an `api_logs` row.
LOG_OUTPUT_CHARS: Final = 2000
#: Characters of the malformed answer echoed back in the corrective retry.
ECHO_CHARS: Final = 2000
#: The timeout passed to a provider is rounded up to this step (the facade enforces the exact deadline).
TIMEOUT_STEP_MS: Final = 100


class _SchemaAwareProvider(Protocol):
    """A provider that takes the output schema as a request parameter (`accepts_response_schema = True`)."""

    async def complete(
        self,
        messages: list[ChatMessage],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_ms: int | None = None,
        response_schema: ResponseSchema | None = None,
    ) -> Completion: ...


@dataclass
class OpStats:
    """Counters of one operation (`op`), as `stats()` reports them."""

    calls: int = 0
    failures: int = 0
    malformed: int = 0
    budget_refused: int = 0
    fallbacks: int = 0
    retries: int = 0  # requests a provider re-sent on its own (HTTP retries, rate-limit back-off), budgeted
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["latency_ms"] = round(self.latency_ms, 1)
        return data


@dataclass(frozen=True)
class _CallContext:
    """What every attempt of one facade call shares (for the logs and the deadline)."""

    op: str
    episode_id: str | None
    prompt_id: str | None
    prompt_version: int | None
    deadline: float
    timeout_ms: int
    temperature: float | None
    max_tokens: int | None
    model: str | None = None


def usage_tokens(usage: Mapping[str, Any]) -> tuple[int, int]:
    """(prompt, completion) tokens from an OpenAI-style or camelCase (host) usage object."""

    def pick(*keys: str) -> int:
        for key in keys:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0

    return (
        pick("prompt_tokens", "promptTokens", "input_tokens"),
        pick("completion_tokens", "completionTokens", "output_tokens"),
    )


def _clip_json(value: Any) -> Any:
    """`value` when its JSON is short enough for a log row, else its JSON text clipped."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= LOG_OUTPUT_CHARS else {"clipped": text[:LOG_OUTPUT_CHARS]}


def _with_hint(messages: list[ChatMessage], hint: str) -> list[ChatMessage]:
    if messages and messages[0].role == "system":
        return [ChatMessage("system", messages[0].content + "\n\n" + hint), *messages[1:]]
    return [ChatMessage("system", hint), *messages]


class LLMFacade:
    """Provider chain + budgets + breakers + validation + logging. Lives on one event loop."""

    def __init__(
        self,
        providers: Sequence[LLMProvider],
        *,
        budget: CallBudget | None = None,
        sink: ApiLogSink | None = None,
        breaker_policy: BreakerPolicy | None = None,
        clock: Clock = time.monotonic,
        default_timeout_ms: int = 45_000,
    ) -> None:
        if not providers:
            raise ValueError("LLMFacade needs at least one provider (use NoLLM for none)")
        self._providers = list(providers)
        self._breakers = [CircuitBreaker(p.name, breaker_policy, clock=clock) for p in self._providers]
        self._budget = budget or CallBudget(0, 0, clock=clock)
        self._sink: ApiLogSink = sink or NullApiLogSink()
        self._clock = clock
        self._default_timeout_ms = default_timeout_ms
        self._stats: dict[str, OpStats] = {}
        #: The configured provider's name (what health reports); an attribute, as `LLMProvider` requires.
        self.name = self._providers[0].name

    @classmethod
    def wrap(cls, llm: LLMProvider) -> LLMFacade:
        """`llm` itself when it is a facade, else an unbudgeted, unlogged facade around that one provider."""
        return llm if isinstance(llm, LLMFacade) else cls([llm])

    @property
    def providers(self) -> list[LLMProvider]:
        return list(self._providers)

    # ------------------------------------------------------------------------------------------ queries

    def available(self, episode_id: str | None = None) -> bool:
        """Whether a call could be attempted now: a provider is reachable, not circuit-broken, within budget."""
        if self._budget.check(episode_id) is not None:
            return False
        return any(
            breaker.would_allow() and _safe_available(provider)
            for provider, breaker in zip(self._providers, self._breakers, strict=True)
        )

    def stats(self) -> dict[str, Any]:
        """Per-op counters, breaker states and budget usage (for `core.health` and logs)."""
        return {
            "ops": {op: stats.to_dict() for op, stats in sorted(self._stats.items())},
            "breakers": {f"{index}:{breaker.name}": breaker.snapshot() for index, breaker in enumerate(self._breakers)},
            "budget": self._budget.snapshot(),
        }

    def breaker(self, index: int = 0) -> CircuitBreaker:
        return self._breakers[index]

    # ------------------------------------------------------------------------------------------ calls

    async def complete_json(
        self,
        prompt: Prompt[M],
        variables: Mapping[str, object],
        *,
        op: str,
        episode_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> M:
        """The prompt's answer, validated as `prompt.schema`.

        Raises MemosError: `llm_output_malformed` after the corrective retry also failed; otherwise the
        chain's error (`llm_unavailable`, `llm_timeout`, `llm_rate_limited`, `llm_circuit_open`,
        `llm_budget_exhausted`).
        """
        messages = prompt.render(variables)
        ctx = self._context(op, episode_id, timeout_ms, prompt)
        schema = response_schema(prompt.id, prompt.schema)
        conversation = messages
        pinned: int | None = None
        for round_number in (1, 2):
            completion, index = await self._call(conversation, ctx, schema, round_number, pinned)
            try:
                result = validate_output(completion.text, prompt.schema)
            except MalformedOutput as exc:
                self._log_malformed(ctx, index, round_number, completion, exc.reason)
                conversation = [*messages, *self._correction(completion.text, exc.reason, json_expected=True)]
                pinned = index
                continue
            self._log_success(ctx, index, round_number, completion, result.model_dump(mode="json"))
            return result
        raise MemosError(
            ErrorCode.LLM_OUTPUT_MALFORMED,
            f"{prompt.tag}: the model's answer did not match the schema twice",
            {"prompt": prompt.id, "version": prompt.version, "op": op},
        )

    async def complete_text(
        self,
        prompt: TextPrompt,
        variables: Mapping[str, object],
        *,
        op: str,
        episode_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> str:
        """The prompt's answer as plain text (`<think>` blocks removed); one retry on an empty answer."""
        messages = prompt.render(variables)
        ctx = self._context(op, episode_id, timeout_ms, prompt)
        conversation = messages
        pinned: int | None = None
        for round_number in (1, 2):
            completion, index = await self._call(conversation, ctx, None, round_number, pinned)
            text = strip_think(completion.text).strip()
            if text:
                self._log_success(ctx, index, round_number, completion, {"chars": len(text)})
                return text
            self._log_malformed(ctx, index, round_number, completion, "empty answer")
            conversation = [*messages, *self._correction(completion.text, "empty answer", json_expected=False)]
            pinned = index
        raise MemosError(ErrorCode.LLM_OUTPUT_MALFORMED, f"{prompt.tag}: the model gave no text twice", {"op": op})

    async def complete(
        self,
        messages: list[ChatMessage],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_ms: int | None = None,
        op: str = "complete",
        episode_id: str | None = None,
    ) -> Completion:
        """`LLMProvider.complete` through the chain, budgets, breakers and logs (no parsing, no retry)."""
        ctx = self._context(op, episode_id, timeout_ms, None, temperature, max_tokens, model)
        completion, index = await self._call(messages, ctx, None, 1, None)
        self._log_success(ctx, index, 1, completion, {"chars": len(completion.text)})
        return completion

    async def flush_logs(self, timeout_s: float = 5.0) -> bool:
        """Wait (off the event loop) until queued `api_logs` entries are stored; True when none is left."""
        return await anyio.to_thread.run_sync(self._sink.drain, timeout_s)

    async def aclose(self) -> None:
        """Close provider clients and let queued log entries reach the database."""
        for provider in self._providers:
            closer = getattr(provider, "aclose", None)
            if callable(closer):
                try:
                    await closer()
                except Exception:
                    log.debug("closing %s failed", provider.name, exc_info=True)
        await self.flush_logs()

    # ------------------------------------------------------------------------------------------ internals

    def _context(
        self,
        op: str,
        episode_id: str | None,
        timeout_ms: int | None,
        prompt: TextPrompt | None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        model: str | None = None,
    ) -> _CallContext:
        budget_ms = timeout_ms or self._default_timeout_ms
        return _CallContext(
            op=op,
            episode_id=episode_id,
            prompt_id=prompt.id if prompt else None,
            prompt_version=prompt.version if prompt else None,
            deadline=self._clock() + budget_ms / 1000,
            timeout_ms=budget_ms,
            temperature=prompt.temperature if prompt else temperature,
            max_tokens=prompt.max_tokens if prompt else max_tokens,
            model=model,
        )

    def _op(self, op: str) -> OpStats:
        return self._stats.setdefault(op, OpStats())

    @staticmethod
    def _correction(bad_answer: str, reason: str, *, json_expected: bool) -> list[ChatMessage]:
        ask = (
            "Answer again with only the JSON object the system message asks for: no prose, no code fence."
            if json_expected
            else "Answer again with the text the system message asks for."
        )
        return [
            ChatMessage("assistant", bad_answer[:ECHO_CHARS]),
            ChatMessage("user", f"That answer could not be used ({reason}). {ask}"),
        ]

    async def _call(
        self,
        messages: list[ChatMessage],
        ctx: _CallContext,
        schema: ResponseSchema | None,
        round_number: int,
        pinned: int | None,
    ) -> tuple[Completion, int]:
        """One successful completion from the first provider in the chain that gives one."""
        indexes = [pinned] if pinned is not None else list(range(len(self._providers)))
        errors: list[MemosError] = []
        for position, index in enumerate(indexes):
            provider, breaker = self._providers[index], self._breakers[index]
            if not _safe_available(provider):
                errors.append(MemosError(ErrorCode.LLM_UNAVAILABLE, f"{provider.name} is not available"))
                continue
            if self._clock() >= ctx.deadline:
                errors.append(
                    MemosError(ErrorCode.LLM_TIMEOUT, f"{ctx.op}: the deadline passed before {provider.name}")
                )
                break
            refusal = self._budget.check(ctx.episode_id)
            if refusal is not None:
                self._op(ctx.op).budget_refused += 1
                self._budget.refused += 1
                raise MemosError(ErrorCode.LLM_BUDGET_EXHAUSTED, refusal, {"episodeId": ctx.episode_id, "op": ctx.op})
            if not breaker.allow():
                errors.append(
                    MemosError(
                        ErrorCode.LLM_CIRCUIT_OPEN,
                        f"{provider.name} is paused for {breaker.retry_in_s():.0f} s after failures",
                        {"provider": provider.name, "retryInS": round(breaker.retry_in_s(), 1)},
                    )
                )
                continue
            self._budget.reserve(ctx.episode_id)
            if position > 0:
                self._op(ctx.op).fallbacks += 1
            started = time.perf_counter()
            try:
                completion = await self._attempt(provider, messages, ctx, schema)
            except MemosError as exc:
                breaker.record_failure(failure_kind(exc), exc.message)
                self._log_failure(ctx, index, round_number, exc, (time.perf_counter() - started) * 1000)
                errors.append(exc)
                if exc.code is ErrorCode.LLM_TIMEOUT and self._clock() >= ctx.deadline:
                    break  # the whole call's deadline is spent: a fallback would only run late
                continue
            except BaseException:
                breaker.release()  # cancelled: no verdict on the provider
                raise
            breaker.record_success()
            return completion, index
        raise _chain_error(errors)

    async def _attempt(
        self,
        provider: LLMProvider,
        messages: list[ChatMessage],
        ctx: _CallContext,
        schema: ResponseSchema | None,
    ) -> Completion:
        """One provider call bounded by the remaining deadline; every failure becomes an LLM MemosError."""
        remaining_s = max(ctx.deadline - self._clock(), 0.001)  # `_call` checked that the deadline is ahead
        stats = self._op(ctx.op)
        stats.calls += 1
        # Advisory for the provider (the host forwards it); the exact bound is the fail_after below.
        timeout_ms = min(ctx.timeout_ms, math.ceil(remaining_s * 1000 / TIMEOUT_STEP_MS) * TIMEOUT_STEP_MS)
        started = time.perf_counter()
        try:
            with anyio.fail_after(remaining_s), charging_retries(lambda: self._charge_retry(ctx)):
                if schema is not None and getattr(provider, "accepts_response_schema", False) is True:
                    completion = await cast(_SchemaAwareProvider, provider).complete(
                        messages,
                        model=ctx.model,
                        temperature=ctx.temperature,
                        max_tokens=ctx.max_tokens,
                        timeout_ms=timeout_ms,
                        response_schema=schema,
                    )
                else:
                    wire = _with_hint(messages, schema_hint(schema.schema)) if schema is not None else messages
                    completion = await provider.complete(
                        wire,
                        model=ctx.model,
                        temperature=ctx.temperature,
                        max_tokens=ctx.max_tokens,
                        timeout_ms=timeout_ms,
                    )
        except TimeoutError as exc:
            stats.failures += 1
            stats.latency_ms += (time.perf_counter() - started) * 1000
            raise MemosError(
                ErrorCode.LLM_TIMEOUT,
                f"{provider.name} gave no answer within {remaining_s:.2f} s",
                {"provider": provider.name, "failure": "transient"},
            ) from exc
        except MemosError:
            stats.failures += 1
            stats.latency_ms += (time.perf_counter() - started) * 1000
            raise
        except Exception as exc:  # a provider bug must look like an outage, not crash the caller
            stats.failures += 1
            stats.latency_ms += (time.perf_counter() - started) * 1000
            log.warning("%s raised %s during %s", provider.name, type(exc).__name__, ctx.op, exc_info=True)
            raise MemosError(
                ErrorCode.LLM_UNAVAILABLE,
                f"{provider.name} failed: {type(exc).__name__}",
                {"provider": provider.name, "failure": "transient"},
            ) from exc
        duration_ms = (time.perf_counter() - started) * 1000
        if not completion.duration_ms:
            completion.duration_ms = duration_ms
        tokens_in, tokens_out = usage_tokens(completion.usage)
        stats.tokens_in += tokens_in
        stats.tokens_out += tokens_out
        stats.latency_ms += duration_ms
        if not isinstance(completion.text, str):
            completion.text = ""
        return completion

    def _charge_retry(self, ctx: _CallContext) -> None:
        """A provider re-sends a request of this call (`budget.charge_retry`): one more call on the budget."""
        stats = self._op(ctx.op)
        try:
            self._budget.reserve(ctx.episode_id)
        except MemosError:
            stats.budget_refused += 1
            raise
        stats.retries += 1

    # ------------------------------------------------------------------------------------------ logging

    def _input(self, ctx: _CallContext, index: int, round_number: int) -> dict[str, Any]:
        return {
            "prompt": ctx.prompt_id,
            "version": ctx.prompt_version,
            "op": ctx.op,
            "episodeId": ctx.episode_id,
            "provider": self._providers[index].name,
            "attempt": round_number,
        }

    def _record(
        self, ctx: _CallContext, index: int, round_number: int, output: dict[str, Any], ms: float, ok: bool
    ) -> None:
        entry = ApiLogEntry(
            tool_name=f"llm:{ctx.op}",
            input=self._input(ctx, index, round_number),
            output=output,
            duration_ms=round(ms),
            success=ok,
        )
        try:
            self._sink.record(entry)
        except Exception:
            log.debug("api log sink failed", exc_info=True)

    def _log_success(
        self, ctx: _CallContext, index: int, round_number: int, completion: Completion, result: Any
    ) -> None:
        tokens_in, tokens_out = usage_tokens(completion.usage)
        output = {
            "result": _clip_json(result),
            "model": completion.model,
            "tokensIn": tokens_in,
            "tokensOut": tokens_out,
        }
        self._record(ctx, index, round_number, output, completion.duration_ms, True)

    def _log_malformed(
        self, ctx: _CallContext, index: int, round_number: int, completion: Completion, reason: str
    ) -> None:
        self._op(ctx.op).malformed += 1
        log.info("%s: malformed answer from %s (%s)", ctx.op, self._providers[index].name, reason)
        output = {"error": ErrorCode.LLM_OUTPUT_MALFORMED.value, "message": reason[:LOG_OUTPUT_CHARS]}
        self._record(ctx, index, round_number, output, completion.duration_ms, False)

    def _log_failure(self, ctx: _CallContext, index: int, round_number: int, exc: MemosError, ms: float) -> None:
        log.info("%s: %s failed with %s (%s)", ctx.op, self._providers[index].name, exc.code.value, exc.message)
        output = {"error": exc.code.value, "message": exc.message[:LOG_OUTPUT_CHARS], "failure": failure_kind(exc)}
        self._record(ctx, index, round_number, output, ms, False)


def _safe_available(provider: LLMProvider) -> bool:
    try:
        return bool(provider.available())
    except Exception:
        log.debug("%s.available() raised", provider.name, exc_info=True)
        return False


def _chain_error(errors: list[MemosError]) -> MemosError:
    """The error that best explains why no provider answered.

    A real failure (timeout, rate limit, bad key) explains more than "paused" or "not available", and the
    configured provider's failure comes first in the list.
    """
    if not errors:
        return MemosError(ErrorCode.LLM_UNAVAILABLE, "no LLM provider configured")
    attempts = [{"code": e.code.value, "message": e.message[:200]} for e in errors]
    for error in errors:
        if error.code not in (ErrorCode.LLM_CIRCUIT_OPEN, ErrorCode.LLM_UNAVAILABLE) or (
            isinstance(error.details, dict) and "failure" in error.details
        ):
            return MemosError(error.code, error.message, {**_details(error), "attempts": attempts})
    circuit = next((e for e in errors if e.code is ErrorCode.LLM_CIRCUIT_OPEN), None)
    chosen = circuit or errors[0]
    return MemosError(chosen.code, chosen.message, {**_details(chosen), "attempts": attempts})


def _details(error: MemosError) -> dict[str, Any]:
    return dict(error.details) if isinstance(error.details, dict) else {}
