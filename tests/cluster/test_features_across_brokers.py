"""Issue 17, item 7: the broker's features keep working when the topics live on several brokers (real broker
processes on one ZooKeeper and two bookies, the official client, the admin REST API).

- geo-replication: each replicator runs on its topic's owner only, and moves with the topic (a bundle unload, a
  graceful stop of the owner); the remote cluster gets every acknowledged message once, in order; a replicated
  subscription keeps moving on the remote after its topic moves;
- compaction asked of a non-owner runs on the owner (307); after the bundle moves, a compacted reader on the new
  owner sees the compacted view, and compaction runs there;
- namespace and topic policies (and dynamic settings) set through one broker are enforced at once on a topic another
  broker serves;
- token authentication and authorization on both brokers: lookups and admin 307s with a token, refusals alike;
- each broker's /metrics shows the topics it owns only; after a move the series leaves the old owner.

Deduplication across a move (kill -9, namespace unload three times, SIGTERM) is in test_failover.py."""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import jwt
import pulsar
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from cluster.local import BrokerInfo, LocalCluster, kill_broker, start_broker, stop_process
from tests.bookkeeper.test_broker_faults import Checker, Producing, acked_count, drain, open_producer, wait_acked
from tests.cluster import held_notifications
from tests.cluster.conftest import Brokers, http_json, log_of
from tests.waiting import wait_for

TIMEOUT_MS = 30_000
WAIT_S = 60.0


# ---- helpers -------------------------------------------------------------------------------------------------------

def service_urls(*brokers: BrokerInfo) -> str:
    return "pulsar://" + ",".join(b.service_url.removeprefix("pulsar://") for b in brokers)


def topics_in_distinct_bundles(namespace: str, prefix: str, count: int) -> list[str]:
    """``count`` topic names of ``namespace`` whose hashes fall in different quarters of the 32-bit ring (so in
    different bundles of the default four; placement gives each new bundle to the broker with the fewest)."""
    tag = uuid.uuid4().hex[:6]
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        name = f"persistent://{namespace}/{prefix}-{tag}-{i}"
        found.setdefault(zlib.crc32(name.encode()) >> 30, name)
        i += 1
    return list(found.values())


def get_following(url: str, headers: dict[str, str]) -> requests.Response:
    """GET with Pulsar's admin client's manners: a 307 is followed with the same credentials."""
    first = requests.get(url, headers=headers, allow_redirects=False, timeout=30)
    if first.status_code != 307:
        return first
    return requests.get(first.headers["Location"], headers=headers, allow_redirects=False, timeout=30)


def owner_of(brokers: list[BrokerInfo], topic: str, headers: dict[str, str] | None = None) -> BrokerInfo:
    local = topic.removeprefix("persistent://")
    answer = get_following(f"{brokers[0].web_url}/lookup/v2/topic/persistent/{local}", headers or {})
    answer.raise_for_status()
    url = answer.json()["brokerUrl"]
    return next(b for b in brokers if b.service_url == url)


def bundle_of(group: Brokers, topic: str, namespace: str) -> str:
    """The range of the owned bundle that holds ``topic``."""
    h = zlib.crc32(topic.encode())
    with group.zk() as zk:
        for name in group.owners(zk, namespace):
            lower, upper = (int(x, 16) for x in name.split("_"))
            if lower <= h < upper or (upper == 0xFFFFFFFF and h == upper):
                return name
    raise AssertionError(f"no owned bundle of {namespace} holds {topic}")


def move(group: Brokers, topic: str, namespace: str, to: BrokerInfo, headers: dict[str, str] | None = None) -> None:
    """Unload the topic's bundle (asked of ``to``: passed on to the owner), then make ``to`` take it (an
    authoritative lookup there, as a redirected client's). No client of the topic may be connected meanwhile."""
    bundle = bundle_of(group, topic, namespace)
    unloaded = requests.put(f"{to.web_url}/admin/v2/namespaces/{namespace}/{bundle}/unload", headers=headers,
                            allow_redirects=False, timeout=60)
    if unloaded.status_code == 307:  # (followed by hand: requests drops the credentials on a change of port)
        unloaded = requests.put(unloaded.headers["Location"], headers=headers, timeout=60)
    assert unloaded.status_code == 204, unloaded.text
    local = topic.removeprefix("persistent://")
    taken = requests.get(f"{to.web_url}/lookup/v2/topic/persistent/{local}?authoritative=true", headers=headers,
                         timeout=30)
    assert taken.status_code == 200 and taken.json()["brokerUrl"] == to.service_url, taken.text


