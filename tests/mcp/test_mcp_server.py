"""`memos-bridge mcp` through the official MCP client over stdio: every tool, the resources, and one memory
shared with the Claude Code hooks (the MCP server's service owns the home; the hook processes attach to it).

The server runs as another host (`--agent cursor`) in the same project as the hooks (Claude Code): what one
host keeps or records there, the other reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memos_bridge.client import ServiceClient
from memos_bridge.mcp.project import resolve_namespace
from tests.e2e.test_skills_rpc import AVOID_LINE, PARSE, SUM, WRITE

TOOLS = {
    "memory_search",
    "memory_get",
    "memory_remember",
    "memory_forget",
    "memory_feedback",
    "memory_timeline",
    "skill_list",
    "skill_get",
    "memory_environment",
}
RULE = "Release notes for the ledger service go in docs/CHANGES.md, newest entry first, with the ticket id."


def _text(result: Any) -> str:
    return "\n".join(part.text for part in result.content if getattr(part, "text", None))


def _server(home: Path, project: Path, agent: str) -> StdioServerParameters:
    """`memos-bridge mcp` as a host starts it in `project` (no shared namespace from the environment)."""
    env = {k: v for k, v in os.environ.items() if k != "MEMOS_BRIDGE_NAMESPACE"}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memos_bridge", "mcp", "--agent", agent],
        env={**env, "MEMOS_BRIDGE_HOME": str(home)},
        cwd=str(project),
    )


def _hook(home: Path, project: Path, session: str, prompt: str, event: str = "user-prompt-submit") -> str:
    payload = {"session_id": session, "cwd": str(project)}
    payload.update({"prompt": prompt} if event == "user-prompt-submit" else {"last_assistant_message": prompt})
    done = subprocess.run(
        [sys.executable, "-m", "memos_bridge", "hook", "claude-code", event],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env={**os.environ, "MEMOS_BRIDGE_HOME": str(home)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] if done.stdout.strip() else ""


@pytest.mark.anyio
async def test_every_tool_through_the_mcp_client_and_one_memory_with_the_hooks(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "ledger"
    (project / ".git").mkdir(parents=True)
    params = _server(home, project, "cursor")
    with anyio.fail_after(240):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            search_schema = next(tool for tool in listed.tools if tool.name == "memory_search").input_schema
            assert search_schema["required"] == ["query"] and "k" in search_schema["properties"]

            remembered = await session.call_tool(
                "memory_remember", {"content": RULE, "type": "rule", "from_user": True}
            )
            assert not remembered.is_error
            memory_id = _text(remembered).split()[2].rstrip(".")
            assert memory_id.startswith("me_")

            found = await session.call_tool("memory_search", {"query": "where do ledger release notes go", "k": 3})
            assert memory_id in _text(found) and "UNTRUSTED DATA" in _text(found)
            got = await session.call_tool("memory_get", {"id": memory_id})
            assert "docs/CHANGES.md" in _text(got)
            bad = await session.call_tool("memory_get", {"id": "zz_nothing"})
            assert bad.is_error and "ids look like" in _text(bad)

            rules = await session.read_resource("memos://rules")
            assert RULE in rules.contents[0].text  # type: ignore[union-attr]
            resources = await session.list_resources()
            assert "memos://rules" in {str(resource.uri) for resource in resources.resources}

            # No task yet in this project: feedback is kept as a remembered lesson instead of being lost.
            early = await session.call_tool(
                "memory_feedback", {"polarity": "negative", "text": "Never edit generated ledger fixtures by hand."}
            )
            assert "remembered memory" in _text(early)

            # A prompt through the Claude Code hook attaches to this server's service and recalls the rule.
            context = _hook(home, project, "cc-1", "Write the release notes for the ledger service change")
            assert "docs/CHANGES.md" in context
            _hook(home, project, "cc-1", "Added the entry to docs/CHANGES.md with the ticket id.", "stop")

            # The hook's turn is the current task for the task-scoped tools.
            timeline = await session.call_tool("memory_timeline", {})
            assert not timeline.is_error and "1 steps" in _text(timeline)
            feedback = await session.call_tool(
                "memory_feedback",
                {"polarity": "positive", "text": "The notes were right; keep the ticket id.", "passed": 3, "total": 3},
            )
            assert "Recorded positive feedback" in _text(feedback)

            for name, args in (
                ("skill_list", {}),
                ("memory_environment", {}),
                ("memory_environment", {"query": "ledger service"}),
            ):
                result = await session.call_tool(name, args)
                assert not result.is_error and _text(result)
            missing = await session.call_tool("skill_get", {"id": "sk_missing"})
            assert not missing.is_error and "No skill" in _text(missing)

            forgotten = await session.call_tool("memory_forget", {"id": memory_id, "reason": "moved to the wiki"})
            assert "Forgot" in _text(forgotten)
            after = await session.call_tool("memory_search", {"query": "where do ledger release notes go"})
            assert memory_id not in _text(after)


def _task(client: ServiceClient, session: str, text: str, tools: list[dict[str, Any]], reply: str, ts: int) -> str:
    started = client.call("turn.start", {"agent": "claude-code", "sessionId": session, "userText": text, "ts": ts})
    episode: str = started["query"]["episodeId"]
    end = {"agent": "claude-code", "sessionId": session, "episodeId": episode, "agentText": reply, "ts": ts + 1}
    client.call("turn.end", {**end, "toolCalls": tools}, timeout=60)
    client.call("episode.close", {"episodeId": episode})
    return episode


@pytest.mark.anyio
async def test_an_active_skill_is_a_resource_and_reading_it_in_a_task_is_a_trial(tmp_path: Path) -> None:
    """A skill learnt from a failed and a passed task is listed and read as `memos://skills/<id>`; read through
    `skill_get` during the next task it is a trial, which that task's verdict (`memory_feedback`) passes."""
    home, project = tmp_path / "home", tmp_path / "filings"
    (project / ".git").mkdir(parents=True)
    namespace = resolve_namespace(project, agent="claude-code")
    owner_env = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LLM__PROVIDER": "none"}
    with ServiceClient.spawn(home, env=owner_env) as owner:  # the home's owner: the MCP server attaches to it
        session = owner.call("session.open", {"agent": "claude-code", "namespace": namespace})["sessionId"]
        failed = _task(
            owner,
            session,
            "Compute the total value of the 13F holdings per issuer into answers.json",
            [PARSE, WRITE],
            "Wrote answers.json with every value multiplied by 1000.",
            1_000,
        )
        verdict = {"task": "sec13f", "passed": 2, "total": 5}
        owner.call(
            "feedback.submit",
            {
                "episodeId": failed,
                "polarity": "negative",
                "rationale": AVOID_LINE,
                "raw": {"verifier": verdict},
            },
            timeout=120,
        )
        passed = _task(
            owner,
            session,
            "Compute the total value per issuer of this quarter's 13F filing",
            [PARSE, SUM, WRITE],
            "Wrote answers.json: totals per issuer, values kept in thousands.",
            10_000,
        )
        owner.call(
            "feedback.submit",
            {
                "episodeId": passed,
                "polarity": "positive",
                "rationale": "All fields correct.",
                "raw": {"verifier": {"task": "sec13f", "passed": 5, "total": 5}},
            },
            timeout=120,
        )
        (skill,) = owner.call("skill.list", {"namespace": namespace})["skills"]
        assert skill["status"] == "active"  # anchored by the passed task's verdict

        params = _server(home, project, "claude-code")
        with anyio.fail_after(240):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
                await mcp.initialize()
                listed = await mcp.call_tool("skill_list", {})
                assert skill["id"] in _text(listed)

                _hook(home, project, "cc-2", "New 13F task: total the infoTable values per issuer of filing_q3.xml")
                got = await mcp.call_tool("skill_get", {"id": skill["id"]})  # read during the task: a trial
                assert skill["name"] in _text(got)
                _hook(home, project, "cc-2", "Totals per issuer written to answers.json, in thousands.", "stop")
                done = await mcp.call_tool(
                    "memory_feedback",
                    {"polarity": "positive", "text": "All totals match the filing.", "passed": 5, "total": 5},
                )
                assert "Recorded positive feedback" in _text(done), _text(done)
                owner.call("memory.flush", {}, timeout=300)

                after = owner.call("skill.get", {"id": skill["id"]})
                assert (after["trialsAttempted"], after["trialsPassed"]) == (
                    skill["trialsAttempted"] + 1,
                    skill["trialsPassed"] + 1,
                )
                uris = {str(resource.uri) for resource in (await mcp.list_resources()).resources}
                assert f"memos://skills/{skill['id']}" in uris
                page = await mcp.read_resource(f"memos://skills/{skill['id']}")
                text = page.contents[0].text  # type: ignore[union-attr]
                assert text.startswith(f"# {skill['name']}") and "thousands" in text


@pytest.mark.anyio
async def test_the_server_reconnects_when_the_service_it_attached_to_goes_away(tmp_path: Path) -> None:
    """Another host's service owns the home (it keeps serving while this server is attached, even after its
    own host leaves); it crashes; the next tool call reaches the same memory through a service the MCP server
    starts for itself."""
    home, project = tmp_path / "home", tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    params = _server(home, project, "codex")
    other_host = ServiceClient.spawn(home)
    other_host.call("core.health")
    with anyio.fail_after(240):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            kept = await session.call_tool("memory_remember", {"content": RULE, "type": "rule"})
            assert not kept.is_error
            assert other_host.process is not None
            other_host.process.kill()  # the owner the server attached to crashes
            other_host.process.wait()
            other_host.close()
            found = await session.call_tool("memory_search", {"query": "where do ledger release notes go"})
            assert not found.is_error, _text(found)
            assert "docs/CHANGES.md" in _text(found)
