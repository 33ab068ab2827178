"""managedLedgerStorage=bookkeeper end to end: the official client through our broker onto real bookies, and a
second broker taking the topic over (its data and the subscription's position come from BookKeeper and ZooKeeper).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

import aiohttp
import pulsar
import pytest
from kazoo.client import KazooClient

from broker.config import BrokerConfig, ConfigError
from broker.embedded import Broker, BrokerThread
from broker.java_text import iso_time_ms
from broker.metadata.layout import MANAGED_LEDGER_NAMES_MARKER
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.service.broker_service import BrokerService
from cluster.local import LocalCluster
from managed_ledger import InitialPosition
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.client import BookKeeper
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.zk import AsyncZk
from tests.component.wire import T, WireClient, port_of, producer_cmd, subscribe_cmd
from tests.waiting import wait_for
from tests.zookeeper import four_letter_number, zk_watches

RECEIVE_TIMEOUT_MS = 10_000


def bookkeeper_broker(cluster: LocalCluster) -> BrokerThread:
    return BrokerThread(managedLedgerStorage="bookkeeper",
                        bookkeeperMetadataServiceUri=f"zk+hierarchical://{cluster.zk_address}/ledgers",
                        managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2,
                        managedLedgerDefaultAckQuorum=2)


def produce_and_acknowledge(broker: BrokerThread, topic: str, subscription: str, sent: int, acknowledged: int) -> None:
    """``sent`` messages m-0, m-1, ... to ``topic``; the first ``acknowledged`` of them received and acknowledged on
    ``subscription`` (made first)."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, subscription)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(sent):
            producer.send(f"m-{i}".encode())
        for _ in range(acknowledged):
            consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS))
    finally:
        client.close()


def test_topics_live_on_bookkeeper_and_move_between_brokers(bk_cluster: LocalCluster) -> None:
    topic = f"persistent://public/default/bk-{uuid.uuid4().hex[:10]}"
    with bookkeeper_broker(bk_cluster) as broker:
        produce_and_acknowledge(broker, topic, "sub", 20, 5)

    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    try:
        path = f"{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent/{topic.rsplit('/', 1)[1]}"
        info = ml_formats.decode_ledger_info(zk.get(path)[0])
        assert info.ledgers and zk.get_children(path) == ["sub"]
    finally:
        zk.stop()
        zk.close()

    with bookkeeper_broker(bk_cluster) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(topic, "sub")
            got = []
            for _ in range(15):
                message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
                consumer.acknowledge(message)
                got.append(message.data().decode())
            assert got == [f"m-{i}" for i in range(5, 20)]
        finally:
            client.close()


def test_a_partitioned_topics_partitions_are_stored_on_bookkeeper_at_its_creation(bk_cluster: LocalCluster) -> None:
    """Pulsar's AdminResource.tryCreatePartitionsAsync on BookKeeper storage: each partition's managed-ledger znode,
    empty (TopicResources.createPersistentTopicAsync), right after PUT .../partitions; nothing loaded, no ledger
    made; the first use opens it as a managed ledger without ledgers; the partitioned delete removes them."""
    local = f"bkparts-{uuid.uuid4().hex[:10]}"
    root = f"{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent"
    parts = [f"{local}-partition-{i}" for i in range(3)]
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    try:
        with bookkeeper_broker(bk_cluster) as broker:
            admin = f"{broker.web_url}/admin/v2/persistent/public/default/{local}/partitions"
            with urllib.request.urlopen(urllib.request.Request(admin, data=b"3", method="PUT", headers={
                    "Content-Type": "application/json"}), timeout=30) as reply:
                assert reply.status == 204
            assert [zk.get(f"{root}/{p}")[0] for p in parts] == [b""] * 3
            assert all(zk.get_children(f"{root}/{p}") == [] for p in parts)
            assert not [t for t in list(broker.server.service.topics) if local in t]
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
            try:
                producer = client.create_producer(f"persistent://public/default/{local}", batching_enabled=False)
                producer.send(b"m")
            finally:
                client.close()
            assert sum(len(ml_formats.decode_ledger_info(zk.get(f"{root}/{p}")[0]).ledgers) for p in parts) == 3
            with urllib.request.urlopen(urllib.request.Request(admin, method="DELETE"), timeout=30) as reply:
                assert reply.status == 204
            assert not [p for p in parts if zk.exists(f"{root}/{p}")]
    finally:
        zk.stop()
        zk.close()


