"""Fixtures of the metadata-store tests: every backend runs every contract test.

ZooKeeper is a real server (cluster/local.py), started once for the session on a free port and
stopped by pid; each test gets a chroot of its own. Without java and ZooKeeper's jars the ZooKeeper
tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from cluster.local import ProcessInfo, missing_zookeeper, start_zookeeper, stop_process
from tests.metadata_store.backends import Backend, local_backend, memory_backend, zookeeper_backend

BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Backend]] = {
    "memory": lambda _, __: memory_backend(),
    "local": lambda _, tmp: local_backend(tmp / "metadata"),
    "zookeeper": lambda request, _: zookeeper_backend(request.getfixturevalue("zk_server").address),
}


def require_zookeeper() -> None:
    """Skip (locally) or fail (CI=true) when no ZooKeeper server can run here."""
    why = missing_zookeeper()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the ZooKeeper tests need a real ZooKeeper under CI: {why}")
    pytest.skip(f"no ZooKeeper here: {why}")


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessInfo]:
    require_zookeeper()
    # tickTime 500 ms: sessions from 1 s to 10 s, so the session tests can expire one quickly.
    info = start_zookeeper(tmp_path_factory.mktemp("zk"), tick_ms=500)
    try:
        yield info
    finally:
        stop_process(info.pid)


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    built = BACKENDS[request.param](request, tmp_path)
    yield built
    await built.close_all()
