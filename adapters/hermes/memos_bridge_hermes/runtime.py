"""One shared memos-bridge service per data home per host process, leased by providers.

Hermes creates a provider per agent, and re-creates agents freely: the gateway may build a fresh `AIAgent` for
each message, `/reset` re-initialises the provider, subagents get their own. Spawning a service per provider
would leak processes and pay the model load each time, so providers *lease* a `SharedRuntime` keyed by the
data home (or daemon address): the first lease spawns it, the last release schedules its close after an idle
grace period (a re-created agent reuses it), and an `atexit` hook closes whatever is left. The child also
exits by itself when its stdin closes, so even a crashed host leaves no orphan.

The runtime also owns what must outlive a provider instance:

* the `host.llm.complete` handler (the service's LLM stages run on the host's own model). There is one per
  runtime, not per provider, on purpose: the service asks `host.llm.complete` on the *connection*, with no
  session or episode in the request (`{messages, model?, temperature?, maxTokens?, timeoutMs?}`), and most of
  its calls come from learning chains that run after the turn — often after the agent that produced the
  episode is gone — for the data home as a whole. So there is nothing to dispatch on; what a provider's
  `host_llm=` override gets is a hold on the runtime's handler for as long as its lease lives (the latest
  live override wins, with a warning when two differ; Hermes' own model again once all are released);
* a keepalive thread (`core.health` every `keepalive_s`; two unanswered probes in a row mean the service is
  hung — alive but not answering — so a spawned one is killed and the client's reconnect respawns it);
* per-session state — the session's recent turns (so a re-created agent handling the same message shares the
  turn, its pending `turn.start` and its block instead of recording the turn twice), the last recall (so a
  re-created agent can answer `on_pre_compress`), the results of `turn.end` (so feedback in the next message
  binds to the episode and the trace ids it judges) — and one ordered writer per session, so turn N's
  `turn.end` always lands before turn N+1's.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from memos_bridge.client import CallTimeout, HandlerError, ServiceClient, TransportClosed
from memos_bridge_hermes.config import AdapterConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")
HostLlm = Callable[[dict[str, Any]], dict[str, Any]]
"""Serves `host.llm.complete`: gets `{messages, model?, temperature?, maxTokens?, timeoutMs?}`, returns
`{text, model?, usage?}`."""

PLUGIN_ID = "memos-bridge"
MIN_PROBE_TIMEOUT_S = 2.0
"""A keepalive probe waits at least this long: a busy two-core laptop must not look like a hung service."""
FIRST_PROBE_TIMEOUT_S = 30.0
"""The first probe also waits for the service to start (it loads the embedding model)."""


def hermes_host_llm(params: dict[str, Any]) -> dict[str, Any]:
    """Complete with the host's own model through Hermes' plugin LLM facade (`agent.plugin_llm.PluginLlm`).

    That facade is Hermes' supported lane for plugins that need the user's active model: it resolves the
    provider, auth and fallbacks exactly like the agent does (`agent.auxiliary_client.call_llm`), and never
    hands the plugin a key. Failures become `llm_unavailable`, which the service treats as "no LLM right now"
    and falls back to its deterministic path.
    """
    try:
        from agent.plugin_llm import PluginLlm
    except ImportError as exc:
        raise HandlerError("llm_unavailable", "hermes-agent is not importable in this process") from exc
    messages = [
        {"role": str(m.get("role", "user")), "content": str(m.get("content", ""))}
        for m in params.get("messages") or []
        if isinstance(m, dict)
    ]
    timeout_ms = params.get("timeoutMs")
    started = time.perf_counter()
    try:
        result = PluginLlm(plugin_id=PLUGIN_ID).complete(
            messages,
            temperature=params.get("temperature"),
            max_tokens=params.get("maxTokens"),
            timeout=float(timeout_ms) / 1000.0 if isinstance(timeout_ms, int | float) else None,
            purpose="memos-bridge learning",
        )
    except Exception as exc:
        raise HandlerError("llm_unavailable", f"host model call failed: {exc}") from exc
    usage = getattr(result, "usage", None)
    return {
        "text": str(getattr(result, "text", "") or ""),
        "model": getattr(result, "model", None) or None,
        "usage": {
            "promptTokens": int(getattr(usage, "input_tokens", 0) or 0),
            "completionTokens": int(getattr(usage, "output_tokens", 0) or 0),
            "totalTokens": int(getattr(usage, "total_tokens", 0) or 0),
        },
        "durationMs": round((time.perf_counter() - started) * 1000, 2),
    }


@dataclass(frozen=True)
class TurnEnd:
    """What `turn.end` answered for one user turn: the binding target of feedback on that turn."""

    seq: int
    episode_id: str
    trace_ids: tuple[str, ...]
    user_text: str
    assistant_text: str
    turn_key: str


@dataclass
class TurnState:
    """One user turn of a session, shared by every provider instance of this process that handles it.

    `turn_key` is built from stable parts only (session, rewind count, the host's turn number, the text's
    digest; see `MemosBridgeProvider._turn_key`), so a re-created agent — in this process or after a restart —
    sends the same key and the service answers from its stored result instead of recording the turn again.
    """

    seq: int
    user_text: str
    started_ms: int
    turn_key: str
    internal: bool
    host_turn: int | None = None
    recall: Future[Any] | None = None
    episode_id: str | None = None
    block: str | None = None
    synced: bool = False
    timed_out: bool = False  # a prefetch gave up waiting for this turn's `turn.start`
    delivered: bool = False  # a prefetch returned this turn's block to the host


@dataclass
class Recall:
    """The last recall of a session (the block injected, and where `turn.start` routed the turn)."""

    seq: int
    turn_key: str
    block: str
    episode_id: str | None
    ts: int


class SerialQueue:
    """Jobs for one key run one at a time, in submission order, on a worker thread that exits when idle."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._lock = threading.Lock()
        self._running = False

    def submit(self, job: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            self._jobs.append((job, future))
            if self._running:
                return future
            self._running = True
        threading.Thread(target=self._drain, name=f"memos-writer-{self._name}", daemon=True).start()
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._running = False
                    return
                job, future = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)