def http(method: str, url: str) -> Any:
    """The JSON answer of a call (None for an empty one); a status other than 2xx raises."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{method} {url}: {exc.code} {exc.read()!r}") from None
    return json.loads(body) if body else None


def test_internal_stats_with_metadata_show_each_ledgers_ensembles(bk_cluster: LocalCluster) -> None:
    """?metadata=true: each ledger's BookKeeper metadata (as BookKeeper prints it) and whether a bookie of its
    ensembles is gone; without the flag, neither."""
    name = f"bk-md-{uuid.uuid4().hex[:10]}"
    with bookkeeper_broker(bk_cluster) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            client.create_producer(f"persistent://public/default/{name}").send(b"x")
            base = f"{broker.web_url}/admin/v2/persistent/public/default/{name}/internalStats"
            plain, detailed = http("GET", base), http("GET", base + "?metadata=true")
        finally:
            client.close()
    assert plain["ledgers"] and all("metadata" not in info for info in plain["ledgers"])
    for info in detailed["ledgers"]:
        assert info["metadata"].startswith("LedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=2, "
                                           "ackQuorumSize=2, state=OPEN, digestType=CRC32C, password=OMITTED, ")
        assert "pulsar/managed-ledger=base64:" in info["metadata"]
        assert info["underReplicated"] is False  # (every bookie of the cluster is up)


def test_internal_info_is_the_znodes_with_their_versions_and_times(bk_cluster: LocalCluster) -> None:
    """GET .../internal-info (Pulsar's getManagedLedgerInfo): the managed ledger's znode and its cursor's, each with
    the version and times ZooKeeper keeps for it, read without loading the topic (unloaded here first)."""
    name = f"bk-info-{uuid.uuid4().hex[:10]}"
    topic = f"persistent://public/default/{name}"
    with bookkeeper_broker(bk_cluster) as broker:
        produce_and_acknowledge(broker, topic, "s", 3, 1)
        base = f"{broker.web_url}/admin/v2/persistent/public/default/{name}"
        http("PUT", base + "/unload")
        info = http("GET", base + "/internal-info")
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    try:
        path = f"{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent/{name}"
        data, stat = zk.get(path)
        cursor_data, cursor_stat = zk.get(path + "/s")
    finally:
        zk.stop()
        zk.close()
    stored = ml_formats.decode_ledger_info(data)
    assert info["version"] == stat.version and stat.version > 0
    assert info["creationDate"] == iso_time_ms(stat.ctime) and info["modificationDate"] == iso_time_ms(stat.mtime)
    assert [row["ledgerId"] for row in info["ledgers"]] == [ledger.ledger_id for ledger in stored.ledgers]
    assert [row.get("entries") for row in info["ledgers"]] == [ledger.entries for ledger in stored.ledgers]
    cursor = info["cursors"]["s"]
    stored_cursor = ml_formats.decode_cursor_info(cursor_data)
    assert cursor["version"] == cursor_stat.version
    assert cursor["creationDate"] == iso_time_ms(cursor_stat.ctime)
    assert cursor["cursorsLedgerId"] == stored_cursor.cursors_ledger_id
    mark_delete = stored_cursor.record.mark_delete
    assert cursor["markDelete"] == {"ledgerId": mark_delete.ledger_id, "entryId": mark_delete.entry_id}


def test_a_topic_named_with_a_slash_is_stored_where_pulsar_stores_it(bk_cluster: LocalCluster) -> None:
    """Topic ``<p>/x`` (``<p>%2Fx`` in a path) and topic ``<p>`` on BookKeeper: the first's managed-ledger znode is
    ``.../persistent/<p>%2Fx``, as Pulsar's TopicName.getPersistenceNamingEncoding names it (the local name through
    Codec.encode), not a child of ``<p>``'s (which then read ``x`` as a cursor and could not load); both are used,
    listed once each, and load again at another broker from what ZooKeeper and the bookies hold."""
    local = f"slash-{uuid.uuid4().hex[:10]}"
    slashed, prefix = f"persistent://public/default/{local}/x", f"persistent://public/default/{local}"
    paths = {slashed: f"public/default/{local}%2Fx", prefix: f"public/default/{local}"}
    root = f"{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent"

    def listed(broker: BrokerThread) -> list[str]:
        return [t for t in http("GET", f"{broker.web_url}/admin/v2/persistent/public/default") if local in t]

    with bookkeeper_broker(bk_cluster) as broker:
        http("PUT", f"{broker.web_url}/admin/v2/persistent/{paths[slashed]}")
        assert listed(broker) == [slashed]  # (no "<p>" made by the way)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            for topic in (slashed, prefix):
                consumer = client.subscribe(topic, "s")
                producer = client.create_producer(topic, batching_enabled=False)
                for i in range(3):
                    producer.send(f"{topic}:{i}".encode())
                got = [consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS) for _ in range(3)]
                assert [m.data().decode() for m in got] == [f"{topic}:{i}" for i in range(3)]
                consumer.acknowledge(got[0])
                consumer.close()
                producer.close()
        finally:
            client.close()
        assert listed(broker) == [prefix, slashed]

    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    try:
        for name in (f"{local}%2Fx", local):
            assert ml_formats.decode_ledger_info(zk.get(f"{root}/{name}")[0]).ledgers
            assert zk.get_children(f"{root}/{name}") == ["s"]
    finally:
        zk.stop()
        zk.close()

    with bookkeeper_broker(bk_cluster) as broker:
        wait_for(lambda: listed(broker) == [prefix, slashed], what="the stored names read at start")
        for topic in (slashed, prefix):
            stats = http("GET", f"{broker.web_url}/admin/v2/persistent/{paths[topic]}/stats")
            assert list(stats["subscriptions"]) == ["s"] and stats["subscriptions"]["s"]["msgBacklog"] == 2


def stored_message(i: int) -> bytes:
    """Message ``i`` (payload ``m<i>``) as a topic stores it."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
    return build_entry(metadata.SerializeToString(), f"m{i}".encode())


