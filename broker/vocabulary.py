"""Apache Pulsar's names for kinds of things (enumerations as their JSON and configuration spell
them), shared by the configuration's checks and the policy values, so that neither imports the other."""

# BacklogQuota.BacklogQuotaType: a size limit and (Pulsar 2.9+) an age limit.
DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"
BACKLOG_QUOTA_TYPES = (DESTINATION_STORAGE, MESSAGE_AGE)
# BacklogQuota.RetentionPolicy: what happens once a quota is exceeded.
PRODUCER_REQUEST_HOLD = "producer_request_hold"
PRODUCER_EXCEPTION = "producer_exception"
CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
BACKLOG_RETENTION_POLICIES = (PRODUCER_REQUEST_HOLD, PRODUCER_EXCEPTION, CONSUMER_BACKLOG_EVICTION)
# Java's int and long as (lowest, highest): the types of Pulsar's configuration keys and policy fields, which
# hold nothing past them.
JAVA_INT = (-(2**31), 2**31 - 1)
JAVA_LONG = (-(2**63), 2**63 - 1)
TOPIC_TYPES = ("partitioned", "non-partitioned")
# Ours: the most partitions a partitioned topic may have, whatever maxNumPartitionsPerPartitionedTopic says (its
# 0, Pulsar's default, means this). Each partition is a topic; a count in the millions (one admin call, or a
# namespace's defaultNumPartitions) would otherwise make every listing of the namespace build millions of names.
PARTITIONS_CEILING = 100_000
# NamespaceBundleSplitAlgorithm names (Pulsar's supportedNamespaceBundleSplitAlgorithms default).
SPLIT_ALGORITHMS = ("range_equally_divide", "topic_count_equally_divide", "specified_positions_divide",
                    "flow_or_qps_equally_divide")
# InactiveTopicDeleteMode: what an inactive topic may still have.
DELETE_WHEN_NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"
INACTIVE_TOPIC_DELETE_MODES = (DELETE_WHEN_NO_SUBSCRIPTIONS, DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP)
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
SCHEMA_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
                     "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE", "UNDEFINED")
# SchemaAutoUpdateCompatibilityStrategy (a namespace's older schema policy, in its enum's order) -> the
# SchemaCompatibilityStrategy it stands for (SchemaCompatibilityStrategy.fromAutoUpdatePolicy): AutoUpdateDisabled
# refuses every new schema version.
SCHEMA_AUTO_UPDATE_STRATEGIES = {
    "AutoUpdateDisabled": "ALWAYS_INCOMPATIBLE", "Backward": "BACKWARD", "Forward": "FORWARD", "Full": "FULL",
    "AlwaysCompatible": "ALWAYS_COMPATIBLE", "BackwardTransitive": "BACKWARD_TRANSITIVE",
    "ForwardTransitive": "FORWARD_TRANSITIVE", "FullTransitive": "FULL_TRANSITIVE",
}
# Broker entry metadata interceptors (PIP-70), as brokerEntryMetadataInterceptors names them.
TIMESTAMP_INTERCEPTOR = "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor"
INDEX_INTERCEPTOR = "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
BROKER_ENTRY_INTERCEPTORS = (TIMESTAMP_INTERCEPTOR, INDEX_INTERCEPTOR)
