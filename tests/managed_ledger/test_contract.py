"""The managed-ledger contract: every implementation (see ml_support.IMPLEMENTATIONS) passes it.

Tests only use the public interface. They never assume concrete ledger ids: a ledger id is
taken from ``current_ledger_id`` / ``ledgers_info`` at the moment it matters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import pytest

from managed_ledger import (
    AddCallback,
    CursorClosedError,
    CursorNotFoundError,
    Entry,
    EntryNotFoundError,
    InitialPosition,
    InvalidPositionError,
    LedgerClosedError,
    LedgerNotFoundError,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    ManagedLedgerFactory,
    NoMoreEntriesError,
    Position,
    cursor_base,
)
from managed_ledger.ledger_base import BaseManagedLedger
from managed_ledger.stored import StoredManagedLedger
from tests.managed_ledger.ml_support import FakeClock
from tests.waiting import eventually

TIMEOUT = 5.0  # seconds to wait for an awaited event; never a fixed sleep

# Small ledgers that roll over at once (min rollover time 0 disables Pulsar's minimum age).
SMALL = ManagedLedgerConfig(max_entries_per_ledger=3, min_ledger_rollover_time_s=0)
# Same, but keeping consumed ledgers forever: shape tests should not see trimming.
SMALL_KEEP = ManagedLedgerConfig(
    max_entries_per_ledger=3, min_ledger_rollover_time_s=0, retention_time_s=-1, retention_size_bytes=-1
)


async def add_all(ml: ManagedLedger, count: int, prefix: str = "m") -> list[Position]:
    return [await ml.add_entry_async(f"{prefix}{i}".encode()) for i in range(count)]


def datas(entries: list[Entry]) -> list[bytes]:
    return [e.data for e in entries]


def positions(entries: list[Entry]) -> list[Position]:
    return [e.position for e in entries]


class ReadRecorder:
    """A ReadCallback that records calls and lets the test await the next one."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Entry], BaseException | None]] = []
        self._event = asyncio.Event()

    def __call__(self, entries: list[Entry], exc: BaseException | None) -> None:
        self.calls.append((entries, exc))
        self._event.set()

    async def wait(self, count: int = 1) -> None:
        while len(self.calls) < count:
            self._event.clear()
            await asyncio.wait_for(self._event.wait(), TIMEOUT)


async def settle() -> None:
    """Let posted completions run (a few loop iterations, not a timed sleep)."""
    for _ in range(5):
        await asyncio.sleep(0)


# -- adding -----------------------------------------------------------------------------------


