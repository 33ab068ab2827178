"""Cluster mode: admin operations over many topics reach every topic's owner (real broker processes, the official
client). Every call goes to one broker only; the topics it covers are spread over both, so each check fails when
that broker acts only on what it serves itself: partitioned-stats and partitioned-internalStats, namespace
clearBacklog and unsubscribe, terminate/partitions, deleting a partitioned topic, deleting a namespace, and the
non-persistent topic lists (live on their owner only)."""

from __future__ import annotations

import urllib.error
import uuid
from functools import partial

import pulsar
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from cluster.local import BrokerInfo
from tests.cluster.conftest import Brokers, http_json
from tests.waiting import wait_for

TIMEOUT_MS = 30_000
PARTITIONS = 8
WAIT_S = 30.0


def owner_urls(brokers: Brokers, topics: list[str]) -> dict[str, str]:
    """topic -> the broker URL its HTTP lookup answers (placing its bundle when nobody owns it yet).

    The tests place the bundles this way before the client uses the topics: a binary lookup that reads the owner of a
    bundle another broker is just acquiring can send the client there a moment before that broker serves it; the C++
    client then leaves the consumer or producer waiting ("Ignoring reconnection request since we're already
    connected") until its operation timeout."""
    out = {}
    for topic in topics:
        domain, local = topic.split("://")
        out[topic] = http_json(f"{brokers.live[0].web_url}/lookup/v2/topic/{domain}/{local}")["brokerUrl"]
    return out


def send_round_robin(client: pulsar.Client, topic: str, count: int) -> None:
    """count messages m0, m1, ... to a partitioned topic, one partition after another."""
    producer = client.create_producer(
        topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution, batching_enabled=False,
        send_timeout_millis=TIMEOUT_MS)
    for i in range(count):
        producer.send(f"m{i}".encode())
    producer.close()


def status_of(url: str, method: str = "GET") -> int:
    try:
        http_json(url, method=method)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def test_partitioned_topic_operations_reach_every_owner(brokers: Brokers) -> None:
    b1, b2 = brokers.start(2)
    base = f"persistent://public/default/fan-{uuid.uuid4().hex[:6]}"
    admin = f"{b1.web_url}/admin/v2/persistent/{base.removeprefix('persistent://')}"
    ns = f"{b1.web_url}/admin/v2/namespaces/public/default"
    parts = [f"{base}-partition-{i}" for i in range(PARTITIONS)]
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=60)
    try:
        http_json(f"{admin}/partitions", method="PUT", body=PARTITIONS)
        owners = owner_urls(brokers, parts)
        client.subscribe(base, "s", initial_position=pulsar.InitialPosition.Earliest).close()
        client.subscribe(base, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
        send_round_robin(client, base, 4 * PARTITIONS)
    finally:
        client.close()
    assert set(owners.values()) == {b1.service_url, b2.service_url}, owners  # (spread over both)

    stats = http_json(f"{admin}/partitioned-stats")
    assert stats["metadata"] == {"partitions": PARTITIONS, "deleted": False}
    assert set(stats["partitions"]) == set(parts)
    assert stats["msgInCounter"] == 4 * PARTITIONS
    assert all(p["msgInCounter"] == 4 for p in stats["partitions"].values())
    assert stats["subscriptions"]["s"]["msgBacklog"] == 4 * PARTITIONS
    internal = http_json(f"{admin}/partitioned-internalStats")
    assert internal["metadata"] == {"partitions": PARTITIONS, "deleted": False}
    assert set(internal["partitions"]) == set(parts)
    assert all(set(p["cursors"]) == {"s", "keep"} for p in internal["partitions"].values())

    # Through b1, for the whole namespace: each bundle's owner clears its topics' backlog.
    http_json(f"{ns}/clearBacklog/s", method="POST")
    stats = http_json(f"{admin}/partitioned-stats")
    assert [p["subscriptions"]["s"]["msgBacklog"] for p in stats["partitions"].values()] == [0] * PARTITIONS
    assert stats["subscriptions"]["keep"]["msgBacklog"] == 4 * PARTITIONS  # (only the one named)
    http_json(f"{ns}/unsubscribe/s", method="POST")
    stats = http_json(f"{admin}/partitioned-stats")
    assert all(set(p["subscriptions"]) == {"keep"} for p in stats["partitions"].values())

    terminated = http_json(f"{admin}/terminate/partitions", method="POST")
    assert set(terminated) == {str(i) for i in range(PARTITIONS)}
    assert all(t["entryId"] >= 0 and t["partitionIndex"] == int(i) for i, t in terminated.items())
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=60)
    try:
        for part in parts:  # (on both brokers)
            with pytest.raises(pulsar.TopicTerminated):
                client.create_producer(part)
    finally:
        client.close()

    http_json(f"{admin}/partitions?force=true", method="DELETE")
    assert status_of(f"{admin}/partitioned-stats") == 404
    for b in (b1, b2):  # (the other broker hears of the deleted metadata through its watch)
        url = f"{b.web_url}/admin/v2/persistent/public/default"

        def forgotten(url: str = url) -> bool:
            return not set(http_json(url)) & set(parts)

        wait_for(forgotten, WAIT_S, f"{url} to forget the partitions")
        assert base not in set(http_json(f"{url}/partitioned"))
    with brokers.zk() as zk:
        assert not {p.removeprefix("persistent://public/default/") for p in parts} & set(
            zk.get_children("/managed-ledgers/public/default/persistent"))

    # Created through b1: every partition's managed-ledger znode made at once, wherever its bundle is (Pulsar's
    # tryCreatePartitionsAsync, by the broker asked, nothing loaded); createMissedPartitions then finds none missing.
    http_json(f"{admin}/partitions", method="PUT", body=PARTITIONS)
    with brokers.zk() as zk:
        assert {p.removeprefix("persistent://public/default/") for p in parts} <= set(
            zk.get_children("/managed-ledgers/public/default/persistent"))
    http_json(f"{admin}/createMissedPartitions", method="POST")
    assert set(owner_urls(brokers, parts).values()) == {b1.service_url, b2.service_url}
    http_json(f"{admin}/partitions", method="DELETE")
    with brokers.zk() as zk:
        assert not {p.removeprefix("persistent://public/default/") for p in parts} & set(
            zk.get_children("/managed-ledgers/public/default/persistent"))


