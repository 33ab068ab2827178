"""The managed-ledger part of /metrics: Pulsar's per-namespace ``pulsar_ml_*`` sums (its
ManagedLedgerMetrics) and the per-topic add buckets they are summed from, the entry cache
(ManagedLedgerCacheMetrics), the per-cursor series (ManagedCursorMetrics), and our own
``pulsar_py_ledger_*`` / ``pulsar_py_storage_*`` series of the storage underneath.

broker/admin/metrics.py walks the topics and calls these; docs/metrics.md lists the families.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import TYPE_CHECKING, Protocol

from broker.admin.exposition import Exposition, escape
from broker.admin.metric_families import ADD_BUCKETS
from managed_ledger.stats import ADD_LATENCY_BUCKETS_US, ENTRY_SIZE_BUCKETS, CursorStats

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from broker.admin.scrape_stats import TopicCounters
    from broker.admin.stats import StatsSampler
    from broker.service.broker_service import AnyTopic
    from managed_ledger.disk_space import StorageGuard

# Integer counters of the storage's own stats object, exported as pulsar_py_ledger_<name>.
_LEDGER_COUNTERS = ("entries_written_total", "bytes_written_total", "cursor_persists_total", "corrupt_records_total",
                    "truncated_bytes_total", "write_errors_total", "read_errors_total", "segment_reopens_total")
_LEDGER_HISTOGRAMS = (("fsync_latency", "pulsar_py_ledger_fsync_latency_seconds"),
                      ("group_commit_size", "pulsar_py_ledger_group_commit_entries"))


def _ranges(bounds: Sequence[float], scale: float) -> list[str]:
    """Pulsar's ``quantile`` values of the pulsar_ml_*Buckets series: "low_high" of each range."""
    edges = [0.0, *(b / scale for b in bounds)]
    return [f"{lo:.1f}_{hi:.1f}" for lo, hi in itertools.pairwise(edges)]


LATENCY_RANGES = _ranges(ADD_LATENCY_BUCKETS_US, 1000.0)  # microseconds -> ms
_SIZE_RANGES = _ranges(ENTRY_SIZE_BUCKETS, 1.0)


class HistogramSnapshot(Protocol):
    count: int
    total: float

    def cumulative(self) -> Sequence[tuple[float, int]]: ...


# The family names of add_buckets' values, in its order: (bucket names, "_count", "_sum") per measure.
_ADD_BUCKET_NAMES = tuple((tuple(f"{prefix}_{name}" for name in names), f"{prefix}_count", f"{prefix}_sum")
                          for prefix, names, _doc in ADD_BUCKETS)

ADD_BUCKET_FAMILIES = tuple(name for names, count, total in _ADD_BUCKET_NAMES for name in (*names, count, total))


def ledger_namespace(ledger_name: str) -> str:
    """The namespace Pulsar's ManagedLedgerMetrics and ManagedCursorMetrics put a managed ledger in: the first three
    parts of its name, ``tenant/namespace/persistent`` (the topic's domain included)."""
    return "/".join(ledger_name.split("/", 3)[:3])


def add_buckets(topic: AnyTopic) -> list[tuple[str, float]]:
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


def switch_counts(topic: AnyTopic) -> Sequence[int]:
    """The ledger rollovers of the last interval by latency bucket (zeros for a non-persistent topic)."""
    stats = getattr(getattr(topic, "ledger", None), "add_stats", None)
    return stats.ledger_switch_latency_us.counts if stats is not None else (0,) * len(_SWITCH_KEYS)


# The sums keys of the ledger-switch latency buckets (one per range, the overflow last).
_SWITCH_KEYS = tuple(f"switch_{i}" for i in range(len(LATENCY_RANGES) + 1))


