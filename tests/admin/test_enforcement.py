"""Policies enforced by the broker, end to end with the official client: message TTL (the
BrokerService's periodic expiry), backlog quotas (producer_exception, producer_request_hold,
consumer_backlog_eviction, by size and by age), per-namespace auto topic creation, retention."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.embedded import BrokerThread
from broker.topic_name import TopicName
from tests.admin.conftest import Admin
from tests.waiting import wait_for

NS = "/admin/v2/namespaces"
PAYLOAD = b"x" * 100


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    # Short housekeeping intervals so enforcement is observable within a test.
    with BrokerThread(messageExpiryCheckIntervalInMinutes=0.2 / 60, backlogQuotaCheckIntervalInSeconds=0.2,
                      statsUpdateFrequencyInSecs=0.5) as b:
        yield b


@pytest.fixture
def admin(broker: BrokerThread) -> Admin:
    return Admin(broker.web_url)


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
    yield c
    c.close()


def sub_stats(admin: Admin, topic: str, sub: str) -> dict[str, int]:
    return admin.stats(topic)["subscriptions"][sub]  # type: ignore[no-any-return]


def fill(client: pulsar.Client, topic: str, n: int) -> None:
    """Send up to ``n`` messages; stop early if a backlog quota (checked every 0.2 s by these
    brokers) blocks or holds the producer before the loop ends: the callers then wait for the
    state they need, never for this loop to have sent every message."""
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=3000)
    for _ in range(n):
        try:
            producer.send(PAYLOAD)
        except (pulsar.ProducerBlockedQuotaExceededException, pulsar.ProducerBlockedQuotaExceededError,
                pulsar.Timeout):
            break
    producer.close()


def test_message_ttl_expires_backlog(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/ttl"
    admin.ok("POST", f"{NS}/{ns}/messageTTL", 1)
    consumer = client.subscribe(topic, "slow")
    fill(client, topic, 5)
    assert sub_stats(admin, topic, "slow")["msgBacklog"] == 5
    stats = wait_for(lambda: (s := sub_stats(admin, topic, "slow"))["msgBacklog"] == 0 and s, what="TTL expiry")
    assert stats["totalMsgExpired"] == 5
    consumer.close()


def test_no_ttl_means_no_expiry(admin: Admin, client: pulsar.Client, broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/keep"
    client.subscribe(topic, "s").close()
    fill(client, topic, 3)
    task = broker.server.service.housekeeping.task("message-expiry")
    runs = task.runs
    wait_for(lambda: task.runs >= runs + 2, what="two expiry runs")
    assert sub_stats(admin, topic, "s")["msgBacklog"] == 3


def test_backlog_quota_producer_exception(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/quota-exc"
    admin.ok("POST", f"{NS}/{ns}/backlogQuota", {"limitSize": 1000, "policy": "producer_exception"})
    client.subscribe(topic, "lagging").close()
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=3000)
    for _ in range(20):  # ~2 KB of backlog, twice the quota
        try:
            producer.send(PAYLOAD)
        except (pulsar.ProducerBlockedQuotaExceededException, pulsar.Timeout):
            break  # the periodic check (every 0.2 s) blocked this producer before the loop ended
    wait_for(lambda: admin.stats(topic)["backlogSize"] > 1000, what="backlog over the quota")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)

    def send_refused() -> bool:
        try:
            producer.send(PAYLOAD)
        except pulsar.ProducerBlockedQuotaExceededException:
            return True
        except pulsar.Timeout:  # still reconnecting when the send timed out: try again
            return False
        return False

    # the periodic check disconnects the connected producer; its reconnect is refused, so sends fail
    wait_for(send_refused, what="send refused by the backlog quota")
    # consuming the backlog lifts the block
    admin.ok("POST", f"/admin/v2/persistent/{ns}/quota-exc/subscription/lagging/skip_all")
    client.create_producer(topic).send(b"accepted again")


def test_backlog_quota_producer_request_hold(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/quota-hold"
    admin.ok("POST", f"{NS}/{ns}/backlogQuota", {"limitSize": 500, "policy": "producer_request_hold"})
    client.subscribe(topic, "lagging").close()
    fill(client, topic, 10)
    wait_for(lambda: admin.stats(topic)["backlogSize"] > 500, what="backlog over the quota")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)


def test_backlog_quota_consumer_eviction_by_size(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/quota-evict"
    admin.ok("POST", f"{NS}/{ns}/backlogQuota", {"limitSize": 2000, "policy": "consumer_backlog_eviction"})
    client.subscribe(topic, "slow").close()
    client.subscribe(topic, "fast").close()
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/quota-evict/subscription/idle")
    fill(client, topic, 60)  # ~6 KB, three times the quota
    wait_for(lambda: admin.stats(topic)["backlogSize"] <= 2000, what="backlog evicted under the quota")
    # the oldest entries went; the newest stay for the subscription
    assert 0 < sub_stats(admin, topic, "slow")["msgBacklog"] < 60
    client.create_producer(topic).send(b"producers are never refused under eviction")
    metrics = topic_metrics(admin, topic)
    assert metrics[("pulsar_storage_backlog_quota_exceeded_evictions_total", "size")] >= 1
    assert metrics[("pulsar_storage_backlog_quota_exceeded_evictions_total", "time")] == 0
    assert metrics[("pulsar_storage_backlog_quota_limit", "")] == 2000
    assert metrics[("pulsar_storage_backlog_quota_limit_time", "")] == -1


def test_backlog_quota_eviction_by_age(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/quota-age"
    admin.ok("POST", f"{NS}/{ns}/backlogQuota?backlogQuotaType=message_age",
             {"limitTime": 1, "policy": "consumer_backlog_eviction"})
    client.subscribe(topic, "slow").close()
    fill(client, topic, 4)
    wait_for(lambda: sub_stats(admin, topic, "slow")["msgBacklog"] == 0, what="aged backlog evicted")
    metrics = topic_metrics(admin, topic)
    assert metrics[("pulsar_storage_backlog_quota_exceeded_evictions_total", "time")] >= 1
    assert metrics[("pulsar_storage_backlog_quota_limit_time", "")] == 1
    wait_for(lambda: topic_metrics(admin, topic)[("pulsar_storage_backlog_age_seconds", "")] == -1,
             what="no backlog age once nothing is left unacknowledged (next quota check)")


def test_a_time_quota_of_zero_seconds_sets_no_limit(broker: BrokerThread, admin: Admin) -> None:
    # Pulsar's checkTimeBacklogExceeded: a message_age limitTime of 0 or less is no limit (a size of 0 is one).
    ns = admin.new_namespace()
    admin.ok("POST", f"{NS}/{ns}/backlogQuota?backlogQuotaType=message_age",
             {"limitTime": 0, "policy": "consumer_backlog_eviction"})
    admin.ok("POST", f"{NS}/{ns}/backlogQuota?backlogQuotaType=destination_storage",
             {"limitSize": 0, "policy": "producer_request_hold"})
    quotas = broker.server.service.backlog_quotas
    name = TopicName.parse(f"persistent://{ns}/t")
    wait_for(lambda: quotas.quota(name, "destination_storage") is not None, what="the quotas in the broker's policies")
    assert quotas.quota(name, "message_age") is None


def test_backlog_age_metric_under_a_time_quota(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/quota-age-metric"
    admin.ok("POST", f"{NS}/{ns}/backlogQuota?backlogQuotaType=message_age",
             {"limitTime": 3600, "policy": "producer_request_hold"})
    client.subscribe(topic, "slow").close()
    fill(client, topic, 3)
    # Best effort, as in Pulsar: known from the next time-quota check on.
    wait_for(lambda: topic_metrics(admin, topic)[("pulsar_storage_backlog_age_seconds", "")] >= 0,
             what="pulsar_storage_backlog_age_seconds known")


def topic_metrics(admin: Admin, topic: str) -> dict[tuple[str, str], float]:
    """(family, quota_type label) -> value of one topic's series on /metrics."""
    with urllib.request.urlopen(f"{admin.web_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, s.labels.get("quota_type", "")): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.labels.get("topic") == topic}


def test_namespace_auto_topic_creation_partitioned(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    admin.ok("POST", f"{NS}/{ns}/autoTopicCreation",
             {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3})
    topic = f"persistent://{ns}/auto-parts"
    producer = client.create_producer(topic, batching_enabled=False,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    for i in range(6):
        producer.send(f"p{i}".encode())
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}/auto-parts/partitions") == {"partitions": 3, "deleted": False}
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}/partitioned") == [topic]
    listed = admin.ok("GET", f"/admin/v2/persistent/{ns}")
    assert listed == [f"{topic}-partition-{i}" for i in range(3)]
    admin.ok("POST", f"{NS}/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://{ns}/not-allowed")


def test_retention_policy_applies_to_loaded_topics(admin: Admin, client: pulsar.Client, broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    admin.ok("POST", f"{NS}/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 64})
    topic = f"persistent://{ns}/retained"
    client.create_producer(topic).send(b"x")
    from broker.service.topic import PersistentTopic
    from broker.topic_name import TopicName

    loaded = broker.server.service.get_topic_if_loaded(TopicName.parse(topic))
    assert isinstance(loaded, PersistentTopic)
    assert loaded.ledger.config.retention_time_s == -1
    assert loaded.ledger.config.retention_size_bytes == 64 * 1024 * 1024


def test_backlog_quota_not_held_back_by_the_deduplication_cursor(admin: Admin, client: pulsar.Client,
                                                                  broker: BrokerThread) -> None:
    """Deduplication's cursor is snapshotted every brokerDeduplicationEntriesInterval (1000) entries, so it
    trails the end of the log by up to that many entries. It is not a subscription: with every subscription
    caught up, the backlog quota must not block producers because of it (Pulsar's BacklogQuotaManager takes a
    deduplication snapshot when the slowest cursor is deduplication's, advanceSlowestSystemCursor)."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/quota-dedup"
    admin.ok("POST", f"{NS}/{ns}/deduplication", True)
    admin.ok("POST", f"{NS}/{ns}/backlogQuota", {"limitSize": 1000, "policy": "producer_exception"})
    consumer = client.subscribe(topic, "keeps-up")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=3000)
    for _ in range(30):  # ~3 KB written, every message consumed and acknowledged at once
        producer.send(PAYLOAD)
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    wait_for(lambda: sub_stats(admin, topic, "keeps-up")["msgBacklog"] == 0, what="subscription caught up")
    task = broker.server.service.housekeeping.task("backlog-quota-check")
    runs = task.runs
    wait_for(lambda: task.runs >= runs + 2, what="two backlog quota checks")
    # Under the quota (~3 KB without the snapshot): 0 when the snapshot came after the last message, or up to the
    # limit when a check during the loop took it (the subscription's grouped acks can put the topic over the limit
    # then, and that check disconnects the producer, which reconnects: a busy machine's timing).
    assert admin.stats(topic)["backlogSize"] < 1000
    producer.send(b"still accepted")  # not disconnected by the periodic check
    client.create_producer(topic).send(b"a new producer is accepted")
    consumer.close()


def test_message_ttl_leaves_the_deduplication_cursor_alone(admin: Admin, client: pulsar.Client,
                                                           broker: BrokerThread) -> None:
    """The TTL acknowledges on subscriptions (and replicators), never on deduplication's cursor (Pulsar's
    checkMessageExpiry goes over its subscriptions): that cursor's position must stay the one its saved
    sequence ids cover, or a broker that loads the topic again replays too little and lets resends in twice."""
    from broker.service.deduplication import DEDUP_CURSOR
    from broker.service.topic import PersistentTopic
    from broker.topic_name import TopicName

    ns = admin.new_namespace()
    topic = f"persistent://{ns}/ttl-dedup"
    admin.ok("POST", f"{NS}/{ns}/deduplication", True)
    admin.ok("POST", f"{NS}/{ns}/messageTTL", 1)
    client.subscribe(topic, "slow").close()
    producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
    for _ in range(5):
        producer.send(PAYLOAD)
    wait_for(lambda: sub_stats(admin, topic, "slow")["msgBacklog"] == 0, what="TTL expiry")
    loaded = broker.server.service.get_topic_if_loaded(TopicName.parse(topic))
    assert isinstance(loaded, PersistentTopic)
    task = broker.server.service.housekeeping.task("message-expiry")
    runs = task.runs
    wait_for(lambda: task.runs >= runs + 1, what="one more expiry run")
    cursor = loaded.ledger.cursors[DEDUP_CURSOR]
    if cursor.mark_delete_position == loaded.ledger.last_confirmed_entry:  # (a snapshot took it there)
        assert cursor.properties.get("p1") == 4
    producer.close()


def test_max_producers_does_not_count_replicator_producers(admin: Admin, client: pulsar.Client) -> None:
    """maxProducersPerTopic limits the producers of users: a remote cluster's replicator (a producer named
    pulsar.repl.<cluster>) is neither refused nor counted (Pulsar's isProducersExceeded: isRemote; its
    USER_CREATED_PRODUCER_COUNTER), or replication into a topic at its limit would stall."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/max-producers-repl"
    admin.ok("POST", f"{NS}/{ns}/maxProducersPerTopic", 1)
    user = client.create_producer(topic, producer_name="user-1")
    replicator = client.create_producer(topic, producer_name="pulsar.repl.east")  # the limit is reached: accepted
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="user-2")
    user.close()
    client.create_producer(topic, producer_name="user-3").close()  # the replicator holds no user's place
    replicator.close()


