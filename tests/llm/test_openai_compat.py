"""`openai_compatible` against a real HTTP server on 127.0.0.1 that plays canned responses."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import httpx
import pytest

from memos_bridge.config import LLMSettings
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.apilog import MemoryApiLogSink
from memos_bridge.llm.base import ChatMessage
from memos_bridge.llm.budget import CallBudget
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.factory import build_llm_facade, build_providers
from memos_bridge.llm.host import NoLLM
from memos_bridge.llm.openai_compat import OpenAICompatLLM, chat_completions_url, parse_retry_after
from memos_bridge.llm.prompts import RELATION_CLASSIFY
from memos_bridge.llm.schema import response_schema

from .fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

API_KEY = "sk-test-key-never-logged"


@dataclass
class Canned:
    status: int = 200
    body: Any = None  # dict → JSON; str → raw text
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def chat_body(content: str, *, prompt_tokens: int = 11, completion_tokens: int = 7) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "served-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class CannedServer:
    """Answers each POST with the next canned response (the last one repeats) and records requests."""

    def __init__(self) -> None:
        self.script: list[Canned] = [Canned(body=chat_body("ok"))]
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                with server._lock:
                    server.requests.append(
                        {"path": self.path, "headers": dict(self.headers.items()), "json": json.loads(raw or b"{}")}
                    )
                    canned = server.script[min(len(server.requests), len(server.script)) - 1]
                if canned.delay_s:
                    time.sleep(canned.delay_s)
                payload = canned.body if isinstance(canned.body, str) else json.dumps(canned.body)
                data = payload.encode()
                try:
                    self.send_response(canned.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in canned.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def play(self, *script: Canned) -> None:
        self.script = list(script)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[CannedServer]:
    srv = CannedServer()
    yield srv
    srv.close()


class SleepRecorder:
    """Back-off sleeps are recorded instead of waited."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _provider(server: CannedServer, **kwargs: Any) -> tuple[OpenAICompatLLM, SleepRecorder]:
    sleep = SleepRecorder()
    options: dict[str, Any] = {"base_url": server.base_url, "api_key": API_KEY, "model": "qwen2.5:7b", "sleep": sleep}
    options.update(kwargs)
    return OpenAICompatLLM(**options), sleep


USER = [ChatMessage("system", "be brief"), ChatMessage("user", "hi")]
SCHEMA = response_schema(RELATION_CLASSIFY.id, RELATION_CLASSIFY.schema)


async def _complete(provider: OpenAICompatLLM, **kwargs: Any) -> Any:
    try:
        return await provider.complete(USER, **kwargs)
    finally:
        await provider.aclose()


async def test_success_returns_text_model_and_usage(server: CannedServer) -> None:
    server.play(Canned(body=chat_body("pong", prompt_tokens=21, completion_tokens=2)))
    provider, sleep = _provider(server)
    completion = await _complete(provider, temperature=0.2, max_tokens=50)
    assert completion.text == "pong" and completion.provider == "openai_compatible"
    assert completion.model == "served-model"
    assert completion.usage == {"prompt_tokens": 21, "completion_tokens": 2, "total_tokens": 23}
    assert completion.duration_ms > 0
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    body = request["json"]
    assert body["model"] == "qwen2.5:7b" and body["stream"] is False
    assert (body["temperature"], body["max_tokens"]) == (0.2, 50)
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert "response_format" not in body
    assert sleep.delays == []


async def test_no_key_and_no_model_are_left_out(server: CannedServer) -> None:
    provider, _ = _provider(server, api_key=None, model=None)
    await _complete(provider)
    request = server.requests[0]
    assert "Authorization" not in request["headers"] and "model" not in request["json"]


