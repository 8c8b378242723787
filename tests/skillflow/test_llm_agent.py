"""The LLM agent against a scripted OpenAI-compatible server on 127.0.0.1:0 (no real model).

Checks what the runner relies on: the prompt carries memory, task and input files within its bound; the
last ```json block becomes the output file; a malformed answer, an HTTP error or a timeout writes nothing;
`usage` tokens, the call count and the wall time reach the notes and the report.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from skillflow.agents import MEMORY_HEADER, AgentInput, AgentResult
from skillflow.family import Family, load_family
from skillflow.llm_agent import AnswerError, LLMAgent, LLMSettings, extract_answer
from skillflow.report import agent_usage


@dataclass
class Script:
    """What the fake server answers, and what it was sent."""

    content: str = "ok"
    status: int = 200
    delay_s: float = 0.0
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 321, "completion_tokens": 45})
    requests: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def fake_llm() -> Iterator[tuple[str, Script]]:
    """A scripted OpenAI-compatible `/v1/chat/completions` on an ephemeral port."""
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "body": body})
            time.sleep(script.delay_s)
            payload = {
                "choices": [{"message": {"role": "assistant", "content": script.content}, "finish_reason": "stop"}],
                "usage": script.usage,
            }
            data = json.dumps(payload if script.status == 200 else {"error": "boom"}).encode()
            try:
                self.send_response(script.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def family() -> Family:
    return load_family("sales_csv")


def _job(family: Family, tmp_path: Path, injected: str = "") -> AgentInput:
    task = family.tasks[0]
    workspace = family.prepare_workspace(task, tmp_path / "ws")
    return AgentInput(family, task, task.prompt, injected, workspace)


def _run(url: str, job: AgentInput, **settings: Any) -> AgentResult:
    agent = LLMAgent(LLMSettings(base_url=url, model="fake", **settings))
    try:
        return agent.attempt(job)
    finally:
        agent.close()


ANSWER = {"monthly_revenue_usd": {"2024-01": 10.5, "2024-02": 3.0}, "total_revenue_usd": 13.5}


def test_extract_answer_takes_the_last_json_block() -> None:
    text = 'Draft:\n```json\n{"a": 1}\n```\nFixed:\n```json\n{"a": 2}\n```\n'
    assert extract_answer(text) == {"a": 2}
    assert extract_answer('```\n{"b": [1, 2]}\n```') == {"b": [1, 2]}


@pytest.mark.parametrize(
    "text",
    ['no block at all: {"a": 1}', '```json\n{"a": 1,}\n```', "```json\n[1, 2]\n```", '```json\n{"a": 1'],
)
def test_extract_answer_refuses_malformed_replies(text: str) -> None:
    with pytest.raises(AnswerError):
        extract_answer(text)


def test_the_answer_is_written_and_usage_recorded(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.content = "Convert each row, then add.\n```json\n" + json.dumps(ANSWER) + "\n```"
    job = _job(family, tmp_path, injected="Convert every order line to USD first.")
    result = _run(url, job)
    written = json.loads((job.workspace / job.task.output).read_text(encoding="utf-8"))
    assert written == ANSWER
    assert [s["name"] for s in result.steps] == ["llm.chat", "write_file"]
    assert result.notes["answerValid"] is True
    assert result.notes["promptTokens"] == 321 and result.notes["completionTokens"] == 45
    assert result.notes["llmCalls"] == 1 and result.notes["durationMs"] >= 0
    assert agent_usage(result.notes) == {
        "llmCalls": 1,
        "promptTokens": 321,
        "completionTokens": 45,
        "durationMs": result.notes["durationMs"],
    }
    assert "Convert each row" in result.reply
    # greedy, seeded, bounded; memory, task and the input files are in the prompt
    (request,) = script.requests
    assert request["path"] == "/v1/chat/completions"
    body = request["body"]
    assert body["temperature"] == 0 and body["seed"] == 7 and body["max_tokens"] == 900 and body["model"] == "fake"
    user = body["messages"][-1]["content"]
    assert MEMORY_HEADER in user and "Convert every order line to USD first." in user
    assert job.task.prompt in user and "File sales_jan_feb.csv:" in user and "File fx_rates.csv:" in user


def test_without_memory_no_memory_block(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    _run(url, _job(family, tmp_path))
    assert MEMORY_HEADER not in script.requests[0]["body"]["messages"][-1]["content"]


def test_the_prompt_stays_within_its_bound(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    result = _run(url, _job(family, tmp_path), max_prompt_chars=2000)
    messages = script.requests[0]["body"]["messages"]
    assert sum(len(m["content"]) for m in messages) <= 2000
    assert result.notes["promptChars"] <= 2000


def test_a_malformed_answer_writes_nothing(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.content = 'The total is 13.5 USD.\n```json\n{"total_revenue_usd": 13.5,\n```'
    job = _job(family, tmp_path)
    result = _run(url, job)
    assert not (job.workspace / job.task.output).exists()
    assert [s["name"] for s in result.steps] == ["llm.chat"]
    assert result.notes["answerValid"] is False and "not valid JSON" in result.notes["error"]
    assert result.notes["promptTokens"] == 321  # the call still cost tokens


def test_a_timeout_is_recorded_and_writes_nothing(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.content = "```json\n{}\n```"
    script.delay_s = 1.0
    job = _job(family, tmp_path)
    result = _run(url, job, timeout_s=0.2)
    assert not (job.workspace / job.task.output).exists()
    assert result.steps[0]["errorCode"] == "timeout" and result.steps[0]["success"] is False
    assert result.notes["answerValid"] is False and "timed out" in result.notes["error"]
    assert result.notes["promptTokens"] == 0 and result.notes["durationMs"] < 1000


def test_an_http_error_is_recorded_and_writes_nothing(
    fake_llm: tuple[str, Script], family: Family, tmp_path: Path
) -> None:
    url, script = fake_llm
    script.status = 500
    job = _job(family, tmp_path)
    result = _run(url, job)
    assert not (job.workspace / job.task.output).exists()
    assert result.steps[0]["errorCode"] == "LLM_ERROR"
    assert "500" in result.notes["error"]


def test_the_runner_builds_the_llm_agent_from_its_flags() -> None:
    from skillflow.runner import make_agent, parse_args

    args = parse_args(["--agent", "llm", "--llm-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-seed", "3"])
    agent = make_agent(args)
    assert isinstance(agent, LLMAgent)
    assert agent.settings.model == "m" and agent.settings.seed == 3 and agent.settings.max_tokens == 900
    agent.close()
    with pytest.raises(SystemExit, match="--llm-url"):
        make_agent(parse_args(["--agent", "llm"]))


def test_a_without_memory_run_with_the_llm_agent_reports_its_usage(
    fake_llm: tuple[str, Script], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from skillflow.runner import run
    from skillflow.service import RunOptions

    url, script = fake_llm
    script.content = "```json\n" + json.dumps(ANSWER) + "\n```"
    agent = LLMAgent(LLMSettings(base_url=url, model="fake"))
    try:
        report = run(["sales_csv"], agent, tmp_path, RunOptions(run_id="t"), mode="without")
    finally:
        agent.close()
    summary = report["families"][0]["summary"]["withoutMemory"]
    assert summary["agentUsage"]["llmCalls"] == 5 and summary["agentUsage"]["promptTokens"] == 5 * 321
    assert summary["wallMs"] >= 0 and summary["total"] == 5
    printed = capsys.readouterr().out
    assert "agent LLM without memory: 5 calls, 1605 prompt + 225 completion tokens" in printed
