"""Reading entries of a file ledger: from the cache on the loop, or from disk on the worker pool.

A read whose entries are all cached completes through the cursor's ``OrderedCompleter``: inline
while the nesting limit allows, else posted. With the factory's ``page_cache_reads`` on (off by
default), a read whose missing entries are all in the OS page cache (a backlog written recently,
what a consumer catching up mostly reads) is served on the loop too: one ``preadv(RWF_NOWAIT)``
per run of records, which fails at once rather than wait for the disk. That spares the hand-off
to a worker thread and back (a submit, two thread wake-ups, a ``call_soon_threadsafe``), which
costs more CPU than the read itself. Any read that would wait for the disk (or fails: the worker
path then reports it) goes to the factory's worker pool: the read *reserves* its place in the
cursor's completion order first, so a later cache hit of the same cursor cannot overtake it, and
the pool thread (pure I/O: open, a pread per ~1 MB of a run of consecutive records, CRC checks) hands the
bytes back with ``call_soon_threadsafe``. The loop then fills the reservation, and the entries go
into the cache.

A sequential read that misses reads ahead: the entries after it in the same ledger (up to
``READ_AHEAD_ENTRIES`` / ``READ_AHEAD_BYTES``, none past the last confirmed entry) come in the
same pread and go into the cache, so the reads that follow (a consumer asks for a few entries per
FLOW) are cache hits completed on the loop instead of one worker hand-off each. BookKeeper's
DbLedgerStorage does the same after a read-cache miss (``dbStorage_readAheadCacheBatchSize``).
Replays (positions picked out of order) do not read ahead.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import NamedTuple, cast

from managed_ledger import segment
from managed_ledger.api import EntryNotFoundError, ManagedLedgerError, ReadCallback
from managed_ledger.completion import OrderedCompleter
from managed_ledger.entry import Entry
from managed_ledger.fs import FileSystem
from managed_ledger.position import Position
from managed_ledger.read_cache import ReadCache
from managed_ledger.segment import CorruptEntryError
from managed_ledger.stats import FileLedgerStats

Span = tuple[int, int]  # (offset, record length) in a segment file


class OffloadedRun(NamedTuple):
    """Consecutive entries of a ledger whose only copy is offloaded: ``read(first, last)`` reads them (blocking: on
    the pool)."""

    read: Callable[[int, int], list[bytes]]
    first: int
    last: int


# (segment path, first offset, spans of consecutive records), or a run of an offloaded ledger
ReadJob = tuple[str, int, list[Span]] | OffloadedRun
# Where consecutive entries are: (ledger id, first entry id, count) -> their job.
Locate = Callable[[int, int, int], ReadJob]
# The stored positions after a position in its ledger, up to (entries, bytes), none unconfirmed.
Following = Callable[[Position, int, int], list[Position]]

# Read-ahead after a miss of a sequential read. 100 entries is BookKeeper's DbLedgerStorage
# default read-ahead batch; the byte bound keeps one read-ahead a small share of the cache (and a
# worker's pread short) when entries are large batches.
READ_AHEAD_ENTRIES = 100
READ_AHEAD_BYTES = 1 << 20


class EntryReader:
    """Entry fetching for one managed ledger instance (loop-owned)."""

    def __init__(
        self,
        owner: int,
        locate: Locate,
        cache: ReadCache,
        pool: ThreadPoolExecutor,
        fs: FileSystem,
        stats: FileLedgerStats,
        *,
        page_cache_reads: bool = False,
        direct_reads: bool = False,
        following: Following | None = None,
    ) -> None:
        self._owner = owner  # cache key prefix: unique per managed-ledger instance
        self._locate = locate
        self._cache = cache
        self._pool = pool
        self._fs = fs
        self._stats = stats
        self._page_cache_reads = page_cache_reads
        self._direct_reads = direct_reads
        self._following = following
        # Bound the read-ahead by the cache too: it must not push out what readers need now.
        self._ahead_bytes = min(READ_AHEAD_BYTES, cache.max_bytes // 16)
        self.last_read_ahead: Position | None = None
        self._loop = asyncio.get_running_loop()

    def remember(self, first: Position, data: list[bytes]) -> None:
        """Cache entries just added at consecutive positions from ``first``."""
        self._cache.put_run(self._owner, first, data)

    def forget_all(self) -> None:
        self._cache.drop_owner(self._owner)

    def evict_before(self, position: Position) -> None:
        """Drop cached entries before position (every reader has read past them)."""
        self._cache.evict_before(self._owner, position[0], position[1])

    def cached(self, positions: list[Position]) -> list[Entry] | None:
        """The entries at positions when every one is cached (counted as ``fetch`` counts hits), else None."""
        hit = self._cache.get_all(self._owner, positions)
        if hit is None:
            return None
        found, nbytes = hit
        stats = self._stats
        stats.cache_hits_total += len(found)
        stats.cache_hit_bytes_total += nbytes
        self.last_read_ahead = None
        return found

    def fetch(
        self,
        positions: list[Position],
        completer: OrderedCompleter,
        callback: ReadCallback,
        on_fail: Callable[[], None] | None,
    ) -> bool:
        """Complete callback with the entries at positions (stored, ascending), in completer's order."""
        cache, owner, stats = self._cache, self._owner, self._stats
        found: list[Entry | None] = [cache.get(owner, p) for p in positions]
        missing = [i for i, e in enumerate(found) if e is None]
        hits = len(positions) - len(missing)
        if hits:
            stats.cache_hits_total += hits
            stats.cache_hit_bytes_total += sum([len(e.data) for e in found if e is not None])
        if not missing:
            self.last_read_ahead = None
            completer.complete(partial(callback, cast("list[Entry]", found), None))
            return False
        stats.cache_misses_total += len(missing)
        wanted = [positions[i] for i in missing]
        ahead = self._ahead(positions[-1]) if on_fail is not None else []
        self.last_read_ahead = ahead[-1] if ahead else None
        jobs = self._jobs(wanted + ahead)
        cached = read_from_page_cache(self._fs, jobs) if self._page_cache_reads else None
        if cached is not None:
            stats.page_cache_reads_total += 1
            self._take(positions, found, missing, ahead, itertools.chain.from_iterable(cached))
            completer.complete(partial(callback, cast("list[Entry]", found), None))
            return False
        fill = completer.reserve()

        def finished(result: Future[list[list[bytes]]]) -> None:
            # On the loop: merge the disk data with the cache hits, in position order.
            exc = result.exception()
            if exc is not None:
                self._count_failure(exc)
                if on_fail is not None:
                    on_fail()
                fill(partial(callback, [], _read_error(exc)))
                return
            self._take(positions, found, missing, ahead, itertools.chain.from_iterable(result.result()))
            fill(partial(callback, cast("list[Entry]", found), None))

        loop = self._loop

        def posted(result: Future[list[list[bytes]]]) -> None:
            try:
                loop.call_soon_threadsafe(finished, result)
            except RuntimeError:  # the loop is closed: nobody waits for this read any more
                pass

        self._pool.submit(read_from_disk, self._fs, jobs, self._direct_reads).add_done_callback(posted)
        return True

    def _ahead(self, last: Position) -> list[Position]:
        """The positions to read ahead after ``last`` (a sequential read's last one): those that
        follow it in its ledger, up to the first one already cached."""
        if self._following is None or self._ahead_bytes <= 0:
            return []
        following = self._following(last, READ_AHEAD_ENTRIES, self._ahead_bytes)
        out = following[: self._cache.uncached_prefix(self._owner, following)]
        if out:
            self._stats.read_ahead_entries_total += len(out)
        return out

    def _take(self, positions: list[Position], found: list[Entry | None], missing: list[int],
              ahead: list[Position], data: Iterator[bytes]) -> None:
        """On the loop: fill the missed entries from ``data`` (disk order: the missed ones, then the
        read-ahead) and cache all of it."""
        cache, owner, stats = self._cache, self._owner, self._stats
        for i in missing:
            d = next(data)
            found[i] = Entry(positions[i], d)
            cache.put(owner, positions[i], d)
            stats.cache_miss_bytes_total += len(d)
        if not ahead:
            return
        rest = list(data)
        stats.cache_miss_bytes_total += sum([len(d) for d in rest])  # (read from storage too)
        if len(rest) != len(ahead):
            raise ManagedLedgerError(f"read ahead returned {len(rest)} entries for {len(ahead)}")
        if any(cache.contains(owner, p) for p in ahead):  # another read cached some meanwhile
            for p, d in zip(ahead, rest, strict=True):
                cache.put(owner, p, d)
        else:
            cache.put_run(owner, ahead[0], rest)  # consecutive ids of one ledger (_ahead)

    async def read(self, position: Position) -> Entry:
        """One stored entry (the caller checked that it is stored)."""
        cached = self._cache.get(self._owner, position)
        if cached is not None:
            return cached
        future = self._pool.submit(read_from_disk, self._fs, self._jobs([position]), self._direct_reads)
        try:
            [[data]] = await asyncio.wrap_future(future)
        except (OSError, ManagedLedgerError) as exc:
            self._count_failure(exc)
            raise _read_error(exc) from exc
        self._cache.put(self._owner, position, data)
        return Entry(position, data)

    def _count_failure(self, exc: BaseException) -> None:
        self._stats.add(read_errors_total=1)
        if isinstance(exc, CorruptEntryError):
            self._stats.add(corrupt_records_total=1)

    def _jobs(self, positions: list[Position]) -> list[ReadJob]:
        """Group positions (ascending, distinct) into runs of consecutive entries of one segment."""
        locate = self._locate
        n = len(positions)
        ledger_id, first = positions[0]
        last_ledger, last = positions[-1]
        if last_ledger == ledger_id and last - first == n - 1:  # one run (a read and its read-ahead, mostly)
            return [locate(ledger_id, first, n)]
        jobs: list[ReadJob] = []
        i = 0
        while i < n:
            ledger_id, first = positions[i]
            j = i + 1
            while j < n and positions[j][0] == ledger_id and positions[j][1] == first + j - i:
                j += 1
            jobs.append(locate(ledger_id, first, j - i))
            i = j
        return jobs


