"""Cluster mode: several brokers (real processes) on one ZooKeeper and BookKeeper, the official client following
lookups. Registry and leader at Pulsar's paths, one owner per bundle, lookups from any broker land on the owner,
admin calls redirected (307) to the owner, topic lists across brokers."""

from __future__ import annotations

import json
import re
import uuid

import pulsar
import requests
from kazoo.client import KazooClient

from cluster.local import stop_process
from tests.cluster import held_notifications
from tests.cluster.conftest import Brokers, http_json
from tests.waiting import wait_for

TIMEOUT_MS = 30_000
# What the brokers of test_a_broker_reads_what_another_has_just_stored are never told of (their notifications held):
# public/default's persistent managed ledgers and partitioned topics. (Their levels are made before the brokers
# start: the notification of a new level above would have a broker read all below it.)
# (and a tenant's, made through the other broker: its namespaces' policies are below its node)
HELD_TENANT = "made-elsewhere"
HELD_PATHS = ("/managed-ledgers/public/default/persistent", "/admin/partitioned-topics/public/default/persistent",
              "/admin/partitioned-topics/public/default/non-persistent", f"/admin/policies/{HELD_TENANT}",
              f"/admin/local-policies/{HELD_TENANT}")


def topic_names(prefix: str, count: int) -> list[str]:
    return [f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]


def test_registry_leader_and_owner_per_bundle(brokers: Brokers) -> None:
    b1, b2, b3 = brokers.start(3)
    with brokers.zk() as zk:
        registered = set(zk.get_children("/loadbalance/brokers"))
        assert registered == {b.web_url.removeprefix("http://") for b in (b1, b2, b3)}
        report = json.loads(zk.get(f"/loadbalance/brokers/{b2.web_url.removeprefix('http://')}")[0])
        assert report["pulsarServiceUrl"] == b2.service_url and report["webServiceUrl"] == b2.web_url
        assert report["loadReportType"] == "LocalBrokerData" and "cpu" in report and "bundles" in report
        leader = json.loads(zk.get("/loadbalance/leader")[0])
        assert leader["brokerId"] in registered and leader["serviceUrl"] == f"http://{leader['brokerId']}"
        assert zk.exists("/loadbalance/leader").ephemeralOwner != 0  # (ephemeral)
        for b in (b1, b2, b3):  # the admin API tells the same from any broker
            assert set(http_json(f"{b.web_url}/admin/v2/brokers/standalone")) == registered
            assert http_json(f"{b.web_url}/admin/v2/brokers/leaderBroker")["brokerId"] == leader["brokerId"]
        # Its load, as the load manager's part of broker-stats/metrics has it: per cent of each limit.
        host = b2.web_url.removeprefix("http://").rsplit(":", 1)[0]
        (balancing,) = [d for d in http_json(f"{b2.web_url}/admin/v2/broker-stats/metrics")
                        if d["dimensions"].get("metric") == "loadBalancing"]
        assert balancing["dimensions"] == {"broker": host, "metric": "loadBalancing"}
        usage = balancing["metrics"]
        assert set(usage) == {"brk_lb_cpu_usage", "brk_lb_memory_usage", "brk_lb_directMemory_usage",
                              "brk_lb_bandwidth_in_usage", "brk_lb_bandwidth_out_usage"}
        assert 0 < usage["brk_lb_memory_usage"] < 100 and usage["brk_lb_cpu_usage"] >= 0

        topics = topic_names("spread", 12)
        clients = [pulsar.Client(b.service_url, operation_timeout_seconds=30) for b in (b1, b2, b3)]
        try:
            # Each topic produced through one broker's service URL and consumed through another's.
            for i, topic in enumerate(topics):
                producer = clients[i % 3].create_producer(topic, send_timeout_millis=TIMEOUT_MS)
                producer.send(f"m-{i}".encode())
                producer.close()
            for i, topic in enumerate(topics):
                consumer = clients[(i + 1) % 3].subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
                assert consumer.receive(TIMEOUT_MS).data() == f"m-{i}".encode()
                consumer.close()
        finally:
            for client in clients:
                client.close()

        owners = brokers.owners(zk)
        urls = {b.service_url for b in (b1, b2, b3)}
        assert owners and all(o["nativeUrl"] in urls and o["disabled"] is False for o in owners.values())
        assert all(zk.exists(f"/namespace/public/default/{r}").ephemeralOwner != 0 for r in owners)
        # Bundles spread: the namespace's four bundles (all used by 12 topics, almost surely) over the brokers.
        assert len({o["nativeUrl"] for o in owners.values()}) >= 2, owners

    # Every broker's HTTP lookup of a topic answers the owner (following Pulsar's 307 when it is not the owner).
    for topic in topics:
        local = topic.removeprefix("persistent://")
        answers = {http_json(f"{b.web_url}/lookup/v2/topic/persistent/{local}")["brokerUrl"]
                   for b in (b1, b2, b3)}
        assert len(answers) == 1, answers


