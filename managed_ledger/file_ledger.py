"""A file-backed managed ledger (see ``file`` for the factory and the overall design).

Adds: ``add_entry`` assigns the position at once (positions follow call order), puts the entry
in the cache (when the ledger has cursors) and queues its record with the writer thread; the
callback runs after the record is synced. Only then does ``last_confirmed_entry`` move, so
readers never see an entry that a crash could take back. ``number_of_entries``, ``total_size``
and ``ledgers_info`` count queued entries too.

Write failures: the first failed add fences the managed ledger. Every add queued after it fails
too (the writer guarantees that confirmed adds are a prefix), the bookkeeping is cut back to
the last confirmed entry, and later adds fail at once with LedgerFencedError. Recovery - cut
the unconfirmed bytes off the segment files, start a new ledger - is tried right away and then
on adds (at most every ``fault_retry_interval_s``), so the ledger heals when the fault clears;
reopening it recovers too.

Tiered storage (the factory's ``offloader``; the logic in managed_ledger/offload/tiered.py): each ledger's record
(managed_ledger/offload/state.py) is kept in the ``offloads`` file beside the segments; a ledger whose local copy is
deleted is read from its copy (file_reads.OffloadedRun) and known from its record alone.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import operator
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from managed_ledger import cursor_base, cursor_store, segment
from managed_ledger.api import (
    AddCallback,
    InitialPosition,
    LedgerClosedError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    StorageUnavailableError,
)
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.disk_space import NO_SPACE_ERRNOS, DiskSpaceGuard
from managed_ledger.file_cursor import CursorPersistence, FileCursor
from managed_ledger.file_layout import CURSORS, Recovered, encode_name, join
from managed_ledger.file_reads import EntryReader, OffloadedRun, ReadJob, read_from_disk
from managed_ledger.ledger_base import LedgerState
from managed_ledger.ledger_map import LedgerMap, LedgerMeta
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.state import OFFLOADS_FILE, LedgerOffload
from managed_ledger.offload.state import encode as encode_offloads
from managed_ledger.offload.tiered import OffloadBook, TieredLedger
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet
from managed_ledger.segment import SegmentIndex

if TYPE_CHECKING:
    from managed_ledger.file import FileManagedLedgerFactory

T = TypeVar("T")
_new_tuple = tuple.__new__  # a Position without the NamedTuple's keyword-taking __new__ (per entry read ahead)

log = logging.getLogger(__name__)
# A ledger's held adds (see _hold) while there are none: shared, never appended to (an empty deque is ~770 bytes).
_OPEN = LedgerState.OPEN  # (per add: a module constant costs a tenth of the Enum member's look-up, ledger_base)
_NOTHING_HELD: deque[tuple[list[bytes], AddCallback, float]] = deque()
_OFFLOAD_WORK: set[asyncio.Task[None]] = set()  # deletions of trimmed ledgers' offloaded copies under way


def _nothing() -> None:
    """A writer task that only carries directory syncs."""


class FileManagedLedger(TieredLedger):
    # (Its attributes and its bases' are more than an instance dict shares its keys for: slots save ~1.5 KB each.)
    __slots__ = ("_cursors_dir_made", "_dir", "_empty_on_disk", "_eviction_pending", "_factory", "_fenced", "_fs",
                 "_held", "_hold_timer", "_indexes", "_last_confirmed", "_last_recovery", "_loop",
                 "_names_sync_queued", "_paths", "_persistence", "_reader", "_recovering", "_stored", "_tier",
                 "_unsynced_dirs", "_writer")
    _reader: EntryReader
    _factory: FileManagedLedgerFactory

    def __init__(
        self,
        factory: FileManagedLedgerFactory,
        name: str,
        directory: str,
        config: ManagedLedgerConfig,
        recovered: Recovered,
    ) -> None:
        super().__init__(name, config, LedgerMap(), factory.nesting, factory.clock)
        self._factory = factory
        self._dir = directory
        self._fs = factory.fs
        self._writer = factory.writer
        self._indexes: dict[int, SegmentIndex] = {}
        self._paths: dict[int, str] = {}  # segment file of each ledger
        self._reader = EntryReader(factory._next_instance_id(), self._locate, factory.cache, factory.pool,
                                   factory.fs, factory.stats, page_cache_reads=factory.page_cache_reads,
                                   direct_reads=factory.direct_io, following=self._following)
        self._fenced = False
        self._recovering = False
        self._last_recovery = float("-inf")  # loop.time() of the last recovery attempt
        self._eviction_pending = False  # a cache eviction is scheduled (see _fetch)
        self._loop: asyncio.AbstractEventLoop = asyncio.get_running_loop()
        self._stored: dict[str, CursorRecord] = {}  # durable cursors' state, open handle or not
        self._empty_on_disk: list[int] = []  # segments without entries found on open: removed
        self._persistence = CursorPersistence(self, factory.cursor_persist_interval_s)
        # Adds held while the free-space floor refuses them (see _hold): (entries, callback, deadline).
        self._held = _NOTHING_HELD
        self._hold_timer: asyncio.TimerHandle | None = None
        # Directories holding a new name of this ledger not yet known durable (its current segment's, made on
        # open; its directory's parent, for a new ledger): synced before the first add or cursor file that
        # depends on them is confirmed (see _sync_names).
        self._unsynced_dirs: tuple[str, ...] = ()
        self._names_sync_queued = False
        # cursors/ exists and its name is durable: a ledger's first cursor file makes it (a topic with no
        # subscription has none, so opening a new one makes one directory, not two). A recovered confirmed
        # cursor proves it; otherwise the first cursor write makes it if missing and syncs its name.
        self._cursors_dir_made = bool(recovered.cursors)
        # Tiered storage (offload.tiered): the ledgers with a copy elsewhere, from the offloads file.
        self._tier = OffloadBook()
        self._restore(recovered)

    # -- opening --------------------------------------------------------------------------------

    def _restore(self, recovered: Recovered) -> None:
        """Rebuild the log shape and cursors from what the scan found (on the loop, no I/O)."""
        now = self._clock()
        segments = recovered.segments
        # A ledger was closed when the next one was created; the last one is closed now.
        closed = {seg.ledger_id: segments[i + 1].created_at if i + 1 < len(segments) else now
                  for i, seg in enumerate(segments)}
        local = {seg.ledger_id: seg for seg in segments if seg.index.entries > 0}
        # An offload record counts for a ledger still here, or for one whose only copy is the offloaded one; any
        # other (its ledger trimmed, or its copy never completed and the ledger gone) is dropped.
        offloads = self._tier.records
        offloads.update((o.ledger_id, o) for o in recovered.offloads
                        if o.ledger_id in local or (o.complete and o.local_deleted))
        for o in offloads.values():  # (a crash after the record said so, before the segment went)
            if o.local_deleted and o.ledger_id in local:
                del local[o.ledger_id]
        # Segments without entries, or whose ledger's local copy was deleted: removed (in _start).
        self._empty_on_disk = [seg.ledger_id for seg in segments if seg.ledger_id not in local]
        last: tuple[int, int] | None = None
        for ledger_id in sorted({*local, *offloads}):
            seg = local.get(ledger_id)
            if seg is not None:
                self._map.add_stored_ledger(ledger_id, seg.created_at, closed[ledger_id], seg.index.entries,
                                            seg.index.data_size)
                self._indexes[ledger_id] = seg.index
                last = (ledger_id, seg.index.entries)
            else:
                o = offloads[ledger_id]
                self._map.add_stored_ledger(ledger_id, o.closed_at, o.closed_at, o.entries, o.size)
                last = (ledger_id, o.entries)
        # Like Pulsar, (re)opening a managed ledger always starts a new ledger.
        current = self._factory._new_ledger_id()
        self._map.open_ledger(current, now)
        self._indexes[current] = SegmentIndex()
        self._last_confirmed = Position(last[0], last[1] - 1) if last else Position(current, -1)
        for name, record in recovered.cursors.items():
            changed = self._sanitize(name, record)
            self._stored[name] = record
            self._persistence.track(name, dirty=changed)
            self._cursors[name] = FileCursor(self, name, record, durable=True)

    def _sanitize(self, name: str, record: CursorRecord) -> bool:
        """Fit a stored cursor state to the recovered log; True if it had to change.

        A mark-delete past the last stored entry (data lost to a disk fault: synced data never
        goes missing otherwise) is pulled back, so the cursor never claims entries that are not
        there; acknowledged ranges outside stored entries are dropped; a mark-delete inside
        trimmed ledgers moves up to the first stored entry."""
        last = self._last_confirmed
        before = (record.mark_delete, list(record.individually_deleted))
        if record.mark_delete > last:
            log.warning("cursor %s/%s: mark-delete %s is past the last stored entry %s; pulled back",
                        self._name, name, record.mark_delete, last)
            record.mark_delete = last
        record.raise_floor(self._floor())
        ranges = PositionRangeSet()
        for first, end in record.individually_deleted:
            ledger_id = first.ledger_id
            meta = self._map.get(ledger_id)
            if meta is None or ledger_id > last.ledger_id:
                continue
            hi = min(end.entry_id, meta.entries - 1)
            if ledger_id == last.ledger_id:
                hi = min(hi, last.entry_id)
            if hi >= first.entry_id:
                ranges.add_range(ledger_id, first.entry_id, hi)
        ranges.remove_up_to(record.mark_delete)
        record.individually_deleted = ranges
        while (head := ranges.first_range()) is not None and head[0] == self._map.next_valid(record.mark_delete):
            record.mark_delete = head[1]
            ranges.remove_up_to(head[1])
        return (record.mark_delete, list(record.individually_deleted)) != before

    async def _start(self) -> None:
        """Create the new current ledger's segment (and drop empty ones); raise if that fails.

        On a full disk (ENOSPC, EDQUOT) the managed ledger opens fenced instead: what is stored
        can be read and acknowledged, adds fail with StorageUnavailableError, and it recovers (a
        new segment) on an add once there is room, like a ledger fenced by a failed write."""
        await self._finish_start(self._begin_start())
        self._opened()

    def _begin_start(self, *new_dirs: str) -> asyncio.Future[None]:
        """``_start``'s first part: the segment's creation queued to the writer now (its outcome: the future).

        Its directory entry is not synced now (an open costs no fsync): it is synced, with ``new_dirs`` (the
        parent of a directory just made for this ledger), ahead of the first add or cursor file (_sync_names)."""
        future: asyncio.Future[None] = self._loop.create_future()

        def created(exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is None:
                future.set_result(None)
            elif isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
                log.error("managed ledger %s opens read-only: cannot create a ledger: %s", self._name, exc)
                if self._factory.disk is not None:
                    self._factory.disk.write_failed(exc)
                self._fenced = True
                self._last_recovery = self._loop.time()
                future.set_result(None)
            else:
                future.set_exception(ManagedLedgerError(f"cannot create a ledger for {self._name}: {exc}"))

        current = self._map.current
        self._writer.create(self, self._segment_path(current.ledger_id),
                            segment.encode_header(current.ledger_id, current.created_at), created, sync_dir=False)
        self._unsynced_dirs = (self._dir, *new_dirs)
        for ledger_id in self._empty_on_disk:
            self._unlink_later(self._segment_path(ledger_id))
        return future

    async def _finish_start(self, future: asyncio.Future[None]) -> None:
        try:
            await future
        except BaseException:
            self._shut(LedgerState.CLOSED)
            self._persistence.stop()
            self._writer.release(self)
            raise
        for name in list(self._stored):
            if self._persistence.is_dirty(name):
                try:
                    await self._persistence.flush(name)
                except ManagedLedgerError as exc:
                    if not self._fenced:
                        raise
                    log.warning("%s: cursor %s not saved yet (kept in memory, retried): %s", self._name, name, exc)

    # -- hooks of the base ----------------------------------------------------------------------

    def _named_records(self) -> Iterable[tuple[str, CursorRecord]]:
        return self._stored.items()

    def _make_cursor(self, name: str, record: CursorRecord, durable: bool) -> FileCursor:
        return FileCursor(self, name, record, durable)

    def _entry_size(self, position: Position) -> int:
        index = self._indexes.get(position.ledger_id)
        if index is None:  # (only offloaded: its entries' sizes are not known here, their mean is)
            meta = self._map.get(position.ledger_id)
            return meta.size // meta.entries if meta is not None and meta.entries else 0
        return index.entry_size(position.entry_id)

    def _run_within(self, ledger_id: int, first: int, count: int, max_bytes: int) -> tuple[int, int]:
        index = self._indexes.get(ledger_id)
        if index is None:
            return super()._run_within(ledger_id, first, count, max_bytes)
        offsets = index.offsets
        size = offsets[first + count] - offsets[first] - count * segment.RECORD_HEADER_SIZE
        if size <= max_bytes or count == 1:  # all of them (the run's size from the index at once)
            return count, size
        return super()._run_within(ledger_id, first, count, max_bytes)

    def _remove_ledgers(self, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            if self._indexes.pop(ledger_id, None) is not None:
                self._unlink_later(self._segment_path(ledger_id))
            self._paths.pop(ledger_id, None)
        gone = self._tier.forget(ledger_ids)
        if gone:  # (Pulsar deletes a trimmed ledger's offloaded copy too, once its record no longer names it)
            self._spawn_offload_work(self._forget_offloads(gone), "offloaded copies of trimmed ledgers")

    def _cursor_state_changed(self, name: str) -> None:
        self._persistence.changed(name)

    def _stored_record(self, name: str) -> CursorRecord | None:
        return self._stored.get(name)

    def _write_cursor_state(self, name: str, record: CursorRecord,
                            done: Callable[[BaseException | None], None]) -> None:
        data = cursor_store.encode(name, record, self.config.max_unacked_ranges_to_persist)
        self._write_cursor_file(name, data, done)

    def _write_cursor_file(self, name: str, data: bytes, done: Callable[[BaseException | None], None]) -> None:
        fs = self._fs
        path = self._cursor_path(name)
        stats = self._factory.stats

        cursors_dir = join(self._dir, CURSORS)
        make_dir = not self._cursors_dir_made

        def write() -> None:
            if make_dir:
                fs.makedirs(cursors_dir)
            # (The directory is synced by the writer, once for every cursor file of the round.)
            fs.replace_atomically(path, data, sync=True, sync_dir=False)
            stats.add(cursor_persists_total=1)

        # The names above the file (cursors/ in the ledger's directory, that directory in its parent) must be
        # durable too before the file is relied on: this write syncs those not yet known durable itself (it is
        # not fenced with the ledger, so the ledger's own sync of them, _sync_names, does not cover it).
        unsynced = self._unsynced_dirs
        if make_dir and self._dir not in unsynced:
            unsynced = (*unsynced, self._dir)

        def written(exc: BaseException | None) -> None:
            # (The cursor's state file is the file ledger's cursor ledger: one copy.)
            self._stats_of_cursor(name).persisted_to_ledger(exc is None, len(data))
            if exc is None:
                self._names_synced(unsynced)
                self._cursors_dir_made = True
            elif self._factory.disk is not None:
                self._factory.disk.write_failed(exc)
            done(exc)

        self._writer.run(write, written, sync_dir=cursors_dir, also_sync=unsynced)

    def _sync_names(self) -> None:
        """Queue the sync of the directories holding this ledger's names not yet durable (its segment, made on
        open; its new directory) ahead of the add about to be queued. The writer syncs them (grouped with its
        round's other directories) before any later add of this ledger is confirmed; a failed sync fences the
        ledger, so none is (the writer fails the owner's later adds, and this ledger recovers as from a failed
        write, syncing the names again with its next add)."""
        unsynced = self._unsynced_dirs
        self._names_sync_queued = True

        def synced(exc: BaseException | None) -> None:
            self._names_sync_queued = False
            if exc is None:
                self._names_synced(unsynced)
            else:
                self._fence(exc)

        self._writer.run(_nothing, synced, owner=self, also_sync=unsynced)

    def _names_synced(self, synced: tuple[str, ...]) -> None:
        if self._unsynced_dirs:
            self._unsynced_dirs = tuple(d for d in self._unsynced_dirs if d not in synced)

    async def sync_creation(self) -> None:
        unsynced = self._unsynced_dirs
        if unsynced:
            await self._factory._run_on_writer(_nothing, *unsynced)
            self._names_synced(unsynced)

    # -- paths ----------------------------------------------------------------------------------

    def _locate(self, ledger_id: int, first: int, count: int) -> ReadJob:
        """Where ``count`` consecutive entries of a ledger from entry ``first`` are: their segment and spans, or
        the offloaded copy when it is the ledger's only one."""
        index = self._indexes.get(ledger_id)
        if self._tier.records and self._reads_copy(ledger_id):
            return OffloadedRun(self._offloaded_source(ledger_id).read, first, first + count - 1)
        starts = index.offsets[first : first + count + 1] if index is not None else []
        if len(starts) != count + 1 or first < 0:
            raise IndexError(f"entries {first}..{first + count - 1} of ledger {ledger_id} are not all indexed")
        path = self._segment_path(ledger_id)
        return path, starts[0], list(zip(starts[:-1], map(operator.sub, starts[1:], starts[:-1]), strict=True))

    def _following(self, position: Position, max_entries: int, max_bytes: int) -> list[Position]:
        """Up to ``max_entries`` positions after ``position`` in its ledger, within ``max_bytes`` of
        data, none past the last confirmed entry (what a read ahead may read)."""
        index = self._indexes.get(position.ledger_id)
        if index is None:
            return []
        last = self._last_confirmed
        if position.ledger_id > last.ledger_id:
            return []
        end = last.entry_id if position.ledger_id == last.ledger_id else index.entries - 1
        end = min(end, position.entry_id + max_entries)
        first = position.entry_id + 1
        if end < first:
            return []
        # The byte bound counts record headers too: it bounds what the pread reads. At least one.
        offsets = index.offsets
        fits = bisect.bisect_right(offsets, offsets[first] + max_bytes, first + 1, end + 2) - 2
        end = max(first, min(end, fits))
        ledger_id = position.ledger_id
        return [_new_tuple(Position, (ledger_id, e)) for e in range(first, end + 1)]

    def _segment_path(self, ledger_id: int) -> str:
        path = self._paths.get(ledger_id)
        if path is None:  # (built once per ledger: every add needs it)
            path = self._paths[ledger_id] = join(self._dir, segment.file_name(ledger_id))
        return path

    def _cursor_path(self, name: str) -> str:
        return join(self._dir, CURSORS, encode_name(name) + ".cur")

    def _unlink_later(self, path: str) -> None:
        fs = self._fs

        def unlink() -> None:
            try:
                fs.unlink(path)
            except FileNotFoundError:
                pass

        self._writer.run(unlink)

    # -- properties ---------------------------------------------------------------------------

    @property
    def last_confirmed_entry(self) -> Position:
        return self._last_confirmed

    @property
    def is_fenced(self) -> bool:
        return self._fenced

    @property
    def directory(self) -> str:
        return self._dir

    # -- writing ------------------------------------------------------------------------------

    def add_entry(self, data: bytes, callback: AddCallback) -> None:
        self.add_entries([data], callback)

    def add_entries(self, data: list[bytes], callback: AddCallback) -> None:
        if self._state is not _OPEN:
            error: ManagedLedgerError = LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")
            self._add_completer.complete(partial(callback, None, error))
            return
        disk = self._factory.disk
        if disk is not None and (self._held or not disk.writable()):
            # The free-space floor: nothing is queued, so nothing is fenced (see _hold).
            self._hold(data, callback, disk)
            return
        self._add_checked(data, callback)

    def _add_checked(self, data: list[bytes], callback: AddCallback) -> None:
        if self._fenced:
            message = f"managed ledger {self._name} is fenced after a write failure"
            error: ManagedLedgerError = StorageUnavailableError(message)
            self._add_completer.complete(partial(callback, None, error))
            self._recover_from_fault()
            return
        # Keep our own immutable copies of views / bytearrays.
        data = [d if type(d) is bytes else bytes(d) for d in data]
        sizes = list(map(len, data))
        if max(sizes) > segment.MAX_ENTRY_SIZE:
            error = ManagedLedgerError(f"entry of {max(sizes)} bytes exceeds {segment.MAX_ENTRY_SIZE}")
            self._add_completer.complete(partial(callback, None, error))
            return
        total = sum(sizes)
        self.add_stats.entry_size.add_each(sizes)
        first = self._map.record_adds(len(data), total)
        self._indexes[first.ledger_id].extend(sizes)
        if self._unsynced_dirs and not self._names_sync_queued:
            self._sync_names()
        if self._has_active_cursor():
            # Cached for readers that tail the log. With no active cursor nobody reads soon (as in
            # Pulsar, which caches an add only when there are active cursors): skipping the cache
            # spares memory churn and CPU on publish-only topics.
            self._reader.remember(first, data)
        self._writer.append(self, self._segment_path(first.ledger_id), segment.encode_records(data, sizes),
                            partial(self._add_done, first, len(data), callback, time.monotonic()),
                            nbytes=total + len(sizes) * segment.RECORD_HEADER_SIZE)
        if self._current_ledger_is_full():
            self._rollover()

    def _hold(self, data: list[bytes], callback: AddCallback, disk: DiskSpaceGuard) -> None:
        """Hold an add the free-space floor refuses: it is stored (in order, before any later add)
        as soon as there is room again, or fails with StorageUnavailableError after the hold time.

        Why hold rather than fail at once: the broker answers a failed add with SendError, and
        the official clients answer any SendError by closing the connection and resending their
        pending messages on a new one; the C++ client restarts its send timer on each reconnection,
        so failing at once loops (reconnect, resend, fail) and its send never times out. Held, the
        sends time out in the client after its sendTimeout, and come through if room returns first.
        The bytes held count against the broker's publish buffer like any pending add."""
        hold = disk.policy.add_hold_s
        if hold <= 0:
            error = StorageUnavailableError(f"storage refuses new entries: {disk.refuse()}")
            self._add_completer.complete(partial(callback, None, error))
            return
        if not self._held:
            disk.refuse()  # (counted once per held run of adds)
        data = [d if type(d) is bytes else bytes(d) for d in data]
        if self._held is _NOTHING_HELD:
            self._held = deque()
        self._held.append((data, callback, self._loop.time() + hold))
        if self._hold_timer is None:
            self._hold_timer = self._loop.call_later(disk.policy.check_interval_s, self._release_held)

    def _release_held(self) -> None:
        """Store the held adds if there is room now; fail those held too long."""
        self._hold_timer = None
        disk = self._factory.disk
        if not self._held or disk is None or self._state is not LedgerState.OPEN:
            return
        if disk.writable():
            held, self._held = self._held, _NOTHING_HELD
            for data, callback, _ in held:
                self._add_checked(data, callback)
            return
        now = self._loop.time()
        while self._held and self._held[0][2] <= now:
            _, callback, _ = self._held.popleft()
            error = StorageUnavailableError(f"storage refuses new entries: {disk.reason}")
            self._add_completer.complete(partial(callback, None, error))
        if self._held:
            self._hold_timer = self._loop.call_later(disk.policy.check_interval_s, self._release_held)

    def _fail_held(self) -> None:
        """Closing or deleting: the held adds fail."""
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        held, self._held = self._held, _NOTHING_HELD
        for _, callback, _ in held:
            error = LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")
            self._add_completer.complete(partial(callback, None, error))

    def _add_done(self, first: Position, count: int, callback: AddCallback, started: float,
                  exc: BaseException | None) -> None:
        if exc is None:
            now = time.monotonic()
            self.add_stats.added(int((now - started) * 1e6),
                                 int((now - max(started, self._writer.batch_taken_at)) * 1e6), count)
            position = first if count == 1 else Position(first.ledger_id, first.entry_id + count - 1)
            self._last_confirmed = position
            # Posted before the receipt is written: the first receipt of this loop turn schedules
            # its connection's flush after the wake, so the MESSAGEs the wake sends to a consumer on
            # that connection go out in the receipts' writev, not in one of their own a turn later.
            self._wake_parked_soon()
            self._add_completer.complete(partial(callback, first, None))
            if position.ledger_id != self._map.current_id and self._state is LedgerState.OPEN:
                # The last entry of a rolled-over ledger is confirmed: the trim that the
                # rollover did (it skips ledgers with unconfirmed entries) can take it now.
                meta = self._map.get(position.ledger_id)
                if meta is not None and meta.entries == position.entry_id + 1:
                    self.trim_consumed_ledgers()
            return
        self._fence(exc)
        if self._factory.disk is not None:
            self._factory.disk.write_failed(exc)
        error = exc if isinstance(exc, ManagedLedgerError) else ManagedLedgerError(f"write failed: {exc}")
        if error is not exc:
            error.__cause__ = exc
        self._add_completer.complete(partial(callback, None, error))

    def _rollover(self) -> None:
        try:
            new_id = self._factory._new_ledger_id()
        except ManagedLedgerError as exc:
            log.error("%s: no rollover (will retry on the next add): %s", self._name, exc)
            return
        now = self._clock()
        started = time.monotonic()
        self._writer.close_segment(self, self._segment_path(self._map.current_id))
        self._writer.create(self, self._segment_path(new_id), segment.encode_header(new_id, now),
                            partial(self._created, started))
        self._map.close_current(now)
        self._map.open_ledger(new_id, now)
        self._indexes[new_id] = SegmentIndex()
        self.trim_consumed_ledgers()

    def _created(self, started: float, exc: BaseException | None) -> None:
        if exc is None:
            self.add_stats.count_ledger_switch(started)
            self._offload_automatically()  # (once the closed ledger's adds are durable: _adds_settled)
        else:
            self._fence(exc)
            if self._factory.disk is not None:
                self._factory.disk.write_failed(exc)

    def _fence(self, exc: BaseException) -> None:
        """Stop taking writes and forget the entries that were queued but never confirmed."""
        if self._fenced:
            return
        self._fenced = True
        log.error("managed ledger %s fenced after a write failure: %s", self._name, exc)
        last = self._last_confirmed
        for meta in list(self._map):
            index = self._indexes.get(meta.ledger_id)
            if index is None or meta.ledger_id < last.ledger_id:
                continue
            keep = last.entry_id + 1 if meta.ledger_id == last.ledger_id else 0
            if index.entries > keep:
                index.truncate(keep)
                self._map.cut(meta.ledger_id, keep, index.data_size)
        if self._state is LedgerState.OPEN:
            self._recover_from_fault()

    def _recover_from_fault(self) -> None:
        """Cut the unconfirmed tail off the segments and roll to a new ledger (one attempt at a
        time; the next add while fenced tries again)."""
        if self._recovering or self._state is not LedgerState.OPEN:
            return
        now_monotonic = self._loop.time()
        if now_monotonic - self._last_recovery < self._factory.fault_retry_interval_s:
            return
        self._last_recovery = now_monotonic
        try:
            new_id = self._factory._new_ledger_id()
        except ManagedLedgerError as exc:
            log.error("%s: recovery postponed: %s", self._name, exc)
            return
        self._recovering = True
        now = self._clock()
        self._writer.recover(self, self._truncations(), lambda exc: None)
        self._writer.create(self, self._segment_path(new_id), segment.encode_header(new_id, now),
                            partial(self._recovered, new_id, now))

    def _truncations(self) -> list[tuple[str, int]]:
        """(segment, confirmed size) of the segments that may hold unconfirmed bytes."""
        last = self._last_confirmed
        return [(self._segment_path(lid), index.end) for lid, index in self._indexes.items() if lid >= last.ledger_id]

    def _recovered(self, new_id: int, now: float, exc: BaseException | None) -> None:
        self._recovering = False
        if exc is not None:
            log.warning("managed ledger %s still fenced: recovery failed: %s", self._name, exc)
            return
        if self._state is not LedgerState.OPEN:
            return  # closing: its release() closes the new segment
        self._map.close_current(now)
        self._map.open_ledger(new_id, now)
        self._indexes[new_id] = SegmentIndex()
        for meta in list(self._map.closed()):
            if meta.entries == 0:  # ledgers that only ever held failed adds
                self._map.remove(meta.ledger_id)
                self._remove_ledgers([meta.ledger_id])
        self._fenced = False
        log.info("managed ledger %s recovered from the write failure; writing to ledger %d", self._name, new_id)

    # -- reading ------------------------------------------------------------------------------

    # -- cursors ------------------------------------------------------------------------------

    async def open_cursor(
        self,
        name: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: dict[str, int] | None = None,
        cursor_properties: Mapping[str, str] | None = None,
    ) -> FileCursor:
        self._check_open()
        cursor = self._cursors.get(name)
        if cursor is not None:
            assert isinstance(cursor, FileCursor)
            return cursor
        record = self._stored.get(name)
        if record is None:
            # (Active from its creation: the consumer attaching next needs no write of its own.)
            record = CursorRecord(self._initial_mark_delete(initial_position), PositionRangeSet(),
                                  dict(properties or {}), cursor_properties=dict(cursor_properties or {}),
                                  last_active=cursor_base._wall())
            self._stored[name] = record
            self._persistence.track(name, dirty=True)
            handle = self._cursors[name] = FileCursor(self, name, record, durable=True)
            try:
                # The subscription must survive a crash from the moment it is confirmed.
                await self._persistence.flush(name)
            except BaseException:
                if self._stored.get(name) is record:
                    del self._stored[name]
                    self._persistence.forget(name)
                    self._cursors.pop(name, None)
                    handle._close_handle()
                    # The write may have put the file in place before it failed (in its directory's
                    # sync, say): the next sync of cursors/ would make it durable, and the subscription
                    # would come back at the next start. (Queued now: before any later write of the name.)
                    try:
                        await self._remove_cursor_state(name)
                    except Exception as exc:
                        log.warning("%s: cursor %s: the file of its failed creation was not removed: %s",
                                    self._name, name, exc)
                raise
            return handle
        cursor = self._cursors[name] = FileCursor(self, name, record, durable=True)
        return cursor

    async def _remove_cursor_state(self, name: str) -> None:
        fs = self._fs
        path = self._cursor_path(name)
        cursors_dir = join(self._dir, CURSORS)

        def remove() -> None:
            try:
                fs.unlink(path)
            except FileNotFoundError:
                return
            fs.fsync_dir(cursors_dir)

        await self._factory._run_on_writer(remove)

    # -- tiered storage ------------------------------------------------------------------------

    def _blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return asyncio.wrap_future(self._factory.pool.submit(fn, *args))

    def _has_local_copy(self, ledger_id: int) -> bool:
        return ledger_id in self._indexes

    async def _offload_metadata(self, meta: LedgerMeta) -> OffloadedLedgerMetadata:
        return OffloadedLedgerMetadata.of_managed_ledger(self._name, meta.entries - 1, meta.size,
                                                         int(meta.created_at * 1000))

    async def _read_to_offload(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        job = self._locate(ledger_id, first, last - first + 1)
        return (await self._blocking(read_from_disk, self._fs, [job], self._factory.direct_io))[0]

    async def _adds_settled(self) -> None:
        await self._writer.barrier()

    async def _delete_local_copies(self, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            if self._indexes.pop(ledger_id, None) is not None:
                self._unlink_later(self._segment_path(ledger_id))
            self._paths.pop(ledger_id, None)

    async def _save_offloads(self) -> None:
        data = encode_offloads(list(self._tier.records.values()))
        fs, path = self._fs, join(self._dir, OFFLOADS_FILE)

        def write() -> None:
            fs.replace_atomically(path, data, sync=True, sync_dir=False)

        await self._factory._run_on_writer(write, self._dir)

    async def _forget_offloads(self, gone: list[LedgerOffload]) -> None:
        await self._save_offloads()
        await self._delete_copies(gone)

    def _spawn_offload_work(self, work: Coroutine[Any, Any, None], what: str) -> None:
        task = self._loop.create_task(work)
        _OFFLOAD_WORK.add(task)  # (the loop keeps only a weak reference to a task)

        def done(t: asyncio.Task[None]) -> None:
            _OFFLOAD_WORK.discard(t)
            if not t.cancelled() and (exc := t.exception()) is not None:
                log.warning("%s: %s: %s", self._name, what, exc)

        task.add_done_callback(done)

    # -- lifecycle ----------------------------------------------------------------------------

    async def close(self) -> None:
        if self._state is not LedgerState.OPEN:
            return
        self._shut(LedgerState.CLOSED)
        self._fail_held()
        try:
            await self._release()
        finally:
            self._factory._forget(self)

    async def _release(self) -> None:
        """After _shut: save cursor states, let queued adds finish, close the segment."""
        await self._stop_offloading()
        await self._persistence.flush_all()
        self._persistence.stop()
        # Every queued add's outcome known first: one that fails now (its sync, say) fences the
        # ledger, and its records are cut below; released before, the writer kept them, and the
        # failed add came back when the ledger was opened again.
        await self._writer.barrier()
        if self._fenced:  # best effort: failed adds must not come back when it is reopened
            self._writer.recover(self, self._truncations(), lambda exc: None)
        self._writer.release(self)
        await self._writer.barrier()
        self._reader.forget_all()
        self._tier.close_sources()

    async def delete(self) -> None:
        # A closed handle cannot delete (a newer handle may own the data by now): reopen it,
        # or use factory.delete(name).
        if self._state is LedgerState.DELETED:
            return
        self._check_open()
        self._shut(LedgerState.DELETED)
        self._fail_held()
        for name in list(self._stored):
            self._persistence.forget(name)
        self._cursors.clear()
        self._stored.clear()
        try:
            await self._stop_offloading()
            self._writer.release(self)
            await self._writer.barrier()
            self._reader.forget_all()
            self._tier.close_sources()
            # (Pulsar's delete truncates first: no offloaded copy is left behind)
            await self._delete_copies(self._tier.forget(list(self._tier.records)))
            await self._factory._remove_directory(self._name, self._dir)
        finally:
            self._factory._forget(self)  # (an open meanwhile waited for this: it finds no data, and starts anew)
