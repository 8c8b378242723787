"""Wire DTOs: the single source of truth for every JSON-RPC params and result shape.

Python attributes are snake_case; the wire uses camelCase (the reference plugin's names), produced by an
alias generator. `contracts/` (OpenRPC + JSON Schemas) is generated from these models by
`memos-bridge contract --write`, and a test fails when the checked-in files drift.

Params models forbid unknown fields, so a misspelt field is an `invalid_argument` error instead of being
silently ignored; fields that reference adapters send but that carry no meaning here are declared and
documented as ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

Role = Literal["system", "user", "assistant", "tool"]
RefKind = Literal["skill", "trace", "episode", "experience", "world-model", "memory"]
EpisodeStatus = Literal["open", "closed"]
TopicState = Literal["active", "paused", "interrupted", "ended"]
StepKind = Literal["tool", "reply", "note"]
FeedbackChannel = Literal["explicit", "implicit"]
Polarity = Literal["positive", "negative", "neutral"]


class WireModel(BaseModel):
    """Base of every DTO: camelCase on the wire, snake_case in Python, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", serialize_by_alias=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict sent to clients (camelCase, optional fields left out when unset)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# ---------------------------------------------------------------- shared pieces


class RuntimeNamespace(WireModel):
    """Who owns a memory. Retrieval only sees rows of the caller's namespace (plus shared rows)."""

    agent_kind: str | None = Field(None, description="Agent family, e.g. hermes; defaults to the agent.")
    profile_id: str = Field("default", description="Profile of that agent (several users on one host).")
    profile_label: str | None = None
    workspace_id: str | None = Field(None, description="Project/workspace scope; null = profile-wide.")
    workspace_path: str | None = None
    session_key: str | None = None


ALL_NAMESPACES: Literal["*"] = "*"
ReadNamespace = RuntimeNamespace | Literal["*"] | None
"""`namespace` of a read: a namespace, `"*"` for every namespace (the operator view: TCP with a token only),
or none — then the read's `sessionId` (or its episode, or the id it names) decides, else the default
namespace (profile `default`, no workspace)."""
_READ_NAMESPACE = Field(
    None,
    description='The namespace to read; "*" = every namespace (operator view, only on a TCP connection '
    "authenticated with the token). Without it: the namespace of sessionId / the episode / the row named, else "
    "the default namespace (profile default, no workspace).",
)


class ToolCallDTO(WireModel):
    """One tool invocation the agent made during a turn; each becomes one captured step."""

    name: str = Field(..., min_length=1, max_length=200)
    input: Any = Field(None, description="Arguments as sent by the model (any JSON).")
    output: Any = Field(None, description="Tool result (any JSON or text).")
    error_code: str | None = Field(None, description="Error code or message when the call failed.")
    success: bool | None = Field(None, description="Explicit outcome when the host knows it.")
    tool_call_id: str | None = None
    started_at: int | None = None
    ended_at: int | None = None
    thinking_before: str | None = Field(None, description="Model reasoning emitted before this call.")
    assistant_text_before: str | None = Field(None, description="Visible narration before this call.")


class OkResult(WireModel):
    ok: Literal[True] = True


class ErrorData(WireModel):
    """`error.data` of every application error."""

    name: Literal["MemosError"] = "MemosError"
    code: str
    message: str
    details: Any = None


# ---------------------------------------------------------------- sessions and episodes


class SessionOpenParams(WireModel):
    agent: str = Field(..., min_length=1, max_length=100)
    session_id: str | None = Field(None, min_length=1, max_length=200)
    namespace: RuntimeNamespace | None = None
    meta: dict[str, Any] | None = None


class SessionOpenResult(WireModel):
    session_id: str


class SessionCloseParams(WireModel):
    session_id: str = Field(..., min_length=1, max_length=200)


class EpisodeOpenParams(WireModel):
    session_id: str = Field(..., min_length=1, max_length=200)
    episode_id: str | None = Field(None, description="Recorded as meta.adapterSuppliedId, not used as id.")
    user_message: str | None = None


class EpisodeOpenResult(WireModel):
    episode_id: str


class EpisodeCloseParams(WireModel):
    episode_id: str = Field(..., min_length=1, max_length=200)


class EpisodeDTO(WireModel):
    id: str
    session_id: str
    status: EpisodeStatus
    topic_state: TopicState
    started_at: int
    ended_at: int | None = None
    turn_count: int
    trace_ids: list[str]
    r_task: float | None = None
    close_reason: str | None = None
    preview: str = Field("", description="First user text of the episode, clipped.")


# ---------------------------------------------------------------- turns


#: How an injected block is written (turn.start / memory.search `render`).
RenderMode = Literal["full", "compact"]


class TurnInputDTO(WireModel):
    """turn.start params."""

    agent: str = Field(..., min_length=1, max_length=100)
    session_id: str = Field(..., min_length=1, max_length=200)
    namespace: RuntimeNamespace | None = None
    turn_key: str | None = Field(
        None, min_length=1, max_length=200, description="Idempotency key: a retry returns the same result."
    )
    episode_id: str | None = None
    user_text: str
    context_hints: dict[str, Any] | None = None
    ts: int = Field(..., ge=0, description="User turn time (epoch ms); becomes the steps' turnId.")
    deadline_at: int | None = Field(None, ge=0, description="Absolute epoch-ms budget for retrieval.")
    render: RenderMode | None = Field(
        None,
        description="How the injected block is written: compact (the lessons first in their own words, at most "
        "retrieval.compact_max_chars, empty when no lesson fits) or full (every section, with ids, scope and past "
        "steps); default retrieval.render_mode, compact unless configured.",
    )


class TurnResultDTO(WireModel):
    """turn.end params: what the agent did in answer to the user turn."""

    agent: str = Field(..., min_length=1, max_length=100)
    session_id: str = Field(..., min_length=1, max_length=200)
    episode_id: str = Field(..., min_length=1, max_length=200)
    namespace: RuntimeNamespace | None = None
    agent_text: str = ""
    agent_thinking: str | None = None
    tool_calls: list[ToolCallDTO] = Field(default_factory=list)
    context_hints: dict[str, Any] | None = None
    reflection: str | None = Field(None, description="Adapter-supplied self-reflection (scoring only).")
    user_text: str | None = Field(
        None, description="Only used when no turn.start preceded this turn.end; else ignored."
    )
    ts: int = Field(..., ge=0)


