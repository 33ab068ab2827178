"""Topic-level policies: the REST API (Pulsar's /admin/v2/persistent/{t}/{ns}/{topic}/<policy>),
their precedence over namespace and broker values, and their effect with the official client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pulsar
import pytest
from pulsar.schema import AvroSchema, Record, String

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.replication import PersistentReplicator
from broker.topic_name import TopicName
from managed_ledger.file import FileManagedLedger
from tests.admin.conftest import Admin, Reply, rest_path
from tests.component.wire import T, WireClient, producer_cmd, send_frame, subscribe_cmd
from tests.waiting import wait_for

NS = "/admin/v2/namespaces"


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """This module's broker (the conftest's admin and client fixtures use it): a quick TTL check."""
    with BrokerThread(data_dir=tmp_path_factory.mktemp("policies"), messageExpiryCheckIntervalInMinutes=0.1 / 60,
                      brokerDeleteInactiveTopicsEnabled=False) as b:
        yield b


def new_topic(admin: Admin, name: str = "t") -> tuple[str, str]:
    """A created topic in a fresh namespace: (namespace, topic)."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/{name}"
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}")
    return ns, topic


def receive_all(consumer: pulsar.Consumer, n: int) -> list[bytes]:
    """Receive and acknowledge n messages; their payloads in arrival order."""
    received = []
    for _ in range(n):
        msg = consumer.receive(10_000)
        received.append(msg.data())
        consumer.acknowledge(msg)
    return received


def receive_available(consumer: pulsar.Consumer, timeout_ms: int) -> list[bytes]:
    """Receive and acknowledge until nothing comes for ``timeout_ms``; the payloads."""
    received: list[bytes] = []
    while True:
        try:
            msg = consumer.receive(timeout_ms)
        except pulsar.Timeout:
            return received
        received.append(msg.data())
        consumer.acknowledge(msg)


def policy_path(topic: str, policy: str) -> str:
    return f"/admin/v2/{rest_path(topic)}/{policy}"


# A GET of a topic policy not set, as a Pulsar 4.0.7 standalone answers it (tests/admin/test_pulsar_shapes.py asks it
# every one): 200 with no body, 204 where its resource method is synchronous, false for schemaValidationEnforced.
UNSET_204 = {"maxConsumersPerSubscription", "maxSubscriptionsPerTopic", "subscriptionTypesEnabled", "publishRate",
             "maxMessageSize"}


def is_unset(reply: Reply, policy: str, changed: bool = False) -> bool:
    """``changed``: the topic's policies of that kind were changed before (Pulsar's TopicPolicies object exists: its
    subscriptionTypesEnabled is an empty list, no longer no content)."""
    if policy == "schemaValidationEnforced":
        return reply.status == 200 and reply.json is False
    if policy == "subscriptionTypesEnabled" and changed:
        return reply.status == 200 and reply.json == []
    return (reply.status, reply.body) == (204, b"") if policy in UNSET_204 else reply.unset


@pytest.mark.parametrize(("policy", "value", "namespace_path", "namespace_value", "broker_value"), [
    ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}, "retention",
     {"retentionTimeInMinutes": 5, "retentionSizeInMB": 1}, {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}),
    ("deduplicationEnabled", True, "deduplication", False, False),
    ("deduplicationSnapshotInterval", 30, "deduplicationSnapshotInterval", 600, 120),
    ("maxProducers", 3, "maxProducersPerTopic", 7, 0),
    ("maxConsumers", 3, "maxConsumersPerTopic", 7, 0),
    ("maxConsumersPerSubscription", 3, "maxConsumersPerSubscription", 7, 0),
    ("maxUnackedMessagesOnConsumer", 3, "maxUnackedMessagesPerConsumer", 7, 50000),
    ("maxUnackedMessagesOnSubscription", 3, "maxUnackedMessagesPerSubscription", 7, 200000),
    ("maxSubscriptionsPerTopic", 3, "maxSubscriptionsPerTopic", 7, 0),
    ("subscriptionTypesEnabled", ["Shared", "Key_Shared"], "subscriptionTypesEnabled", ["Failover"],
     ["Exclusive", "Shared", "Failover", "Key_Shared"]),
    ("compactionThreshold", 1024, "compactionThreshold", 2048, 0),
    ("autoSubscriptionCreation", {"allowAutoSubscriptionCreation": False}, "autoSubscriptionCreation",
     {"allowAutoSubscriptionCreation": True}, {"allowAutoSubscriptionCreation": True}),
    ("schemaValidationEnforced", True, "schemaValidationEnforced", False, False),
    ("inactiveTopicPolicies",
     {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up", "maxInactiveDurationSeconds": 5,
      "deleteWhileInactive": True}, "inactiveTopicPolicies",
     {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 9,
      "deleteWhileInactive": True},
     {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 60,
      "deleteWhileInactive": False}),
])
def test_set_get_applied_and_remove(admin: Admin, policy: str, value: object, namespace_path: str,
                                    namespace_value: object, broker_value: object) -> None:
    ns, topic = new_topic(admin)
    path = policy_path(topic, policy)
    assert is_unset(admin.get(path), policy)  # nothing at topic level
    assert admin.ok("GET", path + "?applied=true") == broker_value
    method = "PUT" if namespace_path == "compactionThreshold" else "POST"  # (Pulsar's verbs)
    admin.ok(method, f"{NS}/{ns}/{namespace_path}", namespace_value)
    assert admin.ok("GET", path + "?applied=true") == namespace_value
    assert admin.post(path, value).status == 204
    assert admin.ok("GET", path) == value
    assert admin.ok("GET", path + "?applied=true") == value
    if policy == "schemaValidationEnforced":  # (Pulsar 4.0.7 has no DELETE of it: 405, the value kept)
        assert admin.delete(path).status == 405
        assert admin.ok("GET", path) == value
        return
    assert admin.delete(path).status == 204
    assert is_unset(admin.get(path), policy, changed=True)
    assert admin.ok("GET", path + "?applied=true") == namespace_value


