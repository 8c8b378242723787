"""`memos-bridge migrate --from HOME|URL --to URL|HOME`: move a whole memory to another database.

The use it is made for: a memory that grew on a laptop (SQLite in the data home) moves to a shared PostgreSQL
server, or comes back. The copying itself is `storage/copy.py`; this module finds the two databases, makes
sure nobody writes to them meanwhile, shows progress and prints the verification.

* `--from` / `--to` take a data home folder (its database found as the service finds it: `storage.url` from
  its config.toml or the environment, else `<home>/memos.db`), a SQLite file, or a SQLAlchemy URL
  (`sqlite:////path/memos.db`, `postgresql+psycopg://user@host/db`). A target home that does not exist yet
  is created;
* a data home served by a running process (it holds the home's owner lock, `transport/owner.py`) is
  refused as the source unless `--allow-live`: the copy reads one consistent snapshot, but what the service
  writes after that moment would never reach the target. A served target is always refused: its service
  would not see the copied rows in its in-memory vector index. While copying, this command holds the
  homes' locks itself, so no service starts on them half-way;
* progress: one bar per table on stderr, or one line per table when stderr is not a terminal (a log file,
  CI). The per-table counts of source and target go to stdout as a table.

Exit status: 0 when every table has as many rows in the target as in the source, 1 when one differs or the
copy failed part-way (running the command again continues it), 2 for a bad command line, an unusable
database or a refused copy.

Module-level imports are standard library only: `cli.py` builds every parser on each start, `serve` included.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from memos_bridge.storage.copy import CopyReport, TableProgress
    from memos_bridge.transport.owner import HomeLock

EPILOG = """\
examples:
  memos-bridge migrate --from ~/.memos-bridge --to postgresql+psycopg://me@db.example/memos
  memos-bridge migrate --from postgresql+psycopg://me@db.example/memos --to ~/memos-copy

An interrupted copy continues where it stopped when run again; a run after a complete copy only verifies.
Then point the service at the target: storage.url in <home>/config.toml (or MEMOS_BRIDGE_STORAGE__URL)."""


class MigrateError(Exception):
    """A failure reported as one line on stderr with this exit status."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """One side of the copy: its database URL, the data home whose owner lock guards it (if any), and how
    to name it to a person (never with a password)."""

    url: str
    home: Path | None
    label: str


def add_parser(sub: Any) -> None:
    """Add `migrate` to the main parser's subcommands."""
    parser = sub.add_parser(
        "migrate",
        help="copy a whole memory to another database (SQLite → PostgreSQL and back), resumable and verified",
        description="Copy every table of a memory from one database to another, in batches, then compare the "
        "row counts. The target's schema is created by the product's migrations; its search indexes are "
        "rebuilt there. Interrupted, run it again: it continues without duplicating rows.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--from", dest="source", required=True, metavar="HOME|URL", help="data home, SQLite file or database URL"
    )
    parser.add_argument(
        "--to", dest="target", required=True, metavar="URL|HOME", help="database URL, SQLite file or data home"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="copy into a target that already holds rows not copied from this source (e.g. an earlier copy of "
        "this memory from another path); rows whose key the target has are kept as they are",
    )
    parser.add_argument(
        "--allow-live",
        action="store_true",
        help="copy from a home a running service writes to (a snapshot: later writes do not reach the target)",
    )
    parser.add_argument("--batch", type=_positive, default=1000, help="rows per transaction (default 1000)")


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError("expected a whole number ≥ 1")
    return int(value)


