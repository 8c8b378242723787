"""The viewer's HTTP app (Starlette): server-rendered pages, a few form actions, and live events over SSE.

Every page reads through `Backend.call` (the service's own methods) and every action is one method call
followed by a redirect back (post/redirect/get), so the browser's back button and reload never repeat a
change. Templates are Jinja2 with autoescaping: memory text is data, never markup.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
from jinja2 import ChainableUndefined, Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memos_bridge.ids import PREFIXES
from memos_bridge.viewer import charts
from memos_bridge.viewer.auth import COOKIE, SESSION_S, ViewerAuth, ViewerSession
from memos_bridge.viewer.backend import Backend, ViewerError

HERE = Path(__file__).parent
#: Live events a browser receives per second at most; the rest arrive in the next batch (never dropped).
SSE_MAX_PER_S = 20
KINDS = {
    prefix: kind for kind, prefix in PREFIXES.items() if kind in ("trace", "policy", "world_model", "skill", "memory")
}
NAV = [
    ("/", "Overview"),
    ("/memories", "Memories"),
    ("/tasks", "Tasks"),
    ("/experiences", "Experiences"),
    ("/skills", "Skills"),
    ("/world", "World models"),
    ("/analytics", "Analytics"),
    ("/retrieval", "Retrieval log"),
    ("/import-export", "Import / Export"),
    ("/settings", "Settings"),
]
Page = Callable[[Request, "Viewer"], Awaitable[Response]]


def _ts(value: Any) -> str:
    if not value:
        return ""
    return datetime.fromtimestamp(int(value) / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def kind_of(memory_id: str) -> str | None:
    return next((kind for prefix, kind in KINDS.items() if memory_id.startswith(prefix)), None)


class Viewer:
    """The app's state: the backend, the auth policy and the templates."""

    def __init__(self, backend: Backend, auth: ViewerAuth) -> None:
        self.backend, self.auth = backend, auth
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            undefined=ChainableUndefined,  # an optional field a DTO left out renders as nothing
        )
        self.templates.filters["ts"] = _ts
        self.templates.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False, indent=2, default=str)
        self.templates.globals["kind_of"] = kind_of

    def namespace(self, request: Request) -> Any:
        """The read scope chosen on the page: every namespace (`*`), or one `profile/workspace`."""
        chosen = request.query_params.get("ns", "*")
        if chosen in ("", "*"):
            return "*"
        profile, _, workspace = chosen.partition("/")
        return {"profileId": profile or "default", **({"workspaceId": workspace} if workspace else {})}

    async def render(self, request: Request, template: str, session: ViewerSession, **context: Any) -> HTMLResponse:
        started = time.perf_counter()
        ns = request.query_params.get("ns", "*")
        known = (await self.backend.call("core.namespaces")).get("namespaces") or []
        choices = sorted({f"{n['profileId']}/{n.get('workspaceId') or ''}".rstrip("/") for n in known})
        body = self.templates.get_template(template).render(
            nav=NAV,
            path=request.url.path,
            csrf=session.csrf,
            ns=ns,
            ns_query=f"?{urlencode({'ns': ns})}" if ns not in ("", "*") else "",
            ns_choices=choices,
            flash=request.query_params.get("flash"),
            error=request.query_params.get("error"),
            **context,
        )
        response = HTMLResponse(body)
        response.headers["X-Render-Ms"] = f"{(time.perf_counter() - started) * 1000:.1f}"
        return response


# ---------------------------------------------------------------- request plumbing


def _session(viewer: Viewer, request: Request) -> ViewerSession | None:
    return viewer.auth.load(request.cookies.get(COOKIE))


def _with_cookie(viewer: Viewer, response: Response, session: ViewerSession) -> Response:
    response.set_cookie(
        COOKIE, viewer.auth.dump(session), max_age=SESSION_S, httponly=True, samesite="strict", path="/"
    )
    return response


def _back(request: Request, default: str, **query: str) -> RedirectResponse:
    target = str(request.headers.get("referer") or default)
    if not target.startswith(str(request.base_url)):
        target = default
    base, _, _ = target.partition("#")
    path = base.split(str(request.base_url).rstrip("/"), 1)[-1] or "/"
    path, _, old = path.partition("?")
    keep = {k: v for k, v in (p.split("=", 1) for p in old.split("&") if "=" in p) if k not in ("flash", "error")}
    keep.update(query)
    return RedirectResponse(f"{path}?{urlencode(keep)}" if keep else path, status_code=303)


