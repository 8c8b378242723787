"""Verifier of the SEC 13F family: recomputes each task's answers.json from the filings and grades the agent's.

The reference parses every infoTable row (namespace-aware), aggregates by CUSIP, keeps `value` as filed (in
thousands of USD) and orders ranked rows by their value descending with ties broken by CUSIP ascending. For
diagnosis it can also produce the answer with the family's pitfalls made (`units`: value × 1000, `schema`:
XML element names as field names, `order`: ties broken by issuer name, and in the `script` variant
`namespace`: no rows found, the lookups ignoring the filing's default XML namespace), so the feedback can name
the mistake (see `skillflow.verify`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillflow.family import Pitfall, Task, load_family
from skillflow.verify import CheckResult, grade, read_output, variants_of

FAMILY_DIR = Path(__file__).resolve().parent
VALUE_FIELDS = frozenset({"value", "total_value", "top_total_value", "value_q1", "value_q2", "change", "net_change"})
XML_NAMES = {"issuer": "nameOfIssuer", "shares": "sshPrnamt"}


@dataclass
class Position:
    """One security's totals in one filing."""

    cusip: str
    issuer: str
    value: int = 0
    shares: int = 0


def _text(row: ET.Element, path: str) -> str:
    found = row.find(path)
    return (found.text or "").strip() if found is not None else ""


def positions(path: Path) -> dict[str, Position]:
    """Totals per CUSIP over every infoTable row (shares count SH rows only; PRN is a principal amount)."""
    out: dict[str, Position] = {}
    for row in ET.parse(path).getroot().iter():
        if not row.tag.endswith("infoTable"):
            continue
        ns = row.tag[: -len("infoTable")]
        cusip = _text(row, f"{ns}cusip")
        position = out.setdefault(cusip, Position(cusip, _text(row, f"{ns}nameOfIssuer")))
        position.value += int(_text(row, f"{ns}value"))
        if _text(row, f"{ns}shrsOrPrnAmt/{ns}sshPrnamtType") == "SH":
            position.shares += int(_text(row, f"{ns}shrsOrPrnAmt/{ns}sshPrnamt"))
    return out


def _held(path: Path, mistakes: frozenset[str]) -> dict[str, Position]:
    """The filing's positions as an agent reads them: none at all when it looks its elements up without the
    filing's default XML namespace (`namespace`: `findall('.//infoTable')` matches nothing)."""
    return {} if "namespace" in mistakes else positions(path)


def _ranked(rows: list[dict[str, Any]], key: str, mistakes: frozenset[str]) -> list[dict[str, Any]]:
    tie = "issuer" if "order" in mistakes else "cusip"
    return sorted(rows, key=lambda r: (-r[key], r[tie], r["cusip"]))


def _present(answer: Mapping[str, Any], mistakes: frozenset[str]) -> dict[str, Any]:
    """Apply the presentation pitfalls (units, schema) to a correct answer."""

    def fix(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            names = XML_NAMES if "schema" in mistakes else {}
            return {names.get(k, k): fix(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v, key) for v in value]
        if key in VALUE_FIELDS and "units" in mistakes:
            return value * 1000
        return value

    return {k: fix(v, k) for k, v in answer.items()}


def _security_values(task: Task, ws: Path, mistakes: frozenset[str]) -> dict[str, Any]:
    held = _held(ws / task.params["filing"], mistakes)
    rows = [
        {"cusip": p.cusip, "issuer": p.issuer, "value": p.value} for p in sorted(held.values(), key=lambda p: p.cusip)
    ]
    return {"security_count": len(rows), "securities": rows, "total_value": sum(p.value for p in held.values())}


def _top_securities(task: Task, ws: Path, mistakes: frozenset[str]) -> dict[str, Any]:
    held = _held(ws / task.params["filing"], mistakes)
    rows = [{"cusip": p.cusip, "issuer": p.issuer, "value": p.value} for p in held.values()]
    top = _ranked(rows, "value", mistakes)[: int(task.params.get("top", 5))]
    return {"top_securities": top, "top_total_value": sum(r["value"] for r in top)}


def _share_totals(task: Task, ws: Path, mistakes: frozenset[str]) -> dict[str, Any]:
    held = [p for p in _held(ws / task.params["filing"], mistakes).values() if p.shares > 0]
    rows = [{"cusip": p.cusip, "issuer": p.issuer, "shares": p.shares} for p in held]
    return {"holdings": _ranked(rows, "shares", mistakes), "total_shares": sum(p.shares for p in held)}


def _quarter_change(task: Task, ws: Path, mistakes: frozenset[str]) -> dict[str, Any]:
    before, after = _held(ws / task.params["before"], mistakes), _held(ws / task.params["after"], mistakes)
    rows = [
        {
            "cusip": c,
            "issuer": after[c].issuer,
            "value_q1": before[c].value,
            "value_q2": after[c].value,
            "change": after[c].value - before[c].value,
        }
        for c in before
        if c in after
    ]
    return {"changes": _ranked(rows, "change", mistakes), "net_change": sum(r["change"] for r in rows)}


def _position_moves(task: Task, ws: Path, mistakes: frozenset[str]) -> dict[str, Any]:
    before, after = _held(ws / task.params["before"], mistakes), _held(ws / task.params["after"], mistakes)
    new = [{"cusip": p.cusip, "issuer": p.issuer, "value": p.value} for c, p in after.items() if c not in before]
    gone = [{"cusip": p.cusip, "issuer": p.issuer, "value": p.value} for c, p in before.items() if c not in after]
    return {"new_positions": _ranked(new, "value", mistakes), "exited_positions": _ranked(gone, "value", mistakes)}


KINDS: dict[str, Callable[[Task, Path, frozenset[str]], dict[str, Any]]] = {
    "security_values": _security_values,
    "top_securities": _top_securities,
    "share_totals": _share_totals,
    "quarter_change": _quarter_change,
    "position_moves": _position_moves,
}


def reference(task: Task, workspace: Path, mistakes: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The task's answer, with the given pitfalls made (none: the correct answer)."""
    return _present(KINDS[task.params["kind"]](task, workspace, mistakes), mistakes)


def _pitfalls(variant: str | None = None) -> Mapping[str, Pitfall]:
    return load_family(FAMILY_DIR, variant=variant).pitfalls


def check(task: Task, workspace: Path) -> CheckResult:
    """Grade `workspace/answers.json` against the reference, diagnosing the pitfalls of the task's variant."""
    pitfalls = _pitfalls(task.variant)
    actual, error = read_output(workspace, task.output)
    variants = variants_of(lambda mistakes: reference(task, workspace, mistakes), pitfalls)
    return grade(task, reference(task, workspace), actual, pitfalls=pitfalls, variants=variants, read_error=error)
