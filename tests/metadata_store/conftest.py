"""Fixtures of the metadata-store contract suite: every backend runs every test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from tests.metadata_store.backends import Backend, memory_backend

BACKENDS: dict[str, Callable[[], Backend]] = {"memory": memory_backend}


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    built = BACKENDS[request.param]()
    yield built
    await built.close_all()
