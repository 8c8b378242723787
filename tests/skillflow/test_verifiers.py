"""The shipped families' verifiers and the shared grading helpers.

Each check must pass the correct answer, fail every typical mistake and name it (the lesson travels in the
feedback text), and still say something concrete about mistakes it has no name for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from skillflow.family import FAMILIES_DIR, Family, FamilyError, Task, load_family, load_hook, shipped_families
from skillflow.verify import CheckResult, diagnose, generic_note, grade, pitfall_subsets, values_equal

FAMILIES = ["sec13f", "sales_csv"]


def _workspace(family: Family, task: Task, tmp_path: Path) -> Path:
    return family.prepare_workspace(task, tmp_path / f"{family.name}-{task.id}")


def _reference(family: Family, task: Task, workspace: Path, mistakes: frozenset[str]) -> dict[str, object]:
    reference = load_hook(family.folder, "check:reference", family.name)
    answer: dict[str, object] = reference(task, workspace, mistakes)
    return answer


def _write(workspace: Path, answer: object) -> None:
    (workspace / "answers.json").write_text(json.dumps(answer), encoding="utf-8")


def test_both_families_ship_with_four_to_six_tasks_and_three_pitfalls() -> None:
    assert shipped_families() == sorted(FAMILIES)
    for name in FAMILIES:
        family = load_family(name)
        assert 4 <= len(family.tasks) <= 6
        assert len(family.pitfalls) == 3
        for task in family.tasks:
            assert all((family.folder / "workspace" / f).is_file() for f in task.files)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_correct_answer_passes_every_check(name: str, tmp_path: Path) -> None:
    family = load_family(name)
    for task in family.tasks:
        workspace = _workspace(family, task, tmp_path)
        _write(workspace, _reference(family, task, workspace, frozenset()))
        result: CheckResult = family.check()(task, workspace)
        assert result.passed and result.score == 1.0 and result.failing == (), (task.id, result.message)
        assert result.message.startswith("All ") and result.expected == {} and result.actual == {}


@pytest.mark.parametrize("name", FAMILIES)
def test_each_typical_mistake_fails_and_is_named_with_its_lesson(name: str, tmp_path: Path) -> None:
    family = load_family(name)
    named_somewhere: set[str] = set()
    for task in family.tasks:
        workspace = _workspace(family, task, tmp_path)
        correct = _reference(family, task, workspace, frozenset())
        for pitfall in family.pitfalls.values():
            wrong = _reference(family, task, workspace, frozenset({pitfall.id}))
            if wrong == correct:
                continue  # this task's data does not expose the mistake
            _write(workspace, wrong)
            result = family.check()(task, workspace)
            assert not result.passed and 0 <= result.score < 1
            assert result.diagnosed == (pitfall.id,), (task.id, pitfall.id, result.message)
            assert pitfall.feedback in result.message
            assert set(result.expected) <= set(result.failing) and result.expected
            payload = result.verifier_payload()
            assert {"task", "passed", "total", "score", "expected", "actual", "failing", "file"} <= set(payload)
            named_somewhere.add(pitfall.id)
    assert named_somewhere == set(family.pitfalls)


def test_a_missing_or_broken_answer_fails_with_a_reason(tmp_path: Path) -> None:
    family = load_family("sec13f")
    task = family.tasks[0]
    workspace = _workspace(family, task, tmp_path)
    missing = family.check()(task, workspace)
    assert not missing.passed and missing.passed_checks == 1  # only "no extra fields" holds
    assert "answers.json was not written." in missing.message
    (workspace / "answers.json").write_text("{not json", encoding="utf-8")
    broken = family.check()(task, workspace)
    assert not broken.passed and "is not valid JSON" in broken.message


def test_extra_fields_fail_their_own_check(tmp_path: Path) -> None:
    family = load_family("sec13f")
    task = family.tasks[0]
    workspace = _workspace(family, task, tmp_path)
    _write(workspace, {**_reference(family, task, workspace, frozenset()), "notes": "hi"})
    result = family.check()(task, workspace)
    assert result.failing == ("(extra fields)",) and result.actual == {"notes": "hi"}
    assert "Remove the fields the task did not ask for: notes." in result.message


def _task(**params: object) -> Task:
    return Task("t", "T", "prompt", (), "answers.json", params)


def test_grade_without_variants_still_says_what_is_wrong() -> None:
    expected = {"rows": [{"cusip": "A", "value": 1}, {"cusip": "B", "value": 2}], "total": 3, "name": "x"}
    actual = {"rows": [{"cusip": "B", "value": 2}, {"cusip": "A", "value": 1}], "total": 300, "name": "y"}
    result = grade(_task(), expected, actual, pitfalls={})
    assert result.failing == ("rows", "total", "name") and result.passed_checks == 1 and result.total == 4
    assert "`rows` has the right rows in the wrong order." in result.message
    assert "`total` is off by a factor of 100 (expected 3)" in result.message
    assert '`name` should be "x", got "y".' in result.message
    renamed = grade(_task(), {"rows": [{"issuer": "A"}]}, {"rows": [{"nameOfIssuer": "A"}]}, pitfalls={})
    assert "`rows` rows have the fields nameOfIssuer; the task asks for issuer." in renamed.message


def test_values_equal_tolerates_float_noise_but_not_cents() -> None:
    assert values_equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert values_equal(10.1 + 0.2, 10.3)
    assert not values_equal(10.30, 10.31)
    assert not values_equal(True, 1)
    assert not values_equal({"a": 1}, {"a": 1, "b": 2})


def test_diagnosis_prefers_the_simplest_explanation() -> None:
    assert pitfall_subsets(["a", "b"]) == [frozenset("a"), frozenset("b"), frozenset("ab")]
    variants = {frozenset("a"): {"x": 2}, frozenset("b"): {"x": 3}, frozenset("ab"): {"x": 2}}
    assert diagnose("x", 2, variants) == frozenset("a")
    assert diagnose("x", 9, variants) == frozenset()
    assert generic_note("x", 1, 2) == "`x` should be 1, got 2."


@pytest.mark.parametrize("name", FAMILIES)
def test_the_shipped_inputs_are_what_the_generator_writes(name: str) -> None:
    script = FAMILIES_DIR / name / "generate.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_13f_cusips_carry_valid_check_digits() -> None:
    from skillflow.families.sec13f.generate import HOLDINGS, cusip_check_digit

    assert cusip_check_digit("03783310") == "0"  # Apple Inc. 037833100
    assert cusip_check_digit("59491810") == "4"  # Microsoft 594918104
    assert all(len(base) == 8 for _, base, *_ in HOLDINGS)


def test_a_broken_family_is_refused_with_the_field_named(tmp_path: Path) -> None:
    folder = tmp_path / "fam"
    (folder / "workspace").mkdir(parents=True)
    base = {
        "name": "fam",
        "title": "Fam",
        "pitfalls": {"p": {"title": "P", "feedback": "Do not.", "recognise": ["("]}},
        "tasks": [{"id": "t", "title": "T", "prompt": "Do it.", "files": []}],
    }
    (folder / "family.json").write_text(json.dumps(base), encoding="utf-8")
    with pytest.raises(FamilyError, match="pattern"):
        load_family(folder)
    base["pitfalls"] = {}
    base["tasks"] = [{"id": "t", "title": "T", "prompt": "Do it.", "files": ["missing.csv"]}]
    (folder / "family.json").write_text(json.dumps(base), encoding="utf-8")
    with pytest.raises(FamilyError, match=r"missing\.csv"):
        load_family(folder)
    with pytest.raises(FamilyError, match=r"no family\.json"):
        load_family(tmp_path / "nowhere")


def test_a_task_may_bring_its_own_check(tmp_path: Path) -> None:
    folder = tmp_path / "fam"
    (folder / "workspace").mkdir(parents=True)
    (folder / "check.py").write_text("def check(task, workspace):\n    return 'family'\n", encoding="utf-8")
    (folder / "special.py").write_text("def grade(task, workspace):\n    return 'own'\n", encoding="utf-8")
    tasks = [
        {"id": "a", "title": "A", "prompt": "Do a.", "files": []},
        {"id": "b", "title": "B", "prompt": "Do b.", "files": [], "check": "special:grade"},
    ]
    (folder / "family.json").write_text(json.dumps({"name": "fam", "title": "Fam", "tasks": tasks}), encoding="utf-8")
    family = load_family(folder)
    assert [family.check(t)(t, tmp_path) for t in family.tasks] == ["family", "own"]
    bad = {"name": "fam", "title": "Fam", "check": "special:missing", "tasks": tasks[:1]}
    (folder / "family.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(FamilyError, match="no function 'missing'"):
        load_family(folder).check()
