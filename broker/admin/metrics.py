"""Prometheus exposition with Apache Pulsar's metric names and labels.

Read at scrape time from the live broker objects; nothing is updated per message. Counters
(pulsar_in_messages_total, ...) are the plain integers the service objects keep; rates
(pulsar_rate_in, ...) come from the StatsSampler's snapshot over the last stats interval. The
per-topic and per-subscription values are taken from the same builders as the admin stats JSON,
so /metrics and ``.../stats`` agree. The families and their help texts are in metric_families.py;
docs/metrics.md lists them with their labels, units and the switches that govern them.

As in Pulsar 4 (NamespaceStatsAggregator):
- ``pulsar_broker_*`` aggregates are always there (0 on an idle broker);
- exposeTopicLevelMetricsInPrometheus (on): topic and subscription series, plus pulsar_topics_count
  per namespace; off: one series per namespace instead (pulsar_msg_backlog with remote_cluster="local");
- exposeConsumerLevelMetricsInPrometheus / exposeProducerLevelMetricsInPrometheus: per consumer / producer;
- splitTopicAndPartitionLabelInPrometheus: topic="<partitioned topic>" partition="<n>" ("-1" otherwise);
- exposeManagedLedgerMetricsInPrometheus: pulsar_ml_* per namespace; exposeManagedCursorMetricsInPrometheus:
  pulsar_ml_cursor_* per cursor; replicationMetricsEnabled: pulsar_replication_*.
Besides, on a broker with no topic loaded, the cluster-only zero series Pulsar 2.x printed
(pulsar_topics_count{cluster} 0, ...) are written, so dashboards of that age still see the broker.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.process_collector import ProcessCollector

from broker.admin.exposition import Exposition, escape
from broker.admin.metric_families import ADD_BUCKETS, COMPACTION_LATENCY, FAMILIES
from broker.admin.scrape_stats import SubscriptionCounters, TopicCounters, topic_counters
from broker.admin.stats import StatsSampler, consumer_stats, publisher_stats, replication_stats
from broker.auth.providers import EXPIRING_TOKEN_MINUTES_BUCKETS, TokenProvider
from broker.metadata.policy_table import BACKLOG_QUOTAS
from broker.metadata.policy_values import DESTINATION_STORAGE, MESSAGE_AGE
from broker.topic_name import is_system_topic
from managed_ledger.stats import ADD_LATENCY_BUCKETS_US, ENTRY_SIZE_BUCKETS, CursorStats
from metadata_store.stats import LATENCY_BUCKETS_MS, StoreStats

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence

    from broker.admin.context import AdminContext
    from broker.service.broker_service import AnyTopic, BrokerService
    from broker.service.compaction import CompactionRecord
    from broker.service.kinds import AnySubscription
    from broker.service.operation_stats import TxnBufferClientStats
    from managed_ledger.disk_space import StorageGuard

PARTITION_SUFFIX = "-partition-"
# The scrape gives the event loop back once it has run SLICE_S (checked every TOPICS_PER_CHECK
# topics, a fraction of a millisecond): a scrape of 10,000 topics takes seconds of CPU, and the
# loop must keep serving clients meanwhile.
SLICE_S = 0.01
TOPICS_PER_CHECK = 8
# PrometheusLabels.backlogQuotaTypeLabel: the quota_type label of each backlog quota type.
QUOTA_TYPE_LABELS = (("destination_storage", "size"), ("message_age", "time"))
# Pulsar's always-present zero series before PIP-214 (printDefaultBrokerStats), cluster label only.
IDLE_ZERO_FAMILIES = ("pulsar_topics_count", "pulsar_subscriptions_count", "pulsar_producers_count",
                      "pulsar_consumers_count", "pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in",
                      "pulsar_throughput_out", "pulsar_storage_size", "pulsar_storage_logical_size",
                      "pulsar_storage_write_rate", "pulsar_storage_read_rate", "pulsar_msg_backlog")
_REPLICATION = (("pulsar_replication_rate_in", "msgRateIn"), ("pulsar_replication_rate_out", "msgRateOut"),
                ("pulsar_replication_throughput_in", "msgThroughputIn"),
                ("pulsar_replication_throughput_out", "msgThroughputOut"),
                ("pulsar_replication_backlog", "replicationBacklog"),
                ("pulsar_replication_rate_expired", "msgRateExpired"),
                ("pulsar_replication_delay_in_seconds", "replicationDelayInSeconds"))
_SUB_ZEROS = ("pulsar_subscription_filter_processed_msg_count", "pulsar_subscription_filter_accepted_msg_count",
              "pulsar_subscription_filter_rejected_msg_count", "pulsar_subscription_filter_rescheduled_msg_count",
              "pulsar_subscription_delayed_message_index_size_bytes")
_CONSUMER_GAUGES = (("pulsar_consumer_msg_rate_redeliver", "msgRateRedeliver"),
                    ("pulsar_consumer_unacked_messages", "unackedMessages"),
                    ("pulsar_consumer_blocked_on_unacked_messages", "blockedConsumerOnUnackedMsgs"),
                    ("pulsar_consumer_msg_rate_out", "msgRateOut"),
                    ("pulsar_consumer_msg_ack_rate", "messageAckRate"),
                    ("pulsar_consumer_msg_throughput_out", "msgThroughputOut"),
                    ("pulsar_consumer_available_permits", "availablePermits"),
                    ("pulsar_out_bytes_total", "bytesOutCounter"), ("pulsar_out_messages_total", "msgOutCounter"))
_ZEROS = (0,) * len(_SUB_ZEROS)
# A topic's own series (values from the ``values`` dict of write(), then those _write_topic reads), in order.
_TOPIC_VALUES = ("pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
                 "pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
                 "pulsar_average_msg_size", "pulsar_storage_size", "pulsar_storage_logical_size",
                 "pulsar_msg_backlog", "pulsar_storage_write_rate", "pulsar_storage_read_rate",
                 "pulsar_storage_read_cache_misses_rate", "pulsar_storage_backlog_size",
                 "pulsar_publish_rate_limit_times", "pulsar_storage_offloaded_size",
                 "pulsar_in_bytes_total", "pulsar_in_messages_total")
_TOPIC_FAMILIES = (*_TOPIC_VALUES, "pulsar_txn_tb_active_total", "pulsar_txn_tb_aborted_total",
                   "pulsar_txn_tb_committed_total", "pulsar_delayed_message_index_size_bytes",
                   "pulsar_storage_backlog_quota_limit", "pulsar_storage_backlog_quota_limit_time",
                   "pulsar_storage_backlog_age_seconds", "pulsar_py_publish_rate_limited_total")
# Integer counters of the storage's own stats object, exported as pulsar_py_ledger_<name>.
_LEDGER_COUNTERS = ("entries_written_total", "bytes_written_total", "cursor_persists_total", "corrupt_records_total",
                    "truncated_bytes_total", "write_errors_total", "read_errors_total", "segment_reopens_total")
_LEDGER_HISTOGRAMS = (("fsync_latency", "pulsar_py_ledger_fsync_latency_seconds"),
                      ("group_commit_size", "pulsar_py_ledger_group_commit_entries"))


def _ranges(bounds: Sequence[float], scale: float) -> list[str]:
    """Pulsar's ``quantile`` values of the pulsar_ml_*Buckets series: "low_high" of each range."""
    edges = [0.0, *(b / scale for b in bounds)]
    return [f"{lo:.1f}_{hi:.1f}" for lo, hi in itertools.pairwise(edges)]


