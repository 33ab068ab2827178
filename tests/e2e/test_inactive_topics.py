"""Inactive topics and subscriptions are deleted, with the official client.

Topics (Pulsar's brokerDeleteInactiveTopics* and inactiveTopicPolicies): what counts as activity
in each mode, the namespace policy and its REST API, retention, partitioned metadata, and clients
that meet a topic being deleted. Subscriptions (subscriptionExpirationTimeMinutes and
subscriptionExpirationTime): only those without consumers, reads or acks for the limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.embedded import BrokerThread
from broker.errors import ServiceNotReadyError
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.producer import Producer
from broker.topic_name import TopicName
from managed_ledger.cursor_base import BaseCursor
from tests.admin.conftest import Admin, rest_path
from tests.e2e.conftest import topic_name
from tests.waiting import wait_for

CAUGHT_UP = "delete_when_subscriptions_caught_up"
NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"


# How long a topic must be inactive before it is deleted. Not 0: a topic's clock starts when it loads, and a client
# that loads it (SUBSCRIBE, PRODUCER) attaches a moment later (a new durable cursor is a write first), when the topic
# counts as active. With 0, a check in that moment deletes it under the client, which then retries, again and again
# on a loaded machine (the test's subscribe timed out, or its consumer came back after the messages were sent).
MAX_INACTIVE_S = 2


def gc_broker(tmp_path: Path, **overrides: Any) -> BrokerThread:
    """A broker that checks every 0.05 s and deletes a topic inactive for MAX_INACTIVE_S."""
    settings: dict[str, Any] = {"brokerDeleteInactiveTopicsFrequencySeconds": 0.05,
                                "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": MAX_INACTIVE_S}
    settings.update(overrides)
    return BrokerThread(data_dir=tmp_path, **settings)


def stored(broker: BrokerThread, topic: str) -> bool:
    service = broker.server.service
    name = TopicName.parse(topic)
    return name.full in service.topics or service.topic_exists(name)


def after_checks(broker: BrokerThread, n: int = 3) -> Callable[[], bool]:
    """A condition that holds once the inactive-topic check has run ``n`` more times."""
    monitor = broker.server.service.inactive_topics
    target = monitor.checks + n
    return lambda: monitor.checks >= target


def test_a_topic_without_producers_or_subscriptions_is_deleted_with_its_data(tmp_path: Path) -> None:
    with gc_broker(tmp_path) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        topic = topic_name("gc")
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(b"m%d" % i)
        wait_for(after_checks(broker), what="three checks with the producer connected")
        assert stored(broker, topic)  # a connected producer keeps it
        # (Counted from here: on a very slow machine a check may have deleted it while the producer attached.)
        deleted = broker.server.service.inactive_topics.deleted_total
        producer.close()
        wait_for(lambda: not stored(broker, topic), what="the topic to be deleted")
        assert broker.server.service.inactive_topics.deleted_total == deleted + 1
        metrics = Admin(broker.web_url).get("/metrics").body.decode()
        assert f'pulsar_py_inactive_topics_deleted_total{{cluster="standalone"}} {deleted + 1}\n' in metrics
        # Its data went with it: a reader from the start finds nothing (the topic is created anew).
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert not reader.has_message_available()
        client.close()


def test_a_subscription_keeps_its_topic_until_it_is_deleted(tmp_path: Path) -> None:
    with gc_broker(tmp_path) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        topic = topic_name("gc-sub")
        consumer = client.subscribe(topic, "keep")
        consumer.close()  # a subscription without consumers still counts in this mode
        client.create_producer(topic).close()
        wait_for(after_checks(broker), what="three checks")
        assert stored(broker, topic)
        consumer = client.subscribe(topic, "keep")
        consumer.unsubscribe()
        wait_for(lambda: not stored(broker, topic), what="the topic to be deleted after the unsubscribe")
        client.close()


def test_caught_up_mode_deletes_once_every_backlog_is_consumed_and_no_consumer_is_connected(tmp_path: Path) -> None:
    with gc_broker(tmp_path, brokerDeleteInactiveTopicsMode=CAUGHT_UP) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        admin = Admin(broker.web_url)
        topic = topic_name("gc-caught-up")
        consumer = client.subscribe(topic, "s", receiver_queue_size=1)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(b"m%d" % i)
        producer.close()
        wait_for(after_checks(broker), what="three checks with a backlog")
        assert stored(broker, topic)  # the subscription has a backlog
        messages = [consumer.receive(10_000) for _ in range(5)]
        assert [m.data() for m in messages] == [b"m%d" % i for i in range(5)]
        for m in messages:
            consumer.acknowledge(m)
        stats = f"/admin/v2/{rest_path(topic)}/stats"
        wait_for(lambda: admin.ok("GET", stats)["subscriptions"]["s"]["msgBacklog"] == 0, what="the acks")
        # Caught up, but its consumer is connected: that keeps the topic (Pulsar's isActive counts connected
        # producers and consumers in every mode).
        wait_for(after_checks(broker), what="three checks caught up, the consumer connected")
        assert stored(broker, topic)
        consumer.close()
        wait_for(lambda: not stored(broker, topic), what="the topic to be deleted, with its subscription, once its "
                                                          "consumer left")
        client.close()


def test_a_connected_consumer_keeps_its_topic_without_restarting_its_clock(tmp_path: Path) -> None:
    # Pulsar's isActive, for a V2 name (isGlobal), counts only local producers besides the mode's subscriptions; a
    # connected consumer makes the deletion refused (delete() finds the topic in use), the clock runs on.
    with gc_broker(tmp_path, brokerDeleteInactiveTopicsMode=CAUGHT_UP,
                   brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=3600) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        admin = Admin(broker.web_url)
        topic = topic_name("gc-clock")
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"m")
        producer.close()
        consumer.acknowledge(consumer.receive(10_000))
        stats = f"/admin/v2/{rest_path(topic)}/stats"
        wait_for(lambda: admin.ok("GET", stats)["subscriptions"]["s"]["msgBacklog"] == 0, what="the ack")
        broker.server.service.topics[TopicName.parse(topic).full].last_active -= 3601  # inactive for an hour
        wait_for(after_checks(broker), what="three checks with the consumer connected")
        assert stored(broker, topic)  # in use: kept
        consumer.close()  # then the next check deletes it: the hour was not counted again from the consumer
        wait_for(lambda: not stored(broker, topic), what="the topic to be deleted once its consumer left")
        client.close()


def test_namespace_policy_and_retention_keep_topics(tmp_path: Path) -> None:
    with gc_broker(tmp_path) as broker:
        admin = Admin(broker.web_url)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        kept = admin.new_namespace()
        admin.ok("POST", f"/admin/v2/namespaces/{kept}/inactiveTopicPolicies",
                 {"inactiveTopicDeleteMode": NO_SUBSCRIPTIONS, "maxInactiveDurationSeconds": 0,
                  "deleteWhileInactive": False})
        forever = admin.new_namespace()
        admin.ok("POST", f"/admin/v2/namespaces/{forever}/retention",
                 {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        slow = admin.new_namespace()
        admin.ok("POST", f"/admin/v2/namespaces/{slow}/inactiveTopicPolicies",
                 {"inactiveTopicDeleteMode": NO_SUBSCRIPTIONS, "maxInactiveDurationSeconds": 3600,
                  "deleteWhileInactive": True})
        topics = [f"persistent://{ns}/t" for ns in (kept, forever, slow)]
        for t in topics:
            client.create_producer(t).close()
        wait_for(after_checks(broker), what="three checks")
        assert all(stored(broker, t) for t in topics)
        # The slow namespace's topic goes once it has been inactive for an hour.
        service = broker.server.service
        service.topics[TopicName.parse(topics[2]).full].last_active -= 3601
        wait_for(lambda: not stored(broker, topics[2]), what="the hour-old inactive topic to be deleted")
        assert stored(broker, topics[0]) and stored(broker, topics[1])
        client.close()


def test_inactive_topic_policies_rest(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        path = f"/admin/v2/namespaces/{ns}/inactiveTopicPolicies"
        assert admin.get(path).unset  # not set
        policy = {"inactiveTopicDeleteMode": CAUGHT_UP, "maxInactiveDurationSeconds": 120, "deleteWhileInactive": True}
        assert admin.post(path, policy).status == 204
        assert admin.ok("GET", path) == policy
        assert admin.ok("GET", f"/admin/v2/namespaces/{ns}")["inactive_topic_policies"] == policy
        # Missing fields take Java's defaults.
        assert admin.post(path, {"inactiveTopicDeleteMode": NO_SUBSCRIPTIONS}).status == 204
        assert admin.ok("GET", path) == {"inactiveTopicDeleteMode": NO_SUBSCRIPTIONS,
                                         "maxInactiveDurationSeconds": 0, "deleteWhileInactive": False}
        bad = [({"inactiveTopicDeleteMode": "delete_always"}, 400), ({}, 400), ([], 400),
               ({**policy, "deleteWhileInactive": "yes"}, 400), ({**policy, "maxInactiveDurationSeconds": 1.5}, 400),
               ({**policy, "maxInactiveDurationSeconds": -1}, 412)]
        for body, status in bad:
            reply = admin.post(path, body)
            assert reply.status == status, (body, reply.status, reply.body)
            assert reply.reason
        assert admin.delete(path).status == 204
        assert admin.get(path).unset
        assert admin.get("/admin/v2/namespaces/public/nope/inactiveTopicPolicies").status == 404
        # A namespace created with the policy in its Policies document.
        other = f"public/ns-with-policy-{tmp_path.name[-6:]}"
        admin.ok("PUT", f"/admin/v2/namespaces/{other}", {"inactive_topic_policies": policy})
        assert admin.ok("GET", f"/admin/v2/namespaces/{other}/inactiveTopicPolicies") == policy


@pytest.mark.parametrize("delete_metadata", [False, True])
def test_partitions_are_deleted_one_by_one_and_the_metadata_on_request(tmp_path: Path, delete_metadata: bool) -> None:
    with gc_broker(tmp_path, brokerDeleteInactivePartitionedTopicMetadataEnabled=delete_metadata) as broker:
        admin = Admin(broker.web_url)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        topic = topic_name("gc-partitioned")
        admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/partitions", 2)
        producer = client.create_producer(topic)
        for i in range(4):
            producer.send(b"m%d" % i, partition_key=str(i))
        producer.close()
        parts = [f"{topic}-partition-{i}" for i in range(2)]
        wait_for(lambda: not any(stored(broker, p) for p in parts), what="both partitions to be deleted")
        metadata = broker.server.service.metadata
        if delete_metadata:
            wait_for(lambda: metadata.partitions_of(topic) == 0, what="the partitioned metadata to be deleted")
        else:
            wait_for(after_checks(broker), what="three more checks")
            assert metadata.partitions_of(topic) == 2
        client.close()


def test_a_client_setting_up_on_a_topic_being_deleted_is_told_to_retry(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path, brokerDeleteInactiveTopicsEnabled=False) as broker:
        service = broker.server.service
        name = TopicName.parse(topic_name("closing"))

        async def scenario() -> None:
            topic = await service.get_topic(name, create=True)
            sub = await topic.get_or_create_subscription("s", True, pb.CommandSubscribe.Earliest, None)
            await service.delete_topic(name)  # the producer / consumer below started before this
            with pytest.raises(ServiceNotReadyError):
                await topic.get_or_create_subscription("s", True, pb.CommandSubscribe.Earliest, None)
            with pytest.raises(ServiceNotReadyError):
                sub.add_consumer(None)  # type: ignore[arg-type]  # refused before the consumer is looked at
            producer = Producer(None, topic, 1, "p", is_generated_name=False,  # type: ignore[arg-type]
                                access_mode=pb.ProducerAccessMode.Shared, epoch=0, metadata={}, schema_version=b"")
            with pytest.raises(ServiceNotReadyError):
                topic.add_producer(producer, 1)

        broker.run_coroutine(scenario())
        # A client retries ServiceNotReady: with the official client, the topic simply comes back.
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        client.create_producer(name.full).send(b"x")
        client.close()


def test_subscriptions_without_consumers_expire(tmp_path: Path) -> None:
    # 0.05 minutes = 3 s without a consumer, read or ack; checked every 0.03 s. (Not much less: a new subscription's
    # clock starts when its cursor is made, and its consumer attaches a moment later; on a loaded machine a check in
    # that moment expired the subscription being subscribed to.)
    with BrokerThread(data_dir=tmp_path, brokerDeleteInactiveTopicsEnabled=False,
                      subscriptionExpirationTimeMinutes=0.05,
                      subscriptionExpiryCheckIntervalInMinutes=0.0005) as broker:
        admin = Admin(broker.web_url)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        topic = topic_name("sub-expiry")
        connected = client.subscribe(topic, "connected")
        client.subscribe(topic, "abandoned").close()
        producer = client.create_producer(topic)
        producer.send(b"x")
        subscriptions = f"/admin/v2/{rest_path(topic)}/subscriptions"
        wait_for(lambda: admin.ok("GET", subscriptions) == ["connected"], what="the abandoned subscription to expire")
        assert 'pulsar_py_subscriptions_expired_total{cluster="standalone"} 1\n' in admin.get("/metrics").body.decode()
        # A namespace's policy overrides the broker: 0 = never.
        kept_ns = admin.new_namespace()
        assert admin.post(f"/admin/v2/namespaces/{kept_ns}/subscriptionExpirationTime", 0).status == 204
        kept = f"persistent://{kept_ns}/t"
        client.subscribe(kept, "idle").close()
        task = broker.server.service.housekeeping.task("subscription-expiry")
        runs = task.runs
        wait_for(lambda: task.runs >= runs + 5, what="five more expiry checks")
        assert admin.ok("GET", f"/admin/v2/{rest_path(kept)}/subscriptions") == ["idle"]
        # The connected consumer's subscription stays however long it is idle, and still works.
        assert admin.ok("GET", subscriptions) == ["connected"]
        assert connected.receive(10_000).data() == b"x"
        client.close()


def test_subscription_expiration_rest_and_the_clock_restarting_when_a_consumer_leaves(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        path = f"/admin/v2/namespaces/{ns}/subscriptionExpirationTime"
        assert admin.get(path).unset
        assert admin.post(path, 30).status == 204
        assert admin.ok("GET", path) == 30
        assert admin.ok("GET", f"/admin/v2/namespaces/{ns}")["subscription_expiration_time_minutes"] == 30
        for body, status in ((-1, 412), ("30", 400), (True, 400), (1.5, 400)):
            reply = admin.post(path, body)
            assert reply.status == status, (body, reply.status, reply.body)
        assert admin.delete(path).status == 204
        assert admin.get(path).unset
        # The expiry clock restarts when the last consumer leaves, not at its last read or ack.
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        topic = topic_name("sub-clock")
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        sub = broker.server.service.topics[topic].subscriptions["s"]

        async def leave_after_an_idle_hour() -> float:
            assert isinstance(sub.cursor, BaseCursor)
            sub.cursor._last_active -= 3600  # an hour without reads while connected
            sub.remove_consumer(sub.consumers[0])
            return sub.cursor.last_active

        assert time.time() - broker.run_coroutine(leave_after_an_idle_hour()) < 60
        client.close()
