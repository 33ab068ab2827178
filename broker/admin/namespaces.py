"""Admin REST v2: tenants' namespaces and their policies (Pulsar's Namespaces resource).

Every policy is stored in the metadata store (persisted at once) under Pulsar's Policies field
name; an unset policy answers 200 with no body, as Pulsar's asynchronous resource methods answer a null value.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import (
    TENANT_NAME_NOT_VALID,
    HttpError,
    bound,
    check_name,
    check_namespace_name,
    json_response,
    no_content,
    pulsar_name_ok,
    query_flag,
    read_body,
    unset_value,
)
from broker.metadata import policies as P
from broker.metadata import policy_table as T
from broker.metadata.policy_values import BacklogQuota, Retention
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.config import BrokerConfig
    from broker.metadata.store import BrokerMetadata

log = logging.getLogger(__name__)
# Pulsar's 404 where a setter reads the namespace's policies to change them (retention's set and remove).
NO_POLICIES = "Namespace policies does not exist"
NO_NAMESPACE = "Namespace does not exist"

NS = "/admin/v2/namespaces/{tenant}/{ns}"


@dataclass(frozen=True)
class PlainPolicy:
    """A policy with nothing more to it than GET (200 with no body when unset, as Pulsar), set (validated) and
    DELETE."""

    path: str
    key: str  # the Policies field
    parse: Callable[[Any], Any]
    set_method: str = "POST"
    unset: Any = None  # what GET answers when it is not set (None: no body)
    # A check of the parsed value against the broker's configuration (raises PolicyError).
    check: Callable[[Any, BrokerConfig], None] | None = None
    # Pulsar 4.0.7 has no DELETE for a few (a DELETE there is one of a bundle of that name: 412): set them instead.
    removable: bool = True
    # Pulsar's GET is synchronous: unset, it answers 204 (its asynchronous ones 200), with no body either way.
    synchronous: bool = False
    # An on/off switch (Pulsar's dispatcherPauseOnAckStatePersistent): POST turns it on (a body is not read), DELETE
    # off (false stored, not removed), GET answers false unset and 404 NO_POLICIES for a namespace that does not exist.
    switch: bool = False


def row(path: str, policy: T.Policy[Any], set_method: str = "POST",
        check: Callable[[Any, BrokerConfig], None] | None = None) -> PlainPolicy:
    """A structured policy: the table row's Policies field, validated and stored by the row."""
    return PlainPolicy(path, policy.namespace_field, policy.normalize, set_method, check=check)


def _partitions_within_max(stored: Any, config: BrokerConfig) -> None:
    """NamespacesBase.internalSetAutoTopicCreation: a partitioned override's defaultNumPartitions at most the
    broker's maxNumPartitionsPerPartitionedTopic (406)."""
    T.AUTO_TOPIC_CREATION.parse(stored).check_partitions(config.maxNumPartitionsPerPartitionedTopic)


