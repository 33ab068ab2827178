"""The managed-ledger interface: what the broker's service layer programs against.

Vocabulary is Apache Pulsar's (ManagedLedger / ManagedCursor):

- A managed ledger is the log of one topic (partition). It is a sequence of *ledgers*; each
  ledger is a run of entries with ids 0, 1, 2, ... Only the last ledger (the *current* one)
  takes writes; it is rolled over (closed, a new one opened) when it gets too big or too old.
- A cursor is a subscription's (durable) or a reader's (non-durable) place in the log:
  the *mark-delete position* (everything <= it is acknowledged), the *individually deleted*
  positions beyond it, and the *read position* (next entry to hand out).
- Whole ledgers that every durable cursor has acknowledged are deleted ("trimmed") as far as
  the retention policy allows.

Everything runs on one event loop. Methods that only change in-memory state are synchronous;
callbacks follow the rules in ``managed_ledger.completion`` (inline up to a nesting limit,
else posted to the loop, never out of order).
"""

from __future__ import annotations

import abc
import asyncio
import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from managed_ledger.completion import NestingCounter
from managed_ledger.entry import Entry
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet
from managed_ledger.stats import AddLatencySink, AddStats

if TYPE_CHECKING:
    from managed_ledger.cursor_base import CursorRecord
    from managed_ledger.offload.api import Offloader

MIB = 1024 * 1024
# Pulsar's managedLedgerMaxUnackedRangesToPersist default: the individually acknowledged ranges a cursor's stored state
# keeps (past them, acknowledged entries may be delivered again after a restart).
MAX_UNACKED_RANGES_TO_PERSIST = 10_000
# Pulsar's managedLedgerMaxBatchDeletedIndexToPersist default: the partly acknowledged batches a stored state keeps.
MAX_BATCH_DELETED_INDEX_TO_PERSIST = 10_000


# -- errors -----------------------------------------------------------------------------------


class ManagedLedgerError(Exception):
    """Base of all storage errors (Pulsar ManagedLedgerException; wire: PersistenceError)."""


class LedgerClosedError(ManagedLedgerError):
    """The managed ledger was closed or deleted (Pulsar ManagedLedgerAlreadyClosedException)."""


class LedgerFencedError(ManagedLedgerError):
    """The managed ledger stopped taking writes after a storage failure (ManagedLedgerFencedException)."""


class StorageUnavailableError(ManagedLedgerError):
    """The store cannot take new entries now - its disk is full (the free-space floor refuses them)
    or a write failed - and heals by itself once the fault clears. Unlike LedgerFencedError the
    managed ledger stays usable: reads, cursors and later adds go on (Pulsar answers such adds with
    PersistenceError and keeps the topic)."""


class CursorNotFoundError(ManagedLedgerError):
    """No cursor of that name (Pulsar CursorNotFoundException)."""


class CursorClosedError(ManagedLedgerError):
    """The cursor was closed or deleted (Pulsar CursorAlreadyClosedException)."""


class NoMoreEntriesError(ManagedLedgerError):
    """A position past the last confirmed entry was asked for."""


class EntryNotFoundError(ManagedLedgerError):
    """The entry does not exist (never written, or its ledger was trimmed)."""


class LedgerNotFoundError(ManagedLedgerError):
    """No managed ledger of that name (Pulsar ManagedLedgerNotFoundException)."""


class InvalidPositionError(ManagedLedgerError):
    """A position that makes no sense for this operation (e.g. mark-delete past the end)."""


class NoOffloaderError(ManagedLedgerError):
    """An offload asked of a managed ledger with no offloader (Pulsar's NullLedgerOffloader)."""


class OffloadInProgressError(ManagedLedgerError):
    """An offload asked while another one runs (Pulsar's OffloadInProgressException)."""


# -- values -----------------------------------------------------------------------------------


class InitialPosition(enum.Enum):
    """Where a new durable cursor starts (Pulsar CommandSubscribe.InitialPosition)."""

    LATEST = 0  # only entries added after the cursor was created
    EARLIEST = 1  # every entry still in the log


