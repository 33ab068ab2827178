"""The policy table: for each policy, where it is stored and what it is, and the one resolver.

Every policy a topic obeys is one row of this table, a typed ``Policy[T]``: its name, its field
in Pulsar's TopicPolicies (stored per topic), its field in Pulsar's Policies (stored per
namespace), the broker's setting it falls back to, and how its stored JSON is read (``parse``,
validating) and written (``dump``). ``PolicyResolver.get(name, MAX_PRODUCERS)`` answers the value
in force for a topic: its own (when topic-level policies are on; a partition has its partitioned
topic's; its local value, else its global one), else its namespace's, else the broker's, each taken
whole (a topic's retention does not inherit its namespace's size limit). mypy checks each caller:
``get(name, RETENTION)`` is a Retention.

A few rows differ from that rule, each said in its row: the rates a namespace keeps per cluster
(``per_cluster``), sets where an empty value means "not set" (``unset``), the backlog quota map
resolved per quota type (``overlay``), a namespace's older field read when its own is unset (``older``), and
namespace-only or topic-only policies (a key of None).

Nothing reads policy JSON elsewhere: the admin API validates a body with the row's ``parse``
(or a scalar parser with its own message) and stores ``dump(value)``; the store keeps Pulsar's
field names, so existing data directories load unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from broker.metadata.policy_values import (
    DESTINATION_STORAGE,
    JAVA_INT,
    JAVA_LONG,
    MESSAGE_AGE,
    AutoSubscriptionCreation,
    AutoTopicCreation,
    BacklogQuota,
    BacklogQuotas,
    DelayedDelivery,
    DispatchRate,
    InactiveTopicPolicies,
    Persistence,
    PolicyError,
    PublishRate,
    Retention,
    SubscribeRate,
    backlog_quotas_from_json,
    backlog_quotas_to_json,
    parse_bool,
    parse_limit,
    parse_replication_clusters,
    parse_schema_strategy,
    parse_subscription_types,
    schema_strategy_of_auto_update,
)

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.metadata.store import BrokerMetadata
    from broker.topic_name import TopicName

log = logging.getLogger(__name__)

T = TypeVar("T")

# (namespace, policy) answers PolicyResolver keeps at most (a few dozen policies per namespace in use; past
# this, as with thousands of namespaces, it starts again rather than grow).
ANSWERS_KEPT = 4096

# Pulsar's broker default schemaCompatibilityStrategy (a level set to UNDEFINED passes to the next).
DEFAULT_SCHEMA_STRATEGY = "FULL"


def _is_none(value: Any) -> bool:
    return value is None


def _is_empty(value: Any) -> bool:
    return not value


def _same(value: Any) -> Any:
    return value


def _to_json(value: Any) -> Any:
    return None if value is None else value.to_json()


@dataclass(frozen=True)
class OlderField(Generic[T]):
    """An older field of Pulsar's Policies that a namespace's value is read from when the row's own field is unset,
    and how its stored JSON reads as the row's value (raises PolicyError)."""

    key: str
    parse: Callable[[Any], T]


@dataclass(frozen=True, eq=False)
class Policy(Generic[T]):
    """One row of the table: a policy of type T and where its values come from."""

    name: str
    topic_key: str | None  # Pulsar's TopicPolicies field; None: no topic-level value
    namespace_key: str | None  # Pulsar's Policies field; None: no namespace-level value
    broker: Callable[[BrokerConfig], T]  # the broker's setting (the last fallback)
    parse: Callable[[Any], T]  # stored / posted JSON -> value (raises PolicyError)
    dump: Callable[[T], Any] = _same  # value -> the JSON stored and answered
    per_cluster: bool = False  # the namespace keeps {cluster: value}; this cluster's applies
    unset: Callable[[Any], bool] = _is_none  # a stored value that counts as "not set"
    overlay: bool = False  # a map resolved per key (backlog quotas per type), not whole
    older: OlderField[T] | None = None  # the namespace's older field, read when namespace_key's is unset

    @property
    def topic_field(self) -> str:
        if self.topic_key is None:
            raise LookupError(f"policy {self.name} has no topic-level value")
        return self.topic_key

    @property
    def namespace_field(self) -> str:
        if self.namespace_key is None:
            raise LookupError(f"policy {self.name} has no namespace-level value")
        return self.namespace_key

    def normalize(self, body: Any) -> Any:
        """Validate a posted JSON value and give the JSON to store (PolicyError when refused)."""
        return self.dump(self.parse(body))

    def __repr__(self) -> str:
        return f"Policy({self.name})"