def test_deduplication_snapshot_interval(tmp_path: Path) -> None:
    # Three messages are far fewer than the 1000 entries between snapshots: the deduplication
    # state is snapshotted anyway once the topic's interval (1 s) has passed, and a restart finds it.
    with BrokerThread(data_dir=tmp_path, brokerDeduplicationSnapshotFrequencyInSeconds=1) as broker:
        admin = Admin(broker.web_url)
        ns, topic = new_topic(admin, "dedup-snapshots")
        ns_path = f"{NS}/{ns}/deduplicationSnapshotInterval"
        assert admin.post(ns_path, -1).status == 412
        admin.ok("POST", ns_path, 3600)
        assert admin.ok("GET", ns_path) == 3600
        assert admin.call("POST", ns_path, raw=b"null").status == 204  # Pulsar's admin client removes so
        assert admin.get(ns_path).unset
        assert admin.post(policy_path(topic, "deduplicationSnapshotInterval"), -1).status == 412
        admin.ok("POST", policy_path(topic, "deduplicationSnapshotInterval"), 1)
        admin.ok("POST", policy_path(topic, "deduplicationEnabled"), True)
        client = pulsar.Client(broker.service_url)
        try:
            producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
            for seq in range(3):
                producer.send(b"m%d" % seq, sequence_id=seq)
            loaded = broker.server.service.topics[TopicName.parse(topic).full]

            def snapshotted() -> bool:
                cursor = loaded.dedup.cursor
                return (cursor is not None and cursor.properties == {"p1": 2}
                        and cursor.mark_delete_position == loaded.ledger.last_confirmed_entry)

            wait_for(snapshotted, what="a snapshot by time")
        finally:
            client.close()


def test_message_ttl_is_a_query_parameter(admin: Admin) -> None:
    _, topic = new_topic(admin)
    path = policy_path(topic, "messageTTL")
    assert admin.post(path + "?messageTTL=120").status == 204
    assert admin.ok("GET", path) == 120
    assert admin.post(path + "?messageTTL=-1").status == 412
    assert admin.post(path + "?messageTTL=soon").status == 404  # (JAX-RS: a @QueryParam it cannot convert)
    assert admin.post(path).status == 204  # no value: removed, as in Pulsar
    assert admin.get(path).unset


def test_refusals(admin: Admin) -> None:
    ns, topic = new_topic(admin)
    cases = [
        ("maxProducers", -1, 412, "maxProducers must be 0 or more"),
        ("maxConsumers", -1, 412, "maxConsumers must be 0 or more"),
        ("maxConsumersPerSubscription", -1, 412, "Invalid value for maxConsumersPerSubscription"),
        ("compactionThreshold", -1, 412, "Invalid value for compactionThreshold"),
        ("maxUnackedMessagesOnConsumer", -1, 412, "maxUnackedNum must be 0 or more"),
        ("maxProducers", "3", 400, None),
        ("subscriptionTypesEnabled", ["Shared", "Broadcast"], 400, None),
        ("subscriptionTypesEnabled", "Shared", 400, None),
        ("deduplicationEnabled", "yes", 400, None),
        ("retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}, 400, None),
        ("inactiveTopicPolicies", {"inactiveTopicDeleteMode": "never"}, 400, None),
    ]
    for policy, body, status, reason in cases:
        reply = admin.post(policy_path(topic, policy), body)
        assert reply.status == status, (policy, body, reply.status, reply.body)
        if reason is not None:
            assert reply.reason == reason
    # Pulsar's checks before any policy: a partition's name, a topic that does not exist.
    reply = admin.get(policy_path(topic + "-partition-0", "maxProducers"))
    assert (reply.status, reply.reason) == (412, "Not allowed to set/get topic policy for a partition")
    reply = admin.get(policy_path(f"persistent://{ns}/missing", "maxProducers"))
    assert (reply.status, reply.reason) == (404, f"Topic persistent://{ns}/missing not found")
    # Retention must stay above the namespace's backlog quota.
    admin.ok("POST", f"{NS}/{ns}/backlogQuota", {"limitSize": 10 * 1024 * 1024, "policy": "producer_exception"})
    reply = admin.post(policy_path(topic, "retention"), {"retentionTimeInMinutes": 60, "retentionSizeInMB": 5})
    assert reply.status == 412


def test_topic_replication_clusters_keep_the_local_cluster(admin: Admin) -> None:
    # Pulsar 4.0.7's PersistentTopicsBase.internalSetReplicationClusters, for local topic policies: an empty or null
    # list, then "global", then a list without the local cluster (412 each), then each cluster (403 unknown, or not
    # allowed for the tenant). A topic leaves its cluster through its namespace's clusters only.
    other = f"other-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/v2/clusters/{other}", {"serviceUrl": "http://127.0.0.9:8080"})
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone", other]})
    ns = admin.new_namespace(tenant)
    topic = f"persistent://{ns}/t"
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}")
    path = policy_path(topic, "replication")
    for body, status, reason in (
            ([], 412, "ClusterIds should not be null or empty"),
            (None, 412, "ClusterIds should not be null or empty"),
            (["standalone", "global"], 412, "Cannot specify global in the list of replication clusters"),
            ([other], 412, "Can not remove local cluster from the local topic-level replication clusters policy"),
            (["standalone", "mars"], 403, "Invalid cluster id: mars")):
        reply = admin.post(path, body)
        assert (reply.status, reply.reason) == (status, reason), body
    assert admin.get(path).unset  # nothing was stored
    assert admin.post(path, [other, "standalone"]).status == 204
    assert admin.ok("GET", path) == [other, "standalone"]
    admin.ok("DELETE", f"/admin/v2/{rest_path(topic)}")
    admin.ok("DELETE", f"{NS}/{ns}")
    admin.ok("DELETE", f"/admin/v2/tenants/{tenant}")
    admin.ok("DELETE", f"/admin/v2/clusters/{other}")


def test_limits_apply_to_clients_and_to_every_partition(admin: Admin, client: pulsar.Client) -> None:
    ns, topic = new_topic(admin)
    admin.ok("POST", policy_path(topic, "maxProducers"), 1)
    admin.ok("POST", policy_path(topic, "maxConsumersPerSubscription"), 1)
    admin.ok("POST", policy_path(topic, "maxConsumers"), 2)
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    client.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Shared)
    client.subscribe(topic, "b")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "c")
    # Removing the topic's limit brings the namespace's back (here: none), then the broker's.
    admin.ok("DELETE", policy_path(topic, "maxProducers"))
    client.create_producer(topic).close()
    admin.ok("POST", f"{NS}/{ns}/maxProducersPerTopic", 1)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    # A partitioned topic's policy covers its partitions.
    partitioned = f"persistent://{ns}/p"
    admin.ok("PUT", f"/admin/v2/{rest_path(partitioned)}/partitions", 2)
    admin.ok("POST", policy_path(partitioned, "maxProducers"), 2)
    admin.ok("POST", f"{NS}/{ns}/maxProducersPerTopic", 0)
    producers = [client.create_producer(partitioned) for _ in range(2)]
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(partitioned)
    for p in producers:
        p.close()


