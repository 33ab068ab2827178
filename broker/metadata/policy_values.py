"""Policy values: the structured policies as small immutable values, JSON only at the edge.

Each structured policy (retention, rates, persistence, backlog quotas...) is a frozen dataclass
with ``from_json`` (the validating parser the admin API and the store's documents go through;
it raises PolicyError with the HTTP status Pulsar answers) and ``to_json`` (Pulsar's field names:
what ``GET`` answers and what the metadata store keeps). Scalar policies stay int / bool / str,
checked by the small parsers here.

Validation follows Pulsar's admin resources: a body of the wrong shape is a 400 (Pulsar's JSON
binding rejects it), and so is a number that does not fit its field's Java type (int or long, as in
Pulsar's policy classes); a well-formed value out of range is what Pulsar answers for it, mostly 412
(PRECONDITION_FAILED), 400 where Pulsar checks with checkArgument (retention, persistence).
Pure: no I/O; of the rest of the broker it imports only Pulsar's vocabulary (broker.vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.vocabulary import (  # re-exported: the policy values' vocabulary
    BACKLOG_QUOTA_TYPES as BACKLOG_QUOTA_TYPES,
)
from broker.vocabulary import (
    BACKLOG_RETENTION_POLICIES as BACKLOG_RETENTION_POLICIES,
)
from broker.vocabulary import (
    CONSUMER_BACKLOG_EVICTION as CONSUMER_BACKLOG_EVICTION,
)
from broker.vocabulary import (
    DELETE_WHEN_NO_SUBSCRIPTIONS as DELETE_WHEN_NO_SUBSCRIPTIONS,
)
from broker.vocabulary import (
    DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP as DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP,
)
from broker.vocabulary import (
    DESTINATION_STORAGE as DESTINATION_STORAGE,
)
from broker.vocabulary import (
    INACTIVE_TOPIC_DELETE_MODES as INACTIVE_TOPIC_DELETE_MODES,
)
from broker.vocabulary import (
    JAVA_INT as JAVA_INT,
)
from broker.vocabulary import (
    JAVA_LONG as JAVA_LONG,
)
from broker.vocabulary import (
    MESSAGE_AGE as MESSAGE_AGE,
)
from broker.vocabulary import (
    PARTITIONS_CEILING as PARTITIONS_CEILING,
)
from broker.vocabulary import (
    PRODUCER_EXCEPTION as PRODUCER_EXCEPTION,
)
from broker.vocabulary import (
    PRODUCER_REQUEST_HOLD as PRODUCER_REQUEST_HOLD,
)
from broker.vocabulary import (
    SCHEMA_AUTO_UPDATE_STRATEGIES as SCHEMA_AUTO_UPDATE_STRATEGIES,
)
from broker.vocabulary import (
    SCHEMA_STRATEGIES as SCHEMA_STRATEGIES,
)
from broker.vocabulary import (
    SUBSCRIPTION_TYPES as SUBSCRIPTION_TYPES,
)
from broker.vocabulary import (
    TOPIC_TYPES as TOPIC_TYPES,
)

MB = 1024 * 1024

# Pulsar's managedLedgerMaxEnsembleSize / ...MaxWriteQuorum / ...MaxAckQuorum defaults.
MAX_ENSEMBLE = MAX_WRITE_QUORUM = MAX_ACK_QUORUM = 5


class PolicyError(ValueError):
    """A policy value was refused; ``status`` is the HTTP status Pulsar answers with."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


# Java's int and long (vocabulary's JAVA_INT, JAVA_LONG): the field types of Pulsar's policy classes. Its JSON
# binding (Jackson) refuses a number outside its field's type (400), so no value past them is stored or handed on
# to a Pulsar tool.
_JAVA_TYPES = {JAVA_INT: "int", JAVA_LONG: "long"}


def check_int(value: Any, what: str, java_type: tuple[int, int] = JAVA_LONG) -> int:
    """An integer that fits ``java_type`` (JAVA_INT or JAVA_LONG: the field's type in Pulsar), else 400."""
    # bool is an int in Python but not in JSON: Pulsar's binding refuses true/false for a number.
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(400, f"{what} must be an integer, got {value!r}")
    lowest, highest = java_type
    if not lowest <= value <= highest:
        raise PolicyError(400, f"{what}: numeric value ({value}) out of range of {_JAVA_TYPES[java_type]} "
                               f"({lowest} - {highest})")
    return value


