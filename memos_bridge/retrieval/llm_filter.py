"""Optional LLM relevance filter over the mechanically ranked candidates.

The model sees the request and numbered candidates (kind + a short body) and answers JSON
`{"ranked": [numbers, most relevant first], "sufficient": bool}`. We keep at most `max_keep` in the model's
order; an empty list is respected (nothing is injected — the reference plugin refilled after an empty
selection and injected junk). When the model fails, answers malformed JSON or runs out of time, a
documented cutoff applies instead: keep candidates scoring at least 70 % of the best, at most `max_keep`,
at least one. Without an LLM the mechanical ranking passes through unchanged.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from memos_bridge.core.text import clip
from memos_bridge.llm.base import ChatMessage, LLMProvider
from memos_bridge.retrieval.fusion import Candidate
from memos_bridge.retrieval.render import (
    EpisodeSnippet,
    ExperienceSnippet,
    SkillSnippet,
    TraceSnippet,
    WorldSnippet,
    experience_body,
)

log = logging.getLogger(__name__)

PROMPT_ID = "retrieval.filter"
PROMPT_VERSION = 1
SAFE_CUTOFF_RATIO = 0.7
BODY_CHARS = 500
SYSTEM_PROMPT = (
    "You decide which recalled memories help with the user's current request. Memories are historical notes "
    'and may be irrelevant. Answer with JSON only: {"ranked": [numbers of the helpful memories, most helpful '
    'first], "sufficient": true or false}. Return an empty list when none helps. Never invent numbers.'
)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


@dataclass
class FilterOutcome:
    kept: list[Candidate]
    source: Literal["llm", "cutoff", "passthrough"]
    sufficient: bool | None = None
    reason: str = ""


def candidate_body(cand: Candidate) -> str:
    payload = cand.payload
    if isinstance(payload, TraceSnippet):
        text = f"{payload.summary}\n{payload.user_text}\n{payload.agent_text}"
    elif isinstance(payload, EpisodeSnippet):
        text = payload.task + "\n" + "\n".join(payload.steps)
    elif isinstance(payload, ExperienceSnippet):
        text = f"{payload.title}\n{experience_body(payload)}"
    elif isinstance(payload, SkillSnippet):
        text = f"{payload.name}\n{payload.guide}"
    elif isinstance(payload, WorldSnippet):
        text = f"{payload.title}\n{payload.body}"
    else:
        text = cand.ref_id
    return clip(text, BODY_CHARS)


def build_messages(query: str, candidates: list[Candidate]) -> list[ChatMessage]:
    lines = [f"Request: {clip(query, 800)}", "", "Memories:"]
    for number, cand in enumerate(candidates, 1):
        lines.append(f"[{number}] ({cand.kind}) {candidate_body(cand)}")
    return [ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", "\n".join(lines))]


def parse_selection(text: str, count: int) -> tuple[list[int], bool | None] | None:
    """1-based numbers in the model's order (deduplicated, in range) and `sufficient`; None if malformed."""
    cleaned = _FENCE.sub("", text.strip())
    start = cleaned.find("{")
    end = cleaned.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data: Any = json.loads(cleaned[start : end + 1])
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    ranked = data.get("ranked", data.get("selected"))
    if not isinstance(ranked, list):
        return None
    picked: list[int] = []
    for item in ranked:
        try:
            number = int(item)
        except (TypeError, ValueError):
            continue
        if 1 <= number <= count and number not in picked:
            picked.append(number)
    sufficient = data.get("sufficient")
    return picked, sufficient if isinstance(sufficient, bool) else None


def safe_cutoff(candidates: list[Candidate], rrf_k: int, max_keep: int) -> list[Candidate]:
    if not candidates:
        return []
    top = max(c.score(rrf_k) for c in candidates)
    kept = [c for c in candidates if c.score(rrf_k) >= SAFE_CUTOFF_RATIO * top][:max_keep]
    return kept or candidates[:1]


async def llm_filter(
    query: str,
    candidates: list[Candidate],
    llm: LLMProvider | None,
    *,
    max_keep: int,
    min_candidates: int,
    timeout_s: float,
    rrf_k: int,
) -> FilterOutcome:
    if llm is None or not llm.available() or len(candidates) < min_candidates or timeout_s <= 0:
        return FilterOutcome(candidates, "passthrough", reason="no llm or too few candidates")
    try:
        with anyio.fail_after(timeout_s):
            completion = await llm.complete(
                build_messages(query, candidates),
                temperature=0.0,
                max_tokens=120,
                timeout_ms=int(timeout_s * 1000),
            )
    except Exception as exc:  # the filter is an improvement, never a reason to fail a turn
        log.info("llm relevance filter failed (%s); using the score cutoff", type(exc).__name__)
        return FilterOutcome(safe_cutoff(candidates, rrf_k, max_keep), "cutoff", reason=type(exc).__name__)
    parsed = parse_selection(completion.text, len(candidates))
    if parsed is None:
        return FilterOutcome(safe_cutoff(candidates, rrf_k, max_keep), "cutoff", reason="malformed")
    numbers, sufficient = parsed
    return FilterOutcome([candidates[n - 1] for n in numbers[:max_keep]], "llm", sufficient, "selected")
