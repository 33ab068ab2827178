"""The broker's periodic jobs over its loaded topics, each on its own PeriodicTask.

They start with the first loaded topic (before that there is nothing to do) and stop in the
service's close(). Each job reads the policies in force for each topic (topic, namespace, then
broker; see broker.metadata.policy_table) at every run, so a policy change reaches loaded
topics by the next run.

| job | every | does |
|---|---|---|
| message-expiry | messageExpiryCheckIntervalInMinutes | acknowledges what is older than the message TTL |
| retention | retentionCheckIntervalInSeconds | applies retention; deletes ledgers; offloads (broker.service.offload) |
| compaction-threshold | brokerServiceCompactionMonitorIntervalInSeconds | starts compaction when due |
| backlog-quota-check | backlogQuotaCheckIntervalInSeconds | enforces backlog quotas (broker.service.backlog_quota) |
| subscription-expiry | subscriptionExpiryCheckIntervalInMinutes | deletes abandoned subscriptions |
| backlogged-cursors | statsUpdateFrequencyInSecs | backlogged subscriptions leave the read cache's active cursors |
| inactive-topic-check | brokerDeleteInactiveTopicsFrequencySeconds | deletes inactive topics (inactive_topics) |
| dedup-snapshot | brokerDeduplicationSnapshotFrequencyInSeconds | time-based deduplication snapshots |
| health-check-metrics | healthCheckMetricsUpdateTimeInSeconds | the health check, its outcome for pulsar_health |
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from broker.errors import BrokerError
from broker.metadata.policy_table import (
    COMPACTION_THRESHOLD,
    DEDUP_SNAPSHOT_INTERVAL,
    MESSAGE_TTL,
    SUBSCRIPTION_EXPIRATION,
)
from broker.service import admin_ops
from broker.service.backlog_quota import estimated_backlog_size
from broker.service.compaction import COMPACTION_CURSOR
from broker.service.deduplication import DEDUP_CURSOR
from broker.service.offload import offload_housekeeping
from broker.service.periodic import PeriodicTask, sliced
from broker.transactions.buffer import BUFFER_CURSOR

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)


def compaction_backlog(topic: PersistentTopic) -> int:
    """Bytes not compacted yet, as Pulsar's PersistentTopic.checkCompaction estimates them: the
    __compaction cursor's backlog; before a first run, the topic's size when no durable subscription
    holds it, else the slowest one's backlog. (What was published before a restart counts too.)"""
    cursor = topic.ledger.cursors.get(COMPACTION_CURSOR)
    if cursor is not None:
        return estimated_backlog_size(topic, cursor)
    subscriptions = [c for name, c in topic.ledger.cursors.items() if topic.is_subscription_cursor(name)]
    if not subscriptions:
        return topic.ledger.total_size
    return estimated_backlog_size(topic, max(subscriptions, key=lambda c: c.number_of_entries_in_backlog()))


