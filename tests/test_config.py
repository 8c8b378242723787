"""Settings: defaults, file + environment layering, nested sections, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from memos_bridge.config import load_settings
from memos_bridge.contract.errors import ErrorCode, MemosError


def test_nested_sections_can_be_set_from_the_environment(tmp_path: Path) -> None:
    env = {
        "MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0",
        "MEMOS_BRIDGE_LEARNING__L2__MIN_SIMILARITY": "0.7",
        "MEMOS_BRIDGE_SESSION__MAX_TURNS_PER_EPISODE": "12",
    }
    settings = load_settings(tmp_path, env=env)
    assert settings.learning.reward.feedback_window_s == 0
    assert settings.learning.l2.min_similarity == 0.7
    assert settings.session.max_turns_per_episode == 12


def test_the_config_file_sets_nested_sections_and_the_environment_wins(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        "[learning.repair]\nfailure_threshold = 4\n[learning.reward]\ngamma = 0.8\n", encoding="utf-8"
    )
    settings = load_settings(tmp_path, env={"MEMOS_BRIDGE_LEARNING__REWARD__GAMMA": "0.5"})
    assert settings.learning.repair.failure_threshold == 4 and settings.learning.reward.gamma == 0.5


def test_a_bad_nested_value_is_reported_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(MemosError) as info:
        load_settings(tmp_path, env={"MEMOS_BRIDGE_LEARNING__REWARD__GAMMA": "1.5"})
    assert info.value.code is ErrorCode.CONFIG_INVALID and "learning.reward.gamma" in str(info.value.details)
