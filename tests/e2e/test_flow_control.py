"""Flow control end to end with the official client: pause/resume, small windows, redeliveries."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pulsar
from pulsar import ConsumerType

from broker.embedded import BrokerThread
from tests.e2e.conftest import topic_name
from tests.waiting import wait_for

TIMEOUT_S = 30.0


def test_paused_listener_gets_its_window_back_on_resume(client: pulsar.Client) -> None:
    topic = topic_name("pause")
    received: list[bytes] = []
    all_in = threading.Event()
    total = 200

    def listener(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
        received.append(msg.data())
        consumer.acknowledge(msg)
        if len(received) == total:
            all_in.set()

    consumer = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=10,
                                message_listener=listener)
    producer = client.create_producer(topic)
    for i in range(50):
        producer.send(f"{i}".encode())
    wait_for(lambda: len(received) >= 50, TIMEOUT_S, "the first 50 messages")
    assert len(received) == 50
    # Paused with a partly used window: the broker must not hold back what it owes afterwards.
    consumer.pause_message_listener()
    for i in range(50, total):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    consumer.resume_message_listener()
    assert all_in.wait(TIMEOUT_S), f"only {len(received)} of {total} after resume"
    assert sorted(int(x) for x in received) == list(range(total))


def test_small_queue_with_many_negative_acks_never_stalls(client: pulsar.Client) -> None:
    topic = topic_name("nack-storm")
    consumer = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=10,
                                negative_ack_redelivery_delay_ms=50)
    producer = client.create_producer(topic)
    total = 300
    for i in range(total):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    nacked: dict[int, int] = {}
    acked: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while len(acked) < total:
        assert time.monotonic() < deadline, f"stalled with {len(acked)} of {total} acked"
        msg = consumer.receive(timeout_millis=5000)
        value = int(msg.data())
        # Every message is negatively acknowledged twice before it is accepted.
        if nacked.get(value, 0) < 2:
            nacked[value] = nacked.get(value, 0) + 1
            assert msg.redelivery_count() == nacked[value] - 1
            consumer.negative_acknowledge(msg)
        else:
            consumer.acknowledge(msg)
            acked.add(value)
    assert acked == set(range(total))


def send_one_batch_and_ack(client: pulsar.Client, topic: str, acked: slice) -> None:
    """Ten messages "0".."9" in one batch; acknowledge the ``acked`` ones by batch index, then
    close the consumer (which flushes its grouped acks)."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=1000)
    consumer = client.subscribe(topic, "sub", batch_index_ack_enabled=True)
    for i in range(10):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    msgs = [consumer.receive(timeout_millis=10_000) for _ in range(10)]
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) == 1  # one batch
    for m in msgs[acked]:
        consumer.acknowledge(m)
    consumer.close()
    producer.close()


def receive_exactly(client: pulsar.Client, topic: str, expected: list[int]) -> None:
    consumer = client.subscribe(topic, "sub", batch_index_ack_enabled=True)
    again = sorted(int(consumer.receive(timeout_millis=10_000).data()) for _ in range(len(expected)))
    assert again == expected
    try:
        extra = consumer.receive(timeout_millis=500)
    except pulsar.Timeout:
        extra = None
    assert extra is None, f"message {extra.data()!r} was acked but came back"
    consumer.close()


def test_batch_index_ack_redelivers_only_unacked_messages(client: pulsar.Client) -> None:
    topic = topic_name("batch-index")
    send_one_batch_and_ack(client, topic, slice(0, 4))
    receive_exactly(client, topic, [4, 5, 6, 7, 8, 9])


def test_batch_index_acks_survive_a_broker_restart(tmp_path: Path) -> None:
    topic = topic_name("batch-index-restart")
    with BrokerThread(data_dir=tmp_path) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        send_one_batch_and_ack(client, topic, slice(2, 5))
        client.close()
    with BrokerThread(data_dir=tmp_path) as broker:  # the same data: a restarted broker
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        receive_exactly(client, topic, [0, 1, 5, 6, 7, 8, 9])
        client.close()


def test_delayed_message_does_not_block_later_ones(client: pulsar.Client) -> None:
    topic = topic_name("delayed")
    consumer = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send(b"later", deliver_after=__import__("datetime").timedelta(milliseconds=1500))
    producer.send(b"now")
    first = consumer.receive(timeout_millis=10_000)
    assert first.data() == b"now"
    consumer.acknowledge(first)
    second = consumer.receive(timeout_millis=10_000)
    assert second.data() == b"later"  # held back, and it did not hold back the message after it
    consumer.acknowledge(second)


def test_dead_letter_policy_uses_redelivery_counts(client: pulsar.Client) -> None:
    topic = topic_name("dlq")
    dlq = f"{topic}-sub-DLQ"
    dlq_consumer = client.subscribe(dlq, "inspect")
    consumer = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=50,
                                dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2,
                                                                                    dead_letter_topic=dlq))
    producer = client.create_producer(topic)
    producer.send(b"poison")
    for _ in range(3):  # first delivery + 2 redeliveries, each negatively acknowledged
        msg = consumer.receive(timeout_millis=10_000)
        consumer.negative_acknowledge(msg)
    dead = dlq_consumer.receive(timeout_millis=10_000)
    assert dead.data() == b"poison"