def scrape(broker: BrokerInfo, headers: dict[str, str] | None = None) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A broker's /metrics: family -> [(labels, value)] of its samples."""
    answer = requests.get(f"{broker.web_url}/metrics", headers=headers, timeout=30)
    answer.raise_for_status()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def topic_series(metrics: dict[str, list[tuple[dict[str, str], float]]], topic: str) -> set[str]:
    return {name for name, samples in metrics.items() for labels, _ in samples if labels.get("topic") == topic}


def topics_count(metrics: dict[str, list[tuple[dict[str, str], float]]], namespace: str) -> float:
    return sum(v for labels, v in metrics.get("pulsar_topics_count", []) if labels.get("namespace") == namespace)


def other_than(pair: tuple[BrokerInfo, BrokerInfo], broker: BrokerInfo) -> BrokerInfo:
    return pair[1] if broker is pair[0] else pair[0]


# ---- geo-replication -----------------------------------------------------------------------------------------------

@pytest.fixture
def remote(zk_bookies: LocalCluster, brokers: Brokers) -> Iterator[BrokerInfo]:
    """Cluster "b": one standalone broker (its own metadata and storage in its data directory)."""
    info = start_broker(zk_bookies, {"clusterName": "b", "brokerDeleteInactiveTopicsEnabled": "false"},
                        name=f"{brokers.chroot[1:]}-remote-b")
    try:
        yield info
    finally:
        if info in zk_bookies.brokers:
            kill_broker(zk_bookies, info)


def geo_namespace(a: BrokerInfo, remote: BrokerInfo, b_data: dict[str, str]) -> None:
    """geo/ns on cluster a (set up through broker ``a``), replicated to b, and on b (``remote``): cluster b's data on
    a (``b_data``), cluster a's (none) on b, and the tenant geo on both."""
    admin_a, admin_b = f"{a.web_url}/admin/v2", f"{remote.web_url}/admin/v2"
    assert requests.put(f"{admin_a}/clusters/b", json=b_data, timeout=30).ok
    assert requests.put(f"{admin_b}/clusters/a", json={}, timeout=30).ok
    for admin in (admin_a, admin_b):
        assert requests.put(f"{admin}/tenants/geo", json={"allowedClusters": ["a", "b"]}, timeout=30).ok
        assert requests.put(f"{admin}/namespaces/geo/ns", timeout=30).ok
    assert requests.post(f"{admin_a}/namespaces/geo/ns/replication", json=["a", "b"], timeout=30).ok


def replicator_producers(remote: BrokerInfo, topic: str) -> list[str]:
    """The replicators publishing to ``topic`` on the remote (producers named pulsar.repl.<cluster>)."""
    local = topic.removeprefix("persistent://")
    stats = http_json(f"{remote.web_url}/admin/v2/persistent/{local}/stats")
    return [p["producerName"] for p in stats["publishers"] if p["producerName"].startswith("pulsar.repl.")]


def one_replicator(remote: BrokerInfo, topic: str) -> bool:
    return replicator_producers(remote, topic) == ["pulsar.repl.a"]


def replicates_here(broker: BrokerInfo, topic: str) -> bool:
    """Whether ``broker`` runs a replicator of ``topic`` (its replication series in the broker's own /metrics)."""
    return any(labels.get("topic") == topic for labels, _ in scrape(broker).get("pulsar_replication_backlog", []))


