"""Pulsar 4's OpenTelemetry instruments (PIP-264) and the snapshot of their values.

``INSTRUMENTS`` are the asynchronous (observable) ones: their values are read from the broker's own
counters when an export collects, so nothing runs per message. ``HISTOGRAMS`` are recorded where
the durations happen (a lookup, a schema-registry operation): the Python SDK has no observable
histogram, and Pulsar records these synchronously too.

Cost: a snapshot runs on the event loop, gives the loop back after every ``SLICE_S`` of work, and
builds no attribute dict per observation. Attribute dicts are built once per topic, subscription,
consumer, producer, cursor and replicator, kept in ``AttributeCache`` while the entity lives (a
snapshot keeps only what it met again, so a closed entity's attributes go with the next snapshot),
and the same dict object is handed to the exporter every time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.admin.scrape_stats import topic_counters
from broker.admin.stats import StatsSampler
from broker.metadata.policy_table import BACKLOG_QUOTAS
from broker.metadata.policy_values import DESTINATION_STORAGE, MESSAGE_AGE
from broker.service.replication import REPLICATOR_PREFIX
from managed_ledger.stats import CursorStats

if TYPE_CHECKING:
    from broker.admin.context import AdminContext
    from broker.service.broker_service import AnyTopic
    from broker.service.compaction import CompactionRecord

BROKER_SCOPE = "org.apache.pulsar.broker"  # Pulsar's Constants.BROKER_INSTRUMENTATION_SCOPE_NAME
AUTH_SCOPE = "org.apache.pulsar.authentication"  # AuthenticationMetrics.INSTRUMENTATION_SCOPE_NAME
# Work done in one go on the event loop before giving it back (as the /metrics scrape does).
SLICE_S = 0.010
TOPICS_PER_CHECK = 8  # topics between two looks at the clock
# Pulsar's MetadataStoreConfig.METADATA_STORE: the name of the broker's metadata store.
METADATA_STORE_NAME = "metadata-store"

COUNTER, UP_DOWN, GAUGE = "counter", "updowncounter", "gauge"


class Instrument(NamedTuple):
    kind: str
    unit: str
    description: str
    scope: str = BROKER_SCOPE


def _i(kind: str, unit: str, description: str, scope: str = BROKER_SCOPE) -> Instrument:
    return Instrument(kind, unit, description, scope)


# name -> instrument, as Pulsar 4.0 builds them (OpenTelemetry*Stats classes, BrokerService, ...).
INSTRUMENTS: dict[str, Instrument] = {
    # -- topics (OpenTelemetryTopicStats); attributes: the topic's --
    "pulsar.broker.topic.subscription.count": _i(UP_DOWN, "{subscription}", "Subscriptions of the topic"),
    "pulsar.broker.topic.producer.count": _i(UP_DOWN, "{producer}", "Active producers of the topic"),
    "pulsar.broker.topic.consumer.count": _i(UP_DOWN, "{consumer}", "Active consumers of the topic"),
    "pulsar.broker.topic.message.incoming.count": _i(COUNTER, "{message}", "Messages received for this topic"),
    "pulsar.broker.topic.message.outgoing.count": _i(COUNTER, "{message}", "Messages read from this topic"),
    "pulsar.broker.topic.message.incoming.size": _i(COUNTER, "By", "Message bytes received for this topic"),
    "pulsar.broker.topic.message.outgoing.size": _i(COUNTER, "By", "Message bytes read from this topic"),
    "pulsar.broker.topic.publish.rate.limit.count": _i(COUNTER, "{event}", "Times the publish rate limit held"),
    "pulsar.broker.topic.storage.size": _i(UP_DOWN, "By", "Storage used by the topic, replicas included"),
    "pulsar.broker.topic.storage.logical.size": _i(UP_DOWN, "By", "Storage used by the topic, without replicas"),
    "pulsar.broker.topic.storage.backlog.size": _i(UP_DOWN, "By", "Size of the topic's backlog"),
    "pulsar.broker.topic.storage.offloaded.size": _i(UP_DOWN, "By", "Data offloaded to tiered storage"),
    "pulsar.broker.topic.storage.backlog.quota.limit.size": _i(UP_DOWN, "By", "Size backlog quota of the topic"),
    "pulsar.broker.topic.storage.backlog.quota.limit.time": _i(GAUGE, "s", "Time backlog quota of the topic"),
    "pulsar.broker.topic.storage.backlog.quota.eviction.count": _i(
        COUNTER, "{eviction}", "Backlog evictions because the quota was exceeded"),
    "pulsar.broker.topic.storage.entry.outgoing.count": _i(COUNTER, "{entry}", "Entries written to storage"),
    "pulsar.broker.topic.storage.entry.incoming.count": _i(COUNTER, "{entry}", "Entries read from storage"),
    "pulsar.broker.topic.subscription.delayed.entry.count": _i(UP_DOWN, "{entry}", "Entries delayed for dispatch"),
    "pulsar.broker.topic.storage.backlog.age": _i(GAUGE, "s", "Age of the oldest unacknowledged message"),
    "pulsar.broker.topic.transaction.count": _i(
        UP_DOWN, "{transaction}", "Transactions of the topic, by pulsar.transaction.status"),
    "pulsar.broker.topic.compaction.removed.message.count": _i(COUNTER, "{message}", "Messages removed by compaction"),
    "pulsar.broker.topic.compaction.operation.count": _i(
        COUNTER, "{operation}", "Compaction operations, by pulsar.compaction.status"),
    "pulsar.broker.topic.compaction.duration": _i(UP_DOWN, "s", "Time spent compacting the topic, all runs"),
    "pulsar.broker.topic.compaction.incoming.size": _i(COUNTER, "By", "Bytes read by compaction"),
    "pulsar.broker.topic.compaction.outgoing.size": _i(COUNTER, "By", "Bytes written by compaction"),
    "pulsar.broker.topic.compaction.compacted.entry.count": _i(COUNTER, "{entry}", "Compacted entries"),
    "pulsar.broker.topic.compaction.compacted.entry.size": _i(COUNTER, "By", "Size of the compacted entries"),
    "pulsar.broker.topic.transaction.buffer.client.operation.count": _i(
        COUNTER, "{operation}", "Transaction ends on the topic asked by this broker's coordinators, by "
        "pulsar.transaction.status and pulsar.transaction.buffer.client.operation.status"),
    # -- consumers (OpenTelemetryConsumerStats) --
    "pulsar.broker.consumer.message.outgoing.count": _i(COUNTER, "{message}", "Messages dispatched to this consumer"),
    "pulsar.broker.consumer.message.outgoing.size": _i(COUNTER, "By", "Message bytes dispatched to this consumer"),
    "pulsar.broker.consumer.message.ack.count": _i(COUNTER, "{ack}", "Acknowledgments received from this consumer"),
    "pulsar.broker.consumer.message.redeliver.count": _i(
        COUNTER, "{message}", "Messages redelivered to this consumer"),
    "pulsar.broker.consumer.message.unack.count": _i(UP_DOWN, "{message}", "Messages unacknowledged by this consumer"),
    "pulsar.broker.consumer.blocked": _i(UP_DOWN, "1", "Whether this consumer is blocked on unacknowledged messages"),
    "pulsar.broker.consumer.permit.count": _i(UP_DOWN, "{permit}", "Permits available for this consumer"),
    # -- producers (OpenTelemetryProducerStats) --
    "pulsar.broker.producer.message.incoming.count": _i(COUNTER, "{message}", "Messages received from this producer"),
    "pulsar.broker.producer.message.incoming.size": _i(COUNTER, "By", "Message bytes received from this producer"),
    "pulsar.broker.producer.message.drop.count": _i(COUNTER, "{message}", "Messages dropped from this producer"),
    # -- replicators (OpenTelemetryReplicatorStats: every one an UpDownCounter but the age) --
    "pulsar.broker.replication.message.incoming.count": _i(
        UP_DOWN, "{message}", "Messages received from the remote cluster through this replicator"),
    "pulsar.broker.replication.message.outgoing.count": _i(
        UP_DOWN, "{message}", "Messages sent to the remote cluster through this replicator"),
    "pulsar.broker.replication.message.incoming.size": _i(
        UP_DOWN, "{By}", "Message bytes received from the remote cluster through this replicator"),
    "pulsar.broker.replication.message.outgoing.size": _i(
        UP_DOWN, "{By}", "Message bytes sent to the remote cluster through this replicator"),
    "pulsar.broker.replication.message.backlog.count": _i(
        UP_DOWN, "{message}", "Messages in the backlog of this replicator"),
    "pulsar.broker.replication.message.backlog.age": _i(
        GAUGE, "s", "Age of the oldest message in the replicator backlog"),
    "pulsar.broker.replication.message.expired.count": _i(
        UP_DOWN, "{message}", "Messages that expired for this replicator"),
    "pulsar.broker.replication.message.dropped.count": _i(
        UP_DOWN, "{message}", "Messages dropped by this replicator"),
    # -- replicated subscriptions (OpenTelemetryReplicatedSubscriptionStats) --
    "pulsar.broker.replication.subscription.snapshot.operation.count": _i(
        COUNTER, "{operation}", "Replicated-subscription snapshots begun"),
    # -- lookups and topic loads (BrokerService) --
    "pulsar.broker.request.topic.lookup.concurrent.usage": _i(UP_DOWN, "{operation}", "Lookups in progress"),
    "pulsar.broker.topic.load.concurrent.usage": _i(UP_DOWN, "{operation}", "Topic loads in progress"),
    # -- schema registry (SchemaRegistryStats) --
    "pulsar.broker.operation.schema_registry.compatibility_check.count": _i(
        COUNTER, "{operation}", "Schema Registry compatibility checks"),
    # -- managed ledgers (OpenTelemetryManagedLedgerStats), cursors, cache --
    "pulsar.broker.managed_ledger.message.outgoing.count": _i(
        UP_DOWN, "{operation}", "Write operations to this ledger, by pulsar.managed_ledger.operation.status"),
    "pulsar.broker.managed_ledger.message.incoming.count": _i(
        UP_DOWN, "{operation}", "Read operations from this ledger, by pulsar.managed_ledger.operation.status"),
    "pulsar.broker.managed_ledger.message.outgoing.logical.size": _i(
        COUNTER, "By", "Bytes written to this ledger, without replicas"),
    "pulsar.broker.managed_ledger.message.outgoing.replicated.size": _i(
        COUNTER, "By", "Bytes written to this ledger, replicas included"),
    "pulsar.broker.managed_ledger.message.incoming.size": _i(COUNTER, "By", "Bytes read from this ledger"),
    "pulsar.broker.managed_ledger.message.incoming.cache.miss.count": _i(
        UP_DOWN, "{operation}", "Reads from this ledger that missed the cache"),
    "pulsar.broker.managed_ledger.mark_delete.count": _i(
        COUNTER, "{operation}", "Mark-delete operations of this ledger's cursors"),
    "pulsar.broker.managed_ledger.backlog.count": _i(UP_DOWN, "{message}", "Backlog of all the ledger's cursors"),
    "pulsar.broker.managed_ledger.message_range.count": _i(
        UP_DOWN, "{range}", "Non-contiguous deleted message ranges of the cursor"),
    "pulsar.broker.managed_ledger.persist.operation.count": _i(
        COUNTER, "{operation}", "Cursor state writes to the cursor's storage, by "
        "pulsar.managed_ledger.cursor.operation.status"),
    "pulsar.broker.managed_ledger.persist.mds.operation.count": _i(
        COUNTER, "{operation}", "Cursor state writes to the metadata store, by "
        "pulsar.managed_ledger.cursor.operation.status"),
    "pulsar.broker.managed_ledger.cursor.outgoing.size": _i(
        COUNTER, "{By}", "Bytes of cursor state written, replicas included"),
    "pulsar.broker.managed_ledger.cursor.outgoing.logical.size": _i(
        COUNTER, "{By}", "Bytes of cursor state written, without replicas"),
    "pulsar.broker.managed_ledger.cursor.incoming.size": _i(COUNTER, "{By}", "Bytes of cursor state read"),
    "pulsar.broker.managed_ledger.count": _i(UP_DOWN, "{managed_ledger}", "Managed ledgers"),
    "pulsar.broker.managed_ledger.cache.eviction.count": _i(COUNTER, "{eviction}", "Cache eviction operations"),
    "pulsar.broker.managed_ledger.cache.entry.count": _i(
        UP_DOWN, "{entry}", "Cache entries, by pulsar.managed_ledger.cache.entry.status"),
    "pulsar.broker.managed_ledger.cache.entry.size": _i(UP_DOWN, "{By}", "Bytes of the entries in the cache"),
    "pulsar.broker.managed_ledger.cache.operation.count": _i(
        COUNTER, "{entry}", "Cache lookups, by pulsar.managed_ledger.cache.operation.status"),
    "pulsar.broker.managed_ledger.cache.operation.size": _i(
        COUNTER, "{By}", "Bytes looked up in the cache, by pulsar.managed_ledger.cache.operation.status"),
    # -- transactions: coordinators (OpenTelemetryTransactionCoordinatorStats), pending acks --
    "pulsar.broker.transaction.coordinator.transaction.count": _i(
        UP_DOWN, "{transaction}", "Transactions handled by the coordinator, by pulsar.transaction.status"),
    "pulsar.broker.transaction.coordinator.append.log.count": _i(
        COUNTER, "{entry}", "Transaction metadata entries appended by the coordinator"),
    "pulsar.broker.transaction.pending.ack.store.transaction.count": _i(
        COUNTER, "{transaction}", "Transactions handled by the subscription's pending ack store"),
    "pulsar.broker.transaction.buffer.client.pending.count": _i(
        UP_DOWN, "{transaction}", "Transaction ends on topics in flight from this broker's coordinators"),
    # -- metadata store (Pulsar's metrics reference) --
    "pulsar.broker.metadata.store.outgoing.size": _i(COUNTER, "{By}", "Bytes written to the metadata store"),
    # -- connections (PulsarStats) --
    "pulsar.broker.connection.count": _i(UP_DOWN, "{connection}", "Connections, by pulsar.connection.status"),
    "pulsar.broker.connection.create.operation.count": _i(
        UP_DOWN, "{operation}", "Connection create operations, by pulsar.connection.create.operation.status"),
    "pulsar.broker.connection.rate_limit.count": _i(
        COUNTER, "{operation}", "Times connections stopped or started being read, by "
        "pulsar.connection.rate_limit.operation.name"),
    # -- authentication (AuthenticationMetrics, AuthenticationMetricsToken: their own scope) --
    "pulsar.authentication.operation.count": _i(COUNTER, "{operation}", "Authentication operations", AUTH_SCOPE),
    "pulsar.authentication.token.expired.count": _i(COUNTER, "{token}", "Expired tokens", AUTH_SCOPE),
}

# Recorded where they happen (broker/service/operation_stats.py, the token provider): name -> instrument.
HISTOGRAMS: dict[str, Instrument] = {
    "pulsar.broker.request.topic.lookup.duration": _i(
        "histogram", "s", "The duration of topic lookup requests (binary or HTTP)"),
    "pulsar.broker.request.schema_registry.duration": _i("histogram", "s", "The duration of Schema Registry requests"),
    "pulsar.broker.replication.subscription.snapshot.operation.duration": _i(
        "histogram", "s", "How long replicated-subscription snapshots took, by "
        "pulsar.replication.subscription.snapshot.operation.result (success, timeout)"),
    "pulsar.authentication.token.expiry.duration": _i(
        "histogram", "s", "The remaining time of expiring token in seconds", AUTH_SCOPE),
}

Attrs = Mapping[str, str | int]
# One observation: value, attributes, and the start of the series (ns since the epoch) for sums.
Point = tuple[float, Attrs, int]
Snapshot = dict[str, list[Point]]

_NO_ATTRS: Attrs = {}
_QUOTA_TYPES = (("destination_storage", "size"), ("message_age", "time"))
_TXN_STATUSES = ("active", "committed", "aborted")
_ACCESS_MODES = {"Shared": "shared", "Exclusive": "exclusive", "WaitForExclusive": "wait_for_exclusive",
                 "ExclusiveWithFencing": "exclusive_with_fencing"}  # pulsar.producer.access_mode


def topic_attributes(topic: AnyTopic) -> dict[str, str | int]:
    """Pulsar's TopicAttributes: domain, tenant, namespace, the (partitioned) topic and partition index."""
    name = topic.name
    attrs: dict[str, str | int] = {"pulsar.domain": name.domain, "pulsar.tenant": name.tenant,
                                   "pulsar.namespace": name.namespace, "pulsar.topic": name.base.full}
    if name.partition_index >= 0:
        attrs["pulsar.partition.index"] = name.partition_index
    return attrs


