"""The pure math of evidence-typed strength, forgetting and `supersedes` links (seeds 003 and 004).

Why strength moves only on evidence: recall proves that a memory is *similar* to a request, not that
acting on it worked. A first design that raised strength on every recall let a wrong procedure climb the
ranking because it was recalled, and was recalled because it ranked high. So:

* recall counts access (count, time) and never changes strength;
* `test_passed`, `diff_accepted` and `user_confirmed` add a fixed boost (capped);
* `failure` multiplies strength down — asymmetric on purpose: a memory that caused harm when followed
  must lose weight faster than one nobody needed lately;
* `self_report` (the agent saying a memory helped) is recorded with no effect: the model's own claim must
  not feed the score that decides what the model reads next.

Forgetting: a memory idle for `idle_days` (no access, no evidence) is multiplied by `decay_factor` on every
decay run, down to the recall floor and never below it (being unused is not being wrong); one idle for
`archive_days` is archived — out of recall, restorable, never deleted. Pinned memories are exempt from both.
Protected memories (user-authored or user-approved rules) cannot be pushed under the recall floor by
failures, so an agent cannot talk a user's rule out of recall by reporting that it got in the way.

Strength reaches ranking only as a near-tie breaker (`tie_signal`, bounded by `fusion.NEAR_TIE`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, get_args

from memos_bridge.config import StrengthSettings
from memos_bridge.ids import PREFIXES

Evidence = Literal["test_passed", "diff_accepted", "user_confirmed", "self_report", "failure"]
MemoryKind = Literal["trace", "policy", "world_model", "skill", "memory"]

VERIFIED: Final[frozenset[str]] = frozenset({"test_passed", "diff_accepted", "user_confirmed"})
#: Id prefix → memory kind (from `ids.PREFIXES`, which mints them), to resolve an id that comes without its kind.
KIND_BY_PREFIX: Final[dict[str, MemoryKind]] = {PREFIXES[kind]: kind for kind in get_args(MemoryKind)}
#: Strength of a memory nobody has given evidence about (the column default).
NEUTRAL_STRENGTH: Final = 0.5
#: `supersedes` links followed from a recalled memory to its newest correction.
MAX_SUPERSEDE_HOPS: Final = 4
DAY_MS: Final = 86_400_000


def kind_of_id(memory_id: str) -> MemoryKind | None:
    """The kind an id belongs to, from its prefix (None for anything that is not a memory id)."""
    return KIND_BY_PREFIX.get(memory_id[:3])


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def apply_evidence(strength: float, evidence: Evidence, *, protected: bool, settings: StrengthSettings) -> float:
    """Strength after one piece of evidence.

    Verified kinds add `verified_boost` (capped at `max_strength`); failure multiplies by `failure_factor`,
    except that a protected memory stops at the recall floor (and one already under it, which protection
    normally prevents through `lift_to_floor`, is not pushed further); self_report changes nothing.
    """
    if evidence in VERIFIED:
        return _clamp(strength + settings.verified_boost, 0.0, settings.max_strength)
    if evidence == "failure":
        weakened = strength * settings.failure_factor
        if protected:
            return max(weakened, min(strength, settings.recall_floor))
        return weakened
    return strength


def lift_to_floor(strength: float, settings: StrengthSettings) -> float:
    """A memory made recallable on purpose (pinned, protected, restored) starts at least at the floor."""
    return max(strength, settings.recall_floor)


def decayed(strength: float, settings: StrengthSettings) -> float:
    """One decay step of an idle memory: ×`decay_factor`, never below the recall floor (nor raised to it)."""
    if strength <= settings.recall_floor:
        return strength
    return max(strength * settings.decay_factor, settings.recall_floor)


def last_activity(born: int, *touches: int | None) -> int:
    """When the memory was last created, changed by learning, accessed or given evidence (epoch ms)."""
    return max([born, *(t for t in touches if t is not None)])


def idle_cutoff(now: int, days: float) -> int:
    """Memories whose last activity is at or before this time have been idle for `days` at `now`."""
    return now - int(days * DAY_MS)


def is_recallable(strength: float, settings: StrengthSettings) -> bool:
    return strength >= settings.recall_floor


def tie_signal(signal: float, strength: float) -> float:
    """The 0..1 tie-break signal of a candidate with memory strength folded in.

    Neutral at the default strength (untouched memories rank exactly as before); verified evidence lifts,
    failures and decay lower. Fusion multiplies the result by `NEAR_TIE`, so strength can only reorder
    memories whose relevance differs by less than that.
    """
    return _clamp(signal + (strength - NEUTRAL_STRENGTH), 0.0, 1.0)


def is_user_authored(channel: str, raw: Any) -> bool:
    """Explicit feedback that is not a verifier's result: the user's own words."""
    return channel == "explicit" and not (isinstance(raw, dict) and "verifier" in raw)


# ------------------------------------------------------------------------------------------ supersedes


def _successors(edges: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """old id -> ids of the memories that supersede it (`edges` are (new, old) pairs)."""
    out: dict[str, list[str]] = {}
    for new, old in edges:
        if new != old and new not in out.get(old, []):
            out.setdefault(old, []).append(new)
    return out


def _reachable(start: str, successors: Mapping[str, list[str]]) -> set[str]:
    """Every memory that (transitively) supersedes `start`, cycles tolerated, `start` excluded."""
    seen: set[str] = set()
    stack = list(successors.get(start, []))
    while stack:
        node = stack.pop()
        if node in seen or node == start:
            continue
        seen.add(node)
        stack.extend(successors.get(node, []))
    return seen


def resolve_supersedes(recallable: set[str], edges: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Which recallable memories give way, and to which corrections.

    `edges` are (new, old) pairs: new supersedes old. A memory is replaced when some memory superseding it
    (directly or down a chain) is recallable; it is replaced by the newest recallable corrections — those
    not superseded in turn by a recallable memory. Memories with no recallable correction stay: a link
    whose correction cannot be recalled here cannot be honoured, and the old memory is better than nothing.
    Returns {old id: [replacement ids]} for the memories that give way.
    """
    successors = _successors(edges)
    reach = {node: _reachable(node, successors) & recallable for node in recallable if node in successors}
    out: dict[str, list[str]] = {}
    for node, corrections in reach.items():
        newest = sorted(c for c in corrections if not reach.get(c))
        if newest:
            out[node] = newest
    return out


def creates_cycle(edges: Iterable[tuple[str, str]], new: str, old: str) -> bool:
    """Would `new supersedes old` close a loop (old already, transitively, supersedes new)?"""
    return new == old or old in _reachable(new, _successors(edges))