@dataclass(frozen=True)
class OffloadTier:
    """An offloader of a topic's or namespace's own, made from its offload policies' driver settings (Pulsar makes
    one per namespace, and one per topic with offload policies of its own); ``settings`` identify it. ``offloader``
    None: those settings make none here (Pulsar's NullLedgerOffloader after a failed creation)."""

    settings: tuple[tuple[str, str], ...]
    offloader: Offloader | None = field(default=None, compare=False)


@dataclass(frozen=True)
class OffloadPolicy:
    """A managed ledger's offload policies in force (Pulsar's OffloadPolicies merged topic > namespace > broker);
    defaults are Pulsar's. They act only when there is an offloader: ``tier``'s, or without one the factory's."""

    # Offloaded automatically at each ledger rollover (and with retention): the closed ledgers past this many bytes
    # of newer data, or closed this long ago; negative: not that criterion.
    threshold_bytes: int = -1
    threshold_s: float = -1
    # A ledger's local copy is deleted this long after its offloaded copy completed; negative: never.
    deletion_lag_s: float = 4 * 3600
    # Reads of a ledger with a complete copy whose local copy is still there: from the copy (Pulsar's default
    # tiered-storage-first), else from the local copy (bookkeeper-first).
    read_tiered_first: bool = True
    # An automatic offload is checked when the managed ledger opens too (triggerOffloadOnTopicLoad).
    on_open: bool = False
    # The offloader when the topic's or namespace's policies name other driver settings than the factory's.
    tier: OffloadTier | None = None

    @property
    def automatic(self) -> bool:
        return self.threshold_bytes >= 0 or self.threshold_s >= 0


@dataclass(frozen=True)
class ManagedLedgerConfig:
    """Per-managed-ledger settings. Defaults are Pulsar's broker.conf defaults unless noted."""

    # managedLedgerMaxEntriesPerLedger=50000
    max_entries_per_ledger: int = 50_000
    # managedLedgerMaxLedgerRolloverTimeMinutes=240
    max_ledger_rollover_time_s: float = 240 * 60
    # managedLedgerMinLedgerRolloverTimeMinutes=10 (minutes: no rollover of any kind before this age)
    min_ledger_rollover_time_s: float = 10 * 60
    # managedLedgerMaxSizePerLedgerMbytes=2048
    max_size_per_ledger_bytes: int = 2048 * MIB
    # managedLedgerCacheSizeMB: Pulsar's default is 1/5 of direct memory; we fix a modest 256 MiB
    cache_size_bytes: int = 256 * MIB
    # ARCHITECTURE.md: inline completions allowed on one loop's stack before posting (default 10)
    read_nesting_limit: int = 10
    # defaultRetentionTimeInMinutes=0: consumed ledgers are deleted at once; -1 keeps them forever
    retention_time_s: float = 0
    # defaultRetentionSizeInMB=0: consumed ledgers are deleted at once; -1 keeps them forever
    retention_size_bytes: int = 0
    # Persisted mark-deletes per second per durable cursor (a topic's persistence policy,
    # managedLedgerMaxMarkDeleteRate); None = the factory's default; 0 = each change at once.
    mark_delete_rate: float | None = None
    # A read that found nothing looks again after this delay before it waits for the next add
    # (Pulsar's managedLedgerNewEntriesCheckDelayInMillis; 0: readers are woken at every add).
    new_entries_check_delay_s: float = 0.0
    # BookKeeper storage: the bookie isolation groups of this ledger's new ledgers (primary, secondary: comma-
    # separated racks-info group names), as Pulsar's BrokerService.getManagedLedgerConfig gives a namespace's
    # bookie affinity group to IsolatedBookieEnsemblePlacementPolicy; None: the BookKeeper client's own.
    bookie_affinity: tuple[str, str] | None = None
    # Tiered storage: the offload policies in force (the broker gives the topic's).
    offload: OffloadPolicy = OffloadPolicy()
    # managedLedgerMaxUnackedRangesToPersist=10000: the individually acknowledged ranges a cursor's stored state keeps
    # (the ranges nearest the mark-delete); a cursor with more is not fully persistable
    # (``ManagedCursor.is_cursor_data_fully_persistable``).
    max_unacked_ranges_to_persist: int = MAX_UNACKED_RANGES_TO_PERSIST
    # managedLedgerInactiveOffloadedLedgerEvictionTimeSeconds=600: an offloaded copy open for reads (its buffers,
    # its files) is closed when no read used it this long, checked with retention; 0: never.
    offloaded_idle_s: float = 600
    # Where every ledger of this config reports its adds' latency, once per group made durable together (the
    # broker's pulsar_broker_publish_latency); None: nowhere. Not a setting: shared by reference.
    add_latency_sink: AddLatencySink | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_entries_per_ledger < 1:
            raise ValueError("max_entries_per_ledger must be >= 1")
        if self.max_size_per_ledger_bytes < 1:
            raise ValueError("max_size_per_ledger_bytes must be >= 1")
        if self.min_ledger_rollover_time_s < 0 or self.max_ledger_rollover_time_s < 0:
            raise ValueError("ledger rollover times must be >= 0")
        if self.read_nesting_limit < 0:
            raise ValueError("read_nesting_limit must be >= 0")
        if self.cache_size_bytes < 0:
            raise ValueError("cache_size_bytes must be >= 0")
        if self.retention_time_s < -1 or self.retention_size_bytes < -1:
            raise ValueError("retention limits are >= 0, or -1 for infinite")
        if self.mark_delete_rate is not None and self.mark_delete_rate < 0:
            raise ValueError("mark_delete_rate must be >= 0")
        if self.new_entries_check_delay_s < 0:
            raise ValueError("new_entries_check_delay_s must be >= 0")
        if self.max_unacked_ranges_to_persist < 0:
            raise ValueError("max_unacked_ranges_to_persist must be >= 0")

    @property
    def infinite_retention(self) -> bool:
        return self.retention_time_s < 0 and self.retention_size_bytes < 0


