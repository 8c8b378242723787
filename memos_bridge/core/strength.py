"""Evidence-typed strength, forgetting, pinning and links: the storage side of `strength_rules`.

* **Access** — what retrieval returns is counted (`access_count`, `last_accessed_at`) by a write queued
  behind the reply (`access_write`), never by raising strength. A recalled "similar past task" counts as an
  access of every step of that task.
* **Evidence** (`memory.reinforce`) — one `strength_events` row per (memory, evidenceId); a retry finds it
  and changes nothing. `user_confirmed` also protects the memory (the user approved it).
* **Forgetting** (`memory.decay`, and `run_decay_loop` every `decay_interval_s`) — batched bulk updates: idle
  memories are weakened, long-idle ones archived and dropped from the vector indexes (keyword search already
  skips archived rows). Nothing is deleted. Activity = creation (a trace's time, a learned memory's last
  update), access, evidence, and for skills their last use. Decay steps are not written to
  `strength_events` one row per memory (a daily run over every idle trace would grow it without bound; a
  step is a pure function of time); each run is recorded in `kv` (`strength.decay.last_run`), and pin,
  unpin and restore in `audit_events`.
* **Pin / protect** — pinned memories are exempt from decay and archiving. Protection (failures cannot push a
  memory under the recall floor) is set for: preference experiences built from the user's own explicit
  feedback (`strength_stage`, user-authored), `user_confirmed` evidence and pinning (user-approved). Unpinning
  keeps the protection: taking a memory off the pin list is not withdrawing the approval.
* **Restore** — makes a memory recallable again: clears the archive mark, returns a policy or world model
  archived by its lifecycle to candidate / active (skills have `skill.restore`), lifts strength to the recall
  floor, and counts as an access so the next decay run does not archive it again at once.
* **Links** (`memory.link`) — typed edges in `memory_links`, idempotent; `supersedes` may not form a loop.
  Retrieval follows `supersedes` (`retrieval/engine.py`, `strength_rules.resolve_supersedes`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final

import anyio
from sqlalchemy import ColumnElement, Text, and_, case, cast, insert, or_, select, update
from sqlalchemy.orm import Session

from memos_bridge.config import StrengthSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core import strength_rules as rules
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.namespace import read_filter
from memos_bridge.storage import hotpath
from memos_bridge.storage.locks import AdvisoryLock, lock_rows, write_first_wins
from memos_bridge.storage.models import (
    AuditEventRow,
    EpisodeRow,
    FeedbackRow,
    KvRow,
    MemoryLinkRow,
    MemoryRow,
    PolicyRow,
    SkillRow,
    StrengthEventRow,
    TraceRow,
)
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.storage.repos import SEARCHABLE_MODELS

log = logging.getLogger(__name__)

Write = Callable[[Session], None]

KINDS: Final = ("trace", "policy", "skill", "world_model", "memory")
NOT_FOUND: Final[dict[str, ErrorCode]] = {
    "trace": ErrorCode.TRACE_NOT_FOUND,
    "policy": ErrorCode.POLICY_NOT_FOUND,
    "world_model": ErrorCode.WORLD_MODEL_NOT_FOUND,
    "skill": ErrorCode.SKILL_NOT_FOUND,
    "memory": ErrorCode.MEMORY_NOT_FOUND,
}
#: Retrieval hit kinds (`RetrievalHitDTO.refKind`) → memory kinds; "episode" hits are counted on their steps.
HIT_KINDS: Final[dict[str, str]] = {
    "trace": "trace",
    "experience": "policy",
    "skill": "skill",
    "world-model": "world_model",
    "memory": "memory",
}
#: Lifecycle status a restored memory returns to, for the kinds whose status `memory.restore` owns.
RESTORED_STATUS: Final[dict[str, str]] = {"policy": "candidate", "world_model": "active", "memory": "active"}
LAST_RUN_KEY: Final = "strength.decay.last_run"
DECAY_LOCK: Final = "memos_bridge.strength.decay"  # the database-wide lock of the scheduled decay run
LOOP_MIN_DELAY_S: Final = 30.0  # after start, let warm-up and recovery go first
LOOP_RETRY_S: Final = 600.0
MAX_CYCLE_SCAN: Final = 1000


def _not_found(kind: str, memory_id: str) -> MemosError:
    return MemosError(NOT_FOUND[kind], f"{kind} not found: {memory_id}", {"id": memory_id, "kind": kind})


def _memory(db: Session, kind: str, memory_id: str, owner: OwnerFilter | None) -> Any:
    """The memory row, or the kind's not-found error when it does not exist or the caller cannot see it."""
    model = SEARCHABLE_MODELS[kind]
    row = db.scalar(select(model).where(model.id == memory_id))
    if row is None or (owner is not None and not owner.can_see(row)):
        raise _not_found(kind, memory_id)
    return row


