"""The dev families through the real service, as CI's gate on the learning loop: the targets the product is held
to on the split it may be tuned on, and the simple baselines it must beat on the same work. The held-out splits
(report, fresh) are not run here: nobody reads their failures, and a suite that asserts on them invites fixing
them one by one (`test_eval_heldout.py` runs them on request; `scripts/eval_lessons.py` prints every table)."""

from __future__ import annotations

from typing import Any

import pytest
from lessons.corpus import load_corpus
from lessons.evaluate import Measures, RunResult, count_experiences, run_baseline, run_service

pytestmark = pytest.mark.slow

#: The dev families written in the held-out families' shape (agent-sized, retries, praised passes, prompts that
#: name no company or file): the work where the product meets what it will be judged on.
HELD_OUT_SHAPE = [
    "kiritomi_gates",
    "dunmarrow_weighbridge",
    "marlowick_appointments",
    "copperwhistle_fermentation",
    "velmorrow_marathon",
    "orrinshaw_fleet",
    "brackwater_galleries",
    "larkspire_minibar",
]


#: Dev families of one system spread over several files, whose requests name neither the system nor a file of
#: an earlier task and are worded unlike each other: a lesson taught on one file is needed on another. They show
#: where the held-out splits lose most (the work gate: `eval_lessons.py --explain`). In one shared namespace
#: nothing tells their lessons from another project's (about 22 % recall), so the split's gate below leaves them
#: out; `test_families_of_one_system_over_many_files_get_nothing_of_other_work` holds what does hold there, and
#: `test_a_project_workspace_brings_a_systems_lessons_to_its_other_files` what holds when the host names its project.
OPEN_SHAPE = ["hadley_signal_depot", "fenwold_seed_library", "ashcombe_glassworks"]


def _totals(result: RunResult) -> Measures:
    totals = Measures()
    for record in result.records:
        totals.add(record)
    return totals


@pytest.fixture(scope="module")
def dev_families() -> Any:
    families = [f for f in load_corpus(split="dev") if f.name not in OPEN_SHAPE]
    assert len(families) >= 24
    return families


def test_dev_split_meets_its_targets_and_beats_the_baselines(dev_families: Any) -> None:
    result = run_service(dev_families, "mixed")
    service = _totals(result)
    paste = _totals(run_baseline(dev_families, "mixed", "paste"))
    bm25 = _totals(run_baseline(dev_families, "mixed", "bm25"))
    assert service.needed >= 120  # lessons an earlier task of the family taught
    assert service.recall >= 0.94, service.as_json()
    assert service.leaked == 0, service.as_json()
    assert service.invented == 0, service.as_json()
    assert service.unrelated_rate <= 0.05, service.as_json()
    assert service.mean_chars <= 400 and service.max_chars <= 1000, service.as_json()  # the default block is small
    per_convention = count_experiences(dev_families, result.experiences)
    assert per_convention.experiences <= 1.4 * per_convention.conventions, per_convention.as_json()
    # Pasting the raw feedback recalls everything but carries the judged attempts' values with it; BM25 over
    # the raw feedback misses lessons and brings other projects' feedback.
    assert paste.leaked > 10 * max(service.leaked, 1)
    assert bm25.recall < service.recall
    assert bm25.unrelated_rate > service.unrelated_rate


def test_families_of_one_system_over_many_files_get_nothing_of_other_work() -> None:
    families = load_corpus(split="dev", names=[*OPEN_SHAPE, "orrinshaw_fleet", "clinic_visits"])
    totals = _totals(run_service(families, "mixed"))
    assert totals.needed >= 20
    assert totals.leaked == 0 and totals.invented == 0, totals.as_json()
    assert totals.unrelated_rate <= 0.05, totals.as_json()


def test_a_project_workspace_brings_a_systems_lessons_to_its_other_files() -> None:
    """Each family in a workspace of its own, as the MCP server and the hooks keep one per project folder: a
    lesson taught on one of the system's files reaches tasks on its others (measured 13 of 16 in the mixed
    style; 3 of 16 before the work gate read a workspace as one project)."""
    families = load_corpus(split="dev", names=OPEN_SHAPE)
    totals = _totals(run_service(families, "mixed", namespaces="family"))
    assert totals.needed >= 12
    assert totals.recall >= 0.75, totals.as_json()
    assert totals.leaked == 0 and totals.invented == 0, totals.as_json()
    assert totals.unrelated_rate == 0, totals.as_json()


def test_dev_split_holds_in_chinese_feedback(dev_families: Any) -> None:
    service = _totals(run_service(dev_families, "user_zh"))
    assert service.recall >= 0.88, service.as_json()
    assert service.leaked <= 2 and service.invented == 0, service.as_json()
    assert service.unrelated_rate <= 0.08, service.as_json()


def test_one_host_session_running_a_coding_agents_tasks_one_after_another() -> None:
    """One session per family, tasks minutes apart, a coding agent that types values of its input into its
    script: a verdict ends each task, a correction's attempt stays with its task, lessons reach the next ones."""
    families = load_corpus(split="dev", names=HELD_OUT_SHAPE)
    totals = _totals(run_service(families, "mixed", sessions="family", shape="script"))
    assert totals.recall >= 0.9, totals.as_json()
    assert totals.leaked == 0, totals.as_json()  # another task's answers or typed-in values
    assert totals.unrelated_rate <= 0.05, totals.as_json()


def test_lessons_keep_coming_back_once_successes_crystallise_skills() -> None:
    """A learning agent passes the tasks whose lessons came back; those successes crystallise skills and
    success procedures. Later tasks must still get their lessons (a skill summary that does not show them must
    not stand for them), and a skill or a past step about another company's files must stay out."""
    families = load_corpus(split="dev", names=["parcel_weights", "fernhill_invoices", "wrenfield_logs"])
    result = run_service(families, "mixed", learner=True)
    totals = _totals(result)
    assert totals.needed >= 10
    assert totals.recall >= 0.8, totals.as_json()  # measured 0.5 before skills stopped hiding lessons
    assert totals.unrelated_rate == 0, totals.as_json()
    by_task = {r.task: r for r in result.records}
    # pw-3 passes with its lesson and crystallises a skill; pw-4 needs that lesson and another one taught earlier
    assert set(by_task["pw-4"].recalled) == set(by_task["pw-4"].needed), by_task["pw-4"].injected
    for record in result.records:  # no skill of another family is injected
        if record.family != "parcel_weights":
            assert "larkspur" not in record.injected.casefold(), record.injected


def test_a_coding_agents_lessons_keep_their_subject_and_stay_with_it() -> None:
    """The scripted agent works as a coding agent does: it writes a script that opens the input files and writes
    the answer file, then runs it. The input files named inside the written script are not what it wrote, and an
    output file two tasks share does not make them about one subject."""
    families = load_corpus(
        split="dev", names=["kingsmere_render", "larchmont_backups", "clinic_visits", "parcel_weights"]
    )
    result = run_service(families, "mixed", learner=True, shape="script")
    totals = _totals(result)
    assert totals.needed >= 12
    assert totals.recall >= 0.8, totals.as_json()
    assert totals.unrelated_rate == 0, totals.as_json()
    companies = {"kingsmere_render": "kingsmere", "larchmont_backups": "larchmont", "clinic_visits": "harbourside"}
    for record in result.records:  # nothing of an earlier family reaches a later family's tasks
        for family, name in companies.items():
            if record.family != family:
                assert name not in record.injected.casefold(), (record.task, record.injected)
