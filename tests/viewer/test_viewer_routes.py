"""The viewer over real HTTP, served by a real `memos-bridge serve --viewer` (its stdio host is this test).

Every route answers; actions need the session's CSRF token and this viewer's origin; a change made in the
viewer is what the next `turn.start` recalls; a page scoped to one namespace never shows another's memory;
live events arrive over SSE; a non-loopback viewer asks for the token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memos_bridge.client import ServiceClient
from tests.viewer.helpers import PAGES
from tests.viewer.helpers import serve_with_viewer as _serve
from tests.viewer.helpers import turn as _turn

A = {"profileId": "default", "workspaceId": "shop"}
B = {"profileId": "default", "workspaceId": "bank"}
#: Every page, and the memory list of every kind.
ROUTES = [*PAGES, *(f"/memories?kind={kind}" for kind in ("trace", "policy", "world_model", "skill"))]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceClient, str, dict[str, str]]]:
    home = tmp_path_factory.mktemp("viewer") / "home"
    client, url = _serve(home, "127.0.0.1:0")
    session_a = client.call("session.open", {"agent": "tester", "namespace": A})["sessionId"]
    session_b = client.call("session.open", {"agent": "tester", "namespace": B})["sessionId"]
    ids = {
        "a": client.call(
            "memory.remember", {"content": "Parcel weights in the shop export are in pounds.", "sessionId": session_a}
        )["id"],
        "b": client.call(
            "memory.remember", {"content": "Ledger amounts in the bank export are in cents.", "sessionId": session_b}
        )["id"],
        "session_a": session_a,
    }
    _turn(client, session_a, "total the parcel weights of the shop export", 1_000_000)
    try:
        yield client, url, ids
    finally:
        client.close()


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


def test_every_route_answers_without_external_assets(served: tuple[ServiceClient, str, dict[str, str]]) -> None:
    _, url, _ = served
    with httpx.Client(base_url=url) as http:
        for route in ROUTES:
            response = http.get(route)
            assert response.status_code == 200, (route, response.text[:500])
            assert "Server-Timing" in response.headers
            # no CDN, no remote font: every src/href is on this viewer
            assert not re.search(r'(?:src|href)="(?:https?:)?//', response.text), route
        assert http.get("/static/viewer.css").status_code == 200
        assert http.get("/static/viewer.js").status_code == 200
        assert http.get("/memories/me_doesnotexist").status_code == 404


def test_search_shows_the_hit_with_its_channels_and_scoping_keeps_namespaces_apart(
    served: tuple[ServiceClient, str, dict[str, str]],
) -> None:
    _, url, ids = served
    with httpx.Client(base_url=url) as http:
        found = http.get("/memories", params={"q": "parcel weights pounds"}).text
        assert ids["a"] in found and re.search(r"fts_word|vec", found)
        listing = http.get("/memories").text  # the namespace box offers the namespaces that hold sessions
        assert '<option value="default/shop">' in listing and '<option value="default/bank">' in listing
        only_a = http.get("/memories", params={"ns": "default/shop"}).text
        assert ids["a"] in only_a and ids["b"] not in only_a
        only_b = http.get("/memories", params={"ns": "default/bank", "q": "parcel weights pounds"}).text
        assert ids["a"] not in only_b
        # the task recorded in A is listed with A, not with B (every page reads through the chosen namespace)
        assert "parcel weights" in http.get("/tasks", params={"ns": "default/shop"}).text
        assert "parcel weights" not in http.get("/tasks", params={"ns": "default/bank"}).text
        assert "parcel weights" not in http.get("/retrieval", params={"ns": "default/bank"}).text


def test_actions_need_the_csrf_token_and_this_origin(served: tuple[ServiceClient, str, dict[str, str]]) -> None:
    _, url, ids = served
    with httpx.Client(base_url=url) as http:
        page = http.get(f"/memories/{ids['b']}").text
        token = _csrf(page)
        assert http.post("/actions/pin", data={"id": ids["b"]}).status_code == 403  # no token
        assert http.post("/actions/pin", data={"id": ids["b"], "csrf": "forged"}).status_code == 403
        other_site = {"origin": "http://evil.example"}
        assert http.post("/actions/pin", data={"id": ids["b"], "csrf": token}, headers=other_site).status_code == 403
        done = http.post("/actions/pin", data={"id": ids["b"], "csrf": token}, headers={"origin": url})
        assert done.status_code == 303 and "flash=" in done.headers["location"]
        assert "Unpin" in http.get(f"/memories/{ids['b']}").text
        # a fresh browser (no cookie) cannot replay the token
        with httpx.Client(base_url=url) as stranger:
            assert stranger.post("/actions/pin", data={"id": ids["b"], "csrf": token}).status_code == 401


def test_an_edit_is_recalled_and_a_forgotten_memory_is_gone(served: tuple[ServiceClient, str, dict[str, str]]) -> None:
    client, url, ids = served
    with httpx.Client(base_url=url) as http:
        token = _csrf(http.get(f"/memories/{ids['a']}").text)
        edited = "Parcel weights in the shop export are in pounds: multiply by 0.4536 for kilograms."
        response = http.post("/actions/edit", data={"id": ids["a"], "content": edited, "csrf": token})
        assert response.status_code == 303
        recalled = _turn(client, ids["session_a"], "average parcel weight in kilograms for the shop export", 2_000_000)
        assert "0.4536" in recalled["injectedContext"]

        response = http.post("/actions/forget", data={"id": ids["a"], "csrf": token, "reason": "wrong"})
        assert response.status_code == 303
        after = _turn(client, ids["session_a"], "average parcel weight in kilograms for the shop export", 3_000_000)
        assert "0.4536" not in after["injectedContext"]
        assert ids["a"] not in http.get("/memories", params={"q": "parcel weights pounds"}).text
        history = http.get(f"/memories/{ids['a']}").text
        assert "forgotten" in history and "Restore" in history


def test_live_events_arrive_over_sse_and_resume_from_the_last_id(
    served: tuple[ServiceClient, str, dict[str, str]],
) -> None:
    client, url, ids = served
    seen: list[dict[str, Any]] = []
    last_id = ""
    with httpx.Client(base_url=url, timeout=30) as http, http.stream("GET", "/events") as stream:
        _turn(client, ids["session_a"], "rotate the TLS certificate of the shop gateway", 4_000_000)
        for line in stream.iter_lines():
            if line.startswith("id: "):
                last_id = line[4:]
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if any(event["type"].startswith("turn") or "trace" in event["type"] for event in seen):
                    break
    assert seen and last_id.isdigit()
    with httpx.Client(base_url=url, timeout=30) as http:
        # a reconnect with Last-Event-ID gets what came after it, not what it already had
        _turn(client, ids["session_a"], "renew the shop gateway's certificate again", 5_000_000)
        with http.stream("GET", "/events", headers={"Last-Event-ID": last_id}) as stream:
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    assert int(line[4:]) > int(last_id)
                    break


def test_a_viewer_on_another_address_asks_for_the_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    client, url = _serve(home, "0.0.0.0:0", env={"MEMOS_BRIDGE_TOKEN": "s3cret-viewer-token"})
    url = url.replace("0.0.0.0", "127.0.0.1")
    try:
        with httpx.Client(base_url=url) as http:
            first = http.get("/memories")
            assert first.status_code == 303 and first.headers["location"].startswith("/login")
            assert http.get("/events").status_code == 401
            assert http.post("/login", data={"token": "wrong"}).status_code == 401
            logged = http.post("/login?next=/memories", data={"token": "s3cret-viewer-token"})
            assert logged.status_code == 303 and logged.headers["location"] == "/memories"
            page = http.get("/memories")
            assert page.status_code == 200 and "Memories" in page.text
            assert "s3cret-viewer-token" not in http.get("/settings").text  # the settings page masks it
    finally:
        client.close()