def _limit(what: str, java_type: tuple[int, int] = JAVA_INT) -> Callable[[Any], int]:
    return lambda value: parse_limit(value, what, java_type=java_type)


def _flag(what: str) -> Callable[[Any], bool]:
    return lambda value: parse_bool(value, what)


def _broker_inactive_topic_policies(cfg: BrokerConfig) -> InactiveTopicPolicies:
    max_s: float | None = cfg.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
    if max_s is None:
        max_s = cfg.brokerDeleteInactiveTopicsFrequencySeconds
    return InactiveTopicPolicies(cfg.brokerDeleteInactiveTopicsMode, max_s, cfg.brokerDeleteInactiveTopicsEnabled)


def _broker_backlog_quotas(cfg: BrokerConfig) -> BacklogQuotas:
    policy = cfg.backlogQuotaDefaultRetentionPolicy
    return {DESTINATION_STORAGE: BacklogQuota(cfg.backlogQuotaDefaultLimitBytes, -1, policy),
            MESSAGE_AGE: BacklogQuota(-1, cfg.backlogQuotaDefaultLimitSecond, policy)}


# -- the table ------------------------------------------------------------------------------------------
# Limits: 0 = no limit unless said otherwise.
MESSAGE_TTL: Policy[int] = Policy(  # seconds after which unacknowledged messages expire; 0 = never
    "message_ttl", "messageTTLInSeconds", "message_ttl_in_seconds",
    lambda c: c.ttlDurationDefaultInSeconds, _limit("messageTTL"))
RETENTION: Policy[Retention] = Policy(
    "retention", "retentionPolicies", "retention_policies",
    lambda c: Retention(c.defaultRetentionTimeInMinutes, c.defaultRetentionSizeInMB),
    Retention.from_json, Retention.to_json)
PERSISTENCE: Policy[Persistence | None] = Policy(  # None: the broker's managed-ledger settings
    "persistence", "persistence", "persistence", lambda c: None, Persistence.from_json, _to_json)
BACKLOG_QUOTAS: Policy[BacklogQuotas] = Policy(  # resolved per quota type
    "backlog_quotas", "backLogQuotaMap", "backlog_quota_map", _broker_backlog_quotas,
    backlog_quotas_from_json, backlog_quotas_to_json, overlay=True)
DEDUPLICATION: Policy[bool] = Policy(
    "deduplication", "deduplicationEnabled", "deduplicationEnabled",
    lambda c: c.brokerDeduplicationEnabled, _flag("deduplicationEnabled"))
DEDUP_SNAPSHOT_INTERVAL: Policy[int] = Policy(  # seconds; 0 = snapshots by entries only
    "dedup_snapshot_interval", "deduplicationSnapshotIntervalSeconds", "deduplicationSnapshotIntervalSeconds",
    lambda c: c.brokerDeduplicationSnapshotIntervalSeconds, _limit("deduplicationSnapshotInterval"))
MAX_PRODUCERS: Policy[int] = Policy(
    "max_producers", "maxProducerPerTopic", "max_producers_per_topic",
    lambda c: c.maxProducersPerTopic, _limit("maxProducers"))
MAX_CONSUMERS: Policy[int] = Policy(
    "max_consumers", "maxConsumerPerTopic", "max_consumers_per_topic",
    lambda c: c.maxConsumersPerTopic, _limit("maxConsumers"))
MAX_CONSUMERS_PER_SUBSCRIPTION: Policy[int] = Policy(
    "max_consumers_per_subscription", "maxConsumersPerSubscription", "max_consumers_per_subscription",
    lambda c: c.maxConsumersPerSubscription, _limit("maxConsumersPerSubscription"))
MAX_SUBSCRIPTIONS: Policy[int] = Policy(  # durable subscriptions per topic
    "max_subscriptions", "maxSubscriptionsPerTopic", "max_subscriptions_per_topic",
    lambda c: c.maxSubscriptionsPerTopic, _limit("maxSubscriptionsPerTopic"))
