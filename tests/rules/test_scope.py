"""Which requests a lesson's kind of rule can bear on (`rules.scope`): invented sentences, no corpus family's."""

from __future__ import annotations

import pytest

from memos_bridge.rules.scope import bears_on, dimensions, involves_time

CLOCK = "The kiosk clock writes UTC; the shop keeps UTC+2, so add two hours before picking a day."
CALENDAR = "Our trading day closes at 03:00, so sales rung up before three belong to the day before."
UNIT = "The mass column of the parcel export holds grams, not kilograms: divide by 1000."
SENTINEL = "A reading of -999 is the sensor's placeholder for no reading; leave it out of any temperature average."
EXCLUDE = "Rows whose status is TEST are internal test orders and never count."
FORMAT = "Report every duration as H:MM, never as decimal minutes."


@pytest.mark.parametrize(
    "request_text",
    [
        "How many tickets were sold on 2031-05-04?",
        "What share of the orders came in before 10:00 shop time?",
        "Which weekday had the most visits?",
        "How many orders arrived in the morning?",
        "上午一共卖出了多少单？",
        "How many kiosk orders fall within the spring campaign listed in offers.csv?",  # a span of time
        "What did the night shift scan?",
    ],
)
def test_a_clock_rule_bears_on_a_request_that_involves_time(request_text: str) -> None:
    assert involves_time(request_text)
    assert bears_on(CLOCK, request_text)
    assert bears_on(CALENDAR, request_text)


@pytest.mark.parametrize(
    "request_text",
    [
        "Which kiosk handled the most orders in the export?",
        "Which kiosk saw the most orders? Count every row of the export, whatever its time.",
        "What is the mean basket size per order?",
    ],
)
def test_a_clock_rule_stays_out_of_a_request_that_involves_no_time(request_text: str) -> None:
    assert not bears_on(CLOCK, request_text)
    assert not bears_on(CALENDAR, request_text)


def test_a_bare_may_is_the_verb_and_a_dated_may_is_a_date() -> None:
    assert not involves_time("Which kiosk may hold the most orders?")
    assert involves_time("How many orders came in on 8 May 2031?")


def test_a_unit_rule_bears_on_a_request_about_a_quantity_of_its_dimension() -> None:
    assert bears_on(UNIT, "What is the total parcel weight in kg?")
    assert bears_on(UNIT, "Which parcel was the heaviest?")
    assert bears_on(UNIT, "Give the mean of the mass column.")  # names the field
    assert not bears_on(UNIT, "Which depot shipped the most parcels?")
    assert not bears_on(UNIT, "What is the average delivery fee in euros?")


def test_a_missing_value_rule_bears_on_requests_about_its_quantity() -> None:
    assert bears_on(SENTINEL, "What was the coldest temperature logged on the roof?")
    assert not bears_on(SENTINEL, "Which sensor sent the most messages?")


def test_rows_left_out_and_formats_bear_on_any_task_of_their_work() -> None:
    for request_text in ("Which depot shipped the most parcels?", "How many orders are there?"):
        assert bears_on(EXCLUDE, request_text)
        assert bears_on(FORMAT, request_text)


def test_a_rule_of_no_structural_kind_bears_on_anything() -> None:
    assert bears_on("The vendor API returns its results newest first.", "Which vendor replied last?")


def test_dimensions_read_units_and_quantity_words() -> None:
    assert dimensions("total in tonnes") == {"mass"}
    assert dimensions("the heaviest load") == {"mass"}
    assert dimensions("fees collected, in €") == {"money"}
    assert dimensions("how long was the longest call") == {"time"}
    assert "time" not in dimensions("the latitude is the second element of the pair")
    assert "time" in dimensions("the job took 30 seconds")
