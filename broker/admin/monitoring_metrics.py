"""``GET /admin/v2/broker-stats/metrics`` (``pulsar-admin broker-stats monitoring-metrics``): Apache Pulsar's
MetricsGenerator output, a JSON list of ``{"metrics": {name: number}, "dimensions": {key: value}}``, one object per
set of dimensions. As Pulsar's merge does, the contributors' objects with equal dimensions become one (a later
contributor's value of a name wins).

The contributors, in Pulsar 4.0.7's order, and what is here of each:
- JvmMetrics (``{"metric": "jvm_metrics"}``): nothing; there is no JVM (as in /metrics, docs/metrics.md).
- ManagedLedgerCacheMetrics (``{}``): ``brk_ml_count`` and the ``brk_ml_cache_*`` counts and rates (the
  ``brk_ml_cache_pool_*`` allocator figures are Netty's pool, which has no counterpart here).
- ManagedLedgerMetrics (``{"namespace": "tenant/ns/persistent"}``, the managed ledger's name's first three parts,
  as Pulsar parses them): the ``brk_ml_*`` sums of the namespace's managed ledgers and their ``_<low>_<high>`` /
  ``_OVERFLOW`` latency and entry-size buckets: the numbers of /metrics' ``pulsar_ml_*``.
- NamespaceStats (``{"namespace"}``, namespaces with a topic loaded here): ``brk_in_rate``, ``brk_out_rate``, their
  ``_tp_`` byte rates, producer, subscription, consumer and inbound-replicator counts, ``brk_storage_size`` (the
  estimated backlog size, as Pulsar sums it), ``brk_msg_backlog``, ``brk_replication_backlog`` and
  ``brk_AddEntryLatencyBuckets_*`` (entries of the last stats interval per second, whole numbers).
- replication (``{"namespace", "from_cluster", "to_cluster"}``, with ``replicationMetricsEnabled``): the
  outbound replicators' ``brk_repl_*`` rates, backlog, connected count and largest delay.
- BrokerOperabilityMetrics (``{"broker", "cluster", "metric"}``): topic load times (``pulsar_topic_load_times``;
  the last interval's, as /metrics has them), connections (``broker_connection``) and the health check
  (``broker_health``).
- the load manager (``{"broker", "metric": "loadBalancing"}``): ``brk_lb_*_usage``, per cent of each resource's
  limit (``LocalLoad``; /metrics writes the same as ``pulsar_lb_*``). The leader's unload and split counters are
  not kept here.

Rates are the stats sampler's last interval (``statsUpdateFrequencyInSecs``), as in the topic stats and /metrics;
the objects from the topics (all but the broker's own figures) are taken once per interval, as Pulsar takes its
NamespaceStats (``MonitoringMetrics``).
A value that is not a number (a quantile with no sample) is the string "NaN", as Pulsar's JSON writes it.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from broker.admin.metric_families import ADD_BUCKETS
from broker.admin.metrics_ledgers import (
    LATENCY_RANGES,
    add_buckets,
    cache_values,
    ledger_namespace,
    ml_sums,
    ml_values,
)
from broker.admin.metrics_operations import TOPIC_LOAD_GAUGES
from broker.admin.scrape_stats import topic_counters
from broker.admin.stats import replication_stats
from broker.cluster.load import CpuMeter, memory_limit_mb, rss_mb

if TYPE_CHECKING:
    from broker.admin.context import AdminContext
    from broker.admin.stats import StatsSampler
    from broker.service.broker_service import BrokerService

Metrics = dict[str, Any]
Dimensions = tuple[tuple[str, str], ...]

# The publish latency buckets of a topic (its add buckets) and NamespaceStats' names for them.
_WRITE_LATENCY_NAMES = next(names for prefix, names, _doc in ADD_BUCKETS if prefix == "pulsar_storage_write_latency")
_NAMESPACE_BUCKETS = (*(f"brk_AddEntryLatencyBuckets_{r}" for r in LATENCY_RANGES),
                      "brk_AddEntryLatencyBuckets_OVERFLOW")
CORES = os.cpu_count() or 1
# NamespaceStats' counts (whole numbers in its JSON); its other names are rates and sizes.
_NAMESPACE_COUNTS = ("brk_no_of_producers", "brk_no_of_subscriptions", "brk_no_of_replicators", "brk_no_of_consumers")


def _number(value: float) -> float | int | str:
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def _percent(usage: float, limit: float) -> float:
    """Pulsar's ResourceUsage.percentUsage: usage as a per cent of its limit, 0 without a limit."""
    return usage / limit * 100 if limit > 0 else 0.0


