"""The method table: one thin handler per contract method (validate params → redact → call core → DTO).

No logic lives here beyond parameter mapping; errors are turned into JSON-RPC errors by the transport's
guard (MemosError → -32000/-32602 with `error.data`, pydantic ValidationError → -32602).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jsonrpcserver import Success
from pydantic import BaseModel

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.methods import METHODS, MethodSpec
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.transfer import paths

Handler = Callable[..., Awaitable[Any]]
CoreCall = Callable[[Any], Awaitable[BaseModel | None]]

# Methods answered by the transport itself (connection state), not by core.
TRANSPORT_METHODS = frozenset({"auth"})
# Methods that show every namespace, like a `namespace: "*"` read: the operator only.
OPERATOR_METHODS = frozenset({"core.namespaces"})
# Methods that act on this machine for the caller (open a listening port): its own user only.
LOCAL_USER_METHODS = frozenset({"viewer.start"})
# Methods that read or write a file the caller names (`path`).
FILE_METHODS = frozenset({"memory.export", "memory.import"})


def _bindings(core: MemoryCore) -> dict[str, CoreCall]:
    return {
        "core.ping": core.ping,
        "core.health": core.health,
        "core.config": core.config,
        "core.namespaces": core.namespaces,
        "session.open": core.open_session,
        "session.close": core.close_session,
        "episode.open": core.open_episode,
        "episode.close": core.close_episode,
        "turn.start": core.turn_start,
        "turn.end": core.turn_end,
        "feedback.submit": core.submit_feedback,
        "memory.flush": core.flush,
        "tool.outcome": core.tool_outcome,
        "memory.search": core.search,
        "memory.get_trace": core.get_trace,
        "memory.timeline": core.timeline,
        "memory.list_traces": core.list_traces,
        "memory.list_episodes": core.list_episodes,
        "memory.list_feedback": core.list_feedback,
        "memory.get_policy": core.get_policy,
        "memory.list_policies": core.list_policies,
        "memory.get_world": core.get_world,
        "memory.list_world_models": core.list_world_models,
        "memory.reinforce": core.reinforce,
        "memory.decay": core.decay,
        "memory.pin": core.pin,
        "memory.unpin": core.unpin,
        "memory.restore": core.restore,
        "memory.link": core.link,
        "memory.set_status": core.set_status,
        "llm.test": core.llm_test,
        "viewer.start": core.start_viewer,
        "skill.list": core.list_skills,
        "skill.get": core.get_skill,
        "skill.archive": core.archive_skill,
        "skill.restore": core.restore_skill,
        "skill.review": core.review_skill,
        "events.subscribe": core.subscribe_events,
        "memory.remember": core.remember,
        "memory.get_memory": core.get_memory,
        "memory.list_memories": core.list_memories,
        "memory.update": core.update_memory,
        "memory.forget": core.forget,
        "memory.history": core.history,
        "memory.purge": core.purge,
        "memory.export": core.export,
        "memory.import": core.import_memories,
        "memory.reflect": core.reflect,
        "memory.stats": core.stats,
        "memory.retrieval_log": core.retrieval_log,
        "memory.analytics": core.analytics,
    }


def _make_handler(spec: MethodSpec, call: CoreCall, redact: Callable[[BaseModel], BaseModel], home: Path) -> Handler:
    params_model = spec.params

    async def handler(ctx: Any, **params: Any) -> Any:
        # Secrets are replaced here, before core sees the params: nothing downstream (storage, embeddings,
        # indexes, logs, LLM prompts, recall) can keep what it never received.
        validated = redact(params_model.model_validate(params))
        if getattr(validated, "namespace", None) == dto.ALL_NAMESPACES or spec.name in OPERATOR_METHODS:
            _require_operator(ctx)
        if spec.name in FILE_METHODS:
            _require_file_access(ctx, getattr(validated, "path", None), home)
        if spec.name in LOCAL_USER_METHODS:
            _require_local_user(ctx)
        result = await call(validated)
        return Success(None if result is None else result.model_dump(mode="json", by_alias=True, exclude_none=True))

    handler.__name__ = spec.name.replace(".", "_")
    handler.__doc__ = spec.summary
    return handler


def _holds_token(ctx: Any) -> bool:
    """A TCP client that proved it holds the daemon's token."""
    peer = getattr(ctx, "peer", None)
    authenticated = bool(getattr(ctx, "authenticated", False))
    return getattr(ctx, "transport", None) == "tcp" and peer is not None and peer.auth_required and authenticated


def _is_viewer(ctx: Any) -> bool:
    """The web viewer, which runs inside the owner and authenticates its own users (loopback, or the token at
    its login page) before it calls anything."""
    return getattr(ctx, "transport", None) == "viewer" and getattr(ctx, "peer", None) is None


def _is_local_user(ctx: Any) -> bool:
    """The caller runs as this machine's user of the data home: the host that spawned the service (stdio), a
    process that reached the home's own socket (mode 600), the viewer, or a TCP client holding the token."""
    return getattr(ctx, "transport", None) in ("stdio", "local") or _is_viewer(ctx) or _holds_token(ctx)


def _require_operator(ctx: Any) -> None:
    """`namespace: "*"` reads every namespace: only a TCP client holding the token, or the viewer, may ask.

    On stdio the peer is whichever host spawned the service, and a TCP daemon without a token accepts anyone
    on the machine; neither proves the caller is the data home's operator."""
    if _is_viewer(ctx) or _holds_token(ctx):
        return
    raise MemosError(
        ErrorCode.UNAUTHORIZED,
        'namespace "*" (every namespace) is allowed only on a TCP connection authenticated with the token; '
        "name a namespace or a sessionId instead",
        {"namespace": "*", "transport": getattr(ctx, "transport", None)},
    )


def _require_local_user(ctx: Any) -> None:
    """Opening a listening port for the caller (`viewer.start`) is for the data home's own user."""
    if _is_local_user(ctx):
        return
    raise MemosError(
        ErrorCode.UNAUTHORIZED,
        "only a process of the data home's user may start the viewer: over stdio, the home's socket, or TCP with "
        "the token",
        {"transport": getattr(ctx, "transport", None)},
    )


def _require_file_access(ctx: Any, raw: str | None, home: Path) -> None:
    """A file the service reads or writes for a caller (`memory.export` / `memory.import`) lies under the data
    home, unless the caller runs on this machine as the service's user. An unauthenticated TCP client (any
    local user, on a loopback daemon without a token) must not make the service read or overwrite the user's
    files."""
    if raw is None or paths.is_under(paths.resolve(home, raw), home) or _is_local_user(ctx):
        return
    raise MemosError(
        ErrorCode.UNAUTHORIZED,
        "over TCP without the token, files are read and written only under the data home: give a path relative "
        f"to {paths.exports_dir(home)}, or connect with the token",
        {"path": raw, "transport": getattr(ctx, "transport", None)},
    )


def build_methods(core: MemoryCore) -> dict[str, Handler]:
    """Handlers for every contract method except the transport's own; fails loudly if one is unbound."""
    bindings = _bindings(core)
    methods: dict[str, Handler] = {}
    for spec in METHODS:
        if spec.name in TRANSPORT_METHODS:
            continue
        if spec.name not in bindings:
            raise RuntimeError(f"contract method {spec.name} has no core binding")
        methods[spec.name] = _make_handler(spec, bindings[spec.name], core.redact, core.home)
    return methods