def test_geo_replication_runs_on_the_owner_and_moves_with_the_topic(brokers: Brokers, remote: BrokerInfo) -> None:
    brokers.settings.update(clusterName="a", brokerDeduplicationEnabled="true",
                            brokerDeleteInactiveTopicsEnabled="false")
    b1, b2 = brokers.start(2)
    pair = (b1, b2)
    geo_namespace(b1, remote, {"serviceUrl": remote.web_url, "brokerServiceUrl": remote.service_url})
    # The remote drops what a replicator sends again after a move (by the original producer and sequence id).
    assert requests.post(f"{remote.web_url}/admin/v2/namespaces/geo/ns/deduplication", json=True, timeout=30).ok

    topics = topics_in_distinct_bundles("geo/ns", "geo", 2)
    checkers = {t: Checker() for t in topics}
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        producers = {t: open_producer(client, t) for t in topics}
        owners = {t: owner_of([b1, b2], t) for t in topics}
        assert set(owners.values()) == {b1, b2}, "the two bundles should be on different brokers"
        with contextlib.ExitStack() as stack:
            for t in topics:
                stack.enter_context(Producing(producers[t], checkers[t], "g"))
            for t in topics:
                wait_acked(checkers[t], 100)
            # Each topic's replicator runs on its owner, not on the other broker; one replicator on the remote.
            for t in topics:
                wait_for(partial(replicates_here, owners[t], t), WAIT_S, f"{t}'s replicator on its owner")
                assert not replicates_here(other_than(pair, owners[t]), t)
                assert replicator_producers(remote, t) == ["pulsar.repl.a"]
            # A bundle unloaded during replication: the replicator moves with the topic, wherever it lands.
            first = topics[0]
            unloaded = requests.put(  # (through b1: a 307 to the owner when that is b2)
                f"{b1.web_url}/admin/v2/namespaces/geo/ns/{bundle_of(brokers, first, 'geo/ns')}/unload", timeout=60)
            assert unloaded.status_code == 204, unloaded.text
            for t in topics:
                wait_acked(checkers[t], acked_count(checkers[t]) + 100)
            owners[first] = owner_of([b1, b2], first)
            wait_for(lambda: replicates_here(owners[first], first), WAIT_S, "the replicator on the new owner")
            assert not replicates_here(other_than(pair, owners[first]), first)
            # The owner of the second topic stops gracefully: its bundles, and replicators, go to the other broker.
            leaving = owners[topics[1]]
            survivor = other_than(pair, leaving)
            stop_process(leaving.pid)
            brokers.cluster.brokers.remove(leaving)
            for t in topics:
                wait_acked(checkers[t], acked_count(checkers[t]) + 100)
            for t in topics:
                assert owner_of([survivor], t) is survivor
                wait_for(partial(replicates_here, survivor, t), WAIT_S, f"{t}'s replicator on the survivor")
        for t in topics:
            assert not checkers[t].failed, dict(list(checkers[t].failed.items())[:3])
            wait_for(partial(one_replicator, remote, t), WAIT_S,
                     "one replicator left on the remote")
    finally:
        client.close()
    # The remote has every acknowledged message, once, in the order it was sent.
    for t in topics:
        checker = checkers[t]
        drain(remote.service_url, t, checker)
        assert not checker.lost()
        assert not checker.duplicates(), sorted(checker.duplicates())[:5]
        numbers = [int(m.split("-")[1]) for m in checker.consumed]
        assert numbers == sorted(numbers), "out of order on the remote"


