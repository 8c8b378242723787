"""Export / import building blocks: the JSONL format's checks, Hermes entry splitting, Markdown grouping, paths,
re-embedding texts, and (in-process, real database and embedder) the merge rules and failure atomicity."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.transfer import hermes, jsonl, markdown, paths, records, reembed
from memos_bridge.core.transfer.export_store import close_kinds
from memos_bridge.storage.models import MemoryLinkRow, MemoryRow
from memos_bridge.storage.vectors import from_blob, to_blob

pytestmark = pytest.mark.anyio

NAMESPACE = {"agentKind": None, "profileId": "default", "workspaceId": None}


def _header(**changes: Any) -> str:
    head = records.header(
        schema_version=6, exported_at=1_000, namespace=NAMESPACE, counts={}, kinds=["memory"], include_vectors=False
    )
    return json.dumps({**head, **changes})


def _memory(
    memory_id: str = "me_A", content: str | None = "The staging database listens on port 5433.", **extra: Any
) -> str:
    row = {
        "id": memory_id,
        "memory_type": "fact",
        "content": content,
        "content_hash": "",
        "created_at": 1,
        "updated_at": 1,
        **extra,
    }
    return json.dumps({"kind": "memory", "row": row})


def _reason(lines: list[str]) -> str:
    with pytest.raises(records.FormatError) as caught:
        records.parse_lines(lines)
    return f"line {caught.value.line}: {caught.value.reason}"


# ------------------------------------------------------------------------------------------ header


def test_a_header_is_read_and_anything_else_is_named_for_what_it_is() -> None:
    head = records.parse_header(_header(counts={"memory": 2}))
    assert head.version == 1 and head.schema_version == 6 and head.counts == {"memory": 2}
    assert head.namespace["profileId"] == "default" and head.kinds == ["memory"]
    cases = {
        "<!-- memos-bridge markdown export: for reading -->": "Markdown export",
        "# My notes": "not a memos-bridge export",
        '{"format": "something-else"}': "not a memos-bridge export",
        _header(version=2): "newer memos-bridge (export version 2",
        _header(version="1"): "version is not a positive integer",
        _header(schemaVersion=None): "schemaVersion",
        _header(namespace={"workspaceId": 3}): "profileId",
        _header(counts={"bogus": 1}): "counts",
    }
    for text, words in cases.items():
        with pytest.raises(records.FormatError) as caught:
            records.parse_header(text)
        assert caught.value.line == 1 and words in caught.value.reason, (text, caught.value.reason)


# ------------------------------------------------------------------------------------------ records


def test_a_record_is_checked_column_by_column_against_its_table() -> None:
    record = records.parse_record(2, _memory(strength=1, pinned=True, tags_json=["db"]))
    assert record.kind == "memory" and record.id == "me_A" and record.line == 2
    assert record.values["strength"] == 1.0 and isinstance(record.values["strength"], float)
    blob = to_blob(np.array([0.5, -0.25], dtype=np.float32))
    with_vec = records.parse_record(3, _memory(vec=base64.b64encode(blob).decode()))
    assert with_vec.values["vec"] == blob
    bad = {
        '{"kind": "memory"}': "needs a row object",
        '{"kind": "nope", "row": {}}': "unknown record kind 'nope'",
        '{"kind": "memory", "row": {}, "extra": 1}': "unexpected fields",
        _memory(colour="red"): "has no column colour",
        _memory(strength="high"): "memory.strength must be a finite number",
        _memory(pinned=1): "memory.pinned must be true or false",
        _memory(created_at=1.5): "memory.created_at must be an integer",
        _memory(content=None): "memory.content may not be null",
        _memory(vec="###"): "memory.vec is not valid base64",
        _memory(vec=base64.b64encode(b"abc").decode()): "not a float32 vector",
        json.dumps({"kind": "memory", "row": {"id": "me_A"}}): "lacks created_at, updated_at",
        "[1, 2]": "not a JSON object",
        '{"kind": ': "not valid JSON",
    }
    for text, words in bad.items():
        with pytest.raises(records.FormatError) as caught:
            records.parse_record(7, text)
        assert caught.value.line == 7 and words in caught.value.reason, (text, caught.value.reason)


def test_a_bad_line_anywhere_rejects_the_whole_file_naming_the_line() -> None:
    good = [_header(counts={"memory": 2}), _memory("me_A"), "", _memory("me_B")]
    parsed = records.parse_lines(good)
    assert [record.id for record in parsed.records] == ["me_A", "me_B"] and parsed.counts() == {"memory": 2}
    assert _reason([*good[:2], '{"kind": "memory", "row": {', good[3]]).startswith("line 3: the record is not valid")
    assert _reason([good[0], good[1], good[1]]) == "line 3: the memory me_A was already given on line 2"
    assert "announces 2 memory record(s) but the file holds 1" in _reason(good[:2])
    assert _reason([]).startswith("line 1: the file is empty")
    orphan = json.dumps(
        {
            "kind": "episode",
            "row": {"id": "ep_A", "session_id": "se_GONE", "started_at": 1},
        }
    )
    assert "points at session se_GONE, which the file does not contain" in _reason(
        [_header(counts={"episode": 1}), orphan]
    )


def test_rows_survive_the_round_trip_through_a_line() -> None:
    blob = to_blob(np.linspace(-1, 1, 8, dtype=np.float32))
    row = MemoryRow(
        id="me_RT",
        memory_type="rule",
        content="Line one\nline two \u2028 with a separator, “quotes” and 日本語",
        content_hash="x",
        tags_json=["a", "b"],
        importance=0.7,
        support=2,
        source="user",
        status="active",
        strength=0.65,
        pinned=False,
        protected=True,
        access_count=3,
        meta_json={"nested": {"k": [1, None]}},
        vec=blob,
        created_at=5,
        updated_at=6,
        owner_agent_kind="hermes",
        owner_profile_id="default",
        owner_workspace_id=None,
        share_scope="private",
    )
    spec = records.BY_KIND["memory"]
    line = records.dump_line(records.encode_row(spec, row, include_vectors=True))
    assert line.endswith("\n") and line.count("\n") == 1
    parsed = jsonl.parse(Path("x.jsonl"), _header(counts={"memory": 1}) + "\n" + line)
    values = parsed.records[0].values
    assert values["content"] == row.content and values["vec"] == blob and values["meta_json"] == row.meta_json
    assert "rid" not in values and values["strength"] == 0.65 and values["protected"] is True
    without = records.encode_row(spec, row, include_vectors=False)["row"]
    assert "vec" not in without and without["id"] == "me_RT"


def test_jsonl_parse_errors_become_invalid_argument_with_path_and_line() -> None:
    with pytest.raises(MemosError) as caught:
        jsonl.parse(Path("/x/y.jsonl"), _header(counts={"memory": 1}) + "\n{oops\n")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.details == {"path": "/x/y.jsonl", "line": 2} and "/x/y.jsonl: line 2" in caught.value.message


def test_export_kinds_bring_the_parents_their_rows_need() -> None:
    assert close_kinds(["trace"]) == {"trace", "episode", "session"}
    assert close_kinds(["feedback", "memory"]) == {"feedback", "episode", "session", "memory"}
    assert close_kinds(None) == {"session", "episode", "trace", "feedback", "policy", "world_model", "skill", "memory"}


def test_a_namespace_rewrites_owners_and_keeps_agent_kinds_unless_named() -> None:
    parsed = records.parse_lines(
        [_header(counts={"memory": 1}), _memory(owner_agent_kind="codex", owner_profile_id="alice")]
    )
    jsonl.rewrite_owner(parsed, dto.RuntimeNamespace(profile_id="bob", workspace_id="w"))
    values = parsed.records[0].values
    assert (values["owner_agent_kind"], values["owner_profile_id"], values["owner_workspace_id"]) == (
        "codex",
        "bob",
        "w",
    )
    jsonl.rewrite_owner(parsed, dto.RuntimeNamespace(agent_kind="hermes"))
    assert (values["owner_agent_kind"], values["owner_profile_id"], values["owner_workspace_id"]) == (
        "hermes",
        "default",
        None,
    )


# ------------------------------------------------------------------------------------------ re-embedding texts


def test_vectors_are_rebuilt_from_the_text_each_stage_embedded() -> None:
    step = {
        "step_kind": "tool",
        "summary": "rotate logs: logrotate(-f) → ok",
        "user_text": "rotate logs",
        "agent_text": "",
        "tool_calls_json": [{"name": "logrotate", "input": {"force": True}, "output": "rotated 3 files"}],
    }
    assert reembed.text_for("trace", "vec_summary", step) == step["summary"]
    # by default a tool step embeds its summary once, for both vectors; with "two" the action line apart
    assert reembed.text_for("trace", "vec_action", step) == step["summary"]
    action = reembed.text_for("trace", "vec_action", step, "two")
    assert action.startswith("logrotate(") and "rotated 3 files" in action
    policy = {"title": "T", "trigger": "when X", "procedure": "1. do Y", "induced_by": "feedback.experience"}
    assert reembed.text_for("policy", "vec", policy) == "T\nwhen X\n1. do Y"
    assert not reembed.is_induced_policy(policy) and reembed.is_induced_policy({**policy, "induced_by": "rules"})
    skill = {"name": "run_migrations", "invocation_guide": "# guide", "procedure_json": {"summary": "Run them."}}
    assert reembed.text_for("skill", "vec", skill) == "run migrations\nRun them."
    assert reembed.text_for("skill", "vec", {**skill, "procedure_json": {}}) == "run migrations\n# guide"
    assert reembed.text_for("world_model", "vec", {"title": "Env", "body": "B"}) == "Env\nB"
    assert reembed.text_for("memory", "vec", {"content": "C"}) == "C"
    mean = reembed.centroid([to_blob([1.0, 0.0]), to_blob([0.0, 1.0])], 2)
    assert mean is not None and np.allclose(from_blob(mean, 2), [2**-0.5, 2**-0.5])
    assert reembed.centroid([], 2) is None


def test_vectors_of_another_model_are_dropped_for_re_embedding() -> None:
    record = records.Record("memory", 2, {"id": "me_A", "vec": to_blob([1.0, 2.0, 3.0])})
    assert reembed.drop_foreign_vectors([record], 3) == 0 and record.values["vec"] is not None
    assert reembed.drop_foreign_vectors([record], 384) == 1 and record.values["vec"] is None


# ------------------------------------------------------------------------------------------ Hermes


def test_hermes_entries_are_split_on_the_section_sign_line() -> None:
    text = "First fact.\n§\nSecond fact,\non two lines.\n§\n\n§\n  §  \nThe § sign inside a line stays.\r\n§\r\n"
    assert hermes.split_entries(text) == [
        "First fact.",
        "Second fact,\non two lines.",
        "The § sign inside a line stays.",
    ]
    assert hermes.split_entries("") == [] and hermes.split_entries("§\n§") == []
    assert hermes.split_entries("§\nleading delimiter") == ["leading delimiter"]
    assert hermes.is_hermes_file(Path("/a/MEMORY.md")) and hermes.is_hermes_file(Path("User.MD"))
    assert not hermes.is_hermes_file(Path("memories.md"))
    assert hermes.memory_type(Path("USER.md")) == "preference" and hermes.memory_type(Path("MEMORY.md")) == "fact"
    assert hermes.memory_type(Path("notes.txt")) == "fact"
    with pytest.raises(MemosError) as long:
        hermes.check_entries(Path("MEMORY.md"), ["ok", "x" * (hermes.MAX_ENTRY + 1)])
    assert long.value.details == {"path": "MEMORY.md", "entry": 2}


# ------------------------------------------------------------------------------------------ Markdown


def _row(kind: str, **values: Any) -> dict[str, Any]:
    base = {"id": f"{kind[:2]}_{values.get('title', values.get('content', ''))[:4]}", "strength": 0.5, "created_at": 0}
    return {**base, **values}


def test_markdown_groups_by_type_in_reading_order() -> None:
    memories = [
        _row("me", content="fact one", memory_type="fact"),
        _row("me", content="odd one", memory_type="hunch"),
        _row("me", content="rule weak", memory_type="rule", strength=0.2),
        _row("me", content="rule gone", memory_type="rule", strength=0.9, forgotten_at=5),
        _row("me", content="rule strong", memory_type="rule", strength=0.9),
        _row("me", content="pref", memory_type="preference"),
    ]
    grouped = markdown.group(memories, "memory_type", markdown.MEMORY_TYPES)
    assert list(grouped) == ["rule", "preference", "fact", "hunch"]
    assert [m["content"] for m in grouped["rule"]] == ["rule strong", "rule weak", "rule gone"]
    assert markdown.status_of({"forgotten_at": 1, "archived_at": 1}) == "forgotten"
    assert markdown.status_of({"archived_at": 1, "status": "active"}) == "archived"
    assert markdown.status_of({"status": "candidate"}) == "candidate"


def test_markdown_renders_guidance_by_experience_type() -> None:
    avoid = _row(
        "po",
        title="Check the VPN first",
        experience_type="failure_avoidance",
        trigger="deploying billing",
        procedure="1. Deploying without the VPN",
        decision_guidance_json={"preference": ["Run make vpn-check"], "antiPattern": []},
        verification="vpn-check passes",
        lesson_json={"lines": ["Always check the VPN first."]},
        status="active",
        support=2,
        confidence=0.7,
    )
    worked = _row("po", title="Migrate in the container", experience_type="success_pattern", procedure="Run alembic")
    text = markdown.render(
        NAMESPACE | {"workspaceId": "w1"},
        0,
        6,
        {"policy": [worked, avoid], "memory": [_row("me", content="Use tabs.\nAlways.", memory_type="rule")]},
    )
    lines = text.splitlines()
    assert lines[0].startswith(records.MARKDOWN_MARKER) and lines[1] == "# Memories — profile `default`, workspace `w1`"
    assert "2 experiences, 0 skills, 0 world models, 1 remembered memory." in text
    assert text.index("### What worked") < text.index("### Failures to avoid") < text.index("## Remembered")
    block = text[text.index("#### Check the VPN first") :]
    assert "*When:* deploying billing" in block and "**Avoid:** Deploying without the VPN" in block
    assert "**Instead:** Run make vpn-check" in block and "**Check:** vpn-check passes" in block
    assert "**Lesson:** Always check the VPN first." in block
    assert "<sub>`po_Chec` · active · strength 0.50 · support 2 · confidence 0.70" in block
    assert "**Do:** Run alembic" in text
    assert "### Rules\n\n- Use tabs.\n  Always.\n  <sub>`me_Use ` · active" in text


# ------------------------------------------------------------------------------------------ paths


def test_export_paths_resolve_under_the_home_and_refuse_what_they_cannot_use(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    target = paths.prepare_target(home, "sub/out.jsonl", "jsonl", 0, overwrite=False)
    assert target == home / "exports" / "sub" / "out.jsonl" and target.parent.is_dir()
    default = paths.prepare_target(home, None, "markdown", 0, overwrite=False)
    assert default == home / "exports" / "memos-19700101-000000Z.md"
    default.write_text("x")
    assert paths.default_name(default.parent, "markdown", 0).name == "memos-19700101-000000Z-2.md"
    assert paths.write_text(target, "hello\n", overwrite=False) == 6
    with pytest.raises(MemosError) as taken:
        paths.prepare_target(home, str(target), "jsonl", 0, overwrite=False)
    assert taken.value.code is ErrorCode.CONFLICT
    with pytest.raises(MemosError) as raced:  # the name was taken between the check and the write
        paths.write_text(target, "other\n", overwrite=False)
    assert raced.value.code is ErrorCode.CONFLICT and target.read_text() == "hello\n"
    assert paths.write_text(target, "newer\n", overwrite=True) == 6 and target.read_text() == "newer\n"
    with pytest.raises(MemosError) as outside:
        paths.prepare_target(home, str(tmp_path / "elsewhere" / "x.jsonl"), "jsonl", 0, overwrite=False)
    assert outside.value.code is ErrorCode.INVALID_ARGUMENT and "does not exist" in outside.value.message
    with pytest.raises(MemosError) as folder:
        paths.prepare_target(home, str(tmp_path), "jsonl", 0, overwrite=True)
    assert "is a folder" in folder.value.message
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.jsonl"]  # no temporary files left
    assert paths.read_text(home, "sub/out.jsonl") == (target, "newer\n")
    with pytest.raises(MemosError) as missing:
        paths.read_text(home, str(tmp_path / "none.jsonl"))
    assert "no such file" in missing.value.message


# ------------------------------------------------------------------------------------------ in-process imports


async def _import(core: MemoryCore, path: Path, **extra: Any) -> dto.MemoryImportResult:
    return await core.import_memories(dto.MemoryImportParams.model_validate({"path": str(path), **extra}))


async def _count(core: MemoryCore, model: Any) -> int:
    counted: int | None = await core.db.read(lambda db: db.scalar(select(func.count()).select_from(model)))
    return int(counted or 0)


async def test_an_equal_memory_is_skipped_and_links_point_at_the_kept_one(core_factory: Any, tmp_path: Path) -> None:
    core: MemoryCore = await core_factory()
    kept = await core.remember(dto.MemoryRememberParams(content="The staging database listens on port 5433."))
    link = {
        "kind": "memory_link",
        "row": {
            "from_kind": "memory",
            "from_id": "me_SAME",
            "to_kind": "memory",
            "to_id": "me_OTHER",
            "relation": "related",
            "created_at": 1,
        },
    }
    lines = [
        _header(counts={"memory": 2, "memory_link": 1}),
        _memory("me_SAME", "the staging database listens on PORT 5433.", owner_agent_kind="codex"),
        _memory("me_OTHER", "Backups run nightly at 02:00."),
        json.dumps(link),
    ]
    export = tmp_path / "x.jsonl"
    export.write_text("\n".join(lines) + "\n")
    result = await _import(core, export)
    assert result.imported == {"memory": 1, "memory_link": 1} and result.skipped == {"memory": 1, "memory_link": 0}
    stored = await core.db.read(lambda db: db.scalars(select(MemoryLinkRow)).one())
    assert (stored.from_id, stored.to_id) == (kept.id, "me_OTHER")
    support = await core.db.read(lambda db: db.scalar(select(MemoryRow.support).where(MemoryRow.id == kept.id)))
    assert support == 1  # not merged into: a re-import would raise it again
    again = await _import(core, export)
    assert again.imported == {"memory": 0, "memory_link": 0} and await _count(core, MemoryRow) == 2
    hits = await core.search(dto.MemorySearchParams(query="nightly backups"))
    assert "me_OTHER" in [hit.ref_id for hit in hits.hits]  # the vector index was refreshed


async def test_an_import_that_cannot_embed_writes_nothing(core_factory: Any, tmp_path: Path) -> None:
    core: MemoryCore = await core_factory()
    await core.remember(dto.MemoryRememberParams(content="Keep me."))
    export = tmp_path / "x.jsonl"
    export.write_text("\n".join([_header(counts={"memory": 1}), _memory("me_NEW", "Fresh memory.")]) + "\n")
    core.learning.ctx.embedder.down = True  # type: ignore[attr-defined]
    with pytest.raises(MemosError) as down:
        await _import(core, export, mode="replace", confirm=True)
    assert down.value.code is ErrorCode.EMBEDDING_UNAVAILABLE
    assert await _count(core, MemoryRow) == 1  # the purge of replace did not run either
    core.learning.ctx.embedder.down = False  # type: ignore[attr-defined]
    replaced = await _import(core, export, mode="replace", confirm=True)
    assert replaced.purged["memories"] == 1 and replaced.imported == {"memory": 1}
    assert await _count(core, MemoryRow) == 1
