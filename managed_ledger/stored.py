"""What the stored ledgers (file, BookKeeper) share above ``BaseManagedLedger``.

Both read through an entry reader over the factory's read cache and drop, soon after each read,
the cached entries every active cursor has passed; both persist durable cursor states through
``CursorPersistence``. The memory ledger has neither (its entries are its storage).
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Protocol

from managed_ledger.api import EntryNotFoundError, InlineRead, ManagedLedgerError, NoMoreEntriesError, ReadCallback
from managed_ledger.completion import OrderedCompleter
from managed_ledger.cursor_base import BaseCursor, CursorRecord
from managed_ledger.cursor_persistence import CursorPersistence
from managed_ledger.entry import Entry
from managed_ledger.ledger_base import BaseManagedLedger, LedgerState
from managed_ledger.position import Position

log = logging.getLogger(__name__)

# How long after a read the cached entries every active cursor has passed are dropped (batched;
# Pulsar's managedLedgerCacheEvictionIntervalMs is 10 ms).
CACHE_EVICTION_INTERVAL_S = 0.01
_EVERYTHING = Position(2**63 - 1, 0)  # after every position: evict_before it drops all


class StoredReader(Protocol):
    """A stored ledger's reads: from the cache, else from storage (posted back to the loop)."""

    def fetch(self, positions: list[Position], completer: OrderedCompleter, callback: ReadCallback,
              on_fail: Callable[[], None] | None) -> bool:
        """Start the read; True when some of the entries were not in the cache."""

    def cached(self, positions: list[Position]) -> list[Entry] | None:
        """The entries at positions when all of them are in the cache (counted as hits), else None
        (nothing counted)."""

    def evict_before(self, position: Position) -> None: ...

    @property
    def last_read_ahead(self) -> Position | None:
        """The last position the latest ``fetch`` read ahead into the cache (None: it read none)."""

    async def read(self, position: Position) -> Entry: ...


class StoredManagedLedger(BaseManagedLedger):
    __slots__ = ()
    _reader: StoredReader
    _last_confirmed: Position
    _loop: asyncio.AbstractEventLoop
    _persistence: CursorPersistence
    _stored: dict[str, CursorRecord]  # durable cursors' state, open handle or not
    _eviction_pending: bool  # a cache eviction is scheduled (see _fetch)

    def _fetch(self, positions: list[Position], completer: OrderedCompleter, callback: ReadCallback,
               on_fail: Callable[[], None] | None) -> Position | None:
        """Start a read; the last position it reads ahead into the cache, if any."""
        missed = self._reader.fetch(positions, completer, callback, on_fail)
        self.add_stats.count_read(len(positions), missed)
        # The cursor has moved past these positions (reads move it when issued): soon, drop the
        # cached entries every active cursor is past, after this read took its cache hits.
        self._schedule_eviction()
        return self._reader.last_read_ahead

    def _cached(self, positions: list[Position]) -> list[Entry] | None:
        """``_fetch``'s read when every entry is in the cache: the entries, counted as it counts them
        (it would read nothing ahead); None, and nothing counted, when some are not."""
        entries = self._reader.cached(positions)
        if entries is not None:
            self.add_stats.count_read(len(positions), False)
            self._schedule_eviction()
        return entries

    def _cursor_activity_changed(self, cursor: BaseCursor) -> None:
        if not cursor.is_active:
            self._schedule_eviction()  # it may have been the slowest reader

    def _schedule_eviction(self) -> None:
        if not self._eviction_pending:
            self._eviction_pending = True
            self._loop.call_later(CACHE_EVICTION_INTERVAL_S, self._evict_read_entries)

    def _evict_read_entries(self) -> None:
        """Drop cached entries before the slowest active cursor's read position (all of them
        when no cursor is active). Inactive cursors (a subscription without consumers) read from
        storage when they come back, as in Pulsar; a backlogged one (inactive, but read) keeps
        what its last read read ahead until it has read it: dropped at once, each of its reads
        went to the disk again for a whole read-ahead and used a few entries of it."""
        self._eviction_pending = False
        if self._state is not LedgerState.OPEN:
            return
        slowest = _EVERYTHING
        for cursor in (*self._cursors.values(), *self._non_durable):
            position = cursor.read_position
            if position < slowest and (cursor.is_active or position <= cursor.read_ahead_until):
                slowest = position
        self._reader.evict_before(slowest)

    async def delete_cursor(self, name: str) -> None:
        """The stored state goes first: if removing it fails, the cursor is still here (its changes
        are written again) and a retry can delete it; dropped first, a failed removal left a file
        that brought the subscription back at the next start, and a retry found nothing to delete."""
        self._check_open()
        cursor = self._cursors.get(name)
        record = self._stored.get(name)
        if cursor is None and record is None:
            self._close_non_durable(name)
            return
        self._persistence.forget(name)  # no write of it starts any more (one in flight is ordered before the removal)
        try:
            await self._remove_cursor_state(name)
        except BaseException:
            if record is not None and self._stored.get(name) is record:
                self._persistence.track(name, dirty=True)
            raise
        if self._stored.get(name) is record:
            self._stored.pop(name, None)
        handle = self._cursors.get(name)
        if handle is not None and (handle is cursor or handle._record is record):  # (or opened meanwhile)
            del self._cursors[name]
            handle._close_handle()
        self.cursor_stats.pop(name, None)
        self.trim_consumed_ledgers()  # the deleted cursor may have been the slowest

    @abstractmethod
    async def _remove_cursor_state(self, name: str) -> None:
        """Remove a deleted durable cursor's stored state (its file, or its ledger and znode)."""

    async def read_entry(self, position: Position) -> Entry:
        self._check_open()
        if position > self._last_confirmed:
            raise NoMoreEntriesError(f"{position} is past the last confirmed entry {self._last_confirmed}")
        if not self._map.is_entry(position):
            raise EntryNotFoundError(f"no entry at {position} in {self._name}")
        return await self._reader.read(position)


class StoredCursor(BaseCursor):
    """A cursor of a stored ledger: reads through the ledger's reader, state through its persistence."""

    _ledger: StoredManagedLedger

    def _deliver(self, positions: list[Position], callback: ReadCallback, read_from: Position | None) -> None:
        on_fail = None if read_from is None else partial(self._read_failed, read_from, self._read_position)
        ahead = self._ledger._fetch(positions, self._completer, callback, on_fail)
        if ahead is not None:
            self.read_ahead_until = ahead

    def _read_inline(self, positions: list[Position], inline: InlineRead) -> bool:
        completer = self._completer
        if not completer.inline_allowed():
            return False
        entries = self._ledger._cached(positions)
        if entries is None:
            return False
        completer.run_inline(inline, entries)
        return True

    async def flush(self) -> None:
        self._check_usable()
        if self._durable:
            await self._ledger._persistence.flush(self._name)

    def save_now(self) -> None:
        if self._durable and not self._closed:
            self._ledger._persistence.write_now(self._name)

    async def close(self) -> None:
        if self._closed:
            return
        await super().close()
        if self._durable and not self._ledger.is_closed:
            try:
                await self._ledger._persistence.flush(self._name)
            except ManagedLedgerError as exc:
                log.warning("cursor %s/%s: state not saved on close: %s", self._ledger.name, self._name, exc)
