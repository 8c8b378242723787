"""The prompt registry: unique ids, renderable templates, strict-mode schemas, forgiving validation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from memos_bridge.llm import prompts as prompts_module
from memos_bridge.llm.prompts import (
    INTENT_CLASSIFY,
    L2_INDUCTION,
    PROMPTS,
    R_HUMAN_SCORE,
    REFLECTION_SCORE,
    RETRIEVAL_FILTER,
    EpisodeSummaryOutput,
    FilterOutput,
    IntentOutput,
    PolicyDraftOutput,
    Prompt,
    ReflectionScoresOutput,
    RelationOutput,
    RepairOutput,
    RHumanOutput,
    TextPrompt,
)
from memos_bridge.llm.schema import schema_hint, strict_json_schema, validate_output

REQUIRED_PROMPTS = {
    "episode.summarize",
    "reflection.score",
    "session.relation.classify",
    "session.intent.classify",
    "retrieval.filter",
    "reward.r_human",
    "l2.induction",
}


def test_every_required_prompt_is_registered_with_a_version() -> None:
    assert set(PROMPTS) >= REQUIRED_PROMPTS
    for prompt_id, prompt in PROMPTS.items():
        assert prompt.id == prompt_id and prompt.version >= 1 and prompt.description
        assert prompt.tag == f"{prompt.id}.v{prompt.version}"


def test_every_registered_prompt_is_used_by_the_service() -> None:
    """A prompt nothing calls is dead weight (and a false promise in the registry): each one must be named
    by a module outside the registry."""
    package = Path(prompts_module.__file__).resolve().parents[1]
    sources = "\n".join(path.read_text(encoding="utf-8") for path in package.rglob("*.py") if path.name != "prompts.py")
    names = {value.id: name for name, value in vars(prompts_module).items() if isinstance(value, TextPrompt)}
    assert set(names) == set(PROMPTS)
    unused = sorted(prompt_id for prompt_id, name in names.items() if not re.search(rf"\b{name}\b", sources))
    assert unused == []


def _walk_objects(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            found.append(node)
        for value in node.values():
            found.extend(_walk_objects(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_walk_objects(item))
    return found


@pytest.mark.parametrize("prompt", [p for p in PROMPTS.values() if isinstance(p, Prompt)], ids=lambda p: p.id)
def test_json_prompts_have_closed_bounded_schemas(prompt: Prompt[BaseModel]) -> None:
    schema = strict_json_schema(prompt.schema)
    objects = _walk_objects(schema)
    assert objects, "the output is an object"
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert set(obj["required"]) == set(obj["properties"])
    text = schema_hint(schema)
    assert "maxLength" in text or prompt.schema is FilterOutput  # every text field is bounded
    assert "JSON" in prompt.system
    assert "title" not in schema and "default" not in str(schema)
    for obj in objects:  # schema keywords are dropped, never output fields that happen to be called so
        assert set(obj["properties"]) == set(obj["required"])
        assert all("title" not in sub for sub in obj["properties"].values() if isinstance(sub, dict))
    fields = prompt.schema.model_fields
    assert set(schema["properties"]) == {f.alias or name for name, f in fields.items()}


@pytest.mark.parametrize("prompt", list(PROMPTS.values()), ids=lambda p: p.id)
def test_templates_render_with_their_variables_only(prompt: Any) -> None:
    names = set(re.findall(r"\$\{(\w+)\}", prompt.user_template))
    messages = prompt.render({name: f"<{name} {{json}} $value>" for name in names})
    assert [m.role for m in messages] == ["system", "user"]
    for name in names:
        assert f"<{name} {{json}} $value>" in messages[1].content
    if names:
        with pytest.raises(ValueError, match="needs variable"):
            prompt.render({})


def test_long_variables_are_clipped() -> None:
    (_, user) = INTENT_CLASSIFY.render({"text": "x" * 50_000})
    assert len(user.content) <= 16_001


def test_intent_output_normalises_what_models_write() -> None:
    out = IntentOutput.model_validate({"intent": "Memory-Probe", "confidence": "85%", "reason": "  "})
    assert (out.kind, out.confidence, out.reason) == ("memory_probe", 0.85, "llm")
    with pytest.raises(ValidationError):
        IntentOutput.model_validate({"kind": "banana"})


def test_relation_synonyms_and_clamping() -> None:
    assert RelationOutput.model_validate({"relation": "append", "confidence": 3}).relation == "follow_up"
    assert RelationOutput.model_validate({"relation": "New Task"}).relation == "new_task"
    assert RelationOutput.model_validate({"relation": "redo", "confidence": -1}).confidence == 0.0


def test_r_human_axes_clamp_and_combine_with_the_reference_weights() -> None:
    out = validate_output(
        '{"goal_achievement": 1.5, "process_quality": "0.5", "user_satisfaction": -0.2, "label": "Success"}',
        R_HUMAN_SCORE.schema,
    )
    assert (out.goal_achievement, out.process_quality, out.user_satisfaction, out.label) == (1.0, 0.5, -0.2, "success")
    assert out.r_human() == pytest.approx(0.45 * 1.0 + 0.30 * 0.5 + 0.25 * -0.2)
    with pytest.raises(ValidationError):
        RHumanOutput.model_validate({"goal_achievement": 1, "process_quality": 0})  # an axis is missing


def test_reflection_scores_clamp_alpha_and_require_step_numbers() -> None:
    out = ReflectionScoresOutput.model_validate(
        {"scores": [{"idx": 1, "alpha": 1.4}, {"idx": 2, "alpha": "0.3", "usable": False}]}
    )
    assert [(s.idx, s.alpha, s.usable) for s in out.scores] == [(1, 1.0, True), (2, 0.3, False)]
    with pytest.raises(ValidationError):
        ReflectionScoresOutput.model_validate({"scores": [{"alpha": 0.5}]})
    assert REFLECTION_SCORE.schema is ReflectionScoresOutput


def test_policy_draft_accepts_the_legacy_action_key_and_caps_lists() -> None:
    out = PolicyDraftOutput.model_validate(
        {
            "title": "T" * 300,
            "trigger": "pip install fails with EXTERNALLY_MANAGED",
            "action": "1. create a venv\n2. install into it",
            "caveats": "do not use --break-system-packages",
            "support_trace_ids": [f"tr_{i}" for i in range(40)],
            "confidence": "high",
        }
    )
    assert len(out.title) == 120 and out.procedure.startswith("1. create a venv")
    assert out.caveats == ["do not use --break-system-packages"]
    assert len(out.support_trace_ids) == 16 and out.confidence == 0.5
    assert L2_INDUCTION.temperature == 0.1


def test_filter_output_keeps_numbers_and_the_legacy_key() -> None:
    assert FilterOutput.model_validate({"selected": ["2", 1, "x", True]}).ranked == [2, 1]
    assert FilterOutput.model_validate({"ranked": [], "sufficient": "yes"}).sufficient is None
    with pytest.raises(ValidationError):
        FilterOutput.model_validate({"sufficient": True})
    assert RETRIEVAL_FILTER.schema is FilterOutput


def test_other_outputs_validate() -> None:
    episode = EpisodeSummaryOutput.model_validate({"title": "t", "summary": "s", "outcome": 3})
    assert episode.outcome == "unknown"
    repair = RepairOutput.model_validate({"preference": "Prefer uv", "anti_pattern": "Avoid pip", "severity": "INFO"})
    assert repair.severity == "info"
