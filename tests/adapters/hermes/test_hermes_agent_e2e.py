"""The real `run_agent.AIAgent` with `memory.provider: memos-bridge`, talking to a scripted OpenAI-compatible
model on loopback: Hermes' own agent loop activates the provider, offers its tools to the model, runs the
model's `memos_search` call through it, captures the turn, binds the user's verdict to it, and — in a new
conversation — injects the recalled memory into the model's request inside Hermes' `<memory-context>` fence."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.adapters.hermes.conftest import require_hermes

require_hermes("run_agent")

from memos_bridge_hermes import runtime as runtime_module  # noqa: E402
from memos_bridge_hermes.__main__ import install  # noqa: E402
from memos_bridge_hermes.provider import MemosBridgeProvider  # noqa: E402
from run_agent import AIAgent  # noqa: E402


class ScriptedModel(BaseHTTPRequestHandler):
    """`/v1/chat/completions` (streamed or not): first a `memos_search` tool call, then a reply naming the task."""

    requests: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0") or 0)) or b"{}")
        type(self).requests.append(body)
        messages = body.get("messages") or [{}]
        task = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        if messages[-1].get("role") == "tool" or not body.get("tools"):
            message: dict[str, Any] = {"role": "assistant", "content": f"Done: {task.splitlines()[0][:80]}"}
            finish = "stop"
        else:
            call = {"id": "call_1", "type": "function"}
            call["function"] = {"name": "memos_search", "arguments": json.dumps({"query": "logrotate nginx"})}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        base = {"id": "chatcmpl-1", "created": int(time.time()), "model": body.get("model", "scripted")}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            self._send(
                "application/json",
                json.dumps({**base, "object": "chat.completion", "choices": [choice], "usage": usage}),
            )
            return
        delta = {k: v for k, v in message.items() if v is not None}
        if "tool_calls" in delta:
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
        chunks = [
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            },
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                "usage": usage,
            },
        ]
        self._send("text/event-stream", "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n")

    def _send(self, content_type: str, text: str) -> None:
        data = text.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def model_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    home = tmp_path / "hermes"
    home.mkdir()
    (home / "config.yaml").write_text("memory:\n  provider: memos-bridge\n", encoding="utf-8")
    install(home)
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("MEMOS_HERMES_PREFETCH_TIMEOUT_S", "7")
    monkeypatch.setenv("MEMOS_HERMES_IDLE_CLOSE_S", "0")
    monkeypatch.setenv("MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S", "0")
    ScriptedModel.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        runtime_module.shutdown_all()


def _agent(url: str, session_id: str) -> tuple[AIAgent, MemosBridgeProvider]:
    agent = AIAgent(
        base_url=url, api_key="sk-test", model="scripted", quiet_mode=True, session_id=session_id, max_iterations=4
    )
    manager = agent._memory_manager
    assert manager is not None, "Hermes did not activate the memory provider"
    provider = manager.get_provider("memos-bridge")
    assert isinstance(provider, MemosBridgeProvider)
    return agent, provider


def _settle(agent: AIAgent, provider: MemosBridgeProvider) -> None:
    assert agent._memory_manager.flush_pending(30)
    assert provider.flush(60)


def test_hermes_agent_loop_with_the_provider(model_url: str) -> None:
    task = "Configure daily log rotation for /var/log/nginx with logrotate"
    agent, provider = _agent(model_url, "e2e-a")
    result = agent.run_conversation(task)
    assert result["final_response"].startswith("Done: Configure daily log rotation")
    offered = {tool["function"]["name"] for r in ScriptedModel.requests for tool in r.get("tools") or []}
    assert {"memos_search", "memos_get", "memos_feedback", "memos_pin"} <= offered
    tool_results = [m for r in ScriptedModel.requests for m in r.get("messages") or [] if m.get("role") == "tool"]
    assert tool_results and '"query": "logrotate nginx"' in tool_results[0]["content"]  # our tool answered
    _settle(agent, provider)
    state = provider._lease.runtime.session("e2e-a")  # type: ignore[union-attr]
    first = state.ends[1]
    assert first.user_text == task and first.trace_ids

    agent.run_conversation("It works now, thanks!")
    _settle(agent, provider)
    assert provider.last_feedback is not None
    assert provider.last_feedback["episodeId"] == first.episode_id
    assert provider.last_feedback["traceId"] == first.trace_ids[-1]
    agent.shutdown_memory_provider([])

    ScriptedModel.requests = []
    second, provider2 = _agent(model_url, "e2e-b")
    second.run_conversation("Set up logrotate for the nginx access logs on the new server")
    fenced = [
        str(m.get("content"))
        for r in ScriptedModel.requests
        for m in r.get("messages") or []
        if m.get("role") == "user" and "<memory-context>" in str(m.get("content"))
    ]
    assert fenced, "the recalled memory reached the model inside Hermes' memory-context fence"
    assert "/var/log/nginx" in fenced[0] or "logrotate" in fenced[0].split("<memory-context>", 1)[1]
    _settle(second, provider2)
    second.shutdown_memory_provider([])
