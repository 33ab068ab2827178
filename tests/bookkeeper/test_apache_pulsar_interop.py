"""Apache Pulsar's own broker and ours on the same ZooKeeper and bookies (issue 16, item 6).

A topic is produced on one broker, unloaded, and served by the other, both ways: every message and every
subscription position (a mark-delete position, an individually acknowledged message past it, a subscription that
never acknowledged) must survive. This is what storing topics in Pulsar's own formats (ManagedLedgerInfo and
ManagedCursorInfo znodes, cursor ledgers, BookKeeper ledger metadata) is for.

Pulsar comes from the jars of `make pulsar-deps` (cluster/apache_pulsar.py); without them the test skips, except
under CI=true, where it fails. Cost: ZooKeeper + 1 bookie, PulsarClusterMetadataSetup (~15 s) and two starts of
Pulsar's broker (30-75 s each on a busy 2-core machine): about 2-3 minutes.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from bench.brokers import BrokerProcess, bookkeeper_settings, start_ours
from cluster import apache_pulsar
from cluster.local import LocalCluster, running_cluster
from tests.bookkeeper.conftest import require_cluster_deps
from tests.needs import unavailable

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(900)]

CLUSTER = "mixed"
TOPIC = "persistent://public/default/interop"
TOPIC_PATH = "/admin/v2/persistent/public/default/interop"


def require_apache_pulsar() -> None:
    why = apache_pulsar.missing_dependencies()
    if why is not None:
        unavailable(f"Apache Pulsar unavailable: {why}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_cluster_deps()
    require_apache_pulsar()
    state: Path = tmp_path_factory.mktemp("interop-cluster")
    with running_cluster(state / "cluster", bookies=1) as c:
        # The cluster, tenant `public` and namespace `public/default`, written by Pulsar's own tool.
        apache_pulsar.run_cluster_metadata_setup(CLUSTER, c.zk_address, "http://127.0.0.1:8080",
                                                 "pulsar://127.0.0.1:6650", state / "setup.log")
        yield c


def start_apache(cluster: LocalCluster, workdir: Path) -> apache_pulsar.PulsarProcess:
    return apache_pulsar.start_broker(workdir, {
        "clusterName": CLUSTER,
        "metadataStoreUrl": cluster.metadata_store_url,
        "configurationMetadataStoreUrl": cluster.metadata_store_url,
        "managedLedgerDefaultEnsembleSize": "1",
        "managedLedgerDefaultWriteQuorum": "1",
        "managedLedgerDefaultAckQuorum": "1",
    })


def start_our_broker(cluster: LocalCluster, workdir: Path) -> tuple[BrokerProcess, str]:
    workdir.mkdir(parents=True, exist_ok=True)
    settings = bookkeeper_settings(cluster, 1, 1, 1)
    settings["clusterName"] = CLUSTER
    broker = start_ours(workdir, name="ours", settings=settings)
    web = re.search(r"broker ready in [\d.]+ s: \S+\s+(http://\S+)", broker.log_path.read_text())
    assert web, broker.log_path.read_text()[-2000:]
    return broker, web.group(1)


def unload(web_url: str) -> None:
    req = urllib.request.Request(web_url + TOPIC_PATH + "/unload", method="PUT")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status in (200, 204)


def produce(url: str, first: int, count: int) -> None:
    """``count`` messages m<first>..: half one by one, half in batches (batched entries keep their layout)."""
    client = pulsar.Client(url, operation_timeout_seconds=60)
    try:
        single = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(first, first + count // 2):
            single.send(f"m{i}".encode())
        single.close()
        batched = client.create_producer(TOPIC, batching_enabled=True, batching_max_messages=10,
                                         batching_max_publish_delay_ms=50)
        for i in range(first + count // 2, first + count):
            batched.send_async(f"m{i}".encode(), None)
        batched.flush()
        batched.close()
    finally:
        client.close()


def drain(url: str, subscription: str, ack: set[int] | None) -> list[int]:
    """Everything ``subscription`` is given (Shared, so individual acks leave holes), acknowledging the messages
    numbered in ``ack`` (None: all of them); the broker's own redelivery is not waited for."""
    client = pulsar.Client(url, operation_timeout_seconds=60)
    got: list[int] = []
    try:
        consumer = client.subscribe(TOPIC, subscription, consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        while True:
            try:
                msg = consumer.receive(5000)
            except pulsar.Timeout:
                break
            n = int(msg.data().decode()[1:])
            got.append(n)
            if ack is None or n in ack:
                consumer.acknowledge(msg)
        consumer.close()
    finally:
        client.close()
    return got


def test_a_topic_moves_between_apache_pulsar_and_our_broker_both_ways(cluster: LocalCluster,
                                                                       tmp_path: Path) -> None:
    # 1. Apache Pulsar writes the topic: 100 messages; `s` acknowledges m0..m29 and m40 (a hole past its
    #    mark-delete position), `t` is created and acknowledges nothing.
    apache = start_apache(cluster, tmp_path / "apache-1")
    try:
        drain(apache.service_url, "t", ack=set())  # creates the subscription at the start
        produce(apache.service_url, 0, 100)
        assert drain(apache.service_url, "s", ack={*range(30), 40}) == list(range(100))
        unload(apache.web_url)
    finally:
        apache.stop()

    # 2. Ours serves it: `s` resumes after its hole, `t` gets everything; then ours adds m100..m199 and `s`
    #    acknowledges m100..m119 and m130 (a hole again, now stored by ours; m130 is unbatched: the client keeps
    #    an acknowledgement of one message of a batch until the whole batch is acknowledged).
    ours, web = start_our_broker(cluster, tmp_path / "ours")
    try:
        assert drain(ours.url, "s", ack=None) == [*range(30, 40), *range(41, 100)]
        assert drain(ours.url, "t", ack=set()) == list(range(100))
        produce(ours.url, 100, 100)
        assert drain(ours.url, "s", ack={*range(100, 120), 130}) == list(range(100, 200))
        unload(web)
    finally:
        ours.stop()

    # 3. Apache Pulsar serves what ours wrote and the positions ours stored.
    apache = start_apache(cluster, tmp_path / "apache-2")
    try:
        assert drain(apache.service_url, "s", ack=None) == [*range(120, 130), *range(131, 200)]
        assert drain(apache.service_url, "t", ack=None) == list(range(200))
    finally:
        apache.stop()
