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
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memos_bridge.contract.errors import ErrorCode, MemosError

ENV_PREFIX = "MEMOS_BRIDGE_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TransportSettings(_Section):
    max_line_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest accepted request line.")
    host_request_timeout_s: float = Field(65.0, gt=0, description="Default wait for a host.llm.complete reply.")
    shutdown_timeout_s: float = Field(15.0, gt=0, description="Bound on orderly shutdown after EOF.")
    token: str | None = Field(None, description="Shared secret for TCP; required on non-loopback binds.")
    max_concurrent_requests: int = Field(256, ge=1, description="In-flight requests per connection.")


class StorageSettings(_Section):
    url: str | None = Field(None, description="SQLAlchemy URL; default sqlite:///<home>/memos.db.")
    busy_timeout_ms: int = Field(5000, ge=0)
    read_threads: int = Field(4, ge=1, description="Concurrent read transactions.")


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


class CaptureSettings(_Section):
    max_text_chars: int = Field(4000, ge=200)
    max_tool_output_chars: int = Field(2000, ge=100)
    max_tool_input_chars: int = Field(2000, ge=100)
    summary_max_chars: int = Field(140, ge=40)
    max_tags: int = Field(8, ge=1)
    max_error_signatures: int = Field(6, ge=1)


class SessionSettings(_Section):
    merge_max_gap_ms: int = Field(7_200_000, ge=0, description="Gap after which a turn starts a new episode.")
    max_turns_per_episode: int = Field(30, ge=0, description="User turns per episode (0 = no cap).")
    turn_key_cache: int = Field(4096, ge=16, description="Remembered turn.start results for turnKey retries.")


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
    rrf_k: int = Field(60, ge=1)
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
    provider: Literal["host", "none"] = Field(
        "host", description="host = ask the connected host (host.llm.complete); none = deterministic paths."
    )
    timeout_ms: int = Field(45_000, ge=100)


class LoggingSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    file: bool = Field(True, description="Also log to <home>/logs/memos-bridge.log (rotating).")
    max_bytes: int = Field(5 * 1024 * 1024, ge=1024)
    backups: int = Field(3, ge=0)


class Settings(_Section):
    home: Path = Field(default_factory=lambda: Path.home() / ".memos-bridge")
    lightweight: bool = Field(False, description="Capture + retrieval only (no reward, L2, L3, skills).")
    transport: TransportSettings = Field(default_factory=lambda: TransportSettings())
    storage: StorageSettings = Field(default_factory=lambda: StorageSettings())
    embedding: EmbeddingSettings = Field(default_factory=lambda: EmbeddingSettings())
    capture: CaptureSettings = Field(default_factory=lambda: CaptureSettings())
    session: SessionSettings = Field(default_factory=lambda: SessionSettings())
    retrieval: RetrievalSettings = Field(default_factory=lambda: RetrievalSettings())
    llm: LLMSettings = Field(default_factory=lambda: LLMSettings())
    logging: LoggingSettings = Field(default_factory=lambda: LoggingSettings())

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
    """`MEMOS_BRIDGE_SECTION__FIELD=value` → {section: {field: value}}; pydantic coerces the strings."""
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
            section, field = key.split("__", 1)
            out.setdefault(section, {})[field] = value
    return out


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
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors(include_url=False, include_context=False)
        ]
        raise MemosError(
            ErrorCode.CONFIG_INVALID, "invalid configuration: " + "; ".join(problems), {"problems": problems}
        ) from exc


def ensure_home(settings: Settings) -> None:
    """Create the data home and its logs folder (mode 700: memories are private)."""
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
