"""The tiered engine end to end in-process: tiers, channels, rendering by type, provenance, namespaces.

The tests that exercise the search channels (full text, patterns, identifiers, vectors, namespaces, roll-ups)
run on SQLite and on PostgreSQL (`search_core_factory`): there the keyword channels are served by the
tsvector and 3-gram indexes and the vector channels by pgvector, inside the database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from memos_bridge.ids import new_id
from memos_bridge.storage.models import PolicyRow, SkillRow, WorldModelRow
from memos_bridge.storage.vectors import to_blob

pytestmark = pytest.mark.anyio

OWNER = {"owner_agent_kind": "t", "owner_profile_id": "default", "owner_workspace_id": None}
#: The full rendering (sections, ids, scope lines, past steps): what these tests read; turns default to compact.
FULL = {"render_mode": "full"}


@pytest.fixture(params=["sqlite", "postgresql"])
async def search_core_factory(request: pytest.FixtureRequest, core_factory: Any, tmp_path: Path) -> AsyncIterator[Any]:
    """`core_factory`, once on SQLite and once with every core on its own fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield core_factory
        return
    postgres = request.getfixturevalue("postgres")
    made: list[tuple[MemoryCore, str]] = []

    async def make(llm: object = None, **overrides: Any) -> MemoryCore:
        url = postgres.create()
        storage = {**overrides.pop("storage", {}), "url": url}
        core: MemoryCore = await core_factory(llm, home=tmp_path / f"pg-home{len(made)}", storage=storage, **overrides)
        made.append((core, url))
        return core

    yield make
    for core, url in made:
        core.db.close()
        postgres.drop(url)


async def _vec(core: MemoryCore, text: str) -> bytes:
    return to_blob(np.asarray((await core.embedder.embed([text]))[0]))


async def add_policy(
    core: MemoryCore,
    title: str,
    *,
    kind: str = "success_pattern",
    trigger: str = "",
    procedure: str = "",
    verification: str = "",
    boundary: str = "",
    avoid: list[str] | None = None,
    prefer: list[str] | None = None,
    updated_at: int = 1000,
    owner: dict[str, Any] | None = None,
    status: str = "active",
) -> str:
    policy_id = new_id("policy")
    vec = await _vec(core, f"{title}\n{trigger}\n{procedure}")
    row = PolicyRow(
        id=policy_id,
        title=title,
        trigger=trigger,
        procedure=procedure,
        verification=verification,
        boundary=boundary,
        status=status,
        experience_type=kind,
        salience=0.8,
        confidence=0.8,
        gain=0.5,
        decision_guidance_json={"preference": prefer or [], "antiPattern": avoid or []},
        vec=vec,
        created_at=updated_at,
        updated_at=updated_at,
        **(owner or OWNER),
    )
    await core.db.write(lambda db: db.add(row))
    core.vectors.upsert("policy", row)
    return policy_id


async def add_skill(
    core: MemoryCore,
    name: str,
    guide: str,
    *,
    eta: float = 0.6,
    sources: list[str] | None = None,
    updated_at: int = 2000,
) -> str:
    skill_id = new_id("skill")
    row = SkillRow(
        id=skill_id,
        name=name,
        status="active",
        invocation_guide=guide,
        eta=eta,
        source_policies_json=sources or [],
        vec=await _vec(core, f"{name}\n{guide}"),
        procedure_json={"decisionGuidance": {"preference": ["validate the XML namespace first"], "antiPattern": []}},
        created_at=updated_at,
        updated_at=updated_at,
        **OWNER,
    )
    await core.db.write(lambda db: db.add(row))
    core.vectors.upsert("skill", row)
    return skill_id


async def add_world(core: MemoryCore, title: str, body: str) -> str:
    world_id = new_id("world_model")
    row = WorldModelRow(
        id=world_id,
        title=title,
        body=body,
        status="active",
        vec=await _vec(core, f"{title}\n{body}"),
        created_at=1,
        updated_at=1,
        **OWNER,
    )
    await core.db.write(lambda db: db.add(row))
    core.vectors.upsert("world_model", row)
    return world_id


async def start(core: MemoryCore, text: str, session: str = "se_q", **extra: Any) -> dto.RetrievalResultDTO:
    return await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": text, "ts": 10**9, **extra})
    )