@dataclass(eq=False)
class TopicAttrs:
    """Every attribute set one topic's observations use, built once (the parts on first use)."""

    topic: AnyTopic
    start_ns: int
    base: dict[str, str | int]
    quota: tuple[Attrs, ...] = ()  # by pulsar.backlog.quota.type: size, time
    txn: tuple[Attrs, ...] = ()  # by pulsar.transaction.status: active, committed, aborted
    compaction: tuple[Attrs, ...] = ()  # by pulsar.compaction.status: success, failure
    tb_client: tuple[Attrs, ...] = ()  # transaction ends asked: commit ok / failed, abort ok / failed (on first use)
    ml: Attrs = field(default_factory=dict)  # the managed ledger's (persistent topics)
    ml_ok: Attrs = field(default_factory=dict)  # and with pulsar.managed_ledger.operation.status=success
    cursors: dict[str, tuple[Attrs, Attrs, Attrs]] = field(default_factory=dict)  # cursor's; its writes ok, failed
    consumers: dict[tuple[str, str, str, int], Attrs] = field(default_factory=dict)
    producers: dict[tuple[str, int, str], Attrs] = field(default_factory=dict)
    replicators: dict[str, Attrs] = field(default_factory=dict)
    pending_acks: dict[str, tuple[Attrs, Attrs]] = field(default_factory=dict)

    @classmethod
    def of(cls, topic: AnyTopic) -> TopicAttrs:
        a = topic_attributes(topic)
        built = cls(topic, int(topic.created * 1e9), a)  # (its counters started with the topic object)
        built.quota = tuple({**a, "pulsar.backlog.quota.type": label} for _, label in _QUOTA_TYPES)
        built.txn = tuple({**a, "pulsar.transaction.status": s} for s in _TXN_STATUSES)
        built.compaction = tuple({**a, "pulsar.compaction.status": s} for s in ("success", "failure"))
        ledger = getattr(topic, "ledger", None)
        if ledger is not None:
            built.ml = {"pulsar.namespace": topic.name.namespace, "pulsar.managed_ledger.name": ledger.name}
            built.ml_ok = {**built.ml, "pulsar.managed_ledger.operation.status": "success"}
        return built


