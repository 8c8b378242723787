"""ORM schema for the whole product.

Every table the service will ever need is declared here up front, so later features add logic rather than
schema. Conventions (so that rows stay portable between SQLite now and PostgreSQL later):

* times are integer epoch milliseconds (`BigInteger`), never DATETIME: the wire protocol uses ms and
  integer comparisons are cheap and time-zone free;
* JSON columns use the generic `sqlalchemy.JSON` type and are named `*_json`. Mutating a loaded dict or
  list in place is NOT tracked: assign a new object to persist a change;
* vectors are `LargeBinary` little-endian float32 (see `vectors.to_blob`), nullable until embedded;
* scalar defaults are given both as a Python `default` (the ORM sees the value before flush) and as a
  `server_default` (raw SQL inserts, and `ALTER TABLE ... ADD COLUMN ... NOT NULL` in later migrations,
  need the database to know the default too);
* every foreign key has a many-to-one `relationship()` to its parent. It is there for the unit of work,
  which orders INSERTs and DELETEs by relationships, not by foreign keys: without it, adding a session and
  its episode in one flush may insert the episode first and fail the FK check. Deletes cascade in the
  database (ON DELETE), never through the ORM, so no one-to-many collections are declared;
* the searchable kinds (traces, policies, world models, skills) have an integer `rid` primary key next to
  their public string `id`: FTS5 external-content tables are keyed by an integer rowid, and the implicit
  rowid of a TEXT-keyed table may change on VACUUM, which would silently corrupt the full-text index.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedColumn, mapped_column, relationship

# Deterministic constraint names: PostgreSQL (and any later ALTER) needs to refer to constraints by name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SHARE_PRIVATE = "private"


class Base(DeclarativeBase):
    """Declarative base; its metadata is the single source of truth for the schema."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


# ---------------------------------------------------------------------------------------------------------
# Column helpers: one place that pairs each Python default with the equivalent server default.


def _ms(*, nullable: bool = False, index: bool = False) -> MappedColumn[Any]:
    """An epoch-milliseconds column."""
    return mapped_column(BigInteger, nullable=nullable, index=index)


def _str(default: str | None = None, *, nullable: bool = False, index: bool = False) -> MappedColumn[Any]:
    if default is None:
        return mapped_column(String, nullable=nullable, index=index)
    return mapped_column(String, nullable=nullable, index=index, default=default, server_default=default)


def _text(default: str | None = "") -> MappedColumn[Any]:
    """Free text; `None` as default makes the column nullable."""
    if default is None:
        return mapped_column(Text, nullable=True)
    return mapped_column(Text, nullable=False, default=default, server_default=default)


def _int(default: int) -> MappedColumn[Any]:
    return mapped_column(Integer, nullable=False, default=default, server_default=text(str(default)))


def _float(default: float) -> MappedColumn[Any]:
    return mapped_column(Float, nullable=False, default=default, server_default=text(repr(float(default))))


def _bool(default: bool) -> MappedColumn[Any]:
    server = true() if default else false()
    return mapped_column(Boolean, nullable=False, default=default, server_default=server)


def _json_list() -> MappedColumn[Any]:
    return mapped_column(JSON, nullable=False, default=list, server_default=text("'[]'"))


def _json_dict() -> MappedColumn[Any]:
    return mapped_column(JSON, nullable=False, default=dict, server_default=text("'{}'"))


def _json_nullable() -> MappedColumn[Any]:
    # none_as_null: Python None is stored as SQL NULL rather than the JSON text 'null'.
    return mapped_column(JSON(none_as_null=True), nullable=True)


def _vector() -> MappedColumn[Any]:
    return mapped_column(LargeBinary, nullable=True)


def _fk(target: str, ondelete: str, *, nullable: bool = False, index: bool = False) -> MappedColumn[Any]:
    return mapped_column(String, ForeignKey(target, ondelete=ondelete), nullable=nullable, index=index)


