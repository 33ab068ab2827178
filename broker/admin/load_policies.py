"""Admin REST v2: the placement policies the leader's load manager applies (``broker.cluster.placement``).

Anti-affinity groups (Pulsar's ``Namespaces`` resource; the group lives in the namespace's LocalPolicies,
``/admin/local-policies/{tenant}/{ns}``, field ``namespaceAntiAffinityGroup``):

- ``GET /admin/v2/namespaces/{tenant}/{ns}/antiAffinity``: the group, as Pulsar writes a ``String`` (the bare
  text); 204 when none;
- ``POST`` the same path, the group as the body (the bare text as Pulsar's admin client sends it, or a JSON
  string): a blank group is 412 "antiAffinityGroup can't be empty";
- ``DELETE`` the same path: no group;
- ``GET /admin/v2/namespaces/{cluster}/antiAffinity/{group}?tenant=``: the tenant's namespaces in the group;
  412 "Cluster ... does not exist." for an unknown cluster (Pulsar's validateClusterExists); without ``tenant``
  Pulsar fails a null check (a 500), we answer 412 "Tenant should not be null".

An unknown tenant or namespace is 404, as everywhere.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from broker.admin.common import HttpError, json_response, no_content

if TYPE_CHECKING:
    from broker.admin.http import WebService

NS = "/admin/v2/namespaces/{tenant}/{ns}"


class LoadPoliciesResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get("/admin/v2/namespaces/{cluster}/antiAffinity/{group}", self.list_group)
        r.add_get(NS + "/antiAffinity", self.get_group)
        r.add_post(NS + "/antiAffinity", self.set_group)
        r.add_delete(NS + "/antiAffinity", self.remove_group)

    async def get_group(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        group = self.web.metadata.anti_affinity_group(ns)
        if group is None:
            return no_content()
        return web.Response(text=group, content_type="application/json")

    async def set_group(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        text = (await request.read()).decode("utf-8", errors="replace").strip()
        if text.startswith('"'):
            try:
                text = str(json.loads(text)).strip()
            except ValueError:
                raise HttpError(400, "The anti-affinity group must be text or a JSON string") from None
        if not text:
            raise HttpError(412, "antiAffinityGroup can't be empty")
        await self.web.metadata.set_anti_affinity_group(ns, text)
        return no_content()

    async def remove_group(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        await self.web.metadata.set_anti_affinity_group(ns, None)
        return no_content()

    async def list_group(self, request: web.Request) -> web.Response:
        cluster = request.match_info["cluster"]
        tenant = request.query.get("tenant", "")
        if not tenant:
            raise HttpError(412, "Tenant should not be null")
        if not request.match_info["group"].strip():
            raise HttpError(412, "anti-affinity group can't be empty.")
        if cluster not in self.web.metadata.clusters:
            raise HttpError(412, f"Cluster {cluster} does not exist.")
        if tenant not in self.web.metadata.tenants:
            raise HttpError(404, "Tenant does not exist")
        return json_response(self.web.metadata.anti_affinity_namespaces(tenant, request.match_info["group"]))
