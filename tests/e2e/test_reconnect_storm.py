"""Reconnect storms with the official client: consumers close and reopen while messages flow.

Shared: every message is received, the backlog drains to zero and the dispatcher's permit total
still equals the sum over consumers. Key_Shared: the same, and every consumer session sees each
key's messages in publish order.
"""

from __future__ import annotations

import os
import random
import threading

import pulsar
from pulsar import ConsumerType

from broker.embedded import BrokerThread
from tests.e2e.conftest import topic_name
from tests.waiting import wait_for

MESSAGES = int(os.environ.get("STORM_MESSAGES", "100000"))
CONSUMERS = 4
KEYS = 50
DEADLINE_S = 100.0  # below the 120 s test timeout, so a stall fails with the counts


def produce(client: pulsar.Client, topic: str, keyed: bool) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      batching_type=pulsar.BatchingType.KeyBased if keyed
                                      else pulsar.BatchingType.Default,
                                      block_if_queue_full=True, max_pending_messages=5000)
    for i in range(MESSAGES):
        if keyed:
            producer.send_async(str(i).encode(), None, partition_key=f"key-{i % KEYS}")
        else:
            producer.send_async(str(i).encode(), None)
    producer.flush()
    producer.close()


def run_storm(broker: BrokerThread, consumer_type: ConsumerType, keyed: bool) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    topic = topic_name("storm")
    seen: set[int] = set()
    order_errors: list[str] = []
    lock = threading.Lock()
    done = threading.Event()
    sessions = [0]
    rng = random.Random(20260101)
    seeds = [rng.randrange(1 << 30) for _ in range(CONSUMERS)]
    # Create the subscription before producing so it holds every message.
    client.subscribe(topic, "storm", consumer_type=consumer_type).close()

    def worker(seed: int) -> None:
        r = random.Random(seed)
        while not done.is_set():
            consumer = client.subscribe(topic, "storm", consumer_type=consumer_type,
                                        receiver_queue_size=r.choice([10, 100, 1000]))
            with lock:
                sessions[0] += 1
            last_per_key: dict[str, int] = {}
            for _ in range(r.randint(50, 3000)):
                try:
                    msg = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    if done.is_set():
                        break
                    continue
                value = int(msg.data())
                if keyed:
                    key = msg.partition_key()
                    if value <= last_per_key.get(key, -1):
                        order_errors.append(f"{key}: {value} after {last_per_key[key]}")
                    last_per_key[key] = value
                consumer.acknowledge(msg)
                with lock:
                    seen.add(value)
                    if len(seen) == MESSAGES:
                        done.set()
            consumer.close()

    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in seeds]
    for t in threads:
        t.start()
    produce(client, topic, keyed)
    finished = done.wait(DEADLINE_S)
    done.set()
    for t in threads:
        t.join(30)
    assert finished, f"received {len(seen)} of {MESSAGES} distinct messages"
    # A storm, not a quiet run: consumers came and went many times while messages flowed.
    assert sessions[0] >= 3 * CONSUMERS, sessions[0]
    assert not order_errors, order_errors[:10]

    server = broker.server
    sub = server.service.topics[topic].subscriptions["storm"]
    # Acks are grouped by the client for up to 100 ms; the last ones arrive after close.
    wait_for(lambda: broker.run_coroutine(_backlog(sub)) == 0, 15, "backlog to drain")
    d = sub.dispatcher
    assert d is not None
    assert broker.run_coroutine(_invariant(d))
    client.close()


async def _backlog(sub: object) -> int:
    return int(sub.backlog)  # type: ignore[attr-defined]


async def _invariant(d: object) -> bool:
    return bool(d.total_permits == d.permit_balance())  # type: ignore[attr-defined]


def test_shared_reconnect_storm(pulsar_broker_fresh: BrokerThread) -> None:
    run_storm(pulsar_broker_fresh, ConsumerType.Shared, keyed=False)


def test_key_shared_reconnect_storm_keeps_key_order() -> None:
    with BrokerThread(managedLedgerStorage="memory") as broker:
        run_storm(broker, ConsumerType.KeyShared, keyed=True)


def test_key_shared_reconnect_storm_keeps_key_order_file_storage(pulsar_broker_fresh: BrokerThread) -> None:
    """With file storage, replay reads complete later (disk); about one run in 20 used to show a key out
    of order, fixed by the replay-order rule in key_shared.py (deterministic test in
    tests/component/test_permits.py). Back in make test after 35 clean runs in a row."""
    run_storm(pulsar_broker_fresh, ConsumerType.KeyShared, keyed=True)
