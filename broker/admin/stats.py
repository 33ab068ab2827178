"""Topic statistics: the rate sampler, and the stats / internal-stats JSON Pulsar's admin API returns.

Rates (msgRateIn, msgThroughputOut, pulsar_rate_in, ...) are, as in Pulsar, differences of
counters over the last stats interval (statsUpdateFrequencyInSecs). The sampler takes a snapshot of
the counters once per interval; nothing is done per message. The counters themselves are the
plain integers the service objects keep (topic.msg_in, consumer.msg_out, ...).

A subscription's out counters must not go down when a consumer leaves (Prometheus would read a
counter reset), so the sampler remembers the consumers it has seen and adds the final counts of
the ones that left to the subscription's total. A consumer that comes and goes between two
samples without a scrape or stats request in between is not counted there (documented limit).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.admin.metrics_topic import THROTTLE_LIMITS, in_replay, txn_buffer_counts
from broker.java_text import client_address, iso_time, iso_time_ms
from broker.metadata.policy_table import BACKLOG_QUOTAS
from broker.metadata.policy_values import DESTINATION_STORAGE, MESSAGE_AGE
from broker.service.backlog_quota import estimated_backlog_size
from broker.service.compaction import COMPACTION_CURSOR
from broker.service.replicated_subscriptions import REPLICATED_PROPERTY
from broker.service.replication import REPLICATOR_PREFIX, Replicator
from broker.topic_name import is_system_topic
from managed_ledger import ManagedCursor, ManagedLedger, ManagedLedgerError, Position

if TYPE_CHECKING:
    from broker.admin.context import AdminContext
    from broker.service.broker_service import AnyTopic
    from broker.service.compacted_view import CompactedView
    from broker.service.compaction import CompactionRecord
    from broker.service.consumer import Consumer
    from broker.service.kinds import AnySubscription
    from broker.service.nonpersistent import NonPersistentSubscription, NonPersistentTopic
    from broker.service.producer import Producer
    from broker.service.subscription import Subscription
    from broker.service.topic import PersistentTopic
    from managed_ledger.api import StoredCursorState, StoredManagedLedgerInfo


class Rate(NamedTuple):
    msgs: float = 0.0
    bytes: float = 0.0


ZERO = Rate()
# The sampler gives the loop back after this much work (checked every TOPICS_PER_CHECK topics).
SAMPLE_SLICE_S = 0.01
TOPICS_PER_CHECK = 8


class SubscriptionTotals(NamedTuple):
    msg_out: int
    bytes_out: int
    redelivered: int


class StatsSampler:
    def __init__(self, ctx: AdminContext, clock: Callable[[], float] = time.monotonic) -> None:
        self.ctx = ctx
        self.clock = clock
        self._last = clock()
        self.interval_s = 0.0  # length of the interval the current rates cover
        self.samples = 0  # intervals taken so far (what derives from one interval's rates is kept until the next)
        self._prev: dict[object, tuple[int, ...]] = {}
        self.topic_in: dict[AnyTopic, Rate] = {}
        self.topic_entries_in: dict[AnyTopic, float] = {}
        # Persistent topics: entries read from storage and read operations that missed the cache, per second.
        self.topic_entries_read: dict[AnyTopic, float] = {}
        self.topic_read_misses: dict[AnyTopic, float] = {}
        # Persistent topics: cursor states written (mark-deletes persisted) per second (Pulsar's MarkDeleteRate).
        self.topic_mark_deletes: dict[AnyTopic, float] = {}
        self.producer_in: dict[Producer, Rate] = {}
        self.sub_out: dict[AnySubscription, Rate] = {}
        self.sub_ack: dict[AnySubscription, float] = {}
        self.sub_redeliver: dict[AnySubscription, float] = {}
        self.sub_expired: dict[tuple[str, str], float] = {}
        # Non-persistent subscriptions: messages dropped per second (Pulsar's msgDropRate).
        self.sub_drop: dict[AnySubscription, float] = {}
        self.consumer_out: dict[Consumer, Rate] = {}
        self.consumer_redeliver: dict[Consumer, float] = {}
        self.replicator_out: dict[Replicator, Rate] = {}
        # Non-persistent replicators: messages dropped per second.
        self.replicator_drop: dict[Replicator, float] = {}
        # The managed-ledger entry cache, broker-wide: entries per second hit, missed and evicted; bytes per
        # second hit and missed.
        self.cache_hits_rate = self.cache_misses_rate = self.cache_evictions_rate = 0.0
        self.cache_hits_throughput = self.cache_misses_throughput = 0.0

    # -- counters --------------------------------------------------------------------------------
    def subscription_totals(self, sub: AnySubscription) -> SubscriptionTotals:
        """Messages / bytes delivered and redelivered by the subscription since it was created."""
        gone, current = sub.departed, sub.consumers
        return SubscriptionTotals(gone.msgs + sum(c.msg_out for c in current),
                                  gone.bytes + sum(c.bytes_out for c in current),
                                  gone.redelivered + sum(c.redelivered for c in current))

    # -- sampling --------------------------------------------------------------------------------
    async def sample_async(self) -> None:
        """``sample`` on the loop, giving it back after every SAMPLE_SLICE_S of work (seconds at 10,000 topics
        would hold every client); the new rates replace the old ones at the end, all at once."""
        for _ in self._sample():
            await asyncio.sleep(0)

    def sample(self) -> None:
        for _ in self._sample():
            pass

    def _sample(self) -> Iterator[None]:
        """Take the rates of the interval that ends now; yields between slices of topics (a topic closed
        meanwhile is still sampled: its numbers are those it ended with)."""
        now = self.clock()
        elapsed = now - self._last
        if elapsed <= 0:
            return
        self._last = now
        service = self.ctx.service
        service.lookup_stats.latency.rotate()  # (the lookup, publish and topic-load quantiles cover one interval)
        service.publish_latency.rotate()
        service.topic_load_stats.times.rotate()
        service.schemas.stats.rotate()
        if service.offloader_stats is not None:
            service.offloader_stats.rotate(elapsed)
        if service.transactions is not None:
            service.transactions.tb_client_stats.rotate()
            service.transactions.pending_ack_stats.rotate()
        prev, cur = self._prev, {}

        def delta(obj: object, values: tuple[int, ...]) -> list[float]:
            cur[obj] = values
            before = prev.get(obj, (0,) * len(values))
            # A counter that went down was reset (e.g. object reused): count from zero.
            return [(v - b if v >= b else v) / elapsed for v, b in zip(values, before, strict=True)]

        topic_in: dict[AnyTopic, Rate] = {}
        entries_in: dict[AnyTopic, float] = {}
        entries_read: dict[AnyTopic, float] = {}
        read_misses: dict[AnyTopic, float] = {}
        mark_deletes: dict[AnyTopic, float] = {}
        producer_in: dict[Producer, Rate] = {}
        sub_out: dict[AnySubscription, Rate] = {}
        sub_ack: dict[AnySubscription, float] = {}
        sub_redeliver: dict[AnySubscription, float] = {}
        sub_expired: dict[tuple[str, str], float] = {}
        sub_drop: dict[AnySubscription, float] = {}
        consumer_out: dict[Consumer, Rate] = {}
        consumer_redeliver: dict[Consumer, float] = {}
        replicator_out: dict[Replicator, Rate] = {}
        replicator_drop: dict[Replicator, float] = {}

        def sample_storage(topic: PersistentTopic) -> None:
            add_stats = topic.ledger.add_stats
            add_stats.refresh()  # the adds' latency and size buckets of this interval
            entries_read[topic], read_misses[topic], mark_deletes[topic] = delta(
                (topic, "reads"), (add_stats.entries_read, add_stats.read_ops_cache_missed, add_stats.mark_delete_ops))
            for name in topic.subscription_names():
                record = service.expiry_stats.get(topic.full_name, name)
                key = (topic.full_name, name)
                (sub_expired[key],) = delta(key, (record.total_expired,))

        slice_started = time.perf_counter()
        for i, topic in enumerate(list(service.all_topics())):
            if i % TOPICS_PER_CHECK == 0 and time.perf_counter() - slice_started > SAMPLE_SLICE_S:
                yield
                slice_started = time.perf_counter()
            msgs, nbytes, entries = delta(topic, (topic.msg_in, topic.bytes_in, topic.entries_added))
            topic_in[topic] = Rate(msgs, nbytes)
            entries_in[topic] = entries
            for p in topic.producers.values():
                m, b = delta(p, (p.msg_in, p.bytes_in))
                producer_in[p] = Rate(m, b)
            for sub in topic.subscriptions.values():
                totals = self.subscription_totals(sub)
                m, b, r, a = delta(sub, (*totals, sub.msg_ack_counter))
                sub_out[sub] = Rate(m, b)
                sub_redeliver[sub] = r
                sub_ack[sub] = a
                (sub_drop[sub],) = delta((sub, "dropped"), (sub.msg_dropped,))  # 0 unless non-persistent
                for c in sub.consumers:
                    cm, cb, cr = delta(c, (c.msg_out, c.bytes_out, c.redelivered))
                    consumer_out[c] = Rate(cm, cb)
                    consumer_redeliver[c] = cr
            for rep in topic.replicators.values():
                replicator_out[rep] = Rate(*delta(rep, (rep.msg_out, rep.bytes_out)))
                (replicator_drop[rep],) = delta((rep, "dropped"), (rep.msg_dropped,))  # 0 unless non-persistent
            topic.match_kind(sample_storage, lambda t: None)  # non-persistent: nothing stored, nothing expires
        factory = service.ledger_factory
        cache, storage = getattr(factory, "cache", None), getattr(factory, "stats", None)
        (self.cache_hits_rate, self.cache_misses_rate, self.cache_evictions_rate, self.cache_hits_throughput,
         self.cache_misses_throughput) = delta(
            ("cache",), (getattr(storage, "cache_hits_total", 0), getattr(storage, "cache_misses_total", 0),
                         getattr(cache, "evictions", 0), getattr(storage, "cache_hit_bytes_total", 0),
                         getattr(storage, "cache_miss_bytes_total", 0)))
        self._prev = cur
        self.interval_s = elapsed
        self.samples += 1
        self.topic_in, self.topic_entries_in, self.producer_in = topic_in, entries_in, producer_in
        self.topic_entries_read, self.topic_read_misses = entries_read, read_misses
        self.topic_mark_deletes = mark_deletes
        self.sub_out, self.sub_ack, self.sub_redeliver, self.sub_expired = sub_out, sub_ack, sub_redeliver, sub_expired
        self.sub_drop = sub_drop
        self.consumer_out, self.consumer_redeliver = consumer_out, consumer_redeliver
        self.replicator_out, self.replicator_drop = replicator_out, replicator_drop


# -- JSON ---------------------------------------------------------------------------------------------

def replication_stats(topic: AnyTopic, sampler: StatsSampler) -> dict[str, dict[str, Any]]:
    """Pulsar's ReplicatorStats per remote cluster: outbound (this topic's replicator to it) and
    inbound (that cluster's replicator producing here); on a non-persistent topic,
    NonPersistentReplicatorStats (with msgDropRate)."""
    inbound = {p.name[len(REPLICATOR_PREFIX):]: p for p in topic.producers.values() if p.replicator}
    out: dict[str, dict[str, Any]] = {}
    for cluster in sorted(set(topic.replicators) | set(inbound)):
        r, p = topic.replicators.get(cluster), inbound.get(cluster)
        rate_out = sampler.replicator_out.get(r, ZERO) if r is not None else ZERO
        rate_in = sampler.producer_in.get(p, ZERO) if p is not None else ZERO
        connected = r is not None and r.connected
        out[cluster] = {
            "msgRateIn": rate_in.msgs,
            "msgThroughputIn": rate_in.bytes,
            "msgRateOut": rate_out.msgs,
            "msgThroughputOut": rate_out.bytes,
            "msgOutCounter": r.msg_out if r is not None else 0,
            "bytesOutCounter": r.bytes_out if r is not None else 0,
            "msgRateExpired": 0.0,
            "replicationBacklog": r.backlog if r is not None else 0,
            "connected": connected,
            "replicationDelayInSeconds": int(r.delay_s) if r is not None else 0,
            "inboundConnection": client_address(p.cnx.remote_address) if p is not None else None,
            "inboundConnectedSince": iso_time(p.connected_since) if p is not None else None,
            "outboundConnection": r.remote_url if r is not None else None,
            "outboundConnectedSince": iso_time(r.connected_since) if r is not None and connected else None,
        }
        if topic.drops_messages:
            out[cluster]["msgDropRate"] = sampler.replicator_drop.get(r, 0.0) if r is not None else 0.0
    return out


def _ms(epoch_s: float) -> int:
    return int(epoch_s * 1000)


def consumer_stats(c: Consumer, sampler: StatsSampler, key_stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """A consumer's stats; ``key_stats`` its Key_Shared fields (Dispatcher.consumer_key_stats)."""
    rate = sampler.consumer_out.get(c, ZERO)
    stats = {
        "msgRateOut": rate.msgs,
        "msgThroughputOut": rate.bytes,
        "bytesOutCounter": c.bytes_out,
        "msgOutCounter": c.msg_out,
        "msgRateRedeliver": sampler.consumer_redeliver.get(c, 0.0),
        "messageAckRate": 0.0,
        "chunkedMessageRate": 0.0,
        "consumerName": c.name,
        "availablePermits": max(c.permits, 0),
        "unackedMessages": c.unacked_messages,
        "avgMessagesPerEntry": round(c.avg_messages_per_entry),
        "blockedConsumerOnUnackedMsgs": bool(getattr(c, "blocked", False)),
        "lastAckedTimestamp": _ms(c.last_acked),
        "lastConsumedTimestamp": _ms(c.last_consumed),
        "lastConsumedFlowTimestamp": _ms(c.last_flow),
        "lastAckedTime": iso_time(c.last_acked),
        "lastConsumedTime": iso_time(c.last_consumed),
        **_NO_DRAINING_HASHES,
        "metadata": dict(c.metadata),
        "address": client_address(c.cnx.remote_address),
        "connectedSince": iso_time(c.connected_since),
        "clientVersion": c.cnx.client_version,
    }
    if key_stats:
        stats.update(key_stats)
    return stats


def subscription_stats(topic: PersistentTopic, name: str, sub: Subscription | None,
                       sampler: StatsSampler) -> dict[str, Any]:
    """Stats of a subscription; ``sub`` is None for a stored cursor nobody has attached to."""
    expiry = sampler.ctx.service.expiry_stats.get(topic.full_name, name)
    cursor = sub.cursor if sub is not None else topic.ledger.cursors[name]
    consumers = sub.consumers if sub is not None else []
    backlog = cursor.number_of_entries_in_backlog()
    totals = sampler.subscription_totals(sub) if sub is not None else SubscriptionTotals(0, 0, 0)
    rate = sampler.sub_out.get(sub, ZERO) if sub is not None else ZERO
    durable = sub.durable if sub is not None else True
    replicated = sub.replicated if sub is not None else bool(cursor.properties.get(REPLICATED_PROPERTY))
    dispatcher = sub.dispatcher if sub is not None else None
    active = dispatcher.active_consumer_name if dispatcher is not None else None
    key_stats = dispatcher.consumer_key_stats() if dispatcher is not None else {}
    key_shared_mode = dispatcher.key_shared_mode if dispatcher is not None else None
    consumer_list = [consumer_stats(c, sampler, key_stats.get(c)) for c in consumers]
    return {
        "msgRateOut": rate.msgs,
        "msgThroughputOut": rate.bytes,
        "bytesOutCounter": totals.bytes_out,
        "msgOutCounter": totals.msg_out,
        "msgRateRedeliver": sampler.sub_redeliver.get(sub, 0.0) if sub is not None else 0.0,
        "messageAckRate": sampler.sub_ack.get(sub, 0.0) if sub is not None else 0.0,
        "chunkedMessageRate": 0.0,
        "msgBacklog": backlog,
        "backlogSize": estimated_backlog_size(topic, cursor),
        "msgBacklogNoDelayed": backlog,
        "blockedSubscriptionOnUnackedMsgs": bool(getattr(dispatcher, "blocked_on_unacked", False)),
        "msgDelayed": 0,
        "unackedMessages": sum(c.unacked_messages for c in consumers),
        "type": sub.type_name() if sub is not None else "Exclusive",
        **({"activeConsumerName": active} if active is not None else {}),  # (null in Pulsar's: left out)
        "msgRateExpired": sampler.sub_expired.get((topic.full_name, name), 0.0),
        "totalMsgExpired": expiry.total_expired,
        "lastExpireTimestamp": expiry.last_expire_ms,
        "lastConsumedFlowTimestamp": max((_ms(c.last_flow) for c in consumers), default=0),
        "lastConsumedTimestamp": max((_ms(c.last_consumed) for c in consumers), default=0),
        "lastAckedTimestamp": _ms(sub.last_acked) if sub is not None else 0,
        "lastMarkDeleteAdvancedTimestamp": _ms(sub.last_mark_delete_advanced) if sub is not None else 0,
        **_subscription_extras(sub),
        **_draining_totals(consumer_list),
        "consumers": consumer_list,
        "isDurable": durable,
        "durable": durable,
        "isReplicated": replicated,
        "replicated": replicated,
        "allowOutOfOrderDelivery": dispatcher is not None and dispatcher.allow_out_of_order,
        **({"keySharedMode": key_shared_mode} if key_shared_mode is not None else {}),
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": cursor.individually_deleted.range_count(),
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "subscriptionProperties": dict(sub.subscription_properties) if sub is not None else {},
    }


# Pulsar 4's Key_Shared draining hashes (PIP-379): a consumer's come from its dispatcher (consumer_key_stats), a
# subscription's are its consumers' sums; zero for the other types.
_NO_DRAINING_HASHES = {"drainingHashesCount": 0, "drainingHashesClearedTotal": 0, "drainingHashesUnackedMessages": 0}


def _draining_totals(consumers: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(c[k] for c in consumers) for k in _NO_DRAINING_HASHES}


# Readers Pulsar counts as the broker's own besides the compaction cursor (AbstractTopic.isSystemCursor): the bytes
# read through them are the topic's bytesOutInternalCounter.
_SYSTEM_READER_PREFIX = "__system_reader"


def _subscription_extras(sub: AnySubscription | None) -> dict[str, Any]:
    """The SubscriptionStats fields of Pulsar 4.0 beyond the rates and counters above."""
    dispatcher = sub.dispatcher if sub is not None else None
    msg_events = getattr(dispatcher, "throttled_msg_events", None) or ()
    bytes_events = getattr(dispatcher, "throttled_bytes_events", None) or ()
    extras: dict[str, Any] = {
        "earliestMsgPublishTimeInBacklog": 0,  # (only with getEarliestTimeInBacklog, as in Pulsar)
        "msgInReplay": in_replay(sub),
        "delayedMessageIndexSizeInBytes": 0,
        # No entry filters here: nothing filtered.
        "filterProcessedMsgCount": 0, "filterAcceptedMsgCount": 0, "filterRejectedMsgCount": 0,
        "filterRescheduledMsgCount": 0,
    }
    for limit, i in THROTTLE_LIMITS:
        word = limit.capitalize()
        extras[f"dispatchThrottledMsgEventsBy{word}Limit"] = msg_events[i] if i < len(msg_events) else 0
        extras[f"dispatchThrottledBytesEventsBy{word}Limit"] = bytes_events[i] if i < len(bytes_events) else 0
    return extras


def _topic_extras(topic: AnyTopic, subs: dict[str, dict[str, Any]], sampler: StatsSampler) -> dict[str, Any]:
    """The TopicStats fields of Pulsar 4.0 beyond the rates, counters and parts above."""
    quotas = sampler.ctx.service.policies.get(topic.name, BACKLOG_QUOTAS)
    oldest = getattr(topic, "oldest_backlog_age_s", None)
    ledger = getattr(topic, "ledger", None)  # (none for a non-persistent topic)
    ongoing, aborted, committed = txn_buffer_counts(topic)
    return {
        "systemTopicBytesInCounter": topic.bytes_in if is_system_topic(topic.full_name) else 0,
        "bytesOutInternalCounter": sum(s["bytesOutCounter"] for name, s in subs.items()
                                       if name == COMPACTION_CURSOR or name.startswith(_SYSTEM_READER_PREFIX)),
        "backlogQuotaLimitSize": quotas[DESTINATION_STORAGE].limit_size,
        "backlogQuotaLimitTime": quotas[MESSAGE_AGE].limit_time,
        "oldestBacklogMessageAgeSeconds": int(oldest) if oldest is not None else -1,
        # (the managed ledger's, as Pulsar's: of this instance's offloads; 0 for a storage that cannot offload)
        "lastOffloadLedgerId": getattr(ledger, "last_offload_ledger_id", 0),
        "lastOffloadSuccessTimeStamp": getattr(ledger, "last_offload_success_ms", 0),
        "lastOffloadFailureTimeStamp": getattr(ledger, "last_offload_failure_ms", 0),
        "ongoingTxnCount": ongoing, "abortedTxnCount": aborted, "committedTxnCount": committed,
        "delayedMessageIndexSizeInBytes": 0,
    }


def publisher_stats(p: Producer, sampler: StatsSampler) -> dict[str, Any]:
    rate = sampler.producer_in.get(p, ZERO)
    return {
        "accessMode": p.access_mode_name,
        "msgRateIn": rate.msgs,
        "msgThroughputIn": rate.bytes,
        "averageMsgSize": rate.bytes / rate.msgs if rate.msgs else 0.0,
        "chunkedMessageRate": 0.0,
        "producerId": p.producer_id,
        "producerName": p.name,
        "metadata": dict(p.metadata),
        "address": client_address(p.cnx.remote_address),
        "connectedSince": iso_time(p.connected_since),
        "clientVersion": p.cnx.client_version,
        "supportsPartialProducer": False,
    }


def non_persistent_subscription_stats(sub: NonPersistentSubscription, sampler: StatsSampler) -> dict[str, Any]:
    """Pulsar's NonPersistentSubscriptionStats: a subscription's stats without storage, plus
    msgDropRate (messages per second no consumer could take)."""
    consumers = sub.consumers
    totals = sampler.subscription_totals(sub)
    rate = sampler.sub_out.get(sub, ZERO)
    dispatcher = sub.dispatcher
    stats: dict[str, Any] = {
        "msgRateOut": rate.msgs,
        "msgThroughputOut": rate.bytes,
        "bytesOutCounter": totals.bytes_out,
        "msgOutCounter": totals.msg_out,
        "msgRateRedeliver": 0.0,
        "messageAckRate": 0.0,
        "chunkedMessageRate": 0.0,
        "msgBacklog": 0,
        "backlogSize": 0,
        "msgBacklogNoDelayed": 0,
        "blockedSubscriptionOnUnackedMsgs": False,
        "msgDelayed": 0,
        "unackedMessages": 0,
        "type": sub.type_name(),
        **({"activeConsumerName": dispatcher.active_consumer_name}
           if dispatcher is not None and dispatcher.active_consumer_name is not None else {}),
        "msgRateExpired": 0.0,
        "totalMsgExpired": 0,
        "lastExpireTimestamp": 0,
        "lastConsumedFlowTimestamp": max((_ms(c.last_flow) for c in consumers), default=0),
        "lastConsumedTimestamp": max((_ms(c.last_consumed) for c in consumers), default=0),
        "lastAckedTimestamp": 0,
        "lastMarkDeleteAdvancedTimestamp": 0,
        **_subscription_extras(sub),
        **_NO_DRAINING_HASHES,
        "consumers": [consumer_stats(c, sampler) for c in consumers],
        "isDurable": sub.durable,
        "durable": sub.durable,
        "isReplicated": False,
        "replicated": False,
        "allowOutOfOrderDelivery": False,
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "subscriptionProperties": dict(sub.subscription_properties),
        "msgDropRate": sampler.sub_drop.get(sub, 0.0),
    }
    if dispatcher is not None and dispatcher.key_shared_mode is not None:
        stats["keySharedMode"] = dispatcher.key_shared_mode  # as NonPersistentSubscription.getStats sets it
    return stats


def _stored_parts(topic: PersistentTopic, sampler: StatsSampler) -> tuple[dict[str, dict[str, Any]], int, int]:
    """A persistent topic's subscriptions' stats (stored ones too), storage size, backlog size."""
    subs = {name: subscription_stats(topic, name, topic.subscriptions.get(name), sampler)
            for name in topic.subscription_names()}
    return subs, topic.ledger.total_size, estimated_backlog_size(topic)


def _live_parts(topic: NonPersistentTopic, sampler: StatsSampler) -> tuple[dict[str, dict[str, Any]], int, int]:
    """A non-persistent topic's: its live subscriptions' stats; nothing stored."""
    subs = {name: non_persistent_subscription_stats(sub, sampler) for name, sub in sorted(topic.subscriptions.items())}
    return subs, 0, 0


def offloaded_size(topic: AnyTopic) -> int:
    """Bytes of the topic's ledgers with a complete offloaded copy (0 for a storage that cannot offload)."""
    return int(getattr(getattr(topic, "ledger", None), "offloaded_size", 0))


def topic_stats(topic: AnyTopic, sampler: StatsSampler) -> dict[str, Any]:
    """Pulsar's TopicStats, or NonPersistentTopicStats (the same with zero storage and backlog,
    plus msgDropRate on the topic, its publishers and its subscriptions; only the subscriptions'
    is ever non-zero)."""
    rate_in = sampler.topic_in.get(topic, ZERO)
    subs, storage_size, backlog_size = topic.match_kind(lambda t: _stored_parts(t, sampler),
                                                        lambda t: _live_parts(t, sampler))
    stats: dict[str, Any] = {
        "msgRateIn": rate_in.msgs,
        "msgThroughputIn": rate_in.bytes,
        "msgRateOut": sum(s["msgRateOut"] for s in subs.values()),
        "msgThroughputOut": sum(s["msgThroughputOut"] for s in subs.values()),
        "bytesInCounter": topic.bytes_in,
        "msgInCounter": topic.msg_in,
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subs.values()),
        "msgOutCounter": sum(s["msgOutCounter"] for s in subs.values()),
        "averageMsgSize": rate_in.bytes / rate_in.msgs if rate_in.msgs else 0.0,
        "msgChunkPublished": False,
        "storageSize": storage_size,
        "backlogSize": backlog_size,
        "offloadedStorageSize": offloaded_size(topic),
        "earliestMsgPublishTimeInBacklogs": 0,
        "publishers": ([publisher_stats(p, sampler) for p in topic.producers.values()]
                       if sampler.ctx.config.exposePublisherStats else []),
        "waitingPublishers": len(topic.waiting_producers),
        "subscriptions": subs,
        "replication": replication_stats(topic, sampler),
        # (NonPersistentTopic.asyncGetStats sets none: null, left out of its JSON)
        **({} if topic.drops_messages else
           {"deduplicationStatus": "Enabled" if topic.deduplication_enabled else "Disabled"}),
        "publishRateLimitedTimes": topic.publish_throttle.throttled_times,
        "nonContiguousDeletedMessagesRanges": sum(s["nonContiguousDeletedMessagesRanges"] for s in subs.values()),
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "ownerBroker": sampler.ctx.broker_id,
        "compaction": compaction_stats(topic.match_kind(lambda t: t.compactor.record, lambda t: None)),
        **_topic_extras(topic, subs, sampler),
    }
    if topic.exclusive_producer is not None:
        stats["topicEpoch"] = topic.topic_epoch
    if topic.drops_messages:
        # A publisher's drops are SENDs refused for too many in flight on its connection; SEND
        # completes at once here, so there are none. Pulsar 4.0's NonPersistentTopic.asyncGetStats
        # never sets the topic's own rate (it stays 0 however much the subscriptions drop), and
        # the Java admin client shows that: the drops are in the subscriptions' msgDropRate.
        for p in stats["publishers"]:
            p["msgDropRate"] = 0.0
        stats["msgDropRate"] = 0.0
    return stats