def spread_client_topics(client: pulsar.Client, topics: list[str]) -> list[pulsar.Producer]:
    return [client.create_producer(t, send_timeout_millis=TIMEOUT_MS) for t in topics]


def test_non_persistent_lists_and_namespace_delete_cover_every_broker(brokers: Brokers) -> None:
    b1, b2 = brokers.start(2)
    tag = uuid.uuid4().hex[:6]
    live = [f"non-persistent://public/default/np-{tag}-{i}" for i in range(8)]
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=60)
    try:
        assert set(owner_urls(brokers, live).values()) == {b1.service_url, b2.service_url}
        producers = spread_client_topics(client, live)  # (live while their producers are)
        for b in (b1, b2):
            assert set(live) <= set(http_json(f"{b.web_url}/admin/v2/non-persistent/public/default"))
            ns = f"{b.web_url}/admin/v2/namespaces/public/default"
            assert set(live) <= set(http_json(f"{ns}/topics?mode=NON_PERSISTENT"))
            assert set(live) <= set(http_json(f"{ns}/topics?mode=ALL"))
            assert not set(live) & set(http_json(f"{ns}/topics"))  # (PERSISTENT)
        for p in producers:
            p.close()

        # A namespace whose topics are served by both brokers, deleted through one.
        name = f"public/fan-{tag}"
        ns = f"{b1.web_url}/admin/v2/namespaces/{name}"
        http_json(ns, method="PUT")
        stored = [f"persistent://{name}/t-{i}" for i in range(8)]
        assert set(owner_urls(brokers, stored).values()) == {b1.service_url, b2.service_url}
        for p in spread_client_topics(client, stored):
            p.send(b"x")
            p.close()
        assert status_of(ns, "DELETE") == 409  # (not empty)
        http_json(f"{ns}?force=true", method="DELETE")
    finally:
        client.close()
    for web_url in (b1.web_url, b2.web_url):  # (the other broker hears of the deletion through its ZooKeeper watch)
        def deleted(url: str = web_url) -> bool:
            return name not in http_json(f"{url}/admin/v2/namespaces/public")
        wait_for(deleted, 30, f"{web_url} to see {name} deleted")
    with brokers.zk() as zk:
        assert not zk.exists(f"/managed-ledgers/{name}/persistent") or not zk.get_children(
            f"/managed-ledgers/{name}/persistent")
        assert not brokers.owners(zk, name), "bundles of the deleted namespace still owned"


