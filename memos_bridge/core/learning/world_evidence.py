"""What the L3 stage reads from an experience: a detached view, its domain, and its verifier facts.

* `ExperienceView` — the policy/experience fields the abstraction uses, copied out of the session;
* `DomainTable` — the configurable domain table (`learning.world.domains` + `extra_domains`). An
  experience's **primary domain** comes from its tags first (the experience builder tags task families:
  `sec13f`, `python`…), then from its text (the table's patterns over title, trigger, procedure,
  guidance, verifier task), then from the leading tags of its L2 pattern signature. Among several
  matches the table's order decides — most specific first, so a 13F task solved in Python belongs to the
  13F world model. One domain per experience keeps world models of different domains apart;
* `VerifierFacts` — a verifier payload (`verifier_meta_json`, whatever its spelling: `taskName` or
  `task`, `expected`/`actual` as values, objects or text, `failingFields`, `mismatches`, `passed/total`,
  `score`) reduced to what the environment is like: the fields a task expects, the values compared, the
  unit scale that separates an answer from the expected value.

Everything here is pure: the domain table remembers the answers it computed, which changes no answer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from memos_bridge.config import WorldSettings
from memos_bridge.core.learning.world_text import identifiers

SUCCESS_TYPES: Final = frozenset({"success_pattern", "repair_validated"})
FAILURE_TYPES: Final = frozenset({"failure_avoidance", "repair_instruction"})
#: Mismatches kept per verifier payload.
MAX_MISMATCHES: Final = 4
VALUE_CHARS: Final = 60
#: Texts whose domains a `DomainTable` remembers (a few times the experiences one L3 run reads).
TEXT_MEMO_ENTRIES: Final = 8192
_NUMBER: Final = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:e[-+]?\d+)?$", re.IGNORECASE)


def _norm_tag(tag: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", tag.lower())


# ---------------------------------------------------------------- experiences


@dataclass(frozen=True, eq=False)
class ExperienceView:
    """A detached snapshot of one active experience (built inside a read)."""

    id: str
    experience_type: str
    polarity: str
    title: str
    trigger: str = ""
    procedure: str = ""
    verification: str = ""
    boundary: str = ""
    preference: tuple[str, ...] = ()
    anti_pattern: tuple[str, ...] = ()
    verifier_meta: Any = None
    tags: tuple[str, ...] = ()
    signature: str = ""
    confidence: float = 0.5
    gain: float = 0.0
    support: int = 0
    source_episodes: tuple[str, ...] = ()
    source_feedback_ids: tuple[str, ...] = ()
    #: The words of the feedback it was built from (a verifier's or user's rationale often states the
    #: environment fact behind the lesson: "values are already in thousands of USD").
    feedback_notes: tuple[str, ...] = ()
    #: Written by the lesson builder, whose procedure already holds the feedback's own lesson lines.
    lesson_builder: bool = False
    #: The inputs the lesson was learnt on (names, file names, units the lesson builder recorded): two lessons
    #: that share no input are about different data, even when a domain word ("tests", "storage") matches.
    terms: tuple[str, ...] = ()
    #: The unit vectors of the requests it was learnt on (`rules.work`): two lessons of one piece of work
    #: whose files differ (two filings of one kind) are still about the same environment.
    contexts: tuple[NDArray[np.float32], ...] = field(default=(), repr=False)
    updated_at: int = 0
    vec: NDArray[np.float32] | None = field(default=None, repr=False)

    @property
    def succeeded(self) -> bool:
        """Evidence of what works: a success type, or a procedure learnt from steps that went well."""
        if self.experience_type in SUCCESS_TYPES:
            return True
        return self.experience_type not in FAILURE_TYPES | {"preference"} and self.polarity in ("positive", "mixed")

    @property
    def failed(self) -> bool:
        """Evidence of what does not work (failures are environment facts too)."""
        return self.experience_type in FAILURE_TYPES or self.polarity == "negative"

    @property
    def verifier(self) -> VerifierFacts | None:
        return parse_verifier_meta(self.verifier_meta)

    def texts(self) -> list[str]:
        """Every text field, in the order they matter."""
        verifier = self.verifier
        return [
            self.title,
            self.trigger,
            self.procedure,
            *self.anti_pattern,
            *self.preference,
            self.verification,
            self.boundary,
            verifier.task if verifier else "",
            verifier.file if verifier else "",
            *(verifier.notes if verifier else ()),
            *self.feedback_notes,
        ]

    def digest(self) -> str:
        """Content fingerprint: changes when the experience says something new (text, guidance, type,
        verifier payload, feedback absorbed), not when only its bookkeeping (gain, support, updated_at) moves."""
        payload = [
            self.experience_type,
            self.polarity,
            self.title,
            self.trigger,
            self.procedure,
            self.verification,
            self.boundary,
            list(self.preference),
            list(self.anti_pattern),
            self.verifier_meta,
            sorted(self.source_feedback_ids),
        ]
        raw = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)
        return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:16]


# ---------------------------------------------------------------- domains


@dataclass(frozen=True)
class Domain:
    key: str
    label: str
    rank: int
    aliases: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]


class DomainTable:
    """The domain table in priority order (`extra_domains` first, then `domains`)."""

    def __init__(self, domains: Sequence[Domain]) -> None:
        self.domains = list(domains)
        self._by_key = {d.key: d for d in self.domains}
        self._by_tag: dict[str, Domain] = {}
        for domain in self.domains:  # earlier (more specific) domains win shared aliases
            for tag in (_norm_tag(domain.key), *domain.aliases):
                self._by_tag.setdefault(tag, domain)
        self._of_text: dict[bytes, tuple[Domain, ...]] = {}

    @classmethod
    def from_settings(cls, settings: WorldSettings) -> DomainTable:
        """The table of these settings; the same object while the domain settings stay the same, so what it
        remembers about texts (`of_text`) carries over from one L3 run to the next."""
        specs = {**settings.extra_domains}
        specs.update({k: v for k, v in settings.domains.items() if k not in specs})
        key = tuple((k, spec.label, tuple(spec.aliases), tuple(spec.patterns)) for k, spec in specs.items())
        return _table_of(key)

    def get(self, key: str) -> Domain | None:
        return self._by_key.get(key)

    def of_tag(self, tag: str) -> Domain | None:
        return self._by_tag.get(_norm_tag(tag))

    def of_text(self, text: str) -> list[Domain]:
        """Domains whose patterns occur in `text`, in priority order.

        Remembered per text: every L3 run classifies each eligible experience of the namespace (up to two
        thousand), most of them unchanged since the previous run, and scanning their texts with every pattern
        was most of the learning chain's CPU once a store held a thousand experiences.
        """
        key = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()  # not the text: keeps it small
        found = self._of_text.get(key)
        if found is None:
            found = tuple(d for d in self.domains if any(p.search(text) for p in d.patterns))
            if len(self._of_text) >= TEXT_MEMO_ENTRIES:
                self._of_text.clear()  # rare; a plain reset keeps this cheap and bounded
            self._of_text[key] = found
        return list(found)

    def primary(self, view: ExperienceView) -> Domain | None:
        """The experience's domain: tags, else text, else its L2 signature's leading tags."""
        tagged = [d for tag in view.tags if (d := self.of_tag(tag)) is not None]
        if tagged:
            return min(tagged, key=lambda d: d.rank)
        found = self.of_text("\n".join(t for t in view.texts() if t))
        if found:
            return found[0]
        signed = [d for tag in view.signature.split("|")[:2] if tag and (d := self.of_tag(tag)) is not None]
        return min(signed, key=lambda d: d.rank) if signed else None


DomainSpecKey = tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...]


@functools.lru_cache(maxsize=8)
def _table_of(specs: DomainSpecKey) -> DomainTable:
    """A domain table per distinct configuration (key, label, aliases, patterns of each domain, in order)."""
    return DomainTable(
        [
            Domain(
                key=key,
                label=label,
                rank=rank,
                aliases=frozenset(_norm_tag(a) for a in aliases if _norm_tag(a)),
                patterns=tuple(re.compile(p, re.IGNORECASE) for p in patterns),
            )
            for rank, (key, label, aliases, patterns) in enumerate(specs)
        ]
    )


# ---------------------------------------------------------------- verifier payloads


@dataclass(frozen=True)
class Mismatch:
    """One compared value: which field (may be ""), what was expected, what the answer had."""

    field: str
    expected: str
    actual: str
    factor: float | None = None  # actual / expected when that is a power of ten (a unit scale)


@dataclass(frozen=True)
class VerifierFacts:
    task: str = ""
    passed: int | None = None
    total: int | None = None
    score: float | None = None
    expected_fields: tuple[str, ...] = ()
    actual_fields: tuple[str, ...] = ()
    failing_fields: tuple[str, ...] = ()
    mismatches: tuple[Mismatch, ...] = ()
    notes: tuple[str, ...] = ()
    #: Fields the verifier reported missing / not asked for, and (field, how) of an expected ordering.
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    orderings: tuple[tuple[str, str], ...] = ()
    file: str = ""

    @property
    def missing_fields(self) -> tuple[str, ...]:
        """Expected fields the answer did not have: as reported, else expected minus actual fields."""
        if self.missing:
            return self.missing
        if not self.expected_fields or not self.actual_fields:
            return ()
        have = {f.lower() for f in self.actual_fields}
        return tuple(f for f in self.expected_fields if f.lower() not in have)

    @property
    def verdict(self) -> str:
        """ "1/5 checks passed", "score 0.40" or ""."""
        if self.passed is not None and self.total:
            return f"{self.passed}/{self.total} checks passed"
        if self.score is not None:
            return f"score {self.score:.2f}"
        return ""


def _first(data: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in data and data[key] not in (None, "", [], {}):
            return data[key]
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def number(value: Any) -> float | None:
    """A number from JSON: 1234, 1234.5, "1,234", "$1234" (None for anything else)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, str):
        text = value.strip().lstrip("$€£¥").strip()
        if text and _NUMBER.match(text) and any(c.isdigit() for c in text):
            return float(text.replace(",", ""))
    return None


