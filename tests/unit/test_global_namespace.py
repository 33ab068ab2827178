"""Which cluster serves a namespace (broker.metadata.global_namespace): Pulsar's checkLocalOrGetPeerReplicationCluster
on plain values."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import E
from broker.metadata.global_namespace import GlobalNamespaceError, PeerCluster, peer_cluster_for

CLUSTERS: dict[str, dict[str, Any]] = {
    "a": {"peerClusterNames": ["d", "b", "c"]},
    "b": {"serviceUrl": "http://b:8080", "brokerServiceUrl": "pulsar://b:6650"},
    "c": {"serviceUrl": "http://c:8080", "serviceUrlTls": "https://c:8443", "brokerServiceUrlTls": "pulsar+ssl://c:1"},
    "e": {"serviceUrl": "http://e:8080"},
}


def peer(policies: dict[str, Any] | None, *, allow_deleted: bool = False,
         clusters: dict[str, dict[str, Any]] = CLUSTERS) -> PeerCluster | None:
    return peer_cluster_for("t/ns", "a", policies, clusters, allow_deleted=allow_deleted)


def refusal(policies: dict[str, Any] | None, clusters: dict[str, dict[str, Any]] = CLUSTERS) -> GlobalNamespaceError:
    with pytest.raises(GlobalNamespaceError) as info:
        peer(policies, clusters=clusters)
    return info.value


def test_served_here_when_this_cluster_is_listed_or_allowed() -> None:
    assert peer({"replication_clusters": ["a", "b"]}) is None
    assert peer({"replication_clusters": ["b"], "allowed_clusters": ["a", "b"]}) is None
    assert peer({}) is None  # (unset: the local cluster, as the broker reads it everywhere)


def test_the_first_peer_in_the_local_clusters_order_that_the_namespace_lists() -> None:
    assert peer({"replication_clusters": ["c", "b"]}) == PeerCluster("b", "http://b:8080", "", "pulsar://b:6650", "")
    assert peer({"replication_clusters": ["c"]}) == PeerCluster("c", "http://c:8080", "https://c:8443", "",
                                                                "pulsar+ssl://c:1")
    assert peer({"replication_clusters": ["x"], "allowed_clusters": ["c"]}) is not None  # allowed counts too


def test_refusals_carry_pulsars_status_and_lookup_code() -> None:
    none = refusal({"replication_clusters": ["e", "x"]})  # e is known, but not a's peer
    assert (none.status, none.code) == (412, E.MetadataError)
    assert none.message == ("Namespace missing local cluster name in clusters list: local_cluster=a ns=t/ns "
                            "clusters=[e, x]")
    no_peers = refusal({"replication_clusters": ["b"]}, clusters={**CLUSTERS, "a": {}})
    assert no_peers.status == 412
    missing = refusal({"replication_clusters": ["d"]})  # a peer name whose cluster data is gone
    assert (missing.status, missing.code, missing.message) == (404, E.TopicNotFound, "Peer cluster d data not found")
    assert (refusal(None).status, refusal(None).message) == (404, "Namespace not found")


def test_a_deleted_namespace_is_refused_except_for_system_topics() -> None:
    deleted = {"replication_clusters": ["a"], "deleted": True}
    assert refusal(deleted).message == "Namespace is deleted"
    assert peer(deleted, allow_deleted=True) is None
