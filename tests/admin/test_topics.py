"""Admin REST v2 over real HTTP for topics and subscriptions, driven with the official client."""

from __future__ import annotations

import json
import time
import uuid

import pulsar
import pytest
from pulsar.schema import Record, String

from broker.admin.partitioned_topics import PARTITIONED_METADATA_TYPE
from broker.embedded import BrokerThread
from broker.metadata.layout import PARTITIONED_TOPICS_ROOT, TOPIC_PROPERTIES_ROOT
from broker.topic_name import TopicName
from broker.vocabulary import PARTITIONS_CEILING
from tests.admin.conftest import Admin, rest_path
from tests.waiting import wait_for

TIMEOUT_MS = 10_000


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def publish(client: pulsar.Client, topic: str, n: int, **kw: object) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False, **kw)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def backlog(admin: Admin, topic: str, sub: str) -> int:
    return int(admin.stats(topic)["subscriptions"][sub]["msgBacklog"])


def test_create_list_delete_topic(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    # no auto-creation here, so the producer's reconnect cannot bring the deleted topic back
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    topic = f"persistent://{ns}/crud"
    path = f"/admin/v2/{rest_path(topic)}"
    assert admin.put(path).status == 204
    assert admin.put(path).status == 409
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}") == [topic]
    assert admin.ok("GET", f"{path}/partitions") == {"partitions": 0, "deleted": False}
    producer = client.create_producer(topic)
    reply = admin.delete(path)
    assert reply.status == 412 and reply.reason == "Topic has 1 connected producers/consumers"
    assert admin.delete(f"{path}?force=true").status == 204
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}") == []
    producer.close()  # it was retrying to reconnect (TopicNotFound)
    assert admin.delete(path).status == 404


def test_errors_are_json_with_pulsar_statuses(admin: Admin) -> None:
    cases = [
        ("GET", "/admin/v2/persistent/public/default/missing-topic/stats", 404),
        ("GET", "/admin/v2/persistent/no-tenant/default/t/stats", 404),
        ("GET", "/admin/v2/persistent/public/no-ns/t/stats", 404),
        ("PUT", "/admin/v2/persistent/public/default/t-bad/partitions", 406),  # no body: 0 partitions
        ("GET", "/admin/v2/persistent/public/default/missing-topic/internalStats", 404),
        ("POST", "/admin/v2/persistent/public/default/x/subscription/s/skip/abc", 400),
        ("GET", "/admin/v2/not-an-endpoint", 404),
    ]
    for method, path, status in cases:
        reply = admin.call(method, path)
        assert reply.status == status, (method, path, reply.status, reply.body)
        assert isinstance(reply.reason, str) and reply.reason, (method, path)


def test_a_body_with_a_lone_surrogate_is_refused_with_400(admin: Admin) -> None:
    # JSON may spell one ("\ud800"); nothing can store or send it on (it was a 500, after some state changed).
    topic = f"/admin/v2/{rest_path(new_topic('surrogate'))}"
    for method, path in (("PUT", topic), ("PUT", "/admin/v2/tenants/surrogate-t"),
                         ("PUT", "/admin/v2/namespaces/public/default/properties")):
        reply = admin.call(method, path, raw=b'{"a": "\\ud800"}')
        assert reply.status == 400, (method, path, reply.status, reply.body)
    assert admin.get(f"{topic}/stats").status == 404  # not created
    assert admin.call("PUT", "/admin/v2/namespaces/public/default/properties",
                      raw=b'{"a": "\\u00e9\\ud83d\\ude00"}').status == 204  # escapes of valid text are fine


def test_partitioned_topic_admin(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("parts")
    path = f"/admin/v2/{rest_path(topic)}/partitions"
    assert admin.put(path, 3).status == 204
    assert admin.put(path, 3).status == 409
    assert admin.put(f"/admin/v2/{rest_path(new_topic('zero'))}/partitions", 0).status == 406
    assert admin.ok("GET", path) == {"partitions": 3, "deleted": False}
    assert topic in admin.ok("GET", "/admin/v2/persistent/public/default/partitioned")
    assert admin.post(path, 2).status == 422  # cannot shrink
    # Above the most a partitioned topic may have (maxNumPartitionsPerPartitionedTopic, else our ceiling): 406 to a
    # create, 422 to an update, as Pulsar answers; listing the namespace afterwards still answers (it built a name
    # per partition).
    for huge in (PARTITIONS_CEILING + 1, 2**31 - 1):
        assert admin.post(path, huge).status == 422  # (an update's words for it)
        assert admin.put(f"/admin/v2/{rest_path(new_topic('huge'))}/partitions", huge).status == 406
    assert admin.put(f"/admin/v2/{rest_path(new_topic('huge'))}/partitions", 10**20).status == 400  # (no Java int)
    assert admin.post("/admin/v2/namespaces/public/default/autoTopicCreation",
                      {"allowAutoTopicCreation": True, "topicType": "partitioned",
                       "defaultNumPartitions": 2**31 - 1}).status == 406
    assert admin.post(path, 4).status == 204
    assert admin.ok("GET", path) == {"partitions": 4, "deleted": False}
    # (Pulsar answers 409 "... is not the partitioned topic." for a topic that does not exist, too)
    assert admin.post(f"/admin/v2/{rest_path(new_topic('nopart'))}/partitions", 4).status == 409

    consumer = client.subscribe(topic, "sub")
    publish(client, topic, 8, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    for _ in range(8):
        consumer.acknowledge(consumer.receive(TIMEOUT_MS))
    stats = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitioned-stats")
    assert stats["metadata"] == {"partitions": 4, "deleted": False}
    assert stats["msgInCounter"] == 8 and stats["subscriptions"]["sub"]["msgOutCounter"] == 8
    assert set(stats["partitions"]) == {f"{topic}-partition-{i}" for i in range(4)}
    assert "partitions" not in admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitioned-stats?perPartition=false") \
        or not admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitioned-stats?perPartition=false")["partitions"]
    assert admin.ok("GET", f"/admin/v2/{rest_path(topic)}/subscriptions") == ["sub"]
    assert admin.get(f"/admin/v2/{rest_path(topic)}/stats").status == 404  # stats are per partition
    assert admin.post(f"/admin/v2/{rest_path(topic)}/subscription/sub/skip/1").status == 405
    assert admin.get(f"/admin/v2/{rest_path(topic)}/subscription/sub/position/1").status == 405
    # (Pulsar 4.0.7's internalCompactionStatusAsync looks the name up as one topic: 404, not 405)
    status = admin.get(f"/admin/v2/{rest_path(topic)}/compaction")
    assert (status.status, status.reason) == (404, f"Topic {topic} not found")
    assert admin.delete(f"/admin/v2/{rest_path(topic)}").status == 409  # use .../partitions
    assert admin.delete(path).status == 412  # consumer connected
    consumer.close()
    assert admin.delete(path).status == 204
    assert (admin.get(path).status, admin.get(path).reason) == (404, f"Topic {topic} not found")
    assert not [t for t in admin.ok("GET", "/admin/v2/persistent/public/default") if t.startswith(topic)]


def test_partitions_are_stored_with_their_partitioned_topic(admin: Admin, pulsar_broker: BrokerThread) -> None:
    """As Pulsar's AdminResource.internalCreatePartitionedTopic and PersistentTopicsBase.
    internalUpdatePartitionedTopicAsync (tryCreatePartitionsAsync): a persistent partitioned topic's partitions are
    stored as it is created or grown, not loaded; a partition never used is then a topic as any other (deleted, not
    a 404). A non-persistent one's have nothing stored."""
    ns = admin.new_namespace()
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    topic = f"persistent://{ns}/parted"
    base = f"/admin/v2/{rest_path(topic)}"
    service = pulsar_broker.server.service

    def stored() -> list[str]:
        return sorted(n for n in service.ledger_factory.list_names() if n.startswith(f"{ns}/"))

    async def loaded() -> list[str]:
        live = [*service.topics, *service.non_persistent_topics]
        return sorted(t for t in live if TopicName.parse(t).namespace == ns)

    admin.ok("PUT", f"{base}/partitions", 3)
    assert stored() == [f"{ns}/persistent/parted-partition-{i}" for i in range(3)]
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}") == [f"{topic}-partition-{i}" for i in range(3)]
    assert pulsar_broker.run_coroutine(loaded()) == []
    admin.ok("POST", f"{base}/partitions", 5)
    assert stored() == [f"{ns}/persistent/parted-partition-{i}" for i in range(5)]
    # (partition 0 only, loaded for its subscriptions, copied onto the others: its stats at its owner, as Pulsar)
    assert pulsar_broker.run_coroutine(loaded()) == [f"{topic}-partition-0"]
    assert admin.delete(f"{base}-partition-4").status == 204
    assert stored() == [f"{ns}/persistent/parted-partition-{i}" for i in range(4)]
    assert admin.delete(f"{base}-partition-4").status == 404
    non_persistent = f"/admin/v2/non-persistent/{ns}/np"
    admin.ok("PUT", f"{non_persistent}/partitions", 2)
    admin.ok("POST", f"{non_persistent}/partitions", 3)
    admin.ok("POST", f"{non_persistent}/createMissedPartitions")
    assert len(stored()) == 4 and pulsar_broker.run_coroutine(loaded()) == [f"{topic}-partition-0"]
    admin.ok("DELETE", f"{base}/partitions")
    admin.ok("DELETE", f"{non_persistent}/partitions")
    assert stored() == []