MAX_UNACKED_PER_CONSUMER: Policy[int] = Policy(  # a Shared / Key_Shared consumer's unacked messages
    "max_unacked_per_consumer", "maxUnackedMessagesOnConsumer", "max_unacked_messages_per_consumer",
    lambda c: c.maxUnackedMessagesPerConsumer, _limit("maxUnackedMessagesOnConsumer"))
MAX_UNACKED_PER_SUBSCRIPTION: Policy[int] = Policy(  # past it a Shared subscription reads no new entries
    "max_unacked_per_subscription", "maxUnackedMessagesOnSubscription", "max_unacked_messages_per_subscription",
    lambda c: c.maxUnackedMessagesPerSubscription, _limit("maxUnackedMessagesOnSubscription"))
DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT: Policy[bool] = Policy(  # PIP-299: no new entries past the persisted holes
    "dispatcher_pause_on_ack_state_persistent", "dispatcherPauseOnAckStatePersistentEnabled",
    "dispatcherPauseOnAckStatePersistentEnabled", lambda c: c.dispatcherPauseOnAckStatePersistentEnabled,
    _flag("dispatcherPauseOnAckStatePersistentEnabled"))
MAX_TOPICS_PER_NAMESPACE: Policy[int] = Policy(  # persistent topics, partitions counted one by one
    "max_topics_per_namespace", None, "max_topics_per_namespace",
    lambda c: c.maxTopicsPerNamespace, _limit("maxTopicsPerNamespace"))
MAX_MESSAGE_SIZE: Policy[int] = Policy(  # (topic-level only; the broker's applies to every topic)
    "max_message_size", "maxMessageSize", None, lambda c: c.maxMessageSize, _limit("maxMessageSize"))
COMPACTION_THRESHOLD: Policy[int] = Policy(  # bytes published since the last compaction; 0 = never
    "compaction_threshold", "compactionThreshold", "compaction_threshold",
    lambda c: c.brokerServiceCompactionThresholdInBytes, _limit("compactionThreshold", JAVA_LONG))
SUBSCRIPTION_EXPIRATION: Policy[float] = Policy(  # minutes without consumers, reads or acks; 0 = never
    "subscription_expiration", None, "subscription_expiration_time_minutes",
    lambda c: c.subscriptionExpirationTimeMinutes, _limit("subscriptionExpirationTime"))
INACTIVE_TOPIC_POLICIES: Policy[InactiveTopicPolicies] = Policy(
    "inactive_topic_policies", "inactiveTopicPolicies", "inactive_topic_policies",
    _broker_inactive_topic_policies, InactiveTopicPolicies.from_json, InactiveTopicPolicies.to_json)
SUBSCRIPTION_TYPES_ENABLED: Policy[list[str]] = Policy(  # an empty set counts as not set
    "subscription_types_enabled", "subscriptionTypesEnabled", "subscription_types_enabled",
    lambda c: parse_subscription_types(c.subscriptionTypesEnabled), parse_subscription_types, unset=_is_empty)
PUBLISH_RATE: Policy[PublishRate] = Policy(
    "publish_rate", "publishRate", "publishMaxMessageRate",
    lambda c: PublishRate(c.maxPublishRatePerTopicInMessages, c.maxPublishRatePerTopicInBytes),
    PublishRate.from_json, PublishRate.to_json, per_cluster=True)
TOPIC_DISPATCH_RATE: Policy[DispatchRate] = Policy(  # a topic's subscriptions together
    "topic_dispatch_rate", "dispatchRate", "topicDispatchRate",
    lambda c: DispatchRate(c.dispatchThrottlingRatePerTopicInMsg, c.dispatchThrottlingRatePerTopicInByte),
    DispatchRate.from_json, DispatchRate.to_json, per_cluster=True)
SUBSCRIPTION_DISPATCH_RATE: Policy[DispatchRate] = Policy(  # each subscription
    "subscription_dispatch_rate", "subscriptionDispatchRate", "subscriptionDispatchRate",
    lambda c: DispatchRate(c.dispatchThrottlingRatePerSubscriptionInMsg, c.dispatchThrottlingRatePerSubscriptionInByte),
    DispatchRate.from_json, DispatchRate.to_json, per_cluster=True)
