"""Lessons in the feedback's own words, through the JSON-RPC boundary with the real service spawned and no LLM.

A lesson taught in one language is recalled for a task in another that works on the same subject (a column, a
file, a unit), and not for a task about something else; the values that were true of the judged attempt only
never reach the next task's injected text, but stay visible on the experience's lesson record; the same
convention taught twice in other words strengthens one experience; the compact rendering puts the lesson first
within its budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.client import ServiceClient

AGENT = "lessons"
NO_LLM = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LLM__PROVIDER": "none"}
HOUR = 3_600_000


def attempt(client: ServiceClient, task: str, ts: int, answer: str, read: str | None = None) -> tuple[str, str]:
    """One task in a session of its own (its agent reads `read` first, when given): returns (episodeId, the text
    turn.start injected)."""
    session = client.call("session.open", {"agent": AGENT})["sessionId"]
    started = client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": task, "ts": ts}, timeout=60)
    episode: str = started["query"]["episodeId"]
    client.call(
        "turn.end",
        {
            "agent": AGENT,
            "sessionId": session,
            "episodeId": episode,
            "agentText": f"Done: wrote result.json with {answer}.",
            "toolCalls": [
                *(
                    [{"name": "read_file", "input": {"path": read}, "output": "ts,amount\n1700000000000,1250"}]
                    if read
                    else []
                ),
                {"name": "write_file", "input": {"path": "result.json", "content": answer}, "output": "ok"},
            ],
            "ts": ts + 60_000,
        },
        timeout=60,
    )
    return episode, str(started.get("injectedContext") or "")


def recall(client: ServiceClient, task: str, ts: int, **params: Any) -> str:
    session = client.call("session.open", {"agent": AGENT})["sessionId"]
    started = client.call(
        "turn.start", {"agent": AGENT, "sessionId": session, "userText": task, "ts": ts, **params}, timeout=60
    )
    return str(started.get("injectedContext") or "")


def correct(client: ServiceClient, episode: str, rationale: str, ts: int) -> None:
    """A user's correction of an episode, at full magnitude."""
    client.call(
        "feedback.submit",
        {"episodeId": episode, "polarity": "negative", "magnitude": 1.0, "rationale": rationale, "ts": ts},
        timeout=90,
    )


def lessons(client: ServiceClient) -> list[dict[str, Any]]:
    listed = client.call("memory.list_policies", {"limit": 100})["policies"]
    return [p for p in listed if p["inducedBy"] == "feedback.experience"]


def test_a_chinese_lesson_is_recalled_for_an_english_task_on_the_same_column_and_not_for_another(
    tmp_path: Path,
) -> None:
    task = "Sum the amount_cents column of orders_march.csv and write the total in dollars to result.json"
    with ServiceClient.spawn(tmp_path / "home", env=NO_LLM) as client:
        ts = 1_700_000_000_000
        episode, _ = attempt(client, task, ts, '{"total": 1873400}')
        correct(
            client,
            episode,
            "错了，你写的是 1873400，应该是 18734.00。amount_cents 字段的单位是分，要除以 100 才是美元。",
            ts + 120_000,
        )
        client.call("memory.flush", {})
        same = recall(
            client, "Average the amount_cents column of orders_april.csv per customer, in dollars", ts + 3 * HOUR
        )
        other = recall(
            client, "Count the distinct hostnames in access.log and write the count to hosts.json", ts + 6 * HOUR
        )
        (learnt,) = lessons(client)
        record = client.call("memory.get_policy", {"id": learnt["id"]})

    assert "amount_cents" in same and "100" in same, same
    assert "1873400" not in same and "18734.00" not in same, same
    assert "amount_cents" not in other and "除以" not in other, other
    lesson = record["lesson"]
    assert "amount_cents" in lesson["subject"]["identifiers"]
    assert any("100" in line for line in lesson["lines"])
    assert not any("1873400" in line for line in lesson["lines"])
    assert any("1873400" in part for part in lesson["instance"]), lesson