_LATENCY_RANGES = _ranges(ADD_LATENCY_BUCKETS_US, 1000.0)  # microseconds -> ms
_SIZE_RANGES = _ranges(ENTRY_SIZE_BUCKETS, 1.0)


class HistogramSnapshot(Protocol):
    count: int
    total: float

    def cumulative(self) -> Sequence[tuple[float, int]]: ...


def _namespace_sums() -> defaultdict[str, float]:
    return defaultdict(float)


class BrokerMetrics:
    """Builds the /metrics text. Keeps each topic's label prefix between scrapes."""

    def __init__(self, ctx: AdminContext, sampler: StatsSampler) -> None:
        self.ctx = ctx
        self.sampler = sampler
        self._labels: dict[str, str] = {}  # topic full name -> its cluster/namespace/topic labels
        self._process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._process)  # process_* (Pulsar's JVM exporter has these too)

    # -- labels ------------------------------------------------------------------------------------
    def _topic_labels(self, topic: AnyTopic, previous: dict[str, str]) -> str:
        name = topic.full_name
        labels = previous.get(name)
        if labels is None:
            cluster = escape(self.ctx.config.clusterName)
            ns = escape(topic.name.namespace)
            if self.ctx.config.splitTopicAndPartitionLabelInPrometheus:
                base, sep, index = name.rpartition(PARTITION_SUFFIX)
                if not sep or not index.isdigit():
                    base, index = name, "-1"
                labels = f'cluster="{cluster}",namespace="{ns}",topic="{escape(base)}",partition="{index}"'
            else:
                labels = f'cluster="{cluster}",namespace="{ns}",topic="{escape(name)}"'
        self._labels[name] = labels
        return labels

    # -- the scrape --------------------------------------------------------------------------------
    def render(self) -> bytes:
        """The whole text in one go (tools and benchmarks; the HTTP handler uses render_async)."""
        out = Exposition(FAMILIES)
        for _ in self.write(out):
            pass
        return out.text().encode() + bytes(generate_latest(self._process))

    async def stream(self) -> AsyncIterator[bytes]:
        """The text in chunks, giving the loop back every SLICE_S of work and after each family,
        so that clients are served during a long scrape (seconds at 10,000 topics)."""
        out = Exposition(FAMILIES)
        for _ in self.write(out):
            await asyncio.sleep(0)
        for chunk in out.chunks():
            yield chunk
            # The loop's turn between families: writing to the response does not give it back
            # (aiohttp's drain returns at once unless the transport is paused), and at 10,000
            # topics the 127 MB took seconds without one.
            await asyncio.sleep(0)
        yield bytes(generate_latest(self._process))

    def write(self, out: Exposition) -> Iterator[None]:
        """Write every family to ``out``; yields between slices of topics (the caller may let the
        loop run there: topics that close meanwhile are skipped)."""
        ctx, cfg, sampler = self.ctx, self.ctx.config, self.sampler
        service = ctx.service
        cl = f'cluster="{escape(cfg.clusterName)}"'
        topics = [t for t in service.all_topics() if not t.closed]
        previous, self._labels = self._labels, {}
        by_topic = cfg.exposeTopicLevelMetricsInPrometheus
        broker: defaultdict[str, float] = defaultdict(float)
        namespaces: dict[str, defaultdict[str, float]] = {}
        replication_by_ns: dict[str, dict[str, defaultdict[str, float]]] = {}
        ml_by_ns: dict[str, defaultdict[str, float]] = {}
        in_system = out_internal = 0
        slice_started = time.perf_counter()
        for i, topic in enumerate(topics):
            if i % TOPICS_PER_CHECK == 0 and time.perf_counter() - slice_started > SLICE_S:
                out.flush()  # (the slice's lines become one part per family: see exposition.py)
                yield
                slice_started = time.perf_counter()
                if topic.closed:
                    continue
            tc = topic_counters(topic, sampler)
            subs = tc.subscriptions
            ns = topic.name.namespace
            persistent = hasattr(topic, "ledger")
            producers = [p for p in topic.producers.values() if not p.replicator]
            evictions = getattr(topic, "backlog_quota_evictions", None) or {}
            buckets = _add_buckets(topic)
            values = {
                "pulsar_subscriptions_count": len(subs), "pulsar_producers_count": len(producers),
                "pulsar_consumers_count": sum(s.consumers for s in subs),
                "pulsar_msg_backlog": sum(s.backlog for s in subs),
                "pulsar_storage_write_rate": sampler.topic_entries_in.get(topic, 0.0),
                "pulsar_storage_read_rate": sampler.topic_entries_read.get(topic, 0.0),
                "pulsar_storage_read_cache_misses_rate": sampler.topic_read_misses.get(topic, 0.0),
                "pulsar_consumer_msg_ack_rate": sum(s.ack_rate for s in subs),
                "pulsar_out_bytes_total": tc.bytes_out, "pulsar_out_messages_total": tc.msg_out,
                "pulsar_subscription_delayed": 0,
                "pulsar_subscription_in_replay": sum(_in_replay(s.sub) for s in subs),
                "pulsar_rate_in": tc.rate_in, "pulsar_rate_out": tc.rate_out,
                "pulsar_throughput_in": tc.throughput_in, "pulsar_throughput_out": tc.throughput_out,
                "pulsar_average_msg_size": tc.average_msg_size, "pulsar_storage_size": tc.storage_size,
                "pulsar_storage_logical_size": tc.storage_size, "pulsar_storage_backlog_size": tc.backlog_size,
                "pulsar_publish_rate_limit_times": tc.rate_limited_times, "pulsar_storage_offloaded_size": 0,
                "pulsar_in_bytes_total": tc.bytes_in, "pulsar_in_messages_total": tc.msg_in,
            }
            for name in ("pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
                         "pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
                         "pulsar_storage_size", "pulsar_storage_logical_size", "pulsar_storage_write_rate",
                         "pulsar_storage_read_rate", "pulsar_storage_read_cache_misses_rate", "pulsar_msg_backlog"):
                broker[name] += values[name]
            for quota, _label in QUOTA_TYPE_LABELS:
                broker[quota] += evictions.get(quota, 0)
            if is_system_topic(topic.full_name):
                in_system += tc.bytes_in
            # Replication stats only for a replicated topic (a replicator, or a remote one producing here).
            all_replication = (replication_stats(topic, sampler)
                               if topic.replicators or len(producers) != len(topic.producers) else {})
            out_internal += sum(r["bytesOutCounter"] for r in all_replication.values())
            broker["in_bytes"] += tc.bytes_in
            broker["out_bytes"] += tc.bytes_out
            replication = all_replication if cfg.replicationMetricsEnabled else {}
            if persistent and cfg.exposeManagedLedgerMetricsInPrometheus:
                _ml_sums(ml_by_ns.setdefault(ns, _namespace_sums()), values, buckets, sampler.interval_s,
                         _switch_counts(topic), sampler.topic_mark_deletes.get(topic, 0.0))
            if by_topic:
                namespaces.setdefault(ns, _namespace_sums())["pulsar_topics_count"] += 1
                labels = self._topic_labels(topic, previous)
                self._write_topic(out, topic, labels, tc, values, evictions, buckets, replication)
            else:
                sums = namespaces.setdefault(ns, _namespace_sums())
                sums["pulsar_topics_count"] += 1
                for name, value in values.items():
                    if name not in ("pulsar_average_msg_size", "pulsar_publish_rate_limit_times"):
                        sums[name] += value
                for quota, _label in QUOTA_TYPE_LABELS:
                    sums[quota] += evictions.get(quota, 0)
                for name, value in buckets:
                    sums[name] += value
                for name, value in zip(_TXN_BUFFER_FAMILIES, _txn_buffer_counts(topic), strict=True):
                    sums[name] += value
                for remote, r in replication.items():
                    rs = replication_by_ns.setdefault(ns, {}).setdefault(remote, _namespace_sums())
                    for name, key in _REPLICATION:
                        rs[name] += float(r[key])
                    rs["pulsar_replication_connected_count"] += 1 if r["connected"] else 0
                    rs["pulsar_replication_disconnected_count"] += 0 if r["connected"] else 1

        if not topics:
            for name in IDLE_ZERO_FAMILIES:
                out.add(name, cl, 0)
        for ns, sums in sorted(namespaces.items()):
            nl = f'{cl},namespace="{escape(ns)}"'
            out.add("pulsar_topics_count", nl, sums.pop("pulsar_topics_count"))
            if not by_topic:
                self._write_namespace(out, nl, sums, replication_by_ns.get(ns, {}))
        self._write_broker(out, cl, len(topics), broker, in_system, out_internal)
        for ns, sums in sorted(ml_by_ns.items()):
            _write_ml(out, f'{cl},namespace="{escape(ns)}"', sums)
        if cfg.exposeManagedCursorMetricsInPrometheus:
            self._write_cursors(out, cl, topics)
        self._write_cache(out, cl, sum(1 for t in topics if hasattr(t, "ledger")))
        self._write_ledger_storage(out, cl)
        _write_disk_space(out, cl, self.ctx.service.disk_space)
        self._write_transactions(out, cl)

    # -- topic level -------------------------------------------------------------------------------
    def _write_topic(self, out: Exposition, topic: AnyTopic, labels: str, tc: TopicCounters,
                     values: dict[str, float], evictions: dict[str, int], buckets: list[tuple[str, float]],
                     replication: dict[str, dict[str, Any]]) -> None:
        cfg = self.ctx.config
        limit_size, limit_time, age = self._backlog_quota(topic)
        active, aborted, committed = _txn_buffer_counts(topic)
        topic_values = (*[values[name] for name in _TOPIC_VALUES], active, aborted, committed, 0, limit_size,
                        limit_time, age, tc.rate_limited_times)
        # One line per family, appended straight to the family's lines (no call per sample).
        for lines, name, value in zip(out.families(_TOPIC_FAMILIES), _TOPIC_FAMILIES, topic_values, strict=True):
            lines.append(f"{name}{{{labels}}} {value!r}\n")
        for quota, label in QUOTA_TYPE_LABELS:
            out.add("pulsar_storage_backlog_quota_exceeded_evictions_total", f'{labels},quota_type="{label}"',
                    evictions.get(quota, 0))
        if buckets:
            for lines, (name, value) in zip(out.families(_ADD_BUCKET_FAMILIES), buckets, strict=True):
                lines.append(f"{name}{{{labels}}} {value!r}\n")
        compactor = getattr(topic, "compactor", None)
        if compactor is not None and compactor.record.runs:
            _write_compaction(out, labels, compactor.record)
        if cfg.exposeProducerLevelMetricsInPrometheus and cfg.exposePublisherStats:
            for producer in topic.producers.values():
                if producer.replicator:
                    continue
                p = publisher_stats(producer, self.sampler)
                pl = f'{labels},producer_name="{escape(p["producerName"])}",producer_id="{p["producerId"]}"'
                out.add("pulsar_producer_msg_rate_in", pl, p["msgRateIn"])
                out.add("pulsar_producer_msg_throughput_in", pl, p["msgThroughputIn"])
                out.add("pulsar_producer_msg_average_Size", pl, p["averageMsgSize"])
        for s in tc.subscriptions:
            sl = f'{labels},subscription="{escape(s.name)}"'
            _write_subscription(out, sl, s)
            sub = s.sub
            dispatcher = sub.dispatcher if sub is not None else None
            out.add("pulsar_py_permit_invariant_drift", sl,
                    dispatcher.invariant_drift_count if dispatcher is not None else 0)
            if s.drop_rate is not None and sub is not None:
                out.add("pulsar_py_subscription_msg_dropped_total", sl, sub.msg_dropped)
            if cfg.exposeConsumerLevelMetricsInPrometheus and sub is not None:
                for c in sub.consumers:
                    cs = consumer_stats(c, self.sampler)
                    ccl = f'{sl},consumer_name="{escape(c.name)}",consumer_id="{c.consumer_id}"'
                    for name, key in _CONSUMER_GAUGES:
                        out.add(name, ccl, float(cs[key]))
        for remote, r in replication.items():
            rl = f'{labels},remote_cluster="{escape(remote)}"'
            for name, key in _REPLICATION:
                out.add(name, rl, float(r[key]))
            out.add("pulsar_replication_connected_count", rl, 1 if r["connected"] else 0)
            out.add("pulsar_replication_disconnected_count", rl, 0 if r["connected"] else 1)

    def _backlog_quota(self, topic: AnyTopic) -> tuple[float, float, float]:
        """(size limit in bytes, time limit in seconds, age of the oldest backlog in seconds); -1 = none.
        (One policy resolution for both types: BacklogQuotaManager.quota resolves them one by one.)"""
        quotas = self.ctx.service.policies.get(topic.name, BACKLOG_QUOTAS)
        size, age = quotas[DESTINATION_STORAGE], quotas[MESSAGE_AGE]
        oldest = getattr(topic, "oldest_backlog_age_s", None)
        return (float(size.limit_size) if size.limit_size >= 0 else -1.0,
                float(age.limit_time) if age.limit_time >= 0 else -1.0,
                float(oldest) if oldest is not None else -1.0)

    # -- namespace level ---------------------------------------------------------------------------
    @staticmethod
    def _write_namespace(out: Exposition, nl: str, sums: dict[str, float],
                         replication: dict[str, defaultdict[str, float]]) -> None:
        for name in ("pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
                     "pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
                     "pulsar_consumer_msg_ack_rate", "pulsar_in_bytes_total", "pulsar_in_messages_total",
                     "pulsar_out_bytes_total", "pulsar_out_messages_total", "pulsar_storage_size",
                     "pulsar_storage_logical_size", "pulsar_storage_backlog_size", "pulsar_storage_offloaded_size",
                     "pulsar_storage_write_rate", "pulsar_storage_read_rate", "pulsar_storage_read_cache_misses_rate",
                     "pulsar_subscription_delayed", "pulsar_subscription_in_replay"):
            out.add(name, nl, sums.get(name, 0.0))
        for name in _TXN_BUFFER_FAMILIES:
            out.add(name, nl, sums.get(name, 0.0))
        out.add("pulsar_delayed_message_index_size_bytes", nl, 0)
        out.add("pulsar_msg_backlog", f'{nl},remote_cluster="local"', sums.get("pulsar_msg_backlog", 0.0))
        for quota, label in QUOTA_TYPE_LABELS:
            out.add("pulsar_storage_backlog_quota_exceeded_evictions_total", f'{nl},quota_type="{label}"',
                    sums.get(quota, 0.0))
        for prefix, names, _doc in ADD_BUCKETS:
            for bucket in (*names, "count", "sum"):
                name = f"{prefix}_{bucket}"
                out.add(name, nl, sums.get(name, 0.0))
        for remote, rs in sorted(replication.items()):
            rl = f'{nl},remote_cluster="{escape(remote)}"'
            for name, value in rs.items():
                out.add(name, rl, value)

    # -- broker level ------------------------------------------------------------------------------
    def _write_broker(self, out: Exposition, cl: str, n_topics: int, b: dict[str, float], in_system: int,
                      out_internal: int) -> None:
        process = self.ctx.process
        for name, key in (("pulsar_broker_topics_count", None), ("pulsar_broker_subscriptions_count",
                                                                  "pulsar_subscriptions_count"),
                          ("pulsar_broker_producers_count", "pulsar_producers_count"),
                          ("pulsar_broker_consumers_count", "pulsar_consumers_count"),
                          ("pulsar_broker_rate_in", "pulsar_rate_in"), ("pulsar_broker_rate_out", "pulsar_rate_out"),
                          ("pulsar_broker_throughput_in", "pulsar_throughput_in"),
                          ("pulsar_broker_throughput_out", "pulsar_throughput_out"),
                          ("pulsar_broker_storage_size", "pulsar_storage_size"),
                          ("pulsar_broker_storage_logical_size", "pulsar_storage_logical_size"),
                          ("pulsar_broker_storage_write_rate", "pulsar_storage_write_rate"),
                          ("pulsar_broker_storage_read_rate", "pulsar_storage_read_rate"),
                          ("pulsar_broker_storage_read_cache_misses_rate", "pulsar_storage_read_cache_misses_rate"),
                          ("pulsar_broker_msg_backlog", "pulsar_msg_backlog")):
            out.add(name, cl, n_topics if key is None else b.get(key, 0.0))
        for quota, label in QUOTA_TYPE_LABELS:
            out.add("pulsar_broker_storage_backlog_quota_exceeded_evictions_total", f'{cl},quota_type="{label}"',
                    b.get(quota, 0.0))
        out.add("pulsar_broker_out_bytes_total", f'{cl},system_subscription="false"', b.get("out_bytes", 0.0))
        out.add("pulsar_broker_out_bytes_total", f'{cl},system_subscription="true"', out_internal)
        out.add("pulsar_broker_in_bytes_total", f'{cl},system_topic="false"', b.get("in_bytes", 0.0) - in_system)
        out.add("pulsar_broker_in_bytes_total", f'{cl},system_topic="true"', in_system)
        out.add("pulsar_broker_throttled_connections", cl,
                sum(1 for c in process.connections if getattr(c, "throttled_by_pending_sends", False)))
        out.add("pulsar_broker_throttled_connections_global_limit", cl, process.connections_throttled_by_buffer)
        bl = f'{cl},broker="{escape(f"{process.advertised_host}:{process.web_port}")}",metric="broker_connection"'
        out.add("pulsar_active_connections", bl, len(process.connections))
        out.add("pulsar_connection_created_total_count", bl, process.connections_created)
        out.add("pulsar_connection_create_success_count", bl,
                process.connections_created - process.connections_refused)
        out.add("pulsar_connection_create_fail_count", bl, process.connections_refused)
        out.add("pulsar_connection_closed_total_count", bl, process.connections_closed)
        service = self.ctx.service
        _write_operations(out, cl, bl.replace('metric="broker_connection"', 'metric="pulsar_topic_load_times"'),
                          service)
        out.add("pulsar_py_inactive_topics_deleted_total", cl, service.inactive_topics.deleted_total)
        out.add("pulsar_py_subscriptions_expired_total", cl, service.housekeeping.subscriptions_expired_total)
        authn = self.ctx.security.authentication
        for (provider, method), n in sorted(authn.successes_by.items()):
            out.add("pulsar_authentication_success_total",
                    f'{cl},provider_name="{escape(provider)}",auth_method="{escape(method)}"', n)
        for (provider, method, reason), n in sorted(authn.failures_by.items()):
            out.add("pulsar_authentication_failures_total", f'{cl},provider_name="{escape(provider)}",'
                    f'auth_method="{escape(method)}",reason="{escape(reason)}"', n)
        _write_tokens(out, cl, authn.providers.get("token", []))

    # -- managed ledgers, cursors, cache -------------------------------------------------------------
    def _write_cursors(self, out: Exposition, cl: str, topics: list[AnyTopic]) -> None:
        for topic in topics:
            ledger = getattr(topic, "ledger", None)
            if ledger is None:
                continue
            base = f'{cl},namespace="{escape(topic.name.namespace)}",ledger_name="{escape(ledger.name)}"'
            cursor_stats = getattr(ledger, "cursor_stats", {})
            for name, cursor in sorted(ledger.cursors.items()):
                labels = f'{base},cursor_name="{escape(name)}"'
                out.add("pulsar_ml_cursor_nonContiguousDeletedMessagesRange", labels,
                        cursor.individually_deleted.range_count())
                stats = cursor_stats.get(name) or _NO_CURSOR_STATS
                for family, attr in _CURSOR_STATS:
                    out.add(family, labels, getattr(stats, attr))

    def _write_transactions(self, out: Exposition, cl: str) -> None:
        """Pulsar's transaction coordinator series (its TransactionAggregator names), one per coordinator."""
        transactions = self.ctx.service.transactions
        if transactions is None:
            return
        for tc_id, tc in sorted(transactions.coordinators.items()):
            labels = f'{cl},coordinator_id="{tc_id}"'
            out.add("pulsar_txn_active_count", labels, len(tc.txns))
            out.add("pulsar_txn_created_count", labels, tc.created)
            out.add("pulsar_txn_committed_count", labels, tc.committed)
            out.add("pulsar_txn_aborted_count", labels, tc.aborted)
            out.add("pulsar_txn_timeout_count", labels, tc.timed_out)
            out.add("pulsar_txn_append_log_count", labels, tc.log.appended)
        _write_txn_buffer_client(out, cl, transactions.tb_client_stats)

    def _write_cache(self, out: Exposition, cl: str, open_ledgers: int) -> None:
        cache = getattr(self.ctx.service.ledger_factory, "cache", None)
        s = self.sampler
        out.add("pulsar_ml_count", cl, open_ledgers)
        out.add("pulsar_ml_cache_used_size", cl, getattr(cache, "size", 0))
        out.add("pulsar_ml_cache_entries", cl, len(cache) if cache is not None else 0)
        out.add("pulsar_ml_cache_inserted_entries_total", cl, getattr(cache, "inserted", 0))
        out.add("pulsar_ml_cache_evicted_entries_total", cl, getattr(cache, "evictions", 0))
        out.add("pulsar_ml_cache_evictions", cl, round(s.cache_evictions_rate * s.interval_s))
        out.add("pulsar_ml_cache_hits_rate", cl, s.cache_hits_rate)
        out.add("pulsar_ml_cache_misses_rate", cl, s.cache_misses_rate)
        out.add("pulsar_ml_cache_hits_throughput", cl, s.cache_hits_throughput)
        out.add("pulsar_ml_cache_misses_throughput", cl, s.cache_misses_throughput)

    def _write_ledger_storage(self, out: Exposition, cl: str) -> None:
        stats = getattr(self.ctx.service.ledger_factory, "stats", None)
        if stats is None:
            return
        for attr, name in _LEDGER_HISTOGRAMS:
            snapshot = getattr(getattr(stats, attr, None), "snapshot", None)
            if snapshot is None:
                continue
            snap: HistogramSnapshot = snapshot()
            cumulative = list(snap.cumulative())
            if not cumulative or cumulative[-1][0] != float("inf"):
                cumulative.append((float("inf"), snap.count))
            out.histogram(name, cl, cumulative, snap.count, snap.total)
        for attr in _LEDGER_COUNTERS:
            value = getattr(stats, attr, None)
            if isinstance(value, int):
                out.add(f"pulsar_py_ledger_{attr}", cl, value)
        hits, misses = getattr(stats, "cache_hits_total", None), getattr(stats, "cache_misses_total", None)
        if isinstance(hits, int) and isinstance(misses, int):
            out.add("pulsar_py_ledger_cache_hits_total", cl, hits)
            out.add("pulsar_py_ledger_cache_misses_total", cl, misses)
            out.add("pulsar_py_ledger_cache_hit_ratio", cl, hits / (hits + misses) if hits + misses else 0.0)


