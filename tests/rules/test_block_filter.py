"""The one instance filter of an injected block: no line carries another task's attempt."""

from __future__ import annotations

from memos_bridge.rules.block_filter import BlockValues


def test_a_line_with_another_tasks_answer_is_dropped_and_the_requests_own_values_are_not() -> None:
    values = BlockValues.build(
        ['Done: wrote answer.json with {"total_m3": 4210.55, "busiest": "Harbour Hall"}.', "expected 812.5, got 81250"],
        request="What is the total for 2024 of meter 4210.55?",
    )
    assert not values.passes("Prefer: it should be 812.5")
    assert not values.passes("The busiest was harbour hall last time.")
    assert values.passes("Meter 4210.55 is the one to read.")  # the request names it
    assert values.passes("Divide the flow column by 1000 to get cubic metres.")
    assert not values.passes("expected 17, got 170")  # the shape of a verdict, whatever the values


def test_a_lessons_own_rule_value_is_allowed_even_when_an_attempt_typed_it_but_never_an_answer() -> None:
    values = BlockValues.build(
        ['Done: wrote answer.json with {"peak": 65.25}.'],
        attempts=["python(code=rows = [r for r in rows if r != 4095]) → ok"],
        rules=["A reading of 4095 means the probe was offline, so drop it.", "The peak is 65.25."],
    )
    assert values.passes("A reading of 4095 means the probe was offline, so drop it.")
    assert not values.passes("The peak is 65.25.")  # an answer stays another task's, even inside a lesson line


def test_the_values_of_the_task_a_request_repeats_are_its_own() -> None:
    values = BlockValues.build(["it should be 1320.5"], own=["it should be 1320.5"])
    assert values.passes("Avoid: 1470.5 — it should be 1320.5")