def test_the_same_convention_in_other_words_strengthens_one_experience(tmp_path: Path) -> None:
    first = "Convert shipment_weight in manifest_a.csv to kilograms and write the total to result.json"
    second = "Convert shipment_weight in manifest_b.csv to kilograms and write the total to result.json"
    with ServiceClient.spawn(tmp_path / "home", env=NO_LLM) as client:
        ts = 1_700_000_000_000
        episode, _ = attempt(client, first, ts, '{"total": 5512}')
        client.call(
            "feedback.submit",
            {
                "episodeId": episode,
                "polarity": "negative",
                "rationale": "Wrong: 5512 is not the answer. The shipment_weight column is in pounds; "
                "divide by 2.20462 to get kilograms.",
                "ts": ts + 120_000,
            },
            timeout=90,
        )
        episode, injected = attempt(client, second, ts + 3 * HOUR, '{"total": 9920}')
        client.call(
            "feedback.submit",
            {
                "episodeId": episode,
                "polarity": "negative",
                "rationale": "Still off — shipment_weight is recorded in pounds, "
                "so convert it (÷ 2.20462) before summing.",
                "ts": ts + 3 * HOUR + 120_000,
            },
            timeout=90,
        )
        client.call("memory.flush", {})
        learnt = lessons(client)

    assert "shipment_weight" in injected and "pounds" in injected, injected
    assert "5512" not in injected
    assert len(learnt) == 1, [p["procedure"] for p in learnt]
    assert learnt[0]["support"] >= 2


def test_compact_rendering_puts_the_lesson_first_within_its_budget(tmp_path: Path) -> None:
    task = "Report the fiscal quarter of each invoice in ledger_2024.csv to result.json"
    with ServiceClient.spawn(tmp_path / "home", env=NO_LLM) as client:
        ts = 1_700_000_000_000
        episode, _ = attempt(client, task, ts, '{"inv-1": "Q3"}')
        client.call(
            "feedback.submit",
            {
                "episodeId": episode,
                "polarity": "negative",
                "rationale": "The fiscal year starts in July, so fiscal quarters run July–September = FY Q1. "
                "Write quarters as FY24-Q1, not calendar quarters.",
                "ts": ts + 120_000,
            },
            timeout=90,
        )
        client.call("memory.flush", {})
        query = "Report the fiscal quarter of each invoice in ledger_2025.csv to result.json"
        compact = recall(client, query, ts + 3 * HOUR, render="compact")
        full = recall(client, query, ts + 6 * HOUR, render="full")

    assert 0 < len(compact) <= 800, compact
    assert "July" in compact and "FY" in compact
    body = [line for line in compact.splitlines() if line.strip() and not line.startswith("<")]
    assert "July" in body[1] or "FY" in body[1], body  # the lesson comes right after the notice
    assert "(id=" not in compact
    assert len(full) > len(compact)


HOST_LLM = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
WEIGHT_TASK = "Sum the gross_lb column of crates_may.csv in kilograms and write result.json"
WEIGHT_LESSON = "The gross_lb column is in pounds; multiply by 0.4536 to get kilograms."


def _host_rewording(procedure: str) -> Any:
    """A host model whose feedback.refine answer is `procedure` under a title of its own; every other prompt
    gets an unusable answer (that stage takes its deterministic path)."""

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        system = params["messages"][0]["content"]
        if "Turn that feedback into ONE experience" in system:
            reply = {"title": "Crate weights", "trigger": "Crate weight reports", "procedure": procedure}
            return {"text": json.dumps(reply)}
        return {"text": "{}"}

    return answer