async def test_json_schema_is_sent_as_response_format(server: CannedServer) -> None:
    provider, _ = _provider(server)
    await _complete(provider, response_schema=SCHEMA)
    body = server.requests[0]["json"]
    assert body["response_format"]["type"] == "json_schema"
    spec = body["response_format"]["json_schema"]
    assert spec["name"] == "session_relation_classify" and spec["strict"] is True
    assert spec["schema"]["properties"]["reason"]["maxLength"] == 200
    assert body["messages"][0]["content"] == "be brief"  # no textual hint when the schema travels as a parameter


async def test_429_with_retry_after_is_retried_after_the_requested_wait(server: CannedServer) -> None:
    server.play(
        Canned(
            status=429, body={"error": {"message": "slow down", "type": "rate_limit"}}, headers={"Retry-After": "2"}
        ),
        Canned(body=chat_body("after the wait")),
    )
    provider, sleep = _provider(server)
    completion = await _complete(provider)
    assert completion.text == "after the wait"
    assert len(server.requests) == 2 and sleep.delays == [2.0]


async def test_503_and_500_back_off_exponentially_and_give_up_after_max_retries(server: CannedServer) -> None:
    server.play(Canned(status=503, body={"error": "overloaded"}))
    provider, sleep = _provider(server, max_retries=2, backoff_ms=100)
    with pytest.raises(MemosError) as info:
        await _complete(provider)
    assert info.value.code is ErrorCode.LLM_RATE_LIMITED
    assert info.value.details["failure"] == "transient" and info.value.details["status"] == 503
    assert len(server.requests) == 3
    assert len(sleep.delays) == 2
    assert 0.05 <= sleep.delays[0] <= 0.1 and 0.1 <= sleep.delays[1] <= 0.2  # 100 ms, 200 ms with jitter

    server.requests.clear()
    server.play(Canned(status=500, body="oops"), Canned(body=chat_body("recovered")))
    provider, _ = _provider(server)
    assert (await _complete(provider)).text == "recovered"
    assert len(server.requests) == 2


async def test_a_retry_after_beyond_the_deadline_ends_the_call_at_once(server: CannedServer) -> None:
    server.play(Canned(status=429, body={"error": {"message": "wait"}}, headers={"Retry-After": "30"}))
    provider, sleep = _provider(server, backoff_max_ms=60_000)
    with pytest.raises(MemosError) as info:
        await _complete(provider, timeout_ms=2000)
    assert info.value.code is ErrorCode.LLM_RATE_LIMITED
    assert info.value.details["retryAfterS"] == 30
    assert len(server.requests) == 1 and sleep.delays == []


@pytest.mark.parametrize("status", [401, 402, 403, 404])
async def test_auth_billing_and_missing_model_are_terminal(server: CannedServer, status: int) -> None:
    server.play(Canned(status=status, body={"error": {"message": "Incorrect API key provided", "code": "bad_key"}}))
    provider, sleep = _provider(server)
    with pytest.raises(MemosError) as info:
        await _complete(provider)
    assert info.value.code is ErrorCode.LLM_UNAVAILABLE
    assert info.value.details == {"provider": "openai_compatible", "failure": "terminal", "status": status}
    assert len(server.requests) == 1 and sleep.delays == []
    assert API_KEY not in info.value.message


async def test_insufficient_quota_429_is_terminal_not_retried(server: CannedServer) -> None:
    body = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}
    server.play(Canned(status=429, body=body, headers={"Retry-After": "1"}))
    provider, sleep = _provider(server)
    with pytest.raises(MemosError) as info:
        await _complete(provider)
    assert info.value.details["failure"] == "terminal"
    assert len(server.requests) == 1 and sleep.delays == []


async def test_400_on_json_schema_steps_down_to_json_object_and_remembers(server: CannedServer) -> None:
    rejected = Canned(status=400, body={"error": {"message": "response_format json_schema is not supported"}})
    answer = Canned(body=chat_body('{"relation": "follow_up", "confidence": 0.7, "reason": "same task"}'))
    server.play(rejected, answer)
    provider, sleep = _provider(server)
    try:
        first = await provider.complete(USER, response_schema=SCHEMA)
        second = await provider.complete(USER, response_schema=SCHEMA)
    finally:
        await provider.aclose()
    assert "follow_up" in first.text and "follow_up" in second.text
    formats = [r["json"]["response_format"]["type"] for r in server.requests]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert provider.format_level == "json_object"
    hinted = server.requests[1]["json"]["messages"][0]["content"]
    assert hinted.startswith("be brief") and "JSON schema" in hinted and '"relation"' in hinted
    assert sleep.delays == []


