"""Tiered storage for the stored managed ledgers (file, BookKeeper), as Apache Pulsar's ManagedLedgerImpl does it:
closed ledgers copied to the factory's offloader (asyncOffloadPrefix on request, maybeOffload by thresholds, one run
at a time: offloadLoop), the local copy deleted once the copy is old enough (Pulsar does it while trimming), reads of
such a ledger served from its copy, and a trimmed ledger's copy deleted with it.

Each ledger's copy has a record (``state.LedgerOffload``, Pulsar's OffloadContext): made with a new uuid and kept
before the copy starts (a crash leaves a record of an incomplete copy, whose files the next try removes), marked
complete when the copy is in place, and marked ``local_deleted`` (Pulsar's bookkeeperDeleted) before the local copy
goes. Where records are kept is the ledger's (``_save_offloads``): the file ledger's ``offloads`` file, the
BookKeeper ledger's ledger list.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from managed_ledger.api import (
    InvalidPositionError,
    LedgerInfo,
    ManagedLedgerConfig,
    ManagedLedgerError,
    NoOffloaderError,
    OffloadInProgressError,
    StoredLedger,
    StoredLedgerRow,
)
from managed_ledger.ledger_base import LedgerState, stored_rows
from managed_ledger.ledger_map import LedgerMeta
from managed_ledger.offload.api import OffloadedLedgerError, OffloadedSource, Offloader, OffloadStatsSink
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.state import LedgerOffload
from managed_ledger.position import Position
from managed_ledger.stored import StoredManagedLedger

log = logging.getLogger(__name__)
T = TypeVar("T")

# Entries read from local storage at a time while copying a ledger: this many at most, and about this many bytes
# (by the ledger's mean entry size).
OFFLOAD_READ_ENTRIES = 1000
OFFLOAD_READ_BYTES = 4 << 20


class OffloadBook:
    """A managed ledger's offload records, the open readers of the copies that are a ledger's only one, whether a
    run is under way (Pulsar's offloadMutex), and the last run's outcome (Pulsar's topic stats lastOffload*: this
    instance's, 0 until then)."""

    __slots__ = ("after_run", "again", "automatic", "last_failure_ms", "last_ledger_id", "last_success_ms",
                 "records", "running", "sources")

    def __init__(self, records: Iterable[LedgerOffload] = ()) -> None:
        self.records: dict[int, LedgerOffload] = {o.ledger_id: o for o in records}
        self.sources: dict[int, OffloadedSource] = {}
        self.running = False
        self.automatic: asyncio.Task[None] | None = None  # the automatic offload under way (by the thresholds)
        self.again = False  # a ledger closed while it ran: it runs again
        self.after_run = False  # a ledger closed while a run asked for by an admin ran: the automatic one follows it
        self.last_ledger_id = self.last_success_ms = self.last_failure_ms = 0

    def complete(self, ledger_id: int) -> bool:
        o = self.records.get(ledger_id)
        return o is not None and o.complete

    def forget(self, ledger_ids: Iterable[int]) -> list[LedgerOffload]:
        """The records of trimmed ledgers, removed (their readers closed)."""
        gone = []
        for ledger_id in ledger_ids:
            o = self.records.pop(ledger_id, None)
            if o is not None:
                gone.append(o)
            source = self.sources.pop(ledger_id, None)
            if source is not None:
                source.close()
        return gone

    def close_sources(self) -> None:
        for source in self.sources.values():
            source.close()
        self.sources.clear()


class OffloadingFactory(Protocol):
    """What a stored ledger's factory gives for tiered storage."""

    offloader: Offloader | None  # (None: none configured)
    offload_stats: OffloadStatsSink | None  # where offloads, reads and deletions of copies are counted (None: nowhere)


class TieredLedger(StoredManagedLedger):
    """The offloading part of a stored managed ledger; the storage gives the hooks below."""

    __slots__ = ()
    _tier: OffloadBook
    _factory: OffloadingFactory

    @property
    def _offloader(self) -> Offloader | None:
        """The topic's or namespace's own offloader (its offload policies name one), else the factory's."""
        return offloader_in(self._config, self._factory.offloader)

    @property
    def _offload_stats(self) -> OffloadStatsSink | None:
        return self._factory.offload_stats

    # -- hooks of the storage ---------------------------------------------------------------------

    @abstractmethod
    async def _save_offloads(self) -> None:
        """Keep the records as they are now, durably; ManagedLedgerError if that failed."""

    @abstractmethod
    async def _offload_metadata(self, meta: LedgerMeta) -> OffloadedLedgerMetadata:
        """The ledger metadata a closed ledger's copy carries (key -1)."""

    @abstractmethod
    async def _read_to_offload(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries ``first`` to ``last`` of a closed ledger, from its local copy."""

    @abstractmethod
    def _has_local_copy(self, ledger_id: int) -> bool: ...

    @abstractmethod
    async def _delete_local_copies(self, ledger_ids: list[int]) -> None:
        """Delete these ledgers' local copies (their records already say so, durably)."""

    @abstractmethod
    def _blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run blocking file I/O off the loop (the ledger's pool)."""

    async def _adds_settled(self) -> None:
        """Every add sent before has its outcome (a closed ledger's entries can be copied once they are durable)."""

    # -- what the ledger shows ------------------------------------------------------------------------

    def ledgers_info(self) -> list[LedgerInfo]:
        tier = self._tier
        infos = self._map.infos()
        if not tier.records:
            return infos
        return [i._replace(offloaded=True) if tier.complete(i.ledger_id) else i for i in infos]

    def stored_ledgers(self) -> dict[int, StoredLedger]:
        """Each ledger with its entries and its complete copy's uuid (ManagedLedgerFactory.stored_ledgers)."""
        return ledgers_with_copies(((i.ledger_id, i.entries) for i in self._map.infos()),
                                   self._tier.records.values())

    def stored_ledger_rows(self) -> list[StoredLedgerRow]:
        """The ledger list as ``ManagedLedgerFactory.stored_info`` shows it (an offload record's uuid with its
        ledger, complete or not, as Pulsar shows a ledger with an offload context)."""
        return stored_rows(self._map.infos(), self._map.current_id if not self.is_closed else None,
                           {o.ledger_id: str(o.uuid) for o in self._tier.records.values()})

    @property
    def offloaded_size(self) -> int:
        """Bytes of the ledgers with a complete offloaded copy (Pulsar's getOffloadedSize)."""
        return sum(o.size for o in self._tier.records.values() if o.complete)

    @property
    def last_offload_ledger_id(self) -> int:
        return self._tier.last_ledger_id

    @property
    def last_offload_success_ms(self) -> int:
        return self._tier.last_success_ms

    @property
    def last_offload_failure_ms(self) -> int:
        return self._tier.last_failure_ms

    # -- reading a ledger from its copy -----------------------------------------------------------------

    def _reads_copy(self, ledger_id: int) -> bool:
        """Reads of the ledger go to its offloaded copy: the local copy is deleted, or the copy is complete and the
        offload policy reads tiered storage first (Pulsar's default) with an offloader that can read it."""
        records = self._tier.records
        if not records:
            return False
        o = records.get(ledger_id)
        if o is None or not o.complete:
            return False
        if o.local_deleted:
            return True
        offloader = self._offloader
        return (self._config.offload.read_tiered_first and offloader is not None
                and offloader.reads_driver(o.driver))

    def _offloaded_source(self, ledger_id: int) -> OffloadedSource:
        """The reader of a ledger whose only copy is the offloaded one (opened at its first read)."""
        tier = self._tier
        source = tier.sources.get(ledger_id)
        if source is not None:
            return source
        o = tier.records[ledger_id]
        offloader = self._offloader
        if offloader is None or not offloader.reads_driver(o.driver):
            raise ManagedLedgerError(f"ledger {ledger_id} of {self._name} is offloaded (driver {o.driver!r}) and its "
                                     "local copy deleted: no such offloader is configured to read it "
                                     "(managedLedgerOffloadDriver)")
        source = tier.sources[ledger_id] = OffloadedSource(offloader, self._name, ledger_id, o.uuid,
                                                           o.driver_properties, self._offload_stats, self._clock)
        return source

    def release_idle_copies(self) -> int:
        """Close the copies no read used for the config's ``offloaded_idle_s`` (Pulsar's
        managedLedgerInactiveOffloadedLedgerEvictionTimeSeconds; 0: never): their buffers and files go, a later read
        opens them again. The number closed."""
        idle = self._config.offloaded_idle_s
        if idle <= 0:
            return 0
        return sum(source.release_if_idle(idle) for source in self._tier.sources.values())

    async def _read_offloaded(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        source = self._offloaded_source(ledger_id)
        try:
            return await self._blocking(source.read, first, last)
        except OffloadedLedgerError as exc:
            raise ManagedLedgerError(f"offloaded ledger {ledger_id} of {self._name}: {exc}") from None

    # -- offloading -----------------------------------------------------------------------------------

    def _offloader_or_refuse(self) -> Offloader:
        offloader = self._offloader
        if offloader is None:
            raise NoOffloaderError("no offloader is configured (managedLedgerOffloadDriver)")
        return offloader

    async def offload_prefix(self, up_to: Position) -> Position:
        """Copy the closed ledgers before ``up_to``'s ledger that have entries and no complete copy yet, oldest
        first, to the offloader (Pulsar's asyncOffloadPrefix); the first position not offloaded. Raises
        ManagedLedgerError: no offloader, another offload under way, a position that is no entry, a copy that
        failed (the ledgers before it stay offloaded)."""
        self._check_open()
        offloader = self._offloader_or_refuse()
        current = self._map.current.ledger_id
        if not (up_to == Position(current, 0) or self._map.is_entry(up_to)):
            raise InvalidPositionError(f"Invalid position for offload: {up_to.ledger_id}:{up_to.entry_id}")
        chosen = []
        first_left: Position | None = None
        for meta in self._map.closed():
            if meta.ledger_id >= up_to.ledger_id:
                first_left = Position(meta.ledger_id, 0)
                break
            if self._offloadable(meta):
                chosen.append(meta)
        if first_left is None:
            first_left = Position(current, 0)
        await self._offload_ledgers(offloader, chosen)
        return first_left

    async def offload_by_thresholds(self, threshold_bytes: int, threshold_s: float) -> int:
        """Pulsar's automatic offload (ManagedLedgerImpl.maybeOffload): the closed ledgers, newest first, summing
        their sizes; one not offloaded yet is chosen once the sum passes ``threshold_bytes`` or it closed
        ``threshold_s`` or more ago (a negative threshold: not that criterion); the chosen ones offloaded oldest
        first. The number offloaded (0 too when there is no offloader, or another offload runs)."""
        offloader = self._offloader
        if offloader is None or self._tier.running or (threshold_bytes < 0 and threshold_s < 0):
            return 0
        self._check_open()
        now, summed = self._clock(), 0
        chosen: list[LedgerMeta] = []
        for meta in reversed(list(self._map.closed())):
            summed += meta.size
            if not self._offloadable(meta):
                continue
            if (0 <= threshold_bytes < summed) or (threshold_s >= 0 and now - meta.ended_at >= threshold_s):
                chosen.insert(0, meta)
        await self._offload_ledgers(offloader, chosen)
        return len(chosen)

    def _offloadable(self, meta: LedgerMeta) -> bool:
        """A closed ledger with entries, all of them durable, and no complete copy yet."""
        return (meta.entries > 0 and not self._tier.complete(meta.ledger_id)
                and Position(meta.ledger_id, meta.entries - 1) <= self.last_confirmed_entry)

    def _offload_automatically(self) -> None:
        """A ledger closed (Pulsar's ledgerClosed -> maybeOffloadInBackground), or the managed ledger opened with
        ``on_open``: the offload by the thresholds in force, in the background (one at a time; one already under way
        runs again when it ends; so does one asked for while an admin's run is under way, when that ends: Pulsar
        tries again every 100 ms until the offload mutex is free)."""
        tier = self._tier
        if not self._config.offload.automatic or self._offloader is None or self._state is not LedgerState.OPEN:
            return
        if tier.automatic is not None and not tier.automatic.done():
            tier.again = True
            return
        if tier.running:
            tier.after_run = True
            return
        task = tier.automatic = asyncio.ensure_future(self._offload_by_policy())
        task.add_done_callback(self._automatic_offload_done)

    async def _offload_by_policy(self) -> None:
        tier = self._tier
        while True:
            tier.again = False
            await self._adds_settled()
            await self.offload_by_policy()
            if not tier.again:
                return

    async def offload_by_policy(self) -> int:
        """The automatic offload by the thresholds of the config's offload policy (``offload_by_thresholds``);
        the number offloaded."""
        policy = self._config.offload
        if not policy.automatic:
            return 0
        count = await self.offload_by_thresholds(policy.threshold_bytes, policy.threshold_s)
        if count:
            log.info("%s: %d ledgers offloaded (thresholds: %d bytes, %s s)", self._name, count,
                     policy.threshold_bytes, policy.threshold_s)
        return count

    def _automatic_offload_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None and self._state is LedgerState.OPEN:
            log.warning("%s: automatic offload failed: %s", self._name, exc)

    def _opened(self) -> None:
        """The managed ledger is open (Pulsar's triggerOffloadOnTopicLoad: an automatic offload now)."""
        if self._config.offload.on_open:
            self._offload_automatically()

    async def _stop_offloading(self) -> None:
        """Closing or deleting: the automatic offload under way stops (its copy is abandoned, tried again later)."""
        task, self._tier.automatic = self._tier.automatic, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _offload_ledgers(self, offloader: Offloader, chosen: list[LedgerMeta]) -> None:
        """Copy each ledger in turn (the offload mutex held). As Pulsar's offloadLoop, a failed copy does not stop
        the run: the next ledgers are copied, then the first failure is raised (a ledger trimmed meanwhile is no
        failure; a fenced ledger ends the run)."""
        tier = self._tier
        if tier.running:
            raise OffloadInProgressError("Offload operation already running")
        tier.running = True
        first_failure: Exception | None = None
        try:
            for meta in chosen:
                self._check_open()  # (closed, deleted or fenced meanwhile: the rest is not copied)
                try:
                    await self._offload_one(offloader, meta)
                except Exception as exc:
                    if self._map.get(meta.ledger_id) is None:  # (trimmed meanwhile: not an error, as in Pulsar)
                        continue
                    tier.last_failure_ms = int(self._clock() * 1000)
                    if (stats := self._offload_stats) is not None:
                        stats.offload_failed(self._name)
                    first_failure = first_failure or exc
                    if self.is_fenced:
                        break
                    log.warning("%s: offload of ledger %d failed (the next ones go on): %s", self._name,
                                meta.ledger_id, exc)
                    continue
                except BaseException:
                    tier.last_failure_ms = int(self._clock() * 1000)
                    raise
                tier.last_ledger_id = meta.ledger_id
                tier.last_success_ms = int(self._clock() * 1000)
        finally:
            tier.running = False
            if tier.after_run:
                tier.after_run = False
                self._offload_automatically()
        if first_failure is not None:
            raise first_failure

    async def _offload_one(self, offloader: Offloader, meta: LedgerMeta) -> None:
        ledger_id, name, records = meta.ledger_id, self._name, self._tier.records
        stale = records.get(ledger_id)
        record = LedgerOffload(ledger_id, uuid.uuid4(), meta.entries, meta.size, meta.ended_at, offloader.driver_name,
                               offloader.driver_metadata(), context=stale.context if stale is not None else b"")
        records[ledger_id] = record
        await self._save_offloads()
        if stale is not None:  # (an earlier try's files, if any: Pulsar's "previous failed offload" clean-up)
            await self._delete_copies([stale])
        metadata = await self._offload_metadata(meta)
        stats = self._offload_stats
        writer = await self._writing(self._blocking(offloader.begin, name, ledger_id, record.uuid, metadata))
        try:
            step = max(1, min(OFFLOAD_READ_ENTRIES, OFFLOAD_READ_BYTES * meta.entries // max(meta.size, 1)))
            for first in range(0, meta.entries, step):
                started = time.monotonic()
                entries = await self._read_to_offload(ledger_id, first, min(first + step, meta.entries) - 1)
                if stats is not None:
                    stats.source_read(name, time.monotonic() - started)
                await self._writing(self._blocking(writer.append, entries))
                if stats is not None:
                    stats.offloaded(name, sum(map(len, entries)))
            await self._writing(self._blocking(writer.finish))
        except BaseException:
            await asyncio.shield(self._blocking(writer.abort))
            raise
        if records.get(ledger_id) is not record:  # (trimmed meanwhile: its copy is garbage)
            await self._delete_copies([record])
            return
        record.complete, record.completed_at_ms = True, int(self._clock() * 1000)
        await self._save_offloads()

    async def _writing(self, write: asyncio.Future[T]) -> T:
        """A write to the offload storage; one that fails is counted (Pulsar's recordWriteToStorageError)."""
        try:
            return await write
        except OSError:
            if (stats := self._offload_stats) is not None:
                stats.write_failed(self._name)
            raise

    async def delete_offloaded_locals(self, lag_s: float) -> int:
        """Delete the local copy of each ledger whose offloaded copy completed ``lag_s`` or more ago (Pulsar's
        managedLedgerOffloadDeletionLagMs; negative: never); reads of it then go to the copy. The records say so,
        durably, before the local copies go. The number deleted."""
        if lag_s < 0 or self._state is not LedgerState.OPEN:
            return 0
        now_ms = self._clock() * 1000
        current = self._map.current.ledger_id
        due = [o for o in self._tier.records.values() if o.complete and not o.local_deleted
               and now_ms - o.completed_at_ms >= lag_s * 1000 and o.ledger_id != current
               and self._has_local_copy(o.ledger_id)]
        if not due:
            return 0
        for o in due:
            o.local_deleted = True
        try:
            await self._save_offloads()
        except BaseException:
            for o in due:
                o.local_deleted = False
            raise
        await self._delete_local_copies([o.ledger_id for o in due])
        return len(due)

    async def _delete_copies(self, records: list[LedgerOffload]) -> None:
        await delete_copies(self._offloader, self._name, records, self._blocking, self._offload_stats)


def ledgers_with_copies(ledgers: Iterable[tuple[int, int | None]],
                        records: Iterable[LedgerOffload]) -> dict[int, StoredLedger]:
    """``ledgers`` (id, entries) with their offload records' copies; a record's ledger not among them (its local copy
    deleted) is one too."""
    out = {ledger_id: StoredLedger(entries, False, None) for ledger_id, entries in ledgers}
    for o in records:
        known = out.get(o.ledger_id)
        out[o.ledger_id] = StoredLedger(known.entries if known is not None and known.entries is not None
                                        else o.entries, o.complete, str(o.uuid) if o.complete else None)
    return out


def offloader_in(config: ManagedLedgerConfig | None, factory_offloader: Offloader | None) -> Offloader | None:
    """The offloader a managed ledger of ``config`` uses: its offload policies' tier's, else the factory's."""
    tier = config.offload.tier if config is not None else None
    return factory_offloader if tier is None else tier.offloader


async def delete_copies(offloader: Offloader | None, managed_ledger: str, records: Iterable[LedgerOffload],
                        blocking: Callable[..., asyncio.Future[None]], stats: OffloadStatsSink | None = None) -> None:
    """Delete offloaded copies (of trimmed ledgers, of failed tries, of a deleted managed ledger); a failure is
    logged, as Pulsar's cleanupOffloaded leaves it."""
    for o in records:
        if offloader is None or not offloader.reads_driver(o.driver):
            log.warning("%s: the offloaded copy of ledger %d (driver %r) is left: no such offloader here",
                        managed_ledger, o.ledger_id, o.driver)
            continue
        try:
            await blocking(offloader.delete, managed_ledger, o.ledger_id, o.uuid, o.driver_properties)
        except OSError as exc:
            log.warning("%s: the offloaded copy of ledger %d not deleted: %s", managed_ledger, o.ledger_id, exc)
            if stats is not None:
                stats.copy_deleted(managed_ledger, False)
        else:
            if stats is not None:
                stats.copy_deleted(managed_ledger, True)
