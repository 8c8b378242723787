"""Reward: how well did an episode go, and how much of that credit does each step deserve?

The learning loop only improves what it can score. After an episode is finalised (reference §6.4):

1. **Skip gate** — greetings, one-word tests and empty exchanges carry no lesson; scoring them would
   only add noise (and LLM cost), so they are skipped before anything else runs.
2. **Task summary** — a deterministic, bounded digest of the episode (the ask, the tools in order, the
   errors seen, the final reply) that the R_human scorer reads; deterministic so that a re-score after late
   feedback sees the same text.
3. **R_human ∈ [−1, 1]** — from the best evidence available, in this order:
   objective verifier result (tests passed / total) → LLM axis scores
   (`0.45·goal + 0.30·process + 0.25·satisfaction`) → explicit user feedback (polarity × magnitude) →
   a conservative transcript heuristic (unresolved error vs. final successful tool call) → 0.
4. **Reflection weights α** per step — how much a step's own reasoning explains the outcome. Usable iff
   α ≥ 0.4, else 0 (reference rule: a vague reflection must not claim credit).
5. **Back-propagation** — `V_T = R`, `V_t = α_t·R + (1−α_t)·γ·V_{t+1}` with γ = 0.9: a step with a strong
   reflection takes the episode's reward directly, the others inherit the discounted value of what
   followed them.
6. **Priority** — `max(V, 0)·0.5^(age_days / 30)`: retrieval prefers valuable, recent steps; negative
   steps keep priority 0 but are never deleted (they feed anti-patterns).
7. **Outcome** — success / failure / partial / unknown, objective verifier evidence first.

Note: the seed report (`002_…`) describes an older *normalised* credit assignment
(`V_t = w_t/Σw · R` with position and recovery weights); the formula above is the one issue 4 and the
reference's `backprop.ts` use, and unlike the normalised form it gives every step a value of the same
sign as R and bounded by |R|.

Everything here is pure (no I/O, no clock): callers pass ages and timestamps in.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

from memos_bridge.contract.dto import FeedbackChannel, Polarity
from memos_bridge.rules.text import CJK_CHARS, clamp_head_tail, clip, has_cjk, squash

Outcome = Literal["success", "failure", "partial", "unknown"]
HumanSource = Literal["verifier", "llm", "feedback", "heuristic", "none"]
AlphaSource = Literal["adapter", "heuristic", "llm", "none"]

# ---------------------------------------------------------------- constants (reference §6.4, §6.14)

#: Discount of downstream value per step (reference `algorithm.reward.gamma`).
GAMMA: Final = 0.9
#: Priority halves every this many days (reference `decayHalfLifeDays`).
DECAY_HALF_LIFE_DAYS: Final = 30.0
#: R_human axis weights (reference `human-scorer.ts`, §6.14).
WEIGHT_GOAL: Final = 0.45
WEIGHT_PROCESS: Final = 0.30
WEIGHT_SATISFACTION: Final = 0.25
#: α below this is "unusable" and counts as 0 (reference §6.3 / §6.14 "usable α floor").
ALPHA_USABLE_FLOOR: Final = 0.4
#: α for a reflection that exists but was not scored (reference §6.14 "no-LLM α").
NO_LLM_ALPHA: Final = 0.5
#: The text heuristic never claims a pivotal (α = 1) step; only the adapter or the LLM can.
HEURISTIC_ALPHA_MAX: Final = 0.8
#: Reflections shorter than this (words, or CJK characters / 2) are too thin to carry an insight.
MIN_REFLECTION_UNITS: Final = 5

#: Skip gate (reference `minExchangesForCompletion`, `minContentCharsForCompletion` ×2 without CJK,
#: char-weighted trivial share, repetitive user messages).
MIN_EXCHANGES: Final = 1
MIN_CONTENT_CHARS: Final = 40
NON_CJK_CHAR_FACTOR: Final = 2
TRIVIAL_SHARE: Final = 0.7
NONTRIVIAL_CHARS_PASS: Final = 30
REPETITIVE_MIN_MESSAGES: Final = 3
REPETITIVE_UNIQUE_RATIO: Final = 0.4
#: Reference `toolHeavyRatio` / `minAssistantCharsForToolHeavy`. Not applied by default (see `skip_gate`).
TOOL_HEAVY_RATIO: Final = 0.7
MIN_ASSISTANT_CHARS_TOOL_HEAVY: Final = 80

#: Task summary bound (reference `summaryMaxChars`).
SUMMARY_MAX_CHARS: Final = 2000

#: Outcome thresholds on rTask. Success ≥ 0.5 (reference §6.14 "trial pass"); failure ≤ −0.15 (seed
#: report's episode outcome rule: a mildly negative episode is already a failure, so failures are not
#: celebrated); between 0.15 and 0.5 partial; |rTask| < 0.15 is too weak a signal to call (unknown).
SUCCESS_THRESHOLD: Final = 0.5
FAILURE_THRESHOLD: Final = -0.15
PARTIAL_THRESHOLD: Final = 0.15

#: Partial verifier credit maps onto [−1, PARTIAL_CREDIT_CAP): it can never reach the success threshold.
PARTIAL_CREDIT_CAP: Final = 0.4
#: Each older feedback item weighs this factor less than the next one (the latest word counts most).
FEEDBACK_RECENCY_DECAY: Final = 0.5
#: Implicit feedback (inferred, not said) is used only without explicit feedback, at this weight.
IMPLICIT_FEEDBACK_WEIGHT: Final = 0.5
#: Transcript heuristic, used only when there is no verifier, no LLM and no feedback. Asymmetric on
#: purpose: an error left unresolved is better evidence of failure than an exit code 0 is of success.
HEURISTIC_FINAL_SUCCESS: Final = 0.1
HEURISTIC_UNRESOLVED_ERROR: Final = -0.2
HEURISTIC_REPLY_ADMITS_FAILURE: Final = -0.1

MS_PER_DAY: Final = 86_400_000


def _clamp(value: float, low: float, high: float) -> float:
    """Clamp, mapping NaN to 0 (a broken score must not poison every downstream value)."""
    if math.isnan(value):
        return 0.0
    return min(high, max(low, value))


# ---------------------------------------------------------------- episode digest


@dataclass(frozen=True)
class ToolUse:
    """One tool call as the reward stage sees it: its name, whether it failed and the error if any."""

    name: str
    failed: bool = False
    error: str = ""


@dataclass(frozen=True)
class DigestTurn:
    """One user turn of an episode: the ask, the tools the agent used for it, and its reply."""

    user_text: str
    assistant_text: str = ""
    tools: Sequence[ToolUse] = ()


@dataclass(frozen=True)
class EpisodeDigest:
    """The episode in chronological order, gathered by the caller from its turns and steps."""

    turns: Sequence[DigestTurn] = ()
    host_context: str = ""

    @property
    def user_texts(self) -> list[str]:
        return [t.user_text.strip() for t in self.turns if t.user_text.strip()]

    @property
    def assistant_texts(self) -> list[str]:
        return [t.assistant_text.strip() for t in self.turns if t.assistant_text.strip()]

    @property
    def tools(self) -> list[ToolUse]:
        return [tool for turn in self.turns for tool in turn.tools]

    @property
    def final_reply(self) -> str:
        replies = self.assistant_texts
        return replies[-1] if replies else ""


# ---------------------------------------------------------------- skip gate


class SkipDecision(NamedTuple):
    """Whether to skip scoring, and a short reason code (`"scorable"` when not skipped)."""

    skip: bool
    reason: str


_TRIVIAL = re.compile(
    r"^(?:hi|hello|hey|yo|ok|okay|k|kk|test|testing|ping|thanks|thank you|thx|ty|yes|no|yep|nope|sure|cool|nice"
    r"|great|good|fine|bye|lol|haha|hmm|你好|您好|嗨|好的|好|好吧|行|可以|谢谢|多谢|嗯+|哦|收到|测试|在吗|哈哈+|再见|拜拜)"
    r"(?:[\s,.!?~、。]+(?:hi|hello|hey|ok|okay|thanks|thank you|yes|sure|好的|好|谢谢|嗯+|哈哈+))*"
    r"[\s,.!?~、。]*$"
)


def _is_trivial(text: str) -> bool:
    return bool(_TRIVIAL.match(unicodedata.normalize("NFKC", text).strip().lower()))


def skip_gate(
    digest: EpisodeDigest,
    *,
    min_exchanges: int = MIN_EXCHANGES,
    min_content_chars: int = MIN_CONTENT_CHARS,
    tool_heavy_ratio: float | None = None,
    min_assistant_chars_tool_heavy: int = MIN_ASSISTANT_CHARS_TOOL_HEAVY,
) -> SkipDecision:
    """Decide whether an episode is too trivial to score (reference §6.4 skip gate).

    Skipped: no user text; fewer than `min_exchanges` answered user turns; and, for episodes *without
    tool calls*, too little text (`min_content_chars`, doubled when there is no CJK since CJK packs more
    per character), chitchat-only user text (char-weighted: ≥ 30 non-trivial characters always pass,
    otherwise a trivial share > 70 % skips), or ≥ 3 user messages that are mostly the same.

    An episode with tool calls did work whose outcome can be scored, so the text rules do not apply to
    it. The reference also skipped "tool-heavy" episodes (≥ 70 % tool turns, ≤ 1 user turn, < 80
    assistant chars); that drops exactly the single-ask agentic tasks the learning loop exists for, so it
    is off by default and only applies when `tool_heavy_ratio` is given.
    """
    users = digest.user_texts
    if not users:
        return SkipDecision(True, "no_user_turns")
    answered = sum(1 for t in digest.turns if t.user_text.strip() and (t.assistant_text.strip() or t.tools))
    if answered < min_exchanges:
        return SkipDecision(True, "no_agent_response")
    tools = digest.tools
    assistant_chars = sum(len(t) for t in digest.assistant_texts)
    if tools:
        if tool_heavy_ratio is not None:
            turns = len(users) + len(digest.assistant_texts) + len(tools)
            if (
                len(tools) / turns >= tool_heavy_ratio
                and len(users) <= 1
                and assistant_chars < min_assistant_chars_tool_heavy
            ):
                return SkipDecision(True, "tool_heavy_without_reply")
        return SkipDecision(False, "scorable")
    total_text = "".join(users) + "".join(digest.assistant_texts)
    needed = min_content_chars if has_cjk(total_text) else min_content_chars * NON_CJK_CHAR_FACTOR
    if len(squash(total_text)) < needed:
        return SkipDecision(True, "too_short")
    trivial_chars = sum(len(u) for u in users if _is_trivial(u))
    user_chars = sum(len(u) for u in users)
    if user_chars - trivial_chars < NONTRIVIAL_CHARS_PASS and trivial_chars / user_chars > TRIVIAL_SHARE:
        return SkipDecision(True, "trivial_user_text")
    if len(users) >= REPETITIVE_MIN_MESSAGES:
        unique = {squash(u).lower() for u in users}
        if len(unique) / len(users) < REPETITIVE_UNIQUE_RATIO:
            return SkipDecision(True, "repetitive_user_text")
    return SkipDecision(False, "scorable")


# ---------------------------------------------------------------- task summary

_FAILURE_ADMISSION = re.compile(
    r"\b(?:i\s+(?:could\s*n[o']?t|can(?:no|')t|was\s+unable|am\s+unable|wasn't\s+able|failed\s+to)"
    r"|unable\s+to|(?:did\s+not|didn't)\s+(?:work|succeed|pass)|not\s+able\s+to|(?:still|keeps?)\s+(?:fail|failing))\b"
    r"|无法|没能|未能|没有成功|做不到|仍然失败|还是失败|依然失败",
    re.IGNORECASE,
)


def reply_admits_failure(reply: str) -> bool:
    """Whether the agent's reply says it did not manage ("I couldn't…", "unable to", "无法…")."""
    return bool(_FAILURE_ADMISSION.search(reply[:4000]))