async def test_a_server_rejecting_every_response_format_gets_none(server: CannedServer) -> None:
    server.play(
        Canned(status=400, body={"error": "bad response_format"}),
        Canned(status=400, body={"error": "bad response_format"}),
        Canned(body=chat_body("{}")),
    )
    provider, _ = _provider(server)
    await _complete(provider, response_schema=SCHEMA)
    assert ["response_format" in r["json"] for r in server.requests] == [True, True, False]


@pytest.mark.parametrize("schema", [None, SCHEMA])
async def test_a_400_about_something_else_is_a_request_error(server: CannedServer, schema: Any) -> None:
    server.play(Canned(status=400, body={"error": {"message": "context length exceeded"}}))
    provider, _ = _provider(server)
    with pytest.raises(MemosError) as info:
        await _complete(provider, response_schema=schema)
    assert info.value.details["failure"] == "request" and len(server.requests) == 1
    assert provider.format_level == "json_schema"  # structured output is kept for the next call


@pytest.mark.parametrize(
    "canned",
    [
        Canned(body="this is not json"),
        Canned(body={"choices": []}),
        Canned(body={"error": {"message": "upstream exploded"}}),
    ],
)
async def test_malformed_bodies_are_unavailable(server: CannedServer, canned: Canned) -> None:
    server.play(canned)
    provider, _ = _provider(server)
    with pytest.raises(MemosError) as info:
        await _complete(provider)
    assert info.value.code is ErrorCode.LLM_UNAVAILABLE
    assert info.value.details["failure"] == "transient"


async def test_null_content_reads_as_empty_text(server: CannedServer) -> None:
    body = chat_body("x")
    body["choices"][0]["message"]["content"] = None
    server.play(Canned(body=body))
    provider, _ = _provider(server)
    assert (await _complete(provider)).text == ""


async def test_a_slow_server_times_out(server: CannedServer) -> None:
    server.play(Canned(body=chat_body("late"), delay_s=2.0))
    provider, _ = _provider(server)
    started = time.monotonic()
    with pytest.raises(MemosError) as info:
        await _complete(provider, timeout_ms=300)
    assert info.value.code is ErrorCode.LLM_TIMEOUT
    assert time.monotonic() - started < 1.5


async def test_connection_refused_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAICompatLLM(base_url=f"http://127.0.0.1:{port}/v1", max_retries=3)
    with pytest.raises(MemosError) as info:
        await _complete(provider, timeout_ms=2000)
    assert info.value.code is ErrorCode.LLM_UNAVAILABLE
    assert info.value.details["failure"] == "transient"


def test_url_and_retry_after_parsing() -> None:
    assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"
    assert parse_retry_after(httpx.Headers({"retry-after": "3"})) == 3
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert parse_retry_after(httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}), now=1445412480) == 10
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert parse_retry_after(httpx.Headers({})) is None


# ----------------------------------------------------------------------------------------------- through the facade


async def test_facade_over_openai_compatible_end_to_end(server: CannedServer) -> None:
    server.play(
        Canned(body=chat_body("Here you go: {'relation': 'new-task', 'confidence': 0.95, 'reason': 'topic change',}"))
    )
    settings = LLMSettings(provider="openai_compatible", base_url=server.base_url, api_key=API_KEY, model="m")
    sink = MemoryApiLogSink()
    facade = build_llm_facade(settings, NoLLM(), sink=sink)
    try:
        result = await facade.complete_json(
            RELATION_CLASSIFY,
            {"first_user": "a", "last_user": "b", "last_agent": "c", "text": "new task: d"},
            op="session.relation",
            episode_id="ep_1",
        )
    finally:
        await facade.aclose()
    assert result.relation == "new_task" and result.confidence == 0.95
    assert server.requests[0]["json"]["response_format"]["type"] == "json_schema"
    assert server.requests[0]["json"]["temperature"] == 0.0
    (entry,) = sink.entries
    assert entry.success and entry.input["provider"] == "openai_compatible"
    assert (entry.output["tokensIn"], entry.output["tokensOut"]) == (11, 7)
    assert API_KEY not in json.dumps([entry.input, entry.output])


