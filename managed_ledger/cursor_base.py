"""The storage-agnostic part of a cursor: acknowledgement state, read position, backlog arithmetic.

Everything here touches the ledger only through its ``LedgerMap`` (position arithmetic) and a few
hooks, so the in-memory and file implementations share it. Subclasses supply ``_deliver`` (turn
a list of positions into entries and complete the read) and ``flush``; a durable cursor's state
changes are reported to the ledger with ``_cursor_state_changed`` so it can persist them.

Read position rule: a read moves ``read_position`` past the positions it takes when it is
*issued*, before any data is fetched. A dispatcher that seeks or rewinds while a read is in
flight therefore keeps its move: the in-flight read's completion does not touch the position.

A read that finds nothing to read waits (``read_entries_or_wait``). With the ledger's
``new_entries_check_delay_s`` (Pulsar's managedLedgerNewEntriesCheckDelayInMillis, off by default
here) it first looks again once that delay is over, and only then, if still nothing came, parks
to be woken by the next add. A reader at the tail of a busy topic so takes what was added during
the delay in one read, not one read (and one MESSAGE write) per add. A seek, rewind or reset
during the delay looks at once. Without the delay, the file ledger wakes its parked reads once per
loop turn, on the next one (``_wake_parked_soon``): what its writer confirmed meanwhile goes in one read.
"""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from managed_ledger.api import (
    CursorClosedError,
    InlineRead,
    InvalidPositionError,
    LedgerClosedError,
    ManagedCursor,
    ManagedLedgerError,
    ReadCallback,
)
from managed_ledger.completion import OrderedCompleter
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

if TYPE_CHECKING:
    from managed_ledger.ledger_base import BaseManagedLedger


@dataclass
class CursorRecord:
    """What a durable cursor stores: survives closing and reopening the managed ledger."""

    mark_delete: Position
    individually_deleted: PositionRangeSet = field(default_factory=PositionRangeSet)
    properties: dict[str, int] = field(default_factory=dict)
    # Partly acknowledged batch entries (Pulsar's batch-index acks): position -> ack_set words,
    # a bit set for each message of the batch still unacknowledged. Only unacked positions.
    batch_acks: dict[Position, list[int]] = field(default_factory=dict)
    # Wall-clock time (epoch seconds) of the cursor's last activity as of its last save; None for a
    # cursor saved before this was kept. Lets inactivity (subscription expiry) span restarts.
    last_active: float | None = None
    # Pulsar's cursorProperties (a subscription's properties): strings, set when the subscription is created or
    # over REST, kept apart from the long ``properties`` of the mark-delete.
    cursor_properties: dict[str, str] = field(default_factory=dict)

    def raise_floor(self, floor: Position) -> bool:
        """Move the mark-delete up to floor (its ledgers were trimmed under it); True if moved."""
        if self.mark_delete < floor:
            self.mark_delete = floor
            self.individually_deleted.remove_up_to(floor)
            self.drop_batch_acks_up_to(floor)
            return True
        return False

    def drop_batch_acks_up_to(self, position: Position) -> None:
        if self.batch_acks:
            for p in [p for p in self.batch_acks if p <= position]:
                del self.batch_acks[p]


class _ParkedRead(NamedTuple):
    max_entries: int
    max_bytes: int | None
    callback: ReadCallback


_NOWHERE = Position(-1, -1)  # before every position
_new_tuple = tuple.__new__  # a Position without the NamedTuple's keyword-taking __new__ (per entry read)


