"""`memos-bridge memories …` as a user runs it: a subprocess per command, the real service and model.

Most commands run against an owner the test starts (as a host would have), so each command attaches to it
over the home's socket instead of loading the embedding model again; one test checks the other path, where
no process serves the home and the command starts a service for its own length.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest

from memos_bridge import cli_memories, home_client
from memos_bridge.client import ServiceClient, unix_connector
from memos_bridge.contract import dto
from memos_bridge.transport import owner

ROOT = Path(__file__).resolve().parents[1]


def _cli(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """One `memos-bridge memories …` command; stdin is not a terminal (as in a script)."""
    return subprocess.run(
        [sys.executable, "-m", "memos_bridge", "memories", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd or ROOT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "160"},
    )


def _json(home: Path, *args: str, cwd: Path | None = None) -> Any:
    result = _cli(home, *args, "--json", cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def _ok(home: Path, *args: str) -> str:
    result = _cli(home, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _ids(items: list[dict[str, Any]], key: str = "id") -> list[str]:
    return [item[key] for item in items]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, ServiceClient]]:
    """A data home with an owner process (`memos-bridge serve` on stdio, as a host spawns it)."""
    home = tmp_path / "home"
    client = ServiceClient.spawn(home)
    try:
        client.call("core.ping")
        assert client.process is not None and owner.read_owner(home).pid == client.process.pid
        yield home, client
    finally:
        client.close()


# ---------------------------------------------------------------- no service needed


def test_the_cli_kind_lists_match_the_contract() -> None:
    assert set(cli_memories.LIST_KINDS) == set(get_args(dto.MemoryKind))
    assert set(cli_memories.PURGE_KINDS) == set(get_args(dto.PurgeKind))
    assert set(cli_memories.EXPORT_KINDS) == set(get_args(dto.ExportKind))
    assert set(cli_memories.REMEMBERED_TYPES) == set(get_args(dto.RememberedType))
    assert set(cli_memories.KIND_BY_PREFIX.values()) == set(get_args(dto.MemoryKind))


def test_durations_and_dates_parse_as_a_person_types_them() -> None:
    assert cli_memories.duration_ms("7d") == 7 * 86_400_000
    assert cli_memories.duration_ms("1h30m") == 90 * 60_000
    assert cli_memories.expiry_ms("never") == 0
    assert abs(cli_memories.expiry_ms("12h") - (time.time() * 1000 + 12 * 3_600_000)) < 5_000
    assert cli_memories.when_ms("2025-01-31T00:00:00+00:00") == 1_738_281_600_000
    for bad in ("7", "3q", "d7", ""):
        with pytest.raises(Exception, match="duration"):
            cli_memories.duration_ms(bad)


def test_unix_connector_speaks_ndjson_json_rpc() -> None:
    """The connector the CLI uses for an owner's socket: one JSON request per line, answers matched by id."""
    folder = Path(tempfile.mkdtemp(prefix="mb-sock-"))  # short: a Unix socket path has ~100 bytes
    path = str(folder / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    seen: list[dict[str, Any]] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as reader, conn.makefile("wb") as writer:
            for line in reader:
                request = json.loads(line)
                seen.append(request)
                reply = {"jsonrpc": "2.0", "id": request["id"], "result": {"echo": request["params"]}}
                writer.write(json.dumps(reply).encode() + b"\n")
                writer.flush()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with ServiceClient(connector=unix_connector(path), reconnect=False) as client:
            assert client.call("memory.stats", {"x": 1}) == {"echo": {"x": 1}}
            assert client.process is None
        assert seen[0]["method"] == "memory.stats" and seen[0]["jsonrpc"] == "2.0"
    finally:
        server.close()
        thread.join(timeout=5)
    with pytest.raises(OSError):
        unix_connector(str(folder / "nobody.sock"))()


def test_bad_usage_and_configuration_exit_2_with_one_line(tmp_path: Path) -> None:
    """Including purge and replace without --yes when there is no terminal to confirm on."""
    home = tmp_path / "home"
    for args in (("purge", "--all"), ("purge", "--id", "me_X")):
        refused = _cli(home, *args)
        assert refused.returncode == 2 and "--yes" in refused.stderr, refused.stderr
    dump = tmp_path / "dump.jsonl"
    dump.write_text("")
    refused = _cli(home, "import", str(dump), "--mode", "replace")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert not home.exists()  # refused before any service was started on the home

    bad_config = tmp_path / "bad"
    bad_config.mkdir()
    (bad_config / "config.toml").write_text("[retrieval]\ntier2_top_k = -3\n")
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    for where, says in ((bad_config, "retrieval.tier2_top_k"), (not_a_folder, "cannot use data home")):
        failed = _cli(where, "list")
        assert failed.returncode == 2 and says in failed.stderr, failed.stderr
        assert len(failed.stderr.strip().splitlines()) == 1 and failed.stdout == ""


# ---------------------------------------------------------------- with the real service


def test_without_an_owner_a_command_serves_the_home_for_its_own_length(tmp_path: Path) -> None:
    home = tmp_path / "home"
    made = _json(home, "remember", "The office wifi password rotates every Monday.", "--type", "fact")
    assert made["kind"] == "memory" and made["id"].startswith("me_")
    # The service it started took the home, then exited with the command: nothing serves it now.
    assert home_client.owner_socket(home) is None
    pid = owner.read_owner(home).pid
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert made["id"] in _ids(_json(home, "list")["memories"])  # a later command's service reads it back


def test_with_an_owner_the_cli_talks_to_it(served: tuple[Path, ServiceClient]) -> None:
    home, host = served
    assert host.process is not None
    made = _json(home, "remember", "Grafana dashboards live in the observability folder.")
    # The owner's in-memory vector index has it: the write went through the owner, not a process of its own.
    vector_hits = host.call(
        "memory.search", {"query": "where are the grafana dashboards", "filters": {"channels": ["vector"]}}
    )
    assert made["id"] in _ids(vector_hits["hits"], "refId")
    assert owner.read_owner(home).pid == host.process.pid  # still the one owner
    with home_client.open_client(home) as client:  # the CLI's choice: the socket, no process of its own
        assert client.process is None
        assert client.call("memory.get_memory", {"id": made["id"]})["content"].startswith("Grafana")


def test_memories_lifecycle_through_the_cli(served: tuple[Path, ServiceClient]) -> None:
    home, host = served
    made = _json(
        home,
        "remember",
        "Nightly backups are written to the bucket named orchard.",
        "--tag",
        "ops",
        "--importance",
        "0.8",
    )
    memory = made["id"]
    other = _json(home, "remember", "Release notes are drafted on Thursdays.", "--type", "rule", "--user")["id"]

    listed = _json(home, "list")["memories"]
    assert set(_ids(listed)) == {memory, other}
    assert {m["id"]: m["type"] for m in listed} == {memory: "fact", other: "rule"}
    table = _ok(home, "list")
    assert memory in table and other in table and "fact" in table and "Nightly backups" in table
    assert _ids(_json(home, "list", "--type", "rule")["memories"]) == [other]

    assert memory in _ids(_json(home, "search", "which bucket holds the nightly backups")["hits"], "refId")
    assert memory in _ok(home, "search", "orchard bucket")

    shown = _json(home, "show", memory)
    assert shown["id"] == memory and shown["importance"] == 0.8 and shown["tags"] == ["ops"]
    panel = _ok(home, "show", memory)
    assert "bucket named orchard" in panel and "strength" in panel and "created by" in panel

    edited = _json(home, "edit", memory, "--content", "Nightly backups are written to the bucket named quarry.")
    assert edited["changed"] == ["content"]
    keyword = ("--channel", "keyword")
    assert memory in _ids(_json(home, "search", "quarry", *keyword)["hits"], "refId")
    assert memory not in _ids(_json(home, "search", "orchard", *keyword)["hits"], "refId")
    events = _json(home, "history", memory)["events"]
    assert [e["event"] for e in events] == ["created", "updated"]
    assert "orchard" in events[1]["detail"]["changes"]["content"]["old"]
    assert "updated" in _ok(home, "history", memory)

    assert _json(home, "forget", memory, "--reason", "moved")["ok"] is True
    assert memory not in _ids(_json(home, "list")["memories"])
    assert memory not in _ids(_json(home, "search", "nightly backups bucket quarry")["hits"], "refId")
    hidden = {m["id"]: m for m in _json(home, "list", "--include-forgotten")["memories"]}
    assert hidden[memory]["status"] == "forgotten"
    _ok(home, "restore", memory)
    assert memory in _ids(_json(home, "list")["memories"])
    assert memory in _ids(_json(home, "search", "nightly backups bucket quarry")["hits"], "refId")

    stats = _json(home, "stats")
    assert stats["counts"]["memory"] == {"active": 2} and stats["types"]["memory"] == {"fact": 1, "rule": 1}
    assert "memories by kind and status" in _ok(home, "stats")

    # Other kinds: `show` finds the method by the id's prefix; `list --kind` reads each kind's list.
    session = host.call("session.open", {"agent": "cli-test"})["sessionId"]
    turn = {"agent": "cli-test", "sessionId": session}
    episode = host.call("turn.start", {**turn, "userText": "rotate the nginx logs", "ts": 1})["query"]["episodeId"]
    step = host.call("turn.end", {**turn, "episodeId": episode, "ts": 2, "agentText": "Rotated them weekly."})
    trace = step["traceIds"][-1]
    assert trace in _ids(_json(home, "list", "--kind", "trace")["traces"])
    assert f"trace {trace}" in _ok(home, "show", trace) and "Rotated them weekly." in _ok(home, "show", trace)
    for kind, key in (("policy", "policies"), ("world_model", "worldModels"), ("skill", "skills")):
        assert _json(home, "list", "--kind", kind)[key] == []

    # Errors: one line on stderr, exit 1 for an id the service does not know.
    for args in (("show", "me_NOSUCHMEMORY"), ("forget", "me_NOSUCHMEMORY"), ("show", "nonsense")):
        bad = _cli(home, *args)
        assert bad.returncode == 1 and bad.stdout == "", bad
        assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("memos-bridge: ")
    assert _cli(home, "edit", memory).returncode == 2  # nothing to change: bad usage

    refused = _cli(home, "purge", "--id", memory)
    assert refused.returncode == 2 and memory in _ids(_json(home, "list")["memories"])
    purged = _json(home, "purge", "--id", memory, "--yes")
    assert purged["purged"]["memories"] == 1
    assert _ids(_json(home, "list", "--include-forgotten")["memories"]) == [other]
    assert _cli(home, "show", memory).returncode == 1

    reflected = _json(home, "reflect")
    assert {"episodes", "chainsRun", "merged", "expired", "changes"} <= set(reflected)
    assert "revisited" in _ok(home, "reflect")


def test_export_then_import_round_trip(served: tuple[Path, ServiceClient], tmp_path: Path) -> None:
    home, _host = served
    memory = _json(home, "remember", "The build cache lives on the runner's scratch disk.")["id"]
    work = tmp_path / "work"
    work.mkdir()
    exported = _json(home, "export", "dump.jsonl", cwd=work)  # relative: resolved where the user is
    assert Path(exported["path"]) == work / "dump.jsonl" and (work / "dump.jsonl").is_file()
    assert exported["counts"]["memory"] == 1
    assert _cli(home, "export", "dump.jsonl", cwd=work).returncode == 1  # no overwrite without --overwrite
    _json(home, "purge", "--all", "--yes")
    assert _json(home, "list")["memories"] == []
    imported = _json(home, "import", "dump.jsonl", cwd=work)
    assert imported["imported"]["memory"] == 1
    assert _ids(_json(home, "list")["memories"]) == [memory]
    assert "skipped" in _ok(home, "import", str(work / "dump.jsonl"))  # merge again: nothing added


def test_an_edit_in_history_is_shown_where_the_texts_differ() -> None:
    from memos_bridge.cli_render import changed_parts

    old = "The staging database listens on port 5433, not the default 5432."
    new = "The staging database listens on port 5434 since the migration."
    shown_old, shown_new = changed_parts(old, new)
    assert "5433" in shown_old and "5434" in shown_new and shown_old.startswith("…")
    assert changed_parts("tabs", "spaces") == ("tabs", "spaces")  # short texts whole
