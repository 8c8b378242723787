"""Secrets in what a host sends never reach storage, indexes, recall, logs or an LLM prompt.

An agent runs `cat .env` and the tool output holds one credential of every kind the service knows; the reply
quotes an `Authorization:` header and the user's feedback a password. Through the real service on stdio,
with a scripted host LLM that records every prompt it is sent, none of the secret values may appear in the
database file (tables and full-text indexes, WAL included), in any read method's answer, in another
session's `turn.start` injection, in the log files, or in a prompt — and `core.health` counts each kind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memos_bridge.client import ServiceClient

AGENT = "tester"

#: kind → (the line a `.env` / shell output holds, the secret value in it)
SECRETS: dict[str, tuple[str, str]] = {
    "openai_key": ("OPENAI_API_KEY=", "sk-proj-Ab3dEf9hIjKlMn0pQrStUvWxYz1234567890abcdEFGH_ijkl-MNOPqrst"),
    "anthropic_key": ("ANTHROPIC_API_KEY=", "sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fEdCbA-xyz_123456"),
    "google_api_key": ("GOOGLE_API_KEY=", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    "aws_access_key": ("AWS_ACCESS_KEY_ID=", "AKIAIOSFODNN7EXAMPLE"),
    "aws_secret_key": ("AWS_SECRET_ACCESS_KEY=", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "github_token": ("GH_TOKEN=", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    "gitlab_token": ("CI_JOB=", "glpat-xXyYzZ1234567890abcd"),
    "slack_token": ("SLACK_BOT=", "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"),
    "stripe_key": ("STRIPE=", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    "npm_token": ("NPM_TOKEN=", "npm_abcdefghijklmnopqrstuvwxyz0123456789"),
    "pypi_token": ("PYPI=", "pypi-AgEIcHlwaS5vcmcCJGE0ZjM2ZTFiLTU2NmYtNDk2ZS1hMjQxLWE0ZDI3NTQ5ZjU1MQ"),
    "jwt": (
        "SESSION_JWT=",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    "password": ("DB_PASSWORD=", "Tr0ub4dor&3horse"),
    "url_password": ("DATABASE_URL=postgres://admin:", "s3cr3tP4ssw0rd"),
    "private_key": ("", "MIIEowIBAAKCAQEAq7BFUpkGp3+LQmlQ0sJ7kZ2bXnJ9vY4tR8wE1uI6oP5aS3dF"),
    "authorization": ("", "Zm9vYmFyOmJhenF1eDEyMzQ1Njc4OQ"),
}


def _env_output() -> str:
    lines = []
    for kind, (prefix, value) in SECRETS.items():
        if kind == "url_password":
            lines.append(f"{prefix}{value}@db.internal:5432/app")
        elif kind == "private_key":
            lines.append(f"-----BEGIN RSA PRIVATE KEY-----\n{value}\n-----END RSA PRIVATE KEY-----")
        elif kind == "authorization":
            continue  # it is in the reply
        else:
            lines.append(f"{prefix}{value}")
    return "\n".join(lines)


def _leaks(text: str) -> list[str]:
    return [kind for kind, (_, value) in SECRETS.items() if value in text]


def test_secrets_in_tool_output_reply_and_feedback_are_redacted_everywhere(tmp_path: Path) -> None:
    home = tmp_path / "home"
    prompts: list[str] = []

    def host_llm(params: dict[str, Any]) -> dict[str, Any]:
        prompts.append(json.dumps(params, ensure_ascii=False))
        return {"text": json.dumps({"goal_achievement": 0.2, "process_quality": 0.5, "user_satisfaction": 0.1})}

    stderr = (tmp_path / "stderr.log").open("wb")
    env = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LOGGING__LEVEL": "debug"}
    with ServiceClient.spawn(home, env=env, stderr=stderr) as client:
        client.on_request("host.llm.complete", host_llm)
        session_a = client.call("session.open", {"agent": AGENT})["sessionId"]
        started = client.call(
            "turn.start",
            {"agent": AGENT, "sessionId": session_a, "userText": "Deploy the billing service to staging", "ts": 1_000},
            timeout=60,
        )
        episode = started["query"]["episodeId"]
        authorization = SECRETS["authorization"][1]
        ended = client.call(
            "turn.end",
            {
                "agent": AGENT,
                "sessionId": session_a,
                "episodeId": episode,
                "ts": 2_000,
                "agentText": f'Called the API with curl -H "Authorization: Basic {authorization}" and it failed.',
                "toolCalls": [
                    {"name": "bash", "input": {"command": "cat .env"}, "output": _env_output()},
                    {
                        "name": "http_request",
                        "input": {
                            "url": "https://api.example.com/deploy",
                            "headers": {"X-Api-Key": "Zx81kd9QmP02LxV7"},
                        },
                        "output": "403 forbidden",
                        "errorCode": "http_403",
                    },
                ],
            },
            timeout=60,
        )
        password = SECRETS["password"][1]
        client.call(
            "feedback.submit",
            {
                "episodeId": episode,
                "channel": "explicit",
                "polarity": "negative",
                "magnitude": 1.0,
                "rationale": f"Wrong: the staging deploy needs the vault login, password={password}, not the API key.",
                "raw": {"traceIds": ended["traceIds"], "note": {"password": password}},
                "ts": 3_000,
            },
            timeout=60,
        )
        client.call("memory.flush", {}, timeout=120)

        answers = [client.call("memory.get_trace", {"id": trace_id}) for trace_id in ended["traceIds"] if trace_id]
        answers.append(client.call("memory.list_traces", {}))
        answers.append(client.call("memory.timeline", {"episodeId": episode}))
        for query in ("OPENAI_API_KEY cat .env", "AKIA AWS secret access key", "staging deploy password"):
            answers.append(client.call("memory.search", {"query": query, "sessionId": session_a}))
        read_back = json.dumps(answers, ensure_ascii=False)
        assert "[REDACTED:" in read_back  # the trace is there, with its secrets replaced
        assert _leaks(read_back) == []

        session_b = client.call("session.open", {"agent": AGENT})["sessionId"]
        other = client.call(
            "turn.start",
            {
                "agent": AGENT,
                "sessionId": session_b,
                "userText": "Deploy the billing service to staging; what keys are in .env?",
                "ts": 10_000,
            },
            timeout=60,
        )
        assert _leaks(json.dumps(other, ensure_ascii=False)) == []

        health = client.call("core.health")["redactions"]
        assert health["enabled"] is True
        assert set(SECRETS) <= set(health["byKind"]), health
        assert health["total"] >= len(SECRETS)
    stderr.close()

    assert prompts, "the scripted host LLM was never asked: the prompt check would prove nothing"
    assert _leaks("\n".join(prompts)) == []
    stored = b"".join(path.read_bytes() for path in home.glob("memos.db*"))
    assert stored, "no database file"
    assert [kind for kind, (_, value) in SECRETS.items() if value.encode() in stored] == []
    logs = "".join(path.read_text(errors="replace") for path in (home / "logs").glob("*")) + (
        tmp_path / "stderr.log"
    ).read_text(errors="replace")
    assert _leaks(logs) == []


def test_redaction_can_be_configured_and_turned_off(tmp_path: Path) -> None:
    """An extra `[redaction] patterns` rule applies, an allow-listed value is kept, and `enabled = false` keeps
    text verbatim (an operator's explicit choice)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[redaction]\npatterns = { employee_id = "EMP-[0-9]{6}" }\nallow = ["AKIAIOSFODNN7EXAMPLE"]\n',
        encoding="utf-8",
    )
    text = "badge EMP-123456, docs key AKIAIOSFODNN7EXAMPLE, real key AKIAZ7Q3L5N2X8W4Y6V1"
    with ServiceClient.spawn(home) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        episode = client.call(
            "turn.start", {"agent": AGENT, "sessionId": session, "userText": "check the badge", "ts": 1_000}
        )["query"]["episodeId"]
        ended = client.call(
            "turn.end",
            {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": 2_000, "agentText": text},
        )
        stored = client.call("memory.get_trace", {"id": ended["traceIds"][-1]})["agentText"]
        assert "[REDACTED:employee_id]" in stored and "EMP-123456" not in stored
        assert "AKIAIOSFODNN7EXAMPLE" in stored
        assert "AKIAZ7Q3L5N2X8W4Y6V1" not in stored and "[REDACTED:aws_access_key]" in stored

    off = tmp_path / "off"
    with ServiceClient.spawn(off, env={"MEMOS_BRIDGE_REDACTION__ENABLED": "false"}) as client:
        session = client.call("session.open", {"agent": AGENT})["sessionId"]
        episode = client.call(
            "turn.start", {"agent": AGENT, "sessionId": session, "userText": "check the badge", "ts": 1_000}
        )["query"]["episodeId"]
        ended = client.call(
            "turn.end",
            {"agent": AGENT, "sessionId": session, "episodeId": episode, "ts": 2_000, "agentText": text},
        )
        assert client.call("memory.get_trace", {"id": ended["traceIds"][-1]})["agentText"] == text
        assert client.call("core.health")["redactions"] == {"enabled": False, "total": 0, "byKind": {}}


def test_a_bad_redaction_pattern_is_a_configuration_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[redaction]\npatterns = { broken = "([a-z" }\n', encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "memos_bridge", "serve", "--home", str(home)],
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert b"broken" in proc.stderr and proc.stdout == b""