def page(
    viewer: Viewer, handler: Callable[[Request, ViewerSession], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """A GET page: a session (login when the bind needs one), then the handler."""

    async def endpoint(request: Request) -> Response:
        session = _session(viewer, request)
        if session is None or not session.authenticated:
            if viewer.auth.login_required:
                return RedirectResponse(f"/login?{urlencode({'next': request.url.path})}", status_code=303)
            session = viewer.auth.new_session(authenticated=True)
        try:
            response = await handler(request, session)
        except ViewerError as exc:
            response = await viewer.render(request, "error.html", session, message=exc.message, code=exc.code)
            response.status_code = 404 if exc.code.endswith("not_found") else 400
        return _with_cookie(viewer, response, session)

    return endpoint


def action(
    viewer: Viewer, handler: Callable[[Request, dict[str, str]], Awaitable[str]], default: str
) -> Callable[[Request], Awaitable[Response]]:
    """A POST action: session + CSRF + origin checked, the change made, then back to the page with a message."""

    async def endpoint(request: Request) -> Response:
        session = _session(viewer, request)
        form = {key: str(value) for key, value in (await request.form()).multi_items()}
        if session is None or not session.authenticated:
            return Response("login required", status_code=401)
        supplied = form.pop("csrf", None) or request.headers.get("x-csrf-token")
        if not viewer.auth.csrf_ok(session, supplied) or not viewer.auth.origin_ok(
            request.headers.get("origin"), request.headers.get("host")
        ):
            return Response("invalid or missing CSRF token", status_code=403)
        try:
            message = await handler(request, form)
        except ViewerError as exc:
            return _back(request, default, error=exc.message)
        if message.startswith("/"):
            return RedirectResponse(message, status_code=303)
        return _back(request, default, flash=message)

    return endpoint


# ---------------------------------------------------------------- the app


def create_app(backend: Backend, auth: ViewerAuth) -> Starlette:
    from memos_bridge.viewer import pages

    viewer = Viewer(backend, auth)

    async def login(request: Request) -> Response:
        return await _login(viewer, request)

    async def logout(request: Request) -> Response:
        return await _logout(viewer, request)

    async def events(request: Request) -> Response:
        return await _events(viewer, request)

    routes: list[Any] = [
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/events", events),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    for path, page_handler in pages.PAGES.items():
        routes.append(Route(path, page(viewer, _bind_page(page_handler, viewer))))
    for path, (action_handler, default) in pages.ACTIONS.items():
        routes.append(Route(path, action(viewer, _bind_action(action_handler, viewer), default), methods=["POST"]))
    app = Starlette(routes=routes, middleware=[Middleware(ServerTiming)])
    app.state.viewer = viewer
    return app


class ServerTiming:
    """`Server-Timing: app;dur=<ms>` on every response: the server's whole time for the request (method calls
    and rendering), shown by the browser's network panel and read by `scripts/bench_viewer.py`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.append("Server-Timing", f"app;dur={(time.perf_counter() - started) * 1000:.1f}")
            await send(message)

        await self.app(scope, receive, timed)


def _bind_page(
    handler: Callable[[Request, ViewerSession, Viewer], Awaitable[Response]], viewer: Viewer
) -> Callable[[Request, ViewerSession], Awaitable[Response]]:
    async def bound(request: Request, session: ViewerSession) -> Response:
        return await handler(request, session, viewer)

    return bound


def _bind_action(
    handler: Callable[[Request, dict[str, str], Viewer], Awaitable[str]], viewer: Viewer
) -> Callable[[Request, dict[str, str]], Awaitable[str]]:
    async def bound(request: Request, form: dict[str, str]) -> str:
        return await handler(request, form, viewer)

    return bound


async def _login(viewer: Viewer, request: Request) -> Response:
    target = request.query_params.get("next", "/")
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    if request.method == "POST":
        form = await request.form()
        if viewer.auth.check_token(str(form.get("token") or "")):
            return _with_cookie(
                viewer, RedirectResponse(target, status_code=303), viewer.auth.new_session(authenticated=True)
            )
        await anyio.sleep(0.5)  # slows guessing
        body = viewer.templates.get_template("login.html").render(error="wrong token", next=target)
        return HTMLResponse(body, status_code=401)
    if not viewer.auth.login_required:
        return RedirectResponse("/", status_code=303)
    return HTMLResponse(viewer.templates.get_template("login.html").render(error=None, next=target))


async def _logout(viewer: Viewer, request: Request) -> Response:
    response = RedirectResponse("/login" if viewer.auth.login_required else "/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


async def _events(viewer: Viewer, request: Request) -> Response:
    """Server-Sent Events: the core's events, resumable with `Last-Event-ID`, at most `SSE_MAX_PER_S` a second."""
    session = _session(viewer, request)
    if (session is None or not session.authenticated) and viewer.auth.login_required:
        return Response("login required", status_code=401)
    raw = request.headers.get("last-event-id") or request.query_params.get("lastEventId") or ""
    last = int(raw) if raw.isdigit() else (viewer.backend.events.ring[-1][0] if viewer.backend.events.ring else 0)
    if not raw and request.query_params.get("backlog"):
        last = max(0, last - int(request.query_params["backlog"]))

    async def stream() -> Any:
        yield "retry: 2000\n\n"
        sent_at: list[float] = []
        async for item in viewer.backend.events.follow(last):
            if await request.is_disconnected():
                return
            if item is None:
                yield ": keep-alive\n\n"
                continue
            now = time.monotonic()
            sent_at = [t for t in sent_at if now - t < 1.0]
            if len(sent_at) >= SSE_MAX_PER_S:
                await anyio.sleep(1.0 - (now - sent_at[0]))
            sent_at.append(time.monotonic())
            event_id, event = item
            yield f"id: {event_id}\nevent: memos\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


def chart_context(analytics: Mapping[str, Any]) -> dict[str, str]:
    """The analytics page's charts from a `memory.analytics` result."""
    days = list(analytics.get("days") or [])
    out = {
        "written": charts.stacked_bars(days, analytics.get("written") or {}, title="Memories written per day"),
        "hit_rate": charts.line_chart(
            days,
            {"recall hit rate": analytics.get("recallHitRate") or []},
            title="Recall hit rate per day",
            percent=True,
        ),
        "success": charts.line_chart(
            days,
            {"verified success rate": analytics.get("verifiedSuccessRate") or []},
            title="Success rate of verified tasks",
            percent=True,
        ),
    }
    return out
