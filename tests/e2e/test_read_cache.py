"""The file ledger's read cache with the official client: it keeps only what active readers need."""

from __future__ import annotations

from pathlib import Path

import pulsar

from broker.embedded import BrokerThread
from managed_ledger.file import FileManagedLedgerFactory
from tests.e2e.conftest import topic_name
from tests.waiting import wait_for


def test_consumed_entries_leave_the_cache_and_idle_subscriptions_hold_none(tmp_path: Path) -> None:
    # An idle subscription (no consumers) and the deduplication cursor never read: as in Pulsar
    # they are inactive cursors, and the cache does not keep entries for them.
    with BrokerThread(data_dir=tmp_path, brokerDeduplicationEnabled=True) as broker:
        factory = broker.server.service.ledger_factory
        assert isinstance(factory, FileManagedLedgerFactory)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        topic = topic_name("cache")
        client.subscribe(topic, "idle").close()
        live = client.subscribe(topic, "live")
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [b"m%d" % i for i in range(50)]
        for data in sent:
            producer.send(data)
        for _ in sent:
            live.acknowledge(live.receive(10_000))
        wait_for(lambda: len(factory.cache) == 0, 10.0, "the consumed entries to leave the cache")
        idle = client.subscribe(topic, "idle")  # comes back: its messages come from disk
        assert [idle.receive(10_000).data() for _ in sent] == sent
        client.close()


def test_a_backlogged_subscription_holds_no_entries_in_the_cache(tmp_path: Path) -> None:
    # managedLedgerCursorBackloggedThreshold: a subscription with consumers but more entries unread
    # than the threshold is inactive (as in Pulsar), so the cache keeps only what the readers at
    # the tail need; it reads from disk, and is active again once it has caught up.
    with BrokerThread(data_dir=tmp_path, managedLedgerCursorBackloggedThreshold=10,
                      statsUpdateFrequencyInSecs=0.05) as broker:
        factory = broker.server.service.ledger_factory
        assert isinstance(factory, FileManagedLedgerFactory)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        topic = topic_name("backlogged")
        slow = client.subscribe(topic, "slow", receiver_queue_size=1)
        fast = client.subscribe(topic, "fast")
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [b"m%d" % i for i in range(50)]
        for data in sent:
            producer.send(data)
        for _ in sent:
            fast.acknowledge(fast.receive(10_000))
        subs = broker.server.service.topics[topic].subscriptions
        wait_for(lambda: not subs["slow"].cursor.is_active, 10.0, "the slow subscription to count as backlogged")
        assert subs["fast"].cursor.is_active
        wait_for(lambda: len(factory.cache) == 0, 10.0, "the entries only the slow subscription needs to leave")
        received = []
        for _ in sent:
            msg = slow.receive(10_000)
            received.append(msg.data())
            slow.acknowledge(msg)
        assert received == sent
        wait_for(lambda: subs["slow"].cursor.is_active, 10.0, "the caught-up subscription to be active again")
        client.close()
