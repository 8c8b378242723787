"""hermes-agent's MemoryManager drives the adapter through full turn cycles against a real spawned service.

The provider is loaded by Hermes' own loader from the installed directory plugin, registered with Hermes'
`MemoryManager`, and driven the way `run_agent`/`agent_init` drive it: `initialize_all`, `on_turn_start`,
`prefetch_all`, `sync_all` (with the OpenAI-style transcript), `on_pre_compress`, `on_delegation`,
`handle_tool_call`, `on_session_end`, `shutdown_all`. No LLM is needed: the host model is stubbed at Hermes'
boundary (`agent.auxiliary_client.call_llm`), and the service's learning stages fall back to their deterministic
paths when the stub's text is not the JSON they asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.hermes.conftest import StubHostModel, require_hermes

require_hermes("agent.memory_provider")

from agent import auxiliary_client  # noqa: E402
from agent.memory_manager import MemoryManager  # noqa: E402
from memos_bridge_hermes import runtime as runtime_module  # noqa: E402
from memos_bridge_hermes.__main__ import install  # noqa: E402
from memos_bridge_hermes.provider import MemosBridgeProvider  # noqa: E402
from plugins.memory import load_memory_provider  # noqa: E402

from memos_bridge.client import ServiceClient  # noqa: E402

TASK = "Parse holdings.xml and write answers.json with the total value per issuer"
REPLY = "I wrote answers.json with the total value per issuer."
FEEDBACK = "Verifier feedback: task failed, r = -1. answers.json must be keyed by the issuer CUSIP."
OTHER_TASK = "Configure daily log rotation for /var/log/nginx with logrotate"
OTHER_REPLY = "Added /etc/logrotate.d/nginx with a daily rule and tested it with logrotate -d."
THANKS = "It works now, thanks!"
NEXT_TASK = "Set up logrotate for the nginx access logs on the new server"
REVIEW = "Review the conversation above and consider saving to memory if appropriate.\n\nFocus on user preferences."


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _transcript(user: str, reply: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are Hermes."},
        {"role": "user", "content": user},
        {
            "role": "assistant",
            "content": "Let me look at the XML first.",
            "reasoning": "The holdings file decides the schema of answers.json.",
            "tool_calls": [_call("c1", "read_file", {"path": "holdings.xml"})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "<informationTable><infoTable>...</infoTable>"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c2", "write_file", {"path": "answers.json"})]},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"error": "PermissionError: answers.json"})},
        {"role": "assistant", "content": reply, "reasoning": "Retried with the right permissions."},
    ]


@pytest.fixture(scope="module")
def hermes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, StubHostModel]]:
    """A Hermes home with the plugin installed, the host model stubbed, one service for the module."""
    home = tmp_path_factory.mktemp("hermes-home")
    install(home)
    stub = StubHostModel()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HERMES_HOME", str(home))
        patch.setenv("MEMOS_HERMES_PREFETCH_TIMEOUT_S", "7")  # a cold start on a CI runner can take seconds
        patch.setenv("MEMOS_HERMES_IDLE_CLOSE_S", "0")  # the last release closes the service at once
        patch.setenv("MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S", "0")
        patch.setattr(auxiliary_client, "call_llm", stub)
        try:
            yield home, stub
        finally:
            runtime_module.shutdown_all()


def _manager(session_id: str, context: str = "primary") -> tuple[MemoryManager, MemosBridgeProvider]:
    provider = load_memory_provider("memos-bridge")  # Hermes' own loader, from the directory plugin
    assert isinstance(provider, MemosBridgeProvider)
    manager = MemoryManager()
    manager.add_provider(provider)
    manager.initialize_all(session_id=session_id, platform="cli", agent_context=context, agent_identity="default")
    return manager, provider


def _turn(manager: MemoryManager, provider: MemosBridgeProvider, number: int, user: str, reply: str) -> str:
    manager.on_turn_start(number, user)
    context = manager.prefetch_all(user)
    manager.sync_all(user, reply, session_id=provider.session_id, messages=_transcript(user, reply))
    assert manager.flush_pending(30)
    assert provider.flush(60)
    return context


def _client(provider: MemosBridgeProvider) -> ServiceClient:
    lease = provider._lease
    assert lease is not None
    return lease.runtime.client


def test_full_turn_cycle_with_feedback_bound_to_the_judged_steps(hermes: tuple[Path, StubHostModel]) -> None:
    manager, provider = _manager("hermes-s1")
    client = _client(provider)
    pid = client.process.pid if client.process else None

    # turn 1: a task with tool calls, a failing tool result and reasoning
    _turn(manager, provider, 1, TASK, REPLY)
    state = provider._lease.runtime.session("hermes-s1")  # type: ignore[union-attr]
    first = state.ends[1]
    assert len(first.trace_ids) == 3  # read_file, write_file, the reply
    steps = client.memory_timeline(first.episode_id)["traces"]
    calls = [call for step in steps for call in step["toolCalls"]]
    assert [call["name"] for call in calls] == ["read_file", "write_file"]
    assert calls[0]["thinkingBefore"].startswith("The holdings file") and calls[1]["success"] is False
    assert steps[-1]["agentThinking"] == "Retried with the right permissions."

    # turn 2: the verifier's verdict arrives as a user message → structured feedback on turn 1's steps
    _turn(manager, provider, 2, FEEDBACK, "Understood: key answers.json by CUSIP.")
    feedback = provider.last_feedback
    assert feedback is not None
    assert feedback["episodeId"] == first.episode_id and feedback["traceId"] == first.trace_ids[-1]
    assert feedback["raw"]["traceIds"] == list(first.trace_ids)
    assert (feedback["polarity"], feedback["magnitude"], feedback["raw"]["r"]) == ("negative", 1.0, -1.0)
    received = [p for m, p in client.notifications if m == "events.notify" and p["type"] == "feedback.received"]
    assert received, "the service announced the feedback"
    # the experience learnt from it cites every step the verdict was bound to, not only the last one
    lessons = [
        policy
        for policy in client.memory_list_policies(limit=100)["policies"]
        if feedback["id"] in policy["sourceFeedbackIds"]
    ]
    assert lessons and all(policy["sourceTraceIds"] == list(first.trace_ids) for policy in lessons), lessons

    # an internal review prompt of Hermes is not a user turn
    manager.on_turn_start(3, REVIEW)
    assert manager.prefetch_all(REVIEW) == ""
    manager.sync_all(REVIEW, "Nothing to save.", session_id="hermes-s1", messages=[])
    assert manager.flush_pending(30) and provider.flush(30)
    texts = [t["userText"] for t in client.memory_list_traces(session_id="hermes-s1", limit=100)["traces"]]
    assert texts and not any(text.startswith("Review the conversation above") for text in texts)

    # a second task that went well, confirmed by the user
    _turn(manager, provider, 4, OTHER_TASK, OTHER_REPLY)
    other = max(state.ends.values(), key=lambda end: end.seq)
    assert other.user_text == OTHER_TASK
    _turn(manager, provider, 5, THANKS, "Glad it works.")
    thanks = provider.last_feedback
    assert thanks is not None and thanks["polarity"] == "positive" and thanks["traceId"] == other.trace_ids[-1]

    # session end closes the session in the background; its episodes are finalised
    manager.on_session_end([])
    assert provider.flush(30)
    episodes = client.memory_list_episodes(session_id="hermes-s1")["episodes"]
    assert episodes and all(episode["status"] == "closed" for episode in episodes)

    # a new conversation: the same service (no second process), and the earlier work is recalled
    manager2, provider2 = _manager("hermes-s2")
    assert _client(provider2) is client and (client.process.pid if client.process else None) == pid
    manager.shutdown_all()  # the first agent goes away; the second still holds the service
    assert client.process is not None and client.process.poll() is None
    recalled = _turn(manager2, provider2, 1, NEXT_TASK, "Done.")
    assert "logrotate" in recalled.lower() or "nginx" in recalled.lower(), recalled
    snapshot = manager2.on_pre_compress([])
    assert "memos-bridge memory snapshot" in snapshot and recalled.strip()[:40] in snapshot
    manager2.shutdown_all()


def test_tools_through_the_memory_manager(hermes: tuple[Path, StubHostModel]) -> None:
    manager, provider = _manager("hermes-tools")
    _turn(manager, provider, 1, TASK, REPLY)

    def tool(name: str, **args: Any) -> dict[str, Any]:
        assert manager.has_tool(name)
        result = json.loads(manager.handle_tool_call(name, args))
        assert isinstance(result, dict) and "error" not in result, (name, result)
        return result

    found = tool("memos_search", query="holdings answers.json", maxResults=5)
    assert found["count"] >= 1
    trace_id = next(hit["id"] for hit in found["hits"] if str(hit["id"]).startswith("tr_"))
    assert tool("memos_get", id=trace_id)["found"] is True
    assert tool("memos_timeline")["count"] >= 1  # the current task by default
    assert tool("memos_pin", id=trace_id)["pinned"] is True
    assert tool("memos_pin", id=trace_id, unpin=True)["pinned"] is False
    recorded = tool(
        "memos_feedback", evidence="test_failed", polarity="negative", rationale="2 of 5", passed=2, total=5
    )
    assert recorded["recorded"] == "feedback"
    assert isinstance(tool("memos_skill_list")["skills"], list)
    assert isinstance(tool("memos_environment")["worldModels"], list)
    assert isinstance(tool("memos_environment", query="holdings xml")["worldModels"], list)
    assert tool("memos_skill_get", id="sk_DOESNOTEXIST")["found"] is False
    assert "error" in json.loads(manager.handle_tool_call("memos_get", {"id": "no-prefix"}))
    manager.shutdown_all()


def test_delegation_is_recorded_on_its_step(hermes: tuple[Path, StubHostModel]) -> None:
    manager, provider = _manager("hermes-delegation")
    user = "Summarise the repository with a subagent"
    manager.on_turn_start(1, user)
    manager.prefetch_all(user)
    manager.on_delegation("read README.md and summarise it", "The README describes a CLI.", child_session_id="kid-1")
    messages = [
        {"role": "user", "content": user},
        {"role": "assistant", "content": "", "tool_calls": [_call("d1", "delegate_task", {"goal": "read README.md"})]},
        {"role": "tool", "tool_call_id": "d1", "content": "subagent finished"},
        {"role": "assistant", "content": "The repository is a CLI."},
    ]
    manager.sync_all(user, "The repository is a CLI.", session_id="hermes-delegation", messages=messages)
    assert manager.flush_pending(30) and provider.flush(60)
    end = provider._lease.runtime.session("hermes-delegation").ends[1]  # type: ignore[union-attr]
    steps = _client(provider).memory_timeline(end.episode_id)["traces"]
    delegate = next(call for step in steps for call in step["toolCalls"] if call["name"] == "delegate_task")
    assert delegate["input"]["delegation"]["childSessionId"] == "kid-1"
    assert delegate["output"] == "The README describes a CLI."
    manager.shutdown_all()


def test_a_named_workspace_keeps_the_profiles_turns_in_that_project(
    hermes: tuple[Path, StubHostModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMOS_HERMES_WORKSPACE", "site-tools")
    manager, provider = _manager("hermes-project")
    _turn(manager, provider, 1, TASK, REPLY)
    client = _client(provider)
    project = {"agentKind": "hermes", "profileId": "default", "workspaceId": "site-tools"}
    [episode] = client.memory_list_episodes(session_id="hermes-project")["episodes"]
    assert episode["id"] in {e["id"] for e in client.memory_list_episodes(namespace=project)["episodes"]}
    profile_wide = {"agentKind": "hermes", "profileId": "default"}
    assert episode["id"] not in {e["id"] for e in client.memory_list_episodes(namespace=profile_wide)["episodes"]}
    manager.shutdown_all()


def test_non_primary_contexts_read_but_never_write(hermes: tuple[Path, StubHostModel]) -> None:
    manager, provider = _manager("hermes-subagent", context="subagent")
    manager.on_turn_start(1, TASK)
    manager.prefetch_all(TASK)  # read-only recall (memory.search) is allowed
    manager.sync_all(TASK, REPLY, session_id="hermes-subagent", messages=_transcript(TASK, REPLY))
    manager.on_session_end([])
    assert manager.flush_pending(30) and provider.flush(30)
    client = _client(provider)
    assert client.memory_list_traces(session_id="hermes-subagent")["traces"] == []
    assert client.memory_list_episodes(session_id="hermes-subagent")["episodes"] == []
    feedback = json.loads(
        manager.handle_tool_call(
            "memos_feedback", {"evidence": "self_report", "polarity": "positive", "rationale": "x"}
        )
    )
    assert "error" in feedback
    manager.shutdown_all()


def test_host_llm_requests_reach_the_hosts_model(hermes: tuple[Path, StubHostModel]) -> None:
    _, stub = hermes
    manager, provider = _manager("hermes-llm")
    before = len(stub.calls)
    result = _client(provider).llm_test(prompt="Reply with pong", timeout=60)
    assert result["ok"] is True and result["text"] == stub.text and result["model"] == "stub-model"
    assert len(stub.calls) == before + 1
    assert stub.calls[-1]["messages"] == [{"role": "user", "content": "Reply with pong"}]
    manager.shutdown_all()


def test_reinitialising_leaks_no_process(hermes: tuple[Path, StubHostModel], tmp_path: Path) -> None:
    provider = MemosBridgeProvider(config_overrides={"home": str(tmp_path / "own-home")})  # a runtime of its own
    manager = MemoryManager()
    manager.add_provider(provider)
    manager.initialize_all(session_id="hermes-reinit-1", platform="cli", agent_context="primary")
    client = _client(provider)
    assert client.process is not None
    process = client.process
    key = str((tmp_path / "own-home").resolve())
    for index in range(3):  # /reset, /new: the host initialises the same provider again
        provider.initialize(f"hermes-reinit-{index + 2}", hermes_home=str(hermes[0]), platform="cli")
        assert _client(provider).process is process
        assert runtime_module.runtimes()[key].leases == 1
    manager.shutdown_all()
    assert key not in runtime_module.runtimes()  # the last lease closed the service (idle close 0 here)
    assert process.wait(timeout=30) == 0


def test_a_host_llm_override_serves_the_connection_while_its_provider_lives(
    hermes: tuple[Path, StubHostModel], tmp_path: Path
) -> None:
    """The service's request names no session, so an override is per connection — and only while it is held."""
    hermes_home, stub = hermes
    asked: list[dict[str, Any]] = []

    def custom(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"text": "custom reply", "model": "custom-model"}

    overrides = {"home": str(tmp_path / "llm-home")}
    custom_provider = MemosBridgeProvider(host_llm=custom, config_overrides=overrides)
    plain = MemosBridgeProvider(config_overrides=overrides)
    for session, provider in (("hermes-llm-a", custom_provider), ("hermes-llm-b", plain)):
        provider.initialize(session, hermes_home=str(hermes_home), platform="cli", agent_context="primary")
    client = _client(plain)
    assert _client(custom_provider) is client  # one service, one connection for both
    assert client.llm_test(prompt="first", timeout=60)["text"] == "custom reply" and len(asked) == 1
    custom_provider.shutdown()  # its agent is gone: Hermes' own model serves the remaining one
    before = len(stub.calls)
    result = client.llm_test(prompt="second", timeout=60)
    assert result["text"] == stub.text and len(stub.calls) == before + 1 and len(asked) == 1
    plain.shutdown()


