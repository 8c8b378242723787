"""`memos_bridge.mcp.install`: registering with MCP hosts edits only our entries and takes back exactly those."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memos_bridge.mcp.install import (
    HOSTS,
    SERVER_NAME,
    FileChange,
    InstallError,
    apply,
    launcher,
    plan_install,
    plan_uninstall,
    render_diff,
)

PY = "/opt/venv/bin/python"
LAUNCHER = [PY, "-m", "memos_bridge"]
CMD = f"{PY} -m memos_bridge"


@pytest.fixture(autouse=True)
def _no_codex_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own CODEX_HOME must not steer the tests at a real config."""
    monkeypatch.delenv("CODEX_HOME", raising=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def install(host: str, project: Path, home: Path, *, user: bool = False, argv: list[str] | None = None) -> None:
    apply(plan_install(host, project_dir=project, user=user, home=home, launcher_argv=argv or LAUNCHER))


def uninstall(host: str, project: Path, home: Path, *, user: bool = False) -> None:
    apply(plan_uninstall(host, project_dir=project, user=user, home=home))


def changed(changes: list[FileChange]) -> list[FileChange]:
    return [change for change in changes if change.changed]


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4) + "\n", encoding="utf-8")


def our_hook_commands(settings: Any) -> list[str]:
    return [
        hook["command"]
        for groups in settings.get("hooks", {}).values()
        for group in groups
        for hook in group.get("hooks", [])
        if " hook claude-code " in hook.get("command", "")
    ]


# ---------------------------------------------------------------------------------------------- basics


def test_launcher_is_this_interpreter() -> None:
    import sys

    assert launcher() == [sys.executable, "-m", "memos_bridge"]


def test_plan_install_defaults_to_launcher(project: Path, home: Path) -> None:
    (change,) = plan_install("cursor", project_dir=project, home=home)
    assert change.after is not None
    assert json.loads(change.after)["mcpServers"][SERVER_NAME]["command"] == launcher()[0]


def test_unknown_host_lists_the_hosts(project: Path, home: Path) -> None:
    with pytest.raises(InstallError) as info:
        plan_install("vim", project_dir=project, home=home)
    assert all(host in str(info.value) for host in HOSTS)
    with pytest.raises(InstallError):
        plan_uninstall("vim", project_dir=project, home=home)


def test_file_change_changed() -> None:
    assert FileChange(Path("x"), None, "a").changed
    assert FileChange(Path("x"), "a", None).changed
    assert not FileChange(Path("x"), "a", "a").changed
    assert not FileChange(Path("x"), None, None).changed


# ----------------------------------------------------------------------------------------- claude-code


def test_claude_code_fresh_install_project_scope(project: Path, home: Path) -> None:
    install("claude-code", project, home)
    assert load(project / ".mcp.json") == {
        "mcpServers": {
            SERVER_NAME: {
                "type": "stdio",
                "command": PY,
                "args": ["-m", "memos_bridge", "mcp", "--agent", "claude-code"],
            }
        }
    }
    assert load(project / ".claude" / "settings.json") == {
        "hooks": {
            "UserPromptSubmit": [
                {"hooks": [{"type": "command", "command": f"{CMD} hook claude-code user-prompt-submit", "timeout": 30}]}
            ],
            "PostToolUse": [
                {
                    "matcher": "*",
                    "hooks": [{"type": "command", "command": f"{CMD} hook claude-code post-tool-use", "timeout": 30}],
                }
            ],
            "PostToolUseFailure": [
                {
                    "matcher": "*",
                    "hooks": [
                        {"type": "command", "command": f"{CMD} hook claude-code post-tool-use-failure", "timeout": 30}
                    ],
                }
            ],
            "Stop": [{"hooks": [{"type": "command", "command": f"{CMD} hook claude-code stop", "timeout": 60}]}],
        }
    }
    assert not (home / ".claude.json").exists()
    assert not (home / ".claude").exists()


