"""Command line of the MCP face: `mcp` (the server), `hook claude-code <event>`, `install` / `uninstall <host>`.

Kept apart from `cli.py` so that module stays a table of commands; the imports here are stdlib-only at module
level as well (a hook is a process per event, and its start-up time is part of every prompt's latency).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HOME_HELP = "data home (default: $MEMOS_BRIDGE_HOME or ~/.memos-bridge)"


def add_parsers(sub: Any) -> None:
    """Add `mcp`, `hook`, `install` and `uninstall` to the main parser's subcommands."""
    mcp = sub.add_parser(
        "mcp",
        help="serve the memory to an MCP host (Claude Code, Cursor, Codex, …) over stdio",
        description="An MCP server on stdio. It talks to the running service of the data home (or starts one), "
        "and works in one namespace per project folder unless --namespace names a shared one.",
    )
    mcp.add_argument("--home", help=HOME_HELP)
    mcp.add_argument("--agent", default="mcp", help="the host's name, recorded as the agent kind (default: mcp)")
    mcp.add_argument(
        "--namespace", help="a shared workspace id instead of one per project (also $MEMOS_BRIDGE_NAMESPACE)"
    )
    mcp.add_argument("--project", help="the project folder (default: the current folder's git root)")

    hook = sub.add_parser(
        "hook",
        help="Claude Code hook commands: recall on each prompt, capture each tool call and reply",
        description="Reads the hook's JSON on stdin and answers in the host's hook output format. Never fails "
        "the host: errors go to <home>/logs/hooks.log.",
    )
    hook.add_argument("host", choices=["claude-code"])
    hook.add_argument("event", choices=["user-prompt-submit", "post-tool-use", "post-tool-use-failure", "stop"])
    hook.add_argument("--home", help=HOME_HELP)
    hook.add_argument("--namespace", help="a shared workspace id instead of one per project")

    for name, verb in (("install", "register"), ("uninstall", "remove")):
        parser = sub.add_parser(
            name,
            help=f"{verb} the MCP server (and, for Claude Code, the hooks) in a host's config",
            description=f"Shows the change as a diff, then asks before writing (--yes: don't ask). "
            f"{'Uninstall removes exactly what install added.' if name == 'uninstall' else 'Idempotent.'}",
        )
        parser.add_argument("host", choices=["claude-code", "cursor", "codex"])
        parser.add_argument("--user", action="store_true", help="user-wide config instead of this project's")
        parser.add_argument("--project", help="the project folder (default: the current folder's git root)")
        parser.add_argument("--yes", "-y", action="store_true", help="write without asking")
        parser.add_argument("--dry-run", action="store_true", help="show the diff only")


def _settings(home: str | None) -> Any:
    from memos_bridge.config import load_settings
    from memos_bridge.contract.errors import MemosError

    try:
        return load_settings(home)
    except MemosError as exc:
        print(f"memos-bridge: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from exc


def cmd_mcp(args: argparse.Namespace) -> int:
    from memos_bridge.mcp.server import McpOptions, run

    settings = _settings(args.home)
    options = McpOptions(
        home=settings.home,
        agent=args.agent,
        namespace=args.namespace,
        configured_namespace=settings.mcp.namespace,
        project_dir=Path(args.project) if args.project else None,
    )
    return run(options)


def cmd_hook(args: argparse.Namespace) -> int:
    from memos_bridge.mcp.hooks import HookOptions, run

    try:
        settings = _settings(args.home)
    except SystemExit:
        return 0  # a broken config must not block the user's prompt; the error was printed to stderr
    options = HookOptions(
        home=settings.home,
        prompt_timeout_s=settings.mcp.prompt_timeout_s,
        configured_namespace=settings.mcp.namespace,
        namespace=args.namespace,
    )
    return run(args.event, sys.stdin, sys.stdout, options)


def cmd_install(args: argparse.Namespace) -> int:
    from memos_bridge.mcp import install
    from memos_bridge.mcp.project import project_root

    project = project_root(Path(args.project) if args.project else Path.cwd())
    try:
        if args.command == "install":
            changes = install.plan_install(args.host, project_dir=project, user=args.user)
        else:
            changes = install.plan_uninstall(args.host, project_dir=project, user=args.user)
    except install.InstallError as exc:
        print(f"memos-bridge: {exc}", file=sys.stderr)
        return 2
    changed = [change for change in changes if change.changed]
    if not changed:
        state = "already installed" if args.command == "install" else "not installed"
        print(f"memos-bridge: {args.host}: {state}; nothing to change")
        return 0
    print(install.render_diff(changed), end="")
    if args.dry_run:
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print("memos-bridge: not a terminal; re-run with --yes to write these changes", file=sys.stderr)
            return 1
        answer = input(f"Write {len(changed)} file(s)? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("memos-bridge: nothing written")
            return 1
    install.apply(changed)
    for change in changed:
        print(f"{'removed' if change.after is None else 'wrote'} {change.path}")
    if args.command == "install":
        _print_next_steps(args.host)
    return 0


def _print_next_steps(host: str) -> None:
    checks = {
        "claude-code": "restart Claude Code in this project, then `claude mcp list` shows memos-bridge connected; "
        "each prompt now recalls memories and each turn is captured",
        "cursor": "reload Cursor; Settings → MCP lists memos-bridge with its tools",
        "codex": "`codex mcp list` shows memos-bridge",
    }
    print(f"next: {checks[host]}")