def test_admin_calls_redirect_to_the_owner(brokers: Brokers) -> None:
    b1, b2 = brokers.start(2)
    topic = topic_names("admin", 1)[0]
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=30)
    try:
        client.create_producer(topic).send(b"x")
    finally:
        client.close()
    with brokers.zk() as zk:
        owner_url = next(iter(brokers.owners(zk).values()))["httpUrl"]
    other = b2 if owner_url == b1.web_url else b1
    local = topic.removeprefix("persistent://")
    stats = f"{other.web_url}/admin/v2/persistent/{local}/stats"
    first = requests.get(stats, allow_redirects=False, timeout=30)
    assert first.status_code == 307
    assert first.headers["Location"].startswith(f"{owner_url}/admin/v2/persistent/{local}/stats")
    followed = requests.get(stats, timeout=30)
    assert followed.status_code == 200 and followed.json()["msgInCounter"] == 1
    assert [r.status_code for r in followed.history] == [307]
    # Metadata-only calls are answered by any broker (at once: one that has not heard of the topic yet reads the
    # store, see test_a_broker_reads_what_another_has_just_stored).
    assert requests.get(f"{other.web_url}/admin/v2/persistent/{local}/partitions", allow_redirects=False,
                        timeout=30).status_code == 200


def test_a_call_on_a_topic_named_with_a_slash_goes_to_its_owner(brokers: Brokers) -> None:
    """A local name may hold a "/" (``a%2Fx`` in a path): the non-owner sends the call on that topic to its owner,
    not answers it as a call on ``a`` (whose action would be ``x``) nor refuses it as not served here (503)."""
    b1, b2 = brokers.start(2)
    encoded = f"slash-{uuid.uuid4().hex[:6]}%2Fx"
    owner_url = http_json(f"{b1.web_url}/lookup/v2/topic/persistent/public/default/{encoded}")["httpUrl"]
    other = b2 if owner_url == b1.web_url else b1
    assert requests.put(f"{owner_url}/admin/v2/persistent/public/default/{encoded}", timeout=30).status_code == 204
    for path, method in ((f"{encoded}/stats", "GET"), (encoded, "PUT"), (f"{encoded}/subscription/s", "PUT")):
        first = requests.request(method, f"{other.web_url}/admin/v2/persistent/public/default/{path}",
                                 allow_redirects=False, timeout=30)
        assert first.status_code == 307, (path, first.status_code, first.text)
        assert first.headers["Location"].startswith(f"{owner_url}/admin/v2/persistent/public/default/{path}?")
    base = f"{other.web_url}/admin/v2/persistent/public/default/{encoded}"
    assert requests.put(f"{base}/subscription/s", timeout=30).status_code == 204  # (followed: on the owner)
    stats = requests.get(f"{base}/stats", timeout=30)
    assert stats.status_code == 200 and set(stats.json()["subscriptions"]) == {"s"}