async def store_as_an_older_version(cluster: LocalCluster, names: list[str]) -> None:
    """Managed ledgers at the given znode names, as a version that named them by the raw local name did: three
    messages each, subscription "s" past the first."""
    factory = BookKeeperManagedLedgerFactory(BookKeeper(AsyncZk(cluster.zk_address), "/ledgers"),
                                             f"zk:{cluster.zk_address}", ensemble_size=3, write_quorum=2,
                                             ack_quorum=2)
    try:
        for name in names:
            ml = await factory.open(name)
            cursor = await ml.open_cursor("s", InitialPosition.EARLIEST)
            positions = [await ml.add_entry_async(stored_message(i)) for i in range(3)]
            cursor.mark_delete(positions[0])
            await cursor.flush()
    finally:
        await factory.close()


def test_an_older_versions_znodes_move_to_pulsars_names(bk_cluster: LocalCluster) -> None:
    """ZooKeeper and bookies written by a version that stored a topic's managed ledger at its raw local name: topic
    ``<p>/x`` at ``.../persistent/<p>/x`` (a child of topic ``<p>``'s znode, which then could not load) and topic
    ``<p> b`` at ``.../persistent/<p> b``; ``<p>-lone/x`` under an empty ``<p>-lone`` made by the way. A broker's
    start moves each, with its cursor, to Pulsar's name (TopicName.getPersistenceNamingEncoding: ``<p>%2Fx``,
    ``<p>+b``), once (the marker), and removes the empty parent; every topic serves its messages and subscription
    as before, and no topic ``<p>-lone`` is listed. A znode already at Pulsar's name of a topic, as an Apache Pulsar
    broker on the same ZooKeeper writes it (``<p>+c%3A%C3%BC``, topic ``<p> c:ü``), stays: it is that topic's (it
    used to be taken for a raw name and moved to ``<p>%2Bc%253A%25C3%25BC``, lost to Pulsar)."""
    p = f"old-{uuid.uuid4().hex[:10]}"
    root = f"{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent"
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    try:
        if zk.exists(MANAGED_LEDGER_NAMES_MARKER):  # (made by this module's earlier brokers)
            zk.delete(MANAGED_LEDGER_NAMES_MARKER)
        # (topic <p> first: once <p>/x is there, <p> cannot be opened, as with the older version)
        asyncio.run(store_as_an_older_version(bk_cluster, [f"public/default/persistent/{n}" for n in
                                                           (p, f"{p}/x", f"{p} b", f"{p}-lone/x",
                                                            f"{p}+c%3A%C3%BC")]))
        assert sorted(zk.get_children(f"{root}/{p}")) == ["s", "x"]
        assert zk.get(f"{root}/{p}-lone")[0] == b""  # (a parent made by the way: no topic)
        # local name -> its znode's name now
        stored = {p: p, f"{p}/x": f"{p}%2Fx", f"{p} b": f"{p}+b", f"{p}-lone/x": f"{p}-lone%2Fx",
                  f"{p} c:ü": f"{p}+c%3A%C3%BC"}
        with bookkeeper_broker(bk_cluster) as broker:
            wait_for(lambda: zk.exists(MANAGED_LEDGER_NAMES_MARKER), what="the move of the older names")
            for znode in stored.values():
                assert zk.get_children(f"{root}/{znode}") == ["s"], znode
            assert not zk.exists(f"{root}/{p} b") and not zk.exists(f"{root}/{p}-lone")
            topics = sorted(f"persistent://public/default/{local}" for local in stored)
            wait_for(lambda: sorted(t for t in http("GET", f"{broker.web_url}/admin/v2/persistent/public/default")
                                    if p in t) == topics, what="the topics listed")
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
            try:
                for local in stored:
                    topic = f"persistent://public/default/{local}"
                    path = f"/admin/v2/persistent/public/default/{urllib.parse.quote(local, safe='')}/stats"
                    assert http("GET", broker.web_url + path)["subscriptions"]["s"]["msgBacklog"] == 2, topic
                    consumer = client.subscribe(topic, "s")
                    got = [consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS).data() for _ in range(2)]
                    assert got == [b"m1", b"m2"], topic
                    consumer.close()
            finally:
                client.close()
    finally:
        zk.stop()
        zk.close()


