"""The LLM's second opinion on episode routing, asked before the routing transaction.

The heuristics (`core/relation.py`) decide most turns on their own: hard rules (gap, cap) and explicit cues
("new task", "不对") are final. Only an unsure heuristic decision is worth an LLM call, and that call must
not happen inside the write transaction (it takes seconds), so the open episode's context is read first,
the LLM is asked with a bounded timeout, and the routing transaction then uses the merged decision —
provided the open episode is still the one the LLM was shown (else the heuristics decide again).
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from memos_bridge.config import SessionSettings
from memos_bridge.contract.errors import MemosError
from memos_bridge.core.relation import EpisodeContext, RelationDecision, merge_llm_decision, needs_llm
from memos_bridge.core.sessions import Decide, episode_context_sync, heuristic_decide
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.prompts import RELATION_CLASSIFY
from memos_bridge.storage import repos
from memos_bridge.storage.database import Database

log = logging.getLogger(__name__)

TEXT_CHARS = 1200


def _open_context(db: Session, session_id: str, turn_ts: int) -> tuple[str, EpisodeContext] | None:
    episodes = repos.open_episodes(db, session_id)
    if not episodes:
        return None
    return episodes[0].id, episode_context_sync(db, episodes[0], turn_ts)


async def llm_decide(
    db: Database,
    llm: LLMFacade,
    settings: SessionSettings,
    session_id: str,
    user_text: str,
    turn_ts: int,
    timeout_ms: int,
) -> Decide | None:
    """A `Decide` that uses the LLM's answer for the currently open episode, or None when the heuristics
    are sure (or no LLM can be asked): routing then runs the heuristics itself."""
    if not settings.relation_llm or not llm.available():
        return None
    opened = await db.read(lambda s: _open_context(s, session_id, turn_ts))
    if opened is None:
        return None
    episode_id, context = opened
    fallback = heuristic_decide(settings, user_text)
    heuristic = fallback(episode_id, context)
    if not needs_llm(heuristic):
        return None
    try:
        answer = await llm.complete_json(
            RELATION_CLASSIFY,
            {
                "first_user": context.first_user_text[:TEXT_CHARS],
                "last_user": context.last_user_text[:TEXT_CHARS],
                "last_agent": context.last_assistant_text[:TEXT_CHARS],
                "text": user_text[:TEXT_CHARS],
            },
            op="session.relation.classify",
            episode_id=episode_id,
            timeout_ms=timeout_ms,
        )
    except MemosError as exc:
        log.info("relation LLM unavailable (%s); heuristics decide", exc.code.value)
        return None
    merged = merge_llm_decision(heuristic, answer, user_text)

    def decide(open_episode_id: str, fresh: EpisodeContext) -> RelationDecision:
        return merged if open_episode_id == episode_id else fallback(open_episode_id, fresh)

    return decide