def send_batches(client: pulsar.Client, topic: str, batches: int, size: int) -> None:
    """``batches`` batches of ``size`` messages each ("0", "1", ... in order)."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=size,
                                      batching_max_publish_delay_ms=60_000)
    for b in range(batches):
        for i in range(size):
            producer.send_async(f"{b * size + i}".encode(), None)
        producer.flush()
    producer.close()


def test_consumer_blocked_on_unacked_resumes_after_batch_index_acks(admin: Admin, client: pulsar.Client) -> None:
    """A Shared consumer at maxUnackedMessagesPerConsumer is unblocked when acks bring its unacked count
    under half the limit, batch-index acks (part of a batch) included: Pulsar's Consumer.individualAckNormal
    subtracts the acked batch indexes and calls flowConsumerBlockedPermits. The acks lowered the count but
    dispatch was never re-planned: the consumer stayed blocked until some unrelated event."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/unacked-batch-index"
    admin.ok("POST", f"{NS}/{ns}/maxUnackedMessagesPerConsumer", 10)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                batch_index_ack_enabled=True)
    send_batches(client, topic, 2, 10)
    first = [consumer.receive(timeout_millis=10_000) for _ in range(10)]
    assert sorted(int(m.data()) for m in first) == list(range(10))
    wait_for(lambda: admin.stats(topic)["subscriptions"]["sub"]["consumers"][0]["blockedConsumerOnUnackedMsgs"],
             what="the consumer blocked at its limit")
    for m in first[:6]:  # 4 unacked left: under half the limit
        consumer.acknowledge(m)
    second = [consumer.receive(timeout_millis=10_000) for _ in range(10)]
    assert sorted(int(m.data()) for m in second) == list(range(10, 20))
    consumer.close()


