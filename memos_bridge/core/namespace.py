"""Namespace resolution: which owner a session's memories belong to and what a caller may see.

A session carries its owner (agent kind, profile, workspace) from `session.open`; turns of that session
inherit it, so retrieval for a turn only ever searches the session owner's memories (plus shared rows).
Reads that name a namespace are filtered by it; reads without one are the data-home operator's view.
"""

from __future__ import annotations

from memos_bridge.contract.dto import RuntimeNamespace
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
    """Filter for a read: None (no filter) when the caller names no namespace."""
    if namespace is None:
        return None
    return owner_for(agent or namespace.agent_kind or "unknown", namespace)
