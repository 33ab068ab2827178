"""Cluster mode in-process: registry, leader election, ownership and lookups of two brokers sharing one memory
metadata store (each a session of its own), with fake topic hosts; Pulsar's JSON values; the placement rules."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import uuid
from typing import Any

import pytest

from broker.cluster.bundles import NamespaceBundle, NamespaceBundles
from broker.cluster.data import (
    BrokerUrls,
    BundleLoad,
    LeaderBroker,
    ListenerUrls,
    LoadReport,
    NamespaceEphemeralData,
)
from broker.cluster.ownership import ClusterOwnership, ownership_path
from broker.cluster.placement import Placement
from broker.cluster.registry import BrokerRegistry
from broker.errors import MetadataError, ServiceNotReadyError
from broker.metadata.store import BrokerMetadata
from broker.topic_name import TopicName
from metadata_store.api import MetadataStoreError, SessionEvent
from metadata_store.memory import MemoryMetadataStore
from tests.waiting import eventually

NS = "public/default"
BUNDLES = NamespaceBundles(NS, (0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF))
REPORT_TIMES = itertools.count(1)  # each report a new lastUpdate, as a broker writes them


class Host:
    def __init__(self) -> None:
        self.topics: set[str] = set()
        self.dropped = 0
        self.acquired: list[NamespaceBundle] = []

    def served_topic_names(self) -> list[str]:
        return sorted(self.topics)

    async def unload_topics(self, names: list[str]) -> int:
        self.topics -= set(names)
        return len(names)

    def stop_serving_now(self) -> None:
        self.dropped += len(self.topics)
        self.topics.clear()

    def bundle_acquired(self, bundle: NamespaceBundle) -> None:
        self.acquired.append(bundle)


def urls(n: int) -> BrokerUrls:
    return BrokerUrls(f"127.0.0.{n}:8080", f"pulsar://127.0.0.{n}:6650", None, f"http://127.0.0.{n}:8080", None,
                      {"external": ListenerUrls(f"pulsar://broker-{n}.example.com:16650", None)})


class Broker:
    """One broker of the cluster: its own session of the shared tree. The namespace's bundles are ``bundles``
    (the same on every broker), or with ``metadata`` what its metadata cache holds, as in the broker."""

    def __init__(self, tree: str, n: int, metadata: BrokerMetadata | None = None) -> None:
        self.store = MemoryMetadataStore(tree)
        self.urls = urls(n)
        self.host = Host()
        self.metadata = metadata
        self.bundles = BUNDLES
        self.registry = BrokerRegistry(self.store, self.urls, lambda: LoadReport(self.urls, bundles=tuple(
            str(b) for b in self.ownership.owned_bundles())))
        if metadata is not None:
            self.ownership = ClusterOwnership(self.store, self.urls, self.registry, self.host,
                                              metadata.namespace_bundles, metadata.stored_namespace_bundles)
        else:
            self.ownership = ClusterOwnership(self.store, self.urls, self.registry, self.host,
                                              lambda ns: self.bundles, self._stored_bundles)

    async def _stored_bundles(self, namespace: str) -> NamespaceBundles:
        return self.bundles

    async def start(self) -> Broker:
        if self.metadata is not None:
            await self.metadata.start(self.store)
        await self.registry.start()
        return self

    async def stop(self) -> None:
        await self.ownership.close()
        await self.registry.close()
        if self.metadata is not None:
            await self.metadata.close()
        await self.store.close()


def topic(i: int = 0) -> TopicName:
    return TopicName.parse(f"persistent://{NS}/t-{i}")


@pytest.fixture
def tree() -> str:
    return f"cluster-{uuid.uuid4().hex}"


async def test_registry_and_leader_at_pulsars_paths(tree: str) -> None:
    a = await Broker(tree, 1).start()
    b = await Broker(tree, 2).start()
    try:
        assert await a.store.get_children("/loadbalance/brokers") == ["127.0.0.1:8080", "127.0.0.2:8080"]
        got = await a.store.get("/loadbalance/brokers/127.0.0.2:8080")
        assert got is not None and got.stat.ephemeral
        report = json.loads(got.value)
        assert report["pulsarServiceUrl"] == "pulsar://127.0.0.2:6650"
        assert report["advertisedListeners"] == {"external": {"brokerServiceUrl":
                                                               "pulsar://broker-2.example.com:16650"}}
        leader = await a.store.get("/loadbalance/leader")
        assert leader is not None and leader.stat.ephemeral
        assert json.loads(leader.value) == {"brokerId": "127.0.0.1:8080", "serviceUrl": "http://127.0.0.1:8080"}
        assert a.registry.is_leader and not b.registry.is_leader
        assert b.registry.leader == LeaderBroker("127.0.0.1:8080", "http://127.0.0.1:8080")
        await a.stop()  # the leader goes: the other broker runs again and wins
        await eventually(lambda: b.registry.is_leader, "the second broker to lead")
    finally:
        await b.stop()


async def test_lookups_connect_to_the_owner_or_redirect_as_pulsar(tree: str) -> None:
    a = await Broker(tree, 1).start()  # the leader
    b = await Broker(tree, 2).start()
    try:
        # Not the leader, nobody owns it: Redirect to the leader, not authoritative.
        answer = await b.ownership.lookup(topic(), False, None)
        assert (answer.redirect, answer.authoritative, answer.urls.url) == (True, False, "pulsar://127.0.0.1:6650")
        # The leader picks a broker; if it is the other one, Redirect there, authoritative, and the other one
        # takes the bundle on the authoritative lookup.
        answer = await a.ownership.lookup(topic(), False, None)
        owner = a
        if answer.redirect:
            assert answer.authoritative and answer.urls.url == "pulsar://127.0.0.2:6650"
            answer = await b.ownership.lookup(topic(), True, None)
            owner = b
        assert not answer.redirect and answer.urls.url == owner.urls.pulsar_url
        bundle = BUNDLES.find(topic().full)
        assert owner.ownership.is_owned(bundle) and owner.host.acquired == [bundle]  # (its topics load)
        owner.ownership.check_serving(topic())
        other = b if owner is a else a
        with pytest.raises(ServiceNotReadyError, match="not served by this instance"):
            other.ownership.check_serving(topic())
        node = await a.store.get(ownership_path(bundle))
        assert node is not None and node.stat.ephemeral
        assert NamespaceEphemeralData.from_bytes(node.value) == NamespaceEphemeralData.of(owner.urls)
        # Either broker now answers Connect to the owner, for the client's listener too.
        for broker in (a, b):
            again = await broker.ownership.lookup(topic(), False, None)
            assert not again.redirect and again.authoritative and again.urls.url == owner.urls.pulsar_url
            external = await broker.ownership.lookup(topic(), False, "external")
            assert external.urls == owner.urls.listeners["external"]
            with pytest.raises(ServiceNotReadyError, match="do not have nope listener"):
                await broker.ownership.lookup(topic(), False, "nope")
    finally:
        await b.stop()
        await a.stop()


async def test_a_lookup_the_metadata_store_fails_is_a_metadata_error(tree: str) -> None:
    """As Pulsar's handleLookupError answers a MetadataStoreException (ServiceNotReady is for the other refusals)."""
    a = await Broker(tree, 1).start()
    try:
        async def failing_get(path: str, *, watch_missing: bool = True) -> Any:
            raise MetadataStoreError("operation timed out")

        a.store.get = failing_get  # type: ignore[method-assign]
        with pytest.raises(MetadataError, match="metadata store: operation timed out"):
            await a.ownership.lookup(topic(), False, None)
    finally:
        await a.stop()


