"""Namespace bundles over the admin REST API: GET bundles, split (each algorithm, Pulsar's
refusals), unload, the Policies view, the automatic split, the topics' hash positions in a bundle; and the official
client producing and consuming across a split and an unload of its topic's bundle."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pulsar
import pytest

from broker.admin.bundles import topic_hash_positions
from broker.cluster.bundles import FULL_UPPER, NamespaceBundles, hash_topic
from broker.embedded import BrokerThread
from broker.topic_name import TopicName
from tests.admin.conftest import Admin
from tests.waiting import wait_for

NS = "/admin/v2/namespaces"


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """This module's broker, without automatic split (its own test has its own broker)."""
    with BrokerThread(data_dir=tmp_path_factory.mktemp("bundles"), loadBalancerAutoBundleSplitEnabled=False) as b:
        yield b


def boundaries(admin: Admin, ns: str) -> list[str]:
    data = admin.ok("GET", f"{NS}/{ns}/bundles")
    assert data["numBundles"] == len(data["boundaries"]) - 1
    return list(data["boundaries"])


def test_bundles_of_new_namespaces(admin: Admin) -> None:
    ns = admin.new_namespace()
    assert boundaries(admin, ns) == ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
    eight = f"public/eight-{ns[-8:]}"
    admin.ok("PUT", f"{NS}/{eight}", {"bundles": {"numBundles": 8}})
    assert len(boundaries(admin, eight)) == 9
    custom = f"public/custom-{ns[-8:]}"
    admin.ok("PUT", f"{NS}/{custom}", {"bundles": {"numBundles": 2, "boundaries": ["0x00000000", "0x10000000",
                                                                                   "0xffffffff"]}})
    assert boundaries(admin, custom) == ["0x00000000", "0x10000000", "0xffffffff"]
    # the Policies view shows the bundles in force
    assert admin.ok("GET", f"{NS}/{custom}")["bundles"]["boundaries"] == boundaries(admin, custom)
    reply = admin.put(f"{NS}/public/bad-{ns[-8:]}", {"bundles": {"numBundles": 2, "boundaries": ["0x00000000",
                                                                                              "0x10000000"]}})
    assert reply.status == 400 and "whole hash range" in reply.reason


def test_split_algorithms(admin: Admin) -> None:
    ns = admin.new_namespace()
    admin.ok("PUT", f"{NS}/{ns}/0x00000000_0x40000000/split")  # range_equally_divide, the default
    assert boundaries(admin, ns)[:3] == ["0x00000000", "0x20000000", "0x40000000"]
    assert admin.ok("GET", f"{NS}/{ns}")["bundles"]["numBundles"] == 5  # the Policies view follows
    admin.ok("PUT", f"{NS}/{ns}/0x80000000_0xc0000000/split?splitAlgorithmName=specified_positions_divide",
             [0x90000000, "0xa0000000", 0x10])  # (the one outside the bundle is ignored, as in Pulsar)
    # ... but with fewer than 2 topics in the bundle nothing is split (Pulsar's algorithm)
    assert "0x90000000" not in boundaries(admin, ns)
    for i in range(6):
        admin.ok("PUT", f"/admin/v2/persistent/{ns}/t{i}")  # (created topics: the algorithms count them)
    topics = [f"persistent://{ns}/t{i}" for i in range(6)]
    bundles = NamespaceBundles.from_bundles_data(ns, admin.ok("GET", f"{NS}/{ns}/bundles"))
    crowded = max(bundles.bundles, key=lambda b: sum(b.includes(t) for t in topics))
    assert sum(crowded.includes(t) for t in topics) >= 2  # (6 topics in 5 bundles)
    admin.ok("PUT", f"{NS}/{ns}/{crowded.range_name}/split?splitAlgorithmName=topic_count_equally_divide")
    after = NamespaceBundles.from_bundles_data(ns, admin.ok("GET", f"{NS}/{ns}/bundles"))
    halves = [b for b in after.bundles if crowded.lower <= b.lower < crowded.upper]
    assert len(halves) == 2
    counts = [sum(b.includes(t) for t in topics) for b in halves]
    assert abs(counts[0] - counts[1]) <= 1 and min(counts) >= 1
    # the topic list of one bundle (Pulsar's getList ?bundle=)
    listed = admin.ok("GET", f"/admin/v2/persistent/{ns}?bundle={halves[0].range_name}")
    assert listed == sorted(t for t in topics if halves[0].includes(t)) and listed
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}?bundle=0x00000000_0x00000001") == []
    # flow_or_qps_equally_divide: no traffic on these topics, so no boundary: 204, nothing split
    unchanged = boundaries(admin, ns)
    admin.ok("PUT", f"{NS}/{ns}/{halves[0].range_name}/split?splitAlgorithmName=flow_or_qps_equally_divide")
    assert boundaries(admin, ns) == unchanged
    # LARGEST: the bundle with the most topics
    before = len(boundaries(admin, ns))
    admin.ok("PUT", f"{NS}/{ns}/LARGEST/split")
    assert len(boundaries(admin, ns)) == before + 1


