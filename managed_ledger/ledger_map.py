"""The ordered ledgers of one managed ledger and the position arithmetic over them.

Pure bookkeeping (ids, entry counts, sizes, timestamps); no entry data and no I/O, so every
storage implementation can share it. Invariants:

- there is always at least one ledger; the last one is the *current* ledger (the one written);
- closed ledgers only shrink away (trimming), the current one only grows;
- a "valid" position is a stored entry, or the position the next add will get.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass

from managed_ledger.api import LedgerInfo
from managed_ledger.position import Position

# Builds a Position without the NamedTuple's keyword-taking __new__ (per entry a cursor reads).
_new_tuple = tuple.__new__


@dataclass
class LedgerMeta:
    ledger_id: int
    created_at: float
    entries: int = 0
    size: int = 0
    closed_at: float | None = None

    @property
    def ended_at(self) -> float:
        """When it closed, else (still open, or its close time unknown) when it was created."""
        return self.closed_at if self.closed_at is not None else self.created_at

    def info(self) -> LedgerInfo:
        return LedgerInfo(self.ledger_id, self.entries, self.size, self.created_at, self.closed_at)


class LedgerMap:
    """Ledgers of one managed ledger, oldest first."""

    __slots__ = ("_ids", "_meta", "number_of_entries", "total_size")

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._meta: dict[int, LedgerMeta] = {}
        self.number_of_entries = 0
        self.total_size = 0

    # -- changes ------------------------------------------------------------------------------

    def open_ledger(self, ledger_id: int, now: float) -> None:
        """Make a new current ledger (the caller closes the previous one first)."""
        if self._ids and ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger ids must grow: {ledger_id} after {self._ids[-1]}")
        self._ids.append(ledger_id)
        self._meta[ledger_id] = LedgerMeta(ledger_id, now)

    def close_current(self, now: float) -> None:
        self.current.closed_at = now

    def record_add(self, size: int) -> Position:
        """Account one entry added to the current ledger; return its position."""
        meta = self.current
        position = Position(meta.ledger_id, meta.entries)
        meta.entries += 1
        meta.size += size
        self.number_of_entries += 1
        self.total_size += size
        return position

    def record_adds(self, count: int, size: int) -> Position:
        """Account ``count`` entries of ``size`` bytes in all; return the position of the first."""
        meta = self.current
        position = Position(meta.ledger_id, meta.entries)
        meta.entries += count
        meta.size += size
        self.number_of_entries += count
        self.total_size += size
        return position

    def add_stored_ledger(self, ledger_id: int, created_at: float, closed_at: float, entries: int, size: int) -> None:
        """Append a closed ledger found in storage (recovery), after the ones added so far."""
        if self._ids and ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger ids must grow: {ledger_id} after {self._ids[-1]}")
        self._ids.append(ledger_id)
        self._meta[ledger_id] = LedgerMeta(ledger_id, created_at, entries, size, closed_at)
        self.number_of_entries += entries
        self.total_size += size

    def cut(self, ledger_id: int, entries: int, size: int) -> None:
        """Shrink a ledger to its first ``entries`` entries of ``size`` bytes (failed adds)."""
        meta = self._meta[ledger_id]
        if entries > meta.entries:
            raise ValueError(f"cannot grow ledger {ledger_id} by cutting it")
        self.number_of_entries -= meta.entries - entries
        self.total_size -= meta.size - size
        meta.entries = entries
        meta.size = size

    def remove(self, ledger_id: int) -> LedgerMeta:
        """Forget a ledger (trimming). The current ledger cannot be removed."""
        if ledger_id == self._ids[-1]:
            raise ValueError("the current ledger cannot be removed")
        meta = self._meta.pop(ledger_id)
        self._ids.remove(ledger_id)
        self.number_of_entries -= meta.entries
        self.total_size -= meta.size
        return meta

    # -- lookups ------------------------------------------------------------------------------

    @property
    def current(self) -> LedgerMeta:
        return self._meta[self._ids[-1]]

    @property
    def current_id(self) -> int:
        return self._ids[-1]

    def get(self, ledger_id: int) -> LedgerMeta | None:
        return self._meta.get(ledger_id)

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[LedgerMeta]:
        """Ledgers oldest first, current last."""
        return (self._meta[i] for i in self._ids)

    def closed(self) -> Iterator[LedgerMeta]:
        """Closed ledgers, oldest first (snapshot: safe to remove while iterating)."""
        return (self._meta[i] for i in self._ids[:-1])

    def infos(self) -> list[LedgerInfo]:
        return [self._meta[i].info() for i in self._ids]

    def is_entry(self, position: Position) -> bool:
        meta = self._meta.get(position.ledger_id)
        return meta is not None and 0 <= position.entry_id < meta.entries

    # -- position arithmetic ------------------------------------------------------------------

    @property
    def next_add_position(self) -> Position:
        meta = self.current
        return Position(meta.ledger_id, meta.entries)

    @property
    def first_position(self) -> Position:
        """First stored entry, or the next add position when nothing is stored."""
        for lid in self._ids:
            if self._meta[lid].entries:
                return Position(lid, 0)
        return self.next_add_position

    def ceil(self, position: Position) -> Position:
        """The smallest valid position >= position (valid: stored, or the next add position)."""
        meta = self._meta.get(position.ledger_id)
        if meta is not None and 0 <= position.entry_id < meta.entries:
            return position  # stored: valid itself (a cursor's read position, mostly)
        nxt = self.next_add_position
        if position >= nxt:
            return nxt
        ids = self._ids
        i = bisect_left(ids, position.ledger_id)
        last = len(ids) - 1
        while i <= last:
            lid = ids[i]
            start = max(position.entry_id, 0) if lid == position.ledger_id else 0
            entries = self._meta[lid].entries
            if start < entries or i == last:
                return Position(lid, start)
            i += 1
        return nxt  # unreachable: the current ledger is last and position < nxt

    def next_valid(self, position: Position) -> Position:
        """The first valid position after position (crossing into the next ledger)."""
        meta = self._meta.get(position.ledger_id)
        nxt = position.entry_id + 1
        if meta is not None and 0 <= nxt < meta.entries:  # fast path: same ledger (per entry read)
            return _new_tuple(Position, (position.ledger_id, nxt))
        return self.ceil(Position(position.ledger_id, nxt))

    def previous(self, position: Position) -> Position:
        """(L, e-1) if e > 0; else the last entry of the previous non-empty ledger; else (L, -1)."""
        if position.entry_id > 0:
            return Position(position.ledger_id, position.entry_id - 1)
        ids = self._ids
        for i in range(bisect_left(ids, position.ledger_id) - 1, -1, -1):
            entries = self._meta[ids[i]].entries
            if entries:
                return Position(ids[i], entries - 1)
        return Position(position.ledger_id, -1)

    def count_between(self, first: Position, last: Position) -> int:
        """Stored entries p with first <= p <= last."""
        if last < first or not self.number_of_entries:
            return 0
        current = self.current
        if first <= Position(self._ids[0], 0) and last >= Position(current.ledger_id, current.entries - 1):
            return self.number_of_entries  # the whole log (the common backlog question)
        ids = self._ids
        total = 0
        i = bisect_left(ids, first.ledger_id)
        while i < len(ids) and ids[i] <= last.ledger_id:
            lid = ids[i]
            entries = self._meta[lid].entries
            lo = max(first.entry_id, 0) if lid == first.ledger_id else 0
            hi = min(last.entry_id, entries - 1) if lid == last.ledger_id else entries - 1
            if hi >= lo:
                total += hi - lo + 1
            i += 1
        return total

    def nth_after(self, start: Position, n: int) -> Position | None:
        """The n-th (0-based) stored entry at or after start, or None if there are fewer."""
        pos = self.ceil(start)
        ids = self._ids
        i = bisect_left(ids, pos.ledger_id)
        offset = pos.entry_id
        while i < len(ids):
            entries = self._meta[ids[i]].entries
            available = entries - offset
            if n < available:
                return Position(ids[i], offset + n)
            n -= max(available, 0)
            offset = 0
            i += 1
        return None
