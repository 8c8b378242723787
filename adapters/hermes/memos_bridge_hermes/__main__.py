"""`python -m memos_bridge_hermes install|uninstall|status`: make Hermes find the provider.

hermes-agent 0.19 loads memory providers from `$HERMES_HOME/plugins/<name>/` only (see `install.py` for why the
entry points cannot do it alone), so enabling the pip-installed provider means writing that directory: a
two-file shim (`__init__.py` forwarding to this package, `plugin.yaml`). `--activate` also sets
`memory.provider: memos-bridge` in Hermes' config through Hermes' own `set_config_value`.
"""

from __future__ import annotations

import argparse
import sys

from memos_bridge_hermes.install import PROVIDER_NAME, hermes_home, install, plugin_dir, uninstall

__all__ = ["hermes_home", "install", "main", "plugin_dir", "uninstall"]


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
