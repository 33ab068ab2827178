"""The broker-wide operation part of /metrics: lookups and topic loads (Pulsar's NamespaceService
and BrokerOperabilityMetrics), the metadata store (MetadataStoreStats), the schema registry
(SchemaRegistryStats), token authentication (AuthenticationMetricsToken), transactions (the
coordinators' TransactionAggregator series, the transaction-buffer client's, the pending acks'),
replicated-subscription snapshots and the offloader (LedgerOffloaderStats).

broker/admin/metrics.py calls these once per scrape; docs/metrics.md lists the families.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from broker.admin.exposition import Exposition, escape
from broker.admin.metric_families import TXN_EXECUTION_LATENCY
from broker.auth.providers import EXPIRING_TOKEN_MINUTES_BUCKETS, TokenProvider
from metadata_store.stats import LATENCY_BUCKETS_MS, StoreStats

if TYPE_CHECKING:
    from collections.abc import Sequence

    from broker.service.broker_service import BrokerService
    from broker.service.offload_stats import OffloaderStats
    from broker.service.operation_stats import PendingAckStats, SnapshotStats, TxnBufferClientStats
    from broker.service.transactions import TransactionService

# Pulsar's quantiles: NamespaceService's lookup summary, and DimensionStats' (topic load times).
LOOKUP_QUANTILES = (0.5, 0.99, 0.999, 1.0)
TOPIC_LOAD_QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999)
SCHEMA_QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
PUBLISH_QUANTILES = (0.0, 0.5, 0.95, 0.99, 0.999, 0.9999, 1.0)  # (AbstractTopic.PUBLISH_LATENCY's)
OFFLOADER_QUANTILES = (0.5, 0.95, 0.99, 1.0)  # (LedgerOffloaderStatsImpl's summaries)
TOPIC_LOAD_GAUGES = (("median", 0.5), ("75percentile", 0.75), ("95percentile", 0.95), ("99_percentile", 0.99),
                      ("99_9_percentile", 0.999), ("99_99_percentile", 0.9999))



def write_operations(out: Exposition, cl: str, load_labels: str, service: BrokerService) -> None:
    """Lookups and topic loads: Pulsar's NamespaceService summary and counters, BrokerService's pending
    gauges, BrokerOperabilityMetrics' topic-load series (labels cluster, broker, metric); and the schema
    registry's operations per namespace (SchemaRegistryStats)."""
    lookups, loads = service.lookup_stats, service.topic_load_stats
    out.summary("pulsar_broker_lookup", cl, [(q, lookups.latency.quantile(q)) for q in LOOKUP_QUANTILES],
                lookups.latency.count, lookups.latency.sum_ms)
    publish = service.publish_latency
    out.summary("pulsar_broker_publish_latency", cl, [(q, publish.quantile(q)) for q in PUBLISH_QUANTILES],
                publish.count, publish.sum_ms)
    out.add("pulsar_broker_lookup_answers_total", cl, lookups.answers)
    out.add("pulsar_broker_lookup_redirects_total", cl, lookups.redirects)
    out.add("pulsar_broker_lookup_failures_total", cl, lookups.failures)
    out.add("pulsar_broker_lookup_pending_requests", cl, lookups.pending)
    out.add("pulsar_broker_topic_load_pending_requests", cl, service.pending_topic_loads)
    times = loads.times
    out.summary("pulsar_topic_load_times", cl, [(q, times.quantile(q)) for q in TOPIC_LOAD_QUANTILES],
                times.count, times.sum_ms)
    out.add("pulsar_topic_load_time_mean_ms", load_labels, times.mean())
    for name, q in TOPIC_LOAD_GAUGES:
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


def write_tokens(out: Exposition, cl: str, providers: Sequence[object]) -> None:
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



