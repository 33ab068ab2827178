"""The policy table (broker.metadata.policy_table): every row resolves topic over namespace over
broker; the typed values go to JSON and back unchanged; bad values are refused with the admin
API's status and message."""

from __future__ import annotations

from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.metadata import policy_table as T
from broker.metadata.policy_table import TABLE, Policy, PolicyResolver
from broker.metadata.policy_values import (
    AutoSubscriptionCreation,
    AutoTopicCreation,
    BacklogQuota,
    DelayedDelivery,
    DispatchRate,
    InactiveTopicPolicies,
    Persistence,
    PolicyError,
    PublishRate,
    Retention,
    SubscribeRate,
)
from broker.metadata.store import BrokerMetadata
from broker.topic_name import TopicName
from metadata_store.memory import MemoryMetadataStore

NS = "public/default"
TOPIC = TopicName.parse(f"persistent://{NS}/t")
CLUSTER = "standalone"

# For each row: a topic-level and a namespace-level value (JSON, as stored), each different from
# the level below it (the namespace's from the broker's default).
SAMPLES: dict[str, tuple[Any, Any]] = {
    "message_ttl": (10, 20),
    "retention": ({"retentionTimeInMinutes": 5, "retentionSizeInMB": 6},
                  {"retentionTimeInMinutes": -1, "retentionSizeInMB": 7}),
    "persistence": ({"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2,
                     "managedLedgerMaxMarkDeleteRate": 1.5},
                    {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1,
                     "managedLedgerMaxMarkDeleteRate": 0.5}),
    "backlog_quotas": ({"destination_storage": {"limit": 10, "limitSize": 10, "limitTime": -1,
                                                "policy": "producer_exception"}},
                       {"message_age": {"limit": -1, "limitSize": -1, "limitTime": 30,
                                        "policy": "consumer_backlog_eviction"}}),
    "deduplication": (False, True),
    "dedup_snapshot_interval": (5, 6),
    "max_producers": (1, 2),
    "max_consumers": (3, 4),
    "max_consumers_per_subscription": (5, 6),
    "max_subscriptions": (7, 8),
    "max_unacked_per_consumer": (9, 10),
    "max_unacked_per_subscription": (11, 12),
    "dispatcher_pause_on_ack_state_persistent": (False, True),  # (Pulsar's DELETE stores false: it overrides)
    "max_topics_per_namespace": (None, 13),
    "max_message_size": (1024, None),
    "compaction_threshold": (100, 200),
    "subscription_expiration": (None, 30),
    "inactive_topic_policies": ({"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                                 "maxInactiveDurationSeconds": 5, "deleteWhileInactive": True},
                                {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                                 "maxInactiveDurationSeconds": 9, "deleteWhileInactive": False}),
    "subscription_types_enabled": (["Shared"], ["Exclusive", "Failover"]),
    "publish_rate": ({"publishThrottlingRateInMsg": 1, "publishThrottlingRateInByte": 2},
                     {"publishThrottlingRateInMsg": 3, "publishThrottlingRateInByte": -1}),
    "topic_dispatch_rate": ({"dispatchThrottlingRateInMsg": 1, "dispatchThrottlingRateInByte": 2,
                             "ratePeriodInSecond": 3, "relativeToPublishRate": True},
                            {"dispatchThrottlingRateInMsg": 4, "dispatchThrottlingRateInByte": 5,
                             "ratePeriodInSecond": 1, "relativeToPublishRate": False}),
    "subscription_dispatch_rate": ({"dispatchThrottlingRateInMsg": 6, "dispatchThrottlingRateInByte": -1,
                                    "ratePeriodInSecond": 1, "relativeToPublishRate": False},
                                   {"dispatchThrottlingRateInMsg": 7, "dispatchThrottlingRateInByte": -1,
                                    "ratePeriodInSecond": 2, "relativeToPublishRate": False}),
    "replicator_dispatch_rate": ({"dispatchThrottlingRateInMsg": 8, "dispatchThrottlingRateInByte": -1,
                                  "ratePeriodInSecond": 1, "relativeToPublishRate": False},
                                 {"dispatchThrottlingRateInMsg": 9, "dispatchThrottlingRateInByte": -1,
                                  "ratePeriodInSecond": 1, "relativeToPublishRate": False}),
    "subscribe_rate": ({"subscribeThrottlingRatePerConsumer": 1, "ratePeriodInSecond": 2},
                       {"subscribeThrottlingRatePerConsumer": 3, "ratePeriodInSecond": 4}),
    "delayed_delivery": ({"active": False, "tickTime": 5, "maxDeliveryDelayInMillis": 6},
                         {"active": True, "tickTime": 7, "maxDeliveryDelayInMillis": 0}),
    "auto_topic_creation": (None, {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                   "defaultNumPartitions": 3}),
    "auto_subscription_creation": ({"allowAutoSubscriptionCreation": True},
                                   {"allowAutoSubscriptionCreation": False}),
    "schema_compatibility_strategy": ("BACKWARD", "FORWARD"),
    "schema_validation_enforced": (False, True),
    "allow_auto_update_schema": (None, False),
    "encryption_required": (None, True),
    "replication_clusters": (["standalone", "east"], ["standalone", "west"]),
}


async def make(**config: Any) -> tuple[PolicyResolver, BrokerMetadata]:
    store = BrokerMetadata(CLUSTER)
    await store.start(MemoryMetadataStore())
    return PolicyResolver(BrokerConfig(clusterName=CLUSTER, **config), store), store


async def set_topic(store: BrokerMetadata, policy: Policy[Any], value: Any) -> None:
    await store.set_topic_policy(TOPIC.full, policy.topic_field, value)


async def set_namespace(store: BrokerMetadata, policy: Policy[Any], value: Any) -> None:
    await store.set_policy(NS, policy.namespace_field, {CLUSTER: value} if policy.per_cluster else value)


def test_every_row_has_samples_and_its_own_name_and_fields() -> None:
    assert {p.name for p in TABLE} == set(SAMPLES)
    assert len({p.name for p in TABLE}) == len(TABLE)
    topic_keys = [p.topic_key for p in TABLE if p.topic_key is not None]
    namespace_keys = [p.namespace_key for p in TABLE if p.namespace_key is not None]
    assert len(set(topic_keys)) == len(topic_keys) and len(set(namespace_keys)) == len(namespace_keys)
    for policy in TABLE:
        topic, namespace = SAMPLES[policy.name]
        assert (topic is None) == (policy.topic_key is None), policy
        assert (namespace is None) == (policy.namespace_key is None), policy


@pytest.mark.parametrize("policy", TABLE, ids=lambda p: p.name)
async def test_topic_over_namespace_over_broker(policy: Policy[Any]) -> None:
    resolver, store = await make()
    topic, namespace = SAMPLES[policy.name]
    broker = resolver.broker_value(policy)
    assert resolver.get(TOPIC, policy) == broker
    assert resolver.for_namespace(NS, policy) == broker
    below = broker
    if namespace is not None:
        await set_namespace(store, policy, namespace)
        expected = policy.parse(namespace)
        if policy.overlay:
            expected = {**broker, **expected}
        assert expected != broker
        assert resolver.get(TOPIC, policy) == expected
        assert resolver.for_namespace(NS, policy) == expected
        assert policy.dump(resolver.namespace_value(NS, policy)) == namespace
        below = expected
    if topic is not None:
        await set_topic(store, policy, topic)
        own = policy.parse(topic)
        assert policy.dump(own) == topic
        got = resolver.get(TOPIC, policy)
        assert got != below
        if policy.overlay:  # per key: the topic's entries over the namespace's over the broker's
            assert got == {**broker, **(policy.parse(namespace) if namespace else {}), **own}
        else:
            assert got == own
        # A partition has its partitioned topic's policies.
        assert resolver.get(TOPIC.partition(2), policy) == got
        await set_topic(store, policy, None)
    if namespace is not None:
        await set_namespace(store, policy, None)
    assert resolver.get(TOPIC, policy) == broker


@pytest.mark.parametrize("policy", [p for p in TABLE if p.topic_key is not None], ids=lambda p: p.name)
async def test_a_global_topic_value_is_between_the_local_one_and_the_namespace_s(policy: Policy[Any]) -> None:
    """Pulsar's PolicyHierarchyValue: topic (local), then topic global, then namespace, then broker; an overlay
    map key by key in that order."""
    resolver, store = await make()
    topic, namespace = SAMPLES[policy.name]
    broker = resolver.broker_value(policy)
    if namespace is not None:
        await set_namespace(store, policy, namespace)
    below = resolver.get(TOPIC, policy)
    await store.set_topic_policy(TOPIC.full, policy.topic_field, topic, is_global=True)
    global_ = policy.parse(topic)
    got = resolver.get(TOPIC, policy)
    if policy.overlay:
        assert got == {**below, **global_}
    else:
        assert got == global_ != below
    assert resolver.topic_level(TOPIC, policy, False) is None
    assert resolver.topic_level(TOPIC, policy, True) == global_
    assert resolver.get(TOPIC.partition(1), policy) == got
    if namespace is not None and policy.parse(namespace) != global_:  # a local value over the global one
        local = policy.parse(namespace)
        await set_topic(store, policy, namespace)
        assert resolver.get(TOPIC, policy) == ({**below, **global_, **local} if policy.overlay else local)
    await set_topic(store, policy, None)
    assert resolver.get(TOPIC, policy) == got
    await store.set_topic_policy(TOPIC.full, policy.topic_field, None, is_global=True)
    assert resolver.get(TOPIC, policy) == below
    assert below == (broker if namespace is None else resolver.for_namespace(NS, policy))


@pytest.mark.parametrize("policy", [p for p in TABLE if p.topic_key is not None], ids=lambda p: p.name)
async def test_topic_values_are_ignored_when_topic_level_policies_are_off(policy: Policy[Any]) -> None:
    resolver, store = await make(topicLevelPoliciesEnabled=False)
    await set_topic(store, policy, SAMPLES[policy.name][0])
    assert resolver.topic_value(TOPIC, policy) is None
    assert resolver.get(TOPIC, policy) == resolver.broker_value(policy)


async def test_broker_defaults_follow_the_configuration() -> None:
    resolver, _ = await make(ttlDurationDefaultInSeconds=7, defaultRetentionTimeInMinutes=3, defaultRetentionSizeInMB=4,
                       maxPublishRatePerTopicInMessages=9, allowAutoTopicCreationType="partitioned",
                       defaultNumPartitions=5, backlogQuotaDefaultLimitBytes=100)
    assert resolver.get(TOPIC, T.MESSAGE_TTL) == 7
    assert resolver.get(TOPIC, T.RETENTION) == Retention(3, 4)
    assert resolver.get(TOPIC, T.PUBLISH_RATE).messages == 9
    rule = resolver.for_namespace(NS, T.AUTO_TOPIC_CREATION)
    assert rule.partitioned and rule.default_partitions == 5
    assert resolver.get(TOPIC, T.BACKLOG_QUOTAS)["destination_storage"].limit_size == 100
    assert resolver.get(TOPIC, T.REPLICATION_CLUSTERS) == [CLUSTER]
    assert resolver.get(TOPIC, T.PERSISTENCE) is None
    assert resolver.get(TOPIC, T.SCHEMA_COMPATIBILITY_STRATEGY) == "FULL"


async def test_empty_or_undefined_values_pass_to_the_next_level() -> None:
    resolver, store = await make()
    await set_topic(store, T.SUBSCRIPTION_TYPES_ENABLED, [])
    await set_namespace(store, T.SUBSCRIPTION_TYPES_ENABLED, ["Shared"])
    assert resolver.get(TOPIC, T.SUBSCRIPTION_TYPES_ENABLED) == ["Shared"]
    await set_topic(store, T.SCHEMA_COMPATIBILITY_STRATEGY, "UNDEFINED")
    await set_namespace(store, T.SCHEMA_COMPATIBILITY_STRATEGY, "UNDEFINED")
    assert resolver.get(TOPIC, T.SCHEMA_COMPATIBILITY_STRATEGY) == "FULL"


@pytest.mark.parametrize(("auto_update", "strategy"), [
    ("AutoUpdateDisabled", "ALWAYS_INCOMPATIBLE"), ("Backward", "BACKWARD"), ("Forward", "FORWARD"), ("Full", "FULL"),
    ("AlwaysCompatible", "ALWAYS_COMPATIBLE"), ("BackwardTransitive", "BACKWARD_TRANSITIVE"),
    ("ForwardTransitive", "FORWARD_TRANSITIVE"), ("FullTransitive", "FULL_TRANSITIVE")])
async def test_the_older_schema_auto_update_strategy_is_in_force_where_the_namespaces_is_undefined(
        auto_update: str, strategy: str) -> None:
    """Pulsar's SchemaCompatibilityStrategy.fromAutoUpdatePolicy, read where the namespace's
    schema_compatibility_strategy is UNDEFINED (or unset); a topic's own strategy and a defined namespace one win."""
    resolver, store = await make()
    await store.set_policy(NS, T.SCHEMA_AUTO_UPDATE_STRATEGY.key, auto_update)
    assert resolver.get(TOPIC, T.SCHEMA_COMPATIBILITY_STRATEGY) == strategy
    await set_namespace(store, T.SCHEMA_COMPATIBILITY_STRATEGY, "UNDEFINED")
    assert resolver.get(TOPIC, T.SCHEMA_COMPATIBILITY_STRATEGY) == strategy
    await set_namespace(store, T.SCHEMA_COMPATIBILITY_STRATEGY, "FORWARD_TRANSITIVE" if strategy == "FULL" else "FULL")
    assert resolver.get(TOPIC, T.SCHEMA_COMPATIBILITY_STRATEGY) != strategy
    await set_namespace(store, T.SCHEMA_COMPATIBILITY_STRATEGY, None)
    await set_topic(store, T.SCHEMA_COMPATIBILITY_STRATEGY, "ALWAYS_INCOMPATIBLE" if strategy != "ALWAYS_INCOMPATIBLE"
                    else "FULL")
    assert resolver.get(TOPIC, T.SCHEMA_COMPATIBILITY_STRATEGY) != strategy


async def test_a_stored_auto_update_strategy_the_admin_api_would_refuse_passes_to_the_broker(
        caplog: pytest.LogCaptureFixture) -> None:
    resolver, store = await make()
    await store.set_policy(NS, T.SCHEMA_AUTO_UPDATE_STRATEGY.key, "Sideways")
    assert resolver.get(TOPIC, T.SCHEMA_COMPATIBILITY_STRATEGY) == "FULL"
    assert any("Sideways" in r.getMessage() for r in caplog.records)


async def test_a_stored_value_the_admin_api_would_refuse_passes_to_the_next_level(
        caplog: pytest.LogCaptureFixture) -> None:
    """Stored by an older version (which took 10**20) or written into the store by hand: it counts as unset,
    with one warning, and never fails the topics it applies to."""
    resolver, store = await make()
    await set_namespace(store, T.MESSAGE_TTL, 30)
    await set_topic(store, T.MESSAGE_TTL, 10**20)
    for _ in range(3):
        assert resolver.get(TOPIC, T.MESSAGE_TTL) == 30
    await set_namespace(store, T.MESSAGE_TTL, "soon")
    assert resolver.get(TOPIC, T.MESSAGE_TTL) == resolver.broker_value(T.MESSAGE_TTL)
    warnings = [r.getMessage() for r in caplog.records if "is not valid" in r.getMessage()]
    assert len(warnings) == 2 and "100000000000000000000" in warnings[0], warnings


async def test_a_namespace_rate_of_another_cluster_does_not_apply() -> None:
    resolver, store = await make()
    await store.set_policy(NS, T.PUBLISH_RATE.namespace_field,
                           {"east": {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": 5}})
    assert resolver.get(TOPIC, T.PUBLISH_RATE) == resolver.broker_value(T.PUBLISH_RATE)


VALUES: list[Any] = [
    Retention(60, -1), Retention(0, 0),
    BacklogQuota(1024, -1, "producer_exception"), BacklogQuota(-1, 60, "consumer_backlog_eviction"),
    PublishRate(10, -1), DispatchRate(1, 2, 3, True), DispatchRate(-1, -1), SubscribeRate(5, 30),
    DelayedDelivery(True, 1000, 0), Persistence(3, 3, 2, 0.5),
    InactiveTopicPolicies("delete_when_no_subscriptions", 60, True),
    AutoTopicCreation(True, "partitioned", 4), AutoTopicCreation(False), AutoTopicCreation(True, "non-partitioned"),
    AutoSubscriptionCreation(True),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_values_go_to_json_and_back(value: Any) -> None:
    doc = value.to_json()
    assert type(value).from_json(doc) == value
    assert type(value).from_json(doc).to_json() == doc


def test_json_uses_pulsars_field_names() -> None:
    assert BacklogQuota(5, -1, "producer_request_hold").to_json() == {
        "limit": 5, "limitSize": 5, "limitTime": -1, "policy": "producer_request_hold"}
    assert DispatchRate(1, 2).to_json() == {"dispatchThrottlingRateInMsg": 1, "dispatchThrottlingRateInByte": 2,
                                            "ratePeriodInSecond": 1, "relativeToPublishRate": False}
    # Missing members take Pulsar's defaults.
    assert PublishRate.from_json({}) == PublishRate(-1, -1)
    assert SubscribeRate.from_json({}) == SubscribeRate(-1, 30)
    assert DelayedDelivery.from_json({}) == DelayedDelivery(False, 1000, 0)
    assert BacklogQuota.from_json({"limit": 7, "policy": "producer_exception"}).limit_size == 7


@pytest.mark.parametrize(("parse", "body", "status", "message"), [
    (Retention.from_json, {"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}, 400,
     "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the limits has a "
     "non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. To disable retention both limits "
     "must be set to 0."),
    (Retention.from_json, {"retentionTimeInMinutes": "1h"}, 400, "retentionTimeInMinutes must be an integer, got '1h'"),
    (Retention.from_json, [1], 400, "Retention policies must be a JSON object"),
    (BacklogQuota.from_json, {"limitSize": 1}, 400,
     "Invalid backlog quota policy None; one of producer_request_hold, producer_exception, consumer_backlog_eviction"),
    (BacklogQuota.from_json, {"limitSize": -5, "policy": "producer_exception"}, 412,
     "Backlog quota limits must be >= -1 (-1 = no limit)"),
    (DispatchRate.from_json, {"ratePeriodInSecond": 0}, 412, "ratePeriodInSecond must be 1 or more"),
    (DispatchRate.from_json, {"relativeToPublishRate": 1}, 400, "relativeToPublishRate must be true or false"),
    (SubscribeRate.from_json, {"ratePeriodInSecond": 0}, 412, "ratePeriodInSecond must be 1 or more"),
    (PublishRate.from_json, {"publishThrottlingRateInMsg": True}, 400,
     "publishThrottlingRateInMsg must be an integer, got True"),
    (DelayedDelivery.from_json, {"tickTime": -1}, 412, "tickTime and maxDeliveryDelayInMillis must be 0 or more"),
    (Persistence.from_json, {"bookkeeperEnsemble": 6}, 400, "Bookkeeper-Ensemble must be <= 5 and > 0."),
    (Persistence.from_json, {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2}, 400,
     "Bookkeeper Ensemble (1) >= WriteQuorum (2) >= AckQuorum (2)"),
    (Persistence.from_json, {"managedLedgerMaxMarkDeleteRate": "x"}, 400,
     "managedLedgerMaxMarkDeleteRate must be a number"),
    (InactiveTopicPolicies.from_json, {"inactiveTopicDeleteMode": "never"}, 400,
     "Unknown inactiveTopicDeleteMode 'never'; one of delete_when_no_subscriptions, "
     "delete_when_subscriptions_caught_up"),
    (InactiveTopicPolicies.from_json, {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                                       "maxInactiveDurationSeconds": -1}, 412,
     "maxInactiveDurationSeconds must be >= 0"),
    (AutoTopicCreation.from_json, {"allowAutoTopicCreation": True, "topicType": "partitioned"}, 412,
     "Invalid configuration for autoTopicCreationOverride. the detail is [defaultNumPartitions] cannot be null "
     "when the type is partitioned."),
    (AutoSubscriptionCreation.from_json, {"allowAutoSubscriptionCreation": "yes"}, 400,
     "allowAutoSubscriptionCreation must be true or false"),
    (T.SUBSCRIPTION_TYPES_ENABLED.parse, ["Queue"], 400,
     "Unknown subscription type 'Queue'; one of Exclusive, Shared, Failover, Key_Shared"),
    (T.MAX_PRODUCERS.parse, -1, 412, "maxProducers must be 0 or more"),
    (T.DEDUPLICATION.parse, "on", 400, "deduplicationEnabled must be true or false"),
])
def test_bad_values_are_refused_with_pulsars_status(parse: Any, body: Any, status: int, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse(body)
    assert (info.value.status, info.value.reason) == (status, message)


async def test_namespace_answers_are_kept_until_the_metadata_changes() -> None:
    """for_namespace (and get for a topic with no value of its own) keeps its answers while the
    metadata is unchanged; any change (a policy set or removed, a namespace deleted or made again)
    gives the new value at once."""
    resolver, store = await make()
    first = resolver.get(TOPIC, T.RETENTION)
    assert resolver.for_namespace(NS, T.RETENTION) is first  # (kept: not resolved again)
    await store.set_policy(NS, "retention_policies", {"retentionTimeInMinutes": 5, "retentionSizeInMB": 1})
    assert resolver.get(TOPIC, T.RETENTION) == Retention(5, 1)
    assert resolver.for_namespace(NS, T.RETENTION) == Retention(5, 1)
    await store.set_policy(NS, "retention_policies", None)
    assert resolver.get(TOPIC, T.RETENTION) == first
    await store.set_topic_policy(TOPIC.full, "retentionPolicies", {"retentionTimeInMinutes": 7, "retentionSizeInMB": 2})
    assert resolver.get(TOPIC, T.RETENTION) == Retention(7, 2)  # (the topic's own, over the kept one)
    assert resolver.for_namespace(NS, T.RETENTION) == first
    await store.create_namespace("public/gone", {"max_producers_per_topic": 3})
    assert resolver.for_namespace("public/gone", T.MAX_PRODUCERS) == 3
    await store.delete_namespace("public/gone")
    assert resolver.for_namespace("public/gone", T.MAX_PRODUCERS) == resolver.broker_value(T.MAX_PRODUCERS)
    await store.create_namespace("public/gone", {"max_producers_per_topic": 4})
    assert resolver.for_namespace("public/gone", T.MAX_PRODUCERS) == 4


async def test_lists_and_maps_are_answered_fresh() -> None:
    """A list or map answer is never kept: a caller that changes the one it got changes nothing else."""
    resolver, _ = await make()
    clusters = resolver.get(TOPIC, T.REPLICATION_CLUSTERS)
    clusters.append("elsewhere")
    assert resolver.get(TOPIC, T.REPLICATION_CLUSTERS) == [CLUSTER]
    quotas = resolver.get(TOPIC, T.BACKLOG_QUOTAS)
    quotas.clear()
    assert resolver.get(TOPIC, T.BACKLOG_QUOTAS) != {}
