#!/usr/bin/env python3
"""Retrieval recall of memos-bridge on LoCoMo, measured through the real service over JSON-RPC (stdio).

    python scripts/eval_locomo.py --data /work/shared/data/locomo/locomo_dev.json \\
        --out docs/eval/locomo_dev.json            # ~10 min on 2 cores for the 6-conversation dev file

Options: `--home DIR` keeps the service's data home (default: a temporary directory; DIR must not hold a
database yet), `--limit-conversations N` ingests and scores only the first N samples, `--k 1,5,10,20` sets
the cut-offs, `--window 8` the number of `turn.end` calls in flight, `--details FILE` writes per-question
rankings (dia ids only, no text).

Protocol
--------
Ingest (one spawned service, `ServiceClient.spawn(home)`):
- one `session.open {agent: "locomo", namespace: {profileId: <sample_id>}}` per conversation, so each
  conversation is its own namespace and cannot see the others;
- per LoCoMo session (`session_N` in numeric order) one `episode.open {sessionId}`;
- per dialog turn one `turn.end {agent, sessionId, episodeId, ts, userText, agentText: "", toolCalls: []}`
  with userText = "<speaker>: <text>" + " [shared image: <blip_caption>]" when the turn shares an image
  + " (said on <session date string>)" on every turn, so temporal questions have a date to find;
  ts = the session date (read as UTC) in epoch ms + the turn's index in seconds (keeps the order).
  Each turn is exactly one trace; the returned `traceIds` are mapped back to the turn's `dia_id`.
- Requests are pipelined with `call_async`, at most `--window` in flight and at most ONE per conversation,
  so each conversation's turns are stored in dialogue order. (An early version of the service attached
  concurrent `turn.end` calls without `turn.start` to one turn and lost turns; it now matches turns by
  their text, and a test covers it.)

Queries: every question of categories 1-4 (5 = adversarial, skipped) with usable evidence, sent as is:
`memory.search {agent: "locomo", query, namespace: {profileId: <sample_id>}, topK: {tier2: max k},
filters: {channels: [...]}}` in three configurations, one query in flight (so latencies are clean):
- hybrid   - no `filters` (the engine's fusion of all channels);
- dense    - `filters: {"channels": ["vector"]}`;
- fulltext - `filters: {"channels": ["keyword"]}`.
`agent` must be sent: a read's namespace takes the agent kind from it (default "unknown" sees nothing).
Hits with refKind "trace" are mapped to dia ids in the service's rank order (ties are left as the
service ordered them), de-duplicated; other hit kinds are ignored. The configurations run one after the
other (hybrid first); the service caches query embeddings, so dense-only reuses hybrid's query vectors.

Evidence is normalised as the dataset README says: entries split on ";", "," and whitespace, "D:11:26"
read as "D11:26", leading zeros dropped, ids naming no turn of the conversation dropped, questions left
without evidence skipped (883 remain in the dev file).

Metrics per configuration, overall and per category (1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop): recall@k (share of the question's evidence turns in the top k), hit@k (any evidence turn
in the top k), MRR (1 / rank of the first evidence turn, 0 if none within the max k); averaged over
questions. Also client-side query latency p50/p95 and ingest throughput.

Data: LoCoMo (Maharana et al., ACL 2024, snap-research/LoCoMo), CC BY-NC 4.0, evaluation use only. Never
copy it into the repository: `--out` holds aggregate numbers only, `--details` ids and ranks only.

The exit code is 0 when the run completes; when hybrid does not beat both single-channel configurations
on recall@10 (overall and in every category) the script says where, without failing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Generator, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memos_bridge.client import RpcError, ServiceClient

AGENT = "locomo"
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
SESSION_KEY = re.compile(r"^session_(\d+)$")
EVIDENCE_ID = re.compile(r"^D:?(\d+):(\d+)$")
CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ADVERSARIAL = 5
CONFIGS: tuple[tuple[str, list[str] | None], ...] = (
    ("hybrid", None),
    ("dense", ["vector"]),
    ("fulltext", ["keyword"]),
)
# Channel names as hits report them, by family (used to check that a channel filter was honoured).
CHANNEL_FAMILIES: dict[str, tuple[str, ...]] = {
    "vector": ("vec", "vector", "dense", "embed"),
    "keyword": ("fts", "keyword", "bm25", "word", "trigram", "pattern", "exact", "structural"),
}
LICENCE = "LoCoMo (Maharana et al., ACL 2024; snap-research/LoCoMo), CC BY-NC 4.0, evaluation use only"

Request = tuple[str, dict[str, Any]]
Lane = Generator[Request, Any, None]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- data


@dataclass(frozen=True)
class Turn:
    dia_id: str
    ts: int
    user_text: str


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    sessions: list[list[Turn]]

    @property
    def turn_count(self) -> int:
        return sum(len(turns) for turns in self.sessions)


@dataclass(frozen=True)
class Question:
    sample_id: str
    index: int  # position in the sample's `qa` list
    category: int
    text: str
    evidence: tuple[str, ...]


def parse_date_ms(text: str) -> int:
    parsed = dt.datetime.strptime(text.strip(), DATE_FORMAT).replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def turn_text(raw: dict[str, Any], date: str) -> str:
    text = f"{raw['speaker']}: {raw['text']}"
    caption = raw.get("blip_caption")
    if caption:
        text += f" [shared image: {caption}]"
    return f"{text} (said on {date})"


def load_conversation(sample: dict[str, Any]) -> Conversation:
    conv = sample["conversation"]
    numbers = sorted(
        int(match.group(1))
        for key, value in conv.items()
        if (match := SESSION_KEY.match(key)) and isinstance(value, list)
    )
    sessions: list[list[Turn]] = []
    for number in numbers:
        date = str(conv[f"session_{number}_date_time"])
        base = parse_date_ms(date)
        sessions.append(
            [
                Turn(dia_id=str(raw["dia_id"]), ts=base + index * 1000, user_text=turn_text(raw, date))
                for index, raw in enumerate(conv[f"session_{number}"])
            ]
        )
    return Conversation(sample_id=str(sample["sample_id"]), sessions=sessions)


def normalise_evidence(raw: list[Any], known: set[str]) -> tuple[str, ...]:
    found: list[str] = []
    for entry in raw:
        for token in re.split(r"[;,\s]+", str(entry)):
            match = EVIDENCE_ID.match(token.strip())
            if match is None:
                continue
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
    return tuple(found)


def load_questions(sample: dict[str, Any], conversation: Conversation) -> tuple[list[Question], int]:
    """Scorable questions of the sample, and how many non-adversarial ones were skipped (no evidence)."""
    known = {turn.dia_id for turns in conversation.sessions for turn in turns}
    questions: list[Question] = []
    skipped = 0
    for index, qa in enumerate(sample["qa"]):
        category = int(qa["category"])
        if category == ADVERSARIAL:
            continue
        evidence = normalise_evidence(list(qa.get("evidence") or []), known)
        if not evidence:
            skipped += 1
            continue
        questions.append(Question(conversation.sample_id, index, category, str(qa["question"]), evidence))
    return questions, skipped


# ---------------------------------------------------------------- ingest


@dataclass
class IngestStats:
    started: float = 0.0
    finished: float = 0.0
    turns: int = 0
    sessions: int = 0
    multi_trace_turns: int = 0
    shared_trace_ids: int = 0
    per_conversation: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.finished - self.started


TraceMap = dict[str, list[tuple[str, str]]]  # trace id -> [(sample_id, dia_id)]


def conversation_lane(conv: Conversation, trace_map: TraceMap, stats: IngestStats, total_turns: int) -> Lane:
    """The requests that ingest one conversation, strictly in order; receives each answer via send()."""
    started = time.perf_counter()
    opened = yield (
        "session.open",
        {"agent": AGENT, "namespace": {"profileId": conv.sample_id}, "meta": {"source": "locomo-eval"}},
    )
    session_id = str(opened["sessionId"])
    for turns in conv.sessions:
        episode = yield ("episode.open", {"sessionId": session_id})
        episode_id = str(episode["episodeId"])
        stats.sessions += 1
        for turn in turns:
            result = yield (
                "turn.end",
                {
                    "agent": AGENT,
                    "sessionId": session_id,
                    "episodeId": episode_id,
                    "ts": turn.ts,
                    "userText": turn.user_text,
                    "agentText": "",
                    "toolCalls": [],
                },
            )
            trace_ids = [str(t) for t in result.get("traceIds") or []]
            if len(trace_ids) != 1:
                stats.multi_trace_turns += 1
            for trace_id in trace_ids:
                if trace_id in trace_map:
                    stats.shared_trace_ids += 1
                trace_map.setdefault(trace_id, []).append((conv.sample_id, turn.dia_id))
            stats.turns += 1
            if stats.turns % 250 == 0:
                rate = stats.turns / max(time.perf_counter() - stats.started, 1e-9)
                log(f"[ingest] {stats.turns}/{total_turns} turns, {rate:.1f} turns/s overall")
    yield ("session.close", {"sessionId": session_id})
    elapsed = time.perf_counter() - started
    stats.per_conversation[conv.sample_id] = {
        "turns": conv.turn_count,
        "sessions": len(conv.sessions),
        "seconds": round(elapsed, 2),
        "turnsPerSecond": round(conv.turn_count / elapsed, 2),
    }
    log(
        f"[ingest] {conv.sample_id}: {conv.turn_count} turns in {len(conv.sessions)} sessions, "
        f"{elapsed:.1f} s ({conv.turn_count / elapsed:.1f} turns/s while interleaved with other conversations)"
    )


def run_lanes(client: ServiceClient, lanes: list[Lane], window: int, timeout_s: float = 180.0) -> None:
    """Drive the lanes with `call_async`: one request in flight per lane, at most `window` in all."""
    waiting: deque[Lane] = deque(lanes)
    inflight: dict[Future[Any], Lane] = {}

    def advance(lane: Lane, answer: Any) -> None:
        try:
            method, params = lane.send(answer)
        except StopIteration:
            return
        inflight[client.call_async(method, params)] = lane

    def refill() -> None:
        while waiting and len(inflight) < window:
            advance(waiting.popleft(), None)

    refill()
    while inflight:
        done, _ = wait(list(inflight), timeout=timeout_s, return_when=FIRST_COMPLETED)
        if not done:
            raise TimeoutError(f"no answer within {timeout_s:.0f} s ({len(inflight)} requests in flight)")
        for future in done:
            lane = inflight.pop(future)
            advance(lane, future.result())  # an RpcError aborts the run: the ingest must be complete
        refill()


# ---------------------------------------------------------------- search and scoring


@dataclass
class ConfigRun:
    name: str
    channels: list[str] | None
    status: str = "ok"  # ok | rejected
    error: str | None = None
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # stats.skippedReason
    degraded: Counter[str] = field(default_factory=Counter)
    channel_usage: Counter[str] = field(default_factory=Counter)  # "+".join(sorted(hit.channels))
    conforming_hits: int = 0
    trace_hits: int = 0
    other_kind_hits: int = 0
    other_kinds: Counter[str] = field(default_factory=Counter)  # refKind of the ignored hits
    foreign_hits: int = 0  # traces of another conversation (namespace leak)
    unknown_hits: int = 0  # trace ids the ingest never returned
    rankings: dict[tuple[str, int], list[str]] = field(default_factory=dict)


def conforms(hit_channels: list[str], requested: list[str]) -> bool:
    prefixes = tuple(p for family in requested for p in CHANNEL_FAMILIES.get(family, (family,)))
    return bool(hit_channels) and all(ch.lower().startswith(prefixes) for ch in hit_channels)


def search_params(question: Question, channels: list[str] | None, depth: int) -> dict[str, Any]:
    params: dict[str, Any] = {
        "agent": AGENT,
        "query": question.text,
        "namespace": {"profileId": question.sample_id},
        "topK": {"tier2": depth},
    }
    if channels is not None:
        params["filters"] = {"channels": channels}
    return params


def run_config(
    client: ServiceClient,
    name: str,
    channels: list[str] | None,
    questions: list[Question],
    trace_map: TraceMap,
    depth: int,
) -> ConfigRun:
    run = ConfigRun(name=name, channels=channels)
    started = time.perf_counter()
    for number, question in enumerate(questions, 1):
        params = search_params(question, channels, depth)
        sent = time.perf_counter()
        try:
            result = client.call("memory.search", params, timeout=60)
        except RpcError as exc:
            run.errors += 1
            if run.errors == number and number >= 3:  # every query so far was refused: the filter is rejected
                run.status, run.error = "rejected", str(exc)
                log(f"[search] {name}: the service rejects these params: {exc}")
                return run
            run.rankings[(question.sample_id, question.index)] = []
            continue
        run.latencies_ms.append((time.perf_counter() - sent) * 1000)
        stats = result.get("stats") or {}
        run.server_ms.append(float(stats.get("totalMs") or 0.0))
        if stats.get("skippedReason"):
            run.skipped[str(stats["skippedReason"])] += 1
        for item in stats.get("degraded") or []:
            run.degraded[str(item)] += 1
        ranked: list[str] = []
        for hit in result.get("hits") or []:
            if hit.get("refKind") != "trace":
                run.other_kind_hits += 1
                run.other_kinds[str(hit.get("refKind"))] += 1
                continue
            run.trace_hits += 1
            hit_channels = [str(c) for c in hit.get("channels") or []]
            run.channel_usage["+".join(sorted(hit_channels)) or "(none)"] += 1
            if channels is not None and conforms(hit_channels, channels):
                run.conforming_hits += 1
            owners = trace_map.get(str(hit.get("refId")))
            if owners is None:
                run.unknown_hits += 1
                continue
            for sample_id, dia_id in owners:
                if sample_id != question.sample_id:
                    run.foreign_hits += 1
                elif dia_id not in ranked:
                    ranked.append(dia_id)
        run.rankings[(question.sample_id, question.index)] = ranked
        if number % 200 == 0:
            rate = number / (time.perf_counter() - started)
            log(f"[search] {name}: {number}/{len(questions)} queries, {rate:.1f} queries/s")
    log(f"[search] {name}: {len(questions)} queries in {time.perf_counter() - started:.1f} s")
    return run


def score(ranked: list[str], evidence: tuple[str, ...], ks: list[int], depth: int) -> dict[str, float]:
    rank = {dia_id: position + 1 for position, dia_id in enumerate(ranked[:depth])}
    ranks = sorted(rank[e] for e in evidence if e in rank)
    out = {"mrr": 1.0 / ranks[0] if ranks else 0.0}
    for k in ks:
        found = sum(r <= k for r in ranks)
        out[f"recall@{k}"] = found / len(evidence)
        out[f"hit@{k}"] = float(found > 0)
    return out


def metric_names(ks: list[int]) -> list[str]:
    return [f"recall@{k}" for k in ks] + [f"hit@{k}" for k in ks] + ["mrr"]


def category_key(category: int | None) -> str:
    return "all" if category is None else f"{category} {CATEGORIES[category]}"


def aggregate(run: ConfigRun, questions: list[Question], ks: list[int], depth: int) -> dict[str, dict[str, float]]:
    groups: dict[str, list[dict[str, float]]] = {category_key(None): []}
    for category in CATEGORIES:
        groups[category_key(category)] = []
    for question in questions:
        scores = score(run.rankings.get((question.sample_id, question.index), []), question.evidence, ks, depth)
        groups[category_key(None)].append(scores)
        groups[category_key(question.category)].append(scores)
    table: dict[str, dict[str, float]] = {}
    for key, rows in groups.items():
        entry: dict[str, float] = {"n": float(len(rows))}
        for name in metric_names(ks):
            entry[name] = round(sum(r[name] for r in rows) / len(rows), 4) if rows else float("nan")
        table[key] = entry
    return table


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))  # nearest rank
    return round(ordered[index], 2)


# ---------------------------------------------------------------- report


def print_table(runs: list[ConfigRun], tables: dict[str, dict[str, dict[str, float]]], ks: list[int]) -> None:
    scored = [run for run in runs if run.status == "ok"]
    names = [run.name for run in scored]
    header = f"{'metric':<10} {'category':<14} {'n':>5} " + " ".join(f"{name:>9}" for name in names)
    print(header)
    print("-" * len(header))
    categories = [category_key(None), *(category_key(c) for c in CATEGORIES)]
    for metric in metric_names(ks):
        for position, category in enumerate(categories):
            n = int(tables[names[0]][category]["n"]) if names else 0
            cells = " ".join(f"{tables[name][category][metric]:>9.3f}" for name in names)
            print(f"{metric if position == 0 else '':<10} {category:<14} {n:>5} {cells}")
    for label, values in (
        ("p50 ms", [percentile(run.latencies_ms, 50) for run in scored]),
        ("p95 ms", [percentile(run.latencies_ms, 95) for run in scored]),
    ):
        print(f"{'latency':<10} {label:<14} {'':>5} " + " ".join(f"{v:>9.1f}" for v in values))
    for label, counts in (
        ("trace/query", [run.trace_hits for run in scored]),
        ("other/query", [run.other_kind_hits for run in scored]),
    ):
        per_query = [count / max(len(run.rankings), 1) for count, run in zip(counts, scored, strict=True)]
        print(f"{'hits':<10} {label:<14} {'':>5} " + " ".join(f"{v:>9.1f}" for v in per_query))
    for run in runs:
        if run.status != "ok":
            print(f"{run.name}: not scored, {run.status}: {run.error}")


def filter_report(run: ConfigRun, hybrid: ConfigRun | None) -> dict[str, Any]:
    """Whether the channel filter of a single-channel configuration was honoured."""
    report: dict[str, Any] = {"channelUsage": dict(run.channel_usage.most_common())}
    if run.channels is None or run.status != "ok":
        return report
    share = run.conforming_hits / run.trace_hits if run.trace_hits else float("nan")
    report["conformingHitShare"] = round(share, 4)
    if hybrid is not None and hybrid.status == "ok":
        same = sum(hybrid.rankings.get(key) == ranking for key, ranking in run.rankings.items())
        report["identicalToHybridShare"] = round(same / max(len(run.rankings), 1), 4)
    return report


def hybrid_check(tables: dict[str, dict[str, dict[str, float]]], ks: list[int]) -> list[str]:
    metric = "recall@10" if 10 in ks else f"recall@{ks[len(ks) // 2]}"
    if "hybrid" not in tables:
        return ["hybrid was not scored"]
    problems: list[str] = []
    for category, row in tables["hybrid"].items():
        for other in ("dense", "fulltext"):
            if other not in tables:
                continue
            mine, theirs = row[metric], tables[other][category][metric]
            if not mine > theirs:
                problems.append(f"{category}: hybrid {metric} {mine:.3f} does not beat {other} {theirs:.3f}")
    return problems


# ---------------------------------------------------------------- main


@contextlib.contextmanager
def data_home(path: str | None) -> Iterator[Path]:
    if path is None:
        with tempfile.TemporaryDirectory(prefix="memos-locomo-") as tmp:
            yield Path(tmp)
        return
    home = Path(path)
    home.mkdir(parents=True, exist_ok=True)
    if (home / "memos.db").exists():
        raise SystemExit(f"{home} already holds a memos.db; pass an empty or new --home (results would mix)")
    yield home


def git_state() -> dict[str, Any]:
    """Commit and uncommitted changes of the checkout the service runs from (best effort)."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "memos_bridge"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"commit": commit, "uncommittedFiles": sorted(line[3:] for line in status)}


