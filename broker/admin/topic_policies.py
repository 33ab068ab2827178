"""Admin REST v2: topic-level policies (Pulsar's ``/admin/v2/{persistent|non-persistent}/{t}/{ns}/{topic}/<policy>``).

Backlog quotas have their own shape, as in Pulsar: ``POST`` / ``DELETE .../backlogQuota?backlogQuotaType=``
per type, ``GET .../backlogQuotaMap`` for all of them ({} when the topic has none).

Each policy is stored once per topic in the metadata store under Pulsar's TopicPolicies field
name; a partitioned topic's policy (set on its base name) applies to every partition, and a
partition's own name is refused (412), as in Pulsar. ``GET`` answers the topic's own value (when it has
none: 200 with no body, or 204 for the few Pulsar answers so: ``Spec.unset_status``), or with
``?applied=true`` the value in force (namespace, else broker). ``POST``
sets and ``DELETE`` removes (204 both). With topicLevelPoliciesEnabled=false every endpoint
answers 405 and stored values are ignored.

Each endpoint is a row of broker.metadata.policy_table (resolved topic over namespace over
broker), applied where the namespace policies apply: retention when a topic loads and at once for
a loaded one, message TTL and inactive-topic deletion at their periodic checks, deduplication and
the producer / consumer limits on the next SEND or client.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.cluster import validate_global_namespace
from broker.admin.common import (
    DOMAINS,
    NO_CONTENT,
    HttpError,
    bound,
    json_response,
    no_content,
    parse_topic_name,
    query_flag,
    read_body,
    unset_value,
)
from broker.admin.namespace_metadata import check_replication_clusters, parse_replication_clusters
from broker.metadata import policies as P
from broker.metadata import policy_table as T
from broker.metadata.policy_table import Policy
from broker.metadata.policy_values import JAVA_INT, JAVA_LONG, BacklogQuota, Retention
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.broker_service import BrokerService

TOPIC = "/admin/v2/{domain}/{{tenant}}/{{ns}}/{{topic}}"


@dataclass(frozen=True)
class Spec:
    path: str
    policy: Policy[Any]  # the row: its TopicPolicies field, and the value in force (GET ?applied=true)
    # Validation with the topic API's own message (a scalar), else the row's parser.
    parse: Callable[[Any], Any] | None = None
    query: str | None = None  # POST takes the value from this query parameter, not the body
    set_method: str = "POST"  # (Pulsar PUTs a few)
    # GET of a value not set: Pulsar answers its asynchronous resource methods 200 with no body, its synchronous ones
    # 204 (``unset_status``); a few give a default instead (``unset``).
    unset_status: int = 200
    unset: Any = None
    # Checks of a parsed value against the rest of the configuration: (service, name, value);
    # raises HttpError.
    validate: Callable[[BrokerService, TopicName, Any], None] | None = None
    removable: bool = True  # (Pulsar 4.0.7 has no DELETE of a topic's schemaValidationEnforced: 405)


def _retention_covers_quotas(service: BrokerService, name: TopicName, retention: Retention) -> None:
    quotas = service.policies.get(name, T.BACKLOG_QUOTAS).values()
    if not all(q.within(retention) for q in quotas):
        raise HttpError(412, "Retention Quota must exceed configured backlog quota for topic. "
                             "Please increase retention quota and retry")


def _within_broker_max_message_size(service: BrokerService, name: TopicName, size: int) -> None:
    if size > service.config.maxMessageSize:
        raise HttpError(412, "topic-level maxMessageSize must be greater than or equal to 0 and less than "
                             f"or equal to the broker's maxMessageSize ({service.config.maxMessageSize})")


def _replication_allowed(service: BrokerService, name: TopicName, clusters: list[str]) -> None:
    """PersistentTopicsBase.internalSetReplicationClusters for the topic's local policies (the only ones we keep):
    the local cluster must stay in the list (a topic leaves its cluster by its namespace's clusters, not by its own
    local policy), then each cluster is checked as a namespace's are, against the tenant's allowed clusters (not the
    namespace's: Pulsar's topic-level check does not read them)."""
    if service.config.clusterName not in clusters:
        raise HttpError(412, "Can not remove local cluster from the local topic-level replication clusters policy")
    check_replication_clusters(service.metadata, name.namespace.split("/")[0], clusters)


_JAVA_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # (what Java's Integer.valueOf reads)


def _query_java_int(param: str, raw: str) -> int:
    """A query parameter Pulsar declares an Integer: one that is not (not a number, or past a Java int) is a 404,
    as JAX-RS answers a @QueryParam it cannot convert (Jersey's QueryParamException)."""
    if _JAVA_INT_TEXT.fullmatch(raw) and JAVA_INT[0] <= int(raw) <= JAVA_INT[1]:
        return int(raw)
    raise HttpError(404, f"Query parameter {param} must be a Java int (an Integer), got {raw!r}")


def _limit(what: str, message: str, java_type: tuple[int, int] = JAVA_INT) -> Callable[[Any], int]:
    return lambda value: P.parse_limit(value, what, message, java_type)


SPECS = (
    Spec("messageTTL", T.MESSAGE_TTL, _limit("messageTTL", "Invalid value for message TTL"), query="messageTTL"),
    Spec("retention", T.RETENTION, validate=_retention_covers_quotas),
    Spec("deduplicationEnabled", T.DEDUPLICATION),
    Spec("deduplicationSnapshotInterval", T.DEDUP_SNAPSHOT_INTERVAL,
         _limit("deduplicationSnapshotInterval", "interval must be 0 or more")),
    Spec("maxProducers", T.MAX_PRODUCERS),
    Spec("maxConsumers", T.MAX_CONSUMERS),
    Spec("maxConsumersPerSubscription", T.MAX_CONSUMERS_PER_SUBSCRIPTION,
         _limit("maxConsumersPerSubscription", "Invalid value for maxConsumersPerSubscription"),
         unset_status=NO_CONTENT),
    Spec("maxSubscriptionsPerTopic", T.MAX_SUBSCRIPTIONS, unset_status=NO_CONTENT),
    Spec("maxUnackedMessagesOnConsumer", T.MAX_UNACKED_PER_CONSUMER,
         _limit("maxUnackedMessagesOnConsumer", "maxUnackedNum must be 0 or more")),
    Spec("maxUnackedMessagesOnSubscription", T.MAX_UNACKED_PER_SUBSCRIPTION,
         _limit("maxUnackedMessagesOnSubscription", "maxUnackedNum must be 0 or more")),
    Spec("subscriptionTypesEnabled", T.SUBSCRIPTION_TYPES_ENABLED, unset_status=NO_CONTENT),
    Spec("publishRate", T.PUBLISH_RATE, unset_status=NO_CONTENT),
    Spec("dispatchRate", T.TOPIC_DISPATCH_RATE),
    Spec("subscriptionDispatchRate", T.SUBSCRIPTION_DISPATCH_RATE),
    Spec("replicatorDispatchRate", T.REPLICATOR_DISPATCH_RATE),
    Spec("subscribeRate", T.SUBSCRIBE_RATE),
    Spec("delayedDelivery", T.DELAYED_DELIVERY),
    Spec("autoSubscriptionCreation", T.AUTO_SUBSCRIPTION_CREATION),
    Spec("schemaCompatibilityStrategy", T.SCHEMA_COMPATIBILITY_STRATEGY, set_method="PUT"),
    Spec("schemaValidationEnforced", T.SCHEMA_VALIDATION_ENFORCED, unset=False, removable=False),
    Spec("replication", T.REPLICATION_CLUSTERS, parse_replication_clusters, validate=_replication_allowed),
    Spec("persistence", T.PERSISTENCE),
    Spec("maxMessageSize", T.MAX_MESSAGE_SIZE, validate=_within_broker_max_message_size, unset_status=NO_CONTENT),
    Spec("compactionThreshold", T.COMPACTION_THRESHOLD,
         _limit("compactionThreshold", "Invalid value for compactionThreshold", JAVA_LONG)),
    Spec("inactiveTopicPolicies", T.INACTIVE_TOPIC_POLICIES),
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
                if spec.removable:
                    r.add_delete(path, bound(self.remove, spec))
            r.add_get(topic + "/backlogQuotaMap", self.get_backlog_quota_map)
            r.add_post(topic + "/backlogQuota", self.set_backlog_quota)
            r.add_delete(topic + "/backlogQuota", self.remove_backlog_quota)

    def register_last(self, r: web.UrlDispatcher) -> None:
        """``.../{topic}/{sub}/dispatchRate`` after every other route: a path such as
        ``.../{topic}/subscription/dispatchRate`` (the subscription named dispatchRate) is the literal route's,
        as JAX-RS prefers literal segments."""
        for domain in DOMAINS:
            path = TOPIC.format(domain=domain) + "/{sub}/dispatchRate"
            r.add_get(path, self.get_subscription_dispatch_rate)
            r.add_post(path, self.set_subscription_dispatch_rate)
            r.add_delete(path, self.remove_subscription_dispatch_rate)

    @property
    def service(self) -> BrokerService:
        return self.web.service

    def topic(self, request: web.Request) -> TopicName:
        """Pulsar's checks, in its order (PersistentTopicsBase.preValidation, after the caller's permission): policies
        on, not a partition, this cluster serves the namespace (validateGlobalNamespaceOwnershipAsync), the topic
        exists."""
        self.web.namespaces.namespace(request)  # 404 for a missing tenant or namespace
        if not self.service.config.topicLevelPoliciesEnabled:
            raise HttpError(405, "Topic level policies is disabled, to enable the topic level policy and retry.")
        m = request.match_info
        domain = request.path.split("/")[3]
        name = parse_topic_name(domain, m["tenant"], m["ns"], m["topic"])
        if name.partition_index >= 0:
            raise HttpError(412, "Not allowed to set/get topic policy for a partition")
        validate_global_namespace(self.service, request, name)  # (a namespace another cluster serves: 307 there)
        exists = (self.service.metadata.partitions_of(name.full) > 0 or self.service.get_topic_if_loaded(name)
                  is not None or self.service.topic_exists(name))
        if not exists:
            raise HttpError(404, f"Topic {name} not found")
        return name

    async def get(self, request: web.Request, spec: Spec) -> web.Response:
        name = self.topic(request)
        value = self.service.metadata.topic_policy(name.full, spec.policy.topic_field)
        if value is None and query_flag(request, "applied"):
            value = spec.policy.dump(self.service.policies.get(name, spec.policy))
        if value is None:
            value = spec.unset
        if value is None:
            return no_content() if spec.unset_status == NO_CONTENT else unset_value()
        return json_response(value)

    async def set(self, request: web.Request, spec: Spec) -> web.Response:
        # (Jersey reads a JSON body before the resource method runs: a malformed one is a 400 before the topic's 404.)
        body: object = await read_body(request) if spec.query is None else None
        name = self.topic(request)
        if spec.query is not None:
            raw = request.query.get(spec.query)
            if raw is None:  # Pulsar stores "no value": the same as DELETE
                return await self.remove(request, spec)
            body = _query_java_int(spec.query, raw)
        value = (spec.parse or spec.policy.parse)(body)
        if spec.validate is not None:
            spec.validate(self.service, name, value)
        if spec.policy is T.REPLICATION_CLUSTERS and (n := self.service.metadata.partitions_of(name.full)) > 0:
            await self.web.replicated.create_on(value, name, n)  # (Pulsar's internalSetReplicationClusters)
        await self.service.metadata.set_topic_policy(name.full, spec.policy.topic_field, spec.policy.dump(value))
        self._applied(name, spec)
        return no_content()

    async def remove(self, request: web.Request, spec: Spec) -> web.Response:
        name = self.topic(request)
        await self.service.metadata.set_topic_policy(name.full, spec.policy.topic_field, None)
        self._applied(name, spec)
        return no_content()

    def _applied(self, name: TopicName, spec: Spec) -> None:
        """Retention and persistence reach loaded topics at once (the others read policies when
        they load)."""
        if spec.policy in (T.RETENTION, T.PERSISTENCE):
            self.service.apply_ledger_policies_to(name.full)

    # -- one subscription's dispatch rate (TopicPolicies.subscriptionPolicies) ------------------------------
    async def get_subscription_dispatch_rate(self, request: web.Request) -> web.Response:
        """The subscription's own rate, 204 when it has none; with ?applied=true, then, the topic's
        subscriptionDispatchRate in force (Pulsar's internalGetSubscriptionLevelDispatchRate)."""
        name, sub = self.topic(request), request.match_info["sub"]
        rate = self.service.policies.subscription_level_dispatch_rate(name, sub)
        if rate is None and query_flag(request, "applied"):
            rate = self.service.policies.get(name, T.SUBSCRIPTION_DISPATCH_RATE)
        return unset_value() if rate is None else json_response(rate.to_json())

    async def set_subscription_dispatch_rate(self, request: web.Request) -> web.Response:
        """Sets the subscription's own rate (the subscription need not exist yet). A rate with neither
        measure limited changes nothing, as Pulsar's DispatchRateImpl.normalize makes it no value."""
        name, sub = self.topic(request), request.match_info["sub"]
        rate = T.SUBSCRIPTION_LEVEL_DISPATCH_RATE.parse(await read_body(request))
        if rate.messages <= 0 and rate.bytes <= 0:
            return no_content()
        await self._update_subscription_policy(name, sub, rate.to_json())
        return no_content()

    async def remove_subscription_dispatch_rate(self, request: web.Request) -> web.Response:
        name, sub = self.topic(request), request.match_info["sub"]
        await self._update_subscription_policy(name, sub, None)
        return no_content()

    async def _update_subscription_policy(self, name: TopicName, sub: str, rate: dict[str, Any] | None) -> None:
        """Set (or, None, remove) one subscription's dispatch rate; a subscription left with no policy is
        dropped from the map, as Pulsar's SubscriptionPolicies.checkEmpty."""
        def change(subscriptions: dict[str, Any] | None) -> dict[str, Any] | None:
            subscriptions = dict(subscriptions or {})
            own = dict(subscriptions.get(sub) or {})
            if rate is None:
                own.pop(T.SUBSCRIPTION_DISPATCH_RATE_KEY, None)
            else:
                own[T.SUBSCRIPTION_DISPATCH_RATE_KEY] = rate
            if own:
                subscriptions[sub] = own
            else:
                subscriptions.pop(sub, None)
            return subscriptions or None
        await self.service.metadata.update_topic_policy(name.full, T.SUBSCRIPTION_POLICIES_FIELD, change)

    # -- backlog quotas: one entry per quota type ------------------------------------------------------
    async def get_backlog_quota_map(self, request: web.Request) -> web.Response:
        """The topic's own quotas ({} when none); with ?applied=true, when it has none, what is in
        force for each type (the namespace's map, else the broker's defaults)."""
        name = self.topic(request)
        quotas = self.service.metadata.topic_policy(name.full, T.BACKLOG_QUOTAS.topic_field) or {}
        if not quotas and query_flag(request, "applied"):
            quotas = (self.service.metadata.policy(name.namespace, T.BACKLOG_QUOTAS.namespace_field)
                      or T.BACKLOG_QUOTAS.dump(self.service.policies.broker_value(T.BACKLOG_QUOTAS)))
        return json_response(quotas)

    async def set_backlog_quota(self, request: web.Request) -> web.Response:
        name = self.topic(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        quota = BacklogQuota.from_json(await read_body(request))
        if not quota.within(self.service.policies.get(name, T.RETENTION)):
            raise HttpError(412, "Backlog Quota exceeds configured retention quota for topic. "
                                 "Please increase retention quota and retry")
        await self._update_quotas(name, quota_type, quota.to_json())
        return no_content()

    async def remove_backlog_quota(self, request: web.Request) -> web.Response:
        name = self.topic(request)
        await self._update_quotas(name, P.parse_backlog_quota_type(request.query.get("backlogQuotaType")), None)
        return no_content()

    async def _update_quotas(self, name: TopicName, quota_type: str, quota: dict[str, Any] | None) -> None:
        def change(quotas: dict[str, Any] | None) -> dict[str, Any] | None:
            quotas = dict(quotas or {})
            if quota is None:
                quotas.pop(quota_type, None)
            else:
                quotas[quota_type] = quota
            return quotas or None
        await self.service.metadata.update_topic_policy(name.full, T.BACKLOG_QUOTAS.topic_field, change)