def compaction_stats(record: CompactionRecord | None) -> dict[str, int]:
    """Pulsar's CompactionStats: what the topic's last compaction run did (its removed messages and duration,
    success or failure) and when the last run of each outcome ended (epoch ms); zeros before the first run,
    for a non-persistent topic, and in a partitioned topic's stats (Pulsar's TopicStatsImpl.add leaves them)."""
    if record is None:
        return {"lastCompactionRemovedEventCount": 0, "lastCompactionSucceedTimestamp": 0,
                "lastCompactionFailedTimestamp": 0, "lastCompactionDurationTimeInMills": 0}
    return {"lastCompactionRemovedEventCount": record.last_removed_events,
            "lastCompactionSucceedTimestamp": record.last_succeeded_ms,
            "lastCompactionFailedTimestamp": record.last_failed_ms,
            "lastCompactionDurationTimeInMills": record.last_duration_ms}


# Fields of a topic's stats that a partitioned topic's stats add up over its partitions.
_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter",
           "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize", "offloadedStorageSize",
           "waitingPublishers", "nonContiguousDeletedMessagesRanges", "publishRateLimitedTimes",
           "systemTopicBytesInCounter", "bytesOutInternalCounter", "ongoingTxnCount", "abortedTxnCount",
           "committedTxnCount", "delayedMessageIndexSizeInBytes")