def test_consumer_unacked_limit_change_reaches_a_live_consumer(admin: Admin, client: pulsar.Client) -> None:
    """A change of maxUnackedMessagesPerConsumer applies to the consumers already there (Pulsar's
    Consumer.getMaxUnackedMessages reads the topic's policies each time): a consumer blocked at the old
    limit gets the rest once the policy is removed, without acknowledging anything. It used to stay
    blocked until its dispatcher was made again."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/unacked-policy-change"
    admin.ok("POST", f"{NS}/{ns}/maxUnackedMessagesPerConsumer", 5)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(str(i).encode())
    first = [consumer.receive(timeout_millis=10_000) for _ in range(5)]
    wait_for(lambda: admin.stats(topic)["subscriptions"]["sub"]["consumers"][0]["blockedConsumerOnUnackedMsgs"],
             what="the consumer blocked at its limit")
    admin.ok("DELETE", f"{NS}/{ns}/maxUnackedMessagesPerConsumer")
    rest = [consumer.receive(timeout_millis=10_000) for _ in range(15)]
    assert sorted(int(m.data()) for m in first + rest) == list(range(20))
    assert not admin.stats(topic)["subscriptions"]["sub"]["consumers"][0]["blockedConsumerOnUnackedMsgs"]
    producer.close()
    consumer.close()