def _kept(old: dict, keys: Iterable) -> dict:  # type: ignore[type-arg]
    """The entries of ``old`` under ``keys`` (what a snapshot met again), in a new dict."""
    return {k: old[k] for k in keys if k in old}


class AttributeCache:
    """Per-topic attribute sets, kept between snapshots while the topic object is the live one."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicAttrs] = {}
        self._next: dict[str, TopicAttrs] = {}
        self.broker_start_ns = time.time_ns()

    def begin(self) -> None:
        self._next = {}

    def of(self, topic: AnyTopic) -> TopicAttrs:
        found = self.topics.get(topic.full_name)
        if found is None or found.topic is not topic:
            found = TopicAttrs.of(topic)
        self._next[topic.full_name] = found
        return found

    def end(self) -> None:
        """Forget the topics the snapshot did not meet (closed or unloaded)."""
        self.topics, self._next = self._next, {}


async def take_snapshot(ctx: AdminContext, sampler: StatsSampler, cache: AttributeCache) -> Snapshot:
    """Every instrument's observations now (on the event loop, in slices of ``SLICE_S``)."""
    out: Snapshot = {name: [] for name in INSTRUMENTS}
    service = ctx.service
    cache.begin()
    topics = [t for t in service.all_topics() if not t.closed]
    slice_started = time.perf_counter()
    for i, topic in enumerate(topics):
        if i % TOPICS_PER_CHECK == 0 and time.perf_counter() - slice_started > SLICE_S:
            await asyncio.sleep(0)
            slice_started = time.perf_counter()
        if not topic.closed:
            _topic(out, ctx, sampler, topic, cache.of(topic))
    cache.end()
    _broker(out, ctx, cache.broker_start_ns)
    return out


