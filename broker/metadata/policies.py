"""Namespace policies: validation of the values the admin API accepts, and Pulsar's Policies view.

Policies are stored per namespace in the metadata store under Apache Pulsar's own field names
(``retention_policies``, ``message_ttl_in_seconds``, ``backlog_quota_map``,
``autoTopicCreationOverride``, ``deduplicationEnabled``, ``schema_compatibility_strategy``), so
``GET /admin/v2/namespaces/{tenant}/{ns}`` returns the document pulsar-admin expects.

Validation follows Pulsar's admin resources: a body of the wrong shape is a 400 (Pulsar's JSON
binding rejects it), a well-formed value out of range is a 412 (Pulsar's PRECONDITION_FAILED).
Pure functions: no I/O, unit-testable.
"""

from __future__ import annotations

import itertools
import zlib
from typing import Any

RETENTION = "retention_policies"
MESSAGE_TTL = "message_ttl_in_seconds"
COMPACTION_THRESHOLD = "compaction_threshold"
BACKLOG_QUOTA_MAP = "backlog_quota_map"
AUTO_TOPIC_CREATION = "autoTopicCreationOverride"
AUTO_SUBSCRIPTION_CREATION = "autoSubscriptionCreationOverride"
DEDUPLICATION = "deduplicationEnabled"
SCHEMA_STRATEGY = "schema_compatibility_strategy"
AUTH_POLICIES = "auth_policies"
INACTIVE_TOPIC_POLICIES = "inactive_topic_policies"
SUBSCRIPTION_EXPIRATION = "subscription_expiration_time_minutes"
MAX_PRODUCERS_PER_TOPIC = "max_producers_per_topic"
MAX_CONSUMERS_PER_TOPIC = "max_consumers_per_topic"
MAX_CONSUMERS_PER_SUBSCRIPTION = "max_consumers_per_subscription"
MAX_UNACKED_PER_CONSUMER = "max_unacked_messages_per_consumer"
MAX_UNACKED_PER_SUBSCRIPTION = "max_unacked_messages_per_subscription"
MAX_SUBSCRIPTIONS_PER_TOPIC = "max_subscriptions_per_topic"
MAX_TOPICS_PER_NAMESPACE = "max_topics_per_namespace"
DEDUP_SNAPSHOT_INTERVAL = "deduplicationSnapshotIntervalSeconds"  # (camelCase in Pulsar's Policies too)
SUBSCRIPTION_TYPES_ENABLED = "subscription_types_enabled"
ENCRYPTION_REQUIRED = "encryption_required"
SCHEMA_VALIDATION_ENFORCED = "schema_validation_enforced"
ALLOW_AUTO_UPDATE_SCHEMA = "is_allow_auto_update_schema"
DELAYED_DELIVERY = "delayed_delivery_policies"
PUBLISH_MAX_MESSAGE_RATE = "publish_max_message_rate"  # {cluster: PublishRate}
TOPIC_DISPATCH_RATE = "topicDispatchRate"  # {cluster: DispatchRate}
SUBSCRIPTION_DISPATCH_RATE = "subscriptionDispatchRate"  # {cluster: DispatchRate}
REPLICATOR_DISPATCH_RATE = "replicatorDispatchRate"  # {cluster: DispatchRate}
SUBSCRIBE_RATE = "clusterSubscribeRate"  # {cluster: SubscribeRate}
PERSISTENCE = "persistence"
REPLICATION_CLUSTERS = "replication_clusters"