def test_a_broker_reads_what_another_has_just_stored(brokers: Brokers) -> None:
    """A broker asked of a topic it has not heard of reads the metadata store before it answers, as Pulsar's do
    (NamespaceService.checkTopicExists: the partitioned metadata through the metadata cache, which loads a key it
    does not hold, then TopicResources.persistentTopicExists, the store's exists); so is one asked of a namespace.
    Here neither broker is ever told of public/default's managed ledgers and partitioned topics, nor of the tenant
    HELD_TENANT and its namespaces (``held_notifications``): each knows those the other makes only by reading them,
    so a call that trusted what it was told would answer 404 every time."""
    root = KazooClient(hosts=brokers.cluster.zk_address)  # (the test's chroot is not there yet)
    root.start(timeout=30)
    try:
        for path in HELD_PATHS[:3]:  # (not the tenant's: its node would be the tenant)
            root.ensure_path(brokers.chroot + path)
    finally:
        root.stop()
        root.close()
    b1, b2 = brokers.start(2, command_prefix=held_notifications.command_prefix(HELD_PATHS))
    topic, parted = topic_names("fresh", 2)
    local, parted_local = topic.removeprefix("persistent://"), parted.removeprefix("persistent://")

    # A namespace made through broker 1, its bundles asked of broker 2 at once (Pulsar reads a namespace's policies
    # through its metadata cache, which loads a key it does not hold).
    made = requests.put(f"{b1.web_url}/admin/v2/tenants/{HELD_TENANT}", json={"allowedClusters": ["standalone"]},
                        timeout=30)
    assert made.status_code == 204, made.text
    made = requests.put(f"{b1.web_url}/admin/v2/namespaces/{HELD_TENANT}/ns", json={}, timeout=30)
    assert made.status_code == 204, made.text
    assert http_json(f"{b2.web_url}/admin/v2/namespaces/{HELD_TENANT}/ns/bundles")["numBundles"] == 4

    # A topic made by its owner (the PUT is sent there), asked of the other broker at once.
    made = requests.put(f"{b1.web_url}/admin/v2/persistent/{local}", timeout=30)
    assert made.status_code == 204, made.text
    owner_url = http_json(f"{b1.web_url}/lookup/v2/topic/persistent/{local}")["httpUrl"]
    other = b2 if owner_url == b1.web_url else b1
    base = f"{other.web_url}/admin/v2/persistent/{local}"
    assert http_json(f"{base}/partitions") == {"partitions": 0, "deleted": False}
    assert http_json(f"{base}/properties") == {}
    assert requests.get(f"{base}/permissions", timeout=30).status_code == 200
    stats = requests.get(f"{base}/stats", timeout=30)  # (at the owner, through its 307)
    assert stats.status_code == 200 and [r.status_code for r in stats.history] == [307]

    # A partitioned topic made through broker 1 (any broker answers that), asked of broker 2 at once: its admin
    # metadata and stats, and its partitioned metadata over the binary protocol.
    made = requests.put(f"{b1.web_url}/admin/v2/persistent/{parted_local}/partitions", json=2, timeout=30)
    assert made.status_code == 204, made.text
    base = f"{b2.web_url}/admin/v2/persistent/{parted_local}"
    assert http_json(f"{base}/partitions") == {"partitions": 2, "deleted": False}
    assert set(http_json(f"{base}/partitioned-stats")["partitions"]) == {f"{parted}-partition-{i}" for i in range(2)}
    client = pulsar.Client(b2.service_url, operation_timeout_seconds=30)
    try:
        assert client.get_topic_partitions(parted) == [f"{parted}-partition-{i}" for i in range(2)]
    finally:
        client.close()

    # A non-persistent partitioned topic made through one broker, with auto-creation off: a producer on a partition
    # the other broker owns is served there (a partition of a partitioned topic is always made), not refused.
    requests.post(f"{b1.web_url}/admin/v2/namespaces/public/default/autoTopicCreation",
                  json={"allowAutoTopicCreation": False}, timeout=30).raise_for_status()
    live = parted.replace("persistent://", "non-persistent://", 1) + "-np"
    partition = f"{live}-partition-0"
    owner_url = http_json(f"{b1.web_url}/lookup/v2/topic/{partition.replace('://', '/')}")["httpUrl"]
    owner, maker = (b1, b2) if owner_url == b1.web_url else (b2, b1)
    made = requests.put(f"{maker.web_url}/admin/v2/{live.replace('://', '/')}/partitions", json=2, timeout=30)
    assert made.status_code == 204, made.text
    client = pulsar.Client(owner.service_url, operation_timeout_seconds=30)
    try:
        client.create_producer(partition).close()
    finally:
        client.close()


def test_topic_lists_and_regex_consumers_see_every_broker(brokers: Brokers) -> None:
    b1, b2, b3 = brokers.start(3)
    tag = uuid.uuid4().hex[:6]
    topics = [f"persistent://public/default/list-{tag}-{i}" for i in range(8)]
    clients = [pulsar.Client(b.service_url, operation_timeout_seconds=30) for b in (b1, b2, b3)]
    try:
        for i, topic in enumerate(topics):
            clients[i % 3].create_producer(topic).send(b"first")
        # Each broker's admin list names all of them, wherever they are served.
        for b in (b1, b2, b3):
            url = f"{b.web_url}/admin/v2/persistent/public/default"

            def lists_all(url: str = url) -> bool:
                return set(topics) <= set(http_json(url))

            wait_for(lists_all, 30, f"{url} to list every broker's topics")
        # A regex consumer (GET_TOPICS_OF_NAMESPACE, then the topic-list watch) through one broker gets them all.
        consumer = clients[0].subscribe(re.compile(f"persistent://public/default/list-{tag}-.*"), "regex",
                                        initial_position=pulsar.InitialPosition.Earliest)
        seen: set[str] = set()
        while len(seen) < len(topics):
            msg = consumer.receive(TIMEOUT_MS)
            seen.add(msg.topic_name())
            consumer.acknowledge(msg)
        assert seen == set(topics)
    finally:
        for client in clients:
            client.close()