def _topic(out: Snapshot, ctx: AdminContext, sampler: StatsSampler, topic: AnyTopic, ta: TopicAttrs) -> None:
    tc = topic_counters(topic, sampler)
    a, t0 = ta.base, ta.start_ns
    out["pulsar.broker.topic.subscription.count"].append((len(tc.subscriptions), a, t0))
    out["pulsar.broker.topic.producer.count"].append(
        (sum(1 for p in topic.producers.values() if not p.replicator), a, t0))
    out["pulsar.broker.topic.consumer.count"].append((sum(s.consumers for s in tc.subscriptions), a, t0))
    out["pulsar.broker.topic.message.incoming.count"].append((tc.msg_in, a, t0))
    out["pulsar.broker.topic.message.outgoing.count"].append((tc.msg_out, a, t0))
    out["pulsar.broker.topic.message.incoming.size"].append((tc.bytes_in, a, t0))
    out["pulsar.broker.topic.message.outgoing.size"].append((tc.bytes_out, a, t0))
    out["pulsar.broker.topic.publish.rate.limit.count"].append((tc.rate_limited_times, a, t0))
    delayed = sum(getattr(sc.sub.dispatcher, "number_of_delayed_messages", 0) for sc in tc.subscriptions
                  if sc.sub is not None)
    out["pulsar.broker.topic.subscription.delayed.entry.count"].append((delayed, a, t0))
    _clients(out, topic, ta)
    _replicators(out, topic, ta)
    ledger = getattr(topic, "ledger", None)
    if ledger is None:
        return
    out["pulsar.broker.topic.storage.size"].append((tc.storage_size, a, t0))
    out["pulsar.broker.topic.storage.logical.size"].append((tc.storage_size, a, t0))
    out["pulsar.broker.topic.storage.backlog.size"].append((tc.backlog_size, a, t0))
    out["pulsar.broker.topic.storage.offloaded.size"].append((int(getattr(ledger, "offloaded_size", 0)), a, t0))
    out["pulsar.broker.topic.storage.entry.outgoing.count"].append((topic.entries_added, a, t0))
    stats = ledger.add_stats
    out["pulsar.broker.topic.storage.entry.incoming.count"].append((stats.entries_read, a, t0))
    # As Pulsar's: the limits in force and the oldest backlog's age, -1 where there is none.
    quotas = ctx.service.policies.get(topic.name, BACKLOG_QUOTAS)
    size_limit, time_limit = quotas[DESTINATION_STORAGE].limit_size, quotas[MESSAGE_AGE].limit_time
    out["pulsar.broker.topic.storage.backlog.quota.limit.size"].append((max(size_limit, -1), a, t0))
    out["pulsar.broker.topic.storage.backlog.quota.limit.time"].append((max(time_limit, -1), a, t0))
    evictions = getattr(topic, "backlog_quota_evictions", {})
    eviction = out["pulsar.broker.topic.storage.backlog.quota.eviction.count"]
    for (quota, _label), qa in zip(_QUOTA_TYPES, ta.quota, strict=True):
        eviction.append((evictions.get(quota, 0), qa, t0))
    age = getattr(topic, "oldest_backlog_age_s", None)
    out["pulsar.broker.topic.storage.backlog.age"].append((-1 if age is None else age, a, t0))
    buffer = getattr(topic, "txn_buffer", None)
    if buffer is not None:
        txn = out["pulsar.broker.topic.transaction.count"]
        for n, txa in zip((len(buffer.ongoing), buffer.committed_count, buffer.aborted_count), ta.txn, strict=True):
            txn.append((n, txa, t0))
        _txn_buffer_client(out, ctx, ta)
    compactor = getattr(topic, "compactor", None)
    if compactor is not None and compactor.record.runs:
        _compaction(out, compactor.record, ta)
    ml, ml_ok = ta.ml, ta.ml_ok
    out["pulsar.broker.managed_ledger.message.outgoing.count"].append((topic.entries_added, ml_ok, t0))
    # (Bytes written: what the topic took in, as /metrics' AddEntryBytesRate, times the copies BookKeeper keeps
    # (one for the file ledger); bytes read: what its subscriptions were sent, as ReadEntriesBytesRate.)
    copies = getattr(ctx.service.ledger_factory, "write_quorum", 1)
    out["pulsar.broker.managed_ledger.message.outgoing.logical.size"].append((tc.bytes_in, ml, t0))
    out["pulsar.broker.managed_ledger.message.outgoing.replicated.size"].append((tc.bytes_in * copies, ml, t0))
    out["pulsar.broker.managed_ledger.message.incoming.count"].append((stats.entries_read, ml_ok, t0))
    out["pulsar.broker.managed_ledger.message.incoming.size"].append((tc.bytes_out, ml, t0))
    out["pulsar.broker.managed_ledger.message.incoming.cache.miss.count"].append((stats.read_ops_cache_missed, ml, t0))
    out["pulsar.broker.managed_ledger.mark_delete.count"].append((stats.mark_delete_ops, ml, t0))
    out["pulsar.broker.managed_ledger.backlog.count"].append((sum(s.backlog for s in tc.subscriptions), ml, t0))
    _cursors(out, ledger, ta)


