"""The per-family protocol against a scripted client (no service): what is sent, in which order, bound to what.

The end-to-end behaviour with a real service is in tests/e2e/test_skillflow.py; here every RPC the runner makes
is checked field by field, plus the no-memory baseline, the data-home config, the CLI and the report.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from skillflow import protocol, runner
from skillflow.agents import SimulatedAgent
from skillflow.family import load_family
from skillflow.protocol import ProtocolError, assert_no_switch, feedback_verdict, run_with_memory, run_without_memory
from skillflow.report import cumulative, family_report, format_table, plot
from skillflow.service import RunOptions, family_config, service_env
from skillflow.verify import CheckResult

UNITS_LESSON = "Avoid: Do not multiply the 13F value column by 1000: values are already in thousands of USD."
LEARNING_METHODS = ["memory.list_policies", "skill.list", "memory.list_world_models", "core.health"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class ScriptedClient:
    """Answers like the service would, records every call; task 2 onwards recalls the units lesson."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.turns = 0

    def call(self, method: str, params: Any = None, timeout: float | None = None) -> Any:
        self.calls.append((method, params))
        if method == "session.open":
            return {"sessionId": "se_1"}
        if method == "turn.start":
            self.turns += 1
            injected = UNITS_LESSON if self.turns > 1 else ""
            hits = [{"tier": 2, "refKind": "experience", "refId": "po_1", "score": 0.9}] if injected else []
            return {"query": {"episodeId": f"ep_{self.turns}"}, "hits": hits, "injectedContext": injected}
        if method == "turn.end":
            return {"traceId": "tr_a", "traceIds": [f"tr_{self.turns}a", f"tr_{self.turns}b"], "episodeId": "x"}
        if method == "feedback.submit":
            return {"id": f"fb_{self.turns}"}
        answers: dict[str, Any] = {
            "memory.flush": {"ok": True, "chainsRun": 1, "pending": 0},
            "memory.list_policies": {"policies": []},
            "skill.list": {"skills": []},
            "skill.get": None,
            "memory.list_world_models": {"worldModels": []},
            "core.health": {"llmUsage": {"ops": {"reward.r_human": {"calls": 2}}}},
            "session.close": {"ok": True},
        }
        return answers[method]

    def of(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedClient:
    client = ScriptedClient()

    @contextlib.contextmanager
    def fake(home: Path, options: RunOptions, log: IO[bytes]) -> Iterator[ScriptedClient]:
        yield client

    monkeypatch.setattr(protocol, "spawned_service", fake)
    return client


def test_each_task_is_one_turn_with_feedback_bound_to_its_episode(scripted: ScriptedClient, tmp_path: Path) -> None:
    family = load_family("sec13f")
    run = run_with_memory(family, SimulatedAgent(), tmp_path / "run", RunOptions(run_id="r1"))
    methods = [m for m, _ in scripted.calls]
    per_task = ["turn.start", "turn.end", "feedback.submit", "memory.flush", *LEARNING_METHODS]
    assert methods == [
        "session.open",
        *per_task * len(family.tasks),
        "session.close",
        "memory.flush",
        *LEARNING_METHODS,
    ]
    starts, ends, verdicts = scripted.of("turn.start"), scripted.of("turn.end"), scripted.of("feedback.submit")
    assert starts[0]["userText"] == family.tasks[0].prompt
    assert [s["userText"] for s in starts[1:]] == [f"New task: {t.prompt}" for t in family.tasks[1:]]
    stamps = [p["ts"] for p in scripted.of("turn.start") + ends + verdicts]
    assert len(set(stamps)) == len(stamps) and all(s["deadlineAt"] > s["ts"] for s in starts)
    for i, (end, verdict, trial) in enumerate(zip(ends, verdicts, run.trials, strict=True), 1):
        assert end["episodeId"] == verdict["episodeId"] == trial.episode_id == f"ep_{i}"
        assert end["toolCalls"] == trial.agent.steps and end["agentText"] == trial.agent.reply
        assert verdict["traceId"] == f"tr_{i}b"  # the last step turn.end stored
        assert verdict["raw"]["traceIds"] == [f"tr_{i}a", f"tr_{i}b"] == trial.trace_ids  # and all of them
        assert verdict["channel"] == "explicit" and verdict["rationale"] == trial.check.message
        assert (verdict["polarity"], verdict["magnitude"]) == feedback_verdict(trial.check)
        raw = verdict["raw"]["verifier"]
        assert set(raw) == {"passed", "total", "score", "expected", "actual", "failing", "task", "file"}
        assert raw["task"] == trial.task and raw["failing"] == list(trial.check.failing)
        assert verdict["evidenceId"] == f"skillflow:r1:sec13f:{trial.task}" == trial.evidence_id
        assert trial.feedback_id == f"fb_{i}" and trial.new_episode is True
    # task 1 had no memory and made every mistake; the recalled units lesson fixed units from task 2 on
    assert run.trials[0].recall is not None and run.trials[0].recall["hits"] == []
    assert run.trials[1].recall is not None and run.trials[1].recall["lessonsPresent"] == ["units"]
    assert "units" not in run.trials[1].check.diagnosed and "units" in run.trials[0].check.diagnosed
    assert run.final_memory is not None and run.final_memory["llmCalls"] == 2


def test_without_memory_nothing_is_sent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_service(*args: object) -> None:
        raise AssertionError("the baseline must not talk to a service")

    monkeypatch.setattr(protocol, "spawned_service", no_service)
    family = load_family("sales_csv")
    run = run_without_memory(family, SimulatedAgent(), tmp_path, RunOptions(run_id="r"))
    assert [t.task for t in run.trials] == [t.id for t in family.tasks]
    assert run.successes == [False] * len(family.tasks) and all(t.episode_id is None for t in run.trials)


def test_a_data_home_is_never_reused(scripted: ScriptedClient, tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    with pytest.raises(ProtocolError, match="fresh data home"):
        run_with_memory(load_family("sec13f"), SimulatedAgent(), tmp_path, RunOptions(run_id="r"))


def test_the_family_world_domain_goes_into_the_data_home_config(scripted: ScriptedClient, tmp_path: Path) -> None:
    from memos_bridge.config import load_settings

    family = load_family("sales_csv")
    assert "[learning.world.extra_domains.sec13f]" in family_config(load_family("sec13f"))
    run_with_memory(family, SimulatedAgent(), tmp_path, RunOptions(run_id="r"))
    text = (tmp_path / "home" / "config.toml").read_text()
    assert tomllib.loads(text)["learning"]["world"]["extra_domains"]["sales_csv"]["aliases"] == [
        "csv",
        "sales",
        "sales-csv",
    ]
    settings = load_settings(tmp_path / "home", env={})
    assert settings.learning.world.extra_domains["sales_csv"].label == "CSV sales reports"


def test_feedback_never_announces_a_task_switch() -> None:
    for name in ("sec13f", "sales_csv"):
        for pitfall in load_family(name).pitfalls.values():
            assert_no_switch(pitfall.feedback, name)
    assert_no_switch("2/3 checks of top-securities passed; failing: top_securities.", "ok")
    for text in (
        "New task: redo it",
        "All good. Next task: the report",
        "换个任务：看看别的",
        "Let's move on to something else.",
    ):
        with pytest.raises(ProtocolError, match="task switch"):
            assert_no_switch(text, "t")


def test_verdict_strength_follows_the_score() -> None:
    def result(passed: int, total: int) -> CheckResult:
        return CheckResult("t", passed, total, (), {}, {}, "")

    assert feedback_verdict(result(3, 3)) == ("positive", 1.0)
    assert feedback_verdict(result(1, 4)) == ("negative", 0.75)
    assert feedback_verdict(result(9, 10)) == ("negative", 0.5)
    assert feedback_verdict(result(0, 2)) == ("negative", 1.0)


def test_service_environment() -> None:
    base = service_env(RunOptions(run_id="r"))
    assert base == {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LLM__PROVIDER": "none"}
    inherited = service_env(RunOptions(run_id="r", llm="inherit", service_env={"MEMOS_BRIDGE_X__Y": "1"}))
    assert inherited == {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_X__Y": "1"}


def test_the_cli_writes_the_report_and_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    code = runner.main(["--family", "sec13f", "--mode", "without", "--out", str(out), "--work-dir", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "sec13f — SEC 13F holdings (5 tasks)" in printed and "success: without memory 0/5 (0%)" in printed
    report = json.loads(out.read_text())
    assert report["version"] == 1 and report["mode"] == "without" and report["agent"]["kind"] == "simulated"
    (family,) = report["families"]
    assert family["summary"]["withMemory"] is None and family["summary"]["withoutMemory"]["cumulative"] == [0] * 5
    assert f"plot: {out.with_suffix('.png')}" in printed  # matplotlib is a dev dependency: the plot is drawn
    assert out.with_suffix(".png").read_bytes().startswith(PNG_SIGNATURE)
    markdown = out.with_suffix(".md").read_text()
    assert markdown.startswith("# SkillFlow run\n\n```bash\npython scripts/skillflow_runner.py --family sec13f --mode")
    assert "## sec13f — SEC 13F holdings" in markdown and "| 1 | security-values | FAIL" in markdown
    assert "* success: without memory 0/5 (0%), with memory not run" in markdown
    assert runner.main(["--family", "nope", "--mode", "without", "--work-dir", str(tmp_path)]) == 2


def test_the_table_shows_recall_and_learning_per_task(scripted: ScriptedClient, tmp_path: Path) -> None:
    family = load_family("sec13f")
    with_memory = run_with_memory(family, SimulatedAgent(), tmp_path / "a", RunOptions(run_id="r"))
    without = run_without_memory(family, SimulatedAgent(), tmp_path / "b", RunOptions(run_id="r"))
    table = format_table(family_report(family, with_memory, without))
    lines = table.splitlines()
    assert "recalled at turn.start" in lines[1] and "lessons in recall" in lines[1]
    assert "1 exp" in lines[3] and "units" in lines[3] and "0/0/0" in lines[3]
    assert "learnt: 0 typed experiences (none), 0 L2 policies, 0 skills, 0 world models; LLM calls 2" in table
    assert cumulative([False, True, True, False]) == [0, 1, 2, 2]


def test_the_plot_is_a_png_with_one_panel_per_family(scripted: ScriptedClient, tmp_path: Path) -> None:
    assert importlib.util.find_spec("matplotlib") is not None, "a dev dependency: pip install -e '.[dev]'"
    families = [load_family("sec13f"), load_family("sales_csv")]
    reports = [
        family_report(
            family,
            run_with_memory(family, SimulatedAgent(), tmp_path / family.name / "a", RunOptions(run_id="r")),
            run_without_memory(family, SimulatedAgent(), tmp_path / family.name / "b", RunOptions(run_id="r")),
        )
        for family in families
    ]
    path = tmp_path / "curves.png"
    assert plot({"families": reports}, path) == f"plot: {path}"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (2 * 5 * 120, int(3.8 * 120))  # two panels of 5 x 3.8 inches at 120 dpi
