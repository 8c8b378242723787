"""Two daemons, one memory: two `memos-bridge serve --tcp` processes with their own data homes on one PostgreSQL
database (a real server from PyPI `pgserver`), started at the same moment on an empty database.

* 20 hosts spread over both daemons capture turns; some retry a `turn.start` or a `turn.end` against the
  OTHER daemon at the same moment as the first attempt. Every step is stored exactly once: nothing lost,
  nothing twice, and both attempts answer with the same trace ids.
* A task captured through B ends there (its chain waits for the feedback window in B), its verdict arrives
  through A: the chain runs once, in A; flushing both daemons runs nothing more; the lesson is recalled by the
  next task through B.
* Events of work done through A reach B's subscribed hosts of that namespace once (no echo), and none of
  another namespace's.
* The decay job of both daemons, which wake together, runs in one of them per interval.

Without `pgserver` the tests are skipped, except where `MEMOS_BRIDGE_REQUIRE_POSTGRES=1` (CI sets it).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from memos_bridge.client import ServiceClient
from tests.postgres import postgres_server

TOKEN = "several-daemons-token"
AGENT = "tester"
DECAY_INTERVAL_S = 8.0
DAY_MS = 86_400_000
SHOP = {"workspaceId": "shop"}


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    port: int = 0

    def connect(self) -> ServiceClient:
        return ServiceClient.connect_tcp("127.0.0.1", self.port, token=TOKEN, default_timeout=180)


@dataclass
class Cluster:
    a: Daemon
    b: Daemon
    sql: Engine
    idle_trace: str  # captured 20 days ago: each decay run weakens it once
    logs: dict[str, Path]

    def learning_log(self) -> str:
        """What both daemons logged about learning and errors (shown when an assertion on learning fails)."""
        keep = ("learning", "experiences", "ERROR", "WARNING", "Error")
        lines = [
            f"{name}: {line}"
            for name, path in self.logs.items()
            for line in path.read_text(errors="replace").splitlines()
            if any(word in line for word in keep)
        ]
        return "\n".join(lines[-60:])


def _spawn(name: str, home: Path, url: str, log: Path) -> Daemon:
    env = {
        **os.environ,
        "MEMOS_BRIDGE_HOME": str(home),
        "MEMOS_BRIDGE_TOKEN": TOKEN,
        "MEMOS_BRIDGE_STORAGE__URL": url,
        # a finished task waits for its verdict (feedback runs the chain at once), as a real host's would
        "MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "600",
        "MEMOS_BRIDGE_STRENGTH__DECAY_INTERVAL_S": str(DECAY_INTERVAL_S),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "memos_bridge", "serve", "--tcp", "127.0.0.1:0", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=log.open("wb"),
        env=env,
    )
    return Daemon(name, proc)


def _wait_listening(daemon: Daemon, log: Path) -> None:
    assert daemon.proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = daemon.proc.stdout.readline().decode()
        match = re.search(r"listening on \S+:(\d+)", line)
        if match:
            daemon.port = int(match.group(1))
            return
        if not line and daemon.proc.poll() is not None:
            break
    daemon.proc.kill()
    raise AssertionError(f"daemon {daemon.name} did not start:\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with postgres_server(tmp_path_factory.mktemp("pg")) as url:
        folder = tmp_path_factory.mktemp("daemons")
        logs = {name: folder / f"{name}.log" for name in ("a", "b")}
        # both at once on an empty database: the migrations must not collide
        daemons = [_spawn(name, folder / f"home-{name}", url, logs[name]) for name in ("a", "b")]
        try:
            for daemon in daemons:
                _wait_listening(daemon, logs[daemon.name])
            sql = create_engine(url)
            with daemons[0].connect() as client:
                idle_trace = _capture_idle_trace(client)
            yield Cluster(daemons[0], daemons[1], sql, idle_trace, logs)
            sql.dispose()
        finally:
            for daemon in daemons:
                daemon.proc.terminate()
            for daemon in daemons:
                try:
                    daemon.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    daemon.proc.kill()


def _capture_idle_trace(client: ServiceClient) -> str:
    then = int(time.time() * 1000) - 20 * DAY_MS  # idle for longer than idle_days, not yet archive_days
    session = client.call("session.open", {"agent": AGENT, "namespace": {"workspaceId": "idle"}})["sessionId"]
    episode = client.call(
        "turn.start", {"agent": AGENT, "sessionId": session, "userText": "rotate the backup keys", "ts": then}
    )["query"]["episodeId"]
    end = {"agent": AGENT, "sessionId": session, "episodeId": episode, "agentText": "Rotated.", "ts": then + 1_000}
    trace_ids: list[str] = client.call("turn.end", end)["traceIds"]
    return trace_ids[0]


def _events(client: ServiceClient, event_type: str) -> list[dict[str, Any]]:
    return [
        params
        for method, params in list(client.notifications)
        if method == "events.notify" and params.get("type") == event_type
    ]


def _wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------ capture


def _host(index: int, mine: Daemon, other: Daemon) -> dict[str, Any]:
    """One host: three turns through its own daemon; every third host retries each turn.end against the
    other daemon at the same moment, and turn 1's turn.start too."""
    found: dict[str, Any] = {"traces": set(), "keys": [], "session": ""}
    with mine.connect() as client, other.connect() as elsewhere:
        session = client.call("session.open", {"agent": AGENT, "namespace": {"workspaceId": "load"}})["sessionId"]
        found["session"] = session
        for turn in range(3):
            ts = 1_000_000 + index * 10_000 + turn * 1_000
            key = f"{session}:{turn}"
            start = {
                "agent": AGENT,
                "sessionId": session,
                "userText": f"host {index} turn {turn}: list the report files of batch {index}-{turn}",
                "ts": ts,
                "turnKey": key,
            }
            if turn == 1:
                first, again = client.call_async("turn.start", start), elsewhere.call_async("turn.start", start)
                episode = first.result(180)["query"]["episodeId"]
                assert again.result(180)["query"]["episodeId"] == episode
            else:
                episode = client.call("turn.start", start)["query"]["episodeId"]
            found["keys"].append(key)
            end = {
                "agent": AGENT,
                "sessionId": session,
                "episodeId": episode,
                "agentText": f"Batch {index}-{turn} has 3 report files.",
                "ts": ts + 500,
                "toolCalls": [
                    {"name": "bash", "input": {"cmd": f"ls reports/{index}/{turn}"}, "output": "a.csv b.csv c.csv"}
                ],
            }
            if index % 3 == 0:
                first, again = client.call_async("turn.end", end), elsewhere.call_async("turn.end", end)
                ids = first.result(180)["traceIds"]
                assert again.result(180)["traceIds"] == ids, "a retry elsewhere answers with the same traces"
            else:
                ids = client.call("turn.end", end)["traceIds"]
            assert len(ids) == 2  # the tool call and the reply
            found["traces"].update(ids)
    return found