def test_claude_code_hook_command_is_shell_quoted(project: Path, home: Path) -> None:
    install("claude-code", project, home, argv=["/my venv/bin/python", "-m", "memos_bridge"])
    commands = our_hook_commands(load(project / ".claude" / "settings.json"))
    assert commands[0] == "'/my venv/bin/python' -m memos_bridge hook claude-code user-prompt-submit"
    server = load(project / ".mcp.json")["mcpServers"][SERVER_NAME]
    assert server["command"] == "/my venv/bin/python"


def test_claude_code_user_scope(project: Path, home: Path) -> None:
    install("claude-code", project, home, user=True)
    assert load(home / ".claude.json")["mcpServers"][SERVER_NAME]["args"][-3:] == ["mcp", "--agent", "claude-code"]
    assert len(our_hook_commands(load(home / ".claude" / "settings.json"))) == 4
    assert list(project.iterdir()) == []
    uninstall("claude-code", project, home, user=True)
    assert not (home / ".claude.json").exists()
    assert not (home / ".claude" / "settings.json").exists()


def test_claude_code_user_scope_keeps_the_big_user_file(project: Path, home: Path) -> None:
    original = {
        "numStartups": 12,
        "projects": {"/x": {"mcpServers": {"local": {"command": "l"}}}},
        "mcpServers": {"github": {"type": "http", "url": "https://example.com/mcp"}},
        "theme": "dark",
    }
    write_json(home / ".claude.json", original)
    install("claude-code", project, home, user=True)
    doc = load(home / ".claude.json")
    assert list(doc) == ["numStartups", "projects", "mcpServers", "theme"]
    assert list(doc["mcpServers"]) == ["github", SERVER_NAME]
    uninstall("claude-code", project, home, user=True)
    assert load(home / ".claude.json") == original


def test_claude_code_install_is_idempotent(project: Path, home: Path) -> None:
    install("claude-code", project, home)
    assert changed(plan_install("claude-code", project_dir=project, home=home, launcher_argv=LAUNCHER)) == []


def test_claude_code_preserves_other_servers_hooks_and_keys(project: Path, home: Path) -> None:
    servers: dict[str, Any] = {"mcpServers": {"other": {"command": "other-server", "args": ["--x"]}}, "extra": [1, 2]}
    settings: dict[str, Any] = {
        "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo prompt"}]}],
            "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "fmt.sh"}]}],
            "SessionStart": [{"hooks": [{"type": "command", "command": "hello.sh"}]}],
        },
        "model": "opus",
    }
    write_json(project / ".mcp.json", servers)
    write_json(project / ".claude" / "settings.json", settings)

    install("claude-code", project, home)
    doc = load(project / ".mcp.json")
    assert doc["mcpServers"]["other"] == servers["mcpServers"]["other"]
    assert list(doc) == ["mcpServers", "extra"]
    assert list(doc["mcpServers"]) == ["other", SERVER_NAME]
    new = load(project / ".claude" / "settings.json")
    assert list(new) == ["permissions", "hooks", "model"]
    assert list(new["hooks"]) == ["UserPromptSubmit", "PostToolUse", "SessionStart", "PostToolUseFailure", "Stop"]
    assert new["hooks"]["UserPromptSubmit"][0] == settings["hooks"]["UserPromptSubmit"][0]
    assert new["hooks"]["PostToolUse"][0] == settings["hooks"]["PostToolUse"][0]
    assert new["hooks"]["PostToolUse"][1]["matcher"] == "*"
    assert new["hooks"]["SessionStart"] == settings["hooks"]["SessionStart"]

    uninstall("claude-code", project, home)
    assert load(project / ".mcp.json") == servers
    assert load(project / ".claude" / "settings.json") == settings


def test_claude_code_our_hook_sharing_a_group_keeps_the_other_hook(project: Path, home: Path) -> None:
    """A user who moved our hook into their own group gets only ours taken out of it."""
    install("claude-code", project, home)
    path = project / ".claude" / "settings.json"
    settings = load(path)
    settings["hooks"]["Stop"][0]["hooks"].append({"type": "command", "command": "notify.sh"})
    write_json(path, settings)
    install("claude-code", project, home, argv=["/new/python", "-m", "memos_bridge"])
    stop = load(path)["hooks"]["Stop"]
    assert stop[0]["hooks"] == [{"type": "command", "command": "notify.sh"}]
    assert stop[1]["hooks"][0]["command"] == "/new/python -m memos_bridge hook claude-code stop"
    uninstall("claude-code", project, home)
    assert load(path) == {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}]}}