def position_on(broker: BrokerInfo, topic: str, data: bytes) -> tuple[int, int]:
    """Where ``data`` is stored on ``broker`` (a reader from the start: no subscription moves)."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        while True:
            msg = reader.read_next(TIMEOUT_MS)
            if msg.data() == data:
                return msg.message_id().ledger_id(), msg.message_id().entry_id()
    finally:
        client.close()


def mark_delete_on(broker: BrokerInfo, topic: str, subscription: str) -> tuple[int, int]:
    local = topic.removeprefix("persistent://")
    cursor = http_json(f"{broker.web_url}/admin/v2/persistent/{local}/internalStats")["cursors"][subscription]
    ledger, entry = str(cursor["markDeletePosition"]).split(":")
    return int(ledger), int(entry)


def test_replicated_subscription_across_a_move(brokers: Brokers, remote: BrokerInfo) -> None:
    """Both ways between cluster a (two brokers) and b: a replicated subscription acknowledged on a moves on b too,
    before and after the topic's bundle moves to a's other broker (the snapshots are taken by the owner)."""
    brokers.settings.update(clusterName="a", brokerDeleteInactiveTopicsEnabled="false")
    b1, b2 = brokers.start(2)
    pair = (b1, b2)
    for web, peer, cluster in ((b1.web_url, remote, "b"), (remote.web_url, b1, "a")):
        admin = f"{web}/admin/v2"
        linked = requests.put(f"{admin}/clusters/{cluster}", json={"serviceUrl": peer.web_url,
                                                                  "brokerServiceUrl": peer.service_url}, timeout=30)
        assert linked.ok, linked.text
        assert requests.put(f"{admin}/tenants/geo", json={"allowedClusters": ["a", "b"]}, timeout=30).ok
        assert requests.put(f"{admin}/namespaces/geo/ns", timeout=30).ok
        assert requests.post(f"{admin}/namespaces/geo/ns/replication", json=["a", "b"], timeout=30).ok
    topic = f"persistent://geo/ns/rsub-{os.urandom(3).hex()}"
    on_b = pulsar.Client(remote.service_url, operation_timeout_seconds=30)
    on_a = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        on_b.subscribe(topic, "s", replicate_subscription_state_enabled=True).close()
        consumer = on_a.subscribe(topic, "s", replicate_subscription_state_enabled=True)
        producer = on_a.create_producer(topic, batching_enabled=False)

        def round_(first: int) -> None:
            """Publish ten, receive and acknowledge them on a; b's subscription passes the last of them."""
            for i in range(first, first + 10):
                producer.send(b"m%d" % i)
            for i in range(first, first + 10):
                msg = consumer.receive(TIMEOUT_MS)
                assert msg.data() == b"m%d" % i
                consumer.acknowledge(msg)
            last = position_on(remote, topic, b"m%d" % (first + 9))
            wait_for(lambda: mark_delete_on(remote, topic, "s") >= last, WAIT_S,
                     f"b's subscription past m{first + 9}")

        round_(0)
        owner = owner_of([b1, b2], topic)
        consumer.close()
        producer.close()
        move(brokers, topic, "geo/ns", to=other_than(pair, owner))
        consumer = on_a.subscribe(topic, "s", replicate_subscription_state_enabled=True)
        producer = on_a.create_producer(topic, batching_enabled=False)
        round_(10)
    finally:
        on_a.close()
        on_b.close()


# ---- compaction ----------------------------------------------------------------------------------------------------

def compaction_status(broker: BrokerInfo, local: str) -> str:
    answer = requests.get(f"{broker.web_url}/admin/v2/persistent/{local}/compaction", timeout=30)
    assert answer.status_code == 200, (answer.status_code, answer.text, [r.url for r in answer.history])
    return str(answer.json()["status"])


def compacted_view(broker: BrokerInfo, topic: str) -> dict[str, str]:
    """What a compacted reader through ``broker`` reads: key -> value, in order."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        seen: list[tuple[str, str]] = []
        while reader.has_message_available():
            msg = reader.read_next(TIMEOUT_MS)
            seen.append((msg.partition_key(), msg.data().decode()))
        keys = [k for k, _ in seen]
        assert len(keys) == len(set(keys)), f"a key twice in the compacted view: {seen}"
        return dict(seen)
    finally:
        client.close()


def three_values_of_five_keys(broker: BrokerInfo, topic: str) -> None:
    """k0..k4 published three times (v0, v1, v2), through ``broker``: a compaction leaves the five v2s."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for round_ in range(3):
            for k in range(5):
                producer.send(f"v{round_}".encode(), partition_key=f"k{k}")
        producer.close()
    finally:
        client.close()