def check_java_int(value: Any, what: str) -> int:
    """A value of a Java int field (Integer / int in Pulsar's classes)."""
    return check_int(value, what, JAVA_INT)


def check_java_long(value: Any, what: str) -> int:
    """A value of a Java long field (Long / long in Pulsar's classes)."""
    return check_int(value, what, JAVA_LONG)


def check_object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise PolicyError(400, f"{what} must be a JSON object")
    return body


# -- scalars ----------------------------------------------------------------------------------------

def parse_limit(body: Any, what: str, message: str | None = None, java_type: tuple[int, int] = JAVA_INT) -> int:
    """An integer of 0 or more (a limit, a TTL, a threshold...) that fits its field's Java type (an Integer unless
    said: a compaction threshold is a Long); ``message`` for a negative one."""
    value = check_int(body, what, java_type)
    if value < 0:
        raise PolicyError(412, message or f"{what} must be 0 or more")
    return value


def max_partitions(configured_max: int) -> int:
    """The most partitions a partitioned topic may have: maxNumPartitionsPerPartitionedTopic, or our
    PARTITIONS_CEILING when that is 0 (Pulsar's "no limit")."""
    return configured_max if 0 < configured_max < PARTITIONS_CEILING else PARTITIONS_CEILING


class TooManyPartitionsError(PolicyError):
    """A partition count above ``most`` (Pulsar's NOT_ACCEPTABLE; the update of a partitioned topic answers 422
    with its own words, see broker.admin.partitioned_topics)."""

    def __init__(self, most: int) -> None:
        super().__init__(406, f"Number of partitions should be less than or equal to {most}")
        self.most = most


def check_partition_count(count: int, configured_max: int) -> int:
    """The one check of a partitioned topic's partition count, wherever one is given: the admin's create and
    update, a namespace's autoTopicCreation override, and the count a topic is auto-created with (the override's
    or the broker's defaultNumPartitions). At least 1, at most ``max_partitions(configured_max)``; Pulsar's 406
    (NOT_ACCEPTABLE) otherwise, as its AdminResource.internalCreatePartitionedTopic and
    NamespacesBase.internalSetAutoTopicCreation answer."""
    if count <= 0:
        raise PolicyError(406, "Number of partitions should be more than 0")
    most = max_partitions(configured_max)
    if count > most:
        raise TooManyPartitionsError(most)
    return count


def parse_bool(body: Any, what: str) -> bool:
    if not isinstance(body, bool):
        raise PolicyError(400, f"{what} must be true or false")
    return body


def parse_subscription_types(body: Any) -> list[str]:
    """A set of SubscriptionType names (a JSON array; repeats dropped, Pulsar's order kept). An
    empty set means "not set" at every level, as in Pulsar."""
    if not isinstance(body, list):
        raise PolicyError(400, "Subscription types must be a JSON array")
    for t in body:
        if t not in SUBSCRIPTION_TYPES:
            raise PolicyError(400, f"Unknown subscription type {t!r}; one of {', '.join(SUBSCRIPTION_TYPES)}")
    return [t for t in SUBSCRIPTION_TYPES if t in body]


def parse_schema_strategy(body: Any) -> str:
    """A SchemaCompatibilityStrategy name."""
    if body not in SCHEMA_STRATEGIES:
        raise PolicyError(400, f"Unknown schema compatibility strategy {body!r}; one of {', '.join(SCHEMA_STRATEGIES)}")
    return str(body)


def parse_schema_auto_update_strategy(body: Any) -> str | None:
    """A SchemaAutoUpdateCompatibilityStrategy name (a namespace's older schema policy), or None (JSON null, no
    body): not set. Pulsar reads a name it does not know as null, so that a misspelt name removes the policy; ours
    refuses it."""
    if body is None:
        return None
    if not isinstance(body, str) or body not in SCHEMA_AUTO_UPDATE_STRATEGIES:
        raise PolicyError(400, f"Unknown schema auto-update compatibility strategy {body!r}; one of "
                               f"{', '.join(SCHEMA_AUTO_UPDATE_STRATEGIES)}")
    return body