async def test_unload_releases_and_session_loss_stops_serving(tree: str) -> None:
    a = await Broker(tree, 1).start()
    try:
        await a.ownership.lookup(topic(), False, None)  # alone: the leader takes it
        bundle = BUNDLES.find(topic().full)
        a.host.topics.update({topic().full, topic(1).full})
        in_bundle = {t for t in a.host.topics if BUNDLES.find(t) == bundle}
        assert await a.ownership.unload_bundle(bundle) == len(in_bundle)
        assert not a.ownership.is_owned(bundle) and await a.store.get(ownership_path(bundle)) is None
        # Owned again on the next lookup; then the session is lost: nothing is served any more, at once.
        await a.ownership.lookup(topic(), False, None)
        a.host.topics.add(topic().full)
        a.store.expire_session()
        await eventually(lambda: not a.ownership.owned_bundles(), "the ownership to be dropped")
        assert a.host.dropped >= 1 and not a.host.topics
        with pytest.raises(ServiceNotReadyError):
            a.ownership.check_serving(topic())
        # A new session: registered again, and the bundle can be owned again.
        await eventually(lambda: a.registry.is_leader, "the broker to lead again")
        answer = await a.ownership.lookup(topic(), False, None)
        assert not answer.redirect and a.ownership.is_owned(bundle)
    finally:
        await a.stop()