# Rates the Policies document keeps per cluster ({cluster: rate}); the REST API shows this cluster's.
CLUSTER_RATES = (
    row("publishRate", T.PUBLISH_RATE),
    row("dispatchRate", T.TOPIC_DISPATCH_RATE),
    row("subscriptionDispatchRate", T.SUBSCRIPTION_DISPATCH_RATE),
    row("replicatorDispatchRate", T.REPLICATOR_DISPATCH_RATE),
    row("subscribeRate", T.SUBSCRIBE_RATE),
)
PLAIN_POLICIES = (
    PlainPolicy("messageTTL", T.MESSAGE_TTL.namespace_field, P.parse_message_ttl),
    PlainPolicy("encryptionRequired", T.ENCRYPTION_REQUIRED.namespace_field,
                lambda v: P.parse_bool(v, "encryptionRequired"),
                unset=False, removable=False),  # (a boolean in Pulsar's Policies: false until set)
    row("delayedDelivery", T.DELAYED_DELIVERY),
    PlainPolicy("schemaValidationEnforced", T.SCHEMA_VALIDATION_ENFORCED.namespace_field,
                lambda v: P.parse_bool(v, "schemaValidationEnforced"), unset=False, removable=False),
    PlainPolicy("isAllowAutoUpdateSchema", T.ALLOW_AUTO_UPDATE_SCHEMA.namespace_field,
                lambda v: P.parse_bool(v, "isAllowAutoUpdateSchema"), unset=True, removable=False),
    # (the older schema policy, in force where schemaCompatibilityStrategy is UNDEFINED: policy_table. No DELETE in
    # Pulsar: a PUT of null removes it)
    PlainPolicy("schemaAutoUpdateCompatibilityStrategy", T.SCHEMA_AUTO_UPDATE_STRATEGY.key,
                P.parse_schema_auto_update_strategy, "PUT", removable=False, synchronous=True),
    PlainPolicy("compactionThreshold", T.COMPACTION_THRESHOLD.namespace_field, P.parse_compaction_threshold, "PUT"),
    row("autoTopicCreation", T.AUTO_TOPIC_CREATION, check=_partitions_within_max),
    row("persistence", T.PERSISTENCE),
    row("autoSubscriptionCreation", T.AUTO_SUBSCRIPTION_CREATION),
    PlainPolicy("subscriptionExpirationTime", T.SUBSCRIPTION_EXPIRATION.namespace_field,
                P.parse_subscription_expiration),
    row("inactiveTopicPolicies", T.INACTIVE_TOPIC_POLICIES),
    # producer / consumer limits (0 = unlimited)
    PlainPolicy("maxProducersPerTopic", T.MAX_PRODUCERS.namespace_field,
                lambda v: P.parse_limit(v, "maxProducersPerTopic")),
    PlainPolicy("maxConsumersPerTopic", T.MAX_CONSUMERS.namespace_field,
                lambda v: P.parse_limit(v, "maxConsumersPerTopic")),
    PlainPolicy("maxConsumersPerSubscription", T.MAX_CONSUMERS_PER_SUBSCRIPTION.namespace_field,
                lambda v: P.parse_limit(v, "maxConsumersPerSubscription")),
    PlainPolicy("maxSubscriptionsPerTopic", T.MAX_SUBSCRIPTIONS.namespace_field,
                lambda v: P.parse_limit(v, "maxSubscriptionsPerTopic")),
    PlainPolicy("maxTopicsPerNamespace", T.MAX_TOPICS_PER_NAMESPACE.namespace_field,
                lambda v: P.parse_limit(v, "maxTopicsPerNamespace"), unset=0),
    PlainPolicy("deduplicationSnapshotInterval", T.DEDUP_SNAPSHOT_INTERVAL.namespace_field,
                P.parse_dedup_snapshot_interval, removable=False),  # (POST null removes it, as Pulsar's client does)
    PlainPolicy("subscriptionAuthMode", P.SUBSCRIPTION_AUTH_MODE, P.parse_subscription_auth_mode, unset="None",
                removable=False),
    PlainPolicy("maxUnackedMessagesPerConsumer", T.MAX_UNACKED_PER_CONSUMER.namespace_field,
                lambda v: P.parse_limit(v, "maxUnackedMessagesPerConsumer")),
    PlainPolicy("maxUnackedMessagesPerSubscription", T.MAX_UNACKED_PER_SUBSCRIPTION.namespace_field,
                lambda v: P.parse_limit(v, "maxUnackedMessagesPerSubscription")),
    PlainPolicy("subscriptionTypesEnabled", T.SUBSCRIPTION_TYPES_ENABLED.namespace_field, P.parse_subscription_types,
                unset=[]),  # (a set in Pulsar's Policies: empty until set, and empty = not set)
    PlainPolicy("dispatcherPauseOnAckStatePersistent", T.DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT.namespace_field,
                T.DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT.parse, unset=False, switch=True),
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
            if policy.removable:
                r.add_delete(path, bound(self.remove_plain, policy))

    @property
    def metadata(self) -> BrokerMetadata:
        return self.web.metadata

    def tenant(self, request: web.Request, missing: str = "Tenant does not exist") -> str:
        """The tenant of the path; 404 with ``missing`` (the reason Pulsar gives on that route) when it does not exist.
        Its name is not checked: Pulsar's tenant routes answer a name it would refuse as a missing tenant."""
        tenant = request.match_info["tenant"]
        if tenant not in self.metadata.tenants:
            raise HttpError(404, missing)
        return tenant

    def namespace(self, request: web.Request, missing: str = NO_NAMESPACE) -> str:
        """The namespace of the path: 412 for a tenant or namespace name Pulsar refuses; 404 with ``missing`` when it
        (or its tenant: Pulsar gives the same answer) does not exist."""
        tenant, ns_name = request.match_info["tenant"], request.match_info["ns"]
        check_namespace_name(tenant, ns_name)
        ns = f"{tenant}/{ns_name}"
        if ns not in self.metadata.namespaces:
            raise HttpError(404, missing)
        return ns

    def _value_or_unset(self, value: object) -> web.Response:
        return unset_value() if value is None else json_response(value)

    # -- namespaces ------------------------------------------------------------------------------
    async def list_namespaces(self, request: web.Request) -> web.Response:
        if not pulsar_name_ok(request.match_info["tenant"]):
            raise HttpError(412, TENANT_NAME_NOT_VALID)
        tenant = self.tenant(request, "Tenant not found")
        return json_response(self.metadata.namespaces_of(tenant))

    async def get_policies(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        return json_response(P.policies_view(self.metadata.namespace_policies(ns), self.web.ctx.cluster,
                                             self.metadata.namespace_bundles(ns)))

    async def create(self, request: web.Request) -> web.Response:
        ns_name = request.match_info["ns"]
        check_namespace_name(request.match_info["tenant"], ns_name)  # (Pulsar: before the tenant is looked up)
        tenant = self.tenant(request)
        check_name(ns_name, "namespace")
        ns = f"{tenant}/{ns_name}"
        body = await read_body(request)
        policies = P.validate_policies(body) if body is not None else {}
        await self.metadata.create_namespace(ns, policies)
        return no_content()

    async def delete(self, request: web.Request) -> web.Response:
        """DELETE a namespace; with ``force`` its topics first, each by its owner (cluster mode: Pulsar deletes every
        topic through its owner, then the bundles: here each owner releases its bundles before the policies go)."""
        m = request.match_info
        ns = self.namespace(request, f"Namespace {m['tenant']}/{m['ns']} does not exist.")
        service = self.web.service
        deleting = service.namespaces_being_deleted
        if ns in deleting:
            raise HttpError(409, f"Namespace {ns} is being deleted")
        deleting.add(ns)  # no topic is created in it here from now on (a create already under way may still finish)
        marked = False
        try:
            force = query_flag(request, "force")
            for _ in range(2):  # the second look finds what a create under way at the first one made
                topics = await self.web.topics.topics_of_namespace(request, ns, 2)
                partitioned = self.metadata.partitioned_topics_of(ns)
                if (topics or partitioned) and not force:
                    raise HttpError(409, "Cannot delete non empty namespace")
                if not marked:  # and none by any broker once its policies say so (Pulsar's mark)
                    await self._mark_deleted(ns, True)
                    marked = True
                await self._delete_topics(request, topics, partitioned)
            if service.ownership.distributed:
                await self.web.namespace_ops.release_bundles(request, ns)
            await self.metadata.delete_namespace(ns)
        except BaseException:
            if marked:  # (a delete that failed leaves the namespace usable; a retry marks it again)
                try:
                    await self._mark_deleted(ns, False)
                except Exception:
                    log.exception("namespace %s: could not take back its deleted mark", ns)
            raise
        finally:
            deleting.discard(ns)
        return no_content()

    async def _mark_deleted(self, ns: str, deleted: bool) -> None:
        def mark(policies: dict[str, Any]) -> None:
            policies["deleted"] = deleted

        await self.metadata.modify_policies(ns, mark)

    async def _delete_topics(self, request: web.Request, topics: list[str], partitioned: list[str]) -> None:
        async def delete(name: TopicName) -> None:
            await self.web.topics.delete_one(name, force=True)

        await self.web.topics.fanout.on_owners(request, [TopicName.parse(n) for n in topics], "DELETE", "", delete,
                                        "?force=true")
        for base in partitioned:
            await self.metadata.delete_partitioned(base)
            await self.web.service.schemas.delete(base)

    async def topics(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        mode = {"PERSISTENT": 0, "NON_PERSISTENT": 1, "ALL": 2}.get(request.query.get("mode", "PERSISTENT"), 0)
        return json_response(await self.web.topics.topics_of_namespace(request, ns, mode))

    # -- deduplication / schema compatibility ----------------------------------------------------------
    async def get_deduplication(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        return json_response(self.metadata.policy(ns, T.DEDUPLICATION.namespace_field))

    async def set_deduplication(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        value = None
        if request.method != "DELETE":
            value = await read_body(request)
            if not isinstance(value, bool):
                raise HttpError(400, "Deduplication must be true or false")
        await self.metadata.set_policy(ns, T.DEDUPLICATION.namespace_field, value)
        return no_content()

    async def get_schema_strategy(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        return json_response(self.metadata.policy(ns, T.SCHEMA_COMPATIBILITY_STRATEGY.namespace_field) or "UNDEFINED")

    async def put_schema_strategy(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        strategy = P.parse_schema_strategy(await read_body(request))
        await self.metadata.set_policy(ns, T.SCHEMA_COMPATIBILITY_STRATEGY.namespace_field, strategy)
        return no_content()

    # -- retention -----------------------------------------------------------------------------------
    async def get_retention(self, request: web.Request) -> web.Response:
        return self._value_or_unset(self.metadata.policy(self.namespace(request), T.RETENTION.namespace_field))

    async def set_retention(self, request: web.Request) -> web.Response:
        ns = self.namespace(request, NO_POLICIES)
        retention = Retention.from_json(await read_body(request))
        quotas = T.BACKLOG_QUOTAS.parse(self.metadata.policy(ns, T.BACKLOG_QUOTAS.namespace_field) or {})
        if not all(q.within(retention) for q in quotas.values()):
            raise HttpError(412, "Retention Quota must exceed configured backlog quota for namespace.")
        await self.metadata.set_policy(ns, T.RETENTION.namespace_field, retention.to_json())
        self._applied(ns, T.RETENTION.namespace_field)
        return no_content()

    async def remove_retention(self, request: web.Request) -> web.Response:
        ns = self.namespace(request, NO_POLICIES)
        await self.metadata.set_policy(ns, T.RETENTION.namespace_field, None)
        self._applied(ns, T.RETENTION.namespace_field)
        return no_content()

    # -- publish and dispatch rates: kept per cluster, as in Pulsar's Policies --------------------------
    async def get_cluster_rate(self, request: web.Request, rate: PlainPolicy) -> web.Response:
        rates = self.metadata.policy(self.namespace(request), rate.key) or {}
        return self._value_or_unset(rates.get(self.web.ctx.cluster))

    async def set_cluster_rate(self, request: web.Request, rate: PlainPolicy) -> web.Response:
        """POST sets this cluster's rate, DELETE removes it. The dispatch rate also in ``clusterDispatchRate``, its
        older name, which Pulsar's setDispatchRate and deleteDispatchRate keep in step with ``topicDispatchRate``."""
        ns = self.namespace(request)
        cluster = self.web.ctx.cluster
        value = None if request.method == "DELETE" else rate.parse(await read_body(request))
        keys = (rate.key, P.CLUSTER_DISPATCH_RATE) if rate.key == T.TOPIC_DISPATCH_RATE.namespace_field else (rate.key,)

        def change(policies: dict[str, Any]) -> None:
            for key in keys:
                rates = dict(policies.get(key) or {})
                if value is None:
                    rates.pop(cluster, None)
                else:
                    rates[cluster] = copy.deepcopy(value)
                if rates:
                    policies[key] = rates
                else:
                    policies.pop(key, None)
        await self.metadata.modify_policies(ns, change)
        return no_content()

    # -- backlog quotas ------------------------------------------------------------------------------
    async def get_backlog_quota_map(self, request: web.Request) -> web.Response:
        return json_response(self.metadata.policy(self.namespace(request), T.BACKLOG_QUOTAS.namespace_field) or {})

    async def get_backlog_quota(self, request: web.Request) -> web.Response:
        """The quota of one type in force for the namespace (its own, else the broker default)."""
        ns = self.namespace(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        stored = (self.metadata.policy(ns, T.BACKLOG_QUOTAS.namespace_field) or {}).get(quota_type)
        if stored is not None:
            return json_response(stored)
        return json_response(T.BACKLOG_QUOTAS.broker(self.web.ctx.config)[quota_type].to_json())

    async def set_backlog_quota(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        quota = BacklogQuota.from_json(await read_body(request))
        stored_retention = self.metadata.policy(ns, T.RETENTION.namespace_field)
        if not quota.within(None if stored_retention is None else T.RETENTION.parse(stored_retention)):
            raise HttpError(412, "Backlog Quota exceeds configured retention quota for namespace. "
                                 "Please increase retention quota and retry")
        await self.metadata.update_policy(ns, T.BACKLOG_QUOTAS.namespace_field,
                                          lambda quotas: {**(quotas or {}), quota_type: quota.to_json()})
        return no_content()

    async def remove_backlog_quota(self, request: web.Request) -> web.Response:
        ns = self.namespace(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        def change(quotas: dict[str, Any] | None) -> dict[str, Any] | None:
            remaining = {k: v for k, v in (quotas or {}).items() if k != quota_type}
            return remaining or None
        await self.metadata.update_policy(ns, T.BACKLOG_QUOTAS.namespace_field, change)
        return no_content()

    # -- plain policies --------------------------------------------------------------------------------
    async def get_plain(self, request: web.Request, policy: PlainPolicy) -> web.Response:
        ns = self.namespace(request, NO_POLICIES if policy.switch else NO_NAMESPACE)
        value = self.metadata.policy(ns, policy.key)
        if value is None and policy.unset is None and policy.synchronous:
            return no_content()
        return self._value_or_unset(policy.unset if value is None else value)

    async def set_plain(self, request: web.Request, policy: PlainPolicy) -> web.Response:
        ns = self.namespace(request)
        value = True if policy.switch else policy.parse(await read_body(request))
        if policy.check is not None:
            policy.check(value, self.web.ctx.config)
        await self.metadata.set_policy(ns, policy.key, value)
        self._applied(ns, policy.key)
        return no_content()

    async def remove_plain(self, request: web.Request, policy: PlainPolicy) -> web.Response:
        ns = self.namespace(request)
        await self.metadata.set_policy(ns, policy.key, False if policy.switch else None)
        self._applied(ns, policy.key)
        return no_content()

    def _applied(self, ns: str, key: str) -> None:
        """Retention and persistence reach the namespace's loaded topics at once (the others read
        policies when they load)."""
        if key in (T.RETENTION.namespace_field, T.PERSISTENCE.namespace_field):
            self.web.service.apply_ledger_policies_to(ns)