def test_growing_a_partitioned_topic_copies_its_subscriptions(admin: Admin, client: pulsar.Client) -> None:
    """Pulsar's internalUpdatePartitionedTopicAsync: partition 0's durable subscriptions are made on every partition
    at the earliest message, so a consumer misses nothing published to a new partition before it subscribes there
    (not a reader's subscription: it is not durable)."""
    topic = new_topic("grow")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/partitions", 2)
    admin.ok("PUT", f"{base}/subscription/s")
    reader = client.create_reader(f"{topic}-partition-0", pulsar.MessageId.earliest)
    admin.ok("POST", f"{base}/partitions", 4)
    assert [admin.ok("GET", f"{base}-partition-{i}/subscriptions") for i in range(1, 4)] == [["s"]] * 3
    publish(client, f"{topic}-partition-3", 3)
    assert backlog(admin, f"{topic}-partition-3", "s") == 3
    reader.close()


def test_a_subscription_created_over_rest_keeps_the_properties_of_its_body(admin: Admin) -> None:
    """Pulsar's createSubscription takes ResetCursorData's properties and stores them with the cursor; a partitioned
    topic's go to every partition, and growing the topic copies partition 0's (internalUpdatePartitionedTopicAsync
    passes its stats' subscriptionProperties)."""
    topic = new_topic("subprops")
    base = f"/admin/v2/{rest_path(topic)}"
    props = {"team": "billing", "tier": "gold"}
    assert admin.put(f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1, "properties": props}).status == 204
    assert admin.put(f"{base}/unload").status == 204  # (stored, not only held by the live subscription)
    assert admin.ok("GET", f"{base}/subscription/s/properties") == props
    assert admin.ok("GET", f"{base}/stats")["subscriptions"]["s"]["subscriptionProperties"] == props
    for bad in ({"a": 1}, ["a"], "a"):
        reply = admin.put(f"{base}/subscription/bad", {"ledgerId": -1, "entryId": -1, "properties": bad})
        assert (reply.status, reply.reason) == (400, "Subscription properties must be a JSON object of string values")
    assert admin.ok("GET", f"{base}/subscriptions") == ["s"]

    parted = new_topic("subprops-parted")
    pbase = f"/admin/v2/{rest_path(parted)}"
    admin.ok("PUT", f"{pbase}/partitions", 2)
    assert admin.put(f"{pbase}/subscription/s", {"ledgerId": -1, "entryId": -1, "properties": props}).status == 204
    admin.ok("POST", f"{pbase}/partitions", 3)
    assert [admin.ok("GET", f"{pbase}-partition-{i}/subscription/s/properties") for i in range(3)] == [props] * 3