def test_retries_through_the_other_daemon_store_every_step_once(cluster: Cluster) -> None:
    hosts = 20
    with ThreadPoolExecutor(hosts) as pool:
        futures = [
            pool.submit(_host, i, *((cluster.a, cluster.b) if i % 2 == 0 else (cluster.b, cluster.a)))
            for i in range(hosts)
        ]
        results = [future.result(timeout=600) for future in futures]

    answered = set().union(*(result["traces"] for result in results))
    assert len(answered) == hosts * 3 * 2
    sessions = [result["session"] for result in results]
    keys = [key for result in results for key in result["keys"]]
    with cluster.sql.connect() as conn:
        stored = {
            row[0]
            for row in conn.execute(
                text("SELECT id FROM traces WHERE session_id = ANY(:sessions)"), {"sessions": sessions}
            )
        }
        turns = dict(
            conn.execute(
                text("SELECT turn_key, count(*) FROM turns WHERE turn_key = ANY(:keys) GROUP BY turn_key"),
                {"keys": keys},
            ).all()
        )
    assert stored == answered  # nothing lost, nothing stored twice
    assert turns == dict.fromkeys(keys, 1)  # one recorded turn per turnKey, whichever daemon got it first


# ------------------------------------------------------------------------------------------ learning + events


def test_a_task_is_learned_once_and_recalled_through_the_other_daemon(cluster: Cluster) -> None:
    with (
        cluster.a.connect() as a,
        cluster.b.connect() as b,
        cluster.a.connect() as watcher_a,
        cluster.b.connect() as watcher_b,
        cluster.b.connect() as bank_b,
    ):
        for watcher in (watcher_a, watcher_b):
            watcher.call("events.subscribe", {"namespace": SHOP})
        bank_b.call("session.open", {"agent": AGENT, "namespace": {"workspaceId": "bank"}})

        # the task runs through B and ends there: a new task starts (its chain waits for the verdict in B)
        session = b.call("session.open", {"agent": AGENT, "namespace": SHOP})["sessionId"]
        task = {"agent": AGENT, "sessionId": session, "userText": "total the parcel weights in kilograms", "ts": 1000}
        episode = b.call("turn.start", task)["query"]["episodeId"]
        calls = [{"name": "bash", "input": {"cmd": "python sum.py parcels.csv"}, "output": "1234.5"}]
        end = {"agent": AGENT, "sessionId": session, "episodeId": episode, "agentText": "1234.5 kg", "ts": 1001}
        assert len(b.call("turn.end", {**end, "toolCalls": calls})["traceIds"]) == 2
        nxt = {"agent": AGENT, "sessionId": session, "userText": "new task: check the invoice totals", "ts": 5000}
        assert b.call("turn.start", nxt)["query"]["episodeId"] != episode

        def requested() -> int:
            with cluster.sql.connect() as conn:
                found = conn.execute(
                    text("SELECT requested FROM learning_claims WHERE episode_id = :e"), {"e": episode}
                ).scalar()
            return int(found or 0)

        _wait_for(lambda: requested() >= 1, what="B to record the ended task's request")  # B does at once

        # the verdict arrives through A: A runs the chain now; flushing both runs nothing more
        lesson = "The weight column is in pounds, not kilograms: multiply by 0.4536 to get kilograms."
        a.call("feedback.submit", {"episodeId": episode, "polarity": "negative", "rationale": lesson})
        b.call("memory.flush", {})
        a.call("memory.flush", {})
        with cluster.sql.connect() as conn:
            requested, runs = conn.execute(
                text("SELECT requested, runs FROM learning_claims WHERE episode_id = :e"), {"e": episode}
            ).one()
            learned = conn.execute(
                text("SELECT id FROM policies WHERE CAST(source_episodes_json AS TEXT) LIKE :e"),
                {"e": f'%"{episode}"%'},
            ).all()
        assert requested >= 2  # ended in B, verdict through A
        assert runs == 1, "the chain ran once for both requests"
        assert len(learned) >= 1, cluster.learning_log()

        # the chain's events (made in A) reach B's host of the namespace, once, and A's once: no echo
        def heard(client: ServiceClient, event_type: str) -> list[dict[str, Any]]:
            return [e for e in _events(client, event_type) if e["payload"].get("episodeId") == episode]

        _wait_for(lambda: heard(watcher_b, "reward.updated"), what="the reward event through B")
        _wait_for(lambda: heard(watcher_b, "l2.policy.induced"), what="the lesson's event through B")
        time.sleep(1.0)  # anything sent twice would have arrived by now
        for watcher in (watcher_a, watcher_b):
            assert len(heard(watcher, "reward.updated")) == 1
            assert len(heard(watcher, "feedback.received")) == 1
        assert not [e for e in _events(bank_b, "reward.updated") if e["payload"].get("episodeId") == episode]

        # the lesson learnt in A is recalled by the next related task through B
        later = {"agent": AGENT, "sessionId": session, "userText": "new task: average parcel weight in kg"}
        recalled = b.call("turn.start", {**later, "ts": 90_000})
        assert "0.4536" in recalled["injectedContext"], recalled["stats"]


