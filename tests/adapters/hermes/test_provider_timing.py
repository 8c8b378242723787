"""The provider never keeps Hermes waiting, and agents that Hermes re-creates share one turn.

Against a real spawned service, with the service's answers held back at the client boundary where a test needs
a slow or hung service (`HeldAnswers`: the request is sent at once, its answer is delivered only when the test
releases it — what a busy service looks like from the host):

* `prefetch` returns within its budget when `turn.start` is slow, counts the timeout, keeps the call pending and
  serves its answer to the next ask (of the same turn, or of the next turn when that one is late too);
* two provider instances on one session (the gateway builds an agent per message) share the turn: one
  `turn.start`, the same block, one `turn.end`, and feedback handled by a third instance binds to the steps;
  after a restart the same message gets the service's stored answer (the `turnKey` has no timestamp);
* `sync_turn` and `on_session_end` return at once while `turn.end` / `session.close` are held;
* the keepalive probes with `core.health`, and a hung (stopped) service is killed and respawned.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import ServiceClient
from tests.adapters.hermes.conftest import require_hermes

require_hermes("agent.memory_provider")

from memos_bridge_hermes import runtime as runtime_module  # noqa: E402
from memos_bridge_hermes.provider import LATE_RECALL_HEADER, MemosBridgeProvider  # noqa: E402

TASK = "Configure daily log rotation for /var/log/nginx with logrotate"
REPLY = "Added /etc/logrotate.d/nginx with a daily rule and tested it with logrotate -d."
NEXT = "Set up logrotate for the nginx access logs on the new server"
FOLLOW_UP = "Also keep 14 rotated nginx logs compressed with logrotate"
FEEDBACK = "Verifier feedback: task failed, r = -1. The rule must also rotate /var/log/nginx/error.log."


class HeldAnswers:
    """Wraps a client's `call_async`: requests go out at once, answers to `methods` wait for `release()`."""

    def __init__(self, client: ServiceClient, methods: set[str]) -> None:
        self.client = client
        self.methods = methods
        self.real = client.call_async
        self.sent: Counter[str] = Counter()
        self.results: dict[str, list[Any]] = {}
        self.gate = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, method: str, params: Any = None) -> Future[Any]:
        with self.lock:
            self.sent[method] += 1
        inner = self.real(method, params)
        inner.add_done_callback(lambda done: self._record(method, done))
        if method not in self.methods:
            return inner
        outer: Future[Any] = Future()

        def deliver(done: Future[Any]) -> None:
            def later() -> None:
                self.gate.wait()
                error = done.exception()
                if error is not None:
                    outer.set_exception(error)
                else:
                    outer.set_result(done.result())

            threading.Thread(target=later, daemon=True).start()

        inner.add_done_callback(deliver)
        return outer

    def _record(self, method: str, done: Future[Any]) -> None:
        if not done.cancelled() and done.exception() is None:
            with self.lock:
                self.results.setdefault(method, []).append(done.result())

    def release(self) -> None:
        self.gate.set()

    def hold(self) -> None:
        self.gate.clear()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A Hermes home whose service has one finished logrotate task in its memory."""
    hermes_home = tmp_path_factory.mktemp("hermes-timing")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HERMES_HOME", str(hermes_home))
        patch.setenv("MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S", "0")
        try:
            seed = _provider(hermes_home, "timing-seed", prefetch_timeout_s=7)
            _turn(seed, 1, TASK, REPLY)
            seed.on_session_end([])
            assert seed.flush(60)
            seed.shutdown()
            yield hermes_home
        finally:
            runtime_module.shutdown_all()


def _provider(hermes_home: Path, session: str, **overrides: Any) -> MemosBridgeProvider:
    provider = MemosBridgeProvider(config_overrides=overrides)
    provider.initialize(session, hermes_home=str(hermes_home), platform="cli", agent_context="primary")
    return provider


def _messages(user: str, reply: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": json.dumps({"p": "x"})}}
    return [
        {"role": "user", "content": user},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "written"},
        {"role": "assistant", "content": reply},
    ]


def _turn(provider: MemosBridgeProvider, number: int, user: str, reply: str) -> str:
    provider.on_turn_start(number, user)
    block = provider.prefetch(user)
    provider.sync_turn(user, reply, session_id=provider.session_id, messages=_messages(user, reply))
    assert provider.flush(60)
    return block


def _client(provider: MemosBridgeProvider) -> ServiceClient:
    assert provider._lease is not None
    return provider._lease.runtime.client


def _timed(action: Callable[[], Any]) -> tuple[Any, float]:
    began = time.monotonic()
    result = action()
    return result, time.monotonic() - began


def _eventually(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_a_slow_recall_returns_within_budget_and_its_answer_is_served_later(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = _provider(home, "timing-slow", prefetch_timeout_s=0.5)
    _client(provider).core_health(timeout=60)  # the service is up: what follows measures the recall
    held = HeldAnswers(_client(provider), {"turn.start"})
    monkeypatch.setattr(_client(provider), "call_async", held)

    provider.on_turn_start(1, NEXT)
    block, took = _timed(lambda: provider.prefetch(NEXT))
    assert block == "" and took < 0.5 + 0.4
    assert provider.stats["prefetch_timeouts"] == 1
    turn = provider._turns[-1]
    assert turn.recall is not None and not turn.recall.done()  # kept pending, not abandoned

    held.release()  # the answer arrives after the host moved on
    _eventually(lambda: turn.block is not None)
    again, took = _timed(lambda: provider.prefetch(NEXT))  # the next ask of this turn (a re-created agent)
    assert took < 0.2 and "logrotate" in again.lower()
    assert held.sent["turn.start"] == 1  # served from the kept call, not asked again

    # the next turn: its own recall is late too, and the previous turn's late answer was never shown
    held.hold()
    provider.sync_turn(NEXT, REPLY, session_id=provider.session_id, messages=_messages(NEXT, REPLY))
    provider.on_turn_start(2, FOLLOW_UP)
    assert provider.prefetch(FOLLOW_UP) == ""  # turn 1's answer was delivered above: nothing late to serve
    held.release()
    _eventually(lambda: provider._turns[-1].block is not None)
    provider.sync_turn(FOLLOW_UP, "Done.", session_id=provider.session_id, messages=_messages(FOLLOW_UP, "Done."))
    held.hold()
    provider.on_turn_start(3, TASK)
    late, took = _timed(lambda: provider.prefetch(TASK))
    assert took < 0.5 + 0.4 and provider.stats["prefetch_timeouts"] == 3
    assert late.startswith(LATE_RECALL_HEADER) and provider._turns[-2].block in late
    assert provider.stats["late_recalls_served"] == 1
    assert provider.prefetch(TASK) == ""  # a late answer is served once
    held.release()
    provider.sync_turn(TASK, REPLY, session_id=provider.session_id, messages=_messages(TASK, REPLY))
    assert provider.flush(60)
    provider.shutdown()


def test_two_agents_on_one_session_share_the_turn_and_feedback_binds_across_them(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _provider(home, "timing-shared", prefetch_timeout_s=7)
    second = _provider(home, "timing-shared", prefetch_timeout_s=7)  # the gateway's agent for the same chat
    watch = HeldAnswers(_client(first), set())
    monkeypatch.setattr(_client(first), "call_async", watch)

    first.on_turn_start(1, NEXT)
    block = first.prefetch(NEXT)
    second.on_turn_start(1, NEXT)  # the same message handled again (a re-created agent, a retry)
    assert second.prefetch(NEXT) == block and "logrotate" in block.lower()
    assert watch.sent["turn.start"] == 1
    second.sync_turn(NEXT, REPLY, session_id="timing-shared", messages=_messages(NEXT, REPLY))
    assert second.flush(60)
    assert first._turns[-1].synced  # the first agent sees the shared turn captured
    assert first._lease is not None
    judged = first._lease.runtime.session("timing-shared").ends[1]

    third = _provider(home, "timing-shared", prefetch_timeout_s=7)  # the agent for the next message
    third.on_turn_start(2, FEEDBACK)
    assert third.flush(60)
    feedback = third.last_feedback
    assert feedback is not None and feedback["episodeId"] == judged.episode_id
    assert feedback["traceId"] == judged.trace_ids[-1] and feedback["raw"]["traceIds"] == list(judged.trace_ids)
    key = first._turns[-1].turn_key
    assert "timing-shared" in key and ":t1:" in key
    original = watch.results["turn.start"][0]
    for provider in (first, second, third):
        provider.shutdown()

    # a new process (here: a new runtime and service) handling the same message at the same position
    runtime_module.shutdown_all()
    again = _provider(home, "timing-shared", prefetch_timeout_s=7)
    rewatch = HeldAnswers(_client(again), set())
    monkeypatch.setattr(_client(again), "call_async", rewatch)
    again.on_turn_start(1, NEXT)
    assert again._turns[-1].turn_key == key
    assert again.prefetch(NEXT) == block
    assert rewatch.results["turn.start"][0] == original  # the stored answer, latencies and all: not recomputed
    again.shutdown()


def test_sync_turn_and_session_end_never_block_the_host(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = _provider(home, "timing-writes", prefetch_timeout_s=7)
    provider.on_turn_start(1, TASK)
    provider.prefetch(TASK)
    held = HeldAnswers(_client(provider), {"turn.end", "session.close"})
    monkeypatch.setattr(_client(provider), "call_async", held)

    _, took = _timed(
        lambda: provider.sync_turn(TASK, REPLY, session_id=provider.session_id, messages=_messages(TASK, REPLY))
    )
    assert took < 0.2
    _, took = _timed(lambda: provider.on_session_end([]))
    assert took < 0.2
    _eventually(lambda: held.sent["turn.end"] == 1)
    assert not provider.flush(0.5)  # the writes are really waiting on the held answers
    assert held.sent["session.close"] == 0  # queued behind turn.end, in order

    held.release()
    assert provider.flush(60)
    assert held.sent["session.close"] == 1 and provider.stats["turns_ended"] == 1
    episodes = _client(provider).memory_list_episodes(session_id="timing-writes")["episodes"]
    assert episodes and all(episode["status"] == "closed" for episode in episodes)
    provider.shutdown()


def test_keepalive_probes_with_core_health_and_restarts_a_hung_service(home: Path, tmp_path: Path) -> None:
    provider = _provider(home, "timing-keepalive", home=str(tmp_path / "own-home"), keepalive_s=0.5)
    assert provider._lease is not None
    runtime = provider._lease.runtime
    _eventually(lambda: runtime.probes >= 2)
    assert runtime.health is not None and runtime.health["ok"] is True and "learning" in runtime.health
    process = runtime.client.process
    assert process is not None

    os.kill(process.pid, signal.SIGSTOP)  # alive but answering nothing: a hung service
    try:
        _eventually(lambda: runtime.restarts == 1, timeout=30)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
    assert process.wait(timeout=30) == -signal.SIGKILL
    probes = runtime.probes
    _eventually(lambda: runtime.probes > probes)  # the respawned service answers the keepalive
    assert runtime.client.process is not None and runtime.client.process.pid != process.pid
    assert runtime.client.reconnects == 1
    provider.on_turn_start(1, TASK)
    provider.prefetch(TASK)
    provider.sync_turn(TASK, REPLY, session_id=provider.session_id, messages=_messages(TASK, REPLY))
    assert provider.flush(60) and provider.stats["turns_ended"] == 1
    provider.shutdown()
