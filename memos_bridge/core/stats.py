"""`memory.stats`: what the service holds and how often it helps, for one namespace.

Counts are per kind and per status, with one status per row as every other method reports it: a row
with `forgotten_at` is "forgotten", one with `archived_at` (or an archived lifecycle) is "archived",
otherwise its lifecycle status (a step has none: "active"). The histograms cover recallable rows only
(neither archived nor forgotten), since those are the ones that can still reach a prompt.

The recall hit rate reads the cached `turn.start` results of the namespace's most recent turns: a turn
counts as a hit when its injection carried at least one memory. Turns whose cached result was dropped (a
purge clears them) are not counted.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import case, func, literal, select
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.core.namespace import list_scope
from memos_bridge.storage.models import MemoryRow, PolicyRow, SkillRow, TraceRow, TurnRow, WorldModelRow
from memos_bridge.storage.owner import OwnerFilter
from memos_bridge.timeutil import now_ms

DAY_MS: Final = 86_400_000
#: Kind → (model, the column its age is measured from).
KINDS: Final[dict[str, tuple[Any, Any]]] = {
    "trace": (TraceRow, TraceRow.ts),
    "policy": (PolicyRow, PolicyRow.created_at),
    "world_model": (WorldModelRow, WorldModelRow.created_at),
    "skill": (SkillRow, SkillRow.created_at),
    "memory": (MemoryRow, MemoryRow.created_at),
}
#: Kind → the column that types its rows (experience type, remembered type).
TYPE_COLUMNS: Final[dict[str, Any]] = {"policy": PolicyRow.experience_type, "memory": MemoryRow.memory_type}
#: Age bins: (label, upper bound in days, exclusive).
AGE_BINS: Final[tuple[tuple[str, float], ...]] = (
    ("<1d", 1),
    ("1-7d", 7),
    ("7-30d", 30),
    ("30-90d", 90),
    (">=90d", float("inf")),
)
STRENGTH_BINS: Final = 10


def _status(model: Any) -> Any:
    """The one status of a row, as an SQL expression."""
    lifecycle = model.status if hasattr(model, "status") else literal("active")
    return case(
        (model.forgotten_at.is_not(None), literal("forgotten")),
        (model.archived_at.is_not(None), literal("archived")),
        else_=lifecycle,
    )


def _recallable(model: Any) -> list[Any]:
    where = [model.forgotten_at.is_(None), model.archived_at.is_(None)]
    if hasattr(model, "status"):
        where.append(model.status != "archived")
    return where


def _scoped(stmt: Any, model: Any, owner: OwnerFilter | None) -> Any:
    if owner is None:
        return stmt
    if model is MemoryRow:  # remembered memories belong to the profile and workspace, not to an agent kind
        owner = owner.every_agent()
    return stmt.where(owner.clause(model))


def _strength_bin(strength: float) -> int:
    return min(STRENGTH_BINS - 1, max(0, int(strength * STRENGTH_BINS)))


def _age_bin(age_ms: int) -> int:
    days = age_ms / DAY_MS
    return next(i for i, (_, upper) in enumerate(AGE_BINS) if days < upper)


def stats_sync(db: Session, params: dto.MemoryStatsParams, now: int | None = None) -> dto.MemoryStatsResult:
    at = now if now is not None else now_ms()
    owner = list_scope(db, params.namespace, session_id=params.session_id)
    counts: dict[str, dict[str, int]] = {}
    types: dict[str, dict[str, int]] = {}
    strength = [0] * STRENGTH_BINS
    ages = [0] * len(AGE_BINS)
    for kind, (model, born) in KINDS.items():
        status = _status(model)
        rows = db.execute(_scoped(select(status, func.count()).group_by(status), model, owner))
        counts[kind] = {str(name): int(n) for name, n in rows if n}
        type_column = TYPE_COLUMNS.get(kind)
        if type_column is not None:
            typed = select(type_column, func.count()).where(*_recallable(model)).group_by(type_column)
            types[kind] = {str(name): int(n) for name, n in db.execute(_scoped(typed, model, owner)) if n}
        live = _scoped(select(model.strength, born).where(*_recallable(model)), model, owner)
        for value, created in db.execute(live):
            strength[_strength_bin(float(value))] += 1
            ages[_age_bin(max(0, at - int(created)))] += 1
    turns = _scoped(
        select(TurnRow.result_json)
        .where(TurnRow.result_json.is_not(None))
        .order_by(TurnRow.started_at.desc(), TurnRow.id.desc())
        .limit(params.recent_turns),
        TurnRow,
        owner,
    )
    results = [row for (row,) in db.execute(turns) if isinstance(row, dict)]
    hits = sum(1 for result in results if result.get("hits"))
    return dto.MemoryStatsResult(
        counts=counts,
        types=types,
        strength=[
            dto.HistogramBinDTO(label=f"{i / STRENGTH_BINS:.1f}-{(i + 1) / STRENGTH_BINS:.1f}", count=n)
            for i, n in enumerate(strength)
        ],
        age_days=[dto.HistogramBinDTO(label=label, count=n) for (label, _), n in zip(AGE_BINS, ages, strict=True)],
        turns=len(results),
        turns_with_recall=hits,
        recall_hit_rate=round(hits / len(results), 4) if results else None,
    )