def parse_ks(text: str) -> list[int]:
    ks = sorted({int(part) for part in text.split(",") if part.strip()})
    if not ks or ks[0] < 1 or ks[-1] > 50:
        raise argparse.ArgumentTypeError("k values must be within 1..50 (topK.tier2 is at most 50)")
    return ks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="LoCoMo JSON file (a list of samples)")
    parser.add_argument("--home", help="service data home (default: a temporary directory)")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    parser.add_argument("--out", help="write aggregate results as JSON here")
    parser.add_argument("--details", help="write per-question rankings (ids only) as JSON here")
    parser.add_argument("--k", type=parse_ks, default=[1, 5, 10, 20], help="cut-offs, e.g. 1,5,10,20")
    parser.add_argument("--window", type=int, default=8, help="turn.end calls in flight (one per conversation)")
    args = parser.parse_args()
    ks: list[int] = args.k
    depth = ks[-1]

    raw_bytes = Path(args.data).read_bytes()
    samples: list[dict[str, Any]] = json.loads(raw_bytes)
    if args.limit_conversations is not None:
        samples = samples[: args.limit_conversations]
    conversations = [load_conversation(sample) for sample in samples]
    questions: list[Question] = []
    no_evidence = 0
    for sample, conv in zip(samples, conversations, strict=True):
        found, skipped = load_questions(sample, conv)
        questions.extend(found)
        no_evidence += skipped
    total_turns = sum(conv.turn_count for conv in conversations)
    log(
        f"[data] {len(conversations)} conversations, {total_turns} turns, {len(questions)} scorable questions "
        f"({no_evidence} non-adversarial skipped for lack of usable evidence)"
    )

    run_started = time.perf_counter()
    git = git_state()  # before the spawn: the code the service loads
    with data_home(args.home) as home:
        stderr_path = home / "service.stderr.log"
        with stderr_path.open("wb") as service_stderr:
            client = ServiceClient.spawn(home, stderr=service_stderr)
            try:
                results = evaluate(client, conversations, questions, ks, depth, args.window, total_turns)
            except BaseException:
                log(f"[error] the run failed; service stderr tail ({stderr_path}):")
                with contextlib.suppress(OSError):
                    log("\n".join(stderr_path.read_text(errors="replace").splitlines()[-20:]))
                raise
            finally:
                client.close()
    ingest, runs, health, warmup_s = results
    total_s = time.perf_counter() - run_started

    tables = {run.name: aggregate(run, questions, ks, depth) for run in runs if run.status == "ok"}
    hybrid = next((run for run in runs if run.name == "hybrid"), None)
    filters = {run.name: filter_report(run, hybrid) for run in runs}

    print()
    print(
        f"LoCoMo retrieval through memos-bridge {health.get('version', '?')}: {len(conversations)} conversations, "
        f"{ingest.turns} turns (1 turn = 1 trace), {len(questions)} questions (categories 1-4), top {depth}"
    )
    print(
        f"ingest: {ingest.turns} turns in {ingest.seconds:.1f} s = {ingest.turns / ingest.seconds:.1f} turns/s "
        f"(window {min(args.window, len(conversations))}, model warm-up {warmup_s:.1f} s before); "
        f"total run {total_s:.0f} s"
    )
    print()
    print_table(runs, tables, ks)
    print()
    for run in runs:
        info = filters[run.name]
        notes = [f"{run.name}:"]
        if run.channels is not None and run.status == "ok":
            notes.append(f"filter channels={run.channels}: {info.get('conformingHitShare', float('nan')):.1%} of hits")
            notes.append("come only from that channel family;")
            if "identicalToHybridShare" in info:
                notes.append(f"ranking identical to hybrid for {info['identicalToHybridShare']:.1%} of questions;")
        usage = ", ".join(f"{k}={v}" for k, v in run.channel_usage.most_common(4))
        notes.append(f"hit channels: {usage or 'none'}")
        if run.errors:
            notes.append(f"; {run.errors} errors")
        if run.skipped:
            notes.append(f"; skipped: {dict(run.skipped)}")
        if run.degraded:
            notes.append(f"; degraded: {dict(run.degraded)}")
        if run.foreign_hits or run.unknown_hits or run.other_kind_hits:
            notes.append(
                f"; other-conversation hits {run.foreign_hits}, unknown traces {run.unknown_hits}, "
                f"non-trace hits (ignored) {run.other_kind_hits} {dict(run.other_kinds)}"
            )
        print(" ".join(notes))
        if run.channels is not None and run.status == "ok" and info.get("conformingHitShare", 1.0) < 0.99:
            print(f"WARNING: {run.name}: the channel filter {run.channels} looks ignored by the service")
    if ingest.multi_trace_turns or ingest.shared_trace_ids:
        print(
            f"WARNING: ingest: {ingest.multi_trace_turns} turns did not yield exactly one trace, "
            f"{ingest.shared_trace_ids} trace ids were returned for more than one turn"
        )
    problems = hybrid_check(tables, ks)
    if problems:
        print("HYBRID DOES NOT BEAT BOTH SINGLE CHANNELS on: " + "; ".join(problems))
    else:
        print("hybrid beats dense-only and full-text-only on recall@10 overall and in every category")

    if args.out:
        out = {
            "dataset": {
                "path": str(args.data),
                "sha256": hashlib.sha256(raw_bytes).hexdigest(),
                "licence": LICENCE,
                "conversations": [conv.sample_id for conv in conversations],
                "turns": total_turns,
                "questions": len(questions),
                "skippedNoEvidence": no_evidence,
            },
            "measuredAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "service": {
                "version": health.get("version"),
                "schemaVersion": health.get("schemaVersion"),
                "git": git,
            },
            "protocol": {
                "unit": "one dialog turn = one trace",
                "userText": "<speaker>: <text> [shared image: <caption>] (said on <session date>)",
                "topK": depth,
                "ks": ks,
                "ties": "service rank order",
            },
            "ingest": {
                "turns": ingest.turns,
                "sessions": ingest.sessions,
                "seconds": round(ingest.seconds, 2),
                "turnsPerSecond": round(ingest.turns / ingest.seconds, 2),
                "window": min(args.window, len(conversations)),
                "modelWarmupSeconds": round(warmup_s, 2),
                "multiTraceTurns": ingest.multi_trace_turns,
                "sharedTraceIds": ingest.shared_trace_ids,
                "perConversation": ingest.per_conversation,
            },
            "configs": {
                run.name: {
                    "filters": None if run.channels is None else {"channels": run.channels},
                    "status": run.status,
                    "error": run.error,
                    "errors": run.errors,
                    "latencyMs": {
                        "p50": percentile(run.latencies_ms, 50),
                        "p95": percentile(run.latencies_ms, 95),
                        "serverP50": percentile(run.server_ms, 50),
                        "serverP95": percentile(run.server_ms, 95),
                    },
                    "skipped": dict(run.skipped),
                    "degraded": dict(run.degraded),
                    "traceHits": run.trace_hits,
                    "ignoredHits": dict(run.other_kinds),
                    "foreignHits": run.foreign_hits,
                    "unknownHits": run.unknown_hits,
                    "filterCheck": filters[run.name],
                    "metrics": tables.get(run.name),
                }
                for run in runs
            },
            "hybridCheck": problems,
            "totalSeconds": round(total_s, 1),
        }
        write_json(args.out, out)
    if args.details:
        details = [
            {
                "sampleId": q.sample_id,
                "qaIndex": q.index,
                "category": q.category,
                "evidence": list(q.evidence),
                "ranked": {run.name: run.rankings.get((q.sample_id, q.index), []) for run in runs},
            }
            for q in questions
        ]
        write_json(args.details, {"licence": LICENCE, "questions": details})
    return 0


