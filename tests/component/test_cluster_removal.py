"""A loaded persistent topic whose cluster leaves its clusters is deleted, as Pulsar 4.0.7's
PersistentTopic.checkReplication -> removeTopicIfLocalClusterNotAllowed -> deleteForcefully deletes it
(``broker.service.cluster_removal``): its clients get CLOSE_PRODUCER / CLOSE_CONSUMER and are sent elsewhere by their
next lookup, its data, schema and topic policies go. And the near misses, where nothing may be deleted: the local
cluster among the namespace's allowed clusters, a topic's own clusters holding it, a non-persistent topic, stored
policies that are unreadable, of the wrong shape or marked deleted, a read of the store that fails.

The real broker in process (cluster "standalone"); "peer" is standalone's peer cluster (lookups go there), "third" is a
cluster that is not (a namespace replicated only there has no cluster to send its clients to from here)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from broker.embedded import Broker
from broker.metadata import layout as L
from broker.metadata.policy_table import REPLICATION_CLUSTERS
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.broker_service import BrokerService
from broker.topic_name import TopicName
from metadata_store.api import GetResult, Notification, NotificationType
from tests.component.wire import T, WireClient, port_of, producer_cmd, send_frame, subscribe_cmd
from tests.waiting import eventually

PEER = {"serviceUrl": "http://127.0.0.9:8080", "brokerServiceUrl": "pulsar://127.0.0.9:6650"}


class Setup:
    def __init__(self, broker: Broker, http: aiohttp.ClientSession) -> None:
        self.broker = broker
        self.http = http
        assert broker.server is not None
        self.service: BrokerService = broker.server.service

    async def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        async with self.http.request(method, self.broker.web_url + "/admin/v2" + path, json=body,
                                     allow_redirects=False) as reply:
            text = await reply.text()
            return reply.status, text

    async def ok(self, method: str, path: str, body: object = None) -> None:
        status, text = await self.call(method, path, body)
        assert status < 300, (method, path, status, text)

    async def namespace(self) -> str:
        ns = f"public/ns-{uuid.uuid4().hex[:8]}"
        await self.ok("PUT", f"/namespaces/{ns}")
        return ns

    async def client(self, topic: str, producer_id: int = 1, *, consumer: bool = True) -> WireClient:
        """A connection with a producer (and a consumer) on ``topic``, one message published."""
        client = await WireClient.open(port_of(self.broker))
        await client.connect()
        client.send(producer_cmd(topic, producer_id=producer_id, request_id=producer_id))
        assert (await client.recv()).type == T.PRODUCER_SUCCESS
        if consumer:
            client.send(subscribe_cmd(topic, consumer_id=producer_id, request_id=100 + producer_id))
            assert (await client.recv()).type == T.SUCCESS
        await self.publish(client, producer_id, 0)
        return client

    @staticmethod
    async def publish(client: WireClient, producer_id: int, seq: int) -> None:
        client.send(*send_frame(producer_id, seq, b"m"))
        receipt = await client.recv()
        assert receipt.type == T.SEND_RECEIPT and receipt.send_receipt.sequence_id == seq

    @property
    def removal_pending(self) -> bool:
        return bool(self.service.cluster_removal._deleting)

    async def set_policies(self, ns: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Write the namespace's Policies document in the store (without the admin API's checks)."""
        await self.service.metadata.cache.modify(L.NAMESPACES, ns, lambda current: change(dict(current)))


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    async with Broker() as broker, aiohttp.ClientSession() as http:
        s = Setup(broker, http)
        await s.ok("PUT", "/clusters/peer", PEER)
        await s.ok("PUT", "/clusters/third", {"serviceUrl": "http://127.0.0.9:8081",
                                              "brokerServiceUrl": "pulsar://127.0.0.9:6651"})
        await s.ok("POST", "/clusters/standalone/peers", ["peer"])
        await s.ok("POST", "/tenants/public", {"allowedClusters": ["standalone", "peer", "third"]})
        yield s


async def test_a_topic_whose_namespace_leaves_this_cluster_is_deleted(setup: Setup) -> None:
    ns = await setup.namespace()
    topic = f"persistent://{ns}/t"
    name = TopicName.parse(topic)
    client = await setup.client(topic)
    await setup.ok("POST", f"/schemas/{ns}/t/schema", {"type": "STRING", "schema": "", "properties": {}})
    assert setup.service.schemas.versions(name.full)
    await setup.ok("POST", f"/namespaces/{ns}/replication", ["peer"])
    # The clients are told to go (CLOSE_PRODUCER, CLOSE_CONSUMER), as Pulsar's deleteForcefully disconnects them.
    closes = {(await client.recv()).type for _ in range(2)}
    assert closes == {T.CLOSE_PRODUCER, T.CLOSE_CONSUMER}
    await eventually(lambda: name.full not in setup.service.topics and not setup.removal_pending,
                     what="the topic to be deleted")
    assert not setup.service.topic_exists(name)  # its managed ledger (messages, cursors) is gone
    assert not setup.service.schemas.versions(name.full)
    assert setup.service.cluster_removal.deleted_total == 1
    # Their next lookup sends them to the peer cluster that serves the namespace now.
    answer = await client.lookup(topic)
    assert answer.response == pb.CommandLookupTopicResponse.Redirect
    assert answer.brokerServiceUrl == PEER["brokerServiceUrl"]
    client.close()


