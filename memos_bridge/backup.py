"""`memos-bridge backup PATH`: a consistent copy of a data home's SQLite database, safe while it is served.

Copying `memos.db` with `cp` while a service writes can catch the file between two writes, and misses what
sits in `memos.db-wal` (the service uses WAL mode: recent commits live there until a checkpoint). SQLite's
online backup API copies the database as one transaction sees it, WAL included, while the service keeps
writing: the copy is a database as it was at one commit, never a mixture.

The source is opened read-only with a busy timeout, so the backup can never change the home. The copy is
written to a temporary file beside PATH, switched to the rollback journal (a single self-contained file, no
`-wal` needed beside it), checked with `PRAGMA integrity_check`, and only then renamed to PATH — a failed or
interrupted backup leaves no half-written file, and `--overwrite` replaces an older backup only with a
verified one.

Copying runs in steps of pages so progress can be shown. SQLite restarts a stepped copy whenever another
connection writes to the source between two steps; when that keeps happening (a busy service), the copy is
done again in one step, which holds one read snapshot to the end — WAL lets the service write meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

RESTORE_HELP = """\
restore a backup:
  1. stop every process that serves the home (memos-bridge doctor shows the owner), hosts included;
  2. copy the backup over <home>/memos.db (or the file storage.url names);
  3. delete <home>/memos.db-wal and <home>/memos.db-shm if they exist — they belong to the old database
     and would be replayed into the restored one;
  4. start the service again (memos-bridge doctor checks the schema and counts).
A PostgreSQL storage.url is not copied by this command: use pg_dump / pg_restore."""

#: Restarts of a stepped copy (a write to the source between steps) before copying in one step instead.
MAX_RESTARTS = 3


class _Restarted(Exception):
    """Raised from the progress callback to stop a stepped copy that keeps restarting."""


def sqlite_file(database_url: str) -> Path | str:
    """The SQLite file of a storage URL, or the reason it has none (a string)."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        shown = url.render_as_string(hide_password=True)
        return (
            f"storage.url is {url.get_backend_name()} ({shown}): use pg_dump to back it up, e.g. "
            "pg_dump --format=custom --file memos.dump <database>"
        )
    if url.database in (None, "", ":memory:"):
        return "storage.url is an in-memory SQLite database: there is no file to back up"
    return Path(url.database).expanduser()


def copy_database(
    source: Path,
    target: Path,
    *,
    busy_timeout_s: float = 5.0,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Copy the SQLite database `source` to the new file `target` with the online backup API.

    `progress(copied_pages, total_pages)` is called after each step.
    """
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True, timeout=busy_timeout_s)
    try:
        total = int(src.execute("PRAGMA page_count").fetchone()[0])
        pages = max(64, total // 100)  # about a hundred steps: a smooth bar, few chances to be restarted
        seen = {"remaining": total, "restarts": 0}

        def step(_status: int, remaining: int, count: int) -> None:
            if remaining > seen["remaining"]:  # a write between two steps sent the copy back to the start
                seen["restarts"] += 1
                if seen["restarts"] > MAX_RESTARTS:
                    raise _Restarted
            seen["remaining"] = remaining
            if progress is not None:
                progress(count - remaining, count)

        dst = sqlite3.connect(target)
        try:
            try:
                src.backup(dst, pages=pages, progress=step)
            except _Restarted:
                src.backup(dst, pages=-1)  # one step: one read snapshot to the end
                if progress is not None:
                    progress(total, total)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, whatever the source used
        finally:
            dst.close()
    finally:
        src.close()


def table_counts(path: Path) -> dict[str, int]:
    """Rows per table of the database at `path`; full-text indexes' own storage tables are left out."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
        virtual = [name for name, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL TABLE")]
        out: dict[str, int] = {}
        for name, _sql in rows:
            if name.startswith("sqlite_") or name in virtual or any(name.startswith(v + "_") for v in virtual):
                continue
            quoted = '"' + name.replace('"', '""') + '"'
            out[name] = int(db.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0])
        return out
    finally:
        db.close()


def integrity(path: Path) -> str:
    """`PRAGMA integrity_check` of the database at `path`: "ok", or the problems it found."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return "; ".join(str(row[0]) for row in db.execute("PRAGMA integrity_check").fetchall())
    finally:
        db.close()


def run_backup(home: str | None, path: str, *, overwrite: bool) -> int:
    """The `backup` command: 0 when a verified copy is at `path`, 1 when it could not be made, 2 on bad
    usage or configuration (including a PostgreSQL home)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from memos_bridge.config import load_settings
    from memos_bridge.contract.errors import MemosError

    def fail(message: str, status: int) -> int:
        print(f"memos-bridge: {message}", file=sys.stderr)
        return status

    try:
        settings = load_settings(home)
    except MemosError as exc:
        return fail(exc.message, 2)
    source = sqlite_file(settings.database_url)
    if isinstance(source, str):
        return fail(source, 2)
    if not source.is_file():
        return fail(f"no database to back up at {source} (the home has not been served yet)", 1)
    target = Path(os.path.abspath(os.path.expanduser(path)))
    if target.exists() and not overwrite:
        return fail(f"{target} exists; give --overwrite to replace it", 1)
    if not target.parent.is_dir():
        return fail(f"the folder {target.parent} does not exist", 1)
    with contextlib.suppress(OSError):
        if target.resolve() == source.resolve():
            return fail("the backup cannot be the database itself", 2)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    err = Console(stderr=True)
    try:
        with Progress(
            TextColumn("copying {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("pages"),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as bar:
            task = bar.add_task(source.name, total=None)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            copy_database(source, partial, busy_timeout_s=settings.storage.busy_timeout_ms / 1000, progress=advance)
        os.chmod(partial, 0o600)  # memories are private, as the home is
        verdict = integrity(partial)
        if verdict != "ok":
            return fail(f"the copy failed its integrity check ({verdict}); nothing written to {target}", 1)
        tables = table_counts(partial)
        os.replace(partial, target)
    except sqlite3.Error as exc:
        return fail(f"backup of {source} failed: {exc}", 1)
    finally:
        for leftover in (partial, Path(f"{partial}-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    _report(Console(highlight=False), source, target, tables)
    return 0


def _report(console: Console, source: Path, target: Path, tables: dict[str, int]) -> None:
    from rich import box
    from rich.table import Table

    from memos_bridge.cli_render import size

    console.print(f"backed up {source} → {target} ({size(target.stat().st_size)}), integrity_check: ok")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("table", no_wrap=True)
    table.add_column("rows", justify="right")
    for name, n in tables.items():
        table.add_row(name, str(n))
    console.print(table)