def read_from_disk(fs: FileSystem, jobs: list[ReadJob], direct: bool = False) -> list[list[bytes]]:
    """Worker thread: one open per run of records, a pread per ~1 MB of it into its reusable buffer (segment.read_run);
    direct: with direct I/O (segments written with it are not in the page cache)."""
    out: list[list[bytes]] = []
    for job in jobs:
        if isinstance(job, OffloadedRun):
            out.append(job.read(job.first, job.last))
            continue
        path, _, spans = job
        try:
            handle = fs.open_read(path, direct=direct)
        except FileNotFoundError as exc:
            raise EntryNotFoundError(f"segment {path} is gone (ledger trimmed)") from exc
        try:
            out.append(segment.read_run(handle, spans))
        finally:
            handle.close()
    return out


def read_from_page_cache(fs: FileSystem, jobs: list[ReadJob]) -> list[list[bytes]] | None:
    """On the loop: what ``read_from_disk`` would return if every byte is in the page cache, else
    None (nothing waits for the disk; an error of any kind also gives None, for the worker path
    to meet it again and report it)."""
    out: list[list[bytes]] = []
    for job in jobs:
        if isinstance(job, OffloadedRun):
            return None
        path, first_offset, spans = job
        try:
            handle = fs.open_read(path)
        except OSError:
            return None
        try:
            run = segment.read_run_cached(handle, first_offset, spans)
        except (OSError, CorruptEntryError):
            return None
        finally:
            handle.close()
        if run is None:
            return None
        out.append(run)
    return out


def _read_error(exc: BaseException) -> ManagedLedgerError:
    if isinstance(exc, ManagedLedgerError):
        return exc
    error = ManagedLedgerError(f"read failed: {exc}")
    error.__cause__ = exc
    return error