def test_partitioned_compaction_reaches_every_owner(brokers: Brokers) -> None:
    """PUT .../compaction on a partitioned topic, asked of one broker: each partition is compacted by its owner
    (Pulsar's internalTriggerCompaction calls triggerCompaction per partition through its admin client). It
    answered 503 once a partition was served by the other broker (loaded here: "not served by this instance")."""
    b1, b2 = brokers.start(2)
    base = f"persistent://public/default/compact-{uuid.uuid4().hex[:6]}"
    admin = f"{b1.web_url}/admin/v2/persistent/{base.removeprefix('persistent://')}"
    parts = [f"{base}-partition-{i}" for i in range(PARTITIONS)]
    http_json(f"{admin}/partitions", method="PUT", body=PARTITIONS)
    owners = owner_urls(brokers, parts)
    assert set(owners.values()) == {b1.service_url, b2.service_url}, owners  # (spread over both)
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=60)
    try:
        for part in parts:
            producer = client.create_producer(part, batching_enabled=False, send_timeout_millis=TIMEOUT_MS)
            for round_ in range(3):
                for key in ("a", "b", "c"):
                    producer.send(f"{key}{round_}".encode(), partition_key=key)
            producer.close()
    finally:
        client.close()

    assert status_of(f"{admin}/compaction", "PUT") == 200  # (204: http_json reads no body)

    def compacted(part: str) -> bool:
        local = part.removeprefix("persistent://")
        return bool(http_json(f"{b1.web_url}/admin/v2/persistent/{local}/compaction")["status"] == "SUCCESS")

    for part in parts:  # (asked of b1: a 307 to the owner for the other broker's)
        wait_for(partial(compacted, part), WAIT_S, f"{part} compacted")
    internal = http_json(f"{admin}/partitioned-internalStats")["partitions"]
    assert {p: internal[p]["compactedLedger"]["entries"] for p in parts} == {p: 3 for p in parts}


def loaded_topics(broker: BrokerInfo) -> set[str]:
    """The topics a broker has loaded: those its /metrics has series of."""
    answer = requests.get(f"{broker.web_url}/metrics", timeout=30)
    answer.raise_for_status()
    return {sample.labels["topic"] for family in text_string_to_metric_families(answer.text)
            for sample in family.samples if "topic" in sample.labels}


