"""Backlog quotas (Pulsar's BacklogQuotaManager): how much subscriptions may leave unconsumed.

Two quota types, each with its own policy (the topic's ``backLogQuotaMap`` entry, else the
namespace's ``backlog_quota_map`` entry, else the broker's backlogQuotaDefault* settings):

- ``destination_storage``: the estimated bytes between the slowest durable cursor and the end of
  the log must stay <= limitSize.
- ``message_age``: the oldest unacknowledged entry of the slowest cursor must be younger than
  limitTime seconds.

When one is exceeded: ``producer_request_hold`` and ``producer_exception`` disconnect the topic's
producers and refuse new ones (ProducerBlockedQuotaExceededError, which the client retries, and
ProducerBlockedQuotaExceededException, which fails its pending sends); ``consumer_backlog_eviction``
acknowledges on behalf of the slowest subscriptions until the topic is back under the limit
(90% of it for size, as Pulsar). The check runs every backlogQuotaCheckIntervalInSeconds and, for
the size quota, whenever a producer is created.
"""

from __future__ import annotations

import logging
import math
import time
from bisect import bisect_left
from typing import TYPE_CHECKING

from broker.errors import ProducerBlockedQuotaExceededError, ProducerBlockedQuotaExceededException
from broker.metadata.policy_table import BACKLOG_QUOTAS
from broker.metadata.policy_values import (
    CONSUMER_BACKLOG_EVICTION,
    DESTINATION_STORAGE,
    MESSAGE_AGE,
    PRODUCER_EXCEPTION,
    PRODUCER_REQUEST_HOLD,
    BacklogQuota,
    BacklogQuotas,
)
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import entry_meta
from broker.service import admin_ops
from broker.service.deduplication import DEDUP_CURSOR
from broker.service.periodic import sliced
from broker.transactions.buffer import BUFFER_CURSOR
from managed_ledger import ManagedCursor, ManagedLedger, ManagedLedgerError, Position

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.topic import PersistentTopic
    from broker.topic_name import TopicName

log = logging.getLogger(__name__)
E = pb.ServerError
# Pulsar drops a size-evicted backlog to this share of the limit, so eviction does not run again
# on the very next message.
EVICTION_TARGET = 0.9



def durable_cursors(topic: PersistentTopic) -> list[ManagedCursor]:
    """The cursors a backlog is counted on (not the transaction buffer's snapshot cursor)."""
    return [c for c in topic.ledger.cursors.values() if not c.is_closed and c.name != BUFFER_CURSOR]


def subscription_cursors(topic: PersistentTopic) -> list[ManagedCursor]:
    """The durable cursors eviction may move: not deduplication's, whose position must stay that of the
    state saved with it (it is moved by a snapshot, see advance_deduplication_cursor)."""
    return [c for c in durable_cursors(topic) if c.name != DEDUP_CURSOR]


def advance_deduplication_cursor(topic: PersistentTopic) -> bool:
    """Deduplication's cursor is snapshotted every brokerDeduplicationEntriesInterval entries, so it may be
    the slowest cursor without being a subscription: when it is, take a snapshot now, which brings it to the
    end of the log, rather than count it as a backlog (Pulsar's BacklogQuotaManager.advanceSlowestSystemCursor).
    True if it did."""
    dedup = topic.dedup.cursor
    if dedup is None or dedup.is_closed or dedup.number_of_entries_in_backlog() == 0:
        return False
    if any(c.mark_delete_position < dedup.mark_delete_position for c in durable_cursors(topic)):
        return False
    topic.dedup.snapshot()
    return True


def average_entry_size(topic: PersistentTopic) -> float:
    ledger = topic.ledger
    entries = ledger.number_of_entries
    return ledger.total_size / entries if entries > 0 else 0.0


