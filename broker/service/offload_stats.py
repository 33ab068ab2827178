"""Pulsar's LedgerOffloaderStats (brk_ledgeroffloader_* on /metrics): per topic, what the offloader wrote and read,
its errors, its latencies, and the deletions of copies. The managed ledgers report by managed-ledger name (from the
loop and from pool threads: a lock guards everything); a scrape names each by its topic and namespace.

As Pulsar's: the offload and read rates are the bytes of the last stats interval per second; a topic the offloader has
not touched for two minutes leaves the metrics; the latencies are in microseconds (a summary: quantiles over the last
stats interval, count and sum since start). Pulsar records a read of a copy's data per entry; here one read of
several entries counts as that many entries of its mean latency.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.service.operation_stats import LatencySummary
from broker.topic_name import decode_local_name

IDLE_S = 120.0  # (Pulsar's cleanExpiredTopicMetrics: two minutes)
_US = 1_000_000


@dataclass
class LedgerOffloadCounts:
    """One managed ledger's (a topic's) numbers. Latencies in microseconds."""

    offload_errors: int = 0
    write_errors: int = 0
    read_errors: int = 0
    read_bytes: int = 0
    deleted: int = 0
    delete_failures: int = 0
    offload_rate: float | None = None  # bytes/s of the last interval (None: no interval ended yet)
    read_rate: float | None = None
    read_ledger_latency: LatencySummary = field(default_factory=LatencySummary)
    index_latency: LatencySummary = field(default_factory=LatencySummary)
    data_latency: LatencySummary = field(default_factory=LatencySummary)
    offloaded_in_interval: int = 0
    read_in_interval: int = 0
    touched: float = 0.0


class OffloaderStats:
    """The broker's offload statistics, by managed-ledger name (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_ledger: dict[str, LedgerOffloadCounts] = {}

    def _counts(self, managed_ledger: str) -> LedgerOffloadCounts:
        counts = self._by_ledger.get(managed_ledger)
        if counts is None:
            counts = self._by_ledger[managed_ledger] = LedgerOffloadCounts()
        counts.touched = self._clock()
        return counts

    # -- what the managed ledgers report (OffloadStatsSink) ---------------------------------------

    def offloaded(self, managed_ledger: str, nbytes: int) -> None:
        with self._lock:
            self._counts(managed_ledger).offloaded_in_interval += nbytes

    def source_read(self, managed_ledger: str, seconds: float) -> None:
        with self._lock:
            self._counts(managed_ledger).read_ledger_latency.observe(seconds * _US)

    def write_failed(self, managed_ledger: str) -> None:
        with self._lock:
            self._counts(managed_ledger).write_errors += 1

    def offload_failed(self, managed_ledger: str) -> None:
        with self._lock:
            self._counts(managed_ledger).offload_errors += 1

    def index_read(self, managed_ledger: str, seconds: float) -> None:
        with self._lock:
            self._counts(managed_ledger).index_latency.observe(seconds * _US)

    def copy_read(self, managed_ledger: str, nbytes: int, entries: int, seconds: float) -> None:
        with self._lock:
            counts = self._counts(managed_ledger)
            counts.read_bytes += nbytes
            counts.read_in_interval += nbytes
            if entries:
                counts.data_latency.observe_n(seconds * _US / entries, entries)

    def copy_read_failed(self, managed_ledger: str) -> None:
        with self._lock:
            self._counts(managed_ledger).read_errors += 1

    def copy_deleted(self, managed_ledger: str, ok: bool) -> None:
        with self._lock:
            counts = self._counts(managed_ledger)
            if ok:
                counts.deleted += 1
            else:
                counts.delete_failures += 1

    # -- the stats interval and the scrape ------------------------------------------------------------

    def rotate(self, interval_s: float) -> None:
        """An interval of ``interval_s`` ended: its rates and quantiles; topics idle for two minutes dropped."""
        with self._lock:
            now = self._clock()
            for name in [n for n, c in self._by_ledger.items() if now - c.touched >= IDLE_S]:
                del self._by_ledger[name]
            for counts in self._by_ledger.values():
                counts.offload_rate = counts.offloaded_in_interval / interval_s
                counts.read_rate = counts.read_in_interval / interval_s
                counts.offloaded_in_interval = counts.read_in_interval = 0
                for summary in (counts.read_ledger_latency, counts.index_latency, counts.data_latency):
                    summary.rotate()

    def by_topic(self) -> list[tuple[str, str, LedgerOffloadCounts]]:
        """(namespace, topic, numbers) of each managed ledger reported, sorted (the numbers as they are now: read
        them on the loop, as the scrape does; the pool threads only add)."""
        with self._lock:
            items = sorted(self._by_ledger.items())
        return [(*topic_of(name), counts) for name, counts in items]


def topic_of(managed_ledger: str) -> tuple[str, str]:
    """(namespace, topic) of a managed-ledger name (Pulsar's TopicName.fromPersistenceNamingEncoding: tenant/ns/
    persistent/<encoded local name>); another name is its own namespace and topic, as Pulsar's "unknown" would say
    nothing better."""
    parts = managed_ledger.split("/", 3)
    if len(parts) == 4:
        return f"{parts[0]}/{parts[1]}", f"{parts[2]}://{parts[0]}/{parts[1]}/{decode_local_name(parts[3])}"
    return managed_ledger, managed_ledger
