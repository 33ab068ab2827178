"""Partitioned topics with the official client: routing modes, multi-topic and regex consumers,
partition increase, broker-level auto-creation of partitioned topics."""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterator

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin, rest_path
from tests.waiting import wait_for

TIMEOUT_MS = 10_000
Routing = pulsar.PartitionsRoutingMode


def partitioned(admin: Admin, partitions: int, prefix: str = "part") -> str:
    topic = f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/partitions", partitions)
    return topic


def receive_all(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    got = []
    for _ in range(n):
        msg = consumer.receive(TIMEOUT_MS)
        consumer.acknowledge(msg)
        got.append(msg)
    return got


def per_partition_in(admin: Admin, topic: str) -> dict[str, int]:
    stats = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitioned-stats")
    return {name: s["msgInCounter"] for name, s in stats["partitions"].items()}


@pytest.fixture
def admin(pulsar_broker: BrokerThread) -> Admin:
    return Admin(pulsar_broker.web_url)


def test_round_robin_routing_uses_every_partition(admin: Admin, client: pulsar.Client) -> None:
    topic = partitioned(admin, 4)
    consumer = client.subscribe(topic, "rr")
    producer = client.create_producer(topic, batching_enabled=False,
                                      message_routing_mode=Routing.RoundRobinDistribution)
    for i in range(40):
        producer.send(f"m{i}".encode())
    got = receive_all(consumer, 40)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(40))
    assert {m.topic_name() for m in got} == {f"{topic}-partition-{i}" for i in range(4)}
    counts = per_partition_in(admin, topic)
    assert sum(counts.values()) == 40 and all(c > 0 for c in counts.values())


def test_single_partition_routing(admin: Admin, client: pulsar.Client) -> None:
    topic = partitioned(admin, 3)
    producer = client.create_producer(topic, batching_enabled=False, message_routing_mode=Routing.UseSinglePartition)
    for i in range(15):
        producer.send(f"s{i}".encode())
    counts = per_partition_in(admin, topic)
    assert sorted(counts.values(), reverse=True)[0] == 15 and sum(counts.values()) == 15


def test_key_routing_keeps_each_key_on_one_partition(admin: Admin, client: pulsar.Client) -> None:
    topic = partitioned(admin, 4)
    consumer = client.subscribe(topic, "keys")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"k{i}".encode(), partition_key=f"key-{i % 5}")
    partitions_of_key: dict[str, set[str]] = defaultdict(set)
    order_of_key: dict[str, list[int]] = defaultdict(list)
    for msg in receive_all(consumer, 40):
        partitions_of_key[msg.partition_key()].add(msg.topic_name())
        order_of_key[msg.partition_key()].append(int(msg.data()[1:]))
    assert all(len(p) == 1 for p in partitions_of_key.values())
    assert all(seq == sorted(seq) for seq in order_of_key.values())  # per-key order is kept


def test_custom_message_router(admin: Admin, client: pulsar.Client) -> None:
    topic = partitioned(admin, 3)
    producer = client.create_producer(topic, batching_enabled=False,
                                      message_router=lambda msg, n: n - 1)
    for i in range(6):
        producer.send(f"c{i}".encode())
    counts = per_partition_in(admin, topic)  # the producer attached to every partition
    assert counts[f"{topic}-partition-2"] == 6 and sum(counts.values()) == 6


def test_batched_partitioned_producer_and_shared_consumers(admin: Admin, client: pulsar.Client) -> None:
    topic = partitioned(admin, 3)
    c1 = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    c2 = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      message_routing_mode=Routing.RoundRobinDistribution)
    for i in range(60):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    seen: set[bytes] = set()

    def drained() -> bool:
        for c in (c1, c2):
            while True:  # take what this consumer has, then look at the other one
                try:
                    msg = c.receive(20)
                except pulsar.Timeout:
                    break
                c.acknowledge(msg)
                seen.add(msg.data())
        return len(seen) == 60

    wait_for(drained, what="60 messages over two shared consumers")
    stats = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitioned-stats")
    assert stats["msgInCounter"] == 60 and len(stats["subscriptions"]["shared"]["consumers"]) == 6