class _Collector:
    """The objects by dimensions, in the order their dimensions first came; equal dimensions merged."""

    def __init__(self) -> None:
        self.objects: dict[Dimensions, Metrics] = {}

    def add(self, dimensions: dict[str, str], metrics: Metrics) -> None:
        key = tuple(sorted((k, v) for k, v in dimensions.items() if v != ""))
        self.objects.setdefault(key, {}).update(metrics)

    def documents(self) -> list[dict[str, Any]]:
        return [{"metrics": {name: _number(value) for name, value in sorted(metrics.items())},
                 "dimensions": dict(key)} for key, metrics in self.objects.items()]


def _topic_objects(ctx: AdminContext, sampler: StatsSampler) -> list[tuple[dict[str, str], Metrics]]:
    """The objects a walk of every topic gives (entry cache, managed ledgers, namespaces, replication), in order."""
    service, cfg = ctx.service, ctx.config
    topics = [t for t in service.all_topics() if not t.closed]
    namespaces: dict[str, defaultdict[str, float]] = {}
    ml_by_ns: dict[str, defaultdict[str, float]] = {}
    replication_by: dict[tuple[str, str], defaultdict[str, float]] = {}
    interval = max(1, int(sampler.interval_s))
    for topic in topics:
        tc = topic_counters(topic, sampler)
        ns = topic.name.namespace
        local = [p for p in topic.producers.values() if not p.replicator]
        replication = (replication_stats(topic, sampler)
                       if topic.replicators or len(local) != len(topic.producers) else {})
        outbound = {cluster: r for cluster, r in replication.items() if cluster in topic.replicators}
        sums = namespaces.setdefault(ns, defaultdict(float))
        sums["brk_in_rate"] += tc.rate_in
        sums["brk_in_tp_rate"] += tc.throughput_in
        sums["brk_out_rate"] += tc.rate_out + sum(r["msgRateOut"] for r in outbound.values())
        sums["brk_out_tp_rate"] += tc.throughput_out + sum(r["msgThroughputOut"] for r in outbound.values())
        sums["brk_storage_size"] += tc.backlog_size
        sums["brk_no_of_producers"] += len(local)
        sums["brk_no_of_subscriptions"] += len(tc.subscriptions)
        sums["brk_no_of_replicators"] += len(topic.producers) - len(local)
        sums["brk_no_of_consumers"] += sum(s.consumers for s in tc.subscriptions)
        backlog = sum(s.backlog for s in tc.subscriptions)
        sums["brk_msg_backlog"] += backlog
        sums["brk_replication_backlog"] += sum(r["replicationBacklog"] for r in outbound.values())
        buckets = add_buckets(topic)
        counts = dict(buckets)
        for bucket, name in zip(_WRITE_LATENCY_NAMES, _NAMESPACE_BUCKETS, strict=True):
            sums[name] += counts.get(f"pulsar_storage_write_latency_{bucket}", 0)
        if hasattr(topic, "ledger"):
            ml_ns = ledger_namespace(topic.ledger.name)
            ml_sums(ml_by_ns.setdefault(ml_ns, defaultdict(float)), topic, tc, backlog, buckets, sampler)
            if cfg.replicationMetricsEnabled:
                for cluster, r in outbound.items():
                    rs = replication_by.setdefault((ns, cluster), defaultdict(float))
                    rs["brk_repl_out_rate"] += r["msgRateOut"]
                    rs["brk_repl_out_tp_rate"] += r["msgThroughputOut"]
                    rs["brk_replication_backlog"] += r["replicationBacklog"]
                    rs["brk_repl_is_connected"] += 1 if r["connected"] else 0
                    rs["brk_max_replication_delay_second"] = max(rs["brk_max_replication_delay_second"],
                                                                 float(r["replicationDelayInSeconds"]))

    objects: list[tuple[dict[str, str], Metrics]] = []
    objects.append(({}, {"brk_ml" + name[len("pulsar_ml"):]: value
                         for name, value in cache_values(service.ledger_factory, sampler,
                                                         sum(1 for t in topics if hasattr(t, "ledger")))}))
    for ns, ml in ml_by_ns.items():
        objects.append(({"namespace": ns}, {
            "brk_ml" + family[len("pulsar_ml"):] + (f"_{quantile}" if quantile is not None else ""): float(value)
            for family, quantile, value in ml_values(ml)}))
    for ns, sums in namespaces.items():
        metrics: Metrics = {name: value for name, value in sums.items() if not name.startswith("brk_AddEntry")}
        for name in _NAMESPACE_COUNTS:
            metrics[name] = int(sums[name])
        for name in _NAMESPACE_BUCKETS:
            metrics[name] = int(sums[name]) // interval
        metrics["brk_max_replication_delay_second"] = 0.0  # (never set in Pulsar's NamespaceStats)
        objects.append(({"namespace": ns}, metrics))
    local_cluster = cfg.clusterName
    for (ns, cluster), rs in replication_by.items():
        repl: Metrics = dict(rs)
        repl["brk_repl_is_connected"] = int(rs["brk_repl_is_connected"])
        objects.append(({"namespace": ns, "from_cluster": local_cluster, "to_cluster": cluster}, repl))
    return objects


