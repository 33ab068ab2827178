"""Admin REST v2: a namespace's replication clusters, properties and bundles (Pulsar's Namespaces
resource). Kept in its Policies document like the other policies.

- ``replication`` (GET / POST a list of clusters): which clusters the namespace is replicated to.
  One broker replicates nowhere, but setup scripts set it (``set-clusters``), so it is validated
  as Pulsar does and stored.
- ``properties`` (GET, PUT merges, DELETE clears) and ``property/{key}`` (GET, DELETE,
  ``PUT property/{key}/{value}``): free-form string properties.
- ``bundles`` (GET): the bundle boundaries the Policies document shows (one broker owns them all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import HttpError, json_response, no_content, read_body
from broker.metadata import policies as P
from broker.metadata import policy_table as T

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.metadata.store import BrokerMetadata

NS = "/admin/v2/namespaces/{tenant}/{ns}"
PROPERTIES = "properties"


def parse_replication_clusters(body: object) -> list[str]:
    if not isinstance(body, list) or not all(isinstance(c, str) for c in body):
        raise HttpError(400, "Replication clusters must be a JSON array of cluster names")
    if not body:
        raise HttpError(412, "ClusterIds should not be null or empty")
    if "global" in body:
        raise HttpError(412, "Cannot specify global in the list of replication clusters")
    return list(dict.fromkeys(body))


def check_replication_clusters(metadata: BrokerMetadata, tenant: str, clusters: list[str]) -> None:
    """Pulsar's checks: each cluster exists and is allowed for the tenant."""
    info = metadata.tenant(tenant)
    allowed = info.allowed_clusters if info is not None else ()
    for cluster in clusters:
        if cluster not in metadata.clusters:
            raise HttpError(412, f"Invalid cluster id: {cluster}")
        if cluster not in allowed:
            raise HttpError(403, f"Cluster [{cluster}] is not in the list of allowed clusters list "
                                 f"for tenant [{tenant}]")


class NamespaceMetadataResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get(NS + "/replication", self.get_replication)
        r.add_post(NS + "/replication", self.set_replication)
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
        check_replication_clusters(self.metadata, ns.split("/")[0], clusters)
        await self.metadata.set_policy(ns, T.REPLICATION_CLUSTERS.namespace_field, clusters)
        return no_content()

    # -- properties --------------------------------------------------------------------------------
    def _properties(self, ns: str) -> dict[str, str]:
        return dict(self.metadata.policy(ns, PROPERTIES) or {})

    async def get_properties(self, request: web.Request) -> web.Response:
        return json_response(self._properties(self.web.namespaces.namespace(request)))

    async def set_properties(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        body = await read_body(request)
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
            raise HttpError(400, "Namespace properties must be a JSON object of string values")
        await self.metadata.update_policy(ns, PROPERTIES, lambda stored: {**(stored or {}), **body})
        return no_content()

    async def clear_properties(self, request: web.Request) -> web.Response:
        await self.metadata.set_policy(self.web.namespaces.namespace(request), PROPERTIES, None)
        return no_content()

    async def get_property(self, request: web.Request) -> web.Response:
        value = self._properties(self.web.namespaces.namespace(request)).get(request.match_info["key"])
        return no_content() if value is None else web.Response(text=value)

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
