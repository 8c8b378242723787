"""Each page: which methods it calls and what it hands its template; each action: one method call.

A page never reads the database itself: what a person sees is what a host would get from the same methods,
with the same scoping and the same rules.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from memos_bridge.viewer.auth import ViewerSession
from memos_bridge.viewer.backend import ViewerError

if TYPE_CHECKING:
    from memos_bridge.viewer.app import Viewer

LIST_LIMIT = 100
GETTERS = {
    "trace": "memory.get_trace",
    "policy": "memory.get_policy",
    "world_model": "memory.get_world",
    "memory": "memory.get_memory",
    "skill": "skill.get",
}
LISTS = {
    "memory": ("memory.list_memories", "memories"),
    "trace": ("memory.list_traces", "traces"),
    "policy": ("memory.list_policies", "policies"),
    "world_model": ("memory.list_world_models", "worldModels"),
    "skill": ("skill.list", "skills"),
}
KIND_LABELS = {
    "memory": "Remembered",
    "trace": "Steps",
    "policy": "Experiences",
    "world_model": "World models",
    "skill": "Skills",
}


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        return max(low, min(int(value or default), high))
    except ValueError:
        return default


# ---------------------------------------------------------------- pages


async def overview(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    health = await viewer.backend.call("core.health")
    ns = viewer.namespace(request)
    stats = await viewer.backend.call("memory.stats", {"namespace": ns}) if ns != "*" else None
    if stats is None:
        stats = await viewer.backend.call("memory.stats", {"namespace": "*"})
    recent = [event for _, event in list(viewer.backend.events.ring)[-30:]][::-1]
    return await viewer.render(request, "overview.html", session, health=health, stats=stats, recent=recent)


async def memories(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    ns = viewer.namespace(request)
    query = request.query_params.get("q", "").strip()
    kind = request.query_params.get("kind", "memory")
    if kind not in LISTS:
        raise ViewerError(f"unknown kind {kind}; one of {', '.join(LISTS)}")
    status = request.query_params.get("status") or None
    mtype = request.query_params.get("type") or None
    since = request.query_params.get("since") or ""
    show_forgotten = request.query_params.get("forgotten") == "1"
    hits: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    if query:
        result = await viewer.backend.call(
            "memory.search", {"query": query, "namespace": ns, "topK": {"tier1": 20, "tier2": 20, "tier3": 20}}
        )
        hits = result.get("hits") or []
    else:
        method, key = LISTS[kind]
        params: dict[str, Any] = {"namespace": ns, "limit": LIST_LIMIT}
        if kind != "skill":
            params["includeForgotten"] = show_forgotten
        if status and kind in ("memory", "policy", "world_model", "skill"):
            params["status"] = status
        if mtype and kind == "memory":
            params["type"] = mtype
        if mtype and kind == "policy":
            params["experienceType"] = mtype
        found = await viewer.backend.call(method, params)
        rows = found.get(key) or []
        if since:
            rows = [row for row in rows if _created(row) >= since]
    return await viewer.render(
        request,
        "memories.html",
        session,
        query=query,
        hits=hits,
        rows=rows,
        kind=kind,
        kinds=KIND_LABELS,
        status=status or "",
        mtype=mtype or "",
        since=since,
        show_forgotten=show_forgotten,
    )


def _created(row: dict[str, Any]) -> str:
    from memos_bridge.viewer.app import _ts

    return _ts(row.get("createdAt") or row.get("ts"))[:10]


async def memory_detail(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    from memos_bridge.viewer.app import kind_of

    memory_id = request.path_params["memory_id"]
    kind = kind_of(memory_id)
    if kind is None:
        raise ViewerError(f"unknown memory id {memory_id}", "not_found")
    body = await viewer.backend.call(GETTERS[kind], {"id": memory_id, "namespace": "*"})
    if body is None:
        raise ViewerError(f"no memory {memory_id}", "not_found")
    history = await viewer.backend.call("memory.history", {"id": memory_id, "kind": kind, "namespace": "*"})
    return await viewer.render(
        request, "memory.html", session, memory=body, kind=kind, history=history.get("events") or []
    )


async def tasks(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    found = await viewer.backend.call(
        "memory.list_episodes", {"namespace": viewer.namespace(request), "limit": LIST_LIMIT}
    )
    return await viewer.render(request, "tasks.html", session, episodes=found.get("episodes") or [])


async def task_detail(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    episode_id = request.path_params["episode_id"]
    timeline = await viewer.backend.call(
        "memory.timeline", {"episodeId": episode_id, "namespace": "*", "includeForgotten": True}
    )
    policies = await viewer.backend.call("memory.list_policies", {"namespace": "*", "limit": 500})
    produced = [p for p in policies.get("policies") or [] if episode_id in (p.get("sourceEpisodeIds") or [])]
    worlds = await viewer.backend.call("memory.list_world_models", {"namespace": "*", "limit": 500})
    produced_world = [w for w in worlds.get("worldModels") or [] if episode_id in (w.get("sourceEpisodeIds") or [])]
    feedback = await viewer.backend.call("memory.list_feedback", {"episodeId": episode_id, "namespace": "*"})
    return await viewer.render(
        request,
        "task.html",
        session,
        episode_id=episode_id,
        traces=timeline.get("traces") or [],
        produced=produced,
        produced_world=produced_world,
        feedback=feedback.get("feedback") or [],
    )


async def _listing(request: Request, viewer: Viewer, kind: str) -> list[dict[str, Any]]:
    """One kind's list in the chosen namespace, optionally of one status (`?status=`)."""
    method, key = LISTS[kind]
    params: dict[str, Any] = {"namespace": viewer.namespace(request), "limit": LIST_LIMIT}
    if request.query_params.get("status"):
        params["status"] = request.query_params["status"]
    found = await viewer.backend.call(method, params)
    return list(found.get(key) or [])