def schema_strategy_of_auto_update(stored: Any) -> str:
    """The SchemaCompatibilityStrategy a stored SchemaAutoUpdateCompatibilityStrategy stands for (Pulsar's
    SchemaCompatibilityStrategy.fromAutoUpdatePolicy)."""
    name = parse_schema_auto_update_strategy(stored)
    if name is None:
        raise PolicyError(400, "No schema auto-update compatibility strategy")
    return SCHEMA_AUTO_UPDATE_STRATEGIES[name]


def parse_backlog_quota_type(value: str | None) -> str:
    if value is None or value == "":
        return DESTINATION_STORAGE  # Pulsar's default when the query parameter is absent
    if value not in BACKLOG_QUOTA_TYPES:
        raise PolicyError(400, f"Unknown backlogQuotaType {value!r}; one of {', '.join(BACKLOG_QUOTA_TYPES)}")
    return value


def parse_inactive_topic_delete_mode(value: Any) -> str:
    if value not in INACTIVE_TOPIC_DELETE_MODES:
        raise PolicyError(400, f"Unknown inactiveTopicDeleteMode {value!r}; one of "
                               f"{', '.join(INACTIVE_TOPIC_DELETE_MODES)}")
    return str(value)


def parse_replication_clusters(body: Any) -> list[str]:
    """A list of cluster names, as stored (the admin API checks the clusters themselves)."""
    if not isinstance(body, list) or not all(isinstance(c, str) for c in body):
        raise PolicyError(400, "Replication clusters must be a JSON array of cluster names")
    return list(body)


