"""A cluster's peer clusters over REST (Pulsar's ClustersBase.getPeerCluster / setPeerClusterNames, what
``pulsar-admin clusters get-peer-clusters / update-peer-clusters`` call), a namespace's allowed clusters (PIP-321,
NamespacesBase.internalSet/GetNamespaceAllowedClusters) and the checks of its replication clusters that depend on
both, with the answers of Pulsar 4.0.7."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin

CLUSTERS = "/admin/v2/clusters"
NS = "/admin/v2/namespaces"


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("peers")) as b:
        yield b


@pytest.fixture
def clusters(admin: Admin) -> Iterator[list[str]]:
    """Three fresh clusters, deleted afterwards."""
    names = [f"c{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    for name in names:
        admin.ok("PUT", f"{CLUSTERS}/{name}", {"serviceUrl": "http://127.0.0.9:8080"})
    yield names
    for name in names:
        admin.ok("DELETE", f"{CLUSTERS}/{name}")


def test_peers_are_set_read_and_kept_in_the_cluster_data(admin: Admin, clusters: list[str]) -> None:
    a, b, c = clusters
    peers = f"{CLUSTERS}/{a}/peers"
    assert admin.get(peers).unset  # none set: Pulsar's null (200, no body)
    assert admin.post(peers, [c, b, c]).status == 204
    assert admin.ok("GET", peers) == [c, b]  # in order, once each (a LinkedHashSet)
    data = admin.ok("GET", f"{CLUSTERS}/{a}")
    assert data["peerClusterNames"] == [c, b] and data["serviceUrl"] == "http://127.0.0.9:8080"  # the rest kept
    assert admin.post(peers, []).status == 204  # an empty list is stored as one
    assert admin.ok("GET", peers) == []
    assert admin.call("POST", peers, raw=b"").status == 204  # no body: cleared
    assert admin.get(peers).unset
    # Given with the rest of the cluster data, they are bound to the same LinkedHashSet.
    admin.ok("POST", f"{CLUSTERS}/{a}", {"serviceUrl": "http://127.0.0.9:8080", "peerClusterNames": [b, c, b]})
    assert admin.ok("GET", peers) == [b, c]
    assert admin.ok("GET", f"{CLUSTERS}/{a}")["peerClusterNames"] == [b, c]


def test_the_standalone_cluster_gets_peers_too(admin: Admin, clusters: list[str]) -> None:
    peers = f"{CLUSTERS}/standalone/peers"
    try:
        admin.ok("POST", peers, clusters[:1])
        assert admin.ok("GET", peers) == clusters[:1]
    finally:
        admin.ok("POST", peers, [])  # (so that its clusters can be deleted: nothing refers to them)


def test_a_peer_list_is_checked_as_pulsar_checks_it(admin: Admin, clusters: list[str]) -> None:
    a, b, _ = clusters
    peers = f"{CLUSTERS}/{a}/peers"
    for body, reason in (([b, "nowhere"], "Peer cluster nowhere does not exist"),
                         ([b, a], f"{a} itself can't be part of peer-list"),
                         ([a.upper()], f"{a} itself can't be part of peer-list")):  # (compared ignoring case)
        reply = admin.post(peers, body)
        assert (reply.status, reply.reason) == (412, reason), body
    for bad in ("x", [1], {"peerClusterNames": [b]}):  # (Pulsar's JSON binding to a set of names refuses them)
        reply = admin.post(peers, bad)
        assert reply.status == 400 and "must be a JSON array" in reply.reason, bad
    assert admin.get(peers).unset  # nothing was stored
    # A cluster that does not exist: 404, once its list passed (Pulsar checks the peers first).
    missing = f"{CLUSTERS}/nowhere/peers"
    assert admin.get(missing).status == 404
    reply = admin.post(missing, [b])
    assert (reply.status, reply.reason) == (404, "Cluster does not exist")
    assert admin.post(missing, ["gone"]).status == 412


# -- a namespace's allowed clusters ----------------------------------------------------------------------------

@pytest.fixture
def setup(admin: Admin) -> Iterator[tuple[str, str, str]]:
    """(namespace, x, y): a namespace of a tenant allowed on standalone, x and y; y's peer is standalone."""
    x, y = f"x-{uuid.uuid4().hex[:6]}", f"y-{uuid.uuid4().hex[:6]}"
    for name in (x, y):
        admin.ok("PUT", f"/admin/v2/clusters/{name}", {"serviceUrl": "http://127.0.0.9:8080"})
    admin.ok("POST", f"/admin/v2/clusters/{y}/peers", ["standalone"])
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone", x, y]})
    ns = admin.new_namespace(tenant)
    yield ns, x, y
    admin.ok("DELETE", f"{NS}/{ns}")
    admin.ok("DELETE", f"/admin/v2/tenants/{tenant}")
    for name in (x, y):
        admin.ok("DELETE", f"/admin/v2/clusters/{name}")


