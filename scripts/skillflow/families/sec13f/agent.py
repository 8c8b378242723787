"""How the simulated agent solves SEC 13F tasks, habits included.

A model of a capable agent that parses the filing correctly but, on a first attempt, has three habits
(the family's pitfalls): it converts `value` to dollars (`units`: × 1000, although 13F values are already
in thousands), names fields after the XML elements (`schema`: nameOfIssuer, sshPrnamt) and breaks ranking
ties by issuer name (`order`). The runner's simulated agent drops a habit only when recalled memory teaches
the lesson; this module never sees the verifier or the expected answer — it reads the workspace files.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skillflow.agents import Solution, tool_call
from skillflow.family import Task

RENAMED = {"issuer": "nameOfIssuer", "shares": "sshPrnamt"}
MONEY = ("value", "total_value", "top_total_value", "value_q1", "value_q2", "change", "net_change")

Holding = dict[str, Any]


def read_filing(path: Path) -> tuple[list[Holding], str]:
    """Every infoTable row as a dict, and a one-line description for the read_file step."""
    rows: list[Holding] = []
    for element in ET.parse(path).getroot():
        fields = {child.tag.split("}")[-1]: child for child in element}
        amount = {c.tag.split("}")[-1]: (c.text or "").strip() for c in fields["shrsOrPrnAmt"]}
        rows.append(
            {
                "cusip": (fields["cusip"].text or "").strip(),
                "issuer": (fields["nameOfIssuer"].text or "").strip(),
                "value": int(fields["value"].text or 0),
                "amount": int(amount["sshPrnamt"]),
                "kind": amount["sshPrnamtType"],
            }
        )
    cusips = len({r["cusip"] for r in rows})
    return rows, f"{len(rows)} infoTable rows, {cusips} CUSIPs (nameOfIssuer, cusip, value, shrsOrPrnAmt)"


def by_cusip(rows: list[Holding]) -> dict[str, Holding]:
    """Totals per CUSIP: value over all rows, shares over SH rows."""
    out: dict[str, Holding] = {}
    for row in rows:
        total = out.setdefault(row["cusip"], {"cusip": row["cusip"], "issuer": row["issuer"], "value": 0, "shares": 0})
        total["value"] += row["value"]
        if row["kind"] == "SH":
            total["shares"] += row["amount"]
    return out


class _Work:
    """One attempt: the habits in force and the notes that become the agent's python step."""

    def __init__(self, habits: frozenset[str]) -> None:
        self.habits = habits
        self.notes: list[str] = []

    def rank(self, rows: list[Holding], key: str) -> list[Holding]:
        tie = "issuer" if "order" in self.habits else "cusip"
        self.notes.append(f"sorted by {key} descending, ties by {'issuer name' if tie == 'issuer' else 'CUSIP'}")
        return sorted(rows, key=lambda r: (-r[key], r[tie], r["cusip"]))

    def row(self, holding: Holding, *fields: str) -> Holding:
        return {f: holding[f] for f in fields}

    def present(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Field names and units as this attempt writes them."""
        if "units" in self.habits:
            self.notes.append("converted value to USD (value * 1000)")
        else:
            self.notes.append("kept value as filed")
        if "schema" in self.habits:
            self.notes.append("named the fields after the XML elements")

        def shape(value: Any, key: str = "") -> Any:
            if isinstance(value, dict):
                names = RENAMED if "schema" in self.habits else {}
                return {names.get(k, k): shape(v, k) for k, v in value.items()}
            if isinstance(value, list):
                return [shape(v, key) for v in value]
            return value * 1000 if key in MONEY and "units" in self.habits else value

        return {k: shape(v, k) for k, v in answer.items()}


def _security_values(task: Task, held: dict[str, dict[str, Holding]], work: _Work) -> dict[str, Any]:
    totals = held[task.params["filing"]]
    rows = [work.row(totals[c], "cusip", "issuer", "value") for c in sorted(totals)]
    return {"security_count": len(rows), "securities": rows, "total_value": sum(r["value"] for r in rows)}


def _top_securities(task: Task, held: dict[str, dict[str, Holding]], work: _Work) -> dict[str, Any]:
    rows = [work.row(h, "cusip", "issuer", "value") for h in held[task.params["filing"]].values()]
    top = work.rank(rows, "value")[: int(task.params.get("top", 5))]
    return {"top_securities": top, "top_total_value": sum(r["value"] for r in top)}


def _share_totals(task: Task, held: dict[str, dict[str, Holding]], work: _Work) -> dict[str, Any]:
    rows = [work.row(h, "cusip", "issuer", "shares") for h in held[task.params["filing"]].values() if h["shares"]]
    return {"holdings": work.rank(rows, "shares"), "total_shares": sum(r["shares"] for r in rows)}


def _quarter_change(task: Task, held: dict[str, dict[str, Holding]], work: _Work) -> dict[str, Any]:
    q1, q2 = held[task.params["before"]], held[task.params["after"]]
    rows = [
        {
            "cusip": c,
            "issuer": q2[c]["issuer"],
            "value_q1": q1[c]["value"],
            "value_q2": q2[c]["value"],
            "change": q2[c]["value"] - q1[c]["value"],
        }
        for c in q1
        if c in q2
    ]
    return {"changes": work.rank(rows, "change"), "net_change": sum(r["change"] for r in rows)}


def _position_moves(task: Task, held: dict[str, dict[str, Holding]], work: _Work) -> dict[str, Any]:
    q1, q2 = held[task.params["before"]], held[task.params["after"]]
    new = [work.row(h, "cusip", "issuer", "value") for c, h in q2.items() if c not in q1]
    gone = [work.row(h, "cusip", "issuer", "value") for c, h in q1.items() if c not in q2]
    return {"new_positions": work.rank(new, "value"), "exited_positions": work.rank(gone, "value")}


SOLVERS: dict[str, Callable[[Task, dict[str, dict[str, Holding]], _Work], dict[str, Any]]] = {
    "security_values": _security_values,
    "top_securities": _top_securities,
    "share_totals": _share_totals,
    "quarter_change": _quarter_change,
    "position_moves": _position_moves,
}


def solve(task: Task, workspace: Path, habits: frozenset[str]) -> Solution:
    """Read the task's filings, compute the answer with the habits still in force, describe the steps."""
    steps: list[dict[str, Any]] = []
    held: dict[str, dict[str, Holding]] = {}
    for name in task.files:
        rows, described = read_filing(workspace / name)
        held[name] = by_cusip(rows)
        steps.append(tool_call("read_file", {"path": name}, described))
    work = _Work(habits)
    answer = work.present(SOLVERS[task.params["kind"]](task, held, work))
    code = f"aggregate infoTable rows by CUSIP for {task.params['kind']}"
    steps.append(tool_call("python", {"code": code}, "; ".join(work.notes)))
    reply = f"Wrote {task.output} with {', '.join(answer)}: " + "; ".join(work.notes) + "."
    return Solution(outputs={task.output: answer}, steps=steps, reply=reply)