# Pulsar's quantiles: NamespaceService's lookup summary, and DimensionStats' (topic load times).
LOOKUP_QUANTILES = (0.5, 0.99, 0.999, 1.0)
TOPIC_LOAD_QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999)
SCHEMA_QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
_TOPIC_LOAD_GAUGES = (("median", 0.5), ("75percentile", 0.75), ("95percentile", 0.95), ("99_percentile", 0.99),
                      ("99_9_percentile", 0.999), ("99_99_percentile", 0.9999))


# Pulsar's ManagedCursorMetrics series (ManagedCursorMXBean) and the CursorStats counter each one reads.
_CURSOR_STATS = (("pulsar_ml_cursor_persistLedgerSucceed", "persist_ledger_succeed"),
                 ("pulsar_ml_cursor_persistLedgerErrors", "persist_ledger_errors"),
                 ("pulsar_ml_cursor_persistZookeeperSucceed", "persist_zookeeper_succeed"),
                 ("pulsar_ml_cursor_persistZookeeperErrors", "persist_zookeeper_errors"),
                 ("pulsar_ml_cursor_writeLedgerSize", "write_ledger_size"),
                 ("pulsar_ml_cursor_writeLedgerLogicalSize", "write_ledger_logical_size"),
                 ("pulsar_ml_cursor_readLedgerSize", "read_ledger_size"))
