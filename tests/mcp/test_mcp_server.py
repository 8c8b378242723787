"""`memos-bridge mcp` through the official MCP client over stdio: every tool, the resources, and one memory
shared with the Claude Code hooks (the MCP server's service owns the home; the hook processes attach to it)."""

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


def _hook(home: Path, project: Path, session: str, prompt: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memos_bridge", "hook", "claude-code", "user-prompt-submit"],
        input=json.dumps({"session_id": session, "cwd": str(project), "prompt": prompt}),
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
    env = {k: v for k, v in os.environ.items() if k != "MEMOS_BRIDGE_NAMESPACE"}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memos_bridge", "mcp", "--agent", "claude-code"],
        env={**env, "MEMOS_BRIDGE_HOME": str(home)},
        cwd=str(project),
    )
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

            # The hook's turn is the current task for the task-scoped tools.
            timeline = await session.call_tool("memory_timeline", {})
            assert not timeline.is_error
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
