"""StageTimings: per-stage wall and CPU samples, bounded, and which runs count as alone."""

from __future__ import annotations

import time
from typing import Any

import pytest

from memos_bridge.core.learning.stage_timing import StageTimings


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_run_records_wall_and_cpu_and_counts_as_alone_when_nothing_else_happened() -> None:
    timings = StageTimings()
    with timings.measure("l2", activity=lambda: (0, timings.started), idle=lambda: True):
        _spin(0.02)
    row = timings.health()["l2"]
    assert row.runs == 1 and row.wall_ms.n == 1 and row.alone_cpu_ms.n == 1
    assert row.wall_ms.p50 is not None and row.wall_ms.p50 >= 19
    assert row.cpu_ms.p50 is not None and row.cpu_ms.p50 >= 10  # a busy loop: the CPU is this thread's


def test_a_run_is_not_alone_when_a_turn_entered_or_another_stage_started_meanwhile() -> None:
    timings = StageTimings()
    turns = [0]
    with timings.measure("reward", activity=lambda: (turns[0], timings.started), idle=lambda: True):
        turns[0] += 1  # a turn came in while the stage ran
    with (
        timings.measure("world", activity=lambda: (turns[0], timings.started), idle=lambda: True),
        timings.measure("skills", activity=lambda: (turns[0], timings.started), idle=lambda: True),
    ):
        pass
    with timings.measure("strength", activity=lambda: (0, 0), idle=lambda: False):  # busy when it began
        pass
    health = timings.health()
    assert health["reward"].alone_cpu_ms.n == 0 and health["reward"].cpu_ms.n == 1
    assert health["world"].alone_cpu_ms.n == 0  # the skills run started inside it
    assert health["skills"].alone_cpu_ms.n == 1
    assert health["strength"].alone_wall_ms.n == 0 and health["strength"].alone_wall_ms.p50 is None


def test_samples_are_bounded_but_runs_are_counted() -> None:
    timings = StageTimings(samples=4)
    for _ in range(10):
        with timings.measure("experiences", activity=lambda: 0, idle=lambda: True):
            pass
    row = timings.health()["experiences"]
    assert row.runs == 10 and row.wall_ms.n == 4


def test_a_failing_stage_is_timed_too() -> None:
    timings = StageTimings()
    with (
        pytest.raises(RuntimeError),
        timings.measure("skills", activity=lambda: 0, idle=lambda: True),
    ):
        raise RuntimeError("boom")
    assert timings.health()["skills"].runs == 1


@pytest.mark.anyio
async def test_core_health_reports_each_stage_the_chain_ran(core_factory: Any) -> None:
    from tests.core.learning.test_learning_service import feedback, run_task

    core = await core_factory()
    assert (await core.health()).learning.stages is None  # nothing has run yet
    episode, _ = await run_task(core, "se_1", 1_000_000)
    await feedback(core, episode, "negative", rationale="the values are in thousands")
    stages = (await core.health()).learning.stages
    assert stages is not None
    assert {"reward", "experiences", "l2", "world", "skills", "strength"} <= set(stages)
    assert stages["reward"].runs >= 1 and stages["reward"].alone_cpu_ms.n >= 1  # nothing else ran meanwhile