def _memory_by_id(db: Session, memory_id: str, owner: OwnerFilter | None) -> tuple[str, Any]:
    kind = rules.kind_of_id(memory_id)
    if kind is None:
        raise MemosError(ErrorCode.NOT_FOUND, f"not a memory id: {memory_id}", {"id": memory_id})
    return kind, _memory(db, kind, memory_id, owner)


def _audit(db: Session, kind: str, row: Any, action: str, now: int, **detail: Any) -> None:
    db.add(AuditEventRow(ts=now, actor="rpc", kind=action, target=f"{kind}:{row.id}", detail_json=detail))


def _archive_if_refuted(db: Session, kind: str, row: Any, after: float, now: int, settings: StrengthSettings) -> bool:
    """Archive a memory that failure evidence has just pushed under the recall floor, so its status says what
    recall already does (it is no longer recalled) and its history says why. Protected memories never get
    here (failures stop at the floor for them); `memory.restore` brings it back at the floor. True when it
    was archived now."""
    if row.archived_at is not None or rules.is_recallable(after, settings):
        return False
    row.archived_at = now
    if kind == "memory":  # its status is not a lifecycle's: it says archived whenever it is
        row.status = "archived"
    db.add(
        AuditEventRow(
            ts=now,
            actor="service:strength",
            kind="archived",
            target=f"{kind}:{row.id}",
            detail_json={"reason": "failures", "strength": round(after, 4), "recallFloor": settings.recall_floor},
        )
    )
    return True


def _restore_row(kind: str, row: Any, now: int, settings: StrengthSettings) -> bool:
    """Make `row` recallable again; True when its recall visibility changed (vector index to update).

    A skill archived by its reliability lifecycle is that lifecycle's to restore (`skill.restore` also
    resets its reliability); clearing only its archive mark would break the status/archived_at pairing.
    """
    if kind not in RESTORED_STATUS and getattr(row, "status", None) == "archived":
        raise MemosError(
            ErrorCode.CONFLICT,
            f"{kind} {row.id} was archived by its lifecycle: restore it with skill.restore first",
            {"id": row.id, "kind": kind},
        )
    changed = row.archived_at is not None or not rules.is_recallable(row.strength, settings)
    row.archived_at = None
    row.forgotten_at = None  # restoring a forgotten memory brings it back everywhere
    if kind == "memory" and row.expires_at is not None and row.expires_at <= now:
        row.expires_at = None  # restored on purpose after it expired: it is no longer time-bound
    status = RESTORED_STATUS.get(kind)
    if status is not None and row.status == "archived":
        row.status = status
        changed = True
    row.strength = rules.lift_to_floor(row.strength, settings)
    if changed:
        row.last_accessed_at = now  # a fresh start: the next decay run must not archive it again at once
    return changed


# ------------------------------------------------------------------------------------------ decay queries


def _live(model: Any) -> ColumnElement[bool]:
    """Rows the forgetting job may touch: not pinned, not archived (by it or by a lifecycle)."""
    clauses = [model.pinned.is_(False), model.archived_at.is_(None)]
    if hasattr(model, "status"):
        clauses.append(model.status != "archived")
    return and_(*clauses)


def _idle(model: Any, cutoff: int) -> ColumnElement[bool]:
    """No creation, learning update, access, evidence (or skill use) after `cutoff`."""
    born = model.ts if model is TraceRow else model.updated_at
    touches = [model.last_accessed_at, model.last_evidence_at]
    if model is SkillRow:
        touches.append(SkillRow.last_used_at)
    return and_(born <= cutoff, *(or_(touch.is_(None), touch <= cutoff) for touch in touches))


