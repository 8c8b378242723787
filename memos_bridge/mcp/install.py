"""`memos-bridge mcp install|uninstall HOST`: register the MCP server (and Claude Code's hooks) in a host's config.

Users keep their own servers, hooks and settings in the same files, often edited by hand and sometimes shared
in a repository, so this module edits as little as it can and can take back exactly what it added:

- planning is separate from writing: `plan_install` / `plan_uninstall` return `FileChange`s (before and after
  text), so the CLI can show `render_diff` and ask before `apply` touches anything;
- our entries are found by name (the `memos-bridge` server) or by command (hook commands that run
  `memos_bridge … hook claude-code …`), so installing again replaces them instead of adding copies, and a new
  interpreter path (a moved venv) replaces the old one;
- a JSON file is rewritten only when its content changes, and then keeps every other key in its order;
- Codex's TOML is edited as text, never re-serialised: comments and layout are the user's. Both the file and
  the edited text are parsed with `tomllib`, and an edit that would change anything but our table is refused;
- a config we cannot read (malformed JSON or TOML, an unexpected shape) is an `InstallError` and nothing is
  written: guessing would risk the user's other settings.

The server is started with this interpreter (`launcher()`): hosts start servers with their own PATH, which
rarely holds the virtualenv memos-bridge was installed into.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import json
import os
import shlex
import stat
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOSTS = ("claude-code", "cursor", "codex")
SERVER_NAME = "memos-bridge"

# Claude Code hook events → (the `hook claude-code` subcommand, timeout in seconds, matcher or None).
# Stop gets longer: it may distil the session before the agent exits.
_CLAUDE_HOOKS: tuple[tuple[str, str, int, str | None], ...] = (
    ("UserPromptSubmit", "user-prompt-submit", 30, None),
    ("PostToolUse", "post-tool-use", 30, "*"),
    ("PostToolUseFailure", "post-tool-use-failure", 30, "*"),
    ("Stop", "stop", 60, None),
)
_CODEX_TABLE = "mcp_servers"


@dataclass(frozen=True)
class FileChange:
    """One config file before and after: `None` before means it does not exist, `None` after that it goes."""

    path: Path
    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after


class InstallError(Exception):
    """One clear line for the user (malformed existing config, unknown host...)."""


def launcher() -> list[str]:
    """The command that starts memos-bridge with this interpreter: [sys.executable, "-m", "memos_bridge"].

    Hosts start MCP servers and hooks from their own environment, which often does not have the venv on PATH;
    the absolute interpreter path works wherever the host runs it.
    """
    if not sys.executable:
        raise InstallError("cannot tell which Python runs memos-bridge (sys.executable is empty)")
    return [sys.executable, "-m", "memos_bridge"]


def plan_install(
    host: str,
    *,
    project_dir: Path,
    user: bool = False,
    home: Path | None = None,
    launcher_argv: list[str] | None = None,
) -> list[FileChange]:
    """The changes that register memos-bridge with `host`; none of them `changed` when it is already there."""
    _check_host(host)
    home = Path.home() if home is None else home
    argv = list(launcher() if launcher_argv is None else launcher_argv)
    if not argv:
        raise InstallError("the launcher command is empty")
    server_args = [*argv[1:], "mcp", "--agent", host]
    if host == "claude-code":
        entry: dict[str, Any] = {"type": "stdio", "command": argv[0], "args": server_args}
        server_file, settings_file = _claude_paths(project_dir, user, home)
        groups = _claude_hook_groups(shlex.join(argv))
        return [
            _plan_json(server_file, lambda doc: _put_server(doc, server_file, entry), removing=False),
            _plan_json(settings_file, lambda doc: _put_hooks(doc, settings_file, groups), removing=False),
        ]
    if host == "cursor":
        entry = {"command": argv[0], "args": server_args}
        path = _cursor_path(project_dir, user, home)
        return [_plan_json(path, lambda doc: _put_server(doc, path, entry), removing=False)]
    return [_plan_codex(_codex_path(home), {"command": argv[0], "args": server_args})]


def plan_uninstall(
    host: str,
    *,
    project_dir: Path,
    user: bool = False,
    home: Path | None = None,
) -> list[FileChange]:
    """The changes that take back what `plan_install` added; none of them `changed` when nothing is installed."""
    _check_host(host)
    home = Path.home() if home is None else home
    if host == "claude-code":
        server_file, settings_file = _claude_paths(project_dir, user, home)
        return [
            _plan_json(server_file, lambda doc: _drop_server(doc, server_file), removing=True),
            _plan_json(settings_file, lambda doc: _drop_hooks(doc, settings_file), removing=True),
        ]
    if host == "cursor":
        path = _cursor_path(project_dir, user, home)
        return [_plan_json(path, lambda doc: _drop_server(doc, path), removing=True)]
    return [_plan_codex(_codex_path(home), None)]


def render_diff(changes: list[FileChange]) -> str:
    """A unified diff of every changed file ("" when nothing changes): what the user is asked to accept."""
    parts: list[str] = []
    for change in changes:
        if not change.changed:
            continue
        lines = difflib.unified_diff(
            (change.before or "").splitlines(keepends=True),
            (change.after or "").splitlines(keepends=True),
            fromfile=str(change.path) if change.before is not None else "/dev/null",
            tofile=str(change.path) if change.after is not None else "/dev/null",
        )
        for line in lines:
            # a last line without a newline would run into the next one; mark it the way diff(1) does
            parts.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(parts)


def apply(changes: list[FileChange]) -> None:
    """Write the changes: each file atomically (a temporary file beside it, then `os.replace`), keeping its mode.

    Every file is first checked to still hold what the plan read, so a plan that went stale while the user
    read the diff (the host rewrote its config meanwhile) writes nothing instead of undoing the host's edit.
    A symlinked config (dotfiles) is written through the link, so the link stays.
    """
    pending = [change for change in changes if change.changed]
    for change in pending:
        if _read(change.path) != change.before:
            raise InstallError(f"{change.path} changed since the plan was made: run again")
    for change in pending:
        if change.after is None:
            change.path.unlink(missing_ok=True)
        else:
            target = Path(os.path.realpath(change.path))
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(target, change.after)


# ---------------------------------------------------------------------------------------------------- paths


def _check_host(host: str) -> None:
    if host not in HOSTS:
        raise InstallError(f"unknown host {host!r}: choose one of {', '.join(HOSTS)}")


def _claude_paths(project_dir: Path, user: bool, home: Path) -> tuple[Path, Path]:
    """(server file, settings file with the hooks): the project's, or the user's with `user`."""
    if user:
        return home / ".claude.json", home / ".claude" / "settings.json"
    return project_dir / ".mcp.json", project_dir / ".claude" / "settings.json"


def _cursor_path(project_dir: Path, user: bool, home: Path) -> Path:
    return (home if user else project_dir) / ".cursor" / "mcp.json"


def _codex_path(home: Path) -> Path:
    """Codex reads one user config (it has no project config), under $CODEX_HOME when that is set."""
    codex_home = os.environ.get("CODEX_HOME")
    return (Path(codex_home).expanduser() if codex_home else home / ".codex") / "config.toml"


# ------------------------------------------------------------------------------------------------ files


def _read(path: Path) -> str | None:
    """The file's text as it is on disk (line endings untouched), or None when there is no file."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            return file.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise InstallError(f"{path} is not UTF-8 text: fix or move it, then run again") from None
    except OSError as exc:
        raise InstallError(f"{path} cannot be read ({exc.strerror}): fix or move it, then run again") from None


