"""`memos-bridge memories …`: see, search, correct, forget and move memories from a terminal.

The CLI is one more client of the service, not a second way into the database: each command is one or
two JSON-RPC calls (`memory.list_memories`, `memory.search`, `memory.update`, …) to the process that serves
the data home, so what it shows is what hosts recall and what it changes is what they recall next. How it
reaches that process is decided in one place, `home_client.open_client`.

Output is for people by default (tables, a panel for `show`, a spinner while a call may take a while) and,
with `--json`, the method's JSON result as one document on stdout for scripts. Errors are one line on
stderr; the exit status is 1 for a request the service refused or an id it does not know, 2 for a bad
command line or configuration.

Module-level imports are standard library only: `cli.py` builds this parser on every start, `serve`
included, and `serve` must not pay for rich or the client before it has claimed stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memos_bridge.ids import PREFIXES

if TYPE_CHECKING:
    from rich.console import Console

    from memos_bridge.client import ServiceClient

#: What `list --kind` accepts (the contract's `MemoryKind`).
LIST_KINDS = ("memory", "policy", "world_model", "skill", "trace")
#: Id prefix → memory kind, as `memos_bridge/ids.py` mints them.
KIND_BY_PREFIX: dict[str, str] = {PREFIXES[kind]: kind for kind in LIST_KINDS}
#: What `purge --kind` accepts (the contract's `PurgeKind`).
PURGE_KINDS = ("trace", "policy", "world_model", "skill", "memory", "episode", "session")
#: What `export --kind` accepts (the contract's `ExportKind`).
EXPORT_KINDS = ("trace", "policy", "world_model", "skill", "memory", "episode", "session", "feedback")
REMEMBERED_TYPES = ("fact", "preference", "rule", "error", "pattern", "insight")

#: Calls that may run long on a big home (they read or rewrite every memory): no 60 s default.
LONG_CALL_S = 900.0

_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(?:\d+[smhdw])+")


class CliError(Exception):
    """A failure reported as one line on stderr with this exit status (1: refused or unknown, 2: usage)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# ---------------------------------------------------------------- argument types


def duration_ms(value: str) -> int:
    """`7d`, `12h`, `30m`, `45s`, `2w` or a sum such as `1h30m`, in milliseconds."""
    text = value.strip().lower()
    if not _DURATION.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a duration such as 7d, 12h, 30m or 1h30m, not {value!r}")
    return sum(int(n) * _UNITS_MS[unit] for n, unit in re.findall(r"(\d+)([smhdw])", text))


