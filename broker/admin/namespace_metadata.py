"""Admin REST v2: a namespace's replication clusters, properties and bundles (Pulsar's Namespaces
resource). Kept in its Policies document like the other policies.

- ``replication`` (GET / POST a list of clusters): which clusters the namespace is replicated to, validated as
  Pulsar does (each cluster exists, has no peer in the list, and is allowed for the namespace or else the tenant).
- ``allowedClusters`` (GET / POST a list of clusters, PIP-321): the clusters that may serve the namespace besides
  its replication clusters (``broker.metadata.global_namespace`` reads them); they must hold every replication
  cluster, be allowed for the tenant and have no peer among them.
- ``properties`` (GET, PUT merges, DELETE clears) and ``property/{key}`` (GET, DELETE,
  ``PUT property/{key}/{value}``): free-form string properties.
- ``bundles`` (GET): the bundle boundaries the Policies document shows (one broker owns them all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import HttpError, json_response, no_content, read_body, unset_value
from broker.metadata import policies as P
from broker.metadata import policy_table as T
from broker.metadata.cluster_data import PEER_CLUSTER_NAMES

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.metadata.store import BrokerMetadata

NS = "/admin/v2/namespaces/{tenant}/{ns}"
PROPERTIES = P.PROPERTIES


def parse_replication_clusters(body: object) -> list[str]:
    """A namespace's or a topic's replication clusters, in Pulsar's order: no list (no body, JSON null) or an
    empty one 412 (its CollectionUtils.isEmpty check comes first), a body of another shape 400 (its JSON binding),
    then "global" 412. Duplicates are dropped, in order."""
    if body is None or body == []:
        raise HttpError(412, "ClusterIds should not be null or empty")
    if not isinstance(body, list) or not all(isinstance(c, str) for c in body):
        raise HttpError(400, "Replication clusters must be a JSON array of cluster names")
    if "global" in body:
        raise HttpError(412, "Cannot specify global in the list of replication clusters")
    return list(dict.fromkeys(body))


def check_replication_clusters(metadata: BrokerMetadata, tenant: str, clusters: list[str],
                               namespace: str | None = None) -> None:
    """Pulsar's checks of each cluster, in its order (NamespacesBase / PersistentTopicsBase
    internalSetReplicationClusters): it exists (403), none of its peer clusters is in the list (409), and it is
    allowed: for the namespace when ``namespace`` has allowed clusters (PIP-321), else for the tenant (403)."""
    allowed_here = metadata.policy(namespace, P.ALLOWED_CLUSTERS) if namespace is not None else None
    for cluster in clusters:
        check_cluster_exists(metadata, cluster)
        check_peer_conflict(metadata, cluster, clusters)
        if allowed_here:
            if cluster not in allowed_here:
                raise HttpError(403, f"Cluster [{cluster}] is not in the list of allowed clusters list "
                                     f"for namespace [{namespace}]")
        else:
            check_cluster_for_tenant(metadata, tenant, cluster)


def check_cluster_exists(metadata: BrokerMetadata, cluster: str) -> None:
    if cluster not in metadata.clusters:
        raise HttpError(403, f"Invalid cluster id: {cluster}")


def check_cluster_for_tenant(metadata: BrokerMetadata, tenant: str, cluster: str) -> None:
    """PulsarWebResource.validateClusterForTenant."""
    info = metadata.tenant(tenant)
    if info is None:
        raise HttpError(404, "Tenant does not exist")
    if cluster not in info.allowed_clusters:
        raise HttpError(403, f"Cluster [{cluster}] is not in the list of allowed clusters list for tenant [{tenant}]")


def check_peer_conflict(metadata: BrokerMetadata, cluster: str, clusters: list[str]) -> None:
    """PulsarWebResource.validatePeerClusterConflict: a namespace's clusters hold no cluster with one of its peers
    (the peers are where its clients are sent instead: both at once would be two owners)."""
    peers = (metadata.clusters.get(cluster) or {}).get(PEER_CLUSTER_NAMES) or []
    conflict = [p for p in peers if p in clusters]
    if conflict:
        raise HttpError(409, f"{cluster}'s peer-clusters {java_set(conflict)} can't be part of replication-clusters "
                             f"{java_set(clusters)}")


def java_set(names: list[str]) -> str:
    """A set of names as Java prints one (its order is a hash's there; ours is the list's)."""
    return f"[{', '.join(names)}]"


class NamespaceMetadataResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get(NS + "/replication", self.get_replication)
        r.add_post(NS + "/replication", self.set_replication)
        r.add_get(NS + "/allowedClusters", self.get_allowed_clusters)
        r.add_post(NS + "/allowedClusters", self.set_allowed_clusters)
        r.add_get(NS + "/properties", self.get_properties)
        r.add_put(NS + "/properties", self.set_properties)
        r.add_delete(NS + "/properties", self.clear_properties)
        r.add_get(NS + "/property/{key}", self.get_property)
        r.add_put(NS + "/property/{key}/{value}", self.set_property)
        r.add_delete(NS + "/property/{key}", self.remove_property)
        r.add_get(NS + "/bundles", self.bundles)

    @property
    def metadata(self) -> BrokerMetadata:
        return self.web.metadata

    def _view(self, ns: str) -> dict[str, Any]:
        return P.policies_view(self.metadata.namespace_policies(ns), self.web.ctx.cluster,
                               self.metadata.namespace_bundles(ns))

    # -- replication clusters ----------------------------------------------------------------------
    async def get_replication(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        return json_response(self._view(ns)[T.REPLICATION_CLUSTERS.namespace_field])

    async def set_replication(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        clusters = parse_replication_clusters(await read_body(request))
        check_replication_clusters(self.metadata, ns.split("/")[0], clusters, ns)
        await self.metadata.set_policy(ns, T.REPLICATION_CLUSTERS.namespace_field, clusters)
        return no_content()

    # -- allowed clusters (PIP-321) ----------------------------------------------------------------------
    async def get_allowed_clusters(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        return json_response(self._view(ns)[P.ALLOWED_CLUSTERS])

    async def set_allowed_clusters(self, request: web.Request) -> web.Response:
        """NamespacesBase.internalSetNamespaceAllowedClusters, its checks in its order."""
        ns = self.web.namespaces.namespace(request)
        tenant = ns.split("/")[0]
        body = await read_body(request)
        if body is None:
            raise HttpError(400, "ClusterIds should not be null")
        if not isinstance(body, list) or not all(isinstance(c, str) for c in body):
            raise HttpError(400, "Allowed clusters must be a JSON array of cluster names")
        clusters = list(dict.fromkeys(body))
        for cluster in clusters:
            check_cluster_for_tenant(self.metadata, tenant, cluster)
        if "global" in clusters:
            raise HttpError(412, "Cannot specify global in the list of allowed clusters")
        for cluster in self._view(ns)[T.REPLICATION_CLUSTERS.namespace_field]:
            if cluster not in clusters:
                raise HttpError(400, f"Allowed clusters do not contain the replication cluster {cluster}. Please "
                                     "remove the replication cluster if the cluster is not allowed for this namespace")
        for cluster in clusters:
            check_cluster_exists(self.metadata, cluster)
            check_peer_conflict(self.metadata, cluster, clusters)
        await self.metadata.set_policy(ns, P.ALLOWED_CLUSTERS, clusters)
        return no_content()

    # -- properties --------------------------------------------------------------------------------
    def _properties(self, ns: str) -> dict[str, str]:
        return dict(self.metadata.policy(ns, PROPERTIES) or {})

    async def get_properties(self, request: web.Request) -> web.Response:
        return json_response(self._properties(self.web.namespaces.namespace(request)))

    async def set_properties(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        body = P.parse_properties(await read_body(request))
        await self.metadata.update_policy(ns, PROPERTIES, lambda stored: {**(stored or {}), **body})
        return no_content()

    async def clear_properties(self, request: web.Request) -> web.Response:
        await self.metadata.set_policy(self.web.namespaces.namespace(request), PROPERTIES, None)
        return no_content()

    async def get_property(self, request: web.Request) -> web.Response:
        value = self._properties(self.web.namespaces.namespace(request)).get(request.match_info["key"])
        return unset_value() if value is None else web.Response(text=value)

    async def set_property(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        m = request.match_info
        await self.metadata.update_policy(ns, PROPERTIES, lambda stored: {**(stored or {}), m["key"]: m["value"]})
        return no_content()

    async def remove_property(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        key = request.match_info["key"]
        await self.metadata.update_policy(
            ns, PROPERTIES, lambda stored: {k: v for k, v in (stored or {}).items() if k != key} or None)
        return no_content()

    # -- bundles -----------------------------------------------------------------------------------
    async def bundles(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        return json_response(self.metadata.namespace_bundles(ns).to_bundles_data())