def test_remember_and_forget_tools_and_the_builtin_memory_mirror(hermes: tuple[Path, StubHostModel]) -> None:
    manager, provider = _manager("hermes-remember")
    client = _client(provider)

    def tool(name: str, **args: Any) -> dict[str, Any]:
        result = json.loads(manager.handle_tool_call(name, args))
        assert isinstance(result, dict) and "error" not in result, (name, result)
        return result

    rule = tool("memos_remember", content="Release notes are written in British English.", type="rule", fromUser=True)
    assert rule["remembered"] is True and str(rule["id"]).startswith("me_")
    shown = tool("memos_get", id=rule["id"])["memory"]
    assert shown["source"] == "user" and shown["protected"] is True and shown["type"] == "rule"
    recalled = _turn(manager, provider, 1, "Draft the release notes for version 2.4", "Drafted.")
    assert "British English" in recalled, recalled

    # Hermes' own memory tool writes an entry: the provider mirrors it (USER.md entries are preferences).
    manager.on_memory_write("add", "user", "Prefers short answers with code first.", {"write_origin": "tool"})
    assert provider.flush(30)
    mirrored = client.memory_list_memories(type="preference")["memories"]
    assert [m["content"] for m in mirrored] == ["Prefers short answers with code first."]
    manager.on_memory_write("remove", "user", "Prefers short answers with code first.")
    assert provider.flush(30)
    assert client.memory_list_memories(type="preference")["memories"] == []

    assert tool("memos_forget", id=rule["id"], reason="the team switched to US English")["forgotten"] is True
    assert "British English" not in _turn(manager, provider, 2, "Draft the release notes for 2.5", "Drafted.")
    manager.shutdown_all()
