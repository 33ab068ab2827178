"""Geo-replication between two brokers of two clusters ("a" and "b"), with the official client
producing and consuming on both sides."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import cast

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.admin.partitioned_topics import PARTITIONED_METADATA_TYPE
from broker.embedded import BrokerThread
from broker.metadata import policy_copies
from broker.metadata.store import BrokerMetadata
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import SNAPSHOT, read_entry_metadata
from broker.service.replication import NonPersistentReplicator
from broker.service.schemas import encode_version
from broker.topic_name import TopicName
from broker.vocabulary import BROKER_ENTRY_INTERCEPTORS
from cluster import processes
from managed_ledger import Position
from tests.admin.conftest import Admin, rest_path
from tests.admin.metric_table import expected
from tests.component.wire import T, WireClient, producer_cmd, send_frame
from tests.reliability.broker_process import start_broker_with_web
from tests.scripted_broker import commands_from
from tests.waiting import wait_for

TIMEOUT_MS = 10_000


class Pair:
    def __init__(self, a: BrokerThread, b: BrokerThread) -> None:
        self.a, self.b = a, b
        self.admin_a, self.admin_b = Admin(a.web_url), Admin(b.web_url)
        self.client_a = pulsar.Client(a.service_url, operation_timeout_seconds=10)
        self.client_b = pulsar.Client(b.service_url, operation_timeout_seconds=10)

    def namespace(self, clusters: list[str]) -> str:
        """A fresh namespace of tenant "geo" on both brokers, replicated to ``clusters``."""
        ns = f"geo/ns-{uuid.uuid4().hex[:8]}"
        for admin in (self.admin_a, self.admin_b):
            admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
            admin.ok("POST", f"/admin/v2/namespaces/{ns}/replication", clusters)
        return ns

    def close(self) -> None:
        self.client_a.close()
        self.client_b.close()


def both_ways(pair: Pair, topic: str) -> tuple[pulsar.Consumer, pulsar.Consumer, pulsar.Producer, pulsar.Producer]:
    """A consumer on each side, an unbatched producer on a and a batching one on b."""
    on_a, on_b = pair.client_a.subscribe(topic, "s"), pair.client_b.subscribe(topic, "s")
    producer_a = pair.client_a.create_producer(topic, batching_enabled=False)
    producer_b = pair.client_b.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    return on_a, on_b, producer_a, producer_b


def exchange(on_a: pulsar.Consumer, on_b: pulsar.Consumer, producer_a: pulsar.Producer,
             producer_b: pulsar.Producer, n: int) -> None:
    """Each side publishes n messages; each consumer gets all 2n, each side's in its order."""
    for i in range(n):
        producer_a.send(b"a%d" % i)
    for i in range(n):
        producer_b.send_async(b"b%d" % i, None)
    producer_b.flush()
    got_b, got_a = receive(on_b, 2 * n), receive(on_a, 2 * n)
    for got in (got_a, got_b):
        assert [m for m in got if m.startswith(b"a")] == [b"a%d" % i for i in range(n)]
        assert [m for m in got if m.startswith(b"b")] == [b"b%d" % i for i in range(n)]


def link(admin: Admin, cluster: str, peer: BrokerThread) -> None:
    """Create or update cluster data on ``admin``'s broker: ``cluster`` is reached at ``peer``."""
    method = "POST" if admin.get(f"/admin/v2/clusters/{cluster}").status == 200 else "PUT"
    admin.ok(method, f"/admin/v2/clusters/{cluster}",
             {"serviceUrl": peer.web_url, "brokerServiceUrl": peer.service_url})


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    # Cluster a stamps broker entry metadata (PIP-70) on what it stores, b does not: replicators
    # must send entries without it, and a's consumers (the Python client does not ask for it) get
    # entries without it.
    with (BrokerThread(clusterName="a", data_dir=tmp_path_factory.mktemp("a"),
                       brokerDeleteInactiveTopicsEnabled=False,
                       brokerEntryMetadataInterceptors=list(BROKER_ENTRY_INTERCEPTORS)) as a,
          BrokerThread(clusterName="b", data_dir=tmp_path_factory.mktemp("b"),
                       brokerDeleteInactiveTopicsEnabled=False) as b):
        p = Pair(a, b)
        link(p.admin_a, "b", b)
        link(p.admin_b, "a", a)
        for admin in (p.admin_a, p.admin_b):
            admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b"]})
        yield p
        p.close()


def partitions(admin: Admin, path: str) -> int:
    """A partitioned topic's count, 0 while the broker does not know it."""
    reply = admin.get(f"/admin/v2/{path}/partitions")
    return int(reply.json["partitions"]) if reply.status == 200 else 0


