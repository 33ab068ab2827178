"""Broker configuration: Apache Pulsar's key names (conf/standalone.conf) plus CLI overrides.

Each setting is a dataclass field whose name is the Pulsar key, so a Pulsar engineer can grep for
it; its type is the field's annotation and what it accepts is a ``Rule`` in the field's metadata
(like Pulsar's ``@FieldContext(minValue=...)``): a range for numbers, choices for names. Every value
is converted and checked as it is set (``set``: the file, the CLI flags, ``Broker(**overrides)``)
and all of them again at start (``check``, for values assigned directly), so a bad one stops the
broker with one line naming the key and what it accepts::

    brokerServicePort=70000: expected a port 0-65535 (0 picks a free port; empty disables the listener)

``python -m broker standalone`` prints that line as ``configuration error: ...`` and exits with
status 2 (as argparse does for a bad flag), without a traceback. Booleans are ``true`` or
``false`` in any case, as Pulsar reads them; any other word ("yes", "1"), which Pulsar would
quietly read as false, is refused. Text settings accept any text; values that need more than one
key or a file to judge (TLS files, authentication providers and keys, ``advertisedListeners`` /
``bindAddresses`` in ``broker.listeners``) are checked where they are loaded, at start, and
refused with the same kind of line. Unknown keys are reported once at start and ignored.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker import vocabulary as P
from compression_codecs import BY_NAME

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "conf" / "standalone.conf"

# Pulsar's CompressionType names (managedLedgerInfoCompressionType, managedCursorInfoCompressionType).
CODEC_NAMES = tuple(BY_NAME)
# Pulsar's OpenID fallback discovery modes (only DISABLED is supported; broker.auth.openid says so).
OPENID_DISCOVERY_MODES = ("DISABLED", "KUBERNETES_DISCOVER_TRUSTED_ISSUER", "KUBERNETES_DISCOVER_PUBLIC_KEYS")


class ConfigError(ValueError):
    """A setting that cannot be honoured (bad value, unreadable file): the broker does not start."""


@dataclass(frozen=True)
class Rule:
    """What one key accepts besides its type: numbers within [low, high] (``above``: low itself
    excluded), names among ``choices`` (each item, for a list); ``means`` says what special values
    mean, ``words`` replaces the generated description."""

    low: float | None = None
    high: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()
    means: str = ""
    words: str = ""
    fold_case: bool = False  # (choices matched without regard to case)

    def allows(self, value: Any) -> bool:
        if isinstance(value, list):
            return all(self.allows(item) for item in value)
        if isinstance(value, str):
            if self.fold_case:
                return not self.choices or value.lower() in (c.lower() for c in self.choices)
            return not self.choices or value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return True  # (None, booleans: the type says it all)
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self, kind: _Kind) -> str:
        """What is accepted, in words: the end of the error line."""
        if self.words:
            return self.words
        if kind.type is bool:
            return "true or false"
        if kind.type is list:
            return f"a comma-separated list of {', '.join(self.choices)}" if self.choices \
                else "a comma-separated list"
        if kind.type is str:
            return f"one of {', '.join(self.choices)}" if self.choices else "text"
        text = "an integer" if kind.type is int else "a number"
        low, high = (_num(b) if b is not None else None for b in (self.low, self.high))
        if low is not None and high is not None:
            text += f" {low}-{high}"
        elif low is not None:
            text += f" {'>' if self.above else '>='} {low}"
        elif high is not None:
            text += f" <= {high}"
        return f"{text} ({self.means})" if self.means else text


def _num(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else str(bound)


# Rules shared by many keys.
PORT = Rule(0, 65535, words="a port 0-65535 (0 picks a free port; empty disables the listener)")
UNLIMITED = Rule(0, means="0 = unlimited")  # Pulsar's limits and rates: 0 switches them off
NEVER = Rule(0, means="0 = never")
AT_LEAST_0 = Rule(0)
POSITIVE = Rule(0, above=True)  # sizes, counts and intervals that cannot be zero
NO_LIMIT_MINUS_1 = Rule(-1, means="-1 = no limit")


# The load-shedding strategies (loadBalancerLoadSheddingStrategy; Pulsar loads the class by its full name, so no
# short forms): the default, the two other classic ones and AvgShedder (broker.cluster.shedding).
THRESHOLD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"
OVERLOAD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.OverloadShedder"
UNIFORM_LOAD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.UniformLoadShedder"
AVG_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.AvgShedder"
SHEDDING_STRATEGIES = (THRESHOLD_SHEDDER, OVERLOAD_SHEDDER, UNIFORM_LOAD_SHEDDER, AVG_SHEDDER)
# The placement strategies (loadBalancerLoadPlacementStrategy, broker.cluster.placement): Pulsar 4.0's default,
# LeastResourceUsageWithWeight and AvgShedder (which must then be the shedding strategy too).
LEAST_LONG_TERM_MESSAGE_RATE = "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate"
LEAST_RESOURCE_USAGE_WITH_WEIGHT = "org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight"
PLACEMENT_STRATEGIES = (LEAST_LONG_TERM_MESSAGE_RATE, LEAST_RESOURCE_USAGE_WITH_WEIGHT, AVG_SHEDDER)
JAVA_INT_MAX = P.JAVA_INT[1]  # Integer.MAX_VALUE
JAVA_LONG_MAX = P.JAVA_LONG[1]  # Long.MAX_VALUE


def setting(default: Any, rule: Rule) -> Any:
    """A field with its rule (``Any``: the annotation, not this call, gives the field's type)."""
    return field(default=default, metadata={"rule": rule})


@dataclass
class BrokerConfig:
    # -- network ------------------------------------------------------------------------------------
    bindAddress: str = "0.0.0.0"
    # An empty port (None) disables that listener, as in Pulsar: e.g. brokerServicePort= with
    # brokerServicePortTls=6651 serves TLS only.
    brokerServicePort: int | None = setting(6650, PORT)
    webServicePort: int | None = setting(8080, PORT)
    # The web console at / and /console/ on the HTTP port(s) (docs/console.md); false: those paths answer 404.
    webConsoleEnabled: bool = True
    # Pulsar's WebSocket API on the HTTP port(s): /ws/v2/producer, /ws/v2/consumer, /ws/v2/reader
    # (docs/websocket.md). Off by default, as in Pulsar's broker.conf (its standalone.conf turns it on).
    webSocketServiceEnabled: bool = False
    # Its sessions, as Pulsar's (Jetty's) are kept: the largest text frame (a larger one closes the session with
    # 1009), the time a session may pass without a frame either way before it is closed (1001; 0 or less: never)
    # and the interval of the pings sent to each client (0 or less: none; pings count as frames).
    webSocketMaxTextFrameSize: int = setting(1048576, Rule(0, JAVA_INT_MAX, above=True))
    webSocketSessionIdleTimeoutMillis: int = setting(300000, Rule(-JAVA_INT_MAX - 1, JAVA_INT_MAX,
                                                                  means="0 or less = never"))
    webSocketPingDurationSeconds: int = setting(-1, Rule(-JAVA_INT_MAX - 1, JAVA_INT_MAX, means="0 or less = no pings"))
    # Host put in lookup answers. Empty: the address the client connected to (right for one broker).
    advertisedAddress: str = ""
    # Named listeners (broker.listeners): name:pulsar://host:port / name:pulsar+ssl://host:port,
    # comma-separated; lookups naming one get its URLs, others the internal listener's (empty = the
    # first). bindAddresses opens more sockets for listeners, in the same format.
    advertisedListeners: str = ""
    internalListenerName: str = ""
    bindAddresses: str = ""
    clusterName: str = "standalone"
    # Where the broker's metadata (clusters, tenants, namespaces and their policies, partitioned
    # topics, topic policies, schemas) is kept, as Pulsar's metadataStoreUrl: empty = the local
    # durable store under <dataDir>/metadata (in memory when dataDir is empty);
    # zk:host:port[,host:port...][/chroot] = ZooKeeper, shared by brokers; memory:<name> = in this
    # process only. The paths and JSON values are Apache Pulsar's (docs/metadata.md).
    metadataStoreUrl: str = ""
    # ZooKeeper's session timeout (its ephemeral nodes outlive a lost broker this long) and the
    # bound on each metadata operation; Pulsar's keys and defaults.
    metadataStoreSessionTimeoutMillis: int = setting(30000, POSITIVE)
    metadataStoreOperationTimeoutSeconds: int = setting(30, POSITIVE)
    # -- protocol limits ----------------------------------------------------------------------------
    maxMessageSize: int = setting(5 * 1024 * 1024, POSITIVE)
    keepAliveIntervalSeconds: int = setting(30, Rule(0, means="0 = no keep-alive pings"))
    # How long a producer's or Exclusive consumer's old connection has to answer a PING before a newcomer with the
    # same name (or for the same subscription) is refused: no answer closes it and admits the newcomer.
    connectionLivenessCheckTimeoutMillis: int = setting(5000, Rule(0, means="0 = refuse at once, no check"))
    maxPendingPublishRequestsPerConnection: int = setting(1000, POSITIVE)
    # Bytes of in-flight publishes, broker-wide, before publishing connections stop being read.
    maxMessagePublishBufferSizeInMB: int = setting(128, UNLIMITED)
    # -- limits (0 = unlimited, as in Pulsar) -------------------------------------------------------
    # Publish rate per topic (a namespace's publishRate and a topic's override it): past it, the
    # producers' connections are not read until the rate is back under (broker.service.rate_limits).
    maxPublishRatePerTopicInMessages: int = setting(0, UNLIMITED)
    maxPublishRatePerTopicInBytes: int = setting(0, UNLIMITED)
    # Publish rate of the whole broker, every topic together, per second: past it, the connections
    # that published are not read until the rate is back under (Pulsar's broker publish rate limiter).
    brokerPublisherThrottlingMaxMessageRate: int = setting(0, UNLIMITED)
    brokerPublisherThrottlingMaxByteRate: int = setting(0, UNLIMITED)
    # Dispatch rate per topic (all its subscriptions together) and per subscription, per second (a
    # namespace's or topic's dispatchRate / subscriptionDispatchRate override them).
    dispatchThrottlingRatePerTopicInMsg: int = setting(0, UNLIMITED)
    dispatchThrottlingRatePerTopicInByte: int = setting(0, UNLIMITED)
    dispatchThrottlingRatePerSubscriptionInMsg: int = setting(0, UNLIMITED)
    dispatchThrottlingRatePerSubscriptionInByte: int = setting(0, UNLIMITED)
    # ... and per replicator (each remote cluster of a topic; a namespace's or topic's
    # replicatorDispatchRate overrides them).
    dispatchThrottlingRatePerReplicatorInMsg: int = setting(0, UNLIMITED)
    dispatchThrottlingRatePerReplicatorInByte: int = setting(0, UNLIMITED)
    # Dispatch rate of the whole broker, every subscription of every topic together, per second
    # (Pulsar's broker dispatch rate limiter); a topic's and a subscription's limits apply as well.
    dispatchThrottlingRateInMsg: int = setting(0, UNLIMITED)
    dispatchThrottlingRateInByte: int = setting(0, UNLIMITED)
    # false: the dispatch rate limits (broker, topic, subscription) spare a subscription whose cursor
    # is active - it has consumers and is less than managedLedgerCursorBackloggedThreshold entries
    # behind, so it reads from the cache - as Pulsar's dispatchers do; true (Pulsar's default): all.
    dispatchThrottlingOnNonBacklogConsumerEnabled: bool = True
    # true: the dispatch rate limits on messages count entries (a batch counts one), as Pulsar's.
    dispatchThrottlingOnBatchMessageEnabled: bool = False
    brokerMaxConnections: int = setting(0, UNLIMITED)
    brokerMaxConnectionsPerIp: int = setting(0, UNLIMITED)
    maxProducersPerTopic: int = setting(0, UNLIMITED)
    maxConsumersPerTopic: int = setting(0, UNLIMITED)
    maxConsumersPerSubscription: int = setting(0, UNLIMITED)
    maxSubscriptionsPerTopic: int = setting(0, UNLIMITED)
    # Persistent topics per namespace, partitions counted one by one (a namespace's
    # maxTopicsPerNamespace overrides it; system topics are not counted).
    maxTopicsPerNamespace: int = setting(0, UNLIMITED)
    # -- topics and subscriptions -------------------------------------------------------------------
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = setting("non-partitioned", Rule(choices=P.TOPIC_TYPES))
    defaultNumPartitions: int = setting(1, Rule(1, P.PARTITIONS_CEILING))
    # Most partitions a partitioned topic may have (406 above it); 0: our ceiling, vocabulary.PARTITIONS_CEILING.
    maxNumPartitionsPerPartitionedTopic: int = setting(0, Rule(0, P.PARTITIONS_CEILING, means="0 = up to "
                                                               f"{P.PARTITIONS_CEILING:,}"))
    allowAutoSubscriptionCreation: bool = True
    brokerDeduplicationEnabled: bool = False
    # Broker entry metadata (PIP-70): Pulsar's interceptor class names
    # (org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,
    # ...AppendIndexMetadataInterceptor); each stored entry then carries the broker's publish time
    # and/or its last message's index. Consumers get it only when exposing... is on and their
    # CONNECT says supports_broker_entry_metadata.
    brokerEntryMetadataInterceptors: list[str] = field(default_factory=list,
                                                       metadata={"rule": Rule(choices=P.BROKER_ENTRY_INTERCEPTORS)})
    exposingBrokerEntryMetadataToClientEnabled: bool = False
    # Entries between two snapshots of the deduplication state (Pulsar's default), and the time
    # after which a snapshot is taken anyway if entries came since the last one (a namespace's or
    # topic's deduplicationSnapshotInterval overrides it; 0 = by entries only), checked every
    # brokerDeduplicationSnapshotFrequencyInSeconds (0 = never).
    brokerDeduplicationEntriesInterval: int = setting(1000, POSITIVE)
    brokerDeduplicationSnapshotIntervalSeconds: int = setting(120, Rule(0, means="0 = by entries only"))
    brokerDeduplicationSnapshotFrequencyInSeconds: int = setting(120, NEVER)
    # Delayed delivery (deliver_at / deliver_after) for Shared and Key_Shared subscriptions; off:
    # such messages go out at once. A message delayed by more than the max (0 = no max) is refused.
    # (The tick time is accepted for Pulsar's configs; delays here are exact.) Namespace and topic
    # delayedDelivery policies override these.
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = setting(1000, AT_LEAST_0)
    delayedDeliveryMaxDelayInMillis: int = setting(0, Rule(0, means="0 = no maximum"))
    # Schemas: a producer without a schema is refused on a topic that has one; producers may add
    # new schema versions (else only the admin API can). Namespace policies override both.
    isSchemaValidationEnforced: bool = False
    isAllowAutoUpdateSchemaEnabled: bool = True  # (Pulsar's name; isAllowAutoUpdateSchema is read as it too)
    # Compaction: keep key-less messages in the compacted view (Pulsar's default since PIP-318: no).
    topicCompactionRetainNullKey: bool = False
    # Compact a topic automatically once more than this many bytes are not compacted yet (the
    # __compaction cursor's backlog, as Pulsar's checkCompaction; 0 = never; the namespace's and
    # topic's compactionThreshold policy overrides).
    brokerServiceCompactionThresholdInBytes: int = setting(0, NEVER)
    brokerServiceCompactionMonitorIntervalInSeconds: float = setting(60, POSITIVE)
    # -- namespace policy defaults (a namespace policy overrides each) ----------------------------
    # Message TTL in seconds for namespaces without message_ttl_in_seconds; 0 = messages never expire.
    ttlDurationDefaultInSeconds: int = setting(0, Rule(0, means="0 = messages never expire"))
    # How often subscriptions are checked for expired messages (Pulsar's default 5; fractions allowed).
    messageExpiryCheckIntervalInMinutes: float = setting(5, POSITIVE)
    # How often retention is applied to loaded topics (policy changes, time-based expiry).
    retentionCheckIntervalInSeconds: float = setting(120, POSITIVE)
    # Retention of acknowledged data for namespaces without retention_policies (0 = delete at once,
    # -1 = keep forever). Applied to a topic when it is loaded.
    defaultRetentionTimeInMinutes: int = setting(0, Rule(-1, means="-1 = keep forever"))
    defaultRetentionSizeInMB: int = setting(0, Rule(-1, means="-1 = keep forever"))
    # Backlog quotas: checked every backlogQuotaCheckIntervalInSeconds and when a producer is created.
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: float = setting(60, POSITIVE)
    # Every so often, the health check (/admin/v2/brokers/health's) for the pulsar_health metric (-1 = never).
    healthCheckMetricsUpdateTimeInSeconds: float = setting(-1, Rule(-1, means="-1 = never"))
    # Default destination_storage limit in bytes, and message_age limit in seconds (-1 = no limit).
    backlogQuotaDefaultLimitBytes: int = setting(-1, NO_LIMIT_MINUS_1)
    backlogQuotaDefaultLimitSecond: int = setting(-1, NO_LIMIT_MINUS_1)
    # producer_request_hold, producer_exception or consumer_backlog_eviction.
    backlogQuotaDefaultRetentionPolicy: str = setting("producer_request_hold",
                                                      Rule(choices=P.BACKLOG_RETENTION_POLICIES))
    # Subscriptions without consumers and without reads or acks for this long are deleted
    # (0 = never; Pulsar's keys and defaults, fractions allowed here; a namespace's
    # subscription_expiration_time_minutes overrides it). Checked every ...CheckIntervalInMinutes.
    subscriptionExpirationTimeMinutes: float = setting(0, NEVER)
    subscriptionExpiryCheckIntervalInMinutes: float = setting(5, POSITIVE)
    # Topic-level policies (REST .../{topic}/retention, messageTTL, ...; Pulsar's default since 2.11).
    # Off: they answer 405 and stored ones are ignored.
    topicLevelPoliciesEnabled: bool = True
    # Inactive topics (Pulsar's keys and defaults): every FrequencySeconds, a loaded topic inactive
    # for MaxInactiveDurationSeconds (empty: the frequency) is deleted with its data. Mode
    # delete_when_no_subscriptions: inactive = no producers and no subscriptions;
    # delete_when_subscriptions_caught_up: no producers and no subscription with a backlog.
    # A namespace's inactive_topic_policies overrides the last three; the check itself only runs
    # when enabled here at start.
    brokerDeleteInactiveTopicsEnabled: bool = True
    brokerDeleteInactiveTopicsFrequencySeconds: float = setting(60, POSITIVE)
    brokerDeleteInactiveTopicsMode: str = setting("delete_when_no_subscriptions",
                                                  Rule(choices=P.INACTIVE_TOPIC_DELETE_MODES))
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int | None = setting(
        None, Rule(0, means="empty = the check frequency"))
    # Also delete a partitioned topic's metadata once its last partition was deleted as inactive.
    brokerDeleteInactivePartitionedTopicMetadataEnabled: bool = False
    dispatcherMaxReadBatchSize: int = setting(100, POSITIVE)
    # Failover: partitions too elect their active consumer from the hash ring of consumer names (a
    # non-partitioned topic always does), rather than partition k taking consumer k % n.
    activeConsumerFailoverConsistentHashing: bool = False
    # Bytes per dispatcher read, at most (past the first entry): with large entries it, not the
    # entry count, bounds what one read holds in memory (Pulsar's key and default, 5 MB).
    dispatcherMaxReadSizeBytes: int = setting(5 * 1024 * 1024, POSITIVE)
    # An admin analyzeBacklog reads at most this many of a subscription's unacknowledged entries, for at most this
    # long, then answers with what it counted and "aborted": true (Pulsar's keys and defaults).
    subscriptionBacklogScanMaxEntries: int = setting(10_000, POSITIVE)
    subscriptionBacklogScanMaxTimeMs: int = setting(120_000, POSITIVE)
    maxUnackedMessagesPerConsumer: int = setting(50000, UNLIMITED)
    # A Shared / Key_Shared subscription whose consumers hold this many unacknowledged messages
    # gets no new entries (redeliveries still go out) until acks bring it below half; 0 = no limit.
    maxUnackedMessagesPerSubscription: int = setting(200000, UNLIMITED)
    # PIP-299: a Shared / Key_Shared subscription whose cursor holds more acknowledgement holes (individually
    # acknowledged ranges) than its stored state keeps (managedLedgerMaxUnackedRangesToPersist) reads no new entries
    # (redeliveries still go out) until acks bring it back within; namespace and topic
    # dispatcherPauseOnAckStatePersistent override it. Dynamic.
    dispatcherPauseOnAckStatePersistentEnabled: bool = False
    # The subscription types consumers may use (namespace and topic policies override it), and
    # whether Key_Shared is possible at all.
    subscriptionTypesEnabled: list[str] = field(default_factory=lambda: list(P.SUBSCRIPTION_TYPES),
                                                metadata={"rule": Rule(choices=P.SUBSCRIPTION_TYPES)})
    subscriptionKeySharedEnable: bool = True
    # Subscribes one consumer (client address, consumer name, consumer id) may make per period on
    # a persistent topic; 0 = no limit (namespace / topic subscribeRate override it).
    subscribeThrottlingRatePerConsumer: int = setting(0, UNLIMITED)
    subscribeRatePeriodPerConsumerInSecond: int = setting(30, POSITIVE)
    # Replicated subscriptions (consumers' replicate_subscription_state): snapshot markers between
    # the clusters every so often, given up after the timeout; snapshots kept per subscription.
    enableReplicatedSubscriptions: bool = True
    replicatedSubscriptionsSnapshotFrequencyMillis: int = setting(1000, POSITIVE)
    replicatedSubscriptionsSnapshotTimeoutSeconds: int = setting(30, POSITIVE)
    replicatedSubscriptionsSnapshotMaxCachedPerSubscription: int = setting(10, POSITIVE)
    # -- namespace bundles and their split (Pulsar's keys and defaults; docs/features.md) -------------
    # Bundles of a namespace created without a count (and of one whose stored documents have none).
    defaultNumberOfNamespaceBundles: int = setting(4, Rule(1, 1 << 16))
    # The split algorithm used when a split request names none, and the ones a request may name.
    defaultNamespaceBundleSplitAlgorithm: str = setting("range_equally_divide", Rule(choices=P.SPLIT_ALGORITHMS))
    supportedNamespaceBundleSplitAlgorithms: list[str] = field(
        default_factory=lambda: list(P.SPLIT_ALGORITHMS), metadata={"rule": Rule(choices=P.SPLIT_ALGORITHMS)})
    # Automatic split: a bundle past any of these thresholds (topics, producers + consumers,
    # messages per second in + out, MB per second in + out) is split in two, until the namespace has
    # loadBalancerNamespaceMaximumBundles bundles; checked every loadBalancerSplitIntervalMinutes.
    loadBalancerAutoBundleSplitEnabled: bool = True
    loadBalancerAutoUnloadSplitBundlesEnabled: bool = True
    # A bundle being unloaded waits at most this long for its topics to close, then releases its ownership anyway
    # (the closes go on; another owner fences the ledgers it takes over), as Pulsar's OwnedBundle does.
    namespaceBundleUnloadingTimeoutMs: int = setting(60000, POSITIVE)
    loadBalancerNamespaceBundleMaxTopics: int = setting(1000, AT_LEAST_0)
    loadBalancerNamespaceBundleMaxSessions: int = setting(1000, Rule(-1, means="0 or -1 = not checked"))
    loadBalancerNamespaceBundleMaxMsgRate: int = setting(30000, AT_LEAST_0)
    loadBalancerNamespaceBundleMaxBandwidthMbytes: int = setting(100, AT_LEAST_0)
    loadBalancerNamespaceMaximumBundles: int = setting(128, POSITIVE)
    # (Pulsar's extensible load manager's key; its modular one splits when it writes a load report.)
    loadBalancerSplitIntervalMinutes: float = setting(1, POSITIVE)
    # flow_or_qps_equally_divide splits only a bundle past a rate threshold by this many per cent.
    flowOrQpsDifferenceThresholdPercentage: int = setting(10, AT_LEAST_0)
    # -- the leader's load shedding (cluster mode; Pulsar's ModularLoadManagerImpl keys and 4.0 defaults;
    # docs/cluster.md#load-shedding) ---------------------------------------------------------------------
    loadBalancerSheddingEnabled: bool = True
    loadBalancerSheddingIntervalMinutes: float = setting(1, POSITIVE)
    # A bundle the shedding unloaded is not shed again for this long.
    loadBalancerSheddingGracePeriodMinutes: float = setting(30, AT_LEAST_0)
    # PIP-380: namespaces ("tenant/namespace", comma-separated) whose bundles the leader never sheds: a bundle of
    # one that the strategy picks is skipped (Pulsar's ModularLoadManagerImpl.doLoadShedding).
    loadBalancerSheddingExcludedNamespaces: list[str] = field(default_factory=list)
    loadBalancerLoadSheddingStrategy: str = setting(THRESHOLD_SHEDDER, Rule(
        choices=SHEDDING_STRATEGIES,
        words=f"one of {', '.join(SHEDDING_STRATEGIES)} (the full class name)"))
    loadBalancerLoadPlacementStrategy: str = setting(LEAST_LONG_TERM_MESSAGE_RATE, Rule(
        choices=PLACEMENT_STRATEGIES,
        words=f"one of {', '.join(PLACEMENT_STRATEGIES)} (the full class name)"))
    # LeastResourceUsageWithWeight: the candidates this many points under their average (smoothed) usage are the best.
    loadBalancerAverageResourceUsageDifferenceThresholdPercentage: int = setting(10, Rule(0, JAVA_INT_MAX))
    # AvgShedder: a pair of brokers (the idlest with the busiest, inwards) whose scores (weighted usage, 0-100)
    # differ by the low threshold for the low hit count of consecutive rounds, or by the high threshold for the high
    # hit count, moves bundles from the busier to the idler (maxUnloadPercentage of their difference in message
    # rate, else in throughput, at least minUnloadMessage / minUnloadMessageThroughput).
    loadBalancerAvgShedderLowThreshold: int = setting(15, Rule(0, JAVA_INT_MAX))
    loadBalancerAvgShedderHighThreshold: int = setting(40, Rule(0, JAVA_INT_MAX))
    loadBalancerAvgShedderHitCountLowThreshold: int = setting(8, Rule(0, JAVA_INT_MAX))
    loadBalancerAvgShedderHitCountHighThreshold: int = setting(2, Rule(0, JAVA_INT_MAX))
    # ThresholdShedder: a broker whose (smoothed, weighted) usage is more than this many points above the
    # brokers' average sheds bundles down to 5 points under it, unless that is under the minimum throughput (MB/s).
    loadBalancerBrokerThresholdShedderPercentage: int = setting(10, Rule(0, 100))
    loadBalancerHistoryResourcePercentage: float = setting(0.9, Rule(0, 1))
    loadBalancerBundleUnloadMinThroughputThreshold: float = setting(10, AT_LEAST_0)
    loadBalancerCPUResourceWeight: float = setting(1.0, AT_LEAST_0)
    loadBalancerMemoryResourceWeight: float = setting(0.0, AT_LEAST_0)
    loadBalancerDirectMemoryResourceWeight: float = setting(0.0, AT_LEAST_0)
    loadBalancerBandwidthInResourceWeight: float = setting(1.0, AT_LEAST_0)
    loadBalancerBandwidthOutResourceWeight: float = setting(1.0, AT_LEAST_0)
    # Placement: a broker above this usage gets no new bundle while another is below it; OverloadShedder: a broker
    # at or above it sheds bundles down to 5 points under it.
    loadBalancerBrokerOverloadedThresholdPercentage: int = setting(85, Rule(0, 100))
    # Placement spreads an anti-affinity group's namespaces over the cluster's failure domains first (admin REST
    # /admin/v2/clusters/{cluster}/failureDomains), then over the brokers (Pulsar's key and default).
    failureDomainsEnabled: bool = False
    # UniformLoadShedder: the busiest broker sheds when its message rate is more than this many per cent above the
    # idlest one's, or else when its throughput is more than this many times the idlest one's (0: that comparison
    # is off, as a negative value is in Pulsar); it sheds up to maxUnloadPercentage of the difference, if that is
    # at least minUnloadMessage messages/s (minUnloadMessageThroughput bytes/s), at most
    # maxUnloadBundleNumPerShedding bundles.
    loadBalancerMsgRateDifferenceShedderThreshold: float = setting(50, Rule(0, means="0 = off"))
    loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold: float = setting(4, Rule(0, means="0 = off"))
    maxUnloadPercentage: float = setting(0.2, AT_LEAST_0)
    # (Java ints in Pulsar.)
    minUnloadMessage: int = setting(1000, Rule(0, JAVA_INT_MAX))
    minUnloadMessageThroughput: int = setting(1024 * 1024, Rule(0, JAVA_INT_MAX))
    maxUnloadBundleNumPerShedding: int = setting(-1, Rule(-1, JAVA_INT_MAX, means="-1 = no limit"))
    # The bandwidth limit the load report counts against (Gbit/s); 0: unknown, bandwidth not counted (Pulsar
    # reads the NIC's speed then; our broker counts its own message bytes, not the NIC's).
    loadBalancerOverrideBrokerNicSpeedGbps: float = setting(0, Rule(0, means="0 = unknown"))
    # -- transactions (PIP-31; docs/transactions.md): off by default, as in Pulsar ---------------------
    transactionCoordinatorEnabled: bool = False
    # Open transactions one coordinator may hold; 0 = no limit (Pulsar's default).
    maxActiveTransactionsPerCoordinator: int = setting(0, UNLIMITED)
    # -- geo-replication: how replicators reach other clusters (their cluster data overrides) ---------
    # A partitioned topic created through the admin API is created on the namespace's other replication clusters
    # too, in the background (docs/replication.md).
    createTopicToRemoteClusterForReplication: bool = True
    brokerClientTlsEnabled: bool = False
    brokerClientTrustCertsFilePath: str = ""
    brokerClientCertificateFilePath: str = ""
    brokerClientKeyFilePath: str = ""
    # token, basic, tls or Pulsar's client class names (org.apache.pulsar.client.impl.auth.AuthenticationToken)
    brokerClientAuthenticationPlugin: str = ""
    brokerClientAuthenticationParameters: str = field(default="", repr=False)
    subscriptionRedeliveryTrackerEnabled: bool = True
    # -- storage ------------------------------------------------------------------------------------
    dataDir: str = "data"
    # "file": topics are segment files under <dataDir>/ledgers (survive restarts and crashes);
    # "memory": topics live in RAM and are lost on restart;
    # "bookkeeper": topics are ledgers on Apache BookKeeper, their metadata (managed-ledger and
    # cursor znodes) in ZooKeeper, all in Apache Pulsar's formats (docs/cluster.md).
    managedLedgerStorage: str = setting("file", Rule(choices=("file", "memory", "bookkeeper")))
    # managedLedgerStorage=bookkeeper: where BookKeeper's own metadata lives, as Pulsar's key:
    # zk+hierarchical://host:port[;host:port...]/ledgers. Empty = the ZooKeeper of metadataStoreUrl,
    # ledgers under /ledgers. Managed-ledger znodes go to metadataStoreUrl when it names a
    # ZooKeeper, else to BookKeeper's.
    bookkeeperMetadataServiceUri: str = ""
    # Each ledger a topic writes: on E bookies, Qw copies of each entry, acknowledged by Qa of them
    # (Pulsar's keys and defaults; E >= Qw >= Qa).
    managedLedgerDefaultEnsembleSize: int = setting(2, POSITIVE)
    managedLedgerDefaultWriteQuorum: int = setting(2, POSITIVE)
    managedLedgerDefaultAckQuorum: int = setting(2, POSITIVE)
    # managedLedgerStorage=bookkeeper: rack-aware ensembles (Pulsar's keys and defaults): each new ledger's
    # bookies, and a bookie replacing a failed one, are chosen over the racks of /admin/v2/bookies/racks-info
    # (BookKeeper's RackawareEnsemblePlacementPolicy), so that each write quorum spans at least
    # bookkeeperClientMinNumRacksPerWriteQuorum racks where the bookies allow; with the Enforce key, a ledger
    # that cannot have that is not created (and bookies with no rack are never chosen). No rack configured:
    # random writable bookies. Region-aware placement is not there: bookkeeperClientRegionawarePolicyEnabled
    # only changes which rack names racks-info accepts ("region/rack"), as in Pulsar.
    bookkeeperClientRackawarePolicyEnabled: bool = True
    bookkeeperClientRegionawarePolicyEnabled: bool = False
    bookkeeperClientMinNumRacksPerWriteQuorum: int = setting(2, POSITIVE)
    bookkeeperClientEnforceMinNumRacksPerWriteQuorum: bool = False
    # managedLedgerStorage=bookkeeper: bookie isolation groups (Pulsar's keys, none by default): comma-separated
    # group names of /admin/v2/bookies/racks-info. Set, every new ledger without a namespace bookie affinity group
    # of its own takes its bookies from the primary groups, from the secondary ones too when the primary have
    # fewer writable bookies than the ensemble, and then from the bookies in no group; never from other groups
    # (Pulsar's IsolatedBookieEnsemblePlacementPolicy). strictBookieAffinityEnabled: a ledger of a namespace with
    # no affinity group uses only the bookies in no group (system topics: any bookie).
    bookkeeperClientIsolationGroups: str = ""
    bookkeeperClientSecondaryIsolationGroups: str = ""
    strictBookieAffinityEnabled: bool = False
    # managedLedgerStorage=bookkeeper: compression of the managed-ledger and cursor znodes (Pulsar's
    # keys: NONE, LZ4, ZLIB, ZSTD or SNAPPY; only values larger than the threshold are compressed).
    # Compressed znodes are read whatever these say.
    managedLedgerInfoCompressionType: str = setting("NONE", Rule(choices=CODEC_NAMES))
    managedLedgerInfoCompressionThresholdInBytes: int = setting(16 * 1024, AT_LEAST_0)
    managedCursorInfoCompressionType: str = setting("NONE", Rule(choices=CODEC_NAMES))
    managedCursorInfoCompressionThresholdInBytes: int = setting(16 * 1024, AT_LEAST_0)
    # Cursor-ledger entries keep individually acknowledged entries as per-ledger bitsets (Pulsar's
    # key; false, its 4.0 default: as ranges). Both forms are read.
    managedLedgerPersistIndividualAckAsLongArray: bool = False
    # Acknowledgement holes (individually acknowledged ranges) a cursor's stored state keeps, file or bookkeeper storage
    # (Pulsar's key and default): past them, acknowledged entries may be delivered again after a restart (with
    # dispatcherPauseOnAckStatePersistentEnabled, the subscription waits for acks instead of reading more).
    managedLedgerMaxUnackedRangesToPersist: int = setting(10000, AT_LEAST_0)
    # Ledger rollover (Pulsar's keys and defaults): a ledger is closed and a new one started when
    # it has this many entries, this much data or this age - but never before the minimum age.
    managedLedgerMaxEntriesPerLedger: int = setting(50000, POSITIVE)
    managedLedgerMaxSizePerLedgerMbytes: int = setting(2048, POSITIVE)
    managedLedgerMaxLedgerRolloverTimeMinutes: float = setting(240, AT_LEAST_0)
    managedLedgerMinLedgerRolloverTimeMinutes: float = setting(10, AT_LEAST_0)
    # -- tiered storage (docs/features.md#offloading): Pulsar's keys. The driver: none (offload runs fail, as
    # Pulsar's NullLedgerOffloader), "filesystem" or an S3 one. Closed ledgers (of file or bookkeeper storage) are
    # copied in the layout of Pulsar's offloader of that name, so what Pulsar's brokers offloaded there is read too.
    # A ledger's local copy is deleted managedLedgerOffloadDeletionLagMs after its copy completed (negative: never),
    # reads then go to the copy.
    # "filesystem": Hadoop MapFiles under the base directory. fileSystemURI: file:/// or empty (local files;
    # Hadoop's other file systems are not there). fileSystemProfilePath: Pulsar's Hadoop profile
    # (conf/filesystem_offload_core_site.xml): its hadoop.tmp.dir is the base directory (relative: to the broker's
    # working directory), its io.seqfile.* and io.map.index.interval the files' compression, block size and index
    # interval; without one, <dataDir>/offloaded and BLOCK compression (the shipped profile's).
    # The S3 drivers (managed_ledger/offload/s3.py): "aws-s3" (AWS, or any S3 with a service endpoint), "S3" or
    # "aliyun-oss" (S3-compatible stores: an endpoint, credentials from the environment's ACCESS_KEY_ID and
    # ACCESS_KEY_SECRET); the copies are Pulsar's jcloud offloader's objects in the bucket. "azureblob"
    # (managed_ledger/offload/azure.py): the same objects in the container managedLedgerOffloadBucket, credentials
    # from the environment's AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_ACCESS_KEY (an account key or a SAS), the
    # account's endpoint unless managedLedgerOffloadServiceEndpoint names one. "google-cloud-storage"
    # (managed_ledger/offload/gcs.py): the same objects, the gcsManagedLedgerOffload* keys below. Drivers in any case.
    managedLedgerOffloadDriver: str = setting("", Rule(
        choices=("", "filesystem", "aws-s3", "S3", "aliyun-oss", "azureblob", "google-cloud-storage"),
        fold_case=True, words="one of filesystem, aws-s3, S3, aliyun-oss, azureblob, google-cloud-storage (in any "
                              "case), or empty"))
    fileSystemURI: str = ""
    fileSystemProfilePath: str = ""
    # aws-s3's settings (these win over the managedLedgerOffload* ones below for it): the bucket, the region or a
    # service endpoint, the largest block of the data objects (at least 1 KiB), the ranged reads' size; credentials
    # (else boto3's default chain: the environment, the profile, the instance's role).
    s3ManagedLedgerOffloadBucket: str = ""
    s3ManagedLedgerOffloadRegion: str = ""
    s3ManagedLedgerOffloadServiceEndpoint: str = ""
    s3ManagedLedgerOffloadMaxBlockSizeInBytes: int = setting(64 * 1024 * 1024, Rule(1024, JAVA_INT_MAX))
    s3ManagedLedgerOffloadReadBufferSizeInBytes: int = setting(1024 * 1024, Rule(1, JAVA_INT_MAX))
    s3ManagedLedgerOffloadCredentialId: str = ""
    s3ManagedLedgerOffloadCredentialSecret: str = field(default="", repr=False)
    # (assuming an IAM role is not supported: a broker configured so does not start)
    s3ManagedLedgerOffloadRole: str = ""
    s3ManagedLedgerOffloadRoleSessionName: str = "pulsar-s3-offload"
    # google-cloud-storage's settings (these win over the managedLedgerOffload* ones below for it): the bucket, the
    # region, the largest block (128 MiB), the ranged reads' size, the service account's JSON key file (required,
    # unless the environment's STORAGE_EMULATOR_HOST names an emulator).
    gcsManagedLedgerOffloadBucket: str = ""
    gcsManagedLedgerOffloadRegion: str = ""
    gcsManagedLedgerOffloadMaxBlockSizeInBytes: int = setting(128 * 1024 * 1024, Rule(1024, JAVA_INT_MAX))
    gcsManagedLedgerOffloadReadBufferSizeInBytes: int = setting(1024 * 1024, Rule(1, JAVA_INT_MAX))
    gcsManagedLedgerOffloadServiceAccountKeyFile: str = ""
    # Every blob-store driver's settings (Pulsar's OffloadPoliciesImpl keys; 0: not set).
    managedLedgerOffloadBucket: str = ""
    managedLedgerOffloadRegion: str = ""
    managedLedgerOffloadServiceEndpoint: str = ""
    managedLedgerOffloadMaxBlockSizeInBytes: int = setting(0, Rule(0, JAVA_INT_MAX, means="0 = 64 MiB"))
    managedLedgerOffloadReadBufferSizeInBytes: int = setting(0, Rule(0, JAVA_INT_MAX, means="0 = 1 MiB"))
    managedLedgerOffloadDeletionLagMs: int = setting(14_400_000, Rule(-JAVA_LONG_MAX - 1, JAVA_LONG_MAX,
                                                                      means="negative = never"))
    # Automatic offload (the namespace's and topic's offload policies win), checked with retention: the closed
    # ledgers past this many bytes of newer data, or closed this long ago, are offloaded; -1: not that criterion.
    managedLedgerOffloadAutoTriggerSizeThresholdBytes: int = setting(-1, Rule(-JAVA_LONG_MAX - 1, JAVA_LONG_MAX,
                                                                              means="negative = not by size"))
    managedLedgerOffloadThresholdInSeconds: int = setting(-1, Rule(-JAVA_LONG_MAX - 1, JAVA_LONG_MAX,
                                                                   means="negative = not by age"))
    # Reads of a ledger offloaded whose local copy is still there: from the copy ("tiered-storage-first", Pulsar's
    # default) or from the local copy ("bookkeeper-first"); a namespace's or topic's offload policies'
    # managedLedgerOffloadedReadPriority wins.
    managedLedgerDataReadPriority: str = setting("tiered-storage-first",
                                                 Rule(choices=("tiered-storage-first", "bookkeeper-first")))
    # The automatic offload is checked when a topic loads too (besides each ledger rollover and retention).
    triggerOffloadOnTopicLoad: bool = False
    # An offloaded copy open for reads (its read buffer, its files) is closed once no read used it this long,
    # checked with retention; the next read opens it again.
    managedLedgerInactiveOffloadedLedgerEvictionTimeSeconds: int = setting(600, Rule(0, means="0 = never"))
    # Ours: fsync (fdatasync) appended entries before the producer's receipt goes out. false is
    # faster but a power cut or kernel crash can lose receipted messages of the last seconds
    # (a broker crash cannot: the data is in the OS page cache by then).
    managedLedgerSyncData: bool = True
    # Group commit of steady streams (BookKeeper's journal keys; its defaults are 2 ms and 512 KiB):
    # while the previous sync carried at least journalGroupMinBatchBytes (ours), the next one waits
    # up to this long (0 = never) for this many bytes, so fewer fdatasyncs carry the same data. A
    # stream is grouped while it brings journalGroupMinBatchBytes per wait (4 MB/s by default);
    # lighter traffic never waits.
    journalMaxGroupWaitMSec: float = setting(1.0, Rule(0, means="0 = never wait"))
    journalBufferedWritesThreshold: int = setting(512 * 1024, POSITIVE)
    journalGroupMinBatchBytes: int = setting(4096, POSITIVE)
    # Ours: with managedLedgerSyncData, segments are written with direct I/O (O_DIRECT) where the
    # file system has it: no page-cache pages to fill and write back, about half the writer's CPU
    # per byte (docs/benchmarks.md). Reads of entries not in the read cache then come from the disk.
    managedLedgerDirectIO: bool = True
    # Ours, after BookKeeper's diskUsageThreshold / diskUsageLwmThreshold / diskUsageWarnThreshold
    # (same defaults) and diskCheckInterval: the file ledger refuses new entries (SendError
    # PersistenceError) while the file system of dataDir is at least this full or has less than
    # managedLedgerMinFreeDiskSpaceMB available, and takes them again below the low-water mark;
    # cursor positions and metadata are still written in the reserve left. docs/exhaustion.md
    managedLedgerDiskUsageThreshold: float = setting(0.95, Rule(0, 1, above=True, means="1 = no usage limit"))
    managedLedgerDiskUsageLwmThreshold: float = setting(0.90, Rule(0, 1, above=True))
    managedLedgerDiskUsageWarnThreshold: float = setting(0.90, Rule(0, 1, above=True))
    managedLedgerMinFreeDiskSpaceMB: int = setting(16, Rule(0, means="0 = no minimum"))
    managedLedgerDiskCheckIntervalMillis: int = setting(1000, POSITIVE)
    # An add refused by the floor is held this long (stored if room returns meanwhile), then its
    # SEND fails with PersistenceError; the clients' sendTimeout (default 30 s) should end first.
    # On BookKeeper storage the same holds while no writable ensemble can be formed (bookies
    # read-only or away); managedLedgerDiskCheckIntervalMillis is then how often the broker reads
    # which bookies are writable.
    managedLedgerDiskFullAddHoldSeconds: float = setting(30.0, Rule(0, means="0 = fail at once"))
    # Durable cursor (subscription) positions are written at most this often per second; acks
    # since the last write are redelivered after a crash (Pulsar's key and default).
    managedLedgerDefaultMarkDeleteRateLimit: float = setting(1.0, Rule(0, means="0 = write every change"))
    managedLedgerCacheSizeMB: int = setting(256, Rule(0, means="0 = no read cache"))
    # A subscription more than this many entries behind (unread) counts as backlogged: its cursor
    # is inactive, so the read cache does not keep entries for it and it reads from disk (Pulsar's
    # key and default; checked when a consumer joins or leaves and every statsUpdateFrequencyInSecs).
    # 0 = never backlogged.
    managedLedgerCursorBackloggedThreshold: int = setting(1000, NEVER)
    # How many cached reads may complete inline, nested, before the stack is unwound.
    managedLedgerReadNestingLimit: int = setting(10, AT_LEAST_0)
    # A subscription's read that found nothing new looks again after this delay, then waits for the
    # next add: a reader at the tail takes what came meanwhile in one read (Pulsar's key; its default
    # is 10 ms, ours 0 = woken by every add: with the official client here 10 ms showed no gain in
    # fan-out or end-to-end throughput and costs up to that much latency at the tail).
    managedLedgerNewEntriesCheckDelayInMillis: int = setting(0, AT_LEAST_0)
    # -- stats --------------------------------------------------------------------------------------
    # Rates (msgRateIn, pulsar_rate_in, ...) are computed over this interval from counter snapshots.
    statsUpdateFrequencyInSecs: float = setting(60, POSITIVE)
    # Per-topic and per-subscription series in /metrics (else aggregated per namespace, as Pulsar).
    exposeTopicLevelMetricsInPrometheus: bool = True
    # Per-consumer and per-producer series in /metrics (Pulsar's defaults: off).
    exposeConsumerLevelMetricsInPrometheus: bool = False
    exposeProducerLevelMetricsInPrometheus: bool = False
    # pulsar_ml_* per namespace (Pulsar's default: on) and pulsar_ml_cursor_* per cursor (off).
    exposeManagedLedgerMetricsInPrometheus: bool = True
    exposeManagedCursorMetricsInPrometheus: bool = False
    # topic="persistent://t/n/x" partition="3" instead of topic="persistent://t/n/x-partition-3".
    splitTopicAndPartitionLabelInPrometheus: bool = False
    # Producers in the topic stats (publishers) and per-producer metrics (Pulsar's default: on).
    exposePublisherStats: bool = True
    # pulsar_replication_* series of replicated topics (Pulsar's default: on).
    replicationMetricsEnabled: bool = True
    # -- TLS (Pulsar's keys; see broker.auth.tls) ---------------------------------------------------
    # TLS listeners: binary pulsar+ssl:// and HTTPS. Empty = off; 0 picks a free port.
    brokerServicePortTls: int | None = setting(None, PORT)
    webServicePortTls: int | None = setting(None, PORT)
    # Deprecated in Pulsar (the TLS ports are what enable TLS): accepted, warned about if set alone.
    tlsEnabled: bool = False
    tlsCertificateFilePath: str = ""
    tlsKeyFilePath: str = ""
    # CA certificates client certificates must chain to (also enables asking for one).
    tlsTrustCertsFilePath: str = ""
    # Accept clients whose certificate cannot be verified; such a certificate then authenticates nothing.
    tlsAllowInsecureConnection: bool = False
    # true: the TLS handshake fails without a trusted client certificate; false: ask, do not require.
    tlsRequireTrustedClientCertOnConnect: bool = False
    # e.g. TLSv1.3,TLSv1.2 (empty = the TLS library's defaults); ciphers by IANA or OpenSSL name.
    tlsProtocols: list[str] = field(default_factory=list)
    tlsCiphers: list[str] = field(default_factory=list)
    # -- authentication (broker.auth) --------------------------------------------------------------
    authenticationEnabled: bool = False
    # tls, token, basic, or Pulsar's class names
    # (org.apache.pulsar.broker.authentication.AuthenticationProviderTls, ...Token, ...Basic).
    authenticationProviders: list[str] = field(default_factory=list)
    # Role given to clients that present no credentials or an unknown method (empty = refuse them).
    anonymousUserRole: str = ""
    # How often live connections are checked for expired credentials (then AUTH_CHALLENGE).
    authenticationRefreshCheckSeconds: float = setting(60, POSITIVE)
    # Require credentials for /metrics too (Pulsar's default: metrics are open).
    authenticateMetricsEndpoint: bool = False
    # Token provider: HMAC secret (HS256) or public key (RS256/ES256...), each a data:, file:,
    # path or base64 value. Secrets never appear in logs or reprs.
    tokenSecretKey: str = field(default="", repr=False)
    tokenPublicKey: str = ""
    tokenPublicAlg: str = "RS256"
    # Claim holding the role (empty = "sub"); audience claim and this broker's audience.
    tokenAuthClaim: str = ""
    tokenAudienceClaim: str = ""
    tokenAudience: str = ""
    tokenAllowedClockSkewSeconds: int = setting(0, AT_LEAST_0)
    # OpenID Connect provider (broker.auth.openid; Pulsar's names and defaults): token issuers and
    # audiences (both required), the role claim, clock leeway, key cache refresh, HTTP timeouts,
    # https-only issuers, and a CA file for the issuers' TLS (empty = the system's).
    openIDAllowedTokenIssuers: list[str] = field(default_factory=list)
    openIDAllowedAudiences: list[str] = field(default_factory=list)
    openIDRoleClaim: str = "sub"
    openIDAcceptedTimeLeewaySeconds: int = setting(0, AT_LEAST_0)
    openIDCacheRefreshAfterWriteSeconds: int = setting(64800, POSITIVE)
    openIDKeyIdCacheMissRefreshSeconds: int = setting(300, AT_LEAST_0)
    openIDHttpConnectionTimeoutMillis: int = setting(10000, POSITIVE)
    openIDHttpReadTimeoutMillis: int = setting(10000, POSITIVE)
    openIDRequireIssuersUseHttps: bool = True
    openIDTokenIssuerTrustCertsFilePath: str = ""
    openIDFallbackDiscoveryMode: str = setting("DISABLED", Rule(choices=OPENID_DISCOVERY_MODES))
    # Basic provider: the htpasswd file (path, file:, data: or base64 content).
    basicAuthConf: str = field(default="", repr=False)
    # -- authorization -----------------------------------------------------------------------------
    authorizationEnabled: bool = False
    superUserRoles: list[str] = field(default_factory=list)
    # Roles of proxies (Apache Pulsar's proxy) that connect on behalf of clients: they must name the
    # client's role (original principal), and both must be authorized. With
    # authenticateOriginalAuthData the client's own credentials, relayed by the proxy, are checked too.
    proxyRoles: list[str] = field(default_factory=list)
    authenticateOriginalAuthData: bool = False
    # Grants to "prefix*" or "*suffix" roles match by prefix / suffix.
    authorizationAllowWildcardsMatching: bool = False
    # Read, grant and revoke a topic's permissions when the topic does not exist (Pulsar's default: 404).
    allowAclChangesOnNonExistentTopics: bool = False
    # Keys from the file that we do not know (reported once at start).
    unknown_keys: list[str] = field(default_factory=list, repr=False)
    # Keys the file or the overrides set (Pulsar keeps the file's keys: ServiceConfiguration.getProperties()).
    given_keys: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> BrokerConfig:
        """The defaults, then the file's values, then the overrides that are not None."""
        cfg = cls()
        if path is not None:
            cfg.apply_file(Path(path))
        for key, value in overrides.items():
            if value is not None:
                cfg.set(key, value)
                cfg.given_keys.add(_RENAMED_KEYS.get(key, key))
        return cfg

    def apply_file(self, path: Path) -> None:
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ConfigError(f"{path}:{lineno}: expected key=value, got {raw!r}")
            key, value = _RENAMED_KEYS.get(key.strip(), key.strip()), value.strip()
            if key in _KINDS:
                try:
                    self.set(key, value)
                except ConfigError as exc:
                    raise ConfigError(f"{exc} ({path}:{lineno})") from None
                self.given_keys.add(key)
            else:
                self.unknown_keys.append(key)

    def set(self, key: str, value: Any) -> None:
        """Convert ``value`` (text from a file or flag, or a Python value) and check it; ConfigError
        names the key and what it accepts."""
        key = _RENAMED_KEYS.get(key, key)
        setattr(self, key, converted(key, value))

    def check(self) -> None:
        """Check every value (they may have been assigned directly); raise the first bad one."""
        for key, kind in _KINDS.items():
            kind.check(key, getattr(self, key))
        if self.loadBalancerLoadPlacementStrategy == AVG_SHEDDER != self.loadBalancerLoadSheddingStrategy:
            # (Pulsar's ModularLoadManagerImpl refuses to start so: one instance must plan and place)
            raise ConfigError(f"The load shedding strategy: {self.loadBalancerLoadSheddingStrategy} can't work with "
                              f"the placement strategy: {self.loadBalancerLoadPlacementStrategy} (AvgShedder places "
                              "only what it shed itself)")

    def is_set(self, key: str) -> bool:
        """The setting was given (by the file or an override) or differs from its default (a config made in code)."""
        return key in self.given_keys or getattr(self, key) != _DEFAULTS[key]

    def report_unknown(self) -> None:
        if self.unknown_keys:
            log.warning("configuration keys not supported (ignored): %s", ", ".join(sorted(self.unknown_keys)))


@dataclass(frozen=True)
class _Kind:
    """A key's type (from its annotation) and rule: converts text and checks values."""

    type: type  # int, float, bool, str or list (of str)
    nullable: bool  # "int | None": an empty value is None
    rule: Rule
    secret: bool  # never shown in an error line

    @classmethod
    def of(cls, f: dataclasses.Field[Any]) -> _Kind:
        annotation = str(f.type)
        base = annotation.removesuffix(" | None")
        types: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str, "list[str]": list}
        return cls(types[base], base != annotation, f.metadata.get("rule", Rule()), not f.repr)

    def error(self, key: str, value: Any) -> ConfigError:
        if self.secret:
            shown = "(hidden)"
        elif isinstance(value, list | tuple):
            shown = ",".join(map(str, value))
        elif isinstance(value, bool):
            shown = str(value).lower()
        else:
            shown = "" if value is None else str(value)
        accepts = self.rule.describe(self)
        if self.nullable and "empty" not in accepts:
            accepts += " or empty"
        return ConfigError(f"{key}={shown}: expected {accepts}")

    def convert(self, key: str, value: Any) -> Any:
        raw = value  # (the error line shows what was given, not what it became)
        try:
            if isinstance(value, str):
                value = self._parse(value.strip())
            elif isinstance(value, tuple):
                value = list(value)
        except ValueError:
            raise self.error(key, raw) from None
        if not self._typed(value) or not self.rule.allows(value):
            raise self.error(key, raw)
        return value

    def _parse(self, text: str) -> Any:
        if self.type is list:
            return [item.strip() for item in text.split(",") if item.strip()]
        if self.type is str:
            return text
        if self.nullable and not text:
            return None
        if self.type is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        number = self.type(text)
        if not math.isfinite(number):
            raise ValueError(text)  # (inf and nan are no settings)
        return number

    def check(self, key: str, value: Any) -> None:
        if not self._typed(value) or not self.rule.allows(value):
            raise self.error(key, value)

    def _typed(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if self.type is list:
            return isinstance(value, list) and all(isinstance(item, str) for item in value)
        if self.type is bool or isinstance(value, bool):
            return isinstance(value, bool) and self.type is bool
        if self.type is float:
            return isinstance(value, int | float) and math.isfinite(value)
        return isinstance(value, self.type)


_KINDS = {f.name: _Kind.of(f) for f in dataclasses.fields(BrokerConfig) if f.name not in ("unknown_keys", "given_keys")}
_DEFAULTS = {key: value for key, value in vars(BrokerConfig()).items() if key in _KINDS}


def is_secret(key: str) -> bool:
    """A setting never shown (kept out of the config's repr): a key, a password."""
    return _KINDS[key].secret


def converted(key: str, value: Any) -> Any:
    """``value`` (text, or a Python value) as setting ``key`` holds it; ConfigError names the key and what it accepts,
    KeyError an unknown key."""
    kind = _KINDS.get(key)
    if kind is None:
        raise KeyError(f"unknown configuration key {key!r}")
    return kind.convert(key, value)
# Keys this broker once read under another name than Pulsar's -> Pulsar's: both are read.
_RENAMED_KEYS = {"isAllowAutoUpdateSchema": "isAllowAutoUpdateSchemaEnabled"}