class LedgerInfo(NamedTuple):
    """One ledger of a managed ledger, as shown in internal stats."""

    ledger_id: int
    entries: int
    size: int  # bytes of entry data
    created_at: float  # clock() seconds when the ledger was opened
    closed_at: float | None  # when it was rolled over; None for the current ledger
    offloaded: bool = False  # a complete copy is in tiered storage (Pulsar's internal stats: offloaded)


class StoredLedger(NamedTuple):
    """One ledger of a stored managed ledger, as a scan of the tier checks it (Pulsar's ManagedLedgerInfo.LedgerInfo):
    its entries (None: not known without reading it), whether a complete copy is offloaded, that copy's uuid."""

    entries: int | None
    offloaded: bool
    offload_uuid: str | None


class StoredLedgerRow(NamedTuple):
    """One ledger as a managed ledger's stored metadata lists it (Pulsar's ManagedLedgerInfo.LedgerInfo of the
    internal-info admin call): entries, size and timestamp (its close, epoch ms) None where not stored (the current
    ledger's); ``offload_uuid`` its offload's uuid, None without one."""

    ledger_id: int
    entries: int | None
    size: int | None
    timestamp_ms: int | None
    offload_uuid: str | None = None


class StoredCursorState(NamedTuple):
    """A durable cursor as stored (Pulsar's ManagedLedgerInfo.CursorInfo): the stored document's version and times
    (epoch ms; None where the storage does not keep them), its cursor ledger (-1: none), and the state saved."""

    version: int
    created_ms: int | None
    modified_ms: int | None
    cursors_ledger_id: int
    record: CursorRecord


class StoredManagedLedgerInfo(NamedTuple):
    """A managed ledger's stored metadata, read from the storage without opening it (Pulsar's
    ManagedLedgerFactory.getManagedLedgerInfo, behind ``pulsar-admin topics info-internal``). ``version`` is the
    metadata document's (-1: a storage that keeps none); the times are epoch ms, None where not kept."""

    version: int
    created_ms: int | None
    modified_ms: int | None
    ledgers: list[StoredLedgerRow]
    cursors: dict[str, StoredCursorState]
    properties: dict[str, str]
    terminated: Position | None = None


