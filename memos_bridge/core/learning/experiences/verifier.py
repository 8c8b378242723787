"""Verifier payloads as structured evidence: credit, expected vs actual, failing fields, concrete hints.

A verifier (SkillFlow, a test runner, a grader) reports on one attempt in `feedback.submit`'s `raw.verifier`
(or `raw` itself): `passed/total` or `score`/`reward`, perhaps a boolean verdict, `expected` and `actual`
answers, failing fields, the task name, the output file. That is data, not chat (issue 5), and it is the
most specific lesson source there is, so it is parsed rather than pattern-matched as text:

* **credit** — passed/total first, then score/reward; a pass counts only at full credit (partial credit,
  or any remaining mismatch, is a failure: reference `FULL_PASS_REWARD = 1`);
* **mismatches** — `expected` and `actual` are diffed field by field (nested objects, rows of lists under
  their field name) into typed differences: missing and unexpected fields (a schema error), a value off by a
  factor (the ratio is kept, never a guess at what it means), a type difference, a different row count, the
  same rows in another order (with the key the expected rows are sorted by, e.g. "by cusip ascending"),
  or a plain value difference; mismatch lists a verifier reports itself are read too;
* **severity** — lost credit, raised by structural faults (schema 0.9, other mismatches 0.7, failing
  fields 0.6), so a 4/5 pass with a wrong schema is still a severe failure;
* **observations** — what the data shows and nothing more ("The answer was 1,000× the expected value"): a
  factor is a factor, not "thousands" or "percent" (the same ×100 is a percentage, cents or a misplaced
  decimal point, and only the feedback's words can say which). Observations that only restate this attempt —
  its values, its output's field names, its row counts — stay in the record (`meta()`), out of the lesson.

Everything here is pure.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from memos_bridge.rules.subjects import FILE
from memos_bridge.rules.text import clip, squash

Outcome = Literal["pass", "fail", "unknown"]

#: Characters of a value quoted in a hint or a mismatch record; of expected/actual kept in the meta record.
VALUE_CHARS: Final = 60
META_JSON_CHARS: Final = 600
#: Characters of the verifier's message kept in the meta record.
MESSAGE_CHARS: Final = 360
#: Mismatches kept; nesting depth diffed; hint lines returned per kind.
MAX_MISMATCHES: Final = 20
DIFF_DEPTH: Final = 3
MAX_LINES: Final = 6

MismatchKind = Literal["missing", "unexpected", "scale", "type", "count", "order", "value"]
#: A ratio this close to a power of ten is shown as that power (1,000×, 1/100).
_POWER_TOLERANCE: Final = 0.01

_VERIFIER_KEYS: Final = frozenset(
    {"passed", "total", "score", "reward", "expected", "actual", "failing_fields", "failingFields", "mismatches"}
)
_FAILING_KEYS: Final = (
    "failing_fields",
    "failingFields",
    "failed_fields",
    "failedFields",
    "failing",
    "failed",
    "fields",
    "failures",
)
_MISMATCH_KEYS: Final = ("mismatches", "diffs", "differences", "errors")
_TASK_KEYS: Final = ("task", "task_name", "taskName", "name", "task_id", "taskId")
_FILE_KEYS: Final = ("file", "path", "output_file", "outputFile", "answer_file", "answerFile")
MESSAGE_KEYS: Final = ("message", "feedback", "details", "detail", "reason", "summary", "error", "text", "verdict")
_PASS_WORDS: Final = frozenset({"pass", "passed", "success", "succeeded", "ok", "correct", "true"})
_FAIL_WORDS: Final = frozenset({"fail", "failed", "failure", "error", "incorrect", "wrong", "false"})
#: A file name: the same shape the subject terms use (any common data, config, log or code extension).
FILE_NAME: Final = FILE
#: A value off by a factor further from 1 than this counts as a scale difference (closer is a plain value error).
_MIN_FACTOR: Final = 1.5


@dataclass(frozen=True)
class Mismatch:
    """One way the answer differed from what the verifier expected (`field` "" = the whole answer)."""

    kind: MismatchKind
    field: str
    expected: Any = None
    actual: Any = None
    detail: str = ""  # the ordering ("by cusip ascending")
    factor: float = 0.0  # scale: actual / expected

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "field": self.field}
        if self.expected is not None:
            out["expected"] = _show(self.expected)
        if self.actual is not None:
            out["actual"] = _show(self.actual)
        if self.detail:
            out["detail"] = self.detail
        if self.factor:
            out["factor"] = round(self.factor, 6)
        return out


def _show(value: Any, limit: int = VALUE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return clip(text, limit)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return None if math.isnan(float(value)) else float(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?[\d,]*\.?\d+\s*", value):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None
    return None


def _same(a: Any, b: Any) -> bool:
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None and isinstance(a, str) == isinstance(b, str):
        return math.isclose(na, nb, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, str) and isinstance(b, str):
        return squash(a) == squash(b)
    return bool(a == b)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _scale(expected: float, actual: float) -> float | None:
    """actual / expected when the two differ by a factor worth naming (≥ 1.5 either way), else None."""
    if expected == 0 or actual == 0 or (expected < 0) != (actual < 0):
        return None
    ratio = actual / expected
    return ratio if ratio >= _MIN_FACTOR or ratio <= 1 / _MIN_FACTOR else None


def _sorted_by(values: Sequence[Any]) -> str:
    """ "ascending"/"descending" when the values are comparable and sorted so, else ""."""
    numbers = [_number(v) for v in values]
    keys: list[Any] = numbers if all(n is not None for n in numbers) else [str(v) for v in values]
    if len(keys) < 2 or len(set(map(str, keys))) < 2:
        return ""
    if all(a <= b for a, b in itertools.pairwise(keys)):
        return "ascending"
    if all(a >= b for a, b in itertools.pairwise(keys)):
        return "descending"
    return ""


def _order_detail(expected: Sequence[Any], actual: Sequence[Any]) -> str:
    """How the expected list is ordered where the actual one is not ("by cusip ascending")."""
    if expected and all(isinstance(e, Mapping) for e in expected) and all(isinstance(a, Mapping) for a in actual):
        for key in expected[0]:
            wanted = _sorted_by([e.get(key) for e in expected])
            if wanted and _sorted_by([a.get(key) for a in actual]) != wanted:
                return f"by {key} {wanted}"
        return ""
    wanted = _sorted_by(expected)
    return wanted if wanted and _sorted_by(actual) != wanted else ""


def _row_key(expected: Sequence[Any], actual: Sequence[Any]) -> str:
    """A field that identifies rows in both lists (present in every row, unique, the same set of values),
    e.g. `cusip`; "" when the lists are not rows or no field qualifies."""
    if not expected or len(expected) != len(actual):
        return ""
    if not all(isinstance(row, Mapping) for row in (*expected, *actual)):
        return ""
    for key in expected[0]:
        if not all(key in row for row in (*expected, *actual)):
            continue
        wanted = [_canonical(row[key]) for row in expected]
        given = [_canonical(row[key]) for row in actual]
        if len(set(wanted)) == len(wanted) and sorted(wanted) == sorted(given):
            return str(key)
    return ""


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


#: A key that reads as a field name (`total_value`, `topRegion`), as opposed to data used as a key
#: ("2024-01", "North", "Gadget").
_FIELD_NAME = re.compile(r"^[a-z_][A-Za-z0-9_]*$")


def _keyed_by_data(expected: Mapping[Any, Any], actual: Mapping[Any, Any]) -> bool:
    """Whether two nested objects that differ in their keys are maps from data to values (a month to its
    revenue, a region to its total) rather than objects with misnamed fields: a differing key that is no field
    name. Their keys are part of the value, so "missing `revenue.2024-01`" would be a wrong schema lesson."""
    differing = set(map(str, expected)) ^ set(map(str, actual))
    return bool(differing) and any(not _FIELD_NAME.match(key) for key in differing)


def diff_values(expected: Any, actual: Any, path: str = "", depth: int = 0) -> list[Mismatch]:
    """Typed mismatches between an expected and an actual answer (fields of list rows keep their name)."""
    out: list[Mismatch] = []
    if isinstance(expected, Mapping) and isinstance(actual, Mapping) and path and _keyed_by_data(expected, actual):
        out.append(Mismatch("value", path, expected, actual))
    elif isinstance(expected, Mapping) and isinstance(actual, Mapping):
        for key, value in expected.items():
            name = _join(path, str(key))
            if key not in actual:
                out.append(Mismatch("missing", name, expected=value))
            elif depth < DIFF_DEPTH:
                out.extend(diff_values(value, actual[key], name, depth + 1))
        extra = [(k, v) for k, v in actual.items() if k not in expected]
        out.extend(Mismatch("unexpected", _join(path, str(k)), actual=v) for k, v in extra)
    elif isinstance(expected, list) and isinstance(actual, list):
        key = _row_key(expected, actual)
        if len(expected) != len(actual):
            out.append(Mismatch("count", path, expected=len(expected), actual=len(actual)))
        elif sorted(map(_canonical, expected)) == sorted(map(_canonical, actual)):
            if list(map(_canonical, expected)) != list(map(_canonical, actual)):
                out.append(Mismatch("order", path, detail=_order_detail(expected, actual)))
        elif key and depth < DIFF_DEPTH:
            # rows that carry an identifier (a CUSIP, an id): compare each row with its namesake, and report
            # the order separately, so a reordered list does not look like every value changed
            if [e[key] for e in expected] != [a[key] for a in actual]:
                out.append(Mismatch("order", path, detail=_order_detail(expected, actual)))
            by_key = {_canonical(a[key]): a for a in actual}
            for e in expected:
                out.extend(diff_values(e, by_key[_canonical(e[key])], path, depth + 1))
        elif depth < DIFF_DEPTH:
            for e, a in zip(expected, actual, strict=True):
                out.extend(diff_values(e, a, path, depth + 1))
    elif not _same(expected, actual):
        ne, na = _number(expected), _number(actual)
        factor = _scale(ne, na) if ne is not None and na is not None else None
        if factor is not None:
            out.append(Mismatch("scale", path, expected, actual, factor=factor))
        elif (ne is None) != (na is None) and expected is not None and actual is not None:
            out.append(Mismatch("type", path, expected, actual))
        else:
            out.append(Mismatch("value", path, expected, actual))
    return _dedupe_mismatches(out)


def _dedupe_mismatches(items: Iterable[Mismatch]) -> list[Mismatch]:
    """One mismatch per (kind, field, detail): rows of a list repeat the same fault."""
    seen: set[tuple[str, str, str]] = set()
    out: list[Mismatch] = []
    for item in items:
        key = (item.kind, item.field, item.detail)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out[:MAX_MISMATCHES]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, str | int | float) and str(v).strip()]
    if isinstance(value, Mapping):
        return [str(k) for k in value]
    return []


def _explicit_mismatches(block: Mapping[str, Any]) -> list[Mismatch]:
    """Mismatch lists a verifier reports itself: `[{field, expected, actual}]`."""
    out: list[Mismatch] = []
    for key in _MISMATCH_KEYS:
        items = block.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, Mapping) and ("expected" in item or "actual" in item):
                name = str(item.get("field") or item.get("path") or item.get("name") or "")
                out.extend(diff_values(item.get("expected"), item.get("actual"), name))
    return out


@dataclass(frozen=True)
class VerifierView:
    """What a verifier said about one attempt, as structured data."""

    task: str = ""
    passed: int | None = None
    total: int | None = None
    score: float | None = None
    verdict: bool | None = None  # a boolean pass/fail without numbers
    expected: Any = None
    actual: Any = None
    failing_fields: tuple[str, ...] = ()
    mismatches: tuple[Mismatch, ...] = ()
    message: str = ""
    file: str = ""

    @property
    def credit(self) -> float | None:
        """Fraction of credit in [0, 1] (passed/total first, then score/reward); None without numbers."""
        if self.passed is not None and self.total is not None and self.total > 0:
            return min(1.0, max(0.0, self.passed / self.total))
        if self.score is not None:
            return min(1.0, max(0.0, self.score))
        return None

    @property
    def outcome(self) -> Outcome:
        """Pass only at full credit; partial credit, mismatches or a failing verdict are failures."""
        credit = self.credit
        if credit is not None:
            return "pass" if credit >= 1.0 and not self.mismatches else "fail"
        if self.verdict is not None:
            return "pass" if self.verdict and not self.mismatches else "fail"
        if self.mismatches or self.failing_fields:
            return "fail"
        return "unknown"

    @property
    def names_problem(self) -> bool:
        """Whether the data says what was wrong (not just that something was)."""
        return bool(self.mismatches or self.failing_fields)

    @property
    def knows_fix(self) -> bool:
        """Whether it says what the answer should have been (expected values, a missing field's value…)."""
        return any(m.kind != "unexpected" for m in self.mismatches)

    @property
    def severity(self) -> float:
        """How badly the attempt failed, in [0, 1]: lost credit, raised by structural faults."""
        if self.outcome == "pass":
            return 0.0
        credit = self.credit
        severity = 1.0 - credit if credit is not None else (0.7 if self.verdict is False else 0.0)
        kinds = {m.kind for m in self.mismatches}
        if kinds & {"missing", "unexpected"}:
            severity = max(severity, 0.9)
        elif kinds:
            severity = max(severity, 0.7)
        elif self.failing_fields:
            severity = max(severity, 0.6)
        return round(min(1.0, severity), 4)

    def summary(self) -> str:
        """ "sec13f_top_classes: 1/5 passed" — the verifier's result in one phrase."""
        if self.passed is not None and self.total is not None:
            result = f"{self.passed}/{self.total} passed"
        elif self.score is not None:
            result = f"score {self.score:g}"
        elif self.verdict is not None:
            result = "passed" if self.verdict else "failed"
        else:
            result = "failed" if self.outcome == "fail" else "no result"
        return f"{self.task}: {result}" if self.task else result

    def meta(self, hints: Sequence[str]) -> dict[str, Any]:
        """The `verifier_meta_json` record: bounded, JSON-ready."""
        out: dict[str, Any] = {
            "task": self.task,
            "passed": self.passed,
            "total": self.total,
            "score": self.score,
            "credit": self.credit,
            "outcome": self.outcome,
            "severity": self.severity,
            "failingFields": list(self.failing_fields),
            "mismatches": [m.as_json() for m in self.mismatches],
            "hints": list(hints),
        }
        for key, value in (("expected", self.expected), ("actual", self.actual)):
            if value is not None:
                text = _canonical(value)
                out[key] = value if len(text) <= META_JSON_CHARS else clip(text, META_JSON_CHARS)
        if self.file:
            out["file"] = self.file
        if self.message:
            out["message"] = clip(self.message, MESSAGE_CHARS)
        return {k: v for k, v in out.items() if v not in (None, "", [])}


def _verdict(block: Mapping[str, Any]) -> bool | None:
    for key in ("passed", "success", "ok", "pass"):
        value = block.get(key)
        if isinstance(value, bool):
            return value
    for key in ("status", "result", "verdict", "outcome"):
        value = block.get(key)
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _PASS_WORDS:
                return True
            if word in _FAIL_WORDS:
                return False
    return None


def _int(value: Any) -> int | None:
    number = _number(value) if not isinstance(value, str) else None
    return int(number) if number is not None and number.is_integer() else None


def parse_verifier(raw: Any) -> VerifierView | None:
    """The verifier result in a feedback payload (`raw.verifier`, or `raw` itself when it looks like one)."""
    if not isinstance(raw, Mapping):
        return None
    block = raw.get("verifier")
    if not isinstance(block, Mapping):
        if not (_VERIFIER_KEYS & set(raw)):
            return None
        block = raw
    passed, total = _int(block.get("passed")), _int(block.get("total"))
    score = next((s for s in (_number(block.get("score")), _number(block.get("reward"))) if s is not None), None)
    expected, actual = block.get("expected"), block.get("actual")
    mismatches = _explicit_mismatches(block)
    if "expected" in block and "actual" in block:
        mismatches = diff_values(expected, actual) + mismatches
    failing = next((_strings(block.get(k)) for k in _FAILING_KEYS if _strings(block.get(k))), [])
    task = next((str(block.get(k) or raw.get(k)) for k in _TASK_KEYS if block.get(k) or raw.get(k)), "")
    file = next((str(block.get(k)) for k in _FILE_KEYS if isinstance(block.get(k), str) and block.get(k)), "")
    message = "\n".join(str(block.get(k)) for k in MESSAGE_KEYS if isinstance(block.get(k), str))
    view = VerifierView(
        task=clip(task, 120),
        passed=passed,
        total=total,
        score=score,
        verdict=_verdict(block),
        expected=expected,
        actual=actual,
        failing_fields=tuple(dict.fromkeys(clip(f, 80) for f in failing))[:MAX_MISMATCHES],
        mismatches=tuple(_dedupe_mismatches(mismatches)),
        message=message.strip(),
        file=file,
    )
    has_result = view.credit is not None or view.verdict is not None
    return view if has_result or view.names_problem or view.message else None


def file_in(*texts: str) -> str:
    """The first output file name ("answers.json") mentioned in `texts`, or ""."""
    for text in texts:
        match = FILE_NAME.search(text or "")
        if match:
            return str(match.group(0))
    return ""


def _factor_text(factor: float) -> str:
    """1000 → "1,000×", 0.01 → "1/100 of", 2.20462 → "2.205×": a power of ten exactly, anything else to four
    significant figures."""
    exponent = round(math.log10(abs(factor)))
    if exponent != 0 and abs(abs(factor) / 10**exponent - 1) <= _POWER_TOLERANCE:
        return f"{10**exponent:,.0f}×" if exponent > 0 else f"1/{10**-exponent:,.0f} of"
    if factor >= 1:
        return f"{float(f'{factor:.4g}'):g}×"
    return f"1/{float(f'{1 / factor:.4g}'):g} of"


def common_factor(view: VerifierView) -> float | None:
    """The factor every numeric mismatch of the answer shares (within 1 %), or None."""
    factors = [m.factor for m in view.mismatches if m.kind == "scale"]
    values = [m for m in view.mismatches if m.kind == "value"]
    if not factors or values:
        return None
    first = factors[0]
    return first if all(abs(f / first - 1) <= 0.01 for f in factors) else None


def observations(view: VerifierView) -> list[str]:
    """What the verifier's data shows that may carry over to another task, stated as observed (no reading of
    what it means): a factor every wrong number shares, numbers written as text or the reverse, and the order
    the expected rows come in. Field names of this answer, its values and its counts are left out: they are
    true of this task only (`VerifierView.meta` keeps them)."""
    out: list[str] = []
    factor = common_factor(view)
    if factor is not None:
        out.append(f"The answer was {_factor_text(factor)} the expected value.")
    typed = [m for m in view.mismatches if m.kind == "type"]
    if typed:
        wanted_number = _number(typed[0].expected) is not None
        out.append(
            "The expected answer held numbers where this attempt wrote text."
            if wanted_number
            else "The expected answer held text where this attempt wrote numbers."
        )
    for mismatch in view.mismatches:
        if mismatch.kind == "order" and mismatch.detail.startswith("by "):
            out.append(f"The expected entries were ordered {mismatch.detail}.")
            break
    return out[:MAX_LINES]


def record_lines(view: VerifierView) -> list[str]:
    """Every mismatch in words, this attempt's values included: the record `memory.get` shows, never recalled."""
    lines: list[str] = []
    for m in view.mismatches:
        where = f"`{m.field}`" if m.field else "the answer"
        if m.kind in ("value", "scale", "type"):
            lines.append(f"{where}: expected {_show(m.expected)}, got {_show(m.actual)}.")
        elif m.kind == "count":
            lines.append(f"{where}: expected {m.expected} entries, got {m.actual}.")
        elif m.kind == "missing":
            lines.append(f"{where} is missing.")
        elif m.kind == "unexpected":
            lines.append(f"{where} was not asked for.")
        elif m.kind == "order":
            lines.append(f"{where}: right entries in another order{f' (expected {m.detail})' if m.detail else ''}.")
    if view.failing_fields and not view.mismatches:
        lines.append(f"Failing: {', '.join(view.failing_fields[:8])}.")
    return lines[:MAX_MISMATCHES]
