"""`memory.set_status`: a person puts an experience, a world model or a skill in or out of recall.

The learning loop sets these statuses from evidence (gain, support, confidence, reliability); a person
reading the memories in the viewer sometimes knows better — a candidate experience that is plainly right,
a world model that is wrong. Both directions reuse what the automatic paths already do, so a row a person
set looks like any other row of that status:

* **archived** — status archived and `archived_at` set, out of the vector index: out of every recall (which
  reads only unarchived rows of an active or candidate status), restorable.
* **active** — the archive and forget marks cleared, status active, strength lifted to the recall floor and
  the row counted as accessed now (as `memory.restore` does, so the next decay run does not archive it again
  at once): recalled again. A world model is still recalled only at or above
  `learning.world.min_confidence_for_retrieval`, as every world model.

Skills go through their lifecycle (`skill_lifecycle.set_skill_status`), which also emits the status event
and refuses to activate a skill a person rejected. Every change is a history event (`archived` or
`activated`, with the reason) of the memory; setting the status it already has changes and records nothing.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core import strength_rules as rules
from memos_bridge.core.learning import skill_lifecycle
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.memories import audit, load_row
from memos_bridge.core.namespace import read_filter

#: Who a person's control is recorded as in a memory's history.
PERSON: Final = "user"


def _current(row: Any) -> str:
    """The status a client sees: a row archived by decay, expiry or forgetting reads archived."""
    return "archived" if row.archived_at is not None or row.status == "archived" else str(row.status)


async def set_status(ctx: LearningContext, params: dto.MemorySetStatusParams) -> dto.MemorySetStatusResult:
    owner = read_filter(params.namespace)
    result = dto.MemorySetStatusResult(id=params.id, kind=params.kind, status=params.status)
    if params.kind == "skill":
        await skill_lifecycle.set_skill_status(ctx, params.id, params.status, params.reason, owner)
        return result
    now = ctx.clock()
    floor = ctx.settings.strength

    def work(db: Session) -> Any:
        row = load_row(db, params.kind, params.id, owner)
        before = _current(row)
        detail = {"from": before, "reason": params.reason, "via": "memory.set_status"}
        if params.status == "archived":
            if before == "archived":
                return None
            row.status = "archived"
            row.archived_at = now
            audit(db, params.kind, row.id, "archived", now, PERSON, **detail)
            return row
        if before == "active" and row.forgotten_at is None and rules.is_recallable(row.strength, floor):
            return None
        row.status = "active"
        row.archived_at = None
        row.forgotten_at = None
        row.strength = rules.lift_to_floor(row.strength, floor)
        row.last_accessed_at = now
        audit(db, params.kind, row.id, "activated", now, PERSON, **detail)
        return row

    row = await ctx.db.write(work)
    if row is not None:
        ctx.vectors.upsert(params.kind, row)  # an archived row leaves the index, an activated one returns
    return result
