"""A cluster's data (Pulsar's ClusterData, PUT / POST /admin/v2/clusters/{cluster}): checked as Pulsar reads it.

Pulsar binds the body to ClusterDataImpl (strings, booleans, a set of peer cluster names, kept in order once each: a
value of another shape is a 400 from its JSON binding) and then checks its URLs
(ClusterDataImpl.checkPropertiesIfPresent: each one given must have its scheme, else a 400 with an example). Fields it
does not know are kept as given.

A cluster's peer list alone (POST /admin/v2/clusters/{cluster}/peers, ClustersBase.setPeerClusterNames) is checked as
Pulsar does too: each name an existing cluster other than the cluster itself (412s), duplicates dropped in order. Pure:
no I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

from broker.metadata.policy_values import PolicyError, check_object

# ClusterDataImpl's URLs: field -> (the schemes it may have, Pulsar's message for another).
URL_FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "serviceUrl": (("http",), "Illegal service url, example: http://pulsar.example.com:8080"),
    "serviceUrlTls": (("https",), "Illegal service tls url, example: https://pulsar.example.com:8443"),
    "brokerServiceUrl": (("pulsar",), "Illegal broker service url, example: pulsar://pulsar.example.com:6650"),
    "brokerServiceUrlTls": (("pulsar+ssl",),
                            "Illegal broker service tls url, example: pulsar+ssl://pulsar.example.com:6651"),
    "proxyServiceUrl": (("pulsar", "pulsar+ssl"), "Illegal proxy service url, example: "
                        "pulsar+ssl://ats-proxy.example.com:4443 or pulsar://ats-proxy.example.com:4080"),
}
# ClusterDataImpl's other strings (and its ProxyProtocol, an enum spelled as a string).
STRING_FIELDS = (
    "authenticationPlugin", "authenticationParameters", "proxyProtocol", "brokerClientTlsTrustStoreType",
    "brokerClientTlsTrustStore", "brokerClientTlsTrustStorePassword", "brokerClientTlsKeyStoreType",
    "brokerClientTlsKeyStore", "brokerClientTlsKeyStorePassword", "brokerClientTrustCertsFilePath",
    "brokerClientKeyFilePath", "brokerClientCertificateFilePath", "brokerClientSslFactoryPlugin",
    "brokerClientSslFactoryPluginParams", "listenerName",
)
BOOLEAN_FIELDS = ("brokerClientTlsEnabled", "tlsAllowInsecureConnection", "brokerClientTlsEnabledWithKeyStore")
PEER_CLUSTER_NAMES = "peerClusterNames"


def parse_cluster_data(body: Any) -> dict[str, Any]:
    """The cluster data to store, or PolicyError(400) for a body Pulsar would refuse."""
    if body is None:
        raise PolicyError(400, "cluster data is required")
    doc = check_object(body, "Cluster data")
    for key in (*URL_FIELDS, *STRING_FIELDS):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise PolicyError(400, f"Cluster data {key} must be a string, got {doc[key]!r}")
    for key in BOOLEAN_FIELDS:
        if doc.get(key) is not None and not isinstance(doc[key], bool):
            raise PolicyError(400, f"Cluster data {key} must be true or false, got {doc[key]!r}")
    peers = doc.get(PEER_CLUSTER_NAMES)
    if peers is not None and (not isinstance(peers, list) or not all(isinstance(p, str) for p in peers)):
        raise PolicyError(400, f"Cluster data {PEER_CLUSTER_NAMES} must be a JSON array of cluster names")
    if peers:
        doc = {**doc, PEER_CLUSTER_NAMES: list(dict.fromkeys(peers))}  # (a LinkedHashSet in ClusterDataImpl)
    for key, (schemes, message) in URL_FIELDS.items():
        url = doc.get(key)
        if url and not _has_scheme(url, schemes):
            raise PolicyError(400, message)
    return doc


def _has_scheme(url: str, schemes: tuple[str, ...]) -> bool:
    try:
        return urlsplit(url).scheme in schemes
    except ValueError:  # (what Java's URI refuses to parse is refused with the same message)
        return False


def parse_peer_cluster_names(body: Any, cluster: str, known: Collection[str]) -> list[str] | None:
    """The peer list to store for ``cluster`` (None: no body, which clears it, as Pulsar's null set), or PolicyError:
    400 for a body that is not a list of names, 412 for the cluster itself (compared ignoring case, as Pulsar) or a
    name ``known`` does not hold, in the list's order. An empty list is stored as one, without checks."""
    if body is None:
        return None
    if not isinstance(body, list) or not all(isinstance(p, str) for p in body):
        raise PolicyError(400, "Peer cluster names must be a JSON array of cluster names")
    peers = list(dict.fromkeys(body))  # (Pulsar binds them to a LinkedHashSet)
    for peer in peers:
        if peer.lower() == cluster.lower():
            raise PolicyError(412, f"{cluster} itself can't be part of peer-list")
        if peer not in known:
            raise PolicyError(412, f"Peer cluster {peer} does not exist")
    return peers
