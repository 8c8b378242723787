"""Vectors for imported rows that come without one: the same text each kind was embedded from at first.

An export without vectors is smaller and model-independent; the price is that the import embeds again. To
give back the same recall, each kind is embedded from the text its own stage used:
- a step: the texts capture embeds under `embedding.step_vectors` (its summary, or a said line's words, for
  both vectors; or the summary and the action line apart), rebuilt by capture's own `StepDraft` from the
  stored step;
- a typed experience, a world model, a remembered memory: `embed_text` of `core/memories.py` (what an edit
  re-embeds too);
- a skill: its name and the summary it was drafted with (kept in its procedure), else its guide;
- an induced (L2) policy: the normalised mean of its source steps' vectors, as induction computes it, when
  the file has those steps; else its text.

What cannot be rebuilt exactly: an experience that later absorbed other feedback kept the vector of its first
draft, and an L2 policy's centroid was taken over its first evidence bucket only; their re-embedded vectors
are close, not identical. `includeVectors` exports keep them exact.

Vectors of another dimension (an export made with another embedding model) are dropped and embedded again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, Final, cast

import anyio.to_thread
import numpy as np

from memos_bridge.core.capture import StepDraft, StepKindName
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.learning.experiences.rules import INDUCED_BY as EXPERIENCE_INDUCED_BY
from memos_bridge.core.memories import embed_text
from memos_bridge.core.transfer.import_store import VectorKey
from memos_bridge.core.transfer.records import Record
from memos_bridge.storage.vectors import from_blob, to_blob

#: Texts per embedder call: large enough to batch well, small enough that a turn.start is not held up long.
BATCH: Final = 64


def drop_foreign_vectors(records: Iterable[Record], dim: int) -> int:
    """Clear vectors whose size does not match the running model (they are embedded again); returns how many."""
    dropped = 0
    for record in records:
        for name in record.spec.vectors:
            blob = record.values.get(name)
            if blob is not None and len(blob) != dim * 4:
                record.values[name] = None
                dropped += 1
    return dropped


def _step(values: Mapping[str, Any]) -> StepDraft:
    meta = values.get("meta_json") or {}
    return StepDraft(
        index=int(values.get("step_index", 0)),
        kind=cast(StepKindName, values.get("step_kind", "reply")),
        ts=int(values.get("ts", 0)),
        user_text=values.get("user_text") or "",
        agent_text=values.get("agent_text") or "",
        tool_calls=[call for call in values.get("tool_calls_json") or [] if isinstance(call, dict)],
        thinking=values.get("agent_thinking"),
        reflection=values.get("reflection"),
        failed=bool(isinstance(meta, dict) and meta.get("failed")),
        summary=values.get("summary") or "",
    )


def is_induced_policy(values: Mapping[str, Any]) -> bool:
    """An L2 policy (induced from similar steps), as opposed to a typed experience distilled from feedback."""
    return values.get("induced_by") != EXPERIENCE_INDUCED_BY


def text_for(kind: str, field: str, values: Mapping[str, Any], step_vectors: str = "one") -> str:
    """The text a kind's vector column encodes (see the module docstring); `step_vectors` is the setting
    capture embeds steps with."""
    if kind == "trace":
        summary_text, action_text = _step(values).embed_texts(step_vectors)
        return summary_text if field == "vec_summary" else action_text
    row = SimpleNamespace(**values)
    if kind == "skill":
        procedure = values.get("procedure_json") or {}
        summary = procedure.get("summary") if isinstance(procedure, dict) else None
        if isinstance(summary, str) and summary.strip():
            return f"{str(values.get('name', '')).replace('_', ' ')}\n{summary}"
    return embed_text(kind, row)


def centroid(vectors: Sequence[bytes], dim: int) -> bytes | None:
    """The unit mean of `vectors` (None when there are none or they cancel out)."""
    if not vectors:
        return None
    mean = np.mean(np.stack([from_blob(blob, dim) for blob in vectors]), axis=0)
    norm = float(np.linalg.norm(mean))
    return to_blob(mean / norm) if norm > 0 else None


async def _embed(ctx: LearningContext, wanted: dict[VectorKey, str]) -> dict[VectorKey, bytes]:
    """Embed the texts of `wanted` in batches (equal texts once); raises MemosError when the model is down."""
    unique = list(dict.fromkeys(wanted.values()))
    vectors: dict[str, bytes] = {}
    for start in range(0, len(unique), BATCH):
        chunk = unique[start : start + BATCH]
        matrix = await ctx.embedder.embed(chunk, role="document")
        vectors.update((text, to_blob(np.asarray(matrix[i]))) for i, text in enumerate(chunk))
    return {key: vectors[text] for key, text in wanted.items()}


def plan(
    records: Sequence[Record], present: Mapping[str, set[str]], step_vectors: str = "one"
) -> tuple[dict[VectorKey, str], list[Record]]:
    """The texts to embed for rows that will be imported without a vector, keyed by (kind, id, column), and
    the induced policies whose vector is a mean of their steps' (computed once those are known). Rows already
    present (skipped by the import) are left out."""
    wanted: dict[VectorKey, str] = {}
    induced: list[Record] = []
    for record in records:
        row_id = record.id
        if not record.spec.vectors or row_id is None or row_id in present.get(record.kind, ()):
            continue
        for name in record.spec.vectors:
            if record.values.get(name) is not None:
                continue
            if record.kind == "policy" and is_induced_policy(record.values):
                induced.append(record)
                continue
            wanted[(record.kind, row_id, name)] = text_for(record.kind, name, record.values, step_vectors)
    return wanted, induced


def policy_means(
    records: Sequence[Record], induced: Sequence[Record], found: dict[VectorKey, bytes], dim: int
) -> dict[VectorKey, str]:
    """Put each induced policy's mean step vector into `found`; returns the texts of those without one."""
    steps = _step_vectors(records, found)
    links = _linked_steps(records)
    fallback: dict[VectorKey, str] = {}
    for record in induced:
        row_id = str(record.id)
        sources = _policy_sources(record, links.get(row_id, []))
        mean = centroid([steps[trace_id] for trace_id in sources if trace_id in steps], dim)
        if mean is not None:
            found[("policy", row_id, "vec")] = mean
        else:
            fallback[("policy", row_id, "vec")] = text_for("policy", "vec", record.values)
    return fallback