def _archive_batch(db: Session, model: Any, cutoff: int, after: int, now: int, limit: int) -> list[tuple[int, str]]:
    rows = [
        (rid, row_id)
        for rid, row_id in db.execute(
            select(model.rid, model.id)
            .where(_live(model), _idle(model, cutoff), model.rid > after)
            .order_by(model.rid)
            .limit(limit)
        )
    ]
    if rows:
        values: dict[str, Any] = {"archived_at": now}
        if model is MemoryRow:  # its status is not a lifecycle's: it says archived whenever it is
            values["status"] = "archived"
        db.execute(
            update(model)
            .where(model.rid.in_([rid for rid, _ in rows]))
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        _history_rows(db, model, [row_id for _, row_id in rows], "archived", now, {"reason": "idle"})
    return rows


def _history_rows(db: Session, model: Any, ids: list[str], event: str, now: int, detail: dict[str, Any]) -> None:
    """One history (audit) event per memory of a batch, in one INSERT."""
    kind = next(k for k, m in SEARCHABLE_MODELS.items() if m is model)
    db.execute(
        insert(AuditEventRow),
        [
            {"ts": now, "actor": "service:decay", "kind": event, "target": f"{kind}:{row_id}", "detail_json": detail}
            for row_id in ids
        ],
    )


def _decay_batch(
    db: Session, model: Any, cutoff: int, after: int, settings: StrengthSettings, limit: int, now: int
) -> list[int]:
    floor = settings.recall_floor
    rids = list(
        db.scalars(
            select(model.rid)
            .where(_live(model), _idle(model, cutoff), model.strength > floor, model.rid > after)
            .order_by(model.rid)
            .limit(limit)
        )
    )
    if rids:
        weakened = model.strength * settings.decay_factor
        db.execute(
            update(model)
            .where(model.rid.in_(rids))
            .values(strength=case((weakened < floor, floor), else_=weakened))
            .execution_options(synchronize_session=False)
        )
        ids = list(db.scalars(select(model.id).where(model.rid.in_(rids))))
        _history_rows(db, model, ids, "decayed", now, {"factor": settings.decay_factor})
    return rids


def _last_run(db: Session) -> int | None:
    row = db.get(KvRow, LAST_RUN_KEY)
    value = row.value_json if row is not None else None
    return int(value["at"]) if isinstance(value, dict) and isinstance(value.get("at"), int) else None


def _set_last_run(db: Session, value: dict[str, Any]) -> None:
    row = db.get(KvRow, LAST_RUN_KEY)
    if row is None:
        db.add(KvRow(key=LAST_RUN_KEY, value_json=value, updated_at=value["at"]))
    else:
        row.value_json = value
        row.updated_at = value["at"]


# ------------------------------------------------------------------------------------------ links


def _superseded_by(db: Session, memory_id: str) -> list[str]:
    stmt = select(MemoryLinkRow.from_id).where(MemoryLinkRow.relation == "supersedes", MemoryLinkRow.to_id == memory_id)
    return list(db.scalars(stmt))


def _supersedes_cycle(db: Session, new: str, old: str) -> bool:
    """Does `old` already (transitively) supersede `new`? Then `new supersedes old` would close a loop."""
    seen: set[str] = set()
    stack = [new]
    while stack and len(seen) < MAX_CYCLE_SCAN:
        node = stack.pop()
        for successor in _superseded_by(db, node):
            if successor == old:
                return True
            if successor not in seen:
                seen.add(successor)
                stack.append(successor)
    return False


class StrengthService:
    """The wire methods of strength and forgetting, the access recorder and the periodic decay job."""

    def __init__(self, ctx: LearningContext, *, quiet: Callable[[], Awaitable[None]] | None = None) -> None:
        self.ctx = ctx
        self._quiet = quiet  # e.g. the learning gate's wait_quiet: the decay job yields to turns
        self._decay_lock = anyio.Lock()
        #: Archives remembered memories past their expiry as of a time; each decay run calls it first.
        self.expire: Callable[[int], Awaitable[int]] | None = None

    @property
    def settings(self) -> StrengthSettings:
        return self.ctx.settings.strength

    # ------------------------------------------------------------ recall

    def access_write(self, hits: Sequence[dto.RetrievalHitDTO]) -> Write | None:
        """The deferred write that counts one access of every returned memory (None when nothing was)."""
        ids: dict[str, list[str]] = {}
        episodes: list[str] = []
        for hit in hits:
            if hit.ref_kind == "episode":
                episodes.append(hit.ref_id)
            elif hit.ref_kind in HIT_KINDS:
                ids.setdefault(HIT_KINDS[hit.ref_kind], []).append(hit.ref_id)
        if not ids and not episodes:
            return None
        now = self.ctx.clock()

        def write(db: Session) -> None:
            hotpath.count_access(db, ids, episodes, now)

        return write

    # ------------------------------------------------------------ evidence

    async def reinforce(self, params: dto.MemoryReinforceParams) -> dto.MemoryReinforceResult:
        owner = read_filter(params.namespace)
        now = self.ctx.clock()
        settings = self.settings

        def work(db: Session) -> tuple[dto.MemoryReinforceResult, bool]:
            if params.kind in SEARCHABLE_MODELS:  # another service's evidence waits: strength is read, then set
                lock_rows(db, SEARCHABLE_MODELS[params.kind], [params.id])
            row = _memory(db, params.kind, params.id, owner)
            seen = db.scalar(
                select(StrengthEventRow.id).where(
                    StrengthEventRow.target_kind == params.kind,
                    StrengthEventRow.target_id == row.id,
                    StrengthEventRow.evidence_id == params.evidence_id,
                )
            )
            if seen is not None:
                return dto.MemoryReinforceResult(id=row.id, strength=row.strength, applied=False), False
            before = row.strength
            if params.evidence == "user_confirmed":
                row.protected = True  # the user approved it: failures may no longer push it out of recall
            after = rules.apply_evidence(before, params.evidence, protected=row.protected, settings=settings)
            if params.evidence == "user_confirmed":
                after = rules.lift_to_floor(after, settings)  # protected memories stay recallable
            row.strength = after
            left = _archive_if_refuted(db, params.kind, row, after, now, settings)
            if params.evidence == "self_report":
                row.access_count += 1  # the agent's claim is an access, not evidence
                row.last_accessed_at = now
            else:
                row.last_evidence_at = now
            db.add(
                StrengthEventRow(
                    target_kind=params.kind,
                    target_id=row.id,
                    evidence=params.evidence,
                    evidence_id=params.evidence_id,
                    delta=after - before,
                    strength_after=after,
                    ts=now,
                    owner_agent_kind=row.owner_agent_kind,
                    owner_profile_id=row.owner_profile_id,
                    owner_workspace_id=row.owner_workspace_id,
                )
            )
            return dto.MemoryReinforceResult(id=row.id, strength=after, applied=True), left

        # A retry through another service may race this one: the loser finds the winner's event (applied=False).
        result, left = await write_first_wins(self.ctx.db, work, what="memory.reinforce")
        if left:
            self.ctx.vectors.remove(params.kind, params.id)
        return result

    # ------------------------------------------------------------ pin, unpin, restore

    async def _change(self, params: dto.MemoryRefParams, action: str, change: Callable[[Any, int], bool]) -> None:
        """Apply `change(row, now)` (True = recall visibility changed) and keep the vector index current."""
        owner = read_filter(params.namespace)
        now = self.ctx.clock()

        def work(db: Session) -> tuple[Any, bool]:
            row = _memory(db, params.kind, params.id, owner)
            changed = change(row, now)
            _audit(db, params.kind, row, action, now, changed=changed)
            return row, changed

        row, changed = await self.ctx.db.write(work)
        if changed:
            self.ctx.vectors.upsert(params.kind, row)

    async def pin(self, params: dto.MemoryRefParams) -> dto.OkResult:
        settings = self.settings

        def change(row: Any, now: int) -> bool:
            changed = _restore_row(params.kind, row, now, settings)  # a pinned memory is never archived
            row.pinned = True
            row.protected = True  # pinning is the user's approval
            return changed

        await self._change(params, "memory.pin", change)
        return dto.OkResult()

    async def unpin(self, params: dto.MemoryRefParams) -> dto.OkResult:
        def change(row: Any, now: int) -> bool:
            if row.pinned:
                row.pinned = False
                row.last_accessed_at = now  # it ages from now on, not from before it was pinned
            return False

        await self._change(params, "memory.unpin", change)
        return dto.OkResult()

    async def restore(self, params: dto.MemoryRefParams) -> dto.OkResult:
        settings = self.settings
        await self._change(params, "memory.restore", lambda row, now: _restore_row(params.kind, row, now, settings))
        return dto.OkResult()

    # ------------------------------------------------------------ links

    async def link(self, params: dto.MemoryLinkParams) -> dto.OkResult:
        owner = read_filter(params.namespace)
        now = self.ctx.clock()

        def work(db: Session) -> None:
            if params.from_id == params.to_id:
                raise MemosError(
                    ErrorCode.INVALID_ARGUMENT, "a memory cannot be linked to itself", {"id": params.to_id}
                )
            from_kind, source = _memory_by_id(db, params.from_id, owner)
            to_kind, _ = _memory_by_id(db, params.to_id, owner)
            existing = db.scalar(
                select(MemoryLinkRow.id).where(
                    MemoryLinkRow.from_kind == from_kind,
                    MemoryLinkRow.from_id == params.from_id,
                    MemoryLinkRow.to_kind == to_kind,
                    MemoryLinkRow.to_id == params.to_id,
                    MemoryLinkRow.relation == params.relation,
                )
            )
            if existing is not None:
                return
            if params.relation == "supersedes" and _supersedes_cycle(db, params.from_id, params.to_id):
                raise MemosError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{params.to_id} already supersedes {params.from_id}: the link would form a loop",
                    {"fromId": params.from_id, "toId": params.to_id},
                )
            db.add(
                MemoryLinkRow(
                    from_kind=from_kind,
                    from_id=params.from_id,
                    to_kind=to_kind,
                    to_id=params.to_id,
                    relation=params.relation,
                    created_at=now,
                    owner_agent_kind=source.owner_agent_kind,
                    owner_profile_id=source.owner_profile_id,
                    owner_workspace_id=source.owner_workspace_id,
                )
            )

        await self.ctx.db.write(work)
        return dto.OkResult()

    # ------------------------------------------------------------ decay

    async def decay(self, params: dto.MemoryDecayParams) -> dto.MemoryDecayResult:
        """One run of the forgetting job as of `params.now` (archive first: archived rows do not decay)."""
        now = params.now if params.now is not None else self.ctx.clock()
        settings = self.settings
        expired = await self.expire(now) if self.expire is not None else 0
        archive_cutoff = rules.idle_cutoff(now, settings.archive_days)
        decay_cutoff = rules.idle_cutoff(now, settings.idle_days)
        archived = decayed = 0
        async with self._decay_lock:
            for kind in KINDS:
                model = SEARCHABLE_MODELS[kind]
                after = 0
                while True:
                    await self._yield()
                    rows = await self.ctx.db.write(
                        partial(
                            _archive_batch,
                            model=model,
                            cutoff=archive_cutoff,
                            after=after,
                            now=now,
                            limit=settings.decay_batch,
                        )
                    )
                    for _, row_id in rows:
                        self.ctx.vectors.remove(kind, row_id)
                    archived += len(rows)
                    if len(rows) < settings.decay_batch:
                        break
                    after = rows[-1][0]
                after = 0
                while True:
                    await self._yield()
                    rids = await self.ctx.db.write(
                        partial(
                            _decay_batch,
                            model=model,
                            cutoff=decay_cutoff,
                            after=after,
                            settings=settings,
                            limit=settings.decay_batch,
                            now=now,
                        )
                    )
                    decayed += len(rids)
                    if len(rids) < settings.decay_batch:
                        break
                    after = rids[-1]
            ran_at = self.ctx.clock()
            record = {"at": ran_at, "now": now, "decayed": decayed, "archived": archived}
            await self.ctx.db.write(partial(_set_last_run, value=record))
        log.info("decay run as of %d: %d decayed, %d archived, %d expired", now, decayed, archived, expired)
        return dto.MemoryDecayResult(decayed=decayed, archived=archived, expired=expired)

    async def _yield(self) -> None:
        if self._quiet is not None:
            await self._quiet()

    async def run_decay_loop(self) -> None:
        """Run the decay job every `decay_interval_s` of wall time (start in the server's task group).

        The last run is persisted, so short-lived processes (one stdio service per host session) still decay
        on schedule; a fresh data home starts its first interval now instead of decaying at once. Services
        that share one database all run this loop, and each run happens in one of them (`_scheduled_run`).
        """
        interval_ms = int(self.settings.decay_interval_s * 1000)
        if interval_ms <= 0:
            return
        while True:
            last = await self.ctx.db.read(_last_run)
            if last is None:
                last = self.ctx.clock()
                start = {"at": last, "now": last, "decayed": 0, "archived": 0}
                await write_first_wins(self.ctx.db, partial(_set_last_run, value=start), what="decay schedule")
            wait_s = (last + interval_ms - self.ctx.clock()) / 1000
            await anyio.sleep(max(wait_s, min(LOOP_MIN_DELAY_S, interval_ms / 1000)))
            try:
                await self._scheduled_run(interval_ms)
            except Exception:
                log.exception("decay job failed; retrying later")
                await anyio.sleep(min(LOOP_RETRY_S, interval_ms / 1000))

    async def _scheduled_run(self, interval_ms: int) -> bool:
        """One scheduled decay run, unless another service of a shared database is running it or has run it
        since this one looked: the run takes a database-wide lock first (PostgreSQL; always granted on
        SQLite), skips when it is taken, and checks the last run again while holding it. Two services waking
        at the same moment must not both weaken every idle memory. Returns whether it ran."""
        lock = AdvisoryLock(self.ctx.db.engine, DECAY_LOCK)
        if not await anyio.to_thread.run_sync(lock.try_acquire):
            log.info("decay run skipped: another service sharing the database is running it")
            return False
        try:
            last = await self.ctx.db.read(_last_run)
            if last is not None and last + interval_ms > self.ctx.clock():
                log.info("decay run skipped: another service sharing the database has just run it")
                return False
            await self.decay(dto.MemoryDecayParams())
            return True
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lock.release)