def test_split_refusals_as_pulsars(admin: Admin) -> None:
    ns = admin.new_namespace()
    first = "0x00000000_0x40000000"
    cases = [
        (f"{NS}/{ns}/{first}/split?splitAlgorithmName=no_such_algorithm", None, 412, "Unsupported"),
        (f"{NS}/{ns}/{first}/split?splitAlgorithmName=specified_positions_divide", None, 412, "must not be empty"),
        (f"{NS}/{ns}/0x00000000_0x20000000/split", None, 412,
         f"Invalid upper boundary for bundle {ns}/0x00000000_0x20000000. Expected upper boundary of {ns}/{first}"),
        (f"{NS}/{ns}/0x10000000_0x40000000/split", None, 412, "Cannot find bundle"),
        (f"{NS}/{ns}/0xzz_0x40000000/split", None, 412, "Invalid bundle range"),
        (f"{NS}/{ns}/{first}/split?unload=maybe", None, 400, "unload"),
        (f"{NS}/{ns}/{first}/split", {"not": "a list"}, 400, "array"),
        (f"{NS}/{ns}/{first}/split", ["0x1ffffffff"], 400, "out of the hash range"),
        (f"{NS}/public/nowhere-{ns[-8:]}/{first}/split", None, 404, "does not exist"),
    ]
    for path, body, status, words in cases:
        reply = admin.put(path, body)
        assert reply.status == status and words in reply.reason, (path, reply.status, reply.body)
    assert boundaries(admin, ns) == ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
    # a bundle of one hash cannot be split further
    tiny = f"public/tiny-{ns[-8:]}"
    admin.ok("PUT", f"{NS}/{tiny}", {"bundles": {"numBundles": 2, "boundaries": ["0x00000000", "0x00000001",
                                                                                 "0xffffffff"]}})
    reply = admin.put(f"{NS}/{tiny}/0x00000000_0x00000001/split")
    assert reply.status == 412 and "can't be split further" in reply.reason


