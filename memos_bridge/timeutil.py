"""Time helpers: every timestamp in the service is integer epoch milliseconds."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)


DAY_MS = 86_400_000