def _tool_sequence(tools: Sequence[ToolUse]) -> str:
    """Tools in order with consecutive repeats folded: `bash ×3 → read_file → bash ✗`."""
    parts: list[str] = []
    previous: tuple[str, bool] | None = None
    count = 0
    for tool in [*tools, None]:
        key = (tool.name, tool.failed) if tool is not None else None
        if key == previous:
            count += 1
            continue
        if previous is not None:
            label = previous[0] + (" ✗" if previous[1] else "")
            parts.append(f"{label} ×{count}" if count > 1 else label)
        previous, count = key, 1
    return " → ".join(parts)


def _errors_seen(tools: Sequence[ToolUse]) -> list[str]:
    seen: list[str] = []
    for tool in tools:
        if tool.failed:
            label = clip(tool.error, 80) if tool.error.strip() else f"{tool.name} failed"
            if label not in seen:
                seen.append(label)
    return seen


def build_task_summary(digest: EpisodeDigest, *, max_chars: int = SUMMARY_MAX_CHARS) -> str:
    """A deterministic, bounded summary of the episode for the R_human scorer and for logs.

    Sections: optional HOST CONTEXT, TASK (the first ask), LATER ASKS, AGENT STEPS (tools in order,
    failures marked ✗), ERRORS (distinct errors and whether the last tool call left one unresolved),
    FINAL REPLY, LATEST ASK. Clipped head + tail to `max_chars`: the ask sits at the head, the outcome
    at the tail, and both matter more than the middle.
    """
    users = digest.user_texts
    tools = digest.tools
    lines: list[str] = []
    if digest.host_context.strip():
        lines.append(f"HOST CONTEXT: {clip(digest.host_context, 300)}")
    lines.append(f"TASK: {clip(users[0], 400) if users else '(no user text)'}")
    if len(users) > 1:
        lines.append("LATER ASKS:")
        lines.extend(f"- {clip(u, 200)}" for u in users[1:])
    if tools:
        lines.append(f"AGENT STEPS ({len(tools)} tool calls): {_tool_sequence(tools)}")
        errors = _errors_seen(tools)
        if errors:
            state = "unresolved: the last tool call failed" if tools[-1].failed else "resolved later"
            lines.append(f"ERRORS: {'; '.join(errors[:8])} ({state})")
        else:
            lines.append("ERRORS: none")
    reply = digest.final_reply
    if reply:
        lines.append(f"FINAL REPLY: {clip(reply, 400)}")
        if reply_admits_failure(reply):
            lines.append("OUTCOME WORDS: the reply reports that the task was not accomplished")
    else:
        lines.append("FINAL REPLY: (none)")
    if len(users) > 1:
        lines.append(f"LATEST ASK: {clip(users[-1], 300)}")
    return clamp_head_tail("\n".join(lines), max_chars)


