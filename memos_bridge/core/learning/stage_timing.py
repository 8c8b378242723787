"""What each stage of the learning chain costs, kept in memory and reported by `core.health`.

The chain runs in the background after every task, on the same two or so cores that answer the agent's
turns, so its cost is part of the service's speed; this record says which stage that cost comes from.

Each run of a stage records two figures over the same span:

* wall time: what the stage took from its start to its end, waits for the database writer, the
  embedder and the LLM included;
* the process's CPU time (`time.process_time`, all threads): a stage's SQL and embeddings run in worker
  threads, not in the thread that awaits them, so the thread's own CPU time would miss most of it.

Process CPU also counts whatever else the service did meanwhile (turns being captured or answered, another
chain). A run is therefore marked *alone* when no turn was in flight and no other stage started while it
ran: the CPU of those runs is the stage's own cost. Only the last `SAMPLES` runs per stage are kept, so the
record stays small however long the service runs.

The chain also records, under `wait`, each of its waits for a moment without turns in flight (one before
each stage, `ForegroundGate.wait_quiet`): under a steady stream of turns those waits, not the stages' work,
are most of the time a chain takes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from memos_bridge.contract import dto
from memos_bridge.core.analytics import percentile

SAMPLES = 256


@dataclass(frozen=True)
class StageSample:
    wall_ms: float
    cpu_ms: float
    alone: bool


def _summary(values: list[float]) -> dto.LatencySummaryDTO:
    ordered = sorted(values)
    p50, p95, p99 = (percentile(ordered, p) for p in (50, 95, 99))
    return dto.LatencySummaryDTO(
        n=len(ordered),
        p50=None if p50 is None else round(p50, 2),
        p95=None if p95 is None else round(p95, 2),
        p99=None if p99 is None else round(p99, 2),
    )


class StageTimings:
    """Bounded per-stage samples of wall and CPU time (see the module docstring)."""

    def __init__(self, samples: int = SAMPLES) -> None:
        self._limit = samples
        self._samples: dict[str, deque[StageSample]] = {}
        self.runs: dict[str, int] = {}
        #: Stage runs started, every stage counted: another stage starting during a run makes it not alone.
        self.started = 0

    @contextmanager
    def measure(self, stage: str, activity: Callable[[], Hashable], idle: Callable[[], bool]) -> Iterator[None]:
        """Time the block as one run of `stage`. `activity()` is a snapshot of what else is going on (turns
        entered, chains running…); the run is alone when it is the same at both ends and `idle()` holds at
        both ends."""
        self.started += 1
        before = activity()
        quiet = idle()
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            sample = StageSample(
                wall_ms=(time.perf_counter() - wall) * 1000,
                cpu_ms=(time.process_time() - cpu) * 1000,
                alone=quiet and idle() and activity() == before,
            )
            self._samples.setdefault(stage, deque(maxlen=self._limit)).append(sample)
            self.runs[stage] = self.runs.get(stage, 0) + 1

    def health(self) -> dict[str, dto.StageTimingDTO]:
        out: dict[str, dto.StageTimingDTO] = {}
        for stage, samples in self._samples.items():
            alone = [s for s in samples if s.alone]
            out[stage] = dto.StageTimingDTO(
                runs=self.runs.get(stage, 0),
                wall_ms=_summary([s.wall_ms for s in samples]),
                cpu_ms=_summary([s.cpu_ms for s in samples]),
                alone_wall_ms=_summary([s.wall_ms for s in alone]),
                alone_cpu_ms=_summary([s.cpu_ms for s in alone]),
            )
        return out
