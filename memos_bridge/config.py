"""One settings model that holds every default of the service.

Sources, lowest to highest precedence:
1. the defaults below;
2. `<home>/config.toml` (TOML; sections mirror the nested models, e.g. `[storage] url = "..."`);
3. environment variables `MEMOS_BRIDGE_<SECTION>__<FIELD>` (e.g. `MEMOS_BRIDGE_STORAGE__URL`), plus the
   short forms `MEMOS_BRIDGE_HOME` and `MEMOS_BRIDGE_TOKEN`;
4. explicit overrides passed by the CLI (e.g. `--home`, `--tcp`).

The data home is `MEMOS_BRIDGE_HOME` or `~/.memos-bridge/` and holds `config.toml`, `memos.db` and `logs/`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.rules.secrets import compile_allow, compile_extra_rules

ENV_PREFIX = "MEMOS_BRIDGE_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TransportSettings(_Section):
    max_line_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest accepted request line.")
    host_request_timeout_s: float = Field(65.0, gt=0, description="Default wait for a host.llm.complete reply.")
    shutdown_timeout_s: float = Field(15.0, gt=0, description="Bound on orderly shutdown after EOF.")
    token: str | None = Field(None, description="Shared secret for TCP; required on non-loopback binds.")
    max_concurrent_requests: int = Field(256, ge=1, description="In-flight requests per connection.")
    heap_trim_interval_s: float = Field(
        30.0,
        ge=0,
        description="While the service works, return the C heap's free pages to the system this often, in seconds "
        "(glibc; keeps resident memory near what the service holds). 0: never.",
    )


class StorageSettings(_Section):
    url: str | None = Field(None, description="SQLAlchemy URL; default sqlite:///<home>/memos.db.")
    busy_timeout_ms: int = Field(5000, ge=0)
    read_threads: int = Field(4, ge=1, description="Concurrent read transactions.")

    @field_validator("url")
    @classmethod
    def _usable_url(cls, value: str | None) -> str | None:
        """Refuse, before anything is created, a URL that cannot work: unparsable, a driver that is not
        installed, or a SQLite file whose folder does not exist (a typo would otherwise create a new home)."""
        if value is None:
            return None
        return check_storage_url(value)


class EmbeddingSettings(_Section):
    provider: Literal["fastembed", "hash"] = Field(
        "fastembed", description="fastembed (real model) or hash (deterministic, for tests of other parts)."
    )
    model: str = Field(
        "local/all-MiniLM-L6-v2-int8",
        description="The packaged offline MiniLM, or any fastembed model name with model_dir set.",
    )
    model_dir: str | None = Field(None, description="Folder of a local fastembed model (specific_model_path).")
    dim: int = Field(384, ge=8)
    max_length: int = Field(256, ge=16, description="Tokens per text before truncation.")
    batch_size: int = Field(32, ge=1)
    cache_size: int = Field(20_000, ge=0, description="Entries of the role-aware LRU cache.")
    threads: int | None = Field(None, ge=1, description="ONNX runtime threads (default: runtime's choice).")
    onnx_spinning: bool = Field(
        False,
        description="Let ONNX Runtime's threads busy-wait between operators (off: on few cores they starve the "
        "service's own threads).",
    )
    onnx_memory_arena: bool = Field(
        False,
        description="Let ONNX Runtime keep its own memory arena (on: one batch of long texts can keep hundreds of "
        "MiB resident for good; off: each run's buffers are freed, at no measured cost in speed).",
    )
    step_vectors: Literal["one", "two"] = Field(
        "one",
        description="Model runs per captured step: one (the step's summary, or a said line's words, serves the "
        "summary and the action channels: capture costs about half) or two (the action line embedded apart).",
    )


class CaptureSettings(_Section):
    max_text_chars: int = Field(4000, ge=200)
    max_tool_output_chars: int = Field(2000, ge=100)
    max_tool_input_chars: int = Field(2000, ge=100)
    summary_max_chars: int = Field(140, ge=40)
    max_tags: int = Field(8, ge=1)
    max_error_signatures: int = Field(6, ge=1)
    concurrency: int = Field(
        2,
        ge=1,
        description="turn.end captures processed at once; the rest wait their turn, so capture under many "
        "hosts cannot crowd out the turn.start calls hosts are blocked on.",
    )


class SessionSettings(_Section):
    merge_max_gap_ms: int = Field(
        7_200_000,
        ge=0,
        description="Gap after which a turn starts a new episode; at startup, open episodes with steps idle "
        "longer than this are finalised and learned from.",
    )
    max_turns_per_episode: int = Field(30, ge=0, description="User turns per episode (0 = no cap).")
    turn_key_cache: int = Field(4096, ge=16, description="Remembered turn.start results for turnKey retries.")
    relation_llm: bool = Field(
        True, description="Ask the LLM (when one is available) about turns the relation heuristics are unsure of."
    )
    classify_timeout_ms: int = Field(5000, ge=100, description="Relation classification LLM timeout (then heuristic).")
    stale_topic_ms: int = Field(
        14_400_000,
        ge=0,
        description="Open episodes idle this long are finalised by the running sweep (default 4 h; idle since "
        "their last use in this process, else since their stored last activity).",
    )


class RetrievalSettings(_Section):
    tier1_top_k: int = Field(3, ge=0, description="Skills injected per turn.")
    tier2_top_k: int = Field(5, ge=0, description="Traces, past tasks and experiences injected per turn.")
    tier3_top_k: int = Field(2, ge=0, description="World models injected per turn.")
    min_trace_sim: float = Field(0.25, ge=0, le=1)
    keyword_top_k: int = Field(20, ge=1)
    snippet_max_chars: int = Field(640, ge=80)
    total_max_chars: int = Field(6000, ge=200)
    total_max_tokens: int | None = Field(
        None, ge=50, description="Budget of the injected block in approximate tokens (chars/4); the tighter wins."
    )
    skill_injection_mode: Literal["summary", "full"] = Field(
        "summary", description="summary = name, first paragraph and a memos_skill_get hint; full = the whole guide."
    )
    render_mode: Literal["full", "compact"] = Field(
        "compact",
        description="compact (default) = the recalled lessons first, in their own words, then what was remembered, "
        "this task's repairs, skills and environment facts while compact_max_chars lasts, nothing when no lesson "
        "fits; full = every section with ids, scope lines, past steps and tool hints (for people and large models).",
    )
    compact_max_chars: int = Field(800, ge=200, description="Budget of a compact injected block.")
    lesson_min_similarity: float = Field(
        0.6,
        ge=0,
        le=1,
        description="A lesson whose subject terms the request does not name is recalled only at this cosine or "
        "above (lessons are recalled by subject).",
    )
    rrf_k: int = Field(60, ge=1)
    explain_log: str | None = Field(
        None,
        description="A file each turn's recall decisions are appended to, one JSON line per turn: every candidate "
        "lesson with the gate that kept or dropped it, and which were injected (for finding where a lesson was "
        "lost; `scripts/eval_lessons.py --explain`). Unset = not written.",
    )
    default_deadline_ms: int = Field(6000, ge=50, description="Budget when turn.start gives no deadlineAt.")
    llm_filter: bool = Field(
        False, description="Ask the LLM which candidates are relevant (needs an LLM; falls back to a score cutoff)."
    )
    llm_filter_max_keep: int = Field(4, ge=1)
    llm_filter_min_candidates: int = Field(2, ge=1)
    llm_filter_timeout_ms: int = Field(4000, ge=100)
    intent_llm: bool = Field(False, description="Let the LLM classify ambiguous turns (heuristics otherwise).")

    @property
    def char_budget(self) -> int:
        if self.total_max_tokens is None:
            return self.total_max_chars
        return min(self.total_max_chars, self.total_max_tokens * 4)


class LLMSettings(_Section):
    """Which model answers the service's own prompts, and the limits on how it is called.

    Every stage that uses an LLM has a deterministic path, so `none` is a complete configuration; the
    limits below exist because background stages call the model without a human watching.
    """

    provider: Literal["host", "openai_compatible", "none"] = Field(
        "host",
        description="host = ask the connected host (host.llm.complete); openai_compatible = any "
        "/v1/chat/completions endpoint (Ollama, vLLM, LM Studio, llama.cpp, hosted); none = deterministic paths.",
    )
    base_url: str | None = Field(
        None,
        description="openai_compatible endpoint base, OpenAI-SDK style, e.g. http://127.0.0.1:11434/v1 "
        "(…/chat/completions is appended unless already there).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="Bearer key for openai_compatible (also MEMOS_BRIDGE_LLM__API_KEY); never logged or shown.",
    )
    model: str | None = Field(
        None, description="Model name sent to openai_compatible; unset = the server's loaded model (llama.cpp)."
    )
    timeout_ms: int = Field(45_000, ge=100, description="Deadline of one LLM call, retries included.")
    max_retries: int = Field(
        3,
        ge=0,
        le=10,
        description="Retries on 429/5xx/dropped connections (openai_compatible) and on a host's rate limit; "
        "each counts against the LLM budget.",
    )
    retry_backoff_ms: int = Field(500, ge=0, description="First back-off delay; doubles per retry, with jitter.")
    retry_backoff_max_ms: int = Field(
        20_000, ge=0, description="Longest single back-off, also the cap on a server's Retry-After."
    )
    max_tokens: int = Field(1024, ge=16, description="Default completion cap when a prompt sets none.")
    json_schema_mode: bool = Field(
        True,
        description="Send the output schema as response_format json_schema (strict); false = json_object. "
        "A server that answers 400 to it is stepped down automatically.",
    )
    fallback_to_host: bool = Field(
        True, description="When openai_compatible is unavailable, paused or failing, ask the host instead."
    )
    breaker_failure_threshold: int = Field(
        5, ge=1, description="Consecutive transient failures (timeouts, 429, 5xx) that pause a provider."
    )
    breaker_cooldown_s: float = Field(60.0, gt=0, description="Pause after transient failures, before a probe.")
    breaker_terminal_cooldown_s: float = Field(
        600.0, gt=0, description="Pause after a terminal error (bad key 401/403, billing 402/quota, unknown model)."
    )
    budget_per_episode: int = Field(
        60, ge=0, description="LLM calls allowed per episode, retries and fallbacks included (0 = no limit)."
    )
    budget_per_hour: int = Field(
        600, ge=0, description="LLM calls allowed per rolling hour, in every mode (0 = no limit)."
    )

    @model_validator(mode="after")
    def _needs_endpoint(self) -> LLMSettings:
        if self.provider == "openai_compatible" and not self.base_url:
            raise ValueError("provider openai_compatible needs base_url (e.g. http://127.0.0.1:11434/v1)")
        return self


class LoggingSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    file: bool = Field(True, description="Also log to <home>/logs/memos-bridge.log (rotating).")
    max_bytes: int = Field(5 * 1024 * 1024, ge=1024)
    backups: int = Field(3, ge=0)


class RewardSettings(_Section):
    gamma: float = Field(0.9, ge=0, le=1, description="Discount of the value back-propagation.")
    half_life_days: float = Field(30.0, gt=0, description="Half-life of a trace's priority.")
    alpha_floor: float = Field(0.4, ge=0, le=1, description="Reflection weights below this count as 0.")
    llm_scoring: bool = Field(True, description="Score R_human and reflections with the LLM when available.")
    feedback_window_s: float = Field(
        30.0, ge=0, description="Wait after an episode ends for feedback before scoring it (0 = score at once)."
    )


class L2Settings(_Section):
    min_similarity: float = Field(0.65, ge=0, le=1, description="Cosine for a trace to join an existing policy.")
    min_trace_value: float = Field(0.005, description="Traces below this value are not policy evidence.")
    min_episodes_for_induction: int = Field(1, ge=1, description="Distinct episodes a pool bucket needs.")
    candidate_ttl_days: float = Field(30.0, gt=0, description="How long an unmatched trace waits in the pool.")
    gain_ema_alpha: float = Field(0.4, ge=0, le=1, description="Weight of the newest gain estimate.")
    archive_gain: float = Field(-0.05, description="An active policy whose gain falls below this is archived.")
    min_support: int = Field(1, ge=0, description="Support a candidate policy needs to become active.")
    min_gain: float = Field(0.02, description="Gain a candidate policy needs to become active.")
    use_llm: bool = Field(True, description="Draft policies with the LLM when available (else the rule inducer).")
    trace_char_cap: int = Field(3000, ge=200, description="Evidence characters sent to the induction prompt.")


class RepairSettings(_Section):
    failure_threshold: int = Field(3, ge=1, description="Failures of one tool that make a burst.")
    failure_window: int = Field(5, ge=1, description="Recent tool outcomes of a session looked at.")
    value_delta: float = Field(
        0.5, ge=0, description="Value gap a burst's good evidence needs over its bad to be named as what worked."
    )
    cooldown_ms: int = Field(60_000, ge=0, description="Minimum time between two repairs of the same context.")
    use_llm: bool = Field(True, description="Word repairs with the LLM when available (else templates).")
    guidance_ttl_ms: int = Field(
        3_600_000, ge=0, description="How long a fresh repair is injected into the session's next turns."
    )


class SkillSettings(_Section):
    """Skill crystallisation and lifecycle (reference §6.7 and §6.14; success anchors from issue 5)."""

    min_support: int = Field(1, ge=0, description="Support an experience needs before it can anchor a skill.")
    min_gain: float = Field(0.02, description="Gain an experience needs before it can anchor a skill.")
    use_llm: bool = Field(True, description="Draft skills with the LLM when available (else the anchor's template).")
    evidence_limit: int = Field(6, ge=1, description="Evidence traces packed into a draft and its verifier.")
    trace_char_cap: int = Field(500, ge=80, description="Characters kept of each evidence trace.")
    verifier_coverage: float = Field(
        0.5, ge=0, le=1, description="Share of the tools a draft names that the evidence must show."
    )
    verifier_resonance: float = Field(
        0.5, ge=0, le=1, description="Share of a draft's steps that must be grounded in the evidence text."
    )
    eta_delta: float = Field(0.1, ge=0, le=1, description="Reliability added when a human restores a skill.")
    archive_eta: float = Field(0.1, ge=0, le=1, description="A tried skill whose reliability falls below is archived.")
    min_eta_for_retrieval: float = Field(
        0.1, ge=0, le=1, description="Reliability floor a restored skill is lifted to (retrieval's floor)."
    )
    promote_support: int = Field(
        2, ge=1, description="Support of its anchors that makes a candidate skill active without a passed trial."
    )
    family_similarity: float = Field(
        0.5, ge=0, le=1, description="Cosine that puts an experience in a skill's task family on its own."
    )
    family_tag_similarity: float = Field(
        0.2, ge=0, le=1, description="Cosine enough for an experience sharing a tag or source episode."
    )


class DomainSpec(_Section):
    """One domain (task family or engineering area) that world models group experiences by."""

    label: str = Field(..., min_length=1, description="Human name used in world-model titles.")
    aliases: list[str] = Field(
        default_factory=list, description="Experience tags (besides the key) that mean this domain."
    )
    patterns: list[str] = Field(
        default_factory=list, description="Regular expressions (case-insensitive) that detect it in text."
    )

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid pattern {pattern!r}: {exc}") from exc
        return value


def _default_domains() -> dict[str, DomainSpec]:
    """Most specific first (a task that uses Docker and Python belongs to the Docker world model). Task families
    of one's own (a filing format, a company's exports) are added with `[learning.world.extra_domains]`."""
    table: dict[str, tuple[str, list[str], list[str]]] = {
        "docker": ("Docker", ["dockerfile", "container", "alpine", "docker-compose"], [r"\bdocker(?:file)?\b"]),
        "kubernetes": ("Kubernetes", ["k8s", "kubectl", "helm"], [r"\bkubernetes\b|\bk8s\b|\bkubectl\b|\bhelm\b"]),
        "cloud": (
            "Cloud services",
            ["aws", "gcp", "azure", "s3", "terraform"],
            [r"\baws\b|\bgcp\b|\bazure\b|\bterraform\b"],
        ),
        "database": (
            "Databases",
            ["db", "sql", "postgres", "postgresql", "sqlite", "mysql"],
            [r"\bsql\b|\bpostgres(?:ql)?\b|\bsqlite\b|\bmysql\b|\bdatabase\b"],
        ),
        "python": ("Python", ["py", "pip", "python3", "venv"], [r"\bpython3?\b|\bpip3?\b|\bvenv\b|\.py\b"]),
        "node": (
            "Node.js",
            ["nodejs", "javascript", "typescript", "npm", "yarn", "pnpm"],
            [r"\bnode(?:\.?js)?\b|\bnpm\b|\byarn\b|\bpnpm\b|\btypescript\b|\bjavascript\b"],
        ),
        "rust": ("Rust", ["cargo", "rustc"], [r"\brust\b|\bcargo\b|\brustc\b"]),
        "go": ("Go", ["golang"], [r"\bgolang\b|\bgo (?:build|test|mod|run|get)\b"]),
        "java": ("Java", ["maven", "gradle", "jvm"], [r"\bjava\b|\bmaven\b|\bgradle\b|\bjvm\b"]),
        "git": ("Git", ["github", "gitlab"], [r"\bgit\b|\brebase\b|\bmerge conflict"]),
        "testing": (
            "Testing",
            ["test", "tests", "pytest", "jest", "unittest"],
            [r"\bpytest\b|\bunit tests?\b|\btest suite\b"],
        ),
        "network": (
            "Networking and HTTP",
            ["http", "https", "dns", "proxy", "api"],
            [r"\bhttps?\b|\bdns\b|\bproxy\b|\btls\b"],
        ),
        "shell": ("Shell", ["bash", "zsh", "sh"], [r"\bbash\b|\bzsh\b|\bshell\b"]),
    }
    return {
        key: DomainSpec(label=label, aliases=aliases, patterns=patterns)
        for key, (label, aliases, patterns) in table.items()
    }


class WorldSettings(_Section):
    """L3 world models: declarative environment knowledge abstracted from several experiences of one domain
    (reference §6.6 and §6.14; the domain table and mixed polarity from issue 5)."""

    enabled: bool = Field(True, description="Build world models after L2 in the learning chain.")
    use_llm: bool = Field(True, description="Abstract with the LLM when available (else the deterministic rules).")
    min_policies: int = Field(2, ge=1, description="Active experiences of one domain a world model needs.")
    min_policy_confidence: float = Field(0.45, ge=0, le=1, description="Confidence an experience needs to count.")
    min_policy_gain: float = Field(0.02, description="Gain an experience needs to count.")
    min_policy_support: int = Field(1, ge=0, description="Support an experience needs to count.")
    cluster_min_similarity: float = Field(
        0.3, ge=0, le=1, description="Cosine to the domain centroid for the strict cluster (else loose, damped)."
    )
    confidence_delta: float = Field(0.05, ge=0, le=1, description="Confidence added when new evidence merges in.")
    policy_overlap_merge: float = Field(
        0.6, ge=0, le=1, description="Share of shared experiences that makes a draft merge into a world model."
    )
    merge_min_similarity: float = Field(
        0.5, ge=0, le=1, description="Cosine of a draft to a same-domain world model that merges them."
    )
    min_confidence_for_retrieval: float = Field(
        0.2, ge=0, le=1, description="World models below this confidence are never injected."
    )
    max_policies: int = Field(24, ge=2, description="Experiences per domain considered (best first).")
    llm_policies: int = Field(12, ge=1, description="Experiences sent to the abstraction prompt.")
    policy_char_cap: int = Field(800, ge=100, description="Characters of one experience in the prompt.")
    max_entries: int = Field(8, ge=1, description="Entries kept per section (environment, inference, constraints).")
    body_max_chars: int = Field(2400, ge=200, description="Cap of the Markdown body.")
    domains: dict[str, DomainSpec] = Field(
        default_factory=_default_domains,
        description="Domain table, most specific first (replacing it drops the defaults).",
    )
    extra_domains: dict[str, DomainSpec] = Field(
        default_factory=dict, description="Domains added to the table, checked before the defaults."
    )


class LearningSettings(_Section):
    concurrency: int = Field(2, ge=1, description="Episodes whose learning chain may run at the same time.")
    refine_use_llm: bool = Field(
        True,
        description="Reword each typed experience with the LLM when available (feedback.refine); off: the rule "
        "draft as it is (a small local model spends its longest prompt here).",
    )
    refine_timeout_ms: int = Field(
        20_000,
        ge=1_000,
        description="Deadline of the LLM rewording of a typed experience (feedback.refine); the rule draft is "
        "used when it passes. It runs while feedback.submit drains the queue, so it is kept short; raise it for "
        "a slow local model (a 1.5B model on 2 CPU cores needs 30-60 s).",
    )
    reward: RewardSettings = Field(default_factory=lambda: RewardSettings())
    l2: L2Settings = Field(default_factory=lambda: L2Settings())
    repair: RepairSettings = Field(default_factory=lambda: RepairSettings())
    skill: SkillSettings = Field(default_factory=lambda: SkillSettings())
    world: WorldSettings = Field(default_factory=lambda: WorldSettings())


class StrengthSettings(_Section):
    """Evidence-typed memory strength, forgetting and pinning (seeds 003 and 004).

    Recall never raises strength; only evidence does (`memory.reinforce`). Idle memories decay in ranking and
    are archived (never deleted) after a long silence; pinned memories are exempt, and protected (user-authored
    or user-approved) memories cannot be pushed out of recall by failures.
    """

    verified_boost: float = Field(
        0.15, ge=0, le=1, description="Added by test_passed, diff_accepted and user_confirmed evidence."
    )
    failure_factor: float = Field(0.7, ge=0, le=1, description="Strength multiplier of failure evidence.")
    max_strength: float = Field(1.0, gt=0, le=1, description="Cap of strength.")
    recall_floor: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Memories weaker than this are not recalled. Decay stops at it, and failures never push a "
        "protected memory below it.",
    )
    idle_days: float = Field(14.0, gt=0, description="Days without access or evidence before decay applies.")
    decay_factor: float = Field(0.85, gt=0, le=1, description="Strength multiplier per decay run for idle memories.")
    archive_days: float = Field(
        90.0, gt=0, description="Days without access or evidence after which a memory is archived (restorable)."
    )
    decay_interval_s: float = Field(
        86_400.0, ge=0, description="How often the service runs the decay job (0 = only on memory.decay)."
    )
    decay_batch: int = Field(2000, ge=1, description="Rows updated per write transaction of the decay job.")


class RedactionSettings(_Section):
    """Secrets in what hosts send (tool output, replies, feedback) are replaced on the way in, before anything is
    stored, embedded, indexed, summarised, logged or sent to an LLM, by `[REDACTED:<kind>]`."""

    enabled: bool = Field(True, description="Redact credentials in every request's text (on by default).")
    patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Extra rules, kind → Python regex (a named group `secret` limits the replaced part), applied "
        "after the built-in ones.",
    )
    allow: list[str] = Field(
        default_factory=list,
        description="Regexes of values that are never redacted (a documented example key, a test fixture); a "
        "found secret that fully matches one is kept.",
    )

    @model_validator(mode="after")
    def _compile(self) -> RedactionSettings:
        compile_extra_rules(self.patterns)  # raises ValueError, reported as a configuration problem
        compile_allow(self.allow)
        return self


class McpSettings(_Section):
    """The MCP face (`memos-bridge mcp`) and the Claude Code hook commands."""

    namespace: str | None = Field(
        None,
        max_length=200,
        description="One shared workspace id for every project (default: one namespace per project folder).",
    )
    prompt_timeout_s: float = Field(
        8.0,
        gt=0,
        le=120,
        description="How long the prompt hook waits for recalled memories before letting the prompt through "
        "without them.",
    )


class Settings(_Section):
    home: Path = Field(default_factory=lambda: Path.home() / ".memos-bridge")
    lightweight: bool = Field(False, description="Capture + retrieval only (no reward, L2, L3, skills).")
    transport: TransportSettings = Field(default_factory=lambda: TransportSettings())
    storage: StorageSettings = Field(default_factory=lambda: StorageSettings())
    embedding: EmbeddingSettings = Field(default_factory=lambda: EmbeddingSettings())
    capture: CaptureSettings = Field(default_factory=lambda: CaptureSettings())
    session: SessionSettings = Field(default_factory=lambda: SessionSettings())
    retrieval: RetrievalSettings = Field(default_factory=lambda: RetrievalSettings())
    learning: LearningSettings = Field(default_factory=lambda: LearningSettings())
    strength: StrengthSettings = Field(default_factory=lambda: StrengthSettings())
    llm: LLMSettings = Field(default_factory=lambda: LLMSettings())
    logging: LoggingSettings = Field(default_factory=lambda: LoggingSettings())
    redaction: RedactionSettings = Field(default_factory=lambda: RedactionSettings())
    mcp: McpSettings = Field(default_factory=lambda: McpSettings())

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"

    @property
    def db_path(self) -> Path:
        return self.home / "memos.db"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def database_url(self) -> str:
        return self.storage.url or f"sqlite:///{self.db_path}"


_DRIVERS: dict[str, tuple[str, str]] = {
    "postgresql": ("psycopg", "pip install 'memos-bridge[postgres]'"),
    "postgresql+psycopg": ("psycopg", "pip install 'memos-bridge[postgres]'"),
}


def check_storage_url(value: str) -> str:
    """`value` when it is a usable storage URL; ValueError with the fix otherwise."""
    import importlib.util

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL ({exc}); e.g. sqlite:////path/to/memos.db") from exc
    needed = _DRIVERS.get(url.drivername)
    if needed is not None and importlib.util.find_spec(needed[0]) is None:
        raise ValueError(f"{url.drivername} needs the {needed[0]} driver: {needed[1]}")
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        folder = Path(url.database).expanduser().parent
        if not folder.is_dir():
            raise ValueError(f"the folder of the SQLite file does not exist: {folder}")
    elif url.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database {url.get_backend_name()!r}: use sqlite or postgresql")
    return value


def env_typos(env: Mapping[str, str]) -> list[str]:
    """Environment names that look like a setting written with one underscore where two separate a section
    (`MEMOS_BRIDGE_RETRIEVAL_TIER2_TOP_K` for `MEMOS_BRIDGE_RETRIEVAL__TIER2_TOP_K`): each with its fix."""
    sections = _section_models()
    hints: list[str] = []
    for name in env:
        if not name.startswith(ENV_PREFIX) or "__" in name:
            continue
        key = name[len(ENV_PREFIX) :].lower()
        for section, fields in sections.items():
            if key.startswith(section + "_") and key[len(section) + 1 :] in fields:
                fixed = f"{ENV_PREFIX}{section.upper()}__{key[len(section) + 1 :].upper()}"
                hints.append(f"{name} is not read; did you mean {fixed}?")
    return hints


def _section_models() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, info in Settings.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, _Section):
            out[name] = set(annotation.model_fields)
    return out


def default_home(env: Mapping[str, str]) -> Path:
    raw = env.get(ENV_PREFIX + "HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".memos-bridge"


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """`MEMOS_BRIDGE_SECTION__FIELD=value` → {section: {field: value}} (any depth); pydantic coerces strings."""
    out: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key == "token":
            out.setdefault("transport", {})["token"] = value
        elif key == "lightweight":
            out["lightweight"] = value
        elif "__" in key:
            *path, field = key.split("__")  # nested sections: LEARNING__REWARD__FEEDBACK_WINDOW_S
            target = out
            for part in path:
                target = target.setdefault(part, {})
            target[field] = value
    return out


def env_names(env: Mapping[str, str]) -> list[str]:
    """Names of the environment variables `load_settings` reads from `env` (the home, the token, the
    lightweight switch, every `MEMOS_BRIDGE_SECTION__FIELD`), sorted: where the settings came from, without
    the values (a token's name may be shown, its value never)."""
    names = []
    for name in env:
        key = name[len(ENV_PREFIX) :].lower() if name.startswith(ENV_PREFIX) else ""
        if key in ("home", "token", "lightweight") or "__" in key:
            names.append(name)
    return sorted(names)


def load_settings(
    home: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the effective settings; raises MemosError(config_invalid) with every problem listed."""
    env = os.environ if env is None else env
    home_path = Path(home).expanduser() if home is not None else default_home(env)
    data: dict[str, Any] = {}
    config_file = home_path / "config.toml"
    if config_file.is_file():
        try:
            data = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise MemosError(ErrorCode.CONFIG_INVALID, f"{config_file}: {exc}") from exc
    data = _deep_merge(data, _env_overrides(env))
    if overrides:
        data = _deep_merge(data, overrides)
    data["home"] = home_path
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors(include_url=False, include_context=False)
        ]
        raise MemosError(
            ErrorCode.CONFIG_INVALID, "invalid configuration: " + "; ".join(problems), {"problems": problems}
        ) from exc


def ensure_home(settings: Settings) -> None:
    """Create the data home and its logs folder (mode 700: memories are private)."""
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
