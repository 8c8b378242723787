"""`python -m memos_bridge` is the same as the `memos-bridge` command."""

from memos_bridge.cli import main

raise SystemExit(main())