_SUB_SUMMED = ("msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter", "msgRateRedeliver",
               "messageAckRate", "msgBacklog", "backlogSize", "msgBacklogNoDelayed", "msgDelayed",
               "unackedMessages", "msgRateExpired", "totalMsgExpired", "nonContiguousDeletedMessagesRanges",
               "msgInReplay", "delayedMessageIndexSizeInBytes", "dispatchThrottledMsgEventsByTopicLimit",
               "dispatchThrottledBytesEventsByTopicLimit", "dispatchThrottledMsgEventsBySubscriptionLimit",
               "dispatchThrottledBytesEventsBySubscriptionLimit", "dispatchThrottledMsgEventsByBrokerLimit",
               "dispatchThrottledBytesEventsByBrokerLimit")
_SUB_LATEST = ("lastExpireTimestamp", "lastConsumedFlowTimestamp", "lastConsumedTimestamp", "lastAckedTimestamp",
               "lastMarkDeleteAdvancedTimestamp")


# ReplicatorStats fields a partitioned topic adds up over its partitions.
_REPLICATION_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgOutCounter",
                       "bytesOutCounter", "msgRateExpired", "replicationBacklog")


def partitioned_stats(metadata: dict[str, Any], per_partition: dict[str, dict[str, Any]],
                      include_partitions: bool) -> dict[str, Any]:
    """Pulsar's PartitionedTopicStats: the partitions' stats added up, plus ``metadata`` (its
    PartitionedTopicMetadata). No deduplicationStatus: its add() leaves it null, out of the JSON."""
    total: dict[str, Any] = {k: 0 for k in _SUMMED}
    total.update({"averageMsgSize": 0.0, "msgChunkPublished": False, "publishers": [], "subscriptions": {},
                  "replication": {}, "metadata": metadata, "earliestMsgPublishTimeInBacklogs": 0,
                  "nonContiguousDeletedMessagesRangesSerializedSize": 0,
                  "partitions": {}, "compaction": compaction_stats(None), "backlogQuotaLimitSize": -1,
                  "backlogQuotaLimitTime": -1, "oldestBacklogMessageAgeSeconds": -1, "lastOffloadLedgerId": 0,
                  "lastOffloadSuccessTimeStamp": 0, "lastOffloadFailureTimeStamp": 0})
    subs: dict[str, dict[str, Any]] = total["subscriptions"]
    for name, stats in per_partition.items():
        for k in _SUMMED:
            total[k] += stats[k]
        if "msgDropRate" in stats:  # non-persistent partitions
            total["msgDropRate"] = total.get("msgDropRate", 0.0) + stats["msgDropRate"]
        total["publishers"].extend(stats["publishers"])
        # (the same policy for every partition; the oldest backlog of any)
        total["backlogQuotaLimitSize"] = stats["backlogQuotaLimitSize"]
        total["backlogQuotaLimitTime"] = stats["backlogQuotaLimitTime"]
        total["oldestBacklogMessageAgeSeconds"] = max(total["oldestBacklogMessageAgeSeconds"],
                                                      stats["oldestBacklogMessageAgeSeconds"])
        for sub_name, s in stats["subscriptions"].items():
            agg = subs.get(sub_name)
            if agg is None:
                subs[sub_name] = {**s, "consumers": list(s["consumers"])}
                continue
            for k in _SUB_SUMMED:
                agg[k] += s[k]
            if "msgDropRate" in s:
                agg["msgDropRate"] += s["msgDropRate"]
            for k in _SUB_LATEST:
                agg[k] = max(agg[k], s[k])
            agg["consumers"].extend(s["consumers"])
        for cluster, r in stats.get("replication", {}).items():
            agg_r = total["replication"].get(cluster)
            if agg_r is None:
                total["replication"][cluster] = dict(r)
                continue
            for k in _REPLICATION_SUMMED:
                agg_r[k] += r[k]
            if "msgDropRate" in r:
                agg_r["msgDropRate"] += r["msgDropRate"]
            agg_r["connected"] = agg_r["connected"] and r["connected"]
            agg_r["replicationDelayInSeconds"] = max(agg_r["replicationDelayInSeconds"], r["replicationDelayInSeconds"])
        if include_partitions:
            total["partitions"][name] = stats
    if total["msgRateIn"]:
        total["averageMsgSize"] = total["msgThroughputIn"] / total["msgRateIn"]
    return total


