"""Fixtures of the metadata-store tests: every backend runs every contract test.

ZooKeeper is a real server, the session's ``zk_server`` (tests/conftest.py, tests/zookeeper.py); each
test gets a chroot of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.metadata_store.backends import Backend, local_backend, memory_backend, zookeeper_backend

BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Backend]] = {
    "memory": lambda _, __: memory_backend(),
    "local": lambda _, tmp: local_backend(tmp / "metadata"),
    "zookeeper": lambda request, _: zookeeper_backend(request.getfixturevalue("zk_server").address),
}


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    built = BACKENDS[request.param](request, tmp_path)
    yield built
    await built.close_all()
