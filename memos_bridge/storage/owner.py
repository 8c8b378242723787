"""Owner namespaces: which rows a caller may see.

Every business row belongs to a namespace `(agent kind, profile, workspace)`. A caller sees its own rows,
plus rows that were shared with everyone (`share_scope` 'public' or 'global') on tables that can be
shared. Both the SQL side (`OwnerFilter.clause`) and the in-memory vector index (`OwnerKey`) implement the
same rule, so keyword and vector retrieval never disagree about visibility.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, or_, true

from memos_bridge.storage.models import OwnershipMixin, ShareMixin

SHARED_SCOPES: tuple[str, ...] = ("public", "global")
"""Share scopes that make a row visible to every namespace."""


class OwnerKey(NamedTuple):
    """The namespace of one row as the vector index stores it.

    `shared` is true when the row's share scope makes it visible to every namespace.
    """

    agent_kind: str
    profile_id: str
    workspace_id: str | None
    shared: bool = False

    @property
    def namespace(self) -> tuple[str, str, str | None]:
        return (self.agent_kind, self.profile_id, self.workspace_id)

    @classmethod
    def of_row(cls, row: OwnershipMixin) -> OwnerKey:
        """The key of an ORM row (share scope taken into account when the table has one)."""
        shared = isinstance(row, ShareMixin) and row.share_scope in SHARED_SCOPES
        return cls(row.owner_agent_kind, row.owner_profile_id, row.owner_workspace_id, shared)


@dataclass(frozen=True, slots=True)
class OwnerFilter:
    """The namespace a request acts in; produces the visibility predicate for any owned table.

    `agent_kind=None` matches every agent kind of that profile and workspace: the default namespace as a read
    that names no agent sees it (writes always name one).
    """

    agent_kind: str | None = "unknown"
    profile_id: str = "default"
    workspace_id: str | None = None

    @property
    def key(self) -> OwnerKey:
        if self.agent_kind is None:
            raise ValueError("an owner without an agent kind is a read filter, not a row's owner")
        return OwnerKey(self.agent_kind, self.profile_id, self.workspace_id)

    def matches(self, namespace: tuple[str, str, str | None]) -> bool:
        """Whether a row owned by `namespace` (agent kind, profile, workspace) is in this namespace."""
        agent, profile, workspace = namespace
        return (self.agent_kind is None or agent == self.agent_kind) and (profile, workspace) == (
            self.profile_id,
            self.workspace_id,
        )

    def every_agent(self) -> OwnerFilter:
        """This profile and workspace with every agent kind: the scope of what belongs to a person rather than
        to the agent that wrote it (memories remembered on purpose)."""
        return OwnerFilter(agent_kind=None, profile_id=self.profile_id, workspace_id=self.workspace_id)

    def as_columns(self) -> dict[str, Any]:
        """Owner column values for a new row: `TraceRow(**owner.as_columns(), ...)`."""
        if self.agent_kind is None:
            raise ValueError("a new row needs an owner with an agent kind")
        return {
            "owner_agent_kind": self.agent_kind,
            "owner_profile_id": self.profile_id,
            "owner_workspace_id": self.workspace_id,
        }

    def owns(self, row: OwnershipMixin) -> bool:
        """Whether `row` is in this namespace (sharing not considered): the test for edits and deletes."""
        return self.matches((row.owner_agent_kind, row.owner_profile_id, row.owner_workspace_id))

    def can_see(self, row: OwnershipMixin) -> bool:
        """Python twin of `clause`, for rows already loaded."""
        if self.owns(row):
            return True
        return isinstance(row, ShareMixin) and row.share_scope in SHARED_SCOPES

    def sql(self, alias: str, *, shareable: bool) -> tuple[str, dict[str, Any]]:
        """The same predicate as `clause`, as SQL text over table alias `alias` with bound parameters.

        For hand-written hot-path statements (`storage/hotpath.py`), where building a Core expression per
        call costs more than running the query. A profile-wide namespace (no workspace) is spelt `IS NULL` and
        a workspace `= :owner_workspace`: plain SQL every backend runs and indexes (SQLite's `IS ?` null-safe
        equality is not PostgreSQL's).
        """
        agent = "" if self.agent_kind is None else f"{alias}.owner_agent_kind = :owner_agent AND "
        workspace = (
            f"{alias}.owner_workspace_id IS NULL"
            if self.workspace_id is None
            else f"{alias}.owner_workspace_id = :owner_workspace"
        )
        own = f"({agent}{alias}.owner_profile_id = :owner_profile AND {workspace})"
        params: dict[str, Any] = {"owner_profile": self.profile_id}
        if self.workspace_id is not None:
            params["owner_workspace"] = self.workspace_id
        if self.agent_kind is not None:
            params["owner_agent"] = self.agent_kind
        if shareable:
            scopes = ", ".join(f"'{scope}'" for scope in SHARED_SCOPES)
            return f"({own} OR {alias}.share_scope IN ({scopes}))", params
        return own, params

    def clause(self, model: type[OwnershipMixin]) -> ColumnElement[bool]:
        """WHERE clause selecting the rows of `model` visible in this namespace.

        The workspace comparison is IS NOT DISTINCT FROM so that a NULL workspace matches only NULL.
        """
        own = and_(
            true() if self.agent_kind is None else model.owner_agent_kind == self.agent_kind,
            model.owner_profile_id == self.profile_id,
            model.owner_workspace_id.is_not_distinct_from(self.workspace_id),
        )
        if issubclass(model, ShareMixin):
            return or_(own, model.share_scope.in_(SHARED_SCOPES))
        return own
