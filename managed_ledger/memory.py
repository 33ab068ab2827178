"""In-memory managed ledgers: entries live in Python lists, one list per ledger.

For tests, CI and "a real broker inside the test process". Data survives closing and
reopening a managed ledger within the same factory (the factory is the "disk"), so the
recovery paths of the service layer can be exercised without files.
"""

from __future__ import annotations

import enum
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from managed_ledger.api import (
    AddCallback,
    CursorNotFoundError,
    EntryNotFoundError,
    InitialPosition,
    LedgerClosedError,
    LedgerInfo,
    LedgerNotFoundError,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    NoMoreEntriesError,
)
from managed_ledger.completion import OrderedCompleter
from managed_ledger.entry import Entry
from managed_ledger.ledger_map import LedgerMap
from managed_ledger.memory_cursor import CursorRecord, MemoryCursor
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

Clock = Callable[[], float]


class MemoryManagedLedgerFactory(ManagedLedgerFactory):
    """Factory of in-memory managed ledgers. ``clock`` (seconds) drives rollover and retention."""

    def __init__(self, clock: Clock = time.time) -> None:
        super().__init__()
        self.clock = clock
        self._last_ledger_id = 0  # ledger ids are unique across the factory, starting at 1
        self._stored: dict[str, _StoredLedger] = {}
        self._open: dict[str, MemoryManagedLedger] = {}
        self._closed = False

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> MemoryManagedLedger:
        if self._closed:
            raise ManagedLedgerError("managed-ledger factory is closed")
        ledger = self._open.get(name)
        if ledger is None:
            stored = self._stored.setdefault(name, _StoredLedger())
            ledger = self._open[name] = MemoryManagedLedger(self, name, stored, config or ManagedLedgerConfig())
        return ledger

    async def delete(self, name: str) -> None:
        ledger = self._open.get(name)
        if ledger is not None:
            await ledger.delete()
        elif self._stored.pop(name, None) is None:
            raise LedgerNotFoundError(f"no managed ledger named {name!r}")

    async def close(self) -> None:
        for ledger in list(self._open.values()):
            await ledger.close()
        self._closed = True

    def list_names(self) -> list[str]:
        return sorted(self._stored)

    def _new_ledger_id(self) -> int:
        self._last_ledger_id += 1
        return self._last_ledger_id

    def _forget(self, ledger: MemoryManagedLedger, *, delete_data: bool) -> None:
        if self._open.get(ledger.name) is ledger:
            del self._open[ledger.name]
        if delete_data:
            self._stored.pop(ledger.name, None)


@dataclass
class _StoredLedger:
    """What survives closing a managed ledger (the in-memory "disk")."""

    ledgers: LedgerMap = field(default_factory=LedgerMap)
    data: dict[int, list[Entry]] = field(default_factory=dict)
    cursors: dict[str, CursorRecord] = field(default_factory=dict)
    last_confirmed: Position | None = None  # None: never opened


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    DELETED = "deleted"


# Legal moves of the managed-ledger state machine (the only place that changes state).
_TRANSITIONS: dict[_State, frozenset[_State]] = {
    _State.OPEN: frozenset({_State.CLOSED, _State.DELETED}),
    _State.CLOSED: frozenset(),
    _State.DELETED: frozenset(),
}


