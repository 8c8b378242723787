"""The viewer in a real headless Chromium (Debian's `chromium`, driven by Playwright with `executable_path`).

A person's session: every page loads without a script error; a search finds the memory; an edit made in the
page is what the next `turn.start` recalls; a forgotten memory is gone; a candidate skill is approved; a live
event appears on the overview while a host runs a turn. Screenshots are kept as test artefacts
(`$MEMOS_BRIDGE_ARTIFACTS`, else the test's temporary folder).

Without a browser the test is skipped, except where `MEMOS_BRIDGE_REQUIRE_BROWSER=1` (CI installs Chromium and
sets it), so a missing browser there is a failure, not a silent skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import ServiceClient
from tests.e2e.test_skills_rpc import AVOID_LINE, PARSE, SUM, WRITE
from tests.viewer.helpers import PAGES, serve_with_viewer, turn

CHROMIUM = os.environ.get("MEMOS_BRIDGE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("MEMOS_BRIDGE_REQUIRE_BROWSER") == "1"
# One anchored skill stays a candidate until a person approves it (no automatic promotion in this test).
ENV = {
    "MEMOS_BRIDGE_LEARNING__SKILL__PROMOTE_SUPPORT": "99",
    "MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0",
    "MEMOS_BRIDGE_LLM__PROVIDER": "none",
}


def _task(
    client: ServiceClient,
    session: str,
    text: str,
    tools: list[dict[str, Any]],
    ts: int,
    verdict: dict[str, Any],
    polarity: str,
    rationale: str,
) -> None:
    started = client.call(
        "turn.start", {"agent": "tester", "sessionId": session, "userText": text, "ts": ts}, timeout=60
    )
    episode = started["query"]["episodeId"]
    end = {
        "agent": "tester",
        "sessionId": session,
        "episodeId": episode,
        "agentText": "wrote answers.json",
        "ts": ts + 1,
    }
    client.call("turn.end", {**end, "toolCalls": tools}, timeout=60)
    client.call("episode.close", {"episodeId": episode})
    params = {"episodeId": episode, "polarity": polarity, "rationale": rationale, "raw": {"verifier": verdict}}
    client.call("feedback.submit", params, timeout=120)


@pytest.fixture(scope="module")
def browser_page(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Any, ServiceClient, str, dict[str, str], Path]]:
    if CHROMIUM is None:
        if REQUIRED:
            pytest.fail("MEMOS_BRIDGE_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    root = tmp_path_factory.mktemp("browser")
    artifacts = Path(os.environ.get("MEMOS_BRIDGE_ARTIFACTS") or root / "screenshots")
    artifacts.mkdir(parents=True, exist_ok=True)
    client, url = serve_with_viewer(root / "home", "127.0.0.1:0", env=ENV)
    session = client.call("session.open", {"agent": "tester"})["sessionId"]
    ids = {
        "session": session,
        "memory": client.call(
            "memory.remember", {"content": "The staging database is called orders-staging-eu.", "sessionId": session}
        )["id"],
    }
    turn(client, session, "restart the orders service on staging", 1_000_000)
    _task(
        client,
        session,
        "Compute the total value of the 13F holdings per issuer into answers.json",
        [PARSE, WRITE],
        2_000_000,
        {"passed": 2, "total": 5},
        "negative",
        AVOID_LINE,
    )
    _task(
        client,
        session,
        "Compute the total value per issuer of this quarter's 13F filing",
        [PARSE, SUM, WRITE],
        3_000_000,
        {"passed": 5, "total": 5},
        "positive",
        "All fields correct.",
    )
    client.call("memory.flush", {}, timeout=300)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("dialog", lambda dialog: dialog.accept())  # "Forget …?" confirmations
        page.errors = errors  # type: ignore[attr-defined]
        try:
            yield page, client, url, ids, artifacts
        finally:
            browser.close()
            client.close()


def test_every_page_loads_without_script_errors(browser_page: Any) -> None:
    page, _, url, _, artifacts = browser_page
    for path in PAGES:
        response = page.goto(url + path)
        assert response is not None and response.status == 200, path
        assert page.locator("main h1").count() >= 1, path
    page.goto(url + "/")
    page.screenshot(path=str(artifacts / "overview.png"), full_page=True)
    page.goto(url + "/analytics")
    page.screenshot(path=str(artifacts / "analytics.png"), full_page=True)
    assert page.errors == []


def test_search_edit_and_forget_in_the_browser_reach_the_next_turn(browser_page: Any) -> None:
    page, client, url, ids, artifacts = browser_page
    page.goto(url + "/memories")
    page.fill("input[name=q]", "staging database name")
    page.click("form.filters button")
    page.wait_for_selector(f"tr.hit a[href='/memories/{ids['memory']}']")
    page.screenshot(path=str(artifacts / "memories-search.png"), full_page=True)

    page.click(f"a[href='/memories/{ids['memory']}']")
    page.fill("textarea[name=content]", "The staging database is called orders-staging-eu-2 since the migration.")
    page.click("form.edit button")
    page.wait_for_selector(".flash")
    assert "Updated" in page.inner_text(".flash")
    recalled = turn(client, ids["session"], "which staging database do the orders use?", 4_000_000)
    assert "orders-staging-eu-2" in recalled["injectedContext"]

    page.click("button:has-text('Forget')")
    page.wait_for_selector("button:has-text('Restore')")
    after = turn(client, ids["session"], "which staging database do the orders use?", 5_000_000)
    assert "orders-staging-eu-2" not in after["injectedContext"]
    assert page.errors == []


def test_a_candidate_skill_is_approved_in_the_browser(browser_page: Any) -> None:
    page, client, url, _, artifacts = browser_page
    (skill,) = client.call("skill.list", {})["skills"]
    assert skill["status"] == "candidate"
    page.goto(url + "/skills")
    page.screenshot(path=str(artifacts / "skills.png"), full_page=True)
    page.click(f"article.skill:has(a[href='/memories/{skill['id']}']) button:has-text('Approve')")
    page.wait_for_selector(".flash")
    assert "approved" in page.inner_text(".flash")
    assert client.call("skill.get", {"id": skill["id"]})["status"] == "active"


def test_a_live_event_arrives_while_a_host_runs_a_turn(browser_page: Any) -> None:
    page, client, url, ids, _ = browser_page
    page.goto(url + "/")
    page.wait_for_timeout(500)  # the EventSource connects
    turn(client, ids["session"], "summarise yesterday's incident report for the on-call channel", 6_000_000)
    page.wait_for_selector("#live li.new", timeout=15_000)
    assert page.locator("#live li.new").count() >= 1
    assert page.errors == []