def test_allowed_clusters_are_set_and_read(admin: Admin, setup: tuple[str, str, str]) -> None:
    ns, x, _ = setup
    path = f"{NS}/{ns}/allowedClusters"
    assert admin.ok("GET", path) == []  # (an empty set in Pulsar's Policies until set)
    assert admin.ok("GET", f"{NS}/{ns}")["allowed_clusters"] == []
    assert admin.post(path, ["standalone", x, x]).status == 204
    assert admin.ok("GET", path) == ["standalone", x]
    assert admin.ok("GET", f"{NS}/{ns}")["allowed_clusters"] == ["standalone", x]
    assert admin.get(f"{NS}/{ns.split('/')[0]}/nowhere/allowedClusters").status == 404


def test_allowed_clusters_are_checked_as_pulsar_checks_them(admin: Admin, setup: tuple[str, str, str]) -> None:
    ns, x, y = setup
    path = f"{NS}/{ns}/allowedClusters"
    tenant = ns.split("/")[0]
    for body, status, reason in (
            (None, 400, "ClusterIds should not be null"),
            ("standalone", 400, "Allowed clusters must be a JSON array of cluster names"),
            (["standalone", "mars"], 403,
             f"Cluster [mars] is not in the list of allowed clusters list for tenant [{tenant}]"),
            ([x], 400, "Allowed clusters do not contain the replication cluster standalone. Please remove the "
                       "replication cluster if the cluster is not allowed for this namespace"),
            (["standalone", y], 409,
             f"{y}'s peer-clusters [standalone] can't be part of replication-clusters [standalone, {y}]")):
        reply = admin.post(path, body)
        assert (reply.status, reply.reason) == (status, reason), body
    assert admin.ok("GET", path) == []  # nothing was stored


def test_replication_clusters_are_checked_against_peers_and_allowed_clusters(
        admin: Admin, setup: tuple[str, str, str]) -> None:
    ns, x, y = setup
    path = f"{NS}/{ns}/replication"
    reply = admin.post(path, ["standalone", "elsewhere"])
    assert (reply.status, reply.reason) == (403, "Invalid cluster id: elsewhere")
    reply = admin.post(path, ["standalone", y])  # y's peer is standalone
    assert (reply.status, reply.reason) == (
        409, f"{y}'s peer-clusters [standalone] can't be part of replication-clusters [standalone, {y}]")
    assert admin.post(path, ["standalone", x]).status == 204  # the tenant allows x
    admin.ok("POST", f"{NS}/{ns}/allowedClusters", ["standalone", x])
    admin.ok("POST", "/admin/v2/clusters/" + y + "/peers", [])
    # Once the namespace has allowed clusters, they are what a replication cluster must be in, not the tenant's.
    reply = admin.post(path, ["standalone", y])
    assert (reply.status, reply.reason) == (
        403, f"Cluster [{y}] is not in the list of allowed clusters list for namespace [{ns}]")
    assert admin.ok("GET", path) == ["standalone", x]
