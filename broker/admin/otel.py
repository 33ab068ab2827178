"""OpenTelemetry metrics as Apache Pulsar 4 exports them (PIP-264): ``pulsar.broker.*`` names, units and
attributes, over OTLP, configured Pulsar's way.

Pulsar's OpenTelemetryService starts the SDK with ``otel.sdk.disabled=true`` and lets the OTel
environment (or Java system properties) override it; so here too nothing runs unless
``OTEL_SDK_DISABLED=false``. Then the standard variables apply: ``OTEL_METRICS_EXPORTER`` (``otlp``,
the default; ``none`` turns export off), ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``; ``grpc``
needs the opentelemetry-exporter-otlp-proto-grpc package), ``OTEL_METRIC_EXPORT_INTERVAL`` (ms),
``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``. The resource carries Pulsar's
``pulsar.cluster`` (the cluster name), ``service.name=pulsar-broker`` and ``service.version``
unless the environment sets them; the meter is Pulsar's scope ``org.apache.pulsar.broker``.

Off the hot path: every instrument is observable, sampled when the SDK's export thread collects.
That thread never touches broker objects: it asks the event loop for one snapshot per collection
(``run_coroutine_threadsafe``) and reads the plain values from it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.admin.scrape_stats import topic_counters
from broker.admin.stats import StatsSampler
from broker.version import __version__

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider

    from broker.admin.context import AdminContext
    from broker.service.broker_service import AnyTopic

log = logging.getLogger(__name__)

SCOPE = "org.apache.pulsar.broker"  # Pulsar's Constants.BROKER_INSTRUMENTATION_SCOPE_NAME
SERVICE_NAME = "pulsar-broker"  # PulsarBrokerOpenTelemetry.SERVICE_NAME
# How long the export thread waits for the loop's snapshot before reporting nothing this time.
SNAPSHOT_TIMEOUT_S = 10.0
# The callbacks of one collection run right after each other: within this long of the snapshot's
# completion they share it (well below any sensible OTEL_METRIC_EXPORT_INTERVAL).
SNAPSHOT_REUSE_S = 0.5

COUNTER, UP_DOWN, GAUGE = "counter", "updowncounter", "gauge"
# Pulsar's instruments (OpenTelemetryTopicStats and the broker's connection counters):
# name -> (kind, unit, description). Topic instruments carry the topic attributes.
INSTRUMENTS: dict[str, tuple[str, str, str]] = {
    "pulsar.broker.topic.subscription.count": (UP_DOWN, "{subscription}", "Subscriptions of the topic"),
    "pulsar.broker.topic.producer.count": (UP_DOWN, "{producer}", "Active producers of the topic"),
    "pulsar.broker.topic.consumer.count": (UP_DOWN, "{consumer}", "Active consumers of the topic"),
    "pulsar.broker.topic.message.incoming.count": (COUNTER, "{message}", "Messages received for this topic"),
    "pulsar.broker.topic.message.outgoing.count": (COUNTER, "{message}", "Messages read from this topic"),
    "pulsar.broker.topic.message.incoming.size": (COUNTER, "By", "Message bytes received for this topic"),
    "pulsar.broker.topic.message.outgoing.size": (COUNTER, "By", "Message bytes read from this topic"),
    "pulsar.broker.topic.publish.rate.limit.count": (COUNTER, "{event}", "Times the publish rate limit held"),
    "pulsar.broker.topic.storage.size": (UP_DOWN, "By", "Storage used by the topic, replicas included"),
    "pulsar.broker.topic.storage.logical.size": (UP_DOWN, "By", "Storage used by the topic, without replicas"),
    "pulsar.broker.topic.storage.backlog.size": (UP_DOWN, "By", "Size of the topic's backlog"),
    "pulsar.broker.topic.storage.offloaded.size": (UP_DOWN, "By", "Data offloaded to tiered storage"),
    "pulsar.broker.topic.storage.backlog.quota.limit.size": (UP_DOWN, "By", "Size backlog quota of the topic"),
    "pulsar.broker.topic.storage.backlog.quota.limit.time": (GAUGE, "s", "Time backlog quota of the topic"),
    "pulsar.broker.topic.storage.backlog.quota.eviction.count": (
        COUNTER, "{eviction}", "Backlog evictions because the quota was exceeded"),
    "pulsar.broker.topic.storage.entry.outgoing.count": (COUNTER, "{entry}", "Entries written to storage"),
    "pulsar.broker.topic.storage.entry.incoming.count": (COUNTER, "{entry}", "Entries read from storage"),
    "pulsar.broker.topic.subscription.delayed.entry.count": (UP_DOWN, "{entry}", "Entries delayed for dispatch"),
    "pulsar.broker.topic.storage.backlog.age": (GAUGE, "s", "Age of the oldest unacknowledged message"),
    "pulsar.broker.topic.transaction.count": (
        UP_DOWN, "{transaction}", "Transactions of the topic, by pulsar.transaction.status"),
    "pulsar.broker.topic.compaction.removed.message.count": (COUNTER, "{message}", "Messages removed by compaction"),
    "pulsar.broker.topic.compaction.operation.count": (
        COUNTER, "{operation}", "Compaction operations, by pulsar.compaction.status"),
    "pulsar.broker.topic.compaction.compacted.entry.count": (COUNTER, "{entry}", "Compacted entries"),
    "pulsar.broker.topic.compaction.compacted.entry.size": (COUNTER, "By", "Size of the compacted entries"),
    # -- consumers (OpenTelemetryConsumerStats) --
    "pulsar.broker.consumer.message.outgoing.count": (COUNTER, "{message}", "Messages dispatched to this consumer"),
    "pulsar.broker.consumer.message.outgoing.size": (COUNTER, "By", "Message bytes dispatched to this consumer"),
    "pulsar.broker.consumer.message.redeliver.count": (
        COUNTER, "{message}", "Messages redelivered to this consumer"),
    "pulsar.broker.consumer.message.unack.count": (
        UP_DOWN, "{message}", "Messages unacknowledged by this consumer"),
    "pulsar.broker.consumer.message.unack.blocked": (
        GAUGE, "1", "Whether this consumer is blocked on unacknowledged messages"),
    "pulsar.broker.consumer.permit.count": (UP_DOWN, "{permit}", "Permits available for this consumer"),
    # -- producers (OpenTelemetryProducerStats) --
    "pulsar.broker.producer.message.incoming.count": (COUNTER, "{message}", "Messages received from this producer"),
    "pulsar.broker.producer.message.incoming.size": (COUNTER, "By", "Message bytes received from this producer"),
    "pulsar.broker.producer.message.drop.count": (COUNTER, "{message}", "Messages dropped from this producer"),
    # -- lookups and topic loads (BrokerService) --
    "pulsar.broker.request.topic.lookup.concurrent.usage": (UP_DOWN, "{operation}", "Lookups in progress"),
    "pulsar.broker.topic.load.concurrent.usage": (UP_DOWN, "{operation}", "Topic loads in progress"),
    # -- managed ledgers (OpenTelemetryManagedLedgerStats), cursors, cache --
    "pulsar.broker.managed_ledger.message.outgoing.count": (
        UP_DOWN, "{operation}", "Write operations to this ledger, by pulsar.managed_ledger.operation.status"),
    "pulsar.broker.managed_ledger.message.incoming.count": (
        UP_DOWN, "{operation}", "Read operations from this ledger, by pulsar.managed_ledger.operation.status"),
    "pulsar.broker.managed_ledger.message.incoming.cache.miss.count": (
        UP_DOWN, "{operation}", "Reads from this ledger that missed the cache"),
    "pulsar.broker.managed_ledger.backlog.count": (UP_DOWN, "{message}", "Backlog of all the ledger's cursors"),
    "pulsar.broker.managed_ledger.message_range.count": (
        UP_DOWN, "{range}", "Non-contiguous deleted message ranges of the cursor"),
    "pulsar.broker.managed_ledger.count": (UP_DOWN, "{managed_ledger}", "Managed ledgers"),
    "pulsar.broker.managed_ledger.cache.eviction.count": (COUNTER, "{eviction}", "Cache eviction operations"),
    "pulsar.broker.managed_ledger.cache.entry.count": (
        UP_DOWN, "{entry}", "Cache entries, by pulsar.managed_ledger.cache.entry.status"),
    "pulsar.broker.managed_ledger.cache.entry.size": (UP_DOWN, "{By}", "Bytes of the entries in the cache"),
    "pulsar.broker.managed_ledger.cache.operation.count": (
        COUNTER, "{entry}", "Cache lookups, by pulsar.managed_ledger.cache.operation.status"),
    "pulsar.broker.connection.count": (UP_DOWN, "{connection}", "Connections, by pulsar.connection.status"),
    "pulsar.broker.connection.create.operation.count": (
        UP_DOWN, "{operation}", "Connection create operations, by pulsar.connection.create.operation.status"),
}

Attrs = Mapping[str, str | int]
Snapshot = dict[str, list[tuple[float, Attrs]]]


def enabled(env: Mapping[str, str]) -> bool:
    """Pulsar's rule: the SDK is off unless OTEL_SDK_DISABLED=false."""
    return env.get("OTEL_SDK_DISABLED", "true").strip().lower() == "false"


