"""Export to and import from the lossless JSONL format (`records.py` describes the file).

Export streams the namespace's rows to a temporary file inside one read transaction (a consistent
snapshot, off the event loop), then writes the header with the counts and renames the file into place.

Import never writes before it knows the whole file is good: it parses and checks every line first (a bad
line anywhere rejects the file, naming the line), embeds what needs a vector, and then writes everything in
ONE transaction — with `replace`, the purge of the target namespace is part of that same transaction, so a
failure leaves the home exactly as it was. Afterwards the in-memory vector indexes are reloaded from the
database, so the next search sees the imported rows; the full-text index was kept by the tables' triggers.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio.to_thread
from sqlalchemy.orm import Session

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core import purge
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.transfer import paths, records
from memos_bridge.core.transfer.export_store import EXPORT_KINDS, ExportScope, iter_export, schema_version
from memos_bridge.core.transfer.import_store import Applier, Outcome, VectorKey, present_ids
from memos_bridge.core.transfer.reembed import drop_foreign_vectors, embed_missing
from memos_bridge.storage.models import AuditEventRow

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- export


def _write_body(db: Session, scope: ExportScope, body: Path, include_vectors: bool) -> tuple[dict[str, int], int]:
    """Stream every record to `body` (runs in the read worker thread); returns (counts, schema version)."""
    counts: dict[str, int] = {}
    with body.open("w", encoding="utf-8", newline="\n") as out:
        for spec, row in iter_export(db, scope):
            out.write(records.dump_line(records.encode_row(spec, row, include_vectors=include_vectors)))
            counts[spec.kind] = counts.get(spec.kind, 0) + 1
    return counts, schema_version(db)


async def export_jsonl(
    ctx: LearningContext,
    scope: ExportScope,
    namespace: dict[str, Any],
    target: Path,
    params: dto.MemoryExportParams,
) -> tuple[dict[str, int], int]:
    """Write the export to `target`; returns (counts per record kind, bytes)."""
    body = await anyio.to_thread.run_sync(paths.temp_beside, target)
    try:
        counts, version = await ctx.db.read(lambda db: _write_body(db, scope, body, params.include_vectors))
        head = records.header(
            schema_version=version,
            exported_at=ctx.clock(),
            namespace=namespace,
            counts=counts,
            kinds=scope.kinds,
            include_vectors=params.include_vectors,
        )
        size = await anyio.to_thread.run_sync(paths.assemble, target, records.dump_line(head), body, params.overwrite)
    finally:
        await anyio.to_thread.run_sync(paths.remove_quietly, body)
    return {kind: counts[kind] for kind in records.BY_KIND if kind in counts}, size


# ---------------------------------------------------------------- import


def parse(path: Path, text: str) -> records.Parsed:
    """The whole file, checked; a `FormatError` becomes the client's invalid_argument naming the line."""
    try:
        # Split on newlines only: JSON escapes them inside strings, but not U+2028 and its kin, which
        # `str.splitlines` would also split on.
        return records.parse_lines(text.split("\n"))
    except records.FormatError as exc:
        raise MemosError(ErrorCode.INVALID_ARGUMENT, f"{path}: {exc}", {"path": str(path), "line": exc.line}) from None


def rewrite_owner(parsed: records.Parsed, namespace: dto.RuntimeNamespace) -> None:
    """Move every record into `namespace`; a record keeps its agent kind unless the namespace names one."""
    for record in parsed.records:
        values = record.values
        if "owner_profile_id" not in record.spec.columns:
            continue
        values["owner_profile_id"] = namespace.profile_id or "default"
        values["owner_workspace_id"] = namespace.workspace_id
        if namespace.agent_kind:
            values["owner_agent_kind"] = namespace.agent_kind


def _read(path: Path, text: str, namespace: dto.RuntimeNamespace | None, dim: int) -> records.Parsed:
    """Parse and check the file, move it into `namespace`, drop vectors of another model (worker thread)."""
    parsed = parse(path, text)
    if namespace is not None:
        rewrite_owner(parsed, namespace)
    dropped = drop_foreign_vectors(parsed.records, dim)
    if dropped:
        log.info("import: %d vectors of another model's size are embedded again", dropped)
    return parsed


def _target_namespace(parsed: records.Parsed, params: dto.MemoryImportParams) -> dto.RuntimeNamespace:
    """The namespace `replace` purges: the one named, else the one the file was exported from."""
    if params.namespace is not None:
        return params.namespace
    origin = parsed.header.namespace
    return dto.RuntimeNamespace(
        agent_kind=origin.get("agentKind"),
        profile_id=origin.get("profileId") or "default",
        workspace_id=origin.get("workspaceId"),
    )


def _purge_kinds(parsed: records.Parsed) -> list[Any] | None:
    """What `replace` deletes first: the kinds the export covered (every kind: the whole namespace)."""
    covered = set(parsed.header.kinds)
    if not covered or covered >= set(EXPORT_KINDS):
        return None
    return sorted(covered - {"feedback"})  # feedback goes with its episodes


def _apply(
    db: Session,
    parsed: records.Parsed,
    vectors: dict[VectorKey, bytes],
    params: dto.MemoryImportParams,
    path: Path,
    now: int,
) -> tuple[Outcome, dict[str, int]]:
    purged: dict[str, int] = {}
    target = _target_namespace(parsed, params)
    if params.mode == "replace":
        purge_params = dto.MemoryPurgeParams(namespace=target, kinds=_purge_kinds(parsed), confirm=True)
        # The purge's own unit of work, run inside this transaction so that purge and import commit together.
        purged, _audit_id = purge.purge_sync(db, purge_params)
    outcome = Applier(db, parsed.records, vectors).run()
    db.add(
        AuditEventRow(
            ts=now,
            actor="host",
            kind="memory.import",
            target=f"namespace:{target.profile_id}/{target.workspace_id or ''}",
            detail_json={
                "path": str(path),
                "mode": params.mode,
                "imported": {k: v for k, v in outcome.imported.items() if v},
                "skipped": {k: v for k, v in outcome.skipped.items() if v},
            },
        )
    )
    return outcome, purged


async def import_jsonl(
    ctx: LearningContext, path: Path, text: str, params: dto.MemoryImportParams
) -> dto.MemoryImportResult:
    parsed = await anyio.to_thread.run_sync(_read, path, text, params.namespace, ctx.vectors.dim)
    present: dict[str, set[str]] = {}
    if params.mode == "merge":
        present = await ctx.db.read(lambda db: present_ids(db, parsed.records))
    vectors = await embed_missing(ctx, parsed.records, present)
    now = ctx.clock()
    outcome, purged = await ctx.db.write(lambda db: _apply(db, parsed, vectors, params, path, now))
    ctx.vectors.invalidate()  # reloaded from the database by the next search, imported rows included
    if params.mode == "replace":
        cache = getattr(ctx.embedder, "cache", None)
        if cache is not None:
            cache.clear()  # the purged rows' texts must not linger in the embedding cache either
        await purge.checkpoint(ctx)
    found = parsed.counts()
    log.info("import %s: imported %s, skipped %s", path, dict(outcome.imported), dict(outcome.skipped))
    return dto.MemoryImportResult(
        imported={kind: outcome.imported[kind] for kind in found},
        skipped={kind: outcome.skipped[kind] for kind in found},
        purged=purged,
    )