def test_client_carries_on_across_split_and_unload(admin: Admin, client: pulsar.Client,
                                                   pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/flow"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    server = pulsar_broker.broker.server
    assert server is not None
    service = server.service
    sent = 0
    seen: set[bytes] = set()

    def loaded() -> object:
        found = service.get_topic_if_loaded(TopicName.parse(topic))
        assert found is not None
        return found

    def exchange(n: int) -> None:
        """Send n more; receive until every message sent so far has come. At least once: an ack the
        client had not sent yet when the topic was unloaded brings that message again (as in Pulsar)."""
        nonlocal sent
        for _ in range(n):
            producer.send(f"m{sent}".encode())
            sent += 1
        expected = {f"m{i}".encode() for i in range(sent)}
        while not expected <= seen:
            msg = consumer.receive(10_000)
            assert msg.data() in expected
            seen.add(msg.data())
            consumer.acknowledge(msg)

    exchange(5)
    first = loaded()
    bundle = NamespaceBundles.from_bundles_data(ns, admin.ok("GET", f"{NS}/{ns}/bundles")).find(topic)
    admin.ok("PUT", f"{NS}/{ns}/{bundle.range_name}/split")
    child = NamespaceBundles.from_bundles_data(ns, admin.ok("GET", f"{NS}/{ns}/bundles")).find(topic)
    assert child != bundle and bundle.lower <= child.lower < child.upper <= bundle.upper
    exchange(5)
    assert loaded() is first  # a split keeps the topic served: the same topic, not reloaded
    admin.ok("PUT", f"{NS}/{ns}/{child.range_name}/unload")
    assert service.get_topic_if_loaded(TopicName.parse(topic)) is not first  # closed
    exchange(5)  # the clients reconnected by themselves, and the topic was loaded again
    second = loaded()
    assert second is not first
    admin.ok("PUT", f"{NS}/{ns}/{child.range_name}/split?unload=true")  # split, then unload the children
    exchange(5)
    third = loaded()
    assert third is not second
    admin.ok("PUT", f"{NS}/{ns}/unload")  # every bundle of the namespace
    exchange(5)
    assert loaded() is not third
    assert sent == len(seen) == 25
    producer.close()
    consumer.close()


def test_automatic_split_past_max_topics(tmp_path_factory: pytest.TempPathFactory) -> None:
    # A split round every 0.6 s, past 3 topics per bundle, up to 6 bundles per namespace; the split
    # bundles stay loaded (unloaded, their topics would wait for clients to load them again, and only
    # loaded topics count, as in Pulsar).
    with BrokerThread(data_dir=tmp_path_factory.mktemp("auto-split"), loadBalancerSplitIntervalMinutes=0.01,
                      loadBalancerNamespaceBundleMaxTopics=3, loadBalancerNamespaceMaximumBundles=6,
                      loadBalancerAutoUnloadSplitBundlesEnabled=False) as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        start = NamespaceBundles.from_bundles_data(ns, admin.ok("GET", f"{NS}/{ns}/bundles"))
        target = start.bundles[0]
        # 12 loaded topics in one bundle: past loadBalancerNamespaceBundleMaxTopics=3
        names = [n for n in (f"{ns}/hot-{i}" for i in range(400)) if target.includes(f"persistent://{n}")][:12]
        assert len(names) == 12
        for name in names:
            admin.ok("PUT", f"/admin/v2/persistent/{name}")
            admin.ok("GET", f"/admin/v2/persistent/{name}/stats")  # (loads it)
        # split in halves (range_equally_divide) until each bundle has at most 3 topics or the
        # namespace has 6 bundles; the other bundles, empty, are never split
        wait_for(lambda: len(boundaries(admin, ns)) - 1 == 6, 30, "automatic splits up to 6 bundles")
        final = NamespaceBundles.from_bundles_data(ns, admin.ok("GET", f"{NS}/{ns}/bundles"))
        assert final.bundles[-3:] == start.bundles[-3:]
        assert all(target.lower <= b.lower < target.upper for b in final.bundles[:-3])
        assert len(final) == 6  # (no split past the maximum)


def test_a_topics_bundle_range_as_pulsars_lookup_names_it(admin: Admin) -> None:
    """``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}/bundle`` (pulsar-admin topics bundle-range): the range as
    the bare text of an application/json answer, as Pulsar writes it; after a split, the child's. Not a lookup of a
    topic named ``t/bundle``."""
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/t"
    expected = NamespaceBundles.equal(ns, len(boundaries(admin, ns)) - 1).find(topic)
    reply = admin.get(f"/lookup/v2/topic/persistent/{ns}/t/bundle")
    assert (reply.status, reply.body.decode()) == (200, expected.range_name)
    assert reply.headers["Content-Type"].startswith("application/json")
    admin.ok("PUT", f"{NS}/{ns}/{expected.range_name}/split")
    child = admin.get(f"/lookup/v2/topic/persistent/{ns}/t/bundle").body.decode()
    assert child != expected.range_name and child.split("_")[0] >= expected.range_name.split("_")[0]
    assert admin.get(f"/lookup/v2/topic/persistent/{ns}-nosuch/t/bundle").status == 404


def test_topic_hash_positions_of_a_bundle(admin: Admin, client: pulsar.Client) -> None:
    """``GET .../{bundle}/topicHashPositions`` (pulsar-admin namespaces get-topic-positions), as Pulsar 4.0.7's
    NamespacesBase.internalGetTopicHashPositionsAsync: each topic of the bundle with its bundle hash (CRC-32 of its full
    name), or those asked: a partitioned topic by its partitions in the bundle, a partition keyed as asked; topics
    elsewhere or of nothing left out."""
    ns = admin.new_namespace()
    for name in ("a", "b", "c", "d"):
        admin.ok("PUT", f"/admin/v2/persistent/{ns}/{name}")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/part/partitions", 3)
    live = f"non-persistent://{ns}/live"
    producer = client.create_producer(live)  # (a live non-persistent topic is one of the bundle's too)
    bundles = NamespaceBundles.from_bundles_data(ns, admin.ok("GET", f"{NS}/{ns}/bundles"))
    topics = [f"persistent://{ns}/{n}" for n in ("a", "b", "c", "d")] + [
        f"persistent://{ns}/part-partition-{i}" for i in range(3)]
    seen: dict[str, int] = {}
    for bundle in bundles.bundles:
        answer = admin.ok("GET", f"{NS}/{ns}/{bundle.range_name}/topicHashPositions")
        assert answer["namespace"] == ns and answer["bundle"] == bundle.range_name
        positions = answer["topicHashPositions"]
        assert positions == {t: hash_topic(t) for t in [*topics, live] if bundle.includes(t)}
        assert all(bundle.lower <= h < bundle.upper or h == bundle.upper == FULL_UPPER for h in positions.values())
        seen.update(positions)
    assert set(seen) == {*topics, live}
    producer.close()
    # asked: a partitioned topic stands for its partitions there; a partition keyed as asked; nothing elsewhere
    part0 = f"persistent://{ns}/part-partition-0"
    home = bundles.find(part0)
    query = "&".join(f"topics={quote(t, safe='')}" for t in (
        f"persistent://{ns}/part", f"{ns}/part-partition-0", f"persistent://{ns}/nosuch", f"persistent://{ns}/a"))
    asked = admin.ok("GET", f"{NS}/{ns}/{home.range_name}/topicHashPositions?{query}")["topicHashPositions"]
    expected = {t: hash_topic(t) for t in topics if home.includes(t) and "part" in t}
    expected[f"{ns}/part-partition-0"] = hash_topic(part0)  # (the hash of its full name: see topic_hash_positions)
    if home.includes(f"persistent://{ns}/a"):
        expected[f"persistent://{ns}/a"] = hash_topic(f"persistent://{ns}/a")
    assert asked == expected
    # refusals, in Pulsar's order and words: the namespace's name, the namespace, the range; a bad topic name
    first = bundles.bundles[0].range_name
    cases = [
        (f"{NS}/public/bad%20name/{first}/topicHashPositions", 412, "Namespace name is not valid"),
        (f"{NS}/public/nowhere-{ns[-8:]}/{first}/topicHashPositions", 404, "Namespace does not exist"),
        (f"{NS}/{ns}/notabundle/topicHashPositions", 412, "Invalid bundle range: notabundle"),
        (f"{NS}/{ns}/0x00000000_0x30000000/topicHashPositions", 412,
         f"Invalid upper boundary for bundle {ns}/0x00000000_0x30000000. Expected upper boundary of {ns}/{first}"),
        (f"{NS}/{ns}/0x10000000_0x40000000/topicHashPositions", 412,
         f"Cannot find bundle {ns}/0x10000000_0x40000000 in the bundles list"),
        (f"{NS}/{ns}/0xzz_0x40000000/topicHashPositions", 412, "Invalid bundle range"),
        (f"{NS}/{ns}/{first}/topicHashPositions?topics=persistent://bad", 412, "Invalid topic name"),
        (f"{NS}/{ns}/{first}/topicHashPositions?topics=", 412, "Invalid topic name"),
    ]
    for path, status, words in cases:
        reply = admin.get(path)
        assert reply.status == status and reply.reason.startswith(words), (path, reply.status, reply.body)


def test_topic_hash_positions_as_pulsar_reads_the_names_asked() -> None:
    """The names as Pulsar reads them (TopicName.get): short forms; a name that is no partition stands for itself
    and each of its partitions."""
    in_bundle = ["persistent://public/default/x", "persistent://public/default/p-partition-1",
                 "persistent://public/default/p-partition-3", "persistent://t/n/p-partition-1"]
    every = {t: hash_topic(t) for t in in_bundle}
    assert topic_hash_positions(in_bundle, []) == every
    assert topic_hash_positions(in_bundle, ["x", "p"]) == {t: every[t] for t in in_bundle[:3]}
    assert topic_hash_positions(in_bundle, ["p-partition-3", "p-partition-2", "t/n/p-partition-1"]) == {
        "p-partition-3": every[in_bundle[2]], "t/n/p-partition-1": every[in_bundle[3]]}
    assert topic_hash_positions(in_bundle, ["non-persistent://public/default/x"]) == {}
