"""Reward math: skip gate, task summary, R_human, feedback aggregation, α, back-propagation, priority, outcome."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memos_bridge.core.reward import (
    ALPHA_USABLE_FLOOR,
    GAMMA,
    SUMMARY_MAX_CHARS,
    AxisScores,
    DigestTurn,
    EpisodeDigest,
    FeedbackSignal,
    HumanScore,
    ToolUse,
    VerifierResult,
    backpropagate,
    build_task_summary,
    classify_outcome,
    feedback_reward,
    heuristic_alpha,
    heuristic_reward,
    latest_verifier,
    needs_llm_alpha,
    priority,
    priority_at,
    r_human_from_axes,
    reply_admits_failure,
    resolve_alpha,
    score_episode,
    score_human,
    skip_gate,
    usable_alpha,
    verifier_from_raw,
    verifier_reward,
)

# --------------------------------------------------------------------------------------------------------
# Back-propagation
# --------------------------------------------------------------------------------------------------------


def test_backprop_hand_computed_four_step_example() -> None:
    # R = 0.8, γ = 0.9, α = [0.0, 0.5, 0.3, 0.8]; α_3 = 0.3 < 0.4 is unusable → 0; α_4 is irrelevant.
    #   V_4 = R                                   = 0.8
    #   V_3 = 0·0.8 + (1−0)·0.9·0.8               = 0.72
    #   V_2 = 0.5·0.8 + (1−0.5)·0.9·0.72 = 0.4 + 0.324 = 0.724
    #   V_1 = 0·0.8 + (1−0)·0.9·0.724             = 0.6516
    values = backpropagate([0.0, 0.5, 0.3, 0.8], 0.8)
    assert values == pytest.approx([0.6516, 0.724, 0.72, 0.8])


def test_backprop_negative_reward_and_full_alpha() -> None:
    # α = 1 takes R directly, whatever follows; R = −0.5.
    #   V_3 = −0.5; V_2 = 1·(−0.5) = −0.5; V_1 = 0.6·(−0.5) + 0.4·0.9·(−0.5) = −0.3 − 0.18 = −0.48
    assert backpropagate([0.6, 1.0, 0.0], -0.5) == pytest.approx([-0.48, -0.5, -0.5])


def test_backprop_edge_cases() -> None:
    assert backpropagate([], 1.0) == []
    assert backpropagate([0.0], 0.7) == [0.7]  # a single step takes R
    # γ = 0 and α = 0: nothing flows back
    assert backpropagate([0.0, 0.0, 0.0], 1.0, gamma=0.0) == [0.0, 0.0, 1.0]
    # γ = 1 and α = 0: R flows back undiminished
    assert backpropagate([0.0, 0.0, 0.0], 1.0, gamma=1.0) == [1.0, 1.0, 1.0]
    # out-of-range inputs are clamped: R to [−1, 1], γ to [0, 1], α to [0, 1]
    assert backpropagate([5.0, 0.0], 3.0, gamma=2.0) == [1.0, 1.0]
    assert backpropagate([-1.0, 0.0], -3.0) == pytest.approx([-0.9, -1.0])
    # NaN reward counts as 0
    assert backpropagate([0.5, 0.5], float("nan")) == [0.0, 0.0]


def test_alpha_below_floor_counts_as_zero_in_backprop_unless_disabled() -> None:
    # α = 0.39 → 0: V_1 = 0.9·1 = 0.9.  α = 0.4 is usable: V_1 = 0.4 + 0.6·0.9 = 0.94.
    assert backpropagate([0.39, 0.0], 1.0) == pytest.approx([0.9, 1.0])
    assert backpropagate([0.4, 0.0], 1.0) == pytest.approx([0.94, 1.0])
    # alpha_floor=0 keeps raw α: 0.39 + 0.61·0.9 = 0.939
    assert backpropagate([0.39, 0.0], 1.0, alpha_floor=0.0) == pytest.approx([0.939, 1.0])


@given(
    alphas=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    reward=st.floats(-1.0, 1.0),
    gamma=st.floats(0.0, 1.0),
)
def test_backprop_values_are_bounded_by_reward_and_share_its_sign(
    alphas: list[float], reward: float, gamma: float
) -> None:
    values = backpropagate(alphas, reward, gamma=gamma)
    assert len(values) == len(alphas)
    assert values[-1] == reward
    for value in values:
        assert abs(value) <= abs(reward) + 1e-12
        assert value * reward >= 0.0


@given(alphas=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=20), reward=st.floats(0.01, 1.0))
def test_backprop_with_zero_alpha_is_pure_discounting(alphas: list[float], reward: float) -> None:
    values = backpropagate([0.0] * len(alphas), reward)
    for t, value in enumerate(values):
        assert value == pytest.approx(reward * GAMMA ** (len(values) - 1 - t))


# --------------------------------------------------------------------------------------------------------
# Priority
# --------------------------------------------------------------------------------------------------------


def test_priority_decays_by_half_every_thirty_days() -> None:
    assert priority(0.8, 0) == pytest.approx(0.8)
    assert priority(0.8, 30) == pytest.approx(0.4)
    assert priority(0.8, 60) == pytest.approx(0.2)
    assert priority(0.8, 15) == pytest.approx(0.8 / math.sqrt(2))


def test_priority_edges() -> None:
    assert priority(-0.5, 0) == 0.0  # negative value: priority 0 (the row is kept, never deleted)
    assert priority(0.5, -10) == pytest.approx(0.5)  # a clock skew does not boost
    assert priority(0.5, 30, half_life_days=0) == pytest.approx(0.5)  # decay disabled
    assert priority(0.5, 10, half_life_days=10) == pytest.approx(0.25)
    assert priority(float("nan"), 3) == 0.0


def test_priority_at_uses_epoch_milliseconds() -> None:
    day = 86_400_000
    assert priority_at(1.0, trace_ts_ms=0, now_ms=30 * day) == pytest.approx(0.5)
    assert priority_at(1.0, trace_ts_ms=5 * day, now_ms=5 * day) == pytest.approx(1.0)


@given(value=st.floats(-2, 2), a=st.floats(0, 1000), b=st.floats(0, 1000))
def test_priority_is_non_negative_and_monotone_in_age(value: float, a: float, b: float) -> None:
    young, old = sorted((a, b))
    assert 0.0 <= priority(value, old) <= priority(value, young) <= max(value, 0.0)


# --------------------------------------------------------------------------------------------------------
# Skip gate
# --------------------------------------------------------------------------------------------------------


def _digest(*turns: DigestTurn) -> EpisodeDigest:
    return EpisodeDigest(turns=turns)


SKIP_CASES: list[tuple[str, EpisodeDigest, bool, str]] = [
    ("no turns", _digest(), True, "no_user_turns"),
    ("blank user", _digest(DigestTurn("   ", "hello")), True, "no_user_turns"),
    ("unanswered", _digest(DigestTurn("please parse the holdings file and total it")), True, "no_agent_response"),
    ("greeting", _digest(DigestTurn("hi", "Hello! How can I help?")), True, "too_short"),
    ("short zh", _digest(DigestTurn("你好", "你好！")), True, "too_short"),
    (
        "chitchat only, long replies",
        _digest(
            DigestTurn("hi", "Hello! I'm your assistant and I can help with code, writing and analysis today."),
            DigestTurn("thanks!", "You're welcome — let me know whenever you need anything else at all."),
        ),
        True,
        "trivial_user_text",
    ),
    (
        "repetitive",
        _digest(
            *[DigestTurn("what is the status of the build", "It is still running, please wait a bit.")] * 4,
        ),
        True,
        "repetitive_user_text",
    ),
    (
        "real task",
        _digest(
            DigestTurn(
                "Write a function that totals 13F holdings per issuer",
                "Here is total_by_issuer() using csv.DictReader.",
            )
        ),
        False,
        "scorable",
    ),
    (
        "cjk needs half the chars",
        _digest(DigestTurn("帮我把这个 CSV 文件按发行人汇总一下", "好的，已按发行人汇总，结果写入 totals.csv。")),
        False,
        "scorable",
    ),
    (
        "short but did tool work",
        _digest(DigestTurn("test", "Done.", tools=[ToolUse("bash"), ToolUse("bash", failed=True)])),
        False,
        "scorable",
    ),
    (
        "tool-only turn counts as an answer",
        _digest(DigestTurn("run the test suite", "", tools=[ToolUse("pytest")])),
        False,
        "scorable",
    ),
]


@pytest.mark.parametrize(("name", "digest", "skip", "reason"), SKIP_CASES, ids=[c[0] for c in SKIP_CASES])
def test_skip_gate(name: str, digest: EpisodeDigest, skip: bool, reason: str) -> None:
    assert skip_gate(digest) == (skip, reason)


def test_skip_gate_reference_tool_heavy_rule_is_opt_in() -> None:
    digest = _digest(DigestTurn("deploy", "ok", tools=[ToolUse("kubectl")] * 5))
    assert skip_gate(digest) == (False, "scorable")
    assert skip_gate(digest, tool_heavy_ratio=0.7) == (True, "tool_heavy_without_reply")
    chatty = _digest(DigestTurn("deploy", "Deployed: " + "x" * 100, tools=[ToolUse("kubectl")] * 5))
    assert skip_gate(chatty, tool_heavy_ratio=0.7).skip is False


def test_skip_gate_thresholds_are_parameters() -> None:
    digest = _digest(DigestTurn("sum these numbers please", "The sum is 42."))
    assert skip_gate(digest).skip  # 38 chars < 80 (no CJK)
    assert not skip_gate(digest, min_content_chars=10).skip
    assert skip_gate(digest, min_content_chars=10, min_exchanges=2) == (True, "no_agent_response")


def test_skip_decision_unpacks_like_a_tuple() -> None:
    skip, reason = skip_gate(_digest())
    assert skip is True and reason == "no_user_turns"


# --------------------------------------------------------------------------------------------------------
# Task summary
# --------------------------------------------------------------------------------------------------------


def test_task_summary_lists_ask_tools_errors_and_reply() -> None:
    digest = EpisodeDigest(
        turns=[
            DigestTurn(
                "Total the 13F holdings per issuer",
                "",
                tools=[
                    ToolUse("bash", failed=True, error="KeyError: 'nameOfIssuer'"),
                    ToolUse("read_file"),
                    ToolUse("bash"),
                    ToolUse("bash"),
                ],
            ),
            DigestTurn("now sort descending", "Done: totals sorted descending in totals.csv."),
        ],
        host_context="Hermes CLI session",
    )
    summary = build_task_summary(digest)
    assert summary.splitlines()[0] == "HOST CONTEXT: Hermes CLI session"
    assert "TASK: Total the 13F holdings per issuer" in summary
    assert "- now sort descending" in summary
    assert "AGENT STEPS (4 tool calls): bash ✗ → read_file → bash ×2" in summary
    assert "ERRORS: KeyError: 'nameOfIssuer' (resolved later)" in summary
    assert "FINAL REPLY: Done: totals sorted descending" in summary
    assert summary.rstrip().endswith("LATEST ASK: now sort descending")
    assert build_task_summary(digest) == summary  # deterministic


def test_task_summary_marks_unresolved_errors_and_failure_admissions() -> None:
    digest = _digest(
        DigestTurn(
            "install the package",
            "I couldn't install it: the index is unreachable.",
            tools=[ToolUse("pip", failed=True), ToolUse("pip", failed=True)],
        )
    )
    summary = build_task_summary(digest)
    assert "pip ✗ ×2" in summary
    assert "ERRORS: pip failed (unresolved: the last tool call failed)" in summary
    assert "OUTCOME WORDS" in summary
    assert "LATER ASKS" not in summary and "LATEST ASK" not in summary


def test_task_summary_is_bounded() -> None:
    turns = [DigestTurn(f"ask {i} " + "word " * 80, "reply " * 100, tools=[ToolUse(f"tool{i}")]) for i in range(60)]
    summary = build_task_summary(EpisodeDigest(turns=turns))
    assert len(summary) <= SUMMARY_MAX_CHARS
    assert summary.startswith("TASK: ask 0")
    assert "LATEST ASK: ask 59" in summary  # the tail is kept
    assert len(build_task_summary(EpisodeDigest(turns=turns), max_chars=300)) <= 300
    assert build_task_summary(EpisodeDigest()).startswith("TASK: (no user text)")


def test_reply_admits_failure() -> None:
    assert reply_admits_failure("Sorry, I was unable to reach the server.")
    assert reply_admits_failure("我无法访问这个文件")
    assert not reply_admits_failure("Fixed the failing test; all 12 pass now.")


# --------------------------------------------------------------------------------------------------------
# R_human
# --------------------------------------------------------------------------------------------------------


def test_r_human_formula_and_clamping() -> None:
    assert r_human_from_axes(AxisScores(1.0, 1.0, 1.0)) == pytest.approx(1.0)
    assert r_human_from_axes(AxisScores(-1.0, -1.0, -1.0)) == pytest.approx(-1.0)
    # 0.45·0.8 + 0.30·0.5 + 0.25·(−0.2) = 0.36 + 0.15 − 0.05 = 0.46
    assert r_human_from_axes(AxisScores(0.8, 0.5, -0.2)) == pytest.approx(0.46)
    # axes are clamped first: goal 3 → 1, process −7 → −1, satisfaction 0.4: 0.45 − 0.30 + 0.10 = 0.25
    assert r_human_from_axes(AxisScores(3.0, -7.0, 0.4)) == pytest.approx(0.25)
    assert r_human_from_axes(AxisScores(float("nan"), 1.0, 1.0)) == pytest.approx(0.55)


def test_axis_scores_from_llm_json() -> None:
    parsed = AxisScores.from_mapping({"goal_achievement": 0.9, "process_quality": "0.5", "user_satisfaction": -1})
    assert parsed == AxisScores(0.9, 0.5, -1.0)
    assert AxisScores.from_mapping({"goal": 1, "process": 0, "satisfaction": 0}) == AxisScores(1.0, 0.0, 0.0)
    assert AxisScores.from_mapping({"goal_achievement": 0.9, "process_quality": 0.5}) is None
    assert AxisScores.from_mapping({"goal": "high", "process": 0, "satisfaction": 0}) is None
    assert AxisScores.from_mapping({"goal": True, "process": 0, "satisfaction": 0}) is None


@given(g=st.floats(allow_nan=True), p=st.floats(allow_nan=True), s=st.floats(allow_nan=True))
def test_r_human_is_always_in_range(g: float, p: float, s: float) -> None:
    assert -1.0 <= r_human_from_axes(AxisScores(g, p, s)) <= 1.0


def test_single_feedback_is_polarity_times_magnitude() -> None:
    assert feedback_reward([FeedbackSignal("positive", 0.6)]) == pytest.approx(0.6)
    assert feedback_reward([FeedbackSignal("negative", 1.0)]) == pytest.approx(-1.0)
    assert feedback_reward([FeedbackSignal("neutral", 0.6)]) is None  # no direction
    assert feedback_reward([FeedbackSignal("positive", 0.0)]) is None
    assert feedback_reward([]) is None


def test_feedback_aggregation_weights_magnitude_and_recency() -> None:
    # "wrong" (−1, m=1) then "perfect now" (+1, m=1): weights 0.5 and 1 → (−0.5 + 1) / 1.5 = 1/3
    items = [FeedbackSignal("negative", 1.0, ts=1), FeedbackSignal("positive", 1.0, ts=2)]
    assert feedback_reward(items) == pytest.approx(1 / 3)
    # order comes from ts, not from the list
    assert feedback_reward(list(reversed(items))) == pytest.approx(1 / 3)
    # a weak late item counts less: weights 0.5·1 and 1·0.3 → (−0.5 + 0.3·0.3) / 0.8 = −0.5125
    mixed = [FeedbackSignal("negative", 1.0, ts=1), FeedbackSignal("positive", 0.3, ts=2)]
    assert feedback_reward(mixed) == pytest.approx(-0.5125)
    # neutral items are left out entirely
    assert feedback_reward([*items, FeedbackSignal("neutral", 1.0, ts=3)]) == pytest.approx(1 / 3)


def test_implicit_feedback_only_without_explicit_and_at_half_weight() -> None:
    implicit = FeedbackSignal("positive", 0.8, channel="implicit", ts=5)
    assert feedback_reward([implicit]) == pytest.approx(0.4)
    assert feedback_reward([implicit, FeedbackSignal("negative", 0.5, ts=1)]) == pytest.approx(-0.5)


def test_latest_verifier_dominates_feedback() -> None:
    items = [
        FeedbackSignal("positive", 1.0, ts=1),
        FeedbackSignal("negative", 1.0, ts=2, verifier=VerifierResult(passed=3, total=4)),
        FeedbackSignal("positive", 1.0, ts=3),
    ]
    # partial credit 0.75 → −1 + 1.4·0.75 = 0.05
    assert feedback_reward(items) == pytest.approx(0.05)
    newer = [*items, FeedbackSignal("positive", 1.0, ts=4, verifier=VerifierResult(passed=4, total=4))]
    assert feedback_reward(newer) == pytest.approx(1.0)
    assert latest_verifier(newer) == VerifierResult(passed=4, total=4)


def test_verifier_reward_never_turns_partial_credit_into_success() -> None:
    assert verifier_reward(VerifierResult(passed=10, total=10)) == 1.0
    assert verifier_reward(VerifierResult(passed=0, total=10)) == -1.0
    assert verifier_reward(VerifierResult(passed=5, total=10)) == pytest.approx(-0.3)
    assert verifier_reward(VerifierResult(passed=99, total=100)) < 0.4
    assert verifier_reward(VerifierResult(score=1.0)) == 1.0
    assert verifier_reward(VerifierResult(score=0.999)) < 0.5
    assert verifier_reward(VerifierResult(score=-0.5)) == -1.0  # negative score: no credit
    assert verifier_reward(VerifierResult()) is None
    assert verifier_reward(VerifierResult(passed=1, total=0)) is None


def test_verifier_from_raw_payloads() -> None:
    assert verifier_from_raw({"verifier": {"passed": 3, "total": 5}}) == VerifierResult(passed=3, total=5)
    assert verifier_from_raw({"passed": 5, "total": 5.0}) == VerifierResult(passed=5, total=5)
    assert verifier_from_raw({"reward": 1}) == VerifierResult(score=1.0)
    assert verifier_from_raw({"verifier": {"score": 0.5}}) == VerifierResult(score=0.5)
    assert verifier_from_raw({"text": "great"}) is None
    assert verifier_from_raw({"passed": True, "total": 1}) is None
    assert verifier_from_raw("passed") is None


def test_heuristic_reward_is_conservative() -> None:
    ok = _digest(DigestTurn("run tests", "All green.", tools=[ToolUse("pytest", failed=True), ToolUse("pytest")]))
    assert heuristic_reward(ok) == pytest.approx(0.1)
    broken = _digest(DigestTurn("run tests", "Here is the output.", tools=[ToolUse("pytest", failed=True)]))
    assert heuristic_reward(broken) == pytest.approx(-0.2)
    admitted = _digest(DigestTurn("deploy it", "I couldn't deploy: no credentials.", tools=[ToolUse("kubectl")]))
    assert heuristic_reward(admitted) == pytest.approx(-0.1)
    both = _digest(DigestTurn("deploy it", "Unable to deploy.", tools=[ToolUse("kubectl", failed=True)]))
    assert heuristic_reward(both) == pytest.approx(-0.3)
    assert heuristic_reward(_digest(DigestTurn("explain monads", "A monad is …"))) == 0.0


def test_score_human_prefers_verifier_then_llm_then_feedback_then_heuristic() -> None:
    digest = _digest(DigestTurn("run tests", "ok", tools=[ToolUse("pytest")]))
    axes = AxisScores(1.0, 1.0, 1.0)
    fb = [FeedbackSignal("negative", 0.5)]
    verified = [*fb, FeedbackSignal("neutral", 1.0, verifier=VerifierResult(passed=0, total=3))]
    assert score_human(axes=axes, feedback=verified, digest=digest) == HumanScore(
        -1.0, "verifier", "verifier_partial_credit"
    )
    by_llm = score_human(axes=axes, feedback=fb, digest=digest)
    assert (by_llm.r_human, by_llm.source, by_llm.axes) == (pytest.approx(1.0), "llm", axes)
    assert score_human(feedback=fb, digest=digest).source == "feedback"
    assert score_human(feedback=fb, digest=digest).r_human == pytest.approx(-0.5)
    assert score_human(digest=digest) == HumanScore(0.1, "heuristic", "transcript_heuristic")
    assert score_human() == HumanScore(0.0, "none", "no_evidence")
    full = [FeedbackSignal("positive", 1.0, verifier=VerifierResult(score=1.0))]
    assert score_human(feedback=full).reason == "verifier_full_credit"


# --------------------------------------------------------------------------------------------------------
# Reflection weights α
# --------------------------------------------------------------------------------------------------------

INSIGHTFUL_EN = (
    "The parse failed because the 13F file uses nameOfIssuer, not issuer; next time I will read the header "
    "with csv.DictReader first."
)
INSIGHTFUL_ZH = "我发现报错是因为列名是 nameOfIssuer 而不是 issuer，下次应该先读表头再汇总。"


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [
        (None, 0.0, 0.0),
        ("", 0.0, 0.0),
        ("ran it", 0.2, 0.2),  # too thin: unusable
        ("I ran the command to list the files in the folder", 0.5, 0.5),  # exists, no insight: no-LLM value
        (INSIGHTFUL_EN, 0.7, 0.8),
        (INSIGHTFUL_ZH, 0.7, 0.8),
        ("because " * 200, 0.6, 0.8),  # never above the heuristic cap
    ],
)
def test_heuristic_alpha(text: str | None, low: float, high: float) -> None:
    assert low <= heuristic_alpha(text) <= high


def test_usable_alpha_rule() -> None:
    assert usable_alpha(0.39) == 0.0
    assert usable_alpha(ALPHA_USABLE_FLOOR) == ALPHA_USABLE_FLOOR
    assert usable_alpha(1.7) == 1.0
    assert usable_alpha(-0.2) == 0.0
    assert usable_alpha(0.3, floor=0.2) == 0.3


def test_resolve_alpha_priority() -> None:
    # adapter wins, even over an insightful text, and still goes through the usable rule
    assert resolve_alpha(adapter_alpha=0.9, reflection=INSIGHTFUL_EN, llm_alpha=0.1) == (0.9, "adapter", True)
    assert resolve_alpha(adapter_alpha=0.3, reflection=INSIGHTFUL_EN).alpha == 0.0
    # usable heuristic beats the LLM (which then need not be asked)
    heuristic = resolve_alpha(reflection=INSIGHTFUL_EN, llm_alpha=1.0)
    assert heuristic.source == "heuristic" and heuristic.usable and heuristic.alpha >= 0.7
    assert not needs_llm_alpha(None, INSIGHTFUL_EN)
    # no usable text: the LLM's score is used; usable=false forces 0
    assert needs_llm_alpha(None, "ran it") and needs_llm_alpha(None, None)
    assert resolve_alpha(reflection="ran it", llm_alpha=0.7) == (0.7, "llm", True)
    assert resolve_alpha(reflection=None, llm_alpha=0.9, llm_usable=False) == (0.0, "llm", False)
    assert resolve_alpha(llm_alpha=0.35) == (0.0, "llm", False)
    # nothing at all
    assert resolve_alpha() == (0.0, "none", False)
    assert resolve_alpha(reflection="ran it") == (0.0, "heuristic", False)
    assert not needs_llm_alpha(0.0, None)  # the adapter said 0: respected


# --------------------------------------------------------------------------------------------------------
# Outcome
# --------------------------------------------------------------------------------------------------------

OUTCOME_CASES: list[tuple[float | None, VerifierResult | None, str, str]] = [
    (None, None, "unknown", "no_reward"),
    (float("nan"), None, "unknown", "no_reward"),
    (0.9, None, "success", "reward_high"),
    (0.5, None, "success", "reward_high"),
    (0.49, None, "partial", "reward_partial"),
    (0.15, None, "partial", "reward_partial"),
    (0.1, None, "unknown", "reward_inconclusive"),
    (-0.1, None, "unknown", "reward_inconclusive"),
    (-0.15, None, "failure", "reward_low"),
    (-0.9, None, "failure", "reward_low"),
    # objective evidence first
    (-0.9, VerifierResult(passed=5, total=5), "success", "verifier_full_credit"),
    (1.0, VerifierResult(passed=4, total=5), "partial", "verifier_partial_credit"),
    (1.0, VerifierResult(score=0.95), "partial", "verifier_partial_credit"),
    (1.0, VerifierResult(passed=0, total=5), "failure", "verifier_no_credit"),
    (0.8, VerifierResult(score=1.0), "success", "verifier_full_credit"),
    (0.8, VerifierResult(), "success", "reward_high"),  # a verifier without numbers is no evidence
]


@pytest.mark.parametrize(("r_task", "verifier", "outcome", "reason"), OUTCOME_CASES)
def test_classify_outcome(r_task: float | None, verifier: VerifierResult | None, outcome: str, reason: str) -> None:
    assert classify_outcome(r_task, verifier) == (outcome, reason)


# --------------------------------------------------------------------------------------------------------
# Whole episode
# --------------------------------------------------------------------------------------------------------


def test_score_episode_combines_backprop_priority_and_outcome() -> None:
    human = HumanScore(0.8, "llm", "llm_axes")
    result = score_episode(human, [0.0, 0.5, 0.3, 0.8], step_ages_days=[30, 30, 0, 0])
    assert result.r_task == 0.8
    assert result.values == pytest.approx((0.6516, 0.724, 0.72, 0.8))
    assert result.priorities == pytest.approx((0.3258, 0.362, 0.72, 0.8))
    assert result.alphas == (0.0, 0.5, 0.0, 0.8)
    assert (result.outcome, result.outcome_reason) == ("success", "reward_high")


def test_score_episode_with_partial_verifier_and_no_evidence() -> None:
    partial = score_episode(HumanScore(0.9, "llm"), [0.5], verifier=VerifierResult(passed=2, total=3))
    assert partial.outcome == "partial"
    nothing = score_episode(HumanScore(0.0, "none", "no_evidence"), [0.5, 0.5])
    assert nothing.values == (0.0, 0.0) and nothing.priorities == (0.0, 0.0)
    assert nothing.outcome == "unknown"
    with pytest.raises(ValueError, match="step_ages_days"):
        score_episode(HumanScore(0.5, "llm"), [0.5, 0.5], step_ages_days=[1.0])