def _write_atomic(target: Path, text: str) -> None:
    """Readers see the old file or the new one, never a half-written one; an existing file keeps its mode."""
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    # 0o666 lets the umask decide a new file's mode, as for any file the user creates
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------------------------------------- JSON


def _plan_json(path: Path, edit: Callable[[dict[str, Any]], None], *, removing: bool) -> FileChange:
    """Apply `edit` to a copy of the file's object; the text changes only when the object does.

    An untouched object keeps its text byte for byte (install twice: no change, not even formatting). An object
    our removal leaves empty held nothing of anyone else's, so the file goes.
    """
    before = _read(path)
    if before is None and removing:
        return FileChange(path, None, None)
    doc = {} if before is None else _load_json(path, before)
    new = copy.deepcopy(doc)
    edit(new)
    if new == doc:
        return FileChange(path, before, before)
    if not new:
        return FileChange(path, before, None)
    return FileChange(path, before, json.dumps(new, indent=2, ensure_ascii=False) + "\n")


def _load_json(path: Path, text: str) -> dict[str, Any]:
    if not text.strip():
        return {}  # an empty file holds nothing yet
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstallError(f"{path} is not valid JSON (line {exc.lineno}): fix or move it, then run again") from None
    if not isinstance(doc, dict):
        raise InstallError(f"{path} is not a JSON object: fix or move it, then run again")
    return doc


