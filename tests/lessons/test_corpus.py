"""The lesson corpus is usable: every family validates (its reference solver reproduces the expected and the
naive answers, every feedback style carries the key terms of what the task needs, no key term is given away by
the prompts), and the splits are disjoint and large enough to be a held-out measurement."""

from __future__ import annotations

import pytest
from lessons.corpus import SPLITS, STYLES, answers_match, load_corpus, validate

FAMILIES = load_corpus()


def test_every_split_has_families_of_its_own() -> None:
    by_split = {split: [f.name for f in FAMILIES if f.split == split] for split in SPLITS}
    assert len(by_split["dev"]) >= 8
    assert len(by_split["report"]) >= 8
    assert len(by_split["fresh"]) >= 4
    names = [f.name for f in FAMILIES]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_family_validates(family) -> None:  # type: ignore[no-untyped-def]
    assert validate(family) == []


def test_every_style_is_present_in_every_task() -> None:
    for family in FAMILIES:
        for task in family.tasks:
            for style in STYLES:
                assert task.feedback_text(style).strip(), f"{family.name}/{task.id} {style}"


def test_answers_match_compares_numbers_within_tolerance_and_structures_exactly() -> None:
    assert answers_match(1000.0, 1000.4, 0.5)
    assert not answers_match(1000.0, 1.0, 0.5)
    assert answers_match({"a": [1, 2.0]}, {"a": [1.0, 2]}, 0.001)
    assert not answers_match({"a": 1}, {"a": 1, "b": 2}, 0.001)
    assert not answers_match("Q3", "Q4", 0.0)