async def test_a_restarted_broker_takes_back_its_own_node(tree: str) -> None:
    first = await Broker(tree, 1).start()
    await first.ownership.lookup(topic(), False, None)
    bundle = BUNDLES.find(topic().full)
    # The same broker (same URLs) in a new session while the old one's nodes are still there (a kill -9 whose
    # session has not expired yet: the old store is simply left open).
    second = await Broker(tree, 1).start()
    try:
        assert second.registry.is_leader
        answer = await second.ownership.lookup(topic(), False, None)
        assert not answer.redirect and second.ownership.is_owned(bundle)
        node = await second.store.get(ownership_path(bundle))
        assert node is not None and node.stat.created_by_self
    finally:
        await second.stop()
        await first.store.close()


async def test_split_keeps_the_topics_and_owns_the_children(tree: str) -> None:
    a = await Broker(tree, 1).start()
    try:
        await a.ownership.lookup(topic(), False, None)
        parent = BUNDLES.find(topic().full)
        a.host.topics.add(topic().full)
        half = (parent.lower + parent.upper) // 2
        children = [NamespaceBundle(NS, parent.lower, half), NamespaceBundle(NS, half, parent.upper)]
        await a.ownership.bundle_split(parent, children)
        assert a.host.topics == {topic().full}
        assert all(a.ownership.is_owned(c) for c in children) and not a.ownership.is_owned(parent)
        assert await a.store.get(ownership_path(parent)) is None
        for child in children:
            assert await a.store.get(ownership_path(child)) is not None
    finally:
        await a.stop()


def test_namespace_ephemeral_data_json() -> None:
    data = NamespaceEphemeralData.of(urls(3))
    body = json.loads(data.to_bytes())
    assert body == {"nativeUrl": "pulsar://127.0.0.3:6650", "nativeUrlTls": None, "httpUrl": "http://127.0.0.3:8080",
                    "httpUrlTls": None, "disabled": False,
                    "advertisedListeners": {"external": {"brokerServiceUrl": "pulsar://broker-3.example.com:16650"}}}
    assert NamespaceEphemeralData.from_bytes(data.to_bytes()) == data
    # As Pulsar's Java writes it (unknown fields ignored, no listeners).
    java = b'{"nativeUrl":"pulsar://h:6650","nativeUrlTls":null,"httpUrl":"http://h:8080","httpUrlTls":null,' \
           b'"disabled":true,"extra":1}'
    parsed = NamespaceEphemeralData.from_bytes(java)
    assert parsed.disabled and parsed.native_url == "pulsar://h:6650" and not parsed.listeners
    # An older LeaderBroker names only the URL.
    assert LeaderBroker.from_bytes(b'{"serviceUrl":"http://h:8080"}').broker_id == "h:8080"


def report(n: int, bundles: tuple[str, ...] = (), rate: float = 0.0, cpu: float = 0.0) -> LoadReport:
    """Broker n's report: ``rate`` (msg/s in) shared by its bundles (one of another namespace when none is given)."""
    if rate and not bundles:
        bundles = (f"other{n}/ns/0x00000000_0xffffffff",)
    stats = {b: BundleLoad(msg_rate_in=rate / len(bundles)) for b in bundles}
    return LoadReport(urls(n), cpu_usage=cpu, msg_rate_in=rate, bundles=bundles, bundle_stats=stats,
                      last_update_ms=next(REPORT_TIMES))


