"""Test-wide settings and fixtures."""

import os
from collections.abc import Iterator

import hypothesis.internal.observability  # noqa: F401  (see below)
import pytest

from cluster import processes
from cluster.local import ProcessInfo
from tests.zookeeper import zookeeper_server

# (hypothesis.internal.observability, imported above: hypothesis's pytest plugin imports it at the end of every run,
# and a first import then compiles it. When a test leaked a transport, CPython 3.11.7's garbage collector can run
# the transport's finaliser in the middle of that compilation, which fails with "SystemError: AST constructor
# recursion depth mismatch" and makes pytest exit 1 after every test passed. Imported here, it is compiled first.)

# Check the dispatcher permit invariant on every change (raises on drift) in every test broker.
os.environ.setdefault("PULSAR_BROKER_DEBUG", "1")


def pytest_configure(config: pytest.Config) -> None:
    """Whatever the tests started (ZooKeeper, bookies, brokers, Apache Pulsar, Chromium, Prometheus: each recorded in
    cluster/processes.py) is stopped by pid when the run ends, however it ends: a SIGTERM or SIGINT skips the
    fixtures' teardown, and those processes run in sessions of their own."""
    processes.stop_all_at_exit()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessInfo]:
    """One real ZooKeeper for the whole run, started on first use (``address`` is host:port). Give each
    test a chroot of its own: ``zk:{zk_server.address}/<unique>``."""
    with zookeeper_server(tmp_path_factory.mktemp("zk")) as info:
        yield info
