"""Memories written on purpose, and the user's levers on every memory: remember, update, forget.

A learning memory that cannot be corrected keeps a wrong lesson forever, so every kind (steps, experiences,
world models, skills and the memories written here) can be edited in place and forgotten; both are
recorded in the memory's history (audit events with target `<kind>:<id>`, read by `memory_history.py`).

`memory.remember` stores what a user or an agent asked to be remembered. It is not induced from evidence,
so it does not wait for feedback: it is recalled by the next related `turn.start` (its own section). The
same memory remembered twice merges instead of duplicating: an equal text (after case and whitespace
folding) or a near-equal one (vector cosine ≥ `NEAR_DUPLICATE`, same type) raises support and keeps the
higher importance. Memories belong to a profile and workspace, not to the agent kind that wrote them (a
rule remembered through the CLI applies to every agent of the profile).

Forgetting is reversible: the row is archived and marked forgotten, so every recall path (which reads only
unarchived rows) drops it, lists hide it unless asked, and `memory.restore` brings it back. What was derived
from a forgotten memory (a skill from an experience, a world model citing one, an experience distilled from
a step) is flagged for review instead of silently kept or silently dropped.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from memos_bridge.config import StrengthSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core import strength_rules as rules
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.namespace import default_read_owner, list_scope, owner_for, read_filter, row_scope
from memos_bridge.core.strength import NOT_FOUND
from memos_bridge.ids import new_id
from memos_bridge.rules.sameness import same_statement
from memos_bridge.storage.locks import lock_key
from memos_bridge.storage.models import (
    AuditEventRow,
    MemoryRow,
    PolicyRow,
    SessionRow,
    SkillRow,
    WorldModelRow,
)
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.repos import SEARCHABLE_MODELS
from memos_bridge.storage.vectors import from_blob, to_blob

log = logging.getLogger(__name__)

#: Cosine above which two memories of one type say the same thing (MiniLM: paraphrases score 0.9–0.98,
#: different facts about one subject 0.6–0.85).
NEAR_DUPLICATE: Final = 0.93
DEFAULT_IMPORTANCE: Final = 0.5
#: Kinds whose `status` column is set to archived when forgotten (a skill's status is its lifecycle's).
STATUS_KINDS: Final = frozenset({"policy", "world_model", "memory"})
#: What `memory.update` may change per kind: wire field → column.
EDITABLE: Final[dict[str, dict[str, str]]] = {
    "memory": {"content": "content", "tags": "tags_json", "importance": "importance", "expires_at": "expires_at"},
    "policy": {"content": "procedure", "title": "title", "tags": "tags_json"},
    "world_model": {"content": "body", "title": "title", "tags": "domain_tags_json"},
    "skill": {"content": "invocation_guide", "title": "name"},
    "trace": {"content": "summary", "tags": "tags_json"},
}


def normalise(content: str) -> str:
    """The text two memories are compared by: whitespace collapsed, case folded."""
    return " ".join(content.split()).casefold()


def content_hash(content: str) -> str:
    return hashlib.sha1(normalise(content).encode("utf-8"), usedforsecurity=False).hexdigest()


def memory_scope(owner: OwnerFilter) -> OwnerFilter:
    """Remembered memories are shared by every agent kind of a profile and workspace."""
    return owner.every_agent()


def embed_text(kind: str, row: Any) -> str:
    """What a kind's vector encodes, so an edit re-embeds the same way the row was first embedded."""
    if kind == "memory":
        return str(row.content)
    if kind == "policy":
        return "\n".join(part for part in (row.title, row.trigger, row.procedure) if part)
    if kind == "world_model":
        return f"{row.title}\n{row.body}"
    if kind == "skill":
        return f"{row.name.replace('_', ' ')}\n{row.invocation_guide}"
    return str(row.summary)


def vector_field(kind: str) -> str:
    return "vec_summary" if kind == "trace" else "vec"


def memory_status(row: MemoryRow) -> str:
    if row.forgotten_at is not None:
        return "forgotten"
    return "archived" if row.archived_at is not None or row.status == "archived" else "active"