def test_global_policy_changes_wait_in_zookeeper_for_the_leader(brokers: Brokers, remote: BrokerInfo) -> None:
    """A global topic policy change taken by either broker of a waits in the shared metadata store; only the leader
    sends it (to b, unreachable: it tries again, the other broker never tries); the leader killed (kill -9), the next
    one finds it there and sends it once b's address is mended."""
    brokers.settings.update(clusterName="a", brokerDeleteInactiveTopicsEnabled="false")
    b1, b2 = brokers.start(2)
    geo_namespace(b1, remote, {"serviceUrl": "http://127.0.0.1:1"})  # (b unreachable from a)
    local = f"geo/ns/policies-{os.urandom(3).hex()}"
    assert requests.put(f"{remote.web_url}/admin/v2/persistent/{local}", timeout=30).ok
    leader_url = http_json(f"{b1.web_url}/admin/v2/brokers/leaderBroker")["serviceUrl"]
    leader = next(b for b in (b1, b2) if b.web_url == leader_url)
    follower = other_than((b1, b2), leader)
    topic_url = f"{follower.web_url}/admin/v2/persistent/{local}"
    assert requests.put(topic_url, timeout=30).ok  # (a 307 to the topic's owner, whichever it is, followed)
    assert requests.post(f"{topic_url}/maxProducers?isGlobal=true", json=6, timeout=30).status_code == 204
    tried = "not copied to cluster b yet"
    wait_for(lambda: tried in log_of(leader), WAIT_S, "the leader to try sending to b")
    assert tried not in log_of(follower)
    brokers.kill(leader)
    assert requests.post(f"{follower.web_url}/admin/v2/clusters/b",
                         json={"serviceUrl": remote.web_url, "brokerServiceUrl": remote.service_url}, timeout=30).ok
    remote_policy = f"{remote.web_url}/admin/v2/persistent/{local}/maxProducers?isGlobal=true"
    wait_for(lambda: requests.get(remote_policy, timeout=30).text == "6", WAIT_S,
             "the change to reach b through the next leader")


def test_compaction_runs_on_the_owner_and_its_view_moves(brokers: Brokers) -> None:
    b1, b2 = brokers.start(2)
    pair = (b1, b2)
    topic = f"persistent://public/default/compact-{os.urandom(3).hex()}"
    local = topic.removeprefix("persistent://")
    three_values_of_five_keys(b1, topic)
    owner = owner_of([b1, b2], topic)
    other = other_than(pair, owner)
    # Asked of the other broker: a 307 to the owner, which runs it.
    asked = requests.put(f"{other.web_url}/admin/v2/persistent/{local}/compaction", allow_redirects=False,
                         timeout=30)
    assert asked.status_code == 307 and asked.headers["Location"].startswith(owner.web_url)
    assert requests.put(asked.headers["Location"], timeout=30).status_code == 204
    wait_for(lambda: compaction_status(other, local) == "SUCCESS", WAIT_S, "compaction done (status via a 307)")
    assert compacted_view(other, topic) == {f"k{k}": "v2" for k in range(5)}

    # The bundle moves to the other broker: the compacted view is read there, and compaction runs there.
    move(brokers, topic, "public/default", to=other)
    assert owner_of([b1, b2], topic) is other
    assert compaction_status(owner, local) in ("NOT_RUN", "SUCCESS")  # (readable; kept in memory, as Pulsar's)
    assert compacted_view(owner, topic) == {f"k{k}": "v2" for k in range(5)}
    client = pulsar.Client(other.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"v3", partition_key="k0")
        producer.send(b"v3", partition_key="k9")
        producer.close()
    finally:
        client.close()
    again = requests.put(f"{owner.web_url}/admin/v2/persistent/{local}/compaction", allow_redirects=False,
                         timeout=30)
    assert again.status_code == 307 and again.headers["Location"].startswith(other.web_url)
    assert requests.put(again.headers["Location"], timeout=30).status_code == 204
    wait_for(lambda: compaction_status(other, local) == "SUCCESS", WAIT_S, "compaction on the new owner")
    assert compacted_view(owner, topic) == {**{f"k{k}": "v2" for k in range(5)}, "k0": "v3", "k9": "v3"}