def _owner_index(table: str) -> Index:
    """The (agent kind, profile) index every business table carries: all reads filter by namespace."""
    return Index(f"ix_{table}_owner", "owner_agent_kind", "owner_profile_id")


# ---------------------------------------------------------------------------------------------------------
# Mixins


class OwnershipMixin:
    """Namespace of a business row: which agent kind, profile and (optional) workspace owns it."""

    owner_agent_kind: Mapped[str] = _str("unknown")
    owner_profile_id: Mapped[str] = _str("default")
    owner_workspace_id: Mapped[str | None] = _str(nullable=True)


class ShareMixin:
    """Visibility beyond the owner: 'private' (default), or 'public'/'global' to every namespace."""

    share_scope: Mapped[str] = _str(SHARE_PRIVATE)
    share_target: Mapped[str | None] = _str(nullable=True)
    shared_at: Mapped[int | None] = _ms(nullable=True)


class StrengthMixin:
    """Memory strength bookkeeping: reinforcement, decay, pinning and archiving of a memory."""

    strength: Mapped[float] = _float(0.5)
    pinned: Mapped[bool] = _bool(False)
    protected: Mapped[bool] = _bool(False)
    access_count: Mapped[int] = _int(0)
    last_accessed_at: Mapped[int | None] = _ms(nullable=True)
    last_evidence_at: Mapped[int | None] = _ms(nullable=True)
    archived_at: Mapped[int | None] = _ms(nullable=True)


class SearchableMixin(OwnershipMixin, ShareMixin, StrengthMixin):
    """Columns shared by the full-text and vector searchable kinds (traces, policies, world models, skills).

    `rid` is the stable integer key of the FTS5 external-content index; `id` is the public string id.
    """

    rid: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True, sort_order=-20)
    id: Mapped[str] = mapped_column(String, nullable=False, unique=True, sort_order=-19)
    # Set by `memory.forget` (together with `archived_at`): out of recall, search and lists until restored.
    forgotten_at: Mapped[int | None] = _ms(nullable=True)


# ---------------------------------------------------------------------------------------------------------
# Conversation structure


