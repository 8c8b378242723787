"""`memos-bridge migrate`: the command line around `storage/copy.py` — how it finds the two databases, what it
refuses, what it prints and its exit status (0 verified, 1 counts differ, 2 usage or refusal).

The source is a memory written by the real service (`tests/storage/test_copy.py` builds it), copied from one
data home to another; the PostgreSQL direction is covered row by row in that module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from memos_bridge.cli import main
from memos_bridge.client import ServiceClient
from memos_bridge.storage.engine import create_db_engine
from memos_bridge.storage.migrations import LATEST_VERSION, migrate
from memos_bridge.storage.models import Base, SchemaMigrationRow

from .storage.factories import seed_episode
from .storage.test_copy import check_service_finds, fill_memory


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A data home holding a memory the service wrote, and the ids to look for."""
    home = tmp_path_factory.mktemp("laptop") / "home"
    return home, fill_memory(home)


def migrate_cli(*args: str) -> int:
    return main(["migrate", *args])


def sqlite_file_with_rows(path: Path, *, schema_version: int | None = None) -> Path:
    """A migrated SQLite database holding a session and an episode (another memory than the laptop's)."""
    engine = create_db_engine(f"sqlite:///{path}", busy_timeout_ms=2000)
    try:
        migrate(engine)
        with Session(engine) as db:
            seed_episode(db)
            db.commit()
        if schema_version is not None:
            with engine.begin() as conn:
                migrations = Base.metadata.tables[SchemaMigrationRow.__tablename__]
                conn.execute(insert(migrations).values(version=schema_version, name="future", applied_at=1))
    finally:
        engine.dispose()
    return path


def test_a_home_is_copied_to_a_new_home_verified_and_served(
    laptop: tuple[Path, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, ids = laptop
    target = tmp_path / "new-home"
    assert migrate_cli("--from", str(home), "--to", str(target)) == 0
    out, err = capsys.readouterr()
    assert "traces" in out and "MISMATCH" not in out and "verified:" in out
    assert f"{home / 'memos.db'} → {target / 'memos.db'}" in out
    # stderr is not a terminal here: one line per table instead of bars
    assert "traces: 2 rows (2 copied, 0 already there)" in err

    # a second run only verifies
    assert migrate_cli("--from", str(home), "--to", str(target)) == 0
    out, err = capsys.readouterr()
    assert out.startswith("continued an earlier copy") and "verified:" in out
    assert "traces: 2 rows (0 copied, 2 already there)" in err

    check_service_finds(target, ids)  # it writes a memory of its own: the target is no longer a copy
    assert migrate_cli("--from", str(home), "--to", str(target)) == 1
    out, _err = capsys.readouterr()
    assert "verification FAILED" in out and "memories" in out


def test_a_target_holding_another_memory_exits_2_and_forcing_it_exits_1(
    laptop: tuple[Path, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, _ids = laptop
    other = tmp_path / "other-home"
    other.mkdir()
    sqlite_file_with_rows(other / "memos.db")
    assert migrate_cli("--from", str(home), "--to", str(other)) == 2
    _out, err = capsys.readouterr()
    assert "not copied from" in err and "memories export / import" in err and "--force" in err

    # forced, the copy goes in beside the other memory; the counts then differ, which the verification says
    assert migrate_cli("--from", str(home), "--to", str(other), "--force") == 1
    out, _err = capsys.readouterr()
    assert "MISMATCH" in out and "verification FAILED" in out and "sessions" in out


def test_usage_problems_exit_2(
    laptop: tuple[Path, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, _ids = laptop
    assert migrate_cli("--from", str(tmp_path / "nowhere"), "--to", str(tmp_path / "t")) == 2
    assert "no data home" in capsys.readouterr().err
    assert migrate_cli("--from", str(home), "--to", f"sqlite:///{home / 'memos.db'}") == 2
    assert "same database" in capsys.readouterr().err
    assert migrate_cli("--from", str(home), "--to", "mysql://me@db/memos") == 2
    assert "unsupported database" in capsys.readouterr().err
    assert migrate_cli("--from", f"sqlite:///{tmp_path / 'missing.db'}", "--to", str(tmp_path / "t")) == 2
    assert "no database at" in capsys.readouterr().err
    newer = sqlite_file_with_rows(tmp_path / "newer.db", schema_version=LATEST_VERSION + 1)
    assert migrate_cli("--from", str(newer), "--to", str(tmp_path / "t")) == 2
    assert "newer than this memos-bridge" in capsys.readouterr().err
    with pytest.raises(SystemExit) as parse_error:
        migrate_cli("--from", str(home))
    assert parse_error.value.code == 2


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    """A data home a running service owns (it holds the home's lock until the client closes)."""
    home = tmp_path / "served"
    with ServiceClient.spawn(home) as client:
        client.call("session.open", {"agent": "tester"})
        yield home


def test_a_served_home_is_refused_unless_allow_live(
    served: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "copy"
    assert migrate_cli("--from", str(served), "--to", str(target)) == 2
    err = capsys.readouterr().err
    assert f"data home {served} is served by pid" in err and "--allow-live" in err
    assert not (target / "memos.db").exists()  # refused before anything was created

    assert migrate_cli("--from", str(served), "--to", str(target), "--allow-live") == 0
    out, err = capsys.readouterr()
    assert "verified:" in out and "what it writes from now on will not reach the target" in err

    # a served target is refused whatever the flags: its service would not see the copied rows
    assert migrate_cli("--from", str(target), "--to", str(served), "--force", "--allow-live") == 2
    assert "(the target) is served by" in capsys.readouterr().err
