"""Admin REST v2: topic-level policies (Pulsar's ``/admin/v2/{persistent|non-persistent}/{t}/{ns}/{topic}/<policy>``).

Backlog quotas have their own shape, as in Pulsar: ``POST`` / ``DELETE .../backlogQuota?backlogQuotaType=``
per type, ``GET .../backlogQuotaMap`` for all of them ({} when the topic has none).

Each policy is stored once per topic in the metadata store under Pulsar's TopicPolicies field
name; a partitioned topic's policy (set on its base name) applies to every partition, and a
partition's own name is refused (412), as in Pulsar. ``GET`` answers the topic's own value, 204
when it has none, or with ``?applied=true`` the value in force (namespace, else broker). ``POST``
sets and ``DELETE`` removes (204 both). With topicLevelPoliciesEnabled=false every endpoint
answers 405 and stored values are ignored.

The service applies them where the namespace policies apply (broker.service.broker_service's
``effective_policy``): retention when a topic loads and at once for a loaded one, message TTL and
inactive-topic deletion at their periodic checks, deduplication and the producer / consumer
limits on the next SEND or client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import DOMAINS, HttpError, bound, json_response, no_content, query_flag, read_body
from broker.admin.namespace_metadata import check_replication_clusters, parse_replication_clusters
from broker.metadata import policies as P
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.broker_service import BrokerService

TOPIC = "/admin/v2/{domain}/{{tenant}}/{{ns}}/{{topic}}"


@dataclass(frozen=True)
class Spec:
    path: str
    key: str  # TopicPolicies field
    namespace_key: str | None  # the Policies field it overrides
    broker_default: Callable[[BrokerService], Any]  # the broker's value
    parse: Callable[[Any], Any]
    query: str | None = None  # POST takes the value from this query parameter, not the body
    set_method: str = "POST"  # (Pulsar PUTs a few)
    # Checks of a parsed value against the rest of the configuration: (service, name, value);
    # raises HttpError.
    validate: Callable[[BrokerService, TopicName, Any], None] | None = None
    # The value in force (GET ?applied=true) when it is not namespace_key's, else broker_default.
    applied: Callable[[BrokerService, TopicName], Any] | None = None


def _retention_covers_quotas(service: BrokerService, name: TopicName, retention: Any) -> None:
    quotas = [service.backlog_quotas.quota_doc(name, t) for t in P.BACKLOG_QUOTA_TYPES]
    if not all(P.check_quota_within_retention(q, retention) for q in quotas):
        raise HttpError(412, "Retention Quota must exceed configured backlog quota for topic. "
                             "Please increase retention quota and retry")


def _within_broker_max_message_size(service: BrokerService, name: TopicName, size: int) -> None:
    if size > service.config.maxMessageSize:
        raise HttpError(412, "topic-level maxMessageSize must be greater than or equal to 0 and less than "
                             f"or equal to the broker's maxMessageSize ({service.config.maxMessageSize})")


def _replication_allowed(service: BrokerService, name: TopicName, clusters: list[str]) -> None:
    check_replication_clusters(service.metadata, name.namespace.split("/")[0], clusters)


def _ttl(value: Any) -> int:
    return P.parse_limit(value, "messageTTL", "Invalid value for message TTL")


SPECS = (
    Spec("messageTTL", P.T_MESSAGE_TTL, P.MESSAGE_TTL, lambda s: s.config.ttlDurationDefaultInSeconds, _ttl,
         query="messageTTL"),
    Spec("retention", P.T_RETENTION, P.RETENTION,
         lambda s: s.default_retention(), P.parse_retention, validate=_retention_covers_quotas),
    Spec("deduplicationEnabled", P.T_DEDUPLICATION, P.DEDUPLICATION, lambda s: s.config.brokerDeduplicationEnabled,
         lambda v: P.parse_bool(v, "deduplicationEnabled")),
    Spec("deduplicationSnapshotInterval", P.T_DEDUP_SNAPSHOT_INTERVAL, P.DEDUP_SNAPSHOT_INTERVAL,
         lambda s: s.config.brokerDeduplicationSnapshotIntervalSeconds,
         lambda v: P.parse_limit(v, "deduplicationSnapshotInterval", "interval must be 0 or more")),
    Spec("maxProducers", P.T_MAX_PRODUCERS, P.MAX_PRODUCERS_PER_TOPIC, lambda s: s.config.maxProducersPerTopic,
         lambda v: P.parse_limit(v, "maxProducers")),
    Spec("maxConsumers", P.T_MAX_CONSUMERS, P.MAX_CONSUMERS_PER_TOPIC, lambda s: s.config.maxConsumersPerTopic,
         lambda v: P.parse_limit(v, "maxConsumers")),
    Spec("maxConsumersPerSubscription", P.T_MAX_CONSUMERS_PER_SUBSCRIPTION, P.MAX_CONSUMERS_PER_SUBSCRIPTION,
         lambda s: s.config.maxConsumersPerSubscription,
         lambda v: P.parse_limit(v, "maxConsumersPerSubscription", "Invalid value for maxConsumersPerSubscription")),
    Spec("maxSubscriptionsPerTopic", P.T_MAX_SUBSCRIPTIONS, P.MAX_SUBSCRIPTIONS_PER_TOPIC,
         lambda s: s.config.maxSubscriptionsPerTopic, lambda v: P.parse_limit(v, "maxSubscriptionsPerTopic")),
    Spec("maxUnackedMessagesOnConsumer", P.T_MAX_UNACKED_ON_CONSUMER, P.MAX_UNACKED_PER_CONSUMER,
         lambda s: s.config.maxUnackedMessagesPerConsumer,
         lambda v: P.parse_limit(v, "maxUnackedMessagesOnConsumer", "maxUnackedNum must be 0 or more")),
    Spec("maxUnackedMessagesOnSubscription", P.T_MAX_UNACKED_ON_SUBSCRIPTION, P.MAX_UNACKED_PER_SUBSCRIPTION,
         lambda s: s.config.maxUnackedMessagesPerSubscription,
         lambda v: P.parse_limit(v, "maxUnackedMessagesOnSubscription", "maxUnackedNum must be 0 or more")),
    Spec("subscriptionTypesEnabled", P.T_SUBSCRIPTION_TYPES_ENABLED, P.SUBSCRIPTION_TYPES_ENABLED,
         lambda s: s.subscription_types_broker(), P.parse_subscription_types,
         applied=lambda s, name: s.subscription_types_enabled(name)),
    Spec("publishRate", P.T_PUBLISH_RATE, None, lambda s: None, P.parse_publish_rate,
         applied=lambda s, name: s.publish_rate_doc(name)),  # (the namespace's is per cluster)
    Spec("dispatchRate", P.T_DISPATCH_RATE, None, lambda s: None, P.parse_dispatch_rate,
         applied=lambda s, name: s.dispatch_rate_doc(name, "topic")),
    Spec("subscriptionDispatchRate", P.T_SUBSCRIPTION_DISPATCH_RATE, None, lambda s: None, P.parse_dispatch_rate,
         applied=lambda s, name: s.dispatch_rate_doc(name, "subscription")),
    Spec("replicatorDispatchRate", P.T_REPLICATOR_DISPATCH_RATE, None, lambda s: None, P.parse_dispatch_rate,
         applied=lambda s, name: s.dispatch_rate_doc(name, "replicator")),
    Spec("subscribeRate", P.T_SUBSCRIBE_RATE, None, lambda s: None, P.parse_subscribe_rate,
         applied=lambda s, name: s.subscribe_rate_doc(name)),
    Spec("delayedDelivery", P.T_DELAYED_DELIVERY, P.DELAYED_DELIVERY, lambda s: None, P.parse_delayed_delivery,
         applied=lambda s, name: s.delayed_delivery(name)),
    Spec("autoSubscriptionCreation", P.T_AUTO_SUBSCRIPTION_CREATION, P.AUTO_SUBSCRIPTION_CREATION,
         lambda s: {"allowAutoSubscriptionCreation": s.config.allowAutoSubscriptionCreation},
         P.parse_auto_subscription_creation),
    Spec("schemaCompatibilityStrategy", P.T_SCHEMA_STRATEGY, None, lambda s: None, P.parse_schema_strategy,
         set_method="PUT", applied=lambda s, name: s.schemas.strategy(name.base.full)),
    Spec("schemaValidationEnforced", P.T_SCHEMA_VALIDATION_ENFORCED, P.SCHEMA_VALIDATION_ENFORCED,
         lambda s: s.config.isSchemaValidationEnforced, lambda v: P.parse_bool(v, "schemaValidationEnforced")),
    Spec("replication", P.T_REPLICATION_CLUSTERS, P.REPLICATION_CLUSTERS, lambda s: [s.config.clusterName],
         parse_replication_clusters, validate=_replication_allowed),
    Spec("persistence", P.T_PERSISTENCE, P.PERSISTENCE, lambda s: None, P.parse_persistence),
    Spec("maxMessageSize", P.T_MAX_MESSAGE_SIZE, None, lambda s: s.config.maxMessageSize,
         lambda v: P.parse_limit(v, "maxMessageSize"), validate=_within_broker_max_message_size,
         applied=lambda s, name: s.topic_policy(name, P.T_MAX_MESSAGE_SIZE) or s.config.maxMessageSize),
    Spec("compactionThreshold", P.T_COMPACTION_THRESHOLD, P.COMPACTION_THRESHOLD,
         lambda s: s.config.brokerServiceCompactionThresholdInBytes,
         lambda v: P.parse_limit(v, "compactionThreshold", "Invalid value for compactionThreshold")),
    Spec("inactiveTopicPolicies", P.T_INACTIVE_TOPIC_POLICIES, P.INACTIVE_TOPIC_POLICIES,
         lambda s: s.inactive_topics.broker_policy(), P.parse_inactive_topic_policies),
)


class TopicPoliciesResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        for domain in DOMAINS:
            topic = TOPIC.format(domain=domain)
            for spec in SPECS:
                path = f"{topic}/{spec.path}"
                r.add_get(path, bound(self.get, spec))
                r.add_route(spec.set_method, path, bound(self.set, spec))
                r.add_delete(path, bound(self.remove, spec))
            r.add_get(topic + "/backlogQuotaMap", self.get_backlog_quota_map)
            r.add_post(topic + "/backlogQuota", self.set_backlog_quota)
            r.add_delete(topic + "/backlogQuota", self.remove_backlog_quota)

    @property
    def service(self) -> BrokerService:
        return self.web.service

    def topic(self, request: web.Request) -> TopicName:
        """Pulsar's checks, in its order: policies on, not a partition, the topic exists."""
        self.web.namespaces.namespace(request)  # 404 for a missing tenant or namespace
        if not self.service.config.topicLevelPoliciesEnabled:
            raise HttpError(405, "Topic level policies is disabled, to enable the topic level policy and retry.")
        m = request.match_info
        domain = request.path.split("/")[3]
        name = TopicName.parse(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}")
        if name.partition_index >= 0:
            raise HttpError(412, "Not allowed to set/get topic policy for a partition")
        exists = (self.service.metadata.partitions_of(name.full) > 0 or self.service.get_topic_if_loaded(name)
                  is not None or self.service.topic_exists(name))
        if not exists:
            raise HttpError(404, f"Topic {name} not found")
        return name

    async def get(self, request: web.Request, spec: Spec) -> web.Response:
        name = self.topic(request)
        value = self.service.metadata.topic_policy(name.full, spec.key)
        if value is None and query_flag(request, "applied"):
            if spec.applied is not None:
                value = spec.applied(self.service, name)
            else:
                value = self.service.effective_policy(name, spec.key, spec.namespace_key,
                                                      spec.broker_default(self.service))
        return no_content() if value is None else json_response(value)

    async def set(self, request: web.Request, spec: Spec) -> web.Response:
        name = self.topic(request)
        if spec.query is not None:
            raw = request.query.get(spec.query)
            if raw is None:  # Pulsar stores "no value": the same as DELETE
                return await self.remove(request, spec)
            try:
                body: object = int(raw)
            except ValueError:
                raise HttpError(400, f"{spec.query} must be an integer, got {raw!r}") from None
        else:
            body = await read_body(request)
        value = spec.parse(body)
        if spec.validate is not None:
            spec.validate(self.service, name, value)
        self.service.metadata.set_topic_policy(name.full, spec.key, value)
        self._applied(name, spec)
        return no_content()

    async def remove(self, request: web.Request, spec: Spec) -> web.Response:
        name = self.topic(request)
        self.service.metadata.set_topic_policy(name.full, spec.key, None)
        self._applied(name, spec)
        return no_content()

    def _applied(self, name: TopicName, spec: Spec) -> None:
        """Retention and persistence reach loaded topics at once (the others read policies when
        they load)."""
        if spec.key in (P.T_RETENTION, P.T_PERSISTENCE):
            self.service.apply_ledger_policies_to(name.full)

    # -- backlog quotas: one entry per quota type ------------------------------------------------------
    async def get_backlog_quota_map(self, request: web.Request) -> web.Response:
        """The topic's own quotas ({} when none); with ?applied=true, when it has none, what is in
        force for each type (the namespace's map, else the broker's defaults)."""
        name = self.topic(request)
        quotas = self.service.metadata.topic_policy(name.full, P.T_BACKLOG_QUOTA_MAP) or {}
        if not quotas and query_flag(request, "applied"):
            quotas = self.service.metadata.policy(name.namespace, P.BACKLOG_QUOTA_MAP) or {
                t: self.service.backlog_quotas.quota_doc(name, t) for t in P.BACKLOG_QUOTA_TYPES}
        return json_response(quotas)

    async def set_backlog_quota(self, request: web.Request) -> web.Response:
        name = self.topic(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        quota = P.parse_backlog_quota(await read_body(request))
        if not P.check_quota_within_retention(quota, self.service.retention(name)):
            raise HttpError(412, "Backlog Quota exceeds configured retention quota for topic. "
                                 "Please increase retention quota and retry")
        self._update_quotas(name, quota_type, quota)
        return no_content()

    async def remove_backlog_quota(self, request: web.Request) -> web.Response:
        name = self.topic(request)
        self._update_quotas(name, P.parse_backlog_quota_type(request.query.get("backlogQuotaType")), None)
        return no_content()

    def _update_quotas(self, name: TopicName, quota_type: str, quota: dict[str, Any] | None) -> None:
        quotas = dict(self.service.metadata.topic_policy(name.full, P.T_BACKLOG_QUOTA_MAP) or {})
        if quota is None:
            quotas.pop(quota_type, None)
        else:
            quotas[quota_type] = quota
        self.service.metadata.set_topic_policy(name.full, P.T_BACKLOG_QUOTA_MAP, quotas or None)
