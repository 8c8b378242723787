"""Kinds of rule, one convention per kind and field, sentinels kept, wrappers taken off: the rules that decide what
one lesson is. Every wording here is this file's own."""

from __future__ import annotations

import pytest

from memos_bridge.rules.instance import InstanceContext, strip_instance
from memos_bridge.rules.kinds import kinds_differ, kinds_meet, rule_kinds
from memos_bridge.rules.lessons import convention_overlap, group_lessons, read_feedback, unwrap
from memos_bridge.rules.subjects import numbers, subject_of

ATTEMPT = InstanceContext.build(expected={"mean_wait_min": 41.25}, actual={"mean_wait_min": 88.8})


def lessons(text: str, context: InstanceContext = ATTEMPT) -> list[list[str]]:
    return [group.texts for group in group_lessons(read_feedback(text, context).lessons)]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("The gate log is written in UTC.", "clock"),
        ("Add 3 hours to get the depot's local time.", "clock"),
        ("这些时间按世界时记录，本地要再加 8 个小时。", "clock"),
        ("The pressure column is in tenths of a bar.", "scale"),
        ("Convert to cubic metres before summing.", "scale"),
        ("durations are milliseconds, not seconds", "scale"),
        ("Skip the rows flagged as training runs.", "exclude"),
        ("不要把作废的单据算进去。", "exclude"),
        ("A reading of 4095 means the probe was disconnected; it is a placeholder.", "missing"),
        ("Dates are day-first: 03/04 is the 3rd of April.", "calendar"),
        ("The shift day starts at 06:00, so earlier scans belong to the day before.", "calendar"),
        ("Amounts use a decimal comma.", "format"),
        ("Pass --tenant acme before the subcommand.", "option"),
        ("A re-run supersedes the first result of the same sample.", "duplicate"),
    ],
)
def test_the_kind_of_rule_a_sentence_states(text: str, kind: str) -> None:
    assert kind in rule_kinds(text), rule_kinds(text)


def test_kinds_meet_when_shared_or_when_a_sentinel_is_the_reason_rows_are_left_out() -> None:
    assert kinds_meet(frozenset({"clock"}), frozenset({"clock", "calendar"}))
    assert kinds_meet(frozenset({"missing"}), frozenset({"exclude"}))
    assert kinds_differ(frozenset({"scale"}), frozenset({"exclude"}))
    assert not kinds_differ(frozenset(), frozenset({"exclude"}))  # a sentence of no kind differs from nothing


def test_a_clock_rule_and_its_remedy_are_one_lesson() -> None:
    text = (
        "mean_wait_min: expected 41.25, got 88.8. The depot clock runs on UTC; convert to local time by adding "
        "3 hours (UTC+3) before bucketing."
    )
    assert lessons(text) == [
        ["The depot clock runs on UTC; convert to local time by adding 3 hours (UTC+3) before bucketing."]
    ]


def test_a_unit_and_its_conversion_are_one_lesson() -> None:
    text = "The flow column in the pump export is recorded in litres; convert to cubic metres before summing."
    assert len(lessons(text)) == 1


def test_two_fields_of_one_kind_with_different_factors_are_two_lessons() -> None:
    assert lessons("flow: litres, /1000; pressure: tenths, /10.") == [
        ["flow: litres, /1000."],
        ["pressure: tenths, /10."],
    ]


def test_a_unit_and_rows_left_out_are_two_lessons() -> None:
    text = "Two things about the ledger: amount is in cents, and training runs were never billed, so they don't count."
    assert len(lessons(text)) == 2


@pytest.mark.parametrize(
    "sentence",
    [
        "Two rows carry wait_s = 59999, the no-scan placeholder; they must be left out of the average.",
        "pressure contains 6553.5, the probe-fault code; those rows are not readings.",
        "A reading of 4095 means the probe was offline, so drop it.",
        "压力 6553.5 表示探头故障，要去掉。",
    ],
)
def test_a_sentinel_value_is_the_lesson_not_an_answer(sentence: str) -> None:
    kept = strip_instance(sentence, ATTEMPT).text
    sentinel = next(n.text for n in numbers(sentence) if n.digits >= 4)
    assert sentinel in kept


def test_an_answer_value_is_still_taken_out() -> None:
    assert "41.25" not in strip_instance("The mean should be 41.25, not 88.8.", ATTEMPT).text
    assert "41.25" not in strip_instance("mean_wait_min = 41.25", ATTEMPT).text


@pytest.mark.parametrize(
    ("wrapped", "lesson"),
    [
        ("Close, but the two zero rows are from the cleaning cycle.", "The two zero rows are from the cleaning cycle."),
        ("One problem though: durations are in tenths of a second.", "Durations are in tenths of a second."),
        ("Almost there though: the clock is UTC.", "The clock is UTC."),
        ("Same issue as before — the stamps are UTC.", "The stamps are UTC."),
        ("Second, sizes are in KiB.", "Sizes are in KiB."),
        ("两个问题：编号不区分大小写。", "编号不区分大小写。"),
        ("Again: sizes are in KiB.", "Sizes are in KiB."),
        ("As I said before, the stamps are UTC.", "The stamps are UTC."),
        ("再说一遍：编号不区分大小写。", "编号不区分大小写。"),
        ("Again the stamps are UTC.", "Again the stamps are UTC."),  # no pause after it: part of the sentence
        ("No rows with a hold flag are pruned.", "No rows with a hold flag are pruned."),  # a rule, not a wrapper
    ],
)
def test_a_lesson_is_kept_without_the_words_put_before_it(wrapped: str, lesson: str) -> None:
    assert unwrap(wrapped) == lesson


def test_one_kind_of_rule_on_the_same_work_is_one_convention_however_worded() -> None:
    full = "The depot clock runs on UTC; add 3 hours for local time."
    terse = "times are UTC (+3h local)"
    zh = "时间是世界时，要加 3 小时。"
    subjects = [subject_of(t, numbers(t)) for t in (full, terse, zh)]
    kinds = [rule_kinds(t) for t in (full, terse, zh)]
    for i in range(3):
        for j in range(i + 1, 3):
            assert convention_overlap(subjects[i], subjects[j], 0.0, True, (kinds[i], kinds[j]))
    # on other work, look-alike wording is another project's rule
    assert not convention_overlap(subjects[0], subjects[1], 0.0, False, (kinds[0], kinds[1]))
    # another kind on the same work is another convention
    rows = "Skip the rows flagged as training runs."
    assert not convention_overlap(subjects[0], subject_of(rows), 0.0, True, (kinds[0], rule_kinds(rows)))


def test_files_of_one_kind_share_a_word_of_their_kind_not_their_dates() -> None:
    from memos_bridge.rules.subjects import file_kinds, same_kind_files

    assert file_kinds(["acme_13f_2024q1.xml"]) == {"acme", "13f"}
    assert same_kind_files(["acme_13f_2024q1.xml"], ["beacon_13f_2024q2.xml"])
    assert not same_kind_files(["harlow_orders_2023.csv"], ["quay_tickets_2024.csv"])
    assert not same_kind_files(["report_2023.csv"], ["ledger_2023.csv"])  # a year is no kind