async def capture(
    core: MemoryCore, session: str, text: str, reply: str, tools: list[dict[str, Any]] | None = None, ts: int = 1
) -> dto.TurnEndResult:
    r = await core.turn_start(dto.TurnInputDTO(agent="t", session_id=session, user_text=text, ts=ts))
    return await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": "t",
                "sessionId": session,
                "episodeId": r.query.episode_id,
                "ts": ts + 1,
                "agentText": reply,
                "toolCalls": tools or [],
            }
        )
    )


async def test_all_tiers_recall_and_render_in_stable_order(search_core_factory: Any) -> None:
    core = await search_core_factory(retrieval=FULL)
    await capture(core, "se_old", "parse the SEC 13F infoTable holdings", "Parsed 312 infoTable rows with lxml.")
    await add_policy(
        core,
        "Parse 13F infoTable rows with the XML namespace",
        trigger="SEC 13F infoTable parsing",
        procedure="pass the informationtable namespace to every find()",
        verification="row count > 0",
    )
    await add_skill(core, "parse_13f_infotable", "Parse SEC 13F infoTable XML into holdings rows.\n\nSteps: ...")
    await add_world(core, "SEC 13F filings", "13F infoTable XML uses a default namespace; values are in thousands.")
    result = await start(core, "how should I parse the SEC 13F infoTable holdings XML?")
    kinds = [h.ref_kind for h in result.hits]
    assert {"skill", "trace", "experience", "world-model"} <= set(kinds)
    assert [h.tier for h in result.hits] == sorted(h.tier for h in result.hits)
    block = result.injected_context
    order = [
        block.index(s)
        # lessons first, then how-to and what holds, then the past itself
        for s in ("## Experiences", "## Candidate skills", "## Environment knowledge", "## Relevant trace memories")
    ]
    assert order == sorted(order)
    assert 'memos_skill_get(id="sk_' in block
    assert "Do: pass the informationtable namespace" in block and "Check: row count > 0" in block
    assert result.stats is not None and result.stats.scenario in ("task", "unknown_safe")


async def test_failure_avoidance_is_never_phrased_as_what_worked(core_factory: Any) -> None:
    core = await core_factory(retrieval=FULL)
    await add_policy(
        core,
        "Avoid summing 13F values without scaling",
        kind="failure_avoidance",
        trigger="aggregating 13F holdings value",
        procedure="summing the raw value column as dollars",
        avoid=["reporting thousands as dollars"],
        prefer=["multiply value by 1000"],
    )
    block = (await start(core, "aggregate the 13F holdings value column")).injected_context
    assert "[failure to avoid]" in block
    assert "Avoid: summing the raw value column as dollars" in block
    assert "Instead: multiply value by 1000" in block
    assert "Do:" not in block and "what worked" not in block


async def test_repair_instruction_and_preference_render_by_type(core_factory: Any) -> None:
    core = await core_factory(retrieval=FULL)
    await add_policy(
        core,
        "Use CUSIP not issuer name as the key",
        kind="repair_instruction",
        trigger="joining 13F holdings across quarters",
        procedure="join on cusip",
    )
    await add_policy(
        core,
        "User prefers tables in markdown",
        kind="preference",
        trigger="reporting 13F holdings",
        procedure="render results as a markdown table",
    )
    block = (await start(core, "join 13F holdings across quarters and report them")).injected_context
    assert "[correction (not yet confirmed by a success)]" in block and "Fix: join on cusip" in block
    assert "[user preference]" in block and "Prefer: render results as a markdown table" in block