class TurnEndResult(WireModel):
    trace_id: str = Field(..., description="Last step stored by this call ('' if none).")
    trace_ids: list[str] = Field(..., description="Every step of this call, in order.")
    episode_id: str


# ---------------------------------------------------------------- retrieval


class TopKDTO(WireModel):
    tier1: int | None = Field(None, ge=0, le=50)
    tier2: int | None = Field(None, ge=0, le=50)
    tier3: int | None = Field(None, ge=0, le=50)


class RetrievalQueryDTO(WireModel):
    """The query echoed in every retrieval result; `sessionId`/`episodeId` are the ROUTED ids."""

    agent: str = "unknown"
    namespace: RuntimeNamespace | None = None
    session_id: str | None = None
    episode_id: str | None = None
    query: str
    reason: Literal["turn_start", "tool_driven", "skill_invoke", "decision_repair"] | None = None
    context_hints: dict[str, Any] | None = None
    deadline_at: int | None = None
    filters: dict[str, Any] | None = None
    top_k: TopKDTO | None = None
    render: RenderMode | None = None


class RetrievalHitDTO(WireModel):
    tier: Literal[1, 2, 3]
    ref_id: str
    ref_kind: RefKind
    score: float
    snippet: str
    source_trace_id: str | None = None
    channels: list[str] = Field(default_factory=list, description="Channels that found this memory.")
    owner_agent_kind: str | None = None
    owner_profile_id: str | None = None
    owner_workspace_id: str | None = None
    share_scope: str | None = None


class TierLatencyDTO(WireModel):
    tier1: float = 0.0
    tier2: float = 0.0
    tier3: float = 0.0


class RetrievalFunnelDTO(WireModel):
    """How many candidates survived each step of one retrieval, so a reader can see where memories were lost:
    found by no channel, not eligible, under the relevance threshold, a repeat, over a tier's cap, or
    judged irrelevant by the LLM filter. Each count after `candidates` is at most the one before it."""

    channels: dict[str, int] = Field(
        default_factory=dict,
        max_length=64,
        description="Candidates each channel found before hydration (fts_word, fts_trigram, pattern, exact, "
        "structural, vec_summary, vec_action, vec); a memory found by two channels counts in both.",
    )
    candidates: int = Field(0, ge=0, description="Eligible candidates after hydration and roll-ups.")
    thresholded: int = Field(0, ge=0, description="Left after the relative relevance threshold.")
    deduped: int = Field(0, ge=0, description="Left after near-repeats were folded.")
    selected: int = Field(0, ge=0, description="Left after the per-tier caps (with episode roll-ups).")
    injected: int = Field(
        0,
        ge=0,
        description="Hits returned and rendered into the injected block: what is left after the LLM relevance filter "
        "(when on) and the removal of steps a recalled experience or skill was distilled from.",
    )


class RetrievalStatsDTO(WireModel):
    """Why the result looks the way it does (empty because skipped, degraded channels, timing)."""

    candidates: int = 0
    returned: int = 0
    scenario: str | None = Field(None, description="Injection scenario: task, follow_up, memory_probe, chitchat…")
    skipped_reason: str | None = None
    llm_filter: str | None = Field(None, description="llm, cutoff (LLM failed) or passthrough, when enabled.")
    degraded: list[str] = Field(default_factory=list)
    total_ms: float = 0.0
    funnel: RetrievalFunnelDTO | None = Field(
        None, description="Candidates left after each retrieval step; absent when retrieval was skipped or failed."
    )


class RetrievalResultDTO(WireModel):
    query: RetrievalQueryDTO
    hits: list[RetrievalHitDTO]
    injected_context: str
    tier_latency_ms: TierLatencyDTO
    stats: RetrievalStatsDTO | None = None


class MemorySearchParams(WireModel):
    agent: str = "unknown"
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = None
    episode_id: str | None = None
    query: str = Field(..., min_length=1, max_length=20_000)
    filters: dict[str, Any] | None = None
    top_k: TopKDTO | None = None
    deadline_at: int | None = None
    render: RenderMode | None = Field(None, description="full or compact injected text (see turn.start).")


# ---------------------------------------------------------------- memory reads


class TraceDTO(WireModel):
    id: str
    episode_id: str
    session_id: str
    ts: int
    turn_id: int
    step_index: int
    step_kind: StepKind
    user_text: str
    agent_text: str
    summary: str
    tool_calls: list[ToolCallDTO]
    reflection: str | None = None
    agent_thinking: str | None = None
    value: float
    alpha: float
    r_human: float | None = None
    priority: float
    tags: list[str]
    error_signatures: list[str]
    share_scope: str
    strength: float
    pinned: bool
    archived_at: int | None = None
    forgotten_at: int | None = Field(None, description="Set by memory.forget: hidden until memory.restore.")
    protected: bool = Field(False, description="Failures cannot push it under the recall floor.")
    access_count: int = Field(0, description="Times retrieval returned it (recall never changes strength).")
    last_accessed_at: int | None = None
    last_evidence_at: int | None = None
    episode_status: EpisodeStatus | None = None
    r_task: float | None = None


class GetByIdParams(WireModel):
    id: str = Field(..., min_length=1, max_length=200)
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")


class TimelineParams(WireModel):
    episode_id: str = Field(..., min_length=1, max_length=200)
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    include_forgotten: bool = Field(False, description="Show forgotten steps too (hidden otherwise).")
    limit: int = Field(200, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class TracesResult(WireModel):
    traces: list[TraceDTO]


class ListTracesParams(WireModel):
    session_id: str | None = None
    episode_id: str | None = None
    q: str | None = Field(None, max_length=1000, description="Substring filter on user/agent text and summary.")
    namespace: ReadNamespace = _READ_NAMESPACE
    include_forgotten: bool = Field(False, description="List forgotten memories too (hidden otherwise).")
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


class ListEpisodesParams(WireModel):
    session_id: str | None = None
    status: EpisodeStatus | None = None
    namespace: ReadNamespace = _READ_NAMESPACE
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


class ListEpisodesResult(WireModel):
    episode_ids: list[str]
    episodes: list[EpisodeDTO]


# ---------------------------------------------------------------- learning DTOs (filled by later stages)


class FeedbackDTO(WireModel):
    id: str
    ts: int
    episode_id: str | None = None
    trace_id: str | None = None
    channel: FeedbackChannel
    polarity: Polarity
    magnitude: float = Field(..., ge=0, le=1)
    rationale: str | None = None
    raw: Any = None
    evidence_id: str | None = None


class ListFeedbackParams(WireModel):
    """memory.list_feedback: the verdicts users and verifiers gave, newest first."""

    episode_id: str | None = Field(None, min_length=1, max_length=200, description="Only feedback on this episode.")
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0, le=1_000_000)