@pytest.mark.parametrize(("overrides", "why"), [
    ({}, "needs a ZooKeeper"),
    ({"bookkeeperMetadataServiceUri": "http://x/ledgers"}, r"expected zk\+hierarchical"),
    ({"bookkeeperMetadataServiceUri": "zk://127.0.0.1:1/ledgers", "managedLedgerDefaultAckQuorum": 3},
     "ack quorum"),
])
def test_bad_bookkeeper_settings_are_refused_clearly(overrides: dict[str, Any], why: str) -> None:
    config = BrokerConfig.load(managedLedgerStorage="bookkeeper", **overrides)
    with pytest.raises(ConfigError, match=why):
        BrokerService(config, None)


def zk_connections(address: str) -> int:
    """Client connections ZooKeeper counts now, less the asking one."""
    return four_letter_number(address, b"srvr", b"Connections:") - 1


def test_one_zookeeper_session_for_metadata_and_storage(bk_cluster: LocalCluster) -> None:
    """metadataStoreUrl names the ZooKeeper that BookKeeper uses (at its root): the broker's metadata, its
    managed-ledger znodes and its BookKeeper client share one session, as in Pulsar."""
    before = zk_connections(bk_cluster.zk_address)
    topic = f"persistent://public/default/one-session-{uuid.uuid4().hex[:10]}"
    with BrokerThread(managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{bk_cluster.zk_address}",
                      metadataStoreSessionTimeoutMillis=20_000, managedLedgerDefaultEnsembleSize=3,
                      managedLedgerDefaultWriteQuorum=2, managedLedgerDefaultAckQuorum=2) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(topic, "sub")
            client.create_producer(topic, batching_enabled=False).send(b"hello")
            assert consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS).data() == b"hello"
        finally:
            client.close()
        service = broker.server.service
        factory = service.ledger_factory
        assert isinstance(factory, BookKeeperManagedLedgerFactory)
        assert factory.store is service.metadata_store
        assert isinstance(factory.bk.zk, AsyncZk) and factory.bk.zk.shares_session
        assert zk_connections(bk_cluster.zk_address) <= before + 1


def test_separate_sessions_honour_the_session_timeout(bk_cluster: LocalCluster) -> None:
    """With the broker's metadata under a chroot, BookKeeper's client needs a session of its own (its paths are at
    the root): it gets metadataStoreSessionTimeoutMillis, as the managed-ledger znodes share the broker's."""
    chroot = f"/one-session-{uuid.uuid4().hex[:8]}"
    with BrokerThread(managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{bk_cluster.zk_address}{chroot}",
                      bookkeeperMetadataServiceUri=f"zk+hierarchical://{bk_cluster.zk_address}/ledgers",
                      metadataStoreSessionTimeoutMillis=12_000, managedLedgerDefaultEnsembleSize=3,
                      managedLedgerDefaultWriteQuorum=2, managedLedgerDefaultAckQuorum=2) as broker:
        service = broker.server.service
        factory = service.ledger_factory
        assert isinstance(factory, BookKeeperManagedLedgerFactory)
        broker.run_coroutine(factory.start())
        assert factory.store is service.metadata_store
        zk = factory.bk.zk
        assert isinstance(zk, AsyncZk) and not zk.shares_session
        assert zk._zk._session_timeout == 12_000