def _object_at(doc: dict[str, Any], key: str, path: Path, *, create: bool) -> dict[str, Any] | None:
    """`doc[key]` when it is an object (created empty at the end when asked); anything else is not ours to fix."""
    value = doc.get(key)
    if value is None and key not in doc:
        if not create:
            return None
        value = doc[key] = {}
    if not isinstance(value, dict):
        raise InstallError(f'{path}: "{key}" is not a JSON object: fix or move it, then run again')
    return value


def _put_server(doc: dict[str, Any], path: Path, entry: dict[str, Any]) -> None:
    servers = _object_at(doc, "mcpServers", path, create=True)
    assert servers is not None
    servers[SERVER_NAME] = entry  # an existing entry is replaced where it stands


def _drop_server(doc: dict[str, Any], path: Path) -> None:
    servers = _object_at(doc, "mcpServers", path, create=False)
    if servers is None or SERVER_NAME not in servers:
        return
    del servers[SERVER_NAME]
    if not servers:
        del doc["mcpServers"]


def _claude_hook_groups(command: str) -> dict[str, dict[str, Any]]:
    """Our matcher group per Claude Code hook event, in the settings format."""
    groups: dict[str, dict[str, Any]] = {}
    for event, sub, timeout, matcher in _CLAUDE_HOOKS:
        hook = {"type": "command", "command": f"{command} hook claude-code {sub}", "timeout": timeout}
        groups[event] = {"matcher": matcher, "hooks": [hook]} if matcher is not None else {"hooks": [hook]}
    return groups


def _is_our_hook(hook: Any) -> bool:
    """A hook entry that runs memos-bridge's Claude Code hook, whichever interpreter or path starts it."""
    if not isinstance(hook, dict):
        return False
    command = hook.get("command")
    return (
        isinstance(command, str)
        and " hook claude-code " in command
        and ("memos_bridge" in command or "memos-bridge" in command)
    )


def _strip_our_hooks(groups: list[Any]) -> tuple[list[Any], int | None]:
    """The groups without our hook entries, and where the first group that held only ours stood (or None).

    A group left empty by the removal was ours and goes; a group that also holds someone else's hooks keeps
    them. Groups of a shape we do not know are left alone.
    """
    kept_groups: list[Any] = []
    slot: int | None = None
    for group in groups:
        hooks = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(hooks, list):
            kept_groups.append(group)
            continue
        kept = [hook for hook in hooks if not _is_our_hook(hook)]
        if len(kept) == len(hooks):
            kept_groups.append(group)
        elif kept:
            kept_groups.append({**group, "hooks": kept})
        elif slot is None:
            slot = len(kept_groups)
    return kept_groups, slot


def _put_hooks(doc: dict[str, Any], path: Path, groups: dict[str, dict[str, Any]]) -> None:
    """Our hook entries anywhere are dropped, then our group goes where our old one stood, or at the end."""
    hooks = _object_at(doc, "hooks", path, create=True)
    assert hooks is not None
    for event in list(hooks):
        current = hooks[event]
        if event in groups:
            if not isinstance(current, list):
                raise InstallError(f'{path}: hooks "{event}" is not a JSON list: fix or move it, then run again')
            kept, slot = _strip_our_hooks(current)
            kept.insert(len(kept) if slot is None else slot, groups[event])
            hooks[event] = kept
        elif isinstance(current, list):
            _set_or_drop(hooks, event, current, _strip_our_hooks(current)[0])
    for event, group in groups.items():
        if event not in hooks:
            hooks[event] = [group]