# Topic-level policies (Pulsar's TopicPolicies field names, stored per topic in the metadata).
T_MESSAGE_TTL = "messageTTLInSeconds"
T_RETENTION = "retentionPolicies"
T_DEDUPLICATION = "deduplicationEnabled"
T_DEDUP_SNAPSHOT_INTERVAL = "deduplicationSnapshotIntervalSeconds"
T_MAX_PRODUCERS = "maxProducerPerTopic"
T_MAX_CONSUMERS = "maxConsumerPerTopic"
T_MAX_CONSUMERS_PER_SUBSCRIPTION = "maxConsumersPerSubscription"
T_COMPACTION_THRESHOLD = "compactionThreshold"
T_INACTIVE_TOPIC_POLICIES = "inactiveTopicPolicies"
T_BACKLOG_QUOTA_MAP = "backLogQuotaMap"
T_MAX_UNACKED_ON_CONSUMER = "maxUnackedMessagesOnConsumer"
T_MAX_UNACKED_ON_SUBSCRIPTION = "maxUnackedMessagesOnSubscription"
T_MAX_SUBSCRIPTIONS = "maxSubscriptionsPerTopic"
T_SUBSCRIPTION_TYPES_ENABLED = "subscriptionTypesEnabled"
T_PUBLISH_RATE = "publishRate"
T_DISPATCH_RATE = "dispatchRate"
T_SUBSCRIPTION_DISPATCH_RATE = "subscriptionDispatchRate"
T_REPLICATOR_DISPATCH_RATE = "replicatorDispatchRate"
T_SUBSCRIBE_RATE = "subscribeRate"
T_AUTO_SUBSCRIPTION_CREATION = "autoSubscriptionCreationOverride"
T_SCHEMA_STRATEGY = "schemaCompatibilityStrategy"
T_SCHEMA_VALIDATION_ENFORCED = "schemaValidationEnforced"
T_MAX_MESSAGE_SIZE = "maxMessageSize"
T_PERSISTENCE = "persistence"
T_REPLICATION_CLUSTERS = "replicationClusters"
T_DELAYED_DELIVERY = "delayedDeliveryPolicies"

# BacklogQuota.BacklogQuotaType: a size limit and (Pulsar 2.9+) an age limit.
DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"
BACKLOG_QUOTA_TYPES = (DESTINATION_STORAGE, MESSAGE_AGE)
# BacklogQuota.RetentionPolicy: what happens once a quota is exceeded.
PRODUCER_REQUEST_HOLD = "producer_request_hold"
PRODUCER_EXCEPTION = "producer_exception"
CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
BACKLOG_RETENTION_POLICIES = (PRODUCER_REQUEST_HOLD, PRODUCER_EXCEPTION, CONSUMER_BACKLOG_EVICTION)
TOPIC_TYPES = ("partitioned", "non-partitioned")
# InactiveTopicDeleteMode: what an inactive topic may still have.
DELETE_WHEN_NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"
INACTIVE_TOPIC_DELETE_MODES = (DELETE_WHEN_NO_SUBSCRIPTIONS, DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP)
MB = 1024 * 1024
# Pulsar's defaultNumberOfNamespaceBundles: shown in the Policies view (we do not split bundles).
DEFAULT_BUNDLES = 4