def test_split_and_bundle_unload_go_to_the_owner(brokers: Brokers) -> None:
    b1, b2 = brokers.start(2)
    topic = topic_names("split", 1)[0]
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"before")
        with brokers.zk() as zk:
            ((parent, data),) = brokers.owners(zk).items()
        owner_web = str(data["httpUrl"])
        other = b2 if owner_web == b1.web_url else b1
        ns = f"{other.web_url}/admin/v2/namespaces/public/default"
        split = requests.put(f"{ns}/{parent}/split", timeout=60)  # (requests repeats a PUT on a 307)
        assert split.status_code == 204, split.text
        assert [(r.status_code, r.headers["Location"].split("/admin")[0]) for r in split.history] == \
            [(307, owner_web)]
        with brokers.zk() as zk:
            owners = brokers.owners(zk)
        assert parent not in owners and len(owners) == 2
        assert {str(o["httpUrl"]) for o in owners.values()} == {owner_web}
        # The other broker lists the 5 bundles (6 boundaries) once the store's notification of the owner's write
        # reached its metadata cache, a moment after the split answered: as Pulsar's getBundlesData, which reads the
        # namespace's LocalPolicies through the broker's MetadataCache (refreshed on notifications, never synced).
        wait_for(lambda: len(http_json(f"{ns}/bundles")["boundaries"]) == 6, what="the other broker to see the split")
        producer.send(b"after")  # the topic stayed where it was
        assert [consumer.receive(TIMEOUT_MS).data() for _ in range(2)] == [b"before", b"after"]
        # A bundle's unload through the other broker: redirected to the owner, which releases it.
        local = topic.removeprefix("persistent://")
        child = requests.get(f"{other.web_url}/admin/v2/persistent/{local}/stats", timeout=30)  # (owner's)
        assert child.status_code == 200
        with brokers.zk() as zk:
            ranges = sorted(brokers.owners(zk))
            node = f"/namespace/public/default/{ranges[0]}"
            before = zk.exists(node)
        unloaded = requests.put(f"{ns}/{ranges[0]}/unload", timeout=60)
        assert unloaded.status_code == 204 and [r.status_code for r in unloaded.history] == [307]
        with brokers.zk() as zk:
            # Released: its ownership node is gone, or already made again by a broker that took it since (the
            # clients look the topic up again 0.1 s after the close, so that can come before this read).
            after = zk.exists(node)
        assert before is not None and (after is None or after.czxid != before.czxid)
        producer.send(b"again")  # the client looks the topic up again, wherever its bundle goes
        seen = []
        while b"again" not in seen:  # (what was not acknowledged yet may come again first: at least once)
            seen.append(consumer.receive(TIMEOUT_MS).data())
        assert set(seen) <= {b"before", b"after", b"again"}
    finally:
        client.close()


