"""Non-persistent topics with the official client: delivery per subscription type, nothing kept for
later, drops counted in stats and /metrics, partitioned topics, regex consumers, admin REST."""

from __future__ import annotations

import re
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin, rest_path
from tests.admin.test_metrics import samples, scrape
from tests.waiting import wait_for

TIMEOUT_MS = 10_000
# Long enough to prove a message is not coming; receive() blocks for it (no sleep).
NOTHING_MORE_MS = 300
Routing = pulsar.PartitionsRoutingMode


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    # A fast stats interval, so msgDropRate (a rate over the last interval) shows up quickly.
    with BrokerThread(statsUpdateFrequencyInSecs=0.2) as b:
        yield b


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    yield c
    c.close()


@pytest.fixture
def admin(broker: BrokerThread) -> Admin:
    return Admin(broker.web_url)


def np_topic(prefix: str) -> str:
    return f"non-persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


def receive_n(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    return [consumer.receive(TIMEOUT_MS) for _ in range(n)]


def assert_nothing_more(consumer: pulsar.Consumer) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(NOTHING_MORE_MS)


def sub_stats(admin: Admin, topic: str, sub: str) -> dict[str, object]:
    stats: dict[str, dict[str, dict[str, object]]] = admin.stats(topic)
    return stats["subscriptions"][sub]


def dropped_total(broker: BrokerThread, topic: str, sub: str) -> float:
    key = ("pulsar_py_subscription_msg_dropped_total",
           frozenset({"cluster": broker.server.config.clusterName, "namespace": "public/default",
                      "topic": topic, "subscription": sub}.items()))
    return samples(scrape(broker.web_url)).get(key, -1.0)


# -- delivery per subscription type -----------------------------------------------------------------

def test_exclusive_receives_live_messages_with_id_zero(client: pulsar.Client) -> None:
    topic = np_topic("np-excl")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(10)]
    # The receipt is (0,0) at once: nothing is stored.
    assert {(m.ledger_id(), m.entry_id()) for m in ids} == {(0, 0)}
    got = receive_n(consumer, 10)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    assert {(m.message_id().ledger_id(), m.message_id().entry_id(), m.message_id().partition())
            for m in got} == {(0, 0, -1)}
    assert_nothing_more(consumer)


def test_batches_are_delivered_and_unbatched_by_the_client(client: pulsar.Client) -> None:
    topic = np_topic("np-batch")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5,
                                      batching_max_publish_delay_ms=60_000)
    for i in range(10):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    assert sorted(m.data() for m in receive_n(consumer, 10)) == sorted(f"b{i}".encode() for i in range(10))


def test_shared_round_robin_over_two_consumers(client: pulsar.Client) -> None:
    topic = np_topic("np-shared")
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, consumer_name=f"c{i}")
                 for i in range(2)]
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    # Both consumers have permits, so round robin alternates: ten each.
    per_consumer = [receive_n(c, 10) for c in consumers]
    everything = sorted(m.data() for got in per_consumer for m in got)
    assert everything == sorted(f"m{i}".encode() for i in range(20))
    for c in consumers:
        assert_nothing_more(c)


def test_key_shared_keeps_each_key_on_one_consumer(client: pulsar.Client) -> None:
    topic = np_topic("np-keys")
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"k{i}")
                 for i in range(2)]
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(f"{i}".encode(), partition_key=f"key-{i % 8}")
    owner: dict[str, set[int]] = defaultdict(set)
    order: dict[str, list[int]] = defaultdict(list)
    received = 0
    for index, c in enumerate(consumers):
        while True:
            try:
                msg = c.receive(NOTHING_MORE_MS)
            except pulsar.Timeout:
                break
            owner[msg.partition_key()].add(index)
            order[msg.partition_key()].append(int(msg.data()))
            received += 1
    assert received == 40
    assert all(len(o) == 1 for o in owner.values()), owner
    assert all(seq == sorted(seq) for seq in order.values())
    assert len({next(iter(o)) for o in owner.values()}) == 2  # both consumers own keys


