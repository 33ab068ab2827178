"""Counters and histograms of the file ledger, for the broker to export as Prometheus metrics.

Written from the writer and worker threads, read from the loop: each object takes its own lock
for updates and ``snapshot()`` returns a consistent copy.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

# Upper bounds (seconds) of the fsync latency buckets: 100 us (NVMe with a write cache) to 1 s
# (a struggling spinning disk); +Inf is implicit. Same shape as BookKeeper's journal sync histograms.
FSYNC_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)
# Upper bounds of the group-commit batch size buckets (entries made durable by one fsync).
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class HistogramSnapshot:
    buckets: tuple[float, ...]  # upper bounds; counts has one more element, for +Inf
    counts: tuple[int, ...]  # per bucket, not cumulative
    count: int
    total: float  # sum of the observed values

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it), +Inf last: Prometheus' ``_bucket`` series."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)
        self._count = 0
        self._total = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            self._counts[i] += 1
            self._count += 1
            self._total += value

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            return HistogramSnapshot(self.buckets, tuple(self._counts), self._count, self._total)

    @property
    def count(self) -> int:
        return self._count


@dataclass
class FileLedgerStats:
    """Everything a FileManagedLedgerFactory counts (read attributes; do not write them)."""

    # Records found bad (torn, checksum mismatch, absurd length) by recovery or by a read.
    corrupt_records_total: int = 0
    # Bytes cut from segment tails by recovery (the bad record and everything after it).
    truncated_bytes_total: int = 0
    # Write or sync failures that fenced a managed ledger.
    write_errors_total: int = 0
    # Failed reads (I/O error or corrupt record) completed with an error.
    read_errors_total: int = 0
    # Entries made durable, bytes appended to segments, fsyncs of segments.
    entries_written_total: int = 0
    bytes_written_total: int = 0
    # Cursor state files written.
    cursor_persists_total: int = 0
    # Directories fsynced to make new names durable (one per directory per writer batch).
    directory_syncs_total: int = 0
    # Segment files reopened for an append after being parked (closed beyond the open-file limit).
    segment_reopens_total: int = 0
    # Entries of reads served from the cache / that went to disk, and their bytes (Pulsar's
    # ManagedLedgerFactoryMBean counts both: cache hits / misses rate and throughput).
    cache_hits_total: int = 0
    cache_misses_total: int = 0
    cache_hit_bytes_total: int = 0
    cache_miss_bytes_total: int = 0
    # Reads of missed entries served on the loop from the OS page cache (no worker thread).
    page_cache_reads_total: int = 0
    # Entries read ahead after a miss of a sequential read (into the cache, for the reads after it).
    read_ahead_entries_total: int = 0
    fsync_latency: Histogram = field(default_factory=lambda: Histogram(FSYNC_BUCKETS_S))
    group_commit_size: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **increments: int) -> None:
        """Thread-safe increments: ``stats.add(corrupt_records_total=1)``."""
        with self._lock:
            for name, n in increments.items():
                setattr(self, name, getattr(self, name) + n)


# Pulsar's managed-ledger add buckets (ManagedLedgerMBean): entry write latency in microseconds
# (from the add request until the entry is durable) and entry size in bytes (Pulsar 4.0.7's
# ManagedLedgerMBeanImpl bounds: its "1 MB" is 1_048_576). A value on a bound falls in that bound's
# bucket; one more bucket counts what is past the last bound.
ADD_LATENCY_BUCKETS_US: tuple[int, ...] = (500, 1_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 1_000_000)
ENTRY_SIZE_BUCKETS: tuple[int, ...] = (128, 512, 1_024, 2_048, 4_096, 16_384, 102_400, 1_048_576)


class IntervalBuckets:
    """Observations per bucket (not cumulative) over one stats interval, as Pulsar's StatsBuckets:
    ``refresh()`` publishes what was counted since the last refresh and starts over. Loop-only."""

    __slots__ = ("_counts", "_sum", "bounds", "counts", "sum")

    def __init__(self, bounds: tuple[int, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0
        self.counts: tuple[int, ...] = tuple(self._counts)  # the last interval's
        self.sum = 0

    def add(self, value: int, times: int = 1) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += times
        self._sum += value * times

    def add_each(self, values: list[int]) -> None:
        if len(values) <= 1:  # (one entry per add, as a batching client's SEND is stored, or none)
            if values:
                self.add(values[0])
            return
        counts, bounds = self._counts, self.bounds
        first = bisect.bisect_left(bounds, min(values))
        if first == bisect.bisect_left(bounds, max(values)):
            counts[first] += len(values)  # (all in one bucket: the usual batch of adds, one per SEND)
        else:
            for v in values:
                counts[bisect.bisect_left(bounds, v)] += 1
        self._sum += sum(values)

    def refresh(self) -> None:
        self.counts, self.sum = tuple(self._counts), self._sum
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0


class AddLatencySink(Protocol):
    """Where a process-wide view of add latency goes (the broker's pulsar_broker_publish_latency summary): called
    once per group of adds made durable together, never per entry."""

    def observe_n(self, ms: float, n: int) -> None: ...


class AddStats:
    """A managed ledger's adds over the last stats interval: write latency (request to durable, and
    of the write itself, from when the writer took it), and entry size. Also its reads, as plain
    counters since it opened (one increment per read operation, never per entry): entries read and
    read operations that missed the cache (Pulsar's ReadEntriesRate and ReadEntriesOpsCacheMissesRate
    are rates of these)."""

    __slots__ = ("entries_read", "entry_size", "ledger_switch_latency_us", "ledger_write_latency_us",
                 "mark_delete_ops", "read_ops", "read_ops_cache_missed", "sink", "write_latency_us")

    def __init__(self, sink: AddLatencySink | None = None) -> None:
        self.sink = sink
        self.write_latency_us = IntervalBuckets(ADD_LATENCY_BUCKETS_US)
        self.ledger_write_latency_us = IntervalBuckets(ADD_LATENCY_BUCKETS_US)
        self.entry_size = IntervalBuckets(ENTRY_SIZE_BUCKETS)
        # Rollovers: from starting to create the next ledger until it takes adds (Pulsar's
        # LedgerSwitchLatency, same buckets as the add latency).
        self.ledger_switch_latency_us = IntervalBuckets(ADD_LATENCY_BUCKETS_US)
        self.entries_read = 0
        self.read_ops = 0
        self.read_ops_cache_missed = 0
        # Cursor states written (Pulsar's markDeleteOps: one per mark-delete persisted, after the rate limit).
        self.mark_delete_ops = 0

    def added(self, latency_us: int, ledger_latency_us: int, count: int) -> None:
        """``count`` entries made durable together: ``latency_us`` from the add request, ``ledger_latency_us``
        from when the storage took them."""
        self.write_latency_us.add(latency_us, count)
        self.ledger_write_latency_us.add(ledger_latency_us, count)
        if self.sink is not None:
            self.sink.observe_n(latency_us / 1000.0, count)

    def count_read(self, entries: int, missed: bool) -> None:
        self.entries_read += entries
        self.read_ops += 1
        if missed:
            self.read_ops_cache_missed += 1

    def count_ledger_switch(self, started: float) -> None:
        """A rollover started at ``started`` (time.monotonic()) has its new ledger now."""
        self.ledger_switch_latency_us.add(int((time.monotonic() - started) * 1e6))

    def refresh(self) -> None:
        self.write_latency_us.refresh()
        self.ledger_write_latency_us.refresh()
        self.ledger_switch_latency_us.refresh()
        self.entry_size.refresh()


class CursorStats:
    """What one durable cursor's state writes did, as Pulsar's ManagedCursorMXBean counts them: writes to
    the cursor's own storage (Pulsar's cursor ledger; here also the file ledger's cursor state file) and
    to the metadata store, by outcome; bytes written (once, and times the copies kept) and read back at
    recovery. Loop-only plain counters."""

    __slots__ = ("persist_ledger_errors", "persist_ledger_succeed", "persist_zookeeper_errors",
                 "persist_zookeeper_succeed", "read_ledger_size", "write_ledger_logical_size", "write_ledger_size")

    def __init__(self) -> None:
        self.persist_ledger_succeed = self.persist_ledger_errors = 0
        self.persist_zookeeper_succeed = self.persist_zookeeper_errors = 0
        self.write_ledger_size = self.write_ledger_logical_size = self.read_ledger_size = 0

    def persisted_to_ledger(self, ok: bool, size: int = 0, copies: int = 1) -> None:
        if ok:
            self.persist_ledger_succeed += 1
            self.write_ledger_logical_size += size
            self.write_ledger_size += size * copies
        else:
            self.persist_ledger_errors += 1

    def persisted_to_metadata(self, ok: bool) -> None:
        if ok:
            self.persist_zookeeper_succeed += 1
        else:
            self.persist_zookeeper_errors += 1