def test_steps_captured_through_one_daemon_are_announced_by_the_other(cluster: Cluster) -> None:
    with cluster.a.connect() as a, cluster.b.connect() as watcher_b, cluster.b.connect() as bank_b:
        watcher_b.call("events.subscribe", {"namespace": SHOP})
        bank_b.call("session.open", {"agent": AGENT, "namespace": {"workspaceId": "bank"}})
        session = a.call("session.open", {"agent": AGENT, "namespace": SHOP})["sessionId"]
        start = {"agent": AGENT, "sessionId": session, "userText": "count the open orders", "ts": 200_000}
        episode = a.call("turn.start", start)["query"]["episodeId"]
        end = {"agent": AGENT, "sessionId": session, "episodeId": episode, "agentText": "12 open.", "ts": 200_500}
        trace_ids = a.call("turn.end", end)["traceIds"]

        def announced(client: ServiceClient) -> list[str]:
            return [e["payload"]["traceId"] for e in _events(client, "trace.created")]

        _wait_for(lambda: set(trace_ids) <= set(announced(watcher_b)), what="trace.created through B")
        time.sleep(0.5)
        assert sorted(t for t in announced(watcher_b) if t in trace_ids) == sorted(trace_ids)
        assert not set(trace_ids) & set(announced(bank_b))  # another namespace hears nothing of it


# ------------------------------------------------------------------------------------------ decay


def test_the_decay_job_runs_in_one_daemon_per_interval(cluster: Cluster) -> None:
    """Both daemons run the decay loop on one schedule (the last run is stored); each run weakens the idle
    trace once and leaves one history event, so two daemons running it at once would show as two events
    less than an interval apart."""

    def decay_times() -> list[int]:
        with cluster.sql.connect() as conn:
            rows = conn.execute(
                text("SELECT ts FROM audit_events WHERE kind = 'decayed' AND target = :t ORDER BY ts"),
                {"t": f"trace:{cluster.idle_trace}"},
            )
            return [int(row[0]) for row in rows]

    _wait_for(lambda: len(decay_times()) >= 2, timeout=4 * DECAY_INTERVAL_S, what="two decay runs")
    times = decay_times()
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= DECAY_INTERVAL_S * 1000 - 500, f"decay ran twice within one interval: {times}"
    with cluster.sql.connect() as conn:  # one statement, one snapshot: the strength and the runs it went through
        strength, runs = conn.execute(
            text(
                "SELECT strength, (SELECT count(*) FROM audit_events WHERE kind = 'decayed' AND target = :target) "
                "FROM traces WHERE id = :t"
            ),
            {"t": cluster.idle_trace, "target": f"trace:{cluster.idle_trace}"},
        ).one()
    # every run is one step of 0.85 (the default factor) from 0.5: none was applied twice
    assert strength == pytest.approx(max(0.1, 0.5 * 0.85**runs), abs=1e-6)