def _drop_hooks(doc: dict[str, Any], path: Path) -> None:
    hooks = _object_at(doc, "hooks", path, create=False)
    if hooks is None:
        return
    had_events = bool(hooks)
    for event in list(hooks):
        current = hooks[event]
        if isinstance(current, list):
            _set_or_drop(hooks, event, current, _strip_our_hooks(current)[0])
    if had_events and not hooks:
        del doc["hooks"]  # we emptied it; an empty one that was there before is not ours to remove


def _set_or_drop(hooks: dict[str, Any], event: str, before: list[Any], after: list[Any]) -> None:
    """An event list our removal emptied goes; one that was empty already is someone else's and stays."""
    if after == before:
        return
    if after:
        hooks[event] = after
    else:
        del hooks[event]


# ------------------------------------------------------------------------------------------------- TOML


def _plan_codex(path: Path, desired: dict[str, Any] | None) -> FileChange:
    """Add (`desired`) or remove (None) our `[mcp_servers.memos-bridge]` table by editing the text.

    Our table is replaced where it stands, or appended after a blank line; removal takes our tables (with any
    subtable such as `.env`) and that blank line, so install then uninstall gives back the original bytes.
    """
    before = _read(path)
    text = before or ""
    doc = _load_toml(path, text)
    servers = doc.get(_CODEX_TABLE, {})
    if not isinstance(servers, dict):
        raise InstallError(f"{path}: {_CODEX_TABLE} is not a table: fix or move it, then run again")
    current = servers.get(SERVER_NAME)
    if current == desired:
        return FileChange(path, before, before)

    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    spans = _our_toml_spans(lines)
    if current is not None and not spans:
        raise InstallError(
            f"{path} defines {_CODEX_TABLE}.{SERVER_NAME} in a form this installer does not edit "
            f"(not as a [{_CODEX_TABLE}.{SERVER_NAME}] table): edit it by hand, then run again"
        )
    block = "" if desired is None else _toml_block(desired, newline)
    removed: set[int] = set()
    for n, (start, blank_from, comment_from) in enumerate(spans):
        # a replaced table keeps the blank lines that separate it from the next one; comments at its end
        # belong to what follows them and always stay
        removed.update(range(start, blank_from if block and n == 0 else comment_from))
    out: list[str] = []
    for i, line in enumerate(lines):
        if block and spans and i == spans[0][0]:
            out.append(block)
        if i not in removed:
            out.append(line)
    new = "".join(out)
    if block and not spans:
        if new and not new.endswith("\n"):
            new += newline
        new += (newline if new else "") + block
    elif not block and lines and len(lines) - 1 in removed and new.endswith(newline * 2):
        new = new[: -len(newline)]  # the blank line install put before our table

    _check_toml_edit(path, doc, new, desired)
    return FileChange(path, before, new if new.strip() else None)


def _load_toml(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{path} is not valid TOML ({exc}): fix or move it, then run again") from None


def _toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, plus DEL, which TOML wants escaped."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007F")


def _toml_block(desired: dict[str, Any], newline: str) -> str:
    args = ", ".join(_toml_string(arg) for arg in desired["args"])
    lines = [f"[{_CODEX_TABLE}.{SERVER_NAME}]", f"command = {_toml_string(desired['command'])}", f"args = [{args}]"]
    return newline.join(lines) + newline


def _our_toml_spans(lines: list[str]) -> list[tuple[int, int, int]]:
    """Our tables as (header line, start of the trailing blank/comment lines, start of the trailing comments).

    A table runs from its header to the next header; the blank and comment lines at its end are told apart
    so that removing it can keep comments that introduce the next table.
    """
    headers = _toml_headers(lines)
    spans: list[tuple[int, int, int]] = []
    for n, (start, key) in enumerate(headers):
        if key[:2] != [_CODEX_TABLE, SERVER_NAME]:
            continue
        end = headers[n + 1][0] if n + 1 < len(headers) else len(lines)
        blank_from = end
        while blank_from > start + 1 and _is_blank_or_comment(lines[blank_from - 1]):
            blank_from -= 1
        comment_from = next((i for i in range(blank_from, end) if lines[i].lstrip().startswith("#")), end)
        spans.append((start, blank_from, comment_from))
    return spans


