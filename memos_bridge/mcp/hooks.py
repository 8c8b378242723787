"""`memos-bridge hook claude-code <event>`: automatic recall and capture around every Claude Code turn.

An MCP tool is something a model may or may not call; a memory that learns needs every turn. Claude Code runs
hook commands at fixed points and passes one JSON object on stdin (`session_id`, `transcript_path`, `cwd`,
`hook_event_name`, plus the event's fields). Each event here is one short process:

* `user-prompt-submit` (`prompt`): when the prompt judges the previous answer ("that's wrong, …", "works
  now"), a `feedback.submit` bound to the previous turn's task and steps; then `turn.start`, whose injected
  block is printed as the hook's `additionalContext` — within `[mcp] prompt_timeout_s`, else nothing (a slow
  memory never holds the user's prompt back);
* `post-tool-use` (`tool_name`, `tool_input`, `tool_response`) and `post-tool-use-failure` (`error`,
  `is_interrupt`: Claude Code reports a failed call only there): the call is spooled for the turn's capture
  and its success or failure goes to `tool.outcome` at once (a burst of failures becomes a repair the next
  prompt recalls);
* `stop`: `turn.end` with the reply and the tool calls read from the transcript (the spool when the transcript
  has none).

Between these processes the only state is a small JSON file per Claude session under
`<home>/hooks/claude-code/`: the memos session, the turn in progress and the last finished turn. A hook never
fails the host: any error is logged to `<home>/logs/hooks.log` and the hook exits 0 with no output.

The hooks reach the one memory of the home (`home_client.open_client`): the owner's socket when the MCP server
(or any service) runs, else a service started for this event only, which loads the embedding model first —
slower, but the turn is still recalled and captured.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from memos_bridge.mcp.claude_transcript import FIELD_CHARS, last_turn
from memos_bridge.mcp.project import resolve_namespace
from memos_bridge.rules.verdict import detect_feedback

HOST = "claude-code"
EVENTS = ("user-prompt-submit", "post-tool-use", "post-tool-use-failure", "stop")
logger = logging.getLogger("memos_bridge.hooks")


@dataclass
class HookOptions:
    home: Path
    prompt_timeout_s: float = 8.0
    configured_namespace: str | None = None
    namespace: str | None = None


def _now_ms() -> int:
    return int(time.time() * 1000)


class SessionState:
    """The per-session state file, read and written under an exclusive lock (hooks can overlap)."""

    def __init__(self, home: Path, session: str) -> None:
        folder = home / "hooks" / HOST
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = hashlib.sha256(session.encode("utf-8", "surrogateescape")).hexdigest()[:24]
        self.path = folder / f"{key}.json"
        self.spool = folder / f"{key}.tools.jsonl"
        self.data: dict[str, Any] = {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        with (self.path.parent / f"{self.path.stem}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.data = json.loads(self.path.read_text("utf-8")) if self.path.exists() else {}
            except ValueError:
                self.data = {}
            yield self.data
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, ensure_ascii=False), "utf-8")
            os.replace(tmp, self.path)

    def append_tool(self, call: dict[str, Any]) -> None:
        line = json.dumps(call, ensure_ascii=False) + "\n"
        with self.spool.open("a", encoding="utf-8") as handle:
            handle.write(line)

    def take_tools(self) -> list[dict[str, Any]]:
        try:
            lines = self.spool.read_text("utf-8").splitlines()
        except OSError:
            return []
        with contextlib.suppress(OSError):
            self.spool.unlink()
        calls = []
        for line in lines:
            with contextlib.suppress(ValueError):
                calls.append(json.loads(line))
        return calls


# ---------------------------------------------------------------- entry point


def run(event: str, stdin: IO[str], stdout: IO[str], options: HookOptions) -> int:
    """Handle one hook event; always exits 0 (errors go to the hooks log, never to the host)."""
    _log_to_file(options.home)
    try:
        payload = json.loads(stdin.read() or "{}")
        if not isinstance(payload, dict):
            raise ValueError("the hook input is not a JSON object")
        session = str(payload.get("session_id") or "")
        if not session:
            raise ValueError("the hook input has no session_id")
        handler = {
            "user-prompt-submit": on_prompt,
            "post-tool-use": on_tool,
            "post-tool-use-failure": on_tool,
            "stop": on_stop,
        }[event]
        output = handler(payload, SessionState(options.home, session), options)
    except Exception:
        logger.exception("claude-code %s hook failed", event)
        return 0
    if output is not None:
        stdout.write(json.dumps(output, ensure_ascii=False))
        stdout.flush()
    return 0


def _log_to_file(home: Path) -> None:
    if logger.handlers:
        return
    with contextlib.suppress(OSError):
        (home / "logs").mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(home / "logs" / "hooks.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _namespace(payload: dict[str, Any], options: HookOptions) -> dict[str, Any]:
    folder = payload.get("cwd") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    return resolve_namespace(
        Path(str(folder)), agent=HOST, named=options.namespace, configured=options.configured_namespace
    )


@contextlib.contextmanager
def _client(options: HookOptions, *, spawn: bool = True) -> Iterator[Any]:
    """A client of the home's memory (None when `spawn` is off and no service runs)."""
    from memos_bridge.home_client import open_client, owner_socket

    if not spawn and owner_socket(options.home) is None:
        yield None
        return
    (options.home / "logs").mkdir(parents=True, exist_ok=True)
    with (options.home / "logs" / "hooks-service.log").open("ab") as service_log:
        client = open_client(options.home, service_log)
        try:
            yield client
        finally:
            client.close()


