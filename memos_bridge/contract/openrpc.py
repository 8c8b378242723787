"""Render the method table and DTOs as a language-neutral contract.

`contracts/openrpc.json` is an OpenRPC 1.3 document (methods with by-name params, result schemas and error
codes; server→client requests and notifications under `x-` extensions). `contracts/schemas/*.json` holds one
standalone JSON Schema per wire model, for clients that only want the shapes. Both are generated, checked in,
and compared with the code by a test (`memos-bridge contract --check`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from memos_bridge import __version__
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, jsonrpc_code
from memos_bridge.contract.methods import METHODS, NOTIFICATIONS, SERVER_TO_CLIENT, MethodSpec

REF_TEMPLATE = "#/components/schemas/{model}"


def _component_schemas(specs: tuple[MethodSpec, ...]) -> tuple[dict[Any, Any], dict[str, Any]]:
    models: list[tuple[type[BaseModel], Any]] = []
    for spec in specs:
        models.append((spec.params, "validation"))
        models.append((spec.result, "serialization"))
    models.append((dto.ErrorData, "serialization"))
    key_map, top = models_json_schema(models, by_alias=True, ref_template=REF_TEMPLATE)
    return key_map, top.get("$defs", {})


def _content_descriptors(params_schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """By-name params: one content descriptor per top-level field of the params model."""
    name = params_schema["$ref"].rsplit("/", 1)[-1]
    model_schema = defs[name]
    required = set(model_schema.get("required", []))
    out = []
    for field_name, field_schema in model_schema.get("properties", {}).items():
        descriptor: dict[str, Any] = {
            "name": field_name,
            "required": field_name in required,
            "schema": {k: v for k, v in field_schema.items() if k != "description"},
        }
        if "description" in field_schema:
            descriptor["description"] = field_schema["description"]
        out.append(descriptor)
    return out


def _method_entry(spec: MethodSpec, key_map: dict[Any, Any], defs: dict[str, Any]) -> dict[str, Any]:
    params_ref = key_map[(spec.params, "validation")]
    result_ref = key_map[(spec.result, "serialization")]
    result_schema: dict[str, Any] = dict(result_ref)
    if spec.nullable_result:
        result_schema = {"oneOf": [result_ref, {"type": "null"}]}
    entry: dict[str, Any] = {
        "name": spec.name,
        "summary": spec.summary,
        "tags": [{"name": t} for t in spec.tags],
        "paramStructure": "by-name",
        "params": _content_descriptors(params_ref, defs),
        "result": {"name": spec.result.__name__, "schema": result_schema},
    }
    if spec.errors:
        entry["errors"] = [{"$ref": f"#/components/errors/{code.value}"} for code in spec.errors]
    return entry


def build_openrpc() -> dict[str, Any]:
    all_specs = METHODS + SERVER_TO_CLIENT + NOTIFICATIONS
    key_map, defs = _component_schemas(all_specs)
    error_data_ref = key_map[(dto.ErrorData, "serialization")]
    errors = {
        code.value: {
            "code": jsonrpc_code(code),
            "message": code.value,
            "data": {"allOf": [error_data_ref, {"properties": {"code": {"const": code.value}}}]},
        }
        for code in ErrorCode
    }
    return {
        "openrpc": "1.3.2",
        "info": {
            "title": "memos-bridge",
            "version": __version__,
            "description": (
                "JSON-RPC 2.0 over newline-delimited JSON (stdio or TCP). Application errors are code -32000 "
                "(-32602 for invalid_argument) with error.data = ErrorData; parse errors -32700 with id null; "
                "invalid envelope -32600; unknown method -32601."
            ),
        },
        "methods": [_method_entry(spec, key_map, defs) for spec in METHODS],
        "components": {"schemas": defs, "errors": errors},
        "x-server-to-client": [_method_entry(spec, key_map, defs) for spec in SERVER_TO_CLIENT],
        "x-notifications": [_method_entry(spec, key_map, defs) for spec in NOTIFICATIONS],
    }


def wire_models() -> list[type[dto.WireModel]]:
    """Every wire model of the contract, by name: those the methods use and the shared memory DTOs
    (Feedback, Policy, WorldModel, Skill, …) that later methods and events carry."""
    seen: dict[str, type[dto.WireModel]] = {}
    for spec in METHODS + SERVER_TO_CLIENT + NOTIFICATIONS:
        for model in (spec.params, spec.result):
            if issubclass(model, dto.WireModel):
                seen[model.__name__] = model
    for value in vars(dto).values():
        if isinstance(value, type) and issubclass(value, dto.WireModel) and value is not dto.WireModel:
            seen[value.__name__] = value
    return [seen[name] for name in sorted(seen)]


def build_mcp_surface() -> dict[str, Any]:
    """The MCP face's tools (names, descriptions, input schemas, annotations), resources and resource
    templates, as an MCP host lists them: checked in next to the JSON-RPC contract so a change to what models
    see is a visible diff, not an accident."""
    import anyio

    from memos_bridge.mcp.server import McpOptions, build_server

    server = build_server(McpOptions(home=Path("unused")))  # nothing connects until a host starts a session

    async def listing() -> dict[str, Any]:
        tools = await server.list_tools()
        templates = await server.list_resource_templates()
        static = await server.static_resources()
        return {
            "tools": [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in tools],
            "resources": [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in static],
            "resourceTemplates": [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in templates],
        }

    return anyio.run(listing)


def render_files() -> dict[str, str]:
    """Relative path under contracts/ → file text."""
    files = {"openrpc.json": _dump(build_openrpc()), "mcp.json": _dump(build_mcp_surface())}
    for model in wire_models():
        files[f"schemas/{model.__name__}.json"] = _dump(model.model_json_schema(by_alias=True))
    return files


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def write_contract(root: Path) -> list[Path]:
    written = []
    schemas = root / "schemas"
    schemas.mkdir(parents=True, exist_ok=True)
    expected = render_files()
    for stale in schemas.glob("*.json"):
        if f"schemas/{stale.name}" not in expected:
            stale.unlink()
    for rel, text in expected.items():
        path = root / rel
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def diff_contract(root: Path) -> list[str]:
    """Relative paths whose checked-in text differs from the code (missing, changed or stale)."""
    expected = render_files()
    problems = []
    for rel, text in expected.items():
        path = root / rel
        if not path.exists():
            problems.append(f"missing: {rel}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"changed: {rel}")
    schemas = root / "schemas"
    if schemas.is_dir():
        for path in schemas.glob("*.json"):
            if f"schemas/{path.name}" not in expected:
                problems.append(f"stale: schemas/{path.name}")
    return problems
