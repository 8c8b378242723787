"""Full-text search: trigger sync, tokenizers, ranking, owner filtering, hostile query text.

Every test that touches a database runs on SQLite (FTS5) and on PostgreSQL (tsvector and 3-gram GIN indexes,
`storage/pg_search.py`): the functions have one contract, whichever database serves them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, update
from sqlalchemy.orm import Session

from memos_bridge.storage.engine import create_db_engine
from memos_bridge.storage.fts import (
    FTS_SPECS,
    FtsKind,
    Tokenizer,
    fts_integrity_errors,
    fts_search,
    match_expression,
    pattern_search,
    query_terms,
)
from memos_bridge.storage.migrations import migrate
from memos_bridge.storage.models import TraceRow
from memos_bridge.storage.owner import OwnerFilter

from .factories import OTHER, OWNER, add_policy, add_skill, add_trace, add_world_model, seed_episode

Search = Callable[[str, Tokenizer], list[str]]


@pytest.fixture
def db_url(backend_url: str) -> str:
    """The storage fixtures' database: SQLite, then PostgreSQL (`backend_url` in tests/conftest.py)."""
    return backend_url


def ids(session: Session, query: str, tokenizer: Tokenizer, kind: FtsKind = "trace") -> list[str]:
    return [row_id for row_id, _ in fts_search(session, kind, query, owner=OWNER, tokenizer=tokenizer)]


def assert_in_sync(session: Session) -> None:
    assert fts_integrity_errors(session.connection()) == []


# ---------------------------------------------------------------------------------------------- triggers


@pytest.mark.parametrize("tokenizer", ["word", "trigram"])
def test_insert_update_delete_keep_index_in_sync(session: Session, tokenizer: Tokenizer) -> None:
    add_trace(session, "tr_1", summary="configure the webserver", reflection="nginx reload")
    session.commit()
    assert ids(session, "webserver", tokenizer) == ["tr_1"]
    assert ids(session, "nginx", tokenizer) == ["tr_1"]

    session.execute(update(TraceRow).where(TraceRow.id == "tr_1").values(summary="rotate the logfiles"))
    session.commit()
    assert ids(session, "webserver", tokenizer) == []
    assert ids(session, "logfiles", tokenizer) == ["tr_1"]
    assert ids(session, "nginx", tokenizer) == ["tr_1"]  # untouched column still indexed

    # an update of a column that is not indexed must not disturb the index
    session.execute(update(TraceRow).where(TraceRow.id == "tr_1").values(priority=0.9, value=1.0))
    session.commit()
    assert ids(session, "logfiles", tokenizer) == ["tr_1"]
    assert_in_sync(session)

    session.execute(delete(TraceRow).where(TraceRow.id == "tr_1"))
    session.commit()
    assert ids(session, "logfiles", tokenizer) == []
    assert ids(session, "nginx", tokenizer) == []
    assert_in_sync(session)


def test_orm_update_and_null_columns_stay_in_sync(session: Session) -> None:
    row = add_trace(session, "tr_1", summary="alpha beta", reflection=None, tags_json=["deploy"])
    session.commit()
    row.reflection = "gamma delta"
    row.tags_json = ["rollback"]
    session.commit()
    assert ids(session, "gamma", "word") == ["tr_1"]
    assert ids(session, "rollback", "trigram") == ["tr_1"]
    assert ids(session, "deploy", "trigram") == []
    assert_in_sync(session)


@pytest.mark.parametrize(
    ("kind", "add"),
    [
        ("policy", lambda s: add_policy(s, "po_1", procedure="always recompile kernels first")),
        ("world_model", lambda s: add_world_model(s, "wm_1", body="kernels recompile nightly")),
        ("skill", lambda s: add_skill(s, "sk_1", invocation_guide="use when kernels recompile")),
    ],
)
def test_every_kind_is_indexed(session: Session, kind: FtsKind, add: Callable[[Session], object]) -> None:
    add(session)
    session.commit()
    assert ids(session, "recompiling", "word", kind)  # stemmed
    assert ids(session, "ernel", "trigram", kind)  # substring
    model = FTS_SPECS[kind].model
    session.execute(delete(model))
    session.commit()
    assert ids(session, "kernels", "word", kind) == []
    assert_in_sync(session)