def topic_attributes(topic: AnyTopic) -> dict[str, str | int]:
    """Pulsar's TopicAttributes: domain, tenant, namespace, the (partitioned) topic and partition index."""
    name = topic.name
    attrs: dict[str, str | int] = {"pulsar.domain": name.domain, "pulsar.tenant": name.tenant,
                                   "pulsar.namespace": name.namespace, "pulsar.topic": name.base.full}
    if name.partition_index >= 0:
        attrs["pulsar.partition.index"] = name.partition_index
    return attrs


def take_snapshot(ctx: AdminContext, sampler: StatsSampler) -> Snapshot:
    """Every instrument's observations now (on the event loop)."""
    out: Snapshot = {name: [] for name in INSTRUMENTS}

    def record(name: str, value: float, attrs: Attrs) -> None:
        out[name].append((value, attrs))

    service = ctx.service
    quotas = service.backlog_quotas
    for topic in service.all_topics():
        if topic.closed:
            continue
        tc = topic_counters(topic, sampler)
        a = topic_attributes(topic)
        record("pulsar.broker.topic.subscription.count", len(tc.subscriptions), a)
        record("pulsar.broker.topic.producer.count", sum(1 for p in topic.producers.values() if not p.replicator), a)
        record("pulsar.broker.topic.consumer.count", sum(s.consumers for s in tc.subscriptions), a)
        record("pulsar.broker.topic.message.incoming.count", tc.msg_in, a)
        record("pulsar.broker.topic.message.outgoing.count", tc.msg_out, a)
        record("pulsar.broker.topic.message.incoming.size", tc.bytes_in, a)
        record("pulsar.broker.topic.message.outgoing.size", tc.bytes_out, a)
        record("pulsar.broker.topic.publish.rate.limit.count", tc.rate_limited_times, a)
        record("pulsar.broker.topic.subscription.delayed.entry.count", 0, a)
        _record_clients(record, topic, a)
        ledger = getattr(topic, "ledger", None)
        if ledger is None:
            continue
        record("pulsar.broker.topic.storage.size", tc.storage_size, a)
        record("pulsar.broker.topic.storage.logical.size", tc.storage_size, a)
        record("pulsar.broker.topic.storage.backlog.size", tc.backlog_size, a)
        record("pulsar.broker.topic.storage.offloaded.size", 0, a)
        record("pulsar.broker.topic.storage.entry.outgoing.count", topic.entries_added, a)
        record("pulsar.broker.topic.storage.entry.incoming.count", ledger.add_stats.entries_read, a)
        size_quota = quotas.quota(topic.name, "destination_storage")
        if size_quota is not None:
            record("pulsar.broker.topic.storage.backlog.quota.limit.size", size_quota.limit_size, a)
        time_quota = quotas.quota(topic.name, "message_age")
        if time_quota is not None:
            record("pulsar.broker.topic.storage.backlog.quota.limit.time", time_quota.limit_time, a)
        evictions = getattr(topic, "backlog_quota_evictions", {})
        for quota, label in (("destination_storage", "size"), ("message_age", "time")):
            record("pulsar.broker.topic.storage.backlog.quota.eviction.count", evictions.get(quota, 0),
                   {**a, "pulsar.backlog.quota.type": label})
        age = getattr(topic, "oldest_backlog_age_s", None)
        if age is not None:
            record("pulsar.broker.topic.storage.backlog.age", age, a)
        buffer = getattr(topic, "txn_buffer", None)
        if buffer is not None:
            for status, n in (("active", len(buffer.ongoing)), ("committed", buffer.committed_count),
                              ("aborted", buffer.aborted_count)):
                record("pulsar.broker.topic.transaction.count", n, {**a, "pulsar.transaction.status": status})
        compactor = getattr(topic, "compactor", None)
        if compactor is not None and compactor.record.runs:
            r = compactor.record
            record("pulsar.broker.topic.compaction.removed.message.count", r.removed_entries, a)
            for status, n in (("success", r.succeeded), ("failure", r.failed)):
                record("pulsar.broker.topic.compaction.operation.count", n, {**a, "pulsar.compaction.status": status})
            record("pulsar.broker.topic.compaction.compacted.entry.count", r.compacted_entries, a)
            record("pulsar.broker.topic.compaction.compacted.entry.size", r.compacted_bytes, a)
        ml = {"pulsar.namespace": topic.name.namespace, "pulsar.managed_ledger.name": ledger.name}
        stats = ledger.add_stats
        record("pulsar.broker.managed_ledger.message.outgoing.count", topic.entries_added,
               {**ml, "pulsar.managed_ledger.operation.status": "success"})
        record("pulsar.broker.managed_ledger.message.incoming.count", stats.entries_read,
               {**ml, "pulsar.managed_ledger.operation.status": "success"})
        record("pulsar.broker.managed_ledger.message.incoming.cache.miss.count", stats.read_ops_cache_missed, ml)
        record("pulsar.broker.managed_ledger.backlog.count", sum(s.backlog for s in tc.subscriptions), ml)
        for name, cursor in sorted(ledger.cursors.items()):
            record("pulsar.broker.managed_ledger.message_range.count", cursor.individually_deleted.range_count(),
                   {**ml, "pulsar.managed_ledger.cursor.name": name})
    record("pulsar.broker.request.topic.lookup.concurrent.usage", service.lookup_stats.pending, {})
    record("pulsar.broker.topic.load.concurrent.usage", service.pending_topic_loads, {})
    _record_cache(record, ctx)
    process = ctx.process
    record("pulsar.broker.connection.count", len(process.connections), {"pulsar.connection.status": "active"})
    record("pulsar.broker.connection.count", process.connections_created, {"pulsar.connection.status": "open"})
    record("pulsar.broker.connection.count", process.connections_closed, {"pulsar.connection.status": "close"})
    record("pulsar.broker.connection.create.operation.count",
           process.connections_created - process.connections_refused,
           {"pulsar.connection.create.operation.status": "success"})
    record("pulsar.broker.connection.create.operation.count", process.connections_refused,
           {"pulsar.connection.create.operation.status": "failure"})
    return out