def receive(consumer: pulsar.Consumer, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        msg = consumer.receive(TIMEOUT_MS)
        out.append(msg.data())
        consumer.acknowledge(msg)
    return out


def replication(admin: Admin, topic: str) -> dict[str, dict[str, object]]:
    return admin.stats(topic)["replication"]  # type: ignore[no-any-return]


def replicator_caught_up(admin: Admin, topic: str, remote: str) -> bool:
    return replication(admin, topic)[remote]["replicationBacklog"] == 0


def replicator_connected(admin: Admin, topic: str, remote: str) -> object:
    return replication(admin, topic).get(remote, {}).get("connected")


def test_both_ways_in_order_without_loops(pair: Pair) -> None:
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/orders"
    on_a, on_b, producer_a, producer_b = both_ways(pair, topic)
    exchange(on_a, on_b, producer_a, producer_b, 20)  # each side's own order is kept on the other side
    # Nothing comes back: each side stored its 20 messages and the other's 20 (one batch entry or
    # more for b's), and both replicators caught up.
    for admin, remote in ((pair.admin_a, "b"), (pair.admin_b, "a")):
        wait_for(partial(replicator_caught_up, admin, topic, remote), what="the replicator to catch up")
        stats = admin.stats(topic)
        assert stats["msgInCounter"] == 40
        assert list(stats["subscriptions"]) == ["s"]  # the replication cursor is not a subscription
        out = replication(admin, topic)[remote]
        assert out["connected"] is True and out["msgOutCounter"] == 20
        assert str(out["outboundConnection"]).startswith("pulsar://")
    with pytest.raises(pulsar.Timeout):
        on_a.receive(200)


def test_a_broken_link_resends_without_duplicates_when_the_remote_deduplicates(pair: Pair) -> None:
    # The link to b breaks while messages flow: the replicator reconnects and resends what b had
    # not confirmed; b's deduplication (by original producer and sequence id) drops the repeats,
    # so b's consumer gets every message once, in order.
    ns = pair.namespace(["a", "b"])
    pair.admin_b.ok("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    topic = f"persistent://{ns}/flaky"
    on_b = pair.client_b.subscribe(topic, "s")
    producer = pair.client_a.create_producer(topic, batching_enabled=False, block_if_queue_full=True)

    async def break_link() -> bool:
        for connection in list(pair.b.server.connections):
            if any(p.name == "pulsar.repl.a" for p in connection.cnx.producers.values()):
                assert connection.transport is not None
                connection.transport.abort()
                return True
        return False

    for i in range(600):
        producer.send_async(b"m%d" % i, None)
        if i in (200, 400):
            producer.flush()
            replicator = pair.a.server.service.topics[TopicName.parse(topic).full].replicators["b"]
            wait_for(lambda: pair.b.run_coroutine(break_link()),
                     what=f"the replicator's connection to break (i={i}, connected={replicator.connected}, "
                          f"error={replicator.last_error!r})")
    producer.flush()
    assert receive(on_b, 600) == [b"m%d" % i for i in range(600)]
    with pytest.raises(pulsar.Timeout):
        on_b.receive(300)
    assert pair.admin_b.stats(topic)["msgInCounter"] >= 600


def test_metadata_and_producer_names_on_the_remote_side(pair: Pair) -> None:
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/meta"
    on_b = pair.client_b.subscribe(topic, "s")
    producer = pair.client_a.create_producer(topic, producer_name="app-producer")
    producer.send(b"hello", properties={"k": "v"}, partition_key="key-1")
    msg = on_b.receive(TIMEOUT_MS)
    assert msg.data() == b"hello" and msg.properties() == {"k": "v"} and msg.partition_key() == "key-1"
    assert msg.producer_name() == "app-producer"  # the original producer, not the replicator
    publishers = pair.admin_b.stats(topic)["publishers"]
    assert [p["producerName"] for p in publishers] == ["pulsar.repl.a"]
    inbound = replication(pair.admin_b, topic)["a"]
    assert inbound["inboundConnection"] is not None


def test_partitioned_topic(pair: Pair) -> None:
    # Each partition replicates on its own. The partitioned topic is created on a only: a creates it on b too, in
    # the background (Pulsar's internalCreatePartitionedTopicToReplicatedClustersInBackground).
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/parted"
    pair.admin_a.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 3)
    wait_for(lambda: partitions(pair.admin_b, f"persistent/{ns}/parted") == 3,
             what="the partitioned topic to be made on b")
    on_b = pair.client_b.subscribe(topic, "s")
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(b"m%d" % i, partition_key=f"k{i}")
    assert sorted(receive(on_b, 30)) == sorted(b"m%d" % i for i in range(30))
    stats = pair.admin_b.ok("GET", f"/admin/v2/persistent/{ns}/parted/partitioned-stats")
    assert stats["msgInCounter"] == 30
    wait_for(lambda: pair.admin_a.ok("GET", f"/admin/v2/persistent/{ns}/parted/partitioned-stats")
             ["replication"]["b"]["replicationBacklog"] == 0, what="every partition to be replicated")
    out = pair.admin_a.ok("GET", f"/admin/v2/persistent/{ns}/parted/partitioned-stats")["replication"]["b"]
    assert out["msgOutCounter"] == 30 and out["connected"] is True


def test_a_partitioned_topic_is_made_and_grown_on_the_other_replication_clusters(pair: Pair) -> None:
    """Pulsar 4.0: a partitioned topic created in a replicated namespace is created on its other clusters (with its
    properties, in the background, unless createLocalTopicOnly); growing it grows them before answering (unless
    updateLocalTopicOnly). A cluster that has it already keeps it."""
    ns = pair.namespace(["a", "b"])
    base = f"/admin/v2/persistent/{ns}"

    def on_b(topic: str) -> dict[str, object]:
        return pair.admin_b.ok("GET", f"{base}/{topic}/partitions")  # type: ignore[no-any-return]

    pair.admin_a.ok("PUT", f"{base}/local-only/partitions?createLocalTopicOnly=true", 2)
    pair.admin_b.ok("PUT", f"{base}/there-already/partitions?createLocalTopicOnly=true", 5)
    pair.admin_a.ok("PUT", f"{base}/there-already/partitions", 2)
    reply = pair.admin_a.call("PUT", f"{base}/both/partitions", {"partitions": 2, "properties": {"k": "v"}},
                              content_type=PARTITIONED_METADATA_TYPE)
    assert reply.status == 204, reply.body
    wait_for(lambda: partitions(pair.admin_b, f"persistent/{ns}/both") == 2,
             what="the partitioned topic to be made on b")
    assert on_b("both")["properties"] == {"k": "v"}
    assert pair.admin_b.get(f"{base}/local-only/partitions").status == 404  # (made before "both": its call was first)
    assert on_b("there-already")["partitions"] == 5
    pair.admin_a.ok("POST", f"{base}/both/partitions", 4)
    assert on_b("both")["partitions"] == 4  # (waited for)
    pair.admin_a.ok("POST", f"{base}/both/partitions?updateLocalTopicOnly=true", 6)
    assert on_b("both")["partitions"] == 4
    pair.admin_a.ok("POST", f"{base}/both/partitions", 6)  # (the same count here: b is still grown)
    assert on_b("both")["partitions"] == 6
    reply = pair.admin_a.post(f"{base}/local-only/partitions", 3)  # (b has no such partitioned topic: its answer)
    assert reply.status == 409, reply.body
    assert pair.admin_a.ok("GET", f"{base}/local-only/partitions")["partitions"] == 3  # (grown here first)


def test_global_topic_policies_are_copied_to_the_other_replication_clusters(pair: Pair) -> None:
    """A global topic policy (isGlobal=true) set on a is set as b's global policy too, as Pulsar replicates its
    __change_events: before b has the topic, then in force there; b's changes come back to a (and stop there); a's
    local policies stay a's; removing all of a topic's policies on a removes b's global ones, not b's local ones."""
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/g"
    base = f"/admin/v2/persistent/{ns}/g"
    metadata_a, metadata_b = pair.a.server.service.metadata, pair.b.server.service.metadata

    def global_on(metadata: BrokerMetadata, field: str) -> object:
        return metadata.topic_policy(topic, field, is_global=True)

    rate = {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": 1000, "ratePeriodInSecond": 2,
            "relativeToPublishRate": False}
    quota = {"limitSize": -1, "limitTime": 600, "policy": "producer_exception"}
    # (b makes no topic by itself, so a's replicator does not make it there before the copies arrive)
    pair.admin_b.ok("POST", f"/admin/v2/namespaces/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    pair.admin_a.ok("PUT", base)
    pair.admin_a.ok("POST", f"{base}/maxProducers?isGlobal=true", 2)
    pair.admin_a.ok("POST", f"{base}/messageTTL?messageTTL=120&isGlobal=true")
    pair.admin_a.ok("POST", f"{base}/backlogQuota?backlogQuotaType=message_age&isGlobal=true", quota)
    pair.admin_a.ok("POST", f"{base}/s%20b/dispatchRate?isGlobal=true", rate)
    pair.admin_a.ok("POST", f"{base}/maxConsumers", 3)  # (local: a's alone)
    wait_for(lambda: global_on(metadata_b, "subscriptionPolicies") is not None, what="the copies to reach b")
    assert global_on(metadata_b, "maxProducerPerTopic") == 2
    assert global_on(metadata_b, "messageTTLInSeconds") == 120
    assert global_on(metadata_b, "backLogQuotaMap") == global_on(metadata_a, "backLogQuotaMap")
    assert set(cast("dict[str, object]", global_on(metadata_b, "backLogQuotaMap"))) == {"message_age"}
    assert metadata_b.topic_policy(topic, "maxConsumerPerTopic") is None
    assert pair.admin_b.get(f"{base}/stats").status == 404
    pair.admin_b.ok("PUT", base)  # b makes the topic: the policies are there for it
    assert pair.admin_b.ok("GET", f"{base}/maxProducers?isGlobal=true") == 2
    assert pair.admin_b.get(f"{base}/maxProducers").unset
    assert pair.admin_b.ok("GET", f"{base}/s%20b/dispatchRate?applied=true") == rate
    producers = [pair.client_b.create_producer(topic) for _ in range(2)]
    with pytest.raises(pulsar.ProducerBusy):
        pair.client_b.create_producer(topic)
    for producer in producers:
        producer.close()
    # b's change comes back to a, and goes no further (a does not copy a copy back).
    pair.admin_b.ok("POST", f"{base}/maxProducers?isGlobal=true", 4)
    wait_for(lambda: global_on(metadata_a, "maxProducerPerTopic") == 4, what="b's change to reach a")
    pair.admin_b.ok("POST", f"{base}/maxConsumers", 5)  # (b's own local policy)
    assert pair.admin_a.delete(f"{base}/policies").status == 204
    wait_for(lambda: not metadata_b.global_topic_policies.get(topic), what="b's global policies to go")
    assert pair.admin_b.ok("GET", f"{base}/maxConsumers") == 5
    assert pair.admin_a.get(f"{base}/maxConsumers").unset
    assert global_on(metadata_a, "maxProducerPerTopic") is None


def test_a_global_policy_reaches_a_cluster_that_was_unreachable(pair: Pair) -> None:
    """A copy that cannot be sent (b's address wrong on a) waits in a's metadata store and is tried again until it
    goes through (the address mended), then leaves the store; a newer change of the same policy replaces the one
    waiting."""
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/late"
    base = f"/admin/v2/persistent/{ns}/late"
    metadata_a, metadata_b = pair.a.server.service.metadata, pair.b.server.service.metadata
    key = policy_copies.queue_key(ns, "b")
    pair.admin_a.ok("PUT", base)
    pair.admin_a.ok("POST", "/admin/v2/clusters/b", {"serviceUrl": "http://127.0.0.1:1",
                                                      "brokerServiceUrl": pair.b.service_url})
    try:
        pair.admin_a.ok("POST", f"{base}/maxProducers?isGlobal=true", 7)
        pair.admin_a.ok("POST", f"{base}/maxProducers?isGlobal=true", 8)
        assert [(c.topic, c.call.body) for c in policy_copies.changes(metadata_a.global_policy_copies[key])] == [
            (topic, 8)]
        assert metadata_b.topic_policy(topic, "maxProducerPerTopic", is_global=True) is None
    finally:
        link(pair.admin_a, "b", pair.b)
    wait_for(lambda: metadata_b.topic_policy(topic, "maxProducerPerTopic", is_global=True) == 8,
             what="the copy to reach b once its address is right", timeout=30)
    wait_for(lambda: key not in metadata_a.global_policy_copies, what="the copy to leave a's store")


def test_a_waiting_global_policy_survives_a_restart_of_its_broker(tmp_path: Path) -> None:
    """A global policy set on x while y cannot be reached is in x's metadata store when the call answers: x killed
    (kill -9 by pid) and started again on its data dir, then y's address mended on x, y gets it (the latest value)."""
    topic = "persistent://geo/ns/kept"
    base = "/admin/v2/persistent/geo/ns/kept"
    config = tmp_path / "x.conf"
    config.write_text("clusterName=x\n")
    with BrokerThread(clusterName="y", data_dir=tmp_path / "y") as y:
        admin_y = Admin(y.web_url)
        admin_y.ok("PUT", "/admin/v2/clusters/x", {})
        admin_y.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["x", "y"]})
        admin_y.ok("PUT", "/admin/v2/namespaces/geo/ns")
        proc, _, web_port = start_broker_with_web(tmp_path / "x", config)
        try:
            admin_x = Admin(f"http://127.0.0.1:{web_port}")
            admin_x.ok("PUT", "/admin/v2/clusters/y", {"serviceUrl": "http://127.0.0.1:1"})
            admin_x.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["x", "y"]})
            admin_x.ok("PUT", "/admin/v2/namespaces/geo/ns")
            admin_x.ok("POST", "/admin/v2/namespaces/geo/ns/replication", ["x", "y"])
            admin_x.ok("PUT", base)
            admin_x.ok("POST", f"{base}/maxProducers?isGlobal=true", 7)
            admin_x.ok("POST", f"{base}/messageTTL?messageTTL=90&isGlobal=true")
            admin_x.ok("POST", f"{base}/maxProducers?isGlobal=true", 8)
            proc.kill()
            proc.wait(timeout=30)
            processes.forget(proc.pid)
            proc, _, web_port = start_broker_with_web(tmp_path / "x", config)
            link(Admin(f"http://127.0.0.1:{web_port}"), "y", y)
            metadata_y = y.server.service.metadata
            wait_for(lambda: metadata_y.topic_policy(topic, "maxProducerPerTopic", is_global=True) == 8,
                     what="the change kept across x's restart to reach y", timeout=30)
            assert metadata_y.topic_policy(topic, "messageTTLInSeconds", is_global=True) == 90
        finally:
            processes.stop(proc.pid)
            proc.wait(timeout=30)


