"""Import of hermes-agent's own memory files, MEMORY.md and USER.md.

hermes-agent keeps two small files of entries separated by a line holding only `§` (its
`ENTRY_DELIMITER = "\\n§\\n"`): MEMORY.md for the agent's notes about the environment and projects, USER.md
for what it knows about the user. Moving to memos-bridge should not lose them, so each entry becomes a
remembered memory — a `fact` from MEMORY.md, a `preference` from USER.md — with source `import`.

Entries go through `memory.remember` itself, not a raw insert: an entry equal (or nearly equal) to a memory
already there merges into it instead of duplicating it, so importing the same files twice adds nothing new
(the merge is counted under `skipped`). Each entry is its own small write: a failure half-way leaves the
entries before it imported, and running the import again completes it without duplicates.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Final, Literal

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.core import purge
from memos_bridge.core.learning.context import LearningContext
from memos_bridge.core.memories import MemoryService

FILES: Final = frozenset({"memory.md", "user.md"})
#: A line holding only the section sign (spaces around it forgiven) separates two entries.
_DELIMITER: Final = re.compile(r"^[ \t]*§[ \t]*$", re.MULTILINE)
MAX_ENTRY: Final = 20_000  # what memory.remember accepts
SOURCE: Final = "import"
AGENT: Final = "hermes"


def is_hermes_file(path: Path) -> bool:
    """MEMORY.md or USER.md, in any case."""
    return path.name.casefold() in FILES


def memory_type(path: Path) -> Literal["fact", "preference"]:
    """USER.md holds the user's preferences; MEMORY.md (and any other file given as Hermes) facts."""
    return "preference" if path.stem.casefold() == "user" else "fact"


def split_entries(text: str) -> list[str]:
    """The file's entries, trimmed, empty ones dropped (hermes-agent reads them the same way)."""
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    return [entry.strip() for entry in _DELIMITER.split(normalised) if entry.strip()]


def check_entries(path: Path, entries: list[str]) -> None:
    for number, entry in enumerate(entries, start=1):
        if len(entry) > MAX_ENTRY:
            raise MemosError(
                ErrorCode.INVALID_ARGUMENT,
                f"{path}: entry {number} has {len(entry)} characters, more than a memory holds ({MAX_ENTRY}); "
                "split it with a line holding only § and import again",
                {"path": str(path), "entry": number},
            )


async def import_hermes(
    ctx: LearningContext, path: Path, text: str, params: dto.MemoryImportParams
) -> dto.MemoryImportResult:
    entries = split_entries(text)
    check_entries(path, entries)
    purged: dict[str, int] = {}
    if params.mode == "replace":  # only remembered memories: the file holds nothing else to replace
        result = await purge.purge(
            ctx, dto.MemoryPurgeParams(namespace=params.namespace, kinds=["memory"], confirm=True)
        )
        purged = result.purged
    service = MemoryService(ctx)
    kind = memory_type(path)
    imported: Counter[str] = Counter({"memory": 0})
    skipped: Counter[str] = Counter({"memory": 0})
    for entry in entries:
        remembered = await service.remember(
            dto.MemoryRememberParams(content=entry, type=kind, source=SOURCE, agent=AGENT, namespace=params.namespace)
        )
        (skipped if remembered.merged else imported)["memory"] += 1
    return dto.MemoryImportResult(imported=dict(imported), skipped=dict(skipped), purged=purged)