@dataclass
class _SharedSnapshot:
    """One snapshot per collection, taken on the loop on behalf of the export thread."""

    take: Callable[[], Snapshot]
    loop: asyncio.AbstractEventLoop
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _at: float = -1e9
    _last: Snapshot = field(default_factory=dict)

    def get(self) -> Snapshot:
        with self._lock:
            if time.monotonic() - self._at > SNAPSHOT_REUSE_S:
                self._last = self._from_loop()
                self._at = time.monotonic()  # from when it was taken: a long snapshot is not taken twice
            return self._last

    def _from_loop(self) -> Snapshot:
        async def on_loop() -> Snapshot:
            return self.take()

        try:
            future: Future[Snapshot] = asyncio.run_coroutine_threadsafe(on_loop(), self.loop)
            return future.result(SNAPSHOT_TIMEOUT_S)
        except Exception:  # loop closed or busy: report nothing this time, never fail the export
            log.debug("OpenTelemetry: no snapshot from the event loop", exc_info=True)
            return {}


class OpenTelemetryExport:
    """The broker's OTel meter provider, when the environment enables it (see the module docstring)."""

    def __init__(self, ctx: AdminContext, sampler: StatsSampler, env: Mapping[str, str] | None = None) -> None:
        self.ctx = ctx
        self.sampler = sampler
        self.env = dict(os.environ if env is None else env)
        self.provider: MeterProvider | None = None

    def start(self) -> None:
        """Build the provider and its instruments (on the loop). A bad configuration is logged, not fatal."""
        if not enabled(self.env):
            return
        exporter_name = self.env.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower()
        if exporter_name == "none":
            return
        if exporter_name != "otlp":
            log.error("OpenTelemetry: OTEL_METRICS_EXPORTER=%s is not supported here (otlp or none); "
                      "metrics are not exported", exporter_name)
            return
        try:
            self.provider = self._provider()
        except Exception as e:  # e.g. grpc asked for and not installed
            log.error("OpenTelemetry: metrics are not exported: %s", e)
            return
        log.info("OpenTelemetry: exporting pulsar.broker.* metrics over OTLP")

    def _provider(self) -> MeterProvider:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        protocol = self.env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                                self.env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")).strip().lower()
        exporter: Any
        if protocol == "grpc":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (  # type: ignore[import-not-found]
                    OTLPMetricExporter as GrpcExporter,
                )
            except ImportError as e:
                raise RuntimeError("OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the package "
                                   "opentelemetry-exporter-otlp-proto-grpc; use http/protobuf") from e
            exporter = GrpcExporter()
        elif protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            exporter = OTLPMetricExporter()
        else:
            raise RuntimeError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported (http/protobuf or grpc)")
        defaults = Resource({"pulsar.cluster": self.ctx.config.clusterName, "service.name": SERVICE_NAME,
                             "service.version": __version__})
        from_env = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME (service.name defaults otherwise)
        attrs = dict(from_env.attributes)
        if "OTEL_SERVICE_NAME" not in self.env and "service.name=" not in self.env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
            attrs.pop("service.name", None)
        resource = defaults.merge(Resource(attrs))
        reader = PeriodicExportingMetricReader(exporter)  # OTEL_METRIC_EXPORT_INTERVAL, ms (default 60000)
        provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = provider.get_meter(SCOPE, __version__)
        shared = _SharedSnapshot(lambda: take_snapshot(self.ctx, self.sampler), asyncio.get_running_loop())
        for name, (kind, unit, description) in INSTRUMENTS.items():
            callback = _callback(shared, name)
            if kind == COUNTER:
                meter.create_observable_counter(name, [callback], unit, description)
            elif kind == UP_DOWN:
                meter.create_observable_up_down_counter(name, [callback], unit, description)
            else:
                meter.create_observable_gauge(name, [callback], unit, description)
        return provider

    async def stop(self) -> None:
        """Flush and shut down, off the loop: the final collection asks the loop for a snapshot."""
        provider, self.provider = self.provider, None
        if provider is not None:
            await asyncio.get_running_loop().run_in_executor(None, provider.shutdown)


