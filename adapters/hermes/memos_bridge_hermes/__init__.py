"""memos-bridge as a Hermes (hermes-agent) memory provider.

Install and enable (see adapters/hermes/README.md)::

    pip install 'memos-bridge[hermes]'
    python -m memos_bridge_hermes install          # writes $HERMES_HOME/plugins/memos-bridge/
    hermes config set memory.provider memos-bridge

Hermes 0.19 discovers memory providers in plugin directories only; the package also declares the
`hermes_agent.memory_providers` entry point (`memos-bridge = memos_bridge_hermes:register`) for hosts that
read it. Importing this package does not import hermes-agent: `register` loads the provider lazily, so the
feedback detector, tool schemas and runtime are usable (and testable) without the host installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memos_bridge_hermes.feedback import FeedbackVerdict, detect_feedback
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
    """Hermes plugin entry point: `ctx.register_memory_provider(MemosBridgeProvider())`."""
    from memos_bridge_hermes.provider import MemosBridgeProvider

    ctx.register_memory_provider(MemosBridgeProvider())


def __getattr__(name: str) -> Any:
    if name == "MemosBridgeProvider":
        from memos_bridge_hermes.provider import MemosBridgeProvider

        return MemosBridgeProvider
    raise AttributeError(name)
