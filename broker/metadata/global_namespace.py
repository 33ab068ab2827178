"""Which cluster serves a namespace: Pulsar's checkLocalOrGetPeerReplicationCluster (PulsarWebResource). Pure.

A namespace is served by this broker's cluster when the cluster is one of its ``replication_clusters`` (or of its
``allowed_clusters``, PIP-321). Otherwise Pulsar sends the client to a *peer* cluster: the first name of the local
cluster's ``peerClusterNames`` (in their stored order) that the namespace lists. The binary LOOKUP answers
``Redirect`` (authoritative) to that cluster's ``brokerServiceUrl`` / ``brokerServiceUrlTls``; the HTTP lookup and the
admin calls on a topic answer ``307`` to the same path on its ``serviceUrl`` (``serviceUrlTls`` over https). Only
peer clusters are candidates: a namespace replicated to other clusters that are not this cluster's peers is refused
(412, "Namespace missing local cluster name in clusters list"), as in Pulsar.

The refusals keep Pulsar's HTTP status, and a lookup maps it as Pulsar's does: 404 is ``TopicNotFound``, any other
``MetadataError`` (TopicLookupBase.lookupTopicAsync).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError, E
from broker.metadata.cluster_data import PEER_CLUSTER_NAMES
from broker.metadata.policies import ALLOWED_CLUSTERS


class GlobalNamespaceError(BrokerError):
    """The namespace cannot be served here nor sent to a peer cluster; ``status`` is Pulsar's HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message, E.TopicNotFound if status == 404 else E.MetadataError)
        self.status = status


@dataclass(frozen=True)
class PeerCluster:
    """The cluster a namespace's clients are sent to, with the URLs of its ClusterData ("" when not set)."""

    name: str
    service_url: str
    service_url_tls: str
    broker_service_url: str
    broker_service_url_tls: str

    @classmethod
    def from_cluster_data(cls, name: str, data: Mapping[str, Any]) -> PeerCluster:
        def url(key: str) -> str:
            return str(data.get(key) or "")
        return cls(name, url("serviceUrl"), url("serviceUrlTls"), url("brokerServiceUrl"), url("brokerServiceUrlTls"))


def peer_cluster_for(namespace: str, local_cluster: str, policies: Mapping[str, Any] | None,
                     clusters: Mapping[str, Mapping[str, Any]], *, allow_deleted: bool = False) -> PeerCluster | None:
    """None when ``local_cluster`` serves ``namespace``; else the peer cluster its clients go to. Raises
    GlobalNamespaceError when neither. ``policies`` is the namespace's Policies (None: no such namespace); an unset
    ``replication_clusters`` is the local cluster, as this broker reads it everywhere (its own bootstrap and namespace
    creation always write it). ``allow_deleted``: Pulsar's lookups pass it for system topics."""
    if policies is None:
        raise GlobalNamespaceError(404, "Namespace not found")
    if policies.get("deleted") and not allow_deleted:
        raise GlobalNamespaceError(404, "Namespace is deleted")
    replication = list(policies.get("replication_clusters") or [local_cluster])
    allowed = list(policies.get(ALLOWED_CLUSTERS) or [])
    if local_cluster in replication or local_cluster in allowed:
        return None
    peers = (clusters.get(local_cluster) or {}).get(PEER_CLUSTER_NAMES) or []
    for peer in peers:
        if peer in replication or peer in allowed:
            data = clusters.get(peer)
            if data is None:
                raise GlobalNamespaceError(404, f"Peer cluster {peer} data not found")
            return PeerCluster.from_cluster_data(peer, data)
    raise GlobalNamespaceError(412, f"Namespace missing local cluster name in clusters list: local_cluster="
                                    f"{local_cluster} ns={namespace} clusters=[{', '.join(replication)}]")