# ---------------------------------------------------------------- R_human


@dataclass(frozen=True)
class AxisScores:
    """The LLM's three grades, each in [−1, 1] (clamped on use)."""

    goal: float
    process: float
    satisfaction: float

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AxisScores | None:
        """From the `reward.r_human` JSON (`goal_achievement`, `process_quality`, `user_satisfaction`, or
        the short names); `None` when an axis is missing or not a number."""
        values: list[float] = []
        for long, short in (
            ("goal_achievement", "goal"),
            ("process_quality", "process"),
            ("user_satisfaction", "satisfaction"),
        ):
            raw = data.get(long, data.get(short))
            if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                return None
            try:
                number = float(raw)
            except ValueError:
                return None
            if math.isnan(number):
                return None
            values.append(number)
        return cls(values[0], values[1], values[2])


def r_human_from_axes(scores: AxisScores) -> float:
    """`clamp(0.45·goal + 0.30·process + 0.25·satisfaction, −1, 1)`, each axis clamped to [−1, 1] first."""
    goal = _clamp(scores.goal, -1.0, 1.0)
    process = _clamp(scores.process, -1.0, 1.0)
    satisfaction = _clamp(scores.satisfaction, -1.0, 1.0)
    return _clamp(WEIGHT_GOAL * goal + WEIGHT_PROCESS * process + WEIGHT_SATISFACTION * satisfaction, -1.0, 1.0)


