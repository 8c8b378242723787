"""Why a turn was given what it was given: each candidate lesson's fate, one JSON line per turn.

When `retrieval.explain_log` names a file, every retrieval appends one line to it: the request, and for every lesson
(experience) or world model the channels found, the gate that decided it — ``work`` (another work's lesson,
`retrieval.work_gate`), ``scope`` (of the work, but its kind of rule cannot bear on the task, `rules.scope`),
``subject`` (names another subject and is not close in meaning) or ``kept`` — and whether ranking then picked it
and the block shows it. A lesson missing from a block was either never found by a channel (absent from the line),
dropped by a gate, passed over by ranking (kept, not picked) or cut by the block's budget (picked, its words not in
the block). `scripts/eval_lessons.py --explain` counts these per split, so a held-out split's losses can be placed
without reading its families.

Writing is best effort: a line that cannot be written is skipped (this is a measuring aid, never on a turn's
critical path otherwise).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)
_LOCK = threading.Lock()


def text_of(payload: Any) -> str:
    """The words of a lesson or world model, as they may reach a block: its lesson lines, else title and body."""
    lesson = getattr(payload, "lesson", None)
    if lesson:
        return " | ".join(str(line) for line in lesson)
    parts = [getattr(payload, name, "") for name in ("title", "procedure", "body")]
    return " | ".join(str(part) for part in parts if part)


def append(
    path: str, request: str, reason: str, verdicts: Mapping[str, tuple[str, Any]], picked: Iterable[Any], block: str
) -> None:
    """One line: the request, each judged candidate's verdict and text, whether ranking picked it, and the block.
    `verdicts` maps a candidate's id to its verdict and its payload; the texts are built here, only when the log
    is on, not on every turn."""
    chosen = {str(getattr(c, "ref_id", "")) for c in picked}
    line = {
        "request": request,
        "reason": reason,
        "candidates": [
            {"id": ref_id, "verdict": verdict, "picked": ref_id in chosen, "text": text_of(payload)}
            for ref_id, (verdict, payload) in verdicts.items()
        ],
        "block": block,
    }
    try:
        with _LOCK, open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    except OSError as exc:
        log.info("explain log %s not written: %s", path, exc)
