"""Which memory an MCP host's agent works in: one namespace per project, unless the user names one.

Coding agents move between repositories all day. Lessons learnt in one ("this repo's tests need `make db`
first") are noise, or wrong, in another, so the MCP server and the hook commands put every project in its
own namespace: the workspace is the project's root folder (the nearest folder up that holds `.git`, so a
session started in a sub-folder is still the same project), named after that folder plus a short hash of its
absolute path (two checkouts called `api` stay apart). Naming a namespace (`--namespace`,
`MEMOS_BRIDGE_NAMESPACE`, or `[mcp] namespace` in the config) puts every project that names it in one shared
memory instead.

The MCP server and the hooks run in different processes that the host starts separately; both derive the
namespace with this one function from the same folder, so they always agree.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

#: Environment variable that names a shared namespace (the workspace id) for every project.
NAMESPACE_ENV = "MEMOS_BRIDGE_NAMESPACE"
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def project_root(start: Path) -> Path:
    """The project folder `start` belongs to: the nearest ancestor holding `.git` (folder or file), else
    `start` itself."""
    here = start.expanduser().resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def workspace_id(root: Path) -> str:
    """A readable, collision-safe id for a project folder: `<folder name>-<8 hex of its absolute path>`."""
    name = _SLUG.sub("-", root.name).strip("-")[:40] or "root"
    digest = hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{name}-{digest}"


def resolve_namespace(
    start: Path, *, agent: str, named: str | None = None, configured: str | None = None
) -> dict[str, Any]:
    """The wire namespace for a host working in `start`.

    Precedence: an explicit `named` (the command line), then `MEMOS_BRIDGE_NAMESPACE`, then the config's
    `[mcp] namespace`, then the project folder. The agent kind is the host's name (`claude-code`, `cursor`,
    …), so the same host's MCP server and hooks share one owner.
    """
    chosen = named or os.environ.get(NAMESPACE_ENV) or configured
    if chosen and chosen.strip():
        return {"agentKind": agent, "profileId": "default", "workspaceId": chosen.strip()[:200]}
    root = project_root(start)
    return {
        "agentKind": agent,
        "profileId": "default",
        "workspaceId": workspace_id(root),
        "workspacePath": str(root),
    }
