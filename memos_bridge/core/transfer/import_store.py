"""The SQL of an import: insert what is missing, skip what is there, in one transaction.

Merge rules (what makes re-importing a file change nothing):
- a row whose id exists is skipped — whatever its content, the home's copy wins;
- a row that would break a uniqueness rule of its table is skipped as already present: a step with the same
  content key in its episode, a skill of the same name in its namespace, feedback with the same evidence id,
  a turn with the same key in its session;
- a remembered memory with a new id but the same type and text (case and spacing aside) as a live memory of
  the target namespace is skipped, and links to it point at the existing one. Merging it the way
  `memory.remember` does would raise the existing memory's support on every re-import of the same file;
- rows that hang off another row — turns, history (audit and strength events) — come in only with a parent
  inserted now, so the history of a skipped row is not appended to the existing row's history twice;
- a nullable reference to a row that exists nowhere (feedback's step, a trial's episode) is cleared, as the
  database does when that row is deleted; a link whose end is missing is skipped.

Full-text entries are written by the tables' triggers as rows are inserted (`storage/fts.py`); the integer
`rid` the index is keyed by is assigned here, never taken from the file.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from memos_bridge.core.memories import content_hash
from memos_bridge.core.transfer.records import SPECS, Record
from memos_bridge.storage.models import (
    FeedbackRow,
    MemoryLinkRow,
    MemoryRow,
    SkillRow,
    TracePolicyLinkRow,
    TraceRow,
    TurnRow,
)

_CHUNK: Final = 500
VectorKey = tuple[str, str, str]
"""(record kind, id, vector column)."""


def _select_in(db: Session, build: Callable[[list[Any]], Any], values: Iterable[Any]) -> list[Any]:
    """Result rows of `build(chunk)` over `values`, chunked (SQLite caps bound parameters)."""
    ordered = sorted({value for value in values if value is not None})
    rows: list[Any] = []
    for start in range(0, len(ordered), _CHUNK):
        rows.extend(db.execute(build(ordered[start : start + _CHUNK])).all())
    return rows


def present_ids(db: Session, records: Iterable[Record]) -> dict[str, set[str]]:
    """Per record kind, the ids of `records` that the database already holds."""
    wanted: dict[str, set[str]] = defaultdict(set)
    for record in records:
        if record.id is not None:
            wanted[record.kind].add(record.id)
    found: dict[str, set[str]] = defaultdict(set)
    by_kind = {spec.kind: spec for spec in SPECS}
    for kind, ids in wanted.items():
        found[kind] = {row[0] for row in _select_in(db, _id_query(by_kind[kind].model), ids)}
    return found


def _id_query(model: Any) -> Callable[[list[Any]], Select[Any]]:
    def build(chunk: list[Any]) -> Select[Any]:
        return select(model.id).where(model.id.in_(chunk))

    return build


@dataclass
class Outcome:
    imported: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    added: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


class Applier:
    """Inserts the records of one import; `run` in the write transaction."""

    def __init__(self, db: Session, records: list[Record], vectors: Mapping[VectorKey, bytes]) -> None:
        self.db = db
        self.records = records
        self.vectors = vectors
        self.present = present_ids(db, records)
        self.out = Outcome()
        #: a skipped memory's id → the equal memory that was kept (links are pointed there)
        self.alias: dict[str, str] = {}
        self._kept: set[str] = set()
        self._taken: dict[str, set[Any]] = {}
        self._kind = ""
        #: (profile, workspace, type, content hash) → id of the live memory the database holds
        self._live_memories: dict[tuple[Any, ...], str] = {}
        self._deciders: dict[str, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
            "session": self._keyed,
            "episode": self._keyed,
            "turn": self._turn,
            "trace": self._trace,
            "feedback": self._feedback,
            "policy": self._keyed,
            "decision_repair": self._keyed,
            "world_model": self._keyed,
            "skill": self._skill,
            "memory": self._memory,
            "memory_link": self._memory_link,
            "trace_policy_link": self._trace_policy_link,
            "skill_trial": self._skill_trial,
            "audit_event": self._audit_event,
            "strength_event": self._strength_event,
        }

    # ------------------------------------------------------------------ driver

    def run(self) -> Outcome:
        by_kind: dict[str, list[Record]] = defaultdict(list)
        for record in self.records:
            by_kind[record.kind].append(record)
        for spec in SPECS:
            batch = by_kind.get(spec.kind, [])
            if not batch:
                continue
            self._kind = spec.kind
            self._prepare(spec.kind, batch)
            decide = self._deciders[spec.kind]
            for record in batch:
                values = decide(dict(record.values))
                if values is None:
                    self.out.skipped[spec.kind] += 1
                    continue
                for name in spec.vectors:
                    if values.get(name) is None:
                        values[name] = self.vectors.get((spec.kind, str(values["id"]), name))
                self.db.add(spec.model(**values))
                self.out.imported[spec.kind] += 1
                if spec.key is not None:
                    self.out.added[spec.kind].add(values[spec.key])
            self.db.flush()
        return self.out

    def exists(self, kind: str, row_id: str | None) -> bool:
        return row_id is not None and (
            row_id in self.present.get(kind, ()) or row_id in self.out.added[kind] or row_id in self._kept
        )

    def _claim(self, name: str, key: Any) -> bool:
        """Take a uniqueness key for a new row; False when the database or this import holds it already."""
        taken = self._taken[name]
        if key in taken:
            return False
        taken.add(key)
        return True

    # ------------------------------------------------------------------ what the tables already hold

    def _prepare(self, kind: str, batch: list[Record]) -> None:
        """Load the uniqueness keys the database already holds for this batch."""
        db, rows = self.db, [record.values for record in batch]
        taken: set[Any] = set()
        if kind == "turn":
            found = _select_in(
                db,
                lambda chunk: select(TurnRow.session_id, TurnRow.turn_key).where(
                    TurnRow.session_id.in_(chunk), TurnRow.turn_key.is_not(None)
                ),
                (row["session_id"] for row in rows),
            )
            taken = {tuple(row) for row in found}
        elif kind == "trace":
            found = _select_in(
                db,
                lambda chunk: select(TraceRow.episode_id, TraceRow.step_key).where(TraceRow.episode_id.in_(chunk)),
                (row["episode_id"] for row in rows),
            )
            taken = {tuple(row) for row in found}
        elif kind == "feedback":
            found = _select_in(
                db,
                lambda chunk: select(FeedbackRow.evidence_id).where(FeedbackRow.evidence_id.in_(chunk)),
                (row.get("evidence_id") for row in rows),
            )
            taken = {row[0] for row in found}
        elif kind == "skill":
            found = _select_in(
                db,
                lambda chunk: select(SkillRow.owner_agent_kind, SkillRow.owner_profile_id, SkillRow.name).where(
                    SkillRow.name.in_(chunk)
                ),
                (row["name"] for row in rows),
            )
            taken = {tuple(row) for row in found}
        elif kind == "memory":
            found = _select_in(
                db,
                lambda chunk: select(
                    MemoryRow.owner_profile_id,
                    MemoryRow.owner_workspace_id,
                    MemoryRow.memory_type,
                    MemoryRow.content_hash,
                    MemoryRow.id,
                ).where(MemoryRow.content_hash.in_(chunk), MemoryRow.forgotten_at.is_(None)),
                (content_hash(row.get("content", "")) for row in rows),
            )
            self._live_memories = {tuple(row[:4]): row[4] for row in found}
        elif kind == "memory_link":
            found = _select_in(
                db,
                lambda chunk: select(
                    MemoryLinkRow.from_kind,
                    MemoryLinkRow.from_id,
                    MemoryLinkRow.to_kind,
                    MemoryLinkRow.to_id,
                    MemoryLinkRow.relation,
                ).where(MemoryLinkRow.from_id.in_(chunk)),
                (self.alias.get(row["from_id"], row["from_id"]) for row in rows),
            )
            taken = {tuple(row) for row in found}
        elif kind == "trace_policy_link":
            found = _select_in(
                db,
                lambda chunk: select(TracePolicyLinkRow.trace_id, TracePolicyLinkRow.policy_id).where(
                    TracePolicyLinkRow.policy_id.in_(chunk)
                ),
                (row["policy_id"] for row in rows),
            )
            taken = {tuple(row) for row in found}
        self._taken[kind] = taken

    # ------------------------------------------------------------------ one decision per kind

    def _keyed(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if self.exists(self._kind, values["id"]):
            return None
        return values

    def _turn(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if values["episode_id"] not in self.out.added["episode"]:
            return None  # the episode was there already, with its own turns
        if values.get("turn_key") is not None and not self._claim("turn", (values["session_id"], values["turn_key"])):
            return None
        return values

    def _trace(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if self.exists("trace", values["id"]):
            return None
        if not (self.exists("episode", values["episode_id"]) and self.exists("session", values["session_id"])):
            return None
        if not self._claim("trace", (values["episode_id"], values["step_key"])):
            return None
        return values

    def _feedback(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if self.exists("feedback", values["id"]):
            return None
        if values.get("evidence_id") is not None and not self._claim("feedback", values["evidence_id"]):
            return None
        if not self.exists("episode", values.get("episode_id")):
            values["episode_id"] = None
        if not self.exists("trace", values.get("trace_id")):
            values["trace_id"] = None
        return values

    def _skill(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if self.exists("skill", values["id"]):
            return None
        name_key = (
            values.get("owner_agent_kind", "unknown"),
            values.get("owner_profile_id", "default"),
            values["name"],
        )
        if not self._claim("skill", name_key):
            return None
        return values

    def _memory(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if self.exists("memory", values["id"]):
            return None
        if values.get("forgotten_at") is None:
            key = (
                values.get("owner_profile_id", "default"),
                values.get("owner_workspace_id"),
                values.get("memory_type", "fact"),
                content_hash(values.get("content", "")),
            )
            same = self._live_memories.get(key)
            if same is not None:
                self.alias[values["id"]] = same
                self._kept.add(same)
                return None
        return values

    def _memory_link(self, values: dict[str, Any]) -> dict[str, Any] | None:
        values["from_id"] = self.alias.get(values["from_id"], values["from_id"])
        values["to_id"] = self.alias.get(values["to_id"], values["to_id"])
        if not (
            self.exists(values["from_kind"], values["from_id"]) and self.exists(values["to_kind"], values["to_id"])
        ):
            return None
        key = (values["from_kind"], values["from_id"], values["to_kind"], values["to_id"], values["relation"])
        return values if self._claim("memory_link", key) else None

    def _trace_policy_link(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if not (self.exists("trace", values["trace_id"]) and self.exists("policy", values["policy_id"])):
            return None
        return values if self._claim("trace_policy_link", (values["trace_id"], values["policy_id"])) else None

    def _skill_trial(self, values: dict[str, Any]) -> dict[str, Any] | None:
        if self.exists("skill_trial", values["id"]) or not self.exists("skill", values["skill_id"]):
            return None
        if not self.exists("episode", values.get("episode_id")):
            values["episode_id"] = None
        return values

    def _audit_event(self, values: dict[str, Any]) -> dict[str, Any] | None:
        kind, _, row_id = str(values.get("target", "")).partition(":")
        return values if row_id in self.out.added.get(kind, ()) else None

    def _strength_event(self, values: dict[str, Any]) -> dict[str, Any] | None:
        return values if values["target_id"] in self.out.added.get(values["target_kind"], ()) else None