async def test_provenance_drops_experiences_a_recalled_skill_was_built_from(core_factory: Any) -> None:
    core = await core_factory(retrieval=FULL)
    old = await add_policy(
        core,
        "Parse 13F infoTable with namespace",
        trigger="13F infoTable parsing",
        procedure="pass the namespace to find()",
        updated_at=1000,
    )
    await add_skill(
        core, "parse_13f_infotable", "Parse SEC 13F infoTable XML with its namespace.", sources=[old], updated_at=2000
    )
    result = await start(core, "parse the 13F infoTable XML")
    assert old in [h.ref_id for h in result.hits]  # recalled ...
    assert "pass the namespace to find()" not in result.injected_context  # ... but not repeated

    core2 = await core_factory(retrieval=FULL)
    newer = await add_policy(
        core2,
        "Parse 13F infoTable with namespace",
        trigger="13F infoTable parsing",
        procedure="pass the namespace to find()",
        avoid=["assuming shares are integers"],
        prefer=["validate the XML namespace first", "read the value column as thousands of USD"],
        updated_at=3000,
    )
    await add_skill(
        core2,
        "parse_13f_infotable",
        "Parse SEC 13F infoTable XML with its namespace.",
        sources=[newer],
        updated_at=2000,
    )
    block = (await start(core2, "parse the 13F infoTable XML")).injected_context
    assert "[update to a recalled skill]" in block and "Avoid: assuming shares are integers" in block
    assert "Do: pass the namespace to find()" not in block
    update = block.split("[update to a recalled skill]")[1].split("\n\n")[0]
    assert "Prefer: read the value column as thousands of USD" in update  # new guidance
    assert "validate the XML namespace first" not in update  # the skill already carries it


async def test_steps_a_recalled_experience_or_skill_was_distilled_from_are_not_injected(core_factory: Any) -> None:
    """The lesson stands for its raw steps: recalled next to it, another task's script and answer are what a
    small model copies. Steps that nothing recalled was distilled from still come back."""
    from memos_bridge.storage.models import PolicyRow as Policy

    core = await core_factory()
    source = await capture(core, "se_a", "parse the SEC 13F infoTable holdings", "Parsed 312 infoTable rows with lxml.")
    other = await capture(core, "se_b", "parse the SEC 13F infoTable for Q2", "Parsed the Q2 infoTable rows too.")
    experience = await add_policy(
        core,
        "Parse 13F infoTable rows with the XML namespace",
        kind="repair_instruction",
        trigger="SEC 13F infoTable parsing",
        procedure="strip the informationtable namespace after parsing",
    )

    def link(db: Any) -> None:
        db.query(Policy).filter_by(id=experience).one().source_trace_ids_json = list(source.trace_ids)

    await core.db.write(link)
    result = await start(core, "parse the SEC 13F infoTable holdings XML")
    recalled = [h.ref_id for h in result.hits]
    assert experience in recalled
    assert not set(source.trace_ids) & set(recalled)  # distilled into the experience: left out
    assert set(other.trace_ids) & set(recalled)  # no recalled memory stands for these
    assert "Parsed 312 infoTable rows" not in result.injected_context

    # a skill stands for the steps of the policies it was built from
    core2 = await core_factory()
    steps = await capture(core2, "se_a", "parse the SEC 13F infoTable holdings", "Parsed 312 infoTable rows with lxml.")
    policy = await add_policy(core2, "Parse 13F infoTable", trigger="13F", procedure="namespace", status="candidate")

    def link2(db: Any) -> None:
        db.query(Policy).filter_by(id=policy).one().source_trace_ids_json = list(steps.trace_ids)

    await core2.db.write(link2)
    await add_skill(core2, "parse_13f_infotable", "Parse SEC 13F infoTable holdings XML.", sources=[policy])
    result = await start(core2, "parse the SEC 13F infoTable holdings XML")
    assert "skill" in [h.ref_kind for h in result.hits]
    assert not set(steps.trace_ids) & {h.ref_id for h in result.hits}


async def test_low_reliability_skills_and_archived_rows_are_not_recalled(search_core_factory: Any) -> None:
    core = await search_core_factory()
    await add_skill(core, "flaky_deploy", "Deploy the kubernetes cluster with helm.", eta=0.05)
    await add_policy(
        core, "Deploy kubernetes with helm", trigger="kubernetes deploy", procedure="helm upgrade", status="archived"
    )
    result = await start(core, "deploy the kubernetes cluster with helm")
    assert result.hits == []


async def test_no_cross_namespace_leak_through_any_tier(search_core_factory: Any) -> None:
    core = await search_core_factory()
    other = {"owner_agent_kind": "t", "owner_profile_id": "mallory", "owner_workspace_id": None}
    await add_policy(
        core,
        "Rotate the TLS certificate with certbot",
        trigger="TLS certificate renewal",
        procedure="certbot renew",
        owner=other,
    )
    await capture(
        core, "se_m", "rotate the TLS certificate with certbot", "Ran certbot renew.", ts=5
    )  # session se_m belongs to profile default: visible; checked below
    mine = await start(
        core, "rotate the TLS certificate with certbot", session="se_alice", namespace={"profileId": "alice"}
    )
    assert mine.hits == []
    search = await core.search(
        dto.MemorySearchParams(
            query="certbot TLS certificate",
            namespace={"profileId": "alice"},
            top_k=dto.TopKDTO(tier1=5, tier2=5, tier3=5),
        )
    )
    assert search.hits == []