def write_json(path: str, payload: Any) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, ensure_ascii=False, allow_nan=True)
        handle.write("\n")
    log(f"[out] wrote {target}")


def evaluate(
    client: ServiceClient,
    conversations: list[Conversation],
    questions: list[Question],
    ks: list[int],
    depth: int,
    window: int,
    total_turns: int,
) -> tuple[IngestStats, list[ConfigRun], dict[str, Any], float]:
    health: dict[str, Any] = client.call("core.health", {}, timeout=60)
    warm = time.perf_counter()
    # A search embeds its query, which loads the model; keeps warm-up out of the ingest figure.
    client.call(
        "memory.search",
        {"agent": AGENT, "query": "warm up", "namespace": {"profileId": "__warmup__"}, "topK": {"tier2": 1}},
        timeout=180,
    )
    warmup_s = time.perf_counter() - warm

    trace_map: TraceMap = {}
    ingest = IngestStats(started=time.perf_counter())
    lanes = [conversation_lane(conv, trace_map, ingest, total_turns) for conv in conversations]
    run_lanes(client, lanes, max(1, window))
    ingest.finished = time.perf_counter()
    log(f"[ingest] done: {ingest.turns} turns, {ingest.turns / ingest.seconds:.1f} turns/s, {len(trace_map)} traces")

    runs = [run_config(client, name, channels, questions, trace_map, depth) for name, channels in CONFIGS]
    return ingest, runs, health, warmup_s


if __name__ == "__main__":
    sys.exit(main())
