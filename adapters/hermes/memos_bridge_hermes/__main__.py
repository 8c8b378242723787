"""`python -m memos_bridge_hermes install|uninstall|status`: make Hermes find the provider.

hermes-agent 0.19 loads memory providers from `$HERMES_HOME/plugins/<name>/` (its entry-point scan is for
general plugins, which cannot register a memory provider), so enabling the pip-installed provider means
writing that directory: a two-file shim (`__init__.py` forwarding to this package, `plugin.yaml`). `--activate`
also sets `memory.provider: memos-bridge` in Hermes' config through Hermes' own `set_config_value`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from importlib import resources
from pathlib import Path

from memos_bridge_hermes import PROVIDER_NAME

TEMPLATE_FILES = ("__init__.py", "plugin.yaml")


def hermes_home(explicit: str | None = None) -> Path:
    """`--hermes-home`, else `$HERMES_HOME`, else Hermes' own resolution, else `~/.hermes`."""
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


def install(home: Path, *, activate: bool = False) -> Path:
    """Write the directory plugin (idempotent; overwrites an older shim) and optionally activate it."""
    target = plugin_dir(home)
    target.mkdir(parents=True, exist_ok=True)
    template = resources.files("memos_bridge_hermes").joinpath("hermes_plugin")
    for name in TEMPLATE_FILES:
        (target / name).write_text(template.joinpath(name).read_text(encoding="utf-8"), encoding="utf-8")
    (target / "README.md").write_text(
        "# memos-bridge (Hermes memory provider)\n\n"
        "Written by `python -m memos_bridge_hermes install`; the code lives in the installed `memos_bridge_hermes`"
        " package. Enable with `hermes config set memory.provider memos-bridge`.\n",
        encoding="utf-8",
    )
    if activate:
        os.environ.setdefault("HERMES_HOME", str(home))
        from hermes_cli.config import set_config_value

        set_config_value("memory.provider", PROVIDER_NAME)
    return target


def uninstall(home: Path) -> bool:
    target = plugin_dir(home)
    if not target.exists():
        return False
    shutil.rmtree(target)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memos_bridge_hermes", description=__doc__)
    parser.add_argument("command", choices=["install", "uninstall", "status"])
    parser.add_argument("--hermes-home", help="Hermes home (default: $HERMES_HOME or ~/.hermes)")
    parser.add_argument("--activate", action="store_true", help="also set memory.provider: memos-bridge")
    args = parser.parse_args(argv)
    home = hermes_home(args.hermes_home)
    if args.command == "install":
        target = install(home, activate=args.activate)
        print(f"memos-bridge Hermes plugin written to {target}")
        if not args.activate:
            print(f"enable it with: hermes config set memory.provider {PROVIDER_NAME}")
        return 0
    if args.command == "uninstall":
        print("removed" if uninstall(home) else "not installed")
        return 0
    target = plugin_dir(home)
    print(f"plugin directory: {target} ({'present' if (target / '__init__.py').exists() else 'missing'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