async def test_chitchat_and_memos_commands_skip_retrieval(core_factory: Any) -> None:
    core = await core_factory()
    await capture(core, "se_a", "thanks for the help with the parser", "You're welcome.")
    for text, scenario in (("thanks!", "chitchat"), ("/memos status", "meta")):
        result = await start(core, text, session="se_b")
        assert result.hits == [] and result.injected_context == ""
        assert result.stats is not None and result.stats.skipped_reason == scenario


async def test_cjk_and_identifier_queries_are_found_exactly(search_core_factory: Any) -> None:
    core = await search_core_factory()
    cjk = await capture(core, "se_a", "解析持仓表时报错了", "原因是命名空间缺失，已修复。")
    ident = await capture(
        core, "se_b", "fix the failing import", "Fixed ERR_MODULE_NOT_FOUND in src/loader/index.mjs", ts=100
    )
    await capture(core, "se_c", "tidy the loader module", "Renamed variables in the loader.", ts=200)
    found = await core.search(dto.MemorySearchParams(query="持仓表"))
    assert cjk.trace_id in [h.ref_id for h in found.hits]
    assert {"fts_trigram", "pattern"} & set(found.hits[0].channels)
    found = await core.search(dto.MemorySearchParams(query="src/loader/index.mjs ERR_MODULE_NOT_FOUND"))
    assert found.hits and found.hits[0].ref_id == ident.trace_id and "exact" in found.hits[0].channels


async def test_error_signature_query_uses_the_structural_channel(search_core_factory: Any) -> None:
    core = await search_core_factory()
    end = await capture(
        core,
        "se_a",
        "run the parser",
        "It failed, fixed the key.",
        tools=[
            {
                "name": "bash",
                "input": {"cmd": "python parse.py"},
                "output": "KeyError: 'nameOfIssuer'",
                "errorCode": "KeyError",
            }
        ],
    )
    found = await core.search(dto.MemorySearchParams(query="KeyError: 'cusip'"))
    structural = [h for h in found.hits if "structural" in h.channels]
    assert structural and structural[0].ref_id in [*end.trace_ids, end.episode_id]


async def test_a_past_task_is_never_shown_twice_as_steps_and_roll_up(search_core_factory: Any) -> None:
    core = await search_core_factory()
    end = await capture(
        core,
        "se_a",
        "set up the postgres database for the analytics service",
        "Postgres is configured for the analytics service.",
        tools=[
            {"name": "bash", "input": {"cmd": "createdb analytics"}, "output": "created postgres db"},
            {"name": "bash", "input": {"cmd": "psql -f schema.sql analytics"}, "output": "CREATE TABLE"},
        ],
    )
    result = await start(core, "set up a postgres database for the analytics service")
    steps = [h for h in result.hits if h.ref_kind == "trace" and h.ref_id in end.trace_ids]
    rollups = [h for h in result.hits if h.ref_kind == "episode" and h.ref_id == end.episode_id]
    assert steps or rollups
    assert not (steps and rollups)


async def test_memory_search_can_ask_for_skills_only(search_core_factory: Any) -> None:
    core = await search_core_factory()
    skill = await add_skill(core, "parse_13f_infotable", "Parse SEC 13F infoTable XML into holdings rows.")
    await capture(core, "se_a", "parse the SEC 13F infoTable", "Parsed it.")
    found = await core.search(
        dto.MemorySearchParams(query="parse 13F infoTable", top_k=dto.TopKDTO(tier1=3, tier2=0, tier3=0))
    )
    assert [h.ref_id for h in found.hits] == [skill]


async def test_channel_filters_for_evaluation(search_core_factory: Any) -> None:
    core = await search_core_factory()
    await capture(core, "se_a", "configure the nginx reverse proxy", "Added proxy_pass and reloaded nginx.")
    dense = await core.search(dto.MemorySearchParams(query="nginx reverse proxy", filters={"channels": ["vector"]}))
    text = await core.search(dto.MemorySearchParams(query="nginx reverse proxy", filters={"channels": ["keyword"]}))
    assert dense.hits and all(set(h.channels) <= {"vec_summary", "vec_action"} for h in dense.hits)
    assert text.hits and all(not set(h.channels) & {"vec_summary", "vec_action"} for h in text.hits)