def test_claude_code_new_launcher_replaces_ours_in_place(project: Path, home: Path) -> None:
    write_json(project / ".claude" / "settings.json", {"hooks": {"Stop": [{"hooks": [{"command": "a.sh"}]}]}})
    install("claude-code", project, home)
    path = project / ".claude" / "settings.json"
    settings = load(path)
    settings["hooks"]["Stop"].append({"hooks": [{"command": "b.sh"}]})  # the user added one after ours
    write_json(path, settings)

    install("claude-code", project, home, argv=["/other/python", "-m", "memos_bridge"])
    new = load(path)
    commands = our_hook_commands(new)
    assert len(commands) == 4
    assert all(command.startswith("/other/python -m memos_bridge hook claude-code ") for command in commands)
    assert [group["hooks"][0]["command"] for group in new["hooks"]["Stop"]] == [
        "a.sh",
        "/other/python -m memos_bridge hook claude-code stop",
        "b.sh",
    ]
    server = load(project / ".mcp.json")["mcpServers"]
    assert list(server) == [SERVER_NAME]
    assert server[SERVER_NAME]["command"] == "/other/python"


def test_claude_code_recognises_a_hook_started_by_the_script(project: Path, home: Path) -> None:
    """A hook entry written as `memos-bridge hook claude-code stop` (the console script) is ours too."""
    write_json(
        project / ".claude" / "settings.json",
        {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "memos-bridge hook claude-code stop"}]}]}},
    )
    install("claude-code", project, home)
    stop = load(project / ".claude" / "settings.json")["hooks"]["Stop"]
    assert [group["hooks"][0]["command"] for group in stop] == [f"{CMD} hook claude-code stop"]


def test_claude_code_uninstall_keeps_empty_things_that_were_there(project: Path, home: Path) -> None:
    settings: dict[str, Any] = {"hooks": {}, "env": {}}
    write_json(project / ".claude" / "settings.json", settings)
    write_json(project / ".mcp.json", {"mcpServers": {}})
    assert changed(plan_uninstall("claude-code", project_dir=project, home=home)) == []


def test_claude_code_uninstall_deletes_files_we_created(project: Path, home: Path) -> None:
    install("claude-code", project, home)
    changes = plan_uninstall("claude-code", project_dir=project, home=home)
    assert [change.after for change in changes] == [None, None]
    apply(changes)
    assert not (project / ".mcp.json").exists()
    assert not (project / ".claude" / "settings.json").exists()


def test_claude_code_malformed_json_writes_nothing(project: Path, home: Path) -> None:
    (project / ".claude").mkdir()
    settings = project / ".claude" / "settings.json"
    settings.write_text('{\n  "hooks": {,\n}\n', encoding="utf-8")
    with pytest.raises(InstallError, match=r"settings\.json is not valid JSON \(line 2\)"):
        plan_install("claude-code", project_dir=project, home=home, launcher_argv=LAUNCHER)
    with pytest.raises(InstallError, match="not valid JSON"):
        plan_uninstall("claude-code", project_dir=project, home=home)
    assert not (project / ".mcp.json").exists()
    assert settings.read_text(encoding="utf-8") == '{\n  "hooks": {,\n}\n'


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"hooks": []}, '"hooks" is not a JSON object'),
        ({"hooks": {"Stop": {"x": 1}}}, 'hooks "Stop" is not a JSON list'),
    ],
)
def test_claude_code_unexpected_hooks_shape_is_an_error(
    project: Path, home: Path, content: dict[str, Any], message: str
) -> None:
    write_json(project / ".claude" / "settings.json", content)
    with pytest.raises(InstallError, match=message):
        plan_install("claude-code", project_dir=project, home=home, launcher_argv=LAUNCHER)


# ----------------------------------------------------------------------------------------------- cursor