def internal_stats(topic: AnyTopic) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats (managed-ledger view of the topic)."""
    return topic.match_kind(_stored_internal_stats, _live_internal_stats)


def _live_internal_stats(topic: NonPersistentTopic) -> dict[str, Any]:
    """What Pulsar's NonPersistentTopic reports: the entries count and one (empty) cursor per
    subscription; there is no ledger."""
    return {"entriesAddedCounter": topic.entries_added, "numberOfEntries": 0, "totalSize": 0,
            "ledgers": [], "cursors": {name: {} for name in sorted(topic.subscriptions)}, "schemaLedgers": []}


def _stored_internal_stats(topic: PersistentTopic) -> dict[str, Any]:
    ledger = topic.ledger
    cursors: dict[str, Any] = {}
    for name in topic.subscription_names():
        sub = topic.subscriptions.get(name)
        cursor = sub.cursor if sub is not None else topic.ledger.cursors[name]
        cursors[name] = stats = cursor_internal_stats(ledger, cursor)
        stats["active"] = bool(sub is not None and sub.consumers)
        stats["numberOfEntriesSinceFirstNotAckedMessage"] = entries_since_first_unacked(topic, cursor)
        d = sub.dispatcher if sub is not None else None
        if d is not None:
            # Ours, not Pulsar's: the dispatcher's permit accounting, so drift is visible from outside.
            balance = d.permit_balance()
            stats["dispatcher"] = {
                "type": d.type_name,
                "totalPermits": d.total_permits,
                "sumOfConsumerPermitsMinusPendingFlow": balance,
                "permitInvariantHolds": d.total_permits == balance,
                "permitInvariantDriftCount": d.invariant_drift_count,
                "queuedLaneItems": d.lane.pending,
                "readOutstanding": d.read_outstanding,
                # Shared / Key_Shared: no new entries read while the cursor has more acknowledgement holes than
                # its storage keeps (dispatcherPauseOnAckStatePersistent, PIP-299; Pulsar shows it nowhere).
                "pausedOnAckStatePersistent": d.paused_on_ack_state,
            }
    return {
        **ledger_internal_stats(ledger, cursors, entries_added=topic.entries_added,
                                pending_adds=sum(p.pending for p in topic.producers.values())),
        "schemaLedgers": [],
        "compactedLedger": _compacted_ledger(topic.compacted_view),
    }


def _compacted_ledger(view: CompactedView | None) -> dict[str, Any]:
    """Pulsar's compactedLedger (PersistentTopic.getInternalStats): the compacted view's ledger id, its
    entries (the ledger's last entry id + 1: the view's records) and its length in bytes; -1 for each
    before the topic's first compaction."""
    ledger_id, entries, size = (view.ledger_id, len(view), view.size) if view is not None else (-1, -1, -1)
    return {"ledgerId": ledger_id, "entries": entries, "size": size, "offloaded": False, "underReplicated": False}


