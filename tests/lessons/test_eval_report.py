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
