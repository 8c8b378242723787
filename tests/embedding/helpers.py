"""Helpers shared by the embedding tests (importable, unlike conftest)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


class NetworkAccessError(AssertionError):
    """Raised by the patched socket functions: the embedding layer must never touch the network."""


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise NetworkAccessError(f"network access attempted: {args!r}")


def block_network(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(socket.socket, "connect", _refuse)
    mp.setattr(socket.socket, "connect_ex", _refuse)
    mp.setattr(socket, "create_connection", _refuse)
    mp.setattr(socket, "getaddrinfo", _refuse)


def cos(a: Any, b: Any) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
