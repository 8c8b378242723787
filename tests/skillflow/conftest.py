"""The SkillFlow runner lives in scripts/ (run as `python scripts/skillflow_runner.py`): make it importable."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))


@dataclass
class Script:
    """What the fake server answers, and what it was sent."""

    content: str = "ok"
    replies: list[str] = field(default_factory=list)  # answered first, one per request, before `content`
    status: int = 200
    delay_s: float = 0.0
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 321, "completion_tokens": 45})
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: When set, the reply is computed from the request body (after `replies` run out).
    respond: Callable[[dict[str, Any]], str] | None = None


@pytest.fixture
def fake_llm() -> Iterator[tuple[str, Script]]:
    """A scripted OpenAI-compatible `/v1/chat/completions` on an ephemeral port."""
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "body": body})
            time.sleep(script.delay_s)
            payload = {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": script.replies.pop(0)
                            if script.replies
                            else script.respond(body)
                            if script.respond
                            else script.content,
                        },
                        "finish_reason": "stop",
                    }
                ],
                "usage": script.usage,
            }
            data = json.dumps(payload if script.status == 200 else {"error": "boom"}).encode()
            try:
                self.send_response(script.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up first (the timeout tests): there is nobody to answer

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        server.shutdown()
        server.server_close()


def make_job(family: Any, tmp_path: Path, injected: str = "") -> Any:
    """The AgentInput of the family's first task, in a fresh workspace under `tmp_path`."""
    from skillflow.agents import AgentInput

    task = family.tasks[0]
    workspace = family.prepare_workspace(task, tmp_path / "ws")
    return AgentInput(family, task, task.prompt, injected, workspace)
