"""Cluster mode with real processes: ZooKeeper + 2 bookies shared by the package, brokers started per test (each
test has a ZooKeeper chroot of its own for its brokers' metadata, so brokers of different tests never meet)."""

from __future__ import annotations

import contextlib
import json
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from cluster.local import BrokerInfo, LocalCluster, broker_settings, kill_broker, running_cluster, start_broker
from tests.bookkeeper.conftest import require_cluster_deps

# Short sessions: a dead broker's bundles are free after this (ZooKeeper's minimum is 2 ticks of 2 s).
SESSION_TIMEOUT_MS = 6000


@pytest.fixture(scope="package")
def zk_bookies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_cluster_deps()
    with running_cluster(tmp_path_factory.mktemp("cluster-mode"), bookies=2) as cluster:
        try:
            yield cluster
        finally:
            for broker in list(cluster.brokers):
                kill_broker(cluster, broker)


class Brokers:
    """The brokers of one test, on one chroot."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.chroot = f"/cm-{uuid.uuid4().hex[:8]}"
        self.settings = {**broker_settings(cluster, self.chroot, ensemble=2, write_quorum=2, ack_quorum=2),
                         "metadataStoreSessionTimeoutMillis": str(SESSION_TIMEOUT_MS)}
        self.started: list[BrokerInfo] = []

    def start(self, count: int = 1, command_prefix: Sequence[str] = ()) -> list[BrokerInfo]:
        new = [start_broker(self.cluster, self.settings, f"{self.chroot[1:]}-{len(self.started) + i + 1}",
                            command_prefix=command_prefix)
               for i in range(count)]
        self.started.extend(new)
        return new

    @property
    def live(self) -> list[BrokerInfo]:
        return [b for b in self.started if b in self.cluster.brokers]

    def kill(self, broker: BrokerInfo) -> None:
        kill_broker(self.cluster, broker)

    def stop_all(self) -> None:
        for broker in self.live:
            kill_broker(self.cluster, broker)

    @contextlib.contextmanager
    def zk(self) -> Iterator[KazooClient]:
        client = KazooClient(hosts=f"{self.cluster.zk_address}{self.chroot}")
        client.start(timeout=30)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def owners(self, zk: KazooClient, namespace: str = "public/default") -> dict[str, dict[str, object]]:
        """bundle range -> the owner's NamespaceEphemeralData."""
        path = f"/namespace/{namespace}"
        if not zk.exists(path):
            return {}
        out = {}
        for child in zk.get_children(path):
            with contextlib.suppress(Exception):
                out[child] = json.loads(zk.get(f"{path}/{child}")[0])
        return out


@pytest.fixture
def brokers(zk_bookies: LocalCluster) -> Iterator[Brokers]:
    group = Brokers(zk_bookies)
    try:
        yield group
    finally:
        group.stop_all()


def http_json(url: str, method: str = "GET", timeout: float = 30, body: object = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, method=method, data=data,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def log_of(broker: BrokerInfo) -> str:
    return Path(broker.log).read_text(errors="replace")
