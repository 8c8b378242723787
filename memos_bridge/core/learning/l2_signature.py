"""L2 pattern signatures and the trace ↔ policy similarity that uses them.

A pattern signature `primaryTag|secondaryTag|tool|errCode` is a coarse, structural key of a step: what it
was about (its two leading tags), what it used (its first tool) and how it failed (its first error code).
Two jobs rest on it (reference §6.5 steps 2–3):

* the candidate pool buckets unmatched traces by signature, so that a policy is induced from steps that
  share a pattern rather than from steps that merely sound alike;
* association adds a small bonus per shared component to the vector cosine, and refuses (caps below the
  threshold) a match whose primary tag AND error code both differ — a step about `docker` failing with
  `EACCES` should not join a policy about `pip` failing with `ENOENT` just because the prose is similar.

The reference designed the bonus and the gate but never wired them (§13 item 5: the policy side was
fabricated from the first character of `trigger`); here the policy stores the signature of the evidence
it was induced from (`PolicyRow.signature`), so both work. A policy with no signature (feedback
experiences, older rows) is scored on plain cosine.

Everything here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from memos_bridge.contract.dto import ToolCallDTO
from memos_bridge.core.capture import extract_error_signatures, tool_call_failed
from memos_bridge.rules.text import to_text

#: Placeholder of a missing component.
MISSING: Final = "_"
#: Component length caps (reference §6.5 step 3).
TAG_CHARS: Final = 32
TOOL_CHARS: Final = 64
#: Added to the cosine per component shared by trace and policy (reference `tracePolicySimilarity`).
SIGNATURE_BONUS: Final = 0.05
#: When the primary tag and the error code both differ (both known), the score is
#: `min(GATE_COS_FACTOR·cos + bonus, GATE_CAP)`: below any sensible association threshold.
GATE_COS_FACTOR: Final = 0.5
GATE_CAP: Final = 0.4

#: An error code: `EXIT_<n>` or an UPPER_SNAKE identifier (at least one underscore).
_CODE: Final = re.compile(r"\b(EXIT_-?\d+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")
#: The head of a capture error signature that counts as a code: UPPER_SNAKE, `EXIT_<n>`, `HTTP_<n>`, or an
#: errno name (`ENOENT`, `EACCES`: no underscore, but as much a code as `ERR_MODULE_NOT_FOUND`).
_SIGNATURE_CODE: Final = re.compile(r"^(?:EXIT_-?\d+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|E[A-Z]{4,})$")
_UNSAFE: Final = re.compile(r"[|\s]+")
#: Error signatures examined per source (capture keeps a handful per step anyway).
_SIGNATURE_SCAN: Final = 8
#: Wire keys of a stored tool call (other keys, e.g. from an older schema, are ignored).
_CALL_KEYS: Final = frozenset(field.alias or name for name, field in ToolCallDTO.model_fields.items())


def _component(value: str, limit: int, *, lower: bool) -> str:
    """One signature component: no separators or whitespace inside, capped, `_` when empty."""
    text = _UNSAFE.sub("-", value.strip())
    text = (text.lower() if lower else text)[:limit].strip("-")
    return text or MISSING


@dataclass(frozen=True, slots=True)
class PatternSignature:
    """`primaryTag|secondaryTag|tool|errCode`, `_` for a missing component."""

    primary: str = MISSING
    secondary: str = MISSING
    tool: str = MISSING
    error: str = MISSING

    def __str__(self) -> str:
        return "|".join((self.primary, self.secondary, self.tool, self.error))

    @property
    def components(self) -> tuple[str, str, str, str]:
        return (self.primary, self.secondary, self.tool, self.error)

    @classmethod
    def parse(cls, text: str | None) -> PatternSignature | None:
        """The signature stored as text; None for "" (unknown) or a malformed value."""
        parts = (text or "").split("|")
        if len(parts) != 4 or not all(parts):
            return None
        return cls(*parts)

    def shared(self, other: PatternSignature) -> int:
        """Components both sides know and agree on (a shared `_` is shared ignorance, not evidence)."""
        return sum(1 for a, b in zip(self.components, other.components, strict=True) if a != MISSING and a == b)


def call_failed(call: Mapping[str, Any]) -> bool:
    """`capture.tool_call_failed` on a stored (wire-shaped) call; crude rules if it no longer validates."""
    known = {key: value for key, value in call.items() if key in _CALL_KEYS}
    try:
        return tool_call_failed(ToolCallDTO.model_validate(known))
    except ValidationError:
        return bool(call.get("errorCode")) or call.get("success") is False


def _first_code(texts: Iterable[str]) -> str | None:
    for text in texts:
        match = _CODE.search(text[:4000])
        if match:
            return match.group(1)
    return None


def error_code(
    error_signatures: Sequence[str], tool_calls: Sequence[Mapping[str, Any]], reflection: str | None
) -> str | None:
    """The first error code of a step: tool errors and outputs first, its reflection last.

    Order: the step's capture error signatures (already extracted from failed tool outputs and error
    lines, so an UPPER_SNAKE constant in ordinary output is not mistaken for a failure), then the calls'
    `errorCode` fields, then the outputs of failed calls, then the reflection.
    """
    for signature in error_signatures[:_SIGNATURE_SCAN]:
        head = signature.split(":", 1)[0].strip()
        if _SIGNATURE_CODE.match(head):
            return head
    code = _first_code(str(call.get("errorCode") or "") for call in tool_calls)
    if code:
        return code
    failed_outputs = [to_text(call.get("output")) for call in tool_calls if call_failed(call)]
    for found in extract_error_signatures(failed_outputs, _SIGNATURE_SCAN):
        head = found.split(":", 1)[0].strip()
        if _SIGNATURE_CODE.match(head):
            return head
    return _first_code(failed_outputs) or _first_code([reflection or ""])


def pattern_signature(
    tags: Sequence[str],
    tool_calls: Sequence[Mapping[str, Any]],
    error_signatures: Sequence[str] = (),
    reflection: str | None = None,
) -> PatternSignature:
    """The signature of one step from its stored fields."""
    clean_tags = [t for t in (_component(str(tag), TAG_CHARS, lower=True) for tag in tags) if t != MISSING]
    tool = next((str(call.get("name") or "") for call in tool_calls if call.get("name")), "")
    code = error_code(error_signatures, tool_calls, reflection)
    return PatternSignature(
        primary=clean_tags[0] if clean_tags else MISSING,
        secondary=clean_tags[1] if len(clean_tags) > 1 else MISSING,
        tool=_component(tool, TOOL_CHARS, lower=False),
        error=_component(code or "", TOOL_CHARS, lower=False),
    )


def _both_known_and_differ(a: str, b: str) -> bool:
    return a != MISSING and b != MISSING and a != b


def trace_policy_score(cosine: float, trace: PatternSignature, policy: PatternSignature | None) -> float:
    """Association score of a trace for a policy (reference `tracePolicySimilarity`, wired for real).

    `min(cos + 0.05·shared, 1)`; when the primary tag and the error code both differ (each known on both
    sides) the match is a different situation that happens to read alike: `min(0.5·cos + bonus, 0.4)`.
    """
    if policy is None:
        return min(cosine, 1.0)
    bonus = SIGNATURE_BONUS * trace.shared(policy)
    if _both_known_and_differ(trace.primary, policy.primary) and _both_known_and_differ(trace.error, policy.error):
        return min(GATE_COS_FACTOR * cosine + bonus, GATE_CAP)
    return min(cosine + bonus, 1.0)


def djb2(text: str) -> int:
    """The reference's 32-bit djb2 string hash (pool keys stay compatible in shape)."""
    value = 5381
    for char in text:
        value = (value * 33 + ord(char)) & 0xFFFFFFFF
    return value


def base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
        if value == 0:
            return out


def pool_key(signature: PatternSignature | str, trace_id: str) -> str:
    """`cand_<djb2(signature) base36>_<traceId>`: one pool row per (pattern, trace), so re-runs upsert."""
    return f"cand_{base36(djb2(str(signature)))}_{trace_id}"