class BaseCursor(ManagedCursor):
    # The last entry a read of this cursor read ahead into the read cache (stored ledgers): kept
    # there while the cursor reads up to it, even if it is inactive (stored.py's eviction).
    read_ahead_until: Position = _NOWHERE
    def __init__(self, ledger: BaseManagedLedger, name: str, record: CursorRecord, durable: bool) -> None:
        self._ledger = ledger
        self._name = name
        self._record = record
        self._durable = durable
        self._closed = False
        self._parked: _ParkedRead | None = None
        # A parked read still in its new-entries check delay: the timer that looks again.
        self._check_timer: asyncio.TimerHandle | None = None
        # One ordering domain per cursor: its read completions never overtake each other.
        self._completer = OrderedCompleter(ledger._nesting, ledger.config.read_nesting_limit)
        self._read_position = ledger._map.next_valid(record.mark_delete)
        now = ledger._clock()
        # A reopened cursor has been inactive since its saved last activity (none: since now).
        idle = max(0.0, _wall() - record.last_active) if record.last_active is not None else 0.0
        self._last_active = now - idle
        self._active = True

    # -- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def ledger(self) -> BaseManagedLedger:
        return self._ledger

    @property
    def is_durable(self) -> bool:
        return self._durable

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def mark_delete_position(self) -> Position:
        return self._record.mark_delete

    @property
    def read_position(self) -> Position:
        return self._read_position

    @property
    def individually_deleted(self) -> PositionRangeSet:
        return self._record.individually_deleted

    @property
    def batch_acks(self) -> Mapping[Position, list[int]]:
        return self._record.batch_acks

    @property
    def properties(self) -> Mapping[str, int]:
        return self._record.properties

    @property
    def last_active(self) -> float:
        return self._last_active

    @property
    def is_active(self) -> bool:
        return self._active

    def set_active(self, active: bool) -> None:
        if active != self._active:
            self._active = active
            self._ledger._cursor_activity_changed(self)

    def __repr__(self) -> str:
        kind = "durable" if self._durable else "non-durable"
        return (
            f"<{type(self).__name__} {self._ledger.name}/{self._name} {kind} md={self._record.mark_delete} "
            f"read={self._read_position} deleted={self._record.individually_deleted.to_pulsar_string()}>"
        )

    # -- reading ------------------------------------------------------------------------------

    @abstractmethod
    def _deliver(self, positions: list[Position], callback: ReadCallback, read_from: Position | None) -> None:
        """Fetch the entries at positions (all stored, ascending) and complete callback through
        this cursor's completer. ``read_from`` is the read position before a read_entries moved
        it (None for replays): if the fetch fails, the read position goes back there, unless
        something moved it in the meantime."""

    def read_entries(self, max_entries: int, callback: ReadCallback, max_bytes: int | None = None) -> None:
        _check_read_args(max_entries, max_bytes)
        error = self._unusable()
        if error is not None:
            self._completer.complete(partial(callback, [], error))
            return
        start = self._read_position
        self._deliver(self._collect(max_entries, max_bytes), callback, start)

    def _read_inline(self, positions: list[Position], inline: InlineRead) -> bool:
        """Complete a read of ``positions`` (stored, ascending) with ``inline(entries)`` at once, when
        all of them are in memory and the completer would run it inline now; False when not (nothing
        was done: the caller delivers them through ``_deliver``)."""
        return False

    def read_entries_or_wait(
        self, max_entries: int, callback: ReadCallback, max_bytes: int | None = None,
        inline: InlineRead | None = None,
    ) -> None:
        _check_read_args(max_entries, max_bytes)
        if self._parked is not None:
            raise ManagedLedgerError(f"cursor {self._name} already has a parked read")
        error = self._unusable()
        if error is not None:
            self._completer.complete(partial(callback, [], error))
            return
        start = self._read_position
        positions = self._collect(max_entries, max_bytes)
        if positions:
            if inline is None or not self._read_inline(positions, inline):
                self._deliver(positions, callback, start)
            return
        self._parked = _ParkedRead(max_entries, max_bytes, callback)
        delay = self._ledger.config.new_entries_check_delay_s
        if delay > 0:
            self._check_timer = asyncio.get_running_loop().call_later(delay, self._check_new_entries)
        else:
            self._ledger._park(self)

    def _check_new_entries(self) -> None:
        """The new-entries check delay is over: read what came meanwhile, else wait for an add."""
        self._check_timer = None
        parked = self._parked
        if parked is None:
            return
        error = self._unusable()
        if error is not None:
            self._parked = None
            self._completer.complete(partial(parked.callback, [], error))
            return
        start = self._read_position
        positions = self._collect(parked.max_entries, parked.max_bytes)
        if positions:
            self._parked = None
            self._deliver(positions, parked.callback, start)
        else:
            self._ledger._park(self)

    def _drop_parked(self) -> None:
        self._parked = None
        if self._check_timer is not None:
            self._check_timer.cancel()
            self._check_timer = None
        self._ledger._unpark(self)

    def cancel_pending_read(self) -> bool:
        if self._parked is None:
            return False
        self._drop_parked()
        return True

    @property
    def has_pending_read(self) -> bool:
        return self._parked is not None

    def replay_entries(self, positions: Iterable[Position], callback: ReadCallback) -> None:
        error = self._unusable()
        if error is not None:
            self._completer.complete(partial(callback, [], error))
            return
        ledger_map = self._ledger._map
        last = self._ledger.last_confirmed_entry
        wanted = [
            p for p in sorted(set(positions)) if p <= last and ledger_map.is_entry(p) and not self.is_acked(p)
        ]
        self._touch()
        self._deliver(wanted, callback, None)

    def _collect(self, max_entries: int, max_bytes: int | None) -> list[Position]:
        """Take positions from read_position on (skipping acked ones) and advance past them."""
        ledger = self._ledger
        ledger_map = ledger._map
        entry_size = ledger._entry_size
        last = ledger.last_confirmed_entry
        deleted = self._record.individually_deleted
        skip_deleted = not deleted.is_empty()
        pos = ledger_map.ceil(self._read_position)
        out: list[Position] = []
        size = 0
        if not skip_deleted and pos <= last:
            # The common case at once: the entries of pos's ledger from pos on, within the bounds.
            ledger_id, first = pos
            meta = ledger_map.get(ledger_id)
            assert meta is not None
            count = min(max_entries, (last[1] + 1 if ledger_id == last[0] else meta.entries) - first)
            fits = count
            if max_bytes is not None:
                fits, size = ledger._run_within(ledger_id, first, count, max_bytes)
            out = [_new_tuple(Position, (ledger_id, e)) for e in range(first, first + fits)]
            pos = ledger_map.next_valid(out[-1])
            if fits < count:
                max_entries = 0  # the bytes are used up: the loop below adds nothing
        while len(out) < max_entries and pos <= last:
            if skip_deleted:
                acked = deleted.range_containing(pos)
                if acked is not None:
                    pos = ledger_map.next_valid(acked[1])
                    continue
            if max_bytes is not None:
                n = entry_size(pos)
                if out and size + n > max_bytes:
                    break
                size += n
            out.append(pos)
            pos = ledger_map.next_valid(pos)
        self._read_position = pos
        self._touch()
        return out

    def _read_failed(self, read_from: Position | None, read_to: Position) -> None:
        """A fetch failed: give its positions back if nothing moved the cursor since."""
        if read_from is not None and self._read_position == read_to and read_from < read_to:
            self._read_position = max(read_from, self._ledger._map.next_valid(self._record.mark_delete))

    def _entries_available(self) -> None:
        """New entries, or the read position moved back: complete the parked read if possible."""
        parked = self._parked
        if parked is None:
            return
        start = self._read_position
        positions = self._collect(parked.max_entries, parked.max_bytes)
        if not positions:
            return
        self._drop_parked()
        self._deliver(positions, parked.callback, start)

    def _fail_parked(self, error: BaseException) -> None:
        parked = self._parked
        if parked is None:
            return
        self._drop_parked()
        self._completer.complete(partial(parked.callback, [], error))

    # -- acknowledging ------------------------------------------------------------------------

    def mark_delete(self, position: Position, properties: Mapping[str, int] | None = None) -> None:
        self._check_usable()
        if position > self._ledger.last_confirmed_entry:
            raise InvalidPositionError(
                f"mark-delete {position} is past the last confirmed entry {self._ledger.last_confirmed_entry}"
            )
        if position <= self._record.mark_delete:
            return
        if properties is not None:
            self._record.properties = dict(properties)
        self._move_mark_delete(position)

    def delete(self, positions: Iterable[Position]) -> None:
        self._check_usable()
        record = self._record
        ledger_map = self._ledger._map
        last = self._ledger.last_confirmed_entry
        mark_delete = record.mark_delete
        deleted = record.individually_deleted
        batch_acks = record.batch_acks
        added = 0
        # Runs of consecutive entry ids go into the set as one range (an ACK's ids come sorted:
        # the client groups them), not one insert each; a run's ledger is looked up once.
        run_ledger = run_first = run_last = -1
        run_end = 0  # entries in run_ledger
        for p in positions:
            if not mark_delete < p <= last:
                continue
            ledger_id, entry_id = p
            if ledger_id == run_ledger and entry_id == run_last + 1 and entry_id < run_end:
                run_last = entry_id
            else:
                meta = ledger_map.get(ledger_id)
                if meta is None or not 0 <= entry_id < meta.entries:
                    continue  # not an entry
                if run_ledger >= 0:
                    added += deleted.add_range(run_ledger, run_first, run_last)
                run_ledger, run_first, run_last, run_end = ledger_id, entry_id, entry_id, meta.entries
            if batch_acks:
                batch_acks.pop(p, None)
        if run_ledger >= 0:
            added += deleted.add_range(run_ledger, run_first, run_last)
        if not added:
            return
        self._touch()
        first = deleted.first_range()
        if first is not None and first[0] == ledger_map.next_valid(mark_delete):
            self._move_mark_delete(first[1])
        else:
            self._state_changed()

    def _move_mark_delete(self, position: Position) -> None:
        """Set mark-delete (forward), absorb individually deleted positions that became
        contiguous with it (possibly across ledgers), keep read_position after it."""
        record = self._record
        ledger_map = self._ledger._map
        deleted = record.individually_deleted
        deleted.remove_up_to(position)
        while (first := deleted.first_range()) is not None and first[0] == ledger_map.next_valid(position):
            position = first[1]
            deleted.remove_up_to(position)
        record.mark_delete = position
        record.drop_batch_acks_up_to(position)
        if self._read_position <= position:
            self._read_position = ledger_map.next_valid(position)
        self._touch()
        self._state_changed()
        if self._durable:
            self._ledger._mark_delete_moved(position)

    def is_acked(self, position: Position) -> bool:
        return position <= self._record.mark_delete or position in self._record.individually_deleted

    def set_batch_ack(self, position: Position, ack_set: list[int]) -> None:
        self._check_usable()
        if self.is_acked(position) or position > self._ledger.last_confirmed_entry:
            return
        self._record.batch_acks[position] = list(ack_set)
        self._touch()
        self._state_changed()

    def skip_entries(self, n: int) -> None:
        if n < 0:
            raise ValueError("n must be >= 0")
        self._check_usable()
        if n == 0:
            return
        target = self._nth_unacked(n)
        if target > self._record.mark_delete:
            self._move_mark_delete(target)

    def _nth_unacked(self, n: int) -> Position:
        """The n-th (1-based) unacknowledged entry after mark-delete, or the last entry."""
        ledger_map = self._ledger._map
        last = self._ledger.last_confirmed_entry
        deleted = self._record.individually_deleted
        pos = ledger_map.next_valid(self._record.mark_delete)
        while pos <= last:
            ledger_id = pos.ledger_id
            meta = ledger_map.get(ledger_id)
            assert meta is not None
            entry_id = pos.entry_id
            # Walk the gaps between acked ranges of this ledger; the sentinel closes the ledger.
            for first, last_acked in [*deleted.ranges_in_ledger(ledger_id), (meta.entries, meta.entries)]:
                if last_acked < entry_id:
                    continue
                gap = first - entry_id
                if gap > 0:
                    if n <= gap:
                        return min(Position(ledger_id, entry_id + n - 1), last)
                    n -= gap
                entry_id = max(entry_id, last_acked + 1)
            pos = ledger_map.next_valid(Position(ledger_id, meta.entries - 1))
        return last

    def _state_changed(self) -> None:
        if self._durable:
            self._ledger._cursor_state_changed(self._name)

    # -- moving -------------------------------------------------------------------------------

    def seek(self, position: Position) -> None:
        self._check_usable()
        ledger_map = self._ledger._map
        self._read_position = max(ledger_map.ceil(position), ledger_map.next_valid(self._record.mark_delete))
        self._touch()
        self._entries_available()

    def rewind(self) -> None:
        self._check_usable()
        self._read_position = self._ledger._map.next_valid(self._record.mark_delete)
        self._touch()
        self._entries_available()

    def reset(self, position: Position, ack_set: list[int] | None = None) -> None:
        self._check_usable()
        ledger_map = self._ledger._map
        asked = position
        position = ledger_map.ceil(position)  # clamps into [first position, next add position]
        last = self._ledger.last_confirmed_entry
        # Entries added but not yet confirmed are not readable: reset no further than after the
        # last confirmed one (the same as the next add position when every add is confirmed).
        position = min(position, ledger_map.next_valid(last))
        record = self._record
        record.individually_deleted.clear()
        record.batch_acks.clear()
        if ack_set is not None and position == asked and position <= last:
            record.batch_acks[position] = list(ack_set)
        # Never past the last confirmed entry (reset to the end of a fully trimmed log).
        record.mark_delete = min(ledger_map.previous(position), last)
        self._read_position = position
        self._touch()
        self._state_changed()
        self.save_now()
        self._entries_available()

    def _ledgers_trimmed(self, first: Position, floor: Position) -> None:
        """Ledgers before ``first`` are gone: nothing may point into them any more."""
        if self._record.raise_floor(floor):
            self._state_changed()
        if self._read_position < first:
            self._read_position = first

    # -- counting -----------------------------------------------------------------------------

    def number_of_entries_in_backlog(self) -> int:
        ledger_map = self._ledger._map
        record = self._record
        after = ledger_map.next_valid(record.mark_delete)
        total = ledger_map.count_between(after, self._ledger.last_confirmed_entry)
        return total - len(record.individually_deleted)

    def number_of_entries_to_read(self) -> int:
        ledger_map = self._ledger._map
        last = self._ledger.last_confirmed_entry
        start = ledger_map.ceil(self._read_position)
        return ledger_map.count_between(start, last) - self._record.individually_deleted.count_between(
            start, last
        )

    def has_more_entries(self) -> bool:
        return self.number_of_entries_to_read() > 0

    # -- lifecycle ----------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._close_handle()
        self._ledger._cursor_closed(self)

    def _close_handle(self) -> None:
        """Closed by us, by delete_cursor or by the ledger closing: drop any parked read."""
        self._closed = True
        if self._parked is not None:
            self._drop_parked()

    def _unusable(self) -> ManagedLedgerError | None:
        if self._ledger.is_closed:
            return LedgerClosedError(f"managed ledger {self._ledger.name} is closed")
        if self._closed:
            return CursorClosedError(f"cursor {self._name} is closed")
        return None

    def _check_usable(self) -> None:
        error = self._unusable()
        if error is not None:
            raise error

    def _touch(self) -> None:
        self._last_active = self._ledger._clock()
        self._record.last_active = _wall()  # saved with the state's next write

    def set_properties(self, properties: Mapping[str, int]) -> None:
        self._check_usable()
        self._record.properties = dict(properties)
        self._state_changed()

    @property
    def cursor_properties(self) -> Mapping[str, str]:
        return self._record.cursor_properties

    async def set_cursor_properties(self, properties: Mapping[str, str]) -> None:
        self._check_usable()
        self._record.cursor_properties = dict(properties)
        self._state_changed()
        await self.flush()

    def save_now(self) -> None:
        """Nothing here: the memory ledger's cursor states are not written anywhere (stored cursors override)."""

    def touch(self) -> None:
        """Activity that changes nothing else (a consumer came or went): saved all the same,
        unless the recorded activity is under TOUCH_SAVE_INTERVAL_S old (a consumer attaching
        to a subscription just created, or reconnecting at once): then only in memory, and on
        disk with the state's next write (at the latest the close's). Inactivity is counted in
        minutes (subscription expiry), so the saved value is never stale by more than that."""
        previous = self._record.last_active
        self._touch()
        now = self._record.last_active
        if previous is None or now is None or now - previous >= TOUCH_SAVE_INTERVAL_S:
            self._state_changed()


# A touch this soon after the recorded activity is not written on its own (see touch()).
TOUCH_SAVE_INTERVAL_S = 1.0


def _wall() -> float:
    """Wall-clock seconds: what a saved cursor's last activity is kept in (tests move it)."""
    return time.time()


def _check_read_args(max_entries: int, max_bytes: int | None) -> None:
    if max_entries < 1:
        raise ValueError("max_entries must be >= 1")
    if max_bytes is not None and max_bytes < 1:
        raise ValueError("max_bytes must be >= 1")