def test_topic_level_replication_clusters(pair: Pair) -> None:
    ns = pair.namespace(["a"])  # the namespace is not replicated; one topic of it is
    # Cluster b must serve the namespace for b's clients (and a's replicator) to be answered there; a lookup in a
    # namespace whose clusters leave b out is sent to b's peers, or refused (test_global_namespace.py).
    pair.admin_b.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a", "b"])
    topic = f"persistent://{ns}/chosen"
    path = f"/admin/v2/persistent/{ns}/chosen/replication"
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    assert pair.admin_a.ok("GET", path + "?applied=true") == ["a"]
    assert pair.admin_a.post(path, ["a", "nowhere"]).status == 403  # (Pulsar: "Invalid cluster id")
    assert pair.admin_a.post(path, ["a", "b"]).status == 204
    loaded = pair.a.server.service.topics[TopicName.parse(topic).full]
    wait_for(lambda: "b" in loaded.replicators, what="the replicator to start")
    on_b = pair.client_b.subscribe(topic, "s")
    producer.send(b"to b")
    assert receive(on_b, 1) == [b"to b"]
    assert pair.admin_a.delete(path).status == 204
    wait_for(lambda: not loaded.replicators, what="the replicator to stop")


def test_a_partitioned_topics_own_replication_clusters_get_the_partitioned_topic(pair: Pair) -> None:
    """Pulsar 4.0's internalSetReplicationClusters: before a partitioned topic's own replication clusters are stored,
    the partitioned topic is made on each of them (awaited, count only); a cluster that has it with another count
    is a 412 and nothing is stored."""
    ns = pair.namespace(["a"])  # (not replicated: only the topics' own clusters take them to b)
    pair.admin_b.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a", "b"])  # (b serves it for its clients)
    base = f"/admin/v2/persistent/{ns}"
    pair.admin_a.ok("PUT", f"{base}/parted/partitions", 3)
    assert pair.admin_b.get(f"{base}/parted/partitions").status == 404
    assert pair.admin_a.post(f"{base}/parted/replication", ["a", "b"]).status == 204
    assert pair.admin_b.ok("GET", f"{base}/parted/partitions")["partitions"] == 3  # (made before the answer)
    assert pair.admin_a.ok("GET", f"{base}/parted/replication") == ["a", "b"]

    pair.admin_a.ok("PUT", f"{base}/differs/partitions", 2)
    pair.admin_b.ok("PUT", f"{base}/differs/partitions?createLocalTopicOnly=true", 4)  # (b replicates to a)
    reply = pair.admin_a.post(f"{base}/differs/replication", ["a", "b"])
    assert reply.status == 412, reply.body
    assert "different partitions 4" in reply.json["reason"]
    assert pair.admin_a.get(f"{base}/differs/replication").unset  # (not stored)
    pair.admin_b.ok("PUT", f"{base}/same/partitions?createLocalTopicOnly=true", 2)
    pair.admin_a.ok("PUT", f"{base}/same/partitions", 2)
    assert pair.admin_a.post(f"{base}/same/replication", ["a", "b"]).status == 204  # (the same count: nothing to do)


