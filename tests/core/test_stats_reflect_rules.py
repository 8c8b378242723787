"""The small pure parts of `memory.stats` and `memory.reflect`: histogram bins and the change report."""

from __future__ import annotations

from memos_bridge.core.reflect import _changes
from memos_bridge.core.stats import AGE_BINS, DAY_MS, _age_bin, _strength_bin


def test_strength_bins_cover_zero_to_one_inclusive() -> None:
    assert [_strength_bin(v) for v in (0.0, 0.05, 0.1, 0.55, 0.99, 1.0)] == [0, 0, 1, 5, 9, 9]


def test_age_bins_have_exclusive_upper_bounds() -> None:
    ages = [0, DAY_MS - 1, DAY_MS, 7 * DAY_MS, 89 * DAY_MS, 90 * DAY_MS, 4000 * DAY_MS]
    assert [AGE_BINS[_age_bin(age)][0] for age in ages] == ["<1d", "<1d", "1-7d", "7-30d", "30-90d", ">=90d", ">=90d"]


def test_changes_keep_only_moved_statuses_of_moved_kinds() -> None:
    before = {"policy": {"candidate": 2, "active": 1}, "skill": {"active": 1}, "trace": {"active": 4}}
    after = {"policy": {"candidate": 1, "active": 2}, "skill": {"active": 1}, "trace": {"active": 4, "archived": 1}}
    assert _changes(before, after) == {"policy": {"active": 1, "candidate": -1}, "trace": {"archived": 1}}
