"""memos-bridge as a Hermes (hermes-agent) memory provider.

Install and enable (see adapters/hermes/README.md), either with Hermes' own commands::

    pip install 'memos-bridge[hermes]'
    hermes plugins enable memos-bridge --no-allow-tool-override   # the hermes_agent.plugins entry point
    hermes config set memory.provider memos-bridge

or with one line that writes the directory plugin at once::

    python -m memos_bridge_hermes install --activate

hermes-agent 0.19 discovers memory providers in plugin directories only. Its pip entry-point group,
`hermes_agent.plugins`, loads general plugins whose context cannot register a memory provider; our entry point
there (this package) uses `register(ctx)` to write the directory plugin into the active profile instead, before
Hermes looks the provider up. The `hermes_agent.memory_providers` entry point (`memos_bridge_hermes:register`)
is declared as the issue and the provider spec name it; hermes-agent 0.19 never reads that group. Importing
this package does not import hermes-agent: `register` loads the provider lazily, so the feedback detector, tool
schemas and runtime are usable (and testable) without the host installed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from memos_bridge.rules.verdict import FeedbackVerdict, detect_feedback
from memos_bridge_hermes.tools import TOOL_NAMES, TOOL_SCHEMAS

if TYPE_CHECKING:
    from memos_bridge_hermes.provider import MemosBridgeProvider

__all__ = [
    "PROVIDER_NAME",
    "TOOL_NAMES",
    "TOOL_SCHEMAS",
    "FeedbackVerdict",
    "MemosBridgeProvider",
    "detect_feedback",
    "register",
]

PROVIDER_NAME = "memos-bridge"


def register(ctx: Any) -> None:
    """Hermes plugin entry point, for both of Hermes' loaders.

    * Memory discovery (`plugins.memory`, the directory plugin's shim): its context has
      `register_memory_provider`, so the provider is registered.
    * The general plugin loader (`hermes_agent.plugins` entry point, once `hermes plugins enable memos-bridge`):
      its `PluginContext` cannot take a memory provider, so the directory plugin that memory discovery scans is
      written (or refreshed) for the active profile. Never raises: a plugin must not break Hermes' start.
    """
    if hasattr(ctx, "register_memory_provider"):
        from memos_bridge_hermes.provider import MemosBridgeProvider

        ctx.register_memory_provider(MemosBridgeProvider())
        return
    from memos_bridge_hermes.install import ensure_installed, hermes_home

    try:
        ensure_installed(hermes_home())
    except Exception:
        logging.getLogger(__name__).exception("memos-bridge: could not write the Hermes memory-provider plugin")


def __getattr__(name: str) -> Any:
    if name == "MemosBridgeProvider":
        from memos_bridge_hermes.provider import MemosBridgeProvider

        return MemosBridgeProvider
    raise AttributeError(name)
