"""Prometheus exposition with Apache Pulsar's metric names and labels.

Read at scrape time from the live broker objects; nothing is updated per message. Counters
(pulsar_in_messages_total, ...) are the plain integers the service objects keep; rates
(pulsar_rate_in, ...) come from the StatsSampler's snapshot over the last stats interval. The
per-topic and per-subscription values are taken from the same builders as the admin stats JSON,
so /metrics and ``.../stats`` agree. The families and their help texts are in metric_families.py;
docs/metrics.md lists them with their labels, units and the switches that govern them.

This module walks the topics and writes the topic, namespace and broker series; the per-topic
series orders are in metrics_topic.py, the managed-ledger, cache and storage series in
metrics_ledgers.py, the broker-wide operations (lookups, topic loads, metadata store, schema
registry, tokens, transactions) in metrics_operations.py.

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
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.process_collector import ProcessCollector

from broker.admin.exposition import Exposition, escape
from broker.admin.metric_families import ADD_BUCKETS, FAMILIES
from broker.admin.metrics_ledgers import (
    ADD_BUCKET_FAMILIES,
    add_buckets,
    ledger_namespace,
    ml_sums,
    write_cache,
    write_cursors,
    write_disk_space,
    write_ledger_storage,
    write_ml,
)
from broker.admin.metrics_operations import (
    write_offloader,
    write_operations,
    write_replicated_snapshots,
    write_tokens,
    write_transactions,
)
from broker.admin.metrics_topic import (
    CONSUMER_GAUGES,
    REPLICATION,
    TOPIC_FAMILIES,
    TOPIC_VALUES,
    TXN_BUFFER_FAMILIES,
    in_replay,
    txn_buffer_counts,
    write_compaction,
    write_subscription,
)
from broker.admin.monitoring_metrics import LocalLoad
from broker.admin.scrape_stats import TopicCounters, topic_counters
from broker.admin.stats import StatsSampler, consumer_stats, offloaded_size, publisher_stats, replication_stats
from broker.metadata.policy_table import BACKLOG_QUOTAS
from broker.metadata.policy_values import DESTINATION_STORAGE, MESSAGE_AGE
from broker.service.backlog_quota import CHECK_DURATION_BUCKETS_S
from broker.topic_name import is_system_topic
from broker.version import __version__

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Iterator

    from broker.admin.context import AdminContext
    from broker.service.broker_service import AnyTopic

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


def _namespace_sums() -> defaultdict[str, float]:
    return defaultdict(float)


class BrokerMetrics:
    """Builds the /metrics text. Keeps each topic's label prefix between scrapes."""

    def __init__(self, ctx: AdminContext, sampler: StatsSampler) -> None:
        self.ctx = ctx
        self.sampler = sampler
        self._labels: dict[str, str] = {}  # topic full name -> its cluster/namespace/topic labels
        self._load = LocalLoad()  # (its own: the CPU since the previous scrape)
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
        return out.text().encode() + self._process_text()

    async def stream(self) -> AsyncGenerator[bytes, None]:
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
        yield self._process_text()

    def _process_text(self) -> bytes:
        """The process_* series, with the cluster label Pulsar gives every series of its default registry."""
        cl = f'cluster="{escape(self.ctx.config.clusterName)}"'
        lines = []
        for line in generate_latest(self._process).decode().splitlines():
            if line and not line.startswith("#"):
                name, _, rest = line.partition(" ")
                base, brace, labels = name.partition("{")
                line = f"{base}{{{cl},{labels} {rest}" if brace else f"{name}{{{cl}}} {rest}"
            lines.append(line)
        return ("\n".join(lines) + "\n").encode()

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
            buckets = add_buckets(topic)
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
                "pulsar_subscription_in_replay": sum(in_replay(s.sub) for s in subs),
                "pulsar_rate_in": tc.rate_in, "pulsar_rate_out": tc.rate_out,
                "pulsar_throughput_in": tc.throughput_in, "pulsar_throughput_out": tc.throughput_out,
                "pulsar_average_msg_size": tc.average_msg_size, "pulsar_storage_size": tc.storage_size,
                "pulsar_storage_logical_size": tc.storage_size, "pulsar_storage_backlog_size": tc.backlog_size,
                "pulsar_publish_rate_limit_times": tc.rate_limited_times,
                "pulsar_storage_offloaded_size": offloaded_size(topic),
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
                ml_ns = ledger_namespace(topic.ledger.name)  # type: ignore[union-attr]
                ml_sums(ml_by_ns.setdefault(ml_ns, _namespace_sums()), topic, tc, values["pulsar_msg_backlog"],
                        buckets, sampler)
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
                for name, value in zip(TXN_BUFFER_FAMILIES, txn_buffer_counts(topic), strict=True):
                    sums[name] += value
                for remote, r in replication.items():
                    rs = replication_by_ns.setdefault(ns, {}).setdefault(remote, _namespace_sums())
                    for name, key in REPLICATION:
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
            write_ml(out, f'{cl},namespace="{escape(ns)}"', sums)
        if cfg.exposeManagedCursorMetricsInPrometheus:
            write_cursors(out, cl, topics)
        write_cache(out, cl, service.ledger_factory, sampler, sum(1 for t in topics if hasattr(t, "ledger")))
        write_ledger_storage(out, cl, service.ledger_factory)
        write_disk_space(out, cl, service.disk_space)
        write_transactions(out, cl, service.transactions)

    # -- topic level -------------------------------------------------------------------------------
    def _write_topic(self, out: Exposition, topic: AnyTopic, labels: str, tc: TopicCounters,
                     values: dict[str, float], evictions: dict[str, int], buckets: list[tuple[str, float]],
                     replication: dict[str, dict[str, Any]]) -> None:
        cfg = self.ctx.config
        limit_size, limit_time, age = self._backlog_quota(topic)
        active, aborted, committed = txn_buffer_counts(topic)
        topic_values = (*[values[name] for name in TOPIC_VALUES], active, aborted, committed, 0, limit_size,
                        limit_time, age, tc.rate_limited_times)
        # One line per family, appended straight to the family's lines (no call per sample).
        for lines, name, value in zip(out.families(TOPIC_FAMILIES), TOPIC_FAMILIES, topic_values, strict=True):
            lines.append(f"{name}{{{labels}}} {value!r}\n")
        for quota, label in QUOTA_TYPE_LABELS:
            out.add("pulsar_storage_backlog_quota_exceeded_evictions_total", f'{labels},quota_type="{label}"',
                    evictions.get(quota, 0))
        if buckets:
            for lines, (name, value) in zip(out.families(ADD_BUCKET_FAMILIES), buckets, strict=True):
                lines.append(f"{name}{{{labels}}} {value!r}\n")
        compactor = getattr(topic, "compactor", None)
        if compactor is not None and compactor.record.runs:
            write_compaction(out, labels, compactor.record)
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
            write_subscription(out, sl, s)
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
                    for name, key in CONSUMER_GAUGES:
                        out.add(name, ccl, float(cs[key]))
        for remote, r in replication.items():
            rl = f'{labels},remote_cluster="{escape(remote)}"'
            for name, key in REPLICATION:
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
        for name in TXN_BUFFER_FAMILIES:
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
        out.add("pulsar_broker_pending_bytes_to_dispatch", cl, sum(_queued_bytes(c) for c in process.connections))
        out.add("pulsar_version_info", f'{cl},version="{escape(__version__)}",commit=""', 1)
        # (broker: the advertised address alone, as Pulsar's BrokerOperabilityMetrics labels it)
        bl = f'{cl},broker="{escape(process.advertised_host)}",metric="broker_connection"'
        out.add("pulsar_active_connections", bl, len(process.connections))
        out.add("pulsar_connection_created_total_count", bl, process.connections_created)
        out.add("pulsar_connection_create_success_count", bl,
                process.connections_created - process.connections_refused)
        out.add("pulsar_connection_create_fail_count", bl, process.connections_refused)
        out.add("pulsar_connection_closed_total_count", bl, process.connections_closed)
        out.add("pulsar_health", bl.replace('metric="broker_connection"', 'metric="broker_health"'),
                self.ctx.service.health_check_status)
        lb = bl.replace('metric="broker_connection"', 'metric="loadBalancing"')
        for name, usage in self._load.usage(self.ctx.service).items():
            out.add("pulsar_lb" + name[len("brk_lb"):], lb, usage)
        service = self.ctx.service
        write_operations(out, cl, bl.replace('metric="broker_connection"', 'metric="pulsar_topic_load_times"'),
                          service)
        if service.offloader_stats is not None:
            write_offloader(out, cl, service.offloader_stats, self.ctx.config.exposeTopicLevelMetricsInPrometheus)
        out.add("pulsar_py_inactive_topics_deleted_total", cl, service.inactive_topics.deleted_total)
        out.add("pulsar_py_subscriptions_expired_total", cl, service.housekeeping.subscriptions_expired_total)
        authn = self.ctx.security.authentication
        for (provider, method), n in sorted(authn.successes_by.items()):
            out.add("pulsar_authentication_success_total",
                    f'{cl},provider_name="{escape(provider)}",auth_method="{escape(method)}"', n)
        for (provider, method, reason), n in sorted(authn.failures_by.items()):
            out.add("pulsar_authentication_failures_total", f'{cl},provider_name="{escape(provider)}",'
                    f'auth_method="{escape(method)}",reason="{escape(reason)}"', n)
        write_tokens(out, cl, authn.providers.get("token", []))
        quotas = service.backlog_quotas
        cumulative = list(zip((*CHECK_DURATION_BUCKETS_S, math.inf), itertools.accumulate(quotas.check_durations),
                              strict=True))
        out.histogram("pulsar_storage_backlog_quota_check_duration_seconds", cl, cumulative,
                      cumulative[-1][1], quotas.check_duration_sum_s)
        write_replicated_snapshots(out, cl, service.snapshot_stats)


def _queued_bytes(connection: object) -> int:
    """What a client connection has written and not yet sent (``Connection.queued_bytes``)."""
    queued = getattr(connection, "queued_bytes", None)
    return queued() if queued is not None else 0


def make_registry(ctx: AdminContext, sampler: StatsSampler) -> BrokerMetrics:
    return BrokerMetrics(ctx, sampler)

