"""Event types pushed to clients as `events.notify` notifications (`{type, ts, seq, payload}`)."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    SESSION_OPENED = "session.opened"
    SESSION_CLOSED = "session.closed"
    EPISODE_OPENED = "episode.opened"
    EPISODE_CLOSED = "episode.closed"
    TRACE_CREATED = "trace.created"
    RETRIEVAL_TRIGGERED = "retrieval.triggered"
    RETRIEVAL_EMPTY = "retrieval.empty"
    RETRIEVAL_HIT = "retrieval.hit"
    FEEDBACK_RECEIVED = "feedback.received"
    REWARD_UPDATED = "reward.updated"
    REWARD_SKIPPED = "reward.skipped"
    L2_TRACE_ASSOCIATED = "l2.trace.associated"
    L2_POLICY_INDUCED = "l2.policy.induced"
    L2_POLICY_UPDATED = "l2.policy.updated"
    DECISION_REPAIR_CREATED = "decision_repair.created"
    WORLD_MODEL_CREATED = "l3.world_model.created"
    WORLD_MODEL_UPDATED = "l3.world_model.updated"
    SKILL_CRYSTALLIZED = "skill.crystallized"
    SKILL_REBUILT = "skill.rebuilt"
    SKILL_SKIPPED = "skill.skipped"
    SKILL_REJECTED = "skill.rejected"
    SKILL_TRIAL_RESOLVED = "skill.trial.resolved"
    SKILL_STATUS_CHANGED = "skill.status.changed"
    LEARNING_FLUSHED = "learning.flushed"
    SYSTEM_STARTED = "system.started"
    SYSTEM_SHUTDOWN = "system.shutdown"
    SYSTEM_ERROR = "system.error"


EVENTS_NOTIFY_METHOD = "events.notify"
HOST_LLM_COMPLETE_METHOD = "host.llm.complete"
