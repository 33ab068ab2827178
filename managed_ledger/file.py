"""File-backed managed ledgers: segment files, group commit, persisted cursors, a bounded cache.

Threads and ownership (ARCHITECTURE.md "Concurrency rules"): the event loop owns every
managed ledger, cursor, index and the cache. The factory owns two kinds of threads, started
lazily and joined by ``close()``:

- one writer thread (``writer.GroupCommitWriter``) that does all writes and syncs, batching
  concurrent appends under one fsync;
- a worker pool (``read_threads``) for disk reads and for scanning segments on open.

Both only do I/O on values handed to them and return results with ``call_soon_threadsafe``.

Modules: ``file_ledger`` (a managed ledger: adds, fencing, cursors), ``file_cursor`` (reads
and batched persistence of cursors), ``file_reads`` (cache and disk reads), ``writer`` (group
commit), ``file_layout`` (directories, recovery scan), ``segment`` (the segment file format),
``cursor_store`` (the cursor state format), ``fs`` (the file-system interface).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import posixpath
import resource
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from managed_ledger import file_layout, segment
from managed_ledger.api import (
    LedgerNotFoundError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    StoredCursorState,
    StoredLedger,
    StoredLedgerRow,
    StoredManagedLedgerInfo,
)
from managed_ledger.disk_space import DiskSpaceGuard, DiskSpacePolicy
from managed_ledger.file_layout import NAME_FILE, decode_name, encode_name, join
from managed_ledger.file_ledger import FileManagedLedger
from managed_ledger.fs import FileSystem, OsFileSystem
from managed_ledger.ledger_base import Clock, settled
from managed_ledger.offload.api import Offloader, OffloadStatsSink
from managed_ledger.offload.tiered import delete_copies, ledgers_with_copies, offloader_in
from managed_ledger.read_cache import ReadCache
from managed_ledger.single_flight import SingleFlight
from managed_ledger.stats import FileLedgerStats
from managed_ledger.writer import (
    DEFAULT_GROUP_BYTES,
    DEFAULT_GROUP_MIN_BYTES,
    DEFAULT_GROUP_WAIT_S,
    GroupCommitWriter,
)

log = logging.getLogger(__name__)

# Default worker threads for disk reads: reads are short preads, and the machine's cores belong
# to the event loop first.
DEFAULT_READ_THREADS = 2
# Pulsar's managedLedgerDefaultMarkDeleteRateLimit (1 persisted mark-delete per second per cursor).
DEFAULT_CURSOR_PERSIST_INTERVAL_S = 1.0
# A fenced ledger tries to recover at most this often (on an add), so a full disk does not
# turn a flood of sends into a flood of failing file creations and error logs.
DEFAULT_FAULT_RETRY_INTERVAL_S = 1.0


class FileManagedLedgerFactory(ManagedLedgerFactory):
    """Managed ledgers stored under ``root_dir`` (layout: ``file_layout``).

    sync: fdatasync every batch of appends before confirming it (the default). False confirms
    once the data is in the OS page cache: it survives a broker crash but NOT a power cut or
    kernel crash - receipted messages of the last seconds can be lost. Use only where that is
    acceptable (tests, throw-away data).
    group_wait_s, group_bytes, group_min_bytes: group commit of steady streams (see ``writer``).
    direct_io: write segments with direct I/O (O_DIRECT) where the file system has it, when syncing
    (see ``writer``), and read entries that miss the read cache the same way; False: through the page
    cache.
    max_open_files: segment files kept open for appends (the least recently used beyond it are
    closed and reopened on demand); default: half the process's file-descriptor limit.
    cache_size_bytes: the read cache, shared by all managed ledgers of the factory (the
    ``cache_size_bytes`` of a ManagedLedgerConfig is not used by this implementation).
    cursor_persist_interval_s: the least time between two writes of a durable cursor's state (the
    first change after a quiet interval is written at once; the crash window for redelivery);
    ``flush()``, ``save_now()`` and a reset do not wait.
    fault_retry_interval_s: how often a fenced managed ledger may try to recover.
    disk_space: the free-space floor (``disk_space``): new entries are refused while the file
    system of root_dir is too full; None: no floor (a write failing with ENOSPC still fails).
    page_cache_reads: serve a read whose data is all in the OS page cache on the loop (no worker
    thread; ``file_reads``). Off by default: it saves ~25% of the broker's CPU per consumed message
    but, on a machine whose cores are contended, the single loop thread then gets less CPU than the
    loop and a reader thread together, and consume throughput fell (docs/benchmarks.md). Only with
    direct_io off: direct writes leave nothing in the page cache.
    migrate_names: the name today of a managed ledger that a store of an older layout (``file_layout``: no
    ``layout`` file) holds as the argument; such a store is renamed so once, on start. None: an older store's names
    are left as they are (an interrupted renaming is finished all the same).
    fs: the file system (tests put a fault-injecting one here).
    """

    def __init__(
        self,
        root_dir: str,
        *,
        clock: Clock = time.time,
        sync: bool = True,
        group_wait_s: float = DEFAULT_GROUP_WAIT_S,
        group_bytes: int = DEFAULT_GROUP_BYTES,
        group_min_bytes: int = DEFAULT_GROUP_MIN_BYTES,
        max_open_files: int | None = None,
        direct_io: bool = True,
        cache_size_bytes: int = ManagedLedgerConfig.cache_size_bytes,
        read_threads: int = DEFAULT_READ_THREADS,
        cursor_persist_interval_s: float = DEFAULT_CURSOR_PERSIST_INTERVAL_S,
        fault_retry_interval_s: float = DEFAULT_FAULT_RETRY_INTERVAL_S,
        disk_space: DiskSpacePolicy | None = None,
        page_cache_reads: bool = False,
        migrate_names: Callable[[str], str] | None = None,
        fs: FileSystem | None = None,
        offloader: Offloader | None = None,
    ) -> None:
        super().__init__()
        # Where closed ledgers are offloaded to, and read from once their local copy is deleted (None: nowhere).
        self.offloader = offloader
        self.offload_stats: OffloadStatsSink | None = None  # (where offloads are counted: the broker's)
        self._migrate_names = migrate_names
        self.root = str(root_dir)
        self.clock = clock
        self.fs: FileSystem = fs if fs is not None else OsFileSystem()
        self.stats = FileLedgerStats()
        self.cache = ReadCache(cache_size_bytes)
        self.cursor_persist_interval_s = cursor_persist_interval_s
        self.fault_retry_interval_s = fault_retry_interval_s
        self.direct_io = direct_io and sync  # segments written (and read) with direct I/O where possible
        self.page_cache_reads = page_cache_reads and not self.direct_io  # (segments are not in the page cache)
        self.writer = GroupCommitWriter(self.fs, self.stats, sync=sync, group_wait_s=group_wait_s,
                                        group_bytes=group_bytes, group_min_bytes=group_min_bytes,
                                        max_open_files=max_open_files or default_max_open_files(),
                                        direct_io=direct_io)
        self.pool = ThreadPoolExecutor(max(1, read_threads), thread_name_prefix="ml-read")
        self._ml_dir = join(self.root, "ml")
        self._trash = join(self.root, "trash")
        self._names: dict[str, str] = {}  # stored managed ledgers: name -> directory
        self._open: dict[str, FileManagedLedger] = {}
        self._opening: SingleFlight[str, FileManagedLedger] = SingleFlight("managed-ledger open")
        self._creating: SingleFlight[str, bool] = SingleFlight("managed-ledger create")
        self._instance_ids = itertools.count(1)  # cache owner ids: never reused
        self._closed = False
        self._ledger_ids = self._scan_root()
        self.disk = DiskSpaceGuard(self.root, disk_space) if disk_space is not None else None

    def _scan_root(self) -> file_layout.LedgerIds:
        """Blocking start-up work (the factory is built before the broker serves anything)."""
        fs = self.fs
        fs.makedirs(self._ml_dir)
        fs.makedirs(self._trash)
        # The directory entries of root, ml/ and trash/ must survive a power cut too.
        for directory in (_parent_dir(self.root), self.root):
            fs.fsync_dir(directory)
        for leftover in fs.listdir(self._trash):  # deletions a crash interrupted
            fs.remove_tree(join(self._trash, leftover))
        file_layout.migrate_names(fs, self.root, self._migrate_names)  # (an older store's names: today's)
        highest = 0
        for entry in sorted(fs.listdir(self._ml_dir)):
            directory = join(self._ml_dir, entry)
            files = fs.listdir(directory)
            ids = [i for i in map(segment.ledger_id_of, files) if i is not None]
            highest = max([highest, *ids])
            if entry.startswith(file_layout.STAGED_PREFIX):  # (a renaming could not place it: see its log)
                log.error("managed-ledger directory %s: left aside by a renaming of names; ignored", directory)
                continue
            # The directory's name spells the ledger's name, except for long names (hashed),
            # which a "name" file inside records.
            name = file_layout.stored_name(fs, directory, entry)
            if name is None:
                if not ids:  # a creation the crash interrupted: nothing in it
                    fs.remove_tree(directory)
                else:
                    log.error("managed-ledger directory %s has segments but no readable name: ignored", directory)
                continue
            self._names[name] = directory
        return file_layout.LedgerIds(fs, join(self.root, "ledger-ids"), highest)

    # -- the factory interface ------------------------------------------------------------------

    def resize_cache(self, max_bytes: int) -> None:
        self.cache.resize(max_bytes)

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> FileManagedLedger:
        if self._closed:
            raise ManagedLedgerError("managed-ledger factory is closed")
        ledger = await settled(self._open, name)
        if ledger is not None:
            return ledger
        return await self._opening.run(name, lambda: self._load(name, config or ManagedLedgerConfig()))

    async def _load(self, name: str, config: ManagedLedgerConfig) -> FileManagedLedger:
        creating = self._creating.get(name)
        if creating is not None:  # (its directory, being made: opened as stored once it is)
            with contextlib.suppress(ManagedLedgerError):
                await creating
        directory = self._names.get(name)
        if directory is not None:
            recovered = await asyncio.get_running_loop().run_in_executor(
                self.pool, file_layout.recover_directory, self.fs, directory, self.stats
            )
            ledger = FileManagedLedger(self, name, directory, config, recovered)
            await ledger._start()
            self._open[name] = ledger
            return ledger
        # A new one: its directory and its first segment are queued to the writer together, in that order, so
        # they are made in one round, and no directory is synced for them then: opening costs no fsync. Their
        # names become durable with the first thing that depends on them (the first add, a cursor's file: see
        # FileManagedLedger._unsynced_dirs), before it is confirmed. Until then a power cut may take the empty
        # managed ledger back (nothing in it was confirmed; a topic is made again on its next use); an explicit
        # creation syncs at once (``sync_creation``).
        directory = join(self._ml_dir, encode_name(name))
        made = self._submit_on_writer(partial(_create_directory, self.fs, directory, name))
        ledger = FileManagedLedger(self, name, directory, config, file_layout.Recovered())  # nothing to scan
        started = asyncio.ensure_future(ledger._finish_start(ledger._begin_start(_parent_dir(directory))))
        await asyncio.wait([made, started])
        made_error = made.exception()
        if made_error is not None:  # (then the segment could not be made either, or was made in a directory
            if started.exception() is None:  # whose name may not be durable: not opened)
                await ledger.close()
            raise made_error
        started.result()  # (its error, if any)
        self._names[name] = directory
        self._names_changed(name)
        self._open[name] = ledger
        return ledger

    async def create(self, name: str) -> bool:
        if self._closed:
            raise ManagedLedgerError("managed-ledger factory is closed")
        opening = self._opening.get(name)
        if opening is not None:  # (an open under way makes it, or fails to)
            with contextlib.suppress(ManagedLedgerError):
                await opening
        if name in self._names:
            return False
        return await self._creating.run(name, lambda: self._create(name))

    async def _create(self, name: str) -> bool:
        """Its directory, no segment yet (what a crash leaves of an open before its first add, which ``_scan_root``
        and ``_load`` take as a managed ledger with nothing in it), its name synced at once: the creations of one
        writer round share one sync of ml/ (a partitioned topic's partitions are made side by side)."""
        if name in self._names:
            return False
        directory = join(self._ml_dir, encode_name(name))
        hashed = decode_name(posixpath.basename(directory)) != name  # (its "name" file's entry is synced too)
        await self._run_on_writer(partial(_create_directory, self.fs, directory, name),
                                  self._ml_dir, *((directory,) if hashed else ()))
        if name in self._names:
            return False
        self._names[name] = directory
        self._names_changed(name)
        return True

    async def delete(self, name: str, config: ManagedLedgerConfig | None = None) -> None:
        ledger = await settled(self._open, name)
        if ledger is not None:
            await ledger.delete()
            return
        directory = self._names.get(name)
        if directory is None:
            raise LedgerNotFoundError(f"no managed ledger named {name!r}")
        loop = asyncio.get_running_loop()
        offloaded = await loop.run_in_executor(self.pool, file_layout.read_offloads, self.fs, directory)
        await self._remove_directory(name, directory)
        # (Pulsar's delete truncates first: no offloaded copy is left behind)
        await delete_copies(offloader_in(config, self.offloader), name, offloaded,
                            partial(loop.run_in_executor, self.pool), self.offload_stats)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # no new opens from here on
        await self._opening.wait()  # let opens in progress finish, so their ledgers get closed below
        await self._creating.wait()  # (and creations: they need the writer)
        for ledger in list(self._open.values()):
            await ledger.close()
            await ledger.wait_ended()  # (one closing already: its close finishes before the writer stops)
        if self.writer._loop is not None:
            await self.writer.barrier()
        self.writer.stop()
        self.pool.shutdown(wait=True)

    def list_names(self) -> list[str]:
        return sorted(self._names)

    async def stored_ledgers(self, name: str) -> dict[int, StoredLedger] | None:
        ledger = await settled(self._open, name)  # (one closing: what it leaves stored)
        if ledger is not None:
            return ledger.stored_ledgers()
        directory = self._names.get(name)
        if directory is None:
            return None
        loop = asyncio.get_running_loop()
        local, records = await loop.run_in_executor(self.pool, file_layout.stored_ledgers, self.fs, directory)
        return ledgers_with_copies(((ledger_id, None) for ledger_id in local), records)

    async def stored_info(self, name: str) -> StoredManagedLedgerInfo | None:
        """The segments, offload records and cursor files: an open managed ledger's ledgers from memory, a closed
        one's counted from its segments' record headers (segment.count_records); the cursors' saved states from
        their files. The file ledger keeps no versioned metadata document (version -1) nor creation times (none
        shown); modification times are the directory's and the cursor files' last writes."""
        ledger = await settled(self._open, name)
        directory = ledger.directory if ledger is not None else self._names.get(name)
        if directory is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            files = await loop.run_in_executor(self.pool, file_layout.read_stored, self.fs, directory, ledger is None)
        except FileNotFoundError:  # (deleted meanwhile)
            return None
        if ledger is not None:
            rows = ledger.stored_ledger_rows()
        else:
            uuids = {o.ledger_id: str(o.uuid) for o in files.offloads}
            local = {row[0] for row in files.segments}
            rows = sorted([*(StoredLedgerRow(i, entries, size, closed_ms, uuids.get(i))
                             for i, entries, size, closed_ms in files.segments if entries),
                           *(StoredLedgerRow(o.ledger_id, o.entries, o.size, round(o.closed_at * 1000), str(o.uuid))
                             for o in files.offloads if o.local_deleted and o.complete and o.ledger_id not in local)])
        cursors = {cursor: StoredCursorState(-1, None, modified_ms, -1, record)
                   for cursor, (record, modified_ms) in files.cursors.items()}
        return StoredManagedLedgerInfo(-1, None, files.modified_ms, rows, cursors, {})

    def exists(self, name: str) -> bool:
        return name in self._names

    # -- for the managed ledgers ------------------------------------------------------------------

    def _new_ledger_id(self) -> int:
        return self._ledger_ids.next()

    def _next_instance_id(self) -> int:
        return next(self._instance_ids)

    async def _run_on_writer(self, task: Callable[[], None], *sync_dirs: str) -> None:
        """Run task on the writer thread (in order with all writes); raise its error. sync_dirs:
        directories the task made names in (or whose new names it depends on), fsynced (grouped with
        the round's others) before this returns."""
        await self._submit_on_writer(task, *sync_dirs)

    def _submit_on_writer(self, task: Callable[[], None], *sync_dirs: str) -> asyncio.Future[None]:
        """``_run_on_writer`` queued now; the future is its outcome."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is None:
                future.set_result(None)
            else:
                future.set_exception(ManagedLedgerError(f"storage operation failed: {exc}"))

        self.writer.run(task, done, also_sync=sync_dirs)
        return future

    async def _remove_directory(self, name: str, directory: str) -> None:
        """Delete a managed ledger's files: rename into trash (atomic, synced), then remove."""
        fs = self.fs
        doomed = join(self._trash, uuid.uuid4().hex)

        def remove() -> None:
            fs.rename(directory, doomed)
            fs.fsync_dir(self._ml_dir)
            fs.remove_tree(doomed)

        await self._run_on_writer(remove)
        if self._names.pop(name, None) is not None:
            self._names_changed(name)

    def _forget(self, ledger: FileManagedLedger) -> None:
        if self._open.get(ledger.name) is ledger:
            del self._open[ledger.name]
        ledger._ended.set()


def default_max_open_files() -> int:
    """Half the process's soft limit on open files (the other half is left for connections)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(16, soft // 2)


def _parent_dir(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) or "."


def _create_directory(fs: FileSystem, directory: str, name: str) -> None:
    """A new managed ledger's directory, not yet durable (its cursors/ is made with its first cursor file).

    The directory's own name spells the ledger's name, so only a long (hashed) name needs a
    "name" file (its content synced here, before the name can become durable). The directory's
    entry in its parent and the entries inside it become durable before anything stored in it is
    confirmed: the managed ledger syncs both directories (grouped with the writer round's others)
    ahead of its first add or cursor file. A crash before that leaves an empty directory (a
    managed ledger with nothing in it) or none; one with a hashed name and no readable "name" file
    is removed on start.
    """
    fs.makedirs(directory)
    if decode_name(posixpath.basename(directory)) != name:
        fs.replace_atomically(join(directory, NAME_FILE), json.dumps({"name": name}).encode(), sync=True)


__all__ = ["FileManagedLedger", "FileManagedLedgerFactory"]