ReadCallback = Callable[[list[Entry], BaseException | None], None]
# A read's entries when it completes at once from memory (``read_entries_or_wait``'s ``inline``).
InlineRead = Callable[[list[Entry]], None]
AddCallback = Callable[[Position | None, BaseException | None], None]


# -- interfaces -------------------------------------------------------------------------------


class ManagedLedgerFactory(abc.ABC):
    """Opens managed ledgers by name; owns what they share (ledger ids, the nesting counter)."""

    def __init__(self) -> None:
        # Inline completion depth for everything this factory serves. A factory is used from
        # one event loop, so this is the "per-loop" counter of the architecture.
        self.nesting = NestingCounter()
        self._names_listeners: list[Callable[[str], None]] = []
        # The broker's tiered storage (its offload settings), for managed ledgers without one of their own; a storage
        # that cannot offload keeps None.
        self.offloader: Offloader | None = None

    def add_names_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(name)`` after a managed ledger is created or deleted: through this factory, or (storage
        that brokers share) by another broker, as soon as the storage tells. Runs on the factory's event loop
        and must not block; ``list_names`` already answers with the change."""
        self._names_listeners.append(listener)

    def _names_changed(self, name: str) -> None:
        for listener in list(self._names_listeners):
            listener(name)

    async def start(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Connect to the storage and learn what it holds, ahead of the first ``open`` (which starts it anyway);
        ``list_names`` is complete from then on."""

    def resize_cache(self, max_bytes: int) -> None:  # noqa: B027 - a factory without a read cache has none to resize
        """The read cache shared by the managed ledgers holds at most ``max_bytes`` from now on (the least recently
        used entries leave at once when it holds more)."""

    @abc.abstractmethod
    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        """Open (creating if needed) the managed ledger ``name``.

        While it is open, every call returns the same instance (``config`` is then ignored).
        """

    @abc.abstractmethod
    async def create(self, name: str) -> bool:
        """Store a managed ledger of this name with nothing in it, without opening it (the metadata only, as Pulsar's
        TopicResources.createPersistentTopicAsync makes a partition's: its first ``open`` makes its first ledger);
        durable when this returns. False, and nothing done, when one is stored already (or being opened)."""

    @abc.abstractmethod
    async def delete(self, name: str, config: ManagedLedgerConfig | None = None) -> None:
        """Delete the managed ledger and all its data and cursors (open or not). ``config``: what it would be opened
        with (as Pulsar's asyncDelete is given), whose offloader deletes a closed ledger's offloaded copies."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every open managed ledger. The factory is unusable afterwards."""

    @abc.abstractmethod
    def list_names(self) -> list[str]:
        """Names of all stored managed ledgers (open or not), sorted."""

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """Whether a managed ledger of this name is stored (open or not): the ``list_names`` answer for
        one name, in constant time (asked on every topic lookup and creation)."""

    async def exists_fresh(self, name: str) -> bool:
        """``exists``, asking the storage when the name is not known here: storage that brokers share may hold one
        another broker has just created, not told yet (a name found is then known here). Storage of one broker
        knows every name already."""
        return self.exists(name)

    async def stored_ledgers(self, name: str) -> dict[int, StoredLedger] | None:
        """The ledgers of the stored managed ledger ``name`` (open or not, without opening it; Pulsar's
        getManagedLedgerInfo), by ledger id; None when there is no such managed ledger. Storage that cannot
        offload: None."""
        return None

    @abc.abstractmethod
    async def stored_info(self, name: str) -> StoredManagedLedgerInfo | None:
        """What the storage holds for the managed ledger ``name`` (open or not, without opening it): its ledgers, its
        durable cursors' saved states, the versions and times the storage keeps. None when there is no such managed
        ledger."""


