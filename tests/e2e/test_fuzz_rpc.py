"""A hostile client against the real service: every method, params generated from `contracts/schemas`.

Hypothesis draws params for each contract method from its published JSON Schema (a small generator below
covers the schema keywords the contract uses), then
often spoils one value with something a careless or hostile client sends: a lone UTF-16 surrogate, an integer
past SQLite's range, a float past any range, a 50,000-character string, a wrong type, an unknown field. Over
raw stdio lines (no client library in between), every request with an id must get exactly one well-formed
reply — a result, or an error with a stable code that is never `internal` and carries no traceback — and the
service must still answer afterwards. A second test sends the hand-written hostile lines the fuzzer cannot
produce: broken JSON, a byte-order mark, huge and non-finite ids, and batches mixing valid and invalid members.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memos_bridge.contract.methods import METHODS

SCHEMAS = Path(__file__).resolve().parents[2] / "contracts" / "schemas"
#: Methods that wait on the host by design (`llm.test` asks the host's LLM) are fuzzed too: the raw client
#: below answers every server→client request with "method not found", as a host without an LLM does.
FUZZED = [spec for spec in METHODS if spec.direction == "client_to_server"]
HOSTILE: list[Any] = [
    "\udc80lone",
    "ok\ud800",
    2**63,
    -(2**63) - 1,
    10**30,
    1e30,
    -1e308,
    "x" * 50_000,
    [],
    {},
    None,
    True,
    -1,
    "",
    1.5,
    [[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]],
    {"unexpected": "field"},
]


class RawService:
    """`memos-bridge serve` on stdio, spoken to in raw JSON lines; replies collected by id."""

    def __init__(self, home: Path) -> None:
        env = {**os.environ, "MEMOS_BRIDGE_HOME": str(home), "MEMOS_BRIDGE_STRENGTH__DECAY_INTERVAL_S": "0"}
        self.stderr = (home.parent / "fuzz-stderr.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memos_bridge", "serve", "--home", str(home)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        self.replies: queue.Queue[Any] = queue.Queue()
        self.non_protocol: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.non_protocol.append(line)
                continue
            if isinstance(message, dict) and "method" in message:
                if "id" in message:  # a request to the host: answer it as a host without that method
                    self.send_line(
                        json.dumps(
                            {
                                "jsonrpc": "2.0",
                                "id": message["id"],
                                "error": {"code": -32601, "message": "method not found"},
                            }
                        ).encode()
                    )
                continue  # a notification (events)
            self.replies.put(message)

    def send_line(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def ask(self, line: bytes, timeout: float = 60) -> Any:
        self.send_line(line)
        return self.replies.get(timeout=timeout)

    def request(self, method: str, params: Any, request_id: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        return self.ask(json.dumps(body).encode())  # ensure_ascii: lone surrogates travel as \\u escapes

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=60)
        self.stderr.close()
        return code


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawService]:
    service = RawService(tmp_path_factory.mktemp("fuzz") / "home")
    try:
        assert service.request("core.ping", {}, "warm")["result"]["ok"] is True
        yield service
    finally:
        assert service.close() == 0
        assert service.non_protocol == [], "stdout carried non-protocol output"


def _well_formed_reply(reply: Any, request_id: Any) -> None:
    text = json.dumps(reply)
    assert isinstance(reply, dict) and reply.get("jsonrpc") == "2.0", text
    assert reply.get("id") == request_id, text
    assert ("result" in reply) != ("error" in reply), text
    assert "Traceback" not in text and 'File "' not in text, text
    if "error" in reply:
        error = reply["error"]
        assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str), text
        assert error["code"] != -32603 and error.get("data", {}).get("code") != "internal", text
        assert "sys.set_int_max_str_digits" not in text and "utf-8-sig" not in text, text


def _schema(spec_params: type) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{spec_params.__name__}.json").read_text(encoding="utf-8"))


_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
_JSON_LEAF = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(-1e6, 1e6) | _TEXT
_ANY_JSON = st.recursive(
    _JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=8
)


def from_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Values valid for `schema` (the JSON Schema subset pydantic emits for the contract: type, anyOf, enum,
    const, $ref into $defs, properties/required/additionalProperties, items/minItems, string length and
    numeric bounds). Optional properties are left out or included at random."""
    defs = {**(defs or {}), **schema.get("$defs", {})}
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(option, defs) for option in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "string":
        low, high = schema.get("minLength", 0), min(schema.get("maxLength", 60), 60)
        return st.text(st.characters(codec="utf-8"), min_size=low, max_size=max(low, high))
    if kind == "integer":
        return st.integers(schema.get("minimum", -(10**9)), schema.get("maximum", 10**12))
    if kind == "number":
        return st.floats(schema.get("minimum", -1e6), schema.get("maximum", 1e6), allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = from_schema(schema["items"], defs) if "items" in schema else _ANY_JSON
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=max(schema.get("minItems", 0), 3))
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        fixed = {name: from_schema(sub, defs) for name, sub in properties.items() if name in required}
        optional = {name: from_schema(sub, defs) for name, sub in properties.items() if name not in required}
        if not properties and schema.get("additionalProperties", True) is not False:
            return st.dictionaries(_TEXT, _ANY_JSON, max_size=3)
        return st.fixed_dictionaries(fixed, optional=optional)
    return _ANY_JSON