def test_a_cluster_only_allowed_for_the_namespace_replicates_to_its_replication_clusters(pair: Pair) -> None:
    # PIP-321: a is one of the namespace's allowed clusters, not of its replication clusters [b, gone]. It serves the
    # namespace, and Pulsar 4.0.7's checkReplication starts a replicator to every cluster of the list but the local
    # one without asking whether the local one is in it - but for a persistent topic whose list holds one cluster
    # (its shortcut: size() == 1 && no replicators yet). NonPersistentTopic has no shortcut.
    method = "POST" if pair.admin_a.get("/admin/v2/clusters/gone").status == 200 else "PUT"
    pair.admin_a.ok(method, "/admin/v2/clusters/gone", {"brokerServiceUrl": "pulsar://127.0.0.1:9"})
    pair.admin_a.ok("POST", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b", "gone"]})
    ns = pair.namespace(["a", "b"])
    early = f"persistent://{ns}/early"  # loaded before the change (Pulsar: onPoliciesUpdate -> checkReplication)
    early_producer = pair.client_a.create_producer(early)
    loaded = pair.a.server.service.topics[TopicName.parse(early).full]
    assert set(loaded.replicators) == {"b"}
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/allowedClusters", ["a", "b", "gone"])
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["b", "gone"])
    wait_for(lambda: set(loaded.replicators) == {"b", "gone"}, what="the replicator to gone to start")
    early_producer.close()
    topic = f"persistent://{ns}/out"
    on_b = pair.client_b.subscribe(topic, "s")
    producer = pair.client_a.create_producer(topic, batching_enabled=False)  # (served by a: it is allowed there)
    assert set(pair.a.server.service.topics[TopicName.parse(topic).full].replicators) == {"b", "gone"}
    for i in range(3):
        producer.send(b"m%d" % i)
    assert receive(on_b, 3) == [b"m0", b"m1", b"m2"]
    producer.close()
    on_b.close()
    # One replication cluster: a persistent topic loaded now replicates nowhere, a non-persistent one there.
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["b"])
    single = f"persistent://{ns}/single"
    producer = pair.client_a.create_producer(single)
    assert not pair.a.server.service.topics[TopicName.parse(single).full].replicators
    producer.close()
    ticks = f"non-persistent://{ns}/ticks"
    on_b = pair.client_b.subscribe(ticks, "s")
    producer = pair.client_a.create_producer(ticks, batching_enabled=False)
    wait_for(partial(replicator_connected, pair.admin_a, ticks, "b"), what="the replicator to b to connect")
    producer.send(b"tick")
    assert receive(on_b, 1) == [b"tick"]
    producer.close()
    on_b.close()