def test_placement_spreads_a_namespace_then_takes_the_least_loaded() -> None:
    bundle = BUNDLES.bundles[0]
    placement = Placement(random.Random(7))
    # Fewest bundles of the namespace first, even when busier.
    brokers = {"a": report(1, (f"{NS}/{BUNDLES.bundles[1].range_name}",), rate=0.0),
               "b": report(2, ("other/ns/0x00000000_0xffffffff",), rate=500.0)}
    assert placement.select(bundle, brokers) == "b"
    # Then the least long-term message rate of the bundles (as the leader averaged the reports); an overloaded
    # broker (CPU above 85 %) scores infinity.
    fresh = Placement(random.Random(7))
    brokers = {"a": report(1, rate=120.0), "b": report(2, rate=10.0, cpu=90.0), "c": report(3, rate=50.0)}
    assert fresh.history.observe(brokers)
    assert fresh.select(bundle, brokers) == "c"
    # What the leader assigned counts for its broker until its report shows it: a new bundle at Pulsar's default
    # 100 msg/s (50 in, 50 out), so c (150) is now busier than a (120).
    assert fresh.select(BUNDLES.bundles[1], brokers) == "a"
    # A broker's report not sampled yet counts Pulsar's defaults for each of its bundles too.
    assert Placement(random.Random(7)).select(BUNDLES.bundles[2], {"a": report(1, rate=1.0), "c": report(3)}) == "c"
    assert fresh.select(bundle, {}) is None


async def test_a_client_sent_here_while_the_bundle_is_being_taken_waits_for_it(tree: str) -> None:
    """Another broker's lookup sees the ownership node as soon as the store has it, before this broker has heard
    back: a topic load in that window waits for the acquisition instead of refusing the client."""
    a = await Broker(tree, 1).start()
    try:
        release = asyncio.Event()
        put = a.store.put

        async def slow_put(*args: Any, **kwargs: Any) -> Any:
            await release.wait()
            return await put(*args, **kwargs)

        a.store.put = slow_put  # type: ignore[method-assign]
        bundle = BUNDLES.find(topic().full)
        acquiring = asyncio.ensure_future(a.ownership.acquire(bundle))
        await eventually(lambda: bundle in a.ownership._acquiring, "the acquisition to start")
        with pytest.raises(ServiceNotReadyError):
            a.ownership.check_serving(topic())
        waiting = asyncio.ensure_future(a.ownership.wait_serving(topic()))
        await asyncio.sleep(0)
        assert not waiting.done()
        release.set()
        await asyncio.wait_for(waiting, 10)  # served now: no ServiceNotReadyError
        await acquiring
        with pytest.raises(ServiceNotReadyError):  # a bundle nobody is taking is refused at once
            await a.ownership.wait_serving(TopicName.parse(f"persistent://{NS}/{_other_bundle_topic(bundle)}"))
    finally:
        await a.stop()


def _other_bundle_topic(bundle: NamespaceBundle) -> str:
    return next(f"t-{i}" for i in range(1000) if BUNDLES.find(f"persistent://{NS}/t-{i}") != bundle)


async def test_a_release_after_a_lost_session_leaves_the_new_owners_node(tree: str) -> None:
    """An unload whose broker lost its session while the topics closed must not delete the node another broker
    created meanwhile (Pulsar's lock release deletes its own version only): that broker would go on serving the
    bundle while a third one takes it."""
    a = await Broker(tree, 1).start()
    b = await Broker(tree, 2).start()
    try:
        bundle = BUNDLES.find(topic().full)
        await a.ownership.acquire(bundle)
        a.host.topics.add(topic().full)
        closing, resume = asyncio.Event(), asyncio.Event()
        unload_topics = a.host.unload_topics

        async def slow_unload(names: list[str]) -> int:
            closing.set()
            await resume.wait()
            return await unload_topics(names)

        a.host.unload_topics = slow_unload  # type: ignore[method-assign]
        unloading = asyncio.ensure_future(a.ownership.unload_bundle(bundle))
        await asyncio.wait_for(closing.wait(), 10)
        a.store.expire_session()  # a's node goes; b takes the bundle
        await eventually(lambda: bundle not in a.ownership._owned, "a to drop the bundle")
        assert await b.ownership.acquire(bundle) == b.ownership.mine and b.ownership.is_owned(bundle)
        resume.set()
        await asyncio.wait_for(unloading, 10)
        node = await b.store.get(ownership_path(bundle))
        assert node is not None and node.stat.created_by_self, "a's unload deleted b's ownership node"
    finally:
        await b.stop()
        await a.stop()


