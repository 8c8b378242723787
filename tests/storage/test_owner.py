"""Namespace visibility: the SQL clause, its Python twin, and the vector-index key agree."""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from memos_bridge.storage.models import SessionRow, TraceRow
from memos_bridge.storage.owner import OwnerFilter, OwnerKey

from .factories import add_trace, seed_episode

HOME = OwnerFilter("hermes", "default", None)
WORKSPACE = OwnerFilter("hermes", "default", "ws-1")
ELSEWHERE = OwnerFilter("hermes", "work", None)


def _seed(session: Session) -> None:
    for i, owner in enumerate((HOME, WORKSPACE, ELSEWHERE)):
        seed_episode(session, owner, suffix=str(i))
        add_trace(session, f"tr_{i}", episode_id=f"ep_{i}", session_id=f"se_{i}", owner=owner)
    add_trace(session, "tr_pub", episode_id="ep_2", session_id="se_2", owner=ELSEWHERE, share_scope="public")
    add_trace(session, "tr_glob", episode_id="ep_2", session_id="se_2", owner=ELSEWHERE, share_scope="global")
    add_trace(session, "tr_team", episode_id="ep_2", session_id="se_2", owner=ELSEWHERE, share_scope="team")
    session.commit()


def test_clause_matches_namespace_and_shared_rows(engine: Engine) -> None:
    with Session(engine) as session:
        _seed(session)

        def visible(owner: OwnerFilter) -> set[str]:
            return set(session.scalars(select(TraceRow.id).where(owner.clause(TraceRow))))

        assert visible(HOME) == {"tr_0", "tr_pub", "tr_glob"}
        assert visible(WORKSPACE) == {"tr_1", "tr_pub", "tr_glob"}  # NULL workspace ≠ 'ws-1'
        assert visible(ELSEWHERE) == {"tr_2", "tr_pub", "tr_glob", "tr_team"}
        # tables without share columns only ever show the namespace's own rows
        assert set(session.scalars(select(SessionRow.id).where(HOME.clause(SessionRow)))) == {"se_0"}

        rows = session.scalars(select(TraceRow)).all()
        for owner in (HOME, WORKSPACE, ELSEWHERE):
            assert {r.id for r in rows if owner.can_see(r)} == visible(owner)
        assert [r.id for r in rows if HOME.owns(r)] == ["tr_0"]


def test_owner_key_of_row_and_columns(engine: Engine) -> None:
    with Session(engine) as session:
        _seed(session)
        pub = session.scalars(select(TraceRow).where(TraceRow.id == "tr_pub")).one()
        own = session.scalars(select(TraceRow).where(TraceRow.id == "tr_1")).one()
        assert OwnerKey.of_row(pub) == OwnerKey("hermes", "work", None, shared=True)
        assert OwnerKey.of_row(own) == WORKSPACE.key
        assert OwnerKey.of_row(own).namespace == ("hermes", "default", "ws-1")
        assert WORKSPACE.as_columns() == {
            "owner_agent_kind": "hermes",
            "owner_profile_id": "default",
            "owner_workspace_id": "ws-1",
        }
