"""The method table of the wire contract: name, params model, result model, errors, summary.

`rpc/` binds each entry to a core function; `contract/openrpc.py` renders the same table as OpenRPC. Keeping
one table means a method cannot exist on the wire without being in the published contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode


@dataclass(frozen=True)
class MethodSpec:
    name: str
    summary: str
    params: type[BaseModel]
    result: type[BaseModel]
    nullable_result: bool = False
    errors: tuple[ErrorCode, ...] = ()
    direction: str = "client_to_server"
    tags: tuple[str, ...] = field(default_factory=tuple)


_COMMON = (ErrorCode.INVALID_ARGUMENT, ErrorCode.INTERNAL)
_MEMORY_NOT_FOUND = (
    ErrorCode.TRACE_NOT_FOUND,
    ErrorCode.POLICY_NOT_FOUND,
    ErrorCode.WORLD_MODEL_NOT_FOUND,
    ErrorCode.SKILL_NOT_FOUND,
)

METHODS: tuple[MethodSpec, ...] = (
    MethodSpec(
        "auth",
        "Authenticate a TCP connection with the shared token. Required as the first call when a token is set.",
        dto.AuthParams,
        dto.OkResult,
        errors=(ErrorCode.UNAUTHORIZED, *_COMMON),
        tags=("transport",),
    ),
    MethodSpec(
        "core.ping",
        "Cheapest liveness probe (keepalive): answers without touching storage or models.",
        dto.EmptyParams,
        dto.PingResult,
        errors=_COMMON,
        tags=("core",),
    ),
    MethodSpec(
        "core.health",
        "Liveness and status: version, uptime, schema version, paths, embedder and LLM state.",
        dto.EmptyParams,
        dto.CoreHealthDTO,
        errors=_COMMON,
        tags=("core",),
    ),
    MethodSpec(
        "core.namespaces",
        "Every namespace that holds sessions, most recently active first (the operator view: TCP with the token, "
        "or the viewer).",
        dto.EmptyParams,
        dto.NamespacesResult,
        errors=(*_COMMON, ErrorCode.UNAUTHORIZED),
        tags=("core",),
    ),
    MethodSpec(
        "core.config",
        "The effective settings with every secret masked, and their sources (config file, names of the "
        "environment variables read).",
        dto.EmptyParams,
        dto.CoreConfigResult,
        errors=_COMMON,
        tags=("core",),
    ),
    MethodSpec(
        "session.open",
        "Open (or re-open) a session. Mints a `se_` id when none is given; an existing id is reused.",
        dto.SessionOpenParams,
        dto.SessionOpenResult,
        errors=(ErrorCode.CONFLICT, *_COMMON),
        tags=("session",),
    ),
    MethodSpec(
        "session.close",
        "Close a session: finalises its open episodes.",
        dto.SessionCloseParams,
        dto.OkResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, *_COMMON),
        tags=("session",),
    ),
    MethodSpec(
        "episode.open",
        "Start a new episode (task) in a session, finalising the session's open one.",
        dto.EpisodeOpenParams,
        dto.EpisodeOpenResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, *_COMMON),
        tags=("session",),
    ),
    MethodSpec(
        "episode.close",
        "Finalise an episode.",
        dto.EpisodeCloseParams,
        dto.OkResult,
        errors=(ErrorCode.EPISODE_NOT_FOUND, *_COMMON),
        tags=("session",),
    ),
    MethodSpec(
        "turn.start",
        "Route the user turn to a session/episode and return the memories to inject. The routed ids are in "
        "`query.sessionId` / `query.episodeId`; pass that episodeId to turn.end. `turnKey` makes retries safe.",
        dto.TurnInputDTO,
        dto.RetrievalResultDTO,
        errors=(ErrorCode.EPISODE_NOT_FOUND, ErrorCode.CONFLICT, *_COMMON),
        tags=("turn",),
    ),
    MethodSpec(
        "turn.end",
        "Capture what the agent did: each tool call and the final reply become step traces sharing the turn's "
        "turnId. A retried call stores nothing twice and returns the same trace ids.",
        dto.TurnResultDTO,
        dto.TurnEndResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.EPISODE_NOT_FOUND, ErrorCode.CONFLICT, *_COMMON),
        tags=("turn",),
    ),
    MethodSpec(
        "feedback.submit",
        "A user's or verifier's verdict on an episode or one of its steps. Before replying the service stores "
        "it (once per evidenceId), re-scores the episode (also a closed one), makes a decision repair when it is a "
        "user's correction, re-runs the learning chain and drains the queue, so the next turn.start can recall "
        "the lesson. A retry with the same evidenceId returns the stored row and does nothing else.",
        dto.FeedbackSubmitParams,
        dto.FeedbackDTO,
        errors=(ErrorCode.EPISODE_NOT_FOUND, ErrorCode.TRACE_NOT_FOUND, *_COMMON),
        tags=("learning",),
    ),
    MethodSpec(
        "memory.flush",
        "Run every waiting learning chain (reward → L2 → …) now and return when the queue is drained.",
        dto.EmptyParams,
        dto.FlushResult,
        errors=_COMMON,
        tags=("learning",),
    ),
    MethodSpec(
        "tool.outcome",
        "Report one tool call's success or failure as it happens. ≥ failureThreshold failures of the same tool "
        "in its last failureWindow outcomes, with no success, produce a decision repair (prefer/avoid lines), "
        "returned here and injected into the session's next turn.start.",
        dto.ToolOutcomeParams,
        dto.ToolOutcomeResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.EPISODE_NOT_FOUND, *_COMMON),
        tags=("learning",),
    ),
    MethodSpec(
        "memory.search",
        "Search memories on demand (the tool-driven path).",
        dto.MemorySearchParams,
        dto.RetrievalResultDTO,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.get_trace",
        "One trace by id, or null when it does not exist or is not visible to the namespace.",
        dto.GetByIdParams,
        dto.TraceDTO,
        nullable_result=True,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.timeline",
        "The traces of an episode in episode order.",
        dto.TimelineParams,
        dto.TracesResult,
        errors=(ErrorCode.EPISODE_NOT_FOUND, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.list_traces",
        "List traces, newest first, optionally by session/episode or substring.",
        dto.ListTracesParams,
        dto.TracesResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.list_episodes",
        "List episodes, newest first.",
        dto.ListEpisodesParams,
        dto.ListEpisodesResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.list_feedback",
        "List feedback (verdicts of users and verifiers), newest first, optionally on one episode.",
        dto.ListFeedbackParams,
        dto.FeedbackListResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.get_policy",
        "One policy or typed experience by id, with its type, evidence polarity, salience, confidence, "
        "skill eligibility, guidance, sources (episodes, feedback, traces) and verifier data; null when it does "
        "not exist or is not visible to the namespace.",
        dto.GetByIdParams,
        dto.PolicyDTO,
        nullable_result=True,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.list_policies",
        "List policies and typed experiences, most recently updated first, optionally of one status and one "
        "experienceType.",
        dto.ListPoliciesParams,
        dto.PoliciesResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.get_world",
        "One world model (L3 environment knowledge) by id: title, Markdown body, environment / inference / "
        "constraints entries with the experience ids they rest on, domain tags, confidence, version; null when "
        "it does not exist or is not visible to the namespace.",
        dto.GetByIdParams,
        dto.WorldModelDTO,
        nullable_result=True,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.list_world_models",
        "List world models, most recently updated first, optionally only active or only archived ones.",
        dto.ListWorldModelsParams,
        dto.WorldModelsResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.reinforce",
        "Report evidence about a memory: test_passed / diff_accepted / user_confirmed add strength (capped), "
        "failure multiplies it down (never under the recall floor for protected memories), self_report is "
        "recorded with no effect. Recall itself never changes strength. Idempotent per (memory, evidenceId).",
        dto.MemoryReinforceParams,
        dto.MemoryReinforceResult,
        errors=(*_MEMORY_NOT_FOUND, *_COMMON),
        tags=("strength",),
    ),
    MethodSpec(
        "memory.decay",
        "Run the forgetting job now (the service also runs it every strength.decay_interval_s): memories idle "
        "for idle_days are weakened, those idle for archive_days are archived (out of recall, restorable); "
        "pinned memories are exempt; nothing is deleted.",
        dto.MemoryDecayParams,
        dto.MemoryDecayResult,
        errors=_COMMON,
        tags=("strength",),
    ),
    MethodSpec(
        "memory.pin",
        "Pin a memory: exempt from decay and archiving, and protected (failures cannot push it out of "
        "recall). Pinning an archived memory restores it.",
        dto.MemoryRefParams,
        dto.OkResult,
        errors=(*_MEMORY_NOT_FOUND, ErrorCode.CONFLICT, *_COMMON),
        tags=("strength",),
    ),
    MethodSpec(
        "memory.unpin",
        "Unpin a memory: it ages normally again from now on (its protection stays).",
        dto.MemoryRefParams,
        dto.OkResult,
        errors=(*_MEMORY_NOT_FOUND, *_COMMON),
        tags=("strength",),
    ),
    MethodSpec(
        "memory.restore",
        "Bring a memory back into recall: archived by the forgetting job, a policy / world model archived by "
        "its lifecycle, or weakened under the recall floor (a skill archived by its reliability: skill.restore, "
        "else conflict).",
        dto.MemoryRefParams,
        dto.OkResult,
        errors=(*_MEMORY_NOT_FOUND, ErrorCode.CONFLICT, *_COMMON),
        tags=("strength",),
    ),
    MethodSpec(
        "memory.set_status",
        "A person sets an experience, world model or skill active (recalled) or archived (out of recall); "
        "activating a skill a person rejected is a conflict (use skill.review).",
        dto.MemorySetStatusParams,
        dto.MemorySetStatusResult,
        errors=(*_MEMORY_NOT_FOUND, ErrorCode.CONFLICT, *_COMMON),
        tags=("strength",),
    ),
    MethodSpec(
        "memory.link",
        "Record an association between two memories (idempotent). With `supersedes` (fromId corrects "
        "toId), retrieval replaces the corrected memory by its correction, so it never out-ranks it.",
        dto.MemoryLinkParams,
        dto.OkResult,
        errors=(*_MEMORY_NOT_FOUND, ErrorCode.NOT_FOUND, *_COMMON),
        tags=("strength",),
    ),
    MethodSpec(
        "viewer.start",
        "Serve the web viewer from the process that owns the data home (so `memos-bridge viewer` works while a "
        "host's service owns it); a caller on this machine's user only: stdio, the home's socket, or TCP with the "
        "token.",
        dto.ViewerStartParams,
        dto.ViewerStartResult,
        errors=(*_COMMON, ErrorCode.UNAUTHORIZED, ErrorCode.CONFIG_INVALID),
        tags=("viewer",),
    ),
    MethodSpec(
        "llm.test",
        "Ask the configured LLM provider (the host over host.llm.complete, by default) for a short "
        "completion and report whether it works.",
        dto.LlmTestParams,
        dto.LlmTestResult,
        errors=_COMMON,
        tags=("llm",),
    ),
    MethodSpec(
        "skill.list",
        "List skills, most recently updated first, optionally of one status (candidate, active, archived).",
        dto.SkillListParams,
        dto.SkillListResult,
        errors=_COMMON,
        tags=("skill",),
    ),
    MethodSpec(
        "skill.get",
        "One skill (null when it does not exist or the namespace cannot see it). With recordTrial the fetch is "
        "a use of the skill in the episode (episodeId, else the session's open episode): that episode's outcome "
        "passes or fails the trial and moves the skill's reliability η. traceId, turnId and toolCallId (as "
        "reference adapters send them) are stored on that trial, and ignored without recordTrial.",
        dto.SkillGetParams,
        dto.SkillDTO,
        nullable_result=True,
        errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.EPISODE_NOT_FOUND, *_COMMON),
        tags=("skill",),
    ),
    MethodSpec(
        "skill.archive",
        "Archive a skill now: it leaves retrieval (restorable with skill.restore). Idempotent. An optional "
        "reason is reported in the skill.status.changed event.",
        dto.SkillArchiveParams,
        dto.OkResult,
        errors=(ErrorCode.SKILL_NOT_FOUND, *_COMMON),
        tags=("skill",),
    ),
    MethodSpec(
        "skill.restore",
        "Bring an archived skill back into retrieval (archived by skill.archive or by low reliability); the "
        "restore counts as a vouch: η is lifted to at least the retrieval floor plus etaDelta. Idempotent.",
        dto.SkillIdParams,
        dto.OkResult,
        errors=(ErrorCode.SKILL_NOT_FOUND, *_COMMON),
        tags=("skill",),
    ),
    MethodSpec(
        "skill.review",
        "A person approves (active) or rejects (archived) a learnt skill; learning, trials and decay never bring "
        "a rejected skill back, only a later approve or skill.restore.",
        dto.SkillReviewParams,
        dto.SkillReviewResult,
        errors=(ErrorCode.SKILL_NOT_FOUND, *_COMMON),
        tags=("skill",),
    ),
    MethodSpec(
        "memory.remember",
        "Store a memory on purpose (a fact, preference, rule, error, pattern or insight the user or agent asked "
        "to keep). Recalled by later related turns under Remembered; an equal or near-equal memory of the same "
        'type is merged (support + 1, the higher importance); source "user" makes it the user\'s own, protected '
        "rule; expiresAt / ttlMs end its recall (archived, restorable).",
        dto.MemoryRememberParams,
        dto.MemoryRememberResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.get_memory",
        "One remembered memory by id; null when it does not exist or is not visible to the namespace.",
        dto.GetByIdParams,
        dto.RememberedMemoryDTO,
        nullable_result=True,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.list_memories",
        "Remembered memories, newest first; forgotten ones only with includeForgotten or status forgotten.",
        dto.ListMemoriesParams,
        dto.MemoriesResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.update",
        "Correct a memory of any kind in place (content, title, tags, importance, expiresAt, as the kind has them); "
        "it is re-embedded and re-indexed, and the old values go to its history.",
        dto.MemoryUpdateParams,
        dto.MemoryUpdateResult,
        errors=(*_MEMORY_NOT_FOUND, ErrorCode.MEMORY_NOT_FOUND, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.forget",
        "Take a memory of any kind out of every recall, search and list (restorable with memory.restore); what "
        "was derived from it is flagged for review.",
        dto.MemoryForgetParams,
        dto.MemoryForgetResult,
        errors=(*_MEMORY_NOT_FOUND, ErrorCode.MEMORY_NOT_FOUND, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.history",
        "Every event on one memory, oldest first: created (from what), updated (old → new), merged, reinforced, "
        "decayed, archived, expired, forgotten, restored, pinned, flagged — with time and actor.",
        dto.MemoryHistoryParams,
        dto.MemoryHistoryResult,
        errors=(*_MEMORY_NOT_FOUND, ErrorCode.MEMORY_NOT_FOUND, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.purge",
        "Hard delete (no restore), confirm: true required: the ids given, else everything of the namespace "
        "given, else of the session's or the default namespace — rows, full-text entries, vectors, cached turn "
        "results, logs and links. Leaves one audit record with counts and no content.",
        dto.MemoryPurgeParams,
        dto.MemoryPurgeResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.export",
        "Write a namespace's memories to a file: JSONL (lossless, for memory.import) or Markdown (for people).",
        dto.MemoryExportParams,
        dto.MemoryExportResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, ErrorCode.CONFLICT, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.import",
        "Read a memos-bridge JSONL export, or Hermes' MEMORY.md / USER.md, into a namespace; merge (idempotent) or "
        "replace.",
        dto.MemoryImportParams,
        dto.MemoryImportResult,
        errors=(ErrorCode.EMBEDDING_UNAVAILABLE, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.reflect",
        "Consolidate now: run pending learning chains, revisit recent episodes' L2 induction, world models and "
        "skill crystallisation, fold near-duplicate remembered memories, archive expired ones; returns what changed.",
        dto.MemoryReflectParams,
        dto.MemoryReflectResult,
        errors=(ErrorCode.SESSION_NOT_FOUND, *_COMMON),
        tags=("memory",),
    ),
    MethodSpec(
        "memory.stats",
        "Counts by kind, status and type, strength and age histograms, and the recall hit rate of recent turns.",
        dto.MemoryStatsParams,
        dto.MemoryStatsResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.retrieval_log",
        "Recent turn.start calls, newest first, as they were answered: query, injected memory ids, the "
        "injected block, stats with the retrieval funnel, duration.",
        dto.RetrievalLogParams,
        dto.RetrievalLogResult,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "memory.analytics",
        "Per-day series over the last `days` UTC days: memories written per kind, turns and recall hit rate, "
        "verified tasks and their success rate; LLM calls per stage and turn.start latency percentiles.",
        dto.AnalyticsParams,
        dto.AnalyticsResultDTO,
        errors=_COMMON,
        tags=("memory",),
    ),
    MethodSpec(
        "events.subscribe",
        "Receive `events.notify` of a namespace besides the ones this connection works in (a connection gets "
        "the default namespace's events and those of every session it opens or runs turns in), or of all "
        'namespaces with "*".',
        dto.EventsSubscribeParams,
        dto.OkResult,
        errors=_COMMON,
        tags=("events",),
    ),
)

SERVER_TO_CLIENT: tuple[MethodSpec, ...] = (
    MethodSpec(
        "host.llm.complete",
        "Server→client request: complete a chat with the host's own model. Ids are strings `srv-N`.",
        dto.HostLlmCompleteParams,
        dto.HostLlmCompleteResult,
        direction="server_to_client",
        tags=("host",),
    ),
)

NOTIFICATIONS: tuple[MethodSpec, ...] = (
    MethodSpec(
        "events.notify",
        "Server notification for session/episode/trace/retrieval events.",
        dto.CoreEventDTO,
        dto.OkResult,
        direction="server_notification",
        tags=("events",),
    ),
)

METHODS_BY_NAME: dict[str, MethodSpec] = {spec.name: spec for spec in METHODS}