async def _client_lookup(brokers: list[Broker], first: Broker, name: TopicName) -> Broker:
    """What a client does: look up at ``first``, follow Redirects, connect to the broker answered and load the
    topic there; ServiceNotReady anywhere: start again (the client retries)."""
    by_url = {b.urls.pulsar_url: b for b in brokers}
    async with asyncio.timeout(10):
        while True:
            broker, authoritative = first, False
            try:
                for _ in range(5):
                    answer = await broker.ownership.lookup(name, authoritative, None)
                    broker, authoritative = by_url[answer.urls.url], answer.authoritative
                    if not answer.redirect:
                        await broker.ownership.wait_serving(name)
                        return broker
            except ServiceNotReadyError:
                pass
            await asyncio.sleep(0.01)


async def test_a_session_taken_as_lost_then_kept_does_not_leave_clients_looping(tree: str) -> None:
    """Cut off from ZooKeeper past 5/6 of the timeout the broker takes its session as lost and stops serving; if it
    then reconnects within the timeout, ZooKeeper kept the session and its ownership nodes. Those nodes must not
    keep sending clients to a broker that refuses them (a lookup loop for as long as the broker lives)."""
    a = await Broker(tree, 1).start()
    b = await Broker(tree, 2).start()
    try:
        bundle = BUNDLES.find(topic().full)
        await a.ownership.acquire(bundle)
        a.store.post_session_event(SessionEvent.SESSION_LOST)
        a.store.post_session_event(SessionEvent.SESSION_REESTABLISHED)
        await eventually(lambda: not a.ownership.owned_bundles(), "a to stop serving")
        for first in (b, a):
            owner = await _client_lookup([a, b], first, topic())
            owner.ownership.check_serving(topic())
    finally:
        await b.stop()
        await a.stop()


async def test_a_stopping_broker_leaves_the_registry_before_releasing_its_bundles(tree: str) -> None:
    """Pulsar's unloadNamespaceBundlesGracefully first disables the broker in the load manager (its registration
    goes), then unloads: no lookup sends clients to the stopping broker (as leader, or as the least loaded) while
    its bundles are released."""
    a = await Broker(tree, 1).start()  # the leader
    b = await Broker(tree, 2).start()
    try:
        bundle = BUNDLES.find(topic().full)
        await a.ownership.acquire(bundle)
        a.host.topics.add(topic().full)
        closing, resume = asyncio.Event(), asyncio.Event()

        async def slow_unload(names: list[str]) -> int:
            closing.set()
            await resume.wait()
            return len(names)

        a.host.unload_topics = slow_unload  # type: ignore[method-assign]
        stopping = asyncio.ensure_future(a.ownership.close())
        await asyncio.wait_for(closing.wait(), 10)
        assert await b.store.get("/loadbalance/brokers/127.0.0.1:8080") is None
        other = TopicName.parse(f"persistent://{NS}/{_other_bundle_topic(bundle)}")
        answer = await b.ownership.lookup(other, False, None)
        assert answer.urls.url == b.urls.pulsar_url, "a lookup sent the client to the stopping broker"
        resume.set()
        await asyncio.wait_for(stopping, 10)
    finally:
        await b.stop()
        await a.stop()


async def test_a_bundle_taken_while_the_broker_stops_is_released_too(tree: str) -> None:
    """An acquisition under way when the graceful stop begins lands afterwards: that bundle must be released with
    the others (not left owned, its node sending clients to a broker that is going away)."""
    a = await Broker(tree, 1).start()
    try:
        created, release = asyncio.Event(), asyncio.Event()
        put = a.store.put

        async def slow_put(*args: Any, **kwargs: Any) -> Any:  # (the node is created; the answer is slow to come)
            stat = await put(*args, **kwargs)
            created.set()
            await release.wait()
            return stat

        bundle = BUNDLES.find(topic().full)
        a.store.put = slow_put  # type: ignore[method-assign]
        acquiring = asyncio.ensure_future(a.ownership.acquire(bundle))
        await asyncio.wait_for(created.wait(), 10)
        unregister = a.registry.unregister

        async def then_answer() -> None:  # (the put's answer comes once the stop has begun)
            await unregister()
            asyncio.get_running_loop().call_soon(release.set)

        a.registry.unregister = then_answer  # type: ignore[method-assign]
        await asyncio.wait_for(a.ownership.close(), 10)
        await asyncio.gather(acquiring, return_exceptions=True)
        assert not a.ownership.owned_bundles()
        assert await a.store.get(ownership_path(bundle)) is None, "the bundle stayed owned after the stop"
    finally:
        await a.stop()


