"""hermes-agent's own discovery finds and loads the adapter: as a directory plugin (the path hermes-agent 0.19
loads memory providers from) and through the `hermes_agent.memory_providers` entry point of our package."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.adapters.hermes.conftest import HERMES_MISSING

memory_provider = pytest.importorskip("agent.memory_provider", reason=HERMES_MISSING)
plugins_memory = pytest.importorskip("plugins.memory", reason=HERMES_MISSING)

from memos_bridge_hermes.__main__ import install, plugin_dir  # noqa: E402
from memos_bridge_hermes.provider import MemosBridgeProvider  # noqa: E402

# The optional hooks of hermes-agent's MemoryProvider (its docstring's "Optional hooks" list).
OPTIONAL_HOOKS = {
    "on_turn_start",
    "on_session_end",
    "on_session_switch",
    "on_pre_compress",
    "on_memory_write",
    "on_delegation",
    "backup_paths",
}


@pytest.fixture
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hermes"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


def test_directory_plugin_is_discovered_and_loaded_by_hermes(hermes_home: Path) -> None:
    target = install(hermes_home)
    assert target == hermes_home / "plugins" / "memos-bridge"
    assert plugins_memory.find_provider_dir("memos-bridge") == target
    listed = {name: (desc, available) for name, desc, available in plugins_memory.discover_memory_providers()}
    assert "memos-bridge" in listed and listed["memos-bridge"][1] is True
    assert "memos-bridge" in listed["memos-bridge"][0]
    provider = plugins_memory.load_memory_provider("memos-bridge")
    assert isinstance(provider, memory_provider.MemoryProvider)
    assert isinstance(provider, MemosBridgeProvider)  # the shim forwards to the installed package: one copy
    assert provider.name == "memos-bridge" and provider.is_available()
    assert {schema["name"] for schema in provider.get_tool_schemas()} >= {"memos_search", "memos_feedback"}


def test_hermes_general_plugin_loader_leaves_it_to_memory_discovery(hermes_home: Path) -> None:
    install(hermes_home)
    from hermes_cli.plugins import PluginManager

    manager = PluginManager()
    manifest = manager._parse_manifest(
        plugin_dir(hermes_home) / "plugin.yaml", plugin_dir(hermes_home), source="user", prefix=""
    )
    assert manifest is not None and manifest.kind == "exclusive" and manifest.name == "memos-bridge"


def test_entry_point_registers_the_provider_with_hermes_collector() -> None:
    points = [ep for ep in importlib.metadata.entry_points(group="hermes_agent.memory_providers")]
    ours = [ep for ep in points if ep.name == "memos-bridge"]
    assert len(ours) == 1 and ours[0].value == "memos_bridge_hermes:register"
    collector = plugins_memory._ProviderCollector()  # the ctx Hermes passes to a provider's register()
    ours[0].load()(collector)
    assert isinstance(collector.provider, memory_provider.MemoryProvider)
    assert collector.provider.name == "memos-bridge"


def test_plugin_yaml_lists_every_hook_the_provider_implements() -> None:
    manifest = yaml.safe_load(
        (Path(__import__("memos_bridge_hermes").__file__).parent / "hermes_plugin" / "plugin.yaml").read_text()
    )
    base = memory_provider.MemoryProvider
    implemented = {hook for hook in OPTIONAL_HOOKS if getattr(MemosBridgeProvider, hook) is not getattr(base, hook)}
    assert set(manifest["hooks"]) == implemented
    assert manifest["name"] == MemosBridgeProvider().name == "memos-bridge"
    assert not MemosBridgeProvider.__abstractmethods__


def test_install_command_writes_the_plugin_and_activates_it(tmp_path: Path) -> None:
    home = tmp_path / "hermes"
    env = {"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "memos_bridge_hermes", "install", "--activate"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (home / "plugins" / "memos-bridge" / "__init__.py").exists()
    config = yaml.safe_load((home / "config.yaml").read_text())
    assert config["memory"]["provider"] == "memos-bridge"