_NO_CURSOR_STATS = CursorStats()  # (a cursor whose state was never written: zeros)


def _write_operations(out: Exposition, cl: str, load_labels: str, service: BrokerService) -> None:
    """Lookups and topic loads: Pulsar's NamespaceService summary and counters, BrokerService's pending
    gauges, BrokerOperabilityMetrics' topic-load series (labels cluster, broker, metric); and the schema
    registry's operations per namespace (SchemaRegistryStats)."""
    lookups, loads = service.lookup_stats, service.topic_load_stats
    out.summary("pulsar_broker_lookup", cl, [(q, lookups.latency.quantile(q)) for q in LOOKUP_QUANTILES],
                lookups.latency.count, lookups.latency.sum_ms)
    out.add("pulsar_broker_lookup_answers_total", cl, lookups.answers)
    out.add("pulsar_broker_lookup_redirects_total", cl, lookups.redirects)
    out.add("pulsar_broker_lookup_failures_total", cl, lookups.failures)
    out.add("pulsar_broker_lookup_pending_requests", cl, lookups.pending)
    out.add("pulsar_broker_topic_load_pending_requests", cl, service.pending_topic_loads)
    times = loads.times
    out.summary("pulsar_topic_load_times", cl, [(q, times.quantile(q)) for q in TOPIC_LOAD_QUANTILES],
                times.count, times.sum_ms)
    out.add("pulsar_topic_load_time_mean_ms", load_labels, times.mean())
    for name, q in _TOPIC_LOAD_GAUGES:
        out.add(f"pulsar_topic_load_time_{name}_ms", load_labels, times.quantile(q))
    out.add("pulsar_topic_load_rate_s", load_labels, times.last_count)
    out.add("pulsar_topic_load_failed_count", load_labels, loads.failed)
    out.add("topic_load_failed_total", cl, loads.failed)
    store_stats = getattr(service.metadata_store, "stats", None)
    if isinstance(store_stats, StoreStats):
        sl = f'{cl},name="metadata-store"'  # (Pulsar's MetadataStoreConfig.METADATA_STORE)
        for (op, status), h in store_stats.latency.items():
            cumulative = list(zip((*LATENCY_BUCKETS_MS, math.inf), itertools.accumulate(h.counts), strict=True))
            out.histogram("pulsar_metadata_store_ops_latency_ms", f'{sl},type="{op}",status="{status}"', cumulative,
                          h.count, h.sum_ms)
        out.add("pulsar_metadata_store_put_bytes_total", sl, store_stats.put_bytes)
    for ns, st in sorted(service.schemas.stats.by_namespace.items()):
        nl = f'{cl},namespace="{escape(ns)}"'
        for name, value in (("pulsar_schema_get_ops_failed_total", st.get_failed),
                            ("pulsar_schema_put_ops_failed_total", st.put_failed),
                            ("pulsar_schema_del_ops_failed_total", st.delete_failed),
                            ("pulsar_schema_compatible_total", st.compatible),
                            ("pulsar_schema_incompatible_total", st.incompatible)):
            out.add(name, nl, value)
        for name, summary in (("pulsar_schema_get_ops_latency", st.get), ("pulsar_schema_put_ops_latency", st.put),
                              ("pulsar_schema_del_ops_latency", st.delete)):
            out.summary(name, nl, [(q, summary.quantile(q)) for q in SCHEMA_QUANTILES], summary.count, summary.sum_ms)