async def test_a_bundle_is_not_taken_again_while_its_node_of_a_lost_session_is_released(tree: str) -> None:
    """After a session taken as lost, the release of the nodes it kept runs in the background: a lookup in the
    meantime must not take such a bundle afresh (the release would then delete the new node of this very session,
    leaving the broker serving a bundle nobody holds in ZooKeeper)."""
    a = await Broker(tree, 1).start()
    release, reading = asyncio.Event(), asyncio.Event()
    try:
        bundle = BUNDLES.find(topic().full)
        await a.ownership.acquire(bundle)
        get = a.store.get

        async def slow_get(path: str, *, watch_missing: bool = True) -> Any:
            got = await get(path, watch_missing=watch_missing)
            if path == ownership_path(bundle) and not release.is_set():
                reading.set()
                await release.wait()
            return got

        a.store.get = slow_get  # type: ignore[method-assign]
        a.store.expire_session()  # the nodes go; a new session
        await eventually(lambda: not a.ownership.owned_bundles(), "a to stop serving")
        await asyncio.wait_for(reading.wait(), 10)  # the release has read the (absent) node, not deleted yet
        with pytest.raises(ServiceNotReadyError):
            await a.ownership.acquire(bundle)
        release.set()
        a.store.get = get  # type: ignore[method-assign]

        async def taken() -> None:
            while True:
                try:
                    await a.ownership.acquire(bundle)
                    return
                except ServiceNotReadyError:
                    await asyncio.sleep(0.01)

        await asyncio.wait_for(taken(), 10)
        await asyncio.sleep(0)
        node = await a.store.get(ownership_path(bundle))
        assert a.ownership.is_owned(bundle) and node is not None and node.stat.created_by_self
    finally:
        release.set()
        await a.stop()


async def test_a_node_created_by_a_put_that_timed_out_is_taken_back(tree: str) -> None:
    """A write that timed out may have been applied: the node is this session's. The next acquisition owns it (as
    Pulsar's lock finds its own value), instead of answering for ever that the bundle is someone's."""
    a = await Broker(tree, 1).start()
    try:
        bundle = BUNDLES.find(topic().full)
        put = a.store.put

        async def applied_then_timed_out(*args: Any, **kwargs: Any) -> Any:
            await put(*args, **kwargs)
            raise MetadataStoreError("operation timed out")

        a.store.put = applied_then_timed_out  # type: ignore[method-assign]
        with pytest.raises(MetadataStoreError):
            await a.ownership.acquire(bundle)
        a.store.put = put  # type: ignore[method-assign]
        answer = await a.ownership.lookup(topic(), False, None)
        assert not answer.redirect and a.ownership.is_owned(bundle)
        a.ownership.check_serving(topic())
    finally:
        await a.stop()


async def test_a_report_written_while_the_broker_leaves_the_registry_does_not_register_it_again(tree: str) -> None:
    a = await Broker(tree, 1).start()
    try:
        blocked, go, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()
        put = a.store.put

        async def slow_put(path: str, *args: Any, **kwargs: Any) -> Any:
            if path != a.registry.path:
                return await put(path, *args, **kwargs)
            try:
                blocked.set()
                await go.wait()
                return await put(path, *args, **kwargs)
            finally:
                finished.set()

        a.store.put = slow_put  # type: ignore[method-assign]
        await a.ownership.acquire(BUNDLES.find(topic().full))  # (the report changes: a rewrite starts)
        await asyncio.wait_for(blocked.wait(), 10)
        await a.registry.unregister()
        go.set()
        await asyncio.wait_for(finished.wait(), 10)
        assert await a.store.get(a.registry.path) is None, "the registration came back after the broker left"
    finally:
        await a.stop()