def test_multi_topic_consumer(admin: Admin, client: pulsar.Client) -> None:
    parted = partitioned(admin, 2)
    plain = f"persistent://public/default/plain-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe([parted, plain], "multi")
    client.create_producer(parted, message_routing_mode=Routing.RoundRobinDistribution,
                           batching_enabled=False).send(b"from partitioned")
    client.create_producer(plain).send(b"from plain")
    assert sorted(m.data() for m in receive_all(consumer, 2)) == [b"from partitioned", b"from plain"]


def test_regex_consumer_covers_partitioned_and_plain_topics(admin: Admin, client: pulsar.Client) -> None:
    # (Discovery of topics created later is not tested: pulsar-client 3.13 accepts
    # pattern_auto_discovery_period but never passes it on, so the client polls only every 60 s.)
    ns = admin.new_namespace()
    parted = f"persistent://{ns}/orders-eu"
    plain = f"persistent://{ns}/orders-us"
    admin.ok("PUT", f"/admin/v2/{rest_path(parted)}/partitions", 2)
    admin.ok("PUT", f"/admin/v2/{rest_path(plain)}")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/other")  # does not match
    consumer = client.subscribe(re.compile(f"persistent://{ns}/orders-.*"), "rx")
    producer = client.create_producer(parted, batching_enabled=False,
                                      message_routing_mode=Routing.RoundRobinDistribution)
    producer.send(b"eu-1")
    producer.send(b"eu-2")
    client.create_producer(plain).send(b"us-1")
    client.create_producer(f"persistent://{ns}/other").send(b"not for the pattern")
    got = receive_all(consumer, 3)
    assert sorted(m.data() for m in got) == [b"eu-1", b"eu-2", b"us-1"]
    assert {m.topic_name() for m in got} == {f"{parted}-partition-0", f"{parted}-partition-1", plain}
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}/other/subscriptions") == []


def test_partition_increase_reaches_new_partition(admin: Admin, client: pulsar.Client) -> None:
    topic = partitioned(admin, 2)
    admin.ok("POST", f"/admin/v2/{rest_path(topic)}/partitions", 3)
    consumer = client.subscribe(topic, "grown")
    producer = client.create_producer(topic, batching_enabled=False, message_router=lambda msg, n: n - 1)
    producer.send(b"to the new partition")
    msg = receive_all(consumer, 1)[0]
    assert msg.data() == b"to the new partition" and msg.topic_name() == f"{topic}-partition-2"


@pytest.fixture(scope="module")
def partitioned_broker() -> Iterator[BrokerThread]:
    with BrokerThread(allowAutoTopicCreationType="partitioned", defaultNumPartitions=3) as b:
        yield b


def test_broker_auto_creates_partitioned_topics(partitioned_broker: BrokerThread) -> None:
    admin = Admin(partitioned_broker.web_url)
    client = pulsar.Client(partitioned_broker.service_url, operation_timeout_seconds=10)
    try:
        topic = f"persistent://public/default/auto-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "auto")
        producer = client.create_producer(topic, batching_enabled=False,
                                          message_routing_mode=Routing.RoundRobinDistribution)
        for i in range(9):
            producer.send(f"a{i}".encode())
        got = receive_all(consumer, 9)
        assert {m.topic_name() for m in got} == {f"{topic}-partition-{i}" for i in range(3)}
        assert admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitions") == {"partitions": 3, "deleted": False}
        assert topic in admin.ok("GET", "/admin/v2/persistent/public/default/partitioned")
        # a namespace override wins over the broker setting
        admin.ok("POST", "/admin/v2/namespaces/public/default/autoTopicCreation",
                 {"allowAutoTopicCreation": True, "topicType": "non-partitioned"})
        plain = f"persistent://public/default/plain-{uuid.uuid4().hex[:8]}"
        client.create_producer(plain).send(b"x")
        assert admin.ok("GET", f"/admin/v2/{rest_path(plain)}/partitions") == {"partitions": 0, "deleted": False}
    finally:
        client.close()
