"""Test-wide settings and fixtures."""

import asyncio
import os
from collections.abc import Iterator

import hypothesis.internal.observability  # noqa: F401  (see below)
import pytest
import uvloop

from cluster import processes
from cluster.local import ProcessInfo
from tests.zookeeper import zookeeper_server

# (hypothesis.internal.observability, imported above: hypothesis's pytest plugin imports it at the end of every run,
# and a first import then compiles it. When a test leaked a transport, CPython 3.11.7's garbage collector can run
# the transport's finaliser in the middle of that compilation, which fails with "SystemError: AST constructor
# recursion depth mismatch" and makes pytest exit 1 after every test passed. Imported here, it is compiled first.)

# Check the dispatcher permit invariant on every change (raises on drift) in every test broker.
os.environ.setdefault("PULSAR_BROKER_DEBUG", "1")


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, object]:
    """Async tests and fixtures run on uvloop, the loop the broker runs on (``broker/__main__.py``, ``BrokerThread``),
    so a broker a test starts in its own loop behaves as the one users run. Tests marked ``both_loops`` run on
    asyncio's own loop too: a program embedding the broker (broker.embedded.Broker) runs it on its loop, which may be
    asyncio's, and those tests cover where the two differ (the transports' write buffers and pausing)."""
    if item.get_closest_marker("both_loops") is not None:
        return {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}
    return {"uvloop": uvloop.new_event_loop}


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
