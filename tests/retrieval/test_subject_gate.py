"""Memories about other files stay out of a new task's recall, and the compact block keeps to lessons.

The case pinned down: a task on a new subject ("from orders.csv … write answer.json") and an earlier task's
memory about another file ("from greenhouse.csv … write answer.json") share only the answer file every task
writes; that must not make them about one subject. (End to end: tests/lessons, the coding-agent run.)
"""

from __future__ import annotations

from memos_bridge.retrieval.render import ExperienceSnippet, RenderInput, SkillSnippet, render_compact
from memos_bridge.rules.text import is_tool_call_line


def test_an_output_file_shared_with_a_request_about_other_files_does_not_tie_them() -> None:
    from memos_bridge.retrieval.engine import _RequestFiles, _shared_output

    def _deciding_terms(terms: list[str], request: str, boilerplate: frozenset[str]) -> list[str]:
        from memos_bridge.retrieval.engine import _deciding_terms as deciding

        return deciding(terms, _RequestFiles.of(request, boilerplate))

    # each side names a data file the other does not: the shared answer file is every task's output
    assert _shared_output(["kingsmere_jobs.csv", "answer.json"], ["larchmont_snapshots.csv", "answer.json"]) == {
        "answer.json"
    }
    # the memory's files are all the request's (or the other way round): the shared files are the subject
    assert _shared_output(["kingsmere_jobs.csv"], ["kingsmere_jobs.csv", "answer.json"]) == set()
    terms = ["render_time", "kingsmere_jobs.csv", "answer.json"]
    # the file a request asks to be written never ties a memory to it
    asked = "Using larchmont_snapshots.csv, how many snapshots expire? Write answer.json."
    assert _deciding_terms(terms, asked, frozenset()) == ["render_time", "kingsmere_jobs.csv"]
    # nor does an output named without a cue, when each side names a data file the other does not
    named = "Using larchmont_snapshots.csv, how many snapshots expire? answer.json field: count."
    assert _deciding_terms(terms, named, frozenset()) == ["render_time", "kingsmere_jobs.csv"]
    # a request about the same file keeps it and the memory's other terms; a boilerplate file never decides
    same = "In kingsmere_jobs.csv, total the render_time. answer.json field: total."
    assert _deciding_terms(terms, same, frozenset()) == terms
    assert _deciding_terms(terms, same, frozenset({"answer.json"})) == ["render_time", "kingsmere_jobs.csv"]
    # a memory naming a second input of the same task is still about it (the data file they share decides)
    rates = ["status", "sales_mar_apr.csv", "fx_rates.csv"]
    units = "Using sales_mar_apr.csv, count the units of each product. Write answers.json with units_by_month."
    assert _deciding_terms(rates, units, frozenset()) == rates


def test_a_tool_call_line_is_recognised_by_its_shape() -> None:
    assert is_tool_call_line("write_file(path=solve.py content=import json…) → ok")
    assert is_tool_call_line("2. run_python(script=solve.py) → wrote answer.json")
    assert not is_tool_call_line("Divide the amount by 100 (pence) before summing.")
    assert not is_tool_call_line("Convert ml → litres by dividing by 1000.")


def test_compact_block_shows_a_skills_lessons_not_the_request_it_succeeded_on() -> None:
    skill = SkillSnippet(
        ref_id="sk_1",
        name="misting_totals",
        guide="# Misting totals\n\ngreenhouse_misting.csv is the misting log. For the north zone, give the total.",
        eta=0.6,
        source_policy_ids=["po_1"],
        preference=["Prefer: divide the water column by 1000 to get litres."],
        anti_pattern=["Avoid: summing raw water values as litres."],
    )
    block = render_compact(RenderInput(query="total water of the south zone", skills=[skill]))
    assert "divide the water column by 1000" in block
    assert "Avoid: summing raw water values" in block
    assert "north zone" not in block  # the summary is another task's request

    # a skill with no lesson lines is shown by its summary only when nothing else was recalled: to a search; a
    # turn gets it only when the summary states a rule, not another task's request
    bare = SkillSnippet(ref_id="sk_2", name="misting", guide=skill.guide, eta=0.6)
    assert "north zone" in render_compact(RenderInput(query="total water", skills=[bare]), reason="tool_driven")
    assert render_compact(RenderInput(query="total water", skills=[bare])) == ""
    # … or when the request is about what the skill did (two of its task's words)
    assert "north zone" in render_compact(RenderInput(query="misting log of the north zone", skills=[bare]))
    ruled = SkillSnippet(
        ref_id="sk_4",
        name="misting_water",
        guide="# Misting totals\n\nMisting totals. The water column is in millilitres. When the request names water.",
        eta=0.6,
    )
    assert "in millilitres" in render_compact(RenderInput(query="total water", skills=[ruled]))
    lesson = ExperienceSnippet(
        ref_id="po_2",
        experience_type="repair_instruction",
        title="water is in millilitres",
        trigger="",
        procedure="1. The water column is in millilitres; divide by 1000.",
        verification="",
        boundary="",
    )
    with_lesson = render_compact(RenderInput(query="total water", skills=[bare], experiences=[lesson]))
    assert "millilitres" in with_lesson and "north zone" not in with_lesson


