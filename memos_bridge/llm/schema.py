"""Output schemas: bounded pydantic field types, the JSON schema sent to providers, and the text hint.

Two audiences read a prompt's output model:

* a provider that supports structured output (`response_format: json_schema`) gets `strict_json_schema`,
  where every object is closed (`additionalProperties: false`) and every property required, as OpenAI's
  strict mode demands; servers with grammar-based decoding (vLLM, llama.cpp, Ollama) also honour the
  `maxLength` / `maxItems` / numeric bounds in it;
* every other provider (the host, or a server that rejected the schema) gets `schema_hint`, the same
  schema as compact text inside the system message.

Validation is more forgiving than the schema: `Clipped` strings are cut to their bound instead of being
rejected, because a model that writes 130 characters where 120 were asked for has still answered, and a
corrective round trip would cost more than the truncation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from memos_bridge.llm.jsonparse import iter_json_values

M = TypeVar("M", bound=BaseModel)

#: Characters of schema text embedded in a system message (the schemas here are far smaller).
MAX_HINT_CHARS: Final = 6000


@dataclass(frozen=True)
class ResponseSchema:
    """What an OpenAI-compatible `response_format: {type: json_schema}` carries."""

    name: str
    schema: dict[str, Any] = field(hash=False)
    strict: bool = True


def _clip_to(limit: int) -> BeforeValidator:
    def clip(value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            return value if len(value) <= limit else value[: limit - 1].rstrip() + "…"
        return value

    return BeforeValidator(clip)


# Bounded strings: advertised as `maxLength`, clipped (not rejected) on input. The sizes are the few the
# prompts need; add one here rather than building annotations at runtime (mypy cannot follow those).
Text40 = Annotated[str, _clip_to(40), Field(max_length=40)]
Text80 = Annotated[str, _clip_to(80), Field(max_length=80)]
Text120 = Annotated[str, _clip_to(120), Field(max_length=120)]
Text200 = Annotated[str, _clip_to(200), Field(max_length=200)]
Text400 = Annotated[str, _clip_to(400), Field(max_length=400)]
Text800 = Annotated[str, _clip_to(800), Field(max_length=800)]
Text1600 = Annotated[str, _clip_to(1600), Field(max_length=1600)]


def _close_objects(node: Any) -> Any:
    """Recursively close objects and require all their properties; drop keys strict mode refuses.

    `title`/`default` are dropped as schema *keywords* only: inside `properties` (and `$defs`) the keys are
    names — an output field called "title" must survive."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
                out[key] = {name: _close_objects(sub) for name, sub in value.items()}
            elif key not in ("title", "default"):
                out[key] = _close_objects(value)
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out
    if isinstance(node, list):
        return [_close_objects(item) for item in node]
    return node


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the closed, all-required form strict structured output expects."""
    schema: dict[str, Any] = _close_objects(model.model_json_schema(mode="validation"))
    return schema


def response_schema(name: str, model: type[BaseModel]) -> ResponseSchema:
    """A `ResponseSchema` named after the prompt id (OpenAI allows `[a-zA-Z0-9_-]{1,64}` only)."""
    safe = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)[:64] or "output"
    return ResponseSchema(name=safe, schema=strict_json_schema(model))


def schema_hint(schema: dict[str, Any]) -> str:
    """A system-message paragraph that asks for one JSON value matching `schema`."""
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    if len(text) > MAX_HINT_CHARS:
        text = text[:MAX_HINT_CHARS] + "…"
    return (
        "Answer with one JSON object only — no prose, no code fence — that matches this JSON schema "
        "(string lengths and list sizes are upper bounds):\n" + text
    )


def validation_summary(exc: ValidationError, limit: int = 300) -> str:
    """`field: message; …` for a corrective message or a log line (input values are left out)."""
    parts = []
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "(root)"
        parts.append(f"{where}: {error['msg']}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def validate_output(text: str, model: type[M]) -> M:
    """The first JSON value in `text` that validates as `model`.

    Raises `MalformedOutput` with a short reason (for the corrective retry) when none does.
    """
    first_error: ValidationError | None = None
    seen = False
    for value in iter_json_values(text):
        seen = True
        try:
            return model.model_validate(value)
        except ValidationError as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise MalformedOutput(validation_summary(first_error))
    raise MalformedOutput("the answer contained no JSON value" if not seen else "no JSON object matched")


class MalformedOutput(ValueError):
    """The model answered, but not with a value the schema accepts."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