def ml_sums(sums: defaultdict[str, float], topic: AnyTopic, tc: TopicCounters, backlog: float,
            buckets: list[tuple[str, float]], sampler: StatsSampler) -> None:
    """Add one topic's managed ledger to its namespace's pulsar_ml_* sums (``backlog``: its subscriptions')."""
    write_rate = sampler.topic_entries_in.get(topic, 0.0)
    read_rate = sampler.topic_entries_read.get(topic, 0.0)
    sums["pulsar_ml_AddEntryBytesRate"] += tc.throughput_in
    sums["pulsar_ml_AddEntryWithReplicasBytesRate"] += tc.throughput_in
    sums["pulsar_ml_AddEntryMessagesRate"] += write_rate
    sums["pulsar_ml_NumberOfMessagesInBacklog"] += backlog
    sums["pulsar_ml_ReadEntriesRate"] += read_rate
    sums["pulsar_ml_ReadEntriesOpsCacheMissesRate"] += sampler.topic_read_misses.get(topic, 0.0)
    sums["pulsar_ml_ReadEntriesBytesRate"] += tc.throughput_out
    sums["pulsar_ml_ReadEntriesSucceeded"] += round(read_rate * sampler.interval_s)
    sums["pulsar_ml_StoredMessagesSize"] += tc.storage_size
    sums["pulsar_ml_MarkDeleteRate"] += sampler.topic_mark_deletes.get(topic, 0.0)
    for key, n in zip(_SWITCH_KEYS, switch_counts(topic), strict=True):
        sums[key] += n
    for name, value in buckets:
        sums[name] += value


def ml_values(sums: dict[str, float]) -> Iterator[tuple[str, str | None, float]]:
    """A namespace's pulsar_ml_* series from its ``ml_sums``: (family, quantile label or None, value)."""
    for name in ("pulsar_ml_AddEntryBytesRate", "pulsar_ml_AddEntryWithReplicasBytesRate",
                 "pulsar_ml_AddEntryMessagesRate", "pulsar_ml_NumberOfMessagesInBacklog", "pulsar_ml_ReadEntriesRate",
                 "pulsar_ml_ReadEntriesBytesRate", "pulsar_ml_ReadEntriesSucceeded", "pulsar_ml_StoredMessagesSize",
                 "pulsar_ml_MarkDeleteRate", "pulsar_ml_ReadEntriesOpsCacheMissesRate"):
        yield name, None, sums.get(name, 0.0)
    yield "pulsar_ml_AddEntrySucceed", None, sums.get("pulsar_storage_write_latency_count", 0.0)
    yield "pulsar_ml_AddEntryErrors", None, 0
    yield "pulsar_ml_ReadEntriesErrors", None, 0
    for family, prefix, ranges in (
            ("pulsar_ml_AddEntryLatencyBuckets", "pulsar_storage_write_latency", LATENCY_RANGES),
            ("pulsar_ml_LedgerAddEntryLatencyBuckets", "pulsar_storage_ledger_write_latency", LATENCY_RANGES),
            ("pulsar_ml_EntrySizeBuckets", "pulsar_entry_size", _SIZE_RANGES)):
        names = next(n for p, n, _d in ADD_BUCKETS if p == prefix)
        for quantile, bucket in zip(ranges, names, strict=False):
            yield family, quantile, sums.get(f"{prefix}_{bucket}", 0.0)
        yield f"{family}_OVERFLOW", None, sums.get(f"{prefix}_{names[-1]}", 0.0)
    for quantile, key in zip(LATENCY_RANGES, _SWITCH_KEYS, strict=False):
        yield "pulsar_ml_LedgerSwitchLatencyBuckets", quantile, sums.get(key, 0.0)
    yield "pulsar_ml_LedgerSwitchLatencyBuckets_OVERFLOW", None, sums.get(_SWITCH_KEYS[-1], 0.0)


def write_ml(out: Exposition, nl: str, sums: dict[str, float]) -> None:
    for family, quantile, value in ml_values(sums):
        out.add(family, nl if quantile is None else f'{nl},quantile="{quantile}"', value)


# Pulsar's ManagedCursorMetrics series (ManagedCursorMXBean) and the CursorStats counter each one reads.
_CURSOR_STATS = (("pulsar_ml_cursor_persistLedgerSucceed", "persist_ledger_succeed"),
                 ("pulsar_ml_cursor_persistLedgerErrors", "persist_ledger_errors"),
                 ("pulsar_ml_cursor_persistZookeeperSucceed", "persist_zookeeper_succeed"),
                 ("pulsar_ml_cursor_persistZookeeperErrors", "persist_zookeeper_errors"),
                 ("pulsar_ml_cursor_writeLedgerSize", "write_ledger_size"),
                 ("pulsar_ml_cursor_writeLedgerLogicalSize", "write_ledger_logical_size"),
                 ("pulsar_ml_cursor_readLedgerSize", "read_ledger_size"))
