"""The lossless export format (JSONL), as pure functions: no database, no files.

A file is one header line, then one record per line, each `{"kind": <record kind>, "row": {<column>: value}}`
with the table's own column names. Records come in the order they can be inserted in (a session before its
episodes, an episode before its steps, a memory before its history), so an import never needs a second pass.

What is left out, and why:
- integer surrogate keys (`rid` of the searchable tables, the autoincrement ids of turns, links and events):
  they are local to one database — the full-text index is keyed by `rid`, so a new row gets a new one;
- the cached `turn.start` result of a turn: it quotes memories as they were recalled then, and is
  recomputed on the next retry anyway;
- vectors unless asked for (base64 of the little-endian float32 blob): without them the import embeds the
  rows again with the running model, which is also what makes an export portable between models.

Everything else — ids, owner columns, statuses, strengths, timestamps, JSON columns — is written as stored.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from sqlalchemy import JSON, Boolean, Column, Float, Integer, LargeBinary, String, Text

from memos_bridge.storage.models import (
    AuditEventRow,
    DecisionRepairRow,
    EpisodeRow,
    FeedbackRow,
    MemoryLinkRow,
    MemoryRow,
    PolicyRow,
    SessionRow,
    SkillRow,
    SkillTrialRow,
    StrengthEventRow,
    TracePolicyLinkRow,
    TraceRow,
    TurnRow,
    WorldModelRow,
)

FORMAT: Final = "memos-bridge-export"
#: Version of the file layout (not of the database schema): a reader refuses a version it does not know.
VERSION: Final = 1
#: The first line of a Markdown export, so an import can say what the file is instead of "not JSON".
MARKDOWN_MARKER: Final = "<!-- memos-bridge markdown export"


class FormatError(ValueError):
    """A line of the file that is not what the format says; `line` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.reason = message


@dataclass(frozen=True)
class RecordSpec:
    """One record kind: its table, the string id that identifies a row across homes (None: the row is
    identified by what it points at), the columns never written, its vector columns, and the parents a row
    cannot exist without (column, parent record kind)."""

    kind: str
    model: type[Any]
    key: str | None = "id"
    skip: frozenset[str] = frozenset()
    vectors: tuple[str, ...] = ()
    parents: tuple[tuple[str, str], ...] = ()

    @cached_property
    def columns(self) -> dict[str, Column[Any]]:
        table = self.model.__table__
        return {col.name: col for col in table.columns if col.name not in self.skip}

    @cached_property
    def required(self) -> frozenset[str]:
        """Columns a row must carry: not nullable and without a default the database or ORM would fill in."""
        return frozenset(
            name
            for name, col in self.columns.items()
            if not col.nullable and col.default is None and col.server_default is None and name not in self.vectors
        )


_RID: Final = frozenset({"rid"})
_SURROGATE: Final = frozenset({"id"})

SPECS: Final[tuple[RecordSpec, ...]] = (
    RecordSpec("session", SessionRow),
    RecordSpec("episode", EpisodeRow, parents=(("session_id", "session"),)),
    RecordSpec(
        "turn",
        TurnRow,
        key=None,
        skip=frozenset({"id", "result_json"}),
        parents=(("session_id", "session"), ("episode_id", "episode")),
    ),
    RecordSpec(
        "trace",
        TraceRow,
        skip=_RID,
        vectors=("vec_summary", "vec_action"),
        parents=(("episode_id", "episode"), ("session_id", "session")),
    ),
    RecordSpec("feedback", FeedbackRow),
    RecordSpec("policy", PolicyRow, skip=_RID, vectors=("vec",)),
    RecordSpec("decision_repair", DecisionRepairRow),
    RecordSpec("world_model", WorldModelRow, skip=_RID, vectors=("vec",)),
    RecordSpec("skill", SkillRow, skip=_RID, vectors=("vec",)),
    RecordSpec("memory", MemoryRow, skip=_RID, vectors=("vec",)),
    RecordSpec("memory_link", MemoryLinkRow, key=None, skip=_SURROGATE),
    RecordSpec(
        "trace_policy_link", TracePolicyLinkRow, key=None, parents=(("trace_id", "trace"), ("policy_id", "policy"))
    ),
    RecordSpec("skill_trial", SkillTrialRow, parents=(("skill_id", "skill"),)),
    RecordSpec("audit_event", AuditEventRow, key=None, skip=_SURROGATE),
    RecordSpec("strength_event", StrengthEventRow, key=None, skip=_SURROGATE),
)
BY_KIND: Final[dict[str, RecordSpec]] = {spec.kind: spec for spec in SPECS}
#: Record kinds whose rows carry `forgotten_at` (the ones `includeForgotten: false` leaves out).
SEARCHABLE: Final = ("trace", "policy", "world_model", "skill", "memory")