def test_cursor_fresh_install_and_uninstall(project: Path, home: Path) -> None:
    install("cursor", project, home)
    assert load(project / ".cursor" / "mcp.json") == {
        "mcpServers": {SERVER_NAME: {"command": PY, "args": ["-m", "memos_bridge", "mcp", "--agent", "cursor"]}}
    }
    assert changed(plan_install("cursor", project_dir=project, home=home, launcher_argv=LAUNCHER)) == []
    uninstall("cursor", project, home)
    assert not (project / ".cursor" / "mcp.json").exists()


def test_cursor_user_scope(project: Path, home: Path) -> None:
    (change,) = plan_install("cursor", project_dir=project, user=True, home=home, launcher_argv=LAUNCHER)
    assert change.path == home / ".cursor" / "mcp.json"
    apply([change])
    assert SERVER_NAME in load(home / ".cursor" / "mcp.json")["mcpServers"]
    assert not (project / ".cursor").exists()


def test_cursor_preserves_other_servers(project: Path, home: Path) -> None:
    original = {"mcpServers": {"a": {"command": "a"}, "b": {"url": "http://localhost:1/mcp"}}}
    write_json(project / ".cursor" / "mcp.json", original)
    install("cursor", project, home)
    assert list(load(project / ".cursor" / "mcp.json")["mcpServers"]) == ["a", "b", SERVER_NAME]
    install("cursor", project, home, argv=["/elsewhere/python3", "-m", "memos_bridge"])
    servers = load(project / ".cursor" / "mcp.json")["mcpServers"]
    assert list(servers) == ["a", "b", SERVER_NAME]
    assert servers[SERVER_NAME]["command"] == "/elsewhere/python3"
    uninstall("cursor", project, home)
    assert load(project / ".cursor" / "mcp.json") == original


def test_cursor_mcp_servers_not_an_object(project: Path, home: Path) -> None:
    write_json(project / ".cursor" / "mcp.json", {"mcpServers": ["x"]})
    with pytest.raises(InstallError, match='"mcpServers" is not a JSON object'):
        plan_install("cursor", project_dir=project, home=home, launcher_argv=LAUNCHER)


def test_json_top_level_not_an_object(project: Path, home: Path) -> None:
    write_json(project / ".cursor" / "mcp.json", [1, 2])
    with pytest.raises(InstallError, match="is not a JSON object"):
        plan_install("cursor", project_dir=project, home=home, launcher_argv=LAUNCHER)


def test_empty_json_file_counts_as_empty(project: Path, home: Path) -> None:
    (project / ".cursor").mkdir()
    (project / ".cursor" / "mcp.json").write_text("", encoding="utf-8")
    assert changed(plan_uninstall("cursor", project_dir=project, home=home)) == []
    install("cursor", project, home)
    assert SERVER_NAME in load(project / ".cursor" / "mcp.json")["mcpServers"]


def test_untouched_json_keeps_its_formatting(project: Path, home: Path) -> None:
    """Installing twice does not reformat a hand-written file (the object did not change)."""
    install("cursor", project, home)
    path = project / ".cursor" / "mcp.json"
    compact = json.dumps(load(path), separators=(",", ":"))
    path.write_text(compact, encoding="utf-8")
    (change,) = plan_install("cursor", project_dir=project, home=home, launcher_argv=LAUNCHER)
    assert not change.changed
    assert change.after == compact


# ------------------------------------------------------------------------------------------------ codex

CODEX_OTHER = """\
# my codex config
model = "o3"  # fast enough

[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-mcp"]

[mcp_servers.docs.env]
TOKEN = "x"

[profiles.work]
model = "gpt-5"
"""


def codex_config(home: Path) -> Path:
    return home / ".codex" / "config.toml"