def _memos_session(client: Any, state: dict[str, Any], session: str, namespace: dict[str, Any]) -> str:
    """The memos session of this Claude session (opened once; re-opening an existing id reuses it)."""
    memos_session = f"{HOST}:{session}"[:200]
    if state.get("memosSession") != memos_session:
        client.session_open(HOST, session_id=memos_session, namespace=namespace, meta={"face": "claude-code hooks"})
        state["memosSession"] = memos_session
    return memos_session


# ---------------------------------------------------------------- events


def on_prompt(payload: dict[str, Any], store: SessionState, options: HookOptions) -> dict[str, Any] | None:
    prompt = str(payload.get("prompt") or "")
    if not prompt.strip():
        return None
    namespace = _namespace(payload, options)
    started = time.monotonic()
    with store.locked() as state, _client(options) as client:
        session = _memos_session(client, state, str(payload["session_id"]), namespace)
        if state.get("turn"):  # the last turn never reached Stop (interrupted): capture what it did
            _end_turn(client, store, state, payload, session)
        verdict = detect_feedback(prompt)
        previous = state.get("lastTurn")
        if verdict is not None and previous:
            digest = hashlib.sha256(prompt.encode("utf-8", "surrogateescape")).hexdigest()[:12]
            raw = verdict.raw(prompt, previous.get("reply"), host=HOST)
            raw["traceIds"] = previous.get("traceIds") or []
            client.feedback_submit(
                verdict.polarity,
                episode_id=previous["episodeId"],
                trace_id=(previous.get("traceIds") or [None])[-1],
                channel="explicit",
                magnitude=verdict.magnitude,
                rationale=prompt[:20_000],
                raw=raw,
                evidence_id=f"{HOST}-fb:{session}:{previous.get('ts')}:{digest}"[:200],
                timeout=options.prompt_timeout_s,
            )
        ts = _now_ms()
        left = max(0.5, options.prompt_timeout_s - (time.monotonic() - started))
        try:
            result = client.turn_start(
                HOST,
                session,
                prompt,
                ts=ts,
                turn_key=f"{ts}-{hashlib.sha256(prompt.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}",
                deadline_at=ts + int(left * 1000 * 0.8),
                namespace=namespace,
                timeout=left,
            )
        except Exception:
            logger.warning("turn.start did not answer within %.1f s; the prompt goes without memories", left)
            return None
        state["turn"] = {"ts": ts, "episodeId": result["query"]["episodeId"], "prompt": prompt[:20_000]}
        store.take_tools()  # tool calls spooled before this prompt belonged to no turn we know
    injected = str(result.get("injectedContext") or "")
    if not injected.strip():
        return None
    return {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": injected}}


def _tool_success(response: Any) -> tuple[bool, str | None]:
    """Whether a tool call worked, from the response Claude Code passes (fields vary by tool)."""
    if isinstance(response, dict):
        if response.get("is_error") or response.get("isError") or response.get("success") is False:
            return False, str(response.get("error") or response.get("stderr") or "error")[:500]
        if response.get("interrupted"):
            return False, "interrupted"
        code = response.get("exitCode", response.get("exit_code"))
        if isinstance(code, int) and code != 0:
            return False, f"exit code {code}: {str(response.get('stderr') or '')[:400]}"
        if response.get("error"):
            return False, str(response["error"])[:500]
    return True, None


def _outcome(payload: dict[str, Any]) -> tuple[bool, str | None, str]:
    """(success, error, output) of a `PostToolUse` payload (the call completed: its response) or a
    `PostToolUseFailure` one (it failed: its `error`, and whether the user interrupted it)."""
    if "error" in payload and "tool_response" not in payload:
        error = str(payload.get("error") or "error")
        return False, (f"interrupted: {error}" if payload.get("is_interrupt") else error)[:500], error
    response = payload.get("tool_response")
    success, failure = _tool_success(response)
    output = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False, default=str)
    return success, failure, output


