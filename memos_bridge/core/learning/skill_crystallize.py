"""Drafting a skill from a task family: evidence, the deterministic template, the LLM draft, the guide.

* **Evidence** — the success anchors' traces (their `source_trace_ids`, their `trace_policy_links`, else
  the steps of their source episodes), scored `V + 0.2·cos(trace, anchor)` as in the reference; the best
  `evidence_limit` with V ≥ 0 are the evidence, V < 0 steps and the failure avoidances' own steps are
  counter-examples. Each is cut to `trace_char_cap` characters. The tools those steps used form the
  whitelist a draft may name.
* **Template** (no LLM, or an unusable or rejected LLM draft) — the anchor experience's procedure split
  into steps (numbered lines, bullets, `;`, arrows, "then"), extended by the steps of the family's other
  anchors that it does not already say; parameters from `<placeholders>`; examples from the evidence
  episodes' requests; the evidence tools.
* **LLM** (`skill.crystallize`) — the model writes name, summary, parameters, preconditions, steps,
  examples, tools and guidance from the same material. The family's Avoid lines are always kept (the
  model may reword them, never drop them) and the Check section is the family's.

Either way the Avoid section holds the family's failure avoidances, the Check section its repair
instructions and the anchors' verification (`skill_family`), and the invocation guide is Markdown whose
first paragraph is the summary (retrieval's summary mode shows that paragraph).

Everything here is pure.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from memos_bridge.core.capture import tool_signature
from memos_bridge.core.learning.skill_family import (
    ExperienceView,
    Family,
    avoid_lines,
    check_lines,
    cosine,
    dedupe_lines,
    prefer_lines,
    split_lines,
    union_tags,
)
from memos_bridge.llm.prompts import SkillDraftOutput
from memos_bridge.rules.text import CJK_CHARS, clip, first_sentence, squash
from memos_bridge.rules.tokens import STOPWORDS, token_similarity

InducedBy = Literal["llm", "rules"]

#: Weight of the trace–anchor cosine in the evidence score (reference §6.7).
COSINE_WEIGHT: Final = 0.2
MAX_COUNTER_EXAMPLES: Final = 3
MAX_STEPS: Final = 8
MAX_EXAMPLES: Final = 2
MAX_TOOLS: Final = 8
MAX_NAME: Final = 32
#: A step of another anchor this similar to one already listed adds nothing.
SAME_STEP: Final = 0.7
STEP_TITLE_CHARS: Final = 120
SUMMARY_CHARS: Final = 400

_STEP_SPLIT = re.compile(r"\s*(?:;|；|→|->|=>|\bthen\b|，然后|然后)\s*", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"<([A-Za-z_][\w\- ]{0,30})>")
_NAME_WORD = re.compile(f"[a-z0-9]+|[{CJK_CHARS}]+")
_TITLE_HEAD = re.compile(r"\s*(?::|：| — | - )\s*")


@dataclass(frozen=True, eq=False)
class TraceSnapshot:
    """A detached evidence candidate (built inside a read)."""

    id: str
    episode_id: str
    value: float
    user_text: str
    agent_text: str
    summary: str
    tool_calls: tuple[Mapping[str, Any], ...]
    vec: NDArray[np.float32] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class EvidenceTrace:
    id: str
    episode_id: str
    value: float
    text: str
    request: str
    result: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class SkillStep:
    title: str
    body: str = ""

    def text(self) -> str:
        return f"{self.title} {self.body}".strip()


@dataclass(frozen=True)
class SkillParameter:
    name: str
    description: str = ""


@dataclass(frozen=True)
class SkillExample:
    input: str
    expected: str = ""


@dataclass
class SkillDraft:
    name: str
    title: str
    summary: str
    trigger: str
    scope: str
    steps: list[SkillStep]
    parameters: list[SkillParameter] = field(default_factory=list)
    preconditions: list[str] = field(default_factory=list)
    examples: list[SkillExample] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    preference: list[str] = field(default_factory=list)
    anti_pattern: list[str] = field(default_factory=list)
    check: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    induced_by: InducedBy = "rules"


# ---------------------------------------------------------------- evidence


def _tool_names(calls: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(c.get("name") or "").strip() for c in calls if str(c.get("name") or "").strip()))


def _evidence(trace: TraceSnapshot, cap: int) -> EvidenceTrace:
    lines = []
    if trace.user_text:
        lines.append(f"user: {clip(trace.user_text, 200)}")
    lines.extend(f"tool: {tool_signature(dict(call), 200)}" for call in trace.tool_calls[:3])
    if trace.agent_text:
        lines.append(f"agent: {clip(trace.agent_text, 240)}")
    elif trace.summary:
        lines.append(f"summary: {clip(trace.summary, 200)}")
    text = "\n".join(lines)
    return EvidenceTrace(
        id=trace.id,
        episode_id=trace.episode_id,
        value=trace.value,
        text=text[:cap],
        request=clip(trace.user_text, 200),
        result=clip(first_sentence(trace.agent_text), 200),
        tools=_tool_names(trace.tool_calls),
    )


def select_evidence(
    traces: Sequence[TraceSnapshot],
    anchor_vec: NDArray[np.float32] | None,
    *,
    limit: int,
    char_cap: int,
    counter_ids: Collection[str] = (),
) -> tuple[list[EvidenceTrace], list[EvidenceTrace]]:
    """(evidence, counter-examples): the best `limit` steps with V ≥ 0 by `V + 0.2·cos`, and up to three
    steps that went wrong (V < 0, or named in `counter_ids`: the failure avoidances' own steps)."""
    scored: list[tuple[float, TraceSnapshot]] = []
    counter: list[TraceSnapshot] = []
    for trace in traces:
        if trace.id in counter_ids or trace.value < 0:
            counter.append(trace)
            continue
        cos = cosine(trace.vec, anchor_vec)
        scored.append((trace.value + COSINE_WEIGHT * (cos or 0.0), trace))
    scored.sort(key=lambda item: (-item[0], item[1].id))
    counter.sort(key=lambda t: (t.value, t.id))
    evidence = [_evidence(t, char_cap) for _, t in scored[:limit]]
    return evidence, [_evidence(t, char_cap) for t in counter[:MAX_COUNTER_EXAMPLES]]


def evidence_tools(evidence: Sequence[EvidenceTrace]) -> list[str]:
    """Tools the evidence used, most used first."""
    counts = Counter(tool for item in evidence for tool in item.tools)
    return [tool for tool, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def evidence_texts(family: Family, evidence: Sequence[EvidenceTrace]) -> list[str]:
    """What a draft's steps may rest on: the success traces and the anchor experiences' own text."""
    return [*(e.text for e in evidence), *(a.text() for a in family.anchors)]


# ---------------------------------------------------------------- names


def snake_name(text: str) -> str:
    """A snake_case name of at most 32 characters ("skill" when nothing is left): the words of the title's
    head (before a ":" or a dash, when that head has two words or more), stopwords dropped, CJK kept."""
    head = _TITLE_HEAD.split(text, maxsplit=1)[0]
    source = head if len(_NAME_WORD.findall(head.lower())) >= 2 else text
    words = [w for w in _NAME_WORD.findall(source.lower()) if w not in STOPWORDS]
    name = ""
    for word in words:
        candidate = f"{name}_{word}" if name else word
        if len(candidate) > MAX_NAME:
            break
        name = candidate
    return name or "skill"


def unique_name(base: str, taken: Collection[str]) -> str:
    """`base`, or `base_2`, `base_3`… (still ≤ 32 characters) when the namespace already uses it."""
    if base not in taken:
        return base
    for n in range(2, 1000):
        suffix = f"_{n}"
        candidate = base[: MAX_NAME - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise ValueError("no free skill name")  # pragma: no cover — a thousand namesakes


# ---------------------------------------------------------------- the template


def split_steps(procedure: str) -> list[str]:
    """Steps of a procedure text: its lines (list marks removed); a single line is split at `;`, arrows and
    "then" (", then" included), so "confirm the schema, then parse all rows" is two steps."""
    lines = split_lines(procedure)
    if len(lines) == 1:
        lines = [squash(part.strip(" ,.")) for part in _STEP_SPLIT.split(lines[0]) if part.strip(" ,.")]
    return [line for line in lines if line]


def _step(line: str) -> SkillStep:
    if len(line) <= STEP_TITLE_CHARS:
        return SkillStep(line)
    head = first_sentence(line)
    if len(head) <= STEP_TITLE_CHARS and head != line:
        return SkillStep(head, squash(line[len(head) :]))
    return SkillStep(clip(line, STEP_TITLE_CHARS), line)


def template_steps(family: Family) -> list[SkillStep]:
    """The primary anchor's procedure, then what the other anchors add (near-duplicates skipped)."""
    lines = split_steps(family.primary.procedure) or [family.primary.title]
    for anchor in family.anchors[1:]:
        for line in split_steps(anchor.procedure):
            if len(lines) >= MAX_STEPS:
                break
            if all(token_similarity(line, kept) < SAME_STEP for kept in lines):
                lines.append(line)
    return [_step(line) for line in lines[:MAX_STEPS]]


def _parameters(steps: Sequence[SkillStep]) -> list[SkillParameter]:
    names = dict.fromkeys(m.group(1).strip() for s in steps for m in _PLACEHOLDER.finditer(s.text()))
    return [SkillParameter(name, "varies between uses; fill in for the task at hand") for name in names]


def _examples(evidence: Sequence[EvidenceTrace], verification: str) -> list[SkillExample]:
    """One example per evidence episode (its request and what came out of it, else how success was checked),
    best episodes first."""
    out: list[SkillExample] = []
    seen: set[str] = set()
    for item in evidence:
        if item.episode_id in seen or not item.request:
            continue
        seen.add(item.episode_id)
        results = [e.result for e in evidence if e.episode_id == item.episode_id and e.result]
        expected = results[0] if results else first_sentence(verification)
        out.append(SkillExample(item.request, clip(expected, 200)))
        if len(out) >= MAX_EXAMPLES:
            break
    return out


def _summary(family: Family) -> str:
    head = squash(family.primary.title).rstrip(" .")
    trigger = first_sentence(family.primary.trigger).rstrip(" .")
    text = f"{head}." if head else ""
    if trigger:
        text += f" {trigger[:1].upper() + trigger[1:]}."
    return clip(text.strip(), SUMMARY_CHARS)


def template_draft(family: Family, evidence: Sequence[EvidenceTrace], names_taken: Collection[str]) -> SkillDraft:
    """The deterministic skill: the anchor's procedure as steps plus the family's Avoid/Check/Prefer."""
    primary = family.primary
    steps = template_steps(family)
    tools = evidence_tools(evidence)[:MAX_TOOLS]
    return SkillDraft(
        name=unique_name(snake_name(primary.title or primary.procedure), names_taken),
        title=clip(squash(primary.title) or steps[0].title, 120),
        summary=_summary(family),
        trigger=squash(primary.trigger),
        scope=squash(primary.boundary),
        steps=steps,
        parameters=_parameters(steps),
        preconditions=[f"These tools are available: {', '.join(tools)}."] if tools else [],
        examples=_examples(evidence, primary.verification),
        tools=tools,
        preference=prefer_lines(family),
        anti_pattern=avoid_lines(family),
        check=check_lines(family),
        tags=union_tags(family.anchors)[:6],
        induced_by="rules",
    )


# ---------------------------------------------------------------- the LLM path


def _experience_block(exp: ExperienceView) -> str:
    lines = [f"[{exp.id}] {exp.experience_type} ({exp.polarity}) — {exp.title}"]
    for label, value in (("trigger", exp.trigger), ("procedure", exp.procedure), ("verification", exp.verification)):
        if value.strip():
            lines.append(f"{label}: {clip(value, 600)}")
    if exp.anti_pattern:
        lines.append("avoid: " + "; ".join(exp.anti_pattern))
    return "\n".join(lines)


def llm_variables(
    family: Family,
    draft: SkillDraft,
    evidence: Sequence[EvidenceTrace],
    counter: Sequence[EvidenceTrace],
    names_taken: Collection[str],
) -> dict[str, object]:
    """The `skill.crystallize` prompt's variables (Avoid/Check come from the template: the family's)."""

    def items(lines: Sequence[str]) -> str:
        return "\n".join(f"- {line}" for line in lines) or "(none)"

    return {
        "anchor": _experience_block(family.primary),
        "anchors": "\n\n".join(_experience_block(a) for a in family.anchors[1:]) or "(none)",
        "evidence": "\n\n".join(f"[{e.id}] V={e.value:.2f}\n{e.text}" for e in evidence) or "(none)",
        "counter_examples": "\n\n".join(f"[{e.id}] V={e.value:.2f}\n{e.text}" for e in counter) or "(none)",
        "avoid": items(draft.anti_pattern),
        "check": items(draft.check),
        "tools": ", ".join(draft.tools) or "(none: name no tools)",
        "names_taken": ", ".join(sorted(names_taken)[:50]) or "(none)",
    }


def draft_from_llm(output: SkillDraftOutput, template: SkillDraft, names_taken: Collection[str]) -> SkillDraft | None:
    """The model's skill with the family's sections guaranteed; None when it has no usable step."""
    steps = [SkillStep(squash(s.title), squash(s.body)) for s in output.steps if squash(s.title) or squash(s.body)]
    steps = [s if s.title else SkillStep(clip(s.body, STEP_TITLE_CHARS), s.body) for s in steps]
    if not steps:
        return None
    guidance = output.decision_guidance
    summary = squash(output.summary) or template.summary
    return SkillDraft(
        name=unique_name(snake_name(output.name) if squash(output.name) else template.name, names_taken),
        title=squash(output.display_title) or template.title,
        summary=clip(summary, SUMMARY_CHARS),
        trigger=template.trigger,
        scope=template.scope,
        steps=steps[:MAX_STEPS],
        parameters=[SkillParameter(squash(p.name), squash(p.description)) for p in output.parameters if squash(p.name)],
        preconditions=[squash(p) for p in output.preconditions if squash(p)],
        examples=[SkillExample(squash(e.input), squash(e.expected)) for e in output.examples if squash(e.input)]
        or template.examples,
        tools=list(dict.fromkeys(squash(t) for t in output.tools if squash(t))),
        preference=dedupe_lines([*template.preference, *guidance.preference], 5),
        anti_pattern=dedupe_lines([*template.anti_pattern, *guidance.anti_pattern], 8),
        check=template.check,
        tags=list(dict.fromkeys([*template.tags, *(squash(t) for t in output.tags if squash(t))]))[:6],
        induced_by="llm",
    )


# ---------------------------------------------------------------- packaging


def render_guide(draft: SkillDraft) -> str:
    """The Markdown invocation guide (title, summary paragraph, then the sections that have content)."""
    out = [f"# {draft.title}", "", draft.summary or draft.title]

    def section(title: str, lines: Sequence[str]) -> None:
        if lines:
            out.extend(["", f"## {title}", *lines])

    section("When to use", [draft.trigger] if draft.trigger else [])
    section("Preconditions", [f"- {p}" for p in draft.preconditions])
    section("Parameters", [f"- `{p.name}`" + (f": {p.description}" if p.description else "") for p in draft.parameters])
    procedure: list[str] = []
    for number, step in enumerate(draft.steps, start=1):
        procedure.append(f"{number}. {step.title}")
        if step.body and step.body != step.title:
            procedure.append(f"   {step.body}")
    section("Procedure", procedure)
    section("Avoid", [f"- {line}" for line in draft.anti_pattern])
    section("Check", [f"- {line}" for line in draft.check])
    section("Prefer", [f"- {line}" for line in draft.preference])
    section(
        "Examples",
        [f"- Input: {e.input}" + (f" → Expected: {e.expected}" if e.expected else "") for e in draft.examples],
    )
    section("Tools", [", ".join(f"`{t}`" for t in draft.tools)] if draft.tools else [])
    section("Scope", [draft.scope] if draft.scope else [])
    return "\n".join(out).strip() + "\n"


def procedure_payload(
    draft: SkillDraft,
    family: Family,
    evidence: Sequence[EvidenceTrace],
    counter: Sequence[EvidenceTrace],
    verifier: Mapping[str, Any],
) -> dict[str, Any]:
    """`SkillRow.procedure_json`: the structured skill plus its provenance (roles, digest, verifier report)."""
    return {
        "displayTitle": draft.title,
        "summary": draft.summary,
        "trigger": draft.trigger,
        "scope": draft.scope,
        "steps": [{"title": s.title, "body": s.body} for s in draft.steps],
        "parameters": [{"name": p.name, "description": p.description} for p in draft.parameters],
        "preconditions": list(draft.preconditions),
        "examples": [{"input": e.input, "expected": e.expected} for e in draft.examples],
        "tools": list(draft.tools),
        "decisionGuidance": {"preference": list(draft.preference), "antiPattern": list(draft.anti_pattern)},
        "check": list(draft.check),
        "tags": list(draft.tags),
        "inducedBy": draft.induced_by,
        "primaryPolicyId": family.primary.id,
        "roles": family.roles(),
        "sourceDigest": family.digest(),
        "evidenceTraceIds": [e.id for e in evidence],
        "counterExampleTraceIds": [e.id for e in counter],
        "verifier": dict(verifier),
    }