@dataclass
class SessionState:
    """Per-session state shared by every provider instance of this process.

    Turns are numbered here (`seq`), so feedback in turn N binds to the `turn.end` of turn N-1 even when the
    host re-created the agent in between, or when turn N-1's `sync_turn` (queued by the host) has not run
    yet: `end_before` waits briefly for it to be queued, then for its `turn.end` to be answered.
    """

    session_id: str
    writer: SerialQueue
    seq: int = 0
    ends: dict[int, TurnEnd] = field(default_factory=dict)
    unsynced: set[int] = field(default_factory=set)
    pending: set[int] = field(default_factory=set)
    recall: Recall | None = None
    opened: bool = False
    rewinds: int = 0  # `/undo` truncations seen: a turn number after one names a different turn
    turns: OrderedDict[str, TurnState] = field(default_factory=OrderedDict)
    condition: threading.Condition = field(default_factory=threading.Condition)

    def shared_turn(self, turn_key: str) -> TurnState | None:
        """The turn another provider instance already started under this key (same message, same position)."""
        with self.condition:
            return self.turns.get(turn_key)

    def remember_turn(self, turn: TurnState) -> None:
        with self.condition:
            self.turns[turn.turn_key] = turn
            self.turns.move_to_end(turn.turn_key)
            while len(self.turns) > 16:
                self.turns.popitem(last=False)

    def late_block(self, before_seq: int) -> TurnState | None:
        """The latest earlier turn whose recall arrived after its prefetch gave up and was never shown."""
        with self.condition:
            for turn in reversed(self.turns.values()):
                if turn.seq < before_seq and turn.timed_out and turn.block and not turn.delivered:
                    return turn
            return None

    def next_seq(self) -> int:
        """Number a new user turn (monotonic for the session, whichever provider instance sees it)."""
        with self.condition:
            self.seq += 1
            self.unsynced.add(self.seq)
            return self.seq

    def mark_pending(self, seq: int) -> None:
        """`turn.end` for this turn is queued: feedback may wait for its answer."""
        with self.condition:
            self.unsynced.discard(seq)
            self.pending.add(seq)
            self.condition.notify_all()

    def record_end(self, end: TurnEnd) -> None:
        with self.condition:
            self.ends[end.seq] = end
            self.unsynced.discard(end.seq)
            self.pending.discard(end.seq)
            for old in [s for s in self.ends if s < end.seq - 32]:
                del self.ends[old]  # only the recent turns can still receive feedback
            self.condition.notify_all()

    def abandon(self, seq: int) -> None:
        """A turn that will never be ended (internal prompt, interrupted, failed): stop waiting for it."""
        with self.condition:
            self.unsynced.discard(seq)
            self.pending.discard(seq)
            self.condition.notify_all()

    def end_before(self, seq: int, sync_grace: float, timeout: float) -> TurnEnd | None:
        """The `turn.end` of the latest turn before `seq`.

        Waits up to `sync_grace` for earlier turns still waiting for the host's `sync_turn` (an interrupted
        turn never gets one), then up to `timeout` for the queued `turn.end` calls of earlier turns.
        """
        start = time.monotonic()
        with self.condition:
            while any(s < seq for s in self.unsynced):
                remaining = start + sync_grace - time.monotonic()
                if remaining <= 0:
                    break
                self.condition.wait(remaining)
            while any(s < seq for s in self.pending):
                remaining = start + timeout - time.monotonic()
                if remaining <= 0:
                    break
                self.condition.wait(remaining)
            earlier = [s for s in self.ends if s < seq]
            return self.ends[max(earlier)] if earlier else None