def test_codex_fresh_install(project: Path, home: Path) -> None:
    changes = plan_install("codex", project_dir=project, home=home, launcher_argv=LAUNCHER)
    assert [change.path for change in changes] == [codex_config(home)]
    apply(changes)
    text = codex_config(home).read_text(encoding="utf-8")
    assert text == (
        "[mcp_servers.memos-bridge]\n"
        'command = "/opt/venv/bin/python"\n'
        'args = ["-m", "memos_bridge", "mcp", "--agent", "codex"]\n'
    )
    assert tomllib.loads(text) == {
        "mcp_servers": {SERVER_NAME: {"command": PY, "args": ["-m", "memos_bridge", "mcp", "--agent", "codex"]}}
    }
    assert list(project.iterdir()) == []  # user scope only, with or without --user
    assert changed(plan_install("codex", project_dir=project, home=home, launcher_argv=LAUNCHER)) == []
    uninstall("codex", project, home)
    assert not codex_config(home).exists()


def test_codex_preserves_the_rest_byte_for_byte(project: Path, home: Path) -> None:
    codex_config(home).parent.mkdir()
    codex_config(home).write_text(CODEX_OTHER, encoding="utf-8")
    install("codex", project, home)
    text = codex_config(home).read_text(encoding="utf-8")
    assert text.startswith(CODEX_OTHER + "\n[mcp_servers.memos-bridge]\n")
    doc = tomllib.loads(text)
    assert doc["mcp_servers"]["docs"] == {"command": "npx", "args": ["-y", "docs-mcp"], "env": {"TOKEN": "x"}}
    assert doc["model"] == "o3"
    assert changed(plan_install("codex", project_dir=project, home=home, launcher_argv=LAUNCHER)) == []
    uninstall("codex", project, home)
    assert codex_config(home).read_text(encoding="utf-8") == CODEX_OTHER


def test_codex_new_launcher_replaces_our_table_in_place(project: Path, home: Path) -> None:
    """Our table in the middle of the file (with a subtable the user added) is replaced where it stands."""
    original = CODEX_OTHER.replace(
        "[profiles.work]",
        '[mcp_servers.memos-bridge]\ncommand = "/old/python"\nargs = ["-m", "memos_bridge", "mcp"]\n\n'
        '[mcp_servers.memos-bridge.env]\nX = "1"\n\n# work profile\n[profiles.work]',
    )
    codex_config(home).parent.mkdir()
    codex_config(home).write_text(original, encoding="utf-8")
    install("codex", project, home)
    text = codex_config(home).read_text(encoding="utf-8")
    assert text.count("[mcp_servers.memos-bridge") == 1
    assert text == CODEX_OTHER.replace(
        "[profiles.work]",
        '[mcp_servers.memos-bridge]\ncommand = "/opt/venv/bin/python"\n'
        'args = ["-m", "memos_bridge", "mcp", "--agent", "codex"]\n\n# work profile\n[profiles.work]',
    )
    uninstall("codex", project, home)
    assert codex_config(home).read_text(encoding="utf-8") == CODEX_OTHER.replace(
        "[profiles.work]", "# work profile\n[profiles.work]"
    )


def test_codex_header_lookalikes_in_strings_and_arrays_are_not_headers(project: Path, home: Path) -> None:
    original = (
        'notes = """\n[mcp_servers.memos-bridge]\n"""\n'
        "matrix = [\n  [1, 2],\n  [3],\n]\n"
        "\n[mcp_servers.other]\ncommand = 'x'\n"
    )
    codex_config(home).parent.mkdir()
    codex_config(home).write_text(original, encoding="utf-8")
    install("codex", project, home)
    assert tomllib.loads(codex_config(home).read_text(encoding="utf-8"))["notes"] == "[mcp_servers.memos-bridge]\n"
    uninstall("codex", project, home)
    assert codex_config(home).read_text(encoding="utf-8") == original


def test_codex_quoted_header_is_recognised(project: Path, home: Path) -> None:
    original = 'model = "o3"\n'
    codex_config(home).parent.mkdir()
    codex_config(home).write_text(
        original + '\n[ mcp_servers . "memos-bridge" ]  # added by hand\ncommand = "x"\n', encoding="utf-8"
    )
    uninstall("codex", project, home)
    assert codex_config(home).read_text(encoding="utf-8") == original


