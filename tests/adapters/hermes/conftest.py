"""Fixtures for running the adapter inside the real hermes-agent package.

Hermes reads `HERMES_HOME` (config, plugins, logs) on every call, so each test that touches Hermes points it at
a temporary directory: a developer's real `~/.hermes` is never read or written. The host's LLM is stubbed at
Hermes' own boundary, `agent.auxiliary_client.call_llm`, which is what the provider's `host.llm.complete`
handler reaches through `agent.plugin_llm.PluginLlm` — so the whole path from the service to "the host's model"
runs for real, minus the network.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

HERMES_MISSING = "hermes-agent is not installed (pip install -e '.[dev]' or 'memos-bridge[hermes]')"


def require_hermes(module: str) -> ModuleType:
    """Import a hermes-agent module; skip only when hermes-agent is not installed at all.

    `pytest.importorskip` also skips when the package is installed but its import fails (a broken release, a
    missing dependency, an API moved) — exactly the breakage these tests exist to report. Here that import error
    propagates and the module fails.
    """
    try:
        importlib.metadata.distribution("hermes-agent")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(HERMES_MISSING, allow_module_level=True)
    return importlib.import_module(module)


@dataclass
class StubHostModel:
    """Records what the service asked the host's model; answers with a fixed text."""

    text: str = "stubbed host model reply"
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        message = SimpleNamespace(content=self.text, reasoning=None)
        usage = SimpleNamespace(prompt_tokens=7, completion_tokens=3, total_tokens=10)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)], model="stub-model", usage=usage)


@pytest.fixture
def stub_host_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubHostModel]:
    auxiliary = require_hermes("agent.auxiliary_client")
    stub = StubHostModel()
    monkeypatch.setattr(auxiliary, "call_llm", stub)
    yield stub