def test_the_remote_topic_is_looked_up(pair: Pair) -> None:
    # Cluster "r" is a broker that owns nothing: it redirects every lookup to b's broker, where
    # the replicator then produces (as against a Pulsar cluster of several brokers).
    lookups: list[str] = []

    async def redirecting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async for cmd in commands_from(reader):
            if cmd.type == T.CONNECT:
                writer.write(commands.connected("redirector", 20, 5 * 1024 * 1024))
            elif cmd.type == T.LOOKUP:
                lookups.append(cmd.lookupTopic.topic)
                reply = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
                r = reply.lookupTopicResponse
                r.request_id, r.brokerServiceUrl = cmd.lookupTopic.request_id, pair.b.service_url
                r.response, r.authoritative = pb.CommandLookupTopicResponse.Redirect, True
                writer.write(commands.frame(reply))
        writer.close()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(redirecting, "127.0.0.1", 0)

    server = pair.a.run_coroutine(start())
    try:
        port = server.sockets[0].getsockname()[1]
        pair.admin_a.ok("PUT", "/admin/v2/clusters/r", {"brokerServiceUrl": f"pulsar://127.0.0.1:{port}"})
        pair.admin_a.ok("POST", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b", "r"]})
        ns = f"geo/redirect-{uuid.uuid4().hex[:8]}"
        for admin in (pair.admin_a, pair.admin_b):
            admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
        pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a", "r"])
        topic = f"persistent://{ns}/t"
        on_b = pair.client_b.subscribe(topic, "s")
        pair.client_a.create_producer(topic).send(b"via lookup")
        assert receive(on_b, 1) == [b"via lookup"]
        assert lookups and lookups[0] == topic
    finally:
        server.close()


def test_replication_clusters_of_a_message(pair: Pair) -> None:
    # A message may say where it goes (replicate_to): "disable_replication" keeps it local, a
    # list of clusters without "b" keeps it from "b".
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/routed"
    on_b = pair.client_b.subscribe(topic, "s")
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    producer.send(b"local only", disable_replication=True)
    producer.send(b"not for b", replication_clusters=["a"])
    producer.send(b"for b", replication_clusters=["a", "b"])
    producer.send(b"everywhere")
    assert receive(on_b, 2) == [b"for b", b"everywhere"]
    wait_for(lambda: replication(pair.admin_a, topic)["b"]["replicationBacklog"] == 0, what="the skips to be acked")
    assert replication(pair.admin_a, topic)["b"]["msgOutCounter"] == 2


def test_a_remote_that_comes_later_gets_the_backlog(pair: Pair, tmp_path: Path) -> None:
    # Cluster "c" is known to "a" at an address where nobody listens yet: the replicator keeps
    # retrying and the messages wait in its backlog; once "c" is there, they all arrive in order.
    pair.admin_a.ok("PUT", "/admin/v2/clusters/c", {"brokerServiceUrl": "pulsar://127.0.0.1:9"})
    pair.admin_a.ok("POST", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b", "c"]})
    ns = f"geo/late-{uuid.uuid4().hex[:8]}"
    pair.admin_a.ok("PUT", f"/admin/v2/namespaces/{ns}")
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a", "c"])
    topic = f"persistent://{ns}/late"
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(b"m%d" % i)
    out = replication(pair.admin_a, topic)["c"]
    assert out["connected"] is False and out["replicationBacklog"] == 30
    cursor = pair.a.server.service.topics[TopicName.parse(topic).full].ledger.cursors["pulsar.repl.c"]
    assert not cursor.is_active  # a replicator with nowhere to send does not pin the read cache
    with BrokerThread(clusterName="c", data_dir=tmp_path) as c:
        admin_c = Admin(c.web_url)
        link(admin_c, "a", pair.a)
        admin_c.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "c"]})
        admin_c.ok("PUT", f"/admin/v2/namespaces/{ns}")
        client_c = pulsar.Client(c.service_url, operation_timeout_seconds=10)
        try:
            consumer = client_c.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            link(pair.admin_a, "c", c)  # the replicator picks the address up on its next attempt
            assert receive(consumer, 30) == [b"m%d" % i for i in range(30)]
            wait_for(lambda: replication(pair.admin_a, topic)["c"]["replicationBacklog"] == 0,
                     what="the backlog to drain")
            assert cursor.is_active
        finally:
            client_c.close()
    # Dropping "c" from the namespace stops the replicator and removes its cursor.
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a"])
    loaded = pair.a.server.service.topics[TopicName.parse(topic).full]
    wait_for(lambda: not loaded.replicators and "pulsar.repl.c" not in loaded.ledger.cursors,
             what="the replicator to go")
    # Also when the topic is not loaded at the time: its cursor goes when the topic loads again.
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a", "c"])
    wait_for(lambda: "pulsar.repl.c" in loaded.ledger.cursors, what="the replicator to come back")
    producer.close()  # (else the client reconnects at once and loads the topic again)
    pair.admin_a.ok("PUT", f"/admin/v2/{rest_path(topic)}/unload")
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a"])
    reloaded = pair.a.run_coroutine(pair.a.server.service.get_topic(TopicName.parse(topic), create=False))
    assert "pulsar.repl.c" not in reloaded.ledger.cursors and not reloaded.replicators


