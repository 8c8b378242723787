"""The simulated agent's lesson detection and behaviour, and the external-command agent's plumbing.

The simulated agent is only a fair model if it learns exactly from what memory says: every wording of a
lesson the service may inject (the verifier's sentence, the service's rule templates, world-model facts,
Chinese) must register, and nothing else — not the task prompts, not its own mistaken steps recalled as
traces, not a bare "wrong".
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from skillflow.agents import MEMORY_HEADER, AgentInput, CommandAgent, SimulatedAgent
from skillflow.family import Family, load_family
from skillflow.lessons import find_lessons, learnt, service_wording

FAMILIES = ["sec13f", "sales_csv"]

RECOGNISED = {
    "sec13f": {
        "units": [
            "Report `securities.value` in answers.json in thousands: divide the raw values by 1,000 "
            "(expected 12050, got 12050000).",
            "The 13F value column is already in thousands of USD.",
            "Do not multiply value by 1000.",
            "13F 的 value 已经以千美元为单位，不要乘以 1000。",
        ],
        "schema": [
            "Use the fields the task asks for in answers.json: securities.issuer.",
            "Do not write fields the task did not ask for (securities.nameOfIssuer).",
            "Do not reuse the previous task's answers.json schema.",
            "请使用任务要求的字段名，不要照搬 XML 元素名。",
        ],
        "order": [
            "Ties are broken by CUSIP ascending.",
            "sorted by value descending, ties by CUSIP",
            "并列时按 CUSIP 升序排列。",
        ],
    },
    "sales_csv": {
        "fx": [
            "Amounts must be converted into USD with the month's rate.",
            "Amounts are in the order's own currency.",
            "金额要按订单月份的汇率换算成美元。",
        ],
        "dates": [
            "order_date is written day-first.",
            "Dates are DD/MM/YYYY.",
            "order_date 是日在前的格式（日/月/年）。",
        ],
        "cancelled": [
            "Exclude cancelled orders from revenue.",
            "left out cancelled orders",
            "Cancelled orders are not revenue.",
            "统计时排除状态为取消的订单。",
        ],
    },
}
NOT_A_LESSON = [
    "Order the entries of `top_securities` in answers.json, as the verifier expects.",
    "Do not leave the entries of `holdings` in answers.json unsorted.",
    "wrong",
    "不对",
    "Try again.",
]


def _job(family: Family, index: int, injected: str, tmp_path: Path) -> AgentInput:
    task = family.tasks[index]
    workspace = family.prepare_workspace(task, tmp_path / f"{family.name}-{index}-{len(injected)}")
    return AgentInput(family, task, task.prompt, injected, workspace)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_wording_of_a_lesson_is_recognised(name: str) -> None:
    family = load_family(name)
    for pitfall, texts in RECOGNISED[name].items():
        assert set(RECOGNISED[name]) == set(family.pitfalls)
        for text in [*texts, family.pitfalls[pitfall].feedback]:
            assert learnt([text], family.pitfalls) == {pitfall}, text


@pytest.mark.parametrize("name", FAMILIES)
def test_prompts_own_mistakes_and_bare_verdicts_teach_nothing(name: str, tmp_path: Path) -> None:
    family = load_family(name)
    texts = list(NOT_A_LESSON)
    for index, task in enumerate(family.tasks):
        texts += [task.prompt, f"New task: {task.prompt}"]
        naive = SimulatedAgent().attempt(_job(family, index, "", tmp_path))
        texts += [naive.reply, json.dumps(naive.steps)]
    assert learnt(texts, family.pitfalls) == frozenset()
    assert learnt(["\n".join(texts)], family.pitfalls) == frozenset()


def test_a_lesson_split_over_lines_or_in_backticks_still_counts() -> None:
    family = load_family("sec13f")
    evidence = find_lessons("1. Avoid: Do not multiply the `value`\n   column by 1000.", family.pitfalls)
    assert [e.pitfall for e in evidence] == ["units"] and "multiply" in evidence[0].excerpt


@pytest.mark.parametrize("name", FAMILIES)
def test_without_memory_the_agent_makes_every_typical_mistake(name: str, tmp_path: Path) -> None:
    family = load_family(name)
    for index, task in enumerate(family.tasks):
        result = SimulatedAgent().attempt(_job(family, index, "", tmp_path))
        assert result.notes["habits"] == sorted(family.pitfalls) and result.notes["lessonsRecognised"] == []
        check = family.check()(task, tmp_path / f"{family.name}-{index}-0")
        assert not check.passed and check.diagnosed, task.id
        assert [s["name"] for s in result.steps][-1] == "write_file"


@pytest.mark.parametrize("name", FAMILIES)
def test_all_lessons_in_memory_make_every_task_pass(name: str, tmp_path: Path) -> None:
    family = load_family(name)
    memory = "\n".join(p.feedback for p in family.pitfalls.values())
    for index, task in enumerate(family.tasks):
        result = SimulatedAgent().attempt(_job(family, index, memory, tmp_path))
        assert result.notes["habits"] == []
        check = family.check()(task, tmp_path / f"{family.name}-{index}-{len(memory)}")
        assert check.passed, (task.id, check.message)


def test_a_lesson_from_task_1_fixes_the_same_mistake_in_task_4(tmp_path: Path) -> None:
    """The verifier's message about task 1 (units, schema) is all the memory; task 4 then fails only on the
    mistake it has not been taught (ranking ties)."""
    family = load_family("sec13f")
    first = _job(family, 0, "", tmp_path)
    SimulatedAgent().attempt(first)
    feedback = family.check()(first.task, first.workspace)
    assert set(feedback.diagnosed) == {"units", "schema"}
    later = _job(family, 3, feedback.message, tmp_path)
    result = SimulatedAgent().attempt(later)
    assert result.notes["habits"] == ["order"]
    assert family.check()(later.task, later.workspace).diagnosed == ("order",)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_solver_never_touches_the_verifier(name: str) -> None:
    source = (load_family(name).folder / "agent.py").read_text(encoding="utf-8")
    imported = {
        alias.name if isinstance(node, ast.Import) else f"{node.module}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any("check" in module or "verify" in module for module in imported), imported


AGENT_SCRIPT = """
import json, os, sys
memory = open(os.environ["SKILLFLOW_MEMORY_FILE"]).read()
prompt = open(sys.argv[1]).read()
json.dump({"saw_memory": "REMEMBER-ME" in memory, "prompt": prompt.strip()}, open("answers.json", "w"))
if len(sys.argv) > 2:
    json.dump([{"name": "think", "input": {"q": 1}, "output": "ok"}], open(sys.argv[2], "w"))
