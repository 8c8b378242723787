"""Make Hermes' memory discovery find the provider: the directory plugin in `$HERMES_HOME/plugins/memos-bridge/`.

hermes-agent 0.19 finds memory providers only by scanning directories (`plugins/memory/__init__.py`: the bundled
`plugins/memory/<name>/` and the user's `$HERMES_HOME/plugins/<name>/`); the pip entry-point group it reads,
`hermes_agent.plugins`, is for general plugins, whose context (`PluginContext`) has no
`register_memory_provider`. So the pip-installed provider is enabled by writing that directory — a two-file
shim (`__init__.py` forwarding to this package, `plugin.yaml`) — either by `python -m memos_bridge_hermes
install`, or by Hermes itself: once `hermes plugins enable memos-bridge` is set, every agent start loads our
`hermes_agent.plugins` entry point before the memory provider is looked up, and `register(ctx)` calls
`ensure_installed` for the active profile.
"""

from __future__ import annotations

import logging
import os
import shutil
from importlib import resources
from pathlib import Path

logger = logging.getLogger(__name__)

PROVIDER_NAME = "memos-bridge"
TEMPLATE_FILES = ("__init__.py", "plugin.yaml")
MARKER = "memos_bridge_hermes"
"""Text every shim contains: a directory without it is someone else's plugin and is never overwritten."""
README = (
    "# memos-bridge (Hermes memory provider)\n\n"
    "Written by `python -m memos_bridge_hermes install` (or by the `memos-bridge` Hermes plugin); the code lives"
    " in the installed `memos_bridge_hermes` package. Enable with `hermes config set memory.provider memos-bridge`.\n"
)


def hermes_home(explicit: str | None = None) -> Path:
    """`explicit`, else `$HERMES_HOME`, else Hermes' own resolution (the active profile), else `~/.hermes`."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get("HERMES_HOME"):
        return Path(os.environ["HERMES_HOME"]).expanduser()
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except Exception:
        return Path.home() / ".hermes"


def plugin_dir(home: Path) -> Path:
    return home / "plugins" / PROVIDER_NAME


def _wanted() -> dict[str, str]:
    template = resources.files("memos_bridge_hermes").joinpath("hermes_plugin")
    files = {name: template.joinpath(name).read_text(encoding="utf-8") for name in TEMPLATE_FILES}
    files["README.md"] = README
    return files


def install(home: Path, *, activate: bool = False) -> Path:
    """Write the directory plugin (overwrites an older shim) and optionally set `memory.provider`."""
    target = plugin_dir(home)
    target.mkdir(parents=True, exist_ok=True)
    for name, text in _wanted().items():
        (target / name).write_text(text, encoding="utf-8")
    if activate:
        os.environ.setdefault("HERMES_HOME", str(home))
        from hermes_cli.config import set_config_value

        set_config_value("memory.provider", PROVIDER_NAME)
    return target


def ensure_installed(home: Path) -> bool:
    """Write the shim when it is missing or outdated; `True` when something was written.

    Runs on every Hermes start once the plugin is enabled, so it writes nothing when the files are current,
    and leaves alone a `memos-bridge` directory that is not ours.
    """
    target = plugin_dir(home)
    init = target / "__init__.py"
    if init.exists() and MARKER not in init.read_text(encoding="utf-8", errors="replace"):
        logger.warning("%s is not the memos-bridge shim; leaving it alone", target)
        return False
    stale = [
        name
        for name, text in _wanted().items()
        if not (target / name).exists() or (target / name).read_text(encoding="utf-8", errors="replace") != text
    ]
    if not stale:
        return False
    install(home)
    logger.info("memos-bridge: wrote the Hermes memory-provider plugin to %s", target)
    return True


def uninstall(home: Path) -> bool:
    target = plugin_dir(home)
    if not target.exists():
        return False
    shutil.rmtree(target)
    return True