class SessionRow(OwnershipMixin, Base):
    """One agent session (a host process conversation), the parent of episodes and traces."""

    __tablename__ = "sessions"
    __table_args__ = (_owner_index("sessions"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    agent: Mapped[str] = _str()
    started_at: Mapped[int] = _ms()
    last_seen_at: Mapped[int] = _ms(index=True)
    closed_at: Mapped[int | None] = _ms(nullable=True)
    meta_json: Mapped[dict[str, Any]] = _json_dict()


class EpisodeRow(OwnershipMixin, ShareMixin, Base):
    """One task/topic inside a session: an ordered run of user turns and their traces."""

    __tablename__ = "episodes"
    __table_args__ = (_owner_index("episodes"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    session_id: Mapped[str] = _fk("sessions.id", "CASCADE", index=True)
    started_at: Mapped[int] = _ms()
    ended_at: Mapped[int | None] = _ms(nullable=True)
    status: Mapped[str] = _str("open", index=True)  # open | closed
    topic_state: Mapped[str] = _str("active")  # active | paused | interrupted | ended
    close_reason: Mapped[str | None] = _str(nullable=True)
    turn_count: Mapped[int] = _int(0)  # user turns
    trace_ids_json: Mapped[list[str]] = _json_list()  # ordered
    r_task: Mapped[float | None] = mapped_column(Float, nullable=True)
    meta_json: Mapped[dict[str, Any]] = _json_dict()

    session: Mapped[SessionRow] = relationship()


class TurnRow(OwnershipMixin, Base):
    """One user turn: persists turnKey idempotency and holds the user text between turn.start and turn.end."""

    __tablename__ = "turns"
    __table_args__ = (
        # NULL turn keys never collide, so turns without a key may repeat freely.
        UniqueConstraint("session_id", "turn_key"),
        Index("ix_turns_episode_turn", "episode_id", "turn_id"),
        _owner_index("turns"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = _fk("sessions.id", "CASCADE")
    episode_id: Mapped[str] = _fk("episodes.id", "CASCADE")
    turn_id: Mapped[int] = mapped_column(BigInteger, nullable=False)  # the user turn ts; groups the steps
    turn_key: Mapped[str | None] = _str(nullable=True)
    user_text: Mapped[str] = _text()
    user_text_hash: Mapped[str] = _str("")
    started_at: Mapped[int] = _ms()
    ended_at: Mapped[int | None] = _ms(nullable=True)
    status: Mapped[str] = _str("started")  # started | ended
    result_json: Mapped[Any] = _json_nullable()  # cached turn.start result

    session: Mapped[SessionRow] = relationship()
    episode: Mapped[EpisodeRow] = relationship()


class TraceRow(SearchableMixin, Base):
    """One captured step of an agent turn (tool call, reply or note): the L1 memory."""

    __tablename__ = "traces"
    __table_args__ = (
        UniqueConstraint("episode_id", "step_key"),
        Index("ix_traces_episode_ts", "episode_id", "ts"),
        Index("ix_traces_session_ts", "session_id", "ts"),
        Index("ix_traces_episode_turn", "episode_id", "turn_id"),
        _owner_index("traces"),
    )

    episode_id: Mapped[str] = _fk("episodes.id", "CASCADE")
    session_id: Mapped[str] = _fk("sessions.id", "CASCADE")
    ts: Mapped[int] = _ms()
    turn_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    step_index: Mapped[int] = _int(0)
    step_kind: Mapped[str] = _str("reply")  # tool | reply | note
    step_key: Mapped[str] = _str()  # content signature used to dedupe retried captures
    user_text: Mapped[str] = _text()
    agent_text: Mapped[str] = _text()
    summary: Mapped[str] = _text()
    tool_calls_json: Mapped[list[Any]] = _json_list()
    reflection: Mapped[str | None] = _text(None)
    agent_thinking: Mapped[str | None] = _text(None)
    value: Mapped[float] = _float(0.0)
    alpha: Mapped[float] = _float(0.0)
    r_human: Mapped[float | None] = mapped_column(Float, nullable=True)
    priority: Mapped[float] = mapped_column(Float, nullable=False, default=0.5, server_default=text("0.5"), index=True)
    tags_json: Mapped[list[str]] = _json_list()
    error_signatures_json: Mapped[list[str]] = _json_list()
    vec_summary: Mapped[bytes | None] = _vector()
    vec_action: Mapped[bytes | None] = _vector()
    schema_version: Mapped[int] = _int(1)
    meta_json: Mapped[dict[str, Any]] = _json_dict()

    session: Mapped[SessionRow] = relationship()
    episode: Mapped[EpisodeRow] = relationship()


class FeedbackRow(OwnershipMixin, Base):
    """One piece of human or verifier feedback about an episode or a trace."""

    __tablename__ = "feedback"
    __table_args__ = (_owner_index("feedback"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    ts: Mapped[int] = _ms(index=True)
    episode_id: Mapped[str | None] = _fk("episodes.id", "SET NULL", nullable=True, index=True)
    trace_id: Mapped[str | None] = _fk("traces.id", "SET NULL", nullable=True, index=True)
    channel: Mapped[str] = _str()  # explicit | implicit | verifier ...
    polarity: Mapped[str] = _str()
    magnitude: Mapped[float] = mapped_column(Float, nullable=False)
    rationale: Mapped[str | None] = _text(None)
    raw_json: Mapped[Any] = _json_nullable()
    evidence_id: Mapped[str | None] = mapped_column(String, nullable=True, unique=True)

    episode: Mapped[EpisodeRow | None] = relationship()
    trace: Mapped[TraceRow | None] = relationship()


# ---------------------------------------------------------------------------------------------------------
# L2 policies, L3 world models, skills


def _default_guidance() -> dict[str, list[str]]:
    return {"preference": [], "antiPattern": []}


def _default_structure() -> dict[str, list[str]]:
    return {"environment": [], "inference": [], "constraints": []}


class PolicyRow(SearchableMixin, Base):
    """An L2 policy or typed experience induced from traces and feedback."""

    __tablename__ = "policies"
    __table_args__ = (_owner_index("policies"),)

    title: Mapped[str] = _text()
    trigger: Mapped[str] = _text()
    procedure: Mapped[str] = _text()
    verification: Mapped[str] = _text()
    boundary: Mapped[str] = _text()
    support: Mapped[int] = _int(0)
    gain: Mapped[float] = _float(0.0)
    status: Mapped[str] = _str("candidate", index=True)  # candidate | active | archived
    experience_type: Mapped[str] = _str("procedural", index=True)
    evidence_polarity: Mapped[str] = _str("neutral")  # positive | negative | neutral | mixed
    salience: Mapped[float] = _float(0.0)
    confidence: Mapped[float] = _float(0.5)
    source_episodes_json: Mapped[list[str]] = _json_list()
    source_feedback_ids_json: Mapped[list[str]] = _json_list()
    source_trace_ids_json: Mapped[list[str]] = _json_list()
    induced_by: Mapped[str] = _str("")
    decision_guidance_json: Mapped[dict[str, Any]] = mapped_column(
        JSON,
        nullable=False,
        default=_default_guidance,
        server_default=text("""'{"preference": [], "antiPattern": []}'"""),
    )
    verifier_meta_json: Mapped[Any] = _json_nullable()
    skill_eligible: Mapped[bool] = _bool(False)
    # L2 pattern signature "primaryTag|secondaryTag|tool|errCode" of the evidence it was induced from, so
    # association can add the signature bonus the reference designed but never wired ("" = unknown).
    signature: Mapped[str] = _str("")
    # Domain tags of the experience (e.g. "xml", "git") — world models group by them.
    tags_json: Mapped[list[str]] = _json_list()
    # A typed experience's lesson in the feedback's own words: {lines, roles, subject, instance}. Read on the
    # turn.start hot path (compact recall renders the lines), so it is a column, not part of meta_json.
    lesson_json: Mapped[Any] = _json_nullable()
    # Stage bookkeeping that is not worth a column: skill skip reasons, builder provenance, gain history.
    meta_json: Mapped[dict[str, Any]] = _json_dict()
    vec: Mapped[bytes | None] = _vector()
    created_at: Mapped[int] = _ms()
    updated_at: Mapped[int] = _ms()
    edited_at: Mapped[int | None] = _ms(nullable=True)


class L2CandidateRow(OwnershipMixin, Base):
    """A trace waiting in the L2 induction pool for enough similar evidence to become a policy."""

    __tablename__ = "l2_candidate_pool"
    __table_args__ = (_owner_index("l2_candidate_pool"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    policy_id: Mapped[str | None] = _fk("policies.id", "SET NULL", nullable=True, index=True)
    evidence_trace_ids_json: Mapped[list[str]] = _json_list()
    #: The trace the row is evidence of (also the id's suffix): indexed, because every learning chain looks
    #: up its steps' rows, and the pool only grows.
    trace_id: Mapped[str | None] = _str(nullable=True, index=True)
    signature: Mapped[str] = _str(index=True)
    similarity: Mapped[float] = _float(0.0)
    expires_at: Mapped[int] = _ms(index=True)
    created_at: Mapped[int] = _ms()

    policy: Mapped[PolicyRow | None] = relationship()


class TracePolicyLinkRow(Base):
    """A trace that a policy was applied to or induced from: the persistent "with-set" for policy gain."""

    __tablename__ = "trace_policy_links"

    trace_id: Mapped[str] = mapped_column(String, ForeignKey("traces.id", ondelete="CASCADE"), primary_key=True)
    policy_id: Mapped[str] = mapped_column(
        String, ForeignKey("policies.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    episode_id: Mapped[str | None] = _str(nullable=True)
    created_at: Mapped[int] = _ms()

    trace: Mapped[TraceRow] = relationship()
    policy: Mapped[PolicyRow] = relationship()


class WorldModelRow(SearchableMixin, Base):
    """An L3 world model: environment facts, inferences and constraints abstracted from policies."""

    __tablename__ = "world_models"
    __table_args__ = (_owner_index("world_models"),)

    title: Mapped[str] = _text()
    body: Mapped[str] = _text()
    policy_ids_json: Mapped[list[str]] = _json_list()
    structure_json: Mapped[dict[str, Any]] = mapped_column(
        JSON,
        nullable=False,
        default=_default_structure,
        server_default=text("""'{"environment": [], "inference": [], "constraints": []}'"""),
    )
    domain_tags_json: Mapped[list[str]] = _json_list()
    confidence: Mapped[float] = _float(0.5)
    source_episodes_json: Mapped[list[str]] = _json_list()
    induced_by: Mapped[str] = _str("")
    vec: Mapped[bytes | None] = _vector()
    status: Mapped[str] = _str("active")  # active | archived
    version: Mapped[int] = _int(1)
    created_at: Mapped[int] = _ms()
    updated_at: Mapped[int] = _ms()
    edited_at: Mapped[int | None] = _ms(nullable=True)


class SkillRow(SearchableMixin, Base):
    """A reusable, invocable skill crystallised from policies and world models."""

    __tablename__ = "skills"
    __table_args__ = (
        UniqueConstraint("owner_agent_kind", "owner_profile_id", "name"),
        Index("ix_skills_status_eta", "status", "eta"),
        _owner_index("skills"),
    )

    name: Mapped[str] = _str()
    status: Mapped[str] = _str("candidate")  # candidate | active | archived
    invocation_guide: Mapped[str] = _text()
    procedure_json: Mapped[dict[str, Any]] = _json_dict()
    eta: Mapped[float] = _float(0.5)
    support: Mapped[int] = _int(0)
    gain: Mapped[float] = _float(0.0)
    trials_attempted: Mapped[int] = _int(0)
    trials_passed: Mapped[int] = _int(0)
    source_policies_json: Mapped[list[str]] = _json_list()
    source_world_json: Mapped[list[str]] = _json_list()
    evidence_anchors_json: Mapped[list[str]] = _json_list()
    vec: Mapped[bytes | None] = _vector()
    version: Mapped[int] = _int(1)
    usage_count: Mapped[int] = _int(0)
    last_used_at: Mapped[int | None] = _ms(nullable=True)
    created_at: Mapped[int] = _ms()
    updated_at: Mapped[int] = _ms()
    edited_at: Mapped[int | None] = _ms(nullable=True)
    # A person's verdict (`skill.review`): approved | rejected, why, and when. A rejected skill stays archived
    # until a person approves or restores it; no learning path may bring it back (`skills.py`).
    review_status: Mapped[str | None] = _str(nullable=True)
    review_reason: Mapped[str | None] = _text(None)
    reviewed_at: Mapped[int | None] = _ms(nullable=True)


class MemoryRow(SearchableMixin, Base):
    """A memory written on purpose (`memory.remember`): a fact, preference, rule, error, pattern or insight.

    Unlike the learnt kinds it is not induced from traces: a user or an agent stated it. `importance` (0..1)
    is the caller's weight, used like strength to break near-ties in ranking; `support` counts how often
    the same memory was remembered again (merges); `expires_at` ends recall of a time-bound fact (the row
    is archived then, restorable)."""

    __tablename__ = "memories"
    __table_args__ = (_owner_index("memories"), Index("ix_memories_type_hash", "memory_type", "content_hash"))

    memory_type: Mapped[str] = _str("fact")  # fact | preference | rule | error | pattern | insight
    content: Mapped[str] = _text()
    content_hash: Mapped[str] = _str("")
    tags_json: Mapped[list[str]] = _json_list()
    importance: Mapped[float] = _float(0.5)
    support: Mapped[int] = _int(1)
    source: Mapped[str] = _str("agent")  # user | agent | host | import | …
    status: Mapped[str] = _str("active", index=True)  # active | archived
    expires_at: Mapped[int | None] = _ms(nullable=True)
    session_id: Mapped[str | None] = _str(nullable=True)
    meta_json: Mapped[dict[str, Any]] = _json_dict()
    vec: Mapped[bytes | None] = _vector()
    created_at: Mapped[int] = _ms()
    updated_at: Mapped[int] = _ms()


class SkillTrialRow(OwnershipMixin, Base):
    """One use of a skill whose outcome (pass/fail) feeds the skill's reliability estimate."""

    __tablename__ = "skill_trials"
    __table_args__ = (_owner_index("skill_trials"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    skill_id: Mapped[str] = _fk("skills.id", "CASCADE", index=True)
    session_id: Mapped[str | None] = _str(nullable=True)
    episode_id: Mapped[str | None] = _fk("episodes.id", "CASCADE", nullable=True, index=True)
    trace_id: Mapped[str | None] = _str(nullable=True)
    turn_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    tool_call_id: Mapped[str | None] = _str(nullable=True)
    status: Mapped[str] = _str("pending")  # pending | pass | fail | unknown
    created_at: Mapped[int] = _ms()
    resolved_at: Mapped[int | None] = _ms(nullable=True)
    evidence_json: Mapped[Any] = _json_nullable()

    skill: Mapped[SkillRow] = relationship()
    episode: Mapped[EpisodeRow | None] = relationship()


class DecisionRepairRow(OwnershipMixin, Base):
    """A preference / anti-pattern pair learnt by contrasting high- and low-value traces in one context."""

    __tablename__ = "decision_repairs"
    __table_args__ = (_owner_index("decision_repairs"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    ts: Mapped[int] = _ms()
    session_id: Mapped[str | None] = _str(nullable=True)
    context_hash: Mapped[str] = _str(index=True)
    preference: Mapped[str] = _text()
    anti_pattern: Mapped[str] = _text()
    high_value_traces_json: Mapped[list[str]] = _json_list()
    low_value_traces_json: Mapped[list[str]] = _json_list()
    validated: Mapped[bool] = _bool(False)
    episode_id: Mapped[str | None] = _str(nullable=True)
    tool: Mapped[str | None] = _str(nullable=True)
    source: Mapped[str] = _str("failure_burst")  # failure_burst | user_correction
    severity: Mapped[str] = _str("warn")  # info | warn
    confidence: Mapped[float] = _float(0.5)
    attached_policy_ids_json: Mapped[list[str]] = _json_list()


# ---------------------------------------------------------------------------------------------------------
# Graph, strength and maintenance bookkeeping


class MemoryLinkRow(OwnershipMixin, Base):
    """A typed edge between two memories (cause, solution, supersedes, related)."""

    __tablename__ = "memory_links"
    __table_args__ = (
        UniqueConstraint("from_kind", "from_id", "to_kind", "to_id", "relation"),
        Index("ix_memory_links_to", "to_kind", "to_id"),
        _owner_index("memory_links"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    from_kind: Mapped[str] = _str()
    from_id: Mapped[str] = _str()
    to_kind: Mapped[str] = _str()
    to_id: Mapped[str] = _str()
    relation: Mapped[str] = _str()  # cause | solution | supersedes | related
    created_at: Mapped[int] = _ms()


class StrengthEventRow(OwnershipMixin, Base):
    """One change to a memory's strength and the evidence behind it (idempotent per evidence id)."""

    __tablename__ = "strength_events"
    __table_args__ = (
        UniqueConstraint("target_kind", "target_id", "evidence_id"),
        _owner_index("strength_events"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    target_kind: Mapped[str] = _str()
    target_id: Mapped[str] = _str()
    # test_passed | diff_accepted | user_confirmed | self_report | failure | decay | ...
    evidence: Mapped[str] = _str()
    evidence_id: Mapped[str | None] = _str(nullable=True)
    delta: Mapped[float] = mapped_column(Float, nullable=False)
    strength_after: Mapped[float] = mapped_column(Float, nullable=False)
    ts: Mapped[int] = _ms()


class EmbeddingRetryRow(Base):
    """A vector that could not be computed yet, queued for the embedding retry worker."""

    __tablename__ = "embedding_retry_queue"
    __table_args__ = (
        UniqueConstraint("target_kind", "target_id", "vector_field"),
        Index("ix_embedding_retry_queue_due", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    target_kind: Mapped[str] = _str()  # trace | policy | world_model | skill
    target_id: Mapped[str] = _str()
    vector_field: Mapped[str] = _str()  # vec_summary | vec_action | vec
    source_text: Mapped[str] = _text()
    embed_role: Mapped[str] = _str("document")  # document | query
    status: Mapped[str] = _str("pending")  # pending | in_progress | failed | succeeded
    attempts: Mapped[int] = _int(0)
    max_attempts: Mapped[int] = _int(6)
    next_attempt_at: Mapped[int] = _ms()
    last_error: Mapped[str | None] = _text(None)
    created_at: Mapped[int] = _ms()
    updated_at: Mapped[int] = _ms()


class ApiLogRow(Base):
    """One tool/API call with its input, output and latency, for the logs view."""

    __tablename__ = "api_logs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tool_name: Mapped[str] = _str()
    input_json: Mapped[Any] = _json_nullable()
    output_json: Mapped[Any] = _json_nullable()
    duration_ms: Mapped[int] = _int(0)
    success: Mapped[bool] = _bool(True)
    called_at: Mapped[int] = _ms(index=True)


class AuditEventRow(Base):
    """An administrative event (edit, delete, import, share) kept for accountability; with `target`
    "<kind>:<id>" it is also part of that memory's `memory.history`."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_target", "target"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[int] = _ms(index=True)
    actor: Mapped[str] = _str()
    kind: Mapped[str] = _str()
    target: Mapped[str] = _str("")
    detail_json: Mapped[dict[str, Any]] = _json_dict()


class KvRow(Base):
    """A small named value (cooldowns, scan cursors) that does not deserve its own table."""

    __tablename__ = "kv"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    value_json: Mapped[Any] = _json_nullable()
    updated_at: Mapped[int] = _ms()


class LearningClaimRow(Base):
    """Who runs an episode's learning chain now, when several services share one database.

    Each request for a chain (the episode ended, feedback arrived) raises `requested`; a service that starts
    a run takes the row (`claimed_by`, `lease_until`) and sets `served` to the `requested` it saw, so a request
    made before that run started needs no run of its own, while one made after it does. `runs` counts the
    runs started. A lease, not a lock held for the whole chain, because a service may die mid-chain: another
    one may take an expired claim over. The row holds no memory content."""

    __tablename__ = "learning_claims"

    episode_id: Mapped[str] = mapped_column(String, ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True)
    requested: Mapped[int] = _int(0)
    served: Mapped[int] = _int(0)
    runs: Mapped[int] = _int(0)
    claimed_by: Mapped[str | None] = _str(nullable=True)
    lease_until: Mapped[int | None] = _ms(nullable=True)
    updated_at: Mapped[int] = _ms()

    episode: Mapped[EpisodeRow] = relationship()


class RelayedEventRow(Base):
    """The body of an event too large for a PostgreSQL notification (8000 bytes), which other services fetch
    by id (`storage/notify.py`). Rows are short-lived: each new one removes those older than a few minutes."""

    __tablename__ = "relayed_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[int] = _ms(index=True)
    origin: Mapped[str] = _str()
    body_json: Mapped[dict[str, Any]] = _json_dict()


class SchemaMigrationRow(Base):
    """One applied schema migration (see `migrations.py`)."""

    __tablename__ = "schema_migrations"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = _str()
    applied_at: Mapped[int] = _ms()