@dataclass(frozen=True)
class VerifierResult:
    """Objective evidence: tests passed out of total, or a credit score in [0, 1] (1 = full credit)."""

    passed: int | None = None
    total: int | None = None
    score: float | None = None

    @property
    def credit(self) -> float | None:
        """Fraction of credit in [0, 1]; passed/total wins over score; `None` without usable numbers."""
        if self.passed is not None and self.total is not None and self.total > 0:
            return _clamp(self.passed / self.total, 0.0, 1.0)
        if self.score is not None and not math.isnan(self.score):
            return _clamp(self.score, 0.0, 1.0)
        return None

    @property
    def full_credit(self) -> bool:
        """Pass only at full credit (passed ≥ total, or score ≥ 1.0): a partial pass is not a success."""
        credit = self.credit
        return credit is not None and credit >= 1.0


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(float(value)) else float(value)


def verifier_from_raw(raw: Any) -> VerifierResult | None:
    """A `VerifierResult` from a feedback payload (top level or under `verifier`), as hosts send them:
    `{passed, total}` or `{reward | score}`; `None` when there is no objective evidence."""
    if not isinstance(raw, Mapping):
        return None
    for candidate in (raw.get("verifier"), raw):
        if not isinstance(candidate, Mapping):
            continue
        passed, total = _as_int(candidate.get("passed")), _as_int(candidate.get("total"))
        if passed is not None and total is not None and total > 0:
            return VerifierResult(passed=passed, total=total)
        for key in ("score", "reward"):
            score = _as_float(candidate.get(key))
            if score is not None:
                return VerifierResult(score=score)
    return None


