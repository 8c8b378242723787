"""The method table and everything between a parsed message and a wire-ready reply.

jsonrpcserver does the JSON-RPC bookkeeping (envelope validation, batches, notifications, argument binding
against the method's signature). Around it this module adds what a service exposed to other programs
needs:

* a guard around every method, so that nothing internal reaches a client: `MemosError` keeps its stable
  code, pydantic validation errors become -32602 with a readable summary, anything else is logged and
  answered with an opaque "internal error" (jsonrpcserver alone would send `str(exc)`);
* `data` in the `{name: "MemosError", code, message}` shape for the errors jsonrpcserver itself produces
  (unknown method, bad arguments, bad envelope), so clients can always switch on `error.data.code`;
* a cheap envelope check for the common well-formed request, falling back to jsonrpcserver's JSON
  Schema validator (the authority) for anything else; the schema check dominates dispatch cost otherwise;
* the authentication gate used on TCP connections that have not presented the token yet.

Lines are parsed once by the peer; the parsed value reaches jsonrpcserver through a pass-through
deserializer.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from jsonrpcserver import Error, JsonRpcError, Success
from jsonrpcserver.async_main import dispatch_to_response
from jsonrpcserver.main import default_validator
from jsonrpcserver.sentinels import NODATA
from oslash.either import Left, Right
from pydantic import BaseModel, ValidationError

from memos_bridge.contract.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
    ErrorCode,
    MemosError,
    jsonrpc_code,
)
from memos_bridge.transport.context import CallContext, current_peer
from memos_bridge.transport.framing import Oversized
from memos_bridge.transport.limits import BadValue, check_value, valid_id

logger = logging.getLogger(__name__)

Method = Callable[..., Awaitable[Any]]
"""`async def fn(ctx: CallContext, **params) -> Any`: return a JSON-able value (or a pydantic model)."""

AUTH_METHOD = "auth"
_MAX_SUMMARY_ERRORS = 5
_MAX_NAME_IN_MESSAGE = 200
_SEPARATORS = (",", ":")

INTERNAL_DATA: dict[str, Any] = MemosError(ErrorCode.INTERNAL, "internal error").to_data()


# --------------------------------------------------------------------------------------------- methods


def guard(name: str, fn: Method) -> Method:
    """Wrap `fn` so every outcome becomes a jsonrpcserver Result and nothing internal leaks.

    `functools.wraps` sets `__wrapped__`, so jsonrpcserver's `inspect.signature(...).bind` check still sees
    `fn`'s real signature and answers -32602 for arguments that cannot bind, before `fn` is called.
    """

    @functools.wraps(fn)
    async def guarded(ctx: CallContext, *args: Any, **kwargs: Any) -> Any:
        token = current_peer.set(ctx.peer)
        try:
            value = await fn(ctx, *args, **kwargs)
        except MemosError as err:
            return Error(jsonrpc_code(err.code), err.message, err.to_data())
        except ValidationError as err:
            return _invalid_params(err)
        except JsonRpcError:
            raise  # a deliberate protocol-level answer; jsonrpcserver turns it into the error as given
        except Exception:
            logger.exception("method %s failed on connection %s", name, ctx.connection_id)
            return Error(SERVER_ERROR, "internal error", INTERNAL_DATA)
        finally:
            current_peer.reset(token)
        if isinstance(value, Left | Right):  # a jsonrpcserver Result built by the method itself
            return value
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True)
        return Success(value)

    # jsonrpcserver computes the signature on every call; a precomputed one spares the unwrapping.
    guarded.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return guarded


def _invalid_params(exc: ValidationError) -> Any:
    errors = [
        {"loc": ".".join(str(part) for part in err["loc"]), "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_context=False, include_input=False)
    ]
    parts = [f"{e['loc']}: {e['msg']}" if e["loc"] else e["msg"] for e in errors[:_MAX_SUMMARY_ERRORS]]
    if len(errors) > _MAX_SUMMARY_ERRORS:
        parts.append(f"and {len(errors) - _MAX_SUMMARY_ERRORS} more")
    err = MemosError(ErrorCode.INVALID_ARGUMENT, "invalid params: " + "; ".join(parts), {"errors": errors})
    return Error(INVALID_PARAMS, err.message, err.to_data())


async def _auth(ctx: CallContext, token: Any = None) -> dict[str, bool]:
    """Built-in `auth {token}`: the peer checks the token (constant time) and counts failures."""
    return ctx.peer.authenticate(token)


async def _unauthorized(ctx: CallContext, *args: Any, **kwargs: Any) -> Any:
    raise MemosError(ErrorCode.UNAUTHORIZED, "authentication required: call auth with the token first")


class _AuthGate(dict[str, Callable[..., Any]]):
    """The table an unauthenticated connection sees: `auth`, and a refusal for every other name.

    Unknown names are refused as well (not -32601) and the refusal takes any arguments, so a caller
    without the token learns nothing about which methods exist or what they accept.
    """

    def __init__(self, auth: Callable[..., Any], refuse: Callable[..., Any]) -> None:
        super().__init__({AUTH_METHOD: auth})
        self._refuse = refuse

    def __missing__(self, key: str) -> Callable[..., Any]:
        return self._refuse


class MethodTable:
    """Guarded methods, built once per server and shared by all its connections.

    Adds the built-in `auth` method. Rejects non-coroutine functions early: a sync method would block the
    event loop and every other request with it.
    """

    def __init__(self, methods: Mapping[str, Method]) -> None:
        if AUTH_METHOD in methods:
            raise ValueError(f"{AUTH_METHOD!r} is provided by the transport")
        table: dict[str, Callable[..., Any]] = {}
        for name, fn in methods.items():
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"method {name!r} must be an async function")
            table[name] = guard(name, fn)
        table[AUTH_METHOD] = guard(AUTH_METHOD, _auth)
        self.open: dict[str, Callable[..., Any]] = table
        self.gated: dict[str, Callable[..., Any]] = _AuthGate(table[AUTH_METHOD], guard("?", _unauthorized))

    def __contains__(self, name: object) -> bool:
        return name in self.open


def prepare_methods(methods: Mapping[str, Method] | MethodTable) -> MethodTable:
    return methods if isinstance(methods, MethodTable) else MethodTable(methods)


# -------------------------------------------------------------------------------------------- dispatch


async def dispatch(message: Any, ctx: CallContext, table: dict[str, Callable[..., Any]]) -> Any:
    """Run one parsed request or batch; returns the wire reply (dict or list), or None for none.

    Every request is checked before it runs (`limits.py`: ids, integers, floats, surrogates, depth), and a
    batch is answered member by member: an invalid member gets its own error object and the valid ones
    still run, as JSON-RPC 2.0 asks (one response per request that has an id).
    """
    if type(message) is list and message:
        return await _dispatch_batch(message, ctx, table)
    if type(message) is dict:
        refused = _refusal(message)
        if refused is not None:
            return None if refused is _NO_REPLY else refused
    return await _run(message, ctx, table)


async def _run(message: Any, ctx: CallContext, table: dict[str, Callable[..., Any]]) -> Any:
    def passthrough(_text: str) -> Any:
        return message

    return await dispatch_to_response(
        "",
        table,
        context=ctx,
        deserializer=passthrough,
        validator=validate_envelope,
        post_process=to_wire,
    )


async def _dispatch_batch(batch: list[Any], ctx: CallContext, table: dict[str, Callable[..., Any]]) -> Any:
    replies: list[dict[str, Any]] = []
    runnable: list[Any] = []
    for member in batch:
        refused = _refusal(member, in_batch=True)
        if refused is None:
            runnable.append(member)
        elif refused is not _NO_REPLY:
            replies.append(refused)
    if runnable:
        answered = await _run(runnable, ctx, table)
        if isinstance(answered, list):
            replies.extend(answered)
        elif answered is not None:
            replies.append(answered)
    return replies or None


_NO_REPLY: Any = object()


def _refusal(item: Any, *, in_batch: bool = False) -> Any:
    """The error reply for a request that must not run, `_NO_REPLY` for a refused notification, else None.

    Outside a batch, a malformed envelope is left to jsonrpcserver's validator (its -32600 is the answer);
    inside one it is answered here, so that the batch's valid members still run.
    """
    if type(item) is not dict:
        return _invalid_request(None) if in_batch else None
    has_id = "id" in item
    if has_id and not valid_id(item["id"]):
        return _invalid_request(None, "the id must be a string, a safe integer, a finite number or null")
    reply_id = item.get("id")
    if in_batch and not _plainly_valid(item):
        try:
            default_validator(item)
        except Exception:
            return _invalid_request(reply_id)
    try:
        check_value(item.get("method"), "method")
        if "params" in item:
            check_value(item["params"])
    except BadValue as bad:
        if not has_id:
            return _NO_REPLY
        err = MemosError(ErrorCode.INVALID_ARGUMENT, f"invalid params: {_clip(str(bad))}", {"path": bad.path})
        return error_response(INVALID_PARAMS, err.message, err.to_data(), reply_id)
    return None


def _invalid_request(reply_id: Any, reason: str | None = None) -> dict[str, Any]:
    message = "invalid request: expected a JSON-RPC 2.0 request object"
    data = memos_data(ErrorCode.PROTOCOL_ERROR, f"{message}: {reason}" if reason else message)
    return error_response(INVALID_REQUEST, "Invalid request", data, reply_id)


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


_ENVELOPE_KEYS = frozenset(("jsonrpc", "method", "id", "params"))
_ID_TYPES = (str, int, float, type(None))
_PARAMS_TYPES = (list, dict)


def _plainly_valid(item: Any) -> bool:
    """True only for requests the JSON-RPC request schema certainly accepts (`type() is` excludes bool)."""
    return (
        type(item) is dict
        and item.get("jsonrpc") == "2.0"
        and type(item.get("method")) is str
        and item.keys() <= _ENVELOPE_KEYS
        and ("id" not in item or type(item["id"]) in _ID_TYPES)
        and ("params" not in item or type(item["params"]) in _PARAMS_TYPES)
    )


def validate_envelope(message: Any) -> Any:
    """jsonrpcserver validator: fast path for the obvious case, the real schema for everything else."""
    if type(message) is dict:
        if _plainly_valid(message):
            return message
    elif type(message) is list and message and all(map(_plainly_valid, message)):
        return message
    default_validator(message)  # raises for an invalid envelope → -32600
    return message


def to_wire(response: Any) -> dict[str, Any]:
    """jsonrpcserver post-processor: Response → wire dict, with MemosError-shaped `data`."""
    if isinstance(response, Left):
        err = response._error
        return error_response(err.code, err.message, _normalize_data(err.code, err.data), err.id)
    ok = response._value
    return {"jsonrpc": "2.0", "result": ok.result, "id": ok.id}


def _normalize_data(code: int, data: Any) -> Any:
    """Give jsonrpcserver's own errors (whose `data` is a bare string, or nothing) the MemosError shape."""
    if isinstance(data, dict):
        return data
    if code == METHOD_NOT_FOUND:
        name = data if isinstance(data, str) else "?"
        if len(name) > _MAX_NAME_IN_MESSAGE:
            name = name[:_MAX_NAME_IN_MESSAGE] + "…"
        return memos_data(ErrorCode.UNKNOWN_METHOD, f"unknown method: {name}")
    if code == INVALID_PARAMS:
        detail = "" if data is NODATA else f": {data}"
        return memos_data(ErrorCode.INVALID_ARGUMENT, f"invalid params{detail}")
    if code == INVALID_REQUEST:
        return memos_data(
            ErrorCode.PROTOCOL_ERROR,
            "invalid request: expected a JSON-RPC 2.0 request object or a non-empty array of them",
        )
    if code in (INTERNAL_ERROR, SERVER_ERROR):
        return INTERNAL_DATA  # jsonrpcserver puts str(exc) here; never forward it
    return data


