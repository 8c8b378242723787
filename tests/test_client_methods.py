"""The typed client wrappers cover the contract: one wrapper per method of `METHODS`, params the service accepts.

The list is derived from `memos_bridge.contract.methods.METHODS` (not from a copy), so a method added to the
contract without a wrapper fails here, by name, while a wrapper for a method that is still being added does not.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from memos_bridge.aclient import AsyncServiceClient
from memos_bridge.client import ServiceClient
from memos_bridge.client_methods import RpcMethods, build_params, camel, wrapper_name
from memos_bridge.contract.methods import METHODS, MethodSpec

# Sample values for required arguments, by wrapper parameter name: valid for the params models.
SAMPLES: dict[str, Any] = {
    "token": "secret",
    "agent": "tests",
    "session_id": "se_TEST",
    "episode_id": "ep_TEST",
    "user_text": "configure nginx",
    "polarity": "negative",
    "query": "nginx",
    "id": "tr_TEST",
    "kind": "trace",
    "evidence": "test_passed",
    "evidence_id": "ev-1",
    "from_id": "tr_A",
    "to_id": "tr_B",
    "relation": "related",
    "tool": "shell",
    "success": False,
    "namespace": "*",
    "content": "The staging database listens on port 5433.",
    "confirm": True,
    "path": "/tmp/export.jsonl",
    "decision": "approve",
    "status": "archived",
}
# Required arguments whose general sample a method does not accept, by method.
SAMPLE_FOR: dict[str, dict[str, Any]] = {"memory.set_status": {"kind": "policy"}}


# Optional arguments a method needs one of (its params model rejects a call with none), by method.
NEEDS_ONE_OF: dict[str, dict[str, Any]] = {"memory.update": {"content": "The staging database listens on port 5434."}}


class Recorder(RpcMethods[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]):
    """Captures what a wrapper would send."""

    def _invoke(self, method: str, params: dict[str, Any], timeout: float | None) -> tuple[str, dict[str, Any]]:
        return method, params

    def _invoke_nullable(
        self, method: str, params: dict[str, Any], timeout: float | None
    ) -> tuple[str, dict[str, Any]]:
        return method, params


def _required_args(func: Any) -> dict[str, Any]:
    args = {}
    for name, parameter in inspect.signature(func).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        if parameter.default is inspect.Parameter.empty:
            if name not in SAMPLES:
                raise AssertionError(f"no sample value for required argument {name!r} of {func.__name__}")
            args[name] = SAMPLES[name]
    return args


@pytest.mark.parametrize("spec", METHODS, ids=lambda spec: spec.name)
def test_every_contract_method_has_a_wrapper_on_both_clients(spec: MethodSpec) -> None:
    name = wrapper_name(spec.name)
    assert callable(getattr(ServiceClient, name, None)), f"ServiceClient has no wrapper {name} for {spec.name}"
    assert callable(getattr(AsyncServiceClient, name, None)), f"AsyncServiceClient has no wrapper {name}"


@pytest.mark.parametrize("spec", METHODS, ids=lambda spec: spec.name)
def test_wrapper_sends_params_the_contract_accepts(spec: MethodSpec) -> None:
    wrapper = getattr(Recorder(), wrapper_name(spec.name))
    args = {**_required_args(wrapper), **SAMPLE_FOR.get(spec.name, {}), **NEEDS_ONE_OF.get(spec.name, {})}
    method, params = wrapper(**args)
    assert method == spec.name
    spec.params.model_validate(params)  # raises on a missing required field or an unknown one
    parameters = set(inspect.signature(wrapper).parameters)
    for field_name, field in spec.params.model_fields.items():
        if field.is_required():
            assert field_name in parameters, f"{spec.name}: the wrapper cannot name required field {field.alias}"


def test_wrappers_name_only_contract_methods() -> None:
    """No typo'd wrapper: each wraps a method the contract has, or one named in CONTRACT.md being added."""
    contract = {wrapper_name(spec.name) for spec in METHODS}
    wrappers = {name for name, _ in inspect.getmembers(RpcMethods, inspect.isfunction) if not name.startswith("_")}
    assert contract <= wrappers
    recorder = Recorder()
    sent = set()
    for name in wrappers:
        wrapper = getattr(recorder, name)
        sent.add(wrapper(**_required_args(wrapper))[0])
    assert {wrapper_name(method) for method in sent} == wrappers


def test_build_params_camel_cases_and_drops_none() -> None:
    assert (
        camel("session_id") == "sessionId"
        and camel("q") == "q"
        and camel("visible_context_start_ts") == ("visibleContextStartTs")
    )
    params = build_params({"session_id": "s", "episode_id": None, "top_k": {"tier1": 2}}, {"deadline_at": 5})
    assert params == {"sessionId": "s", "topK": {"tier1": 2}, "deadlineAt": 5}


def test_extra_keywords_pass_through_for_fields_added_later() -> None:
    method, params = Recorder().memory_list_world_models(limit=3, q="nginx")
    assert method == "memory.list_world_models" and params == {"limit": 3, "q": "nginx"}
