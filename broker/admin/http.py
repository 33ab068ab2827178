"""HTTP side (aiohttp): admin REST v2 subset, HTTP lookup and Prometheus /metrics.

Errors are JSON ``{"reason": ...}`` with the status Pulsar uses (404 missing, 409 exists,
412 precondition, 400 bad input), so pulsar-admin style scripts read them unchanged.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.metrics import make_registry, render_metrics
from broker.errors import (
    BrokerError,
    ConsumerBusyError,
    ConsumerNotFoundError,
    IncompatibleSchemaError,
    InvalidTopicNameError,
    ProducerBusyError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from broker.service.schemas import SCHEMA_TYPE_NAMES, STRATEGIES
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.server import BrokerServer

log = logging.getLogger(__name__)
DOMAINS = ("persistent", "non-persistent")


class HttpError(web.HTTPException):
    def __init__(self, status: int, reason: str) -> None:
        self.status_code = status
        super().__init__(text=json.dumps({"reason": reason}), content_type="application/json")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise HttpError(400, "Request body is not valid JSON") from None


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)  # type: ignore[no-any-return]
    except web.HTTPException:
        raise
    except BrokerError as exc:
        raise HttpError(_status_for(exc), exc.message) from None
    except Exception as exc:
        log.exception("HTTP %s %s failed", request.method, request.path)
        raise HttpError(500, f"Internal error: {exc}") from None


class WebService:
    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.app = web.Application(middlewares=[_errors])
        self._runner: web.AppRunner | None = None
        self._metrics = make_registry(server)
        r = self.app.router
        r.add_get("/admin/v2/brokers/health", self.health)
        r.add_get("/admin/v2/brokers/ready", self.health)
        r.add_get("/status.html", self.status)
        r.add_get("/metrics", self.metrics)
        r.add_get("/metrics/", self.metrics)
        r.add_get("/admin/v2/clusters", self.clusters)
        r.add_get("/admin/v2/clusters/{cluster}", self.get_cluster)
        r.add_put("/admin/v2/clusters/{cluster}", self.put_cluster)
        r.add_get("/admin/v2/tenants", self.tenants)
        r.add_get("/admin/v2/tenants/{tenant}", self.get_tenant)
        r.add_put("/admin/v2/tenants/{tenant}", self.put_tenant)
        r.add_post("/admin/v2/tenants/{tenant}", self.update_tenant)
        r.add_delete("/admin/v2/tenants/{tenant}", self.delete_tenant)
        r.add_get("/admin/v2/namespaces/{tenant}", self.namespaces)
        r.add_get("/admin/v2/namespaces/{tenant}/{ns}", self.get_namespace)
        r.add_put("/admin/v2/namespaces/{tenant}/{ns}", self.put_namespace)
        r.add_delete("/admin/v2/namespaces/{tenant}/{ns}", self.delete_namespace)
        r.add_get("/admin/v2/namespaces/{tenant}/{ns}/topics", self.namespace_topics)
        r.add_get("/admin/v2/namespaces/{tenant}/{ns}/deduplication", self.get_deduplication)
        r.add_post("/admin/v2/namespaces/{tenant}/{ns}/deduplication", self.set_deduplication)
        r.add_delete("/admin/v2/namespaces/{tenant}/{ns}/deduplication", self.set_deduplication)
        r.add_get("/admin/v2/namespaces/{tenant}/{ns}/schemaCompatibilityStrategy", self.get_schema_strategy)
        r.add_put("/admin/v2/namespaces/{tenant}/{ns}/schemaCompatibilityStrategy", self.put_schema_strategy)
        r.add_get("/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic:.+}", self.lookup)
        r.add_get("/admin/v2/schemas/{tenant}/{ns}/{topic}/schema", self.get_schema)
        r.add_get("/admin/v2/schemas/{tenant}/{ns}/{topic}/schema/{version}", self.get_schema)
        for d in DOMAINS:
            r.add_get(f"/admin/v2/{d}/{{tenant}}/{{ns}}", self.list_topics)
            r.add_get(f"/admin/v2/{d}/{{tenant}}/{{ns}}/partitioned", self.list_partitioned)
            r.add_get(f"/admin/v2/{d}/{{tenant}}/{{ns}}/{{topic}}/partitions", self.get_partitions)
            r.add_put(f"/admin/v2/{d}/{{tenant}}/{{ns}}/{{topic}}/partitions", self.put_partitions)
            r.add_put(f"/admin/v2/{d}/{{tenant}}/{{ns}}/{{topic}}", self.create_topic)

    async def start(self, host: str, port: int) -> int:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        assert sockets, "HTTP server did not bind"
        return int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def service(self) -> Any:
        return self.server.service

    @property
    def metadata(self) -> Any:
        return self.server.service.metadata

    # -- broker ------------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if not self.server.ready:
            raise HttpError(503, "Broker is not ready")
        return web.Response(text="ok")

    async def status(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def metrics(self, request: web.Request) -> web.Response:
        body = render_metrics(self._metrics)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    # -- clusters / tenants / namespaces -----------------------------------------------------------
    async def clusters(self, request: web.Request) -> web.Response:
        return _json(sorted(self.metadata.clusters))

    async def get_cluster(self, request: web.Request) -> web.Response:
        name = request.match_info["cluster"]
        if name not in self.metadata.clusters:
            raise HttpError(404, "Cluster does not exist")
        return _json({"serviceUrl": self.server.web_url, "brokerServiceUrl": self.server.service_url,
                      **self.metadata.clusters[name]})

    async def put_cluster(self, request: web.Request) -> web.Response:
        name = request.match_info["cluster"]
        body = await _body(request) or {}
        if not isinstance(body, dict):
            raise HttpError(400, "Cluster data must be a JSON object")
        self.metadata.clusters[name] = body
        self.metadata.save()
        return web.Response(status=204)

    async def tenants(self, request: web.Request) -> web.Response:
        return _json(sorted(self.metadata.tenants))

    def _tenant(self, request: web.Request) -> str:
        tenant = request.match_info["tenant"]
        if tenant not in self.metadata.tenants:
            raise HttpError(404, "Tenant does not exist")
        return tenant

    async def get_tenant(self, request: web.Request) -> web.Response:
        return _json(self.metadata.tenants[self._tenant(request)])

    def _tenant_info(self, body: Any) -> dict[str, Any]:
        body = body or {}
        if not isinstance(body, dict):
            raise HttpError(400, "Tenant info must be a JSON object")
        clusters = body.get("allowedClusters", [self.server.config.clusterName])
        unknown = [c for c in clusters if c not in self.metadata.clusters]
        if unknown:
            raise HttpError(412, f"Clusters do not exist: {unknown}")
        return {"adminRoles": list(body.get("adminRoles", [])), "allowedClusters": list(clusters)}

    async def put_tenant(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        info = self._tenant_info(await _body(request))
        if tenant in self.metadata.tenants:
            raise HttpError(409, "Tenant already exists")
        _check_name(tenant, "tenant")
        self.metadata.tenants[tenant] = info
        self.metadata.save()
        return web.Response(status=204)

    async def update_tenant(self, request: web.Request) -> web.Response:
        tenant = self._tenant(request)
        self.metadata.tenants[tenant] = self._tenant_info(await _body(request))
        self.metadata.save()
        return web.Response(status=204)

    async def delete_tenant(self, request: web.Request) -> web.Response:
        tenant = self._tenant(request)
        if any(ns.split("/")[0] == tenant for ns in self.metadata.namespaces):
            raise HttpError(409, "The tenant still has active namespaces")
        del self.metadata.tenants[tenant]
        self.metadata.save()
        return web.Response(status=204)

    async def namespaces(self, request: web.Request) -> web.Response:
        tenant = self._tenant(request)
        return _json(sorted(ns for ns in self.metadata.namespaces if ns.split("/")[0] == tenant))

    def _namespace(self, request: web.Request) -> str:
        ns = f"{request.match_info['tenant']}/{request.match_info['ns']}"
        if ns not in self.metadata.namespaces:
            raise HttpError(404, "Namespace does not exist")
        return ns

    async def get_namespace(self, request: web.Request) -> web.Response:
        return _json(self.metadata.namespaces[self._namespace(request)])

    async def put_namespace(self, request: web.Request) -> web.Response:
        tenant = self._tenant(request)
        ns_name = request.match_info["ns"]
        _check_name(ns_name, "namespace")
        ns = f"{tenant}/{ns_name}"
        policies = await _body(request) or {}
        if not isinstance(policies, dict):
            raise HttpError(400, "Policies must be a JSON object")
        if ns in self.metadata.namespaces:
            raise HttpError(409, "Namespace already exists")
        self.metadata.namespaces[ns] = policies
        self.metadata.save()
        return web.Response(status=204)

    async def delete_namespace(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        if self.service.topics_of_namespace(ns, 2):
            raise HttpError(409, "Cannot delete non empty namespace")
        del self.metadata.namespaces[ns]
        self.metadata.save()
        return web.Response(status=204)

    async def get_deduplication(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        return _json(self.metadata.namespaces[ns].get("deduplicationEnabled"))

    async def set_deduplication(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        if request.method == "DELETE":
            self.metadata.namespaces[ns].pop("deduplicationEnabled", None)
        else:
            value = await _body(request)
            if not isinstance(value, bool):
                raise HttpError(400, "Deduplication must be true or false")
            self.metadata.namespaces[ns]["deduplicationEnabled"] = value
        self.metadata.save()
        return web.Response(status=204)

    async def get_schema_strategy(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        return _json(self.metadata.namespaces[ns].get("schema_compatibility_strategy", "UNDEFINED"))

    async def put_schema_strategy(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        value = await _body(request)
        if value not in STRATEGIES:
            raise HttpError(400, f"Unknown schema compatibility strategy {value!r}; one of {', '.join(STRATEGIES)}")
        self.metadata.namespaces[ns]["schema_compatibility_strategy"] = value
        self.metadata.save()
        return web.Response(status=204)

    async def namespace_topics(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        mode = {"PERSISTENT": 0, "NON_PERSISTENT": 1, "ALL": 2}.get(request.query.get("mode", "PERSISTENT"), 0)
        return _json(self.service.topics_of_namespace(ns, mode))

    # -- topics ------------------------------------------------------------------------------------
    def _topic(self, request: web.Request) -> TopicName:
        domain = request.path.split("/")[3] if request.path.startswith("/admin/") else request.match_info["domain"]
        m = request.match_info
        return TopicName.parse(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}")

    async def list_topics(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        domain = request.path.split("/")[3]
        mode = 0 if domain == "persistent" else 1
        return _json(self.service.topics_of_namespace(ns, mode))

    async def list_partitioned(self, request: web.Request) -> web.Response:
        ns = self._namespace(request)
        domain = request.path.split("/")[3]
        names = [t for t in self.metadata.partitioned_topics
                 if t.startswith(f"{domain}://{ns}/")]
        return _json(sorted(names))

    async def get_partitions(self, request: web.Request) -> web.Response:
        name = self._topic(request)
        self._namespace(request)
        n = await self.service.partitions_for(name, auto_create=request.query.get("checkAllowAutoCreation") == "true")
        return _json({"partitions": n})

    async def put_partitions(self, request: web.Request) -> web.Response:
        name = self._topic(request)
        self._namespace(request)
        body = await _body(request)
        if not isinstance(body, int) or isinstance(body, bool) or body <= 0:
            raise HttpError(412, "Number of partitions should be more than 0")
        if self.metadata.partitions_of(name.full) > 0:
            raise HttpError(409, "Partitioned topic already exists")
        if name.persistence_path in self.service.ledger_factory.list_names():
            raise HttpError(409, "This topic already exists")
        self.metadata.set_partitions(name.full, body)
        return web.Response(status=204)

    async def create_topic(self, request: web.Request) -> web.Response:
        name = self._topic(request)
        self._namespace(request)
        if self.metadata.partitions_of(name.full) > 0 or \
                name.persistence_path in self.service.ledger_factory.list_names():
            raise HttpError(409, "This topic already exists")
        await self.service.get_topic(name, create=True)
        return web.Response(status=204)

    # -- lookup ------------------------------------------------------------------------------------
    async def lookup(self, request: web.Request) -> web.Response:
        name = self._topic(request)
        self.service.check_namespace(name)
        url = self.server.service_url
        return _json({"brokerUrl": url, "brokerUrlTls": "", "httpUrl": self.server.web_url,
                      "httpUrlTls": "", "nativeUrl": url})

    # -- schemas -----------------------------------------------------------------------------------
    async def get_schema(self, request: web.Request) -> web.Response:
        m = request.match_info
        name = TopicName.parse(f"persistent://{m['tenant']}/{m['ns']}/{m['topic']}")
        version = None
        if "version" in m:
            try:
                version = int(m["version"])
            except ValueError:
                raise HttpError(400, "Schema version must be an integer") from None
        found = self.service.schemas.get(name.base.full, version)
        if found is None:
            raise HttpError(404, "Schema not found")
        record, v = found
        data = base64.b64decode(record["data"])
        return _json({"version": v, "type": SCHEMA_TYPE_NAMES.get(record["type"], "BYTES"),
                      "timestamp": record["timestamp"], "data": data.decode("utf-8", "replace"),
                      "properties": record.get("properties", {})})


# Broker errors -> HTTP status, as Pulsar's admin API answers them; anything else is a bad request.
_STATUS = (
    (InvalidTopicNameError, 412),
    ((TopicNotFoundError, SubscriptionNotFoundError, ConsumerNotFoundError), 404),
    ((ProducerBusyError, ConsumerBusyError, IncompatibleSchemaError), 409),
)


def _status_for(exc: BrokerError) -> int:
    return next((status for kinds, status in _STATUS if isinstance(exc, kinds)), 400)


def _check_name(name: str, what: str) -> None:
    if not name or any(ch in name for ch in "/:\\ ") or name.startswith("."):
        raise HttpError(412, f"Invalid {what} name '{name}'")