# One subscription's own dispatch rate: TopicPolicies.subscriptionPolicies[subscription].dispatchRate (no namespace or
# broker level of its own: PolicyResolver.subscription_dispatch_rate falls back to SUBSCRIPTION_DISPATCH_RATE).
SUBSCRIPTION_POLICIES_FIELD = "subscriptionPolicies"
SUBSCRIPTION_DISPATCH_RATE_KEY = "dispatchRate"
SUBSCRIPTION_LEVEL_DISPATCH_RATE: Policy[DispatchRate] = Policy(
    "subscription_level_dispatch_rate", None, None, SUBSCRIPTION_DISPATCH_RATE.broker, DispatchRate.from_json,
    DispatchRate.to_json)
REPLICATOR_DISPATCH_RATE: Policy[DispatchRate] = Policy(  # each replicator
    "replicator_dispatch_rate", "replicatorDispatchRate", "replicatorDispatchRate",
    lambda c: DispatchRate(c.dispatchThrottlingRatePerReplicatorInMsg, c.dispatchThrottlingRatePerReplicatorInByte),
    DispatchRate.from_json, DispatchRate.to_json, per_cluster=True)
SUBSCRIBE_RATE: Policy[SubscribeRate] = Policy(
    "subscribe_rate", "subscribeRate", "clusterSubscribeRate",
    lambda c: SubscribeRate(c.subscribeThrottlingRatePerConsumer, c.subscribeRatePeriodPerConsumerInSecond),
    SubscribeRate.from_json, SubscribeRate.to_json, per_cluster=True)
DELAYED_DELIVERY: Policy[DelayedDelivery] = Policy(
    "delayed_delivery", "delayedDeliveryPolicies", "delayed_delivery_policies",
    lambda c: DelayedDelivery(c.delayedDeliveryEnabled, c.delayedDeliveryTickTimeMillis,
                              c.delayedDeliveryMaxDelayInMillis),
    DelayedDelivery.from_json, DelayedDelivery.to_json)
AUTO_TOPIC_CREATION: Policy[AutoTopicCreation] = Policy(
    "auto_topic_creation", None, "autoTopicCreationOverride",
    lambda c: AutoTopicCreation(c.allowAutoTopicCreation, c.allowAutoTopicCreationType, c.defaultNumPartitions),
    AutoTopicCreation.from_json, AutoTopicCreation.to_json)
AUTO_SUBSCRIPTION_CREATION: Policy[AutoSubscriptionCreation] = Policy(
    "auto_subscription_creation", "autoSubscriptionCreationOverride", "autoSubscriptionCreationOverride",
    lambda c: AutoSubscriptionCreation(c.allowAutoSubscriptionCreation),
    AutoSubscriptionCreation.from_json, AutoSubscriptionCreation.to_json)
# A namespace's older schema policy (pulsar-admin namespaces set-schema-autoupdate-strategy): in force where its
# schema_compatibility_strategy is UNDEFINED, as Pulsar's AbstractTopic and AdminResource read it.
SCHEMA_AUTO_UPDATE_STRATEGY: OlderField[str] = OlderField(
    "schema_auto_update_compatibility_strategy", schema_strategy_of_auto_update)
SCHEMA_COMPATIBILITY_STRATEGY: Policy[str] = Policy(  # UNDEFINED at a level passes to the next
    "schema_compatibility_strategy", "schemaCompatibilityStrategy", "schema_compatibility_strategy",
    lambda c: DEFAULT_SCHEMA_STRATEGY, parse_schema_strategy, unset=lambda v: v is None or v == "UNDEFINED",
    older=SCHEMA_AUTO_UPDATE_STRATEGY)
SCHEMA_VALIDATION_ENFORCED: Policy[bool] = Policy(  # producers without a schema refused on topics with one
    "schema_validation_enforced", "schemaValidationEnforced", "schema_validation_enforced",
    lambda c: c.isSchemaValidationEnforced, _flag("schemaValidationEnforced"))
ALLOW_AUTO_UPDATE_SCHEMA: Policy[bool] = Policy(  # producers may register new schema versions
    "allow_auto_update_schema", None, "is_allow_auto_update_schema",
    lambda c: c.isAllowAutoUpdateSchemaEnabled, _flag("isAllowAutoUpdateSchema"))