def scale_factor(expected: float, actual: float) -> float | None:
    """`actual / expected` when it is a power of ten other than 1 (e.g. 1000 for thousands vs units)."""
    if expected == 0 or actual == 0:
        return None
    exponent = math.log10(abs(actual / expected))
    rounded = round(exponent)
    if rounded == 0 or abs(exponent - rounded) > 0.005:
        return None
    return float(10.0**rounded)


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def _fields_of(value: Any) -> list[str]:
    """Field names a value shows: keys of an object (or of the first row of a list of objects), or the
    identifiers named in a text."""
    if isinstance(value, Mapping):
        return [str(k) for k in value]
    if isinstance(value, list) and value and isinstance(value[0], Mapping):
        return [str(k) for k in value[0]]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [v for v in value if identifiers(v) == [v]]
    if isinstance(value, str):
        return identifiers(value)
    return []


def _compare(name: str, expected: Any, actual: Any) -> Mismatch | None:
    e, a = number(expected), number(actual)
    if e is not None and a is not None:
        if e == a:
            return None
        return Mismatch(name, _show(expected), _show(actual), scale_factor(e, a))
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) != len(actual):
        return Mismatch(name or "rows", f"{len(expected)} items", f"{len(actual)} items")
    scalar = (str, int, float)
    comparable = isinstance(expected, scalar) and isinstance(actual, scalar) and not isinstance(expected, bool)
    if comparable and str(expected) != str(actual) and not identifiers(str(expected)):
        return Mismatch(name, _show(expected), _show(actual))
    return None


