"""The script-writing LLM agent against a scripted OpenAI-compatible server (no real model), and the families'
`script` variant it runs.

What the runner relies on: the prompt shows the head of each input file as it is on disk and the memory last;
the reply's ```python block is run in the workspace and the output file it writes is the answer; a failing
script gets one sampled retry with its error; a script that writes nothing, loops or crashes leaves no answer;
and the variant's verifier diagnoses the lesson-fixable mistakes a script makes (a 13F default namespace
ignored, dates read month-first, cancelled orders counted).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from skillflow.agents import MEMORY_HEADER, AgentInput, AgentResult
from skillflow.family import Family, Task, load_family
from skillflow.runner import make_agent, parse_args
from skillflow.script_agent import (
    SCRIPT_NAME,
    ScriptAgent,
    ScriptSettings,
    default_prefill,
    extract_script,
    file_head,
)

from .conftest import Script, make_job

GOOD = """\
import json
with open("answers.json", "w") as f:
    json.dump({"monthly_revenue_usd": {"2024-01": 40.0}, "total_revenue_usd": 40.0}, f)
```"""
CRASH = """\
rows = {}
print(rows["missing"])
```"""


def _run(url: str, job: AgentInput, **settings: Any) -> AgentResult:
    agent = ScriptAgent(ScriptSettings(base_url=url, model="fake", **settings))
    try:
        return agent.attempt(job)
    finally:
        agent.close()


@pytest.fixture
def sales() -> Family:
    return load_family("sales_csv", variant="script")


def test_the_prefill_imports_what_the_input_files_need() -> None:
    assert default_prefill(("a.csv", "b.CSV")) == "```python\nimport json\nimport csv\n"
    assert default_prefill(("f.xml",)) == "```python\nimport json\nimport xml.etree.ElementTree as ET\n"
    assert default_prefill(("notes.txt",)) == "```python\nimport json\n"


def test_the_last_python_block_is_the_script() -> None:
    reply = "```python\nprint(1)\n```\ntext\n```python\nprint(2)\n```"
    assert extract_script(reply) == "print(2)\n"
    assert extract_script("no code at all") is None
    assert extract_script("```python\n\n```") is None


def test_the_prompt_shows_file_heads_then_memory_then_the_ask(
    fake_llm: tuple[str, Script], sales: Family, tmp_path: Path
) -> None:
    url, script = fake_llm
    script.content = GOOD
    job = make_job(sales, tmp_path, injected="<memory>skip cancelled orders</memory>")
    _run(url, job)
    body = script.requests[0]["body"]
    user = body["messages"][1]["content"]
    assert "order_id,order_date,status" in user  # the raw CSV header: the script parses the file itself
    assert user.index("File sales_jan.csv") < user.index(MEMORY_HEADER) < user.index("Write the Python script")
    assert body["messages"][-1] == {"role": "assistant", "content": default_prefill(job.task.files)}
    assert body["temperature"] == 0.0 and body["max_tokens"] == 500


def test_a_working_script_writes_the_answer_and_reports_its_steps(
    fake_llm: tuple[str, Script], sales: Family, tmp_path: Path
) -> None:
    url, script = fake_llm
    script.content = GOOD
    job = make_job(sales, tmp_path)
    result = _run(url, job)
    answer = json.loads((job.workspace / "answers.json").read_text())
    assert answer == {"monthly_revenue_usd": {"2024-01": 40.0}, "total_revenue_usd": 40.0}
    assert [s["name"] for s in result.steps] == ["llm.chat", "run_python", "write_file"]
    assert (job.workspace / SCRIPT_NAME).read_text().startswith("import json\n")  # the prefill is part of it
    assert result.notes["answerValid"] and result.notes["llmCalls"] == 1 and result.notes["promptTokens"] == 321
    assert result.notes["runs"] == [{"attempt": 1, "error": None}]
    assert sales.check(job.task)(job.task, job.workspace).passed


def test_a_crash_gets_one_sampled_retry_with_its_traceback(
    fake_llm: tuple[str, Script], sales: Family, tmp_path: Path
) -> None:
    url, script = fake_llm
    script.replies = [CRASH]
    script.content = GOOD
    job = make_job(sales, tmp_path)
    result = _run(url, job, retry_temperature=0.6)
    assert [s["name"] for s in result.steps] == ["llm.chat", "run_python", "llm.chat", "run_python", "write_file"]
    failed = result.steps[1]
    assert failed["errorCode"] == "SCRIPT_FAILED" and "KeyError: 'missing'" in failed["output"]
    retry = script.requests[1]["body"]
    assert retry["temperature"] == 0.6
    feedback = retry["messages"][-2]["content"]  # the last one is the prefill again
    assert "exited with code 1" in feedback and "KeyError: 'missing'" in feedback
    assert result.notes["answerValid"] and result.notes["llmCalls"] == 2


def test_no_answer_when_every_script_fails(fake_llm: tuple[str, Script], sales: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.content = 'print("I forgot to write the file")\n```'
    job = make_job(sales, tmp_path)
    (job.workspace / "answers.json").write_text('{"stale": true}')  # left by someone else: must not count
    result = _run(url, job, retries=2)
    assert not (job.workspace / "answers.json").exists()
    assert result.notes["llmCalls"] == 3 and not result.notes["answerValid"]
    assert result.notes["error"] == "it did not write answers.json"
    assert "write_file" not in [s["name"] for s in result.steps]


def test_a_script_that_hangs_is_stopped(fake_llm: tuple[str, Script], sales: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.content = "import time\ntime.sleep(30)\n```"
    result = _run(url, make_job(sales, tmp_path), retries=0, run_timeout_s=0.5)
    assert result.notes["error"] == "it did not finish within 0.5 s"


def test_an_output_that_is_not_an_object_is_refused(
    fake_llm: tuple[str, Script], sales: Family, tmp_path: Path
) -> None:
    url, script = fake_llm
    script.content = 'json.dump([1, 2], open("answers.json", "w"))\n```'
    result = _run(url, make_job(sales, tmp_path), retries=0)
    assert result.notes["error"] == "answers.json holds a JSON list, not an object"


def test_an_http_error_is_reported_not_raised(fake_llm: tuple[str, Script], sales: Family, tmp_path: Path) -> None:
    url, script = fake_llm
    script.status = 500
    result = _run(url, make_job(sales, tmp_path))
    assert result.steps[0]["errorCode"] == "LLM_ERROR" and not result.notes["answerValid"]


def test_file_head_says_how_much_is_left(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("".join(f"{i}\n" for i in range(20)))
    head = file_head(path, lines=3)
    assert head == "0\n1\n2\n... (17 more lines)"


def test_the_runner_builds_the_script_agent() -> None:
    args = parse_args(["--agent", "script", "--llm-url", "http://127.0.0.1:9/v1", "--script-retries", "2"])
    agent = make_agent(args)
    assert isinstance(agent, ScriptAgent)
    assert agent.settings.retries == 2 and agent.settings.max_tokens == 500
    agent.close()
    with pytest.raises(SystemExit, match="--agent script needs --llm-url"):
        make_agent(parse_args(["--agent", "script"]))


# ---- the `script` variant ------------------------------------------------------------------------------


def _reference(family: Family, task: Task, workspace: Path, mistakes: frozenset[str]) -> dict[str, Any]:
    module = sys.modules[family.check(task).__module__]
    answer: dict[str, Any] = module.reference(task, workspace, mistakes)
    return answer


def _diagnosed(family: Family, task: Task, workspace: Path, answer: Any) -> tuple[bool, tuple[str, ...]]:
    (workspace / task.output).write_text(json.dumps(answer), encoding="utf-8")
    result = family.check(task)(task, workspace)
    return result.passed, result.diagnosed


def test_the_13f_script_variant_adds_the_namespace_pitfall_only_to_itself(tmp_path: Path) -> None:
    base, variant = load_family("sec13f"), load_family("sec13f", variant="script")
    assert "namespace" in variant.pitfalls and "namespace" not in base.pitfalls
    assert variant.workspace_dir == "workspace-script"
    assert {t.variant for t in variant.tasks} == {"script"} and {t.variant for t in base.tasks} == {None}
    for task in variant.tasks:
        workspace = variant.prepare_workspace(task, tmp_path / task.id)
        assert (
            'xmlns="http://www.sec.gov/edgar/document/thirteenf/informationtable"'
            in (workspace / task.files[0]).read_text()
        )
        assert _diagnosed(variant, task, workspace, _reference(variant, task, workspace, frozenset())) == (True, ())
        blind = _reference(variant, task, workspace, frozenset({"namespace"}))
        assert all(v in ([], 0) for v in blind.values()), task.id  # nothing found: empty lists, zero totals
        assert _diagnosed(variant, task, workspace, blind) == (False, ("namespace",)), task.id
        # no ties: a stable sort in document order is right, so the namespace is the one lesson needed
        assert _reference(variant, task, workspace, frozenset({"order"})) == _reference(
            variant, task, workspace, frozenset()
        )


def test_the_namespace_lesson_is_recognised_in_its_own_feedback() -> None:
    from skillflow.lessons import find_lessons

    variant = load_family("sec13f", variant="script")
    found = find_lessons(variant.pitfalls["namespace"].feedback, variant.pitfalls)
    assert "namespace" in {e.pitfall for e in found}
    assert not find_lessons(
        "root.findall('.//infoTable') returned 4 rows", {"namespace": variant.pitfalls["namespace"]}
    )


def test_the_sales_script_variant_needs_no_rates_file_and_exposes_dates_and_cancelled(tmp_path: Path) -> None:
    family = load_family("sales_csv", variant="script")
    exposed: dict[str, set[str]] = {}
    for task in family.tasks:
        assert "fx_rates.csv" not in task.files
        workspace = family.prepare_workspace(task, tmp_path / task.id)
        assert _diagnosed(family, task, workspace, _reference(family, task, workspace, frozenset()))[0], task.id
        for pitfall in ("dates", "cancelled"):
            wrong = _reference(family, task, workspace, frozenset({pitfall}))
            passed, diagnosed = _diagnosed(family, task, workspace, wrong)
            if not passed:
                assert diagnosed == (pitfall,), (task.id, pitfall)
                exposed.setdefault(pitfall, set()).add(task.id)
    assert exposed["cancelled"] == {t.id for t in family.tasks}  # every task punishes counting cancelled orders
    assert exposed["dates"] == {"monthly-revenue", "units-by-month", "average-order-value"}
    assert "'%d/%m/%Y'" in family.pitfalls["dates"].feedback  # a lesson a script can apply in one line


# ---- the whole loop through a real service -------------------------------------------------------------

_PARSE = {
    False: "root = ET.parse(name).getroot()\n",
    True: "root = ET.parse(name).getroot()\nfor el in root.iter():\n    el.tag = el.tag.split('}')[-1]\n",
}
_READ = """\
def rows(name):
    {parse}    return [{{"cusip": t.find("cusip").text, "issuer": t.find("nameOfIssuer").text,
             "value": int(t.find("value").text)}} for t in root.findall(".//infoTable")]
