"""Broker behaviour the Java and Go clients' compatibility suite (`make compat`) found missing,
checked here with the Python client (C++ core)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.e2e.conftest import topic_name

CHUNK_LIMIT = 16 * 1024  # a small maxMessageSize, so a message of 60 KiB goes in 4-5 chunks


@pytest.fixture(scope="module")
def small_broker() -> Iterator[BrokerThread]:
    with BrokerThread(maxMessageSize=CHUNK_LIMIT) as broker:
        yield broker


def test_chunks_of_a_message_go_to_one_shared_consumer(small_broker: BrokerThread) -> None:
    """compat scenario chunking_shared: with two Shared consumers every chunk of a message goes to
    the consumer that got its first chunk, so each consumer reassembles whole messages (before, the
    chunks were scattered round robin and no consumer could complete any message)."""
    client = pulsar.Client(small_broker.service_url, operation_timeout_seconds=10)
    try:
        topic = topic_name("chunk-shared")
        consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=50)
                     for _ in range(2)]
        producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        payloads = {bytes([65 + i]) * (60 * 1024) for i in range(10)}
        for p in sorted(payloads):
            producer.send_async(p, None)
        producer.flush()
        got: list[bytes] = []
        per_consumer = [0, 0]
        lock = threading.Lock()

        deadline = time.monotonic() + 30

        def drain(i: int, consumer: pulsar.Consumer) -> None:
            while time.monotonic() < deadline:
                with lock:
                    if len(got) >= len(payloads):
                        return
                try:
                    msg = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                consumer.acknowledge(msg)
                with lock:
                    got.append(msg.data())
                    per_consumer[i] += 1

        threads = [threading.Thread(target=drain, args=(i, c)) for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(got) == sorted(payloads), f"{len(got)} of {len(payloads)} whole messages ({per_consumer})"
    finally:
        client.close()


def test_a_chunked_message_longer_than_the_unacked_limit_reaches_its_key_shared_consumer() -> None:
    """Key_Shared, maxUnackedMessagesPerConsumer 3, one message in 7 chunks: every chunk goes to the key's
    consumer past its limit and the message arrives whole. Held back at the limit (each chunk counts as one
    unacked message), the rest of the message waited for acks the client cannot send before it has all of it,
    and the subscription stalled on it for good."""
    with BrokerThread(maxMessageSize=CHUNK_LIMIT, maxUnackedMessagesPerConsumer=3) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            topic = topic_name("chunk-key-shared")
            consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared)
            producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
            big = bytes(range(256)) * (100 * 1024 // 256)  # 100 KiB: 7 chunks of at most 16 KiB
            producer.send(big, partition_key="k")
            producer.send(b"after", partition_key="k")
            msg = consumer.receive(timeout_millis=10_000)
            assert msg.data() == big
            consumer.acknowledge(msg)
            assert consumer.receive(timeout_millis=10_000).data() == b"after"
        finally:
            client.close()
