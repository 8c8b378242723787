"""Where an export goes and where an import comes from, and writing a file so no one sees half of it.

The service runs as the user and may be asked by any host to write a file, so the rules are narrow and
spelled out: a relative path is resolved under `<home>/exports/` (the service's own folder, created on
demand); an absolute path is taken as given, but only a folder under the data home is created — elsewhere
the folder must already exist, so a typo does not scatter directories over the disk. An existing file is
never replaced unless the caller says `overwrite`.

An export is written to a temporary file in the target's folder and renamed into place at the end: a reader
(or a crash) never sees a half-written export, and a failure leaves nothing behind. Without `overwrite` the
final step is a hard link, which fails if the name was taken meanwhile, instead of a rename that would
silently replace it.

Everything here blocks (file system calls): callers run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Final

from memos_bridge.contract.errors import ErrorCode, MemosError

EXPORTS: Final = "exports"
EXTENSIONS: Final = {"jsonl": "jsonl", "markdown": "md"}


def exports_dir(home: Path) -> Path:
    return home / EXPORTS


def is_under(path: Path, folder: Path) -> bool:
    """Whether `path`, with links and `..` resolved, lies inside `folder`."""
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def resolve(home: Path, raw: str) -> Path:
    """An absolute path as given (`~` expanded), a relative one under `<home>/exports/`."""
    path = Path(raw).expanduser()
    return path if path.is_absolute() else exports_dir(home) / path


def default_name(folder: Path, fmt: str, now_ms: int) -> Path:
    """`memos-<UTC time>.<ext>`, with a counter when an export of the same second exists (a default name
    never conflicts: the caller did not choose it)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now_ms / 1000))
    ext = EXTENSIONS[fmt]
    candidate = folder / f"memos-{stamp}Z.{ext}"
    number = 2
    while candidate.exists():
        candidate = folder / f"memos-{stamp}Z-{number}.{ext}"
        number += 1
    return candidate


def prepare_target(home: Path, raw: str | None, fmt: str, now_ms: int, overwrite: bool) -> Path:
    """The absolute path an export will be written to, its folder ready; refused when it cannot be used."""
    if raw is None:
        folder = exports_dir(home)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return default_name(folder, fmt, now_ms).absolute()
    target = resolve(home, raw).absolute()
    if target.is_dir():
        raise MemosError(
            ErrorCode.INVALID_ARGUMENT,
            f"export path is a folder: {target} (give a file name)",
            {"path": str(target)},
        )
    if target.exists() and not overwrite:
        raise _taken(target)
    folder = target.parent
    if not folder.is_dir():
        if folder.exists():
            raise MemosError(
                ErrorCode.INVALID_ARGUMENT, f"not a folder: {folder}", {"path": str(target), "folder": str(folder)}
            )
        if not is_under(folder, home):
            raise MemosError(
                ErrorCode.INVALID_ARGUMENT,
                f"folder does not exist: {folder} (only folders under the data home are created; create it "
                "first, or give a relative path to write under the data home's exports/ folder)",
                {"path": str(target), "folder": str(folder)},
            )
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise _os_error("cannot create the export folder", folder, exc) from None
    return target


def _taken(target: Path) -> MemosError:
    return MemosError(
        ErrorCode.CONFLICT,
        f"export file already exists: {target} (pass overwrite: true to replace it, or choose another path)",
        {"path": str(target)},
    )


def _os_error(what: str, path: Path, exc: OSError) -> MemosError:
    reason = exc.strerror or type(exc).__name__
    return MemosError(ErrorCode.INVALID_ARGUMENT, f"{what}: {path} ({reason})", {"path": str(path)})


def temp_beside(target: Path) -> Path:
    """An empty private file (mode 600: memories are private) in the target's folder, for the rename at
    the end to be atomic."""
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    except OSError as exc:
        raise _os_error("cannot write in the export folder", target.parent, exc) from None
    os.close(fd)
    return Path(name)


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def publish(temp: Path, target: Path, overwrite: bool) -> int:
    """Move the finished temporary file to its name; returns its size in bytes."""
    size = temp.stat().st_size
    try:
        if overwrite:
            os.replace(temp, target)
            return size
        try:
            os.link(temp, target)  # fails when the name was taken since the check, where a rename would not
        except FileExistsError:
            raise _taken(target) from None
        except OSError:  # a file system without hard links
            if target.exists():
                raise _taken(target) from None
            os.replace(temp, target)
            return size
        return size
    finally:
        remove_quietly(temp)


def write_text(target: Path, text: str, overwrite: bool) -> int:
    """Write a whole file atomically (temp file, fsync, rename); returns its size."""
    temp = temp_beside(target)
    try:
        with temp.open("w", encoding="utf-8", newline="\n") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        return publish(temp, target, overwrite)
    finally:
        remove_quietly(temp)


def assemble(target: Path, first_line: str, body: Path, overwrite: bool) -> int:
    """Write `first_line` then the contents of `body` to `target` atomically; returns its size.

    The JSONL header holds the record counts, known only once the body is written, so the body is streamed
    to its own temporary file first and copied after the header here."""
    temp = temp_beside(target)
    try:
        with temp.open("wb") as out, body.open("rb") as records:
            out.write(first_line.encode("utf-8"))
            shutil.copyfileobj(records, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        return publish(temp, target, overwrite)
    finally:
        remove_quietly(temp)


def read_text(home: Path, raw: str) -> tuple[Path, str]:
    """The file an import names (relative: under `<home>/exports/`) and its text, or a clear refusal."""
    path = resolve(home, raw).absolute()
    if not path.exists():
        raise MemosError(
            ErrorCode.INVALID_ARGUMENT,
            f"no such file: {path} (give the absolute path of an export, or a name under the data home's exports/)",
            {"path": str(path)},
        )
    if path.is_dir():
        raise MemosError(ErrorCode.INVALID_ARGUMENT, f"import path is a folder: {path}", {"path": str(path)})
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _os_error("cannot read the file", path, exc) from None
    try:
        return path, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemosError(
            ErrorCode.INVALID_ARGUMENT,
            f"not a memos-bridge export: {path} is not UTF-8 text (byte {exc.start} cannot be decoded)",
            {"path": str(path)},
        ) from None
