"""Test-wide settings and fixtures."""

import os
from collections.abc import Iterator

import pytest

from cluster.local import ProcessInfo
from tests.zookeeper import zookeeper_server

# Check the dispatcher permit invariant on every change (raises on drift) in every test broker.
os.environ.setdefault("PULSAR_BROKER_DEBUG", "1")


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessInfo]:
    """One real ZooKeeper for the whole run, started on first use (``address`` is host:port). Give each
    test a chroot of its own: ``zk:{zk_server.address}/<unique>``."""
    with zookeeper_server(tmp_path_factory.mktemp("zk")) as info:
        yield info
