"""JSON-list membership clauses on both backends: exact element matches, and one statement shape for any
number of ids (so the statement cache holds one entry, not one per list length)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from memos_bridge.core.learning.experiences.store import absorbed_feedback
from memos_bridge.storage.json_lists import list_has, list_has_any
from memos_bridge.storage.models import PolicyRow

from .factories import add_policy


@pytest.fixture
def db_url(backend_url: str) -> str:
    """The storage suite's migrated `engine` fixture, on each backend."""
    return backend_url


@pytest.fixture
def seeded(engine: Engine) -> Iterator[Session]:
    with Session(engine) as db:
        add_policy(db, "po_a", tags_json=["deploy", "ep_1"], source_feedback_ids_json=["fb_1", "fb_2"])
        add_policy(db, "po_b", tags_json=["epX1", "ep%2"], source_feedback_ids_json=["fbX3"])
        add_policy(db, "po_c", tags_json=[], source_feedback_ids_json=[])
        db.commit()
        yield db


def _ids(db: Session, clause: object) -> list[str]:
    return sorted(db.scalars(select(PolicyRow.id).where(clause)))  # type: ignore[arg-type]


def test_matches_whole_elements_only(seeded: Session) -> None:
    assert _ids(seeded, list_has(PolicyRow.tags_json, "deploy")) == ["po_a"]
    assert _ids(seeded, list_has(PolicyRow.tags_json, "dep")) == []  # a prefix is not an element
    # LIKE's wildcards are ordinary characters here: `ep_1` is not `epX1`, `ep%2` only itself.
    assert _ids(seeded, list_has(PolicyRow.tags_json, "ep_1")) == ["po_a"]
    assert _ids(seeded, list_has(PolicyRow.tags_json, "ep%2")) == ["po_b"]
    assert _ids(seeded, list_has_any(PolicyRow.tags_json, ["nothing", "epX1", "deploy"])) == ["po_a", "po_b"]


def test_no_ids_is_no_clause(seeded: Session) -> None:
    assert list_has_any(PolicyRow.tags_json, []) is None
    assert list_has_any(PolicyRow.tags_json, ["", ""]) is None


def test_absorbed_feedback_is_exact(seeded: Session) -> None:
    """The feedback ids an experience already lists: `fb_3` must not be taken for `fbX3`."""
    assert absorbed_feedback(seeded, ["fb_1", "fb_3", "fb_9"]) == {"fb_1"}
    assert absorbed_feedback(seeded, []) == set()


def test_one_statement_shape_for_any_number_of_ids(seeded: Session) -> None:
    """Each list length used to be its own statement; a learning chain asking with 1…90 ids left thousands
    of expression objects in the statement cache."""

    def shape(n: int) -> object:
        clause = list_has_any(PolicyRow.tags_json, [f"t{i}" for i in range(n)])
        assert clause is not None
        key = select(PolicyRow.id).where(clause)._generate_cache_key()
        assert key is not None
        return key.key

    assert shape(1) == shape(2) == shape(7) == shape(90)
    bind = seeded.get_bind()
    assert isinstance(bind, Engine)
    cache = bind._compiled_cache
    assert cache is not None
    before = len(cache)
    for n in range(1, 40):  # through a store function that used to build one LIKE per id
        assert absorbed_feedback(seeded, ["fb_2", *(f"fb_x{i}" for i in range(n))]) == {"fb_2"}
    assert len(cache) - before <= 1
