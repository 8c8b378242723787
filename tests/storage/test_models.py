"""Schema details that later features rely on: defaults, constraints, the stable rid key."""

from __future__ import annotations

import inspect as pyinspect

import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memos_bridge.storage import models
from memos_bridge.storage.models import (
    Base,
    OwnershipMixin,
    PolicyRow,
    StrengthEventRow,
    TraceRow,
    TurnRow,
)

from .factories import OWNER, add_policy, add_trace, seed_episode


def test_every_row_class_is_named_and_documented() -> None:
    classes = [c for _, c in pyinspect.getmembers(models, pyinspect.isclass) if issubclass(c, Base) and c is not Base]
    assert {c.__tablename__ for c in classes} == set(Base.metadata.tables)
    for cls in classes:
        assert cls.__name__.endswith("Row"), cls
        assert cls.__doc__ and cls.__doc__.strip(), cls


def mapper_table(cls: type) -> str:
    name = getattr(cls, "__tablename__")  # noqa: B009 - mixin type does not declare it
    assert isinstance(name, str)
    return name


def test_every_owned_table_has_the_owner_index(engine: Engine) -> None:
    inspector = inspect(engine)
    owned = [m.class_ for m in Base.registry.mappers if issubclass(m.class_, OwnershipMixin)]
    assert len(owned) >= 13
    for cls in owned:
        name = mapper_table(cls)
        indexes = {tuple(ix["column_names"]) for ix in inspector.get_indexes(name)}
        assert ("owner_agent_kind", "owner_profile_id") in indexes, name


def test_python_defaults_are_fresh_objects(engine: Engine) -> None:
    with Session(engine) as session:
        seed_episode(session)
        one = add_policy(session, "po_1")
        two = add_policy(session, "po_2")
        trace = add_trace(session, "tr_1")
        session.commit()
        assert one.decision_guidance_json == {"preference": [], "antiPattern": []}
        assert one.decision_guidance_json is not two.decision_guidance_json
        assert (trace.priority, trace.strength, trace.share_scope, trace.pinned) == (
            0.5,
            0.5,
            "private",
            False,
        )
        assert (trace.tags_json, trace.meta_json, trace.vec_summary) == ([], {}, None)


def test_server_defaults_fill_raw_inserts(engine: Engine) -> None:
    """Raw SQL (and future ALTER TABLE ADD COLUMN) relies on database-side defaults."""
    with Session(engine) as session:
        seed_episode(session)
        session.commit()
        session.execute(
            text(
                "INSERT INTO traces (id, episode_id, session_id, ts, turn_id, step_key) "
                "VALUES ('tr_raw', 'ep_1', 'se_1', 1, 1, 'k')"
            )
        )
        session.execute(text("INSERT INTO policies (id, created_at, updated_at) VALUES ('po_raw', 1, 1)"))
        session.commit()
        trace = session.get(TraceRow, 1)
        assert trace is not None
        assert trace.id == "tr_raw"
        assert (trace.owner_agent_kind, trace.owner_profile_id, trace.owner_workspace_id) == (
            "unknown",
            "default",
            None,
        )
        assert (trace.tags_json, trace.priority, trace.pinned, trace.step_kind) == ([], 0.5, False, "reply")
        policy = session.scalars(PolicyRow.__table__.select().where(PolicyRow.id == "po_raw")).first()
        assert policy is not None
        raw = session.execute(text("SELECT decision_guidance_json, status FROM policies")).one()
        assert raw == ('{"preference": [], "antiPattern": []}', "candidate")


def test_rid_is_the_sqlite_rowid(engine: Engine) -> None:
    """FTS external content is keyed by rowid; rid must be an alias of it (stable across VACUUM)."""
    with Session(engine) as session:
        seed_episode(session)
        add_trace(session, "tr_a", rid=1000)
        add_trace(session, "tr_b")
        session.commit()
    with engine.connect() as conn:
        conn.exec_driver_sql("DELETE FROM traces WHERE id = 'tr_a'")
        conn.commit()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT rowid, rid FROM traces").all() == [(1001, 1001)]


def test_turn_key_is_unique_per_session_but_null_may_repeat(engine: Engine) -> None:
    def turn(key: str | None) -> TurnRow:
        return TurnRow(
            session_id="se_1", episode_id="ep_1", turn_id=1, turn_key=key, started_at=1, **OWNER.as_columns()
        )

    with Session(engine) as session:
        seed_episode(session)
        session.add_all([turn(None), turn(None), turn("k1")])
        session.commit()
        session.add(turn("k1"))
        with pytest.raises(IntegrityError):
            session.commit()


def test_strength_events_are_idempotent_per_evidence(engine: Engine) -> None:
    def event(evidence_id: str | None) -> StrengthEventRow:
        return StrengthEventRow(
            target_kind="policy",
            target_id="po_1",
            evidence="test_passed",
            evidence_id=evidence_id,
            delta=0.1,
            strength_after=0.6,
            ts=1,
        )

    with Session(engine) as session:
        session.add_all([event(None), event(None), event("ev_1")])
        session.commit()
        session.add(event("ev_1"))
        with pytest.raises(IntegrityError):
            session.commit()


def test_trace_step_key_dedupes_within_an_episode(engine: Engine) -> None:
    with Session(engine) as session:
        seed_episode(session)
        add_trace(session, "tr_1", step_key="same")
        session.commit()
        add_trace(session, "tr_2", step_key="same")
        with pytest.raises(IntegrityError):
            session.commit()