async def add_ledger_metadata(stats: dict[str, Any], ledger: ManagedLedger) -> dict[str, Any]:
    """``?metadata=true`` on internal stats: each ledger's BookKeeper metadata (``metadata``, as BookKeeper prints
    it) and ``underReplicated``: a bookie of its ensembles is no longer registered (Pulsar 4.0.7 asks whether the
    set of registered bookies contains the set of the ledger's, so it says true of every ledger). Nothing where
    ledgers are not BookKeeper's."""
    found = await ledger.ledgers_metadata()
    for info in stats["ledgers"]:
        if (known := found.get(info["ledgerId"])) is not None:
            info["metadata"], info["underReplicated"] = known
    return stats


def ledger_internal_stats(ledger: ManagedLedger, cursors: dict[str, dict[str, Any]] | None = None, *,
                          entries_added: int | None = None, pending_adds: int = 0) -> dict[str, Any]:
    """Pulsar's ManagedLedgerInternalStats: a topic's (with its subscriptions' cursors, its counter of
    entries added and its producers' pending adds) or a transaction log's (every cursor of the ledger, the
    broker's own included, as ``cursor_internal_stats`` gives them; entries added = entries kept)."""
    infos = ledger.ledgers_info()
    current = infos[-1] if infos else None
    if cursors is None:
        cursors = {name: cursor_internal_stats(ledger, c) for name, c in sorted(ledger.cursors.items())}
    return {
        "entriesAddedCounter": ledger.number_of_entries if entries_added is None else entries_added,
        "numberOfEntries": ledger.number_of_entries,
        "totalSize": ledger.total_size,
        "currentLedgerEntries": current.entries if current else 0,
        "currentLedgerSize": current.size if current else 0,
        "lastLedgerCreatedTimestamp": iso_time(current.created_at) if current else "",
        "waitingCursorsCount": sum(1 for c in ledger.cursors.values() if c.has_pending_read),
        "pendingAddEntriesCount": pending_adds,
        "lastConfirmedEntry": str(ledger.last_confirmed_entry),
        "state": "Closed" if ledger.is_closed else ("Fenced" if ledger.is_fenced else "LedgerOpened"),
        "ledgers": [{"ledgerId": i.ledger_id, "entries": i.entries, "size": i.size, "offloaded": i.offloaded,
                     "underReplicated": False} for i in infos],
        "cursors": cursors,
    }