def _compaction(out: Snapshot, r: CompactionRecord, ta: TopicAttrs) -> None:
    """OpenTelemetryTopicStats' compaction instruments, for a topic compacted at least once."""
    a, t0 = ta.base, ta.start_ns
    out["pulsar.broker.topic.compaction.removed.message.count"].append((r.removed_events, a, t0))
    ops = out["pulsar.broker.topic.compaction.operation.count"]
    ops.append((r.succeeded, ta.compaction[0], t0))
    ops.append((r.failed, ta.compaction[1], t0))
    out["pulsar.broker.topic.compaction.duration"].append((r.duration_ms / 1000.0, a, t0))
    out["pulsar.broker.topic.compaction.incoming.size"].append((r.read_bytes, a, t0))
    out["pulsar.broker.topic.compaction.outgoing.size"].append((r.write_bytes, a, t0))
    out["pulsar.broker.topic.compaction.compacted.entry.count"].append((r.compacted_entries, a, t0))
    out["pulsar.broker.topic.compaction.compacted.entry.size"].append((r.compacted_bytes, a, t0))


def _txn_buffer_client(out: Snapshot, ctx: AdminContext, ta: TopicAttrs) -> None:
    """The ends of transactions on this topic this broker's coordinators asked for, by status and outcome
    (Pulsar's PersistentTopicAttributes: the topic's attributes without pulsar.domain)."""
    transactions = ctx.service.transactions
    if transactions is None:
        return
    ends: Sequence[int] = transactions.tb_client_stats.by_topic_name.get(ta.topic.full_name) or _NO_ENDS
    if not ta.tb_client:
        common = {k: v for k, v in ta.base.items() if k != "pulsar.domain"}
        ta.tb_client = tuple({**common, "pulsar.transaction.status": status,
                              "pulsar.transaction.buffer.client.operation.status": outcome}
                             for status in ("committed", "aborted") for outcome in ("success", "failure"))
    ops, t0 = out["pulsar.broker.topic.transaction.buffer.client.operation.count"], ta.start_ns
    for n, attrs in zip(ends, ta.tb_client, strict=True):
        ops.append((n, attrs, t0))