# ---- policies ------------------------------------------------------------------------------------------------------

def test_a_topic_taken_at_once_after_its_compaction_and_termination_keeps_both(brokers: Brokers) -> None:
    """The previous owner stores a compaction's result and a termination, and the bundle moves at once: the new owner
    loads the topic with both, though it has not heard of them (their notifications are held from both brokers:
    it knows them only by reading the store, as when a notification comes late). It loaded the topic without them:
    a compacted reader got every message, and a producer was let in on a terminated topic."""
    # (all of /pulsar-py: the first record of a kind also makes its directories, whose creation is told above them)
    b1, b2 = brokers.start(2, command_prefix=held_notifications.command_prefix(["/pulsar-py"]))
    pair = (b1, b2)
    topic = f"persistent://public/default/taken-{os.urandom(3).hex()}"
    local = topic.removeprefix("persistent://")
    three_values_of_five_keys(b1, topic)
    owner = owner_of([b1, b2], topic)
    other = other_than(pair, owner)
    assert requests.put(f"{owner.web_url}/admin/v2/persistent/{local}/compaction", timeout=30).status_code == 204
    wait_for(lambda: compaction_status(owner, local) == "SUCCESS", WAIT_S, "compaction done")
    assert requests.post(f"{owner.web_url}/admin/v2/persistent/{local}/terminate", timeout=30).status_code == 200
    move(brokers, topic, "public/default", to=other)
    assert compacted_view(other, topic) == {f"k{k}": "v2" for k in range(5)}
    client = pulsar.Client(other.service_url, operation_timeout_seconds=30)
    try:
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
    finally:
        client.close()


def test_the_dynamic_configuration_stored_is_answered_by_any_broker_at_once(brokers: Brokers) -> None:
    """get-all-dynamic-config asked of a broker that has not been told of a change (every notification of
    /admin/configuration held from both): it answers what is stored, and applies it."""
    b1, b2 = brokers.start(2, command_prefix=held_notifications.command_prefix(["/admin/configuration"]))
    config = "/admin/v2/brokers/configuration"
    assert requests.post(f"{b1.web_url}{config}/maxTopicsPerNamespace/321", timeout=30).ok
    assert http_json(f"{b2.web_url}{config}/values") == {"maxTopicsPerNamespace": "321"}
    assert http_json(f"{b2.web_url}{config}/runtime")["maxTopicsPerNamespace"] == "321"
    assert requests.delete(f"{b2.web_url}{config}/maxTopicsPerNamespace", timeout=30).ok
    assert http_json(f"{b1.web_url}{config}/values") == {}
    assert http_json(f"{b1.web_url}{config}/runtime")["maxTopicsPerNamespace"] == "0"


def refused(attempt: object, error: type[Exception]) -> bool:
    try:
        attempt()  # type: ignore[operator]
    except error:
        return True
    return False