def cursor_internal_stats(ledger: ManagedLedger, cursor: ManagedCursor) -> dict[str, Any]:
    """Pulsar's CursorStats, as for a cursor with no consumers (a subscription sets ``active`` and
    ``numberOfEntriesSinceFirstNotAckedMessage`` itself)."""
    return {
        "markDeletePosition": str(cursor.mark_delete_position),
        "readPosition": str(cursor.read_position),
        "waitingReadOp": cursor.has_pending_read,
        "pendingReadOps": 0,
        "messagesConsumedCounter": max(0, ledger.number_of_entries - cursor.number_of_entries_in_backlog()),
        "cursorLedger": -1,
        "cursorLedgerLastEntry": -1,
        "individuallyDeletedMessages": cursor.individually_deleted.to_pulsar_string(),
        "lastLedgerSwitchTimestamp": "",
        "state": "Closed" if cursor.is_closed else "Open",
        "active": False,
        "numberOfEntriesSinceFirstNotAckedMessage": 0,
        "totalNonContiguousDeletedMessagesRange": cursor.individually_deleted.range_count(),
        "subscriptionHavePendingRead": cursor.has_pending_read,
        "subscriptionHavePendingReplayRead": False,
        "properties": dict(cursor.properties),
    }


def entries_since_first_unacked(topic: PersistentTopic, cursor: ManagedCursor) -> int:
    """Pulsar's numberOfEntriesSinceFirstNotAckedMessage: the entries from the first after the mark-delete to
    the read position."""
    ledger = topic.ledger
    try:
        first = ledger.next_valid_position(cursor.mark_delete_position)
        last = min(cursor.read_position, ledger.last_confirmed_entry)
        return ledger.count_entries_between(first, last) if first <= last else 0
    except ManagedLedgerError:
        return 0




