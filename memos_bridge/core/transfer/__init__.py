"""`memory.export` and `memory.import`: a namespace's memory as a file, and back.

Two export formats, for two readers:
- JSONL (`jsonl.py`, layout in `records.py`) is for the service: lossless — every row of the namespace with
  its ids, statuses, strengths, links and history — so `memory.import` rebuilds the same recall in this home
  or another one;
- Markdown (`markdown.py`) is for people: what was learnt and remembered, grouped by type. It cannot be
  imported, and the import says so.

Import also reads hermes-agent's MEMORY.md / USER.md (`hermes.py`), so moving from Hermes' built-in memory
keeps what it knew.

The namespace rule is the one every read follows (`core/namespace.py`): the namespace named, else the
session's, else the default one (profile `default`, no workspace); an export never contains another
namespace's rows. Paths are resolved and files written by `paths.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio.to_thread

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.namespace import bulk_scope
from memos_bridge.core.transfer import hermes, jsonl, markdown, paths
from memos_bridge.core.transfer.export_store import ExportScope, close_kinds, readable_rows, schema_version
from memos_bridge.storage.owner import OwnerFilter

__all__ = ["export_memories", "import_memories"]


def _namespace(owner: OwnerFilter) -> dict[str, Any]:
    return {"agentKind": owner.agent_kind, "profileId": owner.profile_id, "workspaceId": owner.workspace_id}


async def export_memories(ctx: LearningContext, params: dto.MemoryExportParams) -> dto.MemoryExportResult:
    kinds = close_kinds(params.kinds)
    shown = [kind for kind in markdown.KINDS if kind in kinds]
    if params.format == "markdown" and not shown:
        raise MemosError(
            ErrorCode.INVALID_ARGUMENT,
            "a Markdown export shows experiences (policy), skills, world models and remembered memories; "
            f"kinds {sorted(kinds)} have no Markdown form (use format jsonl)",
            {"kinds": sorted(kinds)},
        )
    owner = await ctx.db.read(lambda db: bulk_scope(db, params.namespace, params.session_id))
    scope = ExportScope(owner, kinds, params.include_forgotten)
    target = await anyio.to_thread.run_sync(
        paths.prepare_target, ctx.settings.home, params.path, params.format, ctx.clock(), params.overwrite
    )
    if params.format == "jsonl":
        counts, size = await jsonl.export_jsonl(ctx, scope, _namespace(owner), target, params)
    else:
        rows, version = await ctx.db.read(lambda db: (readable_rows(db, scope, shown), schema_version(db)))
        now = ctx.clock()

        def write() -> int:
            text = markdown.render(_namespace(owner), now, version, rows)
            return paths.write_text(target, text, params.overwrite)

        size = await anyio.to_thread.run_sync(write)
        counts = {kind: len(rows[kind]) for kind in shown}
    return dto.MemoryExportResult(path=str(target), format=params.format, counts=counts, bytes=size)


async def import_memories(ctx: LearningContext, params: dto.MemoryImportParams) -> dto.MemoryImportResult:
    if params.mode == "replace" and params.confirm is not True:
        raise MemosError(
            ErrorCode.INVALID_ARGUMENT,
            "mode replace deletes the target namespace's memories before importing: pass confirm: true",
            {"mode": params.mode, "confirm": params.confirm},
        )
    path, text = await anyio.to_thread.run_sync(paths.read_text, ctx.settings.home, params.path)
    if params.format == "hermes" or (params.format == "auto" and hermes.is_hermes_file(Path(path))):
        return await hermes.import_hermes(ctx, path, text, params)
    return await jsonl.import_jsonl(ctx, path, text, params)
