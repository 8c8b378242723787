"""The checked-in wire contract (contracts/) must match the pydantic DTOs and the method table."""

from __future__ import annotations

import json
from pathlib import Path

from memos_bridge.contract.methods import METHODS
from memos_bridge.contract.openrpc import build_openrpc, diff_contract, render_files
from memos_bridge.rpc.handlers import TRANSPORT_METHODS

ROOT = Path(__file__).resolve().parents[2] / "contracts"


def test_checked_in_contract_matches_the_code() -> None:
    problems = diff_contract(ROOT)
    assert problems == [], "contract drift; run `memos-bridge contract --write`: " + ", ".join(problems)


def test_drift_is_detected(tmp_path: Path) -> None:
    for rel, text in render_files().items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert diff_contract(tmp_path) == []
    doc = json.loads((tmp_path / "openrpc.json").read_text())
    doc["methods"][0]["summary"] = "edited by hand"
    (tmp_path / "openrpc.json").write_text(json.dumps(doc))
    (tmp_path / "schemas" / "Stale.json").write_text("{}")
    assert set(diff_contract(tmp_path)) == {"changed: openrpc.json", "stale: schemas/Stale.json"}


def test_openrpc_document_shape() -> None:
    doc = build_openrpc()
    assert doc["openrpc"].startswith("1.")
    names = [m["name"] for m in doc["methods"]]
    assert len(names) == len(set(names))
    for required in ("session.open", "turn.start", "turn.end", "memory.timeline", "core.health", "auth"):
        assert required in names
    turn_start = next(m for m in doc["methods"] if m["name"] == "turn.start")
    params = {p["name"]: p for p in turn_start["params"]}
    assert params["userText"]["required"] and params["sessionId"]["required"]
    assert not params["turnKey"]["required"]
    assert turn_start["result"]["schema"] == {"$ref": "#/components/schemas/RetrievalResultDTO"}
    assert doc["components"]["errors"]["session_not_found"]["code"] == -32000
    assert doc["components"]["errors"]["invalid_argument"]["code"] == -32602
    assert [m["name"] for m in doc["x-server-to-client"]] == ["host.llm.complete"]
    turn_end = doc["components"]["schemas"]["TurnEndResult"]
    assert set(turn_end["required"]) == {"traceId", "traceIds", "episodeId"}


def test_every_contract_method_is_served() -> None:
    from unittest.mock import MagicMock

    from memos_bridge.core.facade import MemoryCore
    from memos_bridge.rpc.handlers import build_methods

    served = set(build_methods(MagicMock(spec=MemoryCore))) | TRANSPORT_METHODS
    assert served == {spec.name for spec in METHODS}
