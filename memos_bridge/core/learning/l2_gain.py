"""Policy gain and status: does following a policy go better than not following it? (reference §6.5 steps 5–6)

The *with-set* is the traces a policy was induced from or associated with (`trace_policy_links`); the
*without-set* is the other traces of the same episodes — what happened around them when the policy was
not in play. Gain is the difference of their values, made robust for the small samples L2 lives on:

* `W` — softmax(V/τ)-weighted mean of the with-set when it has ≥ 3 traces (its best applications count
  most: a policy is judged by what it achieves when it fits), else the plain mean;
* `baseline = clamp(mean V of with ∪ without, 0.2·s, 0.5·s)` — what an ordinary step of these episodes is
  worth, where `s` is the best reward the episodes' scoring can express (`reward_scale`). The reference
  clamps to [0.2, 0.5] because its rewards span [−1, 1] (LLM axes, verifier, feedback); without an LLM or a
  verdict the transcript heuristic scores a success +0.1 at most, so a fixed floor of 0.2 made every gain
  negative and no policy ever became active. Scaling the clamp keeps the reference's bar ("beat an
  ordinary step, and at least 20 % of a full success") on the heuristic's own scale, while the gain itself
  stays in value units (small evidence, small gain);
* `without* = (mean_without·n + baseline·5)/(n + 5)` — shrinkage with pseudo-count 5, so two lucky or
  unlucky neighbouring steps cannot make the contrast look decisive;
* `raw = W − without*`; `gain = α·raw + (1−α)·previous` (EMA, α = `gain_ema_alpha`), except for a policy
  with no support yet, whose first estimate is `raw` itself.

Status: candidate → active iff support ≥ `min_support` and gain ≥ `min_gain`; active → archived iff gain <
`archive_gain` or support ≤ 0; archived is terminal here (restorable by an operator, never by the loop).

Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from memos_bridge.config import L2Settings
from memos_bridge.core.reward import HEURISTIC_FINAL_SUCCESS

#: Softmax temperature of the with-set mean (reference: the reward τ, 0.5).
TAU: Final = 0.5
#: With-sets smaller than this use the arithmetic mean (a softmax over 1–2 values is just noise).
SOFTMAX_MIN_TRACES: Final = 3
#: Pseudo-count of the shrinkage of the without-mean towards the baseline.
SHRINK_PSEUDO_COUNT: Final = 5.0
#: Clamp of the baseline value.
BASELINE_MIN: Final = 0.2
BASELINE_MAX: Final = 0.5

STATUS_CANDIDATE: Final = "candidate"
STATUS_ACTIVE: Final = "active"
STATUS_ARCHIVED: Final = "archived"


@dataclass(frozen=True, slots=True)
class GainResult:
    """Every intermediate of one gain update, so tests and logs can show the arithmetic."""

    with_mean: float
    without_mean: float | None
    baseline: float
    without_shrunk: float
    raw: float
    gain: float


def with_set_mean(values: Sequence[float], tau: float = TAU) -> float:
    """softmax(V/τ)-weighted mean for ≥ 3 values, arithmetic mean below (0 for none)."""
    if not values:
        return 0.0
    if len(values) < SOFTMAX_MIN_TRACES:
        return sum(values) / len(values)
    top = max(values)
    weights = [math.exp((v - top) / tau) for v in values]  # shifted: same softmax, no overflow
    return sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)


def reward_scale(sources: Iterable[str | None]) -> float:
    """The best reward the scoring of some episodes can express, from their reward sources: the transcript
    heuristic's success value when every one was scored by the heuristic, else 1 (a verifier, the LLM or
    explicit feedback can give a full ±1; one such episode puts the evidence on that scale)."""
    known = [source for source in sources if source]
    if known and all(source == "heuristic" for source in known):
        return HEURISTIC_FINAL_SUCCESS
    return 1.0


def compute_gain(
    with_values: Sequence[float],
    without_values: Sequence[float],
    *,
    previous_gain: float,
    previous_support: int,
    ema_alpha: float,
    scale: float = 1.0,
) -> GainResult:
    """One gain update (see the module docstring for the formula and why); `scale` from `reward_scale`."""
    with_mean = with_set_mean(with_values)
    union = [*with_values, *without_values]
    low, high = BASELINE_MIN * scale, BASELINE_MAX * scale
    baseline = min(high, max(low, sum(union) / len(union))) if union else low
    n = len(without_values)
    without_mean = sum(without_values) / n if n else None
    without_shrunk = ((without_mean or 0.0) * n + baseline * SHRINK_PSEUDO_COUNT) / (n + SHRINK_PSEUDO_COUNT)
    raw = with_mean - without_shrunk
    gain = raw if previous_support <= 0 else ema_alpha * raw + (1 - ema_alpha) * previous_gain
    return GainResult(with_mean, without_mean, baseline, without_shrunk, raw, gain)


def next_status(status: str, support: int, gain: float, settings: L2Settings) -> str:
    """The status after a gain update (archived and unknown statuses are left alone)."""
    if status == STATUS_CANDIDATE and support >= settings.min_support and gain >= settings.min_gain:
        return STATUS_ACTIVE
    if status == STATUS_ACTIVE and (gain < settings.archive_gain or support <= 0):
        return STATUS_ARCHIVED
    return status