class MemoryManagedLedger(ManagedLedger):
    def __init__(
        self, factory: MemoryManagedLedgerFactory, name: str, stored: _StoredLedger, config: ManagedLedgerConfig
    ) -> None:
        self._factory = factory
        self._name = name
        self._config = config
        self._store = stored
        self._map = stored.ledgers
        self._data = stored.data
        self._clock = factory.clock
        self._state = _State.OPEN
        self._open_new_ledger(recovering=stored.last_confirmed is not None)
        # Adds complete in call order: one ordering domain for the whole ledger.
        self._add_completer = OrderedCompleter(factory.nesting, config.read_nesting_limit)
        self._cursors: dict[str, MemoryCursor] = {
            cursor_name: MemoryCursor(self, cursor_name, record, durable=True)
            for cursor_name, record in stored.cursors.items()
        }
        self._non_durable: dict[MemoryCursor, None] = {}  # insertion-ordered set
        self._waiting: dict[MemoryCursor, None] = {}  # cursors with a parked read, in park order

    def _open_new_ledger(self, *, recovering: bool) -> None:
        """Start a ledger. Like Pulsar, (re)opening a managed ledger always starts a new one;
        an empty previous current ledger is dropped."""
        now = self._clock()
        ledger_id = self._factory._new_ledger_id()
        previous = self._map.current if len(self._map) else None
        if previous is not None:
            self._map.close_current(now)
        self._map.open_ledger(ledger_id, now)
        self._data[ledger_id] = []
        if recovering and previous is not None and previous.entries == 0:
            self._map.remove(previous.ledger_id)
            del self._data[previous.ledger_id]
        last = self._store.last_confirmed
        if last is None or last.entry_id < 0:  # nothing ever added
            self._store.last_confirmed = Position(ledger_id, -1)

    def _move_to(self, state: _State) -> None:
        if state not in _TRANSITIONS[self._state]:
            raise ManagedLedgerError(f"managed ledger {self._name}: illegal move {self._state} -> {state}")
        self._state = state

    # -- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

    @property
    def last_confirmed_entry(self) -> Position:
        last = self._store.last_confirmed
        assert last is not None
        return last

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
        return self._state is not _State.OPEN

    @property
    def is_fenced(self) -> bool:
        return False  # nothing in memory can fail a write

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        return types.MappingProxyType(self._cursors)

    def ledgers_info(self) -> list[LedgerInfo]:
        return self._map.infos()

    def __repr__(self) -> str:
        return f"<MemoryManagedLedger {self._name} {self._state.value} last={self.last_confirmed_entry}>"

    # -- writing ------------------------------------------------------------------------------

    def add_entry(self, data: bytes, callback: AddCallback) -> None:
        if self._state is not _State.OPEN:
            error = LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")
            self._add_completer.complete(partial(callback, None, error))
            return
        if type(data) is not bytes:  # keep our own immutable copy of views / bytearrays
            data = bytes(data)
        position = self._map.record_add(len(data))
        self._data[position.ledger_id].append(Entry(position, data))
        self._store.last_confirmed = position
        self._add_completer.complete(partial(callback, position, None))
        if self._current_ledger_is_full():
            self._rollover()
        if self._waiting:
            for cursor in list(self._waiting):
                cursor._entries_available()

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

    def _rollover(self) -> None:
        self._open_new_ledger(recovering=False)
        self.trim_consumed_ledgers()

    # -- reading ------------------------------------------------------------------------------

    def _entry(self, position: Position) -> Entry:
        return self._data[position.ledger_id][position.entry_id]

    def next_valid_position(self, position: Position) -> Position:
        return self._map.next_valid(position)

    def previous_position(self, position: Position) -> Position:
        return self._map.previous(position)

    def count_entries_between(self, first: Position, last: Position) -> int:
        return self._map.count_between(first, last)

    async def read_entry(self, position: Position) -> Entry:
        self._check_open()
        if position > self.last_confirmed_entry:
            raise NoMoreEntriesError(f"{position} is past the last confirmed entry {self.last_confirmed_entry}")
        if not self._map.is_entry(position):
            raise EntryNotFoundError(f"no entry at {position} in {self._name}")
        return self._entry(position)

    async def find_newest_matching(
        self, predicate: Callable[[Entry], bool], start: Position | None = None
    ) -> Position | None:
        self._check_open()
        ledgers = self._map
        begin = ledgers.ceil(ledgers.first_position if start is None else start)
        lo, hi = 0, ledgers.count_between(begin, self.last_confirmed_entry) - 1
        found: Position | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            position = ledgers.nth_after(begin, mid)
            assert position is not None
            if predicate(self._entry(position)):
                found = position
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    # -- cursors ------------------------------------------------------------------------------

    async def open_cursor(
        self,
        name: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: dict[str, int] | None = None,
    ) -> MemoryCursor:
        self._check_open()
        cursor = self._cursors.get(name)
        if cursor is not None:
            return cursor
        record = self._store.cursors.get(name)
        if record is None:
            if initial_position is InitialPosition.LATEST:
                mark_delete = self.last_confirmed_entry
            else:
                mark_delete = self._floor()
            record = self._store.cursors[name] = CursorRecord(mark_delete, PositionRangeSet(), dict(properties or {}))
        cursor = self._cursors[name] = MemoryCursor(self, name, record, durable=True)
        return cursor

    def new_non_durable_cursor(self, start: Position, name: str) -> MemoryCursor:
        self._check_open()
        mark_delete = max(min(start, self.last_confirmed_entry), self._floor())
        cursor = MemoryCursor(self, name, CursorRecord(mark_delete), durable=False)
        self._non_durable[cursor] = None
        return cursor

    async def delete_cursor(self, name: str) -> None:
        self._check_open()
        cursor = self._cursors.pop(name, None)
        record = self._store.cursors.pop(name, None)
        if cursor is None and record is None:
            cursor = next((c for c in self._non_durable if c.name == name), None)
            if cursor is None:
                raise CursorNotFoundError(f"no cursor {name!r} on {self._name}")
            del self._non_durable[cursor]
        if cursor is not None:
            cursor._close_handle()
        self.trim_consumed_ledgers()  # the deleted cursor may have been the slowest

    def _cursor_closed(self, cursor: MemoryCursor) -> None:
        # A closed durable handle is forgotten but its record stays: the subscription still
        # exists and holds its data; open_cursor() hands out a fresh handle.
        if self._cursors.get(cursor.name) is cursor:
            del self._cursors[cursor.name]
        self._non_durable.pop(cursor, None)

    def _park(self, cursor: MemoryCursor) -> None:
        self._waiting[cursor] = None

    def _unpark(self, cursor: MemoryCursor) -> None:
        self._waiting.pop(cursor, None)

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

    def trim_consumed_ledgers(self) -> int:
        if self._state is not _State.OPEN or self._config.infinite_retention:
            return 0
        config = self._config
        records = self._store.cursors.values()
        # Only durable cursors hold data. With none at all, everything but the current ledger
        # is up for deletion (subject to retention): Pulsar's behaviour for cursor-less topics.
        slowest = min((r.mark_delete for r in records), default=None)
        now = self._clock()
        total_size = self._map.total_size
        size_to_delete = 0
        doomed: list[int] = []
        for meta in self._map.closed():
            if slowest is not None and Position(meta.ledger_id, meta.entries - 1) > slowest:
                break  # not consumed by every durable cursor
            size_to_delete += meta.size
            closed_at = meta.closed_at if meta.closed_at is not None else meta.created_at
            # Pulsar: a ledger goes when it is older than the retention time OR keeping it would
            # keep more than the retention size; -1 disables that limit.
            expired = config.retention_time_s >= 0 and now - closed_at >= config.retention_time_s
            over_size = config.retention_size_bytes >= 0 and total_size - size_to_delete >= config.retention_size_bytes
            if not (expired or over_size):
                break
            doomed.append(meta.ledger_id)
        if not doomed:
            return 0
        for ledger_id in doomed:
            self._map.remove(ledger_id)
            del self._data[ledger_id]
        first = self._map.first_position
        # Like Pulsar's advanceCursorsIfNecessary: mark-deletes inside deleted ledgers move to
        # (first remaining ledger, -1), but never past the last confirmed entry.
        floor = self._floor()
        for record in records:
            record.raise_floor(floor)
        for cursor in (*self._cursors.values(), *self._non_durable):
            cursor._ledgers_trimmed(first, floor)
        return len(doomed)

    # -- lifecycle ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            raise LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")

    def _shut(self, state: _State) -> None:
        self._move_to(state)
        error = LedgerClosedError(f"managed ledger {self._name} is {state.value}")
        for cursor in list(self._waiting):
            cursor._fail_parked(error)
        for cursor in (*self._cursors.values(), *self._non_durable):
            cursor._close_handle()
        self._non_durable.clear()

    async def close(self) -> None:
        if self._state is not _State.OPEN:
            return
        self._shut(_State.CLOSED)
        self._factory._forget(self, delete_data=False)

    async def delete(self) -> None:
        # A closed handle cannot delete (a newer handle may own the data by now): reopen it,
        # or use factory.delete(name).
        if self._state is _State.DELETED:
            return
        self._check_open()
        self._shut(_State.DELETED)
        self._cursors.clear()
        self._store.cursors.clear()
        self._data.clear()
        self._factory._forget(self, delete_data=True)