# Which of two AUTO_SPLIT consumers named A and B gets each of the keys k0..k39 on Apache Pulsar 4.0.7, for a
# persistent and a non-persistent topic alike (recorded from a live standalone).
PULSAR_AUTO_SPLIT_OWNERS = "ABBABAAAABBABBABBBBABBABABAABABABBABAAAB"
# Its Murmur3 hash is 0 modulo 65536: a STICKY selector gives it hash 1 (Pulsar keeps 0 for "no hash").
ZERO_HASH_KEY = "z198787"


def owners_of_keys(consumers: dict[str, pulsar.Consumer], n: int) -> dict[str, str]:
    """partition key -> name of the consumer that received it, for ``n`` messages."""
    owner: dict[str, str] = {}
    for name, c in consumers.items():
        while True:
            try:
                owner[c.receive(NOTHING_MORE_MS).partition_key()] = name
            except pulsar.Timeout:
                break
    assert len(owner) == n, owner
    return owner


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_key_shared_gives_each_key_to_the_consumer_pulsar_does(client: pulsar.Client, domain: str) -> None:
    """AUTO_SPLIT hashes keys and ring points into 1..65535 (murmur % 65535 + 1); STICKY into 0..65535 with 0
    made 1. Which consumer gets a key is what an application sees."""
    policy = pulsar.ConsumerKeySharedPolicy
    sticky = pulsar.KeySharedMode.Sticky
    topic = f"{domain}://public/default/ks-sticky-{uuid.uuid4().hex[:10]}"
    consumers = {name: client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name,
                                        key_shared_policy=policy(sticky, sticky_ranges=[ranges]))
                 for name, ranges in (("A", (0, 0)), ("B", (1, 65535)))}
    client.create_producer(topic).send(b"x", partition_key=ZERO_HASH_KEY)
    assert owners_of_keys(consumers, 1) == {ZERO_HASH_KEY: "B"}

    topic = f"{domain}://public/default/ks-auto-{uuid.uuid4().hex[:10]}"
    consumers = {name: client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name,
                                        key_shared_policy=policy())
                 for name in "AB"}
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"k{i}" for i in range(len(PULSAR_AUTO_SPLIT_OWNERS))]
    for k in keys:
        producer.send(k.encode(), partition_key=k)
    owner = owners_of_keys(consumers, len(keys))
    assert "".join(owner[k] for k in keys) == PULSAR_AUTO_SPLIT_OWNERS


def test_failover_delivers_to_the_active_consumer_only(client: pulsar.Client) -> None:
    topic = np_topic("np-failover")
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name=f"f{i}")
                 for i in range(2)]
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    # Non-partitioned: the first by name is active.
    got = receive_n(consumers[0], 10)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    assert_nothing_more(consumers[1])


def test_messages_without_a_consumer_are_not_kept(client: pulsar.Client) -> None:
    topic = np_topic("np-gone")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"before-{i}".encode())
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    for i in range(5):
        producer.send(f"after-{i}".encode())
    assert [m.data() for m in receive_n(consumer, 5)] == [f"after-{i}".encode() for i in range(5)]
    assert_nothing_more(consumer)


# -- drops --------------------------------------------------------------------------------------------

def test_a_consumer_without_permits_makes_drops_counted_in_stats(
        broker: BrokerThread, client: pulsar.Client, admin: Admin) -> None:
    topic = np_topic("np-drop")
    # One permit, and the application never receives: the client never grants more.
    consumer = client.subscribe(topic, "slow", receiver_queue_size=1)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    assert dropped_total(broker, topic, "slow") == 9  # the first took the only permit
    # The rate covers the last 0.2 s interval only: drops keep coming until a poll sees one (a busy machine
    # may poll less often than that).
    sent = [10]
    stop = threading.Event()

    def keep_dropping() -> None:
        while not stop.is_set():
            producer.send(b"more")
            sent[0] += 1
            stop.wait(0.02)

    sender = threading.Thread(target=keep_dropping, daemon=True)
    sender.start()
    try:
        stats = wait_for(lambda: s if (s := sub_stats(admin, topic, "slow"))["msgDropRate"] else None,
                         what="a drop rate in the subscription stats")
    finally:
        stop.set()
        sender.join()
    assert stats["msgBacklog"] == 0 and stats["type"] == "Exclusive"
    assert dropped_total(broker, topic, "slow") == sent[0] - 1
    topic_stats = admin.stats(topic)
    assert topic_stats["msgDropRate"] == 0.0  # Pulsar 4.0 never sets the topic's own rate
    assert topic_stats["msgInCounter"] == sent[0] and topic_stats["storageSize"] == 0
    assert [p["msgDropRate"] for p in topic_stats["publishers"]] == [0.0]
    assert consumer.receive(TIMEOUT_MS).data() == b"m0"


