"""The code base stays ruff- and mypy-clean (the house standard), checked with the suite."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


# `python -m ruff` is what runs, so look for the module, not a `ruff` on PATH (an unactivated venv has none)
@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff not installed (pip install -e '.[dev]')")
def test_ruff_lint_and_format() -> None:
    lint = _run("ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = _run("ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict() -> None:
    pytest.importorskip("mypy")
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