def test_remote_deduplication_goes_by_the_original_producer(pair: Pair) -> None:
    # A replicator resends what it had not seen confirmed when its connection broke; with
    # deduplication on, the receiving side recognises the repeat by the original producer name and
    # sequence id in the metadata (the replicator's own sequence ids restart).
    ns = pair.namespace(["b"])  # nothing replicates from here: only the receiving side matters
    pair.admin_b.ok("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    topic = f"persistent://{ns}/dedup"

    async def scenario() -> None:
        c = await WireClient.open(pair.b.server.port)
        await c.connect()
        cmd = producer_cmd(topic)
        cmd.producer.producer_name = "pulsar.repl.a"
        c.send(cmd)
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        receipts = []
        for seq in (0, 1):  # the replicator's sequence ids differ, the message is the same
            c.send(*send_frame(1, seq, b"once", producer_name="app", sequence_id=7, replicated_from="a"))
            receipts.append(await c.recv())
        assert [r.type for r in receipts] == [T.SEND_RECEIPT, T.SEND_RECEIPT]
        assert receipts[1].send_receipt.message_id.ledgerId == (1 << 64) - 1  # -1: a duplicate, not stored
        c.close()

    pair.b.run_coroutine(scenario())
    assert pair.admin_b.stats(topic)["msgInCounter"] == 1


@pytest.mark.parametrize("enabled_by", ["consumer", "rest"])
def test_replicated_subscription_follows_to_the_other_cluster(pair: Pair, enabled_by: str) -> None:
    # A replicated subscription (by its consumer's replicate_subscription_state, or made so over
    # REST) reads and acknowledges half the messages on "a"; the same subscription on "b" then
    # starts where it left off there, not at the start.
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/failover"
    full = TopicName.parse(topic).full
    flag = enabled_by == "consumer"
    for client in (pair.client_b, pair.client_a):
        client.subscribe(topic, "s", replicate_subscription_state_enabled=flag).close()
    if not flag:
        status = f"/admin/v2/{rest_path(topic)}/subscription/s/replicatedSubscriptionStatus"
        assert pair.admin_a.ok("GET", status) == {full: False}
        pair.admin_a.ok("POST", status, True)
        assert pair.admin_a.ok("GET", status) == {full: True}
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    controller = pair.a.server.service.topics[full].replicated_subscriptions
    assert controller is not None

    def publish_and_snapshot(first: int) -> None:
        for i in range(first, first + 10):
            producer.send(b"m%d" % i)
        # A snapshot that began after these messages (one begun before would hold older positions).
        wait_for(lambda: controller.covered_entries == first + 10, what="a snapshot of the clusters' positions")

    consumer = pair.client_a.subscribe(topic, "s", replicate_subscription_state_enabled=flag)
    publish_and_snapshot(0)
    publish_and_snapshot(10)
    assert receive(consumer, 10) == [b"m%d" % i for i in range(10)]  # (acknowledged)
    sub_b = pair.b.server.service.topics[full].subscriptions["s"]
    wait_for(lambda: sub_b.cursor.mark_delete_position.entry_id >= 10, what="b's subscription to move")
    consumer.close()
    stats = pair.admin_a.stats(topic)["subscriptions"]["s"]
    assert stats["isReplicated"] is True
    on_b = pair.client_b.subscribe(topic, "s", replicate_subscription_state_enabled=flag)
    assert on_b.receive(TIMEOUT_MS).data() == b"m10"
    # Pulsar's snapshot metrics on a: every family docs/metrics.md lists for replicated subscriptions, the two
    # snapshots above (at least) completed, none given up.
    got: dict[str, list[float]] = {}
    with urllib.request.urlopen(f"{pair.a.web_url}/metrics", timeout=10) as r:
        for family in text_string_to_metric_families(r.read().decode()):
            for s in family.samples:
                got.setdefault(s.name, []).append(s.value)
    for name in expected("replicated subscription"):
        values = got.get(name) or got[f"{name}_count"]  # (a summary without quantiles: _count and _sum)
        assert all(v >= 0 for v in values), name
    assert got["pulsar_replicated_subscriptions_snapshot_ms_count"][0] >= 2
    assert got["pulsar_replicated_subscriptions_snapshot_ms_sum"][0] > 0
    assert got["pulsar_replicated_subscriptions_timedout_snapshots_total"] == [0]


def test_replicated_subscription_status_rest(pair: Pair) -> None:
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/status"
    full = TopicName.parse(topic).full
    path = f"/admin/v2/{rest_path(topic)}/subscription/s/replicatedSubscriptionStatus"
    pair.client_a.subscribe(topic, "s").close()
    pair.admin_a.ok("POST", path, True)
    # Kept with the cursor: still replicated after the topic is unloaded and loaded again.
    pair.admin_a.ok("PUT", f"/admin/v2/{rest_path(topic)}/unload")
    assert pair.admin_a.ok("GET", path) == {full: True}
    assert pair.admin_a.stats(topic)["subscriptions"]["s"]["isReplicated"] is True
    pair.admin_a.ok("POST", path, False)
    assert pair.admin_a.ok("GET", path) == {full: False}
    pair.admin_a.ok("PUT", f"/admin/v2/{rest_path(topic)}/unload")
    assert pair.admin_a.stats(topic)["subscriptions"]["s"]["isReplicated"] is False
    # Clear errors.
    assert pair.admin_a.post(path, "yes").status == 400
    missing = pair.admin_a.get(path.replace("/subscription/s/", "/subscription/nope/"))
    assert missing.status == 404
    np_path = path.replace("persistent/", "non-persistent/", 1)
    assert pair.admin_a.get(np_path).status == pair.admin_a.post(np_path, True).status == 405
    # Made replicated when created over REST (?replicated=true, as pulsar-admin's --replicated).
    pair.admin_a.ok("PUT", f"/admin/v2/{rest_path(topic)}/subscription/born-replicated?replicated=true")
    assert pair.admin_a.ok("GET", path.replace("/subscription/s/", "/subscription/born-replicated/")) == {full: True}
    # A partitioned topic: every partition.
    parted = f"persistent://{ns}/parted"
    pair.admin_a.ok("PUT", f"/admin/v2/{rest_path(parted)}/partitions", 2)
    pair.client_a.subscribe(parted, "s").close()
    parted_path = f"/admin/v2/{rest_path(parted)}/subscription/s/replicatedSubscriptionStatus"
    pair.admin_a.ok("POST", parted_path, True)
    assert pair.admin_a.ok("GET", parted_path) == {f"{parted}-partition-{i}": True for i in range(2)}


def test_schemas_are_registered_on_the_remote_side(pair: Pair) -> None:
    # b's topic already has another schema as version 0; a's version 0 (Avro) arrives there as
    # b's own version of that schema, so b's consumers read it with the right one.
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/typed"
    pair.admin_b.ok("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    pair.client_b.create_producer(topic, schema=pulsar.schema.StringSchema()).close()  # b: version 0

    class Order(pulsar.schema.Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
        id = pulsar.schema.String()
        amount = pulsar.schema.Integer()

    consumer = pair.client_b.subscribe(topic, "s", schema=pulsar.schema.AvroSchema(Order))
    producer = pair.client_a.create_producer(topic, schema=pulsar.schema.AvroSchema(Order))
    producer.send(Order(id="o-1", amount=5))
    msg = consumer.receive(TIMEOUT_MS)
    assert msg.value().id == "o-1" and msg.value().amount == 5
    versions = pair.admin_b.ok("GET", f"/admin/v2/schemas/{ns}/typed/schemas")["getSchemaResponses"]
    assert [v["type"] for v in versions] == ["STRING", "AVRO"]  # the Avro schema once, as b's version 1
    # The stored message says so.
    mid = msg.message_id()
    stored = pair.b.server.service.topics[TopicName.parse(topic).full]
    entry = pair.b.run_coroutine(stored.ledger.read_entry(Position(mid.ledger_id(), mid.entry_id())))
    assert read_entry_metadata(entry.data).schema_version == encode_version(1)


def test_backlog_survives_a_restart(tmp_path: Path) -> None:
    # Messages published while the remote cluster is away wait in the replication cursor's
    # backlog, across a restart of the broker that holds them; after the restart the broker
    # loads the replicated topic itself, so they go out with no client using the topic.
    def setup(admin: Admin, replicate: bool) -> None:
        admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["x", "y"]})
        admin.ok("PUT", "/admin/v2/namespaces/geo/ns")
        if replicate:
            admin.ok("POST", "/admin/v2/namespaces/geo/ns/replication", ["x", "y"])

    topic = "persistent://geo/ns/kept"
    with BrokerThread(clusterName="x", data_dir=tmp_path / "x") as x:
        admin_x = Admin(x.web_url)
        admin_x.ok("PUT", "/admin/v2/clusters/y", {"brokerServiceUrl": "pulsar://127.0.0.1:9"})
        setup(admin_x, replicate=True)
        client = pulsar.Client(x.service_url, operation_timeout_seconds=10)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(b"m%d" % i)
        client.close()
        assert replication(admin_x, topic)["y"]["replicationBacklog"] == 10
    with BrokerThread(clusterName="y", data_dir=tmp_path / "y") as y:
        admin_y = Admin(y.web_url)
        admin_y.ok("PUT", "/admin/v2/clusters/x", {})
        setup(admin_y, replicate=False)
        client = pulsar.Client(y.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            with BrokerThread(clusterName="x", data_dir=tmp_path / "x") as x:
                admin_x = Admin(x.web_url)
                link(admin_x, "y", y)
                assert receive(consumer, 10) == [b"m%d" % i for i in range(10)]
                wait_for(lambda: replication(admin_x, topic)["y"]["replicationBacklog"] == 0,
                         what="the backlog to drain")
        finally:
            client.close()


def test_replicator_dispatch_rate(pair: Pair) -> None:
    # Budgets of a few messages per hour: the replicator sends that many, then holds the rest as
    # backlog. The namespace's limit is set on cluster a (its Policies keep it per cluster); the
    # topic's overrides it; each change starts a full budget, seen within a second.
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/limited"
    ns_rate = {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 3600,
               "relativeToPublishRate": False}
    ns_policy = f"/admin/v2/namespaces/{ns}/replicatorDispatchRate"
    topic_policy = f"/admin/v2/{rest_path(topic)}/replicatorDispatchRate"
    pair.admin_a.ok("POST", ns_policy, ns_rate)
    assert pair.admin_a.ok("GET", ns_policy) == ns_rate
    assert pair.admin_b.get(ns_policy).unset
    on_b = pair.client_b.subscribe(topic, "s")
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"m%d" % i)
    replicator = pair.a.server.service.topics[TopicName.parse(topic).full].replicators["b"]

    def throttled_with(backlog: int, sent: int) -> None:
        wait_for(lambda: replicator.dispatch_rate.throttled_times > throttled, what="the replicator to be throttled")
        out = replication(pair.admin_a, topic)["b"]
        assert (out["replicationBacklog"], out["msgOutCounter"]) == (backlog, sent)

    throttled = 0
    assert receive(on_b, 5) == [b"m%d" % i for i in range(5)]
    throttled_with(backlog=15, sent=5)

    topic_rate = dict(ns_rate, dispatchThrottlingRateInMsg=3)
    pair.admin_a.ok("POST", topic_policy, topic_rate)
    assert pair.admin_a.ok("GET", topic_policy) == topic_rate
    assert pair.admin_a.ok("GET", topic_policy + "?applied=true") == topic_rate
    throttled = replicator.dispatch_rate.throttled_times
    assert receive(on_b, 3) == [b"m%d" % i for i in range(5, 8)]
    throttled_with(backlog=12, sent=8)

    pair.admin_a.ok("DELETE", topic_policy)  # the namespace's limit again
    assert pair.admin_a.ok("GET", topic_policy + "?applied=true") == ns_rate
    throttled = replicator.dispatch_rate.throttled_times
    assert receive(on_b, 5) == [b"m%d" % i for i in range(8, 13)]
    throttled_with(backlog=7, sent=13)

    pair.admin_a.ok("DELETE", ns_policy)
    assert receive(on_b, 7) == [b"m%d" % i for i in range(13, 20)]
    wait_for(lambda: replication(pair.admin_a, topic)["b"]["replicationBacklog"] == 0, what="the backlog to go")
    producer.close()


def non_persistent_replicators(broker: BrokerThread, topic: str) -> dict[str, NonPersistentReplicator]:
    loaded = broker.server.service.non_persistent_topics.get(TopicName.parse(topic).full)
    return dict(loaded.replicators) if loaded is not None else {}


def test_non_persistent_topics_are_replicated_both_ways(pair: Pair) -> None:
    # Best effort, as in Pulsar: a non-persistent topic's replicators run while it has producers
    # of its own, forward what those publish, and nothing comes back.
    ns = pair.namespace(["a", "b"])
    topic = f"non-persistent://{ns}/ticks"
    on_a, on_b, producer_a, producer_b = both_ways(pair, topic)
    for admin, remote in ((pair.admin_a, "b"), (pair.admin_b, "a")):
        wait_for(partial(replicator_connected, admin, topic, remote), what=f"the replicator to {remote} to connect")
    exchange(on_a, on_b, producer_a, producer_b, 50)
    with pytest.raises(pulsar.Timeout):
        on_a.receive(200)
    out = replication(pair.admin_a, topic)["b"]
    assert out["msgOutCounter"] == 50 and out["msgDropRate"] == 0.0 and out["replicationBacklog"] == 0
    assert out["inboundConnection"] is not None  # b's replicator produces here
    # Without producers of its own a topic has no replicators (b's still produces on a's topic).
    producer_a.close()
    wait_for(lambda: not non_persistent_replicators(pair.a, topic), what="a's replicator to stop")
    assert set(non_persistent_replicators(pair.b, topic)) == {"a"}
    producer_b.close()
    wait_for(lambda: not non_persistent_replicators(pair.b, topic), what="b's replicator to stop")
    on_a.close()
    on_b.close()


def test_non_persistent_replication_drops_what_it_cannot_send(pair: Pair) -> None:
    # A remote cluster nobody answers for: messages are dropped and counted, never queued.
    nowhere = f"nowhere-{uuid.uuid4().hex[:6]}"
    pair.admin_a.ok("PUT", f"/admin/v2/clusters/{nowhere}", {"brokerServiceUrl": "pulsar://127.0.0.1:9"})
    pair.admin_a.ok("POST", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b", nowhere]})
    ns = f"geo/np-{uuid.uuid4().hex[:8]}"
    pair.admin_a.ok("PUT", f"/admin/v2/namespaces/{ns}")
    pair.admin_a.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["a", nowhere])
    topic = f"non-persistent://{ns}/lost"
    consumer = pair.client_a.subscribe(topic, "s")
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"m%d" % i)
    assert receive(consumer, 10) == [b"m%d" % i for i in range(10)]  # local delivery is unaffected
    (replicator,) = non_persistent_replicators(pair.a, topic).values()
    assert replicator.msg_dropped == 10 and replicator.backlog == 0 and not replicator.connected
    out = replication(pair.admin_a, topic)[nowhere]
    assert out["connected"] is False and out["msgOutCounter"] == 0
    producer.close()
    consumer.close()


