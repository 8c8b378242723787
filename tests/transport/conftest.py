"""Transport tests run on anyio's pytest plugin, asyncio backend (jsonrpcserver batches use asyncio)."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