def test_partitioned_subscription_calls_reach_every_owner(brokers: Brokers) -> None:
    """The calls on a partitioned topic that Pulsar makes on each partition through its admin client, asked of one
    broker: each partition's own call is made by its owner. They failed with 503 once a partition was served by the
    other broker (loaded here: "not served by this instance"); the unload left the other broker's loaded."""
    b1, b2 = brokers.start(2)
    base = f"persistent://public/default/subs-{uuid.uuid4().hex[:6]}"
    admin = f"{b1.web_url}/admin/v2/persistent/{base.removeprefix('persistent://')}"
    parts = [f"{base}-partition-{i}" for i in range(PARTITIONS)]
    http_json(f"{admin}/partitions", method="PUT", body=PARTITIONS)
    owners = owner_urls(brokers, parts)
    assert set(owners.values()) == {b1.service_url, b2.service_url}, owners  # (spread over both)

    assert status_of(f"{admin}/subscription/s", "PUT") == 200  # (204) on every partition, each created there
    assert status_of(f"{admin}/subscription/s", "PUT") == 409  # (every partition has it)
    assert http_json(f"{admin}/subscriptions") == ["s"]
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=60)
    try:
        send_round_robin(client, base, 3 * PARTITIONS)
    finally:
        client.close()

    def backlogs() -> list[int]:
        stats = http_json(f"{admin}/partitioned-stats")["partitions"]
        return [stats[p]["subscriptions"]["s"]["msgBacklog"] for p in parts]

    assert backlogs() == [3] * PARTITIONS
    http_json(f"{admin}/subscription/s/skip_all", method="POST")
    assert backlogs() == [0] * PARTITIONS
    http_json(f"{admin}/subscription/s/resetcursor/0", method="POST")
    assert backlogs() == [3] * PARTITIONS
    http_json(f"{admin}/subscription/s/expireMessages/0", method="POST")
    assert backlogs() == [0] * PARTITIONS
    http_json(f"{admin}/subscription/s/resetcursor/0", method="POST")
    http_json(f"{admin}/all_subscription/expireMessages/0", method="POST")
    assert backlogs() == [0] * PARTITIONS

    http_json(f"{admin}/subscription/s/properties", method="PUT", body={"k": "v"})
    assert http_json(f"{admin}/subscription/s/properties") == {"k": "v"}
    stats = http_json(f"{admin}/partitioned-stats")["partitions"]
    assert [stats[p]["subscriptions"]["s"]["subscriptionProperties"] for p in parts] == [{"k": "v"}] * PARTITIONS
    http_json(f"{admin}/subscription/s/replicatedSubscriptionStatus", method="POST", body=True)
    assert http_json(f"{admin}/subscription/s/replicatedSubscriptionStatus") == {p: True for p in parts}
    http_json(f"{admin}/trim", method="POST")
    http_json(f"{admin}/subscription/s/resetcursor/0", method="POST")
    assert backlogs() == [3] * PARTITIONS
    # truncate: each partition by its owner; a partition's own name at a broker that does not own it: 307 there
    elsewhere = next(p for p in parts if owners[p] == b2.service_url)
    reply = requests.delete(f"{b1.web_url}/admin/v2/persistent/{elsewhere.removeprefix('persistent://')}/truncate",
                            allow_redirects=False, timeout=30)
    assert reply.status_code == 307 and reply.headers["Location"].startswith(b2.web_url), reply.headers
    http_json(f"{admin}/truncate", method="DELETE")
    assert backlogs() == [0] * PARTITIONS

    http_json(f"{admin}/unload", method="PUT")
    for b in (b1, b2):
        assert not set(parts) & loaded_topics(b), f"partitions still loaded on {b.web_url}"

    # Grown through b1: partition 0's subscription made on every new partition by that partition's owner, replicated
    # as there (Pulsar's internalUpdatePartitionedTopicAsync copies partition 0's durable subscriptions).
    grown = [f"{base}-partition-{i}" for i in range(2 * PARTITIONS)]
    http_json(f"{admin}/partitions", method="POST", body=2 * PARTITIONS)
    assert http_json(f"{admin}/subscription/s/replicatedSubscriptionStatus") == {p: True for p in grown}
    assert set(owner_urls(brokers, grown[PARTITIONS:]).values()) == {b1.service_url, b2.service_url}

    http_json(f"{admin}/subscription/s", method="DELETE")
    assert http_json(f"{admin}/subscriptions") == []
    assert status_of(f"{admin}/subscription/s/skip_all", "POST") == 404

    # A non-persistent partitioned topic: its subscriptions live on each partition's owner only (the calls left out
    # the other broker's partitions, answering for this broker's alone).
    live = f"non-persistent://public/default/live-{uuid.uuid4().hex[:6]}"
    admin = f"{b1.web_url}/admin/v2/non-persistent/{live.removeprefix('non-persistent://')}"
    live_parts = [f"{live}-partition-{i}" for i in range(PARTITIONS)]
    http_json(f"{admin}/partitions", method="PUT", body=PARTITIONS)
    owners = owner_urls(brokers, live_parts)
    assert set(owners.values()) == {b1.service_url, b2.service_url}, owners
    client = pulsar.Client(b1.service_url, operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(live, "s")
        assert http_json(f"{admin}/subscriptions") == ["s"]
        http_json(f"{admin}/subscription/s/properties", method="PUT", body={"k": "v"})
        stats = http_json(f"{admin}/partitioned-stats")["partitions"]
        assert [stats[p]["subscriptions"]["s"]["subscriptionProperties"] for p in live_parts] == [
            {"k": "v"}] * PARTITIONS
        assert http_json(f"{admin}/subscription/s/properties") == {"k": "v"}
        assert status_of(f"{admin}/subscription/s", "DELETE") == 412  # (its consumers are connected, on both)
        consumer.close()
    finally:
        client.close()


def test_a_dot_dot_subscription_is_not_a_step_to_another_route(brokers: Brokers) -> None:
    """A subscription named ".." (%2E%2E in the path) on a partitioned topic, asked of one broker: the call made at
    the owner of the other broker's partitions is on that subscription too. It was decoded and normalized on the way:
    PUT .../subscription/%2E%2E/properties reached PUT .../{partition}/properties there (with the broker's own
    credentials, which are a super user's), and set the topic's properties."""
    b1, b2 = brokers.start(2)
    base = f"persistent://public/default/dots-{uuid.uuid4().hex[:6]}"
    admin = f"{b1.web_url}/admin/v2/persistent/{base.removeprefix('persistent://')}"
    parts = [f"{base}-partition-{i}" for i in range(PARTITIONS)]
    http_json(f"{admin}/partitions", method="PUT", body=PARTITIONS)
    owners = owner_urls(brokers, parts)
    assert set(owners.values()) == {b1.service_url, b2.service_url}, owners  # (spread over both)
    assert status_of(f"{admin}/subscription/s", "PUT") == 200  # (every partition created, on its owner)

    try:
        http_json(f"{admin}/subscription/%2E%2E/properties", method="PUT", body={"k": "v"})
        answer = 200
    except urllib.error.HTTPError as exc:
        answer = exc.code
    assert answer == 404  # (no partition has a subscription "..")
    assert http_json(f"{admin}/properties") == {}
    assert http_json(f"{admin}/subscription/s/properties") == {}


def test_a_subscription_named_with_a_space_and_a_plus_reaches_every_partition(brokers: Brokers) -> None:
    """A subscription ``s b+c`` on a partitioned topic whose partitions both brokers own, addressed as Pulsar's Java
    admin client sends it (``s%2Bb%252Bc``: Codec.encode, then the segment percent-encoded; Pulsar's
    PersistentTopics decodes it twice). Each call the asked broker makes on the other's partitions names the same
    subscription, and so does growing the topic (partition 0's subscriptions made on the new partitions by their
    owners): that call sent the name encoded once, making ``s b c`` there."""
    b1, b2 = brokers.start(2)
    base = f"persistent://public/default/sub-name-{uuid.uuid4().hex[:6]}"
    admin = f"{b1.web_url}/admin/v2/persistent/{base.removeprefix('persistent://')}"
    sub = f"{admin}/subscription/s%2Bb%252Bc"
    http_json(f"{admin}/partitions", method="PUT", body=PARTITIONS)
    assert set(owner_urls(brokers, [f"{base}-partition-{i}" for i in range(PARTITIONS)]).values()) == {
        b1.service_url, b2.service_url}
    assert status_of(sub, "PUT") == 200  # (204) on every partition, each by its owner
    http_json(f"{sub}/properties", method="PUT", body={"k": "v"})
    assert http_json(f"{admin}/subscriptions") == ["s b+c"]

    grown = [f"{base}-partition-{i}" for i in range(2 * PARTITIONS)]
    http_json(f"{admin}/partitions", method="POST", body=2 * PARTITIONS)
    assert set(owner_urls(brokers, grown[PARTITIONS:]).values()) == {b1.service_url, b2.service_url}
    stats = http_json(f"{admin}/partitioned-stats?perPartition=true")["partitions"]
    assert {p: list(stats[p]["subscriptions"]) for p in grown} == {p: ["s b+c"] for p in grown}
    assert http_json(f"{sub}/properties") == {"k": "v"}
    http_json(sub, method="DELETE")
    assert http_json(f"{admin}/subscriptions") == []