def run(args: argparse.Namespace) -> int:
    """The `migrate` command; returns the exit status (module docstring)."""
    from rich.console import Console

    err = Console(stderr=True, highlight=False)
    try:
        source = resolve(args.source, role="source")
        target = resolve(args.target, role="target")
        if _same_database(source.url, target.url):
            raise MigrateError(f"the source and the target are the same database ({source.label})")
        with _locked(source, "source", live_ok=args.allow_live, err=err), _locked(target, "target", err=err):
            report = _copy(source, target, force=args.force, batch=args.batch, err=err)
    except MigrateError as exc:
        print(f"memos-bridge: {exc.message}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print("memos-bridge: interrupted; run the same command again to continue the copy", file=sys.stderr)
        return 130
    _print_report(Console(highlight=False), source, target, report)
    return 0 if report.ok else 1


# ---------------------------------------------------------------------------------------------------------
# Finding the two databases


def resolve(value: str, *, role: str) -> Endpoint:
    """`--from` / `--to` → an Endpoint: a URL as given, an existing file as a SQLite file, anything else as
    a data home (a target home that does not exist yet is created by `_locked`, once the source passed its
    checks)."""
    from sqlalchemy.engine import make_url

    from memos_bridge.config import check_storage_url, load_settings
    from memos_bridge.contract.errors import MemosError

    if "://" in value:
        try:
            check_storage_url(value)
        except ValueError as exc:
            raise MigrateError(f"--{_flag(role)} {_hide(value)}: {exc}") from exc
        parsed = make_url(value)
        home = _home_of_file(parsed.database) if parsed.get_backend_name() == "sqlite" else None
        return _sqlite_checked(Endpoint(value, home, _hide(value)), role)
    path = Path(value).expanduser().absolute()
    if path.is_file():
        return _sqlite_checked(Endpoint(f"sqlite:///{path}", _home_of_file(str(path)), str(path)), role)
    if role == "source" and not path.is_dir():
        raise MigrateError(f"--from {path}: no data home, SQLite file or database URL there")
    try:
        settings = load_settings(path)
    except MemosError as exc:
        raise MigrateError(exc.message) from exc
    url = settings.database_url
    shown = str(settings.db_path) if settings.storage.url is None else _hide(url)
    return _sqlite_checked(Endpoint(url, settings.home, shown), role)


def _sqlite_checked(endpoint: Endpoint, role: str) -> Endpoint:
    """Refuse an in-memory database (nothing to copy, nothing kept) and a source SQLite file that is not
    there (opening it would create an empty one)."""
    from sqlalchemy.engine import make_url

    url = make_url(endpoint.url)
    if url.get_backend_name() != "sqlite":
        return endpoint
    if url.database in (None, "", ":memory:"):
        raise MigrateError(f"--{_flag(role)}: an in-memory SQLite database cannot be copied from or to")
    if role == "source" and not Path(url.database).expanduser().is_file():
        raise MigrateError(f"--from: no database at {url.database} (a home that was never served has no memory)")
    return endpoint


def _home_of_file(database: str | None) -> Path | None:
    """The data home a SQLite file lives in, recognised by its owner lock file beside it."""
    from memos_bridge.transport.owner import LOCK_NAME

    if not database or database == ":memory:":
        return None
    folder = Path(database).expanduser().absolute().parent
    return folder if (folder / LOCK_NAME).exists() else None


def _same_database(a: str, b: str) -> bool:
    from sqlalchemy.engine import make_url

    left, right = make_url(a), make_url(b)
    if left.get_backend_name() == right.get_backend_name() == "sqlite":
        return Path(left.database or "").expanduser().resolve() == Path(right.database or "").expanduser().resolve()
    return left.render_as_string(hide_password=False) == right.render_as_string(hide_password=False)


def _hide(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _flag(role: str) -> str:
    return "from" if role == "source" else "to"


@contextlib.contextmanager
def _locked(endpoint: Endpoint, role: str, *, err: Console, live_ok: bool = False) -> Iterator[None]:
    """Hold the owner lock of the endpoint's data home for the copy, so no service starts on it half-way;
    refuse a home a running process serves (the source only with `live_ok`)."""
    from memos_bridge.transport import owner

    if endpoint.home is None:
        yield
        return
    try:
        endpoint.home.mkdir(parents=True, exist_ok=True, mode=0o700)  # memories are private
        lock: HomeLock | None = owner.try_lock(endpoint.home)
    except OSError as exc:
        raise MigrateError(f"cannot use data home {endpoint.home}: {exc.strerror or exc}") from exc
    if lock is None:
        info = owner.read_owner(endpoint.home)
        who = f"pid {info.pid}" if info.pid is not None else "another process"
        if not live_ok:
            raise MigrateError(_live_message(endpoint.home, who, role))
        err.print(
            f"warning: {endpoint.home} is served by {who}: copying a snapshot; what it writes from now on will "
            "not reach the target",
            soft_wrap=True,
            markup=False,
        )
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def _live_message(home: Path, who: str, role: str) -> str:
    if role == "source":
        return (
            f"data home {home} is served by {who}: what it writes during and after the copy would not reach the "
            "target. Stop it (and the hosts that spawn it) first, or give --allow-live to copy a snapshot anyway"
        )
    return f"data home {home} (the target) is served by {who}: it would not see the copied memories. Stop it first"


# ---------------------------------------------------------------------------------------------------------
# Copying, with progress


def _copy(source: Endpoint, target: Endpoint, *, force: bool, batch: int, err: Console) -> CopyReport:
    from sqlalchemy.exc import DBAPIError, IntegrityError, NoSuchModuleError

    from memos_bridge.contract.errors import MemosError
    from memos_bridge.storage.copy import copy_memory
    from memos_bridge.storage.engine import create_db_engine

    engines = []
    try:
        try:
            src = create_db_engine(source.url, busy_timeout_ms=5000, pool_size=2)
            dst = create_db_engine(target.url, busy_timeout_ms=5000, pool_size=2)
        except (NoSuchModuleError, ImportError) as exc:
            raise MigrateError(f"cannot open the database: {exc}") from exc
        engines = [src, dst]
        _check_connects(src, "source", source.label)
        _check_connects(dst, "target", target.label)
        with _progress(err) as on_progress:
            return copy_memory(
                src, dst, source_label=source.label, force=force, batch_rows=batch, on_progress=on_progress
            )
    except MemosError as exc:
        raise MigrateError(exc.message) from exc
    except IntegrityError as exc:
        raise MigrateError(
            f"the target refused a row: {_first_line(exc.orig)}. With --force, a row of the memory already there "
            "may have the same key; to merge two memories, use memos-bridge memories export / import instead",
            status=1,
        ) from exc
    except DBAPIError as exc:
        raise MigrateError(
            f"the copy stopped: {_first_line(exc.orig)}; run the same command again to continue", status=1
        ) from exc
    finally:
        for engine in engines:
            engine.dispose()


def _check_connects(engine: Any, role: str, label: str) -> None:
    """A database that cannot be reached is a configuration problem (exit 2), not a failed copy."""
    from sqlalchemy.exc import DBAPIError

    try:
        with engine.connect():
            pass
    except DBAPIError as exc:
        raise MigrateError(f"cannot connect to the {role} database {label}: {_first_line(exc.orig)}") from exc


def _first_line(error: BaseException | None) -> str:
    return str(error).strip().splitlines()[0] if error is not None and str(error).strip() else "unknown error"


@contextlib.contextmanager
def _progress(err: Console) -> Iterator[Any]:
    """A progress callback: a bar per table on a terminal, else one line per finished table."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    if not err.is_terminal:

        def line(step: TableProgress) -> None:
            if step.finished:
                kept = step.done - step.copied
                rows = "row" if step.done == 1 else "rows"
                print(f"{step.table}: {step.done} {rows} ({step.copied} copied, {kept} already there)", file=sys.stderr)

        yield line
        return
    with Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[copied]} copied"),
        console=err,
    ) as bar:
        tasks: dict[str, Any] = {}

        def advance(step: TableProgress) -> None:
            if step.table not in tasks:
                tasks[step.table] = bar.add_task(step.table, total=step.total, copied=0)
            bar.update(tasks[step.table], completed=step.done, total=max(step.total, step.done), copied=step.copied)

        yield advance


def _print_report(console: Console, source: Endpoint, target: Endpoint, report: CopyReport) -> None:
    from rich import box
    from rich.table import Table

    def say(line: str) -> None:  # labels are paths and URLs: never markup, never wrapped mid-path
        console.print(line, soft_wrap=True, markup=False)

    state = "continued an earlier copy" if report.resumed else "copied"
    say(f"{state}: {source.label} → {target.label}")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("table", no_wrap=True)
    table.add_column("source", justify="right")
    table.add_column("target", justify="right")
    table.add_column("copied now", justify="right")
    table.add_column("check")
    for count in report.tables:
        check = "ok" if count.ok else "[bold red]MISMATCH[/]"
        table.add_row(count.table, str(count.source), str(count.target), str(count.copied), check)
    console.print(table)
    for note in report.notes:
        say(note)
    if report.nul_replaced:
        say(
            f"{report.nul_replaced} text value(s) held a NUL character, which PostgreSQL text cannot store: "
            "replaced by U+FFFD"
        )
    bad = [count.table for count in report.tables if not count.ok]
    if bad:
        say(
            f"verification FAILED: the row counts differ in {', '.join(bad)} (a target that held other rows, or "
            "a source written to during the copy)"
        )
    else:
        say(f"verified: {sum(c.source for c in report.tables)} rows in {len(report.tables)} tables match")
