"""A toy method table and a runnable server, for exercising the transport end to end.

    python tests/transport/toy_server.py [--tcp HOST:PORT] [--max-line-bytes N] [--token T]
        [--shutdown-timeout S] [--host-timeout S] [--max-concurrent N]

In stdio mode the protocol is claimed before anything else is imported, as the real entry point must do.
In TCP mode the bound port is printed to stdout as `LISTENING <port>`.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and "--tcp" not in sys.argv:
    from memos_bridge.transport.stdio import claim_stdio

    claim_stdio()

import argparse
import logging
import os
from functools import partial
from typing import Any

import anyio
from pydantic import BaseModel, Field

from memos_bridge.config import TransportSettings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.transport import (
    CallContext,
    Method,
    PeerHub,
    check_bind_allowed,
    current_peer,
    serve_stdio,
    serve_tcp,
)


class Inner(BaseModel):
    ok: bool


class ValidateParams(BaseModel):
    name: str = Field(min_length=1)
    count: int = Field(ge=0)
    nested: Inner


def build_methods(hub: PeerHub) -> dict[str, Method]:
    """The toy table; `hub` serves `emit` (broadcast to every connected peer)."""

    async def ping(ctx: CallContext) -> str:
        return "pong"

    async def echo(ctx: CallContext, **params: Any) -> dict[str, Any]:
        return params

    async def sleep(ctx: CallContext, seconds: float) -> dict[str, float]:
        await anyio.sleep(seconds)
        return {"slept": seconds}

    async def fail_memos(ctx: CallContext, **params: Any) -> None:
        details = {"sessionId": "se_missing"}
        raise MemosError(ErrorCode.SESSION_NOT_FOUND, "session se_missing not found", details)

    async def crash(ctx: CallContext, **params: Any) -> None:
        raise RuntimeError("secret internal detail")

    async def validate(ctx: CallContext, **params: Any) -> ValidateParams:
        return ValidateParams.model_validate(params)

    async def ask_host(ctx: CallContext, prompt: str, timeout: float | None = None) -> dict[str, Any]:
        peer = current_peer.get()  # deep code finds the connection without the context being passed
        assert peer is not None
        result = await peer.request(
            "host.llm.complete",
            {"messages": [{"role": "user", "content": prompt}], "maxTokens": 16},
            timeout=timeout,
        )
        return {"text": result["text"], "viaContextVar": peer is ctx.peer}

    async def emit(ctx: CallContext, type: str, payload: Any = None) -> dict[str, int]:
        return {"delivered": await hub.emit_event(type, payload)}

    async def print_stray(ctx: CallContext) -> str:
        print("noise from print")
        os.write(1, b"noise from a native library\n")
        return "printed"

    async def whoami(ctx: CallContext) -> dict[str, Any]:
        return {
            "connectionId": ctx.connection_id,
            "transport": ctx.transport,
            "authenticated": ctx.authenticated,
        }

    async def bad_result(ctx: CallContext) -> object:
        return object()

    methods: dict[str, Method] = {
        "ping": ping,
        "echo": echo,
        "sleep": sleep,
        "fail_memos": fail_memos,
        "crash": crash,
        "validate": validate,
        "ask_host": ask_host,
        "emit": emit,
        "print_stray": print_stray,
        "whoami": whoami,
        "bad_result": bad_result,
    }
    return methods


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tcp", metavar="HOST:PORT")
    parser.add_argument("--max-line-bytes", type=int, default=16 << 20)
    parser.add_argument("--token")
    parser.add_argument("--shutdown-timeout", type=float, default=5.0)
    parser.add_argument("--host-timeout", type=float, default=10.0)
    parser.add_argument("--max-concurrent", type=int, default=256)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = TransportSettings(
        max_line_bytes=args.max_line_bytes,
        host_request_timeout_s=args.host_timeout,
        shutdown_timeout_s=args.shutdown_timeout,
        token=args.token,
        max_concurrent_requests=args.max_concurrent,
    )
    hub = PeerHub()
    methods = build_methods(hub)
    if args.tcp is None:
        anyio.run(partial(serve_stdio, methods, settings, on_peer=hub.add))
        return 0
    host, _, port = args.tcp.rpartition(":")
    try:
        check_bind_allowed(host, settings.token)  # fail before the loop starts, not inside a task group
    except MemosError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return 2

    async def run_tcp() -> None:
        async with anyio.create_task_group() as group:
            bound = await group.start(partial(serve_tcp, host, int(port), methods, settings, on_peer=hub.add))
            print(f"LISTENING {bound}", flush=True)

    anyio.run(run_tcp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