class FeedbackListResult(WireModel):
    feedback: list[FeedbackDTO]


class FeedbackSubmitParams(WireModel):
    """feedback.submit params: a verdict on an episode (or on one of its steps) from a user or a verifier."""

    episode_id: str | None = Field(None, description="The episode judged; derived from traceId when omitted.")
    trace_id: str | None = Field(None, description="The step judged, when the verdict is about one step.")
    channel: FeedbackChannel = "explicit"
    polarity: Polarity
    magnitude: float = Field(1.0, ge=0, le=1)
    rationale: str | None = Field(None, max_length=20_000, description="The feedback text.")
    raw: Any = Field(None, description="Structured payload; a verifier result goes in raw.verifier.")
    evidence_id: str | None = Field(
        None, min_length=1, max_length=200, description="Idempotency key: the same id is stored and counted once."
    )
    ts: int | None = Field(None, ge=0)


class FlushResult(WireModel):
    ok: Literal[True] = True
    chains_run: int = Field(..., description="Learning chains completed since the service started.")
    pending: int = Field(..., description="Episodes still waiting (0 after a flush unless new work arrived).")


class GuidanceDTO(WireModel):
    preference: list[str] = Field(default_factory=list)
    anti_pattern: list[str] = Field(default_factory=list)


class ToolOutcomeParams(WireModel):
    """tool.outcome params: one tool call's success or failure, reported as soon as the host knows it."""

    session_id: str = Field(..., min_length=1, max_length=200)
    episode_id: str | None = Field(
        None, min_length=1, max_length=200, description="Defaults to the session's open episode."
    )
    tool: str = Field(..., min_length=1, max_length=200, description="Tool name, as in turn.end toolCalls.")
    success: bool
    error: str | None = Field(None, max_length=20_000, description="Error message or code when it failed.")
    ts: int = Field(..., ge=0, description="When the call finished (epoch ms).")


class RepairDTO(WireModel):
    """A decision repair: one line to follow and one to stop doing, learnt from a failure burst or a correction."""

    id: str
    ts: int
    source: Literal["failure_burst", "user_correction"]
    severity: Literal["info", "warn"]
    preference: str
    anti_pattern: str
    tool: str | None = None
    episode_id: str | None = None
    confidence: float = Field(0.5, ge=0, le=1)


class ToolOutcomeResult(WireModel):
    ok: Literal[True] = True
    repair: RepairDTO | None = Field(None, description="Present when this outcome completed a failure burst.")


class PolicySkillNoteDTO(WireModel):
    """What the skill stage last made of an experience: why it yields no skill, or which skill uses it."""

    skipped: str | None = Field(
        None,
        description="Why no skill was built from it: no_success_anchor (avoidance-only family), skill_archived, "
        "skill_rejected (its family's skill was rejected by a person), verifier_rejected, or another eligibility "
        "reason.",
    )
    skill_id: str | None = Field(None, description="The skill it belongs to (or the archived one that blocks it).")
    role: str | None = Field(None, description="Its part in that skill: anchor, avoid, check or prefer.")
    primary: bool | None = Field(None, description="Whether it is the skill's leading anchor.")
    ts: int | None = Field(None, description="When the note was written (epoch ms).")


class LessonSubjectDTO(WireModel):
    identifiers: list[str] = Field(default_factory=list, description="Names the lesson is about (fields, files…).")
    units: list[str] = Field(default_factory=list, description="Canonical units it names (lb, kg, cent, …).")
    numbers: list[str] = Field(default_factory=list, description="Convention numbers it keeps (0.4536, 100, …).")


class LessonDTO(WireModel):
    """A typed experience's lesson as the feedback worded it; `instance` is what was left out of it as true of
    the judged attempt only (its values, ids, verdicts)."""

    lines: list[str] = Field(default_factory=list)
    roles: list[str] = Field(
        default_factory=list,
        description="Per line: convention, instruction, prohibition, correction, preference, diagnosis, note or "
        "observation.",
    )
    subject: LessonSubjectDTO = Field(default_factory=LessonSubjectDTO)
    terms: list[str] = Field(
        default_factory=list, description="What recall matches: the subject's names, the files it was learnt on, units."
    )
    words: list[str] = Field(
        default_factory=list, description="For a lesson that names nothing: its own words (recall needs two of them)."
    )
    instance: list[str] = Field(default_factory=list)


class PolicyDTO(WireModel):
    id: str
    title: str
    trigger: str
    procedure: str
    verification: str
    boundary: str
    support: int
    gain: float
    status: Literal["candidate", "active", "archived"]
    experience_type: str
    evidence_polarity: Literal["positive", "negative", "neutral", "mixed"]
    salience: float
    confidence: float
    skill_eligible: bool
    preference: list[str]
    anti_pattern: list[str]
    source_episode_ids: list[str]
    source_feedback_ids: list[str]
    source_trace_ids: list[str]
    verifier_meta: Any = None
    strength: float
    pinned: bool
    created_at: int
    updated_at: int
    tags: list[str] = Field(default_factory=list, description="Domain tags (e.g. json, git).")
    induced_by: str = Field("", description="Who wrote it: llm / rules (L2 induction) or feedback.experience.")
    archived_at: int | None = None
    forgotten_at: int | None = Field(None, description="Set by memory.forget: hidden until memory.restore.")
    skill_note: PolicySkillNoteDTO | None = Field(
        None, description="For typed experiences the skill stage has seen: skipped reason, or the skill using it."
    )
    lesson: LessonDTO | None = Field(None, description="Typed experiences: the lesson in the feedback's words.")