class ManagedLedger(abc.ABC):
    """The log of one topic: append entries, open cursors, trim what everyone consumed.

    ``add_stats`` (managed_ledger.stats.AddStats) counts the adds of the current stats interval:
    write latency (request to durable) and entry size, per bucket; its owner calls ``refresh()``
    once per interval to publish them.
    """

    # (Implementations may declare slots; "__dict__" keeps other attributes possible, made only when one is set.)
    __slots__ = ("__dict__",)

    add_stats: AddStats

    @property
    @abc.abstractmethod
    def name(self) -> str: ...

    @property
    @abc.abstractmethod
    def config(self) -> ManagedLedgerConfig: ...

    # -- writing --

    @abc.abstractmethod
    def add_entry(self, data: bytes, callback: AddCallback) -> None:
        """Append data. Positions are assigned in call order and callbacks run in call order.

        The callback gets (position, None) once the entry is stored (durable per the
        implementation's policy), or (None, error). It never raises into the caller.
        """

    @abc.abstractmethod
    def add_entries(self, data: list[bytes], callback: AddCallback) -> None:
        """Append several entries at once (one call, one completion: the broker's publish path
        hands over all the SENDs of one producer that arrived in one read).

        The entries land in one ledger with consecutive entry ids; the callback runs once, with
        the position of the first (the others follow it), or (None, error) for all of them.
        Ordered with ``add_entry`` calls like any add. ``data`` must not be empty.
        """

    async def add_entry_async(self, data: bytes) -> Position:
        """``add_entry`` as a coroutine: the position, or raises the error."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()

        def done(position: Position | None, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                assert position is not None
                future.set_result(position)

        self.add_entry(data, done)
        return await future

    # -- shape of the log --

    @property
    @abc.abstractmethod
    def last_confirmed_entry(self) -> Position:
        """The last entry added; (current ledger id, -1) if none was ever added."""

    @property
    @abc.abstractmethod
    def first_position(self) -> Position:
        """The first entry still stored, or the position the next add gets if none is."""

    @property
    @abc.abstractmethod
    def current_ledger_id(self) -> int: ...

    @property
    @abc.abstractmethod
    def number_of_entries(self) -> int:
        """Entries currently stored (trimmed ledgers excluded)."""

    @property
    @abc.abstractmethod
    def total_size(self) -> int:
        """Bytes of entry data currently stored."""

    @abc.abstractmethod
    def ledgers_info(self) -> list[LedgerInfo]:
        """The stored ledgers, oldest first; the last one is the current ledger."""

    async def ledgers_metadata(self) -> dict[int, tuple[str, bool]]:
        """Ledger id -> its BookKeeper metadata as BookKeeper prints it, and whether a bookie of its ensembles is
        not registered (under-replicated): Pulsar's internal stats with ``?metadata=true``. Empty where ledgers
        are not BookKeeper's (the file ledger has no such metadata)."""
        return {}

    @abc.abstractmethod
    def next_valid_position(self, position: Position) -> Position:
        """The first stored entry after position, crossing ledger boundaries.

        Past the last entry this is the position the next add will get (so the next of the
        last entry of a closed ledger L is (L', 0), L' being the ledger after L). Positions
        before the first entry give the first entry.
        """

    @abc.abstractmethod
    def previous_position(self, position: Position) -> Position:
        """The entry before position: (L, e-1) if e > 0, else the last entry of the previous
        non-empty ledger, else (L, -1)."""

    @abc.abstractmethod
    def count_entries_between(self, first: Position, last: Position) -> int:
        """Stored entries p with first <= p <= last."""

    @abc.abstractmethod
    def nth_position(self, start: Position, n: int) -> Position | None:
        """The n-th (0-based) stored entry at or after start, or None when fewer are stored; found ledger by
        ledger, not entry by entry (an admin may ask for the millionth)."""

    @abc.abstractmethod
    async def read_entry(self, position: Position) -> Entry:
        """One entry; NoMoreEntriesError past the end, EntryNotFoundError if not stored."""

    @abc.abstractmethod
    async def find_newest_matching(
        self, predicate: Callable[[Entry], bool], start: Position | None = None
    ) -> Position | None:
        """Binary search for the last entry (from start, default the first) for which predicate
        holds, assuming it holds for a prefix of the log (e.g. publish_time <= t). None if it
        holds for none."""

    # -- cursors --

    @abc.abstractmethod
    async def open_cursor(
        self,
        name: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: dict[str, int] | None = None,
        cursor_properties: Mapping[str, str] | None = None,
    ) -> ManagedCursor:
        """Open the durable cursor ``name``, creating it at initial_position if new.

        An existing cursor (open, or stored from before) is returned as it is: initial_position,
        properties and cursor_properties only apply on creation.
        """

    @abc.abstractmethod
    def new_non_durable_cursor(self, start: Position, name: str) -> ManagedCursor:
        """A cursor that is never stored and never holds data back from trimming (readers).

        Its mark-delete is ``start``, clamped into [before the first entry, last confirmed
        entry]; reading begins at the next valid position after it.
        """

    @property
    @abc.abstractmethod
    def cursors(self) -> Mapping[str, ManagedCursor]:
        """Open durable cursors by name (read-only view). After (re)opening the managed
        ledger every stored durable cursor is open."""

    @abc.abstractmethod
    async def delete_cursor(self, name: str) -> None:
        """Delete a durable (or non-durable) cursor and its stored state; CursorNotFoundError
        if there is none."""

    # -- housekeeping / lifecycle --

    @abc.abstractmethod
    def update_config(self, config: ManagedLedgerConfig) -> None:
        """Apply new settings (e.g. a changed retention policy) to an open ledger."""

    @abc.abstractmethod
    def trim_consumed_ledgers(self) -> int:
        """Delete ledgers consumed by every durable cursor, as retention allows; return how
        many. Runs by itself on rollover and when a durable mark-delete crosses a ledger; call
        it periodically too if time-based retention must expire without traffic."""

    @abc.abstractmethod
    def truncate(self, keep: Collection[str] = ()) -> int:
        """Pulsar's truncate: every cursor, durable or not, but those named in ``keep`` acknowledges everything
        written so far (a reader goes on with what is written next, not with what is left of the current ledger),
        then every closed ledger consumed by every durable cursor is deleted whatever the retention policy (the
        current ledger stays, with its entries); return how many. Cursors in ``keep`` are left where they are and
        durable ones still hold back the ledgers they have not consumed; a non-durable one kept and left in a
        deleted ledger goes on from the first remaining entry, as after a trim."""

    @property
    @abc.abstractmethod
    def is_closed(self) -> bool:
        """Closed or deleted: no more adds, reads or cursor operations."""

    @property
    @abc.abstractmethod
    def is_fenced(self) -> bool:
        """Writes refused after a storage failure (never for the in-memory implementation)."""

    async def sync_creation(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Make the managed ledger's existence durable now (an explicit creation). A store may defer it until
        the first entry or cursor is stored (the file ledger does: opening then costs no sync); by default
        opening made it durable already."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close: parked reads fail with LedgerClosedError, cursors close, data stays."""

    @abc.abstractmethod
    async def delete(self) -> None:
        """Close and remove all data and cursors."""


class ManagedCursor(abc.ABC):
    """A subscription's (durable) or reader's (non-durable) position in a managed ledger.

    All state changes (reads advancing read_position, acks) happen synchronously in the call;
    persisting them is the implementation's business (``flush`` waits for it).
    """

    @property
    @abc.abstractmethod
    def name(self) -> str: ...

    @property
    @abc.abstractmethod
    def ledger(self) -> ManagedLedger: ...

    @property
    @abc.abstractmethod
    def is_durable(self) -> bool: ...

    @property
    @abc.abstractmethod
    def is_closed(self) -> bool: ...

    @property
    @abc.abstractmethod
    def mark_delete_position(self) -> Position:
        """Everything <= this is acknowledged."""

    @property
    @abc.abstractmethod
    def read_position(self) -> Position:
        """The next position to read (always after mark_delete_position)."""

    @property
    @abc.abstractmethod
    def individually_deleted(self) -> PositionRangeSet:
        """Positions acknowledged beyond mark-delete. A live view: do not modify it."""

    def is_cursor_data_fully_persistable(self) -> bool:
        """Whether the whole acknowledgement state can be stored: no more individually acknowledged ranges than the
        ledger's ``max_unacked_ranges_to_persist`` (Pulsar's ManagedCursorImpl.isCursorDataFullyPersistable, which
        in 4.0 counts those ranges alone). Counts the ranges: ask it where it matters, not per entry."""
        return self.individually_deleted.range_count() <= self.ledger.config.max_unacked_ranges_to_persist

    @property
    @abc.abstractmethod
    def properties(self) -> Mapping[str, int]:
        """Properties stored with the mark-delete position (Pulsar cursor properties)."""

    @property
    @abc.abstractmethod
    def batch_acks(self) -> Mapping[Position, list[int]]:
        """Partly acknowledged batch entries: position -> ack_set words (bit i set: message i of
        the batch is still unacknowledged). A live view, kept with the cursor's state."""

    @property
    @abc.abstractmethod
    def last_active(self) -> float:
        """clock() time (the factory's clock: wall-clock seconds by default) of the last read,
        ack, seek or touch(). Saved with a durable cursor's state (as wall-clock time), so a
        reopened cursor keeps the inactivity it had; one saved without it starts at its opening."""

    @abc.abstractmethod
    def set_properties(self, properties: Mapping[str, int]) -> None:
        """Replace the cursor's properties without moving it (saved with its state)."""

    @property
    @abc.abstractmethod
    def cursor_properties(self) -> Mapping[str, str]:
        """Pulsar's cursorProperties: a string map (a subscription's properties), stored with a durable cursor."""

    @abc.abstractmethod
    async def set_cursor_properties(self, properties: Mapping[str, str]) -> None:
        """Replace the cursor properties; returns once they are durable (as Pulsar's setCursorProperties)."""

    @abc.abstractmethod
    def touch(self) -> None:
        """Record activity now (a consumer came or went): last_active = clock(); saved with the
        cursor's state."""

    @property
    @abc.abstractmethod
    def is_active(self) -> bool:
        """Whether something reads through this cursor now (Pulsar's active cursors). Only active
        cursors keep entries in a read cache; new cursors are active."""

    @abc.abstractmethod
    def set_active(self, active: bool) -> None:
        """Mark the cursor active (a consumer reads through it) or inactive (none does)."""

    # -- reading --

    @abc.abstractmethod
    def read_entries(self, max_entries: int, callback: ReadCallback, max_bytes: int | None = None) -> None:
        """Read up to max_entries from read_position, skipping acknowledged positions, and move
        read_position past them. Gives [] if nothing is available. max_bytes bounds the total
        data size, but at least one entry is returned when one is available."""

    @abc.abstractmethod
    def read_entries_or_wait(
        self, max_entries: int, callback: ReadCallback, max_bytes: int | None = None,
        inline: InlineRead | None = None,
    ) -> None:
        """Like read_entries, but if nothing is available the read is parked and completed when
        entries arrive (or the cursor is moved back to available entries). One parked read per
        cursor: a second raises ManagedLedgerError.

        ``inline``: when the read finds entries that are all in memory (the read cache) and its
        completion would run at once (nothing of this cursor's queued, the nesting limit not
        reached), ``inline(entries)`` runs instead of ``callback(entries, None)``, before this
        returns, counted in the nesting depth as an inline completion: the caller's state is as it
        left it when it issued the read. An implementation may always use ``callback``."""

    @abc.abstractmethod
    def cancel_pending_read(self) -> bool:
        """Drop the parked read without calling it; True if there was one."""

    @property
    @abc.abstractmethod
    def has_pending_read(self) -> bool: ...

    @abc.abstractmethod
    def replay_entries(self, positions: Iterable[Position], callback: ReadCallback) -> None:
        """Read exactly these positions (ascending, skipping acknowledged or absent ones)
        without moving read_position (redelivery)."""

    async def read_entries_async(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """``read_entries`` as a coroutine."""
        return await _await_read(lambda cb: self.read_entries(max_entries, cb, max_bytes))

    async def read_entries_or_wait_async(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """``read_entries_or_wait`` as a coroutine; cancelling it cancels the parked read."""
        future: asyncio.Future[list[Entry]] = asyncio.get_running_loop().create_future()
        self.read_entries_or_wait(max_entries, _settle(future), max_bytes)
        try:
            return await future
        except asyncio.CancelledError:
            if not future.done() or future.cancelled():
                # Our read is still the parked one (a completed read would have settled it).
                self.cancel_pending_read()
            raise

    # -- acknowledging --

    @abc.abstractmethod
    def mark_delete(self, position: Position, properties: Mapping[str, int] | None = None) -> None:
        """Cumulative ack up to position. Older than the current mark-delete: ignored. Past
        the last confirmed entry: InvalidPositionError. Then the mark-delete moves on over
        individually deleted positions that have become contiguous with it."""

    @abc.abstractmethod
    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks. Positions at or before mark-delete, or not stored, are ignored;
        the mark-delete moves on when the acks make it contiguous."""

    @abc.abstractmethod
    def is_acked(self, position: Position) -> bool: ...

    @abc.abstractmethod
    def set_batch_ack(self, position: Position, ack_set: list[int]) -> None:
        """Record which messages of a batch entry are still unacknowledged (Pulsar's batch-index
        ack). Saved with the cursor state; forgotten once the entry is acknowledged (delete or
        mark-delete) or the cursor is reset. Ignored for acknowledged positions."""

    @abc.abstractmethod
    def skip_entries(self, n: int) -> None:
        """Acknowledge the next n unacknowledged entries after mark-delete."""

    def clear_backlog(self) -> None:
        """Acknowledge everything written so far."""
        self.mark_delete(self.ledger.last_confirmed_entry)

    @abc.abstractmethod
    async def flush(self) -> None:
        """Wait until the acknowledgement state so far is durable."""

    @abc.abstractmethod
    def save_now(self) -> None:
        """Start writing the unsaved state now, without waiting for the mark-delete rate (a consumer
        closed; ``reset`` does it itself). Does not wait; nothing for a state kept only in memory."""

    # -- moving --

    @abc.abstractmethod
    def seek(self, position: Position) -> None:
        """Set read_position, clamped into (mark-delete, next add position]."""

    @abc.abstractmethod
    def rewind(self) -> None:
        """read_position = first position after mark-delete (redeliver everything unacked)."""

    @abc.abstractmethod
    def reset(self, position: Position, ack_set: list[int] | None = None) -> None:
        """SEEK of a subscription: forget all acks, mark-delete = previous_position(position),
        read_position = position (clamped into [first position, next add position]). A durable
        cursor's new state is written at once (``save_now``), as Pulsar's resetCursor bypasses the
        mark-delete rate limiter. ``ack_set``: the entry at ``position`` is a batch partly acknowledged
        (bit set = message still unacked, as ``set_batch_ack``), as Pulsar's reset to a position carrying
        an ack set; ignored when ``position`` is no stored entry (the clamp moved it)."""

    # -- counting --

    @abc.abstractmethod
    def number_of_entries_in_backlog(self) -> int:
        """Entries after mark-delete up to the last confirmed one, minus individually deleted."""

    @abc.abstractmethod
    def number_of_entries_to_read(self) -> int:
        """Unacknowledged entries from read_position to the last confirmed entry."""

    @abc.abstractmethod
    def has_more_entries(self) -> bool:
        """Whether a read now would return something."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close this handle: a parked read is dropped, later calls fail with CursorClosedError.
        A durable cursor's stored state stays (it still holds data back from trimming) and
        ``open_cursor`` gives a new handle; ``delete_cursor`` removes it."""


def _settle(future: asyncio.Future[list[Entry]]) -> ReadCallback:
    def done(entries: list[Entry], exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(entries)

    return done


async def _await_read(start: Callable[[ReadCallback], None]) -> list[Entry]:
    future: asyncio.Future[list[Entry]] = asyncio.get_running_loop().create_future()
    start(_settle(future))
    return await future
