"""A real ZooKeeper for tests (cluster/local.py): the session-wide ``zk_server`` fixture of tests/conftest.py.

Without java and ZooKeeper's jars (``make cluster-deps``), tests that need it skip, except under
CI=true, where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cluster.local import ProcessInfo, missing_zookeeper, start_zookeeper, stop_process
from tests.needs import unavailable

# tickTime 500 ms: the server grants sessions from 1 s to 10 s, so tests can expire one quickly.
TICK_MS = 500


def require_zookeeper() -> None:
    """Skip (locally) or fail (CI=true) when no ZooKeeper server can run here."""
    why = missing_zookeeper()
    if why is not None:
        unavailable(f"no ZooKeeper here: {why}")


@contextmanager
def zookeeper_server(state: Path) -> Iterator[ProcessInfo]:
    """A standalone ZooKeeper on a free 127.0.0.1 port, stopped by pid on exit."""
    require_zookeeper()
    info = start_zookeeper(state, tick_ms=TICK_MS)
    try:
        yield info
    finally:
        stop_process(info.pid)