async def test_the_partitions_go_then_the_schema_and_topic_policies(setup: Setup) -> None:
    ns = await setup.namespace()
    topic = f"persistent://{ns}/p"
    base = TopicName.parse(topic)
    await setup.ok("PUT", f"/persistent/{ns}/p/partitions", 2)
    await setup.ok("POST", f"/schemas/{ns}/p/schema", {"type": "STRING", "schema": "", "properties": {}})
    await setup.ok("POST", f"/persistent/{ns}/p/maxProducers", 5)
    clients = [await setup.client(f"{topic}-partition-{i}", consumer=False) for i in range(2)]
    await setup.ok("POST", f"/namespaces/{ns}/replication", ["third"])  # no peer cluster serves it from here
    for client in clients:
        assert (await client.recv()).type == T.CLOSE_PRODUCER
        client.close()
    await eventually(lambda: not setup.removal_pending and not any(
        setup.service.topic_exists(base.partition(i)) for i in range(2)), what="the partitions to be deleted")
    assert not setup.service.schemas.versions(base.full)
    assert setup.service.metadata.topic_policy(base.full, "maxProducers") is None
    assert setup.service.metadata.partitions_of(base.full) == 2  # (Pulsar keeps the partitioned metadata too)


async def test_a_topic_whose_own_clusters_leave_this_cluster_out_is_deleted(setup: Setup) -> None:
    # Pulsar's check reads the clusters in force for the topic: its own (topic policies) before its namespace's.
    # (Our admin API refuses such a local topic policy now, as Pulsar 4.0.7's does: a stored one, written before.)
    ns = await setup.namespace()
    topic = f"persistent://{ns}/own"
    name = TopicName.parse(topic)
    client = await setup.client(topic, consumer=False)
    await setup.service.metadata.set_topic_policy(name.full, "replicationClusters", ["third"])
    assert (await client.recv()).type == T.CLOSE_PRODUCER
    await eventually(lambda: not setup.removal_pending and not setup.service.topic_exists(name),
                     what="the topic to be deleted")
    client.close()


async def test_a_stored_topic_is_deleted_when_it_loads_but_not_loaded_by_a_namespace_clear_backlog(
        setup: Setup) -> None:
    ns = await setup.namespace()
    topic = f"persistent://{ns}/stored"
    name = TopicName.parse(topic)
    client = await setup.client(topic)
    client.close()
    await setup.ok("PUT", f"/persistent/{ns}/stored/unload")
    await setup.ok("POST", f"/namespaces/{ns}/replication", ["third"])
    assert setup.service.topic_exists(name) and not setup.removal_pending  # (not loaded: nothing to check)
    # Pulsar's namespace-wide clearBacklog visits the loaded topics only (it has deleted those): this one stays.
    await setup.ok("POST", f"/namespaces/{ns}/clearBacklog")
    assert setup.service.topic_exists(name) and name.full not in setup.service.topics
    # Loaded by a call Pulsar does not send elsewhere, it is deleted as it loads (Pulsar: openLedgerComplete).
    await setup.ok("GET", f"/persistent/{ns}/stored/lastMessageId")
    await eventually(lambda: not setup.removal_pending and not setup.service.topic_exists(name),
                     what="the topic to be deleted")