_NO_ENDS = (0, 0, 0, 0)
_NO_CURSOR_STATS = CursorStats()  # (a cursor whose state was never written: zeros)


def _cursors(out: Snapshot, ledger: Any, ta: TopicAttrs) -> None:
    """OpenTelemetryManagedCursorStats: each cursor's deleted ranges and state writes (ManagedCursorAttributes)."""
    t0 = ta.start_ns
    ranges = out["pulsar.broker.managed_ledger.message_range.count"]
    persist = out["pulsar.broker.managed_ledger.persist.operation.count"]
    persist_mds = out["pulsar.broker.managed_ledger.persist.mds.operation.count"]
    written = out["pulsar.broker.managed_ledger.cursor.outgoing.size"]
    written_logical = out["pulsar.broker.managed_ledger.cursor.outgoing.logical.size"]
    read = out["pulsar.broker.managed_ledger.cursor.incoming.size"]
    cursor_stats = getattr(ledger, "cursor_stats", {})
    cursors = {}
    for name, cursor in ledger.cursors.items():
        attrs = ta.cursors.get(name)
        if attrs is None:
            named = {**ta.ml, "pulsar.managed_ledger.cursor.name": name}
            attrs = (named, {**named, _CURSOR_STATUS: "success"}, {**named, _CURSOR_STATUS: "failure"})
        cursors[name] = attrs
        ca, ok, failed = attrs
        ranges.append((cursor.individually_deleted.range_count(), ca, t0))
        st = cursor_stats.get(name) or _NO_CURSOR_STATS
        persist.append((st.persist_ledger_succeed, ok, t0))
        persist.append((st.persist_ledger_errors, failed, t0))
        persist_mds.append((st.persist_zookeeper_succeed, ok, t0))
        persist_mds.append((st.persist_zookeeper_errors, failed, t0))
        written.append((st.write_ledger_size, ca, t0))
        written_logical.append((st.write_ledger_logical_size, ca, t0))
        read.append((st.read_ledger_size, ca, t0))
    ta.cursors = cursors


_CURSOR_STATUS = "pulsar.managed_ledger.cursor.operation.status"


