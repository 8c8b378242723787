"""Adapter settings: a small JSON file in the Hermes home (written by `hermes memory setup`) plus env overrides.

The service's own settings (retrieval budgets, LLM provider, learning windows) live in the memos-bridge data
home's `config.toml` and `MEMOS_BRIDGE_*` variables, which the spawned service inherits; this file only holds
what the *adapter* decides: where the data home is, whether to spawn or connect to a daemon, and how long the
host may be kept waiting.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CONFIG_FILE = "memos-bridge.json"
HOST_ABANDON_S = 8.0
"""Hermes' MemoryManager gives up on an external provider's prefetch after 8 s."""
MAX_PREFETCH_S = 7.0
"""Our bound on the prefetch wait: always under the host's abandonment, so we return first."""


@dataclass(frozen=True)
class AdapterConfig:
    """What the provider needs to reach the service and how long it may block the host."""

    home: Path
    tcp: str | None = None
    token: str | None = None
    prefetch_timeout_s: float = 3.0
    write_timeout_s: float = 75.0
    keepalive_s: float = 10.0
    idle_close_s: float = 60.0
    max_injected_chars: int = 6000
    agent: str = "hermes"
    #: a project workspace for this profile's memories (None: profile-wide); lessons learnt in a workspace are
    #: that project's and come back for its other files and tasks (docs/retrieval.md, the work gate)
    workspace: str | None = None

    @property
    def runtime_key(self) -> str:
        """One shared service per data home (spawned) or per daemon address (TCP), per host process."""
        return f"tcp://{self.tcp}" if self.tcp else str(self.home.expanduser().resolve())

    def tcp_address(self) -> tuple[str, int]:
        assert self.tcp is not None
        host, _, port = self.tcp.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


def _float(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def read_file(hermes_home: str | Path) -> dict[str, Any]:
    """The saved adapter settings (`<hermes_home>/memos-bridge.json`), `{}` when absent or unreadable."""
    path = Path(hermes_home) / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def load_config(
    hermes_home: str | Path, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> AdapterConfig:
    """Settings from, by increasing precedence: defaults, the saved file, the environment, `overrides`.

    Data home: `MEMOS_BRIDGE_HOME`, else `home` in the file, else `<hermes_home>/memos-bridge` — per Hermes
    profile, so two profiles never share memories unless told to.
    """
    environ = os.environ if env is None else env
    values: dict[str, Any] = {**read_file(hermes_home)}
    mapping = {
        "MEMOS_BRIDGE_HOME": "home",
        "MEMOS_HERMES_TCP": "tcp",
        "MEMOS_BRIDGE_TOKEN": "token",
        "MEMOS_HERMES_PREFETCH_TIMEOUT_S": "prefetch_timeout_s",
        "MEMOS_HERMES_WRITE_TIMEOUT_S": "write_timeout_s",
        "MEMOS_HERMES_KEEPALIVE_S": "keepalive_s",
        "MEMOS_HERMES_IDLE_CLOSE_S": "idle_close_s",
        "MEMOS_HERMES_WORKSPACE": "workspace",
    }
    for variable, key in mapping.items():
        if environ.get(variable):
            values[key] = environ[variable]
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    home = Path(str(values.get("home") or Path(hermes_home) / "memos-bridge")).expanduser()
    prefetch = min(max(_float(values.get("prefetch_timeout_s"), 3.0), 0.1), MAX_PREFETCH_S)
    return AdapterConfig(
        home=home,
        tcp=str(values["tcp"]) if values.get("tcp") else None,
        token=str(values["token"]) if values.get("token") else None,
        prefetch_timeout_s=prefetch,
        write_timeout_s=max(_float(values.get("write_timeout_s"), 75.0), 1.0),
        keepalive_s=max(_float(values.get("keepalive_s"), 10.0), 0.5),
        idle_close_s=max(_float(values.get("idle_close_s"), 60.0), 0.0),
        max_injected_chars=int(_float(values.get("max_injected_chars"), 6000)),
        agent=str(values.get("agent") or "hermes"),
        workspace=str(values["workspace"]).strip()[:200] or None if values.get("workspace") else None,
    )


CONFIG_SCHEMA: list[dict[str, Any]] = [
    {
        "key": "home",
        "description": "memos-bridge data home (memories, config.toml); default <HERMES_HOME>/memos-bridge",
        "required": False,
    },
    {
        "key": "tcp",
        "description": "HOST:PORT of a running `memos-bridge serve --tcp` daemon; empty = spawn one per process",
        "required": False,
    },
    {
        "key": "token",
        "description": "shared token of that daemon (only for non-loopback TCP)",
        "secret": True,
        "required": False,
        "env_var": "MEMOS_BRIDGE_TOKEN",
    },
    {
        "key": "prefetch_timeout_s",
        "description": f"longest wait for recall before a turn, seconds (≤ {MAX_PREFETCH_S:g}; Hermes gives up at 8)",
        "required": False,
        "default": "3.0",
    },
    {
        "key": "workspace",
        "description": "a project workspace id for this profile's memories (its lessons are one project's and come "
        "back for the project's other files); empty = profile-wide",
        "required": False,
    },
]


def save_config(values: Mapping[str, Any], hermes_home: str | Path) -> Path:
    """Merge non-secret values into `<hermes_home>/memos-bridge.json` (secrets go to Hermes' .env)."""
    path = Path(hermes_home) / CONFIG_FILE
    current = read_file(hermes_home)
    for key, value in values.items():
        if key == "token":
            continue
        if value in (None, ""):
            current.pop(key, None)
        else:
            current[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