PolicyStatus = Literal["candidate", "active", "archived"]


class ListPoliciesParams(WireModel):
    status: PolicyStatus | None = None
    experience_type: str | None = Field(
        None,
        description="success_pattern, repair_validated, failure_avoidance, repair_instruction, preference, or "
        "procedural (L2 policies induced from successful steps).",
    )
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    include_forgotten: bool = Field(False, description="List forgotten memories too (hidden otherwise).")
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


class PoliciesResult(WireModel):
    policies: list[PolicyDTO]


class WorldEntryDTO(WireModel):
    label: str
    description: str
    evidence_ids: list[str] = Field(default_factory=list)


class WorldStructureDTO(WireModel):
    environment: list[WorldEntryDTO] = Field(default_factory=list)
    inference: list[WorldEntryDTO] = Field(default_factory=list)
    constraints: list[WorldEntryDTO] = Field(default_factory=list)


class WorldModelDTO(WireModel):
    id: str
    title: str
    body: str = Field(..., description="Markdown summary (what turn.start injects under Environment knowledge).")
    structure: WorldStructureDTO
    domain_tags: list[str]
    policy_ids: list[str] = Field(..., description="The experiences (policies) it was abstracted from.")
    source_episode_ids: list[str] = Field(default_factory=list)
    confidence: float
    version: int = Field(..., description="1 when created; +1 each time new evidence merged in.")
    status: Literal["active", "archived"]
    induced_by: str = Field("", description="rules (deterministic abstraction) or llm.")
    strength: float = 0.5
    pinned: bool = False
    archived_at: int | None = None
    forgotten_at: int | None = Field(None, description="Set by memory.forget: hidden until memory.restore.")
    created_at: int
    updated_at: int


WorldModelStatus = Literal["active", "archived"]


class ListWorldModelsParams(WireModel):
    status: WorldModelStatus | None = None
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    include_forgotten: bool = Field(False, description="List forgotten memories too (hidden otherwise).")
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


class WorldModelsResult(WireModel):
    world_models: list[WorldModelDTO]


SkillReviewDecision = Literal["approve", "reject"]


class SkillReviewDTO(WireModel):
    """A person's verdict on a skill (`skill.review`), kept on the skill until the next review or restore."""

    status: Literal["approved", "rejected"]
    reason: str | None = Field(None, max_length=500, description="Why, in the reviewer's words.")
    at: int = Field(..., ge=0, description="When it was reviewed (epoch ms).")


class SkillDTO(WireModel):
    id: str
    name: str
    status: Literal["candidate", "active", "archived"]
    invocation_guide: str
    decision_guidance: GuidanceDTO
    evidence_anchors: list[str]
    eta: float
    support: int
    gain: float
    trials_attempted: int
    trials_passed: int
    source_policy_ids: list[str]
    source_world_model_ids: list[str]
    version: int
    usage_count: int
    last_used_at: int | None = None
    created_at: int
    updated_at: int
    summary: str = Field("", description="What the skill does and when (the guide's first paragraph).")
    procedure: dict[str, Any] | None = Field(
        None,
        description="Structured skill: steps, parameters, preconditions, examples, tools, check lines, the "
        "experiences it was built from by role, and the verifier's report.",
    )
    archived_at: int | None = None
    forgotten_at: int | None = Field(None, description="Set by memory.forget: hidden until memory.restore.")
    review: SkillReviewDTO | None = Field(
        None,
        description="A person's review: approved (active, vouched for) or rejected (archived; no learning path "
        "brings it back, only skill.review approve or skill.restore).",
    )


SkillStatus = Literal["candidate", "active", "archived"]


class SkillListParams(WireModel):
    status: SkillStatus | None = None
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    include_forgotten: bool = Field(False, description="List forgotten memories too (hidden otherwise).")
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


class SkillListResult(WireModel):
    skills: list[SkillDTO]


class SkillGetParams(WireModel):
    id: str = Field(..., min_length=1, max_length=200)
    record_trial: bool = Field(
        False,
        description="Count this fetch as a use of the skill in the episode (episodeId, else the session's open "
        "episode); that episode's outcome then passes or fails the trial and moves the skill's reliability.",
    )
    session_id: str | None = Field(None, min_length=1, max_length=200)
    episode_id: str | None = Field(None, min_length=1, max_length=200)
    trace_id: str | None = Field(
        None, min_length=1, description="Reference adapters' trial context: stored on the trial (recordTrial only)."
    )
    turn_id: int | None = Field(None, ge=0, description="The turn the skill was fetched in; stored on the trial.")
    tool_call_id: str | None = Field(
        None, min_length=1, description="The tool call that fetched it; stored on the trial (recordTrial only)."
    )
    namespace: ReadNamespace = _READ_NAMESPACE


class SkillIdParams(WireModel):
    id: str = Field(..., min_length=1, max_length=200)


class SkillArchiveParams(SkillIdParams):
    reason: str | None = Field(
        None, max_length=500, description="Why (the reference's field): reported in the skill.status.changed event."
    )


class SkillReviewParams(WireModel):
    """skill.review: a person approves or rejects a learnt skill."""

    id: str = Field(..., min_length=1, max_length=200)
    decision: SkillReviewDecision = Field(
        ...,
        description="approve: the skill becomes active, vouched for by a person; reject: it is archived and no "
        "learning path brings it back (only a later approve or skill.restore).",
    )
    reason: str | None = Field(None, max_length=500, description="Why; kept on the skill and in its history.")
    namespace: RuntimeNamespace | None = None


class SkillReviewResult(WireModel):
    ok: Literal[True] = True
    skill: SkillDTO = Field(..., description="The skill after the review.")


# ---------------------------------------------------------------- strength, forgetting, pinning, links

MemoryKind = Literal["trace", "policy", "world_model", "skill", "memory"]
StrengthEvidence = Literal["test_passed", "diff_accepted", "user_confirmed", "self_report", "failure"]
LinkRelation = Literal["cause", "solution", "supersedes", "related"]