def test_unloading_replicated_topics_never_hangs(pair: Pair) -> None:
    # Both sides replicate; a's topic is unloaded again and again while its replicator (re)connects
    # and b's replicator produces on it. Closing a replicator must end its loop even when the
    # cancel lands as a connection completes (asyncio.wait_for on Python 3.11 then dropped it, and
    # the unload hung); found by a soak run, about one unload in three.
    ns = pair.namespace(["a", "b"])
    for i in range(20):
        topic = f"persistent://{ns}/churn-{i}"
        pair.client_a.subscribe(topic, "s").close()
        pair.admin_a.ok("PUT", f"/admin/v2/{rest_path(topic)}/unload")
        pair.admin_a.stats(topic)  # loaded again, with its replicator
        pair.admin_a.ok("PUT", f"/admin/v2/{rest_path(topic)}/unload")


def test_replication_metric_families(pair: Pair) -> None:
    """Every replication family docs/metrics.md lists is on /metrics of a replicating broker."""
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/metrics"
    exchange(*both_ways(pair, topic), 3)
    want = expected("replication")

    def families() -> dict[str, list[float]] | None:
        got: dict[str, list[float]] = {}
        with urllib.request.urlopen(f"{pair.a.web_url}/metrics", timeout=10) as r:
            for family in text_string_to_metric_families(r.read().decode()):
                for s in family.samples:
                    if s.labels.get("remote_cluster") == "b" and s.labels.get("topic") == topic:
                        got.setdefault(s.name, []).append(s.value)
        return got if all(n in got for n in want) else None

    got = wait_for(families, what="replication series of the topic")
    for name in want:
        assert all(v >= 0 for v in got[name]), name
    assert got["pulsar_replication_connected_count"] == [1]


