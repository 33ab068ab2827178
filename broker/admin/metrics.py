"""Prometheus exposition with Apache Pulsar's metric names and labels.

A custom collector reads the live broker objects at scrape time; nothing is updated per message.
Counters (pulsar_in_messages_total, ...) are the plain integers the service objects keep; rates
(pulsar_rate_in, ...) come from the StatsSampler's snapshot over the last stats interval. The
per-topic and per-subscription values are taken from the same builders as the admin stats JSON,
so /metrics and ``.../stats`` always agree.

Labels: ``cluster`` everywhere; ``namespace`` and ``topic`` (full name, partitions included) at
topic level (exposeTopicLevelMetricsInPrometheus, default on; off = one series per namespace plus
pulsar_topics_count); ``subscription`` at subscription level; ``consumer_name``/``consumer_id`` and
``producer_name``/``producer_id`` when the consumer / producer level is enabled.

Our own (prefix ``pulsar_py_``): topics deleted as inactive, subscriptions expired, times a topic's
publish rate limit held its publishers, the permit-invariant drift count per subscription, the messages a
non-persistent subscription dropped (Pulsar only has the rate), and, when the managed-ledger
factory exposes a ``stats`` object, its fsync latency histogram and read-cache hit ratio (see
``LedgerStorageStats``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.admin.stats import StatsSampler, topic_stats

if TYPE_CHECKING:
    from broker.admin.context import AdminContext
    from broker.service.broker_service import AnyTopic
    from broker.service.kinds import AnySubscription

TOPIC_LABELS = ["cluster", "namespace", "topic"]
# (name, help, ReplicatorStats key) of the per-remote-cluster replication gauges.
_REPLICATION_GAUGES = (
    ("pulsar_replication_rate_in", "Messages per second received from the remote cluster", "msgRateIn"),
    ("pulsar_replication_rate_out", "Messages per second sent to the remote cluster", "msgRateOut"),
    ("pulsar_replication_throughput_in", "Bytes per second received from the remote cluster", "msgThroughputIn"),
    ("pulsar_replication_throughput_out", "Bytes per second sent to the remote cluster", "msgThroughputOut"),
    ("pulsar_replication_backlog", "Entries not yet replicated to the remote cluster", "replicationBacklog"),
    ("pulsar_replication_connected_count", "1 while the replicator to the remote cluster is connected", "connected"),
    ("pulsar_replication_delay_in_seconds", "Age of the oldest message sent and not yet confirmed",
     "replicationDelayInSeconds"),
)
SUB_LABELS = [*TOPIC_LABELS, "subscription"]


class HistogramSnapshot(Protocol):
    count: int
    total: float  # sum of the observations

    def cumulative(self) -> Sequence[tuple[float, int]]:
        """(upper bound, observations <= it), ascending, +Inf last."""


class LedgerStorageStats(Protocol):
    """What /metrics reads from ``service.ledger_factory.stats`` when the storage has one (the file
    ledger's FileLedgerStats). Every member is optional, read with getattr: a storage without
    fsyncs or without a cache simply leaves those series out.

    - ``fsync_latency`` / ``group_commit_size``: objects with ``snapshot() -> HistogramSnapshot``
    - ``cache_hits_total`` / ``cache_misses_total``: read-cache lookups
    - ``*_total`` integers listed in ``_LEDGER_COUNTERS``
    """


# Integer counters of the storage stats exported as pulsar_py_ledger_<name>_total.
_LEDGER_COUNTERS = (
    ("entries_written_total", "Entries made durable"),
    ("bytes_written_total", "Bytes appended to ledger files"),
    ("cursor_persists_total", "Cursor (subscription position) states written"),
    ("corrupt_records_total", "Bad records found by recovery or reads"),
    ("truncated_bytes_total", "Bytes cut from ledger file tails by recovery"),
    ("write_errors_total", "Write or sync failures (each fences a managed ledger)"),
    ("read_errors_total", "Reads that failed"),
    ("segment_reopens_total", "Ledger files reopened for an append after being closed under the open-file limit"),
)
_LEDGER_HISTOGRAMS = (
    ("fsync_latency", "pulsar_py_ledger_fsync_latency_seconds", "Time an fsync of appended entries took"),
    ("group_commit_size", "pulsar_py_ledger_group_commit_entries", "Entries made durable by one fsync"),
)


# Pulsar's per-topic add buckets (gauges, one per bucket, not cumulative, over the last stats
# interval): (metric prefix, help, suffix per bucket, name past the last bucket).
_LATENCY_BUCKET_NAMES = ("le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000")
_ADD_BUCKETS = (
    ("pulsar_storage_write_latency", "Entries stored in the last stats interval with a write latency (add request "
     "to durable) in this bucket; _sum in microseconds", _LATENCY_BUCKET_NAMES, "overflow"),
    ("pulsar_storage_ledger_write_latency", "Entries stored in the last stats interval with a ledger write latency "
     "(from the writer taking the entry to durable) in this bucket; _sum in microseconds",
     _LATENCY_BUCKET_NAMES, "overflow"),
    ("pulsar_entry_size", "Entries stored in the last stats interval with a size (bytes) in this bucket",
     ("le_128", "le_512", "le_1_kb", "le_2_kb", "le_4_kb", "le_16_kb", "le_100_kb", "le_1_mb"), "le_overflow"),
)


def add_bucket_values(topic: AnyTopic) -> list[tuple[str, float]]:
    """(metric name, value) of a persistent topic's add buckets; [] for a non-persistent one."""
    stats = getattr(getattr(topic, "ledger", None), "add_stats", None)
    if stats is None:
        return []
    out: list[tuple[str, float]] = []
    measured = (stats.write_latency_us, stats.ledger_write_latency_us, stats.entry_size)
    for (prefix, _doc, names, overflow), buckets in zip(_ADD_BUCKETS, measured, strict=True):
        out.extend((f"{prefix}_{name}", float(n)) for name, n in zip((*names, overflow), buckets.counts, strict=True))
        out.append((f"{prefix}_count", float(sum(buckets.counts))))
        out.append((f"{prefix}_sum", float(buckets.sum)))
    return out


_ADD_BUCKET_DOCS = {f"{prefix}_{name}": doc for prefix, doc, names, overflow in _ADD_BUCKETS
                    for name in (*names, overflow, "count", "sum")}

# (metric name, help, key in the topic stats JSON) for gauges taken straight from the stats.
_TOPIC_GAUGES = (
    ("pulsar_rate_in", "Messages published per second (last stats interval)", "msgRateIn"),
    ("pulsar_rate_out", "Messages delivered per second (last stats interval)", "msgRateOut"),
    ("pulsar_throughput_in", "Bytes published per second (last stats interval)", "msgThroughputIn"),
    ("pulsar_throughput_out", "Bytes delivered per second (last stats interval)", "msgThroughputOut"),
    ("pulsar_storage_size", "Bytes stored for the topic", "storageSize"),
    ("pulsar_storage_logical_size", "Bytes of entry data of the topic (no replication here)", "storageSize"),
    ("pulsar_storage_backlog_size", "Estimated bytes not yet acknowledged by the slowest subscription",
     "backlogSize"),
    ("pulsar_storage_offloaded_size", "Bytes offloaded to tiered storage (none here)", "offloadedStorageSize"),
)
_SUB_GAUGES = (
    ("pulsar_subscription_back_log", "Entries after the mark-delete position", "msgBacklog"),
    ("pulsar_subscription_back_log_no_delayed", "Backlog without delayed messages", "msgBacklogNoDelayed"),
    ("pulsar_subscription_delayed", "Messages waiting for their delivery time", "msgDelayed"),
    ("pulsar_subscription_msg_rate_redeliver", "Messages redelivered per second", "msgRateRedeliver"),
    ("pulsar_subscription_unacked_messages", "Delivered, not acknowledged", "unackedMessages"),
    ("pulsar_subscription_msg_rate_out", "Messages delivered per second", "msgRateOut"),
    ("pulsar_subscription_msg_throughput_out", "Bytes delivered per second", "msgThroughputOut"),
    ("pulsar_subscription_msg_ack_rate", "Acknowledgements per second", "messageAckRate"),
    ("pulsar_subscription_msg_rate_expired", "Messages expired (TTL) per second", "msgRateExpired"),
    ("pulsar_subscription_total_msg_expired", "Messages expired (TTL) in total", "totalMsgExpired"),
    ("pulsar_subscription_last_expire_timestamp", "Last expiry (epoch ms)", "lastExpireTimestamp"),
    ("pulsar_subscription_last_acked_timestamp", "Last ack (epoch ms)", "lastAckedTimestamp"),
    ("pulsar_subscription_last_consumed_flow_timestamp", "Last flow (epoch ms)", "lastConsumedFlowTimestamp"),
    ("pulsar_subscription_last_consumed_timestamp", "Last delivery (epoch ms)", "lastConsumedTimestamp"),
    ("pulsar_subscription_last_mark_delete_advanced_timestamp", "Last mark-delete move (epoch ms)",
     "lastMarkDeleteAdvancedTimestamp"),
)


class _Families:
    """Metric families created on first use, in a stable order, for one scrape."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def gauge(self, name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = GaugeMetricFamily(name, doc, labels=labels)
        assert isinstance(family, GaugeMetricFamily)
        return family

    def counter(self, name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = CounterMetricFamily(name, doc, labels=labels)
        assert isinstance(family, CounterMetricFamily)
        return family

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


class BrokerCollector(Collector):
    def __init__(self, ctx: AdminContext, sampler: StatsSampler) -> None:
        self.ctx = ctx
        self.sampler = sampler

    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        service = ctx.service
        cfg = ctx.config
        cluster = cfg.clusterName
        topics = [t for t in service.all_topics() if not t.closed]
        stats = {t: topic_stats(t, self.sampler) for t in topics}
        f = _Families()
        by_topic = cfg.exposeTopicLevelMetricsInPrometheus

        def broker(name: str, doc: str, value: float) -> None:
            f.gauge(name, doc, ["cluster"]).add_metric([cluster], value)

        sub_stats = [s for st in stats.values() for s in st["subscriptions"].values()]
        broker("pulsar_broker_topics_count", "Topics loaded", len(topics))
        broker("pulsar_broker_subscriptions_count", "Subscriptions", len(sub_stats))
        broker("pulsar_broker_producers_count", "Producers", sum(len(t.producers) for t in topics))
        broker("pulsar_broker_consumers_count", "Consumers", sum(len(s["consumers"]) for s in sub_stats))
        broker("pulsar_broker_rate_in", "Messages published per second", sum(s["msgRateIn"] for s in stats.values()))
        broker("pulsar_broker_rate_out", "Messages delivered per second",
               sum(s["msgRateOut"] for s in stats.values()))
        broker("pulsar_broker_throughput_in", "Bytes published per second",
               sum(s["msgThroughputIn"] for s in stats.values()))
        broker("pulsar_broker_throughput_out", "Bytes delivered per second",
               sum(s["msgThroughputOut"] for s in stats.values()))
        broker("pulsar_broker_storage_size", "Bytes stored", sum(s["storageSize"] for s in stats.values()))
        broker("pulsar_broker_msg_backlog", "Entries not yet acknowledged, all subscriptions",
               sum(s["msgBacklog"] for s in sub_stats))
        broker("pulsar_active_connections", "Open client connections", len(ctx.process.connections))
        broker("pulsar_connection_created_total_count", "Connections opened", ctx.process.connections_created)
        broker("pulsar_connection_closed_total_count", "Connections closed", ctx.process.connections_closed)
        for name, doc, value in (
                ("pulsar_py_inactive_topics_deleted", "Topics deleted as inactive (brokerDeleteInactiveTopics*)",
                 service.inactive_topics.deleted_total),
                ("pulsar_py_subscriptions_expired", "Subscriptions deleted as abandoned (subscription expiration)",
                 service.housekeeping.subscriptions_expired_total)):
            f.counter(name, doc, ["cluster"]).add_metric([cluster], value)

        authn = ctx.security.authentication
        for (provider, method), n in sorted(authn.successes_by.items()):
            f.counter("pulsar_authentication_success", "Credentials a provider accepted",
                      ["cluster", "provider_name", "auth_method"]).add_metric([cluster, provider, method], n)
        for (provider, method, reason), n in sorted(authn.failures_by.items()):
            f.counter("pulsar_authentication_failures", "Credentials a provider refused, by reason",
                      ["cluster", "provider_name", "auth_method", "reason"]).add_metric(
                [cluster, provider, method, reason], n)

        transactions = service.transactions
        if transactions is not None:  # Pulsar's TransactionAggregator names, one series per coordinator
            for tc_id, tc in sorted(transactions.coordinators.items()):
                labels = [cluster, str(tc_id)]
                for name, doc, value in (
                        ("pulsar_txn_active_count", "Transactions open", len(tc.txns)),
                        ("pulsar_txn_created_count", "Transactions created", tc.created),
                        ("pulsar_txn_committed_count", "Transactions committed", tc.committed),
                        ("pulsar_txn_aborted_count", "Transactions aborted (timeouts included)", tc.aborted),
                        ("pulsar_txn_timeout_count", "Transactions aborted by their timeout", tc.timed_out),
                        ("pulsar_txn_append_log_count", "Records written to the coordinator's log",
                         tc.log.appended)):
                    f.gauge(name, doc, ["cluster", "coordinator_id"]).add_metric(labels, value)

        if by_topic:
            self._topic_level(f, cluster, stats)
        else:
            self._namespace_level(f, cluster, stats)
        yield from f
        yield from self._ledger_storage()

    def _topic_level(self, f: _Families, cluster: str, stats: dict[AnyTopic, dict[str, Any]]) -> None:
        cfg = self.ctx.config
        for topic, st in stats.items():
            labels = [cluster, topic.name.namespace, topic.full_name]
            subs = st["subscriptions"]
            f.gauge("pulsar_subscriptions_count", "Subscriptions of the topic", TOPIC_LABELS).add_metric(
                labels, len(subs))
            f.gauge("pulsar_producers_count", "Producers of the topic", TOPIC_LABELS).add_metric(
                labels, len(st["publishers"]))
            f.gauge("pulsar_consumers_count", "Consumers of the topic", TOPIC_LABELS).add_metric(
                labels, sum(len(s["consumers"]) for s in subs.values()))
            for name, doc, key in _TOPIC_GAUGES:
                f.gauge(name, doc, TOPIC_LABELS).add_metric(labels, st[key])
            f.gauge("pulsar_average_msg_size", "Average published message size (bytes)", TOPIC_LABELS).add_metric(
                labels, st["averageMsgSize"])
            self._replication(f, labels, st["replication"])
            f.gauge("pulsar_msg_backlog", "Entries not yet acknowledged, all subscriptions",
                    TOPIC_LABELS).add_metric(labels, sum(s["msgBacklog"] for s in subs.values()))
            f.gauge("pulsar_storage_write_rate", "Entries written per second", TOPIC_LABELS).add_metric(
                labels, self.sampler.topic_entries_in.get(topic, 0.0))
            for name, value in add_bucket_values(topic):
                f.gauge(name, _ADD_BUCKET_DOCS[name], TOPIC_LABELS).add_metric(labels, value)
            f.counter("pulsar_in_bytes", "Bytes published to the topic", TOPIC_LABELS).add_metric(
                labels, st["bytesInCounter"])
            f.counter("pulsar_in_messages", "Messages published to the topic", TOPIC_LABELS).add_metric(
                labels, st["msgInCounter"])
            f.counter("pulsar_py_publish_rate_limited", "Times the topic's publish rate limit held its publishers",
                      TOPIC_LABELS).add_metric(labels, st["publishRateLimitedTimes"])
            if cfg.exposeProducerLevelMetricsInPrometheus:
                self._producers(f, labels, topic)
            for sub_name, s in subs.items():
                sub_labels = [*labels, sub_name]
                for name, doc, key in _SUB_GAUGES:
                    f.gauge(name, doc, SUB_LABELS).add_metric(sub_labels, float(s[key]))
                f.gauge("pulsar_subscription_blocked_on_unacked_messages", "1 when blocked on unacked messages",
                        SUB_LABELS).add_metric(sub_labels, 1.0 if s["blockedSubscriptionOnUnackedMsgs"] else 0.0)
                f.gauge("pulsar_subscription_consumers_count", "Consumers of the subscription",
                        SUB_LABELS).add_metric(sub_labels, len(s["consumers"]))
                f.counter("pulsar_out_bytes", "Bytes delivered by the subscription", SUB_LABELS).add_metric(
                    sub_labels, s["bytesOutCounter"])
                f.counter("pulsar_out_messages", "Messages delivered by the subscription", SUB_LABELS).add_metric(
                    sub_labels, s["msgOutCounter"])
                sub = topic.subscriptions.get(sub_name)
                dispatcher = sub.dispatcher if sub is not None else None
                f.gauge("pulsar_py_permit_invariant_drift", "Times the dispatcher permit total drifted from the "
                        "sum over consumers (must stay 0)", SUB_LABELS).add_metric(
                    sub_labels, dispatcher.invariant_drift_count if dispatcher is not None else 0)
                if "msgDropRate" in s:  # non-persistent topics
                    f.gauge("pulsar_subscription_msg_drop_rate", "Messages dropped per second: no consumer could "
                            "take them (non-persistent topics)", SUB_LABELS).add_metric(sub_labels, s["msgDropRate"])
                    f.counter("pulsar_py_subscription_msg_dropped", "Messages dropped because no consumer could "
                              "take them (non-persistent topics)", SUB_LABELS).add_metric(
                        sub_labels, sub.msg_dropped if sub is not None else 0)
                if cfg.exposeConsumerLevelMetricsInPrometheus and sub is not None:
                    self._consumers(f, sub_labels, sub)

    @staticmethod
    def _replication(f: _Families, labels: list[str], replication: dict[str, dict[str, Any]]) -> None:
        """Pulsar's per-topic replication series, one per remote cluster."""
        rl = [*TOPIC_LABELS, "remote_cluster"]
        for remote, r in replication.items():
            values = [*labels, remote]
            for name, doc, key in _REPLICATION_GAUGES:
                f.gauge(name, doc, rl).add_metric(values, float(r[key]))

    def _producers(self, f: _Families, labels: list[str], topic: AnyTopic) -> None:
        pl = [*TOPIC_LABELS, "producer_name", "producer_id"]
        for p in topic.producers.values():
            rate = self.sampler.producer_in.get(p)
            msgs, nbytes = (rate.msgs, rate.bytes) if rate is not None else (0.0, 0.0)
            plabels = [*labels, p.name, str(p.producer_id)]
            f.gauge("pulsar_producer_msg_rate_in", "Messages published per second", pl).add_metric(plabels, msgs)
            f.gauge("pulsar_producer_msg_throughput_in", "Bytes published per second", pl).add_metric(
                plabels, nbytes)
            f.gauge("pulsar_producer_msg_average_Size", "Average message size (bytes)", pl).add_metric(
                plabels, nbytes / msgs if msgs else 0.0)

    def _consumers(self, f: _Families, sub_labels: list[str], sub: AnySubscription) -> None:
        cl = [*SUB_LABELS, "consumer_name", "consumer_id"]
        for c in sub.consumers:
            rate = self.sampler.consumer_out.get(c)
            clabels = [*sub_labels, c.name, str(c.consumer_id)]
            f.gauge("pulsar_consumer_msg_rate_out", "Messages delivered per second", cl).add_metric(
                clabels, rate.msgs if rate is not None else 0.0)
            f.gauge("pulsar_consumer_msg_throughput_out", "Bytes delivered per second", cl).add_metric(
                clabels, rate.bytes if rate is not None else 0.0)
            f.gauge("pulsar_consumer_msg_rate_redeliver", "Messages redelivered per second", cl).add_metric(
                clabels, self.sampler.consumer_redeliver.get(c, 0.0))
            f.gauge("pulsar_consumer_unacked_messages", "Delivered, not acknowledged", cl).add_metric(
                clabels, c.unacked_messages)
            f.gauge("pulsar_consumer_blocked_on_unacked_messages", "1 when blocked on unacked messages",
                    cl).add_metric(clabels, 1.0 if getattr(c, "blocked", False) else 0.0)
            f.gauge("pulsar_consumer_available_permits", "Permits the consumer has granted", cl).add_metric(
                clabels, max(c.permits, 0))

    def _namespace_level(self, f: _Families, cluster: str, stats: dict[AnyTopic, dict[str, Any]]) -> None:
        """Pulsar's aggregation when topic-level metrics are off: one series per namespace."""
        sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for topic, st in stats.items():
            ns = sums[topic.name.namespace]
            subs = st["subscriptions"].values()
            ns["pulsar_topics_count"] += 1
            ns["pulsar_subscriptions_count"] += len(st["subscriptions"])
            ns["pulsar_producers_count"] += len(st["publishers"])
            ns["pulsar_consumers_count"] += sum(len(s["consumers"]) for s in subs)
            for name, _doc, key in _TOPIC_GAUGES:
                ns[name] += st[key]
            ns["pulsar_msg_backlog"] += sum(s["msgBacklog"] for s in subs)
            ns["pulsar_in_bytes"] += st["bytesInCounter"]
            ns["pulsar_in_messages"] += st["msgInCounter"]
            ns["pulsar_out_bytes"] += st["bytesOutCounter"]
            ns["pulsar_out_messages"] += st["msgOutCounter"]
            for name, value in add_bucket_values(topic):
                ns[name] += value
        nl = ["cluster", "namespace"]
        for namespace, values in sorted(sums.items()):
            for name, value in values.items():
                if name in ("pulsar_in_bytes", "pulsar_in_messages", "pulsar_out_bytes", "pulsar_out_messages"):
                    f.counter(name, "Namespace total", nl).add_metric([cluster, namespace], value)
                else:
                    f.gauge(name, "Namespace total", nl).add_metric([cluster, namespace], value)

    def _ledger_storage(self) -> Iterator[Metric]:
        stats = getattr(self.ctx.service.ledger_factory, "stats", None)
        if stats is None:
            return
        labels = [self.ctx.cluster]
        for attr, name, doc in _LEDGER_HISTOGRAMS:
            histogram = getattr(stats, attr, None)
            snapshot = getattr(histogram, "snapshot", None)
            if snapshot is None:
                continue
            snap: HistogramSnapshot = snapshot()
            buckets = [("+Inf" if math.isinf(le) else repr(float(le)), float(n)) for le, n in snap.cumulative()]
            if not buckets or buckets[-1][0] != "+Inf":
                buckets.append(("+Inf", float(snap.count)))
            h = HistogramMetricFamily(name, doc, labels=["cluster"])
            h.add_metric(labels, buckets, float(snap.total))
            yield h
        for attr, doc in _LEDGER_COUNTERS:
            value = getattr(stats, attr, None)
            if isinstance(value, int):
                c = CounterMetricFamily(f"pulsar_py_ledger_{attr.removesuffix('_total')}", doc, labels=["cluster"])
                c.add_metric(labels, float(value))
                yield c
        hits = getattr(stats, "cache_hits_total", None)
        misses = getattr(stats, "cache_misses_total", None)
        if isinstance(hits, int) and isinstance(misses, int):
            for name, value in (("pulsar_py_ledger_cache_hits", hits), ("pulsar_py_ledger_cache_misses", misses)):
                c = CounterMetricFamily(name, "Managed-ledger read-cache lookups", labels=["cluster"])
                c.add_metric(labels, float(value))
                yield c
            ratio = GaugeMetricFamily("pulsar_py_ledger_cache_hit_ratio", "Read-cache hits / lookups",
                                      labels=["cluster"])
            ratio.add_metric(labels, hits / (hits + misses) if hits + misses else 0.0)
            yield ratio


def make_registry(ctx: AdminContext, sampler: StatsSampler) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(ctx, sampler))
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    return bytes(generate_latest(registry))