async def test_topic_list_watchers_hear_of_topics_another_broker_creates(bk_cluster: LocalCluster) -> None:
    """Two brokers on one ZooKeeper and BookKeeper: a topic-list watcher on the first is pushed the topic the second
    creates (the managed-ledger znode's creation reaches the first through ZooKeeper's notifications), and its
    deletion."""
    chroot = f"/watchers-{uuid.uuid4().hex[:8]}"
    settings: dict[str, Any] = dict(
        managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{bk_cluster.zk_address}{chroot}",
        bookkeeperMetadataServiceUri=f"zk+hierarchical://{bk_cluster.zk_address}/ledgers",
        managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2, managedLedgerDefaultAckQuorum=2)
    first = await asyncio.to_thread(BrokerThread(**settings).start)
    try:
        second = await asyncio.to_thread(BrokerThread(**settings).start)
        try:
            base = f"watched-{uuid.uuid4().hex[:8]}"
            topic = f"persistent://public/default/{base}-x"
            watcher = await WireClient.open(int(first.service_url.rsplit(":", 1)[1]))
            await watcher.connect()
            watch = pb.BaseCommand(type=T.WATCH_TOPIC_LIST)
            w = watch.watchTopicList
            w.request_id, w.watcher_id, w.namespace = 1, 3, "public/default"
            w.topics_pattern = f"public/default/{base}-.*"
            watcher.send(watch)
            assert not (await watcher.recv()).watchTopicListSuccess.topic

            creator = await WireClient.open(int(second.service_url.rsplit(":", 1)[1]))
            await creator.connect()
            # Cluster mode: the second broker takes the topic's bundle (an authoritative lookup makes the broker asked
            # the owner when nobody owns it), so the topic is created there, not on the watcher's broker.
            lookup = pb.BaseCommand(type=T.LOOKUP)
            lookup.lookupTopic.topic, lookup.lookupTopic.request_id = topic, 7
            lookup.lookupTopic.authoritative = True
            creator.send(lookup)
            answer = (await creator.recv()).lookupTopicResponse
            assert answer.response == pb.CommandLookupTopicResponse.Connect, answer
            assert answer.brokerServiceUrl == second.service_url
            creator.send(producer_cmd(topic, producer_id=1, request_id=1))
            assert (await creator.recv()).type == T.PRODUCER_SUCCESS
            update = (await watcher.recv()).watchTopicUpdate
            assert update.watcher_id == 3 and list(update.new_topics) == [topic]
            creator.close()

            async with aiohttp.ClientSession() as http:
                url = f"{second.web_url}/admin/v2/persistent/public/default/{base}-x?force=true"
                async with http.delete(url) as r:
                    assert r.status == 204, await r.text()
            update = (await watcher.recv()).watchTopicUpdate
            assert list(update.deleted_topics) == [topic] and not update.new_topics
            watcher.close()
        finally:
            await asyncio.to_thread(second.stop)
    finally:
        await asyncio.to_thread(first.stop)


def test_topics_that_come_and_go_leave_no_zookeeper_watches(bk_cluster: LocalCluster) -> None:
    """Topics made, used (with a schema and a topic policy) and deleted, and lookups of names that do not exist, on a
    broker whose metadata is in ZooKeeper: the watches do not grow with them (they grew by two per topic, for good:
    the managed ledger's and its cursor's znodes, or its partitioned metadata's; then by about one per schema, its
    versions' node; Pulsar's one recursive watch has no such growth)."""
    tag = uuid.uuid4().hex[:8]
    with BrokerThread(managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{bk_cluster.zk_address}",
                      managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2,
                      managedLedgerDefaultAckQuorum=2) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)

        def churn(first: int, last: int) -> None:
            for i in range(first, last):
                topic = f"persistent://public/default/churn-{tag}-{i}"
                consumer = client.subscribe(topic, "s")
                producer = client.create_producer(topic, batching_enabled=False, schema=pulsar.schema.StringSchema())
                producer.send("x")
                consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS))
                producer.close()
                consumer.close()
                path = f"{broker.web_url}/admin/v2/persistent/public/default/churn-{tag}-{i}"
                request = urllib.request.Request(f"{path}/messageTTL?messageTTL=60", method="POST")
                with urllib.request.urlopen(request, timeout=30) as answer:
                    assert answer.status == 204
                request = urllib.request.Request(f"{path}?force=true", method="DELETE")
                with urllib.request.urlopen(request, timeout=30) as answer:
                    assert answer.status == 204
                assert client.get_topic_partitions(f"persistent://public/default/none-{tag}-{i}")  # (a lookup)

        try:
            churn(0, 5)
            before = zk_watches(bk_cluster.zk_address)
            churn(5, 25)
            assert zk_watches(bk_cluster.zk_address) <= before + 2
        finally:
            client.close()


