"""Fixtures of the metadata-store contract suite: every backend runs every test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.metadata_store.backends import Backend, local_backend, memory_backend

BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "memory": lambda _: memory_backend(),
    "local": lambda tmp: local_backend(tmp / "metadata"),
}


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    built = BACKENDS[request.param](tmp_path)
    yield built
    await built.close_all()
