"""The one place where the service layer builds what a dispatcher gets (broker/dispatch/context.py).

Every policy a dispatcher reads is resolved here (``dispatch_policy``), so a change in how
policies are resolved touches this module only. The dispatchers themselves never see a topic,
a subscription or the broker service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.dispatch.context import DispatchContext, DispatchPolicy
from broker.metadata.policy_table import (
    DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT,
    MAX_UNACKED_PER_CONSUMER,
    MAX_UNACKED_PER_SUBSCRIPTION,
)
from broker.metadata.store import Derived

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.service.abstract_topic import AbstractTopic
    from broker.service.nonpersistent import NonPersistentSubscription
    from broker.service.subscription import Subscription


def dispatch_policy(topic: AbstractTopic, durable: bool = True) -> DispatchPolicy:
    """The policies a dispatcher reads, in force now for ``topic`` (topic, namespace, broker); a
    non-durable subscription's consumers have no unacked limit of their own (Pulsar's
    Consumer.getMaxUnackedMessages answers 0 for them)."""
    service, name = topic.service, topic.name
    return DispatchPolicy(
        max_unacked_per_consumer=service.policies.get(name, MAX_UNACKED_PER_CONSUMER) if durable else 0,
        max_unacked_per_subscription=service.policies.get(name, MAX_UNACKED_PER_SUBSCRIPTION),
        delayed_delivery=topic.send_policy.delayed_delivery,
        pause_on_ack_state=service.policies.get(name, DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT),
    )


# The context's fields the broker's configuration sets -> their settings (dynamic: given again to the running
# dispatchers when they change).
CONFIGURED_FIELDS = {"max_read_batch": "dispatcherMaxReadBatchSize", "max_read_bytes": "dispatcherMaxReadSizeBytes",
                     "throttle_non_backlog": "dispatchThrottlingOnNonBacklogConsumerEnabled",
                     "rate_counts_entries": "dispatchThrottlingOnBatchMessageEnabled"}


def configured_fields(config: BrokerConfig) -> dict[str, Any]:
    return {field: getattr(config, key) for field, key in CONFIGURED_FIELDS.items()}


def persistent_context(sub: Subscription) -> DispatchContext:
    topic = sub.topic
    service = topic.service
    policy = Derived(service.metadata, lambda: dispatch_policy(topic, sub.durable))
    return DispatchContext(
        loop=topic.loop,
        name=sub.name,
        partition_index=topic.name.partition_index,
        topic_name=topic.name.full,
        failover_consistent_hashing=service.config.activeConsumerFailoverConsistentHashing,
        policy=policy.get,
        rates=sub.dispatch_rates,
        compacted_view=lambda: topic.compacted_view,
        unacked_blocked=service.unacked_blocked,
        snapshot_marker=sub.snapshot_read,
        mark_delete_moved=sub.mark_delete_moved,
        read_limit=topic.txn_buffer.read_limit,
        limit_waiters=topic.txn_buffer.waiters,
        terminated_at=lambda: topic.terminated_at,
        txn_aborted=topic.txn_buffer.is_aborted,
        held=sub.pending_acks.holds if sub.pending_acks is not None else None,
        held_indexes=sub.pending_acks.held_indexes if sub.pending_acks is not None else None,
        entry_meta=topic.entry_metas.get,
        entry_messages=topic.entry_metas.messages,
        **configured_fields(service.config),
    )


def non_persistent_context(sub: NonPersistentSubscription) -> DispatchContext:
    """Non-persistent dispatchers read no policy: they only deliver or drop."""
    topic = sub.topic
    return DispatchContext(loop=topic.loop, name=sub.name, partition_index=topic.name.partition_index)