def test_updating_a_keyword_named_column_reindexes(session: Session) -> None:
    row = add_policy(session, "po_1", trigger="when the build breaks")
    session.commit()
    row.trigger = "when the deploy stalls"
    session.commit()
    assert ids(session, "stalls", "word", "policy") == ["po_1"]
    assert ids(session, "breaks", "word", "policy") == []
    assert_in_sync(session)


def test_policy_decision_guidance_json_is_searchable(session: Session) -> None:
    add_policy(session, "po_1", decision_guidance_json={"preference": ["先备份数据库"], "antiPattern": []})
    session.commit()
    assert ids(session, "备份数据", "trigram", "policy") == ["po_1"]


# ---------------------------------------------------------------------------------------------- tokenizers


def test_trigram_finds_cjk_and_identifier_substrings(session: Session) -> None:
    add_trace(session, "tr_cjk", agent_text="我想解析每个持仓的成本")
    add_trace(session, "tr_id", agent_text="Traceback: memos_bridge.storage.fts_search raised KeyError")
    add_trace(session, "tr_other", agent_text="nothing relevant here")
    session.commit()
    assert ids(session, "解析每", "trigram") == ["tr_cjk"]
    assert ids(session, "storage.fts_sea", "trigram") == ["tr_id"]
    assert ids(session, "KEYERROR", "trigram") == ["tr_id"]  # case-insensitive
    assert ids(session, "解析每", "word") == []  # unicode61 does not segment CJK: that is trigram's job


def test_word_tokenizer_stems_and_folds_diacritics(session: Session) -> None:
    add_trace(session, "tr_1", summary="Parse every infoTable before running")
    add_trace(session, "tr_2", summary="Le café est fermé")
    session.commit()
    assert ids(session, "parsing", "word") == ["tr_1"]
    assert ids(session, "runs", "word") == ["tr_1"]
    assert ids(session, "cafe ferme", "word") == ["tr_2"]


def test_terms_are_ored_and_ranked_by_bm25(session: Session) -> None:
    add_trace(session, "tr_both", summary="docker compose restart")
    add_trace(session, "tr_one", summary="docker image prune and many other unrelated words here")
    add_trace(session, "tr_none", summary="kubernetes")
    session.commit()
    hits = fts_search(session, "trace", "docker restart", owner=OWNER, tokenizer="word")
    assert [h[0] for h in hits] == ["tr_both", "tr_one"]
    assert hits[0][1] > hits[1][1]
    assert len(fts_search(session, "trace", "docker restart", owner=OWNER, tokenizer="word", limit=1)) == 1


def test_trigram_drops_short_terms(session: Session) -> None:
    add_trace(session, "tr_1", summary="go to 持仓 page")
    session.commit()
    assert ids(session, "go 持仓", "trigram") == []  # both < 3 chars: nothing to match, and no error
    assert match_expression(["go", "持仓"], "trigram") is None


# ---------------------------------------------------------------------------------------------- namespaces


def test_owner_filter_hides_other_namespaces_and_archived(session: Session) -> None:
    seed_episode(session, OTHER, suffix="other")
    add_trace(session, "tr_mine", summary="shared secret word zebra")
    add_trace(session, "tr_theirs", summary="zebra", episode_id="ep_other", session_id="se_other", owner=OTHER)
    add_trace(
        session,
        "tr_public",
        summary="zebra",
        episode_id="ep_other",
        session_id="se_other",
        owner=OTHER,
        share_scope="public",
    )
    add_trace(session, "tr_archived", summary="zebra", archived_at=5)
    session.commit()
    for tokenizer in ("word", "trigram"):
        assert set(ids(session, "zebra", tokenizer)) == {"tr_mine", "tr_public"}
    theirs = fts_search(session, "trace", "zebra", owner=OTHER)
    assert {h[0] for h in theirs} == {"tr_theirs", "tr_public"}
    workspace = OwnerFilter(OWNER.agent_kind, OWNER.profile_id, "ws-1")
    assert {h[0] for h in fts_search(session, "trace", "zebra", owner=workspace)} == {"tr_public"}