"""
_TOP = """\
top = sorted(rows("filing_q1.xml"), key=lambda r: -r["value"])[:2]
json.dump({"top_securities": top, "top_total_value": sum(r["value"] for r in top)}, open("answers.json", "w"))
```"""
_VALUES = """\
held = sorted(rows("filing_q1.xml"), key=lambda r: r["cusip"])
json.dump({"security_count": len(held), "securities": held, "total_value": sum(r["value"] for r in held)},
          open("answers.json", "w"))
```"""


def _model(body: dict[str, Any]) -> str:
    """A fake coder model: it ignores the namespace unless the memory in its prompt tells it about one."""
    user = body["messages"][1]["content"]
    memory = user.split(MEMORY_HEADER, 1)[1] if MEMORY_HEADER in user else ""
    task = user.split("File ", 1)[0]  # the memory quotes earlier tasks: decide on this task's text alone
    knows = "namespace" in memory.lower()
    parse = _PARSE[knows].replace("\n", "\n    ")
    code = _READ.format(parse=parse.rstrip(" "))
    return code + (_TOP if "largest value" in task else _VALUES)


def test_a_namespace_lesson_flows_from_the_first_failure_to_the_next_task(
    fake_llm: tuple[str, Script], tmp_path: Path
) -> None:
    """Through a real memos-bridge service (no LLM in the service): task 1's script finds no rows, the verifier
    names the namespace, the lesson is recalled in task 2's prompt, and task 2's script passes; without memory
    both tasks fail."""
    import dataclasses

    from skillflow.protocol import run_with_memory, run_without_memory
    from skillflow.service import RunOptions

    url, script = fake_llm
    script.respond = _model
    family = load_family("sec13f", variant="script")
    family = dataclasses.replace(family, tasks=tuple(family.task(t) for t in ("top-securities", "security-values")))
    agent = ScriptAgent(ScriptSettings(base_url=url, model="fake", retries=0))
    try:
        with_memory = run_with_memory(family, agent, tmp_path / "with", RunOptions(run_id="t"))
        without_memory = run_without_memory(family, agent, tmp_path / "without", RunOptions(run_id="t"))
    finally:
        agent.close()
    assert without_memory.successes == [False, False]
    assert with_memory.successes == [False, True]
    first, second = with_memory.trials
    assert first.check.diagnosed == ("namespace",)
    assert second.agent.notes["lessonsInMemory"] == ["namespace"]
    assert second.recall is not None and "namespace" in json.dumps(second.recall).lower()