class Housekeeping:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.subscriptions_expired_total = 0
        cfg = service.config
        self.tasks = [
            PeriodicTask("message-expiry", cfg.messageExpiryCheckIntervalInMinutes * 60, self.expire_messages),
            PeriodicTask("retention", cfg.retentionCheckIntervalInSeconds, self.apply_retention),
            PeriodicTask("compaction-threshold", cfg.brokerServiceCompactionMonitorIntervalInSeconds,
                         self.compact_if_due),
            PeriodicTask("subscription-expiry", cfg.subscriptionExpiryCheckIntervalInMinutes * 60,
                         self.expire_subscriptions),
            PeriodicTask("backlogged-cursors", cfg.statsUpdateFrequencyInSecs, self.check_backlogged_cursors),
        ]
        if cfg.brokerDeduplicationSnapshotFrequencyInSeconds > 0:
            self.tasks.append(PeriodicTask("dedup-snapshot", cfg.brokerDeduplicationSnapshotFrequencyInSeconds,
                                           self.snapshot_deduplication))
        if cfg.backlogQuotaCheckEnabled:
            self.tasks.append(PeriodicTask("backlog-quota-check", cfg.backlogQuotaCheckIntervalInSeconds,
                                           service.backlog_quotas.check_all))
        if cfg.healthCheckMetricsUpdateTimeInSeconds > 0:
            self.tasks.append(PeriodicTask("health-check-metrics", cfg.healthCheckMetricsUpdateTimeInSeconds,
                                           service.check_health_for_metrics))
        self._started = False
        self.inactive_topic_settings_changed()

    def inactive_topic_settings_changed(self) -> None:
        """The inactive-topic check runs once brokerDeleteInactiveTopicsEnabled is true (at start, or set so by the
        dynamic configuration; as in Pulsar, it is not stopped when the setting turns false: the broker's policy
        then deletes nothing, a namespace's or topic's own inactiveTopicPolicies still may), every
        brokerDeleteInactiveTopicsFrequencySeconds (a change counts from the next run on)."""
        cfg = self.service.config
        task = next((t for t in self.tasks if t.name == "inactive-topic-check"), None)
        if task is None:
            if not cfg.brokerDeleteInactiveTopicsEnabled:
                return
            task = PeriodicTask("inactive-topic-check", cfg.brokerDeleteInactiveTopicsFrequencySeconds,
                                self.service.inactive_topics.check_all)
            self.tasks.append(task)
            if self._started:
                task.start()
        task.interval_s = cfg.brokerDeleteInactiveTopicsFrequencySeconds

    def task(self, name: str) -> PeriodicTask:
        return next(t for t in self.tasks if t.name == name)

    def start(self) -> None:
        """Idempotent."""
        self._started = True
        for task in self.tasks:
            task.start()

    async def stop(self) -> None:
        for task in self.tasks:
            await task.stop()

    # -- the jobs ------------------------------------------------------------------------------------
    async def expire_messages(self) -> None:
        """Message TTL: acknowledge, on every durable subscription, what is older than the TTL."""
        service = self.service
        now_ms = int(time.time() * 1000)
        async for topic in sliced(list(service.topics.values())):
            ttl = service.policies.get(topic.name, MESSAGE_TTL)
            if ttl <= 0 or topic.closed:
                continue
            for cursor in list(topic.ledger.cursors.values()):
                # Not the transaction buffer's snapshot cursor nor deduplication's: neither is a subscription, and
                # each must stay where its saved state says (Pulsar expires on subscriptions and replicators).
                # Nor compaction's, which Pulsar exempts: it holds what the next compaction reads.
                if cursor.name in (BUFFER_CURSOR, DEDUP_CURSOR, COMPACTION_CURSOR):
                    continue
                expired = await admin_ops.expire_cursor(topic, cursor, ttl, now_ms)
                service.expiry_stats.record(topic.full_name, cursor.name, expired, now_ms)

    async def apply_retention(self) -> None:
        """Bring loaded topics up to date with their retention (and persistence) policies and
        delete ledgers that retention no longer keeps (time passes even without traffic)."""
        async for topic in sliced(list(self.service.topics.values())):
            if not topic.closed:
                self.service.apply_ledger_policies(topic)
                try:  # (offloads due by the thresholds, then the local copies offloaded long enough)
                    await offload_housekeeping(topic)
                except Exception:  # (a failed copy, a full disk, the topic closed meanwhile: the others go on)
                    log.warning("%s: offloading failed", topic.name, exc_info=True)

    async def compact_if_due(self) -> None:
        """Start compaction on topics that received more than their threshold."""
        service = self.service
        async for topic in sliced(list(service.topics.values())):
            if topic.closed:
                continue
            threshold = service.policies.get(topic.name, COMPACTION_THRESHOLD)
            if threshold <= 0:
                continue
            try:  # (a threshold set since the topic loaded: Pulsar creates the cursor on the policy update)
                await topic.compactor.hold_for_first_run()
            except Exception:  # (closed meanwhile, a full disk: the others are checked all the same)
                log.warning("could not open the compaction cursor of %s", topic.name, exc_info=True)
                continue
            if compaction_backlog(topic) > threshold:
                topic.compactor.trigger()

    async def expire_subscriptions(self) -> None:
        """Pulsar's checkInactiveSubscriptions: delete the durable subscriptions of loaded topics
        that have had no consumer, read or ack for the expiration time."""
        service = self.service
        async for topic in sliced(list(service.topics.values())):
            limit_s = service.policies.for_namespace(topic.name.namespace, SUBSCRIPTION_EXPIRATION) * 60
            if limit_s <= 0 or topic.closed:
                continue
            now = time.time()  # the managed ledgers' clock
            for name in topic.subscription_names():
                if topic.closed:
                    break
                if name == COMPACTION_CURSOR:
                    continue  # (never inactive, as Pulsar's isCompactionSubscription: compaction's own)
                sub = topic.subscriptions.get(name)
                if sub is not None and (sub.consumers or not sub.durable):
                    continue
                cursor = topic.subscription_cursor(name)
                if cursor is None or now - cursor.last_active <= limit_s:
                    continue
                try:
                    await admin_ops.delete_subscription(topic, name, force=False)
                except BrokerError as exc:  # a consumer came meanwhile, or the topic is closing
                    log.debug("kept subscription %s of %s: %s", name, topic.name, exc)
                    continue
                self.subscriptions_expired_total += 1
                log.info("deleted subscription %s of %s: no consumer, read or ack for %.0f s",
                         name, topic.name, now - cursor.last_active)

    async def snapshot_deduplication(self) -> None:
        """Deduplication state of topics that took entries since their last snapshot, once it is
        their deduplicationSnapshotInterval old (Pulsar's time-based snapshots)."""
        service = self.service
        async for topic in sliced(list(service.topics.values())):
            if topic.dedup.cursor is not None and not topic.closed:
                topic.dedup.snapshot_if_due(service.policies.get(topic.name, DEDUP_SNAPSHOT_INTERVAL))

    async def check_backlogged_cursors(self) -> None:
        """Subscriptions and replicators that fell behind (or caught up) since consumers (or the
        remote cluster) came or went leave (or rejoin) the read cache's active cursors."""
        async for topic in sliced(list(self.service.topics.values())):
            if topic.closed:
                continue
            for sub in list(topic.subscriptions.values()):
                sub.update_cursor_activity()
            for replicator in list(topic.replicators.values()):
                replicator.update_cursor_activity()