def test_policies_set_through_one_broker_hold_on_the_other(brokers: Brokers) -> None:
    b1, b2 = brokers.start(2)
    pair = (b1, b2)
    topic = f"persistent://public/default/policies-{os.urandom(3).hex()}"
    local = topic.removeprefix("persistent://")
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        first = client.create_producer(topic)  # (the topic is loaded before the policies change)
        consumer = client.subscribe(topic, "s1")
        owner = owner_of([b1, b2], topic)
        setter = other_than(pair, owner)
        # A namespace policy through the broker that does not serve the topic.
        ns = f"{setter.web_url}/admin/v2/namespaces/public/default"
        assert requests.post(f"{ns}/maxProducersPerTopic", json=1, timeout=30).status_code == 204
        wait_for(lambda: refused(lambda: client.create_producer(topic).close(), pulsar.ProducerBusy), WAIT_S,
                 "a second producer refused on the owner")
        first.send(b"still")
        # A topic policy, also through the other broker.
        assert requests.post(f"{setter.web_url}/admin/v2/persistent/{local}/maxConsumers", json=1,
                             timeout=30).status_code == 204
        wait_for(lambda: refused(lambda: client.subscribe(topic, "s2").close(), pulsar.ConsumerBusy), WAIT_S,
                 "a second consumer refused on the owner")
        assert consumer.receive(TIMEOUT_MS).data() == b"still"
        # Lifted through the other broker again: enforced no more.
        assert requests.delete(f"{ns}/maxProducersPerTopic", timeout=30).status_code == 204
        wait_for(lambda: not refused(lambda: client.create_producer(topic).close(), pulsar.ProducerBusy), WAIT_S,
                 "the second producer accepted again")
        # A backlog quota through the other broker: s1 holds a backlog (one message, not acknowledged) above it.
        quota: dict[str, int | str] = {"limitSize": 1, "limitTime": -1, "policy": "producer_exception"}
        assert requests.post(f"{ns}/backlogQuota?backlogQuotaType=destination_storage", json=quota,
                             timeout=30).status_code == 204
        wait_for(lambda: refused(lambda: client.create_producer(topic).close(),
                                 pulsar.ProducerBlockedQuotaExceededException), WAIT_S,
                 "a new producer refused for the backlog quota on the owner")
        # A dynamic setting (update-dynamic-config) through the other broker, taken back through the owner.
        config = "/admin/v2/brokers/configuration"
        assert requests.post(f"{setter.web_url}{config}/subscriptionKeySharedEnable/false", timeout=30).ok

        def key_shared_refused() -> bool:
            try:
                client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared).close()
            except pulsar.NotAllowedError:
                return True
            except pulsar.ConsumerBusy:  # (the topic's maxConsumers above: while Key_Shared is still allowed there)
                return False
            return False
        wait_for(key_shared_refused, WAIT_S, "Key_Shared refused on the owner")
        assert http_json(f"{owner.web_url}{config}/values") == {"subscriptionKeySharedEnable": "false"}
        assert requests.delete(f"{owner.web_url}{config}/subscriptionKeySharedEnable", timeout=30).ok
        assert http_json(f"{setter.web_url}{config}/values") == {}  # (as stored now, whatever it was told yet)
        wait_for(lambda: http_json(f"{setter.web_url}{config}/runtime")["subscriptionKeySharedEnable"] == "true",
                 WAIT_S, "the setting back on the other broker")
    finally:
        client.close()


# ---- security ------------------------------------------------------------------------------------------------------

SECRET = b"cluster-mode-test-secret-of-32-bytes!"


