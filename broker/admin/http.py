"""HTTP side (aiohttp): admin REST v2, HTTP lookup and Prometheus /metrics.

The web service owns the stats sampler (rates over statsUpdateFrequencyInSecs) and its periodic
task: started with the HTTP server, cancelled and awaited when it stops. Resources:
``namespaces`` (namespaces and policies), ``topics`` (topics, subscriptions, stats), ``schemas``;
brokers, clusters, tenants and lookup are here. Error statuses: see ``broker.admin.common``.

Everything a handler reaches comes through one ``AdminContext`` (``broker.admin.context``): the
service, the metadata store (changed only through its named operations), the configuration, the
security settings and the serving process's ports and URLs. This package does not import
``broker.server``; the server builds the context and starts the web service with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import ssl
from typing import TYPE_CHECKING
from urllib.parse import quote

from aiohttp import web
from yarl import URL

from broker.admin.bookies import BookiesResource
from broker.admin.broker_stats import BrokerStatsResource
from broker.admin.bundles import BundlesResource
from broker.admin.cluster import (
    ownership_middleware,
    redirect_to_broker,
    validate_cluster_first,
    validate_cluster_ownership,
    validate_global_namespace,
)
from broker.admin.common import (
    HttpError,
    check_name,
    json_errors,
    json_response,
    no_content,
    parse_topic_name,
    pulsar_topic_in_path,
    query_flag,
    read_body,
    resumed_empty,
    unset_value,
)
from broker.admin.console import ConsoleResource
from broker.admin.context import AdminContext
from broker.admin.global_policies import GlobalPolicyCopies
from broker.admin.load_policies import LoadPoliciesResource
from broker.admin.metrics import make_registry
from broker.admin.namespace_metadata import NamespaceMetadataResource
from broker.admin.namespace_ops import NamespaceOperationsResource
from broker.admin.namespaces import NamespacesResource
from broker.admin.offload import OffloadResource
from broker.admin.otel import OpenTelemetryExport
from broker.admin.peers import PeerAdmin, path_segment
from broker.admin.permissions import PermissionsResource
from broker.admin.replicated_topics import ReplicatedPartitions
from broker.admin.resource_quotas import ResourceQuotasResource
from broker.admin.schemas import SchemasResource
from broker.admin.stats import StatsSampler
from broker.admin.topic_policies import TopicPoliciesResource
from broker.admin.topics import TopicsResource
from broker.admin.transactions import TransactionsResource
from broker.auth.http import security_middleware
from broker.config import ConfigError
from broker.metadata.cluster_data import PEER_CLUSTER_NAMES, parse_cluster_data, parse_peer_cluster_names
from broker.metadata.store import AlreadyExistsError, InUseError, TenantInfo, broker_metadata_store_url
from broker.service.dynamic_config import DYNAMIC, DynamicConfiguration, NotDynamicError
from broker.service.periodic import PeriodicTask
from broker.topic_name import TopicName, blank
from broker.version import __version__
from managed_ledger.bookkeeper.factory import bookkeeper_zookeeper
from managed_ledger.bookkeeper.metadata import DEFAULT_LEDGERS_ROOT

if TYPE_CHECKING:
    from broker.metadata.store import BrokerMetadata
    from broker.service.broker_service import BrokerService
    from broker.websocket.service import WebSocketService

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class WebService:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx
        # json_errors is outermost: it turns the security middleware's refusals into JSON 401/403.
        # pulsar_topic_in_path: a topic named in the path as Pulsar decodes it ("+" a space), for all that follow.
        # ownership_middleware (cluster mode) sends a call on a topic to its owner, after the security checks.
        security = security_middleware(ctx.security, ctx.config, lambda: ctx.broker_id,
                                       lambda request: validate_cluster_first(ctx.service, request))
        self.app = web.Application(middlewares=[json_errors, pulsar_topic_in_path, security,
                                                 ownership_middleware(ctx)])
        self._runner: web.AppRunner | None = None
        self.sampler = StatsSampler(ctx)
        self._sampling = PeriodicTask("stats-sampler", ctx.config.statsUpdateFrequencyInSecs,
                                      self.sampler.sample_async)
        self._metrics = make_registry(ctx, self.sampler)
        self.otel = OpenTelemetryExport(ctx, self.sampler)  # off unless OTEL_SDK_DISABLED=false
        # Calls to the other brokers' admin API (cluster mode: operations over many topics go to each owner).
        self.peers = PeerAdmin(ctx.config)
        # Partitioned topics made and grown on the namespace's other replication clusters too.
        self.replicated = ReplicatedPartitions(self)
        self.global_policies = GlobalPolicyCopies(self)
        self.namespaces = NamespacesResource(self)
        self.topics = TopicsResource(self)
        self.schemas = SchemasResource(self)
        self.topic_policies = TopicPoliciesResource(self)
        self.bundles = BundlesResource(self)
        r = self.app.router
        r.add_get("/admin/v2/brokers/health", self.health)
        r.add_get("/admin/v2/brokers/ready", self.ready)
        r.add_get("/admin/v2/brokers/leaderBroker", self.leader_broker)
        r.add_get("/admin/v2/brokers/version", self.version)
        r.add_get("/admin/v2/brokers/configuration", self.dynamic_configuration)
        r.add_get("/admin/v2/brokers/configuration/values", self.dynamic_configuration_values)
        r.add_post("/admin/v2/brokers/configuration/{configName}/{configValue}", self.update_dynamic_configuration)
        r.add_delete("/admin/v2/brokers/configuration/{configName}", self.delete_dynamic_configuration)
        r.add_get("/admin/v2/brokers/configuration/runtime", self.runtime_configuration)
        r.add_get("/admin/v2/brokers/internal-configuration", self.internal_configuration)
        r.add_get("/admin/v2/brokers/backlog-quota-check", self.backlog_quota_check)
        r.add_post("/admin/v2/brokers/shutdown", self.shutdown)
        r.add_get("/admin/v2/brokers", self.brokers)
        r.add_get("/admin/v2/brokers/{cluster}", self.brokers)
        r.add_get("/status.html", self.status)
        r.add_get("/metrics", self.metrics)
        r.add_get("/metrics/", self.metrics)
        r.add_get("/admin/v2/clusters", self.clusters)
        r.add_get("/admin/v2/clusters/{cluster}", self.get_cluster)
        r.add_put("/admin/v2/clusters/{cluster}", self.put_cluster)
        r.add_post("/admin/v2/clusters/{cluster}", self.put_cluster)
        r.add_delete("/admin/v2/clusters/{cluster}", self.delete_cluster)
        r.add_get("/admin/v2/clusters/{cluster}/peers", self.get_peer_clusters)
        r.add_post("/admin/v2/clusters/{cluster}/peers", self.set_peer_clusters)
        r.add_get("/admin/v2/tenants", self.tenants)
        r.add_get("/admin/v2/tenants/{tenant}", self.get_tenant)
        r.add_put("/admin/v2/tenants/{tenant}", self.put_tenant)
        r.add_post("/admin/v2/tenants/{tenant}", self.update_tenant)
        r.add_delete("/admin/v2/tenants/{tenant}", self.delete_tenant)
        # (before the lookup's route, whose topic may hold a "/": Jersey too takes the literal "bundle" first)
        r.add_get("/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}/bundle", self.topic_bundle)
        r.add_get("/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic:.+}", self.lookup)
        self.console = ConsoleResource(self)
        self.console.register(r, ctx.config.webConsoleEnabled)  # (before the namespace routes)
        LoadPoliciesResource(self).register(r)
        self.offload = OffloadResource(self)
        self.offload.register(r)
        self.namespaces.register(r)
        self.namespace_ops = NamespaceOperationsResource(self)
        self.namespace_ops.register(r)
        self.bundles.register(r)
        BrokerStatsResource(self).register(r)
        BookiesResource(self).register(r)
        ResourceQuotasResource(self).register(r)
        TransactionsResource(self).register(r)
        NamespaceMetadataResource(self).register(r)
        PermissionsResource(self).register(r)
        self.schemas.register(r)
        self.topic_policies.register(r)  # (before the topic routes: more specific paths)
        self.offload.register_topics(r)
        self.topics.register(r)
        self.topic_policies.register_last(r)
        self.namespace_ops.register_last(r)  # (DELETE .../{bundle}: after every DELETE .../{policy})
        # The WebSocket API (webSocketServiceEnabled; off: /ws/ answers 404, and nothing of it is loaded).
        self.websocket: WebSocketService | None = None
        if ctx.config.webSocketServiceEnabled:
            from broker.websocket.service import WebSocketService

            self.websocket = WebSocketService(ctx)
            self.websocket.register(r)

    async def start(self, host: str, port: int | None, tls_port: int | None = None,
                    tls_context: ssl.SSLContext | None = None) -> tuple[int, int]:
        """Listen on the HTTP and/or HTTPS port (None = off); the bound ports, 0 for one that is off."""
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        bound = []
        for p, ctx in ((port, None), (tls_port, tls_context)):
            if p is None:
                bound.append(0)
                continue
            site = web.TCPSite(self._runner, host, p, reuse_address=True, ssl_context=ctx)
            await site.start()
            sockets = getattr(site._server, "sockets", None)
            assert sockets, "HTTP server did not bind"
            bound.append(int(sockets[0].getsockname()[1]))
        self._sampling.start()
        self.otel.start()
        self.global_policies.start()
        return bound[0], bound[1]

    async def stop(self) -> None:
        if self.websocket is not None:
            await self.websocket.close()
        await self.otel.stop()
        await self._sampling.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.replicated.close()
        await self.global_policies.close()
        await self.peers.close()

    @property
    def service(self) -> BrokerService:
        return self.ctx.service

    @property
    def metadata(self) -> BrokerMetadata:
        return self.ctx.metadata

    @property
    def broker_id(self) -> str:
        return self.ctx.broker_id

    # -- broker ------------------------------------------------------------------------------------
    async def ready(self, request: web.Request) -> web.Response:
        if not self.ctx.process.ready:
            raise HttpError(503, "Broker is not ready")
        return web.Response(text="ok")

    async def health(self, request: web.Request) -> web.Response:
        """Pulsar's health check: ready, and a message sent to the broker's heartbeat topic read back in time
        (broker.service.health). ``brokerId`` names the broker to check: another one gets the 307 there, an unknown
        one 404 (maybeRedirectToBroker); ``topicVersion`` is V1 or V2 (both check through the V2 topic), anything
        else 404, as Jersey answers an enum query parameter it cannot convert."""
        if not self.ctx.process.ready:
            raise HttpError(503, "Broker is not ready")
        if request.query.get("topicVersion", "V1") not in ("V1", "V2"):
            raise HttpError(404, f"Invalid topicVersion {request.query['topicVersion']!r}: V1 or V2")
        broker_id = request.query.get("brokerId", "")
        if not blank(broker_id):
            await redirect_to_broker(self.ctx, request, broker_id)
        try:
            await self.service.health_check()
        except TimeoutError:
            raise HttpError(500, f"Health check timed out after {self.service.health_check_timeout_s:g} s: "
                                 "the message sent to the heartbeat topic was not read back") from None
        except Exception as exc:  # (the reason goes to the prober: a fenced ledger, a full disk...)
            raise HttpError(500, f"Health check failed: {exc}") from None
        return web.Response(text="ok")

    async def status(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def brokers(self, request: web.Request) -> web.Response:
        """The active brokers' ids: of the cluster named (BrokersBase.getActiveBrokers, after its check of the
        cluster: validateClusterOwnershipAsync), or of this broker's (``/admin/v2/brokers``)."""
        validate_cluster_ownership(self.ctx, request, request.match_info.get("cluster"))
        return json_response(await self.active_broker_ids())

    async def shutdown(self, request: web.Request) -> web.StreamResponse:
        """``POST /admin/v2/brokers/shutdown`` (pulsar-admin ``brokers shutdown``, Pulsar's
        BrokersBase.shutDownBrokerGracefully): this broker stops as on SIGTERM. It stops accepting, releases its
        bundles (cluster mode: their topics close and their clients move to the other brokers), closes its
        connections and storage, and the process ends. 204 is sent first (Pulsar answers once its close is under
        way, its web service last). ``maxConcurrentUnloadPerSec`` and ``forcedTerminateTopic`` are read as Pulsar
        reads them (an int, a boolean; 404 for an int it cannot read, as JAX-RS answers); ours releases its bundles
        together, as at any stop, not at that rate."""
        raw = request.query.get("maxConcurrentUnloadPerSec")
        if raw is not None and not re.fullmatch(r"[+-]?[0-9]{1,10}", raw):
            raise HttpError(404, f"Query parameter maxConcurrentUnloadPerSec must be a Java int, got {raw!r}")
        log.warning("shutdown requested over the admin API (maxConcurrentUnloadPerSec=%s, forcedTerminateTopic=%s)",
                    raw or 0, request.query.get("forcedTerminateTopic", "true"))
        response = web.Response(status=204)
        await response.prepare(request)
        await response.write_eof()
        self.ctx.process.request_shutdown()
        return response

    async def active_broker_ids(self) -> list[str]:
        """The ids of the cluster's active brokers: every registered one in cluster mode, else this one."""
        registry = self.service.registry
        if registry is not None:
            return sorted(await registry.active_brokers())
        return [self.broker_id]

    async def leader_broker(self, request: web.Request) -> web.Response:
        registry = self.service.registry
        if registry is not None:  # cluster mode: the elected one
            leader = registry.leader
            if leader is None:
                raise HttpError(404, "Couldn't find leader broker")  # (Pulsar's words)
            return json_response({"serviceUrl": leader.service_url, "brokerId": leader.broker_id})
        return json_response({"serviceUrl": self.ctx.process.web_url, "brokerId": self.broker_id})

    async def version(self, request: web.Request) -> web.Response:
        return web.Response(text=__version__)  # (a bare string, as Pulsar answers)

    async def dynamic_configuration(self, request: web.Request) -> web.Response:
        """The settings that can be changed while the brokers run (pulsar-admin brokers list-dynamic-config):
        ``broker.service.dynamic_config.DYNAMIC``."""
        return json_response(sorted(DYNAMIC))

    async def dynamic_configuration_values(self, request: web.Request) -> web.Response:
        """The dynamic settings stored for the cluster (get-all-dynamic-config): setting -> its value as text, as
        stored now (in cluster mode read from the store: another broker may have just changed them)."""
        metadata = self.service.metadata
        if self.service.distributed:
            await metadata.read_dynamic_configuration()
        return json_response(dict(metadata.dynamic_configuration))

    async def update_dynamic_configuration(self, request: web.Request) -> web.Response:
        """update-dynamic-config: stored for every broker of the cluster; this one has applied it when this answers
        (its own write notifies it at once), the others as the store tells them. A value the setting does not
        accept is refused here (Pulsar stores it, then logs that it cannot apply it)."""
        name, value = request.match_info["configName"], request.match_info["configValue"]
        try:
            DynamicConfiguration.check(name, value)
        except NotDynamicError:
            raise HttpError(412, "Can't update non-dynamic configuration") from None
        except ConfigError as exc:
            raise HttpError(412, f"Invalid dynamic-config value: {exc}") from None
        await self.service.metadata.update_dynamic_configuration(lambda stored: stored.__setitem__(name, value))
        return resumed_empty()  # (Pulsar's answer: 200, no body)

    async def delete_dynamic_configuration(self, request: web.Request) -> web.Response:
        """delete-dynamic-config: the setting goes back, on every broker, to the value it started with."""
        name = request.match_info["configName"]
        if name not in DYNAMIC:
            raise HttpError(412, "Can't delete non-dynamic configuration")
        await self.service.metadata.update_dynamic_configuration(lambda stored: stored.pop(name, None))
        return resumed_empty()

    async def internal_configuration(self, request: web.Request) -> web.Response:
        """Pulsar's InternalConfigurationData (``pulsar-admin brokers get-internal-config``): where the metadata is
        (the configuration store is the same store here) and BookKeeper's ledgers root (Pulsar's default,
        ``/ledgers``, unless bookkeeperMetadataServiceUri names another); that URI too when it is set."""
        cfg = self.ctx.config
        url = broker_metadata_store_url(cfg.metadataStoreUrl, self.service.data_dir)
        data = {"zookeeperServers": url, "configurationStoreServers": url, "metadataStoreUrl": url,
                "configurationMetadataStoreUrl": url, "ledgersRootPath": DEFAULT_LEDGERS_ROOT}
        uri = cfg.bookkeeperMetadataServiceUri.strip()
        if uri:
            try:
                data["ledgersRootPath"] = bookkeeper_zookeeper(uri, cfg.metadataStoreUrl)[1]
            except ValueError:  # (refused at start for bookkeeper storage; another storage does not use it)
                pass
            data["bookkeeperMetadataServiceUri"] = uri
        return json_response(data)

    async def runtime_configuration(self, request: web.Request) -> web.Response:
        """Every setting in force, as strings (Pulsar's shape). Secrets (fields kept out of the
        config's repr, such as tokenSecretKey) are left out."""
        cfg = self.ctx.config
        values = {}
        for f in dataclasses.fields(cfg):
            if not f.repr:
                continue
            value = getattr(cfg, f.name)
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, list):
                text = ",".join(str(v) for v in value)
            else:
                text = "" if value is None else str(value)
            values[f.name] = text
        return json_response(values)

    async def backlog_quota_check(self, request: web.Request) -> web.Response:
        """Run the backlog quota check on every loaded topic now."""
        await self.service.backlog_quotas.check_all()
        return no_content()

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        # Streamed family by family (chunked): 10,000 topics make ~130 MB of text.
        response = web.StreamResponse(headers={"Content-Type": METRICS_CONTENT_TYPE})
        await response.prepare(request)
        try:
            async with contextlib.aclosing(self._metrics.stream()) as chunks:
                async for chunk in chunks:
                    await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:
            # The scraper went away mid-stream (its timeout, a closed connection): nothing to answer, nothing wrong
            # here. (Raised on, it was logged as a failed request with its traceback, and aiohttp tried a 500.)
            log.debug("GET %s: the client closed the connection during the scrape", request.path)
        return response

    # -- clusters / tenants ------------------------------------------------------------------------
    async def clusters(self, request: web.Request) -> web.Response:
        return json_response(sorted(self.metadata.clusters))

    async def get_cluster(self, request: web.Request) -> web.Response:
        name = request.match_info["cluster"]
        data = self.metadata.clusters.get(name)
        if data is None:
            raise HttpError(404, "Cluster does not exist")
        p = self.ctx.process
        urls = {"serviceUrl": p.web_url, "brokerServiceUrl": p.service_url}
        if p.tls_port or p.web_tls_port:
            urls.update(serviceUrlTls=p.web_url_tls, brokerServiceUrlTls=p.service_url_tls)
        return json_response({**urls, **CLUSTER_DATA_DEFAULTS, **data})

    async def put_cluster(self, request: web.Request) -> web.Response:
        """PUT creates a cluster (409 if it exists), POST updates one (404 if it does not)."""
        name = request.match_info["cluster"]
        raw = await read_body(request)
        # (400 as ClustersBase / ClusterDataImpl refuse it: a malformed body before the name, a missing one after)
        body = None if raw is None else parse_cluster_data(raw)
        if request.method == "PUT":
            check_name(name, "cluster")  # (ClustersBase.createCluster: the name before the missing body's 400)
        if body is None:
            body = parse_cluster_data(raw)
        if request.method == "PUT":
            await self.metadata.create_cluster(name, body)
        else:
            await self.metadata.update_cluster(name, body)
        return no_content()

    async def delete_cluster(self, request: web.Request) -> web.Response:
        """Refused (412) while a tenant may use the cluster or a namespace replicates to it."""
        try:
            await self.metadata.delete_cluster(request.match_info["cluster"])
        except InUseError as exc:
            raise HttpError(412, exc.message) from None
        return no_content()

    async def get_peer_clusters(self, request: web.Request) -> web.Response:
        """ClustersBase.getPeerCluster: the stored list (200 with no body when the cluster has none set)."""
        data = self.metadata.clusters.get(request.match_info["cluster"])
        if data is None:
            raise HttpError(404, "Cluster does not exist")
        peers = data.get(PEER_CLUSTER_NAMES)
        return unset_value() if peers is None else json_response(peers)

    async def set_peer_clusters(self, request: web.Request) -> web.Response:
        """ClustersBase.setPeerClusterNames: the peers are checked before the cluster is looked up (a missing cluster
        with a bad list is the list's 412)."""
        name = request.match_info["cluster"]
        peers = parse_peer_cluster_names(await read_body(request), name, self.metadata.clusters)
        await self.metadata.set_peer_clusters(name, peers)
        return no_content()

    async def tenants(self, request: web.Request) -> web.Response:
        return json_response(sorted(self.metadata.tenants))

    async def get_tenant(self, request: web.Request) -> web.Response:
        return json_response(self.metadata.tenants[self.namespaces.tenant(request)])

    @staticmethod
    def _tenant_body(body: object) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None] | None:
        """A TenantInfo body's roles and clusters (None: no body; roles or clusters None: not given), or the 400
        Jackson's reading gives before TenantsBase runs."""
        if body is None:
            return None
        if not isinstance(body, dict):
            raise HttpError(400, "Tenant info must be a JSON object")
        roles, clusters = body.get("adminRoles"), body.get("allowedClusters")
        return (None if roles is None else _names(roles, "adminRoles"),
                None if clusters is None else _names(clusters, "allowedClusters"))

    @staticmethod
    def _tenant_info(parsed: tuple[tuple[str, ...] | None, tuple[str, ...] | None] | None) -> TenantInfo:
        """TenantsBase.validateClustersAsync's 412s: no body, no clusters, an empty list of them."""
        if parsed is None:
            raise HttpError(412, "TenantInfo is null")
        roles, clusters = parsed
        if clusters is None:
            raise HttpError(412, "Clusters cannot be null")
        if not clusters:
            raise HttpError(412, "Clusters can not be empty")
        return TenantInfo(roles, clusters)

    async def put_tenant(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        parsed = self._tenant_body(await read_body(request))
        check_name(tenant, "tenant")  # (TenantsBase.createTenant: the name, then the body's clusters, then 409)
        info = self._tenant_info(parsed)
        try:
            await self.metadata.create_tenant(tenant, info)
        except AlreadyExistsError:
            raise HttpError(409, "Tenant already exist") from None  # (Pulsar's words)
        return no_content()

    # (A missing tenant's 404 has the words Pulsar's TenantsBase gives on each route.)
    async def update_tenant(self, request: web.Request) -> web.Response:
        info = self._tenant_info(self._tenant_body(await read_body(request)))  # (before the tenant's 404, as Pulsar)
        tenant = self.namespaces.tenant(request, f"Tenant {request.match_info['tenant']} not found")
        await self.metadata.update_tenant(tenant, info)
        return no_content()

    async def delete_tenant(self, request: web.Request) -> web.Response:
        await self.metadata.delete_tenant(self.namespaces.tenant(request, "Tenant doesn't exist"))
        return no_content()

    # -- lookup ------------------------------------------------------------------------------------
    async def cluster_lookup(self, request: web.Request, name: TopicName) -> web.Response:
        """Cluster mode (TopicLookupBase.internalLookupTopicAsync): the owner's LookupData, or 307 to the lookup
        path on the broker that is to own the topic (or the leader), with Pulsar's authoritative flag."""
        s = self.ctx.process
        listener_name = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName")
        wanted = listener_name
        if s.listeners and not wanted:
            internal = s.listener(None)
            wanted = internal.name if internal is not None else None
        answer = await self.service.ownership.lookup(name, query_flag(request, "authoritative"), wanted)
        if answer.redirect:
            base = answer.http_url_tls if request.secure else answer.http_url
            if not base:
                raise HttpError(412, "Redirected cluster's service url is not configured.")
            location = (f"{base}/lookup/v2/topic/{name.domain}/{name.namespace}/{path_segment(name.local_name)}"
                        f"?authoritative={'true' if answer.authoritative else 'false'}")
            if listener_name:
                location += f"&listenerName={quote(listener_name, safe='')}"
            raise web.HTTPTemporaryRedirect(URL(location, encoded=True))  # (as encoded here: "%2E%2E" kept)
        return json_response(lookup_data(answer.urls.url or "", answer.urls.url_tls or "", answer.http_url or "",
                                         answer.http_url_tls or ""))

    async def topic_bundle(self, request: web.Request) -> web.Response:
        """The range of the namespace bundle a topic's name hashes into (``pulsar-admin topics bundle-range``,
        TopicLookupBase.internalGetNamespaceBundle), from any broker: the bundles as this broker's metadata has them.
        Pulsar writes the range as the bare text of an application/json answer. (For a namespace that does not exist,
        Pulsar names its full range as if it existed; ours answers 404.)"""
        m = request.match_info
        name = parse_topic_name(m["domain"], m["tenant"], m["ns"], m["topic"])
        await self.service.refresh_namespace(name)
        if not self.service.metadata.namespace_exists(name.namespace):
            raise HttpError(404, "Namespace does not exist")
        bundle = self.service.metadata.namespace_bundles(name.namespace).find(name.full)
        return web.Response(text=bundle.range_name, content_type="application/json")

    async def lookup(self, request: web.Request) -> web.Response:
        """A lookup, counted as Pulsar's NamespaceService counts them (answer, redirect or failure): the search for
        the owner only. What TopicLookupBase.internalLookupTopicAsync checks before NamespaceService's
        getBrokerServiceUrlAsync is not counted: the name, the namespace, and the namespace's cluster
        (validateGlobalNamespaceOwnershipAsync: the 307 to a peer cluster, or its refusal). So the lookup counts
        are the same whether the security middleware's cluster-first check or this handler answers the peer
        cluster's redirect."""
        m = request.match_info
        # (A tenant or namespace Pulsar refuses is a 500 there, an uncaught IllegalArgumentException: ours is its
        # admin API's 412.)
        name = parse_topic_name(m["domain"], m["tenant"], m["ns"], m["topic"])
        await self.service.refresh_namespace(name)
        if not self.service.metadata.namespace_exists(name.namespace):
            raise HttpError(404, "Namespace not found")  # (Pulsar's words)
        validate_global_namespace(self.service, request, name)
        stats = self.service.lookup_stats
        started = stats.start()
        try:
            response = await self._lookup(request, name)
        except web.HTTPTemporaryRedirect:
            stats.done(started, redirect=True)
            raise
        except BaseException:
            stats.done(started, failed=True)
            raise
        stats.done(started)
        return response

    async def _lookup(self, request: web.Request, name: TopicName) -> web.Response:
        s = self.ctx.process
        if self.service.ownership.distributed:
            return await self.cluster_lookup(request, name)
        # Plain and TLS URLs as Pulsar's LookupData has them; a TLS client uses brokerUrlTls.
        plain = f"pulsar://{s.advertised_host}:{s.port}" if s.port else ""
        tls = s.service_url_tls
        http = f"http://{s.advertised_host}:{s.web_port}" if s.web_port else ""
        listener_name = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName")
        if listener_name or s.listeners:
            listener = s.listener(listener_name)
            if listener is None:
                raise HttpError(404, f"the broker do not have {listener_name} listener")
            plain, tls = listener.url or "", listener.url_tls or ""
        return json_response(lookup_data(plain or "", tls or "", http, s.web_url_tls or ""))


# Pulsar 4.0.7's ClusterDataImpl fields that are never null: what a cluster's data says of them unless it was given
# other values (as Pulsar's GET shows them).
CLUSTER_DATA_DEFAULTS = {"brokerClientTlsEnabled": False, "tlsAllowInsecureConnection": False,
                         "brokerClientTlsEnabledWithKeyStore": False, "brokerClientTlsTrustStoreType": "JKS",
                         "brokerClientTlsKeyStoreType": "JKS",
                         "brokerClientSslFactoryPlugin": "org.apache.pulsar.common.util.DefaultPulsarSslFactory"}


def lookup_data(plain: str, tls: str, http: str, http_tls: str) -> dict[str, str]:
    """Pulsar's LookupData as its JSON has it: a TLS URL the broker does not have is left out (null there), and the
    deprecated ``brokerUrlSsl`` is always empty."""
    data = {"brokerUrl": plain, "httpUrl": http, "nativeUrl": plain or tls, "brokerUrlSsl": ""}
    if tls:
        data["brokerUrlTls"] = tls
    if http_tls:
        data["httpUrlTls"] = http_tls
    return data


def _names(value: object, what: str) -> tuple[str, ...]:
    """A TenantInfo list."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HttpError(400, f"{what} must be a list of strings")
    return tuple(value)