def test_codex_inline_definition_is_refused(project: Path, home: Path) -> None:
    codex_config(home).parent.mkdir()
    original = '[mcp_servers]\nmemos-bridge = { command = "x" }\n'
    codex_config(home).write_text(original, encoding="utf-8")
    with pytest.raises(InstallError, match="edit it by hand"):
        plan_install("codex", project_dir=project, home=home, launcher_argv=LAUNCHER)
    with pytest.raises(InstallError, match="edit it by hand"):
        plan_uninstall("codex", project_dir=project, home=home)


def test_codex_inline_mcp_servers_table_is_refused(project: Path, home: Path) -> None:
    codex_config(home).parent.mkdir()
    codex_config(home).write_text('mcp_servers = { other = { command = "x" } }\n', encoding="utf-8")
    with pytest.raises(InstallError, match="edit it by hand"):
        plan_install("codex", project_dir=project, home=home, launcher_argv=LAUNCHER)


def test_codex_malformed_toml_writes_nothing(project: Path, home: Path) -> None:
    codex_config(home).parent.mkdir()
    codex_config(home).write_text("model = \n", encoding="utf-8")
    with pytest.raises(InstallError, match=r"config\.toml is not valid TOML"):
        plan_install("codex", project_dir=project, home=home, launcher_argv=LAUNCHER)
    with pytest.raises(InstallError, match="not valid TOML"):
        plan_uninstall("codex", project_dir=project, home=home)
    assert codex_config(home).read_text(encoding="utf-8") == "model = \n"


def test_codex_uninstall_when_not_installed(project: Path, home: Path) -> None:
    assert changed(plan_uninstall("codex", project_dir=project, home=home)) == []
    codex_config(home).parent.mkdir()
    codex_config(home).write_text(CODEX_OTHER, encoding="utf-8")
    assert changed(plan_uninstall("codex", project_dir=project, home=home)) == []