def write_transactions(out: Exposition, cl: str, transactions: TransactionService | None) -> None:
    """Pulsar's transaction coordinator series (its TransactionAggregator names), one per coordinator."""
    if transactions is None:
        return
    for tc_id, tc in sorted(transactions.coordinators.items()):
        labels = f'{cl},coordinator_id="{tc_id}"'
        out.add("pulsar_txn_active_count", labels, len(tc.txns))
        out.add("pulsar_txn_committed_total", labels, tc.committed)
        out.add("pulsar_txn_aborted_total", labels, tc.aborted)
        out.add("pulsar_txn_created_total", labels, tc.created)
        out.add("pulsar_txn_timeout_total", labels, tc.timed_out)
        out.add("pulsar_txn_append_log_total", labels, tc.log.appended)
        for name, n in zip(TXN_EXECUTION_LATENCY, tc.take_execution_latency(), strict=True):
            out.add(name, labels, n)
    _write_txn_buffer_client(out, cl, transactions.tb_client_stats)
    _write_pending_acks(out, cl, transactions.pending_ack_stats)


# Pulsar's PendingAckHandleStatsImpl commit latency summary: these quantiles, observed in microseconds.
PENDING_ACK_QUANTILES = (0.5, 0.9, 0.99, 0.999)
_US_PER_MS = 1000


def _write_pending_acks(out: Exposition, cl: str, stats: PendingAckStats) -> None:
    """pulsar_txn_tp_*: ends of transactions on subscriptions, by namespace, topic and subscription (topic level
    on) or namespace."""
    for (ns, topic, sub), s in sorted(stats.by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2] or "")):
        labels = f'{cl},namespace="{escape(ns)}"'
        if topic is not None and sub is not None:
            labels += f',topic="{escape(topic)}",subscription="{escape(sub)}"'
        for status, committed, aborted in (("succeed", s.committed, s.aborted),
                                           ("failed", s.commit_failed, s.abort_failed)):
            out.add("pulsar_txn_tp_committed_count_total", f'{labels},status="{status}"', committed)
            out.add("pulsar_txn_tp_aborted_count_total", f'{labels},status="{status}"', aborted)
        c = s.commit
        out.summary("pulsar_txn_tp_commit_latency", labels,
                    [(q, c.quantile(q) * _US_PER_MS) for q in PENDING_ACK_QUANTILES], c.count, c.sum_ms * _US_PER_MS)


def write_replicated_snapshots(out: Exposition, cl: str, stats: SnapshotStats) -> None:
    """Pulsar's replicated-subscription snapshot metrics, once a replicated topic has had a controller."""
    if not stats.seen:
        return
    out.summary("pulsar_replicated_subscriptions_snapshot_ms", cl, [], stats.succeeded, stats.succeeded_ms)
    out.add("pulsar_replicated_subscriptions_pending_snapshots", cl, stats.pending)
    out.add("pulsar_replicated_subscriptions_timedout_snapshots_total", cl, stats.timed_out)


def write_offloader(out: Exposition, cl: str, stats: OffloaderStats, by_topic: bool) -> None:
    """brk_ledgeroffloader_*, by namespace (and topic, topic level on), each series once it has something, as
    Pulsar's labelled children appear at their first record."""
    for namespace, topic, c in stats.by_topic():
        labels = f'{cl},namespace="{escape(namespace)}"' + (f',topic="{escape(topic)}"' if by_topic else "")
        for name, value in (("brk_ledgeroffloader_offload_error_total", c.offload_errors),
                            ("brk_ledgeroffloader_write_storage_error_total", c.write_errors),
                            ("brk_ledgeroffloader_read_offload_error_total", c.read_errors),
                            ("brk_ledgeroffloader_read_bytes_total", c.read_bytes)):
            if value:
                out.add(name, labels, value)
        for name, rate in (("brk_ledgeroffloader_offload_rate", c.offload_rate),
                           ("brk_ledgeroffloader_read_offload_rate", c.read_rate)):
            if rate is not None:
                out.add(name, labels, rate)
        for name, summary in (("brk_ledgeroffloader_read_ledger_latency", c.read_ledger_latency),
                              ("brk_ledgeroffloader_read_offload_index_latency", c.index_latency),
                              ("brk_ledgeroffloader_read_offload_data_latency", c.data_latency)):
            if summary.count:
                out.summary(name, labels, [(q, summary.quantile(q)) for q in OFFLOADER_QUANTILES], summary.count,
                            summary.sum_ms)
        for status, n in (("succeed", c.deleted), ("failed", c.delete_failures)):
            if n:
                out.add("brk_ledgeroffloader_delete_offload_ops_total", f'{labels},status="{status}"', n)
