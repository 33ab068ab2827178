"""Admin REST v2: the placement policies the leader's load manager applies (``broker.cluster.placement``).

Anti-affinity groups (Pulsar's ``Namespaces`` resource; the group lives in the namespace's LocalPolicies,
``/admin/local-policies/{tenant}/{ns}``, field ``namespaceAntiAffinityGroup``):

- ``GET /admin/v2/namespaces/{tenant}/{ns}/antiAffinity``: the group, as Pulsar writes a ``String`` (the bare
  text); 204 when none;
- ``POST`` the same path, the group as the body (the bare text as Pulsar's admin client sends it, or a JSON
  string): a blank group is 412 "antiAffinityGroup can't be empty";
- ``DELETE`` the same path: no group;
- ``GET /admin/v2/namespaces/{cluster}/antiAffinity/{group}?tenant=...``: the namespaces of that tenant in the group
  (NamespacesBase.internalGetAntiAffinityNamespaces): no ``tenant`` is 400 "Tenant should not be null", a blank
  group 412 "anti-affinity group can't be empty.", then an unknown cluster 412 "Cluster ... does not exist."; the
  group is compared ignoring case; a tenant that does not exist has none (``[]``). For super users only when
  authorization is on (see ``broker.auth.http``: Pulsar 4.0.7's check there has no namespace to check).

Namespace isolation policies (Pulsar's ``Clusters`` resource; one node per cluster,
``/admin/clusters/{cluster}/namespaceIsolationPolicies``, a JSON map policy name -> ``NamespaceIsolationData``
``{"namespaces": [regex], "primary": [regex], "secondary": [regex], "auto_failover_policy": {"policy_type":
"min_available", "parameters": {"min_limit": "1", "usage_threshold": "80"}}}``):

- ``GET /admin/v2/clusters/{cluster}/namespaceIsolationPolicies``: the map; 404 "NamespaceIsolationPolicies for
  cluster ... does not exist" when none was ever set;
- ``GET .../namespaceIsolationPolicies/{policyName}``: one; 404 "Cannot find NamespaceIsolationPolicy ... for
  cluster ...";
- ``POST .../namespaceIsolationPolicies/{policyName}``: set it, checked as Pulsar's
  ``NamespaceIsolationDataImpl.validate`` (namespaces and primary not empty, primary and secondary valid regexes,
  an auto-failover policy ``min_available`` with integer ``min_limit`` and ``usage_threshold``), else 400; then the
  namespaces the old or new policy matches are unloaded, so that they are placed again (Pulsar's
  ``filterAndUnloadMatchedNamespaceAsync``);
- ``DELETE .../namespaceIsolationPolicies/{policyName}``: remove it (404 when the cluster has none);
- an unknown cluster: 412 "Cluster ... does not exist.".

Failure domains (Pulsar's ``Clusters`` resource, ``ClustersBase``; one node per domain,
``/admin/clusters/{cluster}/failureDomain/{domain}``, a ``FailureDomainImpl`` ``{"brokers": [broker id]}``, a
broker id being ``host:webport`` as in ``/admin/v2/brokers/{cluster}``), read by placement when
``failureDomainsEnabled``:

- ``GET /admin/v2/clusters/{cluster}/failureDomains``: domain name -> FailureDomainImpl (``{}`` when none; the
  cluster is not looked up, as in Pulsar's ``getFailureDomains``);
- ``GET .../failureDomains/{domainName}``: one; 404 "Domain ... for cluster ... does not exist";
- ``POST .../failureDomains/{domainName}``: create or replace it, 204; 409 "[broker, ...] already exists in
  <domain>" when one of its brokers is in another domain of the cluster (``validateBrokerExistsInOtherDomain``);
  400 when the body is not a JSON object whose ``brokers`` (absent: none) is a list of strings;
- ``DELETE .../failureDomains/{domainName}``: 200 (Pulsar's ``Response.ok()``), 404 "Domain-name ... or cluster
  ... does not exist";
- an unknown cluster: 412 "Cluster ... does not exist." (except the listing);
- a cluster's deletion deletes its domains (``internalDeleteClusterAsync``).

An unknown tenant or namespace is 404, as everywhere.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import HttpError, json_response, no_content, read_body
from broker.cluster.placement import matches_any
from broker.metadata.store import InUseError, NotFoundError

if TYPE_CHECKING:
    from broker.admin.http import WebService

log = logging.getLogger(__name__)

NS = "/admin/v2/namespaces/{tenant}/{ns}"
GROUP_LISTING = "/admin/v2/namespaces/{cluster}/antiAffinity/{group}"
ISOLATION = "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies"
DOMAINS = "/admin/v2/clusters/{cluster}/failureDomains"
FAILOVER_POLICIES = ("min_available",)


def check_isolation_data(doc: Any) -> dict[str, Any]:
    """NamespaceIsolationDataImpl.validate and MinAvailablePolicy's parameters; ValueError when wrong."""
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object")

    def regexes(key: str, non_empty: bool) -> list[str]:
        value = doc.get(key)
        if not isinstance(value, list) or (non_empty and not value) or \
                not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} must be a{' non-empty' if non_empty else ''} list of strings")
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{key}: invalid regex {pattern!r}: {exc}") from None
        return value

    namespaces = doc.get("namespaces")
    if not isinstance(namespaces, list) or not namespaces or not all(isinstance(v, str) for v in namespaces):
        raise ValueError("namespaces must be a non-empty list of strings")
    out: dict[str, Any] = {"namespaces": namespaces, "primary": regexes("primary", True),
                           "secondary": regexes("secondary", False)}
    policy = doc.get("auto_failover_policy")
    if not isinstance(policy, dict) or policy.get("policy_type") is None or policy.get("parameters") is None:
        raise ValueError("auto_failover_policy with policy_type and parameters is required")
    if policy["policy_type"] not in FAILOVER_POLICIES:
        raise ValueError(f"Unrecognized auto_failover_policy: {policy['policy_type']}")
    params = policy["parameters"]
    if not isinstance(params, dict):
        raise ValueError("auto_failover_policy.parameters must be an object")
    for key in ("min_limit", "usage_threshold"):
        try:
            int(str(params.get(key)))
        except ValueError:
            raise ValueError(f"auto_failover_policy.parameters.{key} must be an integer") from None
    out["auto_failover_policy"] = {"policy_type": policy["policy_type"],
                                   "parameters": {str(k): str(v) for k, v in params.items()}}
    return out