def verifier_reward(verifier: VerifierResult) -> float | None:
    """R from objective evidence: full credit → +1; partial credit c ∈ [0, 1) → −1 + (1 + 0.4)·c, a line from
    −1 (nothing passed) towards +0.4 that never reaches the success threshold; `None` without numbers."""
    credit = verifier.credit
    if credit is None:
        return None
    if credit >= 1.0:
        return 1.0
    return -1.0 + (1.0 + PARTIAL_CREDIT_CAP) * credit


@dataclass(frozen=True)
class FeedbackSignal:
    """One feedback item on an episode: explicit (the user or a verifier said it) or implicit (inferred)."""

    polarity: Polarity
    magnitude: float = 1.0
    channel: FeedbackChannel = "explicit"
    ts: int = 0
    verifier: VerifierResult | None = None


_SIGN: Final[dict[str, float]] = {"positive": 1.0, "negative": -1.0, "neutral": 0.0}


def latest_verifier(feedback: Sequence[FeedbackSignal]) -> VerifierResult | None:
    """The most recent feedback item's objective verifier result (later `ts` wins; ties: later in list)."""
    ordered = sorted(enumerate(feedback), key=lambda pair: (pair[1].ts, pair[0]))
    for _, signal in reversed(ordered):
        if signal.verifier is not None and signal.verifier.credit is not None:
            return signal.verifier
    return None


def feedback_reward(feedback: Sequence[FeedbackSignal]) -> float | None:
    """R from feedback without an LLM; `None` when no item carries a direction.

    * The latest objective verifier result dominates (`verifier_reward`): tests do not lie about tests.
    * Otherwise explicit items are used (implicit ones only when there is no explicit item, at half
      weight). Neutral and zero-magnitude items carry no direction and are left out. Each item is worth
      polarity × magnitude; several are combined as a mean weighted by magnitude × 0.5^(items after it),
      so the latest word counts most ("wrong" then "perfect now" ends positive) and a single item gives
      exactly polarity × magnitude. The result is bounded by the largest magnitude.
    """
    verifier = latest_verifier(feedback)
    if verifier is not None:
        return verifier_reward(verifier)
    ordered = [s for _, s in sorted(enumerate(feedback), key=lambda pair: (pair[1].ts, pair[0]))]
    explicit = [s for s in ordered if s.channel == "explicit"]
    pool, scale = (explicit, 1.0) if explicit else (ordered, IMPLICIT_FEEDBACK_WEIGHT)
    directional = [(s, _clamp(s.magnitude, 0.0, 1.0)) for s in pool if _SIGN[s.polarity] != 0.0]
    directional = [(s, m) for s, m in directional if m > 0.0]
    if not directional:
        return None
    count = len(directional)
    weights = [m * FEEDBACK_RECENCY_DECAY ** (count - 1 - i) for i, (_, m) in enumerate(directional)]
    total = sum(w * _SIGN[s.polarity] * m for w, (s, m) in zip(weights, directional, strict=True))
    return _clamp(scale * total / sum(weights), -1.0, 1.0)