async def test_a_split_whose_child_another_broker_holds_is_refused(tree: str) -> None:
    """The owner of the parent keeps the parent's topics loaded through a split (they are the children's now): a
    child another broker holds would have its topics served by both. The split is refused instead, nothing
    written, the parent still owned."""
    a = await Broker(tree, 1).start()
    b = await Broker(tree, 2).start()
    try:
        parent = BUNDLES.find(topic().full)
        await a.ownership.acquire(parent)
        a.host.topics.add(topic().full)
        half = (parent.lower + parent.upper) // 2
        children = [NamespaceBundle(NS, parent.lower, half), NamespaceBundle(NS, half, parent.upper)]
        b.bundles = BUNDLES.split(parent, [half])[0]  # (a node left over, e.g. by a broker with other boundaries)
        await b.ownership.acquire(children[1])
        written: list[bool] = []

        async def write_bundles() -> None:
            written.append(True)

        with pytest.raises(ServiceNotReadyError):
            await a.ownership.bundle_split(parent, children, write_bundles)
        assert not written and a.ownership.is_owned(parent) and not a.ownership.is_owned(children[0])
        assert await a.store.get(ownership_path(children[0])) is None
        assert a.host.topics == {topic().full}
    finally:
        await b.stop()
        await a.stop()


async def test_a_broker_that_has_not_heard_of_a_split_does_not_take_the_parent(
        tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other brokers learn a split's new bundles when their metadata cache re-reads the namespace's
    LocalPolicies on its notification. Until then a lookup there maps the topic to the parent bundle, whose node
    the split deleted: taking it would give the range two owners (the parent's, the child's), each serving its
    topics. The broker finds out from the store that the parent is gone, takes nothing, and answers for the child."""
    meta_a, meta_b = BrokerMetadata("standalone"), BrokerMetadata("standalone")
    a = await Broker(tree, 1, meta_a).start()
    b = await Broker(tree, 2, meta_b).start()
    try:
        name = topic()
        parent = a.ownership.bundle_of(name)
        await a.ownership.acquire(parent)
        a.host.topics.add(name.full)
        await meta_b.cache.settled()
        monkeypatch.setattr(meta_b.cache, "_start_refresher", lambda: None)  # (b's notifications wait)
        point = parent.lower + (parent.upper - parent.lower) // 2
        _, children = meta_a.namespace_bundles(NS).split(parent, [point])
        await a.ownership.bundle_split(parent, children, lambda: meta_a.split_bundle(NS, parent, [point]))
        child = next(c for c in children if c.includes(name.full))
        assert b.ownership.bundle_of(name) == parent  # (b has not heard of the split)

        # As a leader's Redirect sends it: authoritative, b takes the bundle if nobody holds it.
        answer = await b.ownership.lookup(name, True, None)
        assert (answer.redirect, answer.urls.url) == (False, a.urls.pulsar_url), "two owners of the range"
        assert b.ownership.owned_bundles() == [] and b.host.acquired == []
        assert await b.store.get(ownership_path(parent)) is None
        assert b.ownership.bundle_of(name) == child  # (the store's bundles, read for the check, are kept)

        monkeypatch.undo()
        meta_b.cache._start_refresher()  # the notifications arrive: nothing changes
        await meta_b.cache.settled()
        for broker in (a, b):
            again = await broker.ownership.lookup(name, False, None)
            assert (again.redirect, again.urls.url) == (False, a.urls.pulsar_url)
        assert a.ownership.is_owned(child) and not b.ownership.owned_bundles()
    finally:
        await b.stop()
        await a.stop()


async def test_only_taking_a_bundle_reads_the_stored_bundles(tree: str) -> None:
    """The check reads the store when a bundle is taken, not when an owned one is looked up. A store that fails the
    check leaves nothing taken: the node is released and the lookup is a MetadataError (clients retry)."""
    a = await Broker(tree, 1).start()
    try:
        reads: list[str] = []
        failing = False

        async def stored_bundles(namespace: str) -> NamespaceBundles:
            reads.append(namespace)
            if failing:
                raise MetadataStoreError("operation timed out")
            return BUNDLES

        a.ownership._stored_bundles_of = stored_bundles
        for _ in range(3):
            answer = await a.ownership.lookup(topic(), True, None)
            assert answer.urls.url == a.urls.pulsar_url
        assert reads == [NS]
        failing = True
        other = TopicName.parse(f"persistent://{NS}/{_other_bundle_topic(BUNDLES.find(topic().full))}")
        with pytest.raises(MetadataError):
            await a.ownership.lookup(other, True, None)
        bundle = BUNDLES.find(other.full)
        assert not a.ownership.is_owned(bundle) and await a.store.get(ownership_path(bundle)) is None
    finally:
        await a.stop()
