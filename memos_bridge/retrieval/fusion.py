"""Fusion and ranking of candidates found by several channels across tiers (pure functions).

Order of operations (each step documented where it is implemented):
1. relevance = best channel score + RRF bonus (0.4 · Σ 1/(k + rank + 1), k = 60): a memory found by
   several channels, high in each, rises;
2. a small strength/priority boost (≤ NEAR_TIE) breaks near-ties only: it can never lift a memory above
   one that is more relevant by more than NEAR_TIE;
3. relative threshold: drop what scores under 20 % of the best, unless several channels agree and one
   of them is strong (multi-channel bypass);
4. hard de-duplication: repeated questions (same normalised text) keep their best copy;
5. MMR (λ = 0.7) with per-tier seeding: the best of each tier is seeded first when it is competitive
   (≥ 70 % of the top), then candidates are picked greedily by λ·score − (1−λ)·max similarity to what is
   already picked, respecting per-tier caps.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

CandidateKind = Literal["skill", "memory", "trace", "episode", "experience", "world_model"]

RRF_WEIGHT = 0.4
NEAR_TIE = 0.05
RELATIVE_FLOOR = 0.2
SEED_RATIO = 0.7
MMR_LAMBDA = 0.7
STRONG_KEYWORD = 0.75
STRONG_STRUCTURAL = 0.8

VECTOR_CHANNELS = frozenset({"vec_summary", "vec_action", "vec"})
KEYWORD_CHANNELS = frozenset({"fts_word", "fts_trigram", "pattern", "exact"})
STRUCTURAL_CHANNELS = frozenset({"structural"})

_NORMALISE = re.compile(r"[\W_]+", re.UNICODE)


def normalise_text(text: str) -> str:
    """Case- and punctuation-insensitive key for repeated-question de-duplication."""
    return _NORMALISE.sub(" ", text.casefold()).strip()


@dataclass
class Candidate:
    kind: CandidateKind
    ref_id: str
    tier: int
    channels: dict[str, tuple[int, float]] = field(default_factory=dict)  # channel -> (rank, score)
    strength: float = 0.0  # 0..1 evidence/priority signal; only ever a tie-breaker
    vector: np.ndarray | None = None
    dedupe_key: str = ""
    episode_id: str | None = None
    payload: Any = None

    def add(self, channel: str, rank: int, score: float) -> None:
        previous = self.channels.get(channel)
        if previous is None or score > previous[1]:
            self.channels[channel] = (rank, score)

    @property
    def base(self) -> float:
        return max((score for _, score in self.channels.values()), default=0.0)

    def relevance(self, rrf_k: int) -> float:
        rrf = sum(1.0 / (rrf_k + rank + 1) for rank, _ in self.channels.values())
        return self.base + RRF_WEIGHT * rrf

    def score(self, rrf_k: int) -> float:
        return self.relevance(rrf_k) + NEAR_TIE * min(max(self.strength, 0.0), 1.0)

    def bypasses_threshold(self, min_vector: float) -> bool:
        """Several channels agree and at least one of them is strong on its own."""
        if len(self.channels) < 2:
            return False
        for channel, (_, score) in self.channels.items():
            if channel in VECTOR_CHANNELS and score >= min_vector:
                return True
            if channel in STRUCTURAL_CHANNELS and score >= STRONG_STRUCTURAL:
                return True
            if channel in KEYWORD_CHANNELS and score >= STRONG_KEYWORD:
                return True
        return False


def relative_threshold(candidates: list[Candidate], rrf_k: int, min_vector: float) -> list[Candidate]:
    if not candidates:
        return []
    top = max(c.relevance(rrf_k) for c in candidates)
    return [c for c in candidates if c.relevance(rrf_k) >= RELATIVE_FLOOR * top or c.bypasses_threshold(min_vector)]


def dedupe_repeats(candidates: Iterable[Candidate], rrf_k: int) -> list[Candidate]:
    """Keep the best copy of each (kind, normalised text); candidates without a key are kept."""
    best: dict[tuple[str, str], Candidate] = {}
    kept: list[Candidate] = []
    for cand in sorted(candidates, key=lambda c: c.score(rrf_k), reverse=True):
        if not cand.dedupe_key:
            kept.append(cand)
            continue
        key = (cand.kind, cand.dedupe_key)
        if key not in best:
            best[key] = cand
            kept.append(cand)
    return kept


def dedupe_rollups(picked: list[Candidate]) -> list[Candidate]:
    """Trace-vs-roll-up de-duplication: when steps of a past task were picked themselves, its roll-up
    repeats them and goes; a roll-up stays when it is the only trace of that task in the result."""
    episodes_with_steps = {c.episode_id for c in picked if c.kind == "trace"}
    return [c for c in picked if not (c.kind == "episode" and c.episode_id in episodes_with_steps)]


def select_with_rollups(candidates: list[Candidate], caps: dict[int, int], rrf_k: int) -> list[Candidate]:
    """MMR, then trace-vs-roll-up de-duplication; slots freed by dropped roll-ups are refilled once."""
    picked = mmr_select(candidates, caps, rrf_k)
    kept = dedupe_rollups(picked)
    if len(kept) == len(picked):
        return kept
    dropped = {id(c) for c in picked} - {id(c) for c in kept}
    return dedupe_rollups(mmr_select([c for c in candidates if id(c) not in dropped], caps, rrf_k))


def select_lessons_apart(candidates: list[Candidate], caps: dict[int, int], rrf_k: int) -> list[Candidate]:
    """`select_with_rollups` with the lessons (experiences) chosen apart from the other kinds of their tier, each
    group within the tier's cap: a turn's block shows lessons first and another task's steps only when nothing
    else came back, so steps of the same work (which match a request's file names best) must not take the
    lessons' places and then be left out of the block (measured: a confirmed lesson lost its place to steps)."""
    lessons = [c for c in candidates if c.kind == "experience"]
    others = [c for c in candidates if c.kind != "experience"]
    lesson_caps = {tier: cap for tier, cap in caps.items() if any(c.tier == tier for c in lessons)}
    return select_with_rollups(others, caps, rrf_k) + mmr_select(lessons, lesson_caps, rrf_k)


def _similarity(a: Candidate, b: Candidate) -> float:
    if a.vector is not None and b.vector is not None:
        return float(np.dot(a.vector, b.vector))
    if a.dedupe_key and a.dedupe_key == b.dedupe_key:
        return 1.0
    return 0.0


def mmr_select(
    candidates: list[Candidate],
    caps: dict[int, int],
    rrf_k: int,
    *,
    lam: float = MMR_LAMBDA,
    seed_ratio: float = SEED_RATIO,
) -> list[Candidate]:
    """Pick a relevant and diverse set within per-tier caps (tiers missing from `caps` get none)."""
    pool = sorted((c for c in candidates if caps.get(c.tier, 0) > 0), key=lambda c: c.score(rrf_k), reverse=True)
    if not pool:
        return []
    top = pool[0].score(rrf_k)
    picked: list[Candidate] = []
    counts: dict[int, int] = {}

    def take(cand: Candidate) -> None:
        picked.append(cand)
        pool.remove(cand)
        counts[cand.tier] = counts.get(cand.tier, 0) + 1

    for tier in sorted(caps):  # phase A: seed each tier with its best, when competitive
        best = next((c for c in pool if c.tier == tier), None)
        if best is not None and best.score(rrf_k) >= seed_ratio * top:
            take(best)
    total_cap = sum(caps.values())
    # Phase B: greedy maximal marginal relevance. Scores are computed once and each candidate's highest
    # similarity to the picked set is updated incrementally (one comparison per pick, not per pair per
    # round): the quadratic re-scan was a tenth of a turn.start.
    score = {id(c): c.score(rrf_k) for c in pool}
    redundancy: dict[int, float | None] = {id(c): max((_similarity(c, p) for p in picked), default=None) for c in pool}

    def marginal(c: Candidate) -> float:
        seen = redundancy[id(c)]
        return lam * score[id(c)] - (1 - lam) * (0.0 if seen is None else seen)

    while pool and len(picked) < total_cap:
        open_pool = [c for c in pool if counts.get(c.tier, 0) < caps.get(c.tier, 0)]
        if not open_pool:
            break
        chosen = max(open_pool, key=marginal)
        take(chosen)
        for c in pool:
            similarity = _similarity(c, chosen)
            seen = redundancy[id(c)]
            redundancy[id(c)] = similarity if seen is None else max(seen, similarity)
    return picked