# Pulsar's ProducerAccessMode names, as the pulsar.producer.access_mode attribute has them.
_ACCESS_MODES = {"Shared": "shared", "Exclusive": "exclusive", "WaitForExclusive": "wait_for_exclusive",
                 "ExclusiveWithFencing": "exclusive_with_fencing"}


def _record_clients(record: Callable[[str, float, Attrs], None], topic: AnyTopic, a: Attrs) -> None:
    """Pulsar's consumer and producer instruments (the consumer attributes of Consumer.getOpenTelemetryAttributes
    that identify it: subscription name and type, consumer name and id)."""
    for sub_name, sub in topic.subscriptions.items():
        sub_attrs = {**a, "pulsar.subscription.name": sub_name, "pulsar.subscription.type": sub.type_name()}
        for c in sub.consumers:
            ca = {**sub_attrs, "pulsar.consumer.name": c.name, "pulsar.consumer.id": c.consumer_id}
            record("pulsar.broker.consumer.message.outgoing.count", c.msg_out, ca)
            record("pulsar.broker.consumer.message.outgoing.size", c.bytes_out, ca)
            record("pulsar.broker.consumer.message.redeliver.count", c.redelivered, ca)
            record("pulsar.broker.consumer.message.unack.count", c.unacked_messages, ca)
            record("pulsar.broker.consumer.message.unack.blocked", 1 if getattr(c, "blocked", False) else 0, ca)
            record("pulsar.broker.consumer.permit.count", max(c.permits, 0), ca)
    for p in topic.producers.values():
        if p.replicator:
            continue
        pa = {**a, "pulsar.producer.name": p.name, "pulsar.producer.id": p.producer_id,
              "pulsar.producer.access_mode": _ACCESS_MODES.get(p.access_mode_name, "shared")}
        record("pulsar.broker.producer.message.incoming.count", p.msg_in, pa)
        record("pulsar.broker.producer.message.incoming.size", p.bytes_in, pa)
        if topic.drops_messages:
            record("pulsar.broker.producer.message.drop.count", 0, pa)  # (SEND never waits here: no drops)