def on_tool(payload: dict[str, Any], store: SessionState, options: HookOptions) -> None:
    name = str(payload.get("tool_name") or "tool")[:200]
    success, error, output = _outcome(payload)
    call: dict[str, Any] = {
        "name": name,
        "input": payload.get("tool_input"),
        "output": output[:FIELD_CHARS],
        "success": success,
        "endedAt": _now_ms(),
    }
    if payload.get("tool_use_id"):
        call["toolCallId"] = str(payload["tool_use_id"])[:200]
    if error:
        call["errorCode"] = error
    store.append_tool(call)
    with store.locked() as state:
        turn, session = state.get("turn"), state.get("memosSession")
    if not turn or not session:
        return None
    with _client(options, spawn=False) as client:  # a failure burst matters only while a service runs
        if client is not None:
            client.tool_outcome(session, name, success, episode_id=turn["episodeId"], error=error, ts=_now_ms())
    return None


def on_stop(payload: dict[str, Any], store: SessionState, options: HookOptions) -> None:
    with store.locked() as state:
        if not state.get("turn"):
            store.take_tools()
            return None
        with _client(options) as client:
            session = _memos_session(client, state, str(payload["session_id"]), _namespace(payload, options))
            _end_turn(client, store, state, payload, session)
    return None


def _end_turn(client: Any, store: SessionState, state: dict[str, Any], payload: dict[str, Any], session: str) -> None:
    """`turn.end` for the turn in progress, from the transcript (or the spool), then remember it as the last."""
    turn = state.pop("turn")
    spooled = store.take_tools()
    transcript = payload.get("transcript_path")
    read = last_turn(Path(str(transcript))) if transcript else None
    calls = read.tool_calls if read is not None and read.tool_calls else spooled
    reply = str(payload.get("last_assistant_message") or "") or (read.reply if read is not None else "")
    ended = client.turn_end(
        HOST,
        session,
        turn["episodeId"],
        agent_text=reply[:FIELD_CHARS],
        agent_thinking=(read.thinking if read is not None else None) or None,
        tool_calls=calls,
        ts=max(_now_ms(), int(turn["ts"]) + 1),
    )
    state["lastTurn"] = {
        "episodeId": ended.get("episodeId") or turn["episodeId"],
        "traceIds": ended.get("traceIds") or [],
        "ts": turn["ts"],
        "reply": reply[:2000],
    }