_NO_CURSOR_STATS = CursorStats()  # (a cursor whose state was never written: zeros)


def write_cursors(out: Exposition, cl: str, topics: list[AnyTopic]) -> None:
    """Pulsar's ManagedCursorMetrics series, one set per cursor (exposeManagedCursorMetricsInPrometheus)."""
    for topic in topics:
        ledger = getattr(topic, "ledger", None)
        if ledger is None:
            continue
        base = f'{cl},namespace="{escape(ledger_namespace(ledger.name))}",ledger_name="{escape(ledger.name)}"'
        cursor_stats = getattr(ledger, "cursor_stats", {})
        for name, cursor in sorted(ledger.cursors.items()):
            labels = f'{base},cursor_name="{escape(name)}"'
            out.add("pulsar_ml_cursor_nonContiguousDeletedMessagesRange", labels,
                    cursor.individually_deleted.range_count())
            stats = cursor_stats.get(name) or _NO_CURSOR_STATS
            for family, attr in _CURSOR_STATS:
                out.add(family, labels, getattr(stats, attr))


def cache_values(factory: object, sampler: StatsSampler, open_ledgers: int) -> list[tuple[str, float]]:
    """The broker-wide entry cache as Pulsar's ManagedLedgerCacheMetrics has it, with the count of open ledgers:
    (pulsar_ml_* name, value)."""
    cache = getattr(factory, "cache", None)
    s = sampler
    return [("pulsar_ml_count", open_ledgers),
            ("pulsar_ml_cache_used_size", getattr(cache, "size", 0)),
            ("pulsar_ml_cache_entries", len(cache) if cache is not None else 0),
            ("pulsar_ml_cache_inserted_entries_total", getattr(cache, "inserted", 0)),
            ("pulsar_ml_cache_evicted_entries_total", getattr(cache, "evictions", 0)),
            ("pulsar_ml_cache_evictions", round(s.cache_evictions_rate * s.interval_s)),
            ("pulsar_ml_cache_hits_rate", s.cache_hits_rate),
            ("pulsar_ml_cache_misses_rate", s.cache_misses_rate),
            ("pulsar_ml_cache_hits_throughput", s.cache_hits_throughput),
            ("pulsar_ml_cache_misses_throughput", s.cache_misses_throughput)]


def write_cache(out: Exposition, cl: str, factory: object, sampler: StatsSampler, open_ledgers: int) -> None:
    """The broker-wide entry cache (Pulsar's ManagedLedgerCacheMetrics), the count of open ledgers, and the reads
    in flight (InflightReadsLimiter, PendingReadsManager)."""
    for name, value in cache_values(factory, sampler, open_ledgers):
        out.add(name, cl, value)
    # No limit on the bytes of reads in flight (Pulsar's managedLedgerMaxReadsInFlightSizeInMB, 0 = none by default):
    # -1 for both, as Pulsar's InflightReadsLimiter writes when it is off.
    out.add("pulsar_ml_reads_inflight_bytes", cl, -1)
    out.add("pulsar_ml_reads_available_inflight_bytes", cl, -1)
    misses = getattr(getattr(factory, "stats", None), "cache_misses_total", None)
    if isinstance(misses, int):
        # Pulsar's PendingReadsManager counts the entries of cache misses, by whether a read already in flight had
        # them. Reads in flight are not shared here: every miss is read from storage (its other counters: n/a).
        out.add("pulsar_ml_cache_pendingreads_entries_read_total", cl, misses)
        out.add("pulsar_ml_cache_pendingreads_missed_total", cl, misses)


def write_ledger_storage(out: Exposition, cl: str, factory: object) -> None:
    """The file ledger's own pulsar_py_ledger_* series (nothing for a storage without a stats object)."""
    stats = getattr(factory, "stats", None)
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


def write_disk_space(out: Exposition, cl: str, disk: StorageGuard | None) -> None:
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