def _record_cache(record: Callable[[str, float, Attrs], None], ctx: AdminContext) -> None:
    """Pulsar's managed-ledger cache instruments (OpenTelemetryManagedLedgerCacheStats)."""
    service = ctx.service
    factory = service.ledger_factory
    cache, storage = getattr(factory, "cache", None), getattr(factory, "stats", None)
    record("pulsar.broker.managed_ledger.count", sum(1 for t in service.topics.values() if not t.closed), {})
    inserted, evicted = getattr(cache, "inserted", 0), getattr(cache, "evictions", 0)
    record("pulsar.broker.managed_ledger.cache.eviction.count", evicted, {})
    for status, n in (("active", len(cache) if cache is not None else 0), ("inserted", inserted),
                      ("evicted", evicted)):
        record("pulsar.broker.managed_ledger.cache.entry.count", n,
               {"pulsar.managed_ledger.cache.entry.status": status})
    record("pulsar.broker.managed_ledger.cache.entry.size", getattr(cache, "size", 0), {})
    for status, attr in (("hit", "cache_hits_total"), ("miss", "cache_misses_total")):
        record("pulsar.broker.managed_ledger.cache.operation.count", getattr(storage, attr, 0),
               {"pulsar.managed_ledger.cache.operation.status": status})


def _callback(shared: _SharedSnapshot, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    from opentelemetry.metrics import Observation

    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, dict(attrs)) for value, attrs in shared.get().get(name, [])]

    return observe
