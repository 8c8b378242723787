"""The families' `llm` variant: few-row inputs for a small real model, with the family's own pitfalls.

The variant is data (family.json `variants.llm`, `workspace-llm/` written by each family's generator), checked
by the family's own verifier. What a small model's run relies on: every task passes with the right answer and
names the lesson of each pitfall its data exposes; the pitfalls a 1.5B model falls into by itself (sec13f:
ranking ties, sales_csv: cancelled orders and currencies) are exposed by the first task and by most of the
others; the shipped families themselves are unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from skillflow.family import Family, FamilyError, Task, load_family
from skillflow.verify import CheckResult

FAMILIES = ("sales_csv", "sec13f")


def _reference(family: Family, task: Task, workspace: Path, mistakes: frozenset[str]) -> dict[str, Any]:
    module = sys.modules[family.check(task).__module__]
    answer: dict[str, Any] = module.reference(task, workspace, mistakes)
    return answer


def _grade(family: Family, task: Task, workspace: Path, answer: Any) -> CheckResult:
    (workspace / task.output).write_text(json.dumps(answer), encoding="utf-8")
    result: CheckResult = family.check(task)(task, workspace)
    return result


@pytest.mark.parametrize("name", FAMILIES)
def test_the_variant_keeps_the_family_and_swaps_tasks_and_inputs(name: str) -> None:
    base, small = load_family(name), load_family(name, variant="llm")
    assert base.variants == small.variants == ("llm", "script") and base.variant is None and small.variant == "llm"
    assert small.name == base.name and small.pitfalls == base.pitfalls and small.check_ref == base.check_ref
    assert small.workspace_dir == "workspace-llm" and base.workspace_dir == "workspace"
    assert 4 <= len(small.tasks) <= 6
    for task in small.tasks:
        for file in task.files:
            text = (small.folder / "workspace-llm" / file).read_text(encoding="utf-8")
            rows = text.count("<infoTable>") if file.endswith(".xml") else text.count("\n") - 1
            assert 1 <= rows <= 6, (task.id, file)  # a few rows: the arithmetic fits in a small model's reasoning


@pytest.mark.parametrize("name", FAMILIES)
def test_every_variant_task_passes_with_the_right_answer_and_names_each_exposed_pitfall(
    name: str, tmp_path: Path
) -> None:
    family = load_family(name, variant="llm")
    exposed: dict[str, set[str]] = {}
    for task in family.tasks:
        workspace = family.prepare_workspace(task, tmp_path / task.id)
        correct = _reference(family, task, workspace, frozenset())
        assert _grade(family, task, workspace, correct).passed, task.id
        for pitfall in family.pitfalls.values():
            wrong = _reference(family, task, workspace, frozenset({pitfall.id}))
            if wrong == correct:
                continue
            result = _grade(family, task, workspace, wrong)
            assert not result.passed and result.diagnosed == (pitfall.id,), (task.id, pitfall.id, result.message)
            assert pitfall.feedback in result.message
            exposed.setdefault(task.id, set()).add(pitfall.id)
    first = family.tasks[0].id
    if name == "sec13f":
        # every ranked task has a tie whose issuer-name order is not the CUSIP order
        assert all("order" in exposed.get(t.id, set()) for t in family.tasks if t.params["kind"] != "security_values")
        assert "order" in exposed[first]
    else:
        assert {"fx", "cancelled", "dates"} <= exposed[first]
        assert sum("cancelled" in e for e in exposed.values()) == len(family.tasks)


def test_a_ranked_13f_tie_in_document_order_fails_on_order_only(tmp_path: Path) -> None:
    family = load_family("sec13f", variant="llm")
    task = family.tasks[0]
    workspace = family.prepare_workspace(task, tmp_path / "ws")
    # document order = issuer-name order: ADVENTURE WORKS before ZENITH, although ZENITH's CUSIP is smaller
    answer = {
        "top_securities": [
            {"cusip": "21036P108", "issuer": "CONTOSO LTD", "value": 9150},
            {"cusip": "98956P102", "issuer": "ADVENTURE WORKS CORP", "value": 4820},
        ],
        "top_total_value": 13970,
    }
    result = _grade(family, task, workspace, answer)
    assert result.diagnosed == ("order",) and result.failing == ("top_securities",)


def test_the_simulated_agent_still_runs_the_variant(tmp_path: Path) -> None:
    from skillflow.agents import SimulatedAgent
    from skillflow.runner import run
    from skillflow.service import RunOptions

    report = run(["sales_csv"], SimulatedAgent(), tmp_path, RunOptions(run_id="t"), mode="without", variant="llm")
    assert report["variant"] == "llm"
    (family,) = report["families"]
    assert family["tasks"] == [t.id for t in load_family("sales_csv", variant="llm").tasks]
    assert family["summary"]["withoutMemory"]["successes"] == 0  # every habit in force, every task exposes one


def test_an_unknown_variant_is_refused_with_the_declared_ones() -> None:
    with pytest.raises(FamilyError, match=r"no variant 'huge' \(declared: llm, script\)"):
        load_family("sec13f", variant="huge")


def test_the_runner_points_the_service_at_the_agents_endpoint() -> None:
    from skillflow.runner import parse_args, service_llm_env

    args = parse_args(["--agent", "llm", "--llm-url", "http://127.0.0.1:9/v1", "--service-llm-url", "agent"])
    assert args.service_llm_url == "agent" and args.variant is None
    env = service_llm_env("http://127.0.0.1:9/v1", 90)
    assert env == {
        "MEMOS_BRIDGE_LLM__PROVIDER": "openai_compatible",
        "MEMOS_BRIDGE_LLM__BASE_URL": "http://127.0.0.1:9/v1",
        "MEMOS_BRIDGE_LLM__FALLBACK_TO_HOST": "false",
        "MEMOS_BRIDGE_LLM__TIMEOUT_MS": "90000",
    }


def test_light_service_stages_switch_the_long_prompts_to_their_algorithms(tmp_path: Path) -> None:
    from skillflow.runner import parse_args, service_settings

    from memos_bridge.config import load_settings

    base = ["--agent", "script", "--llm-url", "http://127.0.0.1:9/v1", "--service-llm-url", "agent"]
    env, mode = service_settings(parse_args(base))
    assert mode == "inherit" and "MEMOS_BRIDGE_LEARNING__REFINE_USE_LLM" not in env
    env, _ = service_settings(
        parse_args(
            [*base, "--service-llm-stages", "light", "--service-env", "MEMOS_BRIDGE_LEARNING__WORLD__USE_LLM=true"]
        )
    )
    settings = load_settings(home=tmp_path, env=env)
    assert settings.llm.provider == "openai_compatible" and settings.llm.base_url == "http://127.0.0.1:9/v1"
    assert not settings.learning.reward.llm_scoring and not settings.learning.refine_use_llm
    assert settings.learning.world.use_llm  # an explicit --service-env pair wins
    assert not settings.learning.skill.use_llm
    assert settings.learning.l2.use_llm and settings.learning.repair.use_llm  # induction and repairs still ask
