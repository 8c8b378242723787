"""Optional LLM relevance filter over the mechanically ranked candidates.

The model sees the request and numbered candidates (kind + a short body) and answers JSON
`{"ranked": [numbers, most relevant first], "sufficient": bool}`. We keep at most `max_keep` in the model's
order; an empty list is respected (nothing is injected — the reference plugin refilled after an empty
selection and injected junk). When the model fails, answers malformed JSON or runs out of time, a
documented cutoff applies instead: keep candidates scoring at least 70 % of the best, at most `max_keep`,
at least one. Without an LLM the mechanical ranking passes through unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, Literal

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.llm.base import ChatMessage, LLMProvider
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.prompts import RETRIEVAL_FILTER, FilterOutput
from memos_bridge.llm.schema import MalformedOutput, validate_output
from memos_bridge.retrieval.fusion import Candidate
from memos_bridge.retrieval.render import (
    EpisodeSnippet,
    ExperienceSnippet,
    SkillSnippet,
    TraceSnippet,
    WorldSnippet,
    experience_body,
)
from memos_bridge.rules.text import clip

log = logging.getLogger(__name__)

# The prompt itself lives in `llm.prompts` with every other prompt.
PROMPT_ID: Final = RETRIEVAL_FILTER.id
PROMPT_VERSION: Final = RETRIEVAL_FILTER.version
SYSTEM_PROMPT: Final = RETRIEVAL_FILTER.system
#: `op` of the filter call in `api_logs` and the facade's stats.
FILTER_OP: Final = "retrieval.filter"
SAFE_CUTOFF_RATIO = 0.7
BODY_CHARS = 500
QUERY_CHARS = 800


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


def prompt_variables(query: str, candidates: list[Candidate]) -> dict[str, str]:
    """The filter prompt's variables: the request and the numbered candidates (kind + short body)."""
    memories = "\n".join(
        f"[{number}] ({cand.kind}) {candidate_body(cand)}" for number, cand in enumerate(candidates, 1)
    )
    return {"query": clip(query, QUERY_CHARS), "memories": memories}


def build_messages(query: str, candidates: list[Candidate]) -> list[ChatMessage]:
    return RETRIEVAL_FILTER.render(prompt_variables(query, candidates))


def _selection(output: FilterOutput, count: int) -> tuple[list[int], bool | None]:
    """1-based numbers in the model's order, deduplicated and in range (invented numbers are dropped)."""
    picked: list[int] = []
    for number in output.ranked:
        if 1 <= number <= count and number not in picked:
            picked.append(number)
    return picked, output.sufficient


def parse_selection(text: str, count: int) -> tuple[list[int], bool | None] | None:
    """1-based numbers in the model's order (deduplicated, in range) and `sufficient`; None if malformed."""
    try:
        return _selection(validate_output(text, FilterOutput), count)
    except MalformedOutput:
        return None


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
    episode_id: str | None = None,
) -> FilterOutcome:
    """The model's selection among `candidates`, or the score cutoff when it fails; `episode_id` (the turn's
    episode) counts the call against that episode's LLM budget."""
    if llm is None or not llm.available() or len(candidates) < min_candidates or timeout_s <= 0:
        return FilterOutcome(candidates, "passthrough", reason="no llm or too few candidates")
    try:
        output = await LLMFacade.wrap(llm).complete_json(
            RETRIEVAL_FILTER,
            prompt_variables(query, candidates),
            op=FILTER_OP,
            episode_id=episode_id,
            timeout_ms=max(1, int(timeout_s * 1000)),
        )
    except MemosError as exc:
        # The filter is an improvement, never a reason to fail a turn.
        reason = "malformed" if exc.code is ErrorCode.LLM_OUTPUT_MALFORMED else exc.code.value
        log.info("llm relevance filter failed (%s); using the score cutoff", reason)
        return FilterOutcome(safe_cutoff(candidates, rrf_k, max_keep), "cutoff", reason=reason)
    except Exception as exc:
        log.info("llm relevance filter failed (%s); using the score cutoff", type(exc).__name__)
        return FilterOutcome(safe_cutoff(candidates, rrf_k, max_keep), "cutoff", reason=type(exc).__name__)
    numbers, sufficient = _selection(output, len(candidates))
    return FilterOutcome([candidates[n - 1] for n in numbers[:max_keep]], "llm", sufficient, "selected")
