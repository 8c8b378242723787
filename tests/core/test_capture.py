"""Capture: steps, normalisation, summaries, tags, error signatures, idempotent step keys."""

from __future__ import annotations

from memos_bridge.config import CaptureSettings
from memos_bridge.contract.dto import ToolCallDTO, TurnResultDTO
from memos_bridge.core.capture import (
    extract_error_signatures,
    extract_steps,
    normalise_error_message,
    tool_call_failed,
)
from memos_bridge.rules.text import clamp_head_tail

SETTINGS = CaptureSettings()


def _turn(**kw: object) -> TurnResultDTO:
    base: dict[str, object] = {"agent": "t", "sessionId": "se_1", "episodeId": "ep_1", "ts": 1000}
    base.update(kw)
    return TurnResultDTO.model_validate(base)


def test_each_tool_call_and_the_reply_are_steps_sharing_the_turn() -> None:
    turn = _turn(
        agentText="Done: totals written to holdings.csv.",
        toolCalls=[
            {
                "name": "bash",
                "input": {"cmd": "python parse.py"},
                "output": "KeyError: 'nameOfIssuer'",
                "errorCode": "KeyError",
            },
            {"name": "read_file", "input": {"path": "parse.py"}, "output": "def main(): ..."},
        ],
    )
    steps = extract_steps(turn, "total the 13F holdings", 1000, SETTINGS)
    assert [s.kind for s in steps] == ["tool", "tool", "reply"]
    assert [s.index for s in steps] == [0, 1, 2]
    assert all(s.user_text == "total the 13F holdings" for s in steps)
    assert steps[0].failed and not steps[1].failed
    assert steps[0].tool_calls[0]["name"] == "bash"
    assert "failed" in steps[0].summary and "KeyError" in steps[0].summary
    assert steps[2].summary.startswith("total the 13F holdings → Done")
    assert "bash" in steps[0].tags and "error" in steps[0].tags
    assert "read_file" in steps[1].tags


def test_turn_without_reply_or_tools_is_a_note_and_empty_turn_has_no_steps() -> None:
    steps = extract_steps(_turn(), "remember that I prefer tabs", 1000, SETTINGS)
    assert [s.kind for s in steps] == ["note"]
    assert extract_steps(_turn(), "", 1000, SETTINGS) == []


def test_step_keys_are_stable_for_identical_retries_and_differ_otherwise() -> None:
    turn = _turn(agentText="ok", toolCalls=[{"name": "bash", "input": "ls", "output": "a b"}])
    first = [s.key for s in extract_steps(turn, "list files", 5, SETTINGS)]
    retry = [s.key for s in extract_steps(turn.model_copy(update={"ts": 9999}), "list files", 5, SETTINGS)]
    other_turn = [s.key for s in extract_steps(turn, "list files", 6, SETTINGS)]
    assert first == retry
    assert set(first).isdisjoint(other_turn)
    assert len(set(first)) == 2


def test_long_texts_and_tool_outputs_are_clamped_head_and_tail() -> None:
    output = "HEAD " + "x" * 10_000 + " TAIL-ERROR"
    turn = _turn(agentText="y" * 9000, toolCalls=[{"name": "bash", "input": "run", "output": output}])
    steps = extract_steps(turn, "run it", 1, SETTINGS)
    stored = steps[0].tool_calls[0]["output"]
    assert len(stored) <= SETTINGS.max_tool_output_chars
    assert stored.startswith("HEAD") and stored.endswith("TAIL-ERROR") and "truncated" in stored
    assert len(steps[1].agent_text) <= SETTINGS.max_text_chars


def test_clamp_head_tail_respects_limit_exactly() -> None:
    for limit in (50, 100, 1000):
        clamped = clamp_head_tail("a" * 5000, limit)
        assert len(clamped) <= limit
    assert clamp_head_tail("short", 10) == "short"


def test_failure_detection_from_outputs() -> None:
    assert tool_call_failed(ToolCallDTO(name="x", output={"error": "boom"}))
    assert tool_call_failed(ToolCallDTO(name="x", output="Error: file missing"))
    assert tool_call_failed(ToolCallDTO(name="x", output="process exited with code 2"))
    assert tool_call_failed(ToolCallDTO(name="x", output={"exit_code": 1}))
    assert not tool_call_failed(ToolCallDTO(name="x", output="exit code 0, all good"))
    assert not tool_call_failed(ToolCallDTO(name="x", output="3 errors fixed"))
    assert tool_call_failed(ToolCallDTO(name="x", output="fine", success=False))
    assert not tool_call_failed(ToolCallDTO(name="x", output="Error: expected", success=True))


def test_error_signatures_are_structural_and_normalised() -> None:
    texts = [
        "Traceback (most recent call last):\n  File \"/srv/app/parse.py\", line 12\nKeyError: 'nameOfIssuer'",
        "npm ERR! code ERESOLVE",
        "connect ECONNREFUSED 127.0.0.1:5432",
        "HTTP 404 Not Found",
        "error[E0382]: borrow of moved value",
        "command exited with code 137",
        "ERR_MODULE_NOT_FOUND while loading",
    ]
    sigs = extract_error_signatures(texts, limit=20)
    assert "KeyError: <str>" in sigs
    assert "npm:ERESOLVE" in sigs
    assert "ECONNREFUSED" in sigs
    assert "HTTP_404" in sigs
    assert "E0382" in sigs
    assert "EXIT_137" in sigs
    assert "ERR_MODULE_NOT_FOUND" in sigs
    assert normalise_error_message("cannot open /tmp/a/b.txt at 0xdeadbeef line 42") == (
        "cannot open <path> at <hex> line <n>"
    )


def test_same_failure_with_different_details_has_the_same_signature() -> None:
    a = extract_error_signatures(["FileNotFoundError: [Errno 2] No such file: '/a/b/c.csv'"], 5)
    b = extract_error_signatures(["FileNotFoundError: [Errno 2] No such file: '/x/y/z.csv'"], 5)
    assert a == b and a


def test_upper_snake_constants_outside_error_context_are_not_signatures() -> None:
    steps = extract_steps(_turn(agentText="Set MAX_RETRY_COUNT to 3 in the config."), "configure", 1, SETTINGS)
    assert steps[0].error_signatures == []


def test_embed_texts_split_intent_and_action() -> None:
    turn = _turn(agentText="Use the namespace", toolCalls=[{"name": "bash", "input": "grep ns", "output": "ok"}])
    tool, reply = extract_steps(turn, "why does parsing fail", 1, SETTINGS)
    assert "why does parsing fail" in tool.summary_embed_text()
    assert "bash(" in tool.action_embed_text()
    assert reply.action_embed_text().startswith("Use the namespace")


def test_one_step_vector_embeds_the_summary_for_actions_and_keeps_a_said_lines_two_views() -> None:
    turn = _turn(agentText="Use the namespace", toolCalls=[{"name": "bash", "input": "grep ns", "output": "ok"}])
    tool, reply = extract_steps(turn, "why does parsing fail", 1, SETTINGS)
    assert tool.embed_texts("one") == (tool.summary, tool.summary)
    assert reply.embed_texts("one") == (reply.summary, reply.summary)
    assert tool.embed_texts("two") == (tool.summary_embed_text(), tool.action_embed_text())
    said = "Caroline: " + "I went to the LGBTQ support group yesterday and it was so powerful, " * 3
    (note,) = extract_steps(_turn(), said, 1, SETTINGS)
    summary, words = note.embed_texts("one")
    assert summary == note.summary and words == note.action_embed_text() and len(words) > len(summary)
