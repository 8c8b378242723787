#!/usr/bin/env python3
"""How many LLM calls does one typical task cost the service? Measured end to end; prints its figures.

    python scripts/llm_cost.py            # one 10-step task, then one more task of the same kind
    python scripts/llm_cost.py --steps 20

Spawns `memos-bridge serve` on a temporary data home with the feedback window at 0, connects as a host
that answers every `host.llm.complete` with a JSON object valid for every prompt of the service (a stand-in
model: the point is counting calls, not judging answers), and runs:

1. a task of `--steps` steps: one user turn, `steps - 1` tool calls and the reply, then a follow-up turn
   ("also ..."), then the verifier's feedback through `feedback.submit` (the chain runs before it replies);
2. a second task of the same kind in the same session (an explicit "new task:" switch), then
   `session.close` (finalises it and drains the learning queue);

and prints the service's own per-operation LLM counters from `core.health` (`llmUsage.ops`) after each
phase, so the cost of routing (turn.start), of the learning chain (reward, L2) and of each later feedback is
visible separately.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from memos_bridge.client import ServiceClient

ANSWER = {
    # routing / intent
    "relation": "follow_up",
    "kind": "task",
    "confidence": 0.6,
    "reason": "stand-in model",
    # reward
    "goal_achievement": 0.6,
    "process_quality": 0.5,
    "user_satisfaction": 0.2,
    "label": "success",
    "scores": [{"idx": 1, "alpha": 0.6, "usable": True}],
    # summaries
    "title": "Total 13F holdings per issuer",
    "summary": "Parsed the infoTable and wrote answers.json.",
    "outcome": "success",
    # L2 / repair / experiences
    "trigger": "asked to total 13F holdings",
    "procedure": "1. parse infoTable 2. sum value per issuer 3. write answers.json",
    "verification": "answers.json validates",
    "preference": "Prefer reading the schema first",
    "anti_pattern": "Avoid multiplying values by 1000",
    "ranked": [1],
    "sufficient": True,
}


def host_llm(params: dict[str, Any]) -> dict[str, Any]:
    return {"text": json.dumps(ANSWER), "model": "stand-in"}


def ops(client: ServiceClient) -> dict[str, int]:
    usage = client.call("core.health").get("llmUsage") or {}
    return {op: int(stats.get("calls", 0)) for op, stats in sorted((usage.get("ops") or {}).items())}


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {op: n - before.get(op, 0) for op, n in after.items() if n - before.get(op, 0)}


def run_task(client: ServiceClient, session: str, text: str, steps: int, ts: int) -> tuple[str, list[str]]:
    start = client.call("turn.start", {"agent": "cost", "sessionId": session, "userText": text, "ts": ts}, timeout=60)
    episode = start["query"]["episodeId"]
    calls = [
        {"name": "bash", "input": {"cmd": f"python step_{i}.py"}, "output": f"step {i} ok"} for i in range(steps - 1)
    ]
    end = client.call(
        "turn.end",
        {
            "agent": "cost",
            "sessionId": session,
            "episodeId": episode,
            "toolCalls": calls,
            "agentText": "Wrote answers.json with the totals per issuer.",
            "ts": ts + 1000,
        },
        timeout=60,
    )
    return episode, end["traceIds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="steps of the task (tool calls + the reply)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
        with ServiceClient.spawn(Path(tmp) / "home", env=env) as client:
            client.on_request("host.llm.complete", host_llm)
            session = client.call("session.open", {"agent": "cost"})["sessionId"]
            phases: list[tuple[str, dict[str, int]]] = []
            before = ops(client)
            episode, traces = run_task(
                client,
                session,
                "Parse holdings.xml and total the value per issuer into answers.json",
                args.steps,
                1_000,
            )
            client.call(
                "turn.start",
                {"agent": "cost", "sessionId": session, "userText": "also sort the issuers by CUSIP", "ts": 5_000},
            )
            after_turns = ops(client)
            phases.append(
                (f"task 1: {args.steps}-step turn + a follow-up turn (routing, intent)", diff(after_turns, before))
            )
            client.call(
                "feedback.submit",
                {
                    "episodeId": episode,
                    "traceId": traces[-1],
                    "polarity": "negative",
                    "magnitude": 1.0,
                    "rationale": "values are reported in thousands; do not multiply by 1000",
                    "raw": {"verifier": {"passed": 3, "total": 5}},
                    "evidenceId": "verifier-1",
                },
                timeout=120,
            )
            after_feedback = ops(client)
            phases.append(("task 1: feedback.submit (reward + learning chain)", diff(after_feedback, after_turns)))
            run_task(client, session, "new task: total the 13F holdings in q2.xml per issuer", args.steps, 10_000)
            client.call("session.close", {"sessionId": session}, timeout=120)
            after_close = ops(client)
            phases.append(
                ("task 2: new-task turn + session.close (routing, reward, chain)", diff(after_close, after_feedback))
            )
    print(f"memos-bridge LLM cost per task ({args.steps}-step tasks, stand-in host model answering every prompt)")
    total = 0
    for title, counts in phases:
        n = sum(counts.values())
        total += n
        detail = ", ".join(f"{op} {c}" for op, c in counts.items()) or "none"
        print(f"  {title}: {n} calls ({detail})")
    print(f"  total for two tasks: {total} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
