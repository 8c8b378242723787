"""SkillFlow end to end: both shipped families through a real spawned service, with the simulated agent.

Seed 000's success criteria ("成功标准") as assertions on the runner's report — every memory state in it was read
from the service (`memory.list_policies`, `skill.list`, `memory.list_world_models`) right after the task's
feedback and `memory.flush`, and every recall is the next `turn.start`'s own answer:

1. after a failed task's feedback a typed experience exists or was updated;
2. the next task's recall contains the lesson;
3. no skill from failure lessons alone;
4. after a success, a skill whose Avoid section holds the failures' avoidance;
5. after two experiences of the family, a world model.

Plus: with memory the simulated agent succeeds more often than without (deterministic), each task is its own
episode with its own feedback, and no LLM is called.
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from skillflow.agents import SimulatedAgent  # noqa: E402
from skillflow.family import load_family  # noqa: E402
from skillflow.runner import run  # noqa: E402
from skillflow.service import RunOptions  # noqa: E402

from memos_bridge.rules.instance import instance_specific  # noqa: E402

FAMILIES = ["sec13f", "sales_csv"]
FAILURE_TYPES = {"failure_avoidance", "repair_instruction"}
ANCHOR_TYPES = {"success_pattern", "repair_validated"}
DOMAIN = {"sec13f": "sec13f", "sales_csv": "sales_csv"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One run of both families, with and without memory (about 15 s)."""
    work = tmp_path_factory.mktemp("skillflow")
    report = run(FAMILIES, SimulatedAgent(), work, RunOptions(run_id="e2e"), mode="both", echo=False)
    return {family["family"]: family for family in report["families"]}


def _trials(reports: dict[str, dict[str, Any]], name: str) -> list[dict[str, Any]]:
    trials: list[dict[str, Any]] = reports[name]["withMemory"]["trials"]
    return trials


def _lesson(line: str) -> str:
    """An Avoid line without its instance details — quoted names, parenthesised examples, numbers, a clipped
    tail — so the same lesson about two fields (`securities.value`, `total_value`) counts once."""
    text = re.sub(r"`[^`]*`|\([^)]*(?:\)|…|$)|\d[\d.,]*", " ", line)
    return re.sub(r"\s+", " ", text).strip(" .…")


def _absorbed(trial: dict[str, Any]) -> list[dict[str, Any]]:
    """The typed experiences whose sources include this trial's episode, right after its feedback."""
    return [e for e in trial["memoryAfter"]["experiences"] if trial["episodeId"] in e["sourceEpisodeIds"]]


@pytest.mark.parametrize("name", FAMILIES)
def test_a_failed_task_leaves_a_typed_experience(reports: dict[str, dict[str, Any]], name: str) -> None:
    trials = _trials(reports, name)
    failed = [t for t in trials if not t["passed"]]
    assert failed and failed[0] is trials[0]
    learnt = _absorbed(failed[0])  # one experience per convention the feedback taught
    assert learnt
    for first in learnt:
        assert first["experienceType"] in FAILURE_TYPES and first["skillEligible"] is False
        assert first["status"] == "active"
        assert first["sourceTraceIds"] == failed[0]["traceIds"]  # every step the verdict was bound to
    for trial in failed[1:]:  # later failures create an experience or update one
        assert _absorbed(trial), trial["task"]


@pytest.mark.parametrize("name", FAMILIES)
def test_the_next_task_recalls_the_first_lesson(reports: dict[str, dict[str, Any]], name: str) -> None:
    first, second = _trials(reports, name)[:2]
    lessons = {e["id"] for e in _absorbed(first)}
    recall = second["recall"]
    hits = [h for h in recall["hits"] if h["refId"] in lessons]
    assert hits and all(h["refKind"] == "experience" for h in hits)
    assert first["diagnosed"] and set(first["diagnosed"]) <= set(recall["lessonsPresent"])
    pitfalls = load_family(name).pitfalls
    assert all(pitfalls[p].feedback in recall["injected"] for p in first["diagnosed"])
    # and the agent used it: the mistakes of task 1 are not repeated in task 2
    assert not set(first["diagnosed"]) & set(second["diagnosed"])


