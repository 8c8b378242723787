#!/usr/bin/env python3
"""SkillFlow runner: families of verifiable tasks through memos-bridge, with and without memory.

    python scripts/skillflow_runner.py --out skillflow-report.json      # both shipped families, simulated agent
    python scripts/skillflow_runner.py --family sec13f --mode with      # one family, memory only
    python scripts/skillflow_runner.py --agent-cmd "my-agent {input_file}" --family sales_csv

One trial per task, never re-run to success; after each verifier run the verdict goes back to the service as
structured feedback bound to the task's episode, the learning queue is flushed, and the next task's
`turn.start` shows what was recalled. See `scripts/skillflow/` (families, agents, verifiers, report) and
`python scripts/skillflow_runner.py --help`.
"""

from __future__ import annotations

import sys

from skillflow.runner import main

if __name__ == "__main__":
    sys.exit(main())
