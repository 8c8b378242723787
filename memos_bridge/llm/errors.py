"""How an LLM failure should be treated: by the circuit breaker, the provider chain and the callers.

Providers raise `MemosError` with one of the `llm_*` codes. The code says what happened to *this call*;
the breaker also needs to know what it says about the *provider*, so providers attach a failure kind in
`details["failure"]`:

* `terminal` — the provider will keep failing until a human acts (bad key, exhausted quota, billing,
  unknown model). Calling again only burns money and log lines (the reference's issue #1897: ~12 900
  paid calls in a day on an exhausted key), so the breaker opens for a long cool-down.
* `transient` — timeouts, rate limits, 5xx, refused connections: worth trying again later; a run of them
  opens the breaker for a short cool-down.
* `request` — the provider is fine but rejected this request (e.g. context too long): neither.
"""

from __future__ import annotations

from typing import Any, Final, Literal, cast

from memos_bridge.contract.errors import ErrorCode, MemosError

FailureKind = Literal["terminal", "transient", "request"]

#: Codes after which a caller should behave exactly as if no LLM were configured.
NO_LLM_CODES: Final = frozenset(
    {
        ErrorCode.LLM_UNAVAILABLE,
        ErrorCode.LLM_RATE_LIMITED,
        ErrorCode.LLM_TIMEOUT,
        ErrorCode.LLM_OUTPUT_MALFORMED,
        ErrorCode.LLM_BUDGET_EXHAUSTED,
        ErrorCode.LLM_CIRCUIT_OPEN,
    }
)

#: Phrases in an error body that mean "the account cannot pay": terminal whatever the HTTP status says
#: (OpenAI reports an exhausted quota as 429 `insufficient_quota`, which must not be retried).
BILLING_MARKERS: Final = (
    "insufficient_quota",
    "insufficient quota",
    "exceeded your current quota",
    "billing",
    "payment required",
    "credit balance",
    "out of credits",
    "account is suspended",
    "account suspended",
    "account deactivated",
    "account_deactivated",
    "access_terminated",
)


def looks_like_billing_error(body: str) -> bool:
    """Whether a provider's error text says the account cannot pay (case-insensitive)."""
    lowered = body.lower()
    return any(marker in lowered for marker in BILLING_MARKERS)


def llm_error(
    code: ErrorCode,
    message: str,
    failure: FailureKind,
    *,
    provider: str,
    status: int | None = None,
    retry_after_s: float | None = None,
) -> MemosError:
    """A provider error with the details the breaker and the api log read (never the key or the prompt)."""
    details: dict[str, Any] = {"provider": provider, "failure": failure}
    if status is not None:
        details["status"] = status
    if retry_after_s is not None:
        details["retryAfterS"] = round(retry_after_s, 3)
    return MemosError(code, message, details)


def failure_kind(exc: MemosError) -> FailureKind:
    """The failure kind a provider attached, or the default for its code (host errors carry none)."""
    details = exc.details
    if isinstance(details, dict):
        kind = details.get("failure")
        if kind in ("terminal", "transient", "request"):
            return cast(FailureKind, kind)
    if exc.code is ErrorCode.LLM_OUTPUT_MALFORMED:
        return "request"
    return "transient"
