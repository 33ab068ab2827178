"""managedLedgerStorage=bookkeeper end to end: the official client through our broker onto real bookies, and a
second broker taking the topic over (its data and the subscription's position come from BookKeeper and ZooKeeper).
"""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
import pytest
from kazoo.client import KazooClient

from broker.config import BrokerConfig, ConfigError
from broker.embedded import BrokerThread
from broker.service.broker_service import BrokerService
from cluster.local import LocalCluster
from managed_ledger.bookkeeper import ml_formats

RECEIVE_TIMEOUT_MS = 10_000


def bookkeeper_broker(cluster: LocalCluster) -> BrokerThread:
    return BrokerThread(managedLedgerStorage="bookkeeper",
                        bookkeeperMetadataServiceUri=f"zk+hierarchical://{cluster.zk_address}/ledgers",
                        managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2,
                        managedLedgerDefaultAckQuorum=2)


def test_topics_live_on_bookkeeper_and_move_between_brokers(bk_cluster: LocalCluster) -> None:
    topic = f"persistent://public/default/bk-{uuid.uuid4().hex[:10]}"
    with bookkeeper_broker(bk_cluster) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(20):
                producer.send(f"m-{i}".encode())
            for _ in range(5):
                consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS))
        finally:
            client.close()

    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    try:
        path = f"{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent/{topic.rsplit('/', 1)[1]}"
        info = ml_formats.decode_ledger_info(zk.get(path)[0])
        assert info.ledgers and zk.get_children(path) == ["sub"]
    finally:
        zk.stop()
        zk.close()

    with bookkeeper_broker(bk_cluster) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(topic, "sub")
            got = []
            for _ in range(15):
                message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
                consumer.acknowledge(message)
                got.append(message.data().decode())
            assert got == [f"m-{i}" for i in range(5, 20)]
        finally:
            client.close()


@pytest.mark.parametrize(("overrides", "why"), [
    ({}, "needs a ZooKeeper"),
    ({"bookkeeperMetadataServiceUri": "http://x/ledgers"}, r"expected zk\+hierarchical"),
    ({"bookkeeperMetadataServiceUri": "zk://127.0.0.1:1/ledgers", "managedLedgerDefaultAckQuorum": 3},
     "ack quorum"),
])
def test_bad_bookkeeper_settings_are_refused_clearly(overrides: dict[str, Any], why: str) -> None:
    config = BrokerConfig.load(managedLedgerStorage="bookkeeper", **overrides)
    with pytest.raises(ConfigError, match=why):
        BrokerService(config, None)