# ------------------------------------------------------------------------------------------ learning stage


async def strength_stage(ctx: LearningContext, episode_id: str, reward: object) -> dict[str, list[str]]:
    """Protect the typed experiences that are the user's own rules: built from this episode's explicit
    feedback and from nothing but the user's own words.

    Runs after the experience builder in the learning chain (so the experiences exist). A rule the user
    wrote is protected whatever type the builder gave it — "Never force-push to main." is a
    failure_avoidance, "Do not force push to main; open a PR instead." a repair_instruction — so failures
    reported later cannot push it under the recall floor. An experience that also rests on a verifier's
    verdict or on implicit feedback is learned, not authored, and stays unprotected.
    """
    floor_settings = ctx.settings.strength

    def find(db: Session) -> list[str]:
        feedback = db.scalars(select(FeedbackRow).where(FeedbackRow.episode_id == episode_id))
        authored = {row.id for row in feedback if rules.is_user_authored(row.channel, row.raw_json)}
        episode = db.get(EpisodeRow, episode_id)
        if not authored or episode is None:
            return []
        owner = OwnerFilter(episode.owner_agent_kind, episode.owner_profile_id, episode.owner_workspace_id)
        # Only rows whose feedback list names one of these ids (a text test the database runs; the exact set
        # test follows): loading every unprotected experience cost most of this stage in a large store.
        sources_text = cast(PolicyRow.source_feedback_ids_json, Text)
        names_one = or_(*(sources_text.contains(json.dumps(fid), autoescape=True) for fid in sorted(authored)))
        stmt = select(PolicyRow).where(PolicyRow.protected.is_(False), owner.clause(PolicyRow), names_one)
        candidates = [
            row for row in db.scalars(stmt) if owner.owns(row) and authored & set(row.source_feedback_ids_json or [])
        ]
        sources = {fid for row in candidates for fid in row.source_feedback_ids_json or []}
        by_user = {
            row.id
            for row in db.scalars(select(FeedbackRow).where(FeedbackRow.id.in_(sources)))
            if rules.is_user_authored(row.channel, row.raw_json)
        }
        return [row.id for row in candidates if set(row.source_feedback_ids_json or []) <= by_user]

    found = await ctx.db.read(find)
    if not found:
        return {"protected": []}

    def protect(db: Session) -> None:
        for row in db.scalars(select(PolicyRow).where(PolicyRow.id.in_(found))):
            row.protected = True
            row.strength = rules.lift_to_floor(row.strength, floor_settings)

    await ctx.db.write(protect)
    log.info("strength: protected %d user-authored rule(s) of %s", len(found), episode_id)
    return {"protected": found}
