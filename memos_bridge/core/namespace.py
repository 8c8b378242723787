"""Namespace resolution: which owner a session's memories belong to and what a caller may see.

A session carries its owner (agent kind, profile, workspace) from `session.open`; turns of that session
inherit it, so retrieval for a turn only ever searches the session owner's memories (plus shared rows).
A read is scoped the same way: to the namespace it names, else to the namespace of the session (or episode)
it names, else to the default namespace. Only the explicit `"*"` reads every namespace, and the transport
allows it on token-authenticated TCP connections only (`rpc/handlers.py`).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from memos_bridge.contract.dto import ALL_NAMESPACES, ReadNamespace, RuntimeNamespace
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.storage.models import EpisodeRow, SessionRow
from memos_bridge.storage.owner import OwnerFilter


def owner_for(agent: str, namespace: RuntimeNamespace | None) -> OwnerFilter:
    """The owner triple of new rows created for `agent` in `namespace`."""
    if namespace is None:
        return OwnerFilter(agent_kind=agent, profile_id="default", workspace_id=None)
    return OwnerFilter(
        agent_kind=namespace.agent_kind or agent,
        profile_id=namespace.profile_id or "default",
        workspace_id=namespace.workspace_id,
    )


def read_filter(namespace: RuntimeNamespace | None, agent: str | None = None) -> OwnerFilter | None:
    """The namespace a write that edits existing rows acts in (pin, restore, reinforce): None when the caller
    names none (the row's own namespace, found by id)."""
    if namespace is None:
        return None
    return owner_for(agent or namespace.agent_kind or "unknown", namespace)


def default_read_owner(agent: str | None = None) -> OwnerFilter:
    """The default namespace, as a read that names no namespace and no session sees it: profile `default`, no
    workspace; of `agent` when the read names one, else of every agent kind."""
    return OwnerFilter(agent_kind=None if agent in (None, "", "unknown") else agent, profile_id="default")


def _row_owner(row: SessionRow | EpisodeRow) -> OwnerFilter:
    return OwnerFilter(row.owner_agent_kind, row.owner_profile_id, row.owner_workspace_id)


def _named_scope(
    db: Session, namespace: ReadNamespace, agent: str | None, session_id: str | None, episode_id: str | None
) -> tuple[bool, OwnerFilter | None]:
    """(named, filter): the scope the read names through `namespace`, `session_id` or `episode_id`, if any.

    An unknown session or episode names the default namespace: a read never widens because an id is wrong.
    """
    if namespace == ALL_NAMESPACES:
        return True, None
    if isinstance(namespace, RuntimeNamespace):
        named_agent = namespace.agent_kind or (None if agent in (None, "", "unknown") else agent)
        return True, OwnerFilter(named_agent, namespace.profile_id or "default", namespace.workspace_id)
    if session_id:
        session = db.get(SessionRow, session_id)
        return True, _row_owner(session) if session is not None else default_read_owner(agent)
    if episode_id:
        episode = db.get(EpisodeRow, episode_id)
        return True, _row_owner(episode) if episode is not None else default_read_owner(agent)
    return False, None


def list_scope(
    db: Session,
    namespace: ReadNamespace,
    *,
    agent: str | None = None,
    session_id: str | None = None,
    episode_id: str | None = None,
) -> OwnerFilter | None:
    """The namespace a search or a list reads (None = every namespace, the operator view `"*"`).

    `namespace` when given; else the namespace of `session_id`, else of `episode_id`; else the default one.
    """
    named, owner = _named_scope(db, namespace, agent, session_id, episode_id)
    return owner if named else default_read_owner(agent)


def row_scope(
    db: Session,
    namespace: ReadNamespace,
    *,
    session_id: str | None = None,
    episode_id: str | None = None,
) -> OwnerFilter | None:
    """The namespace a read by id must find its row in (None = any: the id itself names the row's namespace).

    A read that names a namespace, a session or an episode sees the row only when it is visible there, so a
    host cannot read another namespace's row by pairing its own session with a foreign id.
    """
    return _named_scope(db, namespace, None, session_id, episode_id)[1]


def bulk_scope(db: Session, namespace: RuntimeNamespace | None, session_id: str | None) -> OwnerFilter:
    """The namespace an operation on a whole namespace acts in (purge, reflect, export): the one named (every
    agent kind of it unless it names one), else the session's, else the default namespace — as reads resolve
    it, except that an unknown session is an error here: an operation that deletes or writes must not fall
    back to the default namespace because an id was mistyped."""
    if namespace is None and session_id and db.get(SessionRow, session_id) is None:
        raise MemosError(ErrorCode.SESSION_NOT_FOUND, f"session not found: {session_id}", {"sessionId": session_id})
    owner = list_scope(db, namespace, session_id=session_id)
    assert owner is not None  # only "*" names every namespace, and these operations do not accept it
    return owner
