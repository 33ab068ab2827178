"""Namespace-wide operations (clearBacklog, unsubscribe, unload) and the broker's version and
configuration endpoints, over real HTTP with the official client making the topics."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator

import pulsar
import pytest

from broker import __version__
from broker.embedded import BrokerThread
from broker.topic_name import TopicName
from tests.admin.conftest import Admin, rest_path
from tests.waiting import wait_for

NS = "/admin/v2/namespaces"


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """This module's own broker: it adds a cluster, which the other modules' brokers must not see."""
    with BrokerThread(data_dir=tmp_path_factory.mktemp("namespace-ops")) as b:
        yield b


def topic_with_backlog(admin: Admin, client: pulsar.Client, ns: str, name: str, subs: tuple[str, ...],
                       messages: int = 5) -> str:
    topic = f"persistent://{ns}/{name}"
    for sub in subs:
        client.subscribe(topic, sub).close()
    producer = client.create_producer(topic)
    for i in range(messages):
        producer.send(b"m%d" % i)
    producer.close()
    return topic


def backlogs(admin: Admin, topic: str) -> dict[str, int]:
    return {name: s["msgBacklog"] for name, s in admin.stats(topic)["subscriptions"].items()}


def test_clear_backlog_of_every_topic_and_of_one_subscription(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    t1 = topic_with_backlog(admin, client, ns, "t1", ("a", "b"))
    t2 = topic_with_backlog(admin, client, ns, "t2", ("a",))
    # A topic that is not loaded has its backlog cleared too.
    admin.ok("PUT", f"/admin/v2/{rest_path(t2)}/unload")
    assert admin.post(f"{NS}/{ns}/clearBacklog/a").status == 204
    assert backlogs(admin, t1) == {"a": 0, "b": 5}
    assert backlogs(admin, t2) == {"a": 0}
    assert admin.post(f"{NS}/{ns}/clearBacklog").status == 204
    assert backlogs(admin, t1) == {"a": 0, "b": 0}
    assert admin.post(f"{NS}/{ns}/clearBacklog/nobody").status == 204
    # What is published afterwards is the new backlog.
    producer = client.create_producer(t1)
    producer.send(b"after")
    consumer = client.subscribe(t1, "b")
    assert consumer.receive(10_000).data() == b"after"
    consumer.close()


def test_operations_on_one_bundle(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    bundles = admin.ok("GET", f"{NS}/{ns}/bundles")["boundaries"]

    def bundle_of(topic: str) -> str:
        # Pulsar's: CRC32 of the full topic name, in [lower, upper) (the last range closed).
        h = zlib.crc32(topic.encode())
        for lower, upper in itertools.pairwise(bundles):
            if int(lower, 16) <= h < int(upper, 16) or h == int(upper, 16) == 0xFFFFFFFF:
                return f"{lower}_{upper}"
        raise AssertionError(h)

    names: list[str] = []  # four topics in two of the four bundles (the others stay empty)
    used: list[str] = []
    for i in itertools.count():
        b = bundle_of(f"persistent://{ns}/t{i}")
        if b not in used and len(used) < 2:
            used.append(b)
        if b in used:
            names.append(f"t{i}")
        if len(names) >= 4 and len(used) == 2:
            break
    topics = [topic_with_backlog(admin, client, ns, n, ("s",), messages=2) for n in names]
    target = bundle_of(topics[0])
    inside = [t for t in topics if bundle_of(t) == target]
    assert 0 < len(inside) < len(topics)
    assert admin.post(f"{NS}/{ns}/{target}/clearBacklog").status == 204
    for t in topics:
        assert backlogs(admin, t) == {"s": 0 if t in inside else 2}
    # not one of the namespace's bundles, or malformed: Pulsar's validateNamespaceBundleRange says 412
    assert admin.post(f"{NS}/{ns}/0x00000000_0x00000001/clearBacklog").status == 412
    assert admin.put(f"{NS}/{ns}/0x0000zz00_0x00000001/unload").status == 412
    assert admin.put(f"{NS}/{ns}/{target}/unload").status == 204
    # DELETE of a bundle (pulsar-admin namespaces delete-bundle): refused while a topic is in it, unless forced;
    # forced, the bundle is given up as an unload gives it up, its topics kept (as Pulsar's).
    reply = admin.delete(f"{NS}/{ns}/{target}")
    assert (reply.status, reply.reason) == (409, "Cannot delete non empty bundle")
    assert admin.delete(f"{NS}/{ns}/{target}?force=true").status == 204
    assert backlogs(admin, inside[0]) == {"s": 0}
    empty = next(f"{lower}_{upper}" for lower, upper in itertools.pairwise(bundles)
                 if f"{lower}_{upper}" not in {bundle_of(t) for t in topics})
    assert admin.delete(f"{NS}/{ns}/{empty}").status == 204
    reply = admin.delete(f"{NS}/{ns}/encryptionRequired")  # (no DELETE of that policy in Pulsar: a bundle's)
    assert (reply.status, reply.reason) == (412, "Invalid bundle range: encryptionRequired")


def test_a_namespace_path_of_no_route(admin: Admin) -> None:
    """``.../{tenant}/{ns}/{name}`` where no route has ``name``: only the bundle's DELETE fits it (412 for a name that
    is no bundle range: Pulsar's answer). Other methods: 404 with a reason (Pulsar's Jersey: 405); a path that is a
    route of other methods: 405. Pulsar's namespace resources this broker does not serve: 404 saying so, with each
    method Pulsar has for them."""
    ns = admin.new_namespace()
    for method in ("GET", "POST", "PUT", "HEAD"):
        reply = admin.call(method, f"{NS}/{ns}/nosuchpolicy", None if method in ("GET", "HEAD") else 1)
        assert reply.status == 404, (method, reply.status, reply.body)
        if method != "HEAD":
            assert reply.reason == "Not Found: no namespace resource named 'nosuchpolicy'"
    reply = admin.delete(f"{NS}/{ns}/notabundle")
    assert (reply.status, reply.reason) == (412, "Invalid bundle range: notabundle")
    reply = admin.delete(f"{NS}/public/nowhere-{ns[-8:]}/notabundle")  # (the namespace is looked at first)
    assert (reply.status, reply.reason) == (404, "Namespace does not exist")
    for method, path in (("POST", "schemaCompatibilityStrategy"), ("GET", "unload"), ("PUT", "retention"),
                         ("GET", "removeOffloadPolicies"), ("POST", "schemaAutoUpdateCompatibilityStrategy")):
        reply = admin.call(method, f"{NS}/{ns}/{path}", "x" if method != "GET" else None)
        assert (reply.status, reply.reason) == (405, "Method Not Allowed"), (method, path)
    for name, methods in (("entryFilters", ("GET", "POST", "DELETE")), ("resourcegroup", ("GET", "DELETE")),
                          ("migration", ("POST",))):
        for method in methods:
            reply = admin.call(method, f"{NS}/{ns}/{name}", True if method == "POST" else None)
            assert (reply.status, reply.reason) == (
                404, f"Not supported by this broker: {method} of a namespace's {name}"), (method, name)
    reply = admin.delete(f"{NS}/{ns}/migration")  # (Pulsar has no DELETE of it: a bundle's there too)
    assert (reply.status, reply.reason) == (412, "Invalid bundle range: migration")
    assert admin.get(f"{NS}/{ns}/migration").status == 404
    assert admin.ok("GET", f"{NS}/{ns}/bundles")["numBundles"] == 4  # (nothing of the namespace changed)


def test_unsubscribe_everywhere_or_nowhere(admin: Admin, client: pulsar.Client) -> None:
    ns = admin.new_namespace()
    t1 = topic_with_backlog(admin, client, ns, "t1", ("a", "b"))
    t2 = topic_with_backlog(admin, client, ns, "t2", ("a",))
    consumer = client.subscribe(t2, "a")
    reply = admin.post(f"{NS}/{ns}/unsubscribe/a")
    assert reply.status == 412 and "active connected consumers" in reply.reason
    assert sorted(backlogs(admin, t1)) == ["a", "b"]  # nothing deleted
    consumer.close()
    assert admin.post(f"{NS}/{ns}/unsubscribe/a").status == 204
    assert sorted(backlogs(admin, t1)) == ["b"]
    assert backlogs(admin, t2) == {}
    assert admin.post(f"/admin/v2/namespaces/public/nowhere-{ns[-8:]}/unsubscribe/a").status == 404


def test_unload_namespace(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/t"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    service = pulsar_broker.server.service
    full = TopicName.parse(topic).full
    before = service.topics[full]
    assert admin.put(f"{NS}/{ns}/unload").status == 204
    assert before.closed
    # The clients come back on their own and load the topic again.
    producer.send(b"after unload")
    assert consumer.receive(10_000).data() == b"after unload"
    wait_for(lambda: service.topics.get(full) not in (None, before), what="the topic to be loaded again")


def test_broker_version_and_configuration(admin: Admin) -> None:
    reply = admin.get("/admin/v2/brokers/version")
    assert reply.status == 200 and reply.body.decode() == __version__
    assert "allowAutoTopicCreation" in admin.ok("GET", "/admin/v2/brokers/configuration")  # (test_dynamic_config)
    runtime = admin.ok("GET", "/admin/v2/brokers/configuration/runtime")
    assert runtime["clusterName"] == "standalone"
    assert runtime["subscriptionTypesEnabled"] == "Exclusive,Shared,Failover,Key_Shared"
    assert runtime["brokerDeleteInactiveTopicsEnabled"] in ("true", "false")
    assert "tokenSecretKey" not in runtime and "unknown_keys" not in runtime
    assert admin.get("/admin/v2/brokers/backlog-quota-check").status == 204
    assert admin.ok("GET", "/admin/v2/brokers/standalone")  # still the cluster's broker list


def test_replication_clusters_properties_and_bundles(admin: Admin) -> None:
    ns = admin.new_namespace()
    assert admin.ok("GET", f"{NS}/{ns}/replication") == ["standalone"]
    assert admin.post(f"{NS}/{ns}/replication", ["standalone"]).status == 204  # pulsar-admin set-clusters
    assert admin.post(f"{NS}/{ns}/replication", []).status == 412
    for nothing in (b"", b"null"):  # (Pulsar's isEmpty check: a null list is refused as an empty one)
        reply = admin.call("POST", f"{NS}/{ns}/replication", raw=nothing)
        assert (reply.status, reply.reason) == (412, "ClusterIds should not be null or empty"), nothing
    assert admin.post(f"{NS}/{ns}/replication", ["global"]).status == 412
    assert admin.post(f"{NS}/{ns}/replication", ["elsewhere"]).status == 403  # (Pulsar's "Invalid cluster id")
    assert admin.post(f"{NS}/{ns}/replication", "standalone").status == 400
    admin.ok("PUT", "/admin/v2/clusters/second", {"serviceUrl": "http://second:8080"})
    reply = admin.post(f"{NS}/{ns}/replication", ["standalone", "second"])
    assert reply.status == 403 and "not in the list of allowed clusters" in reply.reason
    assert admin.ok("GET", f"{NS}/{ns}")["replication_clusters"] == ["standalone"]

    assert admin.ok("GET", f"{NS}/{ns}/properties") == {}
    assert admin.put(f"{NS}/{ns}/properties", {"team": "billing", "tier": "gold"}).status == 204
    assert admin.put(f"{NS}/{ns}/property/tier/silver").status == 204
    assert admin.ok("GET", f"{NS}/{ns}/properties") == {"team": "billing", "tier": "silver"}
    assert admin.get(f"{NS}/{ns}/property/tier").body == b"silver"
    assert admin.get(f"{NS}/{ns}/property/nothing").unset
    assert admin.delete(f"{NS}/{ns}/property/team").status == 204
    assert admin.ok("GET", f"{NS}/{ns}")["properties"] == {"tier": "silver"}
    assert admin.put(f"{NS}/{ns}/properties", {"n": 1}).status == 400
    assert admin.delete(f"{NS}/{ns}/properties").status == 204
    assert admin.ok("GET", f"{NS}/{ns}/properties") == {}

    bundles = admin.ok("GET", f"{NS}/{ns}/bundles")
    assert bundles["numBundles"] == 4 and bundles["boundaries"][0] == "0x00000000"
    assert bundles["boundaries"][-1] == "0xffffffff"


def test_clusters_create_update_delete(admin: Admin) -> None:
    path = "/admin/v2/clusters/third"
    assert admin.put("/admin/v2/clusters/standalone", {}).status == 409  # exists (as in Pulsar)
    assert admin.post(path, {"serviceUrl": "http://third:8080"}).status == 404  # update: must exist
    assert admin.put(path, {"serviceUrl": "http://third:8080"}).status == 204
    assert admin.post(path, {"serviceUrl": "http://third:9090"}).status == 204
    assert admin.ok("GET", path)["serviceUrl"] == "http://third:9090"
    admin.ok("PUT", "/admin/v2/tenants/uses-third", {"allowedClusters": ["standalone", "third"]})
    assert admin.delete(path).status == 412  # a tenant may use it
    admin.ok("POST", "/admin/v2/tenants/uses-third", {"allowedClusters": ["standalone"]})
    assert admin.delete(path).status == 204
    assert admin.get(path).status == 404
    assert admin.delete("/admin/v2/clusters/standalone").status == 412  # this broker's own