def managed_ledger_info(info: StoredManagedLedgerInfo) -> dict[str, Any]:
    """Pulsar's ManagedLedgerInfo (``topics info-internal``) as its admin writes it: what is not stored is left out
    (its mapper skips nulls), a position as ``{"ledgerId", "entryId"}``, an acknowledged range as the open-closed
    ``{"from", "to"}`` Pulsar's MessageRange keeps."""
    out: dict[str, Any] = {"version": info.version, **_dates(info.created_ms, info.modified_ms), "ledgers": [
        _without_none({"ledgerId": row.ledger_id, "entries": row.entries, "size": row.size,
                       "timestamp": row.timestamp_ms, "isOffloaded": row.offload_uuid is not None,
                       "offloadedContextUuid": row.offload_uuid})
        for row in info.ledgers]}
    if info.terminated is not None:
        out["terminatedPosition"] = _position(info.terminated)
    out["cursors"] = {name: _stored_cursor(cursor) for name, cursor in sorted(info.cursors.items())}
    if info.properties:
        out["properties"] = dict(sorted(info.properties.items()))
    return out


def _stored_cursor(cursor: StoredCursorState) -> dict[str, Any]:
    record = cursor.record
    out: dict[str, Any] = {"version": cursor.version, **_dates(cursor.created_ms, cursor.modified_ms),
                           "cursorsLedgerId": cursor.cursors_ledger_id, "markDelete": _position(record.mark_delete)}
    ranges = [{"from": _position(Position(first.ledger_id, first.entry_id - 1)), "to": _position(last)}
              for first, last in record.individually_deleted]
    if ranges:
        out["individualDeletedMessages"] = ranges
    if record.properties:
        out["properties"] = dict(sorted(record.properties.items()))
    return out


def _dates(created_ms: int | None, modified_ms: int | None) -> dict[str, str]:
    return _without_none({"creationDate": None if created_ms is None else iso_time_ms(created_ms),
                          "modificationDate": None if modified_ms is None else iso_time_ms(modified_ms)})


def _position(position: Position) -> dict[str, int]:
    return {"ledgerId": position.ledger_id, "entryId": position.entry_id}


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
