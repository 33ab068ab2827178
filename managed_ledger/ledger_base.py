"""The storage-agnostic part of a managed ledger: state machine, shape of the log, cursors,
parked reads, rollover rule and trimming.

Subclasses store the entries (``memory``, ``file``): they implement adding, fetching, creating
and forgetting ledgers, and whatever persisting cursors needs. Everything here runs on the
owning event loop and never blocks.
"""

from __future__ import annotations

import asyncio
import enum
import types
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TypeVar

from managed_ledger.api import (
    CursorNotFoundError,
    InitialPosition,
    LedgerClosedError,
    LedgerInfo,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    StoredLedgerRow,
)
from managed_ledger.completion import NestingCounter, OrderedCompleter
from managed_ledger.cursor_base import BaseCursor, CursorRecord
from managed_ledger.entry import Entry
from managed_ledger.ledger_map import LedgerMap
from managed_ledger.position import Position
from managed_ledger.stats import AddStats, CursorStats

Clock = Callable[[], float]


class LedgerState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    DELETED = "deleted"


# Read per add and per cursor read: an Enum member looked up on its class costs ~0.2 us on Python 3.11, a
# module constant a tenth of it (the SEND path does the same: server_cnx._WAITING).
_OPEN = LedgerState.OPEN

# Legal moves of the managed-ledger state machine (the only place that changes state).
_TRANSITIONS: dict[LedgerState, frozenset[LedgerState]] = {
    LedgerState.OPEN: frozenset({LedgerState.CLOSED, LedgerState.DELETED}),
    LedgerState.CLOSED: frozenset(),
    LedgerState.DELETED: frozenset(),
}