# Pulsar's TransactionBufferClientStatsImpl: summaries with these quantiles, observed in nanoseconds.
TXN_CLIENT_QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
_NS_PER_MS = 1_000_000


def _write_txn_buffer_client(out: Exposition, cl: str, stats: TxnBufferClientStats) -> None:
    """pulsar_txn_tb_client_*: ends of transactions on topics, by namespace (and topic, topic level on)."""
    out.add("pulsar_txn_tb_client_pending_requests", cl, stats.pending)
    for (ns, topic), s in sorted(stats.by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        labels = f'{cl},namespace="{escape(ns)}"' + (f',topic="{escape(topic)}"' if topic is not None else "")
        out.add("pulsar_txn_tb_client_commit_failed_total", labels, s.commit_failed)
        out.add("pulsar_txn_tb_client_abort_failed_total", labels, s.abort_failed)
        for name, summary in (("pulsar_txn_tb_client_commit_latency", s.commit),
                              ("pulsar_txn_tb_client_abort_latency", s.abort)):
            out.summary(name, labels, [(q, summary.quantile(q) * _NS_PER_MS) for q in TXN_CLIENT_QUANTILES],
                        summary.count, summary.sum_ms * _NS_PER_MS)


def _write_tokens(out: Exposition, cl: str, providers: Sequence[object]) -> None:
    """Pulsar's AuthenticationMetricsToken series, when the token provider is configured."""
    tokens = [p for p in providers if isinstance(p, TokenProvider)]
    if not tokens:
        return
    out.add("pulsar_expired_token_total", cl, sum(p.expired_tokens for p in tokens))
    per_bucket = [sum(counts) for counts in zip(*(p.expiring_minutes for p in tokens), strict=True)]
    cumulative = list(zip((*EXPIRING_TOKEN_MINUTES_BUCKETS, math.inf), itertools.accumulate(per_bucket),
                          strict=True))
    out.histogram("pulsar_expiring_token_minutes", cl, cumulative, sum(per_bucket),
                  sum(p.expiring_minutes_sum for p in tokens))


def _write_disk_space(out: Exposition, cl: str, disk: StorageGuard | None) -> None:
    """The file ledger's free-space floor, or BookKeeper's writable bookies (docs/exhaustion.md): whether new
    entries are refused, and why."""
    if disk is None:
        return
    counts = disk.bookie_counts
    if counts is not None:
        out.add("pulsar_py_bookkeeper_writable_bookies", cl, counts[0])
        out.add("pulsar_py_bookkeeper_readonly_bookies", cl, counts[1])
    disk.writable()  # (measures again at most once per check interval)
    out.add("pulsar_py_storage_write_disabled", cl, 1 if disk.write_disabled else 0)
    out.add("pulsar_py_storage_disk_warning", cl, 1 if disk.warning else 0)
    if disk.last is not None:
        out.add("pulsar_py_storage_disk_usage_ratio", cl, disk.last.usage)
        out.add("pulsar_py_storage_disk_free_bytes", cl, disk.last.free_bytes)
    out.add("pulsar_py_storage_writes_refused_total", cl, disk.refused_total)
    out.add("pulsar_py_storage_no_space_errors_total", cl, disk.no_space_errors_total)


_TXN_BUFFER_FAMILIES = ("pulsar_txn_tb_active_total", "pulsar_txn_tb_aborted_total", "pulsar_txn_tb_committed_total")


def _txn_buffer_counts(topic: AnyTopic) -> tuple[int, int, int]:
    """(open, aborted, committed) transactions of a topic's transaction buffer (zeros without one)."""
    buffer = getattr(topic, "txn_buffer", None)
    if buffer is None:
        return 0, 0, 0
    return len(buffer.ongoing), buffer.aborted_count, buffer.committed_count


def _write_compaction(out: Exposition, labels: str, r: CompactionRecord) -> None:
    """Pulsar's per-topic compaction series (only for topics compacted at least once)."""
    for name, value in (("pulsar_compaction_removed_event_count", r.removed_entries),
                        ("pulsar_compaction_succeed_count", r.succeeded), ("pulsar_compaction_failed_count", r.failed),
                        ("pulsar_compaction_duration_time_in_mills", r.last_duration_ms),
                        ("pulsar_compaction_read_throughput", r.last_read_bytes_per_s),
                        ("pulsar_compaction_write_throughput", r.last_write_bytes_per_s),
                        ("pulsar_compaction_compacted_entries_count", r.compacted_entries),
                        ("pulsar_compaction_compacted_entries_size", r.compacted_bytes)):
        out.add(name, labels, value)
    prefix, names, _doc = COMPACTION_LATENCY
    for bucket, n in zip(names, r.latency_counts, strict=True):
        out.add(f"{prefix}_{bucket}", labels, n)
    out.add(f"{prefix}_sum", labels, r.latency_sum_us)
    out.add(f"{prefix}_count", labels, sum(r.latency_counts))


def _in_replay(sub: AnySubscription | None) -> int:
    dispatcher = sub.dispatcher if sub is not None else None
    return len(getattr(dispatcher, "replay", ()))


# Pulsar's subscription series, in the order _write_subscription writes their values.
_SUB_FAMILIES = ("pulsar_subscription_back_log", "pulsar_subscription_back_log_no_delayed",
                 "pulsar_subscription_delayed", "pulsar_subscription_msg_rate_redeliver",
                 "pulsar_subscription_unacked_messages", "pulsar_subscription_msg_rate_out",
                 "pulsar_subscription_msg_ack_rate", "pulsar_subscription_msg_throughput_out", "pulsar_out_bytes_total",
                 "pulsar_out_messages_total", "pulsar_subscription_last_expire_timestamp",
                 "pulsar_subscription_last_acked_timestamp", "pulsar_subscription_last_consumed_flow_timestamp",
                 "pulsar_subscription_last_consumed_timestamp",
                 "pulsar_subscription_last_mark_delete_advanced_timestamp", "pulsar_subscription_msg_rate_expired",
                 "pulsar_subscription_total_msg_expired", "pulsar_subscription_in_replay",
                 "pulsar_subscription_blocked_on_unacked_messages", "pulsar_subscription_msg_drop_rate",
                 "pulsar_subscription_consumers_count", *_SUB_ZEROS)


def _write_subscription(out: Exposition, sl: str, s: SubscriptionCounters) -> None:
    """Pulsar's subscription series of one subscription."""
    values = (s.backlog, s.backlog, 0, s.rate_redeliver, s.unacked, s.rate_out, s.ack_rate, s.throughput_out,
              s.bytes_out, s.msg_out, s.last_expire_ms, s.last_acked_ms, 0, s.last_consumed_ms,
              s.last_mark_delete_ms, s.rate_expired, s.total_expired, _in_replay(s.sub), 1 if s.blocked else 0,
              s.drop_rate if s.drop_rate is not None else 0.0, s.consumers, *_ZEROS)
    for lines, name, value in zip(out.families(_SUB_FAMILIES), _SUB_FAMILIES, values, strict=True):
        lines.append(f"{name}{{{sl}}} {value!r}\n")


# The family names of _add_buckets' values, in its order: (bucket names, "_count", "_sum") per measure.
_ADD_BUCKET_NAMES = tuple((tuple(f"{prefix}_{name}" for name in names), f"{prefix}_count", f"{prefix}_sum")
                          for prefix, names, _doc in ADD_BUCKETS)

_ADD_BUCKET_FAMILIES = tuple(name for names, count, total in _ADD_BUCKET_NAMES for name in (*names, count, total))


def _add_buckets(topic: AnyTopic) -> list[tuple[str, float]]:
    """(metric name, value) of a persistent topic's add buckets; [] for a non-persistent one."""
    stats = getattr(getattr(topic, "ledger", None), "add_stats", None)
    if stats is None:
        return []
    out: list[tuple[str, float]] = []
    measured = (stats.write_latency_us, stats.ledger_write_latency_us, stats.entry_size)
    for (names, count, total), buckets in zip(_ADD_BUCKET_NAMES, measured, strict=True):
        counts = buckets.counts
        out.extend(zip(names, counts, strict=True))
        out.append((count, sum(counts)))
        out.append((total, buckets.sum))
    return out


def _switch_counts(topic: AnyTopic) -> Sequence[int]:
    """The ledger rollovers of the last interval by latency bucket (zeros for a non-persistent topic)."""
    stats = getattr(getattr(topic, "ledger", None), "add_stats", None)
    return stats.ledger_switch_latency_us.counts if stats is not None else (0,) * len(_SWITCH_KEYS)


# The sums keys of the ledger-switch latency buckets (one per range, the overflow last).
_SWITCH_KEYS = tuple(f"switch_{i}" for i in range(len(_LATENCY_RANGES) + 1))


def _ml_sums(sums: defaultdict[str, float], values: dict[str, float], buckets: list[tuple[str, float]],
             interval_s: float, switch_counts: Sequence[int], mark_delete_rate: float) -> None:
    """Add one managed ledger to its namespace's pulsar_ml_* sums."""
    sums["pulsar_ml_AddEntryBytesRate"] += values["pulsar_throughput_in"]
    sums["pulsar_ml_AddEntryWithReplicasBytesRate"] += values["pulsar_throughput_in"]
    sums["pulsar_ml_AddEntryMessagesRate"] += values["pulsar_storage_write_rate"]
    sums["pulsar_ml_NumberOfMessagesInBacklog"] += values["pulsar_msg_backlog"]
    sums["pulsar_ml_ReadEntriesRate"] += values["pulsar_storage_read_rate"]
    sums["pulsar_ml_ReadEntriesOpsCacheMissesRate"] += values["pulsar_storage_read_cache_misses_rate"]
    sums["pulsar_ml_ReadEntriesBytesRate"] += values["pulsar_throughput_out"]
    sums["pulsar_ml_ReadEntriesSucceeded"] += round(values["pulsar_storage_read_rate"] * interval_s)
    sums["pulsar_ml_StoredMessagesSize"] += values["pulsar_storage_size"]
    sums["pulsar_ml_MarkDeleteRate"] += mark_delete_rate
    for key, n in zip(_SWITCH_KEYS, switch_counts, strict=True):
        sums[key] += n
    for name, value in buckets:
        sums[name] += value


def _write_ml(out: Exposition, nl: str, sums: dict[str, float]) -> None:
    for name in ("pulsar_ml_AddEntryBytesRate", "pulsar_ml_AddEntryWithReplicasBytesRate",
                 "pulsar_ml_AddEntryMessagesRate", "pulsar_ml_NumberOfMessagesInBacklog", "pulsar_ml_ReadEntriesRate",
                 "pulsar_ml_ReadEntriesBytesRate", "pulsar_ml_ReadEntriesSucceeded", "pulsar_ml_StoredMessagesSize",
                 "pulsar_ml_MarkDeleteRate", "pulsar_ml_ReadEntriesOpsCacheMissesRate"):
        out.add(name, nl, sums.get(name, 0.0))
    out.add("pulsar_ml_AddEntrySucceed", nl, sums.get("pulsar_storage_write_latency_count", 0.0))
    out.add("pulsar_ml_AddEntryErrors", nl, 0)
    out.add("pulsar_ml_ReadEntriesErrors", nl, 0)
    for family, prefix, ranges in (
            ("pulsar_ml_AddEntryLatencyBuckets", "pulsar_storage_write_latency", _LATENCY_RANGES),
            ("pulsar_ml_LedgerAddEntryLatencyBuckets", "pulsar_storage_ledger_write_latency", _LATENCY_RANGES),
            ("pulsar_ml_EntrySizeBuckets", "pulsar_entry_size", _SIZE_RANGES)):
        names = next(n for p, n, _d in ADD_BUCKETS if p == prefix)
        for quantile, bucket in zip(ranges, names, strict=False):
            out.add(family, f'{nl},quantile="{quantile}"', sums.get(f"{prefix}_{bucket}", 0.0))
        out.add(f"{family}_OVERFLOW", nl, sums.get(f"{prefix}_{names[-1]}", 0.0))
    for quantile, key in zip(_LATENCY_RANGES, _SWITCH_KEYS, strict=False):
        out.add("pulsar_ml_LedgerSwitchLatencyBuckets", f'{nl},quantile="{quantile}"', sums.get(key, 0.0))
    out.add("pulsar_ml_LedgerSwitchLatencyBuckets_OVERFLOW", nl, sums.get(_SWITCH_KEYS[-1], 0.0))


def make_registry(ctx: AdminContext, sampler: StatsSampler) -> BrokerMetrics:
    return BrokerMetrics(ctx, sampler)

