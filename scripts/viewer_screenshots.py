#!/usr/bin/env python3
"""Screenshots of the viewer for the docs, from a short realistic session (needs Debian's chromium).

    python scripts/viewer_screenshots.py --out docs/img

Runs a real service with its viewer, records a few tasks the way a host would (turns with tool calls, a
verifier's verdict, a user's correction, a remembered rule), lets the learning run, then opens the overview,
a search, a task's timeline, the skills and the analytics in headless Chromium and saves each page.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memos_bridge.client import ServiceClient

PARSE = {"name": "bash", "input": {"cmd": "python parse_13f.py filing.xml"}, "output": "parsed 312 infoTable rows"}
SUM = {"name": "python", "input": {"code": "df.groupby('issuer').value.sum()"}, "output": "41 issuers"}
WRITE = {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"}
FAILED = {"name": "bash", "input": {"cmd": "./migrate.sh"}, "output": "permission denied", "success": False}


def _task(client: ServiceClient, session: str, text: str, tools: list[dict[str, Any]], reply: str) -> str:
    ts = int(time.time() * 1000)
    started = client.call("turn.start", {"agent": "demo", "sessionId": session, "userText": text, "ts": ts}, timeout=60)
    episode: str = started["query"]["episodeId"]
    end = {"agent": "demo", "sessionId": session, "episodeId": episode, "agentText": reply, "ts": ts + 1}
    client.call("turn.end", {**end, "toolCalls": tools}, timeout=60)
    client.call("episode.close", {"episodeId": episode})
    return episode


def _verdict(client: ServiceClient, episode: str, polarity: str, text: str, passed: int, total: int) -> None:
    params = {"episodeId": episode, "polarity": polarity, "rationale": text}
    client.call("feedback.submit", {**params, "raw": {"verifier": {"passed": passed, "total": total}}}, timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="memos-shots-"))
    log = work / "service.log"
    env = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LLM__PROVIDER": "none"}
    extra = ["--viewer", "127.0.0.1:0"]
    with ServiceClient.spawn(work / "home", extra_args=extra, env=env, stderr=log.open("wb")) as client:
        client.call("core.health")
        url = ""
        for _ in range(600):
            found = re.search(r"viewer on (http://\S+)", log.read_text())
            if found:
                url = found.group(1).rstrip("/")
                break
            time.sleep(0.1)
        session = client.call("session.open", {"agent": "demo"})["sessionId"]
        client.call(
            "memory.remember",
            {"content": "Release notes go in docs/CHANGES.md, newest first.", "type": "rule", "source": "user"},
        )
        failed = _task(
            client,
            session,
            "Compute the total value of the 13F holdings per issuer into answers.json",
            [PARSE, WRITE],
            "Wrote answers.json with every value multiplied by 1000.",
        )
        _verdict(
            client,
            failed,
            "negative",
            "Do not multiply 13F infoTable values by 1000: they are already in thousands",
            2,
            5,
        )
        passed = _task(
            client,
            session,
            "Compute the total value per issuer of this quarter's 13F filing",
            [PARSE, SUM, WRITE],
            "Wrote answers.json: totals per issuer, in thousands.",
        )
        _verdict(client, passed, "positive", "All fields correct.", 5, 5)
        _task(client, session, "Run the database migration on staging", [FAILED, FAILED], "The migration failed twice.")
        client.call("memory.flush", {}, timeout=300)
        client.call(
            "turn.start",
            {
                "agent": "demo",
                "sessionId": session,
                "userText": "New 13F task: total the values per issuer",
                "ts": int(time.time() * 1000),
            },
        )
        args.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            shots = {
                "viewer-overview.png": "/",
                "viewer-memories.png": "/memories?q=13F+values+thousands",
                "viewer-task.png": f"/tasks/{failed}",
                "viewer-skills.png": "/skills",
                "viewer-retrieval.png": "/retrieval",
            }
            for name, path in shots.items():
                page.goto(url + path)
                page.screenshot(path=str(args.out / name), full_page=False)
                print(f"wrote {args.out / name}", file=sys.stderr)
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