class SharedRuntime:
    """The service connection of one data home (or daemon) in this process, and its shared state."""

    def __init__(self, config: AdapterConfig) -> None:
        self.config = config
        self.key = config.runtime_key
        # Names this runtime in the turn keys of hosts that give no turn number (never reused by a restart).
        self.instance = f"{os.getpid():x}.{time.time_ns() // 1_000_000:x}"
        self.leases = 0
        self.closed = False
        self._host_llms: list[tuple[object, HostLlm]] = []  # (lease, override), latest last
        self._host_llms_lock = threading.Lock()
        self.health: dict[str, Any] | None = None
        self.probes = 0  # keepalive probes answered
        self.restarts = 0  # hung services killed by the keepalive
        self._sessions: dict[str, SessionState] = {}
        self._sessions_lock = threading.Lock()
        self._stop = threading.Event()
        self._close_timer: threading.Timer | None = None
        if config.tcp:
            host, port = config.tcp_address()
            self.client = ServiceClient.connect_tcp(
                host, port, token=config.token, reconnect=True, default_timeout=config.write_timeout_s
            )
        else:
            config.home.mkdir(parents=True, exist_ok=True)
            self.client = ServiceClient.spawn(config.home, reconnect=True, default_timeout=config.write_timeout_s)
        self.client.on_request("host.llm.complete", self._serve_host_llm)
        self.client.on_reconnect(self._on_reconnect)
        self._keepalive = threading.Thread(target=self._keepalive_loop, name="memos-keepalive", daemon=True)
        self._keepalive.start()

    # ------------------------------------------------------------------ sessions

    def session(self, session_id: str) -> SessionState:
        with self._sessions_lock:
            state = self._sessions.get(session_id)
            if state is None:
                state = SessionState(session_id, SerialQueue(session_id[:24]))
                self._sessions[session_id] = state
            return state

    def forget_session(self, state: SessionState) -> None:
        """Drop a closed session's state (a long-lived gateway sees many sessions)."""
        with self._sessions_lock:
            if self._sessions.get(state.session_id) is state:
                del self._sessions[state.session_id]

    # ------------------------------------------------------------------ host LLM and liveness

    @property
    def host_llm(self) -> HostLlm:
        """What serves `host.llm.complete` now: the latest live override, else Hermes' own model."""
        with self._host_llms_lock:
            return self._host_llms[-1][1] if self._host_llms else hermes_host_llm

    def override_host_llm(self, holder: object, handler: HostLlm) -> None:
        """Serve `host.llm.complete` with `handler` while `holder` (a lease) lives; see the module docstring."""
        with self._host_llms_lock:
            others = {id(h) for lease, h in self._host_llms if lease is not holder and h is not handler}
            self._host_llms = [(lease, h) for lease, h in self._host_llms if lease is not holder]
            self._host_llms.append((holder, handler))
        if others:
            logger.warning(
                "memos-bridge: another provider's host_llm override is replaced for the whole service connection "
                "(one host LLM per data home and process)"
            )

    def drop_host_llm(self, holder: object) -> None:
        with self._host_llms_lock:
            self._host_llms = [(lease, h) for lease, h in self._host_llms if lease is not holder]

    def _serve_host_llm(self, params: Any) -> dict[str, Any]:
        return self.host_llm(params if isinstance(params, dict) else {})

    def _on_reconnect(self) -> None:
        """A respawned service has no live sessions in memory; `session.open` is idempotent, so re-open them."""
        with self._sessions_lock:
            states = [s for s in self._sessions.values() if s.opened]
        for state in states:
            state.writer.submit(partial(self.client.session_open, self.config.agent, session_id=state.session_id))

    def _keepalive_loop(self) -> None:
        """Probe with `core.health` every `keepalive_s` (the issue's keepalive; as cheap as `core.ping` —
        counters and a cached schema version — and it keeps `self.health` current: learning queue, embedder,
        LLM usage). A probe right after a (re)start may wait `FIRST_PROBE_TIMEOUT_S` for the model to load."""
        misses = 0
        starting = True
        delay = 0.0
        while not self._stop.wait(delay):
            delay = self.config.keepalive_s
            timeout = FIRST_PROBE_TIMEOUT_S if starting else max(self.config.keepalive_s, MIN_PROBE_TIMEOUT_S)
            try:
                self.health = self.client.core_health(timeout=timeout)
                self.probes += 1
                misses = 0
                starting = False
            except CallTimeout:
                misses += 1
                if misses >= 2 and self.client.process is not None:
                    logger.warning("memos-bridge did not answer two keepalives; restarting it")
                    with contextlib.suppress(OSError):
                        self.client.process.kill()  # the next call respawns it
                    self.restarts += 1
                    misses = 0
                    starting = True
            except (TransportClosed, OSError) as exc:
                logger.warning("memos-bridge keepalive: %s", exc)
                starting = True  # the next probe reconnects (respawns) first
            except Exception as exc:  # an RpcError here means the service answered: it is alive
                logger.debug("memos-bridge keepalive answered with an error: %s", exc)
                starting = False

    # ------------------------------------------------------------------ lifetime

    def cancel_idle_close(self) -> None:
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None

    def schedule_idle_close(self, delay: float) -> None:
        self.cancel_idle_close()
        timer = threading.Timer(delay, _close_if_idle, args=(self,))
        timer.daemon = True
        self._close_timer = timer
        timer.start()

    def close(self) -> int | None:
        """Stop the keepalive and close the connection (a spawned service finishes its work and exits)."""
        self.closed = True
        self.cancel_idle_close()
        self._stop.set()
        return self.client.close()