def test_deduplication_and_ttl_at_topic_level(admin: Admin, client: pulsar.Client) -> None:
    _, topic = new_topic(admin, "dedup")
    admin.ok("POST", policy_path(topic, "deduplicationEnabled"), True)
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
    producer.send(b"first", sequence_id=5)
    producer.send(b"again", sequence_id=5)  # a duplicate: dropped
    producer.send(b"next", sequence_id=6)
    assert [consumer.receive(5000).data() for _ in range(2)] == [b"first", b"next"]
    # TTL: the topic's value, not the namespace's (none) or the broker's (none).
    _, ttl_topic = new_topic(admin, "ttl")
    admin.ok("POST", policy_path(ttl_topic, "messageTTL") + "?messageTTL=1")
    idle = client.subscribe(ttl_topic, "idle")
    sender = client.create_producer(ttl_topic)
    sender.send(b"old")
    wait_for(lambda: admin.stats(ttl_topic)["subscriptions"]["idle"]["msgBacklog"] == 0, what="TTL expiry")
    idle.close()


def test_retention_reaches_a_loaded_topic_at_once(admin: Admin, client: pulsar.Client,
                                                   pulsar_broker: BrokerThread) -> None:
    _, topic = new_topic(admin, "retention")
    client.create_producer(topic).send(b"x")
    loaded = pulsar_broker.server.service.topics[TopicName.parse(topic).full]
    admin.ok("POST", policy_path(topic, "retention"), {"retentionTimeInMinutes": 90, "retentionSizeInMB": -1})
    assert loaded.ledger.config.retention_time_s == 90 * 60
    assert loaded.ledger.config.retention_size_bytes == -1


def test_policies_survive_a_restart_and_go_with_their_topic(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        _, topic = new_topic(admin)
        admin.ok("POST", policy_path(topic, "maxProducers"), 4)
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        assert admin.ok("GET", policy_path(topic, "maxProducers")) == 4
        admin.ok("DELETE", f"/admin/v2/{rest_path(topic)}")
        admin.ok("PUT", f"/admin/v2/{rest_path(topic)}")
        assert admin.get(policy_path(topic, "maxProducers")).unset


def test_disabled_topic_level_policies_answer_405_and_are_ignored(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        _, topic = new_topic(admin)
        admin.ok("POST", policy_path(topic, "maxProducers"), 1)
    with BrokerThread(data_dir=tmp_path, topicLevelPoliciesEnabled=False) as broker:
        admin = Admin(broker.web_url)
        reply = admin.get(policy_path(topic, "maxProducers"))
        assert (reply.status, reply.reason) == (
            405, "Topic level policies is disabled, to enable the topic level policy and retry.")
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
        producers = [client.create_producer(topic) for _ in range(2)]  # the stored limit of 1 is ignored
        assert len(producers) == 2
        client.close()


def test_backlog_quotas_at_topic_level(admin: Admin, client: pulsar.Client) -> None:
    ns, topic = new_topic(admin, "quota")
    path = f"/admin/v2/{rest_path(topic)}"
    assert admin.ok("GET", f"{path}/backlogQuotaMap") == {}
    applied = admin.ok("GET", f"{path}/backlogQuotaMap?applied=true")
    assert set(applied) == {"destination_storage", "message_age"}  # the broker's defaults
    assert applied["destination_storage"]["limitSize"] == -1
    namespace_quota = {"limitSize": 1 << 30, "limitTime": -1, "policy": "producer_request_hold"}
    admin.ok("POST", f"{NS}/{ns}/backlogQuota", namespace_quota)
    assert admin.ok("GET", f"{path}/backlogQuotaMap?applied=true")["destination_storage"]["limitSize"] == 1 << 30
    # The topic's own quota wins: a backlog over 100 bytes now refuses new producers.
    consumer = client.subscribe(topic, "slow")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"x" * 100)
    quota = {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"}
    assert admin.post(f"{path}/backlogQuota?backlogQuotaType=destination_storage", quota).status == 204
    assert admin.ok("GET", f"{path}/backlogQuotaMap")["destination_storage"]["limitSize"] == 100
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    assert admin.delete(f"{path}/backlogQuota?backlogQuotaType=destination_storage").status == 204
    assert admin.ok("GET", f"{path}/backlogQuotaMap") == {}
    client.create_producer(topic).close()  # the namespace's 1 GiB quota again
    # Quota and retention must agree, whichever is set second (the namespace's quota counts too).
    retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}
    assert admin.post(f"{path}/retention", retention).status == 412  # below the namespace's 1 GiB quota
    admin.ok("DELETE", f"{NS}/{ns}/backlogQuota")
    admin.ok("POST", f"{path}/retention", retention)
    reply = admin.post(f"{path}/backlogQuota?backlogQuotaType=destination_storage",
                       {"limitSize": 2 << 20, "limitTime": -1, "policy": "producer_exception"})
    assert reply.status == 412
    assert admin.post(f"{path}/backlogQuota?backlogQuotaType=nope", quota).status == 400
    producer.close()
    consumer.close()


def test_max_unacked_messages_on_consumer(admin: Admin, client: pulsar.Client) -> None:
    _, topic = new_topic(admin, "unacked")
    admin.ok("POST", policy_path(topic, "maxUnackedMessagesOnConsumer"), 2)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(b"m%d" % i)

    def consumer_stats() -> dict[str, object]:
        return admin.stats(topic)["subscriptions"]["s"]["consumers"][0]  # type: ignore[no-any-return]

    # Two delivered, then the consumer is blocked until it acknowledges.
    wait_for(lambda: consumer_stats()["blockedConsumerOnUnackedMsgs"], what="the consumer to be blocked")
    assert consumer_stats()["unackedMessages"] == 2
    assert receive_all(consumer, 6) == [b"m%d" % i for i in range(6)]


def subscription_stats(admin: Admin, topic: str, sub: str = "s") -> dict[str, object]:
    return admin.stats(topic)["subscriptions"][sub]  # type: ignore[no-any-return]


def blocked_on_unacked(admin: Admin, client: pulsar.Client, topic: str, limit: int, messages: int,
                       consumers: int) -> list[pulsar.Consumer]:
    """Shared consumers of subscription "s" under maxUnackedMessagesOnSubscription ``limit``,
    once ``messages`` were published and the subscription is blocked holding ``limit`` of them."""
    admin.ok("POST", policy_path(topic, "maxUnackedMessagesOnSubscription"), limit)
    subscribed = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=100)
                  for _ in range(consumers)]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(messages):
        producer.send(b"m%d" % i)
    wait_for(lambda: subscription_stats(admin, topic)["blockedSubscriptionOnUnackedMsgs"],
             what="the subscription to be blocked")
    assert subscription_stats(admin, topic)["unackedMessages"] == limit
    return subscribed