def heuristic_reward(digest: EpisodeDigest) -> float:
    """A conservative R from the transcript alone, for when there is no verifier, LLM or feedback.

    Last tool call succeeded → +0.1; last tool call failed (an error left unresolved) → −0.2; no tools → 0.
    A final reply that admits failure ("I couldn't…", "无法…") lowers the result by 0.1 (and cancels a
    success). The range [−0.3, +0.1] keeps unverified episodes near 0: enough for L2 to notice a pattern of
    clean successes, never enough to crystallise a skill on its own.
    """
    tools = digest.tools
    reward = 0.0
    if tools:
        reward = HEURISTIC_UNRESOLVED_ERROR if tools[-1].failed else HEURISTIC_FINAL_SUCCESS
    if reply_admits_failure(digest.final_reply):
        reward = min(reward, 0.0) + HEURISTIC_REPLY_ADMITS_FAILURE
    return reward


@dataclass(frozen=True)
class HumanScore:
    """R_human with where it came from; the axes are kept when the LLM graded the episode."""

    r_human: float
    source: HumanSource
    reason: str = ""
    axes: AxisScores | None = None


def score_human(
    *,
    axes: AxisScores | None = None,
    feedback: Sequence[FeedbackSignal] = (),
    digest: EpisodeDigest | None = None,
) -> HumanScore:
    """R_human from the best evidence available: verifier → LLM axes → feedback → transcript heuristic → 0.

    A verifier beats the LLM: the LLM reads a summary and may believe a confident reply, the verifier ran
    the tests. The LLM beats raw feedback because its prompt already includes the feedback lines and
    weighs them against the transcript.
    """
    verifier = latest_verifier(feedback)
    if verifier is not None:
        value = verifier_reward(verifier)
        if value is not None:
            reason = "verifier_full_credit" if verifier.full_credit else "verifier_partial_credit"
            return HumanScore(value, "verifier", reason)
    if axes is not None:
        return HumanScore(r_human_from_axes(axes), "llm", "llm_axes", axes)
    value = feedback_reward(feedback)
    if value is not None:
        return HumanScore(value, "feedback", "feedback_polarity_magnitude")
    if digest is not None:
        return HumanScore(heuristic_reward(digest), "heuristic", "transcript_heuristic")
    return HumanScore(0.0, "none", "no_evidence")


# ---------------------------------------------------------------- reflection weights α


def usable_alpha(alpha: float, floor: float = ALPHA_USABLE_FLOOR) -> float:
    """α clamped to [0, 1], or 0 when below `floor` (an unusable reflection claims no credit)."""
    value = _clamp(alpha, 0.0, 1.0)
    return value if value >= floor else 0.0


_INSIGHT_GROUPS: Final[tuple[re.Pattern[str], ...]] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        # causal: why something happened
        r"\b(?:because|since\s+the|due\s+to|caused\s+by|root\s+cause|the\s+reason|so\s+that|which\s+means"
        r"|this\s+means|therefore)\b|因为|由于|原因是|原因在于|根本原因|导致|所以|因此",
        # insight: something was learned or noticed
        r"\b(?:i\s+reali[sz]e|i\s+noticed|i\s+learn|i\s+found\s+that|i\s+discovered|turns?\s+out|it\s+turned\s+out"
        r"|the\s+(?:problem|issue|key|trick|fix)\s+(?:was|is))|我发现|发现|意识到|注意到|学到|问题在于|关键是|关键在于",
        # transfer: what to do next time
        r"\b(?:next\s+time|lesson|should\s+have|instead\s+of|in\s+the\s+future|always|never|avoid|prefer)\b"
        r"|下次|教训|而不是|以后|应该先|避免|优先",
    )
)
_CONCRETE = re.compile(r"`[^`]+`|\b\w+\(\)|\b\w+[._/]\w+|\b[A-Z][a-z]+[A-Z]\w*\b|\b\d+\b|\b[A-Z][A-Z0-9_]{2,}\b")
_CJK_CHAR = re.compile(f"[{CJK_CHARS}]")


def _text_units(text: str) -> float:
    """Length in words, counting two CJK characters as one word."""
    cjk = len(_CJK_CHAR.findall(text))
    return len(_CJK_CHAR.sub(" ", text).split()) + cjk / 2