class MemoryReinforceParams(WireModel):
    """memory.reinforce params: evidence about whether acting on a memory worked."""

    id: str = Field(..., min_length=1, max_length=200, description="The memory the evidence is about.")
    kind: MemoryKind
    evidence: StrengthEvidence = Field(
        ...,
        description="test_passed / diff_accepted / user_confirmed add strength (user_confirmed also protects the "
        "memory); failure multiplies it down; self_report is recorded and counted as an access, with no effect.",
    )
    evidence_id: str = Field(
        ...,
        min_length=1,
        max_length=200,
        description="Idempotency key per memory (e.g. the test run id): a retry is recorded and counted once.",
    )
    namespace: RuntimeNamespace | None = None


class MemoryReinforceResult(WireModel):
    id: str
    strength: float = Field(..., description="Strength after this call.")
    applied: bool = Field(..., description="False when this evidenceId was already recorded for the memory.")


class MemoryDecayParams(WireModel):
    now: int | None = Field(None, ge=0, description="Evaluate idleness as of this time (epoch ms); default: now.")


class MemoryDecayResult(WireModel):
    decayed: int = Field(..., description="Idle memories whose strength was lowered by this run.")
    archived: int = Field(..., description="Memories archived by this run (out of recall, restorable).")
    expired: int = Field(0, description="Remembered memories archived because their expiresAt passed.")


class MemoryRefParams(WireModel):
    """A memory by id and kind (memory.pin, memory.unpin, memory.restore)."""

    id: str = Field(..., min_length=1, max_length=200)
    kind: MemoryKind
    namespace: RuntimeNamespace | None = None


class MemoryLinkParams(WireModel):
    """memory.link params; `supersedes` reads "fromId supersedes toId" (fromId is the correction)."""

    from_id: str = Field(..., min_length=1, max_length=200)
    to_id: str = Field(..., min_length=1, max_length=200)
    relation: LinkRelation
    namespace: RuntimeNamespace | None = None


# ---------------------------------------------------------------- memories written on purpose

RememberedType = Literal["fact", "preference", "rule", "error", "pattern", "insight"]
MemoryTag = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class MemoryRememberParams(WireModel):
    """memory.remember: store something on purpose ("remember this"), recalled by later turns."""

    content: str = Field(..., min_length=1, max_length=20_000, description="The memory in plain words.")
    type: RememberedType = Field("fact", description="How it is rendered and grouped in recall.")
    importance: float | None = Field(
        None, ge=0.0, le=1.0, description="0..1 (default 0.5); breaks near-ties in ranking, never overrides relevance."
    )
    expires_at: int | None = Field(None, ge=0, description="Stop recalling it after this time (epoch ms).")
    ttl_ms: int | None = Field(None, ge=1, description="Or: stop recalling it this long from now.")
    tags: list[MemoryTag] = Field(default_factory=list, max_length=32)
    source: str | None = Field(
        None,
        min_length=1,
        max_length=50,
        description='Who said it: "user" makes it the user\'s own rule (protected from failure evidence); '
        "default agent.",
    )
    pinned: bool = Field(False, description="Never decays or is archived for idleness.")
    agent: str | None = Field(None, min_length=1, max_length=200, description="The agent kind that owns it.")
    namespace: RuntimeNamespace | None = None
    session_id: str | None = Field(
        None, min_length=1, max_length=200, description="Remember in this session's namespace (and note it)."
    )

    @model_validator(mode="after")
    def _one_expiry(self) -> MemoryRememberParams:
        if self.expires_at is not None and self.ttl_ms is not None:
            raise ValueError("give expiresAt or ttlMs, not both")
        return self


class MemoryRememberResult(WireModel):
    id: str
    kind: Literal["memory"] = "memory"
    merged: bool = Field(..., description="True when an equal or near-equal memory of the type absorbed it.")


MemoryStatus = Literal["active", "archived", "forgotten"]


class RememberedMemoryDTO(WireModel):
    """A memory written on purpose, as `memory.get_memory` / `memory.list_memories` return it."""

    id: str
    type: RememberedType
    content: str
    tags: list[str]
    importance: float
    support: int = Field(..., description="How many times it was remembered (1 + merges).")
    source: str
    status: MemoryStatus
    strength: float
    pinned: bool
    protected: bool
    expires_at: int | None = None
    session_id: str | None = None
    access_count: int = 0
    last_accessed_at: int | None = None
    archived_at: int | None = None
    forgotten_at: int | None = None
    created_at: int
    updated_at: int


class ListMemoriesParams(WireModel):
    type: RememberedType | None = None
    status: MemoryStatus | None = None
    include_forgotten: bool = Field(False, description="List forgotten memories too (they are hidden otherwise).")
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


class MemoriesResult(WireModel):
    memories: list[RememberedMemoryDTO]


class MemoryUpdateParams(WireModel):
    """memory.update: correct a memory in place; the old values go to its history."""

    id: str = Field(..., min_length=1, max_length=200)
    kind: MemoryKind
    content: str | None = Field(
        None,
        min_length=1,
        max_length=20_000,
        description="The text: a memory's content, an experience's procedure, a world model's body, a skill's "
        "guide, a step's summary.",
    )
    title: str | None = Field(
        None, min_length=1, max_length=500, description="An experience's or world model's title, a skill's name."
    )
    tags: list[MemoryTag] | None = Field(None, max_length=32)
    importance: float | None = Field(None, ge=0.0, le=1.0, description="A remembered memory's importance.")
    expires_at: int | None = Field(None, ge=0, description="A remembered memory's expiry (epoch ms); 0 removes it.")
    namespace: RuntimeNamespace | None = None

    @model_validator(mode="after")
    def _something(self) -> MemoryUpdateParams:
        if all(v is None for v in (self.content, self.title, self.tags, self.importance, self.expires_at)):
            raise ValueError("memory.update needs at least one of content, title, tags, importance, expiresAt")
        return self


class MemoryUpdateResult(WireModel):
    id: str
    kind: MemoryKind
    changed: list[str] = Field(..., description="The fields whose value changed (empty: it already read so).")
    memory: dict[str, Any] = Field(..., description="The memory after the update, as its kind's get method returns it.")


