"""RRF, near-tie boosts, relative threshold with bypass, repeated-question dedupe, MMR with tier seeding."""

from __future__ import annotations

import numpy as np
import pytest

from memos_bridge.retrieval.fusion import (
    NEAR_TIE,
    RRF_WEIGHT,
    Candidate,
    dedupe_repeats,
    mmr_select,
    normalise_text,
    relative_threshold,
    select_lessons_apart,
    select_with_rollups,
)

K = 60


def cand(
    ref: str,
    tier: int = 2,
    strength: float = 0.0,
    vec: list[float] | None = None,
    key: str = "",
    **channels: tuple[int, float],
) -> Candidate:
    c = Candidate(kind="trace", ref_id=ref, tier=tier, strength=strength, dedupe_key=key)
    if vec is not None:
        v = np.asarray(vec, dtype=np.float32)
        c.vector = v / np.linalg.norm(v)
    for name, (rank, score) in channels.items():
        c.add(name, rank, score)
    return c


def test_relevance_is_best_channel_plus_reciprocal_rank_fusion() -> None:
    c = cand("a", vec_summary=(0, 0.8), fts_word=(2, 0.33))
    expected = 0.8 + RRF_WEIGHT * (1 / (K + 1) + 1 / (K + 3))
    assert c.relevance(K) == pytest.approx(expected)
    single = cand("b", vec_summary=(0, 0.8))
    assert c.relevance(K) > single.relevance(K)


def test_strength_breaks_near_ties_but_never_lifts_an_irrelevant_memory() -> None:
    relevant = cand("relevant", strength=0.0, vec_summary=(0, 0.70))
    irrelevant = cand("popular", strength=1.0, vec_summary=(1, 0.40))
    assert relevant.score(K) > irrelevant.score(K)
    tie_a = cand("weak", strength=0.0, vec_summary=(0, 0.70))
    tie_b = cand("proven", strength=1.0, vec_summary=(0, 0.69))
    assert tie_b.score(K) > tie_a.score(K)
    assert tie_b.score(K) - tie_b.relevance(K) == pytest.approx(NEAR_TIE)


def test_relative_threshold_drops_weak_single_channel_hits_but_multi_channel_bypasses() -> None:
    top = cand("top", vec_summary=(0, 0.9))
    weak = cand("weak", vec_summary=(9, 0.1))
    agreeing = cand("agree", vec_summary=(8, 0.15), fts_word=(0, 1.0))
    kept = {c.ref_id for c in relative_threshold([top, weak, agreeing], K, min_vector=0.25)}
    assert kept == {"top", "agree"}
    weak_pair = cand("pair", vec_summary=(8, 0.1), fts_word=(5, 0.16))
    assert "pair" not in {c.ref_id for c in relative_threshold([top, weak_pair], K, min_vector=0.25)}


def test_repeated_questions_keep_their_best_copy() -> None:
    a = cand("a", key=normalise_text("How do I rebase?"), vec_summary=(0, 0.9))
    b = cand("b", key=normalise_text("how do i rebase"), vec_summary=(1, 0.8))
    c = cand("c", key="", vec_summary=(2, 0.7))
    assert [x.ref_id for x in dedupe_repeats([b, a, c], K)] == ["a", "c"]


def test_mmr_prefers_diversity_and_seeds_each_competitive_tier() -> None:
    same = [1.0, 0.0, 0.0]
    best = cand("best", vec=same, vec_summary=(0, 0.90))
    near_copy = cand("copy", vec=[1.0, 0.01, 0.0], vec_summary=(1, 0.89))
    different = cand("other", vec=[0.0, 1.0, 0.0], vec_summary=(2, 0.80))
    skill = cand("skill", tier=1, vec=same, vec_summary=(0, 0.70))
    world = cand("world", tier=3, vec=[0.0, 0.0, 1.0], vec_summary=(0, 0.40))  # not competitive: no seed
    picked = mmr_select([best, near_copy, different, skill, world], {1: 1, 2: 2, 3: 1}, K)
    ids = [c.ref_id for c in picked]
    assert ids[:2] == ["skill", "best"]  # seeds in tier order
    assert "other" in ids and "copy" not in ids  # diversity beats a near duplicate
    assert ids[-1] == "world"  # filled in phase B once other tiers are capped


def test_mmr_respects_caps_and_excludes_tiers_without_a_cap() -> None:
    cands = [cand(f"t{i}", vec=[1.0, float(i), 0.0], vec_summary=(i, 0.9 - i * 0.01)) for i in range(10)]
    cands.append(cand("s", tier=1, vec=[0.0, 0.0, 1.0], vec_summary=(0, 0.95)))
    picked = mmr_select(cands, {2: 3}, K)
    assert len(picked) == 3 and all(c.tier == 2 for c in picked)
    assert mmr_select([], {2: 3}, K) == []


def test_rollup_is_dropped_when_its_steps_are_picked_and_the_slot_is_refilled() -> None:
    step = cand("tr_1", vec=[1.0, 0.0, 0.0], vec_summary=(0, 0.9))
    step.episode_id = "ep_1"
    rollup = cand("ep_1", vec=[0.9, 0.1, 0.0], vec_summary=(0, 0.9))
    rollup.kind, rollup.episode_id = "episode", "ep_1"
    other = cand("tr_2", vec=[0.0, 1.0, 0.0], vec_summary=(3, 0.5))
    other.episode_id = "ep_2"
    third = cand("tr_3", vec=[0.0, 0.0, 1.0], vec_summary=(4, 0.45))
    third.episode_id = "ep_3"
    picked = [c.ref_id for c in select_with_rollups([step, rollup, other, third], {2: 3}, K)]
    assert picked == ["tr_1", "tr_2", "tr_3"]
    alone = [c.ref_id for c in select_with_rollups([rollup, other], {2: 2}, K)]
    assert alone == ["ep_1", "tr_2"]


def test_steps_of_the_same_work_do_not_take_the_lessons_places() -> None:
    steps = [cand(f"tr_{i}", vec=[1.0, 0.1 * i, 0.0], exact=(i, 0.95), fts_word=(i, 0.9)) for i in range(4)]
    lesson = cand("po_1", vec=[0.0, 0.0, 1.0], fts_word=(5, 0.4))
    lesson.kind = "experience"
    mixed = [c.ref_id for c in select_with_rollups([*steps, lesson], {2: 3}, K)]
    assert "po_1" not in mixed  # one cap for both: the steps win every place
    apart = [c.ref_id for c in select_lessons_apart([*steps, lesson], {2: 3}, K)]
    assert "po_1" in apart and len([r for r in apart if r.startswith("tr_")]) == 3