def _clients(out: Snapshot, topic: AnyTopic, ta: TopicAttrs) -> None:
    """Pulsar's consumer attributes that identify one (subscription name and type, consumer name and id),
    its producer ones (name, id, access mode); and each subscription's pending-ack store."""
    t0 = ta.start_ns
    consumers: dict[tuple[str, str, str, int], Attrs] = {}
    pending: dict[str, tuple[Attrs, Attrs]] = {}
    acks = out["pulsar.broker.transaction.pending.ack.store.transaction.count"]
    for sub_name, sub in topic.subscriptions.items():
        ended = getattr(sub, "txns_ended", None)
        if ended is not None and getattr(sub, "pending_acks", None) is not None:  # (transactions on)
            ack_attrs = ta.pending_acks.get(sub_name)
            if ack_attrs is None:
                ack_attrs = _pending_ack_attrs(ta.base, sub_name)
            pending[sub_name] = ack_attrs
            acks.append((ended[True], ack_attrs[0], t0))
            acks.append((ended[False], ack_attrs[1], t0))
        if not sub.consumers:
            continue
        type_name = sub.type_name()
        for c in sub.consumers:
            key = (sub_name, type_name, c.name, c.consumer_id)
            ca = ta.consumers.get(key)
            if ca is None:
                ca = {**ta.base, "pulsar.subscription.name": sub_name, "pulsar.subscription.type": type_name,
                      "pulsar.consumer.name": c.name, "pulsar.consumer.id": c.consumer_id}
            consumers[key] = ca
            out["pulsar.broker.consumer.message.outgoing.count"].append((c.msg_out, ca, t0))
            out["pulsar.broker.consumer.message.outgoing.size"].append((c.bytes_out, ca, t0))
            out["pulsar.broker.consumer.message.ack.count"].append((c.msg_ack_counter, ca, t0))
            out["pulsar.broker.consumer.message.redeliver.count"].append((c.redelivered, ca, t0))
            out["pulsar.broker.consumer.message.unack.count"].append((c.unacked_messages, ca, t0))
            out["pulsar.broker.consumer.blocked"].append((1 if c.blocked else 0, ca, t0))
            out["pulsar.broker.consumer.permit.count"].append((max(c.permits, 0), ca, t0))
    ta.consumers, ta.pending_acks = consumers, pending
    producers: dict[tuple[str, int, str], Attrs] = {}
    for p in topic.producers.values():
        if p.replicator:
            continue
        pkey = (p.name, p.producer_id, p.access_mode_name)
        prod = ta.producers.get(pkey)
        if prod is None:
            prod = {**ta.base, "pulsar.producer.name": p.name, "pulsar.producer.id": p.producer_id,
                    "pulsar.producer.access_mode": _ACCESS_MODES.get(p.access_mode_name, "shared")}
        producers[pkey] = prod
        out["pulsar.broker.producer.message.incoming.count"].append((p.msg_in, prod, t0))
        out["pulsar.broker.producer.message.incoming.size"].append((p.bytes_in, prod, t0))
        if topic.drops_messages:
            out["pulsar.broker.producer.message.drop.count"].append((0, prod, t0))  # (SEND never waits: no drops)
    ta.producers = producers


def _pending_ack_attrs(base: Attrs, sub_name: str) -> tuple[Attrs, Attrs]:
    """Pulsar's PendingAckHandleAttributes (no domain) for committed and aborted transactions that succeeded."""
    common = {k: v for k, v in base.items() if k != "pulsar.domain"}
    common["pulsar.subscription.name"] = sub_name
    common["pulsar.transaction.pending.ack.store.operation.status"] = "success"
    return ({**common, "pulsar.transaction.status": "committed"}, {**common, "pulsar.transaction.status": "aborted"})


def _replicators(out: Snapshot, topic: AnyTopic, ta: TopicAttrs) -> None:
    """OpenTelemetryReplicatorStats, one series per remote cluster: what this topic's replicator sent there,
    and what that cluster's replicator producer published here."""
    inbound = {p.name[len(REPLICATOR_PREFIX):]: p for p in topic.producers.values() if p.replicator}
    if not inbound and not topic.replicators:
        if ta.replicators:
            ta.replicators = {}
        return
    t0 = ta.start_ns
    attrs: dict[str, Attrs] = {}
    for cluster in set(topic.replicators) | set(inbound):
        ra = ta.replicators.get(cluster)
        if ra is None:
            ra = {**ta.base, "pulsar.replication.remote.cluster.name": cluster}
        attrs[cluster] = ra
        r, p = topic.replicators.get(cluster), inbound.get(cluster)
        out["pulsar.broker.replication.message.incoming.count"].append((p.msg_in if p else 0, ra, t0))
        out["pulsar.broker.replication.message.incoming.size"].append((p.bytes_in if p else 0, ra, t0))
        if r is None:
            continue
        out["pulsar.broker.replication.message.outgoing.count"].append((r.msg_out, ra, t0))
        out["pulsar.broker.replication.message.outgoing.size"].append((r.bytes_out, ra, t0))
        out["pulsar.broker.replication.message.backlog.age"].append((r.delay_s, ra, t0))
        if topic.drops_messages:
            out["pulsar.broker.replication.message.dropped.count"].append((r.msg_dropped, ra, t0))
        else:  # (no message expiry for replicators here: always 0)
            out["pulsar.broker.replication.message.backlog.count"].append((r.backlog, ra, t0))
            out["pulsar.broker.replication.message.expired.count"].append((0, ra, t0))
    ta.replicators = attrs


# Broker-wide attribute sets: built once.
_CONNECTION = {s: {"pulsar.connection.status": s} for s in ("active", "open", "close")}
_CREATE = {s: {"pulsar.connection.create.operation.status": s} for s in ("success", "failure")}
_CACHE_ENTRY = {s: {"pulsar.managed_ledger.cache.entry.status": s} for s in ("active", "inserted", "evicted")}
_CACHE_OP = {s: {"pulsar.managed_ledger.cache.operation.status": s} for s in ("hit", "miss")}
_COORDINATOR_STATUSES = ("aborted", "active", "committed", "created", "timeout")
_METADATA_STORE = {"pulsar.metadata.store.name": METADATA_STORE_NAME}
_RATE_LIMIT_OPERATIONS = ("paused", "resumed", "throttled", "unthrottled")
_RATE_LIMIT = {s: {"pulsar.connection.rate_limit.operation.name": s} for s in _RATE_LIMIT_OPERATIONS}