ENCRYPTION_REQUIRED: Policy[bool] = Policy(  # every message must carry encryption keys
    "encryption_required", None, "encryption_required", lambda c: False, _flag("encryptionRequired"))
REPLICATION_CLUSTERS: Policy[list[str]] = Policy(  # (the other clusters in it are replicated to)
    "replication_clusters", "replicationClusters", "replication_clusters",
    lambda c: [c.clusterName], parse_replication_clusters, unset=_is_empty)

TABLE: tuple[Policy[Any], ...] = (
    MESSAGE_TTL, RETENTION, PERSISTENCE, BACKLOG_QUOTAS, DEDUPLICATION, DEDUP_SNAPSHOT_INTERVAL,
    MAX_PRODUCERS, MAX_CONSUMERS, MAX_CONSUMERS_PER_SUBSCRIPTION, MAX_SUBSCRIPTIONS, MAX_UNACKED_PER_CONSUMER,
    MAX_UNACKED_PER_SUBSCRIPTION, DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT, MAX_TOPICS_PER_NAMESPACE,
    MAX_MESSAGE_SIZE, COMPACTION_THRESHOLD, SUBSCRIPTION_EXPIRATION, INACTIVE_TOPIC_POLICIES,
    SUBSCRIPTION_TYPES_ENABLED, PUBLISH_RATE, TOPIC_DISPATCH_RATE, SUBSCRIPTION_DISPATCH_RATE,
    REPLICATOR_DISPATCH_RATE, SUBSCRIBE_RATE, DELAYED_DELIVERY, AUTO_TOPIC_CREATION, AUTO_SUBSCRIPTION_CREATION,
    SCHEMA_COMPATIBILITY_STRATEGY, SCHEMA_VALIDATION_ENFORCED, ALLOW_AUTO_UPDATE_SCHEMA, ENCRYPTION_REQUIRED,
    REPLICATION_CLUSTERS,
)