@pytest.mark.parametrize("name", FAMILIES)
def test_every_failure_lesson_reaches_the_next_task(reports: dict[str, dict[str, Any]], name: str) -> None:
    trials = _trials(reports, name)
    for failed, following in itertools.pairwise(trials):
        if not failed["passed"]:
            missing = set(failed["diagnosed"]) - set(following["recall"]["lessonsPresent"])
            assert not missing, f"{following['task']} did not recall {missing} learnt from {failed['task']}"


@pytest.mark.parametrize("name", FAMILIES)
def test_no_skill_from_failure_lessons_alone(reports: dict[str, dict[str, Any]], name: str) -> None:
    only_failures = 0
    for trial in _trials(reports, name):
        state = trial["memoryAfter"]
        if not any(e["experienceType"] in ANCHOR_TYPES for e in state["experiences"]):
            assert state["skills"] == [], trial["task"]
            only_failures += bool(state["experiences"])
    assert only_failures >= 2  # at least two tasks ended with lessons to avoid and no success yet


@pytest.mark.parametrize("name", FAMILIES)
def test_the_first_success_crystallises_a_skill(reports: dict[str, dict[str, Any]], name: str) -> None:
    trials = _trials(reports, name)
    first_skill = next(i for i, t in enumerate(trials) if t["memoryAfter"]["skills"])
    first_success = next(i for i, t in enumerate(trials) if t["passed"])
    assert first_skill == first_success
    (skill,) = trials[first_skill]["memoryAfter"]["skills"]
    anchors = {
        e["id"] for e in trials[first_skill]["memoryAfter"]["experiences"] if e["experienceType"] in ANCHOR_TYPES
    }
    assert anchors & set(skill["evidenceAnchors"])


@pytest.mark.parametrize("name", FAMILIES)
def test_the_first_skill_carries_the_failures_avoidance(reports: dict[str, dict[str, Any]], name: str) -> None:
    trials = _trials(reports, name)
    index = next(i for i, t in enumerate(trials) if t["memoryAfter"]["skills"])
    before = trials[index - 1]["memoryAfter"]["experiences"]
    avoidance = [  # what the failures' feedback said not to do, in its own words
        line["text"]
        for e in before
        if e["experienceType"] in FAILURE_TYPES
        for line in e["lesson"]
        if line["role"] == "prohibition" and not instance_specific(line["text"])
    ]
    assert avoidance
    (skill,) = trials[index]["memoryAfter"]["skills"]
    # the skill's own Avoid section (its guide, not the decision guidance beside it) holds every lesson
    section = {_lesson(line) for line in skill["guideAvoid"]}
    missing = {_lesson(line) for line in avoidance} - section
    assert not missing, (missing, skill["guideAvoid"])
    # and the verifier's sentence of each pitfall the failed tasks were diagnosed with, word for word
    pitfalls = load_family(name).pitfalls
    diagnosed = {p for t in trials[:index] if not t["passed"] for p in t["diagnosed"]}
    assert diagnosed and all(pitfalls[p].feedback in skill["guideAvoid"] for p in diagnosed)


@pytest.mark.parametrize("name", FAMILIES)
def test_two_experiences_of_the_family_give_a_world_model(reports: dict[str, dict[str, Any]], name: str) -> None:
    reached = False
    for trial in _trials(reports, name):
        state = trial["memoryAfter"]
        if len(state["experiences"]) >= 2:
            reached = True
            assert any(DOMAIN[name] in w["domainTags"] for w in state["worldModels"]), trial["task"]
    assert reached


@pytest.mark.parametrize("name", FAMILIES)
def test_memory_makes_the_agent_succeed_more_often(reports: dict[str, dict[str, Any]], name: str) -> None:
    summary = reports[name]["summary"]
    with_memory, without = summary["withMemory"], summary["withoutMemory"]
    assert with_memory["successes"] > without["successes"], summary
    assert with_memory["cumulative"][-1] == with_memory["successes"]


@pytest.mark.parametrize("name", FAMILIES)
def test_each_task_is_its_own_episode_with_its_own_feedback(reports: dict[str, dict[str, Any]], name: str) -> None:
    trials = _trials(reports, name)
    assert all(t["newEpisode"] for t in trials) and reports[name]["withMemory"]["warnings"] == []
    assert len({t["episodeId"] for t in trials}) == len({t["feedbackId"] for t in trials}) == len(trials)
    assert all(t["traceIds"] and t["evidenceId"].endswith(f":{name}:{t['task']}") for t in trials)
    assert reports[name]["withMemory"]["learnt"]["llmCalls"] == 0
