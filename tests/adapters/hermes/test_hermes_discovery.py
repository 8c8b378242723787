"""hermes-agent's own discovery finds and loads the adapter.

* Hermes' own commands, after `pip install`: `hermes plugins enable memos-bridge` (our `hermes_agent.plugins`
  entry point, the group hermes-agent 0.19 reads) and `hermes config set memory.provider memos-bridge`; the next
  `hermes -z` run loads the entry point, which writes the directory plugin, and Hermes' memory discovery then
  activates the provider in that same run — no `python -m memos_bridge_hermes install`.
* The directory plugin written by `python -m memos_bridge_hermes install` (the path hermes-agent 0.19 loads
  memory providers from), through `plugins.memory`'s own discovery and loader.
* The `hermes_agent.memory_providers` entry point is declared (the issue names it), and hermes-agent 0.19
  really does not read that group — what the README says.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from memos_bridge.client import ServiceClient
from tests.adapters.hermes.conftest import require_hermes

memory_provider = require_hermes("agent.memory_provider")
plugins_memory = require_hermes("plugins.memory")

from memos_bridge_hermes.__main__ import install, plugin_dir  # noqa: E402
from memos_bridge_hermes.provider import MemosBridgeProvider  # noqa: E402

from tests.adapters.hermes.test_hermes_agent_e2e import ScriptedModel  # noqa: E402

TASK = "Configure daily log rotation for /var/log/nginx with logrotate"

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


def test_hermes_own_commands_enable_the_pip_installed_provider(tmp_path: Path) -> None:
    """No install step of ours: Hermes' plugin loader runs our entry point, its memory discovery finds the result."""
    home = tmp_path / "hermes"
    home.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    ScriptedModel.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    (home / "config.yaml").write_text(
        f"model:\n  provider: custom\n  base_url: {url}\n  default: scripted\n", encoding="utf-8"
    )
    env = {
        **os.environ,
        "HERMES_HOME": str(home),
        "OPENAI_API_KEY": "sk-test",
        "MEMOS_HERMES_PREFETCH_TIMEOUT_S": "7",
        "MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0",
    }
    hermes = str(Path(sys.executable).parent / "hermes")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [hermes, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=workspace,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done

    try:
        run("config", "set", "memory.provider", "memos-bridge")
        run("-z", "Say hello")  # the entry-point plugin is opt-in: not enabled, not loaded, nothing written
        assert not plugin_dir(home).exists() and not (home / "memos-bridge").exists()
        assert "NOT installed" in run("memory", "status").stdout

        run("plugins", "enable", "memos-bridge", "--no-allow-tool-override")
        answered = run("-z", TASK)
        assert answered.stdout.startswith("Done: ")
        assert (plugin_dir(home) / "__init__.py").exists()  # written by our register(ctx) inside Hermes
        status = run("memory", "status").stdout
        assert "installed ✓" in status and re.search(r"memos-bridge\b.*← active", status), status
        offered = {tool["function"]["name"] for r in ScriptedModel.requests for tool in r.get("tools") or []}
        assert "memos_search" in offered  # Hermes activated the provider in that same run
    finally:
        server.shutdown()
    client = ServiceClient.spawn(home / "memos-bridge")  # the provider's data home: the turn was captured
    try:
        traces = client.memory_list_traces(limit=50)["traces"]
        assert traces and {t["userText"] for t in traces} == {TASK}
    finally:
        client.close()


def test_the_memory_providers_entry_point_is_declared_and_hermes_does_not_read_it() -> None:
    points = [ep for ep in importlib.metadata.entry_points(group="hermes_agent.memory_providers")]
    ours = [ep for ep in points if ep.name == "memos-bridge"]
    assert len(ours) == 1 and ours[0].value == "memos_bridge_hermes:register"
    general = [ep for ep in importlib.metadata.entry_points(group="hermes_agent.plugins") if ep.name == "memos-bridge"]
    assert len(general) == 1 and general[0].value == "memos_bridge_hermes"
    from hermes_cli.plugins import ENTRY_POINTS_GROUP

    assert ENTRY_POINTS_GROUP == "hermes_agent.plugins"
    files = importlib.metadata.files("hermes-agent") or []
    sources = [Path(str(f.locate())) for f in files if str(f).endswith(".py")]
    assert len(sources) > 100  # the package's own code, not an empty listing
    readers = [str(path) for path in sources if "hermes_agent.memory_providers" in path.read_text(errors="ignore")]
    assert readers == []  # if a later Hermes reads the group, adapters/hermes/README.md must say so


def test_the_general_plugin_context_gets_the_directory_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`register(ctx)` with Hermes' PluginContext (no register_memory_provider) writes the shim, once."""
    import memos_bridge_hermes
    from hermes_cli.plugins import PluginContext, PluginManager, PluginManifest

    home = tmp_path / "hermes"
    monkeypatch.setenv("HERMES_HOME", str(home))
    ctx = PluginContext(PluginManifest(name="memos-bridge", source="entrypoint", key="memos-bridge"), PluginManager())
    assert not hasattr(ctx, "register_memory_provider")
    memos_bridge_hermes.register(ctx)
    init = plugin_dir(home) / "__init__.py"
    written = init.stat().st_mtime_ns
    memos_bridge_hermes.register(ctx)  # every start: nothing to rewrite
    assert init.stat().st_mtime_ns == written
    assert isinstance(plugins_memory.load_memory_provider("memos-bridge"), MemosBridgeProvider)
    foreign = tmp_path / "other" / "plugins" / "memos-bridge"
    foreign.mkdir(parents=True)
    (foreign / "__init__.py").write_text("# someone else's MemoryProvider\n", encoding="utf-8")
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "other"))
    memos_bridge_hermes.register(ctx)
    assert (foreign / "__init__.py").read_text(encoding="utf-8") == "# someone else's MemoryProvider\n"


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