def bearer(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {bearer(role)}"}


def test_token_auth_and_authorization_on_both_brokers(brokers: Brokers, tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    key.write_bytes(SECRET)
    brokers.settings.update(
        authenticationEnabled="true",
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        tokenSecretKey=f"file://{key}",
        authorizationEnabled="true",
        superUserRoles="admin",
        brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
        brokerClientAuthenticationParameters=f"token:{bearer('admin')}",
    )
    b1, b2 = brokers.start(2)
    pair = (b1, b2)
    topics = topics_in_distinct_bundles("public/default", "secure", 2)
    admin = auth("admin")
    granted = requests.post(f"{b1.web_url}/admin/v2/namespaces/public/default/permissions/app",
                            json=["produce", "consume"], headers=admin, timeout=30)
    assert granted.status_code == 204, granted.text
    # The app, given the first broker only, produces and consumes on topics of both brokers (lookups followed).
    app = pulsar.Client(b1.service_url, authentication=pulsar.AuthenticationToken(bearer("app")),
                        operation_timeout_seconds=30)
    try:
        for t in topics:
            consumer = app.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest)
            app.create_producer(t).send(t.encode())
            assert consumer.receive(TIMEOUT_MS).data() == t.encode()
            consumer.close()
    finally:
        app.close()
    owners = {t: owner_of([b1, b2], t, admin) for t in topics}
    assert set(owners.values()) == {b1, b2}
    for t in topics:
        local = t.removeprefix("persistent://")
        for b in pair:
            # Admin calls through either broker with the admin's token: the non-owner's 307 carries it on.
            stats = get_following(f"{b.web_url}/admin/v2/persistent/{local}/stats", admin)
            assert stats.status_code == 200 and stats.json()["msgInCounter"] == 1, stats.text
            # Without a token: 401 on both; with a role that has no rights: refused on both, by the broker asked
            # (Pulsar's validateTopicOperation comes before the owner's 307, for the stats and the lookup alike).
            assert requests.get(f"{b.web_url}/admin/v2/persistent/{local}/stats", allow_redirects=False,
                                timeout=30).status_code == 401
            for path, operation in ((f"/admin/v2/persistent/{local}/stats", "GET_STATS"),
                                    (f"/lookup/v2/topic/persistent/{local}", "LOOKUP")):
                refused = requests.get(b.web_url + path, headers=auth("nobody"), allow_redirects=False, timeout=30)
                assert (refused.status_code, refused.json()["reason"]) == (
                    401, f"Unauthorized to validateTopicOperation for operation [{operation}] on topic [{t}]"), \
                    refused.text
    # A client whose role has no rights is refused by each broker, for topics of each, with Pulsar's error.
    for b in pair:
        nobody = pulsar.Client(b.service_url, authentication=pulsar.AuthenticationToken(bearer("nobody")),
                               operation_timeout_seconds=30)
        try:
            for t in topics:
                with pytest.raises(pulsar.AuthorizationError):
                    nobody.create_producer(t)
                with pytest.raises(pulsar.AuthorizationError):
                    nobody.subscribe(t, "s")
        finally:
            nobody.close()
    # A move asked by the admin through the non-owner (the unload is passed on with the admin's credentials).
    target = other_than(pair, owners[topics[0]])
    move(brokers, topics[0], "public/default", to=target, headers=admin)
    assert owner_of([b1, b2], topics[0], admin) is target
    # A namespace unload is passed on to each bundle's owner with the caller's credentials: the admin's go through,
    # a role without rights is refused.
    ns_unload = f"{b1.web_url}/admin/v2/namespaces/public/default/unload"
    with brokers.zk() as zk:
        before = brokers.owners(zk)
    assert len(before) == 2
    refused = requests.put(ns_unload, headers=auth("nobody"), timeout=60)
    assert (refused.status_code, refused.json()["reason"]) == (401, "This operation requires super-user access")
    with brokers.zk() as zk:
        assert brokers.owners(zk) == before  # (nothing unloaded)
    assert requests.put(ns_unload, headers=admin, timeout=60).status_code == 204
    with brokers.zk() as zk:
        assert not brokers.owners(zk)


# ---- metrics -------------------------------------------------------------------------------------------------------

def test_metrics_per_broker_follow_ownership(brokers: Brokers) -> None:
    b1, b2 = brokers.start(2)
    pair = (b1, b2)
    topics = topics_in_distinct_bundles("public/default", "metrics", 2)
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        for t in topics:
            client.create_producer(t).send(b"x")
    finally:
        client.close()
    owners = {t: owner_of([b1, b2], t) for t in topics}
    assert set(owners.values()) == {b1, b2}
    for b in pair:
        metrics = scrape(b)
        mine = [t for t in topics if owners[t] is b]
        assert topics_count(metrics, "public/default") == len(mine)
        for t in topics:
            assert bool(topic_series(metrics, t)) == (t in mine), (b.web_url, t)
    # The first topic moves to the other broker: its series leave the old owner and appear on the new one.
    moving = topics[0]
    old = owners[moving]
    new = other_than(pair, old)
    move(brokers, moving, "public/default", to=new)
    client = pulsar.Client(new.service_url, operation_timeout_seconds=30)
    try:
        client.create_producer(moving).send(b"y")
    finally:
        client.close()
    old_metrics, new_metrics = scrape(old), scrape(new)
    assert not topic_series(old_metrics, moving)
    assert topics_count(old_metrics, "public/default") == 0
    assert "pulsar_in_messages_total" in topic_series(new_metrics, moving)
    assert topics_count(new_metrics, "public/default") == 2
