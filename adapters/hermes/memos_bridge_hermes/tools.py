"""The memory tools the model can call, their JSON schemas and their mapping onto RPCs.

Schemas are bare OpenAI function dicts (`{name, description, parameters}`), the shape Hermes' memory manager
expects from `get_tool_schemas()`. Results are JSON strings; a failure is `{"error": …}` rather than an
exception, so the model sees what went wrong and the turn goes on. Long fields are clipped: tool results
land in the model's context.

| tool | RPC |
|---|---|
| `memos_search` | `memory.search` (all tiers, optionally this session only) |
| `memos_get` | by id prefix: `tr_` get_trace, `po_` get_policy, `wm_` get_world, `sk_` `skill.get` |
| `memos_timeline` | `memory.timeline` (default: the current episode) |
| `memos_environment` | `memory.list_world_models`, or `memory.search` on tier 3 with a query |
| `memos_skill_list` | `skill.list` |
| `memos_skill_get` | `skill.get` recording a trial in the current episode |
| `memos_feedback` | `feedback.submit` on the episode / a step, or `memory.reinforce` on a memory, typed by evidence |
| `memos_pin` | `memory.pin` / `memory.unpin` |
| `memos_remember` | `memory.remember` (a fact, preference, rule, … the user asked to keep) |
| `memos_forget` | `memory.forget` (out of recall, restorable) |
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from memos_bridge.client import RpcError, ServiceClient, TransportClosed

BODY_LIMIT = 1200
SNIPPET_LIMIT = 600

KIND_BY_PREFIX = {"tr_": "trace", "po_": "policy", "wm_": "world_model", "sk_": "skill", "me_": "memory"}
MEMORY_KINDS = ["trace", "policy", "world_model", "skill", "memory"]
REMEMBERED_TYPES = ["fact", "preference", "rule", "error", "pattern", "insight"]
EVIDENCE_TYPES = ["test_passed", "test_failed", "user_confirmed", "user_rejected", "diff_accepted", "self_report"]
# How each evidence type strengthens or weakens a memory (memory.reinforce's evidence vocabulary).
REINFORCE_EVIDENCE = {
    "test_passed": "test_passed",
    "test_failed": "failure",
    "user_confirmed": "user_confirmed",
    "user_rejected": "failure",
    "diff_accepted": "diff_accepted",
    "self_report": "self_report",
}

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "name": "memos_search",
        "description": (
            "Search long-term memory (past steps, experiences, skills, environment knowledge) when the "
            "recalled memories shown with the user's message are not enough. Use 2-5 key words or a short "
            "question; identifiers (paths, error codes, function names) match exactly."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "2-5 key words or a short question."},
                "maxResults": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "sessionScope": {
                    "type": "boolean",
                    "default": False,
                    "description": "Only memories from this conversation.",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_get",
        "description": (
            "Read one memory in full by its id as shown in recalled memories or search results: tr_… (a "
            "step), po_… (an experience), wm_… (environment knowledge), sk_… (a skill)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 4, "description": "Memory id, e.g. tr_M6RPD5W7REBF."},
                "kind": {
                    "type": "string",
                    "enum": MEMORY_KINDS,
                    "description": "Only needed when the id has no tr_/po_/wm_/sk_ prefix.",
                },
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_timeline",
        "description": "The steps of one past task (episode) in order; default: the current task.",
        "parameters": {
            "type": "object",
            "properties": {
                "episodeId": {"type": "string", "description": "Episode id (ep_…); omit for the current task."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_environment",
        "description": (
            "Environment knowledge learned from past tasks (how this project, tool or data source behaves, "
            "its constraints). Without a query, lists the strongest entries."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for; omit to list."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 30, "default": 5},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_skill_list",
        "description": (
            "List the skills memos-bridge crystallised from repeated successful tasks (not the SKILL.md files "
            "of the skills toolset)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["candidate", "active", "archived"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_skill_get",
        "description": (
            "Open a memos-bridge skill (sk_… id or name) to follow its procedure; records that this task tried "
            "it, so the skill's reliability learns from the outcome."
        ),
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "string", "minLength": 1, "description": "Skill id (sk_…) or name."}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_feedback",
        "description": (
            "Report evidence about how a task or a recalled memory worked out, so memory learns from it. Use "
            "the strongest evidence you have: test results over the user's word over your own impression "
            "(self_report counts least). Without targetId it judges the current task."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "evidence": {
                    "type": "string",
                    "enum": EVIDENCE_TYPES,
                    "description": "What the verdict rests on.",
                },
                "polarity": {"type": "string", "enum": ["positive", "negative", "neutral"]},
                "rationale": {"type": "string", "minLength": 1, "description": "What happened, in one or two lines."},
                "targetId": {
                    "type": "string",
                    "description": "A step (tr_…) or episode (ep_…) to judge, or a memory (po_/wm_/sk_/tr_…) to "
                    "reinforce or weaken; default: the current task.",
                },
                "magnitude": {"type": "number", "minimum": 0, "maximum": 1},
                "passed": {"type": "integer", "minimum": 0, "description": "Tests/checks passed (with total)."},
                "total": {"type": "integer", "minimum": 1, "description": "Tests/checks run."},
            },
            "required": ["evidence", "polarity", "rationale"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_pin",
        "description": (
            "Pin a memory the user wants kept (it never decays and failures cannot push it out of recall), or unpin it."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 4, "description": "Memory id (tr_/po_/wm_/sk_…)."},
                "kind": {"type": "string", "enum": MEMORY_KINDS},
                "unpin": {"type": "boolean", "default": False},
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_remember",
        "description": (
            "Keep something for later tasks when the user asks you to remember it, or states a lasting "
            'preference or rule ("always…", "never…", "from now on…"). One statement per call, in plain '
            "words; it is shown again when a later task is about the same thing."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "The statement."},
                "type": {"type": "string", "enum": REMEMBERED_TYPES, "default": "fact"},
                "fromUser": {
                    "type": "boolean",
                    "default": False,
                    "description": "True when these are the user's own words (their rule is then protected).",
                },
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
                "ttlHours": {"type": "number", "exclusiveMinimum": 0, "description": "Only true for this long."},
            },
            "required": ["content"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memos_forget",
        "description": (
            "Forget a memory the user says is wrong or no longer wanted (it stops being recalled; the user can "
            "restore it). Use the id shown with the memory."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 4, "description": "Memory id (me_/po_/tr_/wm_/sk_…)."},
                "reason": {"type": "string", "maxLength": 500},
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    },
]

TOOL_NAMES = frozenset(schema["name"] for schema in TOOL_SCHEMAS)

TOOL_RPCS: dict[str, tuple[str, ...]] = {
    "memos_search": ("memory.search",),
    "memos_get": ("memory.get_trace", "memory.get_policy", "memory.get_world", "skill.get"),
    "memos_timeline": ("memory.timeline",),
    "memos_environment": ("memory.list_world_models", "memory.search"),
    "memos_skill_list": ("skill.list",),
    "memos_skill_get": ("skill.get",),
    "memos_feedback": ("feedback.submit", "memory.reinforce"),
    "memos_pin": ("memory.pin", "memory.unpin"),
    "memos_remember": ("memory.remember",),
    "memos_forget": ("memory.forget",),
}
"""The RPC methods each tool calls (checked against the contract by a test)."""


@dataclass
class ToolContext:
    """What a tool call needs from the provider: the connection and where the conversation is."""

    client: ServiceClient
    agent: str
    session_id: str
    episode_id: str | None
    namespace: dict[str, Any] | None
    timeout: float = 30.0
    read_only: bool = False


class ToolInputError(ValueError):
    """The model passed arguments the tool cannot use; reported back as `{"error": …}`."""


def _clip(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"…[+{len(value) - limit} chars]"
    if isinstance(value, dict):
        return {k: _clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v, limit) for v in value[:50]]
    return value


def _int(args: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise ToolInputError(f"{key} must be an integer") from exc
    return max(low, min(high, number))


def _text(args: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = args.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise ToolInputError(f"{key} is required")
        return ""
    if not isinstance(value, str):
        raise ToolInputError(f"{key} must be a string")
    return value.strip()


def kind_of(memory_id: str, given: str | None = None) -> str:
    """The memory kind of an id, from its prefix (or the explicit `kind`)."""
    if given:
        if given not in MEMORY_KINDS:
            raise ToolInputError(f"kind must be one of {MEMORY_KINDS}")
        return given
    for prefix, kind in KIND_BY_PREFIX.items():
        if memory_id.startswith(prefix):
            return kind
    raise ToolInputError("cannot tell the memory kind from this id; pass kind")


def _hits(result: Mapping[str, Any], *, tier: int | None = None) -> list[dict[str, Any]]:
    hits = []
    for hit in result.get("hits") or []:
        if tier is not None and hit.get("tier") != tier:
            continue
        hits.append(
            {
                "id": hit.get("refId"),
                "kind": hit.get("refKind"),
                "tier": hit.get("tier"),
                "score": round(float(hit.get("score") or 0.0), 4),
                "snippet": _clip(hit.get("snippet") or "", SNIPPET_LIMIT),
            }
        )
    return hits


def memos_search(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    query = _text(args, "query")
    limit = _int(args, "maxResults", 10, 1, 50)
    scoped = bool(args.get("sessionScope", False))
    result = ctx.client.memory_search(
        query,
        agent=ctx.agent,
        session_id=ctx.session_id if scoped else None,
        top_k={"tier1": limit, "tier2": limit, "tier3": limit},
        namespace=ctx.namespace,
        timeout=ctx.timeout,
    )
    hits = _hits(result)
    return {"query": query, "count": len(hits), "hits": hits}


def memos_get(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    memory_id = _text(args, "id")
    kind = kind_of(memory_id, args.get("kind"))
    body: dict[str, Any] | None
    if kind == "trace":
        body = ctx.client.memory_get_trace(memory_id, namespace=ctx.namespace, timeout=ctx.timeout)
    elif kind == "policy":
        body = ctx.client.memory_get_policy(memory_id, namespace=ctx.namespace, timeout=ctx.timeout)
    elif kind == "world_model":
        body = ctx.client.memory_get_world(memory_id, namespace=ctx.namespace, timeout=ctx.timeout)
    elif kind == "memory":
        body = ctx.client.memory_get_memory(memory_id, namespace=ctx.namespace, timeout=ctx.timeout)
    else:
        body = ctx.client.skill_get(memory_id, namespace=ctx.namespace, timeout=ctx.timeout)
    if body is None:
        return {"found": False, "kind": kind, "id": memory_id}
    return {"found": True, "kind": kind, "id": memory_id, "memory": _clip(body, BODY_LIMIT)}


def memos_timeline(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    episode_id = _text(args, "episodeId", required=False) or ctx.episode_id
    if not episode_id:
        raise ToolInputError("episodeId is required (no current task yet)")
    limit = _int(args, "limit", 20, 1, 100)
    result = ctx.client.memory_timeline(episode_id, limit=limit, namespace=ctx.namespace, timeout=ctx.timeout)
    steps = [
        {
            "id": t.get("id"),
            "step": t.get("stepIndex"),
            "kind": t.get("stepKind"),
            "summary": _clip(t.get("summary") or "", SNIPPET_LIMIT),
            "tools": [c.get("name") for c in t.get("toolCalls") or []],
            "value": t.get("value"),
        }
        for t in result.get("traces") or []
    ]
    return {"episodeId": episode_id, "count": len(steps), "traces": steps}


def memos_environment(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    query = _text(args, "query", required=False)
    limit = _int(args, "limit", 5, 1, 30)
    if not query:
        result = ctx.client.memory_list_world_models(limit=limit, namespace=ctx.namespace, timeout=ctx.timeout)
        models = [
            {
                "id": m.get("id"),
                "title": m.get("title"),
                "body": _clip(m.get("body") or "", BODY_LIMIT),
                "confidence": m.get("confidence"),
            }
            for m in result.get("worldModels") or []
        ]
        return {"queried": False, "count": len(models), "worldModels": models}
    found = ctx.client.memory_search(
        query,
        agent=ctx.agent,
        top_k={"tier1": 0, "tier2": 0, "tier3": limit},
        namespace=ctx.namespace,
        timeout=ctx.timeout,
    )
    hits = _hits(found, tier=3)
    return {"queried": True, "query": query, "count": len(hits), "worldModels": hits}


def memos_skill_list(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    limit = _int(args, "limit", 10, 1, 50)
    status = args.get("status")
    result = ctx.client.skill_list(status=status, limit=limit, namespace=ctx.namespace, timeout=ctx.timeout)
    skills = [
        {
            "id": s.get("id"),
            "name": s.get("name"),
            "status": s.get("status"),
            "summary": _clip(s.get("summary") or s.get("invocationGuide") or "", SNIPPET_LIMIT),
            "eta": s.get("eta"),
        }
        for s in result.get("skills") or []
    ]
    return {"count": len(skills), "skills": skills}


def memos_skill_get(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    skill_id = _text(args, "id")
    record = not ctx.read_only and bool(ctx.episode_id)
    skill = ctx.client.skill_get(
        skill_id,
        record_trial=True if record else None,
        session_id=ctx.session_id if record else None,
        episode_id=ctx.episode_id if record else None,
        namespace=ctx.namespace,
        timeout=ctx.timeout,
    )
    if skill is None:
        return {"found": False, "id": skill_id}
    return {"found": True, "skill": _clip(skill, 4 * BODY_LIMIT)}


def memos_feedback(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    if ctx.read_only:
        raise ToolInputError("feedback is only recorded by the primary agent")
    evidence = _text(args, "evidence")
    if evidence not in EVIDENCE_TYPES:
        raise ToolInputError(f"evidence must be one of {EVIDENCE_TYPES}")
    polarity = _text(args, "polarity")
    if polarity not in ("positive", "negative", "neutral"):
        raise ToolInputError("polarity must be positive, negative or neutral")
    rationale = _text(args, "rationale")
    target = _text(args, "targetId", required=False)
    digest = hashlib.sha1(f"{evidence}|{polarity}|{rationale}|{target}".encode()).hexdigest()[:16]
    evidence_id = f"hermes-tool:{ctx.session_id}:{ctx.episode_id or '-'}:{digest}"
    if target and not target.startswith(("ep_", "tr_")):
        kind = kind_of(target)
        reinforced = ctx.client.memory_reinforce(
            target, kind, REINFORCE_EVIDENCE[evidence], evidence_id, namespace=ctx.namespace, timeout=ctx.timeout
        )
        return {"recorded": "reinforce", "kind": kind, **reinforced}
    raw: dict[str, Any] = {"source": "hermes.memos_feedback", "evidence": evidence}
    passed, total = args.get("passed"), args.get("total")
    if isinstance(passed, int) and isinstance(total, int) and total > 0 and evidence in ("test_passed", "test_failed"):
        raw["verifier"] = {"passed": min(passed, total), "total": total}
    magnitude = args.get("magnitude")
    if not isinstance(magnitude, int | float):
        magnitude = 0.3 if evidence == "self_report" else 1.0
    if evidence == "self_report":
        magnitude = min(float(magnitude), 0.3)  # the model's own impression is the weakest evidence
    episode_id = target if target.startswith("ep_") else (None if target else ctx.episode_id)
    if not target and not episode_id:
        raise ToolInputError("no current task to judge yet; pass targetId")
    stored = ctx.client.feedback_submit(
        polarity,
        episode_id=episode_id,
        trace_id=target if target.startswith("tr_") else None,
        channel="implicit" if evidence == "self_report" else "explicit",
        magnitude=max(0.0, min(1.0, float(magnitude))),
        rationale=rationale,
        raw=raw,
        evidence_id=evidence_id,
        timeout=ctx.timeout,
    )
    return {"recorded": "feedback", "id": stored.get("id"), "episodeId": stored.get("episodeId")}


def memos_pin(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    if ctx.read_only:
        raise ToolInputError("pinning is only done by the primary agent")
    memory_id = _text(args, "id")
    kind = kind_of(memory_id, args.get("kind"))
    if args.get("unpin"):
        ctx.client.memory_unpin(memory_id, kind, namespace=ctx.namespace, timeout=ctx.timeout)
        return {"ok": True, "id": memory_id, "kind": kind, "pinned": False}
    ctx.client.memory_pin(memory_id, kind, namespace=ctx.namespace, timeout=ctx.timeout)
    return {"ok": True, "id": memory_id, "kind": kind, "pinned": True}


def memos_remember(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    if ctx.read_only:
        raise ToolInputError("remembering is only done by the primary agent")
    content = _text(args, "content")
    kind = args.get("type") or "fact"
    if kind not in REMEMBERED_TYPES:
        raise ToolInputError(f"type must be one of {REMEMBERED_TYPES}")
    hours = args.get("ttlHours")
    importance = args.get("importance")
    result = ctx.client.memory_remember(
        content,
        type=kind,
        source="user" if args.get("fromUser") else "agent",
        importance=None if importance is None else max(0.0, min(1.0, float(importance))),
        ttl_ms=None if hours is None else max(1, int(float(hours) * 3_600_000)),
        namespace=ctx.namespace,
        agent=ctx.agent,
        timeout=ctx.timeout,
    )
    return {"remembered": True, "id": result.get("id"), "merged": result.get("merged")}


def memos_forget(ctx: ToolContext, args: Mapping[str, Any]) -> dict[str, Any]:
    if ctx.read_only:
        raise ToolInputError("forgetting is only done by the primary agent")
    memory_id = _text(args, "id")
    kind = kind_of(memory_id, args.get("kind"))
    reason = _text(args, "reason", required=False) or None
    result = ctx.client.memory_forget(memory_id, kind, reason=reason, namespace=ctx.namespace, timeout=ctx.timeout)
    return {"forgotten": True, "id": memory_id, "kind": kind, "flagged": result.get("flagged") or []}


HANDLERS: dict[str, Callable[[ToolContext, Mapping[str, Any]], dict[str, Any]]] = {
    "memos_search": memos_search,
    "memos_get": memos_get,
    "memos_timeline": memos_timeline,
    "memos_environment": memos_environment,
    "memos_skill_list": memos_skill_list,
    "memos_skill_get": memos_skill_get,
    "memos_feedback": memos_feedback,
    "memos_pin": memos_pin,
    "memos_remember": memos_remember,
    "memos_forget": memos_forget,
}


def handle(ctx: ToolContext, name: str, args: Mapping[str, Any] | None) -> str:
    """Run one tool call; always a JSON string (errors included)."""
    handler = HANDLERS.get(name)
    if handler is None:
        return json.dumps({"error": f"unknown tool {name}"})
    try:
        result = handler(ctx, args or {})
    except ToolInputError as exc:
        return json.dumps({"error": str(exc)}, ensure_ascii=False)
    except RpcError as exc:
        return json.dumps({"error": exc.message, "code": exc.memos_code or exc.code}, ensure_ascii=False)
    except (TransportClosed, TimeoutError) as exc:
        return json.dumps({"error": f"memory service unavailable: {exc}"}, ensure_ascii=False)
    return json.dumps(result, ensure_ascii=False, default=str)
