"""The deterministic gate every skill draft passes before it is stored (no LLM involved).

Two checks, both about grounding — a skill must not ask the agent to do what nobody has seen work:

* **Tool coverage** — of the tools the draft names, the share that the evidence traces actually used
  must be ≥ `verifier_coverage` (a draft naming no tool passes). Tools the evidence never showed are
  removed from a draft that passes (`restrict_tools`), so a stored skill only ever names seen tools.
* **Evidence resonance** — the share of the draft's steps that are grounded in the evidence text must be
  ≥ `verifier_resonance`. A step is grounded when it shares at least two content words (one, when the
  step has a single content word) with the evidence: the success traces and the anchor experiences.

The reference measured resonance the other way round (the share of evidence traces that share two
tokens with the whole draft). That passes a draft with one grounded step and five invented ones, which
is exactly what the gate is for; counting grounded steps catches it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from memos_bridge.rules.tokens import content_tokens

#: Content words a step must share with the evidence to count as grounded.
GROUNDING_WORDS: Final = 2


def tool_key(name: str) -> str:
    """Tool names compare without case, backticks, call parentheses or surrounding space."""
    return name.strip().strip("`").split("(", 1)[0].strip().lower()


@dataclass(frozen=True)
class VerifierReport:
    coverage: float
    resonance: float
    unseen_tools: tuple[str, ...]
    ungrounded_steps: tuple[int, ...]  # 1-based step numbers
    passed: bool
    reasons: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "coverage": round(self.coverage, 3),
            "resonance": round(self.resonance, 3),
            "unseenTools": list(self.unseen_tools),
            "ungroundedSteps": list(self.ungrounded_steps),
            "passed": self.passed,
            "reasons": list(self.reasons),
        }


def tool_coverage(tools: Sequence[str], evidence_tools: Collection[str]) -> tuple[float, list[str]]:
    """(share of named tools seen in the evidence, the unseen ones); 1.0 when no tool is named."""
    seen = {tool_key(t) for t in evidence_tools}
    named = list(dict.fromkeys(t for t in tools if tool_key(t)))
    if not named:
        return 1.0, []
    unseen = [t for t in named if tool_key(t) not in seen]
    return (len(named) - len(unseen)) / len(named), unseen


def step_resonance(steps: Sequence[str], evidence_texts: Sequence[str]) -> tuple[float, list[int]]:
    """(share of steps grounded in the evidence, the 1-based numbers of the ungrounded ones); 0 without steps."""
    if not steps:
        return 0.0, []
    vocabulary = {token for text in evidence_texts for token in content_tokens(text)}
    ungrounded: list[int] = []
    for number, step in enumerate(steps, start=1):
        words = set(content_tokens(step))
        need = min(GROUNDING_WORDS, len(words))
        if need == 0 or len(words & vocabulary) < need:
            ungrounded.append(number)
    return (len(steps) - len(ungrounded)) / len(steps), ungrounded


def verify(
    steps: Sequence[str],
    tools: Sequence[str],
    *,
    evidence_tools: Collection[str],
    evidence_texts: Sequence[str],
    coverage_min: float,
    resonance_min: float,
) -> VerifierReport:
    """Run both checks; `passed` only when both clear their thresholds."""
    coverage, unseen = tool_coverage(tools, evidence_tools)
    resonance, ungrounded = step_resonance(steps, evidence_texts)
    reasons: list[str] = []
    if not steps:
        reasons.append("no_steps")
    if coverage < coverage_min:
        reasons.append("tool_coverage")
    if resonance < resonance_min:
        reasons.append("evidence_resonance")
    return VerifierReport(
        coverage=coverage,
        resonance=resonance,
        unseen_tools=tuple(unseen),
        ungrounded_steps=tuple(ungrounded),
        passed=not reasons,
        reasons=tuple(reasons),
    )


def restrict_tools(tools: Sequence[str], evidence_tools: Collection[str]) -> list[str]:
    """The named tools the evidence used (a passing draft may still name an unseen minority)."""
    seen = {tool_key(t) for t in evidence_tools}
    return [t for t in dict.fromkeys(tools) if tool_key(t) in seen]