class BaseManagedLedger(ManagedLedger):
    __slots__ = ("_add_completer", "_clock", "_config", "_cursors", "_map", "_name", "_nesting", "_non_durable",
                 "_state", "_waiting", "_wake_posted", "add_stats", "cursor_stats")

    def __init__(
        self, name: str, config: ManagedLedgerConfig, ledger_map: LedgerMap, nesting: NestingCounter, clock: Clock
    ) -> None:
        self._name = name
        self._config = config
        self._map = ledger_map
        self._nesting = nesting
        self._clock = clock
        self._state = LedgerState.OPEN
        # Set once a close or delete has ended (the factory forgot this handle; a deleted ledger's data is
        # gone): what an open arriving meanwhile waits for (``settled``).
        self._ended = asyncio.Event()
        # Adds complete in call order: one ordering domain for the whole ledger.
        self._add_completer = OrderedCompleter(nesting, config.read_nesting_limit)
        self._cursors: dict[str, BaseCursor] = {}  # open durable cursor handles
        self._non_durable: dict[BaseCursor, None] = {}  # insertion-ordered set
        self._waiting: dict[BaseCursor, None] = {}  # cursors with a parked read, in park order
        self._wake_posted = False  # a _wake_parked_soon is posted to the loop and has not run yet
        self.add_stats = AddStats(config.add_latency_sink)
        # Durable cursors' state writes, by cursor name (kept across reopened handles; dropped with the cursor).
        self.cursor_stats: dict[str, CursorStats] = {}

    # -- what a storage implementation provides ----------------------------------------------------

    @abstractmethod
    def _named_records(self) -> Iterable[tuple[str, CursorRecord]]:
        """(name, stored state) of every durable cursor, open handle or not."""

    @abstractmethod
    def _make_cursor(self, name: str, record: CursorRecord, durable: bool) -> BaseCursor: ...

    @abstractmethod
    def _entry_size(self, position: Position) -> int:
        """Data size of a stored entry (for max_bytes), without reading it."""

    def _run_within(self, ledger_id: int, first: int, count: int, max_bytes: int) -> tuple[int, int]:
        """How many of the ``count`` consecutive stored entries of a ledger from entry ``first`` a read
        takes within ``max_bytes`` (the first one whatever its size), and their data size."""
        size = 0
        for i in range(count):
            n = self._entry_size(Position(ledger_id, first + i))
            if i and size + n > max_bytes:
                return i, size
            size += n
        return count, size

    @abstractmethod
    def _remove_ledgers(self, ledger_ids: list[int]) -> None:
        """Drop the data of trimmed ledgers (already removed from the map)."""

    def _cursor_state_changed(self, name: str) -> None:
        """A durable cursor's acknowledgement state changed (the file ledger persists it)."""

    def _stats_of_cursor(self, name: str) -> CursorStats:
        stats = self.cursor_stats.get(name)
        if stats is None:
            stats = self.cursor_stats[name] = CursorStats()
        return stats

    # -- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

    @property
    def first_position(self) -> Position:
        return self._map.first_position

    @property
    def current_ledger_id(self) -> int:
        return self._map.current_id

    @property
    def number_of_entries(self) -> int:
        return self._map.number_of_entries

    @property
    def total_size(self) -> int:
        return self._map.total_size

    @property
    def is_closed(self) -> bool:
        return self._state is not _OPEN

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        return types.MappingProxyType(self._cursors)

    def ledgers_info(self) -> list[LedgerInfo]:
        return self._map.infos()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name} {self._state.value} last={self.last_confirmed_entry}>"

    def _move_to(self, state: LedgerState) -> None:
        if state not in _TRANSITIONS[self._state]:
            raise ManagedLedgerError(f"managed ledger {self._name}: illegal move {self._state} -> {state}")
        self._state = state

    # -- position arithmetic ------------------------------------------------------------------

    def next_valid_position(self, position: Position) -> Position:
        return self._map.next_valid(position)

    def previous_position(self, position: Position) -> Position:
        return self._map.previous(position)

    def count_entries_between(self, first: Position, last: Position) -> int:
        return self._map.count_between(first, last)

    def nth_position(self, start: Position, n: int) -> Position | None:
        return self._map.nth_after(start, n)

    # -- rollover -----------------------------------------------------------------------------

    def _current_ledger_is_full(self) -> bool:
        # Pulsar's rule: full by entries, size or age; but no rollover at all before the
        # minimum age (managedLedgerMinLedgerRolloverTimeMinutes), to bound the ledger count.
        current = self._map.current
        config = self._config
        age = self._clock() - current.created_at
        full = (
            current.entries >= config.max_entries_per_ledger
            or current.size >= config.max_size_per_ledger_bytes
            or age >= config.max_ledger_rollover_time_s
        )
        return full and current.entries > 0 and age >= config.min_ledger_rollover_time_s

    # -- cursors ------------------------------------------------------------------------------

    def _initial_mark_delete(self, initial_position: InitialPosition) -> Position:
        if initial_position is InitialPosition.LATEST:
            return self.last_confirmed_entry
        return self._floor()

    def new_non_durable_cursor(self, start: Position, name: str) -> BaseCursor:
        self._check_open()
        mark_delete = max(min(start, self.last_confirmed_entry), self._floor())
        cursor = self._make_cursor(name, CursorRecord(mark_delete), False)
        self._non_durable[cursor] = None
        return cursor

    def _close_non_durable(self, name: str) -> None:
        """delete_cursor of a name that is no durable cursor: close a reader of that name."""
        cursor = next((c for c in self._non_durable if c.name == name), None)
        if cursor is None:
            raise CursorNotFoundError(f"no cursor {name!r} on {self._name}")
        del self._non_durable[cursor]
        cursor._close_handle()

    def _has_active_cursor(self) -> bool:
        # (Per add: a topic without cursors, publish-only, builds no generator.)
        return bool((self._cursors and any(c._active for c in self._cursors.values()))
                    or (self._non_durable and any(c._active for c in self._non_durable)))

    def _cursor_activity_changed(self, cursor: BaseCursor) -> None:
        """A cursor became active or inactive (the file ledger's cache follows the active ones)."""

    def _cursor_closed(self, cursor: BaseCursor) -> None:
        # A closed durable handle is forgotten but its record stays: the subscription still
        # exists and holds its data; open_cursor() hands out a fresh handle.
        if self._cursors.get(cursor.name) is cursor:
            del self._cursors[cursor.name]
        self._non_durable.pop(cursor, None)

    def _park(self, cursor: BaseCursor) -> None:
        self._waiting[cursor] = None

    def _unpark(self, cursor: BaseCursor) -> None:
        self._waiting.pop(cursor, None)

    def _wake_parked(self) -> None:
        if self._waiting:
            for cursor in list(self._waiting):
                cursor._entries_available()

    def _wake_parked_soon(self) -> None:
        """Adds were confirmed: wake the parked reads once, on the loop's next turn.

        A storage whose adds are confirmed in groups from elsewhere (the file writer's rounds, the
        bookies' acknowledgements) calls this per confirmed add instead of ``_wake_parked``: every
        add confirmed in this loop turn then goes out in one read per waiting cursor (and one write
        per consumer), not one read per add and per cursor. A reader at the tail still gets the entry
        on the next turn, never after a timer."""
        if self._waiting and not self._wake_posted:
            self._wake_posted = True
            asyncio.get_running_loop().call_soon(self._wake_posted_parked)

    def _wake_posted_parked(self) -> None:
        self._wake_posted = False
        self._wake_parked()

    def _floor(self) -> Position:
        """The mark-delete position meaning "nothing stored is consumed".

        Normally (first ledger, -1). Capped at the last confirmed entry: when everything was
        trimmed and the current ledger is still empty, (current, -1) would sort after it, and
        a mark-delete never goes past the last confirmed entry (as in Pulsar).
        """
        return min(self._map.previous(self._map.first_position), self.last_confirmed_entry)

    # -- trimming -----------------------------------------------------------------------------

    def _mark_delete_moved(self, mark_delete: Position) -> None:
        """Cheap check after a durable mark-delete advanced: trim only if it passed the end of
        the oldest ledger (otherwise no ledger can have become deletable)."""
        if self._config.infinite_retention or len(self._map) < 2:
            return
        oldest = next(iter(self._map))
        if mark_delete >= Position(oldest.ledger_id, oldest.entries - 1):
            self.trim_consumed_ledgers()

    async def find_newest_matching(
        self, predicate: Callable[[Entry], bool], start: Position | None = None
    ) -> Position | None:
        """Binary search over the confirmed entries (the predicate holds for a prefix)."""
        self._check_open()
        ledgers = self._map
        begin = ledgers.ceil(ledgers.first_position if start is None else start)
        lo, hi = 0, ledgers.count_between(begin, self.last_confirmed_entry) - 1
        found: Position | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            position = ledgers.nth_after(begin, mid)
            assert position is not None
            if predicate(await self.read_entry(position)):
                found = position
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def update_config(self, config: ManagedLedgerConfig) -> None:
        self._config = config

    def trim_consumed_ledgers(self) -> int:
        if self._state is not LedgerState.OPEN or self._config.infinite_retention or len(self._map) < 2:
            return 0  # (only closed ledgers go: none, nothing to do; the retention sweep's common case)
        return self._trim(retained=True)

    def truncate(self, keep: Collection[str] = ()) -> int:
        self._check_open()
        last_confirmed = self.last_confirmed_entry
        for name, record in list(self._named_records()):
            if name in keep:
                continue
            cursor = self._cursors.get(name)
            if cursor is not None and not cursor.is_closed:
                cursor.clear_backlog()
            elif record.raise_floor(last_confirmed):  # (a stored cursor with no open handle)
                self._cursor_state_changed(name)
        for reader in list(self._non_durable):  # (Pulsar's truncate clears every cursor of the ledger, readers too)
            if reader.name not in keep and not reader.is_closed:
                reader.clear_backlog()
        return self._trim(retained=False) if len(self._map) > 1 else 0

    def _trim(self, retained: bool) -> int:
        """Delete the closed ledgers consumed by every durable cursor, oldest first: with ``retained``, as far as
        the retention policy allows; without, all of them (a truncate)."""
        config = self._config
        records = [record for _, record in self._named_records()]
        # Only durable cursors hold data. With none at all, everything but the current ledger
        # is up for deletion (subject to retention): Pulsar's behaviour for cursor-less topics.
        slowest = min((r.mark_delete for r in records), default=None)
        last_confirmed = self.last_confirmed_entry
        now = self._clock()
        total_size = self._map.total_size
        size_to_delete = 0
        doomed: list[int] = []
        for meta in self._map.closed():
            last_entry = Position(meta.ledger_id, meta.entries - 1)
            if slowest is not None and last_entry > slowest:
                break  # not consumed by every durable cursor
            if last_entry > last_confirmed:
                break  # entries still being stored (file ledger): never delete those
            size_to_delete += meta.size
            closed_at = meta.ended_at
            # Pulsar: a ledger goes when it is older than the retention time OR keeping it would
            # keep more than the retention size; -1 disables that limit.
            expired = config.retention_time_s >= 0 and now - closed_at >= config.retention_time_s
            over_size = config.retention_size_bytes >= 0 and total_size - size_to_delete >= config.retention_size_bytes
            if retained and not (expired or over_size):
                break
            doomed.append(meta.ledger_id)
        if not doomed:
            return 0
        for ledger_id in doomed:
            self._map.remove(ledger_id)
        self._remove_ledgers(doomed)
        first = self._map.first_position
        # Like Pulsar's advanceCursorsIfNecessary: mark-deletes inside deleted ledgers move to
        # (first remaining ledger, -1), but never past the last confirmed entry.
        floor = self._floor()
        for name, record in self._named_records():
            if record.raise_floor(floor):
                self._cursor_state_changed(name)
        for cursor in (*self._cursors.values(), *self._non_durable):
            cursor._ledgers_trimmed(first, floor)
        return len(doomed)

    # -- lifecycle ----------------------------------------------------------------------------

    async def wait_ended(self) -> None:
        """Returns once this handle's close or delete has ended (the factory has forgotten it)."""
        await self._ended.wait()

    def _check_open(self) -> None:
        if self._state is not _OPEN:
            raise LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")

    def _shut(self, state: LedgerState) -> None:
        """Move to CLOSED or DELETED: parked reads fail, every cursor handle closes."""
        self._move_to(state)
        error = LedgerClosedError(f"managed ledger {self._name} is {state.value}")
        # Parked at the tail, or still in the new-entries check delay (not yet in _waiting).
        for cursor in (*self._waiting, *self._cursors.values(), *self._non_durable):
            cursor._fail_parked(error)
        for cursor in (*self._cursors.values(), *self._non_durable):
            cursor._close_handle()
        self._non_durable.clear()