def _broker(out: Snapshot, ctx: AdminContext, t0: int) -> None:
    service = ctx.service
    out["pulsar.broker.request.topic.lookup.concurrent.usage"].append((service.lookup_stats.pending, _NO_ATTRS, t0))
    out["pulsar.broker.topic.load.concurrent.usage"].append((service.pending_topic_loads, _NO_ATTRS, t0))
    checks = out["pulsar.broker.operation.schema_registry.compatibility_check.count"]
    for ns, st in service.schemas.stats.by_namespace.items():
        for response, n in (("compatible", st.compatible), ("incompatible", st.incompatible)):
            if n:
                checks.append((n, {"pulsar.namespace": ns,
                                   "pulsar.schema_registry.compatibility_check.response": response}, t0))
    _cache(out, ctx, t0)
    transactions = service.transactions
    if transactions is not None:
        for tc_id, tc in transactions.coordinators.items():
            ids = {"pulsar.transaction.coordinator.id": tc_id}
            for status, n in zip(_COORDINATOR_STATUSES,
                                 (tc.aborted, len(tc.txns), tc.committed, tc.created, tc.timed_out), strict=True):
                out["pulsar.broker.transaction.coordinator.transaction.count"].append(
                    (n, {**ids, "pulsar.transaction.status": status}, t0))
            out["pulsar.broker.transaction.coordinator.append.log.count"].append((tc.log.appended, ids, t0))
        out["pulsar.broker.transaction.buffer.client.pending.count"].append(
            (transactions.tb_client_stats.pending, _NO_ATTRS, t0))
    started = service.snapshot_stats.started
    if started:  # (a synchronous counter in Pulsar: there once a snapshot began)
        out["pulsar.broker.replication.subscription.snapshot.operation.count"].append((started, _NO_ATTRS, t0))
    store_stats = getattr(service.metadata_store, "stats", None)
    if store_stats is not None:
        out["pulsar.broker.metadata.store.outgoing.size"].append((store_stats.put_bytes, _METADATA_STORE, t0))
    process = ctx.process
    connections = out["pulsar.broker.connection.count"]
    connections.append((len(process.connections), _CONNECTION["active"], t0))
    connections.append((process.connections_created, _CONNECTION["open"], t0))
    connections.append((process.connections_closed, _CONNECTION["close"], t0))
    creates = out["pulsar.broker.connection.create.operation.count"]
    creates.append((process.connections_created - process.connections_refused, _CREATE["success"], t0))
    creates.append((process.connections_refused, _CREATE["failure"], t0))
    throttles, limits = process.throttle_counts, out["pulsar.broker.connection.rate_limit.count"]
    for operation in _RATE_LIMIT_OPERATIONS:
        limits.append((getattr(throttles, operation), _RATE_LIMIT[operation], t0))
    _authentication(out, ctx, t0)


def _cache(out: Snapshot, ctx: AdminContext, t0: int) -> None:
    """Pulsar's managed-ledger cache instruments (OpenTelemetryManagedLedgerCacheStats)."""
    service = ctx.service
    factory = service.ledger_factory
    cache, storage = getattr(factory, "cache", None), getattr(factory, "stats", None)
    out["pulsar.broker.managed_ledger.count"].append(
        (sum(1 for t in service.topics.values() if not t.closed), _NO_ATTRS, t0))
    inserted, evicted = getattr(cache, "inserted", 0), getattr(cache, "evictions", 0)
    out["pulsar.broker.managed_ledger.cache.eviction.count"].append((evicted, _NO_ATTRS, t0))
    for status, n in (("active", len(cache) if cache is not None else 0), ("inserted", inserted),
                      ("evicted", evicted)):
        out["pulsar.broker.managed_ledger.cache.entry.count"].append((n, _CACHE_ENTRY[status], t0))
    out["pulsar.broker.managed_ledger.cache.entry.size"].append((getattr(cache, "size", 0), _NO_ATTRS, t0))
    for status, ops, nbytes in (("hit", "cache_hits_total", "cache_hit_bytes_total"),
                                ("miss", "cache_misses_total", "cache_miss_bytes_total")):
        out["pulsar.broker.managed_ledger.cache.operation.count"].append(
            (getattr(storage, ops, 0), _CACHE_OP[status], t0))
        out["pulsar.broker.managed_ledger.cache.operation.size"].append(
            (getattr(storage, nbytes, 0), _CACHE_OP[status], t0))


def _authentication(out: Snapshot, ctx: AdminContext, t0: int) -> None:
    """AuthenticationMetrics: pulsar.authentication.provider / method / result (/ error on a failure)."""
    authn = ctx.security.authentication
    ops = out["pulsar.authentication.operation.count"]
    for (provider, method), n in authn.successes_by.items():
        ops.append((n, {"pulsar.authentication.provider": provider, "pulsar.authentication.method": method,
                        "pulsar.authentication.result": "success"}, t0))
    for (provider, method, reason), n in authn.failures_by.items():
        ops.append((n, {"pulsar.authentication.provider": provider, "pulsar.authentication.method": method,
                        "pulsar.authentication.result": "failure", "pulsar.authentication.error": reason}, t0))
    tokens = authn.providers.get("token", [])
    if tokens:
        out["pulsar.authentication.token.expired.count"].append(
            (sum(getattr(p, "expired_tokens", 0) for p in tokens), _NO_ATTRS, t0))
