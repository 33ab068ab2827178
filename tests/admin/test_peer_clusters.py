"""A cluster's peer clusters over REST (Pulsar's ClustersBase.getPeerCluster / setPeerClusterNames, what
``pulsar-admin clusters get-peer-clusters / update-peer-clusters`` call), with the answers of Pulsar 4.0.7."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin

CLUSTERS = "/admin/v2/clusters"


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
    assert admin.get(peers).status == 204  # none set: Pulsar's null
    assert admin.post(peers, [c, b, c]).status == 204
    assert admin.ok("GET", peers) == [c, b]  # in order, once each (a LinkedHashSet)
    data = admin.ok("GET", f"{CLUSTERS}/{a}")
    assert data["peerClusterNames"] == [c, b] and data["serviceUrl"] == "http://127.0.0.9:8080"  # the rest kept
    assert admin.post(peers, []).status == 204  # an empty list is stored as one
    assert admin.ok("GET", peers) == []
    assert admin.call("POST", peers, raw=b"").status == 204  # no body: cleared
    assert admin.get(peers).status == 204


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
    assert admin.get(peers).status == 204  # nothing was stored
    # A cluster that does not exist: 404, once its list passed (Pulsar checks the peers first).
    missing = f"{CLUSTERS}/nowhere/peers"
    assert admin.get(missing).status == 404
    reply = admin.post(missing, [b])
    assert (reply.status, reply.reason) == (404, "Cluster does not exist")
    assert admin.post(missing, ["gone"]).status == 412
