"""Fields Pulsar 4.0.7's admin answers have that ours lacked, found by asking a Pulsar 4.0.7 standalone and our broker
the same GETs after the same small workload: topic, subscription and consumer stats, a message id's batchIndex and
batchSize, the lookup's TLS URLs, a namespace's policies, the load report, a cluster's data. Each checked here with
its value."""

from __future__ import annotations

import re

import pulsar

from broker.dispatch.key_selector import key_hash
from tests.admin.conftest import Admin, rest_path
from tests.waiting import wait_for

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$")


def test_topic_subscription_and_consumer_stats_have_pulsar_4_fields(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/fields"
    base = f"/admin/v2/{rest_path(topic)}"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(b"m%d" % i)
    consumer.acknowledge(consumer.receive(10_000))
    stats = wait_for(lambda: (s := admin.stats(topic))["subscriptions"]["s"]["consumers"][0]["lastAckedTimestamp"] > 0
                     and s, what="the acknowledgement to arrive")
    assert (stats["backlogQuotaLimitSize"], stats["backlogQuotaLimitTime"]) == (-1, -1)  # (no quota)
    assert isinstance(stats["oldestBacklogMessageAgeSeconds"], int) and stats["oldestBacklogMessageAgeSeconds"] >= -1
    assert (stats["ongoingTxnCount"], stats["abortedTxnCount"], stats["committedTxnCount"]) == (0, 0, 0)
    assert stats["systemTopicBytesInCounter"] == 0 and stats["bytesOutInternalCounter"] == 0
    assert (stats["lastOffloadLedgerId"], stats["delayedMessageIndexSizeInBytes"]) == (0, 0)
    sub = stats["subscriptions"]["s"]
    assert sub["lastConsumedFlowTimestamp"] > 0  # (the client's first FLOW)
    assert sub["msgInReplay"] == 0 and sub["earliestMsgPublishTimeInBacklog"] == 0
    assert all(sub[f"dispatchThrottled{kind}EventsBy{limit}Limit"] == 0
               for kind in ("Msg", "Bytes") for limit in ("Topic", "Subscription", "Broker"))
    assert sub["filterProcessedMsgCount"] == sub["drainingHashesCount"] == 0
    c = sub["consumers"][0]
    assert c["lastConsumedFlowTimestamp"] == sub["lastConsumedFlowTimestamp"]
    assert ISO.match(c["lastAckedTime"]) and ISO.match(c["lastConsumedTime"])
    assert c["lastAckedTime"] != "1970-01-01T00:00:00Z" and c["drainingHashesUnackedMessages"] == 0
    # A quota shows in the topic's stats.
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/backlogQuota", {"limitSize": 1 << 20, "policy": "producer_exception"})
    assert wait_for(lambda: admin.stats(topic)["backlogQuotaLimitSize"] == 1 << 20, what="the quota in the stats")
    # A message id: batchIndex -1 and batchSize 0 outside a batch.
    last = admin.ok("GET", f"{base}/lastMessageId")
    assert (last["batchIndex"], last["batchSize"], last["partitionIndex"]) == (-1, 0, -1)
    consumer.close()


def test_lookup_policies_and_load_report_as_pulsar_4_answers(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    client.create_producer(f"persistent://{ns}/t").send(b"x")
    lookup = admin.ok("GET", f"/lookup/v2/topic/persistent/{ns}/t")
    # No TLS here: Pulsar's LookupData leaves the TLS URLs out (null), and its deprecated brokerUrlSsl is "".
    assert "brokerUrlTls" not in lookup and "httpUrlTls" not in lookup and lookup["brokerUrlSsl"] == ""
    assert lookup["brokerUrl"].startswith("pulsar://") and lookup["nativeUrl"] == lookup["brokerUrl"]
    policies = admin.ok("GET", f"/admin/v2/namespaces/{ns}")
    assert policies["offload_threshold_in_seconds"] == -1 and policies["migrated"] is False
    assert "schema_auto_update_compatibility_strategy" not in policies  # (null in 4.0.7: left out)
    report = admin.ok("GET", "/admin/v2/broker-stats/load-report")
    assert report["loadManagerClassName"] == "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
    assert report["startTimestamp"] > 0 and 0 <= report["maxResourceUsage"]
    assert "webServiceUrlTls" not in report and "pulsarServiceUrlTls" not in report


def test_non_persistent_stats_and_cluster_data_as_pulsar_4_answers(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    live = f"non-persistent://{ns}/live"
    client.subscribe(live, "shared", consumer_type=pulsar.ConsumerType.Shared)
    client.create_producer(live).send(b"x")
    stats = admin.ok("GET", f"/admin/v2/{rest_path(live)}/stats")
    # NonPersistentTopic sets no deduplication status, and a Shared subscription has no active consumer: both null in
    # Pulsar's stats, so left out of its JSON.
    assert "deduplicationStatus" not in stats and "activeConsumerName" not in stats["subscriptions"]["shared"]
    assert stats["subscriptions"]["shared"]["msgInReplay"] == 0
    cluster = admin.ok("GET", "/admin/v2/clusters/standalone")
    assert cluster["brokerClientTlsEnabled"] is False and cluster["tlsAllowInsecureConnection"] is False
    assert (cluster["brokerClientTlsTrustStoreType"], cluster["brokerClientTlsKeyStoreType"]) == ("JKS", "JKS")
    assert cluster["brokerClientSslFactoryPlugin"] == "org.apache.pulsar.common.util.DefaultPulsarSslFactory"


def test_partitioned_stats_and_internal_configuration_as_pulsar_4_answers(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/parted"
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/partitions", 2)
    client.create_producer(topic).send(b"p")
    stats = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/partitioned-stats")
    assert stats["earliestMsgPublishTimeInBacklogs"] == 0
    assert stats["nonContiguousDeletedMessagesRangesSerializedSize"] == 0
    assert "deduplicationStatus" not in stats  # (PartitionedTopicStatsImpl.add leaves it null)
    assert stats["msgInCounter"] == 1 and set(stats["metadata"]) >= {"partitions"}
    # pulsar-admin brokers get-internal-config: where the metadata is (one store for both here), BookKeeper's root.
    internal = admin.ok("GET", "/admin/v2/brokers/internal-configuration")
    url = internal["metadataStoreUrl"]
    assert url.startswith(("local:", "memory:")) and internal["ledgersRootPath"] == "/ledgers"
    assert internal["zookeeperServers"] == internal["configurationStoreServers"] == url
    assert internal["configurationMetadataStoreUrl"] == url and "bookkeeperMetadataServiceUri" not in internal


def _hash_in(h: int, ranges: list[list[int]]) -> bool:
    return any(start <= h <= end for start, end in ranges)


def test_key_shared_stats_show_hash_ranges_and_draining_hashes(admin: Admin, client: pulsar.Client) -> None:
    """Pulsar 4.0's Key_Shared stats (PIP-379): the subscription's keySharedMode, each consumer's keyHashRangeArrays,
    and the draining hashes: a hash the ring moved to a newcomer while the old consumer holds it unacked, held back
    from the newcomer (blockedAttempts) until the old one acknowledges it (drainingHashesClearedTotal)."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/ks"
    first = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="first")
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(40)]
    for k in keys:
        producer.send(b"x", partition_key=k)
    held = [first.receive(10_000) for _ in keys]
    sub = admin.stats(topic)["subscriptions"]["ks"]
    assert (sub["keySharedMode"], sub["allowOutOfOrderDelivery"]) == ("AUTO_SPLIT", False)
    (alone,) = sub["consumers"]
    assert alone["keyHashRangeArrays"] == [[1, 65535]] and alone["drainingHashes"] == []
    assert alone["avgMessagesPerEntry"] == 1 and alone["address"].startswith("/127.0.0.1:")

    second = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="second")
    sub = wait_for(lambda: (s := admin.stats(topic)["subscriptions"]["ks"]) and len(s["consumers"]) == 2 and s,
                   what="the second consumer in the stats")
    by_name = {c["consumerName"]: c for c in sub["consumers"]}
    moved = {key_hash(k.encode(), sticky=False) for k in keys
             if _hash_in(key_hash(k.encode(), sticky=False), by_name["second"]["keyHashRangeArrays"])}
    assert moved, "the newcomer took none of the 40 keys' hashes"
    draining = by_name["first"]["drainingHashes"]
    assert {d["hash"] for d in draining} == moved and all(d["unackMsgs"] >= 1 for d in draining)
    assert by_name["first"]["drainingHashesCount"] == sub["drainingHashesCount"] == len(moved)
    assert by_name["first"]["drainingHashesUnackedMessages"] == sum(d["unackMsgs"] for d in draining)
    assert by_name["second"]["drainingHashes"] == []

    # A message of a moved key waits for the first consumer's ack: a blocked attempt.
    moved_key = next(k for k in keys if key_hash(k.encode(), sticky=False) in moved)
    producer.send(b"y", partition_key=moved_key)
    wait_for(lambda: any(d["blockedAttempts"] > 0 for c in admin.stats(topic)["subscriptions"]["ks"]["consumers"]
                         for d in c.get("drainingHashes", [])), what="a blocked attempt")
    for m in held:
        first.acknowledge(m)
    assert second.receive(10_000).partition_key() == moved_key
    sub = wait_for(lambda: (s := admin.stats(topic)["subscriptions"]["ks"])["drainingHashesCount"] == 0 and s,
                   what="the draining hashes to clear")
    by_name = {c["consumerName"]: c for c in sub["consumers"]}
    assert by_name["first"]["drainingHashesClearedTotal"] == sub["drainingHashesClearedTotal"] == len(moved)
    first.close()
    second.close()


def test_sticky_and_out_of_order_key_shared_stats(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    sticky = client.subscribe(f"persistent://{ns}/sticky", "s", consumer_type=pulsar.ConsumerType.KeyShared,
                              key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                                  pulsar.KeySharedMode.Sticky, sticky_ranges=[(1000, 1999), (0, 999), (5000, 6000)]))
    sub = admin.stats(f"persistent://{ns}/sticky")["subscriptions"]["s"]
    assert sub["keySharedMode"] == "STICKY"
    # The declared ranges, merged; no draining hashes kept in this mode (Pulsar keeps them on AUTO_SPLIT alone).
    assert sub["consumers"][0]["keyHashRangeArrays"] == [[0, 1999], [5000, 6000]]
    assert "drainingHashes" not in sub["consumers"][0]
    loose = client.subscribe(f"persistent://{ns}/loose", "s", consumer_type=pulsar.ConsumerType.KeyShared,
                             key_shared_policy=pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=True))
    sub = admin.stats(f"persistent://{ns}/loose")["subscriptions"]["s"]
    assert (sub["keySharedMode"], sub["allowOutOfOrderDelivery"]) == ("AUTO_SPLIT", True)
    assert "drainingHashes" not in sub["consumers"][0]
    shared = client.subscribe(f"persistent://{ns}/shared", "s", consumer_type=pulsar.ConsumerType.Shared)
    sub = admin.stats(f"persistent://{ns}/shared")["subscriptions"]["s"]
    assert "keySharedMode" not in sub and "keyHashRangeArrays" not in sub["consumers"][0]
    for c in (sticky, loose, shared):
        c.close()
