"""Claims on episodes' learning chains, for services that share one database (`LearningClaimRow`).

The protocol, in the words of the row's columns:

* **request** — somebody needs the chain to run (the episode ended, feedback arrived): `requested += 1`;
  the caller keeps the new value, its request's *generation*.
* **claim** — a service about to run the chain for a request of generation `g` locks the row and decides:
  - another service holds an unexpired lease: `WAIT` (poll again later; its run may not include this
    request's data, and two runs on one episode at once would race);
  - `served ≥ g` (a run that started after the request was made): `COVERED`, nothing to do — unless the
    caller must run anyway (`force`: explicit feedback, whose reply promises the lessons are learned);
  - otherwise `CLAIMED`: the row records the claimant and its lease, `served = requested` (this run reads
    everything stored so far, so it answers every request made until now) and `runs += 1`.
* **renew** / **release** — the claimant extends its lease while the chain runs, and clears it at the end.

The claim reads the row with `FOR UPDATE SKIP LOCKED`: a row another service is claiming or requesting at
this instant is not waited for, it is reported as `WAIT`. On SQLite the locking clause compiles to nothing
(one writer at a time already) and the same functions behave the same way.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from memos_bridge.storage.models import EpisodeRow, LearningClaimRow


class Claim(StrEnum):
    CLAIMED = "claimed"
    COVERED = "covered"
    WAIT = "wait"


def request_sync(db: Session, episode_id: str, now: int) -> int:
    """Record a request for the episode's chain; returns its generation (0 when the episode does not exist)."""
    if db.scalar(select(EpisodeRow.id).where(EpisodeRow.id == episode_id)) is None:
        return 0
    table = LearningClaimRow.__table__
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(table).values(episode_id=episode_id, requested=1, served=0, runs=0, updated_at=now)
    stmt = stmt.on_conflict_do_update(
        index_elements=[table.c.episode_id],
        set_={"requested": table.c.requested + 1, "updated_at": now},
    ).returning(table.c.requested)
    return int(db.execute(stmt).scalar_one())


def claim_sync(
    db: Session, episode_id: str, generation: int, owner: str, now: int, lease_ms: int, *, force: bool = False
) -> Claim:
    """Try to take the episode's chain for a request of `generation` (see the module docstring)."""
    if generation <= 0:
        return Claim.CLAIMED  # no episode, nothing to coordinate: the chain finds nothing and stops
    row = db.scalar(
        select(LearningClaimRow).where(LearningClaimRow.episode_id == episode_id).with_for_update(skip_locked=True)
    )
    if row is None:
        return Claim.WAIT  # being requested or claimed by another service right now
    if row.claimed_by is not None and row.claimed_by != owner and (row.lease_until or 0) > now:
        return Claim.WAIT
    if row.served >= generation and not force:
        if row.claimed_by == owner:  # a lease of ours left behind (a crash of this very run): clear it
            row.claimed_by, row.lease_until = None, None
        return Claim.COVERED
    row.claimed_by = owner
    row.lease_until = now + lease_ms
    row.served = row.requested
    row.runs += 1
    row.updated_at = now
    return Claim.CLAIMED


def renew_sync(db: Session, episode_id: str, owner: str, now: int, lease_ms: int) -> bool:
    """Extend our lease; False when the claim is no longer ours (it expired and another service took it)."""
    result = db.execute(
        update(LearningClaimRow)
        .where(LearningClaimRow.episode_id == episode_id, LearningClaimRow.claimed_by == owner)
        .values(lease_until=now + lease_ms, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def release_sync(db: Session, episode_id: str, owner: str, now: int) -> None:
    """End our claim (a claim taken over by another service meanwhile is left alone)."""
    db.execute(
        update(LearningClaimRow)
        .where(LearningClaimRow.episode_id == episode_id, LearningClaimRow.claimed_by == owner)
        .values(claimed_by=None, lease_until=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )


def claim_row(db: Session, episode_id: str) -> LearningClaimRow | None:
    """The episode's claim row as stored (diagnostics, tests)."""
    return db.get(LearningClaimRow, episode_id)