# ---------------------------------------------------------------- writing


def encode_row(spec: RecordSpec, row: Any, *, include_vectors: bool) -> dict[str, Any]:
    """The record of one ORM row: every exported column, vectors as base64 when asked for."""
    values: dict[str, Any] = {}
    for name in spec.columns:
        value = getattr(row, name)
        if name in spec.vectors:
            if not include_vectors:
                continue
            value = None if value is None else base64.b64encode(value).decode("ascii")
        values[name] = value
    return {"kind": spec.kind, "row": values}


def dump_line(record: Mapping[str, Any]) -> str:
    """One JSON object on one line (non-ASCII kept readable; `\\n` inside strings is escaped by JSON)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def header(
    *,
    schema_version: int,
    exported_at: int,
    namespace: Mapping[str, Any],
    counts: Mapping[str, int],
    kinds: Iterable[str],
    include_vectors: bool,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "schemaVersion": schema_version,
        "exportedAt": exported_at,
        "namespace": dict(namespace),
        "kinds": sorted(kinds),
        "includeVectors": include_vectors,
        "counts": {kind: counts[kind] for kind in BY_KIND if counts.get(kind)},
    }


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class Header:
    version: int
    schema_version: int
    exported_at: int
    namespace: dict[str, Any]
    counts: dict[str, int]
    kinds: list[str]


@dataclass
class Record:
    """One parsed, validated record: column values ready for the ORM (vectors decoded to bytes)."""

    kind: str
    line: int
    values: dict[str, Any]

    @property
    def spec(self) -> RecordSpec:
        return BY_KIND[self.kind]

    @property
    def id(self) -> str | None:
        key = self.spec.key
        return None if key is None else self.values.get(key)


@dataclass
class Parsed:
    header: Header
    records: list[Record] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = Counter(record.kind for record in self.records)
        return {kind: found[kind] for kind in BY_KIND if found[kind]}


def _json_object(line: int, text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(line, f"{what} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise FormatError(line, f"{what} is not a JSON object")
    return value


def parse_header(text: str) -> Header:
    """The first line of an export; what is wrong with it, and what to do, when it is not one."""
    stripped = text.strip()
    if stripped.startswith(MARKDOWN_MARKER):
        raise FormatError(
            1,
            "this is a Markdown export, written for people to read; memory.import reads the JSONL export "
            '(run memory.export with format "jsonl")',
        )
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise FormatError(
            1,
            "not a memos-bridge export: the first line is not its header "
            f'({{"format": "{FORMAT}", ...}}); export with memory.export format "jsonl", or pass format '
            '"hermes" for a Hermes MEMORY.md / USER.md file',
        )
    version = _int_field(value, "version")
    if version is None or version < 1:
        raise FormatError(1, f"the header's version is not a positive integer: {value.get('version')!r}")
    if version > VERSION:
        raise FormatError(
            1,
            f"the export was written by a newer memos-bridge (export version {version}; this one reads up to "
            f"{VERSION}): upgrade memos-bridge to import it",
        )
    schema, exported = _int_field(value, "schemaVersion"), _int_field(value, "exportedAt")
    if schema is None or exported is None:
        raise FormatError(1, "the header needs integer schemaVersion and exportedAt")
    namespace = value.get("namespace")
    if not isinstance(namespace, dict) or not isinstance(namespace.get("profileId"), str):
        raise FormatError(1, "the header's namespace needs a profileId")
    for name in ("agentKind", "workspaceId"):
        if namespace.get(name) is not None and not isinstance(namespace[name], str):
            raise FormatError(1, f"the header's namespace.{name} must be a string or null")
    counts = value.get("counts")
    if not isinstance(counts, dict) or not all(kind in BY_KIND and _is_int(n) and n >= 0 for kind, n in counts.items()):
        raise FormatError(1, "the header's counts must map record kinds to record numbers")
    kinds = value.get("kinds", [])
    if not isinstance(kinds, list) or not all(isinstance(kind, str) for kind in kinds):
        raise FormatError(1, "the header's kinds must be a list of kind names")
    return Header(version, schema, exported, dict(namespace), dict(counts), list(kinds))


def parse_record(line: int, text: str) -> Record:
    """One record line, checked column by column against the table it goes to."""
    value = _json_object(line, text, "the record")
    kind, row = value.get("kind"), value.get("row")
    if set(value) - {"kind", "row"}:
        raise FormatError(line, f"unexpected fields {sorted(set(value) - {'kind', 'row'})} (a record has kind, row)")
    if not isinstance(kind, str) or kind not in BY_KIND:
        raise FormatError(line, f"unknown record kind {kind!r} (known: {', '.join(BY_KIND)})")
    if not isinstance(row, dict):
        raise FormatError(line, f"a {kind} record needs a row object")
    spec = BY_KIND[kind]
    unknown = sorted(set(row) - set(spec.columns))
    if unknown:
        raise FormatError(
            line,
            f"a {kind} has no column {', '.join(unknown)} (written by a newer or different schema: upgrade "
            "memos-bridge to import it)",
        )
    missing = sorted(spec.required - set(row))
    if missing:
        raise FormatError(line, f"the {kind} lacks {', '.join(missing)}")
    values = {name: _column_value(line, kind, spec, name, item) for name, item in row.items()}
    return Record(kind, line, values)


def _int_field(value: Mapping[str, Any], name: str) -> int | None:
    item = value.get(name)
    return item if isinstance(item, int) and not isinstance(item, bool) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _column_value(line: int, kind: str, spec: RecordSpec, name: str, value: Any) -> Any:
    column = spec.columns[name]
    if value is None:
        if not column.nullable and name not in spec.vectors:
            raise FormatError(line, f"{kind}.{name} may not be null")
        return None
    ctype = column.type
    where = f"{kind}.{name}"
    if isinstance(ctype, LargeBinary):
        if not isinstance(value, str):
            raise FormatError(line, f"{where} must be base64 text")
        try:
            blob = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise FormatError(line, f"{where} is not valid base64") from None
        if len(blob) % 4:
            raise FormatError(line, f"{where} is not a float32 vector ({len(blob)} bytes)")
        return blob
    if isinstance(ctype, JSON):
        return value
    if isinstance(ctype, Boolean):
        if not isinstance(value, bool):
            raise FormatError(line, f"{where} must be true or false, not {value!r}")
        return value
    if isinstance(ctype, Integer):  # BigInteger is an Integer
        if not _is_int(value):
            raise FormatError(line, f"{where} must be an integer, not {value!r}")
        return value
    if isinstance(ctype, Float):
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise FormatError(line, f"{where} must be a finite number, not {value!r}")
        return float(value)
    if isinstance(ctype, String | Text):  # Text is a String; both named for the reader
        if not isinstance(value, str):
            raise FormatError(line, f"{where} must be text, not {type(value).__name__}")
        return value
    raise FormatError(line, f"{where} has a column type this reader does not know ({ctype})")  # pragma: no cover


def parse_lines(lines: Iterable[str]) -> Parsed:
    """Header, then every record; checks the file as a whole (ids unique per kind, every parent present, the
    header's counts met), so a bad line anywhere is found before anything is written."""
    numbered = iter(enumerate(lines, start=1))
    first = next(numbered, None)
    if first is None or not first[1].strip():
        raise FormatError(1, "the file is empty (a memos-bridge export starts with its header line)")
    parsed = Parsed(parse_header(first[1]))
    seen: dict[str, dict[str, int]] = {spec.kind: {} for spec in SPECS}
    for number, text in numbered:
        if not text.strip():
            continue
        record = parse_record(number, text)
        parsed.records.append(record)
        record_id = record.id
        if record_id is not None:
            if not isinstance(record_id, str) or not record_id:
                raise FormatError(number, f"the {record.kind} has no id")
            earlier = seen[record.kind].get(record_id)
            if earlier is not None:
                raise FormatError(number, f"the {record.kind} {record_id} was already given on line {earlier}")
            seen[record.kind][record_id] = number
    for record in parsed.records:
        for column, parent in record.spec.parents:
            parent_id = record.values.get(column)
            if parent_id is not None and parent_id not in seen[parent]:
                raise FormatError(
                    record.line,
                    f"the {record.kind} points at {parent} {parent_id}, which the file does not contain "
                    "(an incomplete export: export again)",
                )
    found = parsed.counts()
    for kind in BY_KIND:
        announced = parsed.header.counts.get(kind, 0)
        if announced != found.get(kind, 0):
            raise FormatError(
                1,
                f"the header announces {announced} {kind} record(s) but the file holds {found.get(kind, 0)} "
                "(cut short or edited: export again)",
            )
    return parsed
