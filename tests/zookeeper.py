"""A real ZooKeeper for tests (cluster/local.py): the session-wide ``zk_server`` fixture of tests/conftest.py.

Without java and ZooKeeper's jars (``make cluster-deps``), tests that need it skip, except under
CI=true, where they fail.
"""

from __future__ import annotations

import re
import socket
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


def four_letter_number(address: str, word: bytes, field: bytes) -> int:
    """A number from a ZooKeeper four-letter word's answer (``srvr``, allowed by default; ``wchs``, allowed for the
    servers tests start: cluster/local.py): the one after ``field``."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(word)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    match = re.search(re.escape(field) + rb"\s*(\d+)", answer)
    assert match, answer
    return int(match.group(1))


def zk_watches(address: str) -> int:
    """The watches the ZooKeeper server holds now, of every session."""
    return four_letter_number(address, b"wchs", b"Total watches:")
