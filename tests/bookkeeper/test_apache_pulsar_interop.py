"""Apache Pulsar's own broker and ours on the same ZooKeeper and bookies (issue 16, item 6).

A topic is produced on one broker, unloaded, and served by the other, both ways: every message and every
subscription position (a mark-delete position, an individually acknowledged message past it, a subscription that
never acknowledged) must survive. This is what storing topics in Pulsar's own formats (ManagedLedgerInfo and
ManagedCursorInfo znodes, cursor ledgers, BookKeeper ledger metadata) is for. Two topics move: a plain name, and one
whose local name Pulsar encodes for its managed ledger (a space, a ':' and a non-ASCII letter: TopicName.
getPersistenceNamingEncoding puts the local name through Codec.encode, java.net.URLEncoder); for that one the
managed-ledger znode must be where Pulsar puts it, and both brokers' admin topic lists must name it once.

Pulsar comes from the jars of `make pulsar-deps` (cluster/apache_pulsar.py); without them the test skips, except
under CI=true, where it fails. Cost: ZooKeeper + 1 bookie, PulsarClusterMetadataSetup (~15 s) and two starts of
Pulsar's broker (30-75 s each on a busy 2-core machine): about 2-3 minutes.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient

from bench.brokers import BrokerProcess, bookkeeper_settings, start_ours
from cluster import apache_pulsar
from cluster.local import LocalCluster, running_cluster
from tests.bookkeeper.conftest import require_cluster_deps
from tests.needs import unavailable

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(900)]

CLUSTER = "mixed"
TOPIC = "persistent://public/default/interop"
# A local name Pulsar's Codec.encode changes: ' ' -> '+', ':' -> %3A, 'ü' -> its UTF-8 bytes %C3%BC. (No '/': Pulsar's
# client reads persistent://t/ns/a/x as a V1 name, cluster "ns".)
ENCODED_LOCAL = "interop b:ü"
ENCODED_TOPIC = f"persistent://public/default/{ENCODED_LOCAL}"
# Where Pulsar keeps it (written out here, not computed by the code under test): the managed-ledger name
# public/default/persistent/<Codec.encode(local name)>, under /managed-ledgers.
ML_PARENT = "/managed-ledgers/public/default/persistent"
ENCODED_ML_CHILD = "interop+b%3A%C3%BC"
# The subscription that never acknowledges: on the second topic its name needs encoding too. Pulsar's PersistentTopic
# names the cursor Codec.encode(subscription name), its znode a child of the managed ledger's: t+b%3A%C3%BC.
T_SUB = {TOPIC: "t", ENCODED_TOPIC: "t b:ü"}
ENCODED_CURSORS = ["s", "t+b%3A%C3%BC"]
# The admin REST path names a topic by its encoded local name, as Pulsar's Java admin client sends it
# (TopicName.getEncodedLocalName: Codec.encode, a space as '+'); Pulsar's AdminResource.validateTopicName decodes it
# with Codec.decode.
REST_PATH = {TOPIC: "/admin/v2/persistent/public/default/interop",
             ENCODED_TOPIC: "/admin/v2/persistent/public/default/interop+b%3A%C3%BC"}
LIST_PATH = "/admin/v2/persistent/public/default"


def require_apache_pulsar() -> None:
    why = apache_pulsar.missing_dependencies()
    if why is not None:
        unavailable(f"Apache Pulsar unavailable: {why}")


def cluster_set_up_by_pulsar(state: Path) -> Iterator[LocalCluster]:
    """ZooKeeper and a bookie, with the cluster, tenant `public` and namespace `public/default` written by Pulsar's
    own PulsarClusterMetadataSetup (a fixture's body: skips without the dependencies)."""
    require_cluster_deps()
    require_apache_pulsar()
    with running_cluster(state / "cluster", bookies=1) as c:
        apache_pulsar.run_cluster_metadata_setup(CLUSTER, c.zk_address, "http://127.0.0.1:8080",
                                                 "pulsar://127.0.0.1:6650", state / "setup.log")
        yield c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from cluster_set_up_by_pulsar(tmp_path_factory.mktemp("interop-cluster"))


def start_apache(cluster: LocalCluster, workdir: Path) -> apache_pulsar.PulsarProcess:
    return apache_pulsar.start_broker(workdir, {
        "clusterName": CLUSTER,
        "metadataStoreUrl": cluster.metadata_store_url,
        "configurationMetadataStoreUrl": cluster.metadata_store_url,
        "managedLedgerDefaultEnsembleSize": "1",
        "managedLedgerDefaultWriteQuorum": "1",
        "managedLedgerDefaultAckQuorum": "1",
    })


def start_our_broker(cluster: LocalCluster, workdir: Path) -> tuple[BrokerProcess, str]:
    workdir.mkdir(parents=True, exist_ok=True)
    settings = bookkeeper_settings(cluster, 1, 1, 1)
    settings["clusterName"] = CLUSTER
    broker = start_ours(workdir, name="ours", settings=settings)
    web = re.search(r"broker ready in [\d.]+ s: \S+\s+(http://\S+)", broker.log_path.read_text())
    assert web, broker.log_path.read_text()[-2000:]
    return broker, web.group(1)


def unload(web_url: str, topic: str) -> None:
    req = urllib.request.Request(web_url + REST_PATH[topic] + "/unload", method="PUT")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status in (200, 204)


def listed_topics(web_url: str) -> list[str]:
    """The admin REST list of public/default's persistent topics, but system topics (Pulsar's __change_events)."""
    with urllib.request.urlopen(web_url + LIST_PATH, timeout=60) as resp:
        topics: list[str] = json.loads(resp.read())
    return sorted(t for t in topics if "/__" not in t)


def subscriptions(web_url: str, topic: str) -> list[str]:
    with urllib.request.urlopen(web_url + REST_PATH[topic] + "/subscriptions", timeout=60) as resp:
        return sorted(json.loads(resp.read()))


def managed_ledger_znodes(cluster: LocalCluster) -> tuple[list[str], list[str]]:
    """The managed-ledger znodes of public/default's persistent topics (system topics' left out), and the cursor
    znodes of the second topic's."""
    zk = KazooClient(hosts=cluster.zk_address)
    zk.start()
    try:
        return (sorted(c for c in zk.get_children(ML_PARENT) if not c.startswith("__")),
                sorted(zk.get_children(f"{ML_PARENT}/{ENCODED_ML_CHILD}")))
    finally:
        zk.stop()
        zk.close()


def produce(url: str, topic: str, first: int, count: int) -> None:
    """``count`` messages m<first>..: half one by one, half in batches (batched entries keep their layout)."""
    client = pulsar.Client(url, operation_timeout_seconds=60)
    try:
        single = client.create_producer(topic, batching_enabled=False)
        for i in range(first, first + count // 2):
            single.send(f"m{i}".encode())
        single.close()
        batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                         batching_max_publish_delay_ms=50)
        for i in range(first + count // 2, first + count):
            batched.send_async(f"m{i}".encode(), None)
        batched.flush()
        batched.close()
    finally:
        client.close()


def drain(url: str, topic: str, subscription: str, ack: set[int] | None) -> list[int]:
    """Everything ``subscription`` is given (Shared, so individual acks leave holes), acknowledging the messages
    numbered in ``ack`` (None: all of them); the broker's own redelivery is not waited for."""
    client = pulsar.Client(url, operation_timeout_seconds=60)
    got: list[int] = []
    try:
        consumer = client.subscribe(topic, subscription, consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        while True:
            try:
                msg = consumer.receive(5000)
            except pulsar.Timeout:
                break
            n = int(msg.data().decode()[1:])
            got.append(n)
            if ack is None or n in ack:
                consumer.acknowledge(msg)
        consumer.close()
    finally:
        client.close()
    return got


def test_a_topic_moves_between_apache_pulsar_and_our_broker_both_ways(cluster: LocalCluster,
                                                                       tmp_path: Path) -> None:
    topics = [TOPIC, ENCODED_TOPIC]
    # 1. Apache Pulsar writes each topic: 100 messages; `s` acknowledges m0..m29 and m40 (a hole past its
    #    mark-delete position), `t` (`t b:ü` on the second topic) is created and acknowledges nothing.
    apache = start_apache(cluster, tmp_path / "apache-1")
    try:
        for topic in topics:
            drain(apache.service_url, topic, T_SUB[topic], ack=set())  # creates the subscription at the start
            produce(apache.service_url, topic, 0, 100)
            assert drain(apache.service_url, topic, "s", ack={*range(30), 40}) == list(range(100)), topic
        assert listed_topics(apache.web_url) == sorted(topics)
        for topic in topics:
            assert subscriptions(apache.web_url, topic) == sorted(["s", T_SUB[topic]])
            unload(apache.web_url, topic)
    finally:
        apache.stop()
    # Pulsar's managed ledger of the second topic: at the encoded name, its cursors' znodes its children.
    assert managed_ledger_znodes(cluster) == (sorted(["interop", ENCODED_ML_CHILD]), ENCODED_CURSORS)

    # 2. Ours serves them: `s` resumes after its hole, `t` gets everything; then ours adds m100..m199 and `s`
    #    acknowledges m100..m119 and m130 (a hole again, now stored by ours; m130 is unbatched: the client keeps
    #    an acknowledgement of one message of a batch until the whole batch is acknowledged).
    ours, web = start_our_broker(cluster, tmp_path / "ours")
    try:
        assert listed_topics(web) == sorted(topics)  # (before any is loaded: from the stored names)
        for topic in topics:
            assert drain(ours.url, topic, "s", ack=None) == [*range(30, 40), *range(41, 100)], topic
            assert drain(ours.url, topic, T_SUB[topic], ack=set()) == list(range(100)), topic
            produce(ours.url, topic, 100, 100)
            assert drain(ours.url, topic, "s", ack={*range(100, 120), 130}) == list(range(100, 200)), topic
        assert listed_topics(web) == sorted(topics)
        for topic in topics:
            assert subscriptions(web, topic) == sorted(["s", T_SUB[topic]])
            unload(web, topic)
    finally:
        ours.stop()
    # (ours moved nothing, and made no second cursor)
    assert managed_ledger_znodes(cluster) == (sorted(["interop", ENCODED_ML_CHILD]), ENCODED_CURSORS)

    # 3. Apache Pulsar serves what ours wrote and the positions ours stored.
    apache = start_apache(cluster, tmp_path / "apache-2")
    try:
        assert listed_topics(apache.web_url) == sorted(topics)
        for topic in topics:
            assert drain(apache.service_url, topic, "s", ack=None) == [*range(120, 130), *range(131, 200)], topic
            assert drain(apache.service_url, topic, T_SUB[topic], ack=None) == list(range(200)), topic
    finally:
        apache.stop()