def test_growing_is_refused_when_a_partition_past_the_count_is_there(admin: Admin, client: pulsar.Client) -> None:
    """Pulsar's internalUpdatePartitionedTopicAsync lists the namespace's topics first: a partition of this topic at or
    past its current count (here a topic made under that name before the partitioned topic) would be adopted by
    growing, so it answers 409, unless updateLocalTopicOnly. Growing to the count it has is a no-op (204)."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/adopt"
    base = f"/admin/v2/{rest_path(topic)}"
    publish(client, f"{topic}-partition-2", 1)
    admin.ok("PUT", f"{base}/partitions", 2)
    reply = admin.post(f"{base}/partitions", 4)
    assert (reply.status, reply.reason) == (
        409, f"Exist unexpected topic partition(partition index grater than current metadata maximum index 2) "
             f"{topic}-partition-2")
    assert admin.ok("GET", f"{base}/partitions")["partitions"] == 2
    assert admin.post(f"{base}/partitions", 2).status == 409  # (the same check comes first)
    assert admin.post(f"{base}/partitions?updateLocalTopicOnly=true", 2).status == 204
    assert admin.ok("GET", f"{base}/partitions")["partitions"] == 2
    assert admin.post(f"{base}/partitions?updateLocalTopicOnly=true", 3).status == 204
    assert admin.ok("GET", f"{base}/partitions")["partitions"] == 3
    assert backlog_of_new(admin, f"{topic}-partition-2") == 1  # its earlier message is the partition's now
    assert admin.post(f"{base}/partitions", 3).status == 204  # nothing past the count now: a no-op


def backlog_of_new(admin: Admin, topic: str) -> int:
    """The messages a new subscription at the earliest sees."""
    path = f"/admin/v2/{rest_path(topic)}/subscription/count-{uuid.uuid4().hex[:6]}"
    assert admin.put(path, {"ledgerId": -1, "entryId": -1}).status == 204
    return int(admin.stats(topic)["subscriptions"][path.rsplit("/", 1)[1]]["msgBacklog"])


def test_partitioned_subscription_fan_out(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("pfan")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/partitions", 2)
    assert admin.put(f"{base}/subscription/fan").status == 204  # created on every partition
    assert admin.put(f"{base}/subscription/fan").status == 409
    publish(client, topic, 6, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    assert admin.ok("GET", f"{base}/partitioned-stats")["subscriptions"]["fan"]["msgBacklog"] == 6
    assert admin.post(f"{base}/subscription/fan/skip_all").status == 204
    assert admin.ok("GET", f"{base}/partitioned-stats")["subscriptions"]["fan"]["msgBacklog"] == 0
    assert admin.post(f"{base}/subscription/fan/resetcursor/0").status == 204  # back to the start
    assert admin.ok("GET", f"{base}/partitioned-stats")["subscriptions"]["fan"]["msgBacklog"] == 6
    assert admin.post(f"{base}/subscription/fan/expireMessages/0").status == 204
    assert admin.ok("GET", f"{base}/partitioned-stats")["subscriptions"]["fan"]["msgBacklog"] == 0
    assert admin.put(f"{base}/unload").status == 204
    assert admin.delete(f"{base}/subscription/fan").status == 204
    assert admin.ok("GET", f"{base}/subscriptions") == []
    assert admin.post(f"{base}/subscription/fan/skip_all").status == 404


def test_peek_of_a_message_with_times_past_year_9999(admin: Admin, client: pulsar.Client) -> None:
    """A client sets a message's event time (any 64-bit number): peek answers with it written as Pulsar's
    DateFormatter (java.time's ISO format) writes it. It was a 500 and a traceback: Python's datetime stops at 9999."""
    topic = new_topic("far-times")
    base = f"/admin/v2/{rest_path(topic)}"
    assert admin.put(f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1}).status == 204
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"far", event_timestamp=(1 << 63) - 1)
    producer.send(b"year 10000", event_timestamp=253402300800000)  # 10000-01-01T00:00:00Z
    producer.close()
    far = admin.get(f"{base}/subscription/s/position/1")
    assert far.status == 200 and far.body == b"far"
    assert far.headers["X-Pulsar-event-time"] == "+292278994-08-17T07:12:55.807Z"
    assert admin.get(f"{base}/subscription/s/position/2").headers["X-Pulsar-event-time"] == "+10000-01-01T00:00:00Z"


def test_subscription_admin_operations(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("subops")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", base)
    assert admin.put(f"{base}/subscription/early", {"ledgerId": -1, "entryId": -1}).status == 204
    assert admin.put(f"{base}/subscription/early").status == 409
    ids = publish(client, topic, 10)
    assert admin.put(f"{base}/subscription/late").status == 204  # default: latest
    assert sorted(admin.ok("GET", f"{base}/subscriptions")) == ["early", "late"]
    assert backlog(admin, topic, "early") == 10 and backlog(admin, topic, "late") == 0

    assert admin.post(f"{base}/subscription/early/skip/3").status == 204
    assert backlog(admin, topic, "early") == 7
    reply = admin.get(f"{base}/subscription/early/position/1")
    assert reply.status == 200 and reply.body == b"m3"
    assert reply.headers["X-Pulsar-Message-ID"] == f"{ids[3].ledger_id()}:{ids[3].entry_id()}"
    assert reply.headers["X-Pulsar-sequence-id"] == "3"
    assert reply.headers["X-Pulsar-publish-time"].endswith("Z")
    assert admin.get(f"{base}/subscription/early/position/8").status == 404
    assert admin.get(f"{base}/subscription/early/position/0").status == 412
    # (Pulsar's peek creates a subscription that is not there, at the earliest message)
    assert admin.get(f"{base}/subscription/missing/position/1").body == b"m0"
    assert admin.delete(f"{base}/subscription/missing").status == 204

    target = ids[6]
    body = {"ledgerId": target.ledger_id(), "entryId": target.entry_id()}
    assert admin.post(f"{base}/subscription/late/resetcursor", body).status == 204
    assert backlog(admin, topic, "late") == 4
    consumer = client.subscribe(topic, "late")
    assert consumer.receive(TIMEOUT_MS).data() == b"m6"
    assert admin.post(f"{base}/subscription/late/resetcursor", {"ledgerId": "x"}).status == 400
    # pulsar-admin's --exclude: ResetCursorData's isExcluded, "excluded" on the wire (an "isExcluded" key is ignored)
    consumer.close()
    assert admin.post(f"{base}/subscription/late/resetcursor", {**body, "excluded": True}).status == 204
    assert backlog(admin, topic, "late") == 3
    assert admin.post(f"{base}/subscription/late/resetcursor", {**body, "isExcluded": True}).status == 204
    assert backlog(admin, topic, "late") == 4
    consumer = client.subscribe(topic, "late")

    reply = admin.delete(f"{base}/subscription/late")
    assert reply.status == 412 and "active" in reply.reason
    assert admin.delete(f"{base}/subscription/late?force=true").status == 204
    assert admin.post(f"{base}/subscription/early/skip_all").status == 204
    assert backlog(admin, topic, "early") == 0
    assert admin.post(f"{base}/subscription/early/resetcursor/0").status == 204
    assert backlog(admin, topic, "early") == 10
    assert admin.post(f"{base}/subscription/early/resetcursor/{int(time.time() * 1000) + 60_000}").status == 204
    assert backlog(admin, topic, "early") == 0
    assert admin.post(f"{base}/subscription/nope/skip_all").status == 404


def test_expire_messages_and_stats_fields(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("expire")
    base = f"/admin/v2/{rest_path(topic)}"
    consumer = client.subscribe(topic, "exp", consumer_name="c1")
    producer = client.create_producer(topic, producer_name="prod-1", batching_enabled=False)
    for i in range(5):
        producer.send(f"e{i}".encode(), properties={"k": str(i)})
    assert admin.post(f"{base}/subscription/exp/expireMessages/3600").status == 204
    assert backlog(admin, topic, "exp") == 5  # nothing that old
    assert admin.post(f"{base}/all_subscription/expireMessages/0").status == 204
    stats = admin.stats(topic)
    sub = stats["subscriptions"]["exp"]
    assert sub["msgBacklog"] == 0 and sub["totalMsgExpired"] == 5 and sub["lastExpireTimestamp"] > 0
    assert stats["msgInCounter"] == 5 and stats["storageSize"] > 0
    assert stats["publishers"][0]["producerName"] == "prod-1"
    assert stats["publishers"][0]["accessMode"] == "Shared"
    assert sub["type"] == "Exclusive" and sub["consumers"][0]["consumerName"] == "c1"
    assert stats["deduplicationStatus"] == "Disabled" and ":" in stats["ownerBroker"]
    # entries already sent to the consumer stay with it (Pulsar does not recall them)
    assert consumer.receive(TIMEOUT_MS).data() == b"e0"
    producer.close()


def test_internal_stats_last_message_id_and_message_by_id(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("internal")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", base)
    admin.ok("PUT", f"{base}/subscription/s1", {"ledgerId": -1, "entryId": -1})
    ids = publish(client, topic, 4)
    admin.ok("POST", f"{base}/subscription/s1/skip/1")
    internal = admin.ok("GET", f"{base}/internalStats")
    last = f"{ids[-1].ledger_id()}:{ids[-1].entry_id()}"
    assert internal["lastConfirmedEntry"] == last
    assert internal["numberOfEntries"] == 4 and internal["entriesAddedCounter"] == 4
    assert internal["state"] == "LedgerOpened" and internal["ledgers"][-1]["entries"] == 4
    cursor = internal["cursors"]["s1"]
    assert cursor["markDeletePosition"] == f"{ids[0].ledger_id()}:{ids[0].entry_id()}"
    assert cursor["individuallyDeletedMessages"] == "[]" and cursor["state"] == "Open"
    # (batchIndex -1 and batchSize 0 outside a batch: MessageIdImpl's JSON, as a Pulsar 4.0.7 standalone answers)
    assert admin.ok("GET", f"{base}/lastMessageId") == {"ledgerId": ids[-1].ledger_id(), "entryId": ids[-1].entry_id(),
                                                        "partitionIndex": -1, "batchIndex": -1, "batchSize": 0}
    reply = admin.get(f"{base}/ledger/{ids[2].ledger_id()}/entry/{ids[2].entry_id()}")
    assert reply.status == 200 and reply.body == b"m2"
    assert admin.get(f"{base}/ledger/999999/entry/0").status == 404


def test_internal_stats_show_the_compacted_ledger(admin: Admin, client: pulsar.Client) -> None:
    """internalStats' compactedLedger: the compacted view's ledger id, its entries and bytes, as Pulsar shows
    its compacted ledger's (-1 before the first compaction); they stay after the topic loads again (its view
    then has a new, empty current ledger)."""
    topic = new_topic("compacted-ledger")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", base)
    none = {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False, "underReplicated": False}
    assert admin.ok("GET", f"{base}/internalStats")["compactedLedger"] == none
    producer = client.create_producer(topic, batching_enabled=False)
    for value, key in ((b"a1", "a"), (b"b1", "b"), (b"a2", "a")):
        producer.send(value, partition_key=key)
    producer.close()
    admin.ok("PUT", f"{base}/compaction")
    wait_for(lambda: admin.ok("GET", f"{base}/compaction")["status"] == "SUCCESS", what="compaction")
    internal = admin.ok("GET", f"{base}/internalStats")
    compacted = internal["compactedLedger"]
    assert compacted["entries"] == 2 and compacted["size"] > len(b"a2b1")
    assert compacted["ledgerId"] >= 0 and compacted["ledgerId"] not in [i["ledgerId"] for i in internal["ledgers"]]
    assert not compacted["offloaded"] and not compacted["underReplicated"]
    admin.ok("PUT", f"{base}/unload")
    assert admin.ok("GET", f"{base}/internalStats")["compactedLedger"] == compacted


def test_compaction_of_a_partitioned_topic_none_of_whose_partitions_was_used(admin: Admin) -> None:
    """Nothing to compact: 204, not the 409 "Compaction already in progress" it answered."""
    topic = new_topic("compact-unused-partitions")
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/partitions", 2)
    assert admin.put(f"/admin/v2/{rest_path(topic)}/compaction").status == 204


def test_stats_show_the_last_compaction(admin: Admin, client: pulsar.Client) -> None:
    """The stats' compaction block: the last run's removed messages (as Pulsar's compactor counts them) and
    duration, and when the last run succeeded (epoch ms); zeros before the first run."""
    topic = new_topic("compaction-stats")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", base)
    assert admin.stats(topic)["compaction"] == {"lastCompactionRemovedEventCount": 0,
                                                "lastCompactionSucceedTimestamp": 0,
                                                "lastCompactionFailedTimestamp": 0,
                                                "lastCompactionDurationTimeInMills": 0}
    producer = client.create_producer(topic, batching_enabled=False)
    for value, key in ((b"a1", "a"), (b"b1", "b"), (b"a2", "a"), (b"", "b")):  # a1 superseded, b deleted
        producer.send(value, partition_key=key)
    producer.send(b"no key")  # dropped (topicCompactionRetainNullKey is off)
    producer.close()

    def compact() -> tuple[int, int]:
        before = int(time.time() * 1000)
        admin.ok("PUT", f"{base}/compaction")
        wait_for(lambda: admin.ok("GET", f"{base}/compaction")["status"] == "SUCCESS", what="compaction")
        return before, int(time.time() * 1000)

    before, after = compact()
    stats = admin.stats(topic)["compaction"]
    assert stats["lastCompactionRemovedEventCount"] == 3  # (a1 superseded, b deleted, the key-less one)
    assert before <= stats["lastCompactionSucceedTimestamp"] <= after
    assert stats["lastCompactionFailedTimestamp"] == 0 and stats["lastCompactionDurationTimeInMills"] >= 0
    assert admin.ok("GET", f"{base}/internalStats")["compactedLedger"]["entries"] == 1
    compact()  # nothing new: the view is read again, nothing removed
    assert admin.stats(topic)["compaction"]["lastCompactionRemovedEventCount"] == 0
    # Gone with the topic's unload, as in Pulsar 4.0.7: BrokerService.removeTopicFromCache, on every unload and
    # delete, removes the topic's CompactionRecord (CompactorMXBean.removeTopic), and the status is the topic
    # object's (PersistentTopic.currentCompaction), NOT_RUN once loaded again. The view itself stays.
    admin.ok("PUT", f"{base}/unload")
    assert admin.stats(topic)["compaction"] == {"lastCompactionRemovedEventCount": 0,
                                                "lastCompactionSucceedTimestamp": 0,
                                                "lastCompactionFailedTimestamp": 0,
                                                "lastCompactionDurationTimeInMills": 0}
    assert admin.ok("GET", f"{base}/compaction") == {"status": "NOT_RUN", "lastError": ""}
    assert admin.ok("GET", f"{base}/internalStats")["compactedLedger"]["entries"] == 1

def test_examine_message_and_message_id_by_time(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/examine"
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", base)
    assert admin.get(f"{base}/examinemessage?initialPosition=earliest&messagePosition=1").status == 412
    before = int(time.time() * 1000) - 1
    ids = publish(client, topic, 5)

    def examine(initial: str, n: int) -> bytes:
        reply = admin.get(f"{base}/examinemessage?initialPosition={initial}&messagePosition={n}")
        assert reply.status == 200, reply.body
        return reply.body

    assert [examine("earliest", n) for n in (1, 2, 5)] == [b"m0", b"m1", b"m4"]
    assert [examine("latest", n) for n in (1, 2, 5)] == [b"m4", b"m3", b"m0"]
    assert examine("earliest", 99) == b"m4" and examine("latest", 99) == b"m0"  # clamped to the ends
    assert admin.get(f"{base}/examinemessage").body == b"m4"  # latest, 1
    assert admin.get(f"{base}/examinemessage?initialPosition=middle").status == 412
    # Partitioned: only a partition can be examined (405), as in Pulsar.
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    assert admin.get(f"/admin/v2/persistent/{ns}/parted/examinemessage").status == 405
    # Message id by publish time: the first at or after it; past the last, the next position.
    assert admin.ok("GET", f"{base}/messageid/{before}") == {
        "ledgerId": ids[0].ledger_id(), "entryId": ids[0].entry_id(), "partitionIndex": -1, "batchIndex": -1,
        "batchSize": 0}
    future = admin.ok("GET", f"{base}/messageid/{int(time.time() * 1000) + 60_000}")
    assert (future["ledgerId"], future["entryId"]) > (ids[-1].ledger_id(), ids[-1].entry_id())


def test_topic_properties(admin: Admin, pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    path = f"/admin/v2/persistent/{ns}/props"
    assert admin.get(f"{path}/properties").status == 404
    assert admin.put(path, {"owner": 7}).status == 400
    assert admin.put(path, {"owner": "billing", "tier": "gold"}).status == 204
    assert admin.ok("GET", f"{path}/properties") == {"owner": "billing", "tier": "gold"}
    assert admin.put(f"{path}/properties", {"tier": "silver", "region": "eu"}).status == 204
    assert admin.ok("GET", f"{path}/properties") == {"owner": "billing", "tier": "silver", "region": "eu"}
    assert admin.delete(f"{path}/properties?key=owner").status == 204
    assert admin.delete(f"{path}/properties").status == 400
    assert admin.ok("GET", f"{path}/properties") == {"tier": "silver", "region": "eu"}
    # A partitioned topic created the way the admin client does it with properties; its
    # partitions share them.
    parted = f"/admin/v2/persistent/{ns}/parted"
    metadata = json.dumps({"partitions": 2, "properties": {"k": "v"}}).encode()
    assert admin.call("PUT", f"{parted}/partitions", raw=metadata, content_type=PARTITIONED_METADATA_TYPE).status == 204
    assert admin.ok("GET", f"{parted}/partitions") == {"partitions": 2, "deleted": False, "properties": {"k": "v"}}
    assert admin.ok("GET", f"{parted}-partition-1/properties") == {"k": "v"}
    # They are saved (read back from the metadata store: a partitioned topic's in its
    # PartitionedTopicMetadata, as Pulsar) and go with the topic.
    store = pulsar_broker.server.service.metadata
    node = pulsar_broker.run_coroutine(store.cache.store.get(f"{TOPIC_PROPERTIES_ROOT}/{ns}/persistent/props"))
    assert json.loads(node.value) == {"tier": "silver", "region": "eu"}
    node = pulsar_broker.run_coroutine(store.cache.store.get(f"{PARTITIONED_TOPICS_ROOT}/{ns}/persistent/parted"))
    assert json.loads(node.value) == {"partitions": 2, "properties": {"k": "v"}, "deleted": False}
    assert admin.delete(path).status == 204
    assert admin.put(path).status == 204
    assert admin.ok("GET", f"{path}/properties") == {}
    assert admin.delete(f"{parted}/partitions").status == 204
    assert f"persistent://{ns}/parted" not in store.topic_properties


def test_create_missed_partitions_and_trim(admin: Admin, client: pulsar.Client,
                                           pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    parted = f"/admin/v2/persistent/{ns}/parted"
    admin.ok("PUT", f"{parted}/partitions", 3)
    factory = pulsar_broker.server.service.ledger_factory

    def created() -> list[str]:
        return sorted(n for n in factory.list_names() if n.startswith(f"{ns}/persistent/parted"))

    every = [f"{ns}/persistent/parted-partition-{i}" for i in range(3)]
    assert created() == every  # (made with their partitioned topic)
    assert admin.delete(f"{parted}-partition-1").status == 204  # (never used: deleted as any topic)
    assert created() == [every[0], every[2]]
    assert admin.post(f"{parted}/createMissedPartitions").status == 204
    assert created() == every
    assert admin.post(f"{parted}/createMissedPartitions").status == 204  # (nothing missing: nothing done)
    assert created() == every
    assert admin.post(f"/admin/v2/persistent/{ns}/plain/createMissedPartitions").status == 404
    # Trim: a fully consumed ledger left behind by a reload goes at once.
    topic = f"persistent://{ns}/trimmed"
    base = f"/admin/v2/{rest_path(topic)}"
    consumer = client.subscribe(topic, "s")
    publish(client, topic, 3)
    for _ in range(3):
        consumer.acknowledge(consumer.receive(TIMEOUT_MS))
    consumer.close()
    wait_for(lambda: backlog(admin, topic, "s") == 0, what="the acks")
    admin.ok("PUT", f"{base}/unload")
    ledgers = admin.ok("GET", f"{base}/internalStats")["ledgers"]
    assert admin.post(f"{base}/trim").status == 200  # (Pulsar 4.0.7: 200, no body)
    after = admin.ok("GET", f"{base}/internalStats")["ledgers"]
    assert len(after) < len(ledgers) and after[-1] == ledgers[-1]
    assert admin.post(f"/admin/v2/persistent/{ns}/missing/trim").status == 404



def test_backlog_size_after_a_message_id(admin: Admin, client: pulsar.Client) -> None:
    """PUT .../backlogSize (pulsar-admin topics get-backlog-size): the bytes after a position, as Pulsar's managed
    ledger estimates them, over two ledgers (an unload closes the first)."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/sized"
    base = f"/admin/v2/{rest_path(topic)}"
    publish(client, topic, 4)
    admin.ok("PUT", f"{base}/unload")
    publish(client, topic, 2)
    ledgers = admin.ok("GET", f"{base}/internalStats")["ledgers"]
    first, current = ledgers[0], ledgers[-1]
    total = sum(info["size"] for info in ledgers)

    def size(ledger_id: int, entry_id: int) -> object:
        return admin.ok("PUT", f"{base}/backlogSize", {"ledgerId": ledger_id, "entryId": entry_id})

    assert size(-1, -1) == total
    per_entry = first["size"] // first["entries"]
    assert size(first["ledgerId"], 0) == total - per_entry  # (one entry at the ledger's average size)
    assert size(first["ledgerId"], first["entries"] - 1) == total - first["size"]  # (the whole first ledger)
    assert size(current["ledgerId"] + 1000, 0) == 0  # (past the end)
    assert size(0, 0) == total  # (before the first ledger)
    reply = admin.put(f"{base}/backlogSize", {"entryId": 0})
    assert reply.status == 400
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    reply = admin.put(f"/admin/v2/persistent/{ns}/parted/backlogSize", {"ledgerId": -1, "entryId": -1})
    assert (reply.status, reply.reason) == (405, "calculate backlog size is not allowed for partitioned-topic")


def test_peek_batched_and_compressed(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("peekz")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", base)
    admin.ok("PUT", f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1})
    producer = client.create_producer(topic, compression_type=pulsar.CompressionType.LZ4,
                                      batching_enabled=False)
    producer.send(b"hello " * 50, partition_key="key-1", properties={"a": "b"})
    reply = admin.get(f"{base}/subscription/s/position/1")
    assert reply.status == 200 and reply.body == b"hello " * 50  # decompressed like Pulsar
    assert reply.headers["X-Pulsar-compression"] == "LZ4"
    assert reply.headers["X-Pulsar-partition-key"] == "key-1"
    assert reply.headers["X-Pulsar-PROPERTY-a"] == "b"
    batcher = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(3):
        batcher.send_async(f"b{i}".encode(), None)
    batcher.flush()
    reply = admin.get(f"{base}/subscription/s/position/2")
    assert reply.headers["X-Pulsar-num-batch-message"] == "3"


def test_unload_and_terminate(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("unload")
    base = f"/admin/v2/{rest_path(topic)}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"before")
    assert consumer.receive(TIMEOUT_MS).data() == b"before"
    assert admin.put(f"{base}/unload").status == 204
    # clients reconnect to the reloaded topic on their own
    wait_for(lambda: admin.stats(topic)["publishers"], what="producer reconnect")
    producer.send(b"after")
    got = [consumer.receive(TIMEOUT_MS).data()]
    while got[-1] != b"after":  # "before" may come again: it was not acknowledged
        got.append(consumer.receive(TIMEOUT_MS).data())
    assert set(got[:-1]) <= {b"before"}
    reply = admin.post(f"{base}/terminate")
    assert reply.status == 200 and b'"entryId"' in reply.body
    assert admin.post(f"/admin/v2/{rest_path(new_topic('never'))}/terminate").status == 404
    assert admin.put(f"/admin/v2/{rest_path(new_topic('never'))}/unload").status == 404


def test_a_topic_created_again_after_deletion_starts_afresh(admin: Admin, client: pulsar.Client,
                                                            pulsar_broker: BrokerThread) -> None:
    # A deleted topic leaves nothing behind: not its terminated mark, not its compacted view (nor
    # the ledger holding it), not its topic-level policies.
    terminated, compacted = new_topic("was-terminated"), new_topic("was-compacted")
    publish(client, terminated, 1)
    assert admin.post(f"/admin/v2/{rest_path(terminated)}/terminate").status == 200
    producer = client.create_producer(compacted)
    producer.send(b"old", partition_key="k")
    producer.close()
    admin.ok("POST", f"/admin/v2/{rest_path(compacted)}/maxProducers", 1)
    admin.ok("PUT", f"/admin/v2/{rest_path(compacted)}/compaction")
    wait_for(lambda: admin.ok("GET", f"/admin/v2/{rest_path(compacted)}/compaction")["status"] == "SUCCESS",
             what="compaction")
    for t in (terminated, compacted):
        assert admin.delete(f"/admin/v2/{rest_path(t)}?force=true").status == 204
    client.create_producer(terminated).send(b"new")  # not TopicTerminated
    reader = client.create_reader(compacted, pulsar.MessageId.earliest, is_read_compacted=True)
    assert not reader.has_message_available()
    assert admin.get(f"/admin/v2/{rest_path(compacted)}/maxProducers").unset
    # (The compacted ledger went with the topic.)
    path = TopicName.parse(compacted).persistence_path
    assert not [n for n in pulsar_broker.server.service.ledger_factory.list_names() if n.startswith(path + "/")]


def test_schema_endpoints(admin: Admin, client: pulsar.Client) -> None:
    class Item(Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
        name = String()

    topic = new_topic("schema")
    local = topic.rsplit("/", 1)[1]
    path = f"/admin/v2/schemas/public/default/{local}/schema"
    assert admin.get(path).status == 404
    definition = '{"type":"record","name":"Item","fields":[{"name":"name","type":["null","string"]}]}'
    reply = admin.post(path, {"type": "AVRO", "schema": definition, "properties": {"p": "1"}})
    assert reply.status == 200 and reply.json == {"version": {"version": 0}}
    got = admin.ok("GET", path)
    assert got["type"] == "AVRO" and got["version"] == 0 and got["properties"] == {"p": "1"}
    assert admin.ok("GET", f"{path}/0")["data"] == definition
    assert admin.post(path, {"type": "STRING", "schema": ""}).status == 409  # FULL: type change refused
    assert admin.post(path, {"type": "NOPE", "schema": ""}).status == 422
    assert admin.post(path, [1]).status == 400
    # A definition that is no AVRO schema is refused before it is stored (stored first, it refused every valid one).
    fresh = f"/admin/v2/schemas/public/default/{new_topic('bad-schema').rsplit('/', 1)[1]}/schema"
    for kind in ("AVRO", "JSON"):
        reply = admin.post(fresh, {"type": kind, "schema": "not avro"})
        assert reply.status == 422 and "Invalid schema definition" in reply.reason
    assert admin.get(fresh).status == 404
    assert admin.post(fresh, {"type": "AVRO", "schema": definition}).status == 200
    producer = client.create_producer(topic, schema=pulsar.schema.AvroSchema(Item))
    producer.send(Item(name="x"))
    # The same definition, however the client lays it out, is the same version (properties aside).
    assert admin.ok("GET", path)["version"] == 0
    assert admin.delete(path).json == {"version": 1}  # the tombstone's version
    assert admin.get(path).status == 404
    assert admin.get("/admin/v2/schemas/public/no-ns/t/schema").status == 404


def test_schema_compatibility_and_version_lookup(admin: Admin) -> None:
    # What CI pipelines ask before deploying a schema change: would the broker take it, and which
    # version is this schema already.
    topic = new_topic("evolving")
    base = f"/admin/v2/schemas/public/default/{topic.rsplit('/', 1)[1]}"
    v1 = '{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}'
    v2 = '{"type":"record","name":"R","fields":[{"name":"a","type":"string"},{"name":"b","type":["null","int"],' \
         '"default":null}]}'
    breaking = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
    # No schema yet: anything is compatible, and no version holds it.
    reply = admin.post(f"{base}/compatibility", {"type": "AVRO", "schema": v1})
    assert reply.status == 202 and reply.json == {"compatibility": True, "schemaCompatibilityStrategy": "FULL"}
    assert admin.ok("POST", f"{base}/version", {"type": "AVRO", "schema": v1}) == {"version": -1}
    admin.ok("POST", f"{base}/schema", {"type": "AVRO", "schema": v1})
    assert admin.ok("POST", f"{base}/compatibility", {"type": "AVRO", "schema": v2})["compatibility"] is True
    refused = admin.ok("POST", f"{base}/compatibility", {"type": "AVRO", "schema": breaking})
    assert refused["compatibility"] is False and "Incompatible schema" in refused["reason"]
    assert admin.ok("POST", f"{base}/compatibility", {"type": "JSON", "schema": v1})["compatibility"] is False
    # The check changed nothing; the version lookup ignores properties, as Pulsar's schema hash.
    assert admin.ok("POST", f"{base}/version", {"type": "AVRO", "schema": v2}) == {"version": -1}
    admin.ok("POST", f"{base}/schema", {"type": "AVRO", "schema": v2})
    assert admin.ok("POST", f"{base}/version", {"type": "AVRO", "schema": v2, "properties": {"x": "y"}}) == {
        "version": 1}
    # The strategy in force is the one reported.
    admin.ok("PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    try:
        assert admin.ok("POST", f"{base}/compatibility", {"type": "AVRO", "schema": breaking}) == {
            "compatibility": True, "schemaCompatibilityStrategy": "ALWAYS_COMPATIBLE"}
    finally:
        admin.ok("PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "UNDEFINED")
    assert admin.post(f"{base}/compatibility", {"type": "NOPE", "schema": ""}).status == 422


def test_internal_stats_show_dispatcher_permit_accounting(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("permits")
    base = f"/admin/v2/{rest_path(topic)}"
    consumers = [client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared,
                                  receiver_queue_size=100) for _ in range(3)]
    consumers[0].close()  # a consumer that left: its permits must be gone from the total
    publish(client, topic, 10)

    def accounting() -> dict[str, object]:
        result: dict[str, object] = admin.ok("GET", f"{base}/internalStats")["cursors"]["shared"]["dispatcher"]
        return result

    # Two live consumers, 100 permits each, 10 messages delivered between them.
    wait_for(lambda: accounting()["totalPermits"] == 190, what="permits to settle")
    info = accounting()
    assert info["type"] == "Shared" and info["permitInvariantHolds"] is True
    assert info["sumOfConsumerPermitsMinusPendingFlow"] == 190 and info["permitInvariantDriftCount"] == 0


def _message_id(mid: pulsar.MessageId, **extra: object) -> dict[str, object]:
    """A MessageId as pulsar-admin sends it in a ResetCursorData body."""
    return {"ledgerId": mid.ledger_id(), "entryId": mid.entry_id(), "partitionIndex": mid.partition(), **extra}


def test_expire_messages_up_to_a_message_id(admin: Admin, client: pulsar.Client) -> None:
    # Pulsar's POST .../subscription/{sub}/expireMessages with a ResetCursorData body (expire by position).
    topic = new_topic("expire-at")
    base = f"/admin/v2/{rest_path(topic)}"
    for sub in ("inclusive", "excluded", "past"):
        admin.ok("PUT", f"{base}/subscription/{sub}", {"ledgerId": -1, "entryId": -1})
    ids = publish(client, topic, 5)
    # Without "excluded" the message itself is expired (the mark-delete moves to it). (ResetCursorData's isExcluded
    # is "excluded" on the wire: an "isExcluded" key is ignored, as Pulsar's mapper ignores unknown keys.)
    assert admin.post(f"{base}/subscription/inclusive/expireMessages",
                      _message_id(ids[2], isExcluded=True)).status == 204
    sub = admin.stats(topic)["subscriptions"]["inclusive"]
    assert sub["msgBacklog"] == 2 and sub["totalMsgExpired"] == 3 and sub["lastExpireTimestamp"] > 0
    # With "excluded" Pulsar expires the next message too (it takes the position's next).
    assert admin.post(f"{base}/subscription/excluded/expireMessages",
                      _message_id(ids[1], excluded=True)).status == 204
    assert backlog(admin, topic, "excluded") == 2
    # An id before the mark-delete position changes nothing (and is no error).
    assert admin.post(f"{base}/subscription/inclusive/expireMessages", _message_id(ids[0])).status == 204
    assert backlog(admin, topic, "inclusive") == 2
    # Past the last message: 409, nothing moved.
    for body in (_message_id(ids[4], excluded=True), {"ledgerId": ids[4].ledger_id() + 1000, "entryId": 0}):
        reply = admin.post(f"{base}/subscription/past/expireMessages", body)
        assert reply.status == 409 and "invalid message position provided" in reply.reason, reply.body
    assert backlog(admin, topic, "past") == 5
    assert admin.post(f"{base}/subscription/past/expireMessages", _message_id(ids[4])).status == 204
    assert backlog(admin, topic, "past") == 0


def test_expire_messages_up_to_a_batch_index(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("expire-batch")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1})
    sent = publish_batch(client, topic, 5)
    third = next(m for m in sent if m.batch_index() == 2)
    # Not excluded: the messages before batch index 2 are expired; the entry stays, its other messages unacked.
    assert admin.post(f"{base}/subscription/s/expireMessages", _message_id(third, batchIndex=2)).status == 204
    consumer = client.subscribe(topic, "s")
    assert [consumer.receive(TIMEOUT_MS).data() for _ in range(3)] == [b"b2", b"b3", b"b4"]
    consumer.close()


def publish_batch(client: pulsar.Client, topic: str, n: int) -> list[pulsar.MessageId]:
    """b0 .. b{n-1} as one batch entry."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=n,
                                      batching_max_publish_delay_ms=60_000)
    sent: list[pulsar.MessageId] = []
    for i in range(n):
        producer.send_async(f"b{i}".encode(), lambda res, mid: sent.append(mid))
    producer.flush()
    wait_for(lambda: len(sent) == n, what="the batch's receipts")
    producer.close()
    return sent


def test_reset_cursor_to_a_message_inside_a_batch(admin: Admin, client: pulsar.Client) -> None:
    # Pulsar's resetcursor with a ResetCursorData body carrying a batchIndex: the messages of the batch before it
    # count as acknowledged (with "excluded" the one at it too), so a consumer gets the batch from there on.
    topic = new_topic("reset-batch")
    base = f"/admin/v2/{rest_path(topic)}"
    whole = [b"b0", b"b1", b"b2", b"b3", b"b4"]
    cases: dict[str, tuple[dict[str, object], list[bytes]]] = {  # subscription: (the body's fields, what comes)
        "at-2": ({"batchIndex": 2}, [b"b2", b"b3", b"b4"]),
        "after-2": ({"batchIndex": 2, "excluded": True}, [b"b3", b"b4"]),
        "at-0": ({"batchIndex": 0}, whole),
        "no-index": ({}, whole),
        "after-last": ({"batchIndex": 4, "excluded": True}, []),  # nothing left of the batch: the next entry
        "no-index-excluded": ({"excluded": True}, []),
        "past-the-batch": ({"batchIndex": 9}, whole),  # (Pulsar's empty ack set is dispatched as none)
    }
    for sub in cases:
        admin.ok("PUT", f"{base}/subscription/{sub}")  # at the end: the reset brings it back
    batch = publish_batch(client, topic, 5)
    plain = publish(client, topic, 2)  # m0, m1: each its own entry, after the batch
    for sub, (fields, expected) in cases.items():
        assert admin.post(f"{base}/subscription/{sub}/resetcursor", _message_id(batch[3], **fields)).status == 204
        consumer = client.subscribe(topic, sub, batch_index_ack_enabled=True)
        got = [consumer.receive(TIMEOUT_MS) for _ in range(len(expected) + 2)]  # then m0 and m1, nothing between
        assert [m.data() for m in got] == [*expected, b"m0", b"m1"], sub
        assert [m.message_id().batch_index() for m in got[:len(expected)]] == \
            [int(e[1:]) for e in expected], sub
        for m in got:
            consumer.acknowledge(m)
        # The messages the reset acknowledged and those acknowledged now make the batch whole: no backlog left.
        # (A client acknowledging by batch index, as Pulsar's: the official clients' default waits for every message
        # of a batch to be acknowledged through it before it acknowledges the entry, with Pulsar too.)
        def drained(name: str = sub) -> bool:
            return backlog(admin, topic, name) == 0

        wait_for(drained, what=f"{sub}'s backlog to drain")
        consumer.close()
    # A non-batched entry is a batch of one: index 0 is the entry, with "excluded" the one after it.
    one_message: list[tuple[dict[str, object], bytes]] = [
        ({"batchIndex": 0}, b"m0"), ({"batchIndex": 0, "excluded": True}, b"m1"), ({"batchIndex": 3}, b"m0")]
    for fields, first in one_message:
        assert admin.post(f"{base}/subscription/at-2/resetcursor", _message_id(plain[0], **fields)).status == 204
        consumer = client.subscribe(topic, "at-2")
        assert consumer.receive(TIMEOUT_MS).data() == first, fields
        consumer.close()


def test_reset_cursor_into_a_batch_errors(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/plain"
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/subscription/s")
    batch = publish_batch(client, topic, 3)
    body = _message_id(batch[0], batchIndex=1)
    assert admin.post(f"{base}/subscription/s/resetcursor", {**body, "batchIndex": "1"}).status == 400
    assert admin.post(f"{base}/subscription/s/resetcursor", {**body, "batchIndex": True}).status == 400
    reply = admin.post(f"{base}/subscription/nope/resetcursor", body)
    assert reply.status == 404
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    reply = admin.post(f"/admin/v2/persistent/{ns}/parted/subscription/s/resetcursor", body)
    assert reply.status == 405 and reply.reason == "Reset-cursor at position is not allowed for partitioned-topic"
    # A negative index is none (Pulsar's default, -1), and an id past the end ignores the index: nothing to read.
    assert admin.post(f"{base}/subscription/s/resetcursor", {**body, "batchIndex": -5}).status == 204
    assert backlog(admin, topic, "s") == 1
    past = {"ledgerId": batch[0].ledger_id() + 1000, "entryId": 0, "batchIndex": 1}
    assert admin.post(f"{base}/subscription/s/resetcursor", past).status == 204
    assert backlog(admin, topic, "s") == 0


def test_expire_messages_up_to_a_message_id_errors(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/plain"
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/subscription/s")
    ids = publish(client, topic, 2)
    body = _message_id(ids[0])
    assert admin.post(f"{base}/subscription/s/expireMessages").status == 400  # no message id
    assert admin.post(f"{base}/subscription/s/expireMessages", {"ledgerId": "x", "entryId": 0}).status == 400
    assert admin.post(f"{base}/subscription/s/expireMessages", {**body, "batchIndex": "1"}).status == 400
    assert admin.post(f"{base}/subscription/s/expireMessages", {**body, "excluded": 1}).status == 400
    reply = admin.post(f"{base}/subscription/s/expireMessages", {**body, "partitionIndex": 0})
    assert reply.status == 412 and "partition index" in reply.reason
    reply = admin.post(f"{base}/subscription/nope/expireMessages", body)
    assert reply.status == 404 and reply.reason == f"Subscription nope not found for topic {topic}"
    reply = admin.post(f"{base}/subscription/pulsar.repl.elsewhere/expireMessages", body)
    assert reply.status == 404 and reply.reason == "Replicator not found"
    assert admin.post(f"/admin/v2/persistent/{ns}/missing/subscription/s/expireMessages", body).status == 404
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    reply = admin.post(f"/admin/v2/persistent/{ns}/parted/subscription/s/expireMessages", body)
    assert reply.status == 405 and reply.reason == "Expire message at position is not supported for partitioned-topic"
    # A partition is one topic: its own index goes in the body.
    partition = f"persistent://{ns}/parted-partition-1"
    admin.ok("PUT", f"/admin/v2/{rest_path(partition)}/subscription/s", {"ledgerId": -1, "entryId": -1})
    pids = publish(client, partition, 3)  # (published to the partition's name: the ids say partition -1)
    path = f"/admin/v2/{rest_path(partition)}/subscription/s/expireMessages"
    assert admin.post(path, _message_id(pids[1])).status == 412
    assert admin.post(path, _message_id(pids[1], partitionIndex=1)).status == 204
    assert backlog(admin, partition, "s") == 1
    assert admin.post(f"/admin/v2/non-persistent/{ns}/live/subscription/s/expireMessages", body).status == 405
    assert backlog(admin, topic, "s") == 2  # none of the refused calls moved it


def _at(mid: pulsar.MessageId) -> str:
    return f"{mid.ledger_id()}:{mid.entry_id()}"


def test_analyze_subscription_backlog(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic("analyze")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1})
    ids = publish(client, topic, 4)
    batch = publish_batch(client, topic, 3)
    analyze = f"{base}/subscription/s/analyzeBacklog"
    # Pulsar's AnalyzeSubscriptionBacklogResult: no entry filters here, so everything is accepted.
    assert admin.ok("POST", analyze) == {
        "entries": 5, "messages": 7, "filterRejectedEntries": 0, "filterAcceptedEntries": 5,
        "filterRescheduledEntries": 0, "filterRejectedMessages": 0, "filterAcceptedMessages": 7,
        "filterRescheduledMessages": 0, "aborted": False, "firstMessageId": _at(ids[0]), "lastMessageId": _at(batch[0]),
    }
    # An individually acknowledged entry is not backlog; a start position skips what is before it.
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    received = [consumer.receive(TIMEOUT_MS) for _ in range(2)]
    consumer.acknowledge(received[1])
    wait_for(lambda: admin.ok("POST", analyze)["entries"] == 4, what="the ack")
    consumer.close()
    found = admin.ok("POST", analyze)
    assert (found["messages"], found["firstMessageId"]) == (6, _at(ids[0]))
    found = admin.ok("POST", analyze, {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()})
    assert (found["entries"], found["messages"], found["firstMessageId"]) == (3, 5, _at(ids[2]))
    # Nothing unacknowledged: zeros, and no first or last message id (Pulsar leaves nulls out).
    assert admin.post(f"{base}/subscription/s/skip_all").status == 204
    assert admin.ok("POST", analyze) == {
        "entries": 0, "messages": 0, "filterRejectedEntries": 0, "filterAcceptedEntries": 0,
        "filterRescheduledEntries": 0, "filterRejectedMessages": 0, "filterAcceptedMessages": 0,
        "filterRescheduledMessages": 0, "aborted": False}
    assert backlog(admin, topic, "s") == 0  # the analysis moved nothing


def test_analyze_subscription_backlog_errors(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/plain"
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/subscription/s")
    reply = admin.post(f"{base}/subscription/nope/analyzeBacklog")
    assert reply.status == 404 and reply.reason == f"Subscription nope not found for topic {topic}"
    assert admin.post(f"{base}/subscription/s/analyzeBacklog", {"ledgerId": "x"}).status == 400
    assert admin.post(f"/admin/v2/persistent/{ns}/missing/subscription/s/analyzeBacklog").status == 404
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2)
    reply = admin.post(f"/admin/v2/persistent/{ns}/parted/subscription/s/analyzeBacklog")
    assert reply.status == 405 and reply.reason.startswith("Analyze backlog on a partitioned topic is not allowed")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/subscription/s")
    assert admin.ok("POST", f"/admin/v2/persistent/{ns}/parted-partition-0/subscription/s/analyzeBacklog",
                    )["entries"] == 0
    assert admin.post(f"/admin/v2/non-persistent/{ns}/missing/subscription/s/analyzeBacklog").status == 404
    live = f"non-persistent://{ns}/live"
    consumer = client.subscribe(live, "s")
    reply = admin.post(f"/admin/v2/{rest_path(live)}/subscription/s/analyzeBacklog")
    assert reply.status == 405 and reply.reason == "Unsupported operation analyzeBacklog for NonPersistentSubscription"
    consumer.close()


def test_analyze_subscription_backlog_stops_at_the_scan_limit(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Pulsar's scan stops, aborted, at the subscriptionBacklogScanMaxEntries-th entry, which it does not count.
    with BrokerThread(data_dir=tmp_path_factory.mktemp("scan-limit"), subscriptionBacklogScanMaxEntries=3) as b:
        admin = Admin(b.web_url)
        c = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            topic = new_topic("scan-limit")
            base = f"/admin/v2/{rest_path(topic)}"
            admin.ok("PUT", f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1})
            ids = publish(c, topic, 5)
            found = admin.ok("POST", f"{base}/subscription/s/analyzeBacklog")
            assert (found["entries"], found["aborted"], found["lastMessageId"]) == (2, True, _at(ids[1]))
            found = admin.ok("POST", f"{base}/subscription/s/analyzeBacklog",
                             {"ledgerId": ids[3].ledger_id(), "entryId": ids[3].entry_id()})
            assert (found["entries"], found["aborted"]) == (2, False)
        finally:
            c.close()


def test_truncate_topic(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    # Pulsar's DELETE .../truncate: every cursor's backlog cleared, every ledger but the current one deleted,
    # retention or not.
    ns = admin.new_namespace()
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    # (deduplication's cursor is not cleared: it snapshots to the end first, so it holds nothing back)
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    topic = f"persistent://{ns}/kept"
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", f"{base}/subscription/s", {"ledgerId": -1, "entryId": -1})
    for _ in range(2):  # each reload opens a new ledger
        publish(client, topic, 3)
        admin.ok("PUT", f"{base}/unload")
    ids = publish(client, topic, 2)
    internal = admin.ok("GET", f"{base}/internalStats")
    ledgers = [ledger["ledgerId"] for ledger in internal["ledgers"]]
    assert len(ledgers) >= 3 and ids[-1].ledger_id() == ledgers[-1]
    loaded = pulsar_broker.server.service.get_topic_if_loaded(TopicName.parse(topic))
    assert loaded is not None and "pulsar.dedup" in loaded.match_kind(lambda t: t.ledger.cursors, lambda t: {})
    assert admin.post(f"{base}/trim").status == 200  # (infinite retention: a trim keeps them all)
    assert len(admin.ok("GET", f"{base}/internalStats")["ledgers"]) == len(ledgers)
    assert backlog(admin, topic, "s") == 8
    assert admin.delete(f"{base}/truncate").status == 204
    assert [ledger["ledgerId"] for ledger in admin.ok("GET", f"{base}/internalStats")["ledgers"]] == ledgers[-1:]
    assert backlog(admin, topic, "s") == 0
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"after")
    assert consumer.receive(TIMEOUT_MS).data() == b"after"  # nothing from before
    producer.close()
    consumer.close()
    assert admin.delete(f"/admin/v2/persistent/{ns}/missing/truncate").status == 404
    reply = admin.delete(f"/admin/v2/non-persistent/{ns}/live/truncate")
    assert reply.status == 412 and reply.reason == "unsupport truncate"


def test_truncate_moves_readers_on_to_what_is_published_next(admin: Admin, client: pulsar.Client) -> None:
    # Pulsar's ManagedLedgerImpl.asyncTruncate clears the backlog of every cursor of the ledger, a reader's
    # non-durable one too: the reader goes on with what is published after the truncate, not with the entries of
    # the current ledger (which the truncate keeps).
    topic = new_topic("truncate-reader")
    publish(client, topic, 10)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=1)
    assert reader.read_next(TIMEOUT_MS).data() == b"m0"
    assert admin.delete(f"/admin/v2/{rest_path(topic)}/truncate").status == 204
    producer = client.create_producer(topic)
    producer.send(b"after")
    before_it = []
    while (data := reader.read_next(TIMEOUT_MS).data()) != b"after":
        before_it.append(data)
    assert len(before_it) <= 2, before_it  # (what was already on its way to the client: its queue holds one)
    producer.close()
    reader.close()


def test_truncate_keeps_the_sequence_ids_of_deduplication(admin: Admin, client: pulsar.Client) -> None:
    # Pulsar 4.0.7's truncate clears the pulsar.dedup cursor too: asyncClearBacklog is asyncMarkDelete(last position)
    # with no properties, which drops the sequence ids MessageDeduplication snapshots in them, and its periodic
    # snapshot skips a cursor at the last entry. A topic reloaded before more is published would then store a
    # message its producer sends again. Ours snapshots first and keeps the cursor: the resent message is dropped.
    ns = admin.new_namespace()
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    topic = f"persistent://{ns}/dedup"
    base = f"/admin/v2/{rest_path(topic)}"
    producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
    for i in range(3):
        producer.send(f"d{i}".encode(), sequence_id=i)
    producer.close()
    assert admin.delete(f"{base}/truncate").status == 204
    admin.ok("PUT", f"{base}/unload")
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
    assert producer.last_sequence_id() == 2
    producer.send(b"d1 again", sequence_id=1)  # acknowledged, not stored
    producer.send(b"d3", sequence_id=3)
    assert reader.read_next(TIMEOUT_MS).data() == b"d3"
    producer.close()
    reader.close()


def test_truncate_partitioned_topic(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    parted = f"/admin/v2/persistent/{ns}/parted"
    admin.ok("PUT", f"{parted}/partitions", 2)
    admin.ok("PUT", f"{parted}/subscription/s", {"ledgerId": -1, "entryId": -1})
    for i in range(2):
        publish(client, f"persistent://{ns}/parted-partition-{i}", 2)
    assert admin.delete(f"{parted}/truncate").status == 204
    for i in range(2):
        assert backlog(admin, f"persistent://{ns}/parted-partition-{i}", "s") == 0


def test_a_topic_named_with_a_slash_and_the_topic_of_its_prefix_coexist(admin: Admin, client: pulsar.Client,
                                                                        pulsar_broker: BrokerThread) -> None:
    """A local name may hold "/" (``a%2Fx`` in a path): its managed ledger is named as Pulsar's TopicName.
    getPersistenceNamingEncoding names it (the local name through Codec.encode: ``.../persistent/a%2Fx``), so it
    is no child of topic ``a``'s; both are used, listed once each, and load again after an unload."""
    ns = admin.new_namespace()
    slashed, prefix = f"persistent://{ns}/a/x", f"persistent://{ns}/a"
    assert admin.put(f"/admin/v2/persistent/{ns}/a%2Fx").status == 204
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}") == [slashed]  # (no "a" made by the way)
    for topic in (slashed, prefix):
        consumer = client.subscribe(topic, "s")
        publish(client, topic, 3)
        got = [consumer.receive(TIMEOUT_MS) for _ in range(3)]
        assert [m.data() for m in got] == [b"m0", b"m1", b"m2"]
        consumer.acknowledge(got[0])
        consumer.close()
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}") == [prefix, slashed]
    factory = pulsar_broker.server.service.ledger_factory
    assert [n for n in factory.list_names() if n.startswith(f"{ns}/")] == [f"{ns}/persistent/a",
                                                                          f"{ns}/persistent/a%2Fx"]
    for path in (f"persistent/{ns}/a%2Fx", f"persistent/{ns}/a"):
        admin.ok("PUT", f"/admin/v2/{path}/unload")
        stats = admin.ok("GET", f"/admin/v2/{path}/stats")
        assert list(stats["subscriptions"]) == ["s"] and stats["subscriptions"]["s"]["msgBacklog"] == 2


def test_a_topic_named_in_a_path_is_decoded_as_pulsar_decodes_it(admin: Admin, client: pulsar.Client) -> None:
    """The local name in a path is read as Pulsar's resources read it (@Encoded, then Codec.decode, that is
    java.net.URLDecoder: AdminResource.validateTopicName, TopicLookupBase.getTopicName): ``+`` is a space, as
    Pulsar's Java admin client writes one (TopicName.getEncodedLocalName: Codec.encode), and ``%2B`` a ``+``. So
    ``pulsar-admin topics create "persistent://t/ns/a b:ü"`` (path ``a+b%3A%C3%BC``) makes topic ``a b:ü``, not
    ``a+b:ü``; every admin call and the HTTP lookup name it so."""
    ns = admin.new_namespace()
    spaced, plus = f"persistent://{ns}/a b:ü", f"persistent://{ns}/c+d"
    assert admin.put(f"/admin/v2/persistent/{ns}/a+b%3A%C3%BC").status == 204
    assert admin.put(f"/admin/v2/persistent/{ns}/c%2Bd").status == 204
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}") == [spaced, plus]
    consumer = client.subscribe(spaced, "s")
    publish(client, spaced, 2)
    assert consumer.receive(TIMEOUT_MS).data() == b"m0"
    consumer.close()
    for encoded in ("a+b%3A%C3%BC", "a%20b%3A%C3%BC"):  # (Codec.encode's form and the usual percent-encoding)
        stats = admin.ok("GET", f"/admin/v2/persistent/{ns}/{encoded}/stats")
        assert stats["subscriptions"]["s"]["msgBacklog"] == 2, encoded
        assert "brokerUrl" in admin.ok("GET", f"/lookup/v2/topic/persistent/{ns}/{encoded}"), encoded
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/a+b%3A%C3%BC/unload")
    admin.ok("DELETE", f"/admin/v2/persistent/{ns}/a+b%3A%C3%BC/subscription/s")
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}/a+b%3A%C3%BC/subscriptions") == []
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}") == [spaced, plus]  # (no topic "a+b:ü" made by the way)


