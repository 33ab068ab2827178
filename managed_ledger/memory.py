"""In-memory managed ledgers: entries live in Python lists, one list per ledger.

For tests, CI and "a real broker inside the test process". Data survives closing and
reopening a managed ledger within the same factory (the factory is the "disk"), so the
recovery paths of the service layer can be exercised without files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from managed_ledger.api import (
    AddCallback,
    EntryNotFoundError,
    InitialPosition,
    LedgerClosedError,
    LedgerNotFoundError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    NoMoreEntriesError,
    StoredCursorState,
    StoredManagedLedgerInfo,
)
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.entry import Entry
from managed_ledger.ledger_base import BaseManagedLedger, LedgerState, stored_rows
from managed_ledger.ledger_map import LedgerMap
from managed_ledger.memory_cursor import MemoryCursor
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

_OPEN = LedgerState.OPEN  # (per add: a module constant costs a tenth of the Enum member's look-up, ledger_base)

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
            created = name not in self._stored
            stored = self._stored.setdefault(name, _StoredLedger())
            ledger = self._open[name] = MemoryManagedLedger(self, name, stored, config or ManagedLedgerConfig())
            if created:
                self._names_changed(name)
        return ledger

    async def create(self, name: str) -> bool:
        if self._closed:
            raise ManagedLedgerError("managed-ledger factory is closed")
        if name in self._stored:
            return False
        self._stored[name] = _StoredLedger()  # (never opened: its first open starts its first ledger)
        self._names_changed(name)
        return True

    async def delete(self, name: str, config: ManagedLedgerConfig | None = None) -> None:
        ledger = self._open.get(name)
        if ledger is not None:
            await ledger.delete()
        elif self._stored.pop(name, None) is None:
            raise LedgerNotFoundError(f"no managed ledger named {name!r}")
        else:
            self._names_changed(name)

    async def close(self) -> None:
        for ledger in list(self._open.values()):
            await ledger.close()
        self._closed = True

    def list_names(self) -> list[str]:
        return sorted(self._stored)

    def exists(self, name: str) -> bool:
        return name in self._stored

    async def stored_info(self, name: str) -> StoredManagedLedgerInfo | None:
        """The kept ledgers and cursor records; memory keeps no versions or times (version -1, no dates)."""
        stored = self._stored.get(name)
        if stored is None:
            return None
        current = stored.ledgers.current_id if name in self._open and len(stored.ledgers) else None
        cursors = {cursor: StoredCursorState(-1, None, None, -1, record)
                   for cursor, record in sorted(stored.cursors.items())}
        return StoredManagedLedgerInfo(-1, None, None, stored_rows(stored.ledgers.infos(), current), cursors, {})

    def _new_ledger_id(self) -> int:
        self._last_ledger_id += 1
        return self._last_ledger_id

    def _forget(self, ledger: MemoryManagedLedger, *, delete_data: bool) -> None:
        if self._open.get(ledger.name) is ledger:
            del self._open[ledger.name]
        if delete_data and self._stored.pop(ledger.name, None) is not None:
            self._names_changed(ledger.name)
        ledger._ended.set()


@dataclass
class _StoredLedger:
    """What survives closing a managed ledger (the in-memory "disk")."""

    ledgers: LedgerMap = field(default_factory=LedgerMap)
    # Entry data per ledger id, by entry id. Bytes, not Entry tuples: the garbage collector
    # tracks tuple subclasses and would scan every stored entry on each full collection.
    data: dict[int, list[bytes]] = field(default_factory=dict)
    cursors: dict[str, CursorRecord] = field(default_factory=dict)
    last_confirmed: Position | None = None  # None: never opened


class MemoryManagedLedger(BaseManagedLedger):
    def __init__(
        self, factory: MemoryManagedLedgerFactory, name: str, stored: _StoredLedger, config: ManagedLedgerConfig
    ) -> None:
        super().__init__(name, config, stored.ledgers, factory.nesting, factory.clock)
        self._factory = factory
        self._store = stored
        self._data = stored.data
        self._open_new_ledger(recovering=stored.last_confirmed is not None)
        for cursor_name, record in stored.cursors.items():
            self._cursors[cursor_name] = MemoryCursor(self, cursor_name, record, durable=True)

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

    # -- hooks of the base ----------------------------------------------------------------------

    def _named_records(self) -> Iterable[tuple[str, CursorRecord]]:
        return self._store.cursors.items()

    def _make_cursor(self, name: str, record: CursorRecord, durable: bool) -> MemoryCursor:
        return MemoryCursor(self, name, record, durable)

    def _entry_size(self, position: Position) -> int:
        return len(self._entry(position).data)

    def _remove_ledgers(self, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            del self._data[ledger_id]

    # -- properties ---------------------------------------------------------------------------

    @property
    def last_confirmed_entry(self) -> Position:
        last = self._store.last_confirmed
        assert last is not None
        return last

    @property
    def is_fenced(self) -> bool:
        return False  # nothing in memory can fail a write

    # -- writing ------------------------------------------------------------------------------

    def add_entry(self, data: bytes, callback: AddCallback) -> None:
        if self._state is not _OPEN:
            error = LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")
            self._add_completer.complete(partial(callback, None, error))
            return
        if type(data) is not bytes:  # keep our own immutable copy of views / bytearrays
            data = bytes(data)
        self.add_stats.entry_size.add(len(data))
        self.add_stats.added(0, 0, 1)  # (stored at once)
        position = self._map.record_add(len(data))
        self._data[position.ledger_id].append(data)
        self._store.last_confirmed = position
        self._add_completer.complete(partial(callback, position, None))
        self._after_add()

    def add_entries(self, data: list[bytes], callback: AddCallback) -> None:
        if self._state is not _OPEN:
            error = LedgerClosedError(f"managed ledger {self._name} is {self._state.value}")
            self._add_completer.complete(partial(callback, None, error))
            return
        data = [d if type(d) is bytes else bytes(d) for d in data]
        sizes = [len(d) for d in data]
        self.add_stats.entry_size.add_each(sizes)
        self.add_stats.added(0, 0, len(data))  # (stored at once)
        first = self._map.record_adds(len(data), sum(sizes))
        self._data[first.ledger_id].extend(data)
        self._store.last_confirmed = Position(first.ledger_id, first.entry_id + len(data) - 1)
        self._add_completer.complete(partial(callback, first, None))
        self._after_add()

    def _after_add(self) -> None:
        if self._current_ledger_is_full():
            started = time.monotonic()
            self._open_new_ledger(recovering=False)
            self.add_stats.count_ledger_switch(started)
            self.trim_consumed_ledgers()
        self._wake_parked()

    # -- reading ------------------------------------------------------------------------------

    def _entry(self, position: Position) -> Entry:
        return Entry(position, self._data[position.ledger_id][position.entry_id])

    async def read_entry(self, position: Position) -> Entry:
        self._check_open()
        if position > self.last_confirmed_entry:
            raise NoMoreEntriesError(f"{position} is past the last confirmed entry {self.last_confirmed_entry}")
        if not self._map.is_entry(position):
            raise EntryNotFoundError(f"no entry at {position} in {self._name}")
        return self._entry(position)

    # -- cursors ------------------------------------------------------------------------------

    async def open_cursor(
        self,
        name: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: dict[str, int] | None = None,
        cursor_properties: Mapping[str, str] | None = None,
    ) -> MemoryCursor:
        self._check_open()
        cursor = self._cursors.get(name)
        if cursor is not None:
            assert isinstance(cursor, MemoryCursor)
            return cursor
        record = self._store.cursors.get(name)
        if record is None:
            mark_delete = self._initial_mark_delete(initial_position)
            record = self._store.cursors[name] = CursorRecord(mark_delete, PositionRangeSet(), dict(properties or {}),
                                                              cursor_properties=dict(cursor_properties or {}))
        cursor = self._cursors[name] = MemoryCursor(self, name, record, durable=True)
        return cursor

    async def delete_cursor(self, name: str) -> None:
        self._check_open()
        cursor = self._cursors.pop(name, None)
        record = self._store.cursors.pop(name, None)
        if cursor is None and record is None:
            self._close_non_durable(name)
            return
        if cursor is not None:
            cursor._close_handle()
        self.trim_consumed_ledgers()  # the deleted cursor may have been the slowest

    # -- lifecycle ----------------------------------------------------------------------------

    async def close(self) -> None:
        if self._state is not LedgerState.OPEN:
            return
        self._shut(LedgerState.CLOSED)
        self._factory._forget(self, delete_data=False)

    async def delete(self) -> None:
        # A closed handle cannot delete (a newer handle may own the data by now): reopen it,
        # or use factory.delete(name).
        if self._state is LedgerState.DELETED:
            return
        self._check_open()
        self._shut(LedgerState.DELETED)
        self._cursors.clear()
        self._store.cursors.clear()
        self._data.clear()
        self._factory._forget(self, delete_data=True)