def _is_blank_or_comment(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _toml_headers(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(line index, key path) of every table header, skipping lines inside multi-line strings and arrays."""
    headers: list[tuple[int, list[str]]] = []
    open_string: str | None = None
    depth = 0
    for i, line in enumerate(lines):
        if open_string is None and depth == 0 and line.lstrip().startswith("["):
            key = _toml_header_key(line.lstrip())
            if key is not None:
                headers.append((i, key))
            continue
        open_string, depth = _scan_toml_line(line, open_string, depth)
    return headers


def _toml_header_key(header: str) -> list[str] | None:
    """The key path of `[a."b".c]` or `[[a.b]]`, read by tomllib so quoting and spacing follow TOML's rules."""
    start = 2 if header.startswith("[[") else 1
    j = start
    while j < len(header) and header[j] != "]":
        if header[j] == '"':
            j = _skip_basic_string(header, j)
        elif header[j] == "'":
            close = header.find("'", j + 1)
            j = len(header) if close < 0 else close + 1
        else:
            j += 1
    try:
        node: Any = tomllib.loads(f"[{header[start:j]}]\n")
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    while isinstance(node, dict) and len(node) == 1:
        ((key, node),) = node.items()
        path.append(key)
    return path


def _skip_basic_string(line: str, j: int) -> int:
    """The index after the basic string that opens at `j` (escaped quotes included)."""
    j += 1
    while j < len(line) and line[j] != '"':
        j += 2 if line[j] == "\\" else 1
    return j + 1


def _scan_toml_line(line: str, open_string: str | None, depth: int) -> tuple[str | None, int]:
    """Carry (open multi-line string delimiter, bracket depth) across one line of values.

    Only enough of TOML to know whether the next line can start a table header: a `[` line inside a
    multi-line string or a multi-line array is a value, not a header.
    """
    j = 0
    while j < len(line):
        if open_string is not None:
            if open_string == '"""' and line[j] == "\\":
                j += 2
            elif line.startswith(open_string, j):
                run = 3  # up to two quotes just before the closing three belong to the string
                while run < 5 and j + run < len(line) and line[j + run] == open_string[0]:
                    run += 1
                j += run
                open_string = None
            else:
                j += 1
            continue
        char = line[j]
        if char == "#":
            break
        if line.startswith('"""', j) or line.startswith("'''", j):
            open_string = line[j : j + 3]
            j += 3
        elif char == '"':
            j = _skip_basic_string(line, j)
        elif char == "'":
            close = line.find("'", j + 1)
            j = len(line) if close < 0 else close + 1
        else:
            if char in "[{":
                depth += 1
            elif char in "]}":
                depth = max(0, depth - 1)
            j += 1
    return open_string, depth


def _check_toml_edit(path: Path, before: dict[str, Any], text: str, desired: dict[str, Any] | None) -> None:
    """The edited text must parse to the same settings with only our server added, replaced or gone."""
    try:
        after: dict[str, Any] | None = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        after = None
    servers = after.get(_CODEX_TABLE) if after is not None else None
    ours = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
    if after is None or ours != desired or _without_ours(after) != _without_ours(before):
        verb = "remove" if desired is None else "write"
        raise InstallError(
            f"{path}: cannot {verb} [{_CODEX_TABLE}.{SERVER_NAME}] without touching other settings "
            f"(unusual layout, e.g. an inline {_CODEX_TABLE} table): edit it by hand, then run again"
        )


def _without_ours(doc: dict[str, Any]) -> dict[str, Any]:
    """The settings minus our server (and minus an `mcp_servers` that held nothing else)."""
    rest = dict(doc)
    servers = rest.get(_CODEX_TABLE)
    if isinstance(servers, dict):
        servers = {name: value for name, value in servers.items() if name != SERVER_NAME}
        if servers:
            rest[_CODEX_TABLE] = servers
        else:
            del rest[_CODEX_TABLE]
    return rest
