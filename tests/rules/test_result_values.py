"""What an attempt produced stays out of the steps kept for other tasks: bare numbers, restated arguments."""

from __future__ import annotations

from memos_bridge.core.capture import tool_signature
from memos_bridge.core.learning.l2_induce import _render_args
from memos_bridge.rules.text import args_text, bare_numbers, restates


def test_bare_numbers_are_values_not_pieces_of_names() -> None:
    text = 'wrote {"top_month": "2024-01", "spend_usd": 293.76, "n": 1,234} from gateway.log.1, 10kg, x0.4536'
    assert bare_numbers(text) == {"2024", "293.76", "1234"}
    assert bare_numbers("eu-west-1 utf-8 ws-4471 v2") == set()


def test_an_argument_that_restates_the_answer_is_replaced_by_its_name() -> None:
    results = frozenset(bare_numbers('Done: wrote answer.json with {"avg_litres": 5.74}') - bare_numbers("how many"))
    call = {"name": "write_file", "input": {"path": "answer.json", "content": '{"avg_litres": 5.74}'}, "output": "ok"}
    assert restates(call["input"]["content"], results)
    assert args_text(call["input"], results) == "path=answer.json content=<content>"
    assert "5.74" not in tool_signature(call, 300, results)
    assert "5.74" in tool_signature(call, 300)  # capture and recall of the step itself keep it
    # a number the request gave (a threshold) is a parameter of the step, not its result
    given = frozenset(bare_numbers("Done: 11 parcels over 10 kg") - bare_numbers("parcels over 10 kg"))
    assert args_text({"cmd": "filter --over 10"}, given) == "cmd=filter --over 10"


def test_a_learnt_procedure_shows_no_answer_and_no_example_of_it() -> None:
    inputs = [{"path": "answer.json", "content": '{"total_kg": 23.81}'}]
    args, examples = _render_args(inputs, frozenset({"23.81"}))
    assert args == "path=answer.json, content=<content>" and examples == []
    varied = [{"content": '{"total_kg": 23.81}'}, {"content": '{"total_kg": 9.5}'}]
    args, examples = _render_args(varied, frozenset({"23.81"}))
    assert args == "content=<content>" and all("23.81" not in e for e in examples)
    assert _render_args(inputs) == ('path=answer.json, content={"total_kg": 23.81}', [])