def test_a_subscription_in_a_path_is_decoded_twice_as_pulsar_decodes_it(admin: Admin, client: pulsar.Client) -> None:
    """Pulsar's PersistentTopics decodes .../subscription/{subName} twice: as a path segment (JAX-RS), then with
    Codec.decode in each resource method (deleteSubscription, createSubscription, peekNthMessage, resetCursor, ...).
    Its Java admin client (TopicsImpl) encodes the name twice to match: Codec.encode, then the segment
    percent-encoded. The paths below are the ones pulsar-client-admin 4.0.7 sends: ``s b+c`` is ``s%2Bb%252Bc``,
    ``ü:x`` is ``%25C3%25BC%253Ax``. Ours read them once, making and addressing ``s+b%2Bc``."""
    topic = new_topic("sub-names")
    base = f"/admin/v2/{rest_path(topic)}"
    admin.ok("PUT", base)
    paths = {"s b+c": f"{base}/subscription/s%2Bb%252Bc", "ü:x": f"{base}/subscription/%25C3%25BC%253Ax"}
    for path in paths.values():
        assert admin.put(path, {"ledgerId": -1, "entryId": -1}).status == 204
    assert sorted(admin.ok("GET", f"{base}/subscriptions")) == ["s b+c", "ü:x"]
    publish(client, topic, 3)
    for name, path in paths.items():
        peeked = admin.get(f"{path}/position/2")
        assert peeked.status == 200 and peeked.body == b"m1", name
        admin.ok("POST", f"{path}/skip_all")
        assert backlog(admin, topic, name) == 0
        admin.ok("POST", f"{path}/resetcursor/0")
        assert backlog(admin, topic, name) == 3
        admin.ok("PUT", f"{path}/properties", {"k": name})
        assert admin.ok("GET", f"{path}/properties") == {"k": name}
        admin.ok("DELETE", path)
    assert admin.ok("GET", f"{base}/subscriptions") == []
