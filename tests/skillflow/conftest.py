"""The SkillFlow runner lives in scripts/ (run as `python scripts/skillflow_runner.py`): make it importable."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