async def embed_missing(
    ctx: LearningContext, records: Sequence[Record], present: Mapping[str, set[str]]
) -> dict[VectorKey, bytes]:
    """Vectors for every row to import that has none (see `plan`); raises MemosError when the model is down.
    The text work runs in a worker thread: a large import has many rows."""
    wanted, induced = await anyio.to_thread.run_sync(plan, records, present, ctx.settings.embedding.step_vectors)
    found = await _embed(ctx, wanted)
    fallback = await anyio.to_thread.run_sync(policy_means, records, induced, found, ctx.vectors.dim)
    found.update(await _embed(ctx, fallback))
    return found


def _step_vectors(records: Sequence[Record], found: Mapping[VectorKey, bytes]) -> dict[str, bytes]:
    """Each step's vector as induction reads it: the summary vector, else the action vector."""
    out: dict[str, bytes] = {}
    for record in records:
        if record.kind != "trace" or record.id is None:
            continue
        for name in ("vec_summary", "vec_action"):
            blob = record.values.get(name) or found.get(("trace", record.id, name))
            if blob is not None:
                out[record.id] = blob
                break
    return out


def _linked_steps(records: Sequence[Record]) -> dict[str, list[str]]:
    """Policy id → the steps linked to it (`trace_policy_links`), in file order."""
    out: dict[str, list[str]] = {}
    for record in records:
        if record.kind == "trace_policy_link":
            out.setdefault(str(record.values["policy_id"]), []).append(str(record.values["trace_id"]))
    return out


def _policy_sources(policy: Record, linked: Sequence[str]) -> list[str]:
    """The steps a policy was induced from: its source list and its step links, in order, once each."""
    listed = [str(i) for i in policy.values.get("source_trace_ids_json") or []]
    return list(dict.fromkeys([*listed, *linked]))