_REGISTRY: dict[str, SharedRuntime] = {}
_REGISTRY_LOCK = threading.Lock()


class Lease:
    """A provider's hold on a shared runtime; `release` is idempotent."""

    def __init__(self, runtime: SharedRuntime) -> None:
        self.runtime = runtime
        self._released = False

    def release(self) -> None:
        close_now = False
        self.runtime.drop_host_llm(self)
        with _REGISTRY_LOCK:
            if self._released:
                return
            self._released = True
            runtime = self.runtime
            runtime.leases -= 1
            if runtime.leases > 0 or runtime.closed:
                return
            if runtime.config.idle_close_s <= 0:
                _REGISTRY.pop(runtime.key, None)
                close_now = True
            else:
                runtime.schedule_idle_close(runtime.config.idle_close_s)
        if close_now:
            runtime.close()


def acquire(config: AdapterConfig) -> Lease:
    """Lease the runtime for `config`'s data home (spawning it on first use)."""
    with _REGISTRY_LOCK:
        runtime = _REGISTRY.get(config.runtime_key)
        if runtime is None or runtime.closed:
            runtime = SharedRuntime(config)
            _REGISTRY[config.runtime_key] = runtime
        runtime.leases += 1
        runtime.cancel_idle_close()
        return Lease(runtime)


def _close_if_idle(runtime: SharedRuntime) -> None:
    with _REGISTRY_LOCK:
        if runtime.leases > 0 or runtime.closed:
            return
        if _REGISTRY.get(runtime.key) is runtime:
            del _REGISTRY[runtime.key]
    runtime.close()


def runtimes() -> dict[str, SharedRuntime]:
    """The live runtimes of this process, by key (for diagnostics and tests)."""
    with _REGISTRY_LOCK:
        return dict(_REGISTRY)


def shutdown_all() -> None:
    """Close every runtime now (registered with `atexit`; tests call it between cases)."""
    with _REGISTRY_LOCK:
        live = list(_REGISTRY.values())
        _REGISTRY.clear()
    for runtime in live:
        try:
            runtime.close()
        except Exception:
            logger.exception("closing memos-bridge runtime %s failed", runtime.key)


atexit.register(shutdown_all)
