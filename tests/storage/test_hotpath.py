"""Hot-path statements: guidance of linked policies, episode context for routing, access counts."""

from __future__ import annotations

from sqlalchemy.orm import Session

from memos_bridge.storage import hotpath
from memos_bridge.storage.models import TracePolicyLinkRow, TraceRow, TurnRow
from memos_bridge.storage.owner import OwnerFilter

from .factories import OTHER, OWNER, add_policy, add_trace


def _guided(
    db: Session, policy_id: str, updated_at: int, prefer: list[str], avoid: list[str], owner: OwnerFilter = OWNER
) -> None:
    row = add_policy(db, policy_id, owner, title=policy_id)
    row.updated_at = updated_at
    row.decision_guidance_json = {"preference": prefer, "antiPattern": avoid}


def test_guidance_of_the_recalled_steps_only_newest_policy_first(session: Session) -> None:
    for trace_id in ("tr_a", "tr_b", "tr_c"):
        add_trace(session, trace_id)
    _guided(session, "po_old", 1, ["use UTF-8"], ["guess the encoding"])
    _guided(session, "po_new", 5, ["use UTF-8", "check the BOM"], [])
    _guided(session, "po_other_step", 9, ["never shown"], ["never shown"])
    _guided(session, "po_recalled", 7, ["already in the block"], [])
    _guided(session, "po_foreign", 8, ["not ours"], [], owner=OTHER)
    session.flush()
    for trace_id, policy_id in [
        ("tr_a", "po_old"),
        ("tr_a", "po_new"),
        ("tr_b", "po_new"),
        ("tr_c", "po_other_step"),
        ("tr_a", "po_recalled"),
        ("tr_b", "po_foreign"),
    ]:
        session.add(TracePolicyLinkRow(trace_id=trace_id, policy_id=policy_id, created_at=1))
    session.commit()
    rows = hotpath.guidance_rows(session, ["tr_a", "tr_b", "tr_c"], OWNER)
    assert "po_foreign" not in {row.id for row in rows}  # the namespace filter is in the statement
    prefer, avoid = hotpath.merge_guidance(rows, {"tr_a", "tr_b"}, exclude={"po_recalled"})
    assert prefer == ["use UTF-8", "check the BOM"]  # po_new (newer) first, each line once
    assert avoid == ["guess the encoding"]


def test_episode_context_in_one_statement(session: Session) -> None:
    empty = hotpath.episode_context(session, "ep_1")
    assert empty.first_user_text is None and empty.last_turn_id is None and empty.last_trace_ts is None
    for turn_id, text in ((10, "first ask"), (20, "second ask")):
        session.add(
            TurnRow(
                session_id="se_1",
                episode_id="ep_1",
                turn_id=turn_id,
                user_text=text,
                user_text_hash=text,
                started_at=turn_id,
                status="started",
                **OWNER.as_columns(),
            )
        )
    add_trace(session, "tr_tool", ts=21, step_kind="tool", agent_text="ran it")
    add_trace(session, "tr_reply", ts=25, step_kind="reply", agent_text="done: it works")
    session.commit()
    row = hotpath.episode_context(session, "ep_1")
    assert (row.first_user_text, row.last_user_text, row.last_turn_id) == ("first ask", "second ask", 20)
    assert (row.last_reply_text, row.last_trace_ts) == ("done: it works", 25)
    assert hotpath.turn_id_taken(session, "ep_1", 20) and not hotpath.turn_id_taken(session, "ep_1", 21)


def test_access_counts_direct_hits_and_roll_up_steps_once(session: Session) -> None:
    for trace_id in ("tr_a", "tr_b", "tr_c"):
        add_trace(session, trace_id)
    session.commit()
    hotpath.count_access(session, {"trace": ["tr_a"]}, ["ep_1"], now=99)
    session.commit()
    counts = {row.id: (row.access_count, row.last_accessed_at) for row in session.query(TraceRow)}
    assert counts == {"tr_a": (1, 99), "tr_b": (1, 99), "tr_c": (1, 99)}  # tr_a not counted twice
