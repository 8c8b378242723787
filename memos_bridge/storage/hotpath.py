"""Reads on the `turn.start` hot path, as cached hand-written statements.

Why not the Core expression API used everywhere else: building and cache-keying a `select()` costs
0.3–0.8 ms of Python per call, while the SQLite work of these reads is 0.05–0.2 ms. A turn runs a dozen of
them (four kinds × several channels, hydration, roll-ups, linked guidance), which made statement
construction alone a third of the 15 ms latency budget. Here each statement is built once per shape
(`functools.cache`) as a typed `text()` construct; results keep attribute access (`row.summary`) and the
column types' result processing (JSON decoded, booleans).

Each function applies the same visibility rules as `repos`: the owner predicate (`OwnerFilter.sql`, the
twin of `OwnerFilter.clause`) and "archived rows are never recalled".
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, Table, bindparam, text
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import TextualSelect

from memos_bridge.storage.models import (
    EpisodeRow,
    MemoryRow,
    PolicyRow,
    SkillRow,
    TracePolicyLinkRow,
    TraceRow,
    TurnRow,
    WorldModelRow,
)
from memos_bridge.storage.owner import OwnerFilter


def _table(model: type[Any]) -> Table:
    tbl = model.__table__
    assert isinstance(tbl, Table)
    return tbl


TRACES, EPISODES, POLICIES, LINKS = _table(TraceRow), _table(EpisodeRow), _table(PolicyRow), _table(TracePolicyLinkRow)
SEARCHABLE_TABLES: dict[str, Table] = {
    "trace": TRACES,
    "policy": POLICIES,
    "skill": _table(SkillRow),
    "world_model": _table(WorldModelRow),
    "memory": _table(MemoryRow),
}
HYDRATED_COLUMNS: dict[str, tuple[str, ...]] = {
    # What ranking and rendering read (`retrieval/engine.py`): every other column, above all the JSON ones
    # (decoding them was half the cost of hydration) and the vector blobs (in memory already), stays put.
    "trace": (
        "id",
        "episode_id",
        "session_id",
        "ts",
        "step_index",
        "user_text",
        "agent_text",
        "summary",
        "tool_calls_json",
        "value",
        "priority",
        "strength",
    ),
    "policy": (
        "id",
        "status",
        "experience_type",
        "title",
        "trigger",
        "procedure",
        "verification",
        "boundary",
        "decision_guidance_json",
        "lesson_json",
        "source_episodes_json",
        "owner_workspace_id",
        "salience",
        "confidence",
        "gain",
        "updated_at",
        "strength",
    ),
    "skill": (
        "id",
        "status",
        "eta",
        "name",
        "invocation_guide",
        "procedure_json",
        "source_policies_json",
        "updated_at",
        "strength",
    ),
    "world_model": ("id", "status", "confidence", "title", "body", "strength"),
    "memory": ("id", "status", "memory_type", "content", "importance", "source", "expires_at", "strength"),
}
SHAREABLE = True  # every searchable table has a share scope


def _owner(owner: OwnerFilter | None, alias: str) -> tuple[str, dict[str, Any]]:
    if owner is None:
        return "1 = 1", {}
    return owner.sql(alias, shareable=SHAREABLE)


# ------------------------------------------------------------------------------------------ hydration


@functools.cache
def _rows_statement(kind: str, owner_sql: str) -> TextualSelect:
    tbl = SEARCHABLE_TABLES[kind]
    columns = [tbl.c[name] for name in HYDRATED_COLUMNS[kind]]
    names = ", ".join(f'b."{c.name}"' for c in columns)
    status = " AND b.status != 'archived'" if "status" in tbl.columns else ""
    stmt = text(
        f'SELECT {names} FROM "{tbl.name}" AS b WHERE b.id IN :ids AND b.archived_at IS NULL{status} AND {owner_sql}'
    ).bindparams(bindparam("ids", expanding=True))
    return stmt.columns(*[c._copy() for c in columns])


def rows_by_ids(db: Session, kind: str, ids: Sequence[str], owner: OwnerFilter | None) -> dict[str, Row[Any]]:
    """Visible, live rows of `kind` by id, with the `HYDRATED_COLUMNS` of that kind."""
    if not ids:
        return {}
    owner_sql, params = _owner(owner, "b")
    rows = db.execute(_rows_statement(kind, owner_sql), {"ids": list(ids), **params})
    return {row.id: row for row in rows}


# ------------------------------------------------------------------------------------------ roll-ups

_EPISODE_TRACE_IDS = (
    text("SELECT id, trace_ids_json FROM episodes WHERE id IN :ids")
    .bindparams(bindparam("ids", expanding=True))
    .columns(EPISODES.c.id._copy(), EPISODES.c.trace_ids_json._copy())
)

_STEP_COLUMNS = ("id", "ts", "user_text", "agent_text", "summary")
_STEPS = (
    text(f"SELECT {', '.join(_STEP_COLUMNS)} FROM traces WHERE id IN :ids AND archived_at IS NULL")
    .bindparams(bindparam("ids", expanding=True))
    .columns(*[TRACES.c[name]._copy() for name in _STEP_COLUMNS])
)

MAX_ROLLUP_STEPS = 40


def episode_steps(db: Session, episode_ids: Sequence[str]) -> dict[str, list[Row[Any]]]:
    """The live traces of each episode in episode order (id, ts, user_text, agent_text, summary)."""
    if not episode_ids:
        return {}
    orders = {
        row.id: list(row.trace_ids_json or [])[:MAX_ROLLUP_STEPS]
        for row in db.execute(_EPISODE_TRACE_IDS, {"ids": list(episode_ids)})
    }
    wanted = [trace_id for order in orders.values() for trace_id in order]
    rows = {row.id: row for row in db.execute(_STEPS, {"ids": wanted})} if wanted else {}
    return {episode: [rows[i] for i in order if i in rows] for episode, order in orders.items()}


_POLICY_TRACE_IDS = (
    text("SELECT id, source_trace_ids_json FROM policies WHERE id IN :ids")
    .bindparams(bindparam("ids", expanding=True))
    .columns(POLICIES.c.id._copy(), POLICIES.c.source_trace_ids_json._copy())
)


def policy_source_traces(db: Session, policy_ids: Sequence[str]) -> dict[str, list[str]]:
    """The steps each policy or typed experience was distilled from (its `source_trace_ids`)."""
    if not policy_ids:
        return {}
    return {
        row.id: list(row.source_trace_ids_json or [])
        for row in db.execute(_POLICY_TRACE_IDS, {"ids": list(policy_ids)})
    }


# ------------------------------------------------------------------------------------------ channels


@functools.cache
def _signature_statement(owner_sql: str) -> TextClause:
    return text(
        "SELECT b.id FROM traces AS b WHERE CAST(b.error_signatures_json AS TEXT) LIKE :needle ESCAPE '\\' "
        f"AND b.archived_at IS NULL AND {owner_sql} ORDER BY b.ts DESC LIMIT :limit"
    )


def traces_with_signatures(
    db: Session, signatures: Sequence[str], owner: OwnerFilter | None, limit: int
) -> list[tuple[str, float]]:
    """Traces whose stored error signatures include one of `signatures`: (id, share matched), best first."""
    if not signatures:
        return []
    owner_sql, params = _owner(owner, "b")
    stmt = _signature_statement(owner_sql)
    hits: dict[str, int] = {}
    for signature in signatures:
        needle = '%"' + signature.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + '"%'
        for (trace_id,) in db.execute(stmt, {"needle": needle, "limit": limit, **params}):
            hits[trace_id] = hits.get(trace_id, 0) + 1
    ranked = sorted(hits.items(), key=lambda item: item[1], reverse=True)[:limit]
    return [(trace_id, count / len(signatures)) for trace_id, count in ranked]


# ------------------------------------------------------------------------------------------ supersedes

# Memories that (transitively, a few links deep) supersede the given ones: (from kind, from id, to id) per
# `memory.link … supersedes` edge on the way. Both steps use `ix_memory_links_to` (to_kind, to_id); UNION
# and the depth bound make loops harmless.
_SUPERSEDE_CHAINS = text(
    "WITH RECURSIVE chain(from_kind, from_id, to_id, depth) AS ("
    " SELECT from_kind, from_id, to_id, 1 FROM memory_links"
    " WHERE relation = 'supersedes'"
    " AND to_kind IN ('trace', 'policy', 'skill', 'world_model', 'memory') AND to_id IN :ids"
    " UNION"
    " SELECT l.from_kind, l.from_id, l.to_id, c.depth + 1 FROM memory_links AS l"
    " JOIN chain AS c ON l.to_kind = c.from_kind AND l.to_id = c.from_id"
    " WHERE l.relation = 'supersedes' AND c.depth < :depth"
    ") SELECT DISTINCT from_kind, from_id, to_id FROM chain"
).bindparams(bindparam("ids", expanding=True))


def supersede_chains(db: Session, ids: Sequence[str], depth: int) -> list[tuple[str, str, str]]:
    """(kind of the correction, correction id, corrected id) of every `supersedes` link reachable from `ids`."""
    if not ids:
        return []
    rows = db.execute(_SUPERSEDE_CHAINS, {"ids": list(ids), "depth": depth})
    return [(str(kind), str(new), str(old)) for kind, new, old in rows]


# ------------------------------------------------------------------------------------------ guidance


@functools.cache
def _guidance_statement(owner_sql: str) -> TextualSelect:
    return (
        text(
            f'SELECT l.trace_id, b.id, b.decision_guidance_json, b.updated_at FROM "{POLICIES.name}" AS b '
            f'JOIN "{LINKS.name}" AS l ON l.policy_id = b.id '
            f"WHERE l.trace_id IN :ids AND b.archived_at IS NULL AND b.status != 'archived' AND {owner_sql} "
            "ORDER BY b.updated_at DESC"
        )
        .bindparams(bindparam("ids", expanding=True))
        .columns(
            LINKS.c.trace_id._copy(),
            POLICIES.c.id._copy(),
            POLICIES.c.decision_guidance_json._copy(),
            POLICIES.c.updated_at._copy(),
        )
    )


def guidance_rows(db: Session, trace_ids: Sequence[str], owner: OwnerFilter | None) -> list[Row[Any]]:
    """(trace_id, id, decision_guidance_json, updated_at) of live policies linked to these traces, newest
    policy first (read for every candidate step; `merge_guidance` keeps those of the steps recalled)."""
    if not trace_ids:
        return []
    owner_sql, params = _owner(owner, "b")
    return list(db.execute(_guidance_statement(owner_sql), {"ids": list(trace_ids), **params}))


def merge_guidance(rows: Sequence[Row[Any]], trace_ids: set[str], *, exclude: set[str]) -> tuple[list[str], list[str]]:
    """Prefer/avoid lines of the policies linked to `trace_ids` (policies in `exclude` left out), newest
    policy first, each line once, at most five of each."""
    prefer: list[str] = []
    avoid: list[str] = []
    seen: set[str] = set()
    for row in rows:
        trace_id, policy_id, guidance = row.trace_id, row.id, row.decision_guidance_json
        if trace_id not in trace_ids or policy_id in exclude or policy_id in seen or not isinstance(guidance, dict):
            continue
        seen.add(policy_id)
        prefer.extend(line for line in guidance.get("preference", []) if line not in prefer)
        avoid.extend(line for line in guidance.get("antiPattern", []) if line not in avoid)
    return prefer[:5], avoid[:5]


# ------------------------------------------------------------------------------------------ routing

# What the relation classifier needs about an open episode, in one statement instead of five ORM queries
# (each cost 0.3-0.6 ms of statement building on `turn.start`'s routing write, about the SQLite work of all
# of them together). Every subquery is served by ix_turns_episode_turn or ix_traces_episode_ts.
_EPISODE_CONTEXT = text(
    "SELECT"
    " (SELECT user_text FROM turns WHERE episode_id = :e ORDER BY id LIMIT 1) AS first_user_text,"
    " (SELECT user_text FROM turns WHERE episode_id = :e ORDER BY id DESC LIMIT 1) AS last_user_text,"
    " (SELECT turn_id FROM turns WHERE episode_id = :e ORDER BY id DESC LIMIT 1) AS last_turn_id,"
    " (SELECT agent_text FROM traces WHERE episode_id = :e AND step_kind = 'reply'"
    "  ORDER BY ts DESC, rid DESC LIMIT 1) AS last_reply_text,"
    " (SELECT max(ts) FROM traces WHERE episode_id = :e) AS last_trace_ts,"
    " (SELECT max(ts) FROM feedback WHERE episode_id = :e AND channel = 'explicit') AS last_verdict_ts"
)


def episode_context(db: Session, episode_id: str) -> Row[Any]:
    """first_user_text, last_user_text, last_turn_id, last_reply_text, last_trace_ts and last_verdict_ts (its
    latest explicit feedback) of an episode (each None when the episode has no such turn, step or verdict)."""
    return db.execute(_EPISODE_CONTEXT, {"e": episode_id}).one()


_TURN_ID_TAKEN = text("SELECT 1 FROM turns WHERE episode_id = :e AND turn_id = :t LIMIT 1")


def turn_id_taken(db: Session, episode_id: str, turn_id: int) -> bool:
    """Whether a user turn of the episode already has this turn id."""
    return db.execute(_TURN_ID_TAKEN, {"e": episode_id, "t": turn_id}).first() is not None


# ------------------------------------------------------------------------------------------ access counts


@functools.cache
def _touch_statement(kind: str) -> TextClause:
    table = SEARCHABLE_TABLES[kind].name
    return text(
        f'UPDATE "{table}" SET access_count = access_count + 1, last_accessed_at = :now WHERE id IN :ids'
    ).bindparams(bindparam("ids", expanding=True))


_TOUCH_EPISODE_STEPS = text(
    "UPDATE traces SET access_count = access_count + 1, last_accessed_at = :now "
    "WHERE episode_id IN :episodes AND archived_at IS NULL AND id NOT IN :direct"
).bindparams(bindparam("episodes", expanding=True), bindparam("direct", expanding=True))


def count_access(db: Session, ids_by_kind: dict[str, list[str]], episode_ids: Sequence[str], now: int) -> None:
    """One access more for each recalled memory (by kind) and for every live step of each recalled
    roll-up's episode (steps recalled directly are not counted twice). Recall counts access, never
    strength (core/strength.py). Runs after every `turn.start`, so its statements are cached."""
    for kind, ids in ids_by_kind.items():
        if ids:
            db.execute(_touch_statement(kind), {"ids": list(ids), "now": now})
    if episode_ids:
        direct = ids_by_kind.get("trace") or [""]  # NOT IN () is invalid SQL; "" is no trace id
        db.execute(_TOUCH_EPISODE_STEPS, {"episodes": list(episode_ids), "direct": list(direct), "now": now})


# ------------------------------------------------------------------------------------------ turn results

_TURNS = _table(TurnRow)
_SAVE_TURN_RESULT = text("UPDATE turns SET result_json = :result WHERE id = :id").bindparams(
    bindparam("result", type_=_TURNS.c.result_json.type)
)


def save_turn_result(db: Session, turn_row_id: int, result: dict[str, Any]) -> None:
    """Store a `turn.start` result on its turn row (it serves a retry with the same turnKey after a restart)."""
    db.execute(_SAVE_TURN_RESULT, {"id": turn_row_id, "result": result})


_END_TURN = text("UPDATE turns SET status = 'ended', ended_at = :ended_at WHERE id = :id")


def end_turn(db: Session, turn_row_id: int, ended_at: int) -> None:
    """Mark a turn ended by `turn.end` (one statement; loading the row through the ORM cost more than it)."""
    db.execute(_END_TURN, {"id": turn_row_id, "ended_at": ended_at})