def _mismatches(expected: Any, actual: Any, listed: Any) -> list[Mismatch]:
    """Compared values from the expected/actual answers and from a listed diff, without repeats."""
    out: list[Mismatch] = []
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        for key in expected:
            if key in actual and (found := _compare(str(key), expected[key], actual[key])) is not None:
                out.append(found)
    elif expected is not None and actual is not None:
        found = _compare("", expected, actual)
        if found is not None:
            out.append(found)
    for item in listed if isinstance(listed, list) else []:
        if isinstance(item, Mapping) and "expected" in item and "actual" in item:
            name = str(_first(item, "field", "name", "key", "path") or "")
            found = _compare(name, item["expected"], item["actual"])
            if found is not None:
                out.append(found)
    unique = {(m.field, m.expected, m.actual): m for m in reversed(out)}
    return [m for m in out if unique.get((m.field, m.expected, m.actual)) is m][:MAX_MISMATCHES]


@dataclass
class _Listed:
    """What a typed diff list (`{kind, field, detail}`, as the experience builder stores it) names."""

    missing: list[str] = field(default_factory=list)
    compared: list[str] = field(default_factory=list)  # fields whose value, scale or type was checked
    unexpected: list[str] = field(default_factory=list)
    orderings: list[tuple[str, str]] = field(default_factory=list)


