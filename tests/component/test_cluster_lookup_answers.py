"""A cluster-mode LOOKUP always gets an answer: a failure the lookup did not foresee (here an unreadable broker
registration, ``ClusterDataError``) is answered ServiceNotReady, which clients retry, as Pulsar's
TopicLookupBase.handleLookupError answers any other error; unanswered, the client waited for its operation
timeout (30 s) before trying again.

An admin split of a bundle nobody owns is placed as a lookup places it (Pulsar's validateNamespaceBundleOwnership, not
read-only): a broker that is not the leader sends it to the leader (307) instead of taking the bundle itself.
An admin call on a bundle its owner is unloading is refused with Pulsar's 500 "being unloaded", on the owner and on
any other broker, not redirected to the owner (which redirected to itself until the unload ended). A bundle's topic
hash positions are read where the bundle is owned (307 there, every ``topics`` kept), and a bundle nobody owns is
not taken for it (Pulsar's read-only lookup: 412).
A metadata store that fails the lookup (or a PARTITIONED_METADATA that creates a partitioned topic) is answered
MetadataError, as Pulsar's handleLookupError answers a
MetadataStoreException. A namespace a peer cluster serves is redirected there before ownership is asked at all.

The real broker in process; its ownership replaced by one that is distributed and whose lookup fails so."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest

from broker.cluster.data import ClusterDataError
from broker.embedded import Broker
from broker.errors import MetadataError
from broker.protocol import pulsar_api_pb2 as pb
from broker.topic_name import TopicName
from metadata_store.api import MetadataStoreError
from tests.admin.conftest import Admin
from tests.component.wire import T, WireClient, port_of
from tests.unit.test_cluster_ownership import BUNDLES
from tests.unit.test_cluster_ownership import Broker as ClusterMember


class FailingOwnership:
    distributed = True

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def lookup(self, name: TopicName, authoritative: bool, listener: str | None) -> object:
        raise self.error


async def lookup_with(b: Broker, ownership: FailingOwnership, topic: str) -> pb.CommandLookupTopicResponse:
    """A LOOKUP asked of ``b`` in cluster mode, its ownership replaced by ``ownership``."""
    assert b.server is not None
    service = b.server.service
    standalone, service.ownership = service.ownership, ownership  # type: ignore[assignment]
    client = await WireClient.open(port_of(b))
    try:
        await client.connect()
        return await client.lookup(topic)
    finally:
        client.close()
        service.ownership = standalone


async def test_an_unforeseen_lookup_failure_is_answered() -> None:
    async with Broker() as b:
        failing = FailingOwnership(ClusterDataError("broker 127.0.0.9:8080: unreadable load report"))
        r = await lookup_with(b, failing, "persistent://public/default/unanswered")
        assert r.response == pb.CommandLookupTopicResponse.Failed and r.error == pb.ServiceNotReady


async def test_a_metadata_store_failure_is_a_metadata_error() -> None:
    async with Broker() as b:
        for error in (MetadataStoreError("operation timed out"), MetadataError("lookup: metadata store: timed out")):
            r = await lookup_with(b, FailingOwnership(error), "persistent://public/default/unanswered")
            assert r.response == pb.CommandLookupTopicResponse.Failed and r.error == pb.MetadataError


async def test_a_namespace_of_a_peer_cluster_is_redirected_before_ownership_is_asked() -> None:
    async with Broker() as b:
        admin = Admin(b.web_url)
        peer = {"serviceUrl": "http://127.0.0.9:8080", "brokerServiceUrl": "pulsar://127.0.0.9:6650"}
        await asyncio.to_thread(admin.ok, "PUT", "/admin/v2/clusters/peer", peer)
        await asyncio.to_thread(admin.ok, "POST", "/admin/v2/clusters/standalone", {"peerClusterNames": ["peer"]})
        await asyncio.to_thread(admin.ok, "POST", "/admin/v2/tenants/public",
                                {"allowedClusters": ["standalone", "peer"]})
        await asyncio.to_thread(admin.ok, "PUT", "/admin/v2/namespaces/public/elsewhere")
        await asyncio.to_thread(admin.ok, "POST", "/admin/v2/namespaces/public/elsewhere/replication", ["peer"])
        never = FailingOwnership(AssertionError("ownership asked"))
        r = await lookup_with(b, never, "persistent://public/elsewhere/t")
        assert r.response == pb.CommandLookupTopicResponse.Redirect and r.authoritative
        assert r.brokerServiceUrl == "pulsar://127.0.0.9:6650"


async def test_a_split_of_a_bundle_nobody_owns_goes_where_a_lookup_would() -> None:
    tree = f"split-{uuid.uuid4().hex}"
    leader = await ClusterMember(tree, 1).start()
    other = await ClusterMember(tree, 2).start()  # (memory store: the same bundles as public/default's 4)
    try:
        async with Broker() as b:
            assert b.server is not None
            service = b.server.service
            standalone, service.ownership = service.ownership, other.ownership
            try:
                bundle = "0x00000000_0x40000000"
                url = f"{b.web_url}/admin/v2/namespaces/public/default/{bundle}/split"
                async with aiohttp.ClientSession() as http, http.put(url, allow_redirects=False) as reply:
                    assert reply.status == 307
                    assert reply.headers["Location"] == (
                        f"http://127.0.0.1:8080/admin/v2/namespaces/public/default/{bundle}/split"
                        "?authoritative=false")
                assert not other.ownership.owned_bundles() and not leader.ownership.owned_bundles()
            finally:
                service.ownership = standalone
    finally:
        await other.stop()
        await leader.stop()


async def test_topic_hash_positions_are_read_on_the_owner_and_take_no_bundle() -> None:
    tree = f"positions-{uuid.uuid4().hex}"
    owner = await ClusterMember(tree, 1).start()
    other = await ClusterMember(tree, 2).start()
    name = TopicName.parse("persistent://public/default/t-0")
    owned, free = BUNDLES.find(name.full), next(b for b in BUNDLES.bundles if not b.includes(name.full))
    try:
        await owner.ownership.lookup(name, True, None)
        async with Broker() as b, aiohttp.ClientSession() as http:
            assert b.server is not None
            service = b.server.service
            standalone, service.ownership = service.ownership, other.ownership
            base = f"{b.web_url}/admin/v2/namespaces/public/default"
            try:
                async with http.get(f"{base}/{owned.range_name}/topicHashPositions?topics=a&topics=b",
                                    allow_redirects=False) as reply:
                    assert reply.status == 307
                    assert reply.headers["Location"] == (
                        f"http://127.0.0.1:8080/admin/v2/namespaces/public/default/{owned.range_name}"
                        "/topicHashPositions?topics=a&topics=b&authoritative=false")
                async with http.get(f"{base}/{free.range_name}/topicHashPositions", allow_redirects=False) as reply:
                    assert reply.status == 412
                    assert (await reply.json())["reason"] == f"Failed to find ownership for ServiceUnit:{free}"
                assert not other.ownership.owned_bundles()
                assert [str(x) for x in owner.ownership.owned_bundles()] == [str(owned)]
                service.ownership = owner.ownership  # (on the owner: the answer)
                async with http.get(f"{base}/{owned.range_name}/topicHashPositions", allow_redirects=False) as reply:
                    assert reply.status == 200
                    assert (await reply.json())["bundle"] == owned.range_name
            finally:
                service.ownership = standalone
    finally:
        await other.stop()
        await owner.stop()


async def test_a_call_on_a_bundle_being_unloaded_is_refused_not_redirected_to_the_owner() -> None:
    tree = f"unloading-{uuid.uuid4().hex}"
    owner = await ClusterMember(tree, 1).start()
    other = await ClusterMember(tree, 2).start()
    closing, release = asyncio.Event(), asyncio.Event()

    async def slow_unload(names: list[str]) -> int:  # (the bundle's topics take their time to close)
        closing.set()
        await release.wait()
        return 0

    owner.host.unload_topics = slow_unload  # type: ignore[method-assign]
    name = TopicName.parse("persistent://public/default/t-0")
    bundle = BUNDLES.find(name.full)
    try:
        await owner.ownership.lookup(name, True, None)
        unloading = asyncio.create_task(owner.ownership.unload_bundle(bundle))
        await asyncio.wait_for(closing.wait(), 10)  # (the node says disabled now)
        async with Broker() as b, aiohttp.ClientSession() as http:
            assert b.server is not None
            service = b.server.service
            standalone = service.ownership
            try:
                for member in (owner, other):  # (the owner redirected to itself, the other to the owner)
                    service.ownership = member.ownership
                    for method, path in (("PUT", "namespaces/public/default/{}/unload"),
                                         ("GET", "non-persistent/public/default/{}"),
                                         ("GET", "namespaces/public/default/{}/topicHashPositions")):
                        async with http.request(method, f"{b.web_url}/admin/v2/{path.format(bundle.range_name)}",
                                                allow_redirects=False) as reply:
                            assert reply.status == 500, (method, reply.status, reply.headers.get("Location"))
                            assert (await reply.json())["reason"] == f"Namespace bundle {bundle} is being unloaded"
            finally:
                service.ownership = standalone
        release.set()
        await unloading
    finally:
        release.set()
        await other.stop()
        await owner.stop()


async def test_a_partitioned_metadata_the_metadata_store_fails_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    async with Broker(allowAutoTopicCreationType="partitioned") as b:
        assert b.server is not None

        async def failing(topic: str, partitions: int) -> None:
            raise MetadataStoreError("operation timed out")

        monkeypatch.setattr(b.server.service.metadata, "set_partitions", failing)
        client = await WireClient.open(port_of(b))
        try:
            await client.connect()
            cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA)
            cmd.partitionMetadata.topic = "persistent://public/default/new-partitioned"
            cmd.partitionMetadata.request_id = 9
            client.send(cmd)
            answer = await client.recv()  # (unanswered, the client waited for its operation timeout)
            assert answer.type == T.PARTITIONED_METADATA_RESPONSE
            r = answer.partitionMetadataResponse
            assert (r.request_id, r.response, r.error) == (9, pb.CommandPartitionedTopicMetadataResponse.Failed,
                                                           pb.MetadataError)
        finally:
            client.close()