async def test_a_subscription_zookeeper_cannot_name_is_refused_clearly(bk_cluster: LocalCluster,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A cursor's znode is named after its subscription: "." and ".." cannot be znode names, in Pulsar's layout as
    here. The SUBSCRIBE is answered PersistenceError with the reason (Pulsar: its asyncOpenCursor failing is a
    PersistenceException), not UnknownError and an error logged; the connection and the topic go on."""
    caplog.set_level(logging.WARNING)
    zk = bk_cluster.zk_address
    topic = f"persistent://public/default/dots-{uuid.uuid4().hex[:8]}"
    async with Broker(managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{zk}/dots-{uuid.uuid4().hex[:8]}",
                      bookkeeperMetadataServiceUri=f"zk+hierarchical://{zk}/ledgers",
                      managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2,
                      managedLedgerDefaultAckQuorum=2) as broker:
        c = await WireClient.open(port_of(broker))
        try:
            await c.connect()
            await c.lookup(topic)
            for request_id, name in enumerate((".", ".."), start=1):
                c.send(subscribe_cmd(topic, name, consumer_id=request_id, request_id=request_id))
                answer = await c.recv()
                assert answer.type == T.ERROR and answer.error.error == pb.ServerError.PersistenceError, answer
                assert "Failed to open cursor" in answer.error.message
            c.send(subscribe_cmd(topic, "fine", consumer_id=9, request_id=9))
            assert (await c.recv()).type == T.SUCCESS
        finally:
            c.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_topic_list_asked_as_soon_as_the_broker_serves_names_every_stored_topic(
        bk_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Topics stored on BookKeeper, then a broker starts on that store: the list of the namespace asked the moment
    it serves names every one of them. Pulsar answers a topic list from the metadata store and makes its
    ManagedLedgerStorage before it serves (PulsarService.start); here the factory's first scan of the stored names
    ran in the background once the broker served, and a list asked meanwhile came back empty. The scan is held
    here until the test lets it go: while it is held the broker must either serve nothing yet or list every
    topic."""
    zk = bk_cluster.zk_address
    store_url = f"zk:{zk}/listed-at-start-{uuid.uuid4().hex[:8]}"
    settings: dict[str, Any] = dict(
        managedLedgerStorage="bookkeeper", metadataStoreUrl=store_url,
        bookkeeperMetadataServiceUri=f"zk+hierarchical://{zk}/ledgers",
        managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2, managedLedgerDefaultAckQuorum=2)
    expected = [f"persistent://public/default/stored-{i}" for i in range(3)]
    async with Broker(**settings) as first:  # (the topics made through a broker: PUT, as Pulsar's admin does)
        async with aiohttp.ClientSession() as http:
            for topic in expected:
                async with http.put(f"{first.web_url}/admin/v2/{topic.replace('://', '/')}") as r:
                    assert r.status == 204, await r.text()

    held, release = asyncio.Event(), asyncio.Event()
    scan = BookKeeperManagedLedgerFactory._scan

    async def held_first_scan(self: BookKeeperManagedLedgerFactory, path: str, depth: int,
                              found: set[str] | None = None) -> None:
        if depth == 0 and found is None:  # (the start's scan of the known names, not a re-read after a change)
            held.set()
            await release.wait()
        await scan(self, path, depth, found)

    monkeypatch.setattr(BookKeeperManagedLedgerFactory, "_scan", held_first_scan)
    broker = Broker(**settings)
    starting = asyncio.create_task(broker.start())
    try:
        async with aiohttp.ClientSession() as http:
            async def listed() -> list[str]:
                async with http.get(f"{broker.web_url}/admin/v2/persistent/public/default") as r:
                    assert r.status == 200, await r.text()
                    return sorted(t for t in await r.json() if "stored-" in t)

            async with asyncio.timeout(30):
                await held.wait()
            if broker.server is not None and broker.server.web_port:  # (serving already: it must know them all)
                assert await listed() == expected
            release.set()
            async with asyncio.timeout(30):
                await starting
            assert await listed() == expected  # (at once, no waiting)
    finally:
        release.set()
        await asyncio.gather(starting, return_exceptions=True)
        await broker.stop()