def estimated_backlog_size(topic: PersistentTopic, cursor: ManagedCursor | None = None) -> int:
    """Bytes of unacknowledged entries of ``cursor`` (default: the slowest durable cursor), estimated
    from the average entry size, as Pulsar's getEstimatedBacklogSize does."""
    if cursor is None:
        cursors = durable_cursors(topic)
        if not cursors:
            return 0
        entries = max(c.number_of_entries_in_backlog() for c in cursors)
    else:
        entries = cursor.number_of_entries_in_backlog()
    return int(entries * average_entry_size(topic))


def backlog_size_from(ledger: ManagedLedger, position: Position) -> int:
    """Bytes stored after ``position``, as Pulsar's ManagedLedgerImpl.estimateBacklogFromPosition counts them: every
    ledger from the position's on, less the position's ledger's entries up to it at that ledger's average entry
    size (all of it once the position is its last entry). A position before the first ledger: everything."""
    infos = ledger.ledgers_info()
    before = sum(i.size for i in infos if i.ledger_id < position.ledger_id)
    after = ledger.total_size - before
    own = next((i for i in infos if i.ledger_id == position.ledger_id), None)
    if own is None or own.entries <= 0:
        return after
    if own.entries <= position.entry_id + 1:
        return after - own.size
    return after - ((position.entry_id + 1) * (own.size // own.entries) if position.entry_id >= 0 else 0)


# Pulsar's BrokerService backlog-quota check histogram bounds (seconds).
CHECK_DURATION_BUCKETS_S = (5.0, 10.0, 30.0, 60.0, 300.0)


class BacklogQuotaManager:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        # Topics found over their message_age quota by the last check (the age needs a read, so the
        # producer-creation path uses this verdict instead of reading the log).
        self._age_exceeded: set[str] = set()
        # How long each check of all topics took (pulsar_storage_backlog_quota_check_duration_seconds): counts per
        # bucket of CHECK_DURATION_BUCKETS_S (the overflow last), and their sum.
        self.check_durations = [0] * (len(CHECK_DURATION_BUCKETS_S) + 1)
        self.check_duration_sum_s = 0.0

    def quota(self, name: TopicName, quota_type: str,
              quotas: BacklogQuotas | None = None) -> BacklogQuota | None:
        """The quota in force for one type (the topic's, else its namespace's, else the broker's
        backlogQuotaDefault* settings, resolved per type as in Pulsar), or None when it sets no limit;
        ``quotas``: the topic's resolved map, when the caller has it already."""
        quota = (quotas if quotas is not None else self.service.policies.get(name, BACKLOG_QUOTAS))[quota_type]
        if quota_type == DESTINATION_STORAGE:
            return quota if quota.limit_size >= 0 else None  # (0 holds any backlog, as Pulsar's size check)
        return quota if quota.limit_time > 0 else None  # (Pulsar's checkTimeBacklogExceeded: 0 or less is none)

    def size_exceeded(self, topic: PersistentTopic,
                      quotas: BacklogQuotas | None = None) -> BacklogQuota | None:
        quota = self.quota(topic.name, DESTINATION_STORAGE, quotas)
        if quota is not None and estimated_backlog_size(topic) > quota.limit_size:
            return quota
        return None

    async def age_exceeded(self, topic: PersistentTopic, now_ms: int,
                           quotas: BacklogQuotas | None = None) -> BacklogQuota | None:
        quota = self.quota(topic.name, MESSAGE_AGE, quotas)
        if quota is None:
            return None
        oldest = await self.oldest_unacked_publish_time(topic)
        # Pulsar's best-effort backlog age (pulsar_storage_backlog_age_seconds), as of this check.
        topic.oldest_backlog_age_s = max(0, (now_ms - oldest) // 1000) if oldest is not None else None
        if oldest is not None and now_ms - oldest > quota.limit_time * 1000:
            return quota
        return None

    async def oldest_unacked_publish_time(self, topic: PersistentTopic) -> int | None:
        ledger = topic.ledger
        lagging = [c for c in durable_cursors(topic) if c.number_of_entries_in_backlog() > 0]
        if not lagging:
            return None
        slowest = min(c.mark_delete_position for c in lagging)
        try:
            entry = await ledger.read_entry(ledger.next_valid_position(slowest))
        except ManagedLedgerError:
            return None
        return entry_meta(entry.data).publish_time

    # -- producer creation -----------------------------------------------------------------------
    def check_producer(self, topic: PersistentTopic) -> None:
        """Refuse a new producer while a hold/exception quota is exceeded."""
        exceeded = self.size_exceeded(topic)
        if exceeded is not None and advance_deduplication_cursor(topic):
            exceeded = self.size_exceeded(topic)
        if exceeded is None and topic.full_name in self._age_exceeded:
            exceeded = self.quota(topic.name, MESSAGE_AGE)
        if exceeded is None:
            return
        if exceeded.policy == PRODUCER_EXCEPTION:
            raise ProducerBlockedQuotaExceededException(
                f"Cannot create producer on topic with backlog quota exceeded ({topic.full_name})")
        if exceeded.policy == PRODUCER_REQUEST_HOLD:
            raise ProducerBlockedQuotaExceededError(
                f"Cannot create producer on topic with backlog quota exceeded ({topic.full_name})")

    # -- periodic check --------------------------------------------------------------------------
    async def check_all(self) -> None:
        started = time.monotonic()
        now_ms = int(time.time() * 1000)
        loaded = set()
        async for topic in sliced(list(self.service.topics.values())):
            if topic.closed:
                continue
            loaded.add(topic.full_name)
            await self.check_topic(topic, now_ms)
        self._age_exceeded &= loaded
        elapsed = time.monotonic() - started
        self.check_durations[bisect_left(CHECK_DURATION_BUCKETS_S, elapsed)] += 1
        self.check_duration_sum_s += elapsed

    async def check_topic(self, topic: PersistentTopic, now_ms: int) -> None:
        quotas = self.service.policies.get(topic.name, BACKLOG_QUOTAS)  # (resolved once: both types)
        size_quota = self.size_exceeded(topic, quotas)
        if size_quota is not None and advance_deduplication_cursor(topic):
            size_quota = self.size_exceeded(topic, quotas)
        if size_quota is not None:
            if size_quota.policy == CONSUMER_BACKLOG_EVICTION:
                self.evict_for_size(topic, size_quota)
            else:
                admin_ops.disconnect_producers(topic)
        age_quota = await self.age_exceeded(topic, now_ms, quotas)
        if age_quota is not None and advance_deduplication_cursor(topic):
            age_quota = await self.age_exceeded(topic, now_ms, quotas)
        if age_quota is None:
            self._age_exceeded.discard(topic.full_name)
            return
        if age_quota.policy == CONSUMER_BACKLOG_EVICTION:
            topic.backlog_quota_evictions["message_age"] += 1
            for cursor in subscription_cursors(topic):
                expired = await admin_ops.expire_cursor(topic, cursor, age_quota.limit_time, now_ms)
                self.service.expiry_stats.record(topic.full_name, cursor.name, expired, now_ms)
            self._age_exceeded.discard(topic.full_name)
        else:
            self._age_exceeded.add(topic.full_name)
            admin_ops.disconnect_producers(topic)

    def evict_for_size(self, topic: PersistentTopic, quota: BacklogQuota) -> None:
        """Acknowledge the oldest entries of every cursor whose backlog is above the target. The
        topic's backlog is its slowest cursor's, so this is where Pulsar's loop over the slowest
        cursor ends up, in one pass."""
        target = EVICTION_TARGET * quota.limit_size
        avg = average_entry_size(topic)
        if avg <= 0:
            return
        topic.backlog_quota_evictions["destination_storage"] += 1
        for cursor in subscription_cursors(topic):
            backlog = cursor.number_of_entries_in_backlog()
            excess = math.ceil((backlog * avg - target) / avg)
            if excess > 0:
                cursor.skip_entries(min(excess, backlog))
                log.info("backlog quota: evicted %d entries of %s/%s", min(excess, backlog),
                         topic.full_name, cursor.name)