# --------------------------------------------------------------------------------- wire construction


def memos_data(code: ErrorCode, message: str, details: Any = None) -> dict[str, Any]:
    return MemosError(code, message, details).to_data()


def error_response(code: int, message: str, data: Any = NODATA, id: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not NODATA:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error, "id": id}


def parse_error_response(detail: str) -> dict[str, Any]:
    data = memos_data(ErrorCode.PROTOCOL_ERROR, f"parse error: {detail}")
    return error_response(PARSE_ERROR, "Parse error", data)


def too_large_response(marker: Oversized) -> dict[str, Any]:
    err = MemosError(
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"request line exceeds the limit of {marker.limit} bytes",
        {"limit": marker.limit},
    )
    return error_response(INVALID_REQUEST, "Request too large", err.to_data())


def encode_message(message: Any) -> bytes:
    """One JSON line. Raises TypeError/ValueError for values JSON cannot carry (objects, NaN, cycles)."""
    text = json.dumps(message, ensure_ascii=False, separators=_SEPARATORS, allow_nan=False)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # Lone surrogates arrive legally as `\ud800` escapes but have no UTF-8 form; escaped ASCII does.
        return json.dumps(message, separators=_SEPARATORS, allow_nan=False).encode("ascii") + b"\n"


def encode_notification(method: str, params: Any = None) -> bytes:
    """One JSON-RPC notification line (no id: no reply expected); `params` left out when None."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return encode_message(message)


def encode_reply(reply: Any) -> bytes:
    """Encode a reply; a result that cannot be serialised becomes an internal error for its id only."""
    try:
        return encode_message(reply)
    except (TypeError, ValueError, RecursionError):
        if isinstance(reply, list):
            return encode_message([_encodable(item) for item in reply])
        return encode_message(_encodable(reply))


def _encodable(item: Any) -> Any:
    try:
        encode_message(item)
    except (TypeError, ValueError, RecursionError) as exc:
        msg_id = item.get("id") if isinstance(item, dict) else None
        logger.error("reply to request id %r is not JSON-serialisable: %s", msg_id, exc)
        reply_id = msg_id if _is_json_id(msg_id) else None
        return error_response(SERVER_ERROR, "internal error", INTERNAL_DATA, reply_id)
    return item


def _is_json_id(value: Any) -> bool:
    return type(value) in _ID_TYPES
