#!/usr/bin/env python3
"""Retrieval latency and memory benchmark for memos-bridge, each turn.start figure beside its floor.

    python scripts/bench_retrieval.py                        # 10k steps through the service, learning on
    python scripts/bench_retrieval.py --learning off         # the same, the service in lightweight mode
    python scripts/bench_retrieval.py --quick                # 1,000 steps, 50 queries (smoke)
    python scripts/bench_retrieval.py --corpus synthetic      # bulk-built corpora of 10k and 100k traces
    python scripts/bench_retrieval.py --corpus synthetic --sizes 10000,100000 --queries 200
    python scripts/bench_retrieval.py --out docs/eval/floor-retrieval.json --profile /tmp/prof

Two corpora:

* `--corpus service` (the default): the service is spawned on an empty home and the realistic workload of
  `bench_transport.py` is driven into it (`--steps`, default 10,000: 8 hosts, tasks of five turns of four
  steps, a verdict on every fourth task), learning on or off (`--learning`); after `memory.flush` the
  queries below are timed in that same service (so with learning on, the home holds what it learned and the
  queries' own episodes are learned from as usual). Queries are 12-word requests in the workload's language.
* `--corpus synthetic`: for each size N, the bulk-built database described below (fast enough for 100k);
  learning on holds the chains back as described, learning off runs the service in lightweight mode.

In both, after the service has stopped, the floor is measured in this process: the same model loaded the plain
way (fastembed `TextEmbedding` on the service's packaged model folder) embeds each query text alone, plus an
exact numpy top-20 over every vector stored in the home; the service's turn.start latencies are printed beside
it with the ratios (target p95 ≤ 2× at 10k steps). `--profile DIR` records the service with py-spy while the
workload runs and while turn.start is timed (see `bench_transport.py`); `--out` writes every figure as JSON.

For each synthetic corpus size N the script

1. builds a data home in a temporary directory (`--keep DIR` keeps them) and fills its SQLite database
   directly through `Database` (which runs the migrations) and the ORM: bulk `insert()` in transactions of
   5,000 rows; for traces the FTS5 insert triggers are dropped during the load and the two indexes rebuilt
   once at the end ('rebuild' costs half as much as the triggers), then the triggers are re-created from
   the service's own DDL. Contents: N traces in N/10 episodes in N/100 sessions, all in one namespace
   (agent kind "bench", profile "default"), plus N/100 active policies of mixed experience types, N/1000
   active skills (eta 0.5) and N/1000 active world models. Texts are English-like: function words, ~300
   common technical words and ~4,000 other English words (from the embedding model's vocabulary, so texts
   tokenize like real ones), drawn with a Zipf-Mandelbrot frequency
   (exponent 1) mixed with 30 preferred words of the episode's topic, so a content word matches from a few
   percent of the rows (the most common ones) down to a handful, as in real logs. About a third of the
   turns mention an identifier (a path, a snake_case or camelCase name), which is what makes the trigram
   and exact-identifier channels run. Every trace has a summary, tags, sometimes error signatures (~8 %),
   and two L2-normalised float32 384-d vectors, each a noisy mix of one of 200 random topic centroids
   (cosine ≈ 0.6 to it); policies, skills and world models get one such vector too;
2. spawns the service on that home (`ServiceClient.spawn`), waits for `core.health`, warms up with 20
   `turn.start` calls (the first one also waits for the embedding model and the vector indexes to load),
   then times `--queries` sequential `turn.start` calls: a new session every 10 queries, a user text of
   6-14 corpus words, each turn more than 2 h after the previous one so that each opens a new episode;
   then the same texts again as conversations, turns 30 s apart in a session (the router decides whether
   a turn continues the task: the path most of a host's turns take). Latency is the client's wall time
   per call (JSON-RPC over stdio included), one call at a time. The learning chains of the
   episodes these turns finalise are held back by a one-day feedback window so they do not run during the
   timed loop (they are what `memory.flush` would run). Next to it: the service's own
   `stats.totalMs` (retrieval only: query embedding, every tier's channels, fusion, rendering; the
   difference to the wall time is the routing write transaction, JSON and the pipe),
   `tierLatencyMs` per tier, hit counts by kind and channel, and the service RSS after the queries.
   `memory.search` is timed the same way;
3. after stopping the service, times the trace tier's components in this process on the same query
   texts, one at a time: query embedding with the real model, the two vector-index searches, the FTS5
   word and trigram searches and the exact-identifier trigram match (the service runs its channels
   concurrently, and also searches skills, policies and world models).

Caveat: the service embeds each query text itself with the real model, and the synthetic corpus vectors are
random topic mixtures, not embeddings of their texts, so what the vector channel finds is arbitrary: a real
query embedding is nearly orthogonal to random directions (cosine ≈ ±0.05), below `min_trace_sim` (0.25),
so it contributes (almost) no hits. Its cost is paid in full all the same (the matrix products over every
index and the masks run for every query); only fusion sees fewer candidates, which is negligible. Hit
*quality* is not measured here, only latency, hit counts and memory. The topic-centroid query vectors are
used for the in-process vector-search timing, where searches do find their topic's traces. Latencies are
sensitive to other load on the machine: the load average is printed with the results.

Targets: `turn.start` p95 ≤ 15 ms at 10k traces and ≤ 50 ms at 100k; service RSS ≤ 1 GiB at 100k.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import insert, select, update
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_backends import (
    PostgresHomes,
    database_mib,
    hnsw_deferred,
    is_postgres,
    postgres_server,
    sqlite_url,
    stored_vectors,
)
from bench_transport import (
    FloorModel,
    Others,
    Profiler,
    Workload,
    WorkloadReport,
    drive_workload,
    machine,
    machine_line,
    print_profile,
    print_stages,
    rss_mib,
    settled_rss,
    stage_table,
    turn_start_floor,
)
from bench_transport import dist as dist_json

from memos_bridge.client import ServiceClient
from memos_bridge.config import load_settings
from memos_bridge.embedding import create_embedder
from memos_bridge.retrieval.query import keyword_query
from memos_bridge.storage.database import Database
from memos_bridge.storage.fts import FTS_SPECS, TOKENIZERS, FtsKind, fts_ddl, fts_search
from memos_bridge.storage.models import EpisodeRow, PolicyRow, SessionRow, SkillRow, TraceRow, WorldModelRow
from memos_bridge.storage.owner import OwnerFilter, OwnerKey
from memos_bridge.storage.vectors import VectorIndex, to_blob

DIM = 384
TOPICS = 200
CHUNK = 5_000
TRACES_PER_EPISODE = 10
EPISODES_PER_SESSION = 10
AGENT = "bench"
OWNER = OwnerFilter(agent_kind=AGENT, profile_id="default", workspace_id=None)
OWNER_COLUMNS = OWNER.as_columns()
BASE_TS = 1_735_689_600_000  # 2025-01-01T00:00Z
HOUR_MS = 3_600_000
WARMUP_CALLS = 20
QUERIES_PER_SESSION = 10
P95_TARGET_MS = {10_000: 15.0, 100_000: 50.0}
RSS_TARGET_MIB = 1024.0
RSS_TARGET_MAX_TRACES = 100_000

FloatMatrix = NDArray[np.float32]

# Function words head the Zipf ranking (about half of all running words, as in English prose); the
# service's keyword query drops most of them, so those cost index space but rarely match.
FUNCTION_WORDS = (
    "the to of and a in is it that for on with this be as was not are but at have from or by we an "
    "so if you they can will do all there what when which one would about up out then them more into just "
    "some could also than only other its after should been now first"
).split()

CORE_WORDS = (
    "file error test run build install config server client request response function method class module "
    "package import export value type string number list dict array object key index table query database "
    "schema column row field record cache memory disk network port host socket timeout retry connection "
    "session token auth user password permission path directory folder script command shell process thread "
    "worker queue job task event handler callback promise async await loop stream buffer parse format json "
    "yaml toml csv xml html css template render component state props hook route router api endpoint http "
    "https header cookie proxy gateway container image docker compose kubernetes pod deployment service "
    "ingress volume secret namespace cluster node helm chart release version tag branch commit merge rebase "
    "diff patch review lint format mypy ruff pytest fixture mock assert coverage benchmark profile trace log "
    "debug warning exception stack frame crash panic signal exit code status output input argument option "
    "flag environment variable default setting feature plugin extension library dependency lock wheel pip "
    "npm yarn cargo crate rust python node typescript javascript java golang compile linker binary artifact "
    "upload download fetch sync backup restore migrate migration upgrade downgrade rollback deploy pipeline "
    "workflow action runner cache hit miss latency throughput metric alert dashboard monitor health check "
    "probe readiness liveness memory leak garbage collector heap allocation pointer reference null undefined "
    "encoding unicode utf bytes decode encode compress gzip archive zip tar extract checksum hash signature "
    "certificate tls ssl key pair public private encrypt decrypt vault credential rotate expire schedule cron "
    "batch chunk page limit offset sort filter search match regex pattern replace split join merge group "
    "aggregate count sum average median percentile sample random seed model train predict vector embedding "
    "tokenizer prompt completion agent tool call result reply message channel topic partition offset consumer "
    "producer broker kafka redis postgres sqlite mysql mongo elastic index vacuum checkpoint wal transaction "
    "commit lock deadlock isolation replica primary shard snapshot"
).split()

TOOLS = ("bash", "read_file", "write_file", "edit_file", "grep", "python", "web_fetch", "run_tests")
ERROR_SIGNATURES = (
    "KeyError: <str>",
    "ModuleNotFoundError: <str>",
    "FileNotFoundError: <path>",
    "PermissionError: <path>",
    "TypeError: <str>",
    "ValueError: <str>",
    "AssertionError",
    "TimeoutError",
    "ECONNREFUSED",
    "ECONNRESET",
    "ENOENT",
    "HTTP_404",
    "HTTP_500",
    "HTTP_403",
    "EXIT_1",
    "EXIT_2",
    "EXIT_137",
    "sqlite3.OperationalError: database is locked",
)
EXPERIENCE_TYPES = ("procedural", "failure_avoidance", "preference", "verification", "environment")
POLARITIES = ("positive", "negative", "neutral", "mixed")


# ---------------------------------------------------------------------------------------------------------
# Helpers


CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def bench_id(prefix: str, index: int) -> str:
    """A deterministic id in the service's format: prefix + 12 Crockford base32 characters."""
    value = (0x1BEEF << 30) | index
    chars = []
    for _ in range(12):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return prefix + "".join(reversed(chars))


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, int(np.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def unit_rows(matrix: FloatMatrix) -> FloatMatrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out: FloatMatrix = (matrix / np.maximum(norms, np.float32(1e-12))).astype(np.float32)
    return out


# ---------------------------------------------------------------------------------------------------------
# Synthetic corpus


def english_words() -> list[str]:
    """Lower-case alphabetic whole words of the packaged model's WordPiece vocabulary (about 20,000)."""
    import json

    from memos_bridge.embedding.model_files import packaged_sources

    _model, tokenizer = packaged_sources()
    vocab = json.loads(tokenizer.read_text(encoding="utf-8"))["model"]["vocab"]
    return [word for word in vocab if word.isascii() and word.isalpha() and word.islower()]


class Vocabulary:
    """Zipf-distributed English-like words with per-topic preferred words (all deterministic)."""

    TOPIC_WORDS = 30
    TOPIC_SHARE = 0.3

    def __init__(self, rng: random.Random, pseudo_words: int = 4_000) -> None:
        self.rng = rng
        seen = set(FUNCTION_WORDS)
        core = [w for w in dict.fromkeys(CORE_WORDS) if w not in seen]
        seen.update(core)
        # The long tail is real English: whole-word entries of the embedding model's own vocabulary, so a
        # query tokenizes like a user's (about 1.3 tokens a word). Made-up words split into 3-4 word
        # pieces each and made every query embedding cost about twice what a real one costs.
        candidates = sorted(w for w in english_words() if 4 <= len(w) <= 12 and w not in seen)
        pseudo = rng.sample(candidates, min(pseudo_words, len(candidates)))
        seen.update(pseudo)
        self.words: list[str] = [*FUNCTION_WORDS, *core, *pseudo]
        self.function_words = frozenset(FUNCTION_WORDS)
        ranks = np.arange(1, len(self.words) + 1, dtype=np.float64)
        self.zipf = 1.0 / (ranks + 2.7)  # Zipf-Mandelbrot with exponent 1
        self.zipf /= self.zipf.sum()
        self.cum_weights: list[float] = np.cumsum(self.zipf).tolist()
        # Topic words come from the mid and long tail: common words are shared by every topic anyway.
        first_topical = len(FUNCTION_WORDS) + len(core) // 3
        self.topic_words: list[list[int]] = [
            rng.sample(range(first_topical, len(self.words)), self.TOPIC_WORDS) for _ in range(TOPICS)
        ]
        self._topic_cum: dict[int, list[float]] = {}
        self.core = core
        self.pseudo = pseudo

    def _cum_for(self, topic: int) -> list[float]:
        """Cumulative weights of the topic's mixture: (1 − share) · Zipf + share · uniform(topic words)."""
        cum = self._topic_cum.get(topic)
        if cum is None:
            weights = self.zipf * (1.0 - self.TOPIC_SHARE)
            weights[self.topic_words[topic]] += self.TOPIC_SHARE / self.TOPIC_WORDS
            cum = self._topic_cum[topic] = np.cumsum(weights).tolist()
        return cum

    def text(self, n: int, topic: int) -> str:
        return " ".join(self.rng.choices(self.words, cum_weights=self._cum_for(topic), k=n))

    def content_word(self, topic: int) -> str:
        while True:
            word = self.rng.choices(self.words, cum_weights=self._cum_for(topic))[0]
            if word not in self.function_words:
                return word

    def identifier(self, topic: int) -> str:
        a, b = self.content_word(topic), self.content_word(topic)
        shape = self.rng.randrange(5)
        if shape == 0:
            return f"src/{a}/{b}.py"
        if shape == 1:
            return f"{a}_{b}"
        if shape == 2:
            return f"{a}{b.capitalize()}"
        if shape == 3:
            return f"tests/test_{a}.py"
        return f"{a}.{b}()"


@dataclass
class Corpus:
    """Sizes and generators for one benchmark database."""

    traces: int
    seed: int = 7
    vocab: Vocabulary = field(init=False)
    centroids: FloatMatrix = field(init=False)
    np_rng: np.random.Generator = field(init=False)
    rng: random.Random = field(init=False)
    last_ts: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.np_rng = np.random.default_rng(self.seed)
        self.vocab = Vocabulary(self.rng)
        self.centroids = unit_rows(self.np_rng.standard_normal((TOPICS, DIM), dtype=np.float32))

    @property
    def episodes(self) -> int:
        return max(1, self.traces // TRACES_PER_EPISODE)

    @property
    def sessions(self) -> int:
        return max(1, self.episodes // EPISODES_PER_SESSION)

    def vectors(self, topics: Sequence[int], mix: float = 0.75) -> FloatMatrix:
        """Unit vectors near the given topic centroids (cosine ≈ 0.6 to the centroid for mix 0.75)."""
        noise = self.np_rng.standard_normal((len(topics), DIM), dtype=np.float32) / np.float32(np.sqrt(DIM))
        return unit_rows(self.centroids[np.asarray(topics, dtype=np.intp)] * np.float32(mix) + noise)

    # -- traces ------------------------------------------------------------------------------------------

    def episode_steps(self, topic: int, start_ts: int) -> list[dict[str, Any]]:
        """At least TRACES_PER_EPISODE steps: user turns of 0-3 tool steps followed by one reply."""
        rng, vocab = self.rng, self.vocab
        steps: list[dict[str, Any]] = []
        ts = start_ts
        while len(steps) < TRACES_PER_EPISODE:
            turn_id = ts
            user_text = vocab.text(rng.randint(6, 18), topic)
            if rng.random() < 0.35:
                user_text += " " + vocab.identifier(topic)
            ask = clip(user_text, 60)
            tools = rng.choice((0, 1, 1, 2, 2, 3))
            for index in range(tools):
                ts += rng.randint(2_000, 40_000)
                steps.append(self._tool_step(turn_id, index, ts, user_text, ask, topic))
            ts += rng.randint(2_000, 20_000)
            steps.append(self._reply_step(turn_id, tools, ts, user_text, ask, topic))
            ts += rng.randint(60_000, 900_000)
        return steps

    def _tool_step(self, turn_id: int, index: int, ts: int, user_text: str, ask: str, topic: int) -> dict[str, Any]:
        rng, vocab = self.rng, self.vocab
        tool = rng.choice(TOOLS)
        target = vocab.identifier(topic)
        args = {"path": target} if tool in ("read_file", "write_file", "edit_file") else {"cmd": vocab.text(5, topic)}
        failed = rng.random() < 0.12
        signatures: list[str] = []
        if failed:
            signatures = rng.sample(ERROR_SIGNATURES, rng.choice((1, 1, 2)))
            raw = signatures[0].replace("<str>", repr(vocab.content_word(topic))).replace("<path>", target)
            output = f"Traceback (most recent call last): {raw} {vocab.text(rng.randint(6, 16), topic)}"
        else:
            output = vocab.text(rng.randint(10, 30), topic)
        call: dict[str, Any] = {"name": tool, "input": args, "output": output}
        if failed:
            call["errorCode"] = signatures[0]
        arg_text = " ".join(f"{k}={v}" for k, v in args.items())
        outcome = f"failed: {signatures[0]}" if failed else clip(output, 50)
        narration = vocab.text(rng.randint(5, 12), topic) if rng.random() < 0.4 else ""
        tags = [tool, *dict.fromkeys(vocab.content_word(topic) for _ in range(3))]
        if failed:
            tags.append("failure")
        return self._row(
            turn_id,
            index,
            ts,
            "tool",
            user_text,
            narration,
            clip(f"{ask}: {tool}({clip(arg_text, 48)}) → {outcome}", 140),
            [call],
            tags,
            signatures,
            topic,
        )

    def _reply_step(self, turn_id: int, index: int, ts: int, user_text: str, ask: str, topic: int) -> dict[str, Any]:
        rng, vocab = self.rng, self.vocab
        reply = ". ".join(vocab.text(rng.randint(8, 16), topic).capitalize() for _ in range(rng.randint(2, 4))) + "."
        summary = clip(f"{ask} → {reply.split('. ')[0]}", 140)
        tags = list(dict.fromkeys(vocab.content_word(topic) for _ in range(3)))
        return self._row(turn_id, index, ts, "reply", user_text, reply, summary, [], tags, [], topic)

    def _row(
        self,
        turn_id: int,
        index: int,
        ts: int,
        kind: str,
        user_text: str,
        agent_text: str,
        summary: str,
        calls: list[dict[str, Any]],
        tags: list[str],
        signatures: list[str],
        topic: int,
    ) -> dict[str, Any]:
        material = f"{turn_id}|{index}|{kind}|{agent_text}|{calls}"
        return {
            **OWNER_COLUMNS,
            "ts": ts,
            "turn_id": turn_id,
            "step_index": index,
            "step_kind": kind,
            "step_key": hashlib.sha1(material.encode("utf-8")).hexdigest(),
            "user_text": user_text,
            "agent_text": agent_text,
            "summary": summary,
            "tool_calls_json": calls,
            "reflection": None,
            "value": round(self.rng.uniform(-0.5, 1.0), 3),
            "priority": round(self.rng.uniform(0.2, 0.9), 3),
            "tags_json": tags,
            "error_signatures_json": signatures,
            "_topic": topic,
        }


# ---------------------------------------------------------------------------------------------------------
# Building the database


@dataclass
class BuildReport:
    seconds: float
    db_mib: float
    counts: dict[str, int]
    corpus: Corpus | None  # None: the home was filled through the service (fill_through_service)
    how: str = "ORM bulk insert + FTS5 rebuild"


def _insert_chunks(db: Database, model: type[Any], rows: Iterator[dict[str, Any]]) -> int:
    """Bulk INSERT through the ORM in transactions of CHUNK rows; returns the row count."""
    count = 0
    chunk: list[dict[str, Any]] = []

    def flush() -> None:
        batch = list(chunk)
        db.write_sync(lambda s: s.execute(insert(model), batch))
        chunk.clear()

    for row in rows:
        chunk.append(row)
        count += 1
        if len(chunk) >= CHUNK:
            flush()
    if chunk:
        flush()
    return count


def _update_chunks(db: Database, model: type[Any], rows: list[dict[str, Any]]) -> None:
    """ORM bulk UPDATE by primary key (each dict carries the `id`)."""

    def apply(batch: list[dict[str, Any]]) -> None:
        db.write_sync(lambda s: s.execute(update(model), batch))

    for at in range(0, len(rows), CHUNK):
        apply(rows[at : at + CHUNK])


@contextlib.contextmanager
def fts_deferred(db: Database, kind: FtsKind) -> Iterator[None]:
    """Bulk-load `kind` without its FTS insert triggers, then index every row at once.

    The triggers cost about twice as much as one FTS5 'rebuild' of the same rows. Afterwards the dropped
    triggers are re-created from the service's own DDL (`fts_ddl`, all IF NOT EXISTS), so the schema ends
    up exactly as the migrations made it.
    """
    spec = FTS_SPECS[kind]
    names = [spec.fts_table(tok) for tok in TOKENIZERS]
    db.write_sync(lambda s: [s.execute(sql_text(f'DROP TRIGGER IF EXISTS "{n}_ai"')) for n in names])
    try:
        yield
        db.write_sync(lambda s: [s.execute(sql_text(f"INSERT INTO {n}({n}) VALUES ('rebuild')")) for n in names])
    finally:
        db.write_sync(lambda s: [s.execute(sql_text(stmt)) for tok in TOKENIZERS for stmt in fts_ddl(spec, tok)])


def build_database(home: Path, n_traces: int, url: str | None = None) -> BuildReport:
    """Sessions and episodes first (FK parents), then traces streamed in chunks, then the episodes' and
    sessions' end times and trace lists, then policies, skills and world models. `url`: the database (default
    the home's SQLite file); on PostgreSQL the traces' HNSW indexes are built once after the load instead of
    the FTS5 triggers' deferral (its full-text side tables are filled by their triggers, row by row).

    The steps' vectors follow the service's `embedding.step_vectors`: with "one" (the default) a tool or
    reply step, as capture stores it, holds its one vector in both columns; with "two" its action vector is
    another."""
    started = time.perf_counter()
    one_vector = load_settings(home).embedding.step_vectors == "one"
    corpus = Corpus(n_traces)
    rng = corpus.rng
    n_sessions, n_episodes = corpus.sessions, corpus.episodes
    session_ids = [bench_id("se_", i) for i in range(n_sessions)]
    episode_ids = [bench_id("ep_", e) for e in range(n_episodes)]
    episode_session = [min(e // EPISODES_PER_SESSION, n_sessions - 1) for e in range(n_episodes)]
    episode_topics = [rng.randrange(TOPICS) for _ in range(n_episodes)]
    episode_start = [BASE_TS + e * 4 * HOUR_MS + rng.randrange(HOUR_MS) for e in range(n_episodes)]
    episode_traces: list[list[str]] = [[] for _ in range(n_episodes)]
    episode_turns: list[set[int]] = [set() for _ in range(n_episodes)]
    episode_end = list(episode_start)
    session_first = {s: episode_start[e] for e, s in reversed(list(enumerate(episode_session)))}

    def session_rows() -> Iterator[dict[str, Any]]:
        for s, sid in enumerate(session_ids):
            yield {
                **OWNER_COLUMNS,
                "id": sid,
                "agent": AGENT,
                "started_at": session_first[s],
                "last_seen_at": session_first[s],
                "meta_json": {"host": "bench", "cwd": f"/work/project{s % 17}"},
            }

    def episode_rows() -> Iterator[dict[str, Any]]:
        for e, eid in enumerate(episode_ids):
            yield {
                **OWNER_COLUMNS,
                "id": eid,
                "session_id": session_ids[episode_session[e]],
                "started_at": episode_start[e],
                "status": "closed",
                "topic_state": "ended",
                "close_reason": "idle",
                "r_task": round(rng.uniform(-1, 1), 3),
            }

    def finish(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        topics = [int(row.pop("_topic")) for row in batch]
        summary = corpus.vectors(topics)
        action = summary if one_vector else corpus.vectors(topics)
        for i, row in enumerate(batch):
            row["vec_summary"] = to_blob(summary[i])
            row["vec_action"] = to_blob(action[i])
        return batch

    def trace_rows() -> Iterator[dict[str, Any]]:
        pending: list[dict[str, Any]] = []
        next_id = 0
        for e in range(n_episodes):
            topic = episode_topics[e]
            count = TRACES_PER_EPISODE if e < n_episodes - 1 else n_traces - next_id
            steps = corpus.episode_steps(topic, episode_start[e])
            while len(steps) < count:  # the last episode absorbs the remainder
                steps += corpus.episode_steps(topic, steps[-1]["ts"] + HOUR_MS // 2)
            for step in steps[:count]:
                trace_id = bench_id("tr_", next_id)
                next_id += 1
                if rng.random() < 0.15:  # side quests: a step about another topic, for vector realism
                    step["_topic"] = rng.randrange(TOPICS)
                step.update(id=trace_id, episode_id=episode_ids[e], session_id=session_ids[episode_session[e]])
                episode_traces[e].append(trace_id)
                episode_turns[e].add(step["turn_id"])
                episode_end[e] = step["ts"]
                pending.append(step)
            if len(pending) >= CHUNK:
                yield from finish(pending)
                pending = []
        yield from finish(pending)

    url = url or sqlite_url(home)
    postgres = is_postgres(url)
    db = Database(url)
    db.open()
    try:
        counts = {
            "sessions": _insert_chunks(db, SessionRow, session_rows()),
            "episodes": _insert_chunks(db, EpisodeRow, episode_rows()),
        }
        deferred = (
            hnsw_deferred(db, "trace", ("vec_summary", "vec_action"), DIM) if postgres else fts_deferred(db, "trace")
        )
        with deferred:
            counts["traces"] = _insert_chunks(db, TraceRow, trace_rows())
        corpus.last_ts = max(episode_end)
        _update_chunks(
            db,
            EpisodeRow,
            [
                {
                    "id": eid,
                    "ended_at": episode_end[e] + 1_000,
                    "trace_ids_json": episode_traces[e],
                    "turn_count": len(episode_turns[e]),
                }
                for e, eid in enumerate(episode_ids)
            ],
        )
        session_last: dict[int, int] = {}
        for e, s in enumerate(episode_session):
            session_last[s] = max(session_last.get(s, 0), episode_end[e])
        _update_chunks(
            db,
            SessionRow,
            [
                {"id": sid, "last_seen_at": session_last[s], "closed_at": session_last[s] + 60_000}
                for s, sid in enumerate(session_ids)
            ],
        )
        counts["policies"] = _insert_chunks(db, PolicyRow, policy_rows(corpus, max(1, n_traces // 100)))
        counts["skills"] = _insert_chunks(db, SkillRow, skill_rows(corpus, max(1, n_traces // 1000)))
        counts["world_models"] = _insert_chunks(db, WorldModelRow, world_rows(corpus, max(1, n_traces // 1000)))
    finally:
        db.close()  # on SQLite the last connection checkpoints the WAL into memos.db
    how = "ORM bulk insert + HNSW build (PostgreSQL)" if postgres else "ORM bulk insert + FTS5 rebuild"
    return BuildReport(time.perf_counter() - started, database_mib(url), counts, corpus, how)


def _some_trace_ids(corpus: Corpus, k: int) -> list[str]:
    return [bench_id("tr_", corpus.rng.randrange(corpus.traces)) for _ in range(k)]


def policy_rows(corpus: Corpus, count: int) -> Iterator[dict[str, Any]]:
    rng, vocab = corpus.rng, corpus.vocab
    topics = [rng.randrange(TOPICS) for _ in range(count)]
    vecs = corpus.vectors(topics)
    for i, topic in enumerate(topics):
        ts = BASE_TS + rng.randrange(max(1, corpus.last_ts - BASE_TS))
        steps = [f"{n}. {vocab.text(rng.randint(6, 12), topic)}" for n in range(1, rng.randint(3, 6))]
        yield {
            **OWNER_COLUMNS,
            "id": bench_id("po_", i),
            "title": vocab.text(rng.randint(4, 8), topic),
            "trigger": "When " + vocab.text(rng.randint(8, 16), topic),
            "procedure": "\n".join(steps),
            "verification": vocab.text(rng.randint(8, 14), topic),
            "boundary": "Not when " + vocab.text(rng.randint(6, 12), topic),
            "support": rng.randint(2, 12),
            "gain": round(rng.uniform(0.0, 0.6), 3),
            "status": "active",
            "experience_type": rng.choice(EXPERIENCE_TYPES),
            "evidence_polarity": rng.choice(POLARITIES),
            "salience": round(rng.uniform(0.1, 1.0), 3),
            "confidence": round(rng.uniform(0.4, 0.95), 3),
            "source_episodes_json": [bench_id("ep_", rng.randrange(corpus.episodes)) for _ in range(3)],
            "source_trace_ids_json": _some_trace_ids(corpus, rng.randint(3, 6)),
            "induced_by": "l2.induction",
            "decision_guidance_json": {
                "preference": [vocab.text(rng.randint(6, 12), topic)],
                "antiPattern": [vocab.text(rng.randint(6, 12), topic)] if rng.random() < 0.6 else [],
            },
            "skill_eligible": rng.random() < 0.2,
            "vec": to_blob(vecs[i]),
            "created_at": ts,
            "updated_at": ts + rng.randrange(30 * 24 * HOUR_MS),
        }


def skill_rows(corpus: Corpus, count: int) -> Iterator[dict[str, Any]]:
    rng, vocab = corpus.rng, corpus.vocab
    topics = [rng.randrange(TOPICS) for _ in range(count)]
    vecs = corpus.vectors(topics)
    for i, topic in enumerate(topics):
        ts = BASE_TS + rng.randrange(max(1, corpus.last_ts - BASE_TS))
        yield {
            **OWNER_COLUMNS,
            "id": bench_id("sk_", i),
            "name": f"{vocab.content_word(topic)}-{vocab.content_word(topic)}-{i}",
            "status": "active",
            "invocation_guide": vocab.text(rng.randint(30, 60), topic),
            "procedure_json": {"steps": [vocab.text(rng.randint(6, 12), topic) for _ in range(rng.randint(3, 6))]},
            "eta": 0.5,
            "support": rng.randint(3, 20),
            "gain": round(rng.uniform(0.0, 0.5), 3),
            "source_policies_json": [bench_id("po_", rng.randrange(max(1, corpus.traces // 100))) for _ in range(2)],
            "evidence_anchors_json": _some_trace_ids(corpus, 3),
            "vec": to_blob(vecs[i]),
            "created_at": ts,
            "updated_at": ts,
        }


def world_rows(corpus: Corpus, count: int) -> Iterator[dict[str, Any]]:
    rng, vocab = corpus.rng, corpus.vocab
    topics = [rng.randrange(TOPICS) for _ in range(count)]
    vecs = corpus.vectors(topics)

    def entries(n: int, topic: int) -> list[dict[str, Any]]:
        return [
            {
                "label": vocab.text(3, topic),
                "description": vocab.text(rng.randint(8, 16), topic),
                "evidenceIds": _some_trace_ids(corpus, 2),
            }
            for _ in range(n)
        ]

    for i, topic in enumerate(topics):
        ts = BASE_TS + rng.randrange(max(1, corpus.last_ts - BASE_TS))
        yield {
            **OWNER_COLUMNS,
            "id": bench_id("wm_", i),
            "title": vocab.text(rng.randint(4, 8), topic),
            "body": vocab.text(rng.randint(60, 120), topic),
            "policy_ids_json": [bench_id("po_", rng.randrange(max(1, corpus.traces // 100))) for _ in range(3)],
            "structure_json": {
                "environment": entries(2, topic),
                "inference": entries(2, topic),
                "constraints": entries(1, topic),
            },
            "domain_tags_json": list(dict.fromkeys(vocab.content_word(topic) for _ in range(4))),
            "confidence": round(rng.uniform(0.4, 0.9), 3),
            "induced_by": "l3.abstraction",
            "vec": to_blob(vecs[i]),
            "status": "active",
            "created_at": ts,
            "updated_at": ts,
        }


# ---------------------------------------------------------------------------------------------------------
# Queries and measurement


@dataclass
class Query:
    text: str
    topic: int


def make_queries(corpus: Corpus, count: int, seed: int) -> list[Query]:
    """User texts of 6-14 corpus words (same Zipf + topic mix); a third mention an identifier."""
    saved = corpus.vocab.rng
    corpus.vocab.rng = rng = random.Random(seed)
    try:
        queries = []
        for _ in range(count):
            topic = rng.randrange(TOPICS)
            n = rng.randint(6, 14)
            if rng.random() < 0.33:
                text = f"{corpus.vocab.text(n - 1, topic)} {corpus.vocab.identifier(topic)}"
            else:
                text = corpus.vocab.text(n, topic)
            queries.append(Query(text, topic))
        return queries
    finally:
        corpus.vocab.rng = saved


@dataclass
class Timing:
    wall_ms: list[float] = field(default_factory=list)
    service_ms: list[float] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    channels: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    scenarios: Counter[str] = field(default_factory=Counter)
    tier_ms: dict[str, list[float]] = field(default_factory=dict)
    identifier: list[bool] = field(default_factory=list)  # the query holds an identifier (exact channel runs)
    skipped: Counter[str] = field(default_factory=Counter)
    degraded: Counter[str] = field(default_factory=Counter)

    def add(self, wall_ms: float, result: dict[str, Any]) -> None:
        self.wall_ms.append(wall_ms)
        echoed = str((result.get("query") or {}).get("query") or "")
        self.identifier.append(bool(keyword_query(echoed).identifiers))
        stats = result.get("stats") or {}
        self.service_ms.append(float(stats.get("totalMs", float("nan"))))
        hits = result.get("hits") or []
        self.hits.append(len(hits))
        self.candidates.append(int(stats.get("candidates", 0)))
        for hit in hits:
            self.channels.update(hit.get("channels") or [])
            self.kinds[str(hit.get("refKind"))] += 1
        if stats.get("scenario"):
            self.scenarios[str(stats["scenario"])] += 1
        for tier, ms in (result.get("tierLatencyMs") or {}).items():
            self.tier_ms.setdefault(tier, []).append(float(ms))
        if stats.get("skippedReason"):
            self.skipped[str(stats["skippedReason"])] += 1
        self.degraded.update(stats.get("degraded") or [])

    def latency_line(self) -> str:
        w = self.wall_ms
        return (
            f"p50 {pct(w, 50):6.1f}  p95 {pct(w, 95):6.1f}  p99 {pct(w, 99):6.1f}  max {max(w):6.1f} ms"
            f"  | service stats.totalMs p50 {pct(self.service_ms, 50):.1f}  p95 {pct(self.service_ms, 95):.1f} ms"
        )

    def hits_line(self) -> str:
        n = len(self.hits)
        with_hits = sum(1 for h in self.hits if h) / n * 100
        channels = ", ".join(f"{k} {v}" for k, v in sorted(self.channels.items()))
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items()))
        extra = ""
        if self.scenarios:
            extra += f"; scenarios: {', '.join(f'{k} {v}' for k, v in sorted(self.scenarios.items()))}"
        if self.skipped:
            extra += f"  skipped: {dict(self.skipped)}"
        if self.degraded:
            extra += f"  degraded: {dict(self.degraded)}"
        return (
            f"hits/query {statistics.mean(self.hits):.2f} (≥1 hit in {with_hits:.0f}%), "
            f"candidates/query {statistics.mean(self.candidates):.1f}\n"
            f"              hits by kind: {kinds}; by channel: {channels}{extra}"
        )

    def split_line(self) -> str:
        """Wall time of queries with and without an identifier (which adds LIKE-scan channels)."""
        parts = []
        for flag, label in ((True, "with an identifier"), (False, "without")):
            values = [w for w, f in zip(self.wall_ms, self.identifier, strict=True) if f is flag]
            if values:
                parts.append(f"{label} (n={len(values)}) p50 {pct(values, 50):.1f} / p95 {pct(values, 95):.1f}")
        return "queries " + "; ".join(parts) + " ms"

    def tiers_line(self) -> str:
        """The service's per-tier retrieval time (tierLatencyMs; the tiers run concurrently)."""
        parts = [
            f"{tier} p50 {pct(values, 50):.1f} / p95 {pct(values, 95):.1f}"
            for tier, values in sorted(self.tier_ms.items())
            if values
        ]
        return "tierLatencyMs: " + ("; ".join(parts) if parts else "n/a") + " ms"


def timed_calls(client: ServiceClient, method: str, params_list: list[dict[str, Any]]) -> Timing:
    timing = Timing()
    for params in params_list:
        started = time.perf_counter()
        result = client.call(method, params, timeout=120)
        timing.add((time.perf_counter() - started) * 1000, result)
    return timing


@dataclass
class ServiceReport:
    spawn_s: float
    first_turn_s: float
    warmup_ms: list[float]
    turn_start: Timing
    follow_up: Timing
    search: Timing
    rss_mib: float
    ingest_ms: list[float] = field(default_factory=list)  # turn.end wall time per call
    ingest_steps: int = 0  # steps those calls stored
    settled_rss_mib: float = math.nan  # after the service's next heap trim (nan: none within the wait)

    @property
    def ingest_steps_per_s(self) -> float:
        seconds = sum(self.ingest_ms) / 1000
        return self.ingest_steps / seconds if seconds else math.nan


HOLD_LEARNING = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "86400"}
LIGHTWEIGHT = {"MEMOS_BRIDGE_LIGHTWEIGHT": "true"}


def run_service(
    home: Path,
    start_ts: int,
    warm_texts: list[str],
    queries: list[Query],
    searches: list[Query],
    *,
    env: dict[str, str] | None = None,
    client: ServiceClient | None = None,
    profiler: Profiler | None = None,
    others: Others | None = None,
) -> ServiceReport:
    """Time turn.start and memory.search on `home`: in a service spawned here with `env`, or in `client`,
    a service that is already running (it filled the home; it is closed here all the same)."""
    started = time.perf_counter()
    spawned = client is None
    if client is None:
        client = ServiceClient.spawn(home, env=env)
        if others is not None and others.pid is None and client.process is not None:
            others.pid = client.process.pid  # the service's CPU is this benchmark's, not another process's
    try:
        client.call("core.health", timeout=120)
        spawn_s = time.perf_counter() - started if spawned else math.nan
        ts = start_ts
        gap = 2 * HOUR_MS + 60_000  # > merge_max_gap_ms: every turn opens a new episode

        def turn_params(texts: list[str], step_ms: int = gap) -> list[dict[str, Any]]:
            nonlocal ts
            params: list[dict[str, Any]] = []
            session = ""
            for i, text in enumerate(texts):
                if i % QUERIES_PER_SESSION == 0:
                    session = client.call("session.open", {"agent": AGENT})["sessionId"]
                    ts += gap  # a session's first turn is always a new task
                else:
                    ts += step_ms
                params.append({"agent": AGENT, "sessionId": session, "userText": text, "ts": ts})
            return params

        warm = turn_params(warm_texts)
        first_started = time.perf_counter()
        client.call("turn.start", warm[0], timeout=600)  # waits for the model and the vector indexes
        first_turn_s = time.perf_counter() - first_started
        warmup = timed_calls(client, "turn.start", warm[1:WARMUP_CALLS])

        with (
            profiler.phase("turn_start") if profiler else contextlib.nullcontext(),
            others.phase("turn.start") if others else contextlib.nullcontext(),
        ):
            turn_start = timed_calls(client, "turn.start", turn_params([q.text for q in queries]))
            # The same texts again as a conversation: turns 30 s apart in a session (the router decides
            # whether each continues the task or starts a new one, as it would for a host's real turns).
            follow_up = timed_calls(client, "turn.start", turn_params([q.text for q in queries], step_ms=30_000))
        namespace = {"agentKind": AGENT, "profileId": "default"}
        search_params = [{"agent": AGENT, "namespace": namespace, "query": q.text} for q in searches]
        timed_calls(client, "memory.search", search_params[:5])  # warm the tool-driven path too
        search = timed_calls(client, "memory.search", search_params)
        ingest_ms, ingest_steps = time_ingest(client, [q.text for q in searches], ts + gap)
        proc = client.process
        assert proc is not None
        rss = rss_mib(proc.pid)
        settled = settled_rss(client, proc.pid)
    finally:
        client.close()
    return ServiceReport(
        spawn_s, first_turn_s, warmup.wall_ms, turn_start, follow_up, search, rss, ingest_ms, ingest_steps, settled
    )


INGEST_TURNS = 40


def time_ingest(client: ServiceClient, texts: list[str], ts: int) -> tuple[list[float], int]:
    """Capture on the full home: `INGEST_TURNS` turns (a new task every fifth), each a `turn.start` and a
    timed `turn.end` of four steps (three tool calls whose outputs are corpus texts, and a reply). Returns
    the turn.end wall times (ms) and the steps stored."""
    wall_ms: list[float] = []
    steps = 0
    session = ""
    for i in range(INGEST_TURNS):
        text = texts[i % len(texts)]
        if i % 5 == 0:
            session = client.call("session.open", {"agent": AGENT})["sessionId"]
        ts += 60_000
        started = client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": text, "ts": ts})
        words = text.split()
        calls = [
            {
                "name": "bash",
                "input": {"cmd": f"grep -n {words[(i + k) % len(words)]} src/module_{k}.py"},
                "output": " ".join(words[k:] + words[:k]),
            }
            for k in range(3)
        ]
        params = {
            "agent": AGENT,
            "sessionId": session,
            "episodeId": started["query"]["episodeId"],
            "toolCalls": calls,
            "agentText": f"Done: {text}",
            "ts": ts + 1_000,
        }
        begun = time.perf_counter()
        result = client.call("turn.end", params, timeout=120)
        wall_ms.append((time.perf_counter() - begun) * 1000)
        steps += len(result["traceIds"])
    return wall_ms, steps


@dataclass
class Components:
    index_load_ms: float
    embed_ms: list[float]
    vector_ms: list[float]
    fts_word_ms: list[float]
    fts_trigram_ms: list[float]
    exact_ms: list[float]
    note: str = ""


def time_components(home: Path, queries: list[Query], query_vecs: FloatMatrix, url: str | None = None) -> Components:
    """The trace tier's retrieval pieces, run in this process on the same texts one at a time (the service
    embeds first, then runs every channel of every tier concurrently in worker threads). `query_vecs`: the
    synthetic corpus's topic vectors (which find their topic's rows), or the texts' real embeddings. On
    PostgreSQL the service searches vectors with pgvector, not in memory: the in-memory figures are left out."""
    url = url or sqlite_url(home)
    db = Database(url)
    db.open()
    try:
        started = time.perf_counter()
        indexes: list[VectorIndex] = []
        in_memory = () if is_postgres(url) else (TraceRow.vec_summary, TraceRow.vec_action)
        for column in in_memory:

            def load(s: Session, col: Any = column) -> VectorIndex:
                index = VectorIndex(DIM)
                rows = s.execute(
                    select(TraceRow.id, col, TraceRow.owner_workspace_id).where(col.is_not(None))
                ).yield_per(5000)
                index.load((str(i), bytes(v), OwnerKey(AGENT, "default", w)) for i, v, w in rows)
                return index

            indexes.append(db.read_sync(load))
        index_load_ms = (time.perf_counter() - started) * 1000

        vector_ms: list[float] = []
        for vec in query_vecs if indexes else ():
            started = time.perf_counter()
            for index in indexes:
                index.search(vec, 20, OWNER, min_score=0.25)
            vector_ms.append((time.perf_counter() - started) * 1000)

        word_ms: list[float] = []
        tri_ms: list[float] = []
        exact_ms: list[float] = []

        def timed(sink: list[float], fn: Callable[[Session], object]) -> None:
            started = time.perf_counter()
            db.read_sync(fn)
            sink.append((time.perf_counter() - started) * 1000)

        for q in queries:
            keywords = keyword_query(q.text)
            if keywords.word:
                timed(word_ms, partial(fts_search, kind="trace", query_text=keywords.word, owner=OWNER, limit=20))
            if keywords.trigram:
                timed(
                    tri_ms,
                    partial(
                        fts_search,
                        kind="trace",
                        query_text=keywords.trigram,
                        owner=OWNER,
                        tokenizer="trigram",
                        limit=20,
                    ),
                )
            if keywords.identifiers:
                timed(
                    exact_ms,
                    partial(
                        fts_search,
                        kind="trace",
                        query_text=" ".join(keywords.identifiers),
                        owner=OWNER,
                        tokenizer="trigram",
                        limit=20,
                    ),
                )
    finally:
        db.close()

    embed_ms: list[float] = []
    note = ""
    try:
        settings = load_settings(home)
        embedder = create_embedder(settings.embedding, settings.models_dir)
        try:
            embedder.embed_sync(["warm up the model"], role="query")
            for q in queries:
                started = time.perf_counter()
                embedder.embed_sync([q.text], role="query")
                embed_ms.append((time.perf_counter() - started) * 1000)
        finally:
            embedder.close()
    except Exception as exc:  # the component figure is a diagnostic; never fail the benchmark for it
        note = f"embedding not timed: {type(exc).__name__}: {exc}"
    return Components(index_load_ms, embed_ms, vector_ms, word_ms, tri_ms, exact_ms, note)


# ---------------------------------------------------------------------------------------------------------
# A home filled through the service: the realistic workload of bench_transport.py


def _db_counts(db_path: Path) -> dict[str, int]:
    """Rows the benchmark reports (learned kinds: active rows only), read while the service runs (WAL)."""
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        counts = {
            table: int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            for table in ("sessions", "episodes", "traces")
        }
        for table in ("policies", "skills", "world_models"):
            counts[table] = int(conn.execute(f"SELECT count(*) FROM {table} WHERE status = 'active'").fetchone()[0])
    return counts


@dataclass
class Fill:
    build: BuildReport
    client: ServiceClient
    workload: WorkloadReport
    flush_s: float
    stages: dict[str, Any]
    profiler: Profiler
    others: Others


def fill_through_service(home: Path, steps: int, env: dict[str, str], profile: str | None, rate: int) -> Fill:
    """Spawn the service on an empty home and drive the realistic workload into it (8 hosts, tasks of five
    turns, verdicts on every fourth task, learning as `env` says), then `memory.flush`. The service keeps
    running: the queries are timed in the process that learned."""
    started = time.perf_counter()
    client = ServiceClient.spawn(home, env=env)
    client.call("core.health", timeout=120)
    session = client.call("session.open", {"agent": AGENT})["sessionId"]
    client.call("turn.start", {"agent": AGENT, "sessionId": session, "userText": "warm up", "ts": 1}, timeout=120)
    proc = client.process
    assert proc is not None
    profiler = Profiler(profile, proc.pid, rate)
    others = Others(proc.pid)
    with profiler.phase("turn_end"), others.phase("workload"):
        work = drive_workload(client, steps, seed=5)
    flush_started = time.perf_counter()
    client.call("memory.flush", timeout=600)
    flush_s = time.perf_counter() - flush_started
    stages = stage_table(client.call("core.health"))
    db_path = home / "memos.db"
    size = sum(p.stat().st_size for p in home.glob("memos.db*")) / 2**20
    how = f"{work.steps:,} steps through the service, {work.steps_per_s:.1f} steps/s, then memory.flush {flush_s:.1f} s"
    build = BuildReport(time.perf_counter() - started, size, _db_counts(db_path), None, how)
    return Fill(build, client, work, flush_s, stages, profiler, others)


def workload_queries(count: int, seed: int) -> list[Query]:
    """New requests in the workload's language (12 words of one of its task families)."""
    rng = random.Random(seed)
    workload = Workload(seed, 0)
    return [Query(workload.query(rng), -1) for _ in range(count)]


# ---------------------------------------------------------------------------------------------------------
# Report


def load_average() -> str:
    """Other processes on the machine skew latencies: say how busy it was."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min)"


def p95_target(n: int) -> float | None:
    eligible = [size for size in P95_TARGET_MS if size >= n]
    return P95_TARGET_MS[min(eligible)] if eligible else None


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def dist(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"p50 {pct(values, 50):.1f}  p95 {pct(values, 95):.1f} ms (n={len(values)})"


def report(
    n: int, build: BuildReport, service: ServiceReport, comps: Components, n_queries: int, backend: str = "sqlite"
) -> None:
    c = build.counts
    print()
    print(
        f"=== {n:,} traces on {backend} — {c['episodes']:,} episodes, {c['sessions']:,} sessions, "
        f"{c['policies']:,} policies, {c['skills']:,} skills, {c['world_models']:,} world models ==="
    )
    vocabulary = f", vocabulary {len(build.corpus.vocab.words):,} words" if build.corpus else ""
    print(f"build ({build.how}): {build.seconds:.1f} s, database {build.db_mib:.0f} MiB{vocabulary}")
    spawn = (
        "n/a (the service that filled the home)" if math.isnan(service.spawn_s) else f"{service.spawn_s * 1000:.0f} ms"
    )
    print(
        f"service: spawn → core.health {spawn}; first turn.start {service.first_turn_s:.2f} s "
        f"(model + vector index load); warm-up turn.start p50 {pct(service.warmup_ms, 50):.1f} ms"
    )
    ts, ms = service.turn_start, service.search
    target = p95_target(n)
    for label, timing in (
        ("every turn a new task, 2 h apart", ts),
        ("conversation, turns 30 s apart", service.follow_up),
    ):
        print(f"turn.start    ({n_queries} sequential; {label}): {timing.latency_line()}")
        print(f"              {timing.hits_line()}")
        print(f"              {timing.tiers_line()}")
        print(f"              {timing.split_line()}")
        if target is not None:
            p95 = pct(timing.wall_ms, 95)
            print(
                f"              target p95 ≤ {target:.0f} ms at {n:,} traces: {verdict(p95 <= target)} ({p95:.1f} ms)"
            )
        outside = [w - s for w, s in zip(timing.wall_ms, timing.service_ms, strict=True)]
        print(
            f"              outside retrieval (wall − stats.totalMs: routing write, JSON, stdio): "
            f"p50 {pct(outside, 50):.1f} ms, p95 {pct(outside, 95):.1f} ms"
        )
    print(f"memory.search ({n_queries} sequential): {ms.latency_line()}")
    print(f"              {ms.hits_line()}")
    print(f"              {ms.tiers_line()}")
    print(f"              {ms.split_line()}")
    if service.ingest_ms:
        print(
            f"ingest        ({len(service.ingest_ms)} sequential turn.end calls on the full home): "
            f"{service.ingest_steps_per_s:.1f} steps/s; turn.end {dist(service.ingest_ms)}"
        )
    rss_line = (
        f"service RSS after the queries: {service.rss_mib:,.0f} MiB; after its next heap trim: "
        f"{service.settled_rss_mib:,.0f} MiB"
    )
    if n <= RSS_TARGET_MAX_TRACES:
        ok = service.rss_mib <= RSS_TARGET_MIB
        rss_line += f"  (target ≤ {RSS_TARGET_MIB:.0f} MiB at ≤ 100k traces: {verdict(ok)})"
    print(rss_line)
    print(f"machine: {load_average()} after this size")
    print(
        "trace-tier components in-process, same query texts, one at a time:"
        f"\n  query embedding (real model):      {dist(comps.embed_ms)}"
        f"\n  vector search, 2 indexes, k=20:    {dist(comps.vector_ms)}  (index load {comps.index_load_ms:.0f} ms)"
        f"\n  full text, word, limit 20:         {dist(comps.fts_word_ms)}"
        f"\n  full text, trigram (identifiers):  {dist(comps.fts_trigram_ms)}"
        f"\n  exact identifiers (trigram match): {dist(comps.exact_ms)}"
    )
    if comps.note:
        print(f"  {comps.note}")


def floor_report(
    n: int, service: ServiceReport, floor_ms: list[float], vectors: int, learning: str, info: dict[str, Any]
) -> dict[str, Any]:
    """turn.start beside its floor (embed the query + exact top-20 over every stored vector), ratios first."""
    ts = service.turn_start.wall_ms
    ratios = {
        "turnStartP50": round(pct(ts, 50) / pct(floor_ms, 50), 2),
        "turnStartP95": round(pct(ts, 95) / pct(floor_ms, 95), 2),
        "conversationP50": round(pct(service.follow_up.wall_ms, 50) / pct(floor_ms, 50), 2),
        "conversationP95": round(pct(service.follow_up.wall_ms, 95) / pct(floor_ms, 95), 2),
    }
    print(f"service ÷ floor (learning {learning}, {n:,} traces) — {machine_line(info)}")
    for label, values, r50, r95 in (
        ("turn.start, new task", ts, ratios["turnStartP50"], ratios["turnStartP95"]),
        ("turn.start, conversation", service.follow_up.wall_ms, ratios["conversationP50"], ratios["conversationP95"]),
    ):
        print(
            f"  {label:<25} p50 {pct(values, 50):6.1f} ÷ {pct(floor_ms, 50):5.1f} = {r50:.2f};  "
            f"p95 {pct(values, 95):6.1f} ÷ {pct(floor_ms, 95):5.1f} = {r95:.2f}"
        )
    print(
        f"  floor = the query embedded alone + exact numpy top-20 over {vectors:,} vectors, same model loaded the "
        f"plain way; target p95 ≤ 2× at 10k: {'met' if ratios['turnStartP95'] <= 2 else 'NOT met'}"
    )
    return {"floorTurnStartMs": dist_json(floor_ms), "floorVectors": vectors, "ratios": ratios}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learning", choices=("on", "off"), default="on", help="off: lightweight mode")
    parser.add_argument(
        "--corpus",
        choices=("service", "synthetic"),
        default="service",
        help="service: fill through the running service (realistic workload); synthetic: bulk-built database",
    )
    parser.add_argument("--steps", type=int, help="traces to store (service corpus default 10000; synthetic: --sizes)")
    parser.add_argument("--sizes", default="10000,100000", help="synthetic corpus: comma-separated trace counts")
    parser.add_argument("--queries", type=int, default=200, help="timed calls per method and size")
    parser.add_argument("--quick", action="store_true", help="1,000 steps (synthetic: 2,000 traces) and 50 queries")
    parser.add_argument("--keep", metavar="DIR", help="build the data homes under DIR and keep them")
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--profile", metavar="DIR", help="record the service with py-spy per phase into DIR")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument(
        "--storage-url",
        metavar="URL",
        help="synthetic corpus: run every size on SQLite and then on this PostgreSQL server (a database per size, "
        "created and dropped here; `pgserver` starts a private throw-away server)",
    )
    args = parser.parse_args()
    service_corpus = args.corpus == "service"
    if args.storage_url and service_corpus:
        parser.error("--storage-url needs --corpus synthetic")
    if args.storage_url and args.storage_url != "pgserver" and not is_postgres(args.storage_url):
        parser.error("--storage-url must be a postgresql+psycopg:// URL or `pgserver`")
    if args.steps:
        sizes = [args.steps]
    elif service_corpus:
        sizes = [1_000 if args.quick else 10_000]
    else:
        sizes = [2_000] if args.quick else [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    n_queries = 50 if args.quick else args.queries
    learning = args.learning == "on"
    info = machine()
    print(
        f"memos-bridge retrieval benchmark ({'quick' if args.quick else 'full'}): {args.corpus} corpus, learning "
        f"{args.learning}, sizes {sizes}, {n_queries} queries"
    )
    print(machine_line(info))
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
        "machine": info,
        "learning": args.learning,
        "corpus": args.corpus,
        "stepVectors": load_settings(tempfile.gettempdir()).embedding.step_vectors,  # as the homes read it
        "sizes": [],
    }
    started = time.perf_counter()
    backends = ["sqlite", "postgresql"] if args.storage_url else ["sqlite"]
    server_url = postgres_server(args.storage_url) if args.storage_url else contextlib.nullcontext(None)
    with server_url as server:
        postgres_homes = PostgresHomes(server) if server else None
        try:
            for n in sizes:
                for backend in backends:
                    results["sizes"].append(
                        measure_size(n, backend, postgres_homes, args, n_queries, learning, info, service_corpus)
                    )
        finally:
            if postgres_homes is not None:
                postgres_homes.close()
    print(f"\ntotal run time {time.perf_counter() - started:.0f} s; {load_average()}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


def measure_size(
    n: int,
    backend: str,
    postgres_homes: PostgresHomes | None,
    args: argparse.Namespace,
    n_queries: int,
    learning: bool,
    info: dict[str, Any],
    service_corpus: bool,
) -> dict[str, Any]:
    """Build (or fill) one home of `n` traces on `backend`, time the service on it and its floor."""
    with contextlib.ExitStack() as stack:
        if args.keep:
            home = Path(args.keep) / f"home-{n}-{backend}"
            home.mkdir(parents=True, exist_ok=False)
        else:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-retrieval-{n}-")))
        url = sqlite_url(home)
        if backend == "postgresql":
            assert postgres_homes is not None
            url = postgres_homes.create(f"memos_bench_{n}")
            if not args.keep:
                stack.callback(postgres_homes.drop, url)
        entry: dict[str, Any] = {"traces": n, "backend": backend}
        if service_corpus:
            fill = fill_through_service(home, n, {} if learning else LIGHTWEIGHT, args.profile, args.rate)
            build, profiler = fill.build, fill.profiler
            queries = workload_queries(n_queries, seed=1000 + n)
            searches = workload_queries(n_queries, seed=2000 + n)
            warm = [q.text for q in workload_queries(WARMUP_CALLS, seed=11)]
            entry.update(workload=fill.workload.as_json(), flushS=round(fill.flush_s, 2), stages=fill.stages)
            others = fill.others
            service = run_service(
                home, 10**13, warm, queries, searches, client=fill.client, profiler=profiler, others=others
            )
            model = FloorModel(home)
            query_vecs: FloatMatrix = model.embed([q.text for q in queries])
        else:
            build = build_database(home, n, url)
            assert build.corpus is not None
            corpus = build.corpus
            queries = make_queries(corpus, n_queries, seed=1000 + n)
            searches = make_queries(corpus, n_queries, seed=2000 + n)
            warm_rng = random.Random(11)
            warm = [corpus.vocab.text(warm_rng.randint(6, 14), warm_rng.randrange(TOPICS)) for _ in range(20)]
            service = run_service(
                home,
                corpus.last_ts + 24 * HOUR_MS,
                warm,
                queries,
                searches,
                env={**(HOLD_LEARNING if learning else LIGHTWEIGHT), "MEMOS_BRIDGE_STORAGE__URL": url},
                others=(others := Others()),
            )
            profiler = Profiler(None, 0, args.rate)
            model = FloorModel(home)
            query_vecs = corpus.vectors([q.topic for q in queries], mix=2.0)
        comps = time_components(home, queries, query_vecs, url)
        report(n, build, service, comps, n_queries, backend)
        with others.phase("floor"):
            matrix = stored_vectors(url)
            floor_ms = turn_start_floor(model, matrix, [q.text for q in queries])
        vectors = int(matrix.shape[0])
        del matrix, model
        print()
        entry.update(floor_report(n, service, floor_ms, vectors, args.learning, info))
        print(f"  {others.line()}")
        entry["othersCpu"] = others.phases
        entry.update(
            counts=build.counts,
            buildS=round(build.seconds, 1),
            rssMiB=round(service.rss_mib),
            rssSettledMiB=None if math.isnan(service.settled_rss_mib) else round(service.settled_rss_mib),
            turnStartMs=dist_json(service.turn_start.wall_ms),
            turnStartServiceTotalMs=dist_json(service.turn_start.service_ms),
            conversationMs=dist_json(service.follow_up.wall_ms),
            searchMs=dist_json(service.search.wall_ms),
            dbMiB=round(build.db_mib, 1),
            ingestStepsPerS=round(service.ingest_steps_per_s, 1),
            ingestTurnEndMs=dist_json(service.ingest_ms),
            components={
                "embedMs": dist_json(comps.embed_ms),
                "vectorMs": dist_json(comps.vector_ms),
                "ftsWordMs": dist_json(comps.fts_word_ms),
            },
        )
        if entry.get("stages"):
            print()
            print_stages(
                "learning chain per episode and stage, during the workload (last 256 runs; CPU counts the turns "
                "captured meanwhile):",
                entry["stages"],
                "wallMs",
                "cpuMs",
            )
        for name, summary in profiler.summaries.items():
            print()
            print_profile(name, summary)
        entry["profiles"] = profiler.summaries
        return entry


if __name__ == "__main__":
    raise SystemExit(main())