def test_a_brokers_bundles_and_calls_on_another_broker_as_pulsar(brokers: Brokers) -> None:
    """Each broker lists the bundles it owns, not the others' (BrokersBase.getOwnedNamespaces); asked of another
    registered broker's id it answers 307 there (maybeRedirectToBroker), of an unknown id 404; any broker names a
    topic's bundle (``/lookup/v2/topic/.../bundle``), and a method a route does not have is 405 at any broker, never
    a 307 to the owner first; both answer the cluster's same data. (tests/cluster/test_pulsar_cluster_answers.py
    compares these with Apache Pulsar's own.)"""
    b1, b2 = brokers.start(2)
    topic = topic_names("owned", 1)[0]
    local = topic.removeprefix("persistent://")
    # b1 takes the topic's bundle: an authoritative lookup makes the broker asked its owner.
    assert http_json(f"{b1.web_url}/lookup/v2/topic/persistent/{local}?authoritative=true")["httpUrl"] == b1.web_url
    bundle = requests.get(f"{b2.web_url}/lookup/v2/topic/persistent/{local}/bundle", timeout=30)
    assert bundle.status_code == 200 and re.fullmatch(r"0x[0-9a-f]{8}_0x[0-9a-f]{8}", bundle.text), bundle.text
    assert requests.get(f"{b1.web_url}/lookup/v2/topic/persistent/{local}/bundle", timeout=30).text == bundle.text
    owned = {b: http_json(f"{b.web_url}/admin/v2/brokers/standalone/{b.web_url.removeprefix('http://')}"
                          f"/ownedNamespaces") for b in (b1, b2)}
    assert f"public/default/{bundle.text}" in owned[b1] and f"public/default/{bundle.text}" not in owned[b2]
    assert not set(owned[b1]) & set(owned[b2])
    path = f"/admin/v2/brokers/standalone/{b1.web_url.removeprefix('http://')}/ownedNamespaces"
    redirected = requests.get(f"{b2.web_url}{path}", allow_redirects=False, timeout=30)
    assert (redirected.status_code, redirected.headers["Location"]) == (307, f"{b1.web_url}{path}")
    unknown = requests.get(f"{b2.web_url}/admin/v2/brokers/standalone/127.0.0.1:1/ownedNamespaces", timeout=30)
    assert (unknown.status_code, unknown.json()) == (404, {"reason": "Broker id '127.0.0.1:1' not found in "
                                                                     "available brokers."})
    ids = sorted(b.web_url.removeprefix("http://") for b in (b1, b2))
    assert sorted(http_json(f"{b2.web_url}/admin/v2/brokers")) == ids
    # (authorization off: Pulsar takes any cluster name)
    assert sorted(http_json(f"{b2.web_url}/admin/v2/brokers/nosuch")) == ids
    wrong = requests.post(f"{b2.web_url}/admin/v2/persistent/{local}/compaction", allow_redirects=False, timeout=30)
    assert wrong.status_code == 405
    # The cluster's data: the same from either broker (stored once, by the first broker, as Pulsar's metadata
    # set-up stores it), not each broker's own URLs.
    cluster = http_json(f"{b1.web_url}/admin/v2/clusters/standalone")
    assert cluster == http_json(f"{b2.web_url}/admin/v2/clusters/standalone")
    assert (cluster["serviceUrl"], cluster["brokerServiceUrl"]) in {(b.web_url, b.service_url) for b in (b1, b2)}


def test_each_broker_owns_its_heartbeat_namespace_and_checks_its_health_there(brokers: Brokers) -> None:
    """Pulsar's registerBootstrapNamespaces: each broker owns the full bundle of ``pulsar/<brokerId>`` from its start,
    a lookup of it from any broker goes to the broker it names, and the health check writes and reads its topic
    there; a broker that stops gracefully deletes that topic (Pulsar's HealthChecker.close)."""
    b1, b2 = brokers.start(2)
    ids = {b.pid: b.web_url.removeprefix("http://") for b in (b1, b2)}
    for b in (b1, b2):
        assert requests.get(f"{b.web_url}/admin/v2/brokers/health", timeout=60).text == "ok"
        owned = http_json(f"{b.web_url}/admin/v2/brokers/standalone/{ids[b.pid]}/ownedNamespaces")
        assert f"pulsar/{ids[b.pid]}/0x00000000_0xffffffff" in owned
    with brokers.zk() as zk:
        for b in (b1, b2):
            owners = brokers.owners(zk, f"pulsar/{ids[b.pid]}")
            assert [(r, o["nativeUrl"]) for r, o in owners.items()] == [("0x00000000_0xffffffff", b.service_url)]
            assert zk.exists(f"/managed-ledgers/pulsar/{ids[b.pid]}/persistent/healthcheck")
    path = f"/admin/v2/brokers/health?brokerId={ids[b2.pid]}"  # (Pulsar's maybeRedirectToBroker)
    redirected = requests.get(f"{b1.web_url}{path}", allow_redirects=False, timeout=30)
    assert (redirected.status_code, redirected.headers["Location"]) == (307, f"{b2.web_url}{path}")
    # From the other broker: HTTP and binary lookups, and the official client's reader, land on the broker named.
    topic = f"persistent://pulsar/{ids[b2.pid]}/healthcheck"
    assert http_json(f"{b1.web_url}/lookup/v2/topic/{topic.replace('://', '/')}")["brokerUrl"] == b2.service_url
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic)
        reader = client.create_reader(topic, pulsar.MessageId.latest)
        producer.send(b"from a client")
        assert reader.read_next(TIMEOUT_MS).data() == b"from a client"
        stats = http_json(f"{b2.web_url}/admin/v2/persistent/pulsar/{ids[b2.pid]}/healthcheck/stats")
        assert len(stats["publishers"]) == 1
    finally:
        client.close()
    stop_process(b2.pid)  # (gracefully: SIGTERM)
    brokers.cluster.brokers.remove(b2)
    with brokers.zk() as zk:
        assert not zk.exists(f"/managed-ledgers/pulsar/{ids[b2.pid]}/persistent/healthcheck")
        assert zk.exists(f"/managed-ledgers/pulsar/{ids[b1.pid]}/persistent/healthcheck")
