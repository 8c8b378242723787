"""The learning queue's view of chain claims in a shared database (`storage/claims.py` has the protocol).

A service that shares its database with others (PostgreSQL) gives its `LearningQueue` a `ChainClaims`, so an
episode's chain runs in one service at a time, and a request that a run elsewhere already answered runs
nothing. Without one (SQLite: one owner process per data home) the queue coordinates in memory only.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from memos_bridge.storage import claims
from memos_bridge.storage.claims import Claim
from memos_bridge.storage.database import Database
from memos_bridge.timeutil import now_ms

LEASE_S = 120.0
"""How long a claim stays valid without renewal: longer than any pause of a live service (it renews every
third of it), short enough that a chain left by a dead service is taken over within minutes."""

POLL_S = 0.5
"""How often a request waits for another service's run of the same episode to end."""


class ChainClaims:
    def __init__(
        self,
        db: Database,
        owner: str,
        *,
        lease_s: float = LEASE_S,
        poll_s: float = POLL_S,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.db = db
        self.owner = owner
        self.lease_s = lease_s
        self.poll_s = poll_s
        self._clock = clock

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1000)

    async def request(self, episode_id: str) -> int:
        """Record a request for the episode's chain; returns its generation."""
        now = self._clock()
        return await self.db.write(lambda db: claims.request_sync(db, episode_id, now))

    async def claim(self, episode_id: str, generation: int, *, force: bool = False) -> Claim:
        now = self._clock()

        def work(db: Session) -> Claim:
            return claims.claim_sync(db, episode_id, generation, self.owner, now, self.lease_ms, force=force)

        return await self.db.write(work)

    async def renew(self, episode_id: str) -> bool:
        now = self._clock()
        return await self.db.write(lambda db: claims.renew_sync(db, episode_id, self.owner, now, self.lease_ms))

    async def release(self, episode_id: str) -> None:
        now = self._clock()
        await self.db.write(lambda db: claims.release_sync(db, episode_id, self.owner, now))