class MemoryForgetParams(WireModel):
    """memory.forget: out of every recall, search and list until `memory.restore`."""

    id: str = Field(..., min_length=1, max_length=200)
    kind: MemoryKind
    reason: str | None = Field(None, max_length=500, description="Why; kept in the memory's history.")
    namespace: RuntimeNamespace | None = None


class MemoryForgetResult(WireModel):
    ok: Literal[True] = True
    flagged: list[str] = Field(
        default_factory=list,
        description="Memories derived from this one (a skill from a forgotten experience, a world model citing "
        "it), flagged for review rather than silently kept.",
    )


StatusKind = Literal["policy", "world_model", "skill"]
SettableStatus = Literal["active", "archived"]


class MemorySetStatusParams(WireModel):
    """memory.set_status: a person puts an experience, a world model or a skill in or out of recall."""

    id: str = Field(..., min_length=1, max_length=200)
    kind: StatusKind = Field(..., description="The kinds with a lifecycle status a person may set.")
    status: SettableStatus = Field(
        ..., description="active: recalled (a candidate experience activated, an archived memory back); archived: out."
    )
    reason: str | None = Field(None, max_length=500, description="Why; kept in the memory's history.")
    namespace: RuntimeNamespace | None = None


class MemorySetStatusResult(WireModel):
    ok: Literal[True] = True
    id: str
    kind: StatusKind
    status: SettableStatus


class MemoryHistoryParams(WireModel):
    id: str = Field(..., min_length=1, max_length=200)
    kind: MemoryKind
    namespace: ReadNamespace = _READ_NAMESPACE
    limit: int = Field(200, ge=1, le=1000)


class MemoryHistoryEventDTO(WireModel):
    ts: int
    event: str = Field(
        ...,
        description="created, updated, merged, reinforced, decayed, archived, activated, expired, forgotten, "
        "restored, pinned, unpinned, flagged, reviewed (a skill approved or rejected), linked, recalled (the "
        "latest turns that injected it, with their request)",
    )
    actor: str = Field(..., description="Who: user, host (a JSON-RPC call), or the service stage that did it.")
    detail: dict[str, Any] = Field(default_factory=dict)


class MemoryHistoryResult(WireModel):
    id: str
    kind: MemoryKind
    events: list[MemoryHistoryEventDTO]


PurgeKind = Literal["trace", "policy", "world_model", "skill", "memory", "episode", "session"]


class MemoryPurgeParams(WireModel):
    """memory.purge: hard delete (no restore). Needs `confirm: true`."""

    ids: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = Field(
        None, max_length=10_000, description="These memories (any kind, by id prefix)."
    )
    namespace: RuntimeNamespace | None = Field(
        None, description="Or everything of this namespace; with neither, the caller's (default) namespace."
    )
    kinds: list[PurgeKind] | None = Field(None, max_length=7, description="Only these kinds (default: all).")
    before: int | None = Field(None, ge=0, description="Only rows created before this time (epoch ms).")
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Purge in this session's namespace.")
    confirm: bool = Field(..., description="Must be true: a purge cannot be undone.")


class MemoryPurgeResult(WireModel):
    purged: dict[str, int] = Field(..., description="Rows deleted per table.")
    audit_id: int = Field(..., description="The audit record of this purge (counts only, no content).")


# ---------------------------------------------------------------- export, import, reflect, stats

ExportKind = Literal["trace", "policy", "world_model", "skill", "memory", "episode", "session", "feedback"]
ExportFormat = Literal["jsonl", "markdown"]


class MemoryExportParams(WireModel):
    """memory.export: write a namespace's memories to a file the service can reach."""

    namespace: RuntimeNamespace | None = Field(
        None, description="The namespace to export; without it the session's, else the default namespace."
    )
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Export this session's namespace.")
    kinds: list[ExportKind] | None = Field(None, max_length=8, description="Only these kinds (default: all).")
    format: ExportFormat = Field(
        "jsonl",
        description="jsonl: lossless (ids, statuses, strengths, links, history, timestamps), for memory.import; "
        "markdown: for people, grouped by type.",
    )
    path: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Absolute file path to write; a relative one is resolved under the data home's exports/ folder; "
        "default exports/memos-<time>.<jsonl|md>. An existing file is not overwritten unless overwrite is true.",
    )
    overwrite: bool = False
    include_vectors: bool = Field(False, description="JSONL only: keep the embedding vectors (else re-embedded).")
    include_forgotten: bool = Field(True, description="Export forgotten (hidden) memories too, marked as such.")


class MemoryExportResult(WireModel):
    path: str = Field(..., description="The absolute path written.")
    format: ExportFormat
    counts: dict[str, int] = Field(..., description="Records written per kind.")
    bytes: int


ImportMode = Literal["merge", "replace"]
ImportFormat = Literal["auto", "jsonl", "hermes"]


class MemoryImportParams(WireModel):
    """memory.import: read an export (or Hermes' MEMORY.md / USER.md) back into a namespace."""

    path: str = Field(
        ...,
        min_length=1,
        max_length=4096,
        description="The file to read: absolute, or relative to the data home's exports/ folder.",
    )
    mode: ImportMode = Field(
        "merge",
        description="merge: add what is missing, keep what exists (re-importing changes nothing); replace: purge "
        "the target namespace first.",
    )
    format: ImportFormat = Field(
        "auto",
        description="auto: a memos-bridge JSONL export, or a Hermes memory file (MEMORY.md → facts, USER.md → "
        "preferences) by its name; hermes forces the latter.",
    )
    namespace: RuntimeNamespace | None = Field(
        None, description="Import into this namespace (default: the one each record was exported from)."
    )
    confirm: bool = Field(False, description="Must be true with mode replace: it deletes the namespace first.")


class MemoryImportResult(WireModel):
    imported: dict[str, int] = Field(..., description="Records added per kind.")
    skipped: dict[str, int] = Field(..., description="Records already present (same id or same memory) per kind.")
    purged: dict[str, int] = Field(default_factory=dict, description="mode replace: rows deleted first, per table.")


class MemoryReflectParams(WireModel):
    """memory.reflect: consolidate now instead of waiting for the learning queue."""

    namespace: RuntimeNamespace | None = None
    session_id: str | None = Field(
        None, min_length=1, max_length=200, description="Reflect on this session's namespace."
    )
    episodes: int = Field(200, ge=1, le=5000, description="How many of the most recent scored episodes to revisit.")


