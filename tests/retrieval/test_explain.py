"""The explain log: one JSON line per turn, each candidate lesson with its gate's verdict."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from memos_bridge.retrieval import explain
from memos_bridge.retrieval.render import ExperienceSnippet


def test_a_line_holds_each_candidates_verdict_whether_it_was_picked_and_the_block(tmp_path: Path) -> None:
    lesson = ExperienceSnippet(
        ref_id="po_1",
        experience_type="repair_instruction",
        title="weights are in lb",
        trigger="",
        procedure="1. The weight column is in lb.",
        verification="",
        boundary="",
        lesson=["The weight column is in lb.", "Multiply by 0.4536."],
    )
    assert explain.text_of(lesson) == "The weight column is in lb. | Multiply by 0.4536."

    class Picked:
        ref_id = "po_1"

    path = tmp_path / "explain.jsonl"
    other = replace(lesson, ref_id="po_2", lesson=["Times are UTC."])
    verdicts = {"po_1": ("kept", lesson), "po_2": ("work", other)}
    explain.append(str(path), "total weight in kg", "turn_start", verdicts, [Picked()], "<block>")
    explain.append(str(path), "second turn", "turn_start", {}, [], "")
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["request"] == "total weight in kg" and first["block"] == "<block>"
    assert {c["id"]: (c["verdict"], c["picked"], c["text"]) for c in first["candidates"]} == {
        "po_1": ("kept", True, "The weight column is in lb. | Multiply by 0.4536."),
        "po_2": ("work", False, "Times are UTC."),
    }
    assert second["candidates"] == []
    explain.append(str(tmp_path / "missing" / "x.jsonl"), "r", "turn_start", {}, [], "")  # unwritable: skipped