def test_max_unacked_messages_on_subscription(admin: Admin, client: pulsar.Client) -> None:
    # Four delivered between the two consumers, then the subscription is blocked until acks bring
    # it down to two.
    _, topic = new_topic(admin, "sub-unacked")
    consumers = blocked_on_unacked(admin, client, topic, limit=4, messages=12, consumers=2)
    received: list[bytes] = []
    for _ in range(100):
        if len(received) == 12:
            break
        for c in consumers:
            received += receive_available(c, 100)
    assert sorted(received) == sorted(b"m%d" % i for i in range(12))
    wait_for(lambda: not subscription_stats(admin, topic)["blockedSubscriptionOnUnackedMsgs"],
             what="the subscription to be unblocked")


def test_max_unacked_messages_on_subscription_lifted_by_removing_the_policy(admin: Admin,
                                                                             client: pulsar.Client) -> None:
    _, topic = new_topic(admin, "sub-unacked-lifted")
    [consumer] = blocked_on_unacked(admin, client, topic, limit=2, messages=6, consumers=1)
    # Without the topic's limit the broker default (200000) applies: the rest goes out, unacked.
    path = policy_path(topic, "maxUnackedMessagesOnSubscription")
    assert admin.delete(path).status == 204
    assert admin.ok("GET", path + "?applied=true") == 200000
    wait_for(lambda: subscription_stats(admin, topic)["unackedMessages"] == 6, what="the rest to be delivered")
    assert not subscription_stats(admin, topic)["blockedSubscriptionOnUnackedMsgs"]
    assert [consumer.receive(10_000).data() for _ in range(6)] == [b"m%d" % i for i in range(6)]