async def experiences(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    policies = await _listing(request, viewer, "policy")
    return await viewer.render(request, "experiences.html", session, policies=policies)


async def skills(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    return await viewer.render(request, "skills.html", session, skills=await _listing(request, viewer, "skill"))


async def world(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    models = await _listing(request, viewer, "world_model")
    return await viewer.render(request, "world.html", session, models=models)


async def analytics(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    from memos_bridge.viewer.app import chart_context

    days = _int(request.query_params.get("days"), 30, 1, 365)
    result = await viewer.backend.call("memory.analytics", {"namespace": viewer.namespace(request), "days": days})
    return await viewer.render(
        request, "analytics.html", session, analytics=result, charts=chart_context(result), days=days
    )


async def retrieval(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    result = await viewer.backend.call("memory.retrieval_log", {"namespace": viewer.namespace(request), "limit": 30})
    return await viewer.render(request, "retrieval.html", session, entries=result.get("entries") or [])


async def import_export(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    return await viewer.render(request, "import_export.html", session)


async def settings(request: Request, session: ViewerSession, viewer: Viewer) -> Response:
    config = await viewer.backend.call("core.config", {})
    return await viewer.render(request, "settings.html", session, config=config)


PAGES: dict[str, Callable[[Request, ViewerSession, Viewer], Awaitable[Response]]] = {
    "/": overview,
    "/memories": memories,
    "/memories/{memory_id}": memory_detail,
    "/tasks": tasks,
    "/tasks/{episode_id}": task_detail,
    "/experiences": experiences,
    "/skills": skills,
    "/world": world,
    "/analytics": analytics,
    "/retrieval": retrieval,
    "/import-export": import_export,
    "/settings": settings,
}


# ---------------------------------------------------------------- actions


def _need(form: dict[str, str], *keys: str) -> list[str]:
    missing = [key for key in keys if not form.get(key, "").strip()]
    if missing:
        raise ViewerError(f"missing {', '.join(missing)}")
    return [form[key].strip() for key in keys]


def _kind(memory_id: str) -> str:
    from memos_bridge.viewer.app import kind_of

    kind = kind_of(memory_id)
    if kind is None:
        raise ViewerError(f"unknown memory id {memory_id}")
    return kind


async def edit_memory(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    (memory_id,) = _need(form, "id")
    params: dict[str, Any] = {"id": memory_id, "kind": _kind(memory_id)}
    if form.get("content", "").strip():
        params["content"] = form["content"].strip()
    if form.get("title", "").strip():
        params["title"] = form["title"].strip()
    result = await viewer.backend.call("memory.update", params)
    changed = ", ".join(result.get("changed") or []) or "nothing (it already read so)"
    return f"Updated {memory_id}: {changed}"


async def forget_memory(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    ids = [value for key, value in form.items() if key == "id" or key.startswith("id_")]
    if not ids:
        raise ViewerError("choose at least one memory")
    for memory_id in ids:
        await viewer.backend.call(
            "memory.forget", {"id": memory_id, "kind": _kind(memory_id), "reason": form.get("reason") or "viewer"}
        )
    return f"Forgot {len(ids)} memor{'y' if len(ids) == 1 else 'ies'}; restore them from their page"


async def restore_memory(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    (memory_id,) = _need(form, "id")
    await viewer.backend.call("memory.restore", {"id": memory_id, "kind": _kind(memory_id)})
    return f"Restored {memory_id}"


async def pin_memory(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    (memory_id,) = _need(form, "id")
    method = "memory.unpin" if form.get("unpin") else "memory.pin"
    await viewer.backend.call(method, {"id": memory_id, "kind": _kind(memory_id)})
    return f"{'Unpinned' if form.get('unpin') else 'Pinned'} {memory_id}"


async def set_status(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    memory_id, status = _need(form, "id", "status")
    await viewer.backend.call(
        "memory.set_status",
        {"id": memory_id, "kind": _kind(memory_id), "status": status, "reason": form.get("reason") or None},
    )
    return f"{memory_id} is now {status}"


async def review_skill(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    skill_id, decision = _need(form, "id", "decision")
    params: dict[str, Any] = {"id": skill_id, "decision": decision}
    if form.get("reason", "").strip():
        params["reason"] = form["reason"].strip()
    await viewer.backend.call("skill.review", params)
    return f"Skill {skill_id} {'approved' if decision == 'approve' else 'rejected'}"


async def llm_test(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    result = await viewer.backend.call("llm.test", {})
    if result.get("ok"):
        return (
            f"LLM ({result.get('provider')}) answered in {result.get('durationMs', 0):.0f} ms: {result.get('text')!r}"
        )
    error = (result.get("error") or {}).get("message") or "no answer"
    raise ViewerError(f"LLM test failed ({result.get('provider')}): {error}")


async def export(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    params: dict[str, Any] = {"format": form.get("format") or "jsonl"}
    if form.get("workspace", "").strip():
        params["namespace"] = {"profileId": form.get("profile") or "default", "workspaceId": form["workspace"].strip()}
    if form.get("path", "").strip():
        params["path"] = form["path"].strip()
    result = await viewer.backend.call("memory.export", params)
    counts = ", ".join(f"{kind} {count}" for kind, count in (result.get("counts") or {}).items() if count)
    return f"Exported to {result.get('path')} ({counts or 'nothing'})"


async def import_file(request: Request, form: dict[str, str], viewer: Viewer) -> str:
    (path,) = _need(form, "path")
    result = await viewer.backend.call("memory.import", {"path": path, "mode": "merge"})
    added = sum((result.get("imported") or {}).values())
    skipped = sum((result.get("skipped") or {}).values())
    return f"Imported {added} records ({skipped} already present)"


ACTIONS: dict[str, tuple[Callable[[Request, dict[str, str], Viewer], Awaitable[str]], str]] = {
    "/actions/edit": (edit_memory, "/memories"),
    "/actions/forget": (forget_memory, "/memories"),
    "/actions/restore": (restore_memory, "/memories"),
    "/actions/pin": (pin_memory, "/memories"),
    "/actions/status": (set_status, "/experiences"),
    "/actions/review": (review_skill, "/skills"),
    "/actions/llm-test": (llm_test, "/"),
    "/actions/export": (export, "/import-export"),
    "/actions/import": (import_file, "/import-export"),
}
