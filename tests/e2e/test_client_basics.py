"""End-to-end with the official pulsar-client (C++ core): produce, consume, subscription types."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pulsar
import pytest
from pulsar import CompressionType, ConsumerType, InitialPosition

from broker.dispatch.single_active import elect_active
from broker.embedded import BrokerThread
from tests.e2e.conftest import topic_name

RECEIVE_TIMEOUT_MS = 10_000


def drain(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(msg)
        out.append(msg)
    return out


def assert_nothing_more(consumer: pulsar.Consumer, wait_ms: int = 300) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=wait_ms)


@pytest.mark.parametrize("batching", [False, True])
def test_produce_consume(client: pulsar.Client, batching: bool) -> None:
    topic = topic_name("basic")
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=5)
    ids = []
    for i in range(200):
        producer.send_async(f"m-{i}".encode(), lambda res, mid: ids.append((res, mid)))
    producer.flush()
    assert len(ids) == 200 and all(r == pulsar.Result.Ok for r, _ in ids)
    got = [m.data().decode() for m in drain(consumer, 200)]
    assert got == [f"m-{i}" for i in range(200)]
    assert_nothing_more(consumer)
    producer.close()
    consumer.close()


@pytest.mark.parametrize("compression", [CompressionType.LZ4, CompressionType.ZLib,
                                         CompressionType.ZSTD, CompressionType.SNAPPY])
def test_compression_passes_through(client: pulsar.Client, compression: CompressionType) -> None:
    topic = topic_name("compress")
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, compression_type=compression, batching_enabled=True,
                                      batching_max_publish_delay_ms=5)
    payloads = [(f"payload-{i}-" * 50).encode() for i in range(20)]
    for p in payloads:
        producer.send_async(p, None)
    producer.flush()
    assert [m.data() for m in drain(consumer, 20)] == payloads


def test_exclusive_refuses_second_consumer(client: pulsar.Client) -> None:
    topic = topic_name("excl")
    first = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    first.close()
    again = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    again.close()


def test_failover_switches_when_active_closes(client: pulsar.Client) -> None:
    topic = topic_name("failover")
    c1 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="a")
    c2 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"x{i}".encode())
    # One of them is active (which one, the topic name's hash decides, as in Pulsar): it gets everything, the
    # other nothing.
    active, standby = (c1, c2) if elected(topic) == "a" else (c2, c1)
    first = [m.data() for m in drain(active, 10)]
    assert first == [f"x{i}".encode() for i in range(10)]
    assert_nothing_more(standby)
    # Unacked messages of the departing active consumer go to the new one.
    for i in range(10, 15):
        producer.send(f"x{i}".encode())
    msg = active.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
    assert msg.data() == b"x10"
    active.close()
    rest = [m.data() for m in drain(standby, 5)]
    assert rest == [f"x{i}".encode() for i in range(10, 15)]


def elected(topic: str) -> str:
    """Which of the consumers "a" and "b" a Failover subscription of this non-partitioned topic makes active."""
    consumers = [SimpleNamespace(name=n, priority_level=0) for n in ("a", "b")]
    chosen = elect_active(consumers, -1, topic)
    assert chosen is not None
    return str(chosen.name)


def test_shared_round_robin_and_redelivery_on_close(client: pulsar.Client) -> None:
    topic = topic_name("shared")
    c1 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=10)
    c2 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=10)
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(f"s{i}".encode())
    got: set[bytes] = set()
    # c1 takes a few without acking, then leaves: those must reach c2.
    held = [c1.receive(timeout_millis=RECEIVE_TIMEOUT_MS) for _ in range(3)]
    c1.close()
    got.update(m.data() for m in held)
    redelivered: set[bytes] = set()
    while len(redelivered | (got - {m.data() for m in held})) < 40:
        m = c2.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        c2.acknowledge(m)
        redelivered.add(m.data())
    assert redelivered == {f"s{i}".encode() for i in range(40)}


def test_key_shared_keeps_keys_on_one_consumer(client: pulsar.Client) -> None:
    topic = topic_name("keyshared")
    consumers = [client.subscribe(topic, "sub", consumer_type=ConsumerType.KeyShared, consumer_name=f"k{i}")
                 for i in range(3)]
    producer = client.create_producer(topic)
    for i in range(60):
        producer.send(f"{i}".encode(), partition_key=f"key-{i % 6}")
    owner: dict[str, int] = {}
    seen = 0
    order: dict[str, list[int]] = {}
    deadline = time.monotonic() + 30
    while seen < 60:
        assert time.monotonic() < deadline, f"only {seen} of 60 received"
        for idx, c in enumerate(consumers):
            while True:  # drain what this consumer has, then move on
                try:
                    m = c.receive(timeout_millis=50)
                except pulsar.Timeout:
                    break
                c.acknowledge(m)
                key = m.partition_key()
                assert owner.setdefault(key, idx) == idx, "a key moved between consumers"
                order.setdefault(key, []).append(int(m.data()))
                seen += 1
    for values in order.values():
        assert values == sorted(values)


def test_ack_and_redelivery_after_reconnect(client: pulsar.Client) -> None:
    topic = topic_name("redeliver")
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"r{i}".encode())
    msgs = [consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS) for _ in range(10)]
    for m in msgs[:5]:
        consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "sub")
    again = [m.data() for m in drain(consumer, 5)]
    assert again == [f"r{i}".encode() for i in range(5, 10)]
    assert_nothing_more(consumer)


def test_cumulative_ack(client: pulsar.Client) -> None:
    topic = topic_name("cumulative")
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"c{i}".encode())
    msgs = [consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS) for _ in range(10)]
    consumer.acknowledge_cumulative(msgs[6])
    consumer.close()
    consumer = client.subscribe(topic, "sub")
    assert [m.data() for m in drain(consumer, 3)] == [b"c7", b"c8", b"c9"]


def test_negative_ack_redelivers_with_count(client: pulsar.Client) -> None:
    topic = topic_name("nack")
    consumer = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    producer.send(b"once")
    m = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
    assert m.redelivery_count() == 0
    consumer.negative_acknowledge(m)
    again = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
    assert again.data() == b"once"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_initial_position_earliest_and_latest(client: pulsar.Client) -> None:
    topic = topic_name("initpos")
    producer = client.create_producer(topic)
    producer.send(b"before")
    latest = client.subscribe(topic, "latest")
    earliest = client.subscribe(topic, "earliest", initial_position=InitialPosition.Earliest)
    producer.send(b"after")
    assert [m.data() for m in drain(earliest, 2)] == [b"before", b"after"]
    assert [m.data() for m in drain(latest, 1)] == [b"after"]


def test_unsubscribe_removes_subscription(client: pulsar.Client) -> None:
    topic = topic_name("unsub")
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    producer.send(b"1")
    consumer.unsubscribe()
    producer.send(b"2")
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Latest)
    producer.send(b"3")
    assert [m.data() for m in drain(consumer, 1)] == [b"3"]


def test_chunked_message(client: pulsar.Client) -> None:
    topic = topic_name("chunk")
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = bytes(range(256)) * (6 * 1024 * 1024 // 256)  # 6 MiB, above the 5 MiB limit
    producer.send(big)
    msg = consumer.receive(timeout_millis=30_000)
    assert msg.data() == big
    consumer.acknowledge(msg)


def test_message_over_size_limit_gets_clear_error(client: pulsar.Client) -> None:
    topic = topic_name("toobig")
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * (6 * 1024 * 1024))
    producer.send(b"small still works")


def test_producer_names_busy_and_generated(client: pulsar.Client) -> None:
    topic = topic_name("pnames")
    p1 = client.create_producer(topic, producer_name="fixed")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="fixed")
    g1 = client.create_producer(topic)
    g2 = client.create_producer(topic)
    assert g1.producer_name() != g2.producer_name()
    assert p1.producer_name() == "fixed"


def test_http_lookup_service_url(pulsar_broker: BrokerThread) -> None:
    client = pulsar.Client(pulsar_broker.web_url, operation_timeout_seconds=10)
    try:
        topic = topic_name("httplookup")
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        producer.send(b"via http lookup")
        assert drain(consumer, 1)[0].data() == b"via http lookup"
    finally:
        client.close()


def test_http_lookup_of_partitioned_and_missing_topics(pulsar_broker: BrokerThread) -> None:
    """Over an HTTP service URL the client asks .../partitions?checkAllowAutoCreation=true: a partitioned topic gets
    its partitions; a topic that is not there, in a namespace that does not auto-create, Pulsar's 404, which the C++
    client reports as it does any HTTP error: ConnectError (over the binary protocol: TopicNotFound)."""
    import json
    import urllib.request

    ns = f"public/http-{uuid.uuid4().hex[:8]}"

    def admin(method: str, path: str, body: object) -> None:
        request = urllib.request.Request(f"{pulsar_broker.web_url}/admin/v2/{path}", data=json.dumps(body).encode(),
                                         method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 204

    admin("PUT", f"namespaces/{ns}", {})
    admin("POST", f"namespaces/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    admin("PUT", f"persistent/{ns}/parted/partitions", 2)
    client = pulsar.Client(pulsar_broker.web_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(f"persistent://{ns}/parted")
        producer.send(b"to a partition")
        assert client.get_topic_partitions(f"persistent://{ns}/parted") == [
            f"persistent://{ns}/parted-partition-0", f"persistent://{ns}/parted-partition-1"]
        with pytest.raises(pulsar.ConnectError):
            client.create_producer(f"persistent://{ns}/absent")
    finally:
        client.close()


def test_deduplication_by_namespace_policy(pulsar_broker: BrokerThread, client: pulsar.Client) -> None:
    import json
    import urllib.request

    def set_dedup(on: bool) -> None:
        req = urllib.request.Request(f"{pulsar_broker.web_url}/admin/v2/namespaces/public/default/deduplication",
                                     data=json.dumps(on).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 204

    set_dedup(True)
    try:
        topic = topic_name("dedup")
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, producer_name="dedup-producer")
        assert producer.last_sequence_id() == -1
        for i in range(5):
            producer.send(f"d{i}".encode(), sequence_id=i)
        producer.close()
        producer = client.create_producer(topic, producer_name="dedup-producer")
        assert producer.last_sequence_id() == 4
        producer.send(b"duplicate of d2", sequence_id=2)  # acknowledged, not stored
        producer.send(b"d5", sequence_id=5)
        assert [m.data() for m in drain(consumer, 6)] == [b"d0", b"d1", b"d2", b"d3", b"d4", b"d5"]
        assert_nothing_more(consumer)
    finally:
        set_dedup(False)


def test_access_mode_exclusive_refuses_second_producer(client: pulsar.Client) -> None:
    topic = topic_name("access-excl")
    client.create_producer(topic, producer_name="p1", access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="p2", access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="p3")


def test_access_mode_exclusive_with_fencing(client: pulsar.Client) -> None:
    topic = topic_name("access-fence")
    p1 = client.create_producer(topic, producer_name="p1", access_mode=pulsar.ProducerAccessMode.Exclusive)
    p2 = client.create_producer(topic, producer_name="p2",
                                access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    with pytest.raises((pulsar.ProducerFenced, pulsar.AlreadyClosed)):
        p1.send(b"fenced")
    p2.send(b"still works")


def test_access_mode_wait_for_exclusive(client: pulsar.Client) -> None:
    import threading

    topic = topic_name("access-wait")
    p1 = client.create_producer(topic, producer_name="p1", access_mode=pulsar.ProducerAccessMode.Exclusive)
    created: list[pulsar.Producer] = []
    waiter = threading.Thread(target=lambda: created.append(client.create_producer(
        topic, producer_name="p2", access_mode=pulsar.ProducerAccessMode.WaitForExclusive)))
    waiter.start()
    waiter.join(0.5)
    assert not created  # still waiting for the exclusive slot
    p1.close()
    waiter.join(10)
    assert created and created[0].producer_name() == "p2"
    created[0].send(b"granted")


def test_pattern_consumer_uses_topics_of_namespace(client: pulsar.Client) -> None:
    import re

    prefix = f"pattern-{uuid.uuid4().hex[:8]}"
    topics = [f"persistent://public/default/{prefix}-{i}" for i in range(3)]
    for t in topics:
        client.create_producer(t).close()  # create the topics first
    consumer = client.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "sub")
    for i, t in enumerate(topics):
        client.create_producer(t).send(f"from-{i}".encode())
    got = sorted(m.data() for m in drain(consumer, 3))
    assert got == [b"from-0", b"from-1", b"from-2"]


def test_terminate_topic(pulsar_broker: BrokerThread, client: pulsar.Client) -> None:
    import json
    import urllib.request

    topic = topic_name("terminate")
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    last_sent = [producer.send(f"t{i}".encode()) for i in range(3)][-1]
    url = f"{pulsar_broker.web_url}/admin/v2/{topic.replace('://', '/')}/terminate"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as r:
        last = json.loads(r.read())
    assert (last["ledgerId"], last["entryId"]) == (last_sent.ledger_id(), last_sent.entry_id())
    with pytest.raises((pulsar.TopicTerminated, pulsar.AlreadyClosed)):
        producer.send(b"too late")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    # Consumers still read everything that was published before the end.
    assert [m.data() for m in drain(consumer, 3)] == [b"t0", b"t1", b"t2"]