def test_compact_block_leaves_out_a_success_records_tool_call_steps() -> None:
    record = ExperienceSnippet(
        ref_id="po_3",
        experience_type="success_pattern",
        title="What worked on the misting totals",
        trigger="",
        procedure="1. write_file(path=solve.py content=import json…) → ok\n2. Filter the rows of zone north first.",
        verification="",
        boundary="",
    )
    block = render_compact(RenderInput(query="misting totals", experiences=[record]))
    assert "Filter the rows of zone north first." in block
    assert "write_file(" not in block


def test_files_a_write_call_or_a_run_reports_as_written() -> None:
    from memos_bridge.core.learning.experiences.store import reported_written, written_files

    script = {"path": "solve.py", "content": "import csv\nrows = list(csv.DictReader(open('orders.csv')))"}
    assert written_files(script) == ["solve.py"]  # the file the script opens is read, not written
    assert written_files({"file_path": "/work/out/answer.json"}) == ["answer.json"]
    assert written_files("echo done > out.txt") == ["out.txt"]
    assert reported_written("wrote answer.json") == ["answer.json"]
    assert reported_written({"stdout": "created summary.md"}) == ["summary.md"]
    assert reported_written("read orders.csv: 20 rows") == []


def test_the_files_an_episode_worked_on_are_those_its_calls_named_and_did_not_write() -> None:
    from memos_bridge.core.learning.experiences.store import _inputs, named_files

    script = {"path": "solve.py", "content": "import csv\nrows = list(csv.DictReader(open('data/orders.csv')))"}
    assert sorted(named_files(script)) == ["orders.csv", "solve.py"]
    assert named_files({"path": "/work/in/pump_readings.csv"}) == ["pump_readings.csv"]
    named = ["solve.py", "orders.csv", "answer.json", "rates.json"]
    asks = ["Total the orders and write the sum to answer.json."]
    # what it wrote (solve.py) and what the request asked to be written (answer.json) are not what it worked on
    assert _inputs(named, ["solve.py"], asks) == ("orders.csv", "rates.json")


def test_compact_block_shows_no_question_as_a_lesson_line() -> None:
    lesson = ExperienceSnippet(
        ref_id="po_4",
        experience_type="failure_avoidance",
        title="parcel mass is in grams",
        trigger="",
        procedure="",
        verification="",
        boundary="",
        lesson=["Under a gram per parcel?", "The mass column holds grams; divide by 1000 for kilograms."],
        roles=["note", "convention"],
    )
    block = render_compact(RenderInput(query="total parcel mass in kg", experiences=[lesson]))
    assert "divide by 1000" in block
    assert "Under a gram" not in block


def test_a_skill_is_not_about_the_answer_file_it_writes() -> None:
    from memos_bridge.retrieval.engine import skill_subject_terms
    from memos_bridge.rules.subjects import requested_outputs

    guide = (
        "# Crate totals\n\nIn crate_log.csv, which depot sent the most crates? Write answer.json…. "
        "Tasks involving crate_log.csv (domain: csv)."
    )
    skill = SkillSnippet(ref_id="sk_3", name="crate_totals", guide=guide, eta=0.6)
    assert skill_subject_terms(skill) == ["crate_log.csv"]
    # an output cue does not reach across a sentence end
    assert requested_outputs("Write answer.json. Tasks involving crate_log.csv") == {"answer.json"}
