"""Tool schemas are valid JSON Schema in the shape Hermes expects, name real contract methods, and match the
plugin manifest; adapter settings resolve with the documented precedence and never exceed Hermes' 8 s limit."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from memos_bridge_hermes.config import HOST_ABANDON_S, load_config, save_config
from memos_bridge_hermes.tools import TOOL_NAMES, TOOL_RPCS, TOOL_SCHEMAS

from memos_bridge.contract.methods import METHODS

EXPECTED_TOOLS = {
    "memos_search",
    "memos_get",
    "memos_timeline",
    "memos_environment",
    "memos_skill_list",
    "memos_skill_get",
    "memos_feedback",
    "memos_pin",
    "memos_remember",
    "memos_forget",
}


def _manifest() -> dict[str, object]:
    text = resources.files("memos_bridge_hermes").joinpath("hermes_plugin/plugin.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def test_the_tool_set() -> None:
    assert {schema["name"] for schema in TOOL_SCHEMAS} == EXPECTED_TOOLS == TOOL_NAMES
    assert len(TOOL_SCHEMAS) == len(EXPECTED_TOOLS)
    assert set(_manifest()["provides_tools"]) == EXPECTED_TOOLS  # type: ignore[arg-type]


@pytest.mark.parametrize("schema", TOOL_SCHEMAS, ids=lambda s: str(s["name"]))
def test_schema_is_a_valid_openai_function(schema: dict[str, object]) -> None:
    assert set(schema) == {"name", "description", "parameters"}
    assert isinstance(schema["description"], str) and 20 <= len(schema["description"]) <= 1024
    parameters = schema["parameters"]
    Draft202012Validator.check_schema(parameters)
    assert isinstance(parameters, dict) and parameters["type"] == "object"
    properties = parameters["properties"]
    assert isinstance(properties, dict)
    for required in parameters.get("required", []):
        assert required in properties
    for name, prop in properties.items():
        assert isinstance(prop, dict) and "type" in prop, name
    json.dumps(schema)  # serialisable as sent to the model


def test_tool_arguments_are_checked_by_their_schema() -> None:
    by_name = {schema["name"]: Draft202012Validator(schema["parameters"]) for schema in TOOL_SCHEMAS}
    assert by_name["memos_search"].is_valid({"query": "nginx logs", "maxResults": 5})
    assert not by_name["memos_search"].is_valid({"maxResults": 5})
    assert not by_name["memos_feedback"].is_valid({"evidence": "gut_feeling", "polarity": "positive", "rationale": "x"})
    assert by_name["memos_feedback"].is_valid(
        {"evidence": "test_failed", "polarity": "negative", "rationale": "2 of 5", "passed": 2, "total": 5}
    )
    assert by_name["memos_pin"].is_valid({"id": "po_ABCDEF", "unpin": True})


def test_tools_call_methods_of_the_contract() -> None:
    contract = {spec.name for spec in METHODS}
    assert set(TOOL_RPCS) == EXPECTED_TOOLS
    missing = {method for methods in TOOL_RPCS.values() for method in methods} - contract
    assert not missing, f"tools call methods the contract does not have: {missing}"


def test_settings_precedence_and_bounds(tmp_path: Path) -> None:
    default = load_config(tmp_path, env={})
    assert default.home == tmp_path / "memos-bridge" and default.tcp is None
    assert default.prefetch_timeout_s < HOST_ABANDON_S
    save_config({"prefetch_timeout_s": "5", "home": str(tmp_path / "mem"), "token": "never-written"}, tmp_path)
    saved = json.loads((tmp_path / "memos-bridge.json").read_text())
    assert "token" not in saved  # secrets go to Hermes' .env, not to this file
    from_file = load_config(tmp_path, env={})
    assert from_file.prefetch_timeout_s == 5.0 and from_file.home == tmp_path / "mem"
    env = {"MEMOS_HERMES_PREFETCH_TIMEOUT_S": "30", "MEMOS_BRIDGE_HOME": str(tmp_path / "env-home")}
    from_env = load_config(tmp_path, env=env)
    assert from_env.prefetch_timeout_s < HOST_ABANDON_S  # capped under the host's abandonment
    assert from_env.home == tmp_path / "env-home"
    tcp = load_config(tmp_path, env={"MEMOS_HERMES_TCP": "127.0.0.1:18911", "MEMOS_BRIDGE_TOKEN": "t"})
    assert tcp.tcp_address() == ("127.0.0.1", 18911) and tcp.token == "t"
    assert tcp.runtime_key == "tcp://127.0.0.1:18911"
    assert default.workspace is None  # profile-wide unless a project is named
    save_config({"workspace": "site-tools"}, tmp_path)
    assert load_config(tmp_path, env={}).workspace == "site-tools"
    assert load_config(tmp_path, env={"MEMOS_HERMES_WORKSPACE": "billing"}).workspace == "billing"