def test_a_malformed_snapshot_marker_does_not_stop_a_replicated_subscription(pair: Pair) -> None:
    # A snapshot marker whose payload is not a snapshot (written by a raw client here; a bug or a
    # corrupt entry would do the same): the replicated subscription's dispatcher skips it, as
    # Pulsar's AbstractBaseDispatcher does, and goes on delivering what follows.
    ns = pair.namespace(["a", "b"])
    topic = f"persistent://{ns}/bad-snapshot"
    consumer = pair.client_a.subscribe(topic, "s", replicate_subscription_state_enabled=True)

    async def publish_garbage_marker() -> None:
        client = await WireClient.open(pair.a.server.port)
        try:
            await client.connect()
            client.send(producer_cmd(topic))
            assert (await client.recv()).type == T.PRODUCER_SUCCESS
            client.send(*send_frame(1, 0, b"\xff\x01 not a snapshot", marker_type=SNAPSHOT))
            assert (await client.recv()).type == T.SEND_RECEIPT
        finally:
            client.close()

    asyncio.run(publish_garbage_marker())
    pair.client_a.create_producer(topic).send(b"after")
    assert consumer.receive(TIMEOUT_MS).data() == b"after"


# -- inactive replicated topics (Pulsar's PersistentTopic.checkGC for a global topic) -----------------------------

def gc_namespace(pair: Pair, clusters_a: list[str], clusters_b: list[str]) -> str:
    """A fresh namespace replicated to ``clusters_a`` on a and ``clusters_b`` on b, whose topics are deleted at
    the first inactive-topic check that finds them inactive (the checks are run by the test: the brokers run none)."""
    ns = f"geo/gc-{uuid.uuid4().hex[:8]}"
    for admin, clusters in ((pair.admin_a, clusters_a), (pair.admin_b, clusters_b)):
        admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
        admin.ok("POST", f"/admin/v2/namespaces/{ns}/replication", clusters)
        admin.ok("POST", f"/admin/v2/namespaces/{ns}/inactiveTopicPolicies",
                 {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 0,
                  "deleteWhileInactive": True})
    return ns


def check_inactive(broker: BrokerThread) -> None:
    broker.run_coroutine(broker.server.service.inactive_topics.check_all())


def stored(broker: BrokerThread, topic: str) -> bool:
    service = broker.server.service
    name = TopicName.parse(topic)
    return name.full in service.topics or service.topic_exists(name)


def test_an_inactive_replicated_topic_is_deleted_on_each_side_once_no_replicator_produces_there(pair: Pair) -> None:
    ns = gc_namespace(pair, ["a", "b"], ["a", "b"])
    topic = f"persistent://{ns}/gc"
    full = TopicName.parse(topic).full
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"m%d" % i)
    # a's replicator made b's copy, whose replicator produces on a's.
    wait_for(lambda: replicator_caught_up(pair.admin_a, topic, "b") and replicator_connected(pair.admin_b, topic, "a"),
             what="both replicators")
    check_inactive(pair.a)
    assert stored(pair.a, topic)  # a producer of its own keeps it
    producer.close()
    # Not active any more (b's replicator is not a local producer, the replicators' cursors are not subscriptions):
    # a's replicator, caught up, is disconnected, but b's still produces on a's copy, which is kept.
    check_inactive(pair.a)
    assert stored(pair.a, topic)
    assert replicator_connected(pair.admin_a, topic, "b") is False
    a_topic = pair.a.server.service.topics[full]
    # b's copy: nothing of a's produces there any more, and its replicator is caught up: deleted.
    check_inactive(pair.b)
    assert not stored(pair.b, topic)
    # Its replicator went with it; then a's copy is deleted too, its replication cursor with it.
    wait_for(lambda: not a_topic.producers, what="b's replicator to leave a's copy")
    check_inactive(pair.a)
    assert not stored(pair.a, topic)
    assert pair.a.server.service.inactive_topics.deleted_total >= 1


def test_a_replicator_with_a_backlog_keeps_its_inactive_topic(pair: Pair) -> None:
    # Cluster "gone" is known to a at an address where nobody listens: its replicator keeps a backlog.
    method = "POST" if pair.admin_a.get("/admin/v2/clusters/gone").status == 200 else "PUT"
    pair.admin_a.ok(method, "/admin/v2/clusters/gone", {"brokerServiceUrl": "pulsar://127.0.0.1:9"})
    pair.admin_a.ok("POST", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b", "gone"]})
    ns = gc_namespace(pair, ["a", "b", "gone"], ["a", "b"])
    topic = f"persistent://{ns}/backlog"
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(b"m%d" % i)
    wait_for(lambda: replicator_caught_up(pair.admin_a, topic, "b"), what="the replicator to b")
    producer.close()
    check_inactive(pair.a)
    # Kept: the replicator to "gone" has a backlog, and goes on trying; the one to b, caught up, was disconnected
    # all the same (Pulsar's closeReplProducersIfNoBacklog).
    assert stored(pair.a, topic)
    out = replication(pair.admin_a, topic)
    assert out["gone"]["replicationBacklog"] == 3 and out["b"]["connected"] is False
    replicators = pair.a.server.service.topics[TopicName.parse(topic).full].replicators
    assert replicators["gone"].started and not replicators["b"].started
    # Any producer starts it again (Pulsar's addProducer starts the replication producers).
    producer = pair.client_a.create_producer(topic, batching_enabled=False)
    wait_for(lambda: replicator_connected(pair.admin_a, topic, "b") is True, what="the replicator to b to reconnect")
    producer.send(b"again")
    wait_for(lambda: replicator_caught_up(pair.admin_a, topic, "b"), what="the new message to reach b")
    producer.close()
