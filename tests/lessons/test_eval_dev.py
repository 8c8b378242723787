"""The held-out report split through the real service, feedback styles in turn (`mixed`): the targets the
product is held to, and the simple baselines it must beat on the same work (`scripts/eval_lessons.py` prints the
whole table; this is its CI gate)."""

from __future__ import annotations

import pytest
from lessons.corpus import load_corpus
from lessons.evaluate import Measures, RunResult, run_baseline, run_service

pytestmark = pytest.mark.slow


def _totals(result: RunResult) -> Measures:
    totals = Measures()
    for record in result.records:
        totals.add(record)
    return totals


@pytest.fixture(scope="module")
def report_families():  # type: ignore[no-untyped-def]
    families = load_corpus(split="report")
    assert len(families) >= 8
    return families


def test_report_split_meets_its_targets_and_beats_the_baselines(report_families) -> None:  # type: ignore[no-untyped-def]
    service = _totals(run_service(report_families, "mixed"))
    paste = _totals(run_baseline(report_families, "mixed", "paste"))
    bm25 = _totals(run_baseline(report_families, "mixed", "bm25"))

    assert service.needed >= 30  # lessons an earlier task of the family taught
    assert service.recall >= 0.95, service.as_json()
    assert service.leaked == 0, service.as_json()
    assert service.invented == 0, service.as_json()
    assert service.unrelated_rate <= 0.05, service.as_json()
    # Pasting the raw feedback recalls everything but carries the judged attempts' values with it; BM25 over
    # the raw feedback misses lessons and brings other projects' feedback.
    assert paste.leaked > 10 * max(service.leaked, 1)
    assert bm25.recall < service.recall
    assert bm25.unrelated_rate > service.unrelated_rate


@pytest.mark.parametrize("style", ["verifier_payload", "user_zh", "long_mixed"])
def test_report_split_holds_its_targets_in_one_feedback_style(report_families, style: str) -> None:  # type: ignore[no-untyped-def]
    service = _totals(run_service(report_families, style))
    assert service.recall >= 0.95, service.as_json()
    assert service.leaked == 0 and service.invented == 0, service.as_json()
    assert service.unrelated_rate <= 0.05, service.as_json()


def test_lessons_keep_coming_back_once_successes_crystallise_skills() -> None:
    """A learning agent passes the tasks whose lessons came back; those successes crystallise skills and
    success procedures. Later tasks must still get their lessons (a skill summary that does not show them must
    not stand for them), and a skill or a past step about another company's files must stay out. Dev families:
    the defect was found on an agent run of a report family, reproduced and fixed here."""
    families = load_corpus(split="dev", names=["parcel_weights", "fernhill_invoices", "wrenfield_logs"])
    result = run_service(families, "mixed", learner=True)
    totals = _totals(result)
    assert totals.needed >= 10
    assert totals.recall >= 0.8, totals.as_json()  # measured 0.5 before the fix (lessons hidden by skills)
    assert totals.unrelated_rate == 0, totals.as_json()
    by_task = {r.task: r for r in result.records}
    # pw-3 passes with its lesson and crystallises a skill; pw-4 needs that lesson and another one taught earlier
    assert set(by_task["pw-4"].recalled) == set(by_task["pw-4"].needed), by_task["pw-4"].injected
    for record in result.records:  # no skill of another family is injected
        if record.family != "parcel_weights":
            assert "larkspur" not in record.injected.casefold(), record.injected


def test_a_coding_agents_lessons_keep_their_subject_and_stay_with_it() -> None:
    """The scripted agent works as a coding agent does: it writes a script that opens the input files and writes
    the answer file, then runs it. The input files named inside the written script are not what it wrote (read
    that way, lessons lost the files they were learnt on and kept only the answer file every task writes, so one
    company's lessons reached every other company's tasks), and an output file two tasks share does not make
    them about one subject. Dev families, first reproduced from an agent run of report families."""
    families = load_corpus(
        split="dev", names=["kingsmere_render", "larchmont_backups", "clinic_visits", "parcel_weights"]
    )
    result = run_service(families, "mixed", learner=True, shape="script")
    totals = _totals(result)
    assert totals.needed >= 12
    assert totals.recall >= 0.8, totals.as_json()  # 0.67 when a script's input files counted as written
    assert totals.unrelated_rate == 0, totals.as_json()  # 0.1 when a shared answer file tied two subjects
    companies = {"kingsmere_render": "kingsmere", "larchmont_backups": "larchmont", "clinic_visits": "harbourside"}
    for record in result.records:  # nothing of an earlier family reaches a later family's tasks
        for family, name in companies.items():
            if record.family != family:
                assert name not in record.injected.casefold(), (record.task, record.injected)
