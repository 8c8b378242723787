"""hermes-agent is a dev dependency: in the test environment it is installed at the pinned version and the
modules the adapter and its tests rely on import. This never skips — elsewhere a missing hermes-agent skips
the Hermes tests, and a broken one fails them (`conftest.require_hermes`)."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"
MODULES = ["agent.memory_provider", "agent.memory_manager", "agent.plugin_llm", "plugins.memory", "hermes_cli.plugins"]


def _pinned() -> str:
    dev = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]["dev"]
    (pin,) = [re.fullmatch(r"hermes-agent==(\S+)", spec) for spec in dev if spec.startswith("hermes-agent")]
    assert pin is not None, dev
    return pin.group(1)


def test_the_pinned_hermes_agent_is_installed() -> None:
    assert importlib.metadata.version("hermes-agent") == _pinned()


@pytest.mark.parametrize("module", MODULES)
def test_the_hermes_modules_the_adapter_uses_import(module: str) -> None:
    importlib.import_module(module)


def test_the_provider_implements_hermes_memory_provider() -> None:
    from agent.memory_provider import MemoryProvider
    from memos_bridge_hermes.provider import MemosBridgeProvider

    assert issubclass(MemosBridgeProvider, MemoryProvider) and not MemosBridgeProvider.__abstractmethods__
