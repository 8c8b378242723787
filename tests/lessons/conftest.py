"""The lesson corpus and its evaluation live in scripts/ (run as `python scripts/eval_lessons.py`): import them."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