def memory_dto(row: MemoryRow) -> dto.RememberedMemoryDTO:
    return dto.RememberedMemoryDTO(
        id=row.id,
        type=row.memory_type,
        content=row.content,
        tags=list(row.tags_json or []),
        importance=row.importance,
        support=row.support,
        source=row.source,
        status=memory_status(row),
        strength=row.strength,
        pinned=row.pinned,
        protected=row.protected,
        expires_at=row.expires_at,
        session_id=row.session_id,
        access_count=row.access_count,
        last_accessed_at=row.last_accessed_at,
        archived_at=row.archived_at,
        forgotten_at=row.forgotten_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def audit(db: Session, kind: str, row_id: str, event: str, ts: int, actor: str, **detail: Any) -> None:
    """One event of a memory's history."""
    db.add(AuditEventRow(ts=ts, actor=actor, kind=event, target=f"{kind}:{row_id}", detail_json=detail))


def _not_found(kind: str, memory_id: str) -> MemosError:
    code = NOT_FOUND.get(kind, ErrorCode.NOT_FOUND)
    return MemosError(code, f"{kind} not found: {memory_id}", {"id": memory_id, "kind": kind})


def load_row(db: Session, kind: str, memory_id: str, owner: OwnerFilter | None) -> Any:
    """The row of `kind`, or its kind's not-found error when it does not exist or `owner` cannot see it."""
    model = SEARCHABLE_MODELS[kind]
    row = db.scalar(select(model).where(model.id == memory_id))
    if kind == "memory" and owner is not None:
        owner = memory_scope(owner)
    if row is None or (owner is not None and not owner.can_see(row)):
        raise _not_found(kind, memory_id)
    return row


@dataclass(frozen=True)
class _Remembered:
    row: MemoryRow
    merged: bool


class MemoryService:
    """memory.remember / get_memory / list_memories / update / forget, and the expiry sweep."""

    def __init__(self, ctx: LearningContext) -> None:
        self.ctx = ctx

    @property
    def _strength(self) -> StrengthSettings:
        return self.ctx.settings.strength

    async def _embed(self, text: str) -> bytes | None:
        """The document vector, or None when the embedder is down: keyword search still finds the memory."""
        try:
            return to_blob((await self.ctx.embedder.embed([text], role="document"))[0])
        except MemosError as exc:
            log.warning("memory vector unavailable (%s): found by keywords only until edited", exc.code.value)
            return None

    # ------------------------------------------------------------------ remember

    async def remember(self, params: dto.MemoryRememberParams) -> dto.MemoryRememberResult:
        now = self.ctx.clock()
        owner = await self.ctx.db.read(lambda db: _writer_owner(db, params))
        vec = await self._embed(params.content)
        near: list[str] = []
        if vec is not None:
            query = from_blob(vec, self.ctx.vectors.dim)
            hits = await self.ctx.vectors.search("memory", "vec", query, 5, memory_scope(owner))
            near = [memory_id for memory_id, score in hits if score >= NEAR_DUPLICATE]
        expires = (
            params.expires_at if params.expires_at is not None else (now + params.ttl_ms if params.ttl_ms else None)
        )
        result = await self.ctx.db.write(lambda db: self._remember_sync(db, params, owner, vec, near, expires, now))
        self.ctx.vectors.upsert("memory", result.row)
        return dto.MemoryRememberResult(id=result.row.id, merged=result.merged)

    def _remember_sync(
        self,
        db: Session,
        params: dto.MemoryRememberParams,
        owner: OwnerFilter,
        vec: bytes | None,
        near: list[str],
        expires: int | None,
        now: int,
    ) -> _Remembered:
        digest = content_hash(params.content)
        scope = memory_scope(owner)
        # several services on one database: the same statement remembered through two of them merges into one
        lock_key(db, f"memory.remember:{scope.profile_id}:{scope.workspace_id}:{params.type}:{digest}")
        stmt = select(MemoryRow).where(
            scope.clause(MemoryRow),
            MemoryRow.memory_type == params.type,
            MemoryRow.forgotten_at.is_(None),
        )
        same = db.scalars(stmt.where(MemoryRow.content_hash == digest).limit(1)).first()
        if same is None and near:  # close in meaning and making the same claim (not its opposite)
            close = db.scalars(stmt.where(MemoryRow.id.in_(near)))
            same = next((row for row in close if same_statement(row.content, params.content)), None)
        actor = "user" if params.source == "user" else "host"
        if same is not None:
            _merge(same, params, expires, now, self._strength)
            audit(db, "memory", same.id, "merged", now, actor, content=params.content, importance=same.importance)
            return _Remembered(same, True)
        user = params.source == "user"
        row = MemoryRow(
            id=new_id("memory"),
            memory_type=params.type,
            content=params.content,
            content_hash=digest,
            tags_json=list(dict.fromkeys(params.tags)),
            importance=params.importance if params.importance is not None else DEFAULT_IMPORTANCE,
            support=1,
            source=params.source or "agent",
            status="active",
            expires_at=expires,
            session_id=params.session_id,
            vec=vec,
            pinned=params.pinned,
            protected=user or params.pinned,  # the user's own words are not pushed out by failure evidence
            strength=rules.lift_to_floor(rules.NEUTRAL_STRENGTH, self._strength),
            last_accessed_at=now,
            created_at=now,
            updated_at=now,
            **owner.as_columns(),
        )
        db.add(row)
        db.flush()
        audit(
            db,
            "memory",
            row.id,
            "created",
            now,
            actor,
            type=params.type,
            source=row.source,
            sessionId=params.session_id,
        )
        return _Remembered(row, False)

    # ------------------------------------------------------------------ read

    async def get_memory(self, params: dto.GetByIdParams) -> dto.RememberedMemoryDTO | None:
        def work(db: Session) -> dto.RememberedMemoryDTO | None:
            owner = row_scope(db, params.namespace, session_id=params.session_id)
            row = db.scalar(select(MemoryRow).where(MemoryRow.id == params.id))
            if row is None or (owner is not None and not memory_scope(owner).can_see(row)):
                return None
            return memory_dto(row)

        return await self.ctx.db.read(work)

    async def list_memories(self, params: dto.ListMemoriesParams) -> dto.MemoriesResult:
        def work(db: Session) -> dto.MemoriesResult:
            owner = list_scope(db, params.namespace, session_id=params.session_id)
            stmt = select(MemoryRow)
            if owner is not None:
                stmt = stmt.where(memory_scope(owner).clause(MemoryRow))
            if params.type is not None:
                stmt = stmt.where(MemoryRow.memory_type == params.type)
            if params.status == "forgotten":
                stmt = stmt.where(MemoryRow.forgotten_at.is_not(None))
            elif params.status == "active":
                stmt = stmt.where(MemoryRow.archived_at.is_(None), MemoryRow.status == "active")
            elif params.status == "archived":
                stmt = stmt.where(MemoryRow.archived_at.is_not(None), MemoryRow.forgotten_at.is_(None))
            elif not params.include_forgotten:
                stmt = stmt.where(MemoryRow.forgotten_at.is_(None))
            stmt = stmt.order_by(MemoryRow.updated_at.desc(), MemoryRow.rid.desc())
            rows = db.scalars(stmt.offset(params.offset).limit(params.limit))
            return dto.MemoriesResult(memories=[memory_dto(row) for row in rows])

        return await self.ctx.db.read(work)

    # ------------------------------------------------------------------ update

    async def update(self, params: dto.MemoryUpdateParams) -> tuple[str, list[str]]:
        """Apply the edit; returns (id, changed fields). The caller reads the updated DTO back."""
        editable = EDITABLE[params.kind]
        asked = {
            name: getattr(params, name)
            for name in ("content", "title", "tags", "importance", "expires_at")
            if getattr(params, name) is not None
        }
        refused = sorted(set(asked) - set(editable))
        if refused:
            raise MemosError(
                ErrorCode.INVALID_ARGUMENT,
                f"a {params.kind} has no {', '.join(refused)} to update (it has: {', '.join(sorted(editable))})",
                {"kind": params.kind, "fields": refused},
            )
        owner = read_filter(params.namespace)
        now = self.ctx.clock()
        vec: bytes | None = None
        if "content" in asked or "title" in asked:
            preview = await self.ctx.db.read(lambda db: _edited_text(db, params, owner, editable, asked))
            vec = await self._embed(preview)

        def work(db: Session) -> tuple[Any, list[str]]:
            row = load_row(db, params.kind, params.id, owner)
            changes: dict[str, dict[str, Any]] = {}
            for name, value in asked.items():
                column = editable[name]
                if name == "expires_at" and value == 0:
                    value = None
                if name == "tags":
                    value = list(dict.fromkeys(value))
                old = getattr(row, column)
                if old != value:
                    changes[name] = {"old": old, "new": value}
                    setattr(row, column, value)
            if not changes:
                return row, []
            if params.kind == "memory" and "content" in changes:
                row.content_hash = content_hash(row.content)
            if vec is not None and ("content" in changes or "title" in changes):
                setattr(row, vector_field(params.kind), vec)
            if hasattr(row, "edited_at"):
                row.edited_at = now
            if hasattr(row, "updated_at"):
                row.updated_at = now
            audit(db, params.kind, row.id, "updated", now, "host", changes=changes)
            return row, sorted(changes)

        row, changed = await self.ctx.db.write(work)
        if changed:
            self.ctx.vectors.upsert(params.kind, row)
        return row.id, changed

    # ------------------------------------------------------------------ forget

    async def forget(self, params: dto.MemoryForgetParams) -> dto.MemoryForgetResult:
        owner = read_filter(params.namespace)
        now = self.ctx.clock()

        def work(db: Session) -> list[str]:
            row = load_row(db, params.kind, params.id, owner)
            if row.forgotten_at is not None:
                return []  # forgetting twice changes nothing (a retry is safe)
            row.forgotten_at = now
            if row.archived_at is None:
                row.archived_at = now
            if params.kind in STATUS_KINDS:
                row.status = "archived"
            audit(db, params.kind, row.id, "forgotten", now, "host", reason=params.reason)
            flagged = _flag_derived(db, params.kind, row.id, now)
            return flagged

        flagged = await self.ctx.db.write(work)
        self.ctx.vectors.remove(params.kind, params.id)
        return dto.MemoryForgetResult(flagged=flagged)

    # ------------------------------------------------------------------ expiry

    async def expire(self, now: int | None = None) -> int:
        """Archive the memories whose `expiresAt` has passed (recall already skips them; this makes their
        status say so and keeps them restorable). Returns how many were archived."""
        at = now if now is not None else self.ctx.clock()

        def work(db: Session) -> list[MemoryRow]:
            rows = list(
                db.scalars(
                    select(MemoryRow).where(
                        MemoryRow.expires_at.is_not(None),
                        MemoryRow.expires_at <= at,
                        MemoryRow.archived_at.is_(None),
                        MemoryRow.pinned.is_(False),
                    )
                )
            )
            for row in rows:
                row.archived_at = at
                row.status = "archived"
                audit(db, "memory", row.id, "expired", at, "service:expiry", expiresAt=row.expires_at)
            return rows

        rows = await self.ctx.db.write(work)
        for row in rows:
            self.ctx.vectors.remove("memory", row.id)
        return len(rows)


def _writer_owner(db: Session, params: dto.MemoryRememberParams) -> OwnerFilter:
    """The namespace a new memory is written in: its session's, else the one named, else the default one."""
    if params.session_id:
        session = db.get(SessionRow, params.session_id)
        if session is None:
            raise MemosError(
                ErrorCode.SESSION_NOT_FOUND, f"session not found: {params.session_id}", {"sessionId": params.session_id}
            )
        return OwnerFilter(session.owner_agent_kind, session.owner_profile_id, session.owner_workspace_id)
    if params.namespace is None and params.agent is None:
        default = default_read_owner()
        return OwnerFilter("unknown", default.profile_id, default.workspace_id)
    return owner_for(params.agent or "unknown", params.namespace)


def _merge(
    row: MemoryRow, params: dto.MemoryRememberParams, expires: int | None, now: int, settings: StrengthSettings
) -> None:
    """Fold a repeated remember into the stored memory: more support, the higher importance, the union of
    tags, the later expiry (none wins: a repeated permanent statement makes it permanent), revived if it
    had been archived."""
    row.support += 1
    if params.importance is not None:
        row.importance = max(row.importance, params.importance)
    row.tags_json = list(dict.fromkeys([*(row.tags_json or []), *params.tags]))
    row.expires_at = None if expires is None or row.expires_at is None else max(row.expires_at, expires)
    if params.source == "user":
        row.source = "user"
        row.protected = True
    if params.pinned:
        row.pinned = row.protected = True
    if row.archived_at is not None:
        row.archived_at = None
        row.status = "active"
        row.strength = rules.lift_to_floor(row.strength, settings)
    row.last_accessed_at = now
    row.updated_at = now


def _edited_text(
    db: Session,
    params: dto.MemoryUpdateParams,
    owner: OwnerFilter | None,
    editable: dict[str, str],
    asked: dict[str, Any],
) -> str:
    """The text the row's vector will encode after the edit (read before the write, embedded outside it)."""
    row = load_row(db, params.kind, params.id, owner)

    class _Edited:
        def __getattr__(self, name: str) -> Any:
            for wire, column in editable.items():
                if column == name and wire in asked:
                    return asked[wire]
            return getattr(row, name)

    return embed_text(params.kind, _Edited())


def _flag_derived(db: Session, kind: str, memory_id: str, now: int) -> list[str]:
    """Mark what rests on a forgotten memory for review: experiences distilled from a forgotten step,
    skills and world models built from a forgotten experience. They stay recallable (they may rest on
    other evidence too); the flag and their history say what to check."""
    derived: list[tuple[str, Any]] = []
    if kind == "trace":
        for policy in db.scalars(select(PolicyRow).where(PolicyRow.forgotten_at.is_(None))):
            if memory_id in (policy.source_trace_ids_json or []):
                derived.append(("policy", policy))
    if kind == "policy":
        for skill in db.scalars(select(SkillRow).where(SkillRow.forgotten_at.is_(None))):
            if memory_id in (skill.source_policies_json or []):
                derived.append(("skill", skill))
        for world in db.scalars(select(WorldModelRow).where(WorldModelRow.forgotten_at.is_(None))):
            if memory_id in (world.policy_ids_json or []):
                derived.append(("world_model", world))
    flagged: list[str] = []
    for derived_kind, row in derived:
        meta = dict(getattr(row, "meta_json", None) or {})
        review = [*meta.get("review", []), {"forgotten": memory_id, "kind": kind, "at": now}]
        if hasattr(row, "meta_json"):
            row.meta_json = {**meta, "review": review}
        audit(db, derived_kind, row.id, "flagged", now, "service:forget", source=f"{kind}:{memory_id}")
        flagged.append(row.id)
    return flagged