def test_key_shared_subscription_stats_name_the_mode(client: pulsar.Client, admin: Admin) -> None:
    """NonPersistentSubscription.getStats sets keySharedMode for a Key_Shared subscription."""
    topic = np_topic("np-ks-stats")
    client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
    client.subscribe(topic, "ex")
    assert sub_stats(admin, topic, "ks")["keySharedMode"] == "AUTO_SPLIT"
    assert "keySharedMode" not in sub_stats(admin, topic, "ex")


def test_a_batch_costs_one_permit_per_message(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = np_topic("np-batch-permits")
    consumer = client.subscribe(topic, "s", receiver_queue_size=5)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5,
                                      batching_max_publish_delay_ms=60_000)
    for i in range(10):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    # Two entries of five: the first uses all five permits, the second is dropped whole.
    assert dropped_total(broker, topic, "s") == 5
    assert [m.data() for m in receive_n(consumer, 5)] == [f"b{i}".encode() for i in range(5)]


# -- partitions, regex, admin -----------------------------------------------------------------------

def test_partitioned_non_persistent_topic(client: pulsar.Client, admin: Admin) -> None:
    topic = np_topic("np-part")
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/partitions", 3)
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, message_routing_mode=Routing.RoundRobinDistribution)
    for i in range(30):
        producer.send(f"p{i}".encode())
    got = receive_n(consumer, 30)
    assert sorted(m.data() for m in got) == sorted(f"p{i}".encode() for i in range(30))
    assert {m.topic_name() for m in got} == {f"{topic}-partition-{i}" for i in range(3)}
    assert {m.message_id().partition() for m in got} == {0, 1, 2}
    stats = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitioned-stats")
    assert stats["msgInCounter"] == 30 and stats["metadata"] == {"partitions": 3, "deleted": False}
    assert "msgDropRate" in stats and "msgDropRate" in stats["subscriptions"]["s"]


def test_regex_consumer_over_persistent_and_non_persistent_topics(client: pulsar.Client) -> None:
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    persistent = f"persistent://public/default/{prefix}-p"
    non_persistent = f"non-persistent://public/default/{prefix}-np"
    producers = {t: client.create_producer(t) for t in (persistent, non_persistent)}
    modes = {pulsar.RegexSubscriptionMode.AllTopics: {persistent, non_persistent},
             pulsar.RegexSubscriptionMode.PersistentOnly: {persistent},
             pulsar.RegexSubscriptionMode.NonPersistentOnly: {non_persistent}}
    consumers = {mode: client.subscribe(re.compile(f"public/default/{prefix}-.*"), f"sub-{i}",
                                        consumer_type=pulsar.ConsumerType.Shared, regex_subscription_mode=mode)
                 for i, mode in enumerate(modes)}
    for t, p in producers.items():
        for i in range(5):
            p.send(f"{t}-{i}".encode())
    for mode, expected in modes.items():
        got = receive_n(consumers[mode], 5 * len(expected))
        assert {m.topic_name() for m in got} == expected, mode
        assert_nothing_more(consumers[mode])