def heuristic_alpha(reflection: str | None) -> float:
    """α from a reflection's text, without an LLM; may be below the usable floor.

    No text → 0; a thin text (< 5 words) → 0.2 (unusable: "ran the tool" explains nothing). Otherwise the
    reference's no-LLM value 0.5, plus 0.1 for each kind of insight it shows — causal ("because",
    "原因是"), discovery ("I realised", "我发现"), transfer ("next time", "下次") — plus 0.05 for concrete
    detail (identifiers, numbers, code) and 0.05 for substance (≥ 40 words), capped at 0.8.
    """
    text = squash(reflection or "")
    if not text:
        return 0.0
    units = _text_units(text)
    if units < MIN_REFLECTION_UNITS:
        return 0.2
    alpha = NO_LLM_ALPHA + 0.1 * sum(1 for group in _INSIGHT_GROUPS if group.search(text))
    if _CONCRETE.search(text):
        alpha += 0.05
    if units >= 40:
        alpha += 0.05
    return round(min(alpha, HEURISTIC_ALPHA_MAX), 4)


class AlphaScore(NamedTuple):
    """A step's reflection weight (already through the usable rule), its source, and whether it is usable."""

    alpha: float
    source: AlphaSource
    usable: bool


def resolve_alpha(
    *,
    adapter_alpha: float | None = None,
    reflection: str | None = None,
    llm_alpha: float | None = None,
    llm_usable: bool | None = None,
    floor: float = ALPHA_USABLE_FLOOR,
) -> AlphaScore:
    """α for one step: adapter-supplied value → text heuristic (if usable) → LLM score → heuristic/0.

    The adapter knows its agent best. The heuristic is free, so the LLM is only worth asking when it finds
    nothing usable (`needs_llm_alpha`), which keeps LLM calls per episode bounded. The LLM's `usable=false`
    (e.g. a tautological reflection) forces 0 whatever α it gave.
    """
    if adapter_alpha is not None and not math.isnan(adapter_alpha):
        value = usable_alpha(adapter_alpha, floor)
        return AlphaScore(value, "adapter", value > 0.0)
    heuristic = usable_alpha(heuristic_alpha(reflection), floor)
    if heuristic > 0.0:
        return AlphaScore(heuristic, "heuristic", True)
    if llm_alpha is not None and not math.isnan(llm_alpha):
        value = 0.0 if llm_usable is False else usable_alpha(llm_alpha, floor)
        return AlphaScore(value, "llm", value > 0.0)
    return AlphaScore(0.0, "heuristic" if reflection and reflection.strip() else "none", False)


def needs_llm_alpha(adapter_alpha: float | None, reflection: str | None, floor: float = ALPHA_USABLE_FLOOR) -> bool:
    """Whether an LLM score could change this step's α (no adapter value, no usable reflection text)."""
    if adapter_alpha is not None and not math.isnan(adapter_alpha):
        return False
    return usable_alpha(heuristic_alpha(reflection), floor) == 0.0


# ---------------------------------------------------------------- back-propagation and priority


def backpropagate(
    alphas: Sequence[float],
    reward: float,
    *,
    gamma: float = GAMMA,
    alpha_floor: float = ALPHA_USABLE_FLOOR,
) -> list[float]:
    """Per-step values in chronological order: `V_T = R`, `V_t = α_t·R + (1−α_t)·γ·V_{t+1}`.

    R is clamped to [−1, 1], γ to [0, 1], each α to [0, 1] and through the usable rule (pass
    `alpha_floor=0` to skip it). The last step takes R whatever its α: it produced the outcome. Every value
    has the sign of R and |V_t| ≤ |R|, because each V_t is a convex mix of R and a discounted |V_{t+1}| ≤ |R|.
    """
    if not alphas:
        return []
    r = _clamp(reward, -1.0, 1.0)
    g = _clamp(gamma, 0.0, 1.0)
    values = [0.0] * len(alphas)
    values[-1] = r
    for t in range(len(alphas) - 2, -1, -1):
        alpha = usable_alpha(alphas[t], alpha_floor)
        values[t] = alpha * r + (1.0 - alpha) * g * values[t + 1]
    return values