def test_codex_home_env(project: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    (change,) = plan_install("codex", project_dir=project, home=home, launcher_argv=LAUNCHER)
    assert change.path == tmp_path / "codex-home" / "config.toml"
    apply([change])
    assert (tmp_path / "codex-home" / "config.toml").exists()
    assert not codex_config(home).exists()


def test_codex_file_without_final_newline_and_crlf(project: Path, home: Path) -> None:
    codex_config(home).parent.mkdir()
    codex_config(home).write_bytes(b'model = "o3"')
    install("codex", project, home)
    assert codex_config(home).read_bytes().startswith(b'model = "o3"\n\n[mcp_servers.memos-bridge]\n')
    uninstall("codex", project, home)
    assert codex_config(home).read_bytes() == b'model = "o3"\n'

    codex_config(home).write_bytes(b'model = "o3"\r\n')
    install("codex", project, home)
    data = codex_config(home).read_bytes()
    assert b"\n" not in data.replace(b"\r\n", b"")
    uninstall("codex", project, home)
    assert codex_config(home).read_bytes() == b'model = "o3"\r\n'


def test_codex_strings_are_escaped(project: Path, home: Path) -> None:
    odd = 'C:\\Users\\me "x"\\python.exe'
    install("codex", project, home, argv=[odd, "-m", "memos_bridge"])
    doc = tomllib.loads(codex_config(home).read_text(encoding="utf-8"))
    assert doc["mcp_servers"][SERVER_NAME]["command"] == odd


# ------------------------------------------------------------------------------------- diff and apply


def test_render_diff_shows_added_lines(project: Path, home: Path) -> None:
    changes = plan_install("cursor", project_dir=project, home=home, launcher_argv=LAUNCHER)
    diff = render_diff(changes)
    assert diff.startswith(f"--- /dev/null\n+++ {project / '.cursor' / 'mcp.json'}\n")
    assert f'+      "command": "{PY}",\n' in diff
    apply(changes)
    assert render_diff(plan_install("cursor", project_dir=project, home=home, launcher_argv=LAUNCHER)) == ""
    removal = render_diff(plan_uninstall("cursor", project_dir=project, home=home))
    assert "+++ /dev/null" in removal
    assert '-  "mcpServers": {\n' in removal


def test_render_diff_marks_a_missing_final_newline(tmp_path: Path) -> None:
    diff = render_diff([FileChange(tmp_path / "f", "a", "a\nb\n")])
    assert "-a\n\\ No newline at end of file\n+a\n+b\n" in diff


def test_apply_keeps_the_file_mode(project: Path, home: Path) -> None:
    path = project / ".cursor" / "mcp.json"
    write_json(path, {"mcpServers": {"a": {"command": "a"}}})
    os.chmod(path, 0o640)
    install("cursor", project, home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert SERVER_NAME in load(path)["mcpServers"]
    assert [p.name for p in path.parent.iterdir()] == ["mcp.json"]  # no temporary file left behind


def test_apply_writes_through_a_symlink(project: Path, home: Path, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "config.toml"
    real.parent.mkdir()
    real.write_text('model = "o3"\n', encoding="utf-8")
    codex_config(home).parent.mkdir()
    codex_config(home).symlink_to(real)
    install("codex", project, home)
    assert codex_config(home).is_symlink()
    assert "[mcp_servers.memos-bridge]" in real.read_text(encoding="utf-8")


def test_apply_refuses_a_stale_plan(project: Path, home: Path) -> None:
    path = project / ".cursor" / "mcp.json"
    write_json(path, {"mcpServers": {}})
    changes = plan_install("cursor", project_dir=project, home=home, launcher_argv=LAUNCHER)
    write_json(path, {"mcpServers": {"new": {"command": "n"}}})  # the host rewrote it meanwhile
    with pytest.raises(InstallError, match="changed since the plan was made"):
        apply(changes)
    assert load(path) == {"mcpServers": {"new": {"command": "n"}}}


def test_apply_skips_unchanged_and_creates_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.json"
    apply([FileChange(tmp_path / "missing", None, None), FileChange(target, None, "{}\n")])
    assert target.read_text(encoding="utf-8") == "{}\n"
    assert not (tmp_path / "missing").exists()


# ---------------------------------------------------------------- the command line


def _cli(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "MEMOS_BRIDGE_HOME": str(home / ".memos-bridge")}
    return subprocess.run(
        [sys.executable, "-m", "memos_bridge", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_install_and_uninstall_commands_show_the_diff_write_once_and_restore(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    home.mkdir()
    theirs = {"mcpServers": {"other": {"command": "other-server"}}}
    (project / ".mcp.json").write_text(json.dumps(theirs), encoding="utf-8")

    refused = _cli(["install", "claude-code"], home, project)  # not a terminal and no --yes: nothing written
    assert refused.returncode == 1 and "--yes" in refused.stderr
    assert json.loads((project / ".mcp.json").read_text(encoding="utf-8")) == theirs

    dry = _cli(["install", "claude-code", "--dry-run"], home, project)
    assert dry.returncode == 0 and '+    "memos-bridge"' in dry.stdout and not (project / ".claude").exists()

    done = _cli(["install", "claude-code", "--yes"], home, project)
    assert done.returncode == 0, done.stderr
    servers = json.loads((project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert set(servers) == {"other", "memos-bridge"} and servers["memos-bridge"]["args"][-3:] == [
        "mcp",
        "--agent",
        "claude-code",
    ]
    hooks = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))["hooks"]
    assert set(hooks) == {"UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop"}

    again = _cli(["install", "claude-code", "--yes"], home, project)
    assert again.returncode == 0 and "already installed" in again.stdout

    removed = _cli(["uninstall", "claude-code", "--yes"], home, project)
    assert removed.returncode == 0, removed.stderr
    assert json.loads((project / ".mcp.json").read_text(encoding="utf-8")) == theirs
    assert not (project / ".claude" / "settings.json").exists()

    (project / ".cursor").mkdir()
    (project / ".cursor" / "mcp.json").write_text("{broken", encoding="utf-8")
    broken = _cli(["install", "cursor", "--yes"], home, project)
    assert broken.returncode == 2 and "not valid JSON" in broken.stderr
    assert (project / ".cursor" / "mcp.json").read_text(encoding="utf-8") == "{broken"