def test_admin_lists_live_topics_and_refuses_storage_operations(client: pulsar.Client, admin: Admin) -> None:
    topic = np_topic("np-admin")
    listing = "/admin/v2/non-persistent/public/default"
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "s")
    assert topic in admin.ok("GET", listing)
    assert topic not in admin.ok("GET", "/admin/v2/persistent/public/default")
    assert admin.ok("GET", f"/admin/v2/{rest_path(topic)}/subscriptions") == ["s"]
    assert admin.call("POST", f"/admin/v2/{rest_path(topic)}/subscription/s/skip_all").status == 405
    assert admin.ok("GET", f"/admin/v2/{rest_path(topic)}/internalStats")["cursors"] == {"s": {}}
    consumer.close()
    producer.close()
    # Nothing left on it: the topic goes (Pulsar garbage-collects it after a while).
    wait_for(lambda: topic not in admin.ok("GET", listing), what="the idle topic to go")
    assert admin.call("GET", f"/admin/v2/{rest_path(topic)}/stats").status == 404


# Apache Pulsar 4.0.7's answers over REST on a non-persistent topic (checked on a live standalone):
# operation -> (status, reason) on a topic that exists.
PULSAR_LIVE_TOPIC_ANSWERS = {
    ("PUT", "/subscription/s"): (400, "Create subscription on non-persistent topic can only be done through client"),
    ("POST", "/subscription/s/expireMessages/10"): (405, "Expire messages on a non-persistent topic is not allowed"),
    ("POST", "/all_subscription/expireMessages/10"):
        (405, "Expire messages for all subscriptions on a non-persistent topic is not allowed"),
    ("GET", "/subscription/s/position/1"): (405, "Peek messages on a non-persistent topic is not allowed"),
    ("POST", "/trim"): (405, "Trim on a non-persistent topic is not allowed"),
    ("GET", "/lastMessageId"): (405, "GetLastMessageId on a non-persistent topic is not allowed"),
    ("GET", "/examinemessage"): (405, "Examine messages on a non-persistent topic is not allowed"),
    ("GET", "/messageid/0"): (405, "Get message ID by timestamp on a non-persistent topic is not allowed"),
    ("POST", "/terminate"): (406, "Need to provide a persistent topic name"),
}
# ... and on one that does not exist: what Pulsar refuses before looking the topic up, else 404.
REFUSED_BEFORE_LOOKUP = {("PUT", "/subscription/s"), ("POST", "/trim"), ("POST", "/terminate")}


def test_admin_answers_on_a_live_topic_as_pulsar_does(client: pulsar.Client, admin: Admin) -> None:
    topic = np_topic("np-admin-answers")
    consumer = client.subscribe(topic, "s")
    base = f"/admin/v2/{rest_path(topic)}"
    missing = f"/admin/v2/{rest_path(np_topic('np-never'))}"
    for (method, path), (status, reason) in PULSAR_LIVE_TOPIC_ANSWERS.items():
        reply = admin.call(method, base + path)
        assert (reply.status, reply.reason) == (status, reason), (method, path)
        reply = admin.call(method, missing + path)
        assert reply.status == (status if (method, path) in REFUSED_BEFORE_LOOKUP else 404), (method, path)
    # What Pulsar does allow: the live subscription's properties, and a reset by time with nothing to move.
    assert admin.put(f"{base}/subscription/s/properties", {"a": "b"}).status == 204
    assert admin.ok("GET", f"{base}/subscription/s/properties") == {"a": "b"}
    assert admin.post(f"{base}/subscription/s/resetcursor/0").status == 204
    assert admin.post(f"{base}/subscription/other/resetcursor/0").status == 404
    assert admin.ok("GET", f"{base}/subscriptions") == ["s"]  # nothing was created
    consumer.close()


def test_seek_last_message_id_and_unsubscribe(client: pulsar.Client) -> None:
    topic = np_topic("np-misc")
    consumer = client.subscribe(topic, "s")
    consumer.seek(pulsar.MessageId.earliest)  # success, nothing to move (as in Pulsar)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    # GetLastMessageId is not supported here: UnknownError, raised at once, as with Pulsar 4.0.
    with pytest.raises(pulsar.UnknownError):
        reader.has_message_available()
    with pytest.raises(pulsar.UnknownError):
        consumer.get_last_message_id()
    producer = client.create_producer(topic)
    producer.send(b"live")
    assert consumer.receive(TIMEOUT_MS).data() == b"live"
    assert reader.read_next(TIMEOUT_MS).data() == b"live"
    consumer.unsubscribe()
    # (read_compacted on a non-persistent topic is refused by the client itself, before the broker.)