def _confined(params: Any) -> Any:
    """The service on stdio writes and reads any file its host names (`memory.export` / `import` `path`); the
    fuzzer's host keeps those inside the service's own exports folder (no `/`, `~` or `..`), so a generated
    path never touches the machine's files."""
    if isinstance(params, dict) and isinstance(params.get("path"), str):
        return {**params, "path": re.sub(r"[/\\~]|\.\.", "_", params["path"]) or "_"}
    return params


def _spoil(params: Any, data: st.DataObject) -> Any:
    """Replace one leaf (or add one field) of `params` with a hostile value."""
    hostile = data.draw(st.sampled_from(HOSTILE), label="hostile")
    if not isinstance(params, dict) or not params or data.draw(st.booleans(), label="add field"):
        key = data.draw(st.sampled_from(["sessionId", "id", "offset", "ts", "now", "q", "zz"]), label="key")
        return {**(params if isinstance(params, dict) else {}), key: hostile}
    path: list[Any] = []
    node: Any = params
    while isinstance(node, dict | list) and node:
        key = data.draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        if not isinstance(node[key], dict | list) or data.draw(st.booleans(), label="stop"):
            break
        node = node[key]
    spoiled = json.loads(json.dumps(params))
    target = spoiled
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = hostile
    return spoiled


_counter = iter(range(1, 10**9))


@settings(
    max_examples=int(os.environ.get("MEMOS_BRIDGE_FUZZ_EXAMPLES", "300")),
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_every_method_answers_every_generated_request_with_one_clean_reply(raw: RawService, data: Any) -> None:
    spec = data.draw(st.sampled_from(FUZZED), label="method")
    params = data.draw(from_schema(_schema(spec.params)), label="params")
    if data.draw(st.integers(0, 2), label="spoil") > 0:
        params = _spoil(params, data)
    params = _confined(params)
    request_id = next(_counter)
    reply = raw.request(spec.name, params, request_id)
    _well_formed_reply(reply, request_id)
    assert raw.request("core.ping", {}, f"alive-{request_id}")["result"]["ok"] is True


def test_hostile_lines_get_exactly_the_replies_json_rpc_asks_for(raw: RawService) -> None:
    ping = {"jsonrpc": "2.0", "method": "core.ping", "params": {}}
    # Broken JSON, a huge integer literal, NaN: one parse error each (id null), in our own words.
    for line in (b"{not json", b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"core.ping"}', b"[NaN]"):
        reply = raw.ask(line)
        _well_formed_reply(reply, None)
        assert reply["error"]["code"] == -32700
    # A byte-order mark before a valid request is tolerated.
    assert raw.ask("\ufeff".encode() + json.dumps({**ping, "id": "bom"}).encode())["result"]["ok"] is True
    # Ids JSON-RPC cannot echo faithfully: an invalid request, answered (with id null), never silence.
    for bad_id in (b"1e999", b"-1e999", str(2**70).encode()):
        reply = raw.ask(b'{"jsonrpc":"2.0","method":"core.ping","params":{},"id":' + bad_id + b"}")
        _well_formed_reply(reply, None)
        assert reply["error"]["code"] == -32600
    # Values the service cannot hold: -32602 naming where they are.
    for params, where in (
        ({"sessionId": "\udc80"}, "params.sessionId"),
        ({"offset": 2**63}, "params.offset"),
        ({"now": 1e30}, None),
        ({"q": "x" * 50_000}, "q"),
    ):
        method = "memory.decay" if "now" in params else "memory.list_traces"
        reply = raw.request(method, params, f"bad-{where}")
        _well_formed_reply(reply, f"bad-{where}")
        assert reply["error"]["code"] == -32602, reply
        if where:
            assert where in reply["error"]["message"], reply
    # A batch mixing valid and invalid members: one reply per member with an id, the valid ones answered.
    batch = [
        {**ping, "id": "b1"},
        {"jsonrpc": "2.0", "id": "b2", "method": "memory.list_traces", "params": {"offset": 2**64}},
        {"jsonrpc": "1.0", "id": "b3", "method": "core.ping"},
        42,
        {**ping},  # a notification: no reply
        {"jsonrpc": "2.0", "id": "b5", "method": "no.such.method"},
        {**ping, "id": "b6"},
    ]
    replies = raw.ask(json.dumps(batch).encode())
    assert isinstance(replies, list)
    by_id = {r.get("id"): r for r in replies if r.get("id") is not None}
    assert by_id["b1"]["result"]["ok"] is True and by_id["b6"]["result"]["ok"] is True
    assert by_id["b2"]["error"]["code"] == -32602
    assert by_id["b3"]["error"]["code"] == -32600
    assert by_id["b5"]["error"]["code"] == -32601
    assert [r["error"]["code"] for r in replies if r.get("id") is None] == [-32600]  # the bare 42
    assert len(replies) == 6
    assert raw.request("core.ping", {}, "still-alive")["result"]["ok"] is True