async def test_facade_falls_back_to_the_host_when_the_key_is_rejected(server: CannedServer) -> None:
    server.play(Canned(status=401, body={"error": {"message": "invalid api key"}}))
    settings = LLMSettings(provider="openai_compatible", base_url=server.base_url, api_key=API_KEY)
    host = ScriptedProvider('{"relation": "follow_up"}', name="host")
    facade = build_llm_facade(settings, host)
    try:
        vars_ = {"first_user": "a", "last_user": "b", "last_agent": "c", "text": "and then?"}
        for _ in range(3):
            assert (await facade.complete_json(RELATION_CLASSIFY, vars_, op="rel")).relation == "follow_up"
    finally:
        await facade.aclose()
    assert len(server.requests) == 1  # the breaker keeps the rejected key from being tried again
    assert len(host.calls) == 3
    assert facade.stats()["breakers"]["0:openai_compatible"]["state"] == "open"


def test_provider_chain_follows_the_settings() -> None:
    host = ScriptedProvider(name="host")
    base = {"base_url": "http://127.0.0.1:9/v1"}
    chain = build_providers(LLMSettings(provider="openai_compatible", **base), host)
    assert [p.name for p in chain] == ["openai_compatible", "host"]
    chain = build_providers(LLMSettings(provider="openai_compatible", fallback_to_host=False, **base), host)
    assert [p.name for p in chain] == ["openai_compatible"]
    assert build_providers(LLMSettings(provider="host"), host) == [host]
    assert [p.name for p in build_providers(LLMSettings(provider="host"), None)] == ["none"]
    assert [p.name for p in build_providers(LLMSettings(provider="none"), host)] == ["none"]
    assert isinstance(build_llm_facade(LLMSettings(), host), LLMFacade)


async def test_concurrent_calls_share_one_client(server: CannedServer) -> None:
    provider, _ = _provider(server)
    try:
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(provider.complete, USER)
    finally:
        await provider.aclose()
    assert len(server.requests) == 5


async def test_http_retries_count_against_the_llm_budget(server: CannedServer) -> None:
    """Each re-sent request can cost tokens: the facade's per-episode budget pays for it (budget.py)."""
    server.play(Canned(status=503, body={"error": "overloaded"}), Canned(status=503), Canned(body=chat_body("ok")))
    provider, sleep = _provider(server, max_retries=3, backoff_ms=1)
    facade = LLMFacade([provider], budget=CallBudget(2, 0))
    try:
        with pytest.raises(MemosError) as info:
            await facade.complete(USER, op="test", episode_id="ep_1")
    finally:
        await facade.aclose()
    # the first request and one retry fit in the episode's two calls; the second retry is refused
    assert len(server.requests) == 2 and len(sleep.delays) == 1
    assert info.value.code is ErrorCode.LLM_RATE_LIMITED  # the call ends with the provider's own error
    stats = facade.stats()["ops"]["test"]
    assert stats["retries"] == 1 and stats["budget_refused"] == 1
    assert facade.available("ep_1") is False  # the episode's budget is spent
    # a provider used without a facade has no budget: it retries as configured
    server.requests.clear()
    server.play(Canned(status=503), Canned(status=503), Canned(body=chat_body("ok")))
    alone, _ = _provider(server, max_retries=3, backoff_ms=1)
    assert (await _complete(alone)).text == "ok" and len(server.requests) == 3