async def test_guidance_of_policies_linked_to_recalled_traces_is_rendered(core_factory: Any) -> None:
    from memos_bridge.storage.models import TracePolicyLinkRow

    core = await core_factory(retrieval=FULL)
    end = await capture(core, "se_a", "configure the nginx reverse proxy", "Added proxy_pass and reloaded nginx.")
    policy_id = new_id("policy")
    row = PolicyRow(
        id=policy_id,
        title="qqq",
        trigger="",
        procedure="",
        verification="",
        boundary="",
        status="active",
        decision_guidance_json={
            "preference": ["run the config test before reloading"],
            "antiPattern": ["editing live"],
        },
        created_at=1,
        updated_at=1,
        **OWNER,
    )

    def store(db: Any) -> None:
        db.add(row)
        db.flush()
        db.add(TracePolicyLinkRow(trace_id=end.trace_id, policy_id=policy_id, episode_id=end.episode_id, created_at=1))

    await core.db.write(store)
    result = await start(core, "configure the nginx reverse proxy")
    assert end.trace_id in [h.ref_id for h in result.hits] and policy_id not in [h.ref_id for h in result.hits]
    block = result.injected_context
    assert "## Decision guidance" in block
    assert "Prefer: run the config test before reloading" in block and "Avoid: editing live" in block


async def test_steps_still_visible_to_the_host_are_not_injected_again(core_factory: Any) -> None:
    core = await core_factory(session={"merge_max_gap_ms": 1})
    old = await capture(core, "se_a", "configure the nginx reverse proxy", "Added proxy_pass and reloaded nginx.", ts=1)
    newer = await capture(core, "se_a", "configure the nginx reverse proxy cache", "Enabled proxy_cache.", ts=1000)
    # same session, new episode (the gap closed the previous ones); no hints: other episodes are recallable
    plain = await start(core, "configure the nginx reverse proxy", session="se_a")
    assert {old.trace_id, newer.trace_id} <= {h.ref_id for h in plain.hits}
    hinted = await start(
        core, "configure the nginx reverse proxy", session="se_a", contextHints={"visibleContextStartTs": 500}
    )
    ids = {h.ref_id for h in hinted.hits}
    assert old.trace_id in ids and newer.trace_id not in ids  # compressed away vs still on screen
    by_text = await start(
        core,
        "configure the nginx reverse proxy",
        session="se_a",
        contextHints={"visibleContextUserTexts": ["configure the nginx reverse proxy"]},
    )
    assert old.trace_id not in {h.ref_id for h in by_text.hits}


async def test_a_slow_channel_at_the_deadline_returns_what_is_ready(search_core_factory: Any) -> None:
    import time as _time

    core = await search_core_factory()
    end = await capture(core, "se_a", "configure the nginx reverse proxy", "Added proxy_pass and reloaded nginx.")
    core.embedder.delay = 5.0  # the query embedding will not finish in time
    started = _time.monotonic()
    deadline = int(_time.time() * 1000) + 800
    result = await start(core, "configure the nginx reverse proxy", session="se_b", deadlineAt=deadline)
    assert _time.monotonic() - started < 2.0
    assert result.stats is not None and "deadline:partial" in result.stats.degraded
    assert [h.ref_id for h in result.hits] == [end.trace_id]  # found by the full-text channel in time
    assert all(not set(h.channels) & {"vec_summary", "vec_action"} for h in result.hits)