LedgerT = TypeVar("LedgerT", bound=BaseManagedLedger)


async def settled(open_ledgers: Mapping[str, LedgerT], name: str) -> LedgerT | None:
    """A factory's open handle of ``name``, once a close or delete of it under way has ended (None when
    none is open then). A close takes a while (cursors saved, queued adds finished), a delete longer (the
    data removed): an open or delete arriving meanwhile must not get the handle that is closing, on which
    every call fails, nor load the data while it is being removed."""
    ledger = open_ledgers.get(name)
    while ledger is not None and ledger.is_closed:
        await ledger.wait_ended()
        ledger = open_ledgers.get(name)
    return ledger


def stored_rows(infos: Iterable[LedgerInfo], current: int | None,
                offload_uuids: Mapping[int, str] | None = None) -> list[StoredLedgerRow]:
    """Ledgers as a ledger list stores them (``stored_info``): a closed one with its entries, size and close time (ms),
    the ``current`` one (still written) with its id only and timestamp 0, as Pulsar's LedgerInfo of it."""
    uuids = offload_uuids or {}
    return [StoredLedgerRow(i.ledger_id, None, None, 0, uuids.get(i.ledger_id)) if i.ledger_id == current
            else StoredLedgerRow(i.ledger_id, i.entries, i.size,
                                 round((i.closed_at if i.closed_at is not None else i.created_at) * 1000),
                                 uuids.get(i.ledger_id))
            for i in infos]
