"""Claude Code hooks, driven by recorded-style payloads through real `memos-bridge hook` processes.

A running service owns the data home (as the MCP server's service would); each hook is its own process that
attaches to it. The flow is a user's: a prompt (recall), tool calls (post-tool-use), the reply (stop, read
from a transcript in Claude Code's JSONL format), a correcting prompt (feedback bound to that turn), and a
later prompt on the same subject in another session that recalls the correction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import ServiceClient
from memos_bridge.mcp.claude_transcript import last_turn
from memos_bridge.mcp.hooks import _tool_success
from memos_bridge.mcp.project import project_root, resolve_namespace, workspace_id

CORRECTION = (
    "That's wrong. The weight column of the parcels export is in pounds, not kilograms: "
    "multiply by 0.4536 to get kilograms."
)


def _hook(home: Path, event: str, payload: dict[str, Any], *, timeout: float = 120) -> dict[str, Any] | None:
    env = {**os.environ, "MEMOS_BRIDGE_HOME": str(home)}
    env.pop("MEMOS_BRIDGE_NAMESPACE", None)
    done = subprocess.run(
        [sys.executable, "-m", "memos_bridge", "hook", "claude-code", event],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def _transcript(path: Path, prompt: str, calls: list[tuple[str, dict[str, Any], str, bool]], reply: str) -> None:
    """A Claude Code transcript: the prompt, tool_use / tool_result pairs, the final text reply."""
    lines: list[dict[str, Any]] = [
        {"type": "user", "message": {"role": "user", "content": "an earlier prompt"}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "old reply"}]}},
        {"type": "user", "message": {"role": "user", "content": prompt}, "uuid": "u1"},
    ]
    for index, (name, tool_input, output, failed) in enumerate(calls):
        lines.append(
            {
                "type": "assistant",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"Let me run {name}."},
                        {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": tool_input},
                    ],
                },
            }
        )
        lines.append(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"toolu_{index}", "content": output, "is_error": failed}
                    ],
                },
            }
        )
    lines.append({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": reply}]}})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n{not json", encoding="utf-8")


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[tuple[Path, ServiceClient]]:
    home = tmp_path / "home"
    client = ServiceClient.spawn(home)  # this service takes the home's lock: the hooks attach to it
    client.call("core.health")
    try:
        yield home, client
    finally:
        client.close()


def test_prompt_tools_stop_correction_and_recall_in_a_later_session(
    owner: tuple[Path, ServiceClient], tmp_path: Path
) -> None:
    home, service = owner
    project = tmp_path / "shipping-tools"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    namespace = resolve_namespace(project, agent="claude-code")
    base = {"session_id": "cc-session-1", "cwd": str(project / "src"), "transcript_path": str(tmp_path / "t1.jsonl")}

    prompt = "Total the parcel weights in the parcels export (parcels.csv) and report kilograms"
    first = _hook(home, "user-prompt-submit", {**base, "hook_event_name": "UserPromptSubmit", "prompt": prompt})
    assert first is None  # nothing learnt yet: no context to add

    tool_input = {
        "command": "python -c 'import csv; print(sum(float(r[1]) for r in csv.reader(open(\"parcels.csv\"))))'"
    }
    _hook(
        home,
        "post-tool-use",
        {
            **base,
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_input": tool_input,
            "tool_response": {"stdout": "1234.5", "stderr": "", "interrupted": False},
            "tool_use_id": "toolu_0",
        },
    )
    reply = "The parcels weigh 1234.5 kg in total."
    _transcript(tmp_path / "t1.jsonl", prompt, [("Bash", tool_input, "1234.5", False)], reply)
    _hook(home, "stop", {**base, "hook_event_name": "Stop", "stop_hook_active": False})

    episodes = service.call("memory.list_episodes", {"namespace": namespace})["episodes"]
    assert len(episodes) == 1
    steps = service.call("memory.timeline", {"episodeId": episodes[0]["id"], "namespace": namespace})["traces"]
    assert [call["name"] for step in steps for call in step["toolCalls"]] == ["Bash"]
    assert any("1234.5" in str(call.get("output")) for step in steps for call in step["toolCalls"])
    assert any(reply in step["agentText"] for step in steps)

    # The user corrects the answer: feedback bound to that turn, then the new prompt is itself a turn.
    _hook(home, "user-prompt-submit", {**base, "hook_event_name": "UserPromptSubmit", "prompt": CORRECTION})
    feedback = service.call("memory.list_feedback", {"episodeId": episodes[0]["id"]})["feedback"]
    assert [f["polarity"] for f in feedback] == ["negative"] and "0.4536" in feedback[0]["rationale"]
    assert feedback[0]["traceId"] in {step["id"] for step in steps}  # bound to the judged turn's last step
    _transcript(tmp_path / "t1.jsonl", CORRECTION, [], "Right: 560.0 kg.")
    _hook(home, "stop", {**base, "hook_event_name": "Stop", "stop_hook_active": False})
    service.call("memory.flush", {}, timeout=300)

    # A later session in the same project, worded differently: the lesson comes back as additionalContext.
    later = {"session_id": "cc-session-2", "cwd": str(project), "transcript_path": str(tmp_path / "t2.jsonl")}
    answer = _hook(
        home,
        "user-prompt-submit",
        {
            **later,
            "hook_event_name": "UserPromptSubmit",
            "prompt": "What is the average parcel weight in the parcels export, in kilograms?",
        },
    )
    assert answer is not None
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert answer["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert "0.4536" in context and "pounds" in context

    # Another project does not see this project's lesson.
    other = tmp_path / "other-repo"
    (other / ".git").mkdir(parents=True)
    elsewhere = _hook(
        home,
        "user-prompt-submit",
        {
            "session_id": "cc-session-3",
            "cwd": str(other),
            "hook_event_name": "UserPromptSubmit",
            "prompt": "What is the average parcel weight in the parcels export, in kilograms?",
        },
    )
    assert elsewhere is None or "0.4536" not in elsewhere["hookSpecificOutput"]["additionalContext"]


def test_a_failing_tool_reports_its_outcome_and_bad_input_never_fails_the_host(
    owner: tuple[Path, ServiceClient], tmp_path: Path
) -> None:
    home, service = owner
    base = {"session_id": "cc-fail", "cwd": str(tmp_path)}
    _hook(home, "user-prompt-submit", {**base, "prompt": "run the migration script"})
    for _ in range(3):  # Claude Code reports a failed call through PostToolUseFailure, with its error
        _hook(
            home,
            "post-tool-use-failure",
            {
                **base,
                "hook_event_name": "PostToolUseFailure",
                "tool_name": "Bash",
                "tool_input": {"command": "./migrate.sh"},
                "tool_use_id": "toolu_01",
                "error": "Exit code 126\npermission denied: ./migrate.sh",
                "is_interrupt": False,
                "duration_ms": 41,
            },
        )
    _hook(home, "stop", {**base})  # no transcript: the spooled calls are the turn's steps
    namespace = resolve_namespace(tmp_path, agent="claude-code")
    episode = service.call("memory.list_episodes", {"namespace": namespace})["episodes"][0]
    steps = service.call("memory.timeline", {"episodeId": episode["id"], "namespace": namespace})["traces"]
    calls = [call for step in steps for call in step["toolCalls"]]
    assert len(calls) == 3 and all(call.get("success") is False for call in calls)
    assert all("permission denied" in str(call.get("errorCode")) for call in calls)

    for event, text in (("user-prompt-submit", "not json"), ("stop", "[]"), ("post-tool-use", '{"no": "session"}')):
        env = {**os.environ, "MEMOS_BRIDGE_HOME": str(home)}
        done = subprocess.run(
            [sys.executable, "-m", "memos_bridge", "hook", "claude-code", event],
            input=text,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and done.stdout == ""
    assert "hook failed" in (home / "logs" / "hooks.log").read_text(encoding="utf-8")


# ---------------------------------------------------------------- unit level


def test_transcript_last_turn_pairs_tool_calls_with_results(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _transcript(
        path,
        "fix the test",
        [("Read", {"file_path": "a.py"}, "print(1)", False), ("Bash", {"command": "pytest"}, "1 failed", True)],
        "Fixed it.",
    )
    turn = last_turn(path)
    assert turn.prompt == "fix the test"
    assert turn.reply == "Fixed it."
    assert [(c["name"], c["success"]) for c in turn.tool_calls] == [("Read", True), ("Bash", False)]
    assert turn.tool_calls[1]["output"] == "1 failed" and turn.tool_calls[1]["errorCode"] == "1 failed"
    assert turn.tool_calls[0]["assistantTextBefore"] == "Let me run Read."
    assert last_turn(tmp_path / "missing.jsonl").tool_calls == []


def test_tool_success_reads_the_usual_response_shapes() -> None:
    assert _tool_success({"stdout": "ok", "stderr": "", "interrupted": False}) == (True, None)
    assert _tool_success({"exitCode": 2, "stderr": "boom"})[0] is False
    assert _tool_success({"success": False, "error": "no such file"}) == (False, "no such file")
    assert _tool_success({"is_error": True})[0] is False
    assert _tool_success({"interrupted": True}) == (False, "interrupted")
    assert _tool_success("plain text output") == (True, None)


def test_one_namespace_per_project_unless_one_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMOS_BRIDGE_NAMESPACE", raising=False)
    repo = tmp_path / "api"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg" / "sub").mkdir(parents=True)
    assert project_root(repo / "pkg" / "sub") == repo.resolve()
    here = resolve_namespace(repo / "pkg", agent="cursor")
    assert here["workspaceId"] == workspace_id(repo.resolve()) and here["agentKind"] == "cursor"
    twin = tmp_path / "other" / "api"
    twin.mkdir(parents=True)
    assert resolve_namespace(twin, agent="cursor")["workspaceId"] != here["workspaceId"]  # same name, other path
    assert resolve_namespace(repo, agent="x", configured="team")["workspaceId"] == "team"
    monkeypatch.setenv("MEMOS_BRIDGE_NAMESPACE", "shared")
    assert resolve_namespace(repo, agent="x", configured="team")["workspaceId"] == "shared"
    assert resolve_namespace(repo, agent="x", named="mine")["workspaceId"] == "mine"
