"""Deleting inactive topics (Pulsar's brokerDeleteInactiveTopics* and inactive_topic_policies).

Every brokerDeleteInactiveTopicsFrequencySeconds the monitor looks at the loaded persistent
topics, as Pulsar's PersistentTopic.checkGC does for a topic of a V2 name (the only names we serve;
Pulsar's TopicName.isGlobal() holds for all of them, replicated or not):
- a topic is *active* while a producer of this cluster's clients is connected (Pulsar's
  hasLocalProducers: another cluster's replicator does not count, nor does a consumer), or (mode
  delete_when_no_subscriptions) while it has any subscription, stored or live, or (mode
  delete_when_subscriptions_caught_up) a subscription with a backlog. The replication cursors are
  not subscriptions. An active topic's inactivity clock restarts;
- the clock also restarts when the topic loads, when a producer leaves and when a subscription is
  deleted (``PersistentTopic.last_active``); messages alone do not restart it;
- a topic inactive for maxInactiveDurationSeconds, whose namespace does not keep data forever
  (retention time -1) or for longer than it has been inactive, is then deleted with its data, in
  Pulsar's order: its replicators are disconnected first, each unless it has a backlog (entries
  not yet sent or confirmed); if one has, the topic is kept (they all go on being tried at every
  check, and the ones disconnected start again with the next producer, as Pulsar's addProducer
  restarts them). The topic is also kept, without its clock restarting, while any producer (another
  cluster's replicator included) or any consumer is connected. Otherwise it is deleted, its
  replication cursors with it; in caught-up mode its subscriptions (all caught up, none with a
  consumer) go too.

Nothing is sent to the other clusters: each deletes its own copy by the same rule. Two clusters
replicating a topic both ways converge: the first check disconnects this side's replicator (the
other side's replicator still produces here, so the topic is kept), the other side's check then
finds no replicator producing there and deletes its copy, which disconnects its replicator, and the
next check here deletes this one.

Not deleted: system topics, and topics with a compacted view (Pulsar keeps those too: its
compaction cursor counts as a subscription). The deduplication cursor is not a subscription.
A partitioned topic's metadata is deleted with its last partition only when
brokerDeleteInactivePartitionedTopicMetadataEnabled is set.

A non-persistent topic is forgotten as soon as its last producer and consumer leave; the monitor
collects the ones no client ever attached to (an admin's create, a refused SUBSCRIBE or PRODUCER),
as Pulsar's NonPersistentTopic.checkGC does: inactive (no producer, no consumer, no subscription,
whatever the delete mode) for maxInactiveDurationSeconds. They hold nothing, so retention does not
keep them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from broker.metadata.policy_table import INACTIVE_TOPIC_POLICIES, RETENTION
from broker.metadata.policy_values import DELETE_WHEN_NO_SUBSCRIPTIONS, InactiveTopicPolicies
from broker.service import admin_ops
from broker.service.periodic import sliced
from broker.topic_name import TopicName, is_system_topic

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.nonpersistent import NonPersistentTopic
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)


class InactiveTopicMonitor:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.checks = 0  # completed runs of check_all
        self.deleted_total = 0

    def policy(self, name: TopicName) -> InactiveTopicPolicies:
        """The topic's inactiveTopicPolicies, else its namespace's, else the broker's settings
        (each taken whole, never merged)."""
        return self.service.policies.get(name, INACTIVE_TOPIC_POLICIES)

    @staticmethod
    def is_active(topic: PersistentTopic, mode: str) -> bool:
        """Pulsar's PersistentTopic.isActive for a V2 name: the subscriptions the mode counts, else a local producer."""
        if topic.compacted_view is not None or topic.has_local_producers:
            return True
        names = topic.subscription_names()
        if mode == DELETE_WHEN_NO_SUBSCRIPTIONS:
            return bool(names)
        return any(admin_ops.backlog_of(topic, name) > 0 for name in names)

    async def check_all(self) -> None:
        """Housekeeping: delete the loaded topics that have been inactive for long enough."""
        service = self.service
        async for topic in sliced(list(service.topics.values())):
            if not topic.closed and self._due(topic):
                await self._delete(topic, self.policy(topic.name).delete_mode)
        for live in list(service.non_persistent_topics.values()):
            if not live.closed and self._live_due(live):
                live.forget_inactive()
                self.deleted_total += 1
                log.info("forgot non-persistent topic %s: inactive for %.0f s", live.name,
                         time.monotonic() - live.last_active)
        self.checks += 1

    def _live_due(self, topic: NonPersistentTopic) -> bool:
        """A non-persistent topic inactive for long enough (nothing stored: retention does not count)."""
        if is_system_topic(topic.full_name) or self.service.is_unloading(topic.name):
            return False
        policy = self.policy(topic.name)
        if not policy.delete_while_inactive:
            return False
        now = time.monotonic()
        # Pulsar's NonPersistentTopic.isActive ignores the delete mode: any subscription keeps it.
        if not topic.is_idle or topic.subscriptions:
            topic.last_active = now
            return False
        return now - topic.last_active >= policy.max_inactive_s

    def _due(self, topic: PersistentTopic) -> bool:
        service = self.service
        if is_system_topic(topic.full_name):
            return False
        policy = self.policy(topic.name)
        if not policy.delete_while_inactive:
            return False
        now = time.monotonic()
        if self.is_active(topic, policy.delete_mode):
            topic.last_active = now
            return False
        inactive_s = now - topic.last_active
        if inactive_s < policy.max_inactive_s:
            return False
        retention_min = service.policies.get(topic.name, RETENTION).time_minutes
        return not (retention_min < 0 or inactive_s < retention_min * 60)

    async def _delete(self, topic: PersistentTopic, mode: str) -> None:
        service = self.service
        name = topic.name
        if service.is_unloading(name):
            return  # an admin unload or delete is at work on it
        # Pulsar's closeReplProducersIfNoBacklog: every replicator without a backlog is disconnected, whatever
        # the others do; one with a backlog keeps the topic.
        disconnected = await asyncio.gather(*(r.disconnect() for r in list(topic.replicators.values())))
        if not all(disconnected):
            log.debug("kept inactive topic %s: a replicator has a backlog", name)
            return
        # Then (Pulsar's hasRemoteProducers, and delete() refusing a topic with clients) no producer, another
        # cluster's replicator included, and no consumer; and, as things may have changed during the
        # disconnects, still inactive. The clock does not restart for these.
        if topic.closed or service.topics.get(name.full) is not topic or service.is_unloading(name) \
                or not topic.is_idle or self.is_active(topic, mode):
            log.debug("kept inactive topic %s: a producer or consumer is connected", name)
            return
        # Nothing awaits between that check and here: the topic leaves the loaded set at once (in
        # delete_topic), so a producer or consumer arriving now loads a new one.
        await service.delete_topic(name)
        self.deleted_total += 1
        log.info("deleted topic %s: inactive for %.0f s", name, time.monotonic() - topic.last_active)
        if name.partition_index < 0:
            await service.schemas.delete(name.full)
            return
        base = name.base
        if not service.config.brokerDeleteInactivePartitionedTopicMetadataEnabled:
            return
        partitions = service.metadata.partitions_of(base.full)
        if partitions and not any(service.topic_exists(base.partition(i)) for i in range(partitions)):
            await service.metadata.delete_partitioned(base.full)
            await service.schemas.delete(base.full)
            log.info("deleted partitioned topic %s: its last partition was deleted as inactive", base)