class MemoryReflectResult(WireModel):
    episodes: int = Field(..., description="Episodes whose consolidation stages ran.")
    chains_run: int = Field(..., description="Pending learning chains run first (feedback windows cut short).")
    merged: int = Field(..., description="Near-duplicate remembered memories folded into one.")
    expired: int = Field(..., description="Remembered memories archived because their expiry passed.")
    changes: dict[str, dict[str, int]] = Field(
        ..., description="Per kind, the change of each status count (e.g. {policy: {active: +1, candidate: -1}})."
    )


class MemoryStatsParams(WireModel):
    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    recent_turns: int = Field(100, ge=1, le=10_000, description="Turns the recall hit rate is measured over.")


class HistogramBinDTO(WireModel):
    label: str
    count: int


class MemoryStatsResult(WireModel):
    counts: dict[str, dict[str, int]] = Field(..., description="Per kind, rows per status (forgotten counted apart).")
    types: dict[str, dict[str, int]] = Field(
        ..., description="Per kind, rows per type (experience type, remembered type); active rows only."
    )
    strength: list[HistogramBinDTO] = Field(..., description="Strength of recallable memories, in 0.1 bins.")
    age_days: list[HistogramBinDTO] = Field(..., description="Age of recallable memories since creation.")
    turns: int = Field(..., description="Turns measured for the hit rate (at most recentTurns).")
    turns_with_recall: int = Field(..., description="Of those, turns whose turn.start injected at least one memory.")
    recall_hit_rate: float | None = Field(None, description="turnsWithRecall / turns; null with no turns.")


# ---------------------------------------------------------------- retrieval log and analytics (viewer pages)


class RetrievalLogParams(WireModel):
    """memory.retrieval_log: what recent turn.start calls retrieved and why, newest first."""

    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(
        None, min_length=1, max_length=200, description="Only this session's turns (read in its namespace)."
    )
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0, le=1_000_000)


class RetrievalLogEntryDTO(WireModel):
    """One turn.start as it was answered (its cached result)."""

    turn_id: int = Field(..., description="The stored turn's row id (not a trace's turnId, which is its time).")
    ts: int = Field(..., description="The user turn's time (turn.start `ts`).")
    session_id: str
    episode_id: str
    query: str = Field(..., description="The user text the turn retrieved for.")
    hit_count: int = Field(..., ge=0)
    hit_ids: list[str] = Field(..., description="refIds of the injected memories, in rank order.")
    stats: RetrievalStatsDTO | None = Field(None, description="The retrieval's stats, with its funnel when recorded.")
    injected_context: str
    duration_ms: int | None = Field(None, ge=0, description="Whole turn.start time, when its log entry is found.")


class RetrievalLogResult(WireModel):
    entries: list[RetrievalLogEntryDTO]


class AnalyticsParams(WireModel):
    """memory.analytics: per-day series over the last `days` UTC days of a namespace."""

    namespace: ReadNamespace = _READ_NAMESPACE
    session_id: str | None = Field(None, min_length=1, max_length=200, description="Read in this session's namespace.")
    days: int = Field(30, ge=1, le=365, description="Days in the window, ending today (UTC).")
    now: int | None = Field(None, ge=0, description="The window's 'now' (epoch ms); default the current time.")


class LlmStageUsageDTO(WireModel):
    stage: str = Field(..., description="The LLM operation (session.intent, retrieval.filter, l2.induction, …).")
    calls: int = Field(..., ge=0, description="Attempts, retries and fallbacks included.")
    failures: int = Field(..., ge=0, description="Attempts that failed or gave a malformed answer.")
    tokens_in: int | None = Field(None, ge=0, description="Prompt tokens; null when no provider reported usage.")
    tokens_out: int | None = Field(None, ge=0, description="Completion tokens; null when no provider reported usage.")


class LatencySummaryDTO(WireModel):
    n: int = Field(..., ge=0)
    p50: float | None = Field(None, description="Nearest-rank percentile; null when n is 0.")
    p95: float | None = None
    p99: float | None = None


class AnalyticsResultDTO(WireModel):
    days: list[str] = Field(..., description="UTC dates YYYY-MM-DD, oldest first; every series has one value per day.")
    written: dict[str, list[int]] = Field(
        ..., description="Memories created per day, per kind: trace, experience, world_model, skill, memory."
    )
    turns: list[int] = Field(..., description="turn.start calls per day (those whose result is stored).")
    recall_hit_rate: list[float | None] = Field(
        ..., description="Per day, the share of turns that injected at least one memory; null with no turns."
    )
    verified_tasks: list[int] = Field(..., description="Episodes whose latest verifier result fell on that day.")
    verified_success_rate: list[float | None] = Field(
        ..., description="Per day, the share of those at full verifier credit; null with none."
    )
    llm: list[LlmStageUsageDTO] = Field(..., description="LLM calls over the window, per stage.")
    turn_start_latency_ms: LatencySummaryDTO = Field(..., description="turn.start durations over the window.")


# ---------------------------------------------------------------- health, auth, events, host callback


class ModelHealthDTO(WireModel):
    available: bool
    provider: str
    model: str
    loaded: bool = False
    dim: int | None = None
    last_ok_at: int | None = None
    last_error: str | None = None


class StorageHealthDTO(WireModel):
    """The database that serves the home."""

    dialect: str = Field(..., description="sqlite or postgresql.")
    server_version: str
    full_text: bool = Field(
        ...,
        description="Keyword search runs in the database (SQLite FTS5; PostgreSQL tsvector and 3-gram GIN indexes).",
    )
    vector_extension: str | None = Field(
        None,
        description="pgvector's version when the database searches the vectors (HNSW indexes); null: the "
        "service's in-memory vector index is used (SQLite, or PostgreSQL without pgvector).",
    )


class HealthPathsDTO(WireModel):
    home: str
    config: str
    db: str
    logs: str