def _listed_kinds(listed: Any) -> _Listed:
    out = _Listed()
    for item in listed if isinstance(listed, list) else []:
        if not isinstance(item, Mapping):
            continue
        kind = str(item.get("kind") or "")
        name = str(_first(item, "field", "name", "key", "path") or "")
        if kind == "missing" and name:
            out.missing.append(name)
        elif kind in ("scale", "type", "value") and name:
            out.compared.append(name)
        elif kind == "unexpected" and name:
            out.unexpected.append(name)
        elif kind == "order":
            out.orderings.append((name, str(item.get("detail") or "")))
    return out


def parse_verifier_meta(meta: Any) -> VerifierFacts | None:
    """`VerifierFacts` from a stored verifier payload (top level or under `verifier`); None without one."""
    if not isinstance(meta, Mapping):
        return None
    data: dict[str, Any] = dict(meta)
    inner = data.get("verifier")
    if isinstance(inner, Mapping):
        data = {**inner, **{k: v for k, v in data.items() if k != "verifier"}}
    task = _first(data, "taskName", "task_name", "task", "taskId", "task_id", "name")
    expected = _first(data, "expected", "expectedValue", "expected_value")
    actual = _first(data, "actual", "actualValue", "actual_value", "got")
    schema = _first(data, "expectedFields", "expected_fields", "requiredFields", "required_fields", "schema", "fields")
    failing = _first(data, "failingFields", "failing_fields", "failedFields", "failed_fields", "failing", "failures")
    listed = _first(data, "mismatches", "diffs", "differences")
    kinds = _listed_kinds(listed)
    expected_fields = [*(_fields_of(schema) or _fields_of(expected)), *kinds.missing, *kinds.compared]
    file = _first(data, "file", "path", "outputFile", "output_file", "answerFile", "answer_file")
    failing_names = [
        str(_first(f, "field", "name", "key", "path") or "") if isinstance(f, Mapping) else str(f)
        for f in (failing if isinstance(failing, list) else _strings(failing))
    ]
    notes = [
        text
        for key in ("message", "hint", "hints", "reason", "detail", "details", "summary", "feedback", "text")
        for text in _strings(data.get(key))
        if text.strip()
    ]
    score = number(_first(data, "score", "reward"))
    facts = VerifierFacts(
        task=str(task).strip() if isinstance(task, str | int) else "",
        passed=_int(data.get("passed")),
        total=_int(data.get("total")),
        score=score,
        expected_fields=tuple(dict.fromkeys(expected_fields)),
        actual_fields=tuple(dict.fromkeys(_fields_of(actual))),
        failing_fields=tuple(dict.fromkeys(f for f in failing_names if f)),
        mismatches=tuple(_mismatches(expected, actual, listed if listed is not None else failing)),
        notes=tuple(notes),
        missing=tuple(dict.fromkeys(kinds.missing)),
        unexpected=tuple(dict.fromkeys(kinds.unexpected)),
        orderings=tuple(dict.fromkeys(kinds.orderings)),
        file=str(file) if isinstance(file, str) else "",
    )
    empty = VerifierFacts(task=facts.task)
    return None if facts == empty and not facts.task else facts


def fields_by_task(views: Iterable[ExperienceView]) -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """Task name → (expected fields, ids of the experiences that show them), for tasks with known fields."""
    out: dict[str, tuple[tuple[str, ...], list[str]]] = {}
    for view in views:
        facts = view.verifier
        if facts is None or not facts.task or not facts.expected_fields:
            continue
        fields, ids = out.get(facts.task, (facts.expected_fields, []))
        out[facts.task] = (fields, [*ids, view.id])
    return out
