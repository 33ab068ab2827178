"""Dispatcher pause on ack state (PIP-299) end to end, with the official client.

A broker keeping 3 acknowledgement holes per cursor (managedLedgerMaxUnackedRangesToPersist=3). Where
dispatcherPauseOnAckStatePersistent is on (its namespace's policy, or the topic's), a Shared or Key_Shared consumer
that acknowledges every other message of the first ones it got leaves 5 holes: the subscription is sent nothing beyond
what it had been sent (its dispatcher paused with permits to spare, no read outstanding), until the holes are
acknowledged; then the rest arrives, every message exactly once. Where the policy is off nothing pauses. The permit
invariant holds throughout (internal stats' ``permitInvariantHolds``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin, rest_path
from tests.waiting import wait_for

LIMIT = 3  # managedLedgerMaxUnackedRangesToPersist
MESSAGES = 40
QUEUE = 10  # the consumer's receiver queue: it asks for 10, then 5 more for each 5 it hands out
HOLES = QUEUE // 2  # every other one of the first QUEUE messages acknowledged: more holes than LIMIT
RECEIVE_MS = 10_000


def cursor(admin: Admin, topic: str) -> Any:
    return admin.ok("GET", f"/admin/v2/{rest_path(topic)}/internalStats")["cursors"]["s"]


def sent(admin: Admin, topic: str) -> int:
    return int(admin.stats(topic)["subscriptions"]["s"]["msgOutCounter"])


def paused_and_still(admin: Admin, topic: str) -> Any:
    """The cursor's internal stats once its dispatcher is paused with no read outstanding (nothing can go out now)."""
    stats = cursor(admin, topic)
    d = stats["dispatcher"]
    return stats if d["pausedOnAckStatePersistent"] and not d["readOutstanding"] else None


def exercise(client: pulsar.Client, admin: Admin, topic: str, consumer_type: pulsar.ConsumerType,
             pauses: bool) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=consumer_type, receiver_queue_size=QUEUE,
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(MESSAGES):
        producer.send(b"m%d" % i, partition_key=f"k{i % 7}")
    first = [consumer.receive(RECEIVE_MS) for _ in range(QUEUE)]
    for m in first[1::2]:
        consumer.acknowledge(m)
    received = list(first)

    if pauses:
        stats = wait_for(lambda: paused_and_still(admin, topic), what=f"the pause of {topic}")
        assert stats["totalNonContiguousDeletedMessagesRange"] == HOLES > LIMIT
        dispatched = sent(admin, topic)
        assert QUEUE <= dispatched < MESSAGES
        # What was sent before the pause arrives; the consumer asks for more, and gets nothing.
        received += [consumer.receive(RECEIVE_MS) for _ in range(dispatched - QUEUE)]
        d = wait_for(lambda: (d := cursor(admin, topic)["dispatcher"])["totalPermits"] > 0 and d,
                     what="the consumer's next FLOW")
        assert d["pausedOnAckStatePersistent"] and not d["readOutstanding"] and d["permitInvariantHolds"]
        assert sent(admin, topic) == dispatched
        with pytest.raises(pulsar.Timeout):
            consumer.receive(100)
    else:
        wait_for(lambda: cursor(admin, topic)["totalNonContiguousDeletedMessagesRange"] == HOLES,
                 what="the acks")
    # The holes (and what came since) acknowledged: the rest comes, each message once.
    for m in first[0::2] + received[QUEUE:]:
        consumer.acknowledge(m)
    while len(received) < MESSAGES:
        m = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(m)
        received.append(m)
    assert sorted(m.data() for m in received) == sorted(b"m%d" % i for i in range(MESSAGES))
    assert all(m.redelivery_count() == 0 for m in received)
    final = wait_for(lambda: (c := cursor(admin, topic))["totalNonContiguousDeletedMessagesRange"] == 0 and c,
                     what="every ack")
    assert not final["dispatcher"]["pausedOnAckStatePersistent"] and final["dispatcher"]["permitInvariantHolds"]
    assert sent(admin, topic) == MESSAGES
    with pytest.raises(pulsar.Timeout):
        consumer.receive(100)
    consumer.close()
    producer.close()


def test_dispatch_pauses_past_the_holes_kept_and_resumes_when_they_are_acknowledged(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path / "data", managedLedgerMaxUnackedRangesToPersist=LIMIT) as broker:
        admin = Admin(broker.web_url)
        on, off = admin.new_namespace(), admin.new_namespace()
        admin.ok("POST", f"/admin/v2/namespaces/{on}/dispatcherPauseOnAckStatePersistent")
        assert admin.ok("GET", f"/admin/v2/namespaces/{on}/dispatcherPauseOnAckStatePersistent") is True
        # The topic's own policy wins over its namespace's (off there).
        by_topic = f"persistent://{off}/by-topic"
        admin.ok("PUT", f"/admin/v2/{rest_path(by_topic)}")
        admin.ok("POST", f"/admin/v2/{rest_path(by_topic)}/dispatcherPauseOnAckStatePersistent")
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            exercise(client, admin, f"persistent://{on}/shared", pulsar.ConsumerType.Shared, pauses=True)
            exercise(client, admin, f"persistent://{on}/key-shared", pulsar.ConsumerType.KeyShared, pauses=True)
            exercise(client, admin, by_topic, pulsar.ConsumerType.Shared, pauses=True)
            exercise(client, admin, f"persistent://{off}/shared", pulsar.ConsumerType.Shared, pauses=False)
        finally:
            client.close()
