"""A managed ledger on Apache BookKeeper, in Apache Pulsar's formats (see ``factory`` for opening and takeover).

The log is a list of BookKeeper ledgers, kept in the managed ledger's znode (``ManagedLedgerInfo``) and changed only
by compare-and-set on its version: a second owner that took the managed ledger over makes our next write of it fail
(BadVersion), and its recovery open of our current ledger fenced that ledger on the bookies, so our next add fails
too. Either way this instance stops taking writes (``is_fenced``); nothing it acknowledged is lost, because the new
owner recovered the ledger up to every acknowledged entry before closing it.

Adds: entries go to the current ledger's writer at once, one BookKeeper entry each; callbacks run in call order
(``OrderedCompleter`` reservations) once the bookies acknowledged them, and only then does ``last_confirmed_entry``
move. Rollover (Pulsar's rule, in ``ledger_base``): when an add fills the current ledger, the writer is closed, a
new ledger created, the ledger list written (CAS), and that add completes only then, so whoever sees its callback
sees the new current ledger. Adds that arrive meanwhile wait in a queue and go to the new ledger.

A failed add (Pulsar's ``OpAddEntry.handleAddFailure``: the bookies failed and the ensemble could not be replaced)
does not stop the managed ledger: the ledger is closed where the acknowledged adds end, a new one is created (retried
while too few bookies are writable: bookies away, or read-only because their disks are full), and every add that was
pending is sent to it in its order; callbacks keep the add order. Meanwhile adds are held, each at most
``add_retry_window_s`` from its arrival, then fail (StorageUnavailableError when no ensemble can be formed), as the
file ledger holds adds on a full disk. Only fencing (the ledger recovered by someone else, the ledger list rewritten)
stops writes.

Trimming: ledgers every durable cursor consumed leave the list (CAS first), then are deleted from BookKeeper.

Tiered storage (``offload.tiered``, as Pulsar's): each ledger's OffloadContext is kept in the ledger list; a copy is
read from BookKeeper, a ledger whose BookKeeper copy was deleted after its offload (bookkeeperDeleted) is read from
its copy. A Pulsar broker's contexts are kept as they are, and its copies read, given the same offloader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from array import array
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from managed_ledger.api import (
    AddCallback,
    InitialPosition,
    LedgerClosedError,
    LedgerFencedError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    StorageUnavailableError,
)
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.cursor import BkCursor, CursorStore, snapshot
from managed_ledger.bookkeeper.errors import (
    BookKeeperError,
    MetadataConflictError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
)
from managed_ledger.bookkeeper.errors import LedgerClosedError as BkLedgerClosedError
from managed_ledger.bookkeeper.errors import LedgerFencedError as BkLedgerFencedError
from managed_ledger.bookkeeper.ml_data_formats_pb2 import OffloadContext
from managed_ledger.bookkeeper.placement import isolation_of
from managed_ledger.bookkeeper.reader import LedgerReader
from managed_ledger.bookkeeper.reads import BkEntryReader
from managed_ledger.bookkeeper.writer import LedgerWriter
from managed_ledger.completion import Completion
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.cursor_persistence import CursorPersistence
from managed_ledger.ledger_base import LedgerState
from managed_ledger.ledger_map import LedgerMap, LedgerMeta
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.state import LedgerOffload, from_context, to_context
from managed_ledger.offload.tiered import OffloadBook, TieredLedger
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet
from managed_ledger.single_flight import SingleFlight
from metadata_store.api import BadVersionError, MetadataStoreError

if TYPE_CHECKING:
    from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory

log = logging.getLogger(__name__)
T = TypeVar("T")

# After a failed add, each pending add waits at most this long for the next ledger (creating it fails while too few
# bookies are writable), then fails. The broker passes managedLedgerDiskFullAddHoldSeconds (30 s) instead: at least
# the clients' send timeout, since the official clients answer a SendError by reconnecting and resending, the C++
# one restarting its send timer (docs/exhaustion.md).
DEFAULT_ADD_RETRY_WINDOW_S = 10.0
_RETRY_FIRST_DELAY_S = 0.1
_RETRY_MAX_DELAY_S = 1.0


@dataclass(eq=False)
class _Add:
    data: list[bytes]
    callback: AddCallback
    fill: Callable[[Completion], None]  # its reserved place in the add order
    started: float
    writer: LedgerWriter | None = None  # the ledger it was sent to (None while queued)


class BookKeeperManagedLedger(TieredLedger):
    _reader: BkEntryReader
    _factory: BookKeeperManagedLedgerFactory

    def __init__(self, factory: BookKeeperManagedLedgerFactory, name: str, config: ManagedLedgerConfig,
                 ledger_map: LedgerMap, info: ml_formats.StoredManagedLedger, info_version: int,
                 writer: LedgerWriter, last_confirmed: Position) -> None:
        super().__init__(name, config, ledger_map, factory.nesting, factory.clock)
        self._factory = factory
        self._path = ml_formats.ledger_path(factory.root, name)
        self._properties = info.properties  # kept as they are (Pulsar's managed-ledger properties)
        self._info_version = info_version
        self._info_lock = asyncio.Lock()
        self._writer: LedgerWriter | None = writer  # None while rolling over
        self._handles: dict[int, LedgerWriter | LedgerReader] = {writer.ledger_id: writer}
        self._sizes: dict[int, array[int]] = {writer.ledger_id: array("l")}  # entry sizes of ledgers we wrote
        self._last_confirmed = last_confirmed
        self._queued: deque[_Add] = deque()  # adds waiting for the next ledger
        self._inflight: deque[_Add] = deque()  # adds sent to the current ledger, not yet acknowledged
        self._fenced = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._rollover: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._eviction_pending = False
        self._reader = BkEntryReader(factory._next_instance_id(), factory.cache, self._read_run)
        self._stored: dict[str, CursorRecord] = {}
        self._cursor_store = CursorStore(self)
        self._persistence = CursorPersistence(self, factory.cursor_persist_interval_s)
        self._cursor_writes: dict[str, asyncio.Task[None]] = {}  # the state write in flight of each cursor
        self._creating_cursors: SingleFlight[str, None] = SingleFlight(f"{name}: cursor creation")
        self._tier = OffloadBook(offload_records(info))

    async def ledgers_metadata(self) -> dict[int, tuple[str, bool]]:
        bk = self._factory.bk
        ids = [info.ledger_id for info in self.ledgers_info()]
        found = await asyncio.gather(*(bk.read_metadata(i) for i in ids), return_exceptions=True)
        registered = {*await bk.writable_bookies(), *await bk.read_only_bookies()}
        # (a ledger whose metadata cannot be read is left out, as Pulsar leaves its metadata null)
        return {ledger_id: (metadata.safe_string(), not metadata.bookies() <= registered)
                for ledger_id, answer in zip(ids, found, strict=True) if not isinstance(answer, BaseException)
                for metadata, _version in [answer]}

    async def _recover_cursors(self) -> None:
        """Open every stored durable cursor (part of opening: see the factory)."""
        for name, record in (await self._cursor_store.recover_all()).items():
            record.raise_floor(self._floor())
            self._stored[name] = record
            self._persistence.track(name, dirty=False)
            self._cursors[name] = BkCursor(self, name, record, durable=True)

    # -- hooks of the base ----------------------------------------------------------------------

    def _named_records(self) -> Iterable[tuple[str, CursorRecord]]:
        return self._stored.items()

    def _make_cursor(self, name: str, record: CursorRecord, durable: bool) -> BkCursor:
        return BkCursor(self, name, record, durable)

    def _entry_size(self, position: Position) -> int:
        sizes = self._sizes.get(position.ledger_id)
        if sizes is not None and position.entry_id < len(sizes):
            return sizes[position.entry_id]
        meta = self._map.get(position.ledger_id)  # a ledger written before this open: its average
        return meta.size // meta.entries if meta is not None and meta.entries else 0

    def _remove_ledgers(self, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            self._handles.pop(ledger_id, None)
            self._sizes.pop(ledger_id, None)
        # The ledger list is written first (CAS), then the ledgers are deleted (Pulsar's order: a crash in between
        # leaves unreferenced ledgers, never a list naming deleted ones).
        self._spawn(self._delete_trimmed(ledger_ids, self._tier.forget(ledger_ids)))

    async def _delete_trimmed(self, ledger_ids: list[int], offloaded: list[LedgerOffload]) -> None:
        if not await self._write_info_or_fence():
            return
        await self._delete_copies(offloaded)  # (Pulsar deletes a trimmed ledger's offloaded copy too)
        gone = {o.ledger_id for o in offloaded if o.local_deleted}
        await self._delete_ledgers([i for i in ledger_ids if i not in gone], "trimmed")

    async def _delete_ledgers(self, ledger_ids: list[int], what: str) -> None:
        for ledger_id in ledger_ids:
            with contextlib.suppress(NoSuchLedgerError):
                try:
                    await self._factory.bk.delete_ledger(ledger_id)
                except BookKeeperError as exc:
                    log.warning("%s: %s ledger %d not deleted: %s", self._name, what, ledger_id, exc)

    def _cursor_state_changed(self, name: str) -> None:
        self._persistence.changed(name)

    def _stored_record(self, name: str) -> CursorRecord | None:
        return self._stored.get(name)

    def _write_cursor_state(self, name: str, record: CursorRecord,
                            done: Callable[[BaseException | None], None]) -> None:
        if self._fenced:  # another owner has the cursors now: nothing of ours may be written
            done(LedgerFencedError(f"managed ledger {self._name} is fenced: cursor {name} not saved"))
            return
        copy = snapshot(record)

        async def write() -> None:
            try:
                await self._cursor_store.write(name, copy)
            except (BookKeeperError, MetadataStoreError, ManagedLedgerError) as exc:
                if isinstance(exc, BkLedgerFencedError | BadVersionError):
                    self._fence(exc)  # a new owner recovered the cursor ledger or rewrote the cursor's znode
                done(exc)
                return
            except Exception as exc:  # a bug: its waiters (a flush, a close) get it rather than hang; it is logged
                done(exc)
                raise
            done(None)

        task = self._cursor_writes[name] = self._spawn(write())
        task.add_done_callback(partial(self._cursor_written, name))

    def _cursor_written(self, name: str, task: asyncio.Task[None]) -> None:
        if self._cursor_writes.get(name) is task:
            del self._cursor_writes[name]

    # -- properties ---------------------------------------------------------------------------

    @property
    def last_confirmed_entry(self) -> Position:
        return self._last_confirmed

    @property
    def is_fenced(self) -> bool:
        return self._fenced

    # -- the ledger list ------------------------------------------------------------------------

    def _stored_info(self) -> ml_formats.StoredManagedLedger:
        ledgers = []
        current = self._map.current_id
        for meta in self._map:
            if meta.ledger_id == current:
                ledgers.append(ml_formats.StoredLedger(meta.ledger_id))
            else:
                o = self._tier.records.get(meta.ledger_id)
                ledgers.append(ml_formats.StoredLedger(meta.ledger_id, meta.entries, meta.size,
                                                       int(meta.ended_at * 1000),
                                                       to_context(o).SerializeToString() if o is not None else b""))
        return ml_formats.StoredManagedLedger(tuple(ledgers), self._properties)

    async def _write_info(self) -> None:
        """CAS the ledger list as it is now; BadVersionError: someone else owns the managed ledger now."""
        async with self._info_lock:
            data = ml_formats.encode_ledger_info(self._stored_info(), self._factory.formats)
            stat = await self._factory.store.put(self._path, data, self._info_version)
            self._info_version = stat.version

    async def _write_info_or_fence(self) -> bool:
        try:
            await self._write_info()
        except BadVersionError:
            self._fence(LedgerFencedError(f"managed ledger {self._name} was taken over (its znode changed)"))
            return False
        except MetadataStoreError as exc:
            log.error("%s: the ledger list was not written: %s", self._name, exc)
            return False
        return True

    # -- writing ------------------------------------------------------------------------------

    def add_entry(self, data: bytes, callback: AddCallback) -> None:
        self.add_entries([data], callback)

    def add_entries(self, data: list[bytes], callback: AddCallback) -> None:
        if self._state is not LedgerState.OPEN:
            error: ManagedLedgerError = LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")
            self._add_completer.complete(partial(callback, None, error))
            return
        if self._fenced:
            error = LedgerFencedError(f"managed ledger {self._name} is fenced: another owner took it over")
            self._add_completer.complete(partial(callback, None, error))
            return
        if not data:
            raise ValueError("add_entries needs at least one entry")
        add = _Add([d if type(d) is bytes else bytes(d) for d in data], callback, self._add_completer.reserve(),
                   time.monotonic())
        if self._writer is None or self._queued:
            self._queued.append(add)
            if self._writer is None and self._rollover is None:
                # The last ledger creation failed (its adds failed): this add tries again (Pulsar's WriteFailed).
                self._rollover = self._spawn(self._switch_ledger(None))
        else:
            self._send(add)

    def _send(self, add: _Add) -> None:
        writer = self._writer
        assert writer is not None
        sizes = [len(d) for d in add.data]
        self.add_stats.entry_size.add_each(sizes)
        first = self._map.record_adds(len(sizes), sum(sizes))
        self._sizes[first.ledger_id].extend(sizes)
        if self._has_active_cursor():
            self._reader.remember(first, add.data)  # tailing readers read it from memory (as Pulsar caches adds)
        add.writer = writer
        self._inflight.append(add)
        *rest, last = add.data
        for data in rest:
            writer.add_entry_then(data, _ignore)  # the last one reports for all (adds fail from the first failure on)
        if self._current_ledger_is_full():
            # This add completes after the rollover, so its callback sees the new current ledger.
            self._writer = None
            self._rollover = self._spawn(self._roll_over(writer, add, first, writer.add_entry_nowait(last)))
        else:
            writer.add_entry_then(last, partial(self._added, add, writer, first, len(sizes)))

    def _added(self, add: _Add, writer: LedgerWriter, first: Position, count: int, _entry_id: int,
               exc: BaseException | None) -> None:
        """The bookies acknowledged the add's last entry (and so every entry before it), or it failed."""
        if add.writer is not writer:
            return  # its ledger failed meanwhile: the add waits in the queue for the next ledger
        if exc is None:
            self._inflight.popleft()  # acknowledgements come in add order: it is the oldest in flight
            self._count_durable(add, first, count)
            add.fill(partial(add.callback, first, None))
            # Reads parked at the tail are woken once per loop turn, on the next one, whatever number of adds the
            # bookies' answers confirmed in this one (after the receipts, as the file ledger's).
            self._wake_parked_soon()
            return
        if self._state is not LedgerState.OPEN:  # closing or deleted: no new ledger
            self._inflight.remove(add)
            add.fill(partial(add.callback, None, _add_error(exc)))
        elif self._rollover is None:
            self._writer = None
            self._rollover = self._spawn(self._switch_ledger(writer, exc))
        # else a switch is under way (it takes this add back into the queue)

    def _count_durable(self, add: _Add, first: Position, count: int) -> None:
        now = time.monotonic()
        latency_us = int((now - add.started) * 1e6)
        self.add_stats.added(latency_us, latency_us, count)
        last = Position(first.ledger_id, first.entry_id + count - 1)
        if last > self._last_confirmed:
            self._last_confirmed = last

    async def _roll_over(self, old: LedgerWriter, filling: _Add, first: Position, last_future: asyncio.Future[int]
                         ) -> None:
        """Close the full ledger, start a new one, write the ledger list; then complete the filling add and send
        the adds that waited."""
        count = len(filling.data)
        close_error: BaseException | None = None
        try:
            await old.close()  # waits for every add sent to it
        except BookKeeperError as exc:
            close_error = exc
        if not last_future.done() or last_future.exception() is not None:
            failure = (last_future.exception() if last_future.done() else close_error) \
                or ManagedLedgerError("add not acknowledged")
            await self._switch_ledger(old, failure)  # this task becomes the switch after a failed add
            return
        self._inflight.clear()  # every add sent to the old ledger is durable now (the filling one last)
        self._count_durable(filling, first, count)
        self._wake_parked()
        error = close_error or await self._start_next_ledger()
        filling.fill(partial(filling.callback, first, None))  # durable either way
        self._rollover = None
        if error is not None:
            self._fence(error)
            return
        self._send_queued()
        self._offload_automatically()  # (Pulsar's ledgerClosed)

    def _send_queued(self) -> None:
        while self._queued and self._writer is not None:
            self._send(self._queued.popleft())
        self.trim_consumed_ledgers()

    async def _switch_ledger(self, failed: LedgerWriter | None, failure: BaseException | None = None) -> None:
        """Pulsar's answer to a failed add (``OpAddEntry.handleAddFailure`` -> ``ledgerClosed`` ->
        ``createLedgerAfterClosed``): close the ledger where the acknowledged adds end, create a new one, write the
        ledger list, and send the adds that were pending, in their order (none was acknowledged, so none is
        stored twice). A fenced ledger, or a ledger list someone else rewrote, means another owner: fenced.

        ``failed`` is None when the last attempt gave up and a new add tries again. Runs as ``self._rollover``."""
        if failed is not None:
            # The adds sent to the failed ledger go back to the head of the queue, in their order.
            for add in self._inflight:
                add.writer = None
            self._queued.extendleft(reversed(self._inflight))
            self._inflight.clear()
            if self._fenced or _is_fencing(failure):
                self._rollover = None
                self._fence(failure or ManagedLedgerError("fenced"))
                self._fail_queued(_add_error(failure or ManagedLedgerError("fenced")))
                return
            log.warning("%s: add to ledger %d failed (%s): closing it, the pending adds go to a new ledger",
                        self._name, failed.ledger_id, failure)
            if isinstance(failure, NotEnoughBookiesError):  # no bookie to replace one that failed or turned read-only
                self._factory.availability.no_ensemble(failure)
            if not await self._close_failed_ledger(failed):
                self._rollover = None
                return
        delay = _RETRY_FIRST_DELAY_S
        held = False
        while (error := await self._start_next_ledger()) is not None:
            if self._fenced or self._state is not LedgerState.OPEN:
                self._rollover = None
                self._fail_queued(_add_error(error) if self._fenced else _retriable_add_error(error))
                return
            availability = self._factory.availability
            if isinstance(error, NotEnoughBookiesError):
                availability.no_ensemble(error)  # (health and metrics say why at once)
                if not held:
                    availability.refuse()
                    held = True
            # Each add is held at most add_retry_window_s from its arrival (the file ledger's hold on a full disk:
            # the clients' send timeout should end first), then fails as Pulsar fails adds when creating the
            # ledger fails (retriable: the topic stays); later adds keep waiting, in order, for a new ledger.
            self._expire_queued(error)
            if not self._queued:
                self._rollover = None  # the next add tries again
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX_DELAY_S)
        self._rollover = None
        self._send_queued()
        self._offload_automatically()  # (Pulsar's ledgerClosed)

    def _expire_queued(self, error: BaseException) -> None:
        """Fail the queued adds held for the whole retry window (the oldest are at the head)."""
        window = self._factory.add_retry_window_s
        now = time.monotonic()
        expired: list[_Add] = []
        while self._queued and now - self._queued[0].started >= window:
            expired.append(self._queued.popleft())
        if not expired:
            return
        log.error("%s: no new ledger after a failed add, %d adds fail: %s", self._name, len(expired), error)
        failure = _retriable_add_error(error)
        for add in expired:
            add.fill(partial(add.callback, None, failure))

    async def _close_failed_ledger(self, failed: LedgerWriter) -> bool:
        """Cut the failed ledger where the acknowledged adds end and close it there in BookKeeper. False: fenced."""
        ledger_id = failed.ledger_id
        last = self._last_confirmed
        keep = last.entry_id + 1 if last.ledger_id == ledger_id else 0
        sizes = self._sizes.get(ledger_id)
        kept = sum(sizes[:keep]) if sizes is not None else 0
        if sizes is not None:
            del sizes[keep:]
        if self._map.get(ledger_id) is not None:
            self._map.cut(ledger_id, keep, kept)
        try:
            await failed.close_failed(keep - 1, kept)
        except BookKeeperError as exc:
            if _is_fencing(exc):
                self._fence(exc)
                return False
            # The ledger list says where it ends, whatever its metadata says (Pulsar logs and goes on too).
            log.warning("%s: failed ledger %d not closed: %s", self._name, ledger_id, exc)
        return True

    async def _start_next_ledger(self) -> BaseException | None:
        """Create the next ledger and CAS the ledger list with it; the error if that failed."""
        factory = self._factory
        started = time.monotonic()
        try:
            writer = await factory.bk.create_ledger(factory.ensemble_size, factory.write_quorum, factory.ack_quorum,
                                                    password=factory.password,
                                                    custom_metadata=ml_formats.ledger_custom_metadata(self._name),
                                                    isolation=isolation_of(self.config))
        except BookKeeperError as exc:
            return exc
        if self._state is LedgerState.OPEN:
            now = self._clock()
            self._map.close_current(now)
            self._map.open_ledger(writer.ledger_id, now)
            self._handles[writer.ledger_id] = writer
            self._sizes[writer.ledger_id] = array("l")
            if await self._write_info_or_fence():
                self._writer = writer
                self.add_stats.count_ledger_switch(started)
                return None
        await writer.abandon()  # closing meanwhile, or taken over: the new ledger goes
        with contextlib.suppress(BookKeeperError):
            await factory.bk.delete_ledger(writer.ledger_id)
        return LedgerClosedError(f"managed ledger {self._name} closed during a rollover") if not self._fenced \
            else LedgerFencedError(f"managed ledger {self._name} was taken over")

    def _fail_queued(self, error: ManagedLedgerError) -> None:
        queued, self._queued = self._queued, deque()
        for add in queued:
            add.fill(partial(add.callback, None, error))

    def _fence(self, exc: BaseException) -> None:
        """Stop taking writes; forget entries that were recorded but never acknowledged."""
        if self._fenced:
            return
        self._fenced = True
        log.error("managed ledger %s fenced: %s", self._name, exc)
        last = self._last_confirmed
        for meta in list(self._map):
            if meta.ledger_id < last.ledger_id:
                continue
            keep = last.entry_id + 1 if meta.ledger_id == last.ledger_id else 0
            if meta.entries > keep:
                sizes = self._sizes.get(meta.ledger_id)
                kept = sum(sizes[:keep]) if sizes is not None else 0
                if sizes is not None:
                    del sizes[keep:]
                self._map.cut(meta.ledger_id, keep, kept)
        self._fail_queued(_add_error(exc))

    # -- reading ------------------------------------------------------------------------------

    async def _read_run(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        if self._tier.records and self._reads_copy(ledger_id):
            return await self._read_offloaded(ledger_id, first, last)
        return await self._read_from_bookies(ledger_id, first, last)

    async def _read_from_bookies(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        handle = self._handles.get(ledger_id)
        if handle is None:
            handle = await self._factory.bk.open_ledger(ledger_id, self._factory.password, recover=False)
            self._handles.setdefault(ledger_id, handle)
        return await handle.read(first, last)

    # -- tiered storage (the hooks of offload.tiered) ----------------------------------------------

    def _blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return self._loop.run_in_executor(None, fn, *args)

    async def _save_offloads(self) -> None:
        if not await self._write_info_or_fence():
            raise ManagedLedgerError(f"managed ledger {self._name}: the ledger list was not written "
                                     f"({'fenced' if self._fenced else 'the metadata store failed'})")

    def _has_local_copy(self, ledger_id: int) -> bool:
        o = self._tier.records.get(ledger_id)
        return self._map.get(ledger_id) is not None and (o is None or not o.local_deleted)

    async def _offload_metadata(self, meta: LedgerMeta) -> OffloadedLedgerMetadata:
        """The ledger's own metadata, as Pulsar's offloader copies it from the read handle."""
        try:
            metadata, _version = await self._factory.bk.read_metadata(meta.ledger_id)
        except BookKeeperError as exc:
            raise ManagedLedgerError(f"ledger {meta.ledger_id}: its metadata: {exc}") from exc
        if not metadata.is_closed or metadata.last_entry_id != meta.entries - 1:
            raise ManagedLedgerError(f"ledger {meta.ledger_id} is not closed at entry {meta.entries - 1} in "
                                     f"BookKeeper ({metadata.state.name}, last entry {metadata.last_entry_id})")
        return OffloadedLedgerMetadata.of_bookkeeper(metadata)

    async def _read_to_offload(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        return await self._read_from_bookies(ledger_id, first, last)

    async def _delete_local_copies(self, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            self._handles.pop(ledger_id, None)  # (Pulsar's invalidateReadHandle)
        await self._delete_ledgers(ledger_ids, "offloaded")

    # -- cursors ------------------------------------------------------------------------------

    async def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST,
                          properties: dict[str, int] | None = None,
                          cursor_properties: Mapping[str, str] | None = None) -> BkCursor:
        self._check_open()
        cursor = self._cursors.get(name)
        if cursor is not None:
            assert isinstance(cursor, BkCursor)
            return cursor
        if name not in self._stored:
            # Created by a task of the ledger's, awaited shielded, and shared by concurrent opens of the name: a
            # caller cancelled meanwhile (a SUBSCRIBE whose client went away) leaves the cursor created and known
            # here. (Cut short with its caller once the znode was made, it left a znode this ledger did not know
            # of, and every later open of the name failed: the znode exists.)
            await self._creating_cursors.run(name, partial(self._create_cursor, name, CursorRecord(
                self._initial_mark_delete(initial_position), PositionRangeSet(), dict(properties or {}),
                cursor_properties=dict(cursor_properties or {}))))
            self._check_open()
        cursor = self._cursors.get(name)
        if cursor is None:
            record = self._stored.get(name)
            if record is None:
                raise ManagedLedgerError(f"cursor {name} was deleted while it was opened")
            cursor = self._cursors[name] = BkCursor(self, name, record, durable=True)
        assert isinstance(cursor, BkCursor)
        return cursor

    async def _create_cursor(self, name: str, record: CursorRecord) -> None:
        try:
            await self._cursor_store.create(name, record)
        except (BookKeeperError, MetadataStoreError) as exc:
            raise ManagedLedgerError(f"cursor {name} not created: {exc}") from exc
        self._stored[name] = record
        self._persistence.track(name, dirty=False)

    async def _remove_cursor_state(self, name: str) -> None:
        writing = self._cursor_writes.get(name)
        if writing is not None:
            # A write of its state started before the deletion (none starts after): it ends first. Removed under
            # it, the cursor could be created again under the same name (a new znode, at version 0 again) before
            # the write's compare-and-set of the znode, which would then land on the new cursor.
            await asyncio.wait([writing])
        try:
            await self._cursor_store.delete(name)
        except BookKeeperError as exc:
            log.warning("%s: cursor %s: its ledger was not deleted: %s", self._name, name, exc)

    # -- lifecycle ----------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A background task ended. Each one handles the failures it expects (a bookie or ZooKeeper refusing) and
        ends quietly; one that raises is a bug, logged at once with its traceback. (Only gathered at close, its
        exception was never seen, and what it left half-done, a cursor write marked in flight, hung the close.)"""
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("managed ledger %s: a background task failed", self._name, exc_info=exc)

    async def close(self) -> None:
        if self._state is not LedgerState.OPEN:
            return
        self._shut(LedgerState.CLOSED)
        self._fail_queued(LedgerClosedError(f"managed ledger {self._name} is closed"))
        try:
            await self._release()
        finally:
            self._factory._forget(self)

    async def _release(self) -> None:
        """After _shut: the rollover under way, cursor states, the open ledger closed, tasks finished."""
        await self._stop_offloading()
        if self._rollover is not None:
            await asyncio.gather(self._rollover, return_exceptions=True)
        await self._creating_cursors.wait()  # (their callers' cancellation does not end them: they end first)
        await self._persistence.flush_all()
        self._persistence.stop()
        if not self._fenced:
            for name, record in list(self._stored.items()):
                try:
                    await self._cursor_store.close(name, record)
                except (BookKeeperError, MetadataStoreError) as exc:
                    log.warning("%s: cursor %s: state not saved on close: %s", self._name, name, exc)
        await self._cursor_store.abandon()
        writer = self._writer
        if writer is not None:
            try:
                await writer.close()  # the ledger list keeps it as the last ledger; the next owner reads its end
            except BookKeeperError as exc:
                log.warning("%s: ledger %d not closed: %s", self._name, writer.ledger_id, exc)
        await self._stop_tasks()
        self._tier.close_sources()

    async def _stop_tasks(self) -> None:
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        # Writes of the ledger list and trimmed-ledger deletions finish; nothing else is left running.
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._reader.close()

    async def delete(self) -> None:
        if self._state is LedgerState.DELETED:
            return
        self._check_open()
        self._shut(LedgerState.DELETED)
        self._fail_queued(LedgerClosedError(f"managed ledger {self._name} is deleted"))
        for name in list(self._stored):
            self._persistence.forget(name)
        try:
            await self._stop_offloading()
            if self._rollover is not None:
                await asyncio.gather(self._rollover, return_exceptions=True)
            await self._creating_cursors.wait()
            await self._stop_tasks()
            cursor_names = list(self._stored)
            self._cursors.clear()
            self._stored.clear()
            for name in cursor_names:
                await self._cursor_store.delete(name)
            if self._writer is not None:
                await self._writer.abandon()
            self._tier.close_sources()
            await self._factory._delete_stored(self._name, [m.ledger_id for m in self._map],
                                               list(self._tier.records.values()), self._offloader)
        finally:
            self._factory._forget(self)  # (an open meanwhile waited for this: it finds no data, and starts anew)


def offload_records(info: ml_formats.StoredManagedLedger) -> list[LedgerOffload]:
    """The records of the offload contexts in a ledger list (written by ours or by a Pulsar broker)."""
    out = []
    for stored in info.ledgers:
        if stored.offload_context:
            context = OffloadContext()
            context.ParseFromString(stored.offload_context)
            out.append(from_context(stored.ledger_id, stored.entries or 0, stored.size or 0,
                                    stored.timestamp_ms / 1000, context, stored.offload_context))
    return out


def _ignore(_entry_id: int, _error: BaseException | None) -> None:
    pass


def _is_fencing(exc: BaseException | None) -> bool:
    """Another client recovered or closed the ledger, or the managed ledger has another owner: no new ledger."""
    return isinstance(exc, BkLedgerFencedError | BkLedgerClosedError | MetadataConflictError | UnauthorizedError
                      | LedgerFencedError)


def _retriable_add_error(exc: BaseException) -> ManagedLedgerError:
    if isinstance(exc, NotEnoughBookiesError):  # bookies read-only (full) or away: as the file ledger's full disk
        error: ManagedLedgerError = StorageUnavailableError(f"storage refuses new entries: no writable ensemble: "
                                                            f"{exc}")
    else:
        error = ManagedLedgerError(f"add failed, no ledger to write to (will retry with the next add): {exc}")
    error.__cause__ = exc
    return error


def _add_error(exc: BaseException) -> ManagedLedgerError:
    if isinstance(exc, ManagedLedgerError):
        return exc
    error = LedgerFencedError(f"add failed, the managed ledger stops taking writes: {exc}")
    error.__cause__ = exc
    return error