async def test_a_steps_live_priority_counts_its_age_once(core_factory: Any) -> None:
    """Late feedback re-scores an old episode: its stored priority is already decayed by the step's age,
    so retrieval must derive the live priority from the value, not decay the stored priority again."""
    from types import SimpleNamespace

    from memos_bridge.core import reward
    from memos_bridge.retrieval.fusion import Candidate

    core = await core_factory()
    now = 100 * reward.MS_PER_DAY
    month_old = now - 30 * reward.MS_PER_DAY
    row = SimpleNamespace(
        id="tr_1",
        ts=month_old,
        value=0.8,
        priority=reward.priority_at(0.8, month_old, now),  # what a re-score today stores: 0.4
        strength=0.5,
        summary="s",
        episode_id="ep_1",
        step_index=1,
        user_text="",
        agent_text="a",
        tool_calls_json=[],
    )
    fresh = SimpleNamespace(**{**vars(row), "id": "tr_2", "ts": now, "priority": 0.8})
    old_cand, new_cand = Candidate(kind="trace", ref_id="tr_1", tier=2), Candidate(kind="trace", ref_id="tr_2", tier=2)
    core.retriever._attach("trace", old_cand, row, now)
    core.retriever._attach("trace", new_cand, fresh, now)
    # a 30-day half-life: the month-old step keeps half of its value, not a quarter
    assert old_cand.strength == pytest.approx(new_cand.strength - 0.4)


async def test_a_two_letter_word_finds_its_row_not_longer_words_that_contain_it(search_core_factory: Any) -> None:
    """ "DB" matches the policy about the DB, not the one that only says "feedback"; only CJK is matched as a
    substring."""
    core = await search_core_factory()
    about_db = await add_policy(core, "Back up the DB before a schema migration", trigger="DB schema migration")
    about_feedback = await add_policy(
        core, "Collect feedback from every reviewer", trigger="feedback rounds on design documents"
    )
    result = await core.search(dto.MemorySearchParams(agent="t", query="DB"))
    found = {hit.ref_id: hit for hit in result.hits}
    assert about_db in found
    assert about_feedback not in found or "pattern" not in (found[about_feedback].channels or [])
    if about_feedback in found:
        assert found[about_db].score > found[about_feedback].score


def test_subject_of_a_skill_a_success_procedure_and_a_past_step() -> None:
    """The names that decide whether a skill, an experience without a lesson record or a past step is about a
    request: the files and identifiers it names, without tool names, quoted requests or boilerplate files."""
    from memos_bridge.retrieval.engine import _boilerplate_files, _named_subjects, skill_subject_terms
    from memos_bridge.retrieval.render import ExperienceSnippet, SkillSnippet

    skill = SkillSnippet(
        ref_id="sk_1",
        name="weights",
        guide="# t\n\nweight is in lb. Tasks involving larkspur_parcels_2024.csv; learnt on “Open gateway.log now”.",
        eta=0.5,
    )
    assert skill_subject_terms(skill) == ["larkspur_parcels_2024.csv"]
    procedure = ExperienceSnippet(
        ref_id="po_1",
        experience_type="procedural",
        title="Carrier handled shipments kestrel_manifest_apr13 txt many: read_file → write_file",
        trigger="",
        procedure="1. Call `read_file(path=kestrel_manifest_apr13.txt)`\n2. Call `write_file(path=answer.json)`",
        verification="",
        boundary="",
    )
    assert _named_subjects(procedure) == ["kestrel_manifest_apr13"]
    steps = {
        "tr_a": ["amberly_irrigation_2024.csv", "answer.json"],
        "tr_b": ["brookvale_meter_reads.csv", "answer.json"],
        "tr_c": ["cobalt_volumes.csv", "answer.json"],
        "tr_d": ["cobalt_volumes.csv", "answer.json"],
    }
    # answer.json is named with three different data files: boilerplate; each data file is a subject
    assert _boilerplate_files(steps) == {"answer.json"}
    assert _boilerplate_files({"tr_a": ["answer.json", "a.csv"]}) == set()


async def test_a_second_service_on_one_postgresql_database_recalls_at_once(
    core_factory: Any, postgres_url: str, tmp_path: Path
) -> None:
    """Two services on one database: what one captured, the other finds by keywords and by meaning at once,
    with no index of its own to load or reload (the database searches both)."""
    first = await core_factory(home=tmp_path / "first", storage={"url": postgres_url})
    second = await core_factory(home=tmp_path / "second", storage={"url": postgres_url})
    assert second.vectors.in_database
    await second.search(dto.MemorySearchParams(query="warm up the search"))  # nothing to see yet
    end = await capture(first, "se_a", "configure the nginx reverse proxy", "Added proxy_pass and reloaded nginx.")
    for channels in (["keyword"], ["vector"]):
        found = await second.search(dto.MemorySearchParams(query="nginx reverse proxy", filters={"channels": channels}))
        assert end.trace_id in {h.ref_id for h in found.hits}, channels