class PolicyError(ValueError):
    """A policy value was refused; ``status`` is the HTTP status Pulsar answers with."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _int(value: Any, what: str) -> int:
    # bool is an int in Python but not in JSON: Pulsar's binding refuses true/false for a number.
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(400, f"{what} must be an integer, got {value!r}")
    return value


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise PolicyError(400, f"{what} must be a JSON object")
    return body


# -- retention ------------------------------------------------------------------------------------

def parse_retention(body: Any) -> dict[str, int]:
    """RetentionPolicies {retentionTimeInMinutes, retentionSizeInMB}; -1 = unlimited, 0 = none."""
    doc = _object(body, "Retention policies")
    minutes = _int(doc.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes")
    size_mb = _int(doc.get("retentionSizeInMB", 0), "retentionSizeInMB")
    if size_mb < -1:
        raise PolicyError(412, "Invalid retention policy: size limit must be >= -1")
    if minutes < -1:
        raise PolicyError(412, "Invalid retention policy: time limit must be >= -1")
    if (minutes == 0) != (size_mb == 0):
        raise PolicyError(412, "Invalid retention policy: setting a single time or size limit to 0 is invalid "
                               "when the other is not 0. Use -1 to ignore a limit; set both to 0 to disable "
                               "retention.")
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}


# -- message TTL ----------------------------------------------------------------------------------

def parse_message_ttl(body: Any) -> int:
    return parse_limit(body, "Message TTL", "Invalid value for message TTL, message TTL must >= 0")


# -- compaction threshold -------------------------------------------------------------------------

def parse_compaction_threshold(body: Any) -> int:
    return parse_limit(body, "Compaction threshold", "compactionThreshold must be 0 or more")


# -- backlog quotas -------------------------------------------------------------------------------

def parse_backlog_quota_type(value: str | None) -> str:
    if value is None or value == "":
        return DESTINATION_STORAGE  # Pulsar's default when the query parameter is absent
    if value not in BACKLOG_QUOTA_TYPES:
        raise PolicyError(400, f"Unknown backlogQuotaType {value!r}; one of {', '.join(BACKLOG_QUOTA_TYPES)}")
    return value


def parse_backlog_quota(body: Any) -> dict[str, Any]:
    """BacklogQuota {limitSize (or the older "limit"), limitTime, policy}.

    Missing limits mean "no limit" (-1, the defaults of Pulsar's builder). The stored document
    carries ``limit`` too, because older tools still read that name.
    """
    doc = _object(body, "Backlog quota")
    size_value = doc.get("limitSize", doc.get("limit", -1))
    limit_size = _int(-1 if size_value is None else size_value, "limitSize")
    limit_time = _int(doc.get("limitTime", -1), "limitTime")
    policy = doc.get("policy")
    if policy not in BACKLOG_RETENTION_POLICIES:
        raise PolicyError(400, f"Invalid backlog quota policy {policy!r}; one of "
                               f"{', '.join(BACKLOG_RETENTION_POLICIES)}")
    if limit_size < -1 or limit_time < -1:
        raise PolicyError(412, "Backlog quota limits must be >= -1 (-1 = no limit)")
    return {"limit": limit_size, "limitSize": limit_size, "limitTime": limit_time, "policy": policy}


def check_quota_within_retention(quota: dict[str, Any], retention: dict[str, Any] | None) -> bool:
    """Pulsar refuses a backlog quota that reaches the retention limits (checkBacklogQuota)."""
    if retention is None:
        return True
    size_mb = int(retention.get("retentionSizeInMB", 0))
    minutes = int(retention.get("retentionTimeInMinutes", 0))
    if size_mb <= 0 and minutes <= 0:
        return True
    if size_mb > 0 and int(quota.get("limitSize", -1)) >= size_mb * MB:
        return False
    return not (minutes > 0 and int(quota.get("limitTime", -1)) >= minutes * 60)


# -- producer and consumer limits -----------------------------------------------------------------

def parse_limit(body: Any, what: str, message: str | None = None) -> int:
    """An integer of 0 or more (a limit, a TTL, a threshold...); ``message`` for a negative one."""
    value = _int(body, what)
    if value < 0:
        raise PolicyError(412, message or f"{what} must be 0 or more")
    return value


def parse_dedup_snapshot_interval(body: Any) -> int | None:
    """Seconds after which the deduplication state is snapshotted if entries came (0 = by entries
    only); None (Pulsar's admin client POSTs null) removes the policy."""
    if body is None:
        return None
    return parse_limit(body, "deduplicationSnapshotInterval", "interval must be greater than or equal to 0")


def parse_bool(body: Any, what: str) -> bool:
    if not isinstance(body, bool):
        raise PolicyError(400, f"{what} must be true or false")
    return body


# -- subscription types ---------------------------------------------------------------------------

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def parse_subscription_types(body: Any) -> list[str]:
    """A set of SubscriptionType names (a JSON array; repeats dropped, Pulsar's order kept). An
    empty set means "not set" at every level, as in Pulsar."""
    if not isinstance(body, list):
        raise PolicyError(400, "Subscription types must be a JSON array")
    for t in body:
        if t not in SUBSCRIPTION_TYPES:
            raise PolicyError(400, f"Unknown subscription type {t!r}; one of {', '.join(SUBSCRIPTION_TYPES)}")
    return [t for t in SUBSCRIPTION_TYPES if t in body]


# -- publish rate -----------------------------------------------------------------------------------

def parse_publish_rate(body: Any) -> dict[str, int]:
    """PublishRate {publishThrottlingRateInMsg, publishThrottlingRateInByte}: per second, 0 or less
    (Pulsar's default -1) = no limit on that measure."""
    doc = _object(body, "Publish rate")
    return {"publishThrottlingRateInMsg": _int(doc.get("publishThrottlingRateInMsg", -1), "publishThrottlingRateInMsg"),
            "publishThrottlingRateInByte": _int(doc.get("publishThrottlingRateInByte", -1),
                                                "publishThrottlingRateInByte")}


def parse_dispatch_rate(body: Any) -> dict[str, Any]:
    """DispatchRate {dispatchThrottlingRateInMsg, dispatchThrottlingRateInByte, ratePeriodInSecond,
    relativeToPublishRate}: per period, 0 or less (Pulsar's default -1) = no limit on that measure;
    relativeToPublishRate raises each limited measure by the topic's publish rate."""
    doc = _object(body, "Dispatch rate")
    msgs = _int(doc.get("dispatchThrottlingRateInMsg", -1), "dispatchThrottlingRateInMsg")
    nbytes = _int(doc.get("dispatchThrottlingRateInByte", -1), "dispatchThrottlingRateInByte")
    period = _int(doc.get("ratePeriodInSecond", 1), "ratePeriodInSecond")
    relative = parse_bool(doc.get("relativeToPublishRate", False), "relativeToPublishRate")
    if period < 1:
        raise PolicyError(412, "ratePeriodInSecond must be 1 or more")
    return {"dispatchThrottlingRateInMsg": msgs, "dispatchThrottlingRateInByte": nbytes,
            "ratePeriodInSecond": period, "relativeToPublishRate": relative}


# Pulsar's managedLedgerMaxEnsembleSize / ...MaxWriteQuorum / ...MaxAckQuorum defaults.
MAX_ENSEMBLE = MAX_WRITE_QUORUM = MAX_ACK_QUORUM = 5


def parse_persistence(body: Any) -> dict[str, Any]:
    """PersistencePolicies {bookkeeperEnsemble, bookkeeperWriteQuorum, bookkeeperAckQuorum,
    managedLedgerMaxMarkDeleteRate}, checked as Pulsar does. Only the mark-delete rate means
    anything without BookKeeper (the quorums are kept for the tools that read them back)."""
    doc = _object(body, "Persistence policies")
    ensemble = _int(doc.get("bookkeeperEnsemble", 2), "bookkeeperEnsemble")
    write = _int(doc.get("bookkeeperWriteQuorum", 2), "bookkeeperWriteQuorum")
    ack = _int(doc.get("bookkeeperAckQuorum", 2), "bookkeeperAckQuorum")
    rate = doc.get("managedLedgerMaxMarkDeleteRate", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise PolicyError(400, "managedLedgerMaxMarkDeleteRate must be a number")
    for value, what, most in ((ensemble, "Ensemble", MAX_ENSEMBLE), (write, "WriteQuorum", MAX_WRITE_QUORUM),
                              (ack, "AckQuorum", MAX_ACK_QUORUM)):
        if not 0 < value <= most:
            raise PolicyError(412, f"Bookkeeper-{what} must be <= {most} and > 0.")
    if not ensemble >= write >= ack:
        raise PolicyError(412, f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= AckQuoru ({ack})")
    if rate < 0:
        raise PolicyError(412, "managedLedgerMaxMarkDeleteRate must be 0 or more")
    return {"bookkeeperEnsemble": ensemble, "bookkeeperWriteQuorum": write, "bookkeeperAckQuorum": ack,
            "managedLedgerMaxMarkDeleteRate": float(rate)}


def parse_subscribe_rate(body: Any) -> dict[str, int]:
    """SubscribeRate {subscribeThrottlingRatePerConsumer, ratePeriodInSecond}: subscribes each
    consumer (address, name, id) may make per period; 0 or less (Pulsar's default -1) = no limit."""
    doc = _object(body, "Subscribe rate")
    rate = _int(doc.get("subscribeThrottlingRatePerConsumer", -1), "subscribeThrottlingRatePerConsumer")
    period = _int(doc.get("ratePeriodInSecond", 30), "ratePeriodInSecond")
    if period < 1:
        raise PolicyError(412, "ratePeriodInSecond must be 1 or more")
    return {"subscribeThrottlingRatePerConsumer": rate, "ratePeriodInSecond": period}


# -- delayed delivery -------------------------------------------------------------------------------

def parse_delayed_delivery(body: Any) -> dict[str, Any]:
    """DelayedDeliveryPolicies {active, tickTime, maxDeliveryDelayInMillis}."""
    doc = _object(body, "Delayed delivery policies")
    active = parse_bool(doc.get("active", False), "active")
    tick = _int(doc.get("tickTime", 1000), "tickTime")
    max_delay = _int(doc.get("maxDeliveryDelayInMillis", 0), "maxDeliveryDelayInMillis")
    if tick < 0 or max_delay < 0:
        raise PolicyError(412, "tickTime and maxDeliveryDelayInMillis must be 0 or more")
    return {"active": active, "tickTime": tick, "maxDeliveryDelayInMillis": max_delay}


# -- subscription expiration ----------------------------------------------------------------------

def parse_subscription_expiration(body: Any) -> int:
    return parse_limit(body, "Subscription expiration time",
                       "subscriptionExpirationTime must be 0 (never) or more minutes")


# -- inactive topics ------------------------------------------------------------------------------

def parse_inactive_topic_delete_mode(value: Any) -> str:
    if value not in INACTIVE_TOPIC_DELETE_MODES:
        raise PolicyError(400, f"Unknown inactiveTopicDeleteMode {value!r}; one of "
                               f"{', '.join(INACTIVE_TOPIC_DELETE_MODES)}")
    return str(value)


def parse_inactive_topic_policies(body: Any) -> dict[str, Any]:
    """InactiveTopicPolicies {inactiveTopicDeleteMode, maxInactiveDurationSeconds, deleteWhileInactive}.

    Missing numbers and flags take Java's defaults (0, false), as Pulsar's binding does; the mode
    is required (a policy without one could not be applied). Pulsar accepts a negative duration;
    we refuse it (412) rather than read it as "delete at once".
    """
    doc = _object(body, "Inactive topic policies")
    mode = parse_inactive_topic_delete_mode(doc.get("inactiveTopicDeleteMode"))
    seconds = _int(doc.get("maxInactiveDurationSeconds", 0), "maxInactiveDurationSeconds")
    enabled = parse_bool(doc.get("deleteWhileInactive", False), "deleteWhileInactive")
    if seconds < 0:
        raise PolicyError(412, "maxInactiveDurationSeconds must be >= 0")
    return {"inactiveTopicDeleteMode": mode, "maxInactiveDurationSeconds": seconds, "deleteWhileInactive": enabled}


# -- auto topic creation --------------------------------------------------------------------------

SCHEMA_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
                     "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE", "UNDEFINED")


def parse_schema_strategy(body: Any) -> str:
    """A SchemaCompatibilityStrategy name."""
    if body not in SCHEMA_STRATEGIES:
        raise PolicyError(400, f"Unknown schema compatibility strategy {body!r}; one of {', '.join(SCHEMA_STRATEGIES)}")
    return str(body)


def parse_auto_subscription_creation(body: Any) -> dict[str, bool]:
    """AutoSubscriptionCreationOverride {allowAutoSubscriptionCreation}."""
    doc = _object(body, "Auto subscription creation override")
    return {"allowAutoSubscriptionCreation": parse_bool(doc.get("allowAutoSubscriptionCreation", False),
                                                        "allowAutoSubscriptionCreation")}


def parse_auto_topic_creation(body: Any) -> dict[str, Any]:
    """AutoTopicCreationOverride {allowAutoTopicCreation, topicType, defaultNumPartitions}."""
    doc = _object(body, "Auto topic creation override")
    allow = doc.get("allowAutoTopicCreation", False)
    if not isinstance(allow, bool):
        raise PolicyError(400, "allowAutoTopicCreation must be true or false")
    topic_type = doc.get("topicType")
    partitions = doc.get("defaultNumPartitions")
    if partitions is not None:
        partitions = _int(partitions, "defaultNumPartitions")
    if allow:
        problem = None
        if topic_type not in TOPIC_TYPES:
            problem = f"Unknown topic type [{topic_type}]"
        elif topic_type == "partitioned" and partitions is None:
            problem = "[defaultNumPartitions] cannot be null when the type is partitioned."
        elif topic_type == "partitioned" and partitions is not None and partitions <= 0:
            problem = "[defaultNumPartitions] cannot be less than 1 for partition type."
        elif topic_type == "non-partitioned" and partitions is not None:
            problem = "[defaultNumPartitions] is not allowed to be set when the type is non-partition."
        if problem is not None:
            raise PolicyError(412, f"Invalid configuration for autoTopicCreationOverride. the detail is {problem}")
    out: dict[str, Any] = {"allowAutoTopicCreation": allow}
    if topic_type is not None:
        out["topicType"] = topic_type
    if partitions is not None:
        out["defaultNumPartitions"] = partitions
    return out


# -- permissions (AuthPolicies) ------------------------------------------------------------------

# Pulsar's AuthAction values; produce and consume are the ones the broker checks.
AUTH_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
NAMESPACE_AUTH = "namespace_auth"
DESTINATION_AUTH = "destination_auth"
SUBSCRIPTION_AUTH_ROLES = "subscription_auth_roles"
SUBSCRIPTION_AUTH_MODE = "subscription_auth_mode"
SUBSCRIPTION_AUTH_MODES = ("None", "Prefix")


def parse_subscription_auth_mode(body: Any) -> str:
    """Pulsar's SubscriptionAuthMode: None, or Prefix (a consumer's subscription name must start
    with its role; enforced when authorization is on)."""
    if body not in SUBSCRIPTION_AUTH_MODES:
        raise PolicyError(400, f"Invalid subscription auth mode {body!r}: expected one of "
                               f"{', '.join(SUBSCRIPTION_AUTH_MODES)}")
    return str(body)


def parse_actions(body: Any) -> list[str]:
    """A set of AuthAction names, e.g. ["produce", "consume"]."""
    if not isinstance(body, list) or not all(isinstance(a, str) for a in body):
        raise PolicyError(400, "Permissions must be a JSON array of actions, e.g. [\"produce\", \"consume\"]")
    unknown = [a for a in body if a not in AUTH_ACTIONS]
    if unknown:
        raise PolicyError(400, f"Unknown actions {unknown}; one of {', '.join(AUTH_ACTIONS)}")
    return sorted(set(body))


def parse_roles(body: Any, what: str = "Roles") -> list[str]:
    if not isinstance(body, list) or not all(isinstance(r, str) and r for r in body):
        raise PolicyError(400, f"{what} must be a JSON array of role names")
    return sorted(set(body))


def parse_auth_policies(body: Any) -> dict[str, Any]:
    """AuthPolicies {namespace_auth: {role: [actions]}, destination_auth: {topic: {role: [actions]}},
    subscription_auth_roles: {subscription: [roles]}}."""
    doc = _object(body, "auth_policies")
    namespace_auth = _object(doc.get(NAMESPACE_AUTH) or {}, NAMESPACE_AUTH)
    destination_auth = _object(doc.get(DESTINATION_AUTH) or {}, DESTINATION_AUTH)
    subscription_roles = _object(doc.get(SUBSCRIPTION_AUTH_ROLES) or {}, SUBSCRIPTION_AUTH_ROLES)
    return {
        NAMESPACE_AUTH: {role: parse_actions(actions) for role, actions in namespace_auth.items()},
        DESTINATION_AUTH: {topic: {role: parse_actions(actions)
                                   for role, actions in _object(grants, DESTINATION_AUTH).items()}
                           for topic, grants in destination_auth.items()},
        SUBSCRIPTION_AUTH_ROLES: {sub: parse_roles(roles, SUBSCRIPTION_AUTH_ROLES)
                                  for sub, roles in subscription_roles.items()},
    }


# -- whole documents ------------------------------------------------------------------------------

def validate_policies(doc: Any) -> dict[str, Any]:
    """A Policies body given when a namespace is created: known fields validated, others kept."""
    policies = dict(_object(doc, "Policies"))
    if policies.get(RETENTION) is not None:
        policies[RETENTION] = parse_retention(policies[RETENTION])
    if policies.get(MESSAGE_TTL) is not None:
        policies[MESSAGE_TTL] = parse_message_ttl(policies[MESSAGE_TTL])
    if policies.get(AUTO_TOPIC_CREATION) is not None:
        policies[AUTO_TOPIC_CREATION] = parse_auto_topic_creation(policies[AUTO_TOPIC_CREATION])
    if policies.get(BACKLOG_QUOTA_MAP) is not None:
        quotas = _object(policies[BACKLOG_QUOTA_MAP], BACKLOG_QUOTA_MAP)
        policies[BACKLOG_QUOTA_MAP] = {parse_backlog_quota_type(k): parse_backlog_quota(v) for k, v in quotas.items()}
    if policies.get(AUTH_POLICIES) is not None:
        policies[AUTH_POLICIES] = parse_auth_policies(policies[AUTH_POLICIES])
    for key in (MAX_PRODUCERS_PER_TOPIC, MAX_CONSUMERS_PER_TOPIC, MAX_CONSUMERS_PER_SUBSCRIPTION,
                MAX_UNACKED_PER_CONSUMER, MAX_SUBSCRIPTIONS_PER_TOPIC, MAX_TOPICS_PER_NAMESPACE):
        if policies.get(key) is not None:
            policies[key] = parse_limit(policies[key], key)
    if policies.get(SUBSCRIPTION_EXPIRATION) is not None:
        policies[SUBSCRIPTION_EXPIRATION] = parse_subscription_expiration(policies[SUBSCRIPTION_EXPIRATION])
    if policies.get(SUBSCRIPTION_AUTH_MODE) is not None:
        policies[SUBSCRIPTION_AUTH_MODE] = parse_subscription_auth_mode(policies[SUBSCRIPTION_AUTH_MODE])
    if policies.get(DEDUP_SNAPSHOT_INTERVAL) is not None:
        policies[DEDUP_SNAPSHOT_INTERVAL] = parse_dedup_snapshot_interval(policies[DEDUP_SNAPSHOT_INTERVAL])
    if policies.get(DELAYED_DELIVERY) is not None:
        policies[DELAYED_DELIVERY] = parse_delayed_delivery(policies[DELAYED_DELIVERY])
    if policies.get(INACTIVE_TOPIC_POLICIES) is not None:
        policies[INACTIVE_TOPIC_POLICIES] = parse_inactive_topic_policies(policies[INACTIVE_TOPIC_POLICIES])
    if policies.get(DEDUPLICATION) is not None and not isinstance(policies[DEDUPLICATION], bool):
        raise PolicyError(400, "deduplicationEnabled must be true or false")
    for key in (ENCRYPTION_REQUIRED, SCHEMA_VALIDATION_ENFORCED, ALLOW_AUTO_UPDATE_SCHEMA):
        if policies.get(key) is not None:
            parse_bool(policies[key], key)
    # Null members mean "not set" in Pulsar (its JSON leaves them out): do not store them.
    return {k: v for k, v in policies.items() if v is not None}


def bundle_boundaries() -> list[int]:
    """A namespace's bundle boundaries: DEFAULT_BUNDLES equal ranges of the 32-bit hash space (the
    last one includes its upper end), as Pulsar lays them out."""
    step = (1 << 32) // DEFAULT_BUNDLES
    return [min(i * step, (1 << 32) - 1) for i in range(DEFAULT_BUNDLES + 1)]


def bundle_of(full_name: str) -> tuple[int, int]:
    """The (lower, upper) bundle range a topic's name hashes into (Pulsar's hash: CRC32 of the
    full name; the last range includes its upper end)."""
    h = zlib.crc32(full_name.encode())
    boundaries = bundle_boundaries()
    for lower, upper in itertools.pairwise(boundaries):
        if h < upper:
            return lower, upper
    return boundaries[-2], boundaries[-1]


def policies_view(stored: dict[str, Any], cluster: str) -> dict[str, Any]:
    """Pulsar's Policies JSON for a namespace: its defaults, overlaid with what is stored."""
    boundaries = [f"0x{b:08x}" for b in bundle_boundaries()]
    view: dict[str, Any] = {
        "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
        "replication_clusters": [cluster],
        "bundles": {"boundaries": boundaries, "numBundles": DEFAULT_BUNDLES},
        BACKLOG_QUOTA_MAP: {},
        "clusterDispatchRate": {},
        "topicDispatchRate": {},
        "subscriptionDispatchRate": {},
        "replicatorDispatchRate": {},
        "clusterSubscribeRate": {},
        "publishMaxMessageRate": {},
        "latency_stats_sample_rate": {},
        "deleted": False,
        "encryption_required": False,
        SUBSCRIPTION_AUTH_MODE: "None",
        "offload_threshold": -1,
        "schema_auto_update_compatibility_strategy": "Full",
        SCHEMA_STRATEGY: "UNDEFINED",
        "is_allow_auto_update_schema": True,
        "schema_validation_enforced": False,
        "subscription_types_enabled": [],
        "properties": {},
    }
    view.update(stored)
    return view
