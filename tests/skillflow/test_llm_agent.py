"""The LLM agent against a scripted OpenAI-compatible server on 127.0.0.1:0 (no real model).

Checks what the runner relies on: the prompt carries memory, task and input files within its bound; the
last ```json block becomes the output file; a malformed answer, an HTTP error or a timeout writes nothing;
`usage` tokens, the call count and the wall time reach the notes and the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from skillflow.agents import MEMORY_HEADER, AgentInput, AgentResult
from skillflow.family import Family, load_family
from skillflow.llm_agent import (
    DEFAULT_PREFILL,
    AnswerError,
    LLMAgent,
    LLMSettings,
    continuation,
    extract_answer,
    render_file,
)
from skillflow.report import agent_usage

from .conftest import Script, make_job


@pytest.fixture
def family() -> Family:
    return load_family("sales_csv")


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


def test_extract_answer_pairs_fences_line_by_line() -> None:
    # a code block before the answer must not swallow the answer's opening fence
    text = 'Reasoning:\n```python\nx = 1\n```\nSo:\n```json\n{"a": 3}\n```\n'
    assert extract_answer(text) == {"a": 3}
    assert extract_answer('Reasoning.\n```json\n{"a": 4}\n') == {"a": 4}  # stopped before the closing fence
    with pytest.raises(AnswerError, match="no ```json block"):
        extract_answer("```python\nprint(1)\n```")


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
    job = make_job(family, tmp_path, injected="Convert every order line to USD first.")
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
    system, user_message, prefill = body["messages"]
    assert system["role"] == "system" and user_message["role"] == "user"
    assert prefill == {"role": "assistant", "content": DEFAULT_PREFILL}  # the model continues the reasoning
    user = user_message["content"]
    assert MEMORY_HEADER in user and "Convert every order line to USD first." in user
    assert job.task.prompt in user and "File sales_jan_feb.csv:" in user and "File fx_rates.csv:" in user
    # the recalled lessons come after the files, right before the answer instructions
    assert user.index("File fx_rates.csv:") < user.index(MEMORY_HEADER) < user.index("Answer in three parts")
    # CSV rows are labelled, so the model never lines values up with the header
    assert "Row 1: order_id=SO-1001, order_date=08/01/2024, status=completed" in user


def test_without_memory_no_memory_block(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    _run(url, make_job(family, tmp_path))
    assert all(MEMORY_HEADER not in m["content"] for m in script.requests[0]["body"]["messages"])


def test_a_reply_without_an_answer_block_is_continued_once(
    fake_llm: tuple[str, Script], family: Family, tmp_path: Path
) -> None:
    url, script = fake_llm
    reasoning = DEFAULT_PREFILL + " January: 10.50, February: 3.00, total 13.50."
    # llama.cpp returns the prefix with its continuation; the second reply echoes the whole prefix too
    script.replies = [reasoning, reasoning + "\n\n```json\n" + json.dumps(ANSWER) + "\n```"]
    job = make_job(family, tmp_path)
    result = _run(url, job, answer_tokens=123)
    assert json.loads((job.workspace / job.task.output).read_text(encoding="utf-8")) == ANSWER
    assert result.notes["continued"] is True and result.notes["llmCalls"] == 2
    assert result.notes["promptTokens"] == 2 * 321 and result.notes["completionTokens"] == 2 * 45
    first, second = (r["body"] for r in script.requests)
    assert first["max_tokens"] == 900 and second["max_tokens"] == 123
    assert second["messages"][-1] == {"role": "assistant", "content": reasoning + "\n\n```json\n"}
    assert result.reply.startswith(DEFAULT_PREFILL) and result.reply.rstrip().endswith("```")


def test_continuation_opens_a_missing_block_finishes_a_cut_one_and_leaves_a_whole_one() -> None:
    assert continuation("Rows: 20 + 22 = 42") == "Rows: 20 + 22 = 42\n\n```json\n"
    cut = 'Rows: 42\n```json\n{"total": 4'
    assert continuation(cut) == cut  # ran out of tokens inside the answer: let it finish
    assert continuation('Rows: 42\n```json\n{"total": 42}\n```') is None
    assert continuation('Rows\n```json\n{"total": }\n```') is None  # complete but invalid: not asked again


def test_no_prefill_and_no_continuation_when_switched_off(
    fake_llm: tuple[str, Script], family: Family, tmp_path: Path
) -> None:
    url, script = fake_llm
    script.content = "I cannot tell."
    job = make_job(family, tmp_path)
    result = _run(url, job, prefill="", answer_tokens=0)
    (request,) = script.requests
    assert [m["role"] for m in request["body"]["messages"]] == ["system", "user"]
    assert result.notes["llmCalls"] == 1 and result.notes["answerValid"] is False
    assert not (job.workspace / job.task.output).exists()


def test_render_file_labels_csv_rows_and_leaves_other_files_alone() -> None:
    assert render_file("a.csv", "id,qty\nA-1,3\nA-2,4\n") == "Row 1: id=A-1, qty=3\nRow 2: id=A-2, qty=4\n"
    assert render_file("a.xml", "<a>1</a>") == "<a>1</a>"
    assert render_file("ragged.csv", "id,qty\nA-1\n") == "id,qty\nA-1\n"  # not a table: as it is


def test_the_prompt_stays_within_its_bound(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    result = _run(url, make_job(family, tmp_path), max_prompt_chars=2000)
    messages = script.requests[0]["body"]["messages"]
    assert sum(len(m["content"]) for m in messages) <= 2000
    assert result.notes["promptChars"] <= 2000


def test_a_malformed_answer_writes_nothing(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.content = 'The total is 13.5 USD.\n```json\n{"total_revenue_usd": 13.5,\n```'
    job = make_job(family, tmp_path)
    result = _run(url, job)
    assert not (job.workspace / job.task.output).exists()
    assert [s["name"] for s in result.steps] == ["llm.chat"]
    assert result.notes["answerValid"] is False and "not valid JSON" in result.notes["error"]
    assert result.notes["promptTokens"] == 321  # the call still cost tokens


def test_a_timeout_is_recorded_and_writes_nothing(fake_llm: tuple[str, Script], family: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.content = "```json\n{}\n```"
    script.delay_s = 1.0
    job = make_job(family, tmp_path)
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
    job = make_job(family, tmp_path)
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
    assert agent.settings.prefill == DEFAULT_PREFILL and agent.settings.answer_tokens == 400
    agent.close()
    tuned = make_agent(
        parse_args(["--agent", "llm", "--llm-url", "http://x/v1", "--llm-prefill", "", "--llm-answer-tokens", "0"])
    )
    assert isinstance(tuned, LLMAgent) and tuned.settings.prefill == "" and tuned.settings.answer_tokens == 0
    tuned.close()
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
