"""memos-bridge memory provider for Hermes: the directory-plugin shim.

Hermes (hermes-agent 0.19) loads memory providers from `$HERMES_HOME/plugins/<name>/__init__.py`; this file is
copied there by `python -m memos_bridge_hermes install`. It only forwards to the installed package
(`pip install 'memos-bridge[hermes]'`), so upgrading the package upgrades the plugin, and there is one copy of
the provider's module state (the shared service registry) however the host imports it.

Hermes' discovery recognises the directory by `register_memory_provider` / `MemoryProvider` in this file:
`register(ctx)` calls `ctx.register_memory_provider(MemosBridgeProvider())`.
"""

from memos_bridge_hermes import register
from memos_bridge_hermes.provider import MemosBridgeProvider

__all__ = ["MemosBridgeProvider", "register"]
