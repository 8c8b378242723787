"""Every read is scoped to a namespace: the one it names, else its session's, else the default one.

Three namespaces hold one task each — A (profile alice), B (profile bob) and the default namespace (no
namespace given) — plus one experience, one world model and one skill each. Through the real service, every
read method is walked as B would call it (with B's session, or B's namespace) and as a caller naming nothing;
none may return a row of another namespace. A read by id that names B's session cannot fetch A's row; the
id alone names the row's own namespace. `namespace: "*"` is refused on stdio and on a TCP daemon without a
token, and reads everything on a TCP connection authenticated with the token.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import RpcError, ServiceClient
from memos_bridge.storage.database import Database
from memos_bridge.storage.models import PolicyRow, SkillRow, WorldModelRow

AGENT = "tester"
NAMESPACES: dict[str, dict[str, Any] | None] = {
    "A": {"profileId": "alice"},
    "B": {"profileId": "bob"},
    "D": None,
}
OWNERS = {"A": ("tester", "alice"), "B": ("tester", "bob"), "D": ("tester", "default")}
TOPIC = "nginx reverse proxy upstream timeout"


def _seed(client: ServiceClient) -> dict[str, dict[str, str]]:
    """One task per namespace through the wire: a session, a turn, its trace and episode."""
    made: dict[str, dict[str, str]] = {}
    for index, (name, namespace) in enumerate(NAMESPACES.items()):
        opened = {"agent": AGENT, **({"namespace": namespace} if namespace else {})}
        session = client.call("session.open", opened)["sessionId"]
        ts = 1_000_000 + index * 100_000
        started = client.call(
            "turn.start",
            {"agent": AGENT, "sessionId": session, "userText": f"Fix the {TOPIC} for site {name}", "ts": ts},
            timeout=60,
        )
        episode = started["query"]["episodeId"]
        ended = client.call(
            "turn.end",
            {
                "agent": AGENT,
                "sessionId": session,
                "episodeId": episode,
                "ts": ts + 1_000,
                "agentText": f"Raised proxy_read_timeout for the {TOPIC} of site {name}.",
                "toolCalls": [{"name": "bash", "input": {"cmd": "nginx -t"}, "output": f"site {name} ok"}],
            },
            timeout=60,
        )
        made[name] = {"session": session, "episode": episode, "trace": ended["traceIds"][-1]}
    client.call("memory.flush", {}, timeout=120)
    return made


def _learnt_rows(home: Path) -> None:
    """An experience, a world model and a skill per namespace, written into the database directly (what the
    learning stages would write after enough tasks; their scoping is what is under test here)."""
    db = Database(f"sqlite:///{home / 'memos.db'}")
    db.open()

    def write(session: Any) -> None:
        for name, (agent, profile) in OWNERS.items():
            owner = {"owner_agent_kind": agent, "owner_profile_id": profile, "owner_workspace_id": None}
            now = 2_000_000
            session.add(
                PolicyRow(
                    id=f"po_scope{name}",
                    title=f"Raise the {TOPIC} ({name})",
                    trigger=f"{TOPIC} errors on site {name}",
                    procedure="Set proxy_read_timeout above the slowest upstream response.",
                    status="active",
                    experience_type="repair_instruction",
                    created_at=now,
                    updated_at=now,
                    **owner,
                )
            )
            session.add(
                WorldModelRow(
                    id=f"wm_scope{name}",
                    title=f"nginx upstreams of site {name}",
                    body=f"The {TOPIC} is 60 s by default.",
                    created_at=now,
                    updated_at=now,
                    **owner,
                )
            )
            session.add(
                SkillRow(
                    id=f"sk_scope{name}",
                    name=f"raise-nginx-timeout-{name.lower()}",
                    status="active",
                    invocation_guide=f"When the {TOPIC} fires on site {name}: raise proxy_read_timeout.",
                    created_at=now,
                    updated_at=now,
                    **owner,
                )
            )

    try:
        db.write_sync(write)
    finally:
        db.close()


def _ids(value: Any) -> set[str]:
    """Every row id anywhere in an answer."""
    return set(re.findall(r"\b(?:tr|ep|se|po|wm|sk)_[A-Za-z0-9]+", json.dumps(value)))


def _of(made: dict[str, dict[str, str]], name: str) -> set[str]:
    return {*made[name].values(), f"po_scope{name}", f"wm_scope{name}", f"sk_scope{name}"}


def _reads(client: ServiceClient, made: dict[str, dict[str, str]], scope: dict[str, Any], me: str) -> dict[str, Any]:
    """Every read method once, with `scope` (a sessionId and/or a namespace) added to its params; with a scope,
    the by-id reads ask for the rows of every other namespace too."""
    answers: dict[str, Any] = {
        "memory.search": client.call("memory.search", {"agent": AGENT, "query": TOPIC, **scope}, timeout=60),
        "memory.list_traces": client.call("memory.list_traces", {**scope}),
        "memory.list_episodes": client.call("memory.list_episodes", {**scope}),
        "memory.list_policies": client.call("memory.list_policies", {**scope}),
        "memory.list_world_models": client.call("memory.list_world_models", {**scope}),
        "skill.list": client.call("skill.list", {**scope}),
    }
    for name in NAMESPACES:
        if name == me or not scope:  # without a scope, an id names its own row's namespace (checked below)
            continue
        answers[f"get_trace {name}"] = client.call("memory.get_trace", {"id": made[name]["trace"], **scope})
        answers[f"get_policy {name}"] = client.call("memory.get_policy", {"id": f"po_scope{name}", **scope})
        answers[f"get_world {name}"] = client.call("memory.get_world", {"id": f"wm_scope{name}", **scope})
        answers[f"skill.get {name}"] = client.call("skill.get", {"id": f"sk_scope{name}", **scope})
        with pytest.raises(RpcError) as hidden:
            client.call("memory.timeline", {"episodeId": made[name]["episode"], **scope})
        assert hidden.value.data["code"] == "episode_not_found"
    return answers


def test_every_read_method_stays_in_its_namespace(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with ServiceClient.spawn(home) as client:
        made = _seed(client)
    _learnt_rows(home)
    with ServiceClient.spawn(home) as client:
        b = made["B"]["session"]
        for scope in ({"sessionId": b}, {"namespace": NAMESPACES["B"]}, {"episodeId": made["B"]["episode"]}):
            if "episodeId" in scope:  # the episode names the namespace of search and list_traces
                seen = _ids(client.call("memory.search", {"agent": AGENT, "query": TOPIC, **scope}, timeout=60))
                seen |= _ids(client.call("memory.list_traces", scope))
                assert seen & (_of(made, "A") | _of(made, "D")) == set(), scope
                continue
            answers = _reads(client, made, scope, "B")
            for method, answer in answers.items():
                assert _ids(answer) & (_of(made, "A") | _of(made, "D")) == set(), (scope, method, answer)
            listed = _ids([answers[m] for m in answers if not m.startswith(("get_", "skill.get"))])
            assert {made["B"]["trace"], "po_scopeB", "wm_scopeB", "sk_scopeB"} <= listed, (scope, listed)

        # Naming nothing: the default namespace only.
        answers = _reads(client, made, {}, "D")
        lists = {m: a for m, a in answers.items() if not m.startswith(("get_", "skill.get"))}
        assert _ids(lists) & (_of(made, "A") | _of(made, "B")) == set(), lists
        assert {made["D"]["trace"], "po_scopeD", "wm_scopeD", "sk_scopeD"} <= _ids(lists)
        # ... while an id alone names its row's namespace: the row is found.
        assert client.call("memory.get_trace", {"id": made["A"]["trace"]})["id"] == made["A"]["trace"]
        assert client.call("memory.timeline", {"episodeId": made["A"]["episode"]})["traces"]
        assert client.call("skill.get", {"id": "sk_scopeA"})["id"] == "sk_scopeA"

        # The operator view is not for a stdio host.
        for method in ("memory.list_traces", "memory.list_policies", "skill.list"):
            with pytest.raises(RpcError) as refused:
                client.call(method, {"namespace": "*"})
            assert refused.value.data["code"] == "unauthorized" and "TCP" in refused.value.message

    everything = _of(made, "A") | _of(made, "B") | _of(made, "D")
    token = "s3cret-operator-token"
    with _daemon(home, token=token) as port, ServiceClient.connect_tcp("127.0.0.1", port, token=token) as operator:
        seen: set[str] = set()
        for method in ("memory.list_traces", "memory.list_episodes", "memory.list_policies"):
            seen |= _ids(operator.call(method, {"namespace": "*"}))
        seen |= _ids(operator.call("memory.list_world_models", {"namespace": "*"}))
        seen |= _ids(operator.call("skill.list", {"namespace": "*"}))
        assert {i for i in everything if not i.startswith("se_")} <= seen
        assert operator.call("skill.get", {"id": "sk_scopeA", "namespace": "*"})["id"] == "sk_scopeA"
    with _daemon(home, token=None) as port, ServiceClient.connect_tcp("127.0.0.1", port) as anyone:
        with pytest.raises(RpcError) as refused:
            anyone.call("memory.list_traces", {"namespace": "*"})
        assert refused.value.data["code"] == "unauthorized"


class _daemon:
    """`memos-bridge serve --tcp` on `home`, with or without a token; yields its port."""

    def __init__(self, home: Path, token: str | None) -> None:
        self.home, self.token = home, token
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> int:
        env = {**os.environ, "MEMOS_BRIDGE_HOME": str(self.home)}
        env.pop("MEMOS_BRIDGE_TOKEN", None)
        if self.token:
            env["MEMOS_BRIDGE_TOKEN"] = self.token
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memos_bridge", "serve", "--tcp", "127.0.0.1:0", "--home", str(self.home)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            match = re.search(r"listening on \S+:(\d+)", line)
            if match:
                return int(match.group(1))
            if not line and self.proc.poll() is not None:
                break
        raise AssertionError("the daemon did not start")

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