def priority(value: float, age_days: float, *, half_life_days: float = DECAY_HALF_LIFE_DAYS) -> float:
    """`max(V, 0) · 0.5^(age_days / half_life)`; negative ages count as 0, a half-life ≤ 0 disables decay."""
    base = max(0.0 if math.isnan(value) else value, 0.0)
    if base == 0.0 or half_life_days <= 0:
        return base
    age = max(0.0, 0.0 if math.isnan(age_days) else age_days)
    return base * math.pow(0.5, age / half_life_days)


def priority_at(value: float, trace_ts_ms: int, now_ms: int, *, half_life_days: float = DECAY_HALF_LIFE_DAYS) -> float:
    """`priority` with the age computed from epoch-millisecond timestamps (retrieval's "live" priority)."""
    return priority(value, (now_ms - trace_ts_ms) / MS_PER_DAY, half_life_days=half_life_days)


# ---------------------------------------------------------------- outcome


class OutcomeDecision(NamedTuple):
    outcome: Outcome
    reason: str


def classify_outcome(
    r_task: float | None,
    verifier: VerifierResult | None = None,
    *,
    success_threshold: float = SUCCESS_THRESHOLD,
    failure_threshold: float = FAILURE_THRESHOLD,
    partial_threshold: float = PARTIAL_THRESHOLD,
) -> OutcomeDecision:
    """Outcome of an episode: objective verifier evidence first, then rTask thresholds.

    Verifier: full credit → success; no credit → failure; anything in between → partial (never success).
    rTask: ≥ 0.5 success; ≤ −0.15 failure; ≥ 0.15 partial; otherwise unknown (too weak to call); no rTask
    (skipped or not yet scored) → unknown.
    """
    if verifier is not None:
        credit = verifier.credit
        if credit is not None:
            if credit >= 1.0:
                return OutcomeDecision("success", "verifier_full_credit")
            if credit <= 0.0:
                return OutcomeDecision("failure", "verifier_no_credit")
            return OutcomeDecision("partial", "verifier_partial_credit")
    if r_task is None or math.isnan(r_task):
        return OutcomeDecision("unknown", "no_reward")
    if r_task >= success_threshold:
        return OutcomeDecision("success", "reward_high")
    if r_task <= failure_threshold:
        return OutcomeDecision("failure", "reward_low")
    if r_task >= partial_threshold:
        return OutcomeDecision("partial", "reward_partial")
    return OutcomeDecision("unknown", "reward_inconclusive")


# ---------------------------------------------------------------- all together


@dataclass(frozen=True)
class EpisodeReward:
    """Everything the reward stage persists for one episode: rTask, per-step V and priority, outcome."""

    r_task: float
    human: HumanScore
    values: tuple[float, ...]
    priorities: tuple[float, ...]
    outcome: Outcome
    outcome_reason: str
    alphas: tuple[float, ...] = field(default=())


def score_episode(
    human: HumanScore,
    alphas: Sequence[float],
    *,
    step_ages_days: Sequence[float] | None = None,
    verifier: VerifierResult | None = None,
    gamma: float = GAMMA,
    half_life_days: float = DECAY_HALF_LIFE_DAYS,
    alpha_floor: float = ALPHA_USABLE_FLOOR,
) -> EpisodeReward:
    """Back-propagate `human.r_human` over the steps, compute priorities and the outcome.

    `alphas` and `step_ages_days` are per step in chronological order (ages default to 0: scored now).
    """
    values = backpropagate(alphas, human.r_human, gamma=gamma, alpha_floor=alpha_floor)
    ages = list(step_ages_days) if step_ages_days is not None else [0.0] * len(values)
    if len(ages) != len(values):
        raise ValueError(f"step_ages_days has {len(ages)} entries for {len(values)} steps")
    priorities = tuple(priority(v, a, half_life_days=half_life_days) for v, a in zip(values, ages, strict=True))
    r_task = _clamp(human.r_human, -1.0, 1.0)
    decision = classify_outcome(r_task if human.source != "none" else None, verifier)
    return EpisodeReward(
        r_task=r_task,
        human=human,
        values=tuple(values),
        priorities=priorities,
        outcome=decision.outcome,
        outcome_reason=decision.reason,
        alphas=tuple(usable_alpha(a, alpha_floor) for a in alphas),
    )