@pytest.mark.parametrize(
    ("procedure", "accepted"),
    [
        ("1. Multiply every gross_lb value (pounds) by 0.4536 before summing kilograms.", True),
        ("1. Convert the crate weights to kilograms before summing.", False),  # lost gross_lb, pounds, 0.4536
    ],
    ids=["keeps-key-terms", "drops-key-terms"],
)
def test_a_host_llm_rewording_is_used_only_when_it_keeps_the_lessons_key_terms(
    tmp_path: Path, procedure: str, accepted: bool
) -> None:
    with ServiceClient.spawn(tmp_path / "home", env=HOST_LLM) as client:
        client.on_request("host.llm.complete", _host_rewording(procedure))
        ts = 1_700_000_000_000
        episode, _ = attempt(client, WEIGHT_TASK, ts, '{"total": 1400}')
        client.call(
            "feedback.submit",
            {"episodeId": episode, "polarity": "negative", "rationale": WEIGHT_LESSON, "ts": ts + 120_000},
            timeout=90,
        )
        client.call("memory.flush", {})
        (learnt,) = lessons(client)
        injected = recall(
            client, "Average the gross_lb column of crates_june.csv in kilograms", ts + 3 * HOUR, render="full"
        )

    assert learnt["lesson"]["lines"] == [WEIGHT_LESSON]  # the feedback's words stay the lesson either way
    if accepted:
        assert learnt["title"] == "Crate weights" and learnt["procedure"] == procedure
    else:
        assert learnt["title"] != "Crate weights" and "0.4536" in learnt["procedure"]
    assert "0.4536" in injected and "gross_lb" in injected


def test_a_clock_lesson_reaches_a_task_of_its_work_that_involves_time_and_not_one_that_involves_none(
    tmp_path: Path,
) -> None:
    """The lessons of one work come back together, but a clock rule is only for a task that involves time: a
    small model shown it on a plain count filters a day it was never asked for."""
    task = "From kiosk_orders.csv, which order was the first one of shop day 2031-05-06? Write result.json"
    with ServiceClient.spawn(tmp_path / "home", env=NO_LLM) as client:
        ts = 1_700_000_000_000
        episode, _ = attempt(client, task, ts, '{"order": "K-101"}')
        rationale = "Not quite. The kiosk clock writes UTC and the shop keeps UTC+2, so add two hours to every time."
        correct(client, episode, rationale, ts + 120_000)
        client.call("memory.flush", {})
        timed = recall(
            client,
            "From kiosk_orders.csv, how many orders came in before 09:00 shop time? Write result.json",
            ts + 3 * HOUR,
        )
        timeless = recall(
            client,
            "From kiosk_orders.csv, which kiosk took the most orders? Count every row. Write result.json",
            ts + 6 * HOUR,
        )
    assert "UTC" in timed, timed
    assert "UTC" not in timeless, timeless


def test_a_house_rule_reaches_its_other_files_and_a_look_alike_project_keeps_its_own(tmp_path: Path) -> None:
    """A rule learnt on one of a company's logs holds for its other logs, however much closer the work learnt on
    the other log is; a project whose requests are merely worded alike, on other input files, keeps its rules.
    The explain log says which gate decided each lesson."""
    explained = tmp_path / "explain.jsonl"
    env = {**NO_LLM, "MEMOS_BRIDGE_RETRIEVAL__EXPLAIN_LOG": str(explained)}
    with ServiceClient.spawn(tmp_path / "home", env=env) as client:
        ts = 1_700_000_000_000
        door, _ = attempt(
            client,
            "Ostrava Retail's door sensor log is door_log.csv. How many hours lie between its first and last entry? "
            "Write result.json",
            ts,
            '{"hours": 412.5}',
            read="door_log.csv",
        )
        correct(client, door, "The ts field counts milliseconds since 1970, not seconds; divide by 1000.", ts + 60_000)
        till, _ = attempt(
            client,
            "Ostrava Retail's till log is till_log.csv. What is the total of its amount field? Write result.json",
            ts + HOUR,
            '{"total": 18250}',
            read="till_log.csv",
        )
        correct(client, till, "The amount field is in cents, not crowns; divide it by 100.", ts + HOUR + 60_000)
        visitors, _ = attempt(
            client,
            "How many visits did the galleries record on Sunday? Write result.json",
            ts + 2 * HOUR,
            '{"visitors": 908}',
            read="door_counts.csv",
        )
        correct(client, visitors, "Each visitor crosses the beam twice, in and out: halve the counts.", ts + 2 * HOUR)
        client.call("memory.flush", {})
        house = recall(
            client,
            "How many hours lie between the earliest and the latest entry of the Ostrava till log (till_log.csv)? "
            "Write result.json",
            ts + 5 * HOUR,
        )
        clinic, _ = attempt(
            client,
            "How many visits did the clinic record on Sunday, going by clinic_visits.csv? Write result.json",
            ts + 6 * HOUR,
            '{"visits": 57}',
            read="clinic_visits.csv",
        )
        correct(client, clinic, "The check-in times are UTC and the clinic keeps UTC+10: add ten hours.", ts + 6 * HOUR)
        client.call("memory.flush", {})
        visits = recall(
            client,
            "How many visits did the clinic record on Monday, going by clinic_visits.csv? Write result.json",
            ts + 9 * HOUR,
        )
    assert "milliseconds" in house, house
    assert "UTC" in visits and "halve" not in visits and "beam" not in visits, visits
    turns = [json.loads(line) for line in explained.read_text().splitlines()]
    last = next(t for t in reversed(turns) if t["request"].startswith("How many visits did the clinic record on Mon"))
    verdicts = {c["text"].split(":")[0]: (c["verdict"], c["picked"]) for c in last["candidates"]}
    assert verdicts["The check-in times are UTC and the clinic keeps UTC+10"] == ("kept", True), verdicts
    assert verdicts["Each visitor crosses the beam twice"] == ("work", False), verdicts