def test_namespace_with_few_of_many_matches_still_gets_them(session: Session) -> None:
    """The top-N-first plan must not lose a namespace's rows that rank below other namespaces' rows."""
    seed_episode(session, OTHER, suffix="other")
    for i in range(130):  # denser matches: rank above ours
        add_trace(
            session,
            f"tr_theirs_{i}",
            summary="zebra zebra zebra",
            episode_id="ep_other",
            session_id="se_other",
            owner=OTHER,
        )
    add_trace(session, "tr_mine_a", summary="a long sentence that mentions a zebra once among many other words")
    add_trace(session, "tr_mine_b", summary="another long sentence with one zebra and plenty of filler words")
    session.commit()
    for tokenizer in ("word", "trigram"):
        assert set(ids(session, "zebra", tokenizer)) == {"tr_mine_a", "tr_mine_b"}
    theirs = fts_search(session, "trace", "zebra", owner=OTHER, limit=20)
    assert len(theirs) == 20 and all(h[0].startswith("tr_theirs_") for h in theirs)


def test_large_word_queries_drop_very_common_terms(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    from memos_bridge.storage import fts

    for i in range(60):
        add_trace(session, f"tr_{i}", summary=f"deploy the service build number {i}")
    add_trace(session, "tr_rare_a", summary="deploy with the kubectl rollout command")
    add_trace(session, "tr_rare_b", summary="kubectl rollout status shows the deploy")
    session.commit()
    assert len(ids(session, "deploy kubectl", "word")) == 20  # exact ranking: every deploy row matches
    monkeypatch.setattr(fts, "COMMON_TERMS", fts.CommonTerms(min_rows=50, share=0.2, keep=1))
    assert set(ids(session, "deploy kubectl", "word")) == {"tr_rare_a", "tr_rare_b"}
    assert len(ids(session, "deploy", "word")) == 20  # a lone common term is kept: it is the rarest
    monkeypatch.setattr(fts, "COMMON_TERMS", fts.CommonTerms(min_rows=1_000, share=0.2, keep=1))
    assert len(ids(session, "deploy kubectl", "word")) == 20  # small tables are never pruned


# ------------------------------------------------------------------------------------------ pattern search


def test_pattern_search_finds_two_char_cjk_and_scores_share_of_terms(session: Session) -> None:
    add_trace(session, "tr_1", agent_text="查看持仓和盈亏")
    add_trace(session, "tr_2", agent_text="只看持仓", tags_json=["股票"])
    add_trace(session, "tr_3", agent_text="无关内容")
    seed_episode(session, OTHER, suffix="other")
    add_trace(session, "tr_4", agent_text="持仓", episode_id="ep_other", session_id="se_other", owner=OTHER)
    session.commit()
    hits = dict(pattern_search(session, "trace", ["持仓", "盈亏"], owner=OWNER))
    assert hits == {"tr_1": 1.0, "tr_2": 0.5}
    assert pattern_search(session, "trace", ["股票"], owner=OWNER) == [("tr_2", 1.0)]  # JSON tags too
    ranked = pattern_search(session, "trace", ["持仓", "盈亏"], owner=OWNER)
    assert ranked[0] == ("tr_1", 1.0)


def test_pattern_search_escapes_like_wildcards(session: Session) -> None:
    add_trace(session, "tr_underscore", summary="value 1_0 set")
    add_trace(session, "tr_letter", summary="value 1x0 set")
    add_trace(session, "tr_percent", summary="rate 5% up")
    add_trace(session, "tr_plain", summary="rate 55 up")
    session.commit()
    assert pattern_search(session, "trace", ["1_0"], owner=OWNER) == [("tr_underscore", 1.0)]
    assert pattern_search(session, "trace", ["5%"], owner=OWNER) == [("tr_percent", 1.0)]
    assert pattern_search(session, "trace", ["", "  "], owner=OWNER) == []


# ---------------------------------------------------------------------------------------------- hostile text


def test_query_terms_and_quoting() -> None:
    assert query_terms('  (foo), "bar" foo  BAR __init__ ') == ["foo", "bar", "__init__"]
    assert match_expression(['say "hi"'], "word") == '"say ""hi"""'
    assert match_expression(["a", "abc"], "word") == '"a" OR "abc"'
    assert match_expression(["a", "abc"], "trigram") == '"abc"'
    assert match_expression(["!!!"], "word") is None
    assert query_terms("x\x00yz \ud800abc") == ["x", "yz", "abc"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fuzz_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    postgres = request.getfixturevalue("postgres") if request.param == "postgresql" else None
    if postgres is None:
        path: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
        url = f"sqlite:///{path}"
    else:
        url = postgres.create()
    eng = create_db_engine(url, busy_timeout_ms=2000)
    migrate(eng)
    with Session(eng) as s:
        seed_episode(s)
        add_trace(s, "tr_1", summary='He said "NEAR(a b)" AND OR NOT * ^ : - + {col} [x]', agent_text="解析每个持仓")
        s.commit()
    yield eng
    eng.dispose()
    if postgres is not None:
        postgres.drop(url)


FTS_SYNTAX = st.text(alphabet="\"*^:()-+{}[],.AND OR NOT NEAR\\%_ 解析 \x00\t&|!<>'", max_size=40)
"""FTS5 and tsquery syntax: quotes, operators, prefixes, columns, NEAR, phrase and negation marks."""


@settings(max_examples=150, deadline=None)
@given(
    query=st.one_of(st.text(), FTS_SYNTAX, st.lists(st.text(max_size=6), max_size=40).map(" ".join)),
    kind=st.sampled_from(sorted(FTS_SPECS)),
)
@example(query='"', kind="trace")
@example(query='NEAR("a" "b", 2)', kind="trace")
@example(query="a* OR -b AND ^c", kind="policy")
@example(query="col:value title:x", kind="policy")
@example(query="\x00abc\x00", kind="skill")
@example(query="\ud800 lone surrogate", kind="world_model")
def test_arbitrary_query_text_never_raises(fuzz_engine: Engine, query: str, kind: FtsKind) -> None:
    with Session(fuzz_engine) as session:
        for tokenizer in ("word", "trigram"):
            hits = fts_search(session, kind, query, owner=OWNER, tokenizer=tokenizer)
            assert all(isinstance(i, str) and isinstance(s, float) for i, s in hits)
        pattern_search(session, kind, query.split() or [query], owner=OWNER)


# ---------------------------------------------------------------------------------------------- ranking in two steps


def test_a_namespace_outranked_by_others_still_finds_its_matches(session: Session) -> None:
    """The best 100 index matches all belong to another namespace: the exhaustive form must find ours."""
    for i in range(130):
        add_trace(session, f"tr_o{i}", owner=OTHER, step_key=f"o{i}", summary="deploy deploy deploy the service")
    add_trace(session, "tr_mine", summary="deploy notes, written long after the other deploys were done")
    session.commit()
    assert ids(session, "deploy", "word") == ["tr_mine"]


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)  # PostgreSQL ranks in one statement: no probe
def test_a_small_table_is_searched_without_a_saturation_probe(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memos_bridge.storage import fts

    add_trace(session, "tr_1", summary="deploy the service")
    add_trace(session, "tr_2", owner=OTHER, step_key="o", summary="deploy the service")
    session.commit()
    probes: list[str] = []
    original = fts._saturated

    def spy(db: Session, kind: FtsKind, tokenizer: Tokenizer, expr: str, inner: int) -> bool:
        probes.append(expr)
        return original(db, kind, tokenizer, expr, inner)

    monkeypatch.setattr(fts, "_saturated", spy)
    assert ids(session, "deploy", "word") == ["tr_1"]
    assert probes == []  # two rows cannot have overflowed the 100-row inner set
