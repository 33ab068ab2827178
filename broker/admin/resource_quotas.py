"""Admin REST v2: resource quotas (Pulsar 4.0.7's ``ResourceQuotas`` resource over ``ResourceQuotasBase``;
``pulsar-admin resource-quotas get | set | reset-namespace-bundle-quota``).

A quota is Pulsar's ResourceQuota ``{"msgRateIn", "msgRateOut", "bandwidthIn", "bandwidthOut", "memory",
"dynamic"}`` (``broker.metadata.layout.ResourceQuota``): the load a bundle is expected to bring. Stored where Pulsar
stores them (``LoadBalanceResources.QuotaResources``), so a Pulsar broker on the same ZooKeeper reads ours and we
read its: a bundle's at ``/loadbalance/resource-quota/<tenant>/<ns>/<range>``, the default at
``/loadbalance/resource-quota/default``.

- ``GET /admin/v2/resource-quotas``: the default quota; where none is stored, Pulsar's hard-coded one
  (``BundlesQuotas.INITIAL_QUOTA``: 40 msg/s in, 120 out, 100,000 B/s in, 300,000 out, 80 MB, dynamic).
- ``POST /admin/v2/resource-quotas``: set it (the whole quota: a field not given is the constructor's, 0 or dynamic).
- ``GET .../resource-quotas/{tenant}/{ns}/{bundle}``: the bundle's quota, else the default one.
- ``POST`` the same path: set the bundle's quota, 204.
- ``DELETE`` the same path: remove it (the default applies again), 204; 404 "path ... not found." when it has none.

Checked in Pulsar's order: the body (400, as Jersey binds it before the method runs: not a JSON object, a rate that is
no number, ``dynamic`` no boolean); the namespace's name (412 "Namespace name is not valid"); a super user
(``validateSuperUserAccessAsync``, with authorization on: ``broker.auth.http``); the namespace (404 "Namespace does
not exist"); the bundle, one of the namespace's now (412 "Invalid bundle range: ...", "Cannot find bundle ... in the
bundles list", "Invalid upper boundary for bundle ..."). A range may be spelt as Java's ``Long.decode`` reads it
(``0x0_0x40000000``); it is stored under its canonical name. The bundle need not be owned, nor the namespace served
by this cluster: for a namespace of the v2 form Pulsar makes no ownership check here (``NamespaceName.isGlobal``), so
neither is there a redirect. A quota outlives its namespace and a split of its bundle, as in Pulsar.

Where ours differs on purpose: a POST with no body (or ``null``) is 400, where Pulsar 4.0.7 writes ``null`` into the
node (204 when it can, 500 after, and every later POST of that quota fails until the node is deleted); a rate that
is not finite is 400 (Pulsar stores "NaN"). Pulsar's ``validatePoliciesReadOnlyAccess`` (a read-only flag this
broker has not) has no counterpart.

Who reads the quotas, in Pulsar 4.0.7 (its bytecode): nothing enforces them; they are load estimates for placement.

- Its default load manager, ``ModularLoadManagerImpl``, reads a bundle's own quota (never the default one) in
  ``getBundleDataOrDefault`` only: the starting estimate of a bundle that has no stored ``/loadbalance/bundle-data``,
  when the leader first sees the bundle in a report (``updateBundleData``) and when it places the bundle
  (``selectBroker``). The estimate starts as full windows (10 short-term samples, 1000 long-term) of the quota's
  rates and throughputs, which measured samples then move as running averages. Its
  ``writeResourceQuotasToZooKeeper`` writes bundle data, not quotas.
- The older ``SimpleLoadManagerImpl`` (chosen with ``loadManagerClassName``) reads them, a bundle's else the
  default, to rank brokers and place bundles (``doLoadRanking``, ``findBrokerForPlacement``); as leader it writes
  measured values over the ``dynamic`` ones, the default one too, every
  ``loadBalancerResourceQuotaUpdateIntervalMinutes`` (``writeResourceQuotasToZooKeeper``).
- The ``ExtensibleLoadManagerImpl`` does not read them.

This broker's load manager (``broker.cluster``) keeps no bundle data in the store and starts every bundle it has not
seen at Pulsar's default load (``broker.cluster.load_history.DEFAULT_LOAD``), which its first sample replaces; it
does not read the quotas. This resource stores and answers them, for Pulsar's brokers on the same ZooKeeper and for
the tools that set them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from broker.admin.common import HttpError, check_namespace_name, json_response, no_content, read_body
from broker.auth.http import check_deferred
from broker.cluster.bundles import NamespaceBundle
from broker.cluster.operations import BundleOperationError
from broker.metadata.layout import ResourceQuota

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.metadata.store import BrokerMetadata

ROOT = "/admin/v2/resource-quotas"
BUNDLE = ROOT + "/{tenant}/{ns}/{bundle}"


async def read_quota(request: web.Request) -> ResourceQuota:
    """The request's ResourceQuota (400 with the reason when the body is none)."""
    body = await read_body(request)
    if body is None:
        raise HttpError(400, "A ResourceQuota is required: a JSON object {msgRateIn, msgRateOut, bandwidthIn, "
                             "bandwidthOut, memory, dynamic}")
    try:
        return ResourceQuota.from_json(body)
    except ValueError as exc:
        raise HttpError(400, f"Invalid resource quota: {exc}") from None


class ResourceQuotasResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get(ROOT, self.get_default)
        r.add_post(ROOT, self.set_default)
        r.add_get(BUNDLE, self.get_bundle_quota)
        r.add_post(BUNDLE, self.set_bundle_quota)
        r.add_delete(BUNDLE, self.remove_bundle_quota)

    @property
    def metadata(self) -> BrokerMetadata:
        return self.web.metadata

    async def get_default(self, request: web.Request) -> web.Response:
        await check_deferred(request)
        return json_response(self.metadata.default_resource_quota().to_json())

    async def set_default(self, request: web.Request) -> web.Response:
        quota = await read_quota(request)
        await check_deferred(request)
        await self.metadata.set_default_resource_quota(quota)
        return no_content()

    async def get_bundle_quota(self, request: web.Request) -> web.Response:
        bundle = await self._bundle(request)
        return json_response(self.metadata.resource_quota(bundle).to_json())

    async def set_bundle_quota(self, request: web.Request) -> web.Response:
        quota = await read_quota(request)
        await self.metadata.set_resource_quota(await self._bundle(request), quota)
        return no_content()

    async def remove_bundle_quota(self, request: web.Request) -> web.Response:
        await self.metadata.delete_resource_quota(await self._bundle(request))
        return no_content()

    async def _bundle(self, request: web.Request) -> NamespaceBundle:
        """The bundle of the path, checked in Pulsar's order (ResourceQuotas' validateNamespaceName, then
        ResourceQuotasBase.getNamespaceBundleRangeAsync): the namespace's name, a super user, the namespace, the
        range."""
        check_namespace_name(request.match_info["tenant"], request.match_info["ns"])
        await check_deferred(request)
        namespace = self.web.namespaces.namespace(request)
        try:
            return self.web.bundles.ops.bundle(namespace, request.match_info["bundle"])
        except BundleOperationError as exc:
            raise HttpError(exc.status, exc.message) from None