# -- structured values --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Retention:
    """RetentionPolicies {retentionTimeInMinutes, retentionSizeInMB}; -1 = unlimited, 0 = none."""

    time_minutes: int
    size_mb: int

    @classmethod
    def from_json(cls, body: Any) -> Retention:
        doc = check_object(body, "Retention policies")
        minutes = check_java_int(doc.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes")
        size_mb = check_java_long(doc.get("retentionSizeInMB", 0), "retentionSizeInMB")
        # (AdminResource.validateRetentionPolicies: checkArgument, a 400)
        if size_mb < -1:
            raise PolicyError(400, "Invalid retention policy: size limit must be >= -1")
        if minutes < -1:
            raise PolicyError(400, "Invalid retention policy: time limit must be >= -1")
        if (minutes == 0) != (size_mb == 0):
            raise PolicyError(400, "Invalid retention policy: Setting a single time or size limit to 0 is invalid "
                                   "when one of the limits has a non-zero value. Use the value of -1 instead of 0 to "
                                   "ignore a specific limit. To disable retention both limits must be set to 0.")
        return cls(minutes, size_mb)

    def to_json(self) -> dict[str, int]:
        return {"retentionTimeInMinutes": self.time_minutes, "retentionSizeInMB": self.size_mb}

    @property
    def time_s(self) -> int:
        """Seconds, -1 = unlimited."""
        return -1 if self.time_minutes < 0 else self.time_minutes * 60

    @property
    def size_bytes(self) -> int:
        """Bytes, -1 = unlimited."""
        return -1 if self.size_mb < 0 else self.size_mb * MB


@dataclass(frozen=True)
class BacklogQuota:
    """BacklogQuota {limitSize (or the older "limit"), limitTime, policy}: bytes and seconds, -1 = none.

    A limit left out of the body is 0, as Pulsar's REST reading makes it (the Java admin client's builder sends -1
    for one it is not given): a size of 0 holds any backlog, a time of 0 is no limit. The stored document carries
    ``limit`` too, because older tools still read that name.
    """

    limit_size: int
    limit_time: int
    policy: str

    @classmethod
    def from_json(cls, body: Any) -> BacklogQuota:
        doc = check_object(body, "Backlog quota")
        size_value = doc.get("limitSize")
        if size_value is None:
            size_value = doc.get("limit")
        limit_size = check_java_long(0 if size_value is None else size_value, "limitSize")
        time_value = doc.get("limitTime")
        limit_time = check_java_int(0 if time_value is None else time_value, "limitTime")
        policy = doc.get("policy")
        if policy not in BACKLOG_RETENTION_POLICIES:
            raise PolicyError(400, f"Invalid backlog quota policy {policy!r}; one of "
                                   f"{', '.join(BACKLOG_RETENTION_POLICIES)}")
        if limit_size < -1 or limit_time < -1:
            raise PolicyError(412, "Backlog quota limits must be >= -1 (-1 = no limit)")
        return cls(limit_size, limit_time, str(policy))

    def to_json(self) -> dict[str, Any]:
        return {"limit": self.limit_size, "limitSize": self.limit_size, "limitTime": self.limit_time,
                "policy": self.policy}

    def within(self, retention: Retention | None) -> bool:
        """Pulsar refuses a backlog quota that reaches the retention limits (checkBacklogQuota)."""
        if retention is None or (retention.size_mb <= 0 and retention.time_minutes <= 0):
            return True
        if retention.size_mb > 0 and self.limit_size >= retention.size_mb * MB:
            return False
        return not (retention.time_minutes > 0 and self.limit_time >= retention.time_minutes * 60)


BacklogQuotas = dict[str, BacklogQuota]  # BacklogQuotaType -> quota


def backlog_quotas_from_json(body: Any) -> BacklogQuotas:
    """A backlog quota map {BacklogQuotaType: BacklogQuota}."""
    doc = check_object(body, "backlog_quota_map")
    return {parse_backlog_quota_type(k): BacklogQuota.from_json(v) for k, v in doc.items()}


def backlog_quotas_to_json(quotas: BacklogQuotas) -> dict[str, Any]:
    return {t: q.to_json() for t, q in quotas.items()}


@dataclass(frozen=True)
class PublishRate:
    """PublishRate {publishThrottlingRateInMsg, publishThrottlingRateInByte}: per second, 0 or less
    (Pulsar's default -1) = no limit on that measure."""

    messages: int
    bytes: int

    @classmethod
    def from_json(cls, body: Any) -> PublishRate:
        doc = check_object(body, "Publish rate")
        return cls(check_java_int(doc.get("publishThrottlingRateInMsg", -1), "publishThrottlingRateInMsg"),
                   check_java_long(doc.get("publishThrottlingRateInByte", -1), "publishThrottlingRateInByte"))

    def to_json(self) -> dict[str, int]:
        return {"publishThrottlingRateInMsg": self.messages, "publishThrottlingRateInByte": self.bytes}

    def as_tuple(self) -> tuple[int, int]:
        """(messages, bytes) per second; 0 or less = no limit."""
        return self.messages, self.bytes


@dataclass(frozen=True)
class DispatchRate:
    """DispatchRate {dispatchThrottlingRateInMsg, dispatchThrottlingRateInByte, ratePeriodInSecond,
    relativeToPublishRate}: per period, 0 or less (Pulsar's default -1) = no limit on that measure;
    relativeToPublishRate raises each limited measure by the topic's publish rate."""

    messages: int
    bytes: int
    period_s: int = 1
    relative_to_publish_rate: bool = False

    @classmethod
    def from_json(cls, body: Any) -> DispatchRate:
        doc = check_object(body, "Dispatch rate")
        msgs = check_java_int(doc.get("dispatchThrottlingRateInMsg", -1), "dispatchThrottlingRateInMsg")
        nbytes = check_java_long(doc.get("dispatchThrottlingRateInByte", -1), "dispatchThrottlingRateInByte")
        period = check_java_int(doc.get("ratePeriodInSecond", 1), "ratePeriodInSecond")
        relative = parse_bool(doc.get("relativeToPublishRate", False), "relativeToPublishRate")
        if period < 1:
            raise PolicyError(412, "ratePeriodInSecond must be 1 or more")
        return cls(msgs, nbytes, period, relative)

    def to_json(self) -> dict[str, Any]:
        return {"dispatchThrottlingRateInMsg": self.messages, "dispatchThrottlingRateInByte": self.bytes,
                "ratePeriodInSecond": self.period_s, "relativeToPublishRate": self.relative_to_publish_rate}

    def as_tuple(self) -> tuple[int, int, int, bool]:
        """(messages, bytes, period in seconds, relative to the publish rate); 0 or less = no limit."""
        return self.messages, self.bytes, self.period_s, self.relative_to_publish_rate


@dataclass(frozen=True)
class SubscribeRate:
    """SubscribeRate {subscribeThrottlingRatePerConsumer, ratePeriodInSecond}: subscribes each
    consumer (address, name, id) may make per period; 0 or less (Pulsar's default -1) = no limit."""

    per_consumer: int
    period_s: int

    @classmethod
    def from_json(cls, body: Any) -> SubscribeRate:
        doc = check_object(body, "Subscribe rate")
        rate = check_java_int(doc.get("subscribeThrottlingRatePerConsumer", -1), "subscribeThrottlingRatePerConsumer")
        period = check_java_int(doc.get("ratePeriodInSecond", 30), "ratePeriodInSecond")
        if period < 1:
            raise PolicyError(412, "ratePeriodInSecond must be 1 or more")
        return cls(rate, period)

    def to_json(self) -> dict[str, int]:
        return {"subscribeThrottlingRatePerConsumer": self.per_consumer, "ratePeriodInSecond": self.period_s}

    def as_tuple(self) -> tuple[int, int]:
        """(subscribes per consumer, period in seconds); 0 or less = no limit."""
        return self.per_consumer, self.period_s


@dataclass(frozen=True)
class DelayedDelivery:
    """DelayedDeliveryPolicies {active, tickTime, maxDeliveryDelayInMillis} (0 = no maximum)."""

    active: bool
    tick_time_ms: int
    max_delay_ms: int

    @classmethod
    def from_json(cls, body: Any) -> DelayedDelivery:
        doc = check_object(body, "Delayed delivery policies")
        active = parse_bool(doc.get("active", False), "active")
        tick = check_java_long(doc.get("tickTime", 1000), "tickTime")
        max_delay = check_java_long(doc.get("maxDeliveryDelayInMillis", 0), "maxDeliveryDelayInMillis")
        if tick < 0 or max_delay < 0:
            raise PolicyError(412, "tickTime and maxDeliveryDelayInMillis must be 0 or more")
        return cls(active, tick, max_delay)

    def to_json(self) -> dict[str, Any]:
        return {"active": self.active, "tickTime": self.tick_time_ms, "maxDeliveryDelayInMillis": self.max_delay_ms}


@dataclass(frozen=True)
class Persistence:
    """PersistencePolicies {bookkeeperEnsemble, bookkeeperWriteQuorum, bookkeeperAckQuorum,
    managedLedgerMaxMarkDeleteRate}, checked as Pulsar does. Only the mark-delete rate means
    anything without BookKeeper (the quorums are kept for the tools that read them back)."""

    ensemble: int
    write_quorum: int
    ack_quorum: int
    max_mark_delete_rate: float

    @classmethod
    def from_json(cls, body: Any) -> Persistence:
        doc = check_object(body, "Persistence policies")
        ensemble = check_java_int(doc.get("bookkeeperEnsemble", 2), "bookkeeperEnsemble")
        write = check_java_int(doc.get("bookkeeperWriteQuorum", 2), "bookkeeperWriteQuorum")
        ack = check_java_int(doc.get("bookkeeperAckQuorum", 2), "bookkeeperAckQuorum")
        rate = doc.get("managedLedgerMaxMarkDeleteRate", 0.0)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise PolicyError(400, "managedLedgerMaxMarkDeleteRate must be a number")
        for value, what, most in ((ensemble, "Ensemble", MAX_ENSEMBLE), (write, "WriteQuorum", MAX_WRITE_QUORUM),
                                  (ack, "AckQuorum", MAX_ACK_QUORUM)):
            if not 0 < value <= most:  # (AdminResource.validatePersistencePolicies: checkArgument, a 400)
                raise PolicyError(400, f"Bookkeeper-{what} must be <= {most} and > 0.")
        if not ensemble >= write >= ack:
            raise PolicyError(400, f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= AckQuorum ({ack})")
        if rate < 0:
            raise PolicyError(412, "managedLedgerMaxMarkDeleteRate must be 0 or more")
        return cls(ensemble, write, ack, float(rate))

    def to_json(self) -> dict[str, Any]:
        return {"bookkeeperEnsemble": self.ensemble, "bookkeeperWriteQuorum": self.write_quorum,
                "bookkeeperAckQuorum": self.ack_quorum, "managedLedgerMaxMarkDeleteRate": self.max_mark_delete_rate}


@dataclass(frozen=True)
class InactiveTopicPolicies:
    """InactiveTopicPolicies {inactiveTopicDeleteMode, maxInactiveDurationSeconds, deleteWhileInactive}.

    Missing numbers and flags take Java's defaults (0, false), as Pulsar's binding does; the mode
    is required (a policy without one could not be applied). Pulsar accepts a negative duration;
    we refuse it (412) rather than read it as "delete at once".
    """

    delete_mode: str
    max_inactive_s: float
    delete_while_inactive: bool

    @classmethod
    def from_json(cls, body: Any) -> InactiveTopicPolicies:
        doc = check_object(body, "Inactive topic policies")
        mode = parse_inactive_topic_delete_mode(doc.get("inactiveTopicDeleteMode"))
        seconds = check_java_int(doc.get("maxInactiveDurationSeconds", 0), "maxInactiveDurationSeconds")
        enabled = parse_bool(doc.get("deleteWhileInactive", False), "deleteWhileInactive")
        if seconds < 0:
            raise PolicyError(412, "maxInactiveDurationSeconds must be >= 0")
        return cls(mode, seconds, enabled)

    def to_json(self) -> dict[str, Any]:
        return {"inactiveTopicDeleteMode": self.delete_mode, "maxInactiveDurationSeconds": self.max_inactive_s,
                "deleteWhileInactive": self.delete_while_inactive}


@dataclass(frozen=True)
class AutoTopicCreation:
    """AutoTopicCreationOverride {allowAutoTopicCreation, topicType, defaultNumPartitions}."""

    allow: bool
    topic_type: str | None = None
    default_partitions: int | None = None

    @property
    def partitioned(self) -> bool:
        return self.topic_type == "partitioned"

    @classmethod
    def from_json(cls, body: Any) -> AutoTopicCreation:
        doc = check_object(body, "Auto topic creation override")
        allow = doc.get("allowAutoTopicCreation", False)
        if not isinstance(allow, bool):
            raise PolicyError(400, "allowAutoTopicCreation must be true or false")
        topic_type = doc.get("topicType")
        partitions = doc.get("defaultNumPartitions")
        if partitions is not None:
            partitions = check_java_int(partitions, "defaultNumPartitions")
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
        override = cls(allow, None if topic_type is None else str(topic_type), partitions)
        override.check_partitions(0)  # (our ceiling; the admin route checks the broker's max)
        return override

    def check_partitions(self, configured_max: int) -> None:
        """A partitioned override's defaultNumPartitions within maxNumPartitionsPerPartitionedTopic, allowed or
        not (406, after the checks above, as NamespacesBase.internalSetAutoTopicCreation)."""
        if self.partitioned and self.default_partitions is not None and self.default_partitions > 0:
            check_partition_count(self.default_partitions, configured_max)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"allowAutoTopicCreation": self.allow}
        if self.topic_type is not None:
            out["topicType"] = self.topic_type
        if self.default_partitions is not None:
            out["defaultNumPartitions"] = self.default_partitions
        return out


@dataclass(frozen=True)
class AutoSubscriptionCreation:
    """AutoSubscriptionCreationOverride {allowAutoSubscriptionCreation}."""

    allow: bool

    @classmethod
    def from_json(cls, body: Any) -> AutoSubscriptionCreation:
        doc = check_object(body, "Auto subscription creation override")
        return cls(parse_bool(doc.get("allowAutoSubscriptionCreation", False), "allowAutoSubscriptionCreation"))

    def to_json(self) -> dict[str, bool]:
        return {"allowAutoSubscriptionCreation": self.allow}