def when_ms(value: str) -> int:
    """An ISO date or date-time (`2025-01-31`, `2025-01-31T18:00`, with or without offset) as epoch ms;
    a time without an offset is local time, as a person typing it means."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        message = f"expected a date such as 2025-01-31 or 2025-01-31T18:00, not {value!r}"
        raise argparse.ArgumentTypeError(message) from None
    return int(moment.timestamp() * 1000)  # naive → local time (datetime.timestamp's rule)


def expiry_ms(value: str) -> int:
    """`--expires`: `never` (0: no expiry), a duration from now (`7d`), or a date (`2025-01-31`)."""
    if value.strip().lower() in ("never", "none", "0"):
        return 0
    if _DURATION.fullmatch(value.strip().lower()):
        return int(time.time() * 1000) + duration_ms(value)
    return when_ms(value)


def importance(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"importance is a number from 0 to 1, not {value!r}")
    return number


def limit(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 500:
        raise argparse.ArgumentTypeError(f"limit is a whole number from 1 to 500, not {value!r}")
    return int(value)


def kind_of(memory_id: str) -> str:
    """The kind an id names by its prefix; an id of no memory kind is an unknown id (exit 1)."""
    kind = KIND_BY_PREFIX.get(memory_id[:3])
    if kind is None:
        prefixes = ", ".join(KIND_BY_PREFIX)
        raise CliError(f"no memory has the id {memory_id!r}: memory ids start with {prefixes}")
    return kind


# ---------------------------------------------------------------- parser


def add_parser(sub: Any) -> None:
    """Add `memories` and its subcommands to the top-level subparsers `sub`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", help="data home (default: $MEMOS_BRIDGE_HOME or ~/.memos-bridge)")
    common.add_argument("--json", action="store_true", help="print the method's JSON result (one document)")

    memories = sub.add_parser(
        "memories",
        help="list, search, show, edit, forget, purge, export and import memories",
        description="Work with the memories of a data home through its service: the process that serves the home "
        "when one runs, else a service started for the length of the command.",
    )
    cmds = memories.add_subparsers(dest="memories_command", required=True, metavar="COMMAND")

    p = cmds.add_parser("list", parents=[common], help="list memories of one kind (default: remembered ones)")
    p.add_argument("--kind", choices=LIST_KINDS, default="memory", help="policy lists experiences")
    p.add_argument("--type", help="remembered type (fact, rule, …) or experience type (success_pattern, …)")
    p.add_argument("--status", help="active, archived, forgotten (memories); candidate, active, archived (others)")
    p.add_argument("--include-forgotten", action="store_true", help="list forgotten memories too")
    p.add_argument("--limit", type=limit, default=50)

    p = cmds.add_parser("search", parents=[common], help="search memories as recall does")
    p.add_argument("query")
    p.add_argument("--limit", type=limit, default=20)
    p.add_argument(
        "--channel",
        action="append",
        choices=("keyword", "vector"),
        help="only the keyword (exact words) or vector (meaning) channels; repeatable (default: both)",
    )

    p = cmds.add_parser("show", parents=[common], help="one memory with its scores, status and origin")
    p.add_argument("id", help="me_ memory, po_ experience, wm_ world model, sk_ skill, tr_ step")

    p = cmds.add_parser("history", parents=[common], help="every event on one memory, oldest first")
    p.add_argument("id")

    p = cmds.add_parser("remember", parents=[common], help="store something on purpose")
    p.add_argument("text")
    p.add_argument("--type", choices=REMEMBERED_TYPES, default="fact")
    p.add_argument("--importance", type=importance, help="0..1 (default 0.5)")
    p.add_argument("--ttl", type=duration_ms, help="stop recalling it after this long: 7d, 12h, 30m")
    p.add_argument("--tag", action="append", default=[], help="repeatable")
    p.add_argument("--user", action="store_true", help="the user's own statement (protected from failure evidence)")
    p.add_argument("--pin", action="store_true", help="never decays or is archived for idleness")

    p = cmds.add_parser("edit", parents=[common], help="correct a memory in place (old values go to its history)")
    p.add_argument("id")
    p.add_argument("--content", help="the text (a memory's content, an experience's procedure, …)")
    p.add_argument("--title", help="an experience's or world model's title, a skill's name")
    p.add_argument("--tag", action="append", help="replaces the tags; repeatable")
    p.add_argument("--importance", type=importance)
    p.add_argument("--expires", type=expiry_ms, help="never, a duration from now (7d) or a date (2025-01-31)")

    p = cmds.add_parser("forget", parents=[common], help="hide a memory from every recall, search and list")
    p.add_argument("id")
    p.add_argument("--reason", help="kept in the memory's history")

    p = cmds.add_parser("restore", parents=[common], help="bring back a forgotten or archived memory")
    p.add_argument("id")

    p = cmds.add_parser(
        "purge",
        parents=[common],
        help="delete for good (no restore)",
        description="Delete memories for good: their rows, index entries and vectors. Asks for confirmation on a "
        "terminal; give --yes to skip it (required when stdin is not a terminal).",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", action="append", dest="ids", metavar="ID", help="repeatable")
    which.add_argument("--all", action="store_true", help="everything of the default namespace")
    p.add_argument("--kind", action="append", choices=PURGE_KINDS, help="only these kinds; repeatable")
    p.add_argument("--before", type=when_ms, help="only rows created before this date (2025-01-31)")
    p.add_argument("--yes", action="store_true", help="do not ask")

    p = cmds.add_parser("export", parents=[common], help="write memories to a JSONL or Markdown file")
    p.add_argument("path", nargs="?", help="file to write (default: <home>/exports/memos-<time>.<jsonl|md>)")
    p.add_argument("--format", choices=("jsonl", "markdown"), default="jsonl")
    p.add_argument("--kind", action="append", choices=EXPORT_KINDS, help="only these kinds; repeatable")
    p.add_argument("--vectors", action="store_true", help="JSONL only: keep the embedding vectors")
    p.add_argument("--overwrite", action="store_true")

    p = cmds.add_parser("import", parents=[common], help="read an export (or Hermes' MEMORY.md / USER.md) back in")
    p.add_argument("path")
    p.add_argument("--mode", choices=("merge", "replace"), default="merge", help="replace purges the namespace first")
    p.add_argument(
        "--format",
        choices=("auto", "jsonl", "hermes"),
        default="auto",
        help="auto: a memos-bridge JSONL export, or Hermes' MEMORY.md / USER.md by name; hermes forces the latter",
    )
    p.add_argument("--yes", action="store_true", help="with --mode replace: do not ask")

    p = cmds.add_parser("reflect", parents=[common], help="consolidate now instead of waiting for the learning queue")
    p.add_argument("--episodes", type=int, help="recent scored episodes to revisit (default 200)")

    cmds.add_parser("stats", parents=[common], help="counts per kind and status, strength, age, recall hit rate")


# ---------------------------------------------------------------- connection


# ---------------------------------------------------------------- running a command


def run(args: argparse.Namespace) -> int:
    """Run one `memories` subcommand; returns the exit status."""
    from rich.console import Console

    err = Console(stderr=True, highlight=False)
    try:
        request = _request(args, err)
    except CliError as exc:
        print(f"memos-bridge: {exc.message}", file=sys.stderr)
        return exc.status
    from memos_bridge.config import load_settings
    from memos_bridge.contract.errors import MemosError

    try:
        settings = load_settings(args.home)
    except MemosError as exc:
        print(f"memos-bridge: {exc.message}", file=sys.stderr)
        return 2
    import tempfile

    from memos_bridge.client import CallTimeout, RpcError, TransportClosed
    from memos_bridge.home_client import open_client

    out = Console(highlight=False)
    with tempfile.TemporaryFile() as service_log:
        client: ServiceClient | None = None
        try:
            with _status(err, "connecting to the memos-bridge service…") as status:
                client = open_client(settings.home, service_log)
                if client.process is not None:  # its first answer waits for the embedding model to load
                    status.update(f"starting the service for {settings.home}, then {request.progress}")
                else:
                    status.update(request.progress)
                result = request.call(client)
        except RpcError as exc:
            print(f"memos-bridge: {exc.message}", file=sys.stderr)
            return 1
        except CliError as exc:
            print(f"memos-bridge: {exc.message}", file=sys.stderr)
            return exc.status
        except (TransportClosed, CallTimeout, OSError) as exc:
            code = _exit_code(client)
            if code:  # the service this command started has ended: say why, as it said it
                why = _last_line(service_log) or f"it exited with status {code}"
                print(f"memos-bridge: the service for {settings.home} stopped: {why}", file=sys.stderr)
                return 2 if code == 2 else 1  # 2: it refused the home or its configuration
            print(f"memos-bridge: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        finally:
            if client is not None:
                client.close()
    if args.json:
        sys.stdout.write(json.dumps(request.json_view(result), ensure_ascii=False, indent=2) + "\n")
    else:
        request.render(out, result)
    return 0


class _Request:
    """One command as the calls it makes (`call`), what the spinner says meanwhile, how it is shown to people
    (`render`) and which part of it `--json` prints (`json_view`, by default all of it)."""

    def __init__(
        self,
        progress: str,
        call: Callable[[ServiceClient], Any],
        render: Callable[[Console, Any], None],
        *,
        json_view: Callable[[Any], Any] = lambda result: result,
    ) -> None:
        self.progress = progress
        self.call = call
        self.render = render
        self.json_view = json_view


def _request(args: argparse.Namespace, err: Console) -> _Request:
    """Check the command line (everything that can be checked without the service) and build its request."""
    from memos_bridge import cli_render as show

    command: str = args.memories_command
    if command == "list":
        return _list_request(args)
    if command == "search":
        params: dict[str, Any] = {"query": args.query, "topK": {f"tier{n}": min(args.limit, 50) for n in (1, 2, 3)}}
        if args.channel:
            params["filters"] = {"channels": sorted(set(args.channel))}

        def search(client: ServiceClient) -> Any:
            result = client.call("memory.search", params)
            result["hits"] = result["hits"][: args.limit]
            return result

        return _Request("searching…", search, show.search)
    if command == "show":
        kind = kind_of(args.id)
        return _Request(
            "reading…",
            lambda client: _get(client, kind, args.id),
            show.item_panel(kind),
            json_view=lambda shown: shown["item"],  # the get method's result, as --json promises
        )
    if command == "history":
        kind = kind_of(args.id)
        return _Request(
            "reading…", lambda client: client.call("memory.history", {"id": args.id, "kind": kind}), show.history
        )
    if command == "remember":
        fields = {
            "content": args.text,
            "type": args.type,
            "importance": args.importance,
            "ttlMs": args.ttl,
            "tags": args.tag or None,
            "source": "user" if args.user else None,
            "pinned": True if args.pin else None,
        }
        remember = {key: value for key, value in fields.items() if value is not None}
        return _Request("remembering…", lambda client: client.call("memory.remember", remember), show.remembered)
    if command == "edit":
        kind = kind_of(args.id)
        fields = {
            "content": args.content,
            "title": args.title,
            "tags": args.tag,
            "importance": args.importance,
            "expiresAt": args.expires,
        }
        changes = {key: value for key, value in fields.items() if value is not None}
        if not changes:
            raise CliError("edit needs at least one of --content, --title, --tag, --importance, --expires", 2)
        update = {"id": args.id, "kind": kind, **changes}
        return _Request("updating…", lambda client: client.call("memory.update", update), show.updated)
    if command == "forget":
        kind = kind_of(args.id)
        forget = {"id": args.id, "kind": kind, **({"reason": args.reason} if args.reason else {})}
        return _Request("forgetting…", lambda client: client.call("memory.forget", forget), show.forgotten(args.id))
    if command == "restore":
        kind = kind_of(args.id)
        restore = {"id": args.id, "kind": kind}
        return _Request("restoring…", lambda client: client.call("memory.restore", restore), show.restored(args.id))
    if command == "purge":
        return _purge_request(args, err)
    if command == "export":
        export: dict[str, Any] = {"format": args.format}
        if args.path:  # the service resolves a relative path under the home: resolve it where the user is
            export["path"] = os.path.abspath(os.path.expanduser(args.path))
        if args.kind:
            export["kinds"] = sorted(set(args.kind))
        if args.vectors:
            export["includeVectors"] = True
        if args.overwrite:
            export["overwrite"] = True
        return _Request(
            "exporting…", lambda client: client.call("memory.export", export, timeout=LONG_CALL_S), show.exported
        )
    if command == "import":
        path = Path(os.path.abspath(os.path.expanduser(args.path)))
        if not path.is_file():
            raise CliError(f"no file to import at {path}")
        imported: dict[str, Any] = {"path": str(path), "mode": args.mode, "format": args.format}
        if args.mode == "replace":
            _confirm(
                err,
                args.yes,
                "Replace: this deletes every memory of the default namespace before importing. Continue?",
            )
            imported["confirm"] = True
        return _Request(
            "importing…", lambda client: client.call("memory.import", imported, timeout=LONG_CALL_S), show.imported
        )
    if command == "reflect":
        reflect = {"episodes": args.episodes} if args.episodes else {}
        return _Request(
            "reflecting (running the learning stages)…",
            lambda client: client.call("memory.reflect", reflect, timeout=LONG_CALL_S),
            show.reflected,
        )
    if command == "stats":
        return _Request("counting…", lambda client: client.call("memory.stats", {}), show.stats)
    raise CliError(f"unknown memories command {command!r}", 2)  # pragma: no cover - argparse restricts it


def _list_request(args: argparse.Namespace) -> _Request:
    from memos_bridge import cli_render as show

    kind: str = args.kind
    params: dict[str, Any] = {"limit": args.limit}
    if args.include_forgotten:
        params["includeForgotten"] = True
    if args.status:
        if kind == "trace":
            raise CliError("--status does not apply to --kind trace (steps have no lifecycle status)", 2)
        params["status"] = args.status
    if args.type:
        if kind not in ("memory", "policy"):
            raise CliError("--type applies to --kind memory (fact, rule, …) and policy (experience type)", 2)
        params["experienceType" if kind == "policy" else "type"] = args.type
    method = {
        "memory": "memory.list_memories",
        "policy": "memory.list_policies",
        "world_model": "memory.list_world_models",
        "skill": "skill.list",
        "trace": "memory.list_traces",
    }[kind]
    return _Request("listing…", lambda client: client.call(method, params), show.listing(kind))


def _purge_request(args: argparse.Namespace, err: Console) -> _Request:
    from memos_bridge import cli_render as show

    params: dict[str, Any] = {"confirm": True}
    if args.ids:
        params["ids"] = list(dict.fromkeys(args.ids))
        what = f"{len(params['ids'])} memor{'y' if len(params['ids']) == 1 else 'ies'} ({', '.join(params['ids'])})"
    else:
        what = "every memory of the default namespace"
    if args.kind:
        params["kinds"] = sorted(set(args.kind))
        what += f", kinds {', '.join(params['kinds'])}"
    if args.before is not None:
        params["before"] = args.before
        what += f", created before {datetime.fromtimestamp(args.before / 1000):%Y-%m-%d %H:%M}"
    _confirm(err, args.yes, f"Delete {what} for good? This cannot be undone.")
    return _Request("purging…", lambda client: client.call("memory.purge", params, timeout=LONG_CALL_S), show.purged)


def _confirm(err: Console, yes: bool, question: str) -> None:
    """Ask on a terminal; without one, only `--yes` proceeds (a script must say it means it)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CliError("refusing to delete without --yes (no terminal to confirm on)", 2)
    from rich.prompt import Confirm

    if not Confirm.ask(question, console=err, default=False):
        raise CliError("cancelled", 1)


_GETTERS = {
    "memory": "memory.get_memory",
    "policy": "memory.get_policy",
    "world_model": "memory.get_world",
    "skill": "skill.get",
    "trace": "memory.get_trace",
}


#: Requests `show` lists that a memory was recalled for (the latest).
RECALLS_SHOWN = 3


def _get(client: ServiceClient, kind: str, memory_id: str) -> dict[str, Any]:
    """The memory as its kind's get method returns it (`item`), with what its history says beside it: the
    `created` event (where it came from), its links and the latest requests it was recalled for."""
    from memos_bridge.client import RpcError

    item = client.call(_GETTERS[kind], {"id": memory_id})
    if item is None:
        raise CliError(f"{kind.replace('_', ' ')} not found: {memory_id}")
    events: list[dict[str, Any]] = []
    with contextlib.suppress(RpcError):
        events = client.call("memory.history", {"id": memory_id, "kind": kind})["events"]
    return {
        "item": item,
        "created": next((event for event in events if event["event"] == "created"), None),
        "links": [event["detail"] for event in events if event["event"] == "linked"],
        "recalled": [event for event in events if event["event"] == "recalled"][-RECALLS_SHOWN:],
    }


@contextlib.contextmanager
def _status(err: Console, message: str) -> Iterator[Any]:
    """A spinner on stderr while the service starts or works; nothing when stderr is not a terminal."""
    if not err.is_terminal:
        yield _Silent()
        return
    with err.status(message) as status:
        yield status


class _Silent:
    """The spinner's stand-in when stderr is not a terminal: progress updates go nowhere, so scripts reading
    the output see only results."""

    def update(self, *_args: Any, **_kwargs: Any) -> None:
        return None


def _exit_code(client: ServiceClient | None) -> int | None:
    """The exit status of the service this command started, once it has ended (None: still running or
    not started by this command)."""
    import subprocess

    process = client.process if client is not None else None
    if process is None:
        return None
    try:
        return process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


def _last_line(log: IO[bytes]) -> str:
    """The last line the started service wrote on stderr (why it could not start)."""
    with contextlib.suppress(OSError):
        log.seek(0)
        lines = [line.strip() for line in log.read().decode("utf-8", "replace").splitlines() if line.strip()]
        if lines:
            return lines[-1].removeprefix("memos-bridge: ")
    return ""