async def test_near_misses_delete_nothing(setup: Setup) -> None:
    service = setup.service
    kept: list[tuple[WireClient, int, str]] = []

    async def loaded(ns: str, local: str = "t") -> str:
        topic = f"persistent://{ns}/{local}"
        kept.append((await setup.client(topic, producer_id=len(kept) + 1), len(kept) + 1, topic))
        return topic

    # The local cluster is one of the namespace's allowed clusters (PIP-321): it still serves the namespace.
    allowed = await setup.namespace()
    await loaded(allowed)
    await setup.ok("POST", f"/namespaces/{allowed}/allowedClusters", ["standalone", "third"])
    await setup.ok("POST", f"/namespaces/{allowed}/replication", ["third"])
    # The topic's own clusters hold the local cluster (they are the ones in force for it).
    own = await setup.namespace()
    own_topic = await loaded(own)
    await setup.ok("POST", f"/persistent/{own}/t/replication", ["standalone"])
    await setup.ok("POST", f"/namespaces/{own}/replication", ["third"])
    assert service.policies.get(TopicName.parse(own_topic), REPLICATION_CLUSTERS) == ["standalone"]
    # A non-persistent topic: Pulsar's NonPersistentTopic only updates its replicators.
    np_ns = await setup.namespace()
    np_client = await WireClient.open(port_of(setup.broker))
    await np_client.connect()
    np_topic = f"non-persistent://{np_ns}/np"
    np_client.send(producer_cmd(np_topic, producer_id=1, request_id=1))
    assert (await np_client.recv()).type == T.PRODUCER_SUCCESS
    # A system topic (Pulsar's SystemTopic deletes only __change_events and the transaction ones, none of which we
    # keep): the broker's own topics are left alone.
    system = TopicName.parse(f"persistent://{np_ns}/__change_events")
    await service.get_persistent_topic(system, create=True, explicit=True)
    await setup.ok("POST", f"/namespaces/{np_ns}/replication", ["third"])
    assert np_topic in service.non_persistent_topics and system.full in service.topics
    # Stored policies we cannot read as a list of clusters, or marked deleted: nothing is deleted on them.
    for change in (lambda p: {**p, "replication_clusters": "third"},  # (not a list: the broker's default applies)
                   lambda p: {**p, "replication_clusters": [], "allowed_clusters": []},  # (empty: the default)
                   lambda p: {**p, "replication_clusters": ["third"], "allowed_clusters": "elsewhere"},
                   lambda p: {**p, "replication_clusters": ["third"], "deleted": True}):
        ns = await setup.namespace()
        await loaded(ns)
        await setup.set_policies(ns, change)
        assert not setup.removal_pending
    store = service.metadata.cache.store
    for raw in (b"[]", b"{not json"):  # a document that is not an object (no clusters), one that is not JSON
        ns = await setup.namespace()
        await loaded(ns)
        path = L.NAMESPACES.path(ns)
        current = await store.get(path)
        assert current is not None
        await store.put(path, raw, current.stat.version)
        await service.metadata.cache.settled()
        assert not setup.removal_pending
    # A read of the store that fails keeps the values read before (here: the local cluster's).
    failing = await setup.namespace()
    await loaded(failing)
    path = L.NAMESPACES.path(failing)
    store_get = store.get

    async def failing_get(p: str) -> GetResult | None:
        if p == path:
            raise ConnectionError("metadata store unreachable")
        return await store_get(p)

    store.get = failing_get  # type: ignore[method-assign,assignment]
    try:
        service.metadata.cache._on_notification(Notification(NotificationType.MODIFIED, path))
        await service.metadata.cache.settled()
        await setup.ok("PUT", f"/namespaces/{failing}-other")  # (any change: every loaded topic is checked)
    finally:
        store.get = store_get  # type: ignore[method-assign]
    assert service.metadata.namespaces[failing]["replication_clusters"] == ["standalone"]

    assert not setup.removal_pending and service.cluster_removal.deleted_total == 0
    for client, producer_id, topic in kept:  # every producer still publishes to its topic
        assert TopicName.parse(topic).full in service.topics
        await setup.publish(client, producer_id, 1)
        client.close()
    np_client.close()


async def test_the_deletion_checks_again_as_it_begins(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    # The deletion runs in the background: by the time it begins the topic may have been unloaded (in cluster mode
    # another broker may own it then) or the clusters changed back. Nothing is deleted then.
    service, removal = setup.service, setup.service.cluster_removal
    ns = await setup.namespace()
    name = TopicName.parse(f"persistent://{ns}/raced")
    client = await setup.client(name.full)
    topic = service.topics[name.full]
    monkeypatch.setattr(removal, "excluded", lambda n: True)
    assert removal.check(topic)
    assert await service.unload_topic(name)  # (before the deletion's task has run)
    await removal._deletions.wait()
    assert service.topic_exists(name) and removal.deleted_total == 0
    client.close()
    # Loaded again: the clusters change back before the deletion begins.
    monkeypatch.setattr(removal, "excluded", lambda n: False)
    topic = await service.get_persistent_topic(name, create=False)
    verdicts = iter([True, False])
    monkeypatch.setattr(removal, "excluded", lambda n: next(verdicts))
    assert removal.check(topic)
    await removal._deletions.wait()
    assert service.topics.get(name.full) is topic and service.topic_exists(name) and removal.deleted_total == 0


async def test_a_topic_loaded_again_while_its_deletion_ends_is_deleted_too(
        setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    # The deletion's last step (the schema) may still run when the name is loaded again (here by an admin's create):
    # that new topic is checked on its own, not taken for the one being deleted.
    service, removal = setup.service, setup.service.cluster_removal
    ns = await setup.namespace()
    name = TopicName.parse(f"persistent://{ns}/again")
    client = await setup.client(name.full, consumer=False)
    gate = asyncio.Event()
    schemas_delete = service.schemas.delete

    async def held_delete(base_topic: str, keep_history: bool = False) -> int | None:
        await gate.wait()
        return await schemas_delete(base_topic, keep_history)

    monkeypatch.setattr(service.schemas, "delete", held_delete)
    try:
        await setup.ok("POST", f"/namespaces/{ns}/replication", ["third"])
        await eventually(lambda: name.full not in service.topics and not service.topic_exists(name),
                         what="the first deletion to reach the schema")
        again = await service.get_persistent_topic(name, create=True, explicit=True)
        await eventually(lambda: service.topics.get(name.full) is not again and not service.topic_exists(name),
                         what="the topic loaded again to be deleted")
    finally:
        gate.set()
    await removal._deletions.wait()
    assert removal.deleted_total == 2 and not setup.removal_pending
    client.close()