@pytest.mark.parametrize(("policy", "field", "broker_default", "rate", "own", "stored_own", "refused"), [
    ("publishRate", "publishMaxMessageRate",
     {"publishThrottlingRateInMsg": 0, "publishThrottlingRateInByte": 0},
     {"publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": -1},
     {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 4096},
     {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 4096},
     [({"publishThrottlingRateInMsg": "fast"}, 400)]),
    ("subscribeRate", "clusterSubscribeRate",
     {"subscribeThrottlingRatePerConsumer": 0, "ratePeriodInSecond": 30},
     {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 10},
     {"subscribeThrottlingRatePerConsumer": 1},  # the period takes Pulsar's default
     {"subscribeThrottlingRatePerConsumer": 1, "ratePeriodInSecond": 30},
     [({"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 0}, 412),
      ({"subscribeThrottlingRatePerConsumer": "5"}, 400)]),
])
def test_cluster_rate_rest(admin: Admin, policy: str, field: str, broker_default: dict[str, int],
                           rate: dict[str, int], own: dict[str, object], stored_own: dict[str, int],
                           refused: list[tuple[dict[str, object], int]]) -> None:
    """Rates a namespace keeps per cluster, and the topic's own, with the broker's default under
    both."""
    ns, topic = new_topic(admin, f"{policy}-rest")
    ns_path, path = f"{NS}/{ns}/{policy}", policy_path(topic, policy)
    assert admin.get(ns_path).unset
    assert admin.ok("GET", path + "?applied=true") == broker_default
    assert admin.post(ns_path, rate).status == 204
    assert admin.ok("GET", ns_path) == rate
    assert admin.ok("GET", f"{NS}/{ns}")[field] == {"standalone": rate}
    assert admin.ok("GET", path + "?applied=true") == rate
    assert admin.post(path, own).status == 204
    assert admin.ok("GET", path) == stored_own
    assert admin.ok("GET", path + "?applied=true") == stored_own
    for body, status in refused:
        assert admin.post(path, body).status == status
    assert admin.delete(path).status == 204
    assert admin.delete(ns_path).status == 204
    assert admin.get(ns_path).unset
    assert admin.ok("GET", path + "?applied=true") == broker_default


def test_publish_rate_slows_producers_without_errors(admin: Admin, client: pulsar.Client) -> None:
    # 300 messages per second (a burst of 300): 700 messages take over a second, and the producer
    # is slowed by its socket not being read, never by an error.
    _, topic = new_topic(admin, "rate")
    admin.ok("POST", policy_path(topic, "publishRate"), {"publishThrottlingRateInMsg": 300})
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    results: list[object] = []
    for i in range(700):
        producer.send_async(b"m%d" % i, lambda res, _id: results.append(res))
    producer.flush()
    assert len(results) == 700 and set(results) == {pulsar.Result.Ok}
    assert [consumer.receive(5000).data() for _ in range(700)] == [b"m%d" % i for i in range(700)]
    assert admin.stats(topic)["publishRateLimitedTimes"] >= 1
    limited = [line for line in admin.get("/metrics").body.decode().splitlines()
               if line.startswith("pulsar_py_publish_rate_limited_total{") and f'topic="{topic}"' in line]
    assert len(limited) == 1 and float(limited[0].rsplit(" ", 1)[1]) >= 1
    producer.close()


def test_a_lifted_publish_rate_reads_the_held_connection_at_once(admin: Admin, client: pulsar.Client,
                                                                   pulsar_broker: BrokerThread) -> None:
    # 1 message per second, 40 sent at once: the connection is held for the 39 past the limit (39 s to pay back).
    # The policy removed, it is read again at once, not when that deficit would have been paid.
    _, topic = new_topic(admin, "lifted")
    admin.ok("POST", policy_path(topic, "publishRate"), {"publishThrottlingRateInMsg": 1})
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    for i in range(40):
        producer.send_async(b"m%d" % i, None)
    throttle = pulsar_broker.server.service.topics[topic].publish_throttle
    wait_for(lambda: throttle.paused == 1, what="the connection held by the topic's limit")
    admin.ok("DELETE", policy_path(topic, "publishRate"))
    assert throttle.paused == 0
    producer.flush()
    producer.close()


def test_dispatch_rate_rest(admin: Admin) -> None:
    ns, topic = new_topic(admin, "dispatch-rest")
    none = {"dispatchThrottlingRateInMsg": 0, "dispatchThrottlingRateInByte": 0, "ratePeriodInSecond": 1,
            "relativeToPublishRate": False}
    rate = {"dispatchThrottlingRateInMsg": 500, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 2,
            "relativeToPublishRate": False}
    for policy in ("dispatchRate", "subscriptionDispatchRate", "replicatorDispatchRate"):
        ns_path, path = f"{NS}/{ns}/{policy}", policy_path(topic, policy)
        assert admin.get(ns_path).unset
        assert admin.ok("GET", path + "?applied=true") == none
        assert admin.post(ns_path, rate).status == 204
        assert admin.ok("GET", ns_path) == rate
        assert admin.ok("GET", path + "?applied=true") == rate
        own = {**rate, "dispatchThrottlingRateInMsg": 5}
        assert admin.post(path, own).status == 204
        assert admin.ok("GET", path) == own
        assert admin.post(path, {**rate, "ratePeriodInSecond": 0}).status == 412
        assert admin.post(path, {**rate, "relativeToPublishRate": "no"}).status == 400
        assert admin.delete(path).status == 204
        assert admin.delete(ns_path).status == 204
    policies = admin.ok("GET", f"{NS}/{ns}")
    assert policies["topicDispatchRate"] == policies["subscriptionDispatchRate"] == {}
    assert policies["replicatorDispatchRate"] == {}


def test_subscription_level_dispatch_rate_rest(admin: Admin) -> None:
    """Pulsar's .../{topic}/{subName}/dispatchRate: one subscription's own rate, kept in TopicPolicies'
    subscriptionPolicies; ?applied=true without one gives the topic's subscriptionDispatchRate in force; a rate
    limiting neither measure changes nothing (DispatchRateImpl.normalize); removing the last of a subscription's
    policies drops its entry."""
    ns, topic = new_topic(admin, "sub-level-rate")
    path = policy_path(topic, "billing/dispatchRate")
    none = {"dispatchThrottlingRateInMsg": 0, "dispatchThrottlingRateInByte": 0, "ratePeriodInSecond": 1,
            "relativeToPublishRate": False}
    assert admin.get(path).unset
    assert admin.ok("GET", path + "?applied=true") == none
    topic_level = {**none, "dispatchThrottlingRateInMsg": 50}
    admin.ok("POST", policy_path(topic, "subscriptionDispatchRate"), topic_level)
    assert admin.ok("GET", path + "?applied=true") == topic_level
    own = {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": 1000, "ratePeriodInSecond": 2,
           "relativeToPublishRate": False}
    assert admin.post(path, own).status == 204
    assert admin.ok("GET", path) == own == admin.ok("GET", path + "?applied=true")
    assert admin.ok("GET", policy_path(topic, "other/dispatchRate") + "?applied=true") == topic_level
    assert admin.post(path, none).status == 204  # (neither measure limited: no change)
    assert admin.ok("GET", path) == own
    assert admin.post(path, {**own, "ratePeriodInSecond": 0}).status == 412
    assert admin.post(path, [1]).status == 400
    assert admin.delete(path).status == 204
    assert admin.get(path).unset
    stored = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/subscriptionDispatchRate")
    assert stored == topic_level  # (the topic's own subscriptionDispatchRate is untouched)
    missing = f"persistent://{ns}/never-made"
    assert admin.get(policy_path(missing, "billing/dispatchRate")).status == 404
    # A subscription named dispatchRate is the subscription routes' (their literal segment wins, as in JAX-RS).
    admin.ok("PUT", policy_path(topic, "subscription/dispatchRate"))
    assert "dispatchRate" in admin.ok("GET", policy_path(topic, "subscriptions"))
    assert admin.delete(policy_path(topic, "subscription/dispatchRate")).status == 204
    assert "dispatchRate" not in admin.ok("GET", policy_path(topic, "subscriptions"))
    # The subscription here is read as the topic is (PersistentTopics.setSubscriptionLevelDispatchRate: subName
    # @Encoded, then Codec.decode once): "+" a space, "%2B" a "+"; so "s+b%2Bc" and "s%20b%2Bc" are both "s b+c".
    assert admin.post(policy_path(topic, "s+b%2Bc/dispatchRate"), own).status == 204
    assert admin.ok("GET", policy_path(topic, "s%20b%2Bc/dispatchRate")) == own
    assert admin.get(policy_path(topic, "s%2Bb%252Bc/dispatchRate")).unset  # (not "s b+c" twice decoded)


def test_subscription_level_dispatch_rate_limits_only_that_subscription(
        admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    """One subscription's own rate (2 messages an hour) throttles it alone: the topic's other subscription
    gets the whole backlog; removing the rate lets the first have the rest."""
    _, topic = new_topic(admin, "sub-level-enforced")
    path = policy_path(topic, "slow/dispatchRate")
    admin.ok("POST", path, {"dispatchThrottlingRateInMsg": 2, "ratePeriodInSecond": 3600})
    slow = client.subscribe(topic, "slow", receiver_queue_size=100)
    fast = client.subscribe(topic, "fast", receiver_queue_size=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(b"m%d" % i)
    assert receive_all(fast, 6) == [b"m%d" % i for i in range(6)]
    assert receive_all(slow, 2) == [b"m0", b"m1"]
    subscriptions = pulsar_broker.server.service.topics[TopicName.parse(topic).full].subscriptions
    rate = subscriptions["slow"].dispatch_rates[1]
    wait_for(lambda: rate.throttled_times > 0, what="the slow subscription to be throttled")
    assert subscriptions["fast"].dispatch_rates[1].throttled_times == 0
    assert admin.delete(path).status == 204
    assert receive_all(slow, 4) == [b"m%d" % i for i in range(2, 6)]
    for c in (slow, fast, producer):
        c.close()


def test_removing_a_slow_dispatch_rate_resumes_delivery_within_a_second(
        admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    # 2 messages an hour: the dispatcher's next budget is half an hour away, but it asks again
    # every second, so the rest comes once the limit is removed.
    _, topic = new_topic(admin, "dispatch-slow")
    path = policy_path(topic, "subscriptionDispatchRate")
    admin.ok("POST", path, {"dispatchThrottlingRateInMsg": 2, "ratePeriodInSecond": 3600})
    consumer = client.subscribe(topic, "s", receiver_queue_size=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(b"m%d" % i)
    assert receive_all(consumer, 2) == [b"m0", b"m1"]
    rate = pulsar_broker.server.service.topics[TopicName.parse(topic).full].subscriptions["s"].dispatch_rates[1]
    wait_for(lambda: rate.throttled_times > 0, what="the dispatcher to be throttled")
    assert admin.delete(path).status == 204
    assert receive_all(consumer, 4) == [b"m%d" % i for i in range(2, 6)]
    consumer.close()
    producer.close()


def test_subscribe_rate_refuses_a_consumer_subscribing_again(admin: Admin, pulsar_broker: BrokerThread) -> None:
    _, topic = new_topic(admin, "subscribe-wire")
    admin.ok("POST", policy_path(topic, "subscribeRate"),
             {"subscribeThrottlingRatePerConsumer": 1, "ratePeriodInSecond": 600})

    def subscribe(consumer_id: int, request_id: int) -> pb.BaseCommand:
        return subscribe_cmd(topic, "s", consumer_id, request_id, pb.CommandSubscribe.Shared, consumer_name="same")

    async def scenario() -> None:
        c = await WireClient.open(pulsar_broker.server.port)
        await c.connect()
        c.send(subscribe(1, 1))
        assert (await c.recv()).type == T.SUCCESS
        close = pb.BaseCommand(type=T.CLOSE_CONSUMER)
        close.close_consumer.consumer_id, close.close_consumer.request_id = 1, 2
        c.send(close)
        assert (await c.recv()).type == T.SUCCESS
        c.send(subscribe(1, 3))  # the same consumer again within the period
        reply = await c.recv()
        assert reply.type == T.ERROR and reply.error.error == pb.ServerError.NotAllowedError
        assert reply.error.message == "Subscribe limited by subscribe rate limit per consumer."
        c.send(subscribe(2, 4))  # another consumer id is another consumer
        assert (await c.recv()).type == T.SUCCESS
        c.close()

    pulsar_broker.run_coroutine(scenario())


def test_subscribe_rate_holds_back_a_reconnecting_consumer(admin: Admin, pulsar_broker: BrokerThread) -> None:
    _, topic = new_topic(admin, "subscribe-reconnect")
    path = policy_path(topic, "subscribeRate")
    admin.ok("POST", path, {"subscribeThrottlingRatePerConsumer": 1, "ratePeriodInSecond": 600})
    client = pulsar.Client(pulsar_broker.service_url)
    try:
        consumer = client.subscribe(topic, "s")
        server = pulsar_broker.server

        async def drop_connection() -> None:
            transport = next(c for c in server.connections if c.cnx.consumers).transport
            assert transport is not None
            transport.abort()

        pulsar_broker.run_coroutine(drop_connection())
        # The client comes back with the same consumer: refused (it keeps retrying) until the
        # limit is lifted.
        limiter = server.service.topics[TopicName.parse(topic).full].subscribe_rate
        wait_for(lambda: limiter.refused >= 1, what="the reconnect to be refused")
        assert admin.delete(path).status == 204
        producer = client.create_producer(topic)
        producer.send(b"back")
        assert consumer.receive(20_000).data() == b"back"
    finally:
        client.close()


@pytest.mark.parametrize("subscription_type", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Shared])
def test_dispatch_rate_paces_delivery_in_order(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread,
                                               subscription_type: pulsar.ConsumerType) -> None:
    # 200 messages per second for the subscription: a backlog of 500 comes in over more than a
    # second, all of it, in order, with the dispatcher putting reads off rather than reading more.
    _, topic = new_topic(admin, "dispatch")
    admin.ok("POST", policy_path(topic, "subscriptionDispatchRate"), {"dispatchThrottlingRateInMsg": 200})
    client.subscribe(topic, "s", consumer_type=subscription_type).close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(500):
        producer.send_async(b"m%d" % i, None)
    producer.flush()
    consumer = client.subscribe(topic, "s", consumer_type=subscription_type, receiver_queue_size=1000)
    assert receive_all(consumer, 500) == [b"m%d" % i for i in range(500)]
    sub = pulsar_broker.server.service.topics[TopicName.parse(topic).full].subscriptions["s"]
    assert sub.dispatch_rates[1].throttled_times >= 1
    consumer.close()
    producer.close()


def test_reads_cut_by_dispatch_limits_are_counted_by_kind(admin: Admin, client: pulsar.Client,
                                                          pulsar_broker: BrokerThread) -> None:
    # The subscription's limit on messages and the topic's on bytes (far above what flows, but below the
    # dispatcher's own 5 MB read size) each cut the reads: Pulsar's dispatch_throttled events, by kind.
    _, topic = new_topic(admin, "throttled-events")
    admin.ok("POST", policy_path(topic, "subscriptionDispatchRate"), {"dispatchThrottlingRateInMsg": 200})
    admin.ok("POST", policy_path(topic, "dispatchRate"), {"dispatchThrottlingRateInByte": 1_000_000})
    client.subscribe(topic, "s").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(300):
        producer.send_async(b"m%d" % i, None)
    producer.flush()
    consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
    assert receive_all(consumer, 300) == [b"m%d" % i for i in range(300)]
    text = admin.get("/metrics").body.decode()

    def events(measure: str, reason: str) -> float:
        prefix = f"pulsar_subscription_dispatch_throttled_{measure}_events{{"
        rows = [line for line in text.splitlines() if line.startswith(prefix) and f'topic="{topic}"' in line
                and 'subscription="s"' in line and f'reason="{reason}"' in line]
        assert len(rows) == 1, (measure, reason, rows)
        return float(rows[0].rsplit(" ", 1)[1])

    assert events("msg", "subscription") >= 1 and events("msg", "topic") == 0 and events("msg", "broker") == 0
    assert events("bytes", "topic") >= 1 and events("bytes", "subscription") == 0
    consumer.close()
    producer.close()


def test_dispatch_rate_relative_to_publish_rate_follows_the_producers(
        admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    # 5 messages a second on top of the publish rate: a consumer keeps up with producers that
    # publish far faster than 5 a second.
    _, topic = new_topic(admin, "relative")
    admin.ok("POST", policy_path(topic, "subscriptionDispatchRate"),
             {"dispatchThrottlingRateInMsg": 5, "relativeToPublishRate": True})
    consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=False)
    rate = pulsar_broker.server.service.topics[TopicName.parse(topic).full].subscriptions["s"].dispatch_rates[1]
    sent = 0
    received: list[bytes] = []

    def caught_up() -> bool:
        nonlocal sent
        for _ in range(20):  # keep publishing while the limiter measures the rate
            producer.send(b"m%d" % sent)
            sent += 1
        received.extend(receive_available(consumer, 200))
        return rate.limits[0] > 5 and len(received) == sent

    wait_for(caught_up, timeout=30, what="the consumer to keep up under a limit that follows the producers")
    assert rate.relative and rate.publish_rate[0] > 0
    assert received == [b"m%d" % i for i in range(sent)]
    consumer.close()
    producer.close()


def test_replicator_dispatch_rate_relative_to_publish_rate_follows_the_producers(
        admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    # relativeToPublishRate on replicatorDispatchRate raises the replicator's limit by the topic's publish
    # rate, as for a subscription (Pulsar's DispatchRateLimiter is the same for both kinds: its rate function
    # adds the topic's publish rate). The replicator's limit used to ignore the flag and stay at 5 a second.
    _, topic = new_topic(admin, "relative-replicator")
    admin.ok("POST", policy_path(topic, "replicatorDispatchRate"),
             {"dispatchThrottlingRateInMsg": 5, "relativeToPublishRate": True})
    producer = client.create_producer(topic, batching_enabled=False)
    persistent = pulsar_broker.server.service.topics[TopicName.parse(topic).full]
    # A replicator to a cluster that is not there (never started): only its limit is looked at.
    rate = PersistentReplicator(persistent, "elsewhere", None).dispatch_rate  # type: ignore[arg-type]
    assert rate.budget() is not None and rate.relative
    sent = 0

    def limit_raised() -> bool:
        nonlocal sent
        for _ in range(20):  # keep publishing while the limiter measures the rate
            producer.send(b"m%d" % sent)
            sent += 1
        rate.budget()
        return rate.limits[0] > 5

    wait_for(limit_raised, timeout=30, what="the replicator's limit to follow the producers")
    producer.close()


def test_max_subscriptions_per_topic(admin: Admin, client: pulsar.Client) -> None:
    ns, topic = new_topic(admin, "subs")
    admin.ok("POST", policy_path(topic, "maxSubscriptionsPerTopic"), 2)
    client.subscribe(topic, "a").close()
    client.subscribe(topic, "b").close()
    client.subscribe(topic, "a").close()  # an existing one is always fine
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "c")
    reply = admin.put(f"/admin/v2/{rest_path(topic)}/subscription/c")
    assert reply.status == 412 and "maximum number of subscriptions" in reply.reason
    reader = client.create_reader(topic, pulsar.MessageId.earliest)  # readers are not counted
    reader.close()
    admin.ok("DELETE", policy_path(topic, "maxSubscriptionsPerTopic"))
    admin.ok("POST", f"{NS}/{ns}/maxSubscriptionsPerTopic", 3)
    client.subscribe(topic, "c").close()
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "d")


def test_subscription_types_enabled(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    ns, topic = new_topic(admin, "types")
    admin.ok("POST", f"{NS}/{ns}/subscriptionTypesEnabled", ["Exclusive", "Failover"])
    assert admin.ok("GET", f"{NS}/{ns}")["subscription_types_enabled"] == ["Exclusive", "Failover"]
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    client.subscribe(topic, "failover", consumer_type=pulsar.ConsumerType.Failover).close()
    # The topic's own set wins; a refused consumer leaves no subscription behind.
    admin.ok("POST", policy_path(topic, "subscriptionTypesEnabled"), ["Shared"])
    client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared).close()
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "exclusive")
    assert sorted(admin.ok("GET", f"/admin/v2/{rest_path(topic)}/subscriptions")) == ["failover", "shared"]

    async def scenario() -> None:
        c = await WireClient.open(pulsar_broker.server.port)
        await c.connect()
        c.send(subscribe_cmd(topic, "ks", sub_type=pb.CommandSubscribe.Key_Shared))
        reply = await c.recv()
        assert reply.type == T.ERROR and reply.error.error == pb.ServerError.NotAllowedError
        assert reply.error.message == f"Topic[{{{topic}}}] doesn't support Key_Shared sub type!"
        c.close()

    pulsar_broker.run_coroutine(scenario())
    # An empty set is no set: the namespace's applies again.
    admin.ok("POST", policy_path(topic, "subscriptionTypesEnabled"), [])
    client.subscribe(topic, "exclusive").close()


def test_key_shared_disabled_by_broker(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path, subscriptionKeySharedEnable=False) as b:
        client = pulsar.Client(b.service_url)
        try:
            with pytest.raises(pulsar.NotAllowedError):
                client.subscribe("ks", "s", consumer_type=pulsar.ConsumerType.KeyShared)
            client.subscribe("ks", "s", consumer_type=pulsar.ConsumerType.Shared).close()
        finally:
            client.close()


def test_bad_subscription_types_setting_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="subscriptionTypesEnabled"):
        with BrokerThread(data_dir=tmp_path, subscriptionTypesEnabled=["Exclusive", "Broadcast"]):
            pass


def test_auto_subscription_creation(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    ns, topic = new_topic(admin, "autosub")
    client.subscribe(topic, "existing").close()
    admin.ok("POST", f"{NS}/{ns}/autoSubscriptionCreation", {"allowAutoSubscriptionCreation": False})
    assert admin.ok("GET", f"{NS}/{ns}")["autoSubscriptionCreationOverride"] == {
        "allowAutoSubscriptionCreation": False}

    async def refused() -> None:
        # (The official client takes SubscriptionNotFound as temporary and retries until its
        # operation timeout, as against Pulsar: the answer is checked on the wire.)
        c = await WireClient.open(pulsar_broker.server.port)
        await c.connect()
        c.send(subscribe_cmd(topic, "new"))
        reply = await c.recv()
        assert reply.type == T.ERROR and reply.error.error == pb.ServerError.SubscriptionNotFound
        c.close()

    pulsar_broker.run_coroutine(refused())
    client.subscribe(topic, "existing").close()  # an existing subscription is always fine
    client.create_reader(topic, pulsar.MessageId.earliest).close()  # readers create nothing durable
    # The topic's override wins over its namespace's.
    admin.ok("POST", policy_path(topic, "autoSubscriptionCreation"), {"allowAutoSubscriptionCreation": True})
    client.subscribe(topic, "new").close()
    assert admin.post(f"{NS}/{ns}/autoSubscriptionCreation", {"allowAutoSubscriptionCreation": "no"}).status == 400


def test_topic_schema_compatibility_and_validation(admin: Admin, client: pulsar.Client) -> None:
    ns, topic = new_topic(admin, "schema")
    path = policy_path(topic, "schemaCompatibilityStrategy")
    assert admin.get(path).unset
    assert admin.ok("GET", path + "?applied=true") == "FULL"  # the broker's default
    admin.ok("PUT", f"{NS}/{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    assert admin.ok("GET", path + "?applied=true") == "ALWAYS_COMPATIBLE"
    assert admin.put(path, "SOMETIMES").status == 400
    assert admin.put(path, "ALWAYS_INCOMPATIBLE").status == 204
    assert admin.ok("GET", path) == "ALWAYS_INCOMPATIBLE"

    class Order(Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
        id = String()

    client.create_producer(topic, schema=pulsar.schema.StringSchema()).close()
    with pytest.raises(pulsar.IncompatibleSchema):  # the topic refuses any new version
        client.create_producer(topic, schema=AvroSchema(Order))
    assert admin.delete(path).status == 204  # the namespace's ALWAYS_COMPATIBLE again
    client.create_producer(topic, schema=AvroSchema(Order)).close()
    # schemaValidationEnforced for this topic only: a producer without a schema is refused.
    admin.ok("POST", policy_path(topic, "schemaValidationEnforced"), True)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic)
    _, other = new_topic(admin, "schema-other")
    client.create_producer(other, schema=pulsar.schema.StringSchema()).close()
    client.create_producer(other).close()  # its namespace does not enforce


def test_delayed_delivery_policies(admin: Admin, client: pulsar.Client) -> None:
    ns, topic = new_topic(admin, "delayed")
    ns_path, path = f"{NS}/{ns}/delayedDelivery", policy_path(topic, "delayedDelivery")
    assert admin.get(ns_path).unset
    assert admin.ok("GET", path + "?applied=true") == {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}
    assert admin.post(ns_path, {"active": "yes"}).status == 400
    assert admin.post(ns_path, {"active": True, "maxDeliveryDelayInMillis": -5}).status == 412
    # Off for the topic: a message delayed by an hour is delivered at once.
    admin.ok("POST", path, {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0})
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"later", deliver_after=timedelta(hours=1))
    assert consumer.receive(10_000).data() == b"later"
    # A maximum delay: one within it is held (one beyond it is refused: see the wire test below;
    # the official client answers a SendError by reconnecting and sending again, as with Pulsar).
    admin.ok("POST", path, {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 60_000})
    producer.send(b"soon", deliver_after=timedelta(milliseconds=300))
    producer.send(b"now")
    assert [consumer.receive(10_000).data() for _ in range(2)] == [b"now", b"soon"]
    admin.ok("DELETE", path)
    admin.ok("POST", ns_path, {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0})
    assert admin.ok("GET", path + "?applied=true")["maxDeliveryDelayInMillis"] == 0


def test_a_message_delayed_past_the_maximum_is_refused(admin: Admin, pulsar_broker: BrokerThread) -> None:
    _, topic = new_topic(admin, "too-late")
    admin.ok("POST", policy_path(topic, "delayedDelivery"),
             {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 60_000})

    async def scenario() -> None:
        c = await WireClient.open(pulsar_broker.server.port)
        await c.connect()
        c.send(producer_cmd(topic))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.send(*send_frame(1, 0, b"x", deliver_at_time=1 + 5 * 60_000))  # (publish_time is 1)
        reply = await c.recv()
        assert reply.type == T.SEND_ERROR and reply.send_error.error == pb.ServerError.NotAllowedError
        assert reply.send_error.message == "Exceeds max allowed delivery delay of 60000 milliseconds"
        c.send(*send_frame(1, 1, b"y", deliver_at_time=1 + 30_000))
        assert (await c.recv()).type == T.SEND_RECEIPT
        c.close()

    pulsar_broker.run_coroutine(scenario())


def test_persistence_policies(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    ns, topic = new_topic(admin, "persistence")
    ns_path, path = f"{NS}/{ns}/persistence", policy_path(topic, "persistence")
    assert admin.get(ns_path).unset and admin.get(path).unset
    reply = admin.post(ns_path, {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1})
    assert reply.status == 400 and reply.reason == "Bookkeeper Ensemble (1) >= WriteQuorum (2) >= AckQuorum (1)"
    assert admin.post(ns_path, {"bookkeeperEnsemble": 6, "bookkeeperWriteQuorum": 1,
                                "bookkeeperAckQuorum": 1}).status == 400
    assert admin.post(ns_path, {"managedLedgerMaxMarkDeleteRate": -1}).status == 412
    client.subscribe(topic, "s").close()  # loaded, with a durable cursor
    ledger = pulsar_broker.server.service.topics[TopicName.parse(topic).full].ledger
    assert ledger.config.mark_delete_rate is None  # the broker's managedLedgerDefaultMarkDeleteRateLimit
    every = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
             "managedLedgerMaxMarkDeleteRate": 0.0}
    assert admin.post(ns_path, every).status == 204
    assert admin.ok("GET", ns_path) == every
    assert ledger.config.mark_delete_rate == 0.0  # reached the loaded topic at once
    assert admin.post(path, {**every, "managedLedgerMaxMarkDeleteRate": 5}).status == 204
    assert admin.ok("GET", path)["managedLedgerMaxMarkDeleteRate"] == 5.0
    assert ledger.config.mark_delete_rate == 5.0  # the topic's wins
    assert isinstance(ledger, FileManagedLedger)  # (the broker's default storage)
    assert ledger._persistence._interval == 0.2  # what the cursor writer waits at most
    assert admin.delete(path).status == 204 and admin.delete(ns_path).status == 204
    assert ledger.config.mark_delete_rate is None


def test_topic_max_message_size(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    _, topic = new_topic(admin, "max-size")
    path = policy_path(topic, "maxMessageSize")
    assert admin.ok("GET", path + "?applied=true") == 5 * 1024 * 1024  # the broker's
    assert admin.post(path, 6 * 1024 * 1024).status == 412  # above the broker's
    assert admin.post(path, -1).status == 412
    assert admin.post(path, 1000).status == 204
    assert admin.ok("GET", path + "?applied=true") == 1000

    async def scenario() -> None:
        c = await WireClient.open(pulsar_broker.server.port)
        await c.connect()
        c.send(producer_cmd(topic))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.send(*send_frame(1, 0, b"x" * 2000))
        reply = await c.recv()
        assert reply.type == T.SEND_ERROR and reply.send_error.error == pb.ServerError.NotAllowedError
        assert reply.send_error.message == "Exceed maximum message size"
        c.send(*send_frame(1, 1, b"x" * 900))
        assert (await c.recv()).type == T.SEND_RECEIPT
        c.close()

    pulsar_broker.run_coroutine(scenario())
    # Without the topic's limit the broker's applies again; the official client sends under it.
    assert admin.delete(path).status == 204
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"x" * 2000)
    producer.close()


def test_non_persistent_topic_policies(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"non-persistent://{ns}/live"
    path = f"/admin/v2/non-persistent/{ns}/live/maxProducers"
    assert admin.get(path).status == 404  # a non-persistent topic exists while it has clients
    first = client.create_producer(topic)
    assert admin.post(path, 1).status == 204
    assert admin.ok("GET", path) == 1
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