class PolicyResolver:
    """The policies in force, from the metadata store and the broker's configuration."""

    def __init__(self, config: BrokerConfig, metadata: BrokerMetadata) -> None:
        self.config = config
        self.metadata = metadata
        # for_namespace's answers (the value in force for a namespace's topics that have none of their
        # own), kept while the metadata is unchanged: its cache's generation moves with every change of
        # any table. (A new topic asks a dozen policies; each resolved level by level cost 0.6-3 us.) The
        # broker's configuration does not change while it runs. Lists and dicts are never kept: a
        # caller may change the one it got.
        self._cache = metadata.cache
        self._answers: dict[tuple[str, Policy[Any]], Any] = {}
        self._answers_generation = -1
        self._warned: set[tuple[str, str]] = set()  # (where, policy) whose stored value was not valid

    def topic_value(self, name: TopicName, policy: Policy[T]) -> T | None:
        """The topic's own value (a partition has its partitioned topic's): its local one, else its global one
        (Pulsar's PolicyHierarchyValue: topic, then topic global, then namespace, then broker), or None when
        neither is set, when the policy has no topic level or when topic-level policies are off."""
        local = self.topic_level(name, policy, False)
        return local if local is not None else self.topic_level(name, policy, True)

    def topic_level(self, name: TopicName, policy: Policy[T], is_global: bool) -> T | None:
        """The topic's local (or global) value alone, or None as ``topic_value``."""
        if policy.topic_key is None or not self.config.topicLevelPoliciesEnabled:
            return None
        where = name.base.full
        raw = self.metadata.topic_policy(where, policy.topic_key, is_global)
        if policy.unset(raw):
            return None
        return self._parse_stored(policy, raw, f"{where} (global)" if is_global else where)

    def subscription_dispatch_rate(self, name: TopicName, subscription: str) -> DispatchRate:
        """The dispatch rate in force for one subscription: its own (TopicPolicies' subscriptionPolicies, set by
        ``.../{topic}/{subscription}/dispatchRate``), else the topic's subscriptionDispatchRate, else the
        namespace's, else the broker's (Pulsar's AbstractTopic.getSubscriptionDispatchRate)."""
        own = self.subscription_level_dispatch_rate(name, subscription)
        return own if own is not None else self.get(name, SUBSCRIPTION_DISPATCH_RATE)

    def subscription_level_dispatch_rate(self, name: TopicName, subscription: str,
                                         is_global: bool | None = None) -> DispatchRate | None:
        """One subscription's own dispatch rate, or None (unset, or topic-level policies off): the one in the
        topic's local policies, else in its global ones; ``is_global`` True or False: that one alone."""
        if not self.config.topicLevelPoliciesEnabled:
            return None
        if is_global is None:
            local = self.subscription_level_dispatch_rate(name, subscription, False)
            return local if local is not None else self.subscription_level_dispatch_rate(name, subscription, True)
        where = name.base.full
        raw = (self.metadata.topic_policy(where, SUBSCRIPTION_POLICIES_FIELD, is_global) or {}).get(subscription) or {}
        rate = raw.get(SUBSCRIPTION_DISPATCH_RATE_KEY) if isinstance(raw, dict) else None
        if rate is None:
            return None
        return self._parse_stored(SUBSCRIPTION_LEVEL_DISPATCH_RATE, rate, f"{where} subscription {subscription}")

    def namespace_value(self, namespace: str, policy: Policy[T]) -> T | None:
        """The namespace's value (this cluster's, for a per-cluster policy), else its ``older`` field's, or None
        when unset."""
        if policy.namespace_key is None:
            return None
        raw = self.metadata.policy(namespace, policy.namespace_key)
        if policy.per_cluster and raw is not None:
            raw = raw.get(self.config.clusterName)
        value = None if policy.unset(raw) else self._parse_stored(policy, raw, namespace)
        if value is None and policy.older is not None:
            older = self.metadata.policy(namespace, policy.older.key)
            if older is not None:
                value = self._parsed(policy.older.key, policy.older.parse, older, namespace)
        return value

    def _parse_stored(self, policy: Policy[T], raw: Any, where: str) -> T | None:
        return self._parsed(policy.name, policy.parse, raw, where)

    def _parsed(self, name: str, parse: Callable[[Any], T], raw: Any, where: str) -> T | None:
        """A stored value parsed; one the admin API would refuse now (stored by an older version, or
        written into the store by hand) counts as unset, with a warning once, so that it never fails
        the topics it applies to."""
        try:
            return parse(raw)
        except PolicyError as exc:
            if (where, name) not in self._warned:
                self._warned.add((where, name))
                log.warning("%s: the stored %s %r is not valid (%s); the next level's value applies",
                            where, name, raw, exc)
            return None

    def broker_value(self, policy: Policy[T]) -> T:
        """The broker's setting (PolicyError when the configuration holds a bad one)."""
        return policy.broker(self.config)

    def for_namespace(self, namespace: str, policy: Policy[T]) -> T:
        """The namespace's value, else the broker's."""
        answers = self._answers
        generation = self._cache.generation
        if generation != self._answers_generation:
            answers.clear()
            self._answers_generation = generation
        key = (namespace, policy)
        value: T | None = answers.get(key)
        if value is not None:
            return value
        value = self._first(policy, self.namespace_value(namespace, policy))
        if not isinstance(value, (list, dict, set)):
            if len(answers) >= ANSWERS_KEPT:
                answers.clear()
            answers[key] = value
        return value

    def get(self, name: TopicName, policy: Policy[T]) -> T:
        """The value in force for a topic: its own (local, else global), else its namespace's, else the broker's;
        an ``overlay`` map key by key in that order."""
        if policy.overlay:
            local, global_ = self.topic_level(name, policy, False), self.topic_level(name, policy, True)
            if local is None and global_ is None:
                return self.for_namespace(name.namespace, policy)
            return self._first(policy, local, global_, self.namespace_value(name.namespace, policy))
        own = self.topic_value(name, policy)
        return self.for_namespace(name.namespace, policy) if own is None else own

    def _first(self, policy: Policy[T], *levels: T | None) -> T:
        """The first level's value that is set, else the broker's; for an ``overlay`` policy (a
        map resolved key by key), each key's first value."""
        if policy.overlay:
            merged: dict[Any, Any] = {}
            for level in (self.broker_value(policy), *reversed(levels)):
                merged.update(cast("dict[Any, Any]", level or {}))
            return cast("T", merged)
        for value in levels:
            if value is not None:
                return value
        return self.broker_value(policy)