def test_in_a_project_workspace_a_convention_reaches_the_projects_other_files_and_taught_again_merges(
    tmp_path: Path,
) -> None:
    """A host that names its project folder (the MCP server and the hooks do) has told the service whose lessons
    are whose: a convention learnt on one of the project's files comes back for a differently worded task on
    another, and taught again there in other words it strengthens the one experience. Profile-wide, the same two
    tasks are two works: the lesson stays with its file."""

    def run(namespace: dict[str, str] | None) -> tuple[str, list[dict[str, Any]]]:
        home = tmp_path / ("project" if namespace else "profile")
        with ServiceClient.spawn(home, env=NO_LLM) as client:
            opened = {"agent": AGENT, **({"namespace": namespace} if namespace else {})}

            def task(text: str, ts: int, answer: str, read: str) -> tuple[str, str]:
                session = client.call("session.open", opened)["sessionId"]
                started = client.call(
                    "turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts}, timeout=60
                )
                episode = started["query"]["episodeId"]
                calls = [
                    {"name": "read_file", "input": {"path": read}, "output": "id,value\nA-1,4\nA-2-V,9"},
                    {"name": "write_file", "input": {"path": "result.json", "content": answer}, "output": "ok"},
                ]
                end = {"agent": AGENT, "sessionId": session, "episodeId": episode, "toolCalls": calls}
                client.call("turn.end", {**end, "agentText": f"Wrote {answer}.", "ts": ts + 60_000}, timeout=60)
                return episode, str(started.get("injectedContext") or "")

            ts = 1_700_000_000_000
            first, _ = task(
                "How many open tickets are there in tickets.csv? Write result.json", ts, "12", "tickets.csv"
            )
            correct(
                client,
                first,
                "Rows whose code carries a -V suffix are withdrawn: drop them from every tally.",
                ts + HOUR,
            )
            client.call("memory.flush", {})
            second, injected = task(
                "Give me the number of gauges that read above the limit, from gauges.csv, in result.json",
                ts + 3 * HOUR,
                "7",
                "gauges.csv",
            )
            correct(client, second, "Rows with a -V code were withdrawn, so skip them.", ts + 4 * HOUR)
            client.call("memory.flush", {})
            reader = client.call("session.open", opened)["sessionId"]  # reads the namespace its session acts in
            listed = client.call("memory.list_policies", {"limit": 100, "sessionId": reader})
        return injected, [p for p in listed["policies"] if p["inducedBy"] == "feedback.experience"]

    project_block, project_lessons = run({"agentKind": AGENT, "profileId": "default", "workspaceId": "depot"})
    profile_block, profile_lessons = run(None)
    assert "-V" in project_block, project_block
    assert "-V" not in profile_block, profile_block
    assert len(project_lessons) == 1 and project_lessons[0]["support"] == 2, project_lessons
    assert len(profile_lessons) == 2, profile_lessons