class MonitoringMetrics:
    """One broker's broker-stats/metrics. The objects of the topic walk are taken once per stats interval (at the
    first request after the sampler's run), as Pulsar's NamespaceStats are taken in BrokerService.updateRates: one
    walk per interval however often the list is asked for. The broker's own figures are read at each request."""

    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx
        self._topic_objects: list[tuple[dict[str, str], Metrics]] = []
        self._taken_at = -1  # (the sampler's run they were taken after)

    def documents(self, sampler: StatsSampler, load_balancing: Metrics) -> list[dict[str, Any]]:
        if self._taken_at != sampler.samples:
            self._topic_objects = _topic_objects(self.ctx, sampler)
            self._taken_at = sampler.samples
        service, process = self.ctx.service, self.ctx.process
        out = _Collector()
        for dimensions, metrics in self._topic_objects:
            out.add(dimensions, metrics)
        local_cluster = self.ctx.config.clusterName
        broker = {"broker": process.advertised_host, "cluster": local_cluster}
        loads = service.topic_load_stats
        times = loads.times
        load_times: Metrics = {"brk_topic_load_time_mean_ms": times.mean()}
        for name, q in TOPIC_LOAD_GAUGES:
            load_times[f"brk_topic_load_time_{name}_ms"] = times.quantile(q)
        load_times["brk_topic_load_rate_s"] = float(times.last_count)  # (floats, as in Pulsar's JSON)
        load_times["brk_topic_load_failed_count"] = float(loads.failed)
        out.add({**broker, "metric": "pulsar_topic_load_times"}, load_times)
        out.add({**broker, "metric": "broker_connection"}, {
            "brk_connection_created_total_count": process.connections_created,
            "brk_connection_create_success_count": process.connections_created - process.connections_refused,
            "brk_connection_create_fail_count": process.connections_refused,
            "brk_connection_closed_total_count": process.connections_closed,
            "brk_active_connections": len(process.connections)})
        out.add({**broker, "metric": "broker_health"}, {"brk_health": service.health_check_status})
        out.add({"broker": process.advertised_host, "metric": "loadBalancing"}, load_balancing)
        return out.documents()


class LocalLoad:
    """This broker's load as the load manager's ``loadBalancing`` usages (per cent of each limit): in cluster mode
    those of the load report it last built; standalone (no load report), the process's CPU since the previous call
    against all cores, and its resident memory against the machine's. Each reader keeps its own (the CPU is "since
    its previous look"): broker-stats, /metrics."""

    def __init__(self) -> None:
        self.cpu = CpuMeter()

    def usage(self, service: BrokerService) -> Metrics:
        registry = service.registry
        report = registry.latest if registry is not None else None
        if report is not None:
            cpu, memory = (report.cpu_usage, report.cpu_limit), (report.memory_usage_mb, report.memory_limit_mb)
            bandwidth_in = (report.bandwidth_in_usage, report.bandwidth_in_limit)
            bandwidth_out = (report.bandwidth_out_usage, report.bandwidth_out_limit)
        else:  # (bandwidth limits unknown, as in load-report)
            cpu, memory = (self.cpu.look(), 100.0 * CORES), (rss_mb(), memory_limit_mb())
            bandwidth_in = bandwidth_out = (0.0, 0.0)
        return {"brk_lb_cpu_usage": _percent(*cpu), "brk_lb_memory_usage": _percent(*memory),
                "brk_lb_directMemory_usage": 0.0,
                "brk_lb_bandwidth_in_usage": _percent(*bandwidth_in),
                "brk_lb_bandwidth_out_usage": _percent(*bandwidth_out)}
