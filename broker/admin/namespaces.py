"""Admin REST v2: tenants' namespaces and their policies (Pulsar's Namespaces resource).

Every policy is stored in the metadata store (persisted at once) under Pulsar's Policies field
name; an unset policy answers 204 with no body, as Pulsar does for a null value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import HttpError, bound, check_name, json_response, no_content, query_flag, read_body
from broker.metadata import policies as P
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.metadata.store import MetadataStore

NS = "/admin/v2/namespaces/{tenant}/{ns}"


@dataclass(frozen=True)
class PlainPolicy:
    """A policy with nothing more to it than GET (204 when unset), set (validated) and DELETE."""

    path: str
    key: str  # the Policies field
    parse: Callable[[Any], Any]
    set_method: str = "POST"
    unset: Any = None  # what GET answers when it is not set (None: 204, no content)


# Rates the Policies document keeps per cluster ({cluster: rate}); the REST API shows this cluster's.
CLUSTER_RATES = (
    PlainPolicy("publishRate", P.PUBLISH_MAX_MESSAGE_RATE, P.parse_publish_rate),
    PlainPolicy("dispatchRate", P.TOPIC_DISPATCH_RATE, P.parse_dispatch_rate),
    PlainPolicy("subscriptionDispatchRate", P.SUBSCRIPTION_DISPATCH_RATE, P.parse_dispatch_rate),
    PlainPolicy("replicatorDispatchRate", P.REPLICATOR_DISPATCH_RATE, P.parse_dispatch_rate),
    PlainPolicy("subscribeRate", P.SUBSCRIBE_RATE, P.parse_subscribe_rate),
)
PLAIN_POLICIES = (
    PlainPolicy("messageTTL", P.MESSAGE_TTL, P.parse_message_ttl),
    PlainPolicy("encryptionRequired", P.ENCRYPTION_REQUIRED, lambda v: P.parse_bool(v, "encryptionRequired"),
                unset=False),  # (a boolean in Pulsar's Policies: false until set)
    PlainPolicy("delayedDelivery", P.DELAYED_DELIVERY, P.parse_delayed_delivery),
    PlainPolicy("schemaValidationEnforced", P.SCHEMA_VALIDATION_ENFORCED,
                lambda v: P.parse_bool(v, "schemaValidationEnforced"), unset=False),
    PlainPolicy("isAllowAutoUpdateSchema", P.ALLOW_AUTO_UPDATE_SCHEMA,
                lambda v: P.parse_bool(v, "isAllowAutoUpdateSchema"), unset=True),
    PlainPolicy("compactionThreshold", P.COMPACTION_THRESHOLD, P.parse_compaction_threshold, "PUT"),
    PlainPolicy("autoTopicCreation", P.AUTO_TOPIC_CREATION, P.parse_auto_topic_creation),
    PlainPolicy("persistence", P.PERSISTENCE, P.parse_persistence),
    PlainPolicy("autoSubscriptionCreation", P.AUTO_SUBSCRIPTION_CREATION, P.parse_auto_subscription_creation),
    PlainPolicy("subscriptionExpirationTime", P.SUBSCRIPTION_EXPIRATION, P.parse_subscription_expiration),
    PlainPolicy("inactiveTopicPolicies", P.INACTIVE_TOPIC_POLICIES, P.parse_inactive_topic_policies),
    # producer / consumer limits (0 = unlimited)
    PlainPolicy("maxProducersPerTopic", P.MAX_PRODUCERS_PER_TOPIC,
                lambda v: P.parse_limit(v, "maxProducersPerTopic")),
    PlainPolicy("maxConsumersPerTopic", P.MAX_CONSUMERS_PER_TOPIC,
                lambda v: P.parse_limit(v, "maxConsumersPerTopic")),
    PlainPolicy("maxConsumersPerSubscription", P.MAX_CONSUMERS_PER_SUBSCRIPTION,
                lambda v: P.parse_limit(v, "maxConsumersPerSubscription")),
    PlainPolicy("maxSubscriptionsPerTopic", P.MAX_SUBSCRIPTIONS_PER_TOPIC,
                lambda v: P.parse_limit(v, "maxSubscriptionsPerTopic")),
    PlainPolicy("maxTopicsPerNamespace", P.MAX_TOPICS_PER_NAMESPACE,
                lambda v: P.parse_limit(v, "maxTopicsPerNamespace"), unset=0),
    PlainPolicy("deduplicationSnapshotInterval", P.DEDUP_SNAPSHOT_INTERVAL, P.parse_dedup_snapshot_interval),
    PlainPolicy("subscriptionAuthMode", P.SUBSCRIPTION_AUTH_MODE, P.parse_subscription_auth_mode, unset="None"),
    PlainPolicy("maxUnackedMessagesPerConsumer", P.MAX_UNACKED_PER_CONSUMER,
                lambda v: P.parse_limit(v, "maxUnackedMessagesPerConsumer")),
    PlainPolicy("maxUnackedMessagesPerSubscription", P.MAX_UNACKED_PER_SUBSCRIPTION,
                lambda v: P.parse_limit(v, "maxUnackedMessagesPerSubscription")),
    PlainPolicy("subscriptionTypesEnabled", P.SUBSCRIPTION_TYPES_ENABLED, P.parse_subscription_types,
                unset=[]),  # (a set in Pulsar's Policies: empty until set, and empty = not set)
)


class NamespacesResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get("/admin/v2/namespaces/{tenant}", self.list_namespaces)
        r.add_get(NS, self.get_policies)
        r.add_put(NS, self.create)
        r.add_delete(NS, self.delete)
        r.add_get(NS + "/topics", self.topics)
        r.add_get(NS + "/deduplication", self.get_deduplication)
        r.add_post(NS + "/deduplication", self.set_deduplication)
        r.add_delete(NS + "/deduplication", self.set_deduplication)
        r.add_get(NS + "/schemaCompatibilityStrategy", self.get_schema_strategy)
        r.add_put(NS + "/schemaCompatibilityStrategy", self.put_schema_strategy)
        r.add_get(NS + "/retention", self.get_retention)
        r.add_post(NS + "/retention", self.set_retention)
        r.add_delete(NS + "/retention", self.remove_retention)
        for rate in CLUSTER_RATES:
            path = f"{NS}/{rate.path}"
            r.add_get(path, bound(self.get_cluster_rate, rate))
            r.add_post(path, bound(self.set_cluster_rate, rate))
            r.add_delete(path, bound(self.set_cluster_rate, rate))
        r.add_get(NS + "/backlogQuotaMap", self.get_backlog_quota_map)
        r.add_get(NS + "/backlogQuota", self.get_backlog_quota)
        r.add_post(NS + "/backlogQuota", self.set_backlog_quota)
        r.add_delete(NS + "/backlogQuota", self.remove_backlog_quota)
        for policy in PLAIN_POLICIES:
            path = f"{NS}/{policy.path}"
            r.add_get(path, bound(self.get_plain, policy))
            r.add_route(policy.set_method, path, bound(self.set_plain, policy))
            r.add_delete(path, bound(self.remove_plain, policy))

    @property
    def metadata(self) -> MetadataStore:
        return self.web.metadata

    def tenant(self, request: web.Request) -> str:
        tenant = request.match_info["tenant"]
        if tenant not in self.metadata.tenants:
            raise HttpError(404, "Tenant does not exist")
        return tenant

    def namespace(self, request: web.Request) -> str:
        self.tenant(request)
        ns = f"{request.match_info['tenant']}/{request.match_info['ns']}"
        if ns not in self.metadata.namespaces:
            raise HttpError(404, "Namespace does not exist")
        return ns

    def _value_or_no_content(self, value: object) -> web.Response:
        return no_content() if value is None else json_response(value)

    # -- namespaces ------------------------------------------------------------------------------
    async def list_namespaces(self, request: web.Request) -> web.Response:
        tenant = self.tenant(request)
        return json_response(self.metadata.namespaces_of(tenant))

    async def get_policies(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        return json_response(P.policies_view(self.metadata.namespace_policies(ns), self.web.ctx.cluster))

    async def create(self, request: web.Request) -> web.Response:
        tenant = self.tenant(request)
        ns_name = request.match_info["ns"]
        check_name(ns_name, "namespace")
        ns = f"{tenant}/{ns_name}"
        body = await read_body(request)
        policies = P.validate_policies(body) if body is not None else {}
        self.metadata.create_namespace(ns, policies)
        return no_content()

    async def delete(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        service = self.web.service
        topics = service.topics_of_namespace(ns, 2)
        partitioned = self.metadata.partitioned_topics_of(ns)
        if (topics or partitioned) and not query_flag(request, "force"):
            raise HttpError(409, "Cannot delete non empty namespace")
        for name in topics:
            await self.web.topics.delete_one(TopicName.parse(name), force=True)
        for base in partitioned:
            self.metadata.delete_partitioned(base)
            service.schemas.delete(base)
        self.metadata.delete_namespace(ns)
        return no_content()

    async def topics(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        mode = {"PERSISTENT": 0, "NON_PERSISTENT": 1, "ALL": 2}.get(request.query.get("mode", "PERSISTENT"), 0)
        return json_response(self.web.service.topics_of_namespace(ns, mode))

    # -- deduplication / schema compatibility ----------------------------------------------------------
    async def get_deduplication(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        return json_response(self.metadata.policy(ns, P.DEDUPLICATION))

    async def set_deduplication(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        value = None
        if request.method != "DELETE":
            value = await read_body(request)
            if not isinstance(value, bool):
                raise HttpError(400, "Deduplication must be true or false")
        self.metadata.set_policy(ns, P.DEDUPLICATION, value)
        return no_content()

    async def get_schema_strategy(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        return json_response(self.metadata.policy(ns, P.SCHEMA_STRATEGY) or "UNDEFINED")

    async def put_schema_strategy(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        self.metadata.set_policy(ns, P.SCHEMA_STRATEGY, P.parse_schema_strategy(await read_body(request)))
        return no_content()

    # -- retention -----------------------------------------------------------------------------------
    async def get_retention(self, request: web.Request) -> web.Response:
        return self._value_or_no_content(self.metadata.policy(self.namespace(request), P.RETENTION))

    async def set_retention(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        retention = P.parse_retention(await read_body(request))
        quotas = self.metadata.policy(ns, P.BACKLOG_QUOTA_MAP) or {}
        if not all(P.check_quota_within_retention(q, retention) for q in quotas.values()):
            raise HttpError(412, "Retention Quota must exceed configured backlog quota for namespace.")
        self.metadata.set_policy(ns, P.RETENTION, retention)
        self._applied(ns, P.RETENTION)
        return no_content()

    async def remove_retention(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        self.metadata.set_policy(ns, P.RETENTION, None)
        self._applied(ns, P.RETENTION)
        return no_content()

    # -- publish and dispatch rates: kept per cluster, as in Pulsar's Policies --------------------------
    async def get_cluster_rate(self, request: web.Request, rate: PlainPolicy) -> web.Response:
        rates = self.metadata.policy(self.namespace(request), rate.key) or {}
        return self._value_or_no_content(rates.get(self.web.ctx.cluster))

    async def set_cluster_rate(self, request: web.Request, rate: PlainPolicy) -> web.Response:
        """POST sets this cluster's rate, DELETE removes it."""
        ns = self.namespace(request)
        rates = dict(self.metadata.policy(ns, rate.key) or {})
        cluster = self.web.ctx.cluster
        if request.method == "DELETE":
            rates.pop(cluster, None)
        else:
            rates[cluster] = rate.parse(await read_body(request))
        self.metadata.set_policy(ns, rate.key, rates or None)
        return no_content()

    # -- backlog quotas ------------------------------------------------------------------------------
    async def get_backlog_quota_map(self, request: web.Request) -> web.Response:
        return json_response(self.metadata.policy(self.namespace(request), P.BACKLOG_QUOTA_MAP) or {})

    async def get_backlog_quota(self, request: web.Request) -> web.Response:
        """The quota of one type in force for the namespace (its own, else the broker default)."""
        ns = self.namespace(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        stored = (self.metadata.policy(ns, P.BACKLOG_QUOTA_MAP) or {}).get(quota_type)
        if stored is not None:
            return json_response(stored)
        cfg = self.web.ctx.config
        size = cfg.backlogQuotaDefaultLimitBytes if quota_type == P.DESTINATION_STORAGE else -1
        age = cfg.backlogQuotaDefaultLimitSecond if quota_type == P.MESSAGE_AGE else -1
        return json_response({"limit": size, "limitSize": size, "limitTime": age,
                              "policy": cfg.backlogQuotaDefaultRetentionPolicy})

    async def set_backlog_quota(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        quota = P.parse_backlog_quota(await read_body(request))
        if not P.check_quota_within_retention(quota, self.metadata.policy(ns, P.RETENTION)):
            raise HttpError(412, "Backlog Quota exceeds configured retention quota for namespace. "
                                 "Please increase retention quota and retry")
        quotas = dict(self.metadata.policy(ns, P.BACKLOG_QUOTA_MAP) or {})
        quotas[quota_type] = quota
        self.metadata.set_policy(ns, P.BACKLOG_QUOTA_MAP, quotas)
        return no_content()

    async def remove_backlog_quota(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        quotas = dict(self.metadata.policy(ns, P.BACKLOG_QUOTA_MAP) or {})
        quotas.pop(quota_type, None)
        self.metadata.set_policy(ns, P.BACKLOG_QUOTA_MAP, quotas or None)
        return no_content()

    # -- plain policies --------------------------------------------------------------------------------
    async def get_plain(self, request: web.Request, policy: PlainPolicy) -> web.Response:
        value = self.metadata.policy(self.namespace(request), policy.key)
        return self._value_or_no_content(policy.unset if value is None else value)

    async def set_plain(self, request: web.Request, policy: PlainPolicy) -> web.Response:
        ns = self.namespace(request)
        self.metadata.set_policy(ns, policy.key, policy.parse(await read_body(request)))
        self._applied(ns, policy.key)
        return no_content()

    async def remove_plain(self, request: web.Request, policy: PlainPolicy) -> web.Response:
        ns = self.namespace(request)
        self.metadata.set_policy(ns, policy.key, None)
        self._applied(ns, policy.key)
        return no_content()

    def _applied(self, ns: str, key: str) -> None:
        """Retention and persistence reach the namespace's loaded topics at once (the others read
        policies when they load)."""
        if key in (P.RETENTION, P.PERSISTENCE):
            self.web.service.apply_ledger_policies_to(ns)
