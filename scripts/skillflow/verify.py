"""The verifier's result and the comparison and diagnosis helpers every family check shares.

A family check recomputes the expected answer from the workspace inputs and hands it to `grade`, together
with *variants*: the answer as it would look with each combination of the family's pitfalls (the typical
mistakes). A failing field whose actual value equals a variant is diagnosed as that pitfall, so the feedback
can say what the mistake was and what the answer should be — the reusable lesson a SkillFlow verifier
message carries — instead of only "expected X, got Y". Fields no variant explains still get a concrete
generic note (missing or extra fields, renamed row fields, a ×1000 scale, right rows in the wrong order, or
expected vs actual).

Only failing fields travel in `expected`/`actual`, so the feedback names what to fix and stays small.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillflow.family import Pitfall, Task

#: Numbers closer than this are equal (answers are rounded to cents at most).
NUMBER_TOLERANCE = 1e-3
#: Characters of a value quoted in a feedback sentence.
SAMPLE_CHARS = 120


@dataclass(frozen=True)
class CheckResult:
    """What the verifier found: per-field checks, the failing fields' expected and actual values, a message."""

    task: str
    passed_checks: int
    total: int
    failing: tuple[str, ...]
    expected: dict[str, Any]
    actual: dict[str, Any]
    message: str
    output: str = "answers.json"
    diagnosed: tuple[str, ...] = ()  # pitfall ids recognised in the answer

    @property
    def passed(self) -> bool:
        """A pass needs full credit: SkillFlow counts a partially right answer as a failed trial."""
        return self.total > 0 and self.passed_checks == self.total

    @property
    def score(self) -> float:
        return round(self.passed_checks / self.total, 4) if self.total else 0.0

    def verifier_payload(self) -> dict[str, Any]:
        """`raw.verifier` of feedback.submit (the field names the service's verifier parser reads)."""
        return {
            "task": self.task,
            "passed": self.passed_checks,
            "total": self.total,
            "score": self.score,
            "expected": self.expected,
            "actual": self.actual,
            "failing": list(self.failing),
            "file": self.output,
        }


def values_equal(expected: Any, actual: Any) -> bool:
    """JSON equality with a numeric tolerance (1 and 1.0 are equal; booleans are not numbers)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if _is_number(expected) and _is_number(actual):
        return math.isclose(float(expected), float(actual), rel_tol=0.0, abs_tol=NUMBER_TOLERANCE)
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return expected.keys() == actual.keys() and all(values_equal(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(values_equal(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def show(value: Any, limit: int = SAMPLE_CHARS) -> str:
    """A value as compact JSON, cut to `limit` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_output(workspace: Path, name: str) -> tuple[Any, str]:
    """(parsed JSON, "") or (None, why it could not be read)."""
    path = workspace / name
    if not path.is_file():
        return None, f"{name} was not written."
    try:
        return json.loads(path.read_text(encoding="utf-8")), ""
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"{name} is not valid JSON ({exc})."


def pitfall_subsets(pitfalls: Iterable[str]) -> list[frozenset[str]]:
    """Every non-empty combination of pitfalls, smallest first (the simplest explanation wins)."""
    ids = list(pitfalls)
    return [frozenset(c) for n in range(1, len(ids) + 1) for c in itertools.combinations(ids, n)]


def variants_of(
    reference: Callable[[frozenset[str]], Mapping[str, Any]], pitfalls: Iterable[str]
) -> dict[frozenset[str], Mapping[str, Any]]:
    """The answer under each combination of pitfalls, for diagnosis (`reference(mistakes)` is the family's
    own recomputation of the answer with those mistakes made)."""
    return {subset: reference(subset) for subset in pitfall_subsets(pitfalls)}


def diagnose(name: str, actual: Any, variants: Mapping[frozenset[str], Mapping[str, Any]]) -> frozenset[str]:
    """The smallest pitfall combination whose answer has exactly this value for field `name` (empty: none)."""
    for subset, answer in sorted(variants.items(), key=lambda kv: (len(kv[0]), sorted(kv[0]))):
        if name in answer and values_equal(answer[name], actual):
            return subset
    return frozenset()


