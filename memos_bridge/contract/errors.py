"""Stable error codes and the JSON-RPC error mapping.

Core code raises `MemosError(code, message, details)`. The transport turns it into a JSON-RPC error whose
`data` is `{name: "MemosError", code, message, details?}`; the numeric code depends only on the string code
(see `jsonrpc_code`). Nothing else (no traceback, no exception text of an unexpected error) ever reaches a
client.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

# JSON-RPC 2.0 numeric codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000


class ErrorCode(StrEnum):
    """Stable string codes carried in `error.data.code`. Never rename one: clients match on them."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    CONFLICT = "conflict"
    INTERNAL = "internal"
    UNSUPPORTED = "unsupported"
    UNAUTHORIZED = "unauthorized"
    NOT_INITIALIZED = "not_initialized"
    ALREADY_SHUT_DOWN = "already_shut_down"
    CONFIG_INVALID = "config_invalid"
    SESSION_NOT_FOUND = "session_not_found"
    EPISODE_NOT_FOUND = "episode_not_found"
    TRACE_NOT_FOUND = "trace_not_found"
    POLICY_NOT_FOUND = "policy_not_found"
    WORLD_MODEL_NOT_FOUND = "world_model_not_found"
    SKILL_NOT_FOUND = "skill_not_found"
    MEMORY_NOT_FOUND = "memory_not_found"
    FEEDBACK_NOT_FOUND = "feedback_not_found"
    LLM_UNAVAILABLE = "llm_unavailable"
    LLM_RATE_LIMITED = "llm_rate_limited"
    LLM_TIMEOUT = "llm_timeout"
    LLM_OUTPUT_MALFORMED = "llm_output_malformed"
    LLM_BUDGET_EXHAUSTED = "llm_budget_exhausted"
    LLM_CIRCUIT_OPEN = "llm_circuit_open"
    EMBEDDING_UNAVAILABLE = "embedding_unavailable"
    UNKNOWN_METHOD = "unknown_method"
    PROTOCOL_ERROR = "protocol_error"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    TRANSPORT_CLOSED = "transport_closed"
    HOST_HANDLER_BUSY = "host_handler_busy"
    DEADLINE_EXCEEDED = "deadline_exceeded"


_INVALID_PARAMS_CODES = {ErrorCode.INVALID_ARGUMENT, ErrorCode.CONFIG_INVALID, ErrorCode.PROTOCOL_ERROR}


def jsonrpc_code(code: ErrorCode) -> int:
    """Numeric JSON-RPC code for a string code (reference mapping, §2.1)."""
    if code in _INVALID_PARAMS_CODES:
        return INVALID_PARAMS
    if code is ErrorCode.UNKNOWN_METHOD:
        return METHOD_NOT_FOUND
    if code is ErrorCode.PAYLOAD_TOO_LARGE:
        return INVALID_REQUEST
    return SERVER_ERROR


class MemosError(Exception):
    """An expected, client-visible failure with a stable code."""

    def __init__(self, code: ErrorCode, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.details = details

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": "MemosError", "code": self.code.value, "message": self.message}
        if self.details is not None:
            data["details"] = self.details
        return data

    def to_jsonrpc_error(self) -> dict[str, Any]:
        return {"code": jsonrpc_code(self.code), "message": self.message, "data": self.to_data()}

    def __repr__(self) -> str:
        return f"MemosError({self.code.value!r}, {self.message!r})"