async def test_empty_ledger_shape(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    current = ml.current_ledger_id
    assert ml.last_confirmed_entry == Position(current, -1)
    assert ml.first_position == Position(current, 0)
    assert ml.next_valid_position(ml.last_confirmed_entry) == Position(current, 0)
    assert ml.number_of_entries == 0 and ml.total_size == 0
    assert [i.ledger_id for i in ml.ledgers_info()] == [current]
    assert factory.list_names() == ["t"]


async def test_add_positions_and_callbacks_in_call_order(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    done: list[tuple[int, Position | None, BaseException | None]] = []
    all_done = asyncio.Event()

    def callback_for(i: int) -> AddCallback:
        def callback(position: Position | None, exc: BaseException | None) -> None:
            done.append((i, position, exc))
            if len(done) == 50:
                all_done.set()

        return callback

    for i in range(50):
        ml.add_entry(f"payload-{i}".encode(), callback_for(i))
    await asyncio.wait_for(all_done.wait(), TIMEOUT)

    assert [i for i, _, _ in done] == list(range(50))
    assert all(exc is None for _, _, exc in done)
    ledger = ml.current_ledger_id
    assert [p for _, p, _ in done] == [Position(ledger, i) for i in range(50)]
    assert ml.last_confirmed_entry == Position(ledger, 49)
    assert ml.number_of_entries == 50
    assert ml.total_size == sum(len(f"payload-{i}") for i in range(50))
    assert (await ml.read_entry(Position(ledger, 7))).data == b"payload-7"


async def test_add_entries_one_completion_consecutive_positions_in_order(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)  # 3 entries per ledger: a batch may overfill one
    got: list[tuple[str, Position | None, BaseException | None]] = []
    all_done = asyncio.Event()

    def record(tag: str) -> AddCallback:
        def callback(position: Position | None, exc: BaseException | None) -> None:
            got.append((tag, position, exc))
            if len(got) == 4:
                all_done.set()
        return callback

    ml.add_entry(b"a", record("single-a"))
    ml.add_entries([b"b1", b"b2", b"b3", b"b4"], record("batch-b"))
    ml.add_entries([bytearray(b"c1")], record("batch-c"))  # type: ignore[list-item]  # copied
    ml.add_entry(b"d", record("single-d"))
    await asyncio.wait_for(all_done.wait(), TIMEOUT)
    assert [t for t, _, _ in got] == ["single-a", "batch-b", "batch-c", "single-d"]
    assert all(e is None for _, _, e in got)
    a, b, c, d = (p for _, p, _ in got)
    assert a is not None and b is not None and c is not None and d is not None
    # the batch went whole into the ledger of "a" (entries 1-4), then the ledger rolled over
    assert b == Position(a.ledger_id, a.entry_id + 1)
    assert c.ledger_id > a.ledger_id and c.entry_id == 0
    assert d == Position(c.ledger_id, 1)
    assert ml.number_of_entries == 7
    assert ml.total_size == 1 + 4 * 2 + 2 + 1
    stored = [(await ml.read_entry(Position(b.ledger_id, b.entry_id + i))).data for i in range(4)]
    assert stored == [b"b1", b"b2", b"b3", b"b4"]
    assert (await ml.read_entry(c)).data == b"c1"
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    assert [e.data for e in await cursor.read_entries_async(10)] == [b"a", b"b1", b"b2", b"b3", b"b4", b"c1", b"d"]
    await ml.close()
    failed: list[tuple[Position | None, BaseException | None]] = []
    answered = asyncio.Event()

    def answer(p: Position | None, e: BaseException | None) -> None:
        failed.append((p, e))
        answered.set()

    ml.add_entries([b"late"], answer)
    await asyncio.wait_for(answered.wait(), TIMEOUT)
    assert len(failed) == 1 and failed[0][0] is None and isinstance(failed[0][1], LedgerClosedError)


async def test_data_is_stored_verbatim(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    raw = bytes(range(256)) * 4
    buf = bytearray(raw)
    p1 = await ml.add_entry_async(raw)
    p2 = await ml.add_entry_async(buf)  # type: ignore[arg-type]  # views/bytearrays are copied
    buf[0] = 99
    assert (await ml.read_entry(p1)).data == raw
    entry = await ml.read_entry(p2)
    assert entry.data == raw and isinstance(entry.data, bytes)
    assert entry.position == p2


async def test_read_entry_errors(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    [p] = await add_all(ml, 1)
    with pytest.raises(NoMoreEntriesError):
        await ml.read_entry(Position(p.ledger_id, 1))
    with pytest.raises(EntryNotFoundError):
        await ml.read_entry(Position(p.ledger_id - 1, 0))


# -- rollover and position arithmetic ---------------------------------------------------------


async def test_rollover_by_entry_count_and_positions_across_ledgers(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    ps = await add_all(ml, 8)
    infos = ml.ledgers_info()
    assert [i.entries for i in infos] == [3, 3, 2]
    l1, l2, l3 = (i.ledger_id for i in infos)
    assert l1 < l2 < l3 == ml.current_ledger_id
    assert ps == [Position(l1, 0), Position(l1, 1), Position(l1, 2), Position(l2, 0), Position(l2, 1),
                  Position(l2, 2), Position(l3, 0), Position(l3, 1)]
    assert infos[0].closed_at is not None and infos[2].closed_at is None
    assert sum(i.size for i in infos) == ml.total_size

    # next / previous across the ledger boundaries
    assert ml.next_valid_position(Position(l1, 2)) == Position(l2, 0)
    assert ml.next_valid_position(Position(l1, 1)) == Position(l1, 2)
    assert ml.previous_position(Position(l2, 0)) == Position(l1, 2)
    assert ml.previous_position(Position(l3, 0)) == Position(l2, 2)
    assert ml.previous_position(Position(l1, 0)) == Position(l1, -1)
    assert ml.next_valid_position(Position(l1, -1)) == Position(l1, 0)
    # next of the last confirmed entry: where the next add goes
    assert ml.last_confirmed_entry == Position(l3, 1)
    assert ml.next_valid_position(ml.last_confirmed_entry) == Position(l3, 2)
    assert await ml.add_entry_async(b"x") == Position(l3, 2)
    # l3 is now full: a new (empty) current ledger; the last entry's next is in it
    assert len(ml.ledgers_info()) == 4
    l4 = ml.current_ledger_id
    assert ml.next_valid_position(Position(l3, 2)) == Position(l4, 0)
    assert ml.previous_position(Position(l4, 0)) == Position(l3, 2)
    assert ml.last_confirmed_entry == Position(l3, 2)
    # positions before the first entry give the first entry
    assert ml.next_valid_position(Position(-1, -1)) == Position(l1, 0)

    assert ml.count_entries_between(Position(l1, 1), Position(l3, 0)) == 6
    assert ml.count_entries_between(Position(l1, 0), ml.last_confirmed_entry) == 9
    assert ml.count_entries_between(Position(l2, 2), Position(l2, 1)) == 0
    # the n-th entry at or after a position, found ledger by ledger: where n steps of next_valid_position lead
    stepped = [Position(l1, 0)]
    while len(stepped) < 9:
        stepped.append(ml.next_valid_position(stepped[-1]))
    assert [ml.nth_position(Position(l1, 0), n) for n in range(9)] == stepped
    assert ml.nth_position(Position(l2, 1), 3) == Position(l3, 1)
    assert ml.nth_position(Position(-1, -1), 0) == Position(l1, 0)
    assert ml.nth_position(Position(l1, 0), 9) is None


async def test_min_rollover_time_gates_every_limit(factory: ManagedLedgerFactory, clock: FakeClock) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_s=60, retention_time_s=-1,
                                 retention_size_bytes=-1)
    ml = await factory.open("t", config)
    await add_all(ml, 5)
    assert [i.entries for i in ml.ledgers_info()] == [5]  # full, but younger than the minimum
    clock.advance(61)
    await ml.add_entry_async(b"late")
    assert [i.entries for i in ml.ledgers_info()] == [6, 0]


async def test_rollover_by_age_and_size(factory: ManagedLedgerFactory, clock: FakeClock) -> None:
    by_age = ManagedLedgerConfig(max_ledger_rollover_time_s=100, min_ledger_rollover_time_s=0,
                                 retention_time_s=-1, retention_size_bytes=-1)
    ml = await factory.open("age", by_age)
    await add_all(ml, 2)
    clock.advance(101)
    await ml.add_entry_async(b"old")  # checked on add: this add completes the old ledger
    assert [i.entries for i in ml.ledgers_info()] == [3, 0]

    by_size = ManagedLedgerConfig(max_size_per_ledger_bytes=10, min_ledger_rollover_time_s=0,
                                  retention_time_s=-1, retention_size_bytes=-1)
    ml2 = await factory.open("size", by_size)
    for _ in range(5):
        await ml2.add_entry_async(b"1234")
    assert [i.entries for i in ml2.ledgers_info()] == [3, 2]


# -- cursors: creation ------------------------------------------------------------------------


async def test_durable_cursor_initial_positions(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    ps = await add_all(ml, 4)
    latest = await ml.open_cursor("latest")
    earliest = await ml.open_cursor("earliest", InitialPosition.EARLIEST, properties={"k": 7})

    assert latest.is_durable
    assert latest.mark_delete_position == ps[-1]
    assert latest.read_position == ml.next_valid_position(ps[-1])
    assert latest.number_of_entries_in_backlog() == 0
    assert await latest.read_entries_async(10) == []

    assert earliest.mark_delete_position == ml.previous_position(ps[0])
    assert earliest.read_position == ps[0]
    assert earliest.number_of_entries_in_backlog() == 4
    assert dict(earliest.properties) == {"k": 7}

    # reopening an existing name returns the existing cursor untouched
    again = await ml.open_cursor("earliest", InitialPosition.LATEST, properties={"other": 1})
    assert again is earliest
    assert dict(again.properties) == {"k": 7}
    assert set(ml.cursors) == {"latest", "earliest"}

    new = await ml.add_entry_async(b"new")
    assert datas(await latest.read_entries_async(10)) == [b"new"]
    assert positions(await earliest.read_entries_async(10)) == [*ps, new]


async def test_cursors_view_is_read_only(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    await ml.open_cursor("c")
    with pytest.raises(TypeError):
        ml.cursors["x"] = ml.cursors["c"]  # type: ignore[index]


# -- reading ----------------------------------------------------------------------------------


async def test_read_entries_limits_and_advances(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    for size in (10, 10, 10, 50, 10):
        await ml.add_entry_async(bytes(size))

    first = await c.read_entries_async(2)
    assert [len(e.data) for e in first] == [10, 10]
    assert c.read_position == ml.next_valid_position(first[-1].position)  # crosses nothing yet
    # max_bytes: 10 fits, 10 + 50 does not
    assert [len(e.data) for e in await c.read_entries_async(10, max_bytes=25)] == [10]
    # at least one entry even when it alone is bigger than max_bytes
    assert [len(e.data) for e in await c.read_entries_async(10, max_bytes=5)] == [50]
    assert [len(e.data) for e in await c.read_entries_async(10)] == [10]
    assert await c.read_entries_async(10) == []
    assert c.read_position == ml.next_valid_position(ml.last_confirmed_entry)
    assert not c.has_more_entries()
    # reading does not acknowledge
    assert c.number_of_entries_in_backlog() == 5
    with pytest.raises(ValueError):
        c.read_entries(0, ReadRecorder())


async def test_read_spans_ledgers_and_skips_individually_deleted(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 8)
    c.delete([ps[1], ps[3], ps[4]])
    assert datas(await c.read_entries_async(4)) == [b"m0", b"m2", b"m5", b"m6"]
    assert c.number_of_entries_to_read() == 1
    assert datas(await c.read_entries_async(4)) == [b"m7"]


async def test_read_entries_or_wait_parks_and_wakes(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    c = await ml.open_cursor("c")
    rec = ReadRecorder()
    c.read_entries_or_wait(5, rec)
    await settle()
    assert rec.calls == [] and c.has_pending_read
    with pytest.raises(ManagedLedgerError):
        c.read_entries_or_wait(5, ReadRecorder())

    p = await ml.add_entry_async(b"wake")
    await rec.wait()
    [(entries, exc)] = rec.calls
    assert exc is None and positions(entries) == [p] and datas(entries) == [b"wake"]
    assert not c.has_pending_read

    # entries available: completes at once, like read_entries
    await ml.add_entry_async(b"there")
    rec2 = ReadRecorder()
    c.read_entries_or_wait(5, rec2)
    await rec2.wait()
    assert datas(rec2.calls[0][0]) == [b"there"]


async def test_new_entries_check_delay_reads_what_came_meanwhile(factory: ManagedLedgerFactory) -> None:
    """Pulsar's managedLedgerNewEntriesCheckDelayInMillis: a read that found nothing is not woken
    by each add during the delay; it takes them all in one read (here at a seek, which looks at
    once, so the test needs no clock)."""
    ml = await factory.open("t", ManagedLedgerConfig(new_entries_check_delay_s=600))
    c = await ml.open_cursor("c")
    rec = ReadRecorder()
    c.read_entries_or_wait(10, rec)
    assert c.has_pending_read
    ps = [await ml.add_entry_async(b"a"), await ml.add_entry_async(b"b"), await ml.add_entry_async(b"c")]
    await settle()
    assert rec.calls == [] and c.has_pending_read  # the adds did not wake it
    c.seek(ps[0])
    await rec.wait()
    assert positions(rec.calls[0][0]) == ps and not c.has_pending_read


async def test_new_entries_check_delay_then_waits_for_an_add(factory: ManagedLedgerFactory) -> None:
    """Nothing came during the delay: the read parks until the next add, which wakes it at once."""
    ml = await factory.open("t", ManagedLedgerConfig(new_entries_check_delay_s=0.001))
    assert isinstance(ml, BaseManagedLedger)
    c = await ml.open_cursor("c")
    rec = ReadRecorder()
    c.read_entries_or_wait(10, rec)
    await eventually(lambda: c in ml._waiting, "the delay over, registered for the next add")
    p = await ml.add_entry_async(b"x")
    await rec.wait()
    assert positions(rec.calls[0][0]) == [p]


async def test_new_entries_check_delay_cancel_and_close(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", ManagedLedgerConfig(new_entries_check_delay_s=0.001))
    c = await ml.open_cursor("c")
    rec = ReadRecorder()
    c.read_entries_or_wait(10, rec)
    assert c.cancel_pending_read() and not c.has_pending_read
    p = await ml.add_entry_async(b"x")
    c2 = await ml.open_cursor("c2", InitialPosition.LATEST)
    rec2 = ReadRecorder()
    c2.read_entries_or_wait(10, rec2)
    await c2.close()
    # Neither read completes, now or later (their delay timers are gone); the entry is still there.
    await settle()
    assert rec.calls == [] and rec2.calls == []
    assert isinstance(c, cursor_base.BaseCursor) and isinstance(c2, cursor_base.BaseCursor)
    assert c._check_timer is None and c2._check_timer is None
    assert positions(await c.read_entries_async(5)) == [p]


@pytest.mark.parametrize("delete", [False, True])
async def test_closing_the_ledger_fails_a_read_still_in_its_check_delay(factory: ManagedLedgerFactory,
                                                                         delete: bool) -> None:
    """A read in the new-entries check delay is not yet registered for the next add; closing (or
    deleting) the ledger fails it all the same, as it fails reads parked for an add."""
    ml = await factory.open("t", ManagedLedgerConfig(new_entries_check_delay_s=600))
    c = await ml.open_cursor("c")
    rec = ReadRecorder()
    c.read_entries_or_wait(10, rec)
    await (ml.delete() if delete else ml.close())
    await rec.wait()
    assert rec.calls[0][0] == [] and isinstance(rec.calls[0][1], LedgerClosedError)


async def test_cancel_pending_read(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    c = await ml.open_cursor("c")
    assert not c.cancel_pending_read()
    rec = ReadRecorder()
    c.read_entries_or_wait(5, rec)
    assert c.cancel_pending_read()
    assert not c.has_pending_read
    p = await ml.add_entry_async(b"x")
    await settle()
    assert rec.calls == []
    # the entry is still there for the next read
    assert positions(await c.read_entries_async(5)) == [p]


async def test_parked_read_woken_when_cursor_moves_back(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    ps = await add_all(ml, 3)
    c = await ml.open_cursor("c")
    rec = ReadRecorder()
    c.read_entries_or_wait(10, rec)  # LATEST cursor: nothing to read, parks
    assert c.has_pending_read
    c.reset(ps[1])
    await rec.wait()
    assert positions(rec.calls[0][0]) == ps[1:]


async def test_parked_read_fails_when_ledger_closes(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    c = await ml.open_cursor("c")
    rec = ReadRecorder()
    c.read_entries_or_wait(1, rec)
    await ml.close()
    await rec.wait()
    entries, exc = rec.calls[0]
    assert entries == [] and isinstance(exc, LedgerClosedError)


async def test_read_or_wait_async_cancellation_unparks(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    c = await ml.open_cursor("c")
    task = asyncio.create_task(c.read_entries_or_wait_async(1))
    await settle()
    assert c.has_pending_read
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not c.has_pending_read


async def test_replay_entries(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 7)
    await c.read_entries_async(7)
    read_position = c.read_position
    c.delete([ps[2]])
    c.mark_delete(ps[0])
    bogus = Position(ps[0].ledger_id, 99)
    rec = ReadRecorder()
    c.replay_entries([ps[5], ps[2], ps[0], ps[3], bogus, ps[5]], rec)
    await rec.wait()
    entries, exc = rec.calls[0]
    assert exc is None
    assert positions(entries) == [ps[3], ps[5]]  # sorted, acked / absent / duplicate dropped
    assert c.read_position == read_position


# -- acknowledging ----------------------------------------------------------------------------


async def test_individual_acks_advance_mark_delete_across_ledgers(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 7)
    l1, l2 = ps[0].ledger_id, ps[3].ledger_id
    start = c.mark_delete_position
    c.delete([ps[1], ps[2], ps[3], ps[5]])
    assert c.mark_delete_position == start  # ps[0] still missing
    assert c.individually_deleted.to_pulsar_string() == f"[({l1}:0..{l1}:2],({l2}:-1..{l2}:0],({l2}:1..{l2}:2]]"
    assert c.number_of_entries_in_backlog() == 3
    assert c.is_acked(ps[3]) and not c.is_acked(ps[4])

    c.delete([ps[0]])  # now contiguous through the end of l1 into l2
    assert c.mark_delete_position == ps[3]
    assert c.individually_deleted.to_pulsar_string() == f"[({l2}:1..{l2}:2]]"
    assert len(c.individually_deleted) == 1
    assert c.number_of_entries_in_backlog() == 2

    c.delete([ps[4]])
    assert c.mark_delete_position == ps[5]
    assert c.individually_deleted.is_empty()
    # acks at or before mark-delete, or of positions that do not exist, change nothing
    c.delete([ps[1], Position(l1, 50), Position(l2 + 1000, 0)])
    assert c.mark_delete_position == ps[5] and c.individually_deleted.is_empty()


async def test_cumulative_ack(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 8)
    c.delete([ps[2], ps[5], ps[6]])
    c.mark_delete(ps[1], properties={"snap": 1})
    assert c.mark_delete_position == ps[2]  # absorbed the contiguous individual ack
    assert dict(c.properties) == {"snap": 1}
    assert c.read_position == ps[3]  # read position is never at or before mark-delete

    c.mark_delete(ps[0])  # older: ignored
    assert c.mark_delete_position == ps[2]

    c.mark_delete(ps[4])
    assert c.mark_delete_position == ps[6]
    assert c.individually_deleted.is_empty()
    assert c.number_of_entries_in_backlog() == 1

    with pytest.raises(InvalidPositionError):
        c.mark_delete(ml.next_valid_position(ml.last_confirmed_entry))
    c.clear_backlog()
    assert c.mark_delete_position == ml.last_confirmed_entry
    assert c.number_of_entries_in_backlog() == 0


async def test_backlog_counts(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 10)
    assert c.number_of_entries_in_backlog() == 10
    assert c.number_of_entries_to_read() == 10 and c.has_more_entries()
    await c.read_entries_async(4)
    assert c.number_of_entries_in_backlog() == 10
    assert c.number_of_entries_to_read() == 6
    c.delete([ps[1], ps[6], ps[7]])
    assert c.number_of_entries_in_backlog() == 7
    assert c.number_of_entries_to_read() == 4
    c.mark_delete(ps[3])
    assert c.number_of_entries_in_backlog() == 4
    await c.read_entries_async(10)
    assert c.number_of_entries_to_read() == 0 and not c.has_more_entries()
    assert c.number_of_entries_in_backlog() == 4


# -- moving -----------------------------------------------------------------------------------


async def test_seek_rewind_reset(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 8)
    c.mark_delete(ps[1])
    c.delete([ps[4]])

    c.seek(ps[5])
    assert c.read_position == ps[5]
    assert datas(await c.read_entries_async(1)) == [b"m5"]
    c.seek(ps[0])  # not before mark-delete
    assert c.read_position == ps[2]
    c.seek(Position(ps[-1].ledger_id + 100, 0))  # not past the next add position
    assert c.read_position == ml.next_valid_position(ml.last_confirmed_entry)

    c.rewind()
    assert c.read_position == ps[2]
    assert datas(await c.read_entries_async(10)) == [b"m2", b"m3", b"m5", b"m6", b"m7"]  # m4 was acked

    c.reset(ps[3])
    assert c.mark_delete_position == ps[2]
    assert c.read_position == ps[3]
    assert c.individually_deleted.is_empty()  # reset forgets individual acks
    assert c.number_of_entries_in_backlog() == 5
    assert datas(await c.read_entries_async(10)) == [b"m3", b"m4", b"m5", b"m6", b"m7"]

    c.reset(Position(-1, -1))  # before the first entry: everything
    assert c.read_position == ps[0]
    assert c.mark_delete_position == ml.previous_position(ps[0])
    assert c.number_of_entries_in_backlog() == 8

    c.reset(Position(ps[-1].ledger_id + 100, 5))  # past the end: only new entries
    assert c.read_position == ml.next_valid_position(ml.last_confirmed_entry)
    assert c.mark_delete_position == ml.last_confirmed_entry
    assert c.number_of_entries_in_backlog() == 0


async def test_skip_entries(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 10)
    c.delete([ps[1], ps[2], ps[5]])
    c.skip_entries(2)  # unacked: m0, m3 -> mark-delete at m3
    assert c.mark_delete_position == ps[3]
    assert c.read_position == ps[4]
    c.skip_entries(2)  # unacked: m4, m6 (m5 acked)
    assert c.mark_delete_position == ps[6]
    assert c.individually_deleted.is_empty()
    c.skip_entries(0)
    assert c.mark_delete_position == ps[6]
    c.skip_entries(1000)  # more than there is
    assert c.mark_delete_position == ml.last_confirmed_entry
    assert c.number_of_entries_in_backlog() == 0


# -- non-durable cursors ----------------------------------------------------------------------


async def test_non_durable_cursor_start_positions(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    ps = await add_all(ml, 5)

    before = ml.new_non_durable_cursor(Position(-1, -1), "reader-before")
    assert not before.is_durable
    assert before.mark_delete_position == ml.previous_position(ps[0])
    assert positions(await before.read_entries_async(10)) == ps

    at = ml.new_non_durable_cursor(ps[2], "reader-at")
    assert at.mark_delete_position == ps[2]
    assert positions(await at.read_entries_async(10)) == ps[3:]

    past = ml.new_non_durable_cursor(Position(2**62, 0), "reader-past")
    assert past.mark_delete_position == ml.last_confirmed_entry
    assert await past.read_entries_async(10) == []
    p = await ml.add_entry_async(b"new")
    assert positions(await past.read_entries_async(10)) == [p]

    assert "reader-at" not in ml.cursors  # not durable: not listed
    await at.close()
    assert at.is_closed
    with pytest.raises(CursorClosedError):
        at.mark_delete(ps[3])


async def test_non_durable_cursor_by_name_can_be_deleted(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    reader = ml.new_non_durable_cursor(Position(-1, -1), "reader")
    await ml.delete_cursor("reader")
    assert reader.is_closed
    with pytest.raises(CursorNotFoundError):
        await ml.delete_cursor("reader")


# -- find_newest_matching ---------------------------------------------------------------------


async def test_find_newest_matching(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    assert await ml.find_newest_matching(lambda e: True) is None  # empty
    ps = [await ml.add_entry_async(str(i * 10).encode()) for i in range(11)]  # 0, 10, ..., 100

    def at_most(limit: int) -> Callable[[Entry], bool]:
        return lambda e: int(e.data) <= limit

    assert await ml.find_newest_matching(at_most(45)) == ps[4]
    assert await ml.find_newest_matching(at_most(50)) == ps[5]
    assert await ml.find_newest_matching(at_most(1000)) == ps[10]
    assert await ml.find_newest_matching(at_most(-1)) is None
    assert await ml.find_newest_matching(at_most(45), start=ps[2]) == ps[4]
    assert await ml.find_newest_matching(at_most(15), start=ps[2]) is None


# -- trimming ---------------------------------------------------------------------------------


async def test_trim_after_durable_cursor_consumes(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 8)  # ledgers: 3, 3, 2
    reader = ml.new_non_durable_cursor(Position(-1, -1), "reader")
    assert len(ml.ledgers_info()) == 3

    c.mark_delete(ps[1])  # first ledger not fully consumed
    assert len(ml.ledgers_info()) == 3
    c.mark_delete(ps[4])  # first ledger consumed: deleted at once (no retention)
    assert [i.entries for i in ml.ledgers_info()] == [3, 2]
    assert ml.first_position == ps[3]
    assert ml.number_of_entries == 5
    with pytest.raises(EntryNotFoundError):
        await ml.read_entry(ps[0])
    # the non-durable reader was behind: moved to the new first position
    assert reader.read_position == ps[3]
    assert reader.mark_delete_position == ml.previous_position(ps[3])
    assert positions(await reader.read_entries_async(2)) == ps[3:5]

    c.delete([ps[5]])  # auto-advance to the end of the 2nd ledger: trimmed too
    assert [i.entries for i in ml.ledgers_info()] == [2]
    assert ml.first_position == ps[6]
    # a mark-delete inside a deleted ledger moves to "before the first remaining entry"
    assert c.mark_delete_position == Position(ps[6].ledger_id, -1)
    assert c.number_of_entries_in_backlog() == 2
    assert positions(await c.read_entries_async(10)) == ps[6:]

    c.clear_backlog()  # everything consumed; the current ledger is never deleted
    assert [i.entries for i in ml.ledgers_info()] == [2]
    await ml.add_entry_async(b"fills the current ledger")
    # rollover: the new entry is not consumed yet, so the full ledger stays
    assert [i.entries for i in ml.ledgers_info()] == [3, 0]
    c.clear_backlog()
    assert [i.entries for i in ml.ledgers_info()] == [0]
    assert c.mark_delete_position == ml.last_confirmed_entry  # not moved past the end
    assert ml.first_position == ml.next_valid_position(ml.last_confirmed_entry)
    assert c.number_of_entries_in_backlog() == 0


async def test_cursors_on_a_fully_trimmed_log(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL)
    ps = await add_all(ml, 6)  # no cursors: both full ledgers trimmed, the current one is empty
    assert ml.number_of_entries == 0
    assert ml.last_confirmed_entry == ps[-1]
    nxt = ml.next_valid_position(ml.last_confirmed_entry)
    assert ml.first_position == nxt
    latest = await ml.open_cursor("latest")
    earliest = await ml.open_cursor("earliest", InitialPosition.EARLIEST)
    reader = ml.new_non_durable_cursor(Position(-1, -1), "reader")
    for c in (latest, earliest, reader):
        assert c.mark_delete_position <= ml.last_confirmed_entry
        assert c.read_position == nxt
        assert c.number_of_entries_in_backlog() == 0
    earliest.reset(Position(-1, -1))
    assert earliest.read_position == nxt
    assert earliest.mark_delete_position <= ml.last_confirmed_entry
    p = await ml.add_entry_async(b"new")
    assert p == nxt
    for c in (latest, earliest, reader):
        assert c.number_of_entries_in_backlog() == 1
        assert positions(await c.read_entries_async(5)) == [p]


async def test_slowest_durable_cursor_holds_data(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL)
    fast = await ml.open_cursor("fast", InitialPosition.EARLIEST)
    slow = await ml.open_cursor("slow", InitialPosition.EARLIEST)
    ps = await add_all(ml, 7)
    fast.clear_backlog()
    assert len(ml.ledgers_info()) == 3
    slow.mark_delete(ps[2])
    assert len(ml.ledgers_info()) == 2
    await ml.delete_cursor("slow")  # the slowest goes away: fast's position rules
    assert [i.entries for i in ml.ledgers_info()] == [1]
    assert ml.first_position == ps[6]


async def test_no_cursors_trims_on_rollover(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL)
    ps = await add_all(ml, 7)
    # nobody holds the data and there is no retention: only the current ledger remains
    assert [i.entries for i in ml.ledgers_info()] == [1]
    assert ml.first_position == ps[6]
    assert ml.last_confirmed_entry == ps[6]


async def test_truncate_deletes_every_consumed_ledger_whatever_the_retention(factory: ManagedLedgerFactory) -> None:
    # Pulsar's ManagedLedger.asyncTruncate: every cursor's backlog cleared, then every ledger but the current
    # one deleted, retention or not.
    ml = await factory.open("t", SMALL_KEEP)
    a = await ml.open_cursor("a", InitialPosition.EARLIEST)
    b = await ml.open_cursor("b", InitialPosition.EARLIEST)
    stored = await ml.open_cursor("stored", InitialPosition.EARLIEST)
    await stored.close()  # (its state stays: it still holds data)
    ps = await add_all(ml, 8)  # ledgers: 3, 3, 2
    reader = ml.new_non_durable_cursor(Position(-1, -1), "reader")
    a.delete([ps[6]])
    assert ml.trim_consumed_ledgers() == 0  # infinite retention: a trim deletes nothing
    assert ml.truncate() == 2
    assert [i.entries for i in ml.ledgers_info()] == [2]  # the current ledger stays, entries and all
    assert ml.first_position == ps[6] and ml.last_confirmed_entry == ps[7]
    for c in (a, b):
        assert c.mark_delete_position == ps[7] and c.number_of_entries_in_backlog() == 0
        assert not c.individually_deleted
    assert (await ml.open_cursor("stored")).mark_delete_position == ps[7]
    # Readers too (Pulsar's asyncTruncate clears every cursor): one goes on with what is written next, not with
    # what is left of the current ledger; but not one named in keep.
    assert reader.mark_delete_position == ps[7] and not reader.has_more_entries()
    p = await ml.add_entry_async(b"after")  # fills the ledger: rolled over
    assert positions(await a.read_entries_async(5)) == [p]
    assert positions(await reader.read_entries_async(5)) == [p]
    assert ml.truncate() == 1
    assert [i.entries for i in ml.ledgers_info()] == [0]
    assert ml.truncate() == 0  # nothing closed to delete


async def test_truncate_keeps_the_named_cursors_and_what_they_hold(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    held = await ml.open_cursor("held", InitialPosition.EARLIEST)
    ps = await add_all(ml, 7)  # ledgers: 3, 3, 1
    held.mark_delete(ps[3])
    kept_reader = ml.new_non_durable_cursor(ps[4], "kept-reader")
    assert ml.truncate(keep={"held", "kept-reader"}) == 1  # only the first ledger was consumed by "held"
    assert positions(await kept_reader.read_entries_async(5)) == ps[5:]
    assert held.mark_delete_position == ps[3] and c.mark_delete_position == ps[6]
    assert [i.entries for i in ml.ledgers_info()] == [3, 1]
    await c.flush()
    await ml.close()
    with pytest.raises(LedgerClosedError):
        ml.truncate()
    reopened = await factory.open("t", SMALL_KEEP)  # what was deleted stays deleted, the cursors where they were
    assert reopened.first_position == ps[3] and reopened.number_of_entries == 4
    assert reopened.cursors["c"].mark_delete_position == ps[6]
    assert reopened.cursors["held"].mark_delete_position == ps[3]


async def test_retention_by_size(factory: ManagedLedgerFactory) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_s=0,
                                 retention_time_s=-1, retention_size_bytes=8)
    ml = await factory.open("t", config)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    for _ in range(8):
        await ml.add_entry_async(b"12")  # 4 full ledgers of 4 bytes + an empty current one
    c.clear_backlog()
    # keep as long as the remaining size stays >= 8 bytes: two ledgers survive
    assert [i.entries for i in ml.ledgers_info()] == [2, 2, 0]
    assert ml.total_size == 8


async def test_retention_by_time(factory: ManagedLedgerFactory, clock: FakeClock) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_s=0,
                                 retention_time_s=3600, retention_size_bytes=-1)
    ml = await factory.open("t", config)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    await add_all(ml, 2)
    clock.advance(1800)
    await add_all(ml, 3)
    c.clear_backlog()
    assert [i.entries for i in ml.ledgers_info()] == [2, 2, 1]  # consumed but retained
    assert ml.trim_consumed_ledgers() == 0
    clock.advance(1801)  # the first ledger is now older than an hour, the second is not
    assert ml.trim_consumed_ledgers() == 1
    assert [i.entries for i in ml.ledgers_info()] == [2, 1]
    clock.advance(1800)
    assert ml.trim_consumed_ledgers() == 1
    assert [i.entries for i in ml.ledgers_info()] == [1]  # the current ledger always stays


async def test_infinite_retention_keeps_everything(factory: ManagedLedgerFactory, clock: FakeClock) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 7)
    c.clear_backlog()
    clock.advance(10**9)
    assert ml.trim_consumed_ledgers() == 0
    assert ml.number_of_entries == 7
    # a reader can still go back to the beginning
    reader = ml.new_non_durable_cursor(Position(-1, -1), "r")
    assert positions(await reader.read_entries_async(10)) == ps


# -- lifecycle --------------------------------------------------------------------------------


async def test_open_same_name_returns_same_instance(factory: ManagedLedgerFactory) -> None:
    a = await factory.open("t")
    b = await factory.open("t")
    assert a is b
    c = await factory.open("other")
    assert c is not a
    assert factory.list_names() == ["other", "t"]
    assert factory.exists("t") and factory.exists("other") and not factory.exists("missing")


async def test_create_stores_an_empty_ledger_without_opening_it(factory: ManagedLedgerFactory) -> None:
    """``create`` (a partitioned topic's partitions, as Pulsar's TopicResources.createPersistentTopicAsync): stored
    and listed at once, not opened; its first open finds it empty; one already there (open or not) stays as it is."""
    heard: list[str] = []
    factory.add_names_listener(heard.append)
    assert await factory.create("t") is True
    assert factory.exists("t") and factory.list_names() == ["t"] and heard == ["t"]
    assert await factory.create("t") is False and heard == ["t"]
    ml = await factory.open("t")
    assert ml.number_of_entries == 0 and dict(ml.cursors) == {} and heard == ["t"]
    await add_all(ml, 2)
    assert await factory.create("t") is False  # (open)
    await ml.close()
    assert await factory.create("t") is False  # (stored, closed)
    ml = await factory.open("t")
    assert [e.data for e in await ml.new_non_durable_cursor(Position(-1, -1), "r").read_entries_async(10)] == [
        b"m0", b"m1"]
    # One never opened is deleted by name, as any stored one.
    assert await factory.create("unused") is True
    await factory.delete("unused")
    assert not factory.exists("unused") and factory.list_names() == ["t"]
    with pytest.raises(LedgerNotFoundError):
        await factory.delete("unused")
    # Creations and an open of one name side by side: one managed ledger, opened empty.
    made = await asyncio.gather(factory.create("race"), factory.open("race"), factory.create("race"))
    assert sum(m is True for m in (made[0], made[2])) <= 1
    assert isinstance(made[1], ManagedLedger) and made[1].number_of_entries == 0
    assert await factory.open("race") is made[1] and factory.list_names() == ["race", "t"]


async def test_cursor_properties_set_without_moving(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST, properties={"a": 1})
    ps = await add_all(ml, 3)
    c.mark_delete(ps[0])
    c.set_properties({**c.properties, "b": 2})
    assert c.mark_delete_position == ps[0] and dict(c.properties) == {"a": 1, "b": 2}
    await c.flush()
    await ml.close()
    reopened = (await factory.open("t")).cursors["sub"]
    assert reopened.mark_delete_position == ps[0] and dict(reopened.properties) == {"a": 1, "b": 2}


async def test_cursor_properties_are_kept_with_a_durable_cursor(factory: ManagedLedgerFactory) -> None:
    """Pulsar's cursorProperties (a subscription's properties): given at creation, replaced whole, durable once
    set_cursor_properties returns, and kept across reopening; apart from the long properties."""
    ml = await factory.open("t")
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST, properties={"n": 1}, cursor_properties={"team": "blue"})
    assert dict(c.cursor_properties) == {"team": "blue"} and dict(c.properties) == {"n": 1}
    again = await ml.open_cursor("sub", cursor_properties={"team": "red"})  # an existing cursor keeps its own
    assert again is c and dict(c.cursor_properties) == {"team": "blue"}
    plain = await ml.open_cursor("plain", InitialPosition.EARLIEST)
    assert dict(plain.cursor_properties) == {}
    await ml.close()

    ml = await factory.open("t")
    c = ml.cursors["sub"]
    assert dict(c.cursor_properties) == {"team": "blue"} and dict(c.properties) == {"n": 1}
    await c.set_cursor_properties({"owner": "ops", "é": "ü"})
    assert dict(c.cursor_properties) == {"owner": "ops", "é": "ü"}
    await ml.close()

    ml = await factory.open("t")
    assert dict(ml.cursors["sub"].cursor_properties) == {"owner": "ops", "é": "ü"}
    assert dict(ml.cursors["plain"].cursor_properties) == {}
    await ml.cursors["sub"].set_cursor_properties({})
    await ml.close()
    assert dict((await factory.open("t")).cursors["sub"].cursor_properties) == {}


async def test_a_non_durable_cursor_keeps_cursor_properties_in_memory(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    reader = ml.new_non_durable_cursor(Position(-1, -1), "reader")
    await reader.set_cursor_properties({"k": "v"})
    assert dict(reader.cursor_properties) == {"k": "v"}


async def test_a_reopened_cursor_keeps_its_inactivity(factory: ManagedLedgerFactory, clock: FakeClock,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ml = await factory.open("t")
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    c.touch()
    await c.flush()
    await ml.close()
    monkeypatch.setattr(cursor_base, "_wall", lambda: time.time() + 3600)  # an hour passes
    ml = await factory.open("t")
    reopened = ml.cursors["sub"]
    assert clock() - reopened.last_active >= 3590
    reopened.touch()
    assert reopened.last_active == clock()


async def test_close_and_reopen_keeps_data_and_durable_cursors(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST, properties={"p": 1})
    ml.new_non_durable_cursor(Position(-1, -1), "reader")
    ps = await add_all(ml, 7)
    c.mark_delete(ps[1], properties={"p": 2})
    c.delete([ps[3], ps[5]])
    await c.flush()
    await ml.close()
    assert ml.is_closed and c.is_closed

    rec: list[tuple[Position | None, BaseException | None]] = []
    ml.add_entry(b"late", lambda p, e: rec.append((p, e)))
    await settle()
    assert rec[0][0] is None and isinstance(rec[0][1], LedgerClosedError)
    with pytest.raises(LedgerClosedError):
        await ml.open_cursor("x")
    read = ReadRecorder()
    c.read_entries(1, read)
    await read.wait()
    assert isinstance(read.calls[0][1], ManagedLedgerError)

    again = await factory.open("t", SMALL_KEEP)
    assert again is not ml
    assert again.last_confirmed_entry == ps[-1]
    assert again.number_of_entries == 7
    assert (await again.read_entry(ps[4])).data == b"m4"
    assert set(again.cursors) == {"sub"}  # durable cursors come back open; readers do not
    sub = again.cursors["sub"]
    assert sub.mark_delete_position == ps[1]
    assert sub.individually_deleted.to_pulsar_string() == c.individually_deleted.to_pulsar_string()
    assert dict(sub.properties) == {"p": 2}
    assert sub.read_position == ps[2]  # reads restart after mark-delete
    assert datas(await sub.read_entries_async(10)) == [b"m2", b"m4", b"m6"]
    new = await again.add_entry_async(b"after")
    assert new > ps[-1]
    assert again.next_valid_position(ps[-1]) == new


async def test_batch_index_acks_are_kept_with_the_cursor(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 6)
    c.set_batch_ack(ps[0], [1])
    c.set_batch_ack(ps[1], [0b1100])
    c.set_batch_ack(ps[2], [-1, 5])  # ack_set words are int64: negative values too
    c.set_batch_ack(ps[4], [1])
    c.mark_delete(ps[0])  # acknowledging an entry forgets its batch state...
    c.delete([ps[4]])  # ...by mark-delete or individually
    c.set_batch_ack(ps[0], [1])  # acknowledged: ignored
    assert dict(c.batch_acks) == {ps[1]: [0b1100], ps[2]: [-1, 5]}
    await c.flush()
    await ml.close()

    again = await factory.open("t", SMALL_KEEP)
    sub = again.cursors["sub"]
    assert dict(sub.batch_acks) == {ps[1]: [0b1100], ps[2]: [-1, 5]}
    sub.mark_delete(ps[1])
    assert dict(sub.batch_acks) == {ps[2]: [-1, 5]}
    sub.reset(ps[0])
    assert dict(sub.batch_acks) == {}


async def test_the_holes_a_cursor_keeps_are_bounded(factory: ManagedLedgerFactory) -> None:
    """max_unacked_ranges_to_persist (managedLedgerMaxUnackedRangesToPersist): a cursor with more acknowledgement holes
    is not fully persistable (what the dispatcher pause on ack state asks), and a stored state keeps the holes nearest
    the mark-delete: past them, acknowledged entries come back after a reopen (never an unacknowledged one skipped).
    The memory ledger stores nothing: it keeps them all."""
    config = dataclasses.replace(SMALL_KEEP, max_unacked_ranges_to_persist=2)
    ml = await factory.open("t", config)
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 8)
    c.delete([ps[1], ps[3]])
    assert c.is_cursor_data_fully_persistable()
    c.delete([ps[5]])
    assert not c.is_cursor_data_fully_persistable()
    await c.flush()
    await ml.close()

    again = await factory.open("t", config)
    sub = again.cursors["sub"]
    acked = [i for i, p in enumerate(ps) if sub.is_acked(p)]
    assert acked == ([1, 3] if isinstance(again, StoredManagedLedger) else [1, 3, 5])
    assert sub.is_cursor_data_fully_persistable() == isinstance(again, StoredManagedLedger)


async def test_reset_into_a_batch_keeps_its_ack_set(factory: ManagedLedgerFactory) -> None:
    # A reset to a message inside a batch (Pulsar's reset to a position carrying an ack set): the entry is read
    # again, partly acknowledged, and that state is written with the reset.
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 6)
    c.set_batch_ack(ps[4], [1])
    c.mark_delete(ps[5])
    c.reset(ps[2], [0b11100])
    assert c.mark_delete_position == ps[1] and c.read_position == ps[2]
    assert dict(c.batch_acks) == {ps[2]: [0b11100]}  # the older batch state is gone
    await c.flush()
    await ml.close()

    again = await factory.open("t", SMALL_KEEP)
    sub = again.cursors["sub"]
    assert dict(sub.batch_acks) == {ps[2]: [0b11100]}
    assert datas(await sub.read_entries_async(1)) == [b"m2"]
    # An ack set for a position the reset does not land on (clamped) is dropped.
    sub.reset(Position(ps[-1].ledger_id + 100, 5), [1])
    assert dict(sub.batch_acks) == {}
    sub.reset(Position(-1, -1), [1])
    assert dict(sub.batch_acks) == {} and sub.read_position == ps[0]


async def test_cursor_close_and_reopen_handle(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t", SMALL)
    c = await ml.open_cursor("c", InitialPosition.EARLIEST)
    ps = await add_all(ml, 5)
    c.mark_delete(ps[0])
    await c.close()
    assert "c" not in ml.cursors
    with pytest.raises(CursorClosedError):
        c.mark_delete(ps[1])
    read = ReadRecorder()
    c.read_entries(1, read)
    await read.wait()
    assert isinstance(read.calls[0][1], CursorClosedError)
    # the subscription still holds its data while its handle is closed
    await add_all(ml, 3)
    assert ml.first_position == ps[0]
    again = await ml.open_cursor("c")
    assert again is not c
    assert again.mark_delete_position == ps[0]


async def test_delete_cursor(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    c = await ml.open_cursor("c")
    await ml.delete_cursor("c")
    assert c.is_closed and "c" not in ml.cursors
    with pytest.raises(CursorNotFoundError):
        await ml.delete_cursor("c")
    fresh = await ml.open_cursor("c", InitialPosition.EARLIEST)
    assert fresh is not c


async def test_delete_ledger(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t")
    await ml.open_cursor("c")
    await add_all(ml, 3)
    await ml.delete()
    assert ml.is_closed
    assert factory.list_names() == []
    assert not factory.exists("t")
    fresh = await factory.open("t")
    assert fresh.number_of_entries == 0
    assert dict(fresh.cursors) == {}

    await add_all(fresh, 1)
    await fresh.close()
    assert factory.exists("t")  # stored, though closed
    await factory.delete("t")  # deleting a closed ledger by name
    assert factory.list_names() == []
    assert not factory.exists("t")
    with pytest.raises(LedgerNotFoundError):
        await factory.delete("t")


async def test_factory_close_closes_everything(factory: ManagedLedgerFactory) -> None:
    a = await factory.open("a")
    b = await factory.open("b")
    cursor = await b.open_cursor("c")
    await factory.close()
    assert a.is_closed and b.is_closed and cursor.is_closed


async def test_config_validation() -> None:
    with pytest.raises(ValueError):
        ManagedLedgerConfig(max_entries_per_ledger=0)
    with pytest.raises(ValueError):
        ManagedLedgerConfig(retention_time_s=-2)
    assert ManagedLedgerConfig(retention_time_s=-1, retention_size_bytes=-1).infinite_retention


async def test_rollovers_and_cursor_state_writes_are_counted(factory: ManagedLedgerFactory) -> None:
    """What Pulsar's LedgerSwitchLatencyBuckets, MarkDeleteRate and per-cursor persist metrics read: every
    rollover's switch time, every cursor state written (none where nothing is stored: the memory ledger)."""
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 8)  # ledgers of 3, 3 and 2 entries: two rollovers
    base = ml if isinstance(ml, BaseManagedLedger) else None
    assert base is not None
    stats = base.add_stats
    stats.refresh()
    # (BookKeeper also counts the creation of the first ledger, as Pulsar does when it opens a managed ledger.)
    assert sum(stats.ledger_switch_latency_us.counts) in (2, 3)
    c.mark_delete(ps[3])
    await c.flush()
    if isinstance(ml, StoredManagedLedger):
        assert stats.mark_delete_ops >= 1
        written = base.cursor_stats["sub"]
        assert written.persist_ledger_succeed >= 1 and written.persist_ledger_errors == 0
        assert 0 < written.write_ledger_logical_size <= written.write_ledger_size
    else:
        assert stats.mark_delete_ops == 0 and not base.cursor_stats
    await ml.delete_cursor("sub")
    assert "sub" not in base.cursor_stats


@pytest.mark.parametrize("delete", [False, True])
async def test_an_open_while_the_ledger_closes_waits_and_gets_a_new_handle(factory: ManagedLedgerFactory,
                                                                           delete: bool) -> None:
    """A close (or delete) takes a while (cursors saved, adds finished); an open in the meantime must not
    get the handle being closed, on which every call then fails: it waits, and opens the ledger anew."""
    ml = await factory.open("t", SMALL_KEEP)
    ps = await add_all(ml, 3)
    ending = asyncio.ensure_future(ml.delete() if delete else ml.close())
    await asyncio.sleep(0)  # (the close has started: its state is set, its waits are not over)
    assert ml.is_closed
    again = await factory.open("t", SMALL_KEEP)
    assert ending.done()
    await ending
    assert again is not ml and not again.is_closed
    assert again.number_of_entries == (0 if delete else 3)
    assert (await again.add_entry_async(b"after")) > (Position(-1, -1) if delete else ps[-1])


@pytest.mark.parametrize("moved_first", [False, True])
async def test_a_write_of_a_cursor_being_deleted_leaves_no_stats_or_state(factory: ManagedLedgerFactory,
                                                                          moved_first: bool) -> None:
    """A cursor moved just before or while its deletion is under way: the state write that move asks for may
    end after the deletion, and neither brings the cursor back (its stats entry, read by /metrics, or its
    stored state)."""
    ml = await factory.open("t", SMALL_KEEP)
    c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 4)
    if moved_first:
        c.mark_delete(ps[0])
    deleting = asyncio.ensure_future(ml.delete_cursor("sub"))
    await asyncio.sleep(0)  # (the deletion is under way: its stored state is being removed)
    try:
        c.mark_delete(ps[1])
    except CursorClosedError:
        pass  # (where the deletion closes the cursor at once)
    await deleting
    base = ml if isinstance(ml, BaseManagedLedger) else None
    assert base is not None
    await ml.close()  # (every write asked for has ended)
    assert "sub" not in base.cursor_stats
    reopened = await factory.open("t", SMALL_KEEP)
    assert "sub" not in reopened.cursors