def check_failure_domain(doc: Any) -> list[str]:
    """The brokers of a FailureDomainImpl body; ValueError when it is not one."""
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object")
    brokers = doc.get("brokers")
    if brokers is None:
        return []
    if not isinstance(brokers, list) or not all(isinstance(b, str) for b in brokers):
        raise ValueError("brokers must be a list of strings")
    return brokers


class LoadPoliciesResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get(GROUP_LISTING, self.list_group)  # (first: its path has as many parts as NS + "/antiAffinity")
        r.add_get(NS + "/antiAffinity", self.get_group)
        r.add_post(NS + "/antiAffinity", self.set_group)
        r.add_delete(NS + "/antiAffinity", self.remove_group)
        r.add_get(ISOLATION, self.get_isolation_policies)
        # (the literal "brokers" before "{policy}", as JAX-RS prefers it: a policy named "brokers" is not readable
        # by name there either)
        r.add_get(ISOLATION + "/brokers", self.get_brokers_isolation)
        r.add_get(ISOLATION + "/brokers/{broker}", self.get_broker_isolation)
        r.add_get(ISOLATION + "/{policy}", self.get_isolation_policy)
        r.add_post(ISOLATION + "/{policy}", self.set_isolation_policy)
        r.add_delete(ISOLATION + "/{policy}", self.delete_isolation_policy)
        r.add_get(DOMAINS, self.get_failure_domains)
        r.add_get(DOMAINS + "/{domainName}", self.get_failure_domain)
        r.add_post(DOMAINS + "/{domainName}", self.set_failure_domain)
        r.add_delete(DOMAINS + "/{domainName}", self.delete_failure_domain)

    # -- isolation policies ----------------------------------------------------------------------------------
    def _cluster(self, request: web.Request) -> str:
        cluster = request.match_info["cluster"]
        if cluster not in self.web.metadata.clusters:
            raise HttpError(412, f"Cluster {cluster} does not exist.")
        return cluster

    async def get_isolation_policies(self, request: web.Request) -> web.Response:
        cluster = self._cluster(request)
        policies = self.web.metadata.isolation_policies(cluster)
        if policies is None:
            raise HttpError(404, f"NamespaceIsolationPolicies for cluster {cluster} does not exist")
        return json_response(policies)

    async def get_brokers_isolation(self, request: web.Request) -> web.Response:
        """Each active broker with the isolation policy naming it (ClustersBase.getBrokersWithNamespaceIsolationPolicy);
        404 when the cluster has no policies."""
        cluster = self._cluster(request)
        brokers = await self.web.active_broker_ids()
        policies = self._isolation_policies(cluster)
        return json_response([broker_isolation(broker, policies) for broker in brokers])

    async def get_broker_isolation(self, request: web.Request) -> web.Response:
        """One broker, named in the path (not looked up: Pulsar answers for any name), as in ``.../brokers``."""
        cluster = self._cluster(request)
        return json_response(broker_isolation(request.match_info["broker"], self._isolation_policies(cluster)))

    def _isolation_policies(self, cluster: str) -> dict[str, Any]:
        policies = self.web.metadata.isolation_policies(cluster)
        if policies is None:
            raise HttpError(404, f"NamespaceIsolationPolicies for cluster {cluster} does not exist")
        return dict(policies)

    def _named(self, request: web.Request) -> tuple[str, str]:
        """The cluster (412 when unknown) and the policy's name, from the path."""
        return self._cluster(request), request.match_info["policy"]

    async def get_isolation_policy(self, request: web.Request) -> web.Response:
        cluster, name = self._named(request)
        policy = self.web.metadata.isolation_policy(cluster, name)
        if policy is None:
            raise HttpError(404, f"Cannot find NamespaceIsolationPolicy {name} for cluster {cluster}")
        return json_response(policy)

    async def set_isolation_policy(self, request: web.Request) -> web.Response:
        cluster, name = self._named(request)
        body = await read_body(request)
        try:
            data = check_isolation_data(body)
        except ValueError as exc:
            raise HttpError(400, f"Invalid format of input policy data. policy: {name}; data: {body} ({exc})") \
                from None
        old = self.web.metadata.isolation_policy(cluster, name)
        await self.web.metadata.set_isolation_policy(cluster, name, data)
        await self._unload_matched(request, [data, old])
        return no_content()

    async def delete_isolation_policy(self, request: web.Request) -> web.Response:
        cluster, name = self._named(request)
        old = self.web.metadata.isolation_policy(cluster, name)
        try:
            await self.web.metadata.set_isolation_policy(cluster, name, None)
        except NotFoundError as exc:
            raise HttpError(404, str(exc)) from None
        await self._unload_matched(request, [old])
        return no_content()

    async def _unload_matched(self, request: web.Request, policies: list[Any]) -> None:
        """Unload the bundles of the namespaces the policies match (each by its owner), so placement applies the
        policies now rather than at the next move."""
        patterns = [p for policy in policies if isinstance(policy, dict) for p in policy.get("namespaces") or []]
        service = self.web.service
        ownership = service.ownership
        for ns in sorted(self.web.metadata.namespaces):
            if not any(_full_match(p, ns) for p in patterns):
                continue
            for bundle in service.metadata.namespace_bundles(ns).bundles:
                try:
                    if ownership.is_owned(bundle) or not ownership.distributed:
                        await ownership.unload_bundle(bundle)
                        continue
                    owner = await ownership.owner_of(bundle)
                    if owner is not None and owner.http_url:
                        await self.web.peers.call("PUT", f"{owner.http_url}/admin/v2/namespaces/{ns}/"
                                                         f"{bundle.range_name}/unload", request)
                except Exception as exc:  # (placement applies the policy at the bundle's next move anyway)
                    log.warning("unloading %s after an isolation policy change: %s", bundle, exc)

    # -- failure domains ---------------------------------------------------------------------------------------
    async def get_failure_domains(self, request: web.Request) -> web.Response:
        return json_response(self.web.metadata.failure_domains(request.match_info["cluster"]))

    async def get_failure_domain(self, request: web.Request) -> web.Response:
        cluster, domain = self._cluster(request), request.match_info["domainName"]
        found = self.web.metadata.failure_domain(cluster, domain)
        if found is None:
            raise HttpError(404, f"Domain {domain} for cluster {cluster} does not exist")
        return json_response(found)

    async def set_failure_domain(self, request: web.Request) -> web.Response:
        cluster, domain = self._cluster(request), request.match_info["domainName"]
        body = await read_body(request)
        try:
            brokers = check_failure_domain(body)
        except ValueError as exc:
            raise HttpError(400, f"Invalid failure domain data: {exc}") from None
        try:
            await self.web.metadata.set_failure_domain(cluster, domain, brokers)
        except InUseError as exc:
            raise HttpError(409, str(exc)) from None
        return no_content()

    async def delete_failure_domain(self, request: web.Request) -> web.Response:
        cluster, domain = self._cluster(request), request.match_info["domainName"]
        try:
            await self.web.metadata.delete_failure_domain(cluster, domain)
        except NotFoundError as exc:
            raise HttpError(404, str(exc)) from None
        return web.Response(status=200)

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
        """Pulsar's v2 Namespaces.getAntiAffinityNamespaces (NamespacesBase.internalGetAntiAffinityNamespaces), in
        its order: the tenant query parameter must be there (checkNotNull: 400), the group not blank (412), the
        cluster known (validateClusterExists: 412); then each namespace of the tenant (TenantResources.
        getListOfNamespaces, v1 names too) whose LocalPolicies' group equals it ignoring case. The cluster only
        has to exist: the groups are this cluster's (local policies)."""
        tenant = request.query.get("tenant")
        if tenant is None:
            raise HttpError(400, "Tenant should not be null")
        cluster, group = request.match_info["cluster"], request.match_info["group"]
        log.info("Finding namespaces for %s in %s", tenant, cluster)
        if not group.strip():
            raise HttpError(412, "anti-affinity group can't be empty.")
        self._cluster(request)
        metadata = self.web.metadata
        wanted = group.lower()
        return json_response([ns for ns in metadata.namespaces_of(tenant)
                              if (metadata.anti_affinity_group(ns) or "").lower() == wanted])


def broker_isolation(broker: str, policies: dict[str, Any]) -> dict[str, Any]:
    """Pulsar's BrokerNamespaceIsolationData of ``broker`` (its id as given, matched whole by the primary and secondary
    expressions, as NamespaceIsolationPolicyImpl.isPrimaryBroker / isSecondaryBroker): the namespaces of every policy
    that names it, and the name and primary flag of the last such policy (ClustersBase.internalGetBrokerNsIsolationData
    keeps overwriting them). Without a policy that names it, no policy name and not primary."""
    namespaces: list[str] = []
    name: str | None = None
    primary = False
    for policy_name, policy in policies.items():
        if not isinstance(policy, dict):
            continue
        is_primary = matches_any(policy.get("primary"), broker)
        if is_primary or matches_any(policy.get("secondary"), broker):
            namespaces.extend(n for n in policy.get("namespaces") or [] if isinstance(n, str))
            name, primary = policy_name, is_primary
    return {"brokerName": broker, "policyName": name, "namespaceRegex": namespaces, "primary": primary}


def _full_match(pattern: str, text: str) -> bool:
    try:
        return re.fullmatch(pattern, text) is not None
    except re.error:
        return False