def _row_keys(value: Any) -> list[str] | None:
    if isinstance(value, list) and value and all(isinstance(r, Mapping) for r in value):
        return sorted({str(k) for r in value for k in r})
    if isinstance(value, Mapping) and value and all(isinstance(r, Mapping) for r in value.values()):
        return sorted({str(k) for r in value.values() for k in r})
    return None


def _numbers(value: Any) -> list[float]:
    if _is_number(value):
        return [float(value)]
    if isinstance(value, Mapping):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def generic_note(name: str, expected: Any, actual: Any) -> str:
    """A concrete sentence about a failing field no pitfall explains."""
    keys, got = _row_keys(expected), _row_keys(actual)
    if keys is not None and got is not None and keys != got:
        return f"`{name}` rows have the fields {', '.join(got)}; the task asks for {', '.join(keys)}."
    same_rows = isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual)
    if same_rows and sorted(map(_canonical, expected)) == sorted(map(_canonical, actual)):
        return f"`{name}` has the right rows in the wrong order."
    exp, act = _numbers(expected), _numbers(actual)
    if exp and len(exp) == len(act) and all(e != 0 for e in exp):
        ratios = {round(a / e, 6) for e, a in zip(exp, act, strict=True) if a != e}
        if len(ratios) == 1 and next(iter(ratios)) in (1000.0, 0.001, 100.0, 0.01):
            return f"`{name}` is off by a factor of {next(iter(ratios)):g} (expected {show(expected, 60)})."
    return f"`{name}` should be {show(expected)}, got {show(actual)}."


@dataclass
class _Findings:
    failing: list[str] = field(default_factory=list)
    diagnosed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def grade(
    task: Task,
    expected: Mapping[str, Any],
    actual: Any,
    *,
    pitfalls: Mapping[str, Pitfall],
    variants: Mapping[frozenset[str], Mapping[str, Any]] | None = None,
    read_error: str = "",
) -> CheckResult:
    """One check per expected top-level field (plus one for no extra fields); diagnose the failures."""
    names = list(expected)
    answer: Mapping[str, Any] = actual if isinstance(actual, Mapping) else {}
    found = _Findings()
    if read_error:
        found.notes.append(read_error)
    elif not isinstance(actual, Mapping):
        found.notes.append(f"{task.output} must hold a JSON object, got {show(actual, 60)}.")
    for name in names:
        if name not in answer:
            found.failing.append(name)
            if not read_error and isinstance(actual, Mapping):
                found.notes.append(f"`{name}` is missing from {task.output}.")
            continue
        if values_equal(expected[name], answer[name]):
            continue
        found.failing.append(name)
        causes = diagnose(name, answer[name], variants or {})
        if causes:
            found.diagnosed.extend(p for p in pitfalls if p in causes and p not in found.diagnosed)
        else:
            found.notes.append(generic_note(name, expected[name], answer[name]))
    extra = [str(k) for k in answer if k not in expected]
    total = len(names) + 1
    if extra:
        found.failing.append("(extra fields)")
        found.notes.append(f"Remove the fields the task did not ask for: {', '.join(extra)}.")
    passed = total - len(found.failing)
    return CheckResult(
        task=task.id,
        passed_checks=passed,
        total=total,
        failing=tuple(found.failing),
        expected={n: expected[n] for n in found.failing if n in expected},
        actual={n: answer[n] for n in [*found.failing, *extra] if n in answer},
        message=compose_message(task, passed, total, found, pitfalls),
        output=task.output,
        diagnosed=tuple(found.diagnosed),
    )


def compose_message(task: Task, passed: int, total: int, found: _Findings, pitfalls: Mapping[str, Pitfall]) -> str:
    """The rationale sent with the verdict: the result, each recognised mistake's lesson, then what else is
    wrong. It never announces a task switch (the runner checks)."""
    if not found.failing:
        return f"All {total} checks of {task.id} passed: {task.output} matches the verifier."
    lines = [f"{passed}/{total} checks of {task.id} passed; failing: {', '.join(found.failing)}."]
    lines += [pitfalls[p].feedback for p in found.diagnosed]
    lines += found.notes
    return "\n".join(lines)