print("done:", os.environ["SKILLFLOW_TASK"])
"""


def test_the_command_agent_gets_prompt_and_memory_and_reports_its_work(tmp_path: Path) -> None:
    family = load_family("sec13f")
    script = tmp_path / "agent.py"
    script.write_text(AGENT_SCRIPT, encoding="utf-8")
    base = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{input_file}}"
    job = _job(family, 0, "REMEMBER-ME: values are already in thousands of USD", tmp_path)
    result = CommandAgent(base).attempt(job)
    answer = json.loads((job.workspace / "answers.json").read_text())
    assert answer["saw_memory"] is True and answer["prompt"].endswith(job.task.prompt)
    assert result.reply == "done: security-values" and result.notes["returncode"] == 0
    assert [s["name"] for s in result.steps] == ["run_command", "write_file"]
    assert result.steps[1]["input"]["path"] == "answers.json" and result.notes["lessonsInMemory"] == ["units"]
    own = CommandAgent(base + " {steps_file} # {not a placeholder}").attempt(_job(family, 1, "", tmp_path))
    assert own.steps == [{"name": "think", "input": {"q": 1}, "output": "ok"}]


def test_a_failing_or_hanging_command_is_recorded_not_fatal(tmp_path: Path) -> None:
    family = load_family("sec13f")
    failed = CommandAgent(f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(3)'").attempt(
        _job(family, 0, "", tmp_path)
    )
    assert failed.notes["returncode"] == 3 and failed.steps[0]["errorCode"] == "EXIT_3"
    slow = CommandAgent(f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(5)'", timeout_s=0.5)
    hung = slow.attempt(_job(family, 1, "", tmp_path))
    assert hung.notes["returncode"] is None and hung.steps[0]["errorCode"] == "timeout"


class WritingModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible model on loopback: asks Hermes' `write_file` tool for answers.json, then replies."""

    requests: ClassVar[list[dict[str, Any]]] = []
    answer = '{"securities": []}\n'

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0") or 0)) or b"{}")
        type(self).requests.append(body)
        messages = body.get("messages") or [{}]
        if messages[-1].get("role") == "tool" or not body.get("tools"):
            message: dict[str, Any] = {"role": "assistant", "content": "Wrote answers.json."}
            finish = "stop"
        else:
            arguments = json.dumps({"path": "answers.json", "content": self.answer})
            call = {"id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": arguments}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        base = {"id": "chatcmpl-1", "created": int(time.time()), "model": "scripted"}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if body.get("stream"):
            delta = {k: v for k, v in message.items() if v is not None}
            if "tool_calls" in delta:
                delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
            chunks = [
                {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]},
                {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                    "usage": usage,
                },
            ]
            text, kind = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n", "text/event-stream"
        else:
            choice = {"index": 0, "message": message, "finish_reason": finish}
            text = json.dumps({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
            kind = "application/json"
        data = text.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _readme_hermes_command() -> str:
    """The `--agent-cmd` of README's "Hermes as the agent" example, exactly as a user would copy it."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Run SkillFlow") :]
    match = re.search(r"--agent-cmd '(hermes -z [^'\n]+)'", section)
    assert match is not None, "README's Run SkillFlow section has no Hermes --agent-cmd example"
    return match.group(1)


def test_the_readme_hermes_command_runs_a_real_hermes_turn_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hermes = Path(sys.executable).parent / "hermes"
    assert hermes.exists(), "hermes-agent is a dev dependency: its `hermes` command must be installed"
    WritingModel.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), WritingModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home = tmp_path / "hermes-home"
    home.mkdir()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    (home / "config.yaml").write_text(
        f"model:\n  provider: custom\n  base_url: {url}\n  default: scripted\n", encoding="utf-8"
    )
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    family = load_family("sec13f")
    lesson = "Avoid: Do not multiply the 13F value column by 1000: values are already in thousands of USD."
    job = _job(family, 0, lesson, tmp_path)
    command = _readme_hermes_command()
    try:
        result = CommandAgent(command.replace("hermes", shlex.quote(str(hermes)), 1), timeout_s=300).attempt(job)
    finally:
        server.shutdown()
    assert result.notes["returncode"] == 0, result.notes["stderrTail"]
    assert result.reply == "Wrote answers.json."  # `-z` prints only the final reply
    assert (job.workspace / "answers.json").read_text(encoding="utf-8") == WritingModel.answer
    asked = [
        str(m.get("content")) for r in WritingModel.requests for m in r.get("messages") or [] if m["role"] == "user"
    ]
    assert any(MEMORY_HEADER in text and lesson in text and job.task.prompt in text for text in asked)
    assert [s["name"] for s in result.steps] == ["run_command", "write_file"]
    assert result.notes["lessonsInMemory"] == ["units"]


def test_service_wording_leaves_out_the_verifiers_own_sentences_whole_or_clipped() -> None:
    pitfalls = load_family("sec13f").pitfalls
    verbatim = pitfalls["units"].feedback
    clipped = verbatim[:70] + "… …"
    template = "Report `securities.value` in answers.json in thousands: divide the raw values by 1,000."
    for text in (f"Avoid: {verbatim}", f"Avoid: {clipped}"):
        assert learnt([text], pitfalls) == {"units"}  # the agent learns from it…
        assert service_wording(text, pitfalls) == frozenset()  # …but in the verifier's words, not the service's
    assert service_wording(f"Avoid: {verbatim}\nFix: {template}", pitfalls) == {"units"}
    order = pitfalls["order"].feedback
    assert service_wording(f"{order}\nsorted by value descending, ties by CUSIP", pitfalls) == {"order"}