class StageTimingDTO(WireModel):
    """One learning stage's cost over its recent runs (the last 256 kept in memory), in milliseconds."""

    runs: int = Field(..., ge=0, description="Runs of the stage since the service started.")
    wall_ms: LatencySummaryDTO = Field(..., description="Wall time per run, waits for the database and LLM included.")
    cpu_ms: LatencySummaryDTO = Field(
        ..., description="Process CPU time (all threads) during each run; counts other work done meanwhile."
    )
    alone_wall_ms: LatencySummaryDTO = Field(
        ..., description="Wall time of the runs during which no turn was in flight and no other stage started."
    )
    alone_cpu_ms: LatencySummaryDTO = Field(..., description="Process CPU time of those runs: the stage's own cost.")


class LearningHealthDTO(WireModel):
    pending: int = Field(..., description="Episodes waiting for their feedback window to end.")
    running: int
    chains_run: int
    chains_failed: int
    last_error: str = ""
    stages: dict[str, StageTimingDTO] | None = Field(
        None,
        description="Per chain stage (reward, repair, experiences, l2, world, skills, strength): its cost; `wait`: "
        "each wait of a chain for a moment without turns in flight, before each stage.",
    )


class RedactionHealthDTO(WireModel):
    """Secrets replaced by `[REDACTED:<kind>]` in requests since the service started."""

    enabled: bool
    total: int = 0
    by_kind: dict[str, int] = Field(default_factory=dict)


class ProcessHealthDTO(WireModel):
    """The service process's memory, and what the heap trimmer gave back to the system."""

    rss_mib: float | None = Field(None, description="Resident memory now, MiB (Linux only).")
    heap_trims: int = Field(0, description="Times free C-heap pages were returned to the system (glibc only).")
    heap_released_mib: float = Field(0.0, description="Resident memory those trims released in all, MiB (estimate).")
    vector_rows: int = Field(
        0,
        description="Vectors the in-memory search indexes hold (0 where the database searches them: pgvector); "
        "a step embedded once is held once.",
    )
    vector_mib: float = Field(0.0, description="What those vectors take, MiB (float32).")


class CoreHealthDTO(WireModel):
    ok: bool
    version: str
    uptime_ms: int
    schema_version: int
    lightweight: bool
    paths: HealthPathsDTO
    llm: ModelHealthDTO
    embedder: ModelHealthDTO
    connections: int = Field(0, description="Live client connections.")
    learning: LearningHealthDTO | None = Field(None, description="The background learning queue.")
    llm_usage: dict[str, Any] | None = Field(
        None, description="Per-operation LLM counters (calls, failures, malformed, tokens, latency), breakers, budget."
    )
    redactions: RedactionHealthDTO | None = Field(None, description="Secrets redacted from requests, by kind.")
    storage: StorageHealthDTO | None = Field(None, description="The database backend.")
    process: ProcessHealthDTO | None = Field(None, description="The process's resident memory and heap trims.")


class ConfigSourcesDTO(WireModel):
    """Where the effective settings came from, besides the defaults."""

    config_file: str = Field(..., description="The data home's config.toml path.")
    config_file_exists: bool
    env: list[str] = Field(
        default_factory=list, max_length=500, description="Names (never values) of the environment variables read."
    )


class CoreConfigResult(WireModel):
    settings: dict[str, Any] = Field(
        ...,
        description='The effective settings, sections as in config.toml; every secret set is "••••" (transport.token, '
        "llm.api_key, any field named like a token, key, secret or password, the password of a URL).",
    )
    sources: ConfigSourcesDTO


class NamespaceSummaryDTO(WireModel):
    """One namespace that holds sessions: who owns it and how busy it is."""

    agent_kind: str
    profile_id: str
    workspace_id: str | None = None
    sessions: int
    last_seen_at: int | None = None


class NamespacesResult(WireModel):
    namespaces: list[NamespaceSummaryDTO]


class EmptyParams(WireModel):
    """Methods without parameters: `{}` or no params at all; anything else is rejected."""


class PingResult(WireModel):
    ok: Literal[True] = True
    ts: int


class AuthParams(WireModel):
    token: str


class EventsSubscribeParams(WireModel):
    """`events.subscribe`: receive the events of another namespace too, or of every one (`"*"`)."""

    namespace: RuntimeNamespace | Literal["*"] = Field(
        ...,
        description='The namespace whose events this connection receives from now on; "*" = every namespace '
        "(operator view, only on a TCP connection authenticated with the token).",
    )


class EventNamespaceDTO(WireModel):
    """The namespace an event belongs to; a connection receives it only when it works in that namespace."""

    profile_id: str
    workspace_id: str | None = None


class CoreEventDTO(WireModel):
    """Params of the `events.notify` server notification.

    `namespace` is null for events about the service as a whole (started, learning flushed), which every
    connection receives."""

    type: str
    ts: int
    seq: int
    correlation_id: str | None = None
    namespace: EventNamespaceDTO | None = None
    payload: dict[str, Any]


class LlmMessage(WireModel):
    role: Role
    content: str


class HostLlmCompleteParams(WireModel):
    """Params of the server→client `host.llm.complete` request."""

    messages: list[LlmMessage] = Field(..., min_length=1)
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_ms: int | None = None


class LlmUsageDTO(WireModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class HostLlmCompleteResult(WireModel):
    model_config = ConfigDict(extra="ignore")

    text: str
    model: str | None = None
    usage: LlmUsageDTO | None = None
    duration_ms: float | None = None


class ViewerStartParams(WireModel):
    """viewer.start: serve the web viewer from this process, the data home's owner."""

    host: str = Field(
        "127.0.0.1",
        min_length=1,
        max_length=255,
        pattern=r"^[A-Za-z0-9.:-]+$",
        description="Address to bind (loopback by default).",
    )
    port: int = Field(18799, ge=0, le=65535, description="Port (0: any free one).")


class ViewerStartResult(WireModel):
    url: str = Field(..., description="Where the viewer answers.")
    started: bool = Field(..., description="False when this process already served the viewer (its URL is returned).")


class LlmTestParams(WireModel):
    prompt: str = Field("Reply with the single word: pong", min_length=1, max_length=2000)
    timeout_ms: int = Field(20_000, ge=100, le=120_000)


class LlmTestResult(WireModel):
    ok: bool
    provider: str
    text: str | None = None
    model: str | None = None
    duration_ms: float
    error: ErrorData | None = None
