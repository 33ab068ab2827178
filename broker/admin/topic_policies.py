"""Admin REST v2: topic-level policies (Pulsar's ``/admin/v2/{persistent|non-persistent}/{t}/{ns}/{topic}/<policy>``).

Backlog quotas have their own shape, as in Pulsar: ``POST`` / ``DELETE .../backlogQuota?backlogQuotaType=``
per type, ``GET .../backlogQuotaMap`` for all of them ({} when the topic has none).

Each policy is stored once per topic in the metadata store under Pulsar's TopicPolicies field
name; a partitioned topic's policy (set on its base name) applies to every partition, and a
partition's own name is refused (412), as in Pulsar. ``GET`` answers the topic's own value (when it has
none: 200 with no body, or 204 for the few Pulsar answers so: ``Spec.unset_status``), or with
``?applied=true`` the value in force. ``POST``
sets and ``DELETE`` removes (204 both); an on/off switch (``Spec.switch``) is turned on and off instead.
With topicLevelPoliciesEnabled=false every endpoint answers 405 and stored values are ignored.
``DELETE .../policies`` removes all of a topic's.

Local and global: every call takes Pulsar's ``isGlobal`` (``pulsar-admin topic-policies ... -g``). A topic has two
sets of policies, its local ones (the default) and its global ones, each read, set and removed on its own; in force is
the local value, else the global one, else the namespace's, else the broker's (Pulsar's PolicyHierarchyValue).
``?applied=true`` answers that value in force, where Pulsar's admin skips the other kind (a topic with only a global
value answers its namespace's value to a local ``applied`` GET there, while the broker enforces the global one).

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
    is_global,
    json_response,
    no_content,
    parse_topic_name,
    query_flag,
    read_body,
    unset_value,
)
from broker.admin.global_policies import is_copy, removals, request_call
from broker.admin.namespace_metadata import check_replication_clusters, parse_replication_clusters
from broker.admin.peers import path_segment
from broker.metadata import policies as P
from broker.metadata import policy_table as T
from broker.metadata.policy_table import Policy
from broker.metadata.policy_values import JAVA_INT, JAVA_LONG, BacklogQuota, Retention
from broker.service.offload import TOPIC_POLICIES_FIELD as OFFLOAD_POLICIES_FIELD
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
    # Checks of a parsed value against the rest of the configuration: (service, name, value, is_global);
    # raises HttpError.
    validate: Callable[[BrokerService, TopicName, Any, bool], None] | None = None
    removable: bool = True  # (Pulsar 4.0.7 has no DELETE of a topic's schemaValidationEnforced: 405)
    # A GET of a value not set where the topic has policies of that kind (Pulsar's TopicPolicies object, made by any
    # change), when Pulsar's object has a default there: its subscriptionTypesEnabled is an empty list.
    unset_in_policies: Any = None
    # Whether the policy has a global kind: Pulsar 4.0.7's schema compatibility strategy and validation take no
    # isGlobal (both always the topic's local policies).
    has_global: bool = True
    # An on/off switch (Pulsar 4.0.7's dispatcherPauseOnAckStatePersistent): POST turns it on (a body is not read),
    # DELETE off (false stored where the topic has policies of that kind, else nothing changes: Pulsar skips the update
    # then), GET answers the topic's own value, false when unset, ``applied`` or not (Pulsar's ignores it).
    switch: bool = False


def _retention_covers_quotas(service: BrokerService, name: TopicName, retention: Retention, is_global: bool) -> None:
    quotas = service.policies.get(name, T.BACKLOG_QUOTAS).values()
    if not all(q.within(retention) for q in quotas):
        raise HttpError(412, "Retention Quota must exceed configured backlog quota for topic. "
                             "Please increase retention quota and retry")


def _within_broker_max_message_size(service: BrokerService, name: TopicName, size: int, is_global: bool) -> None:
    if size > service.config.maxMessageSize:
        raise HttpError(412, "topic-level maxMessageSize must be greater than or equal to 0 and less than "
                             f"or equal to the broker's maxMessageSize ({service.config.maxMessageSize})")


def _replication_allowed(service: BrokerService, name: TopicName, clusters: list[str], is_global: bool) -> None:
    """PersistentTopicsBase.internalSetReplicationClusters: a local policy must keep the local cluster in the list (a
    topic leaves its cluster by its namespace's clusters, not by its own local policy); a global one is copied to the
    namespace's replication clusters only, so the namespace must replicate (two clusters or more) and the list name
    none but those. Then each cluster is checked as a namespace's are, against the tenant's allowed clusters (not
    the namespace's: Pulsar's topic-level check does not read them)."""
    if not is_global and service.config.clusterName not in clusters:
        raise HttpError(412, "Can not remove local cluster from the local topic-level replication clusters policy")
    if is_global:
        namespace_clusters = service.policies.namespace_value(name.namespace, T.REPLICATION_CLUSTERS) or []
        if len(namespace_clusters) < 2:
            raise HttpError(412, "Please do not use the global topic level policy when namespace-level replication "
                                 "is not enabled, because the global level policy relies on namespace-level "
                                 "replication")
        if any(c not in namespace_clusters for c in clusters):
            raise HttpError(412, "The policies at the global topic level will only be copied to the clusters "
                                 "included in the namespace level replication. Therefore, please do not set the "
                                 "policies including other clusters")
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
    Spec("subscriptionTypesEnabled", T.SUBSCRIPTION_TYPES_ENABLED, unset_status=NO_CONTENT, unset_in_policies=[]),
    Spec("publishRate", T.PUBLISH_RATE, unset_status=NO_CONTENT),
    Spec("dispatchRate", T.TOPIC_DISPATCH_RATE),
    Spec("subscriptionDispatchRate", T.SUBSCRIPTION_DISPATCH_RATE),
    Spec("replicatorDispatchRate", T.REPLICATOR_DISPATCH_RATE),
    Spec("subscribeRate", T.SUBSCRIBE_RATE),
    Spec("delayedDelivery", T.DELAYED_DELIVERY),
    Spec("autoSubscriptionCreation", T.AUTO_SUBSCRIPTION_CREATION),
    Spec("schemaCompatibilityStrategy", T.SCHEMA_COMPATIBILITY_STRATEGY, set_method="PUT", has_global=False),
    Spec("schemaValidationEnforced", T.SCHEMA_VALIDATION_ENFORCED, unset=False, removable=False, has_global=False),
    Spec("replication", T.REPLICATION_CLUSTERS, parse_replication_clusters, validate=_replication_allowed),
    Spec("persistence", T.PERSISTENCE),
    Spec("maxMessageSize", T.MAX_MESSAGE_SIZE, validate=_within_broker_max_message_size, unset_status=NO_CONTENT),
    Spec("compactionThreshold", T.COMPACTION_THRESHOLD,
         _limit("compactionThreshold", "Invalid value for compactionThreshold", JAVA_LONG)),
    Spec("inactiveTopicPolicies", T.INACTIVE_TOPIC_POLICIES),
    Spec("dispatcherPauseOnAckStatePersistent", T.DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT, unset=False, switch=True),
)


def spec_global(request: web.Request, spec: Spec) -> bool:
    """Whether the call is about the topic's global value of ``spec``'s policy (isGlobal=true, where it has one)."""
    return spec.has_global and is_global(request)


# The path whose DELETE removes each removable policy (TopicPolicies field -> path), for copies of a removal.
REMOVAL_PATHS = {**{spec.policy.topic_field: spec.path for spec in SPECS if spec.removable},
                 OFFLOAD_POLICIES_FIELD: "offloadPolicies"}


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
            r.add_delete(topic + "/policies", self.delete_all)
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
        if is_copy(request):  # (another cluster's global policy: kept for the topic, made here or not)
            return name
        exists = (self.service.metadata.partitions_of(name.full) > 0 or self.service.get_topic_if_loaded(name)
                  is not None or self.service.topic_exists(name))
        if not exists:
            raise HttpError(404, f"Topic {name} not found")
        return name

    async def get(self, request: web.Request, spec: Spec) -> web.Response:
        name = self.topic(request)
        global_ = spec_global(request, spec)
        value = self.service.metadata.topic_policy(name.full, spec.policy.topic_field, global_)
        if value is None and query_flag(request, "applied") and not spec.switch:
            value = spec.policy.dump(self.service.policies.get(name, spec.policy))
        if value is None and spec.unset_in_policies is not None:
            value = spec.unset_in_policies if self._has_policies(name, global_) else None
        if value is None:
            value = spec.unset
        if value is None:
            return no_content() if spec.unset_status == NO_CONTENT else unset_value()
        return json_response(value)

    def _has_policies(self, name: TopicName, global_: bool) -> bool:
        """Whether the topic has policies of that kind (Pulsar's TopicPolicies object, made by any change of one)."""
        metadata = self.service.metadata
        return name.full in (metadata.global_topic_policies if global_ else metadata.topic_policies)

    async def set(self, request: web.Request, spec: Spec) -> web.Response:
        # (Jersey reads a JSON body before the resource method runs: a malformed one is a 400 before the topic's 404.)
        body: object = await read_body(request) if spec.query is None and not spec.switch else None
        name = self.topic(request)
        if spec.query is not None:
            raw = request.query.get(spec.query)
            if raw is None:  # Pulsar stores "no value": the same as DELETE
                return await self.remove(request, spec)
            body = _query_java_int(spec.query, raw)
        value: Any = True if spec.switch else (spec.parse or spec.policy.parse)(body)
        global_ = spec_global(request, spec)
        if spec.validate is not None:
            spec.validate(self.service, name, value, global_)
        if (spec.policy is T.REPLICATION_CLUSTERS and not is_copy(request)
                and (n := self.service.metadata.partitions_of(name.full)) > 0):
            await self.web.replicated.create_on(value, name, n)  # (Pulsar's internalSetReplicationClusters)
        await self.service.metadata.set_topic_policy(name.full, spec.policy.topic_field, spec.policy.dump(value),
                                                     global_)
        self._applied(name, spec)
        if global_:
            await self.copied(request, name, spec.path, body if spec.query is None else None)
        return no_content()

    async def remove(self, request: web.Request, spec: Spec) -> web.Response:
        name = self.topic(request)
        global_ = spec_global(request, spec)
        if not spec.switch:
            await self.service.metadata.set_topic_policy(name.full, spec.policy.topic_field, None, global_)
        elif self._has_policies(name, global_):
            await self.service.metadata.set_topic_policy(name.full, spec.policy.topic_field, False, global_)
        self._applied(name, spec)
        if global_:
            await self.copied(request, name, spec.path)
        return no_content()

    async def copied(self, request: web.Request, name: TopicName, policy_path: str, body: object = None) -> None:
        """A global policy's change, stored: kept to be sent to the namespace's other replication clusters."""
        if is_global(request):
            await self.web.global_policies.copy(request, name, [request_call(request, policy_path, body)])

    async def delete_all(self, request: web.Request) -> web.Response:
        """``DELETE .../policies`` (pulsar-admin ``topic-policies delete``): every topic-level policy of the topic,
        local and global, gone at once (Pulsar's deleteTopicPolicies, which checks
        the name and the caller's permission, not that the topic or its policies exist: 204 either way)."""
        m = request.match_info
        name = parse_topic_name(request.path.split("/")[3], m["tenant"], m["ns"], m["topic"])
        global_ = dict(self.service.metadata.global_topic_policies.get(name.full) or {})
        await self.service.metadata.forget_topic_policies(name.full)
        self.service.apply_ledger_policies_to(name.full)
        await self.web.global_policies.copy(request, name, removals(global_, REMOVAL_PATHS))
        return no_content()

    def _applied(self, name: TopicName, spec: Spec) -> None:
        """Retention and persistence reach loaded topics at once (the others read policies when
        they load)."""
        if spec.policy in (T.RETENTION, T.PERSISTENCE):
            self.service.apply_ledger_policies_to(name.full)

    # -- one subscription's dispatch rate (TopicPolicies.subscriptionPolicies) ------------------------------
    async def get_subscription_dispatch_rate(self, request: web.Request) -> web.Response:
        """The subscription's own rate, 204 when it has none; with ?applied=true, then, the topic's
        subscriptionDispatchRate in force (Pulsar's internalGetSubscriptionLevelDispatchRate); the own rate in force is
        the local one, else the global one."""
        name, sub = self.topic(request), request.match_info["sub"]
        rate = self.service.policies.subscription_level_dispatch_rate(name, sub, is_global(request))
        if rate is None and query_flag(request, "applied"):
            rate = self.service.policies.subscription_dispatch_rate(name, sub)
        return unset_value() if rate is None else json_response(rate.to_json())

    async def set_subscription_dispatch_rate(self, request: web.Request) -> web.Response:
        """Sets the subscription's own rate (the subscription need not exist yet). A rate with neither
        measure limited changes nothing, as Pulsar's DispatchRateImpl.normalize makes it no value."""
        name, sub = self.topic(request), request.match_info["sub"]
        rate = T.SUBSCRIPTION_LEVEL_DISPATCH_RATE.parse(await read_body(request))
        if rate.messages <= 0 and rate.bytes <= 0:
            return no_content()
        await self._update_subscription_policy(name, sub, rate.to_json(), is_global(request))
        await self.copied(request, name, f"{path_segment(sub)}/dispatchRate", rate.to_json())
        return no_content()

    async def remove_subscription_dispatch_rate(self, request: web.Request) -> web.Response:
        name, sub = self.topic(request), request.match_info["sub"]
        await self._update_subscription_policy(name, sub, None, is_global(request))
        await self.copied(request, name, f"{path_segment(sub)}/dispatchRate")
        return no_content()

    async def _update_subscription_policy(self, name: TopicName, sub: str, rate: dict[str, Any] | None,
                                          global_: bool) -> None:
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
        await self.service.metadata.update_topic_policy(name.full, T.SUBSCRIPTION_POLICIES_FIELD, change, global_)

    # -- backlog quotas: one entry per quota type ------------------------------------------------------
    async def get_backlog_quota_map(self, request: web.Request) -> web.Response:
        """The topic's own quotas ({} when none); with ?applied=true, when it has none, what is in
        force for each type (the namespace's map, else the broker's defaults)."""
        name = self.topic(request)
        quotas = self.service.metadata.topic_policy(name.full, T.BACKLOG_QUOTAS.topic_field, is_global(request)) or {}
        if not quotas and query_flag(request, "applied"):
            quotas = (self.service.metadata.policy(name.namespace, T.BACKLOG_QUOTAS.namespace_field)
                      or T.BACKLOG_QUOTAS.dump(self.service.policies.broker_value(T.BACKLOG_QUOTAS)))
        return json_response(quotas)

    async def set_backlog_quota(self, request: web.Request) -> web.Response:
        name = self.topic(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        body = await read_body(request)
        quota = BacklogQuota.from_json(body)
        if not quota.within(self.service.policies.get(name, T.RETENTION)):
            raise HttpError(412, "Backlog Quota exceeds configured retention quota for topic. "
                                 "Please increase retention quota and retry")
        await self._update_quotas(name, quota_type, quota.to_json(), is_global(request))
        await self.copied(request, name, "backlogQuota", body)
        return no_content()

    async def remove_backlog_quota(self, request: web.Request) -> web.Response:
        name = self.topic(request)
        quota_type = P.parse_backlog_quota_type(request.query.get("backlogQuotaType"))
        await self._update_quotas(name, quota_type, None, is_global(request))
        await self.copied(request, name, "backlogQuota")
        return no_content()

    async def _update_quotas(self, name: TopicName, quota_type: str, quota: dict[str, Any] | None,
                             global_: bool) -> None:
        def change(quotas: dict[str, Any] | None) -> dict[str, Any] | None:
            quotas = dict(quotas or {})
            if quota is None:
                quotas.pop(quota_type, None)
            else:
                quotas[quota_type] = quota
            return quotas or None
        await self.service.metadata.update_topic_policy(name.full, T.BACKLOG_QUOTAS.topic_field, change, global_)
