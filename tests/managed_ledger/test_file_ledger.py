"""The file ledger beyond the contract: restarts, corrupt segments, write errors, group commit,
the read cache and the read path's threading. The contract suite runs against it too."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from managed_ledger import (
    Entry,
    InitialPosition,
    ManagedLedgerConfig,
    ManagedLedgerError,
    Position,
    StorageUnavailableError,
)
from managed_ledger import segment as seg
from managed_ledger.file import FileManagedLedger, FileManagedLedgerFactory
from managed_ledger.file_layout import encode_name
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.ml_support import FakeClock, TailReads
from tests.waiting import eventually

TIMEOUT = 10.0
SMALL_KEEP = ManagedLedgerConfig(max_entries_per_ledger=3, min_ledger_rollover_time_s=0, retention_time_s=-1,
                                 retention_size_bytes=-1)
ROOT = "/data/ledgers"


def make(root: Path | str, clock: FakeClock | None = None, **kwargs: object) -> FileManagedLedgerFactory:
    return FileManagedLedgerFactory(str(root), clock=clock or FakeClock(), **kwargs)  # type: ignore[arg-type]


def crash_factory(fs: CrashFileSystem, **kwargs: object) -> FileManagedLedgerFactory:
    fs.makedirs_durable("/data")
    kwargs.setdefault("fault_retry_interval_s", 0)
    return FileManagedLedgerFactory(ROOT, clock=FakeClock(), fs=fs, **kwargs)  # type: ignore[arg-type]


def segment_files(ml: FileManagedLedger) -> list[str]:
    return sorted(f for f in os.listdir(ml.directory) if f.endswith(seg.SUFFIX))


async def add_all(ml: FileManagedLedger, count: int, prefix: str = "m") -> list[Position]:
    return [await ml.add_entry_async(f"{prefix}{i}".encode()) for i in range(count)]


async def read_all(ml: FileManagedLedger) -> list[Entry]:
    reader = ml.new_non_durable_cursor(Position(-1, -1), "check")
    out: list[Entry] = []
    while batch := await reader.read_entries_async(100):
        out.extend(batch)
    await reader.close()
    return out


def ml_threads(factory: FileManagedLedgerFactory) -> list[threading.Thread]:
    """The factory's threads that are alive."""
    threads = [factory.writer._thread, *factory.pool._threads]
    return [t for t in threads if t is not None and t.is_alive()]


# -- restarts -----------------------------------------------------------------------------------


async def test_data_and_cursors_survive_a_restart(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("public/default/persistent/t", SMALL_KEEP)
    sub = await ml.open_cursor("sub", InitialPosition.EARLIEST, properties={"p": 1})
    ml.new_non_durable_cursor(Position(-1, -1), "reader")
    ps = await add_all(ml, 8)
    sub.mark_delete(ps[1], {"p": 2})
    sub.delete([ps[3], ps[6]])
    threads = ml_threads(factory)
    await factory.close()
    assert threads and not any(t.is_alive() for t in threads)  # close() joined the writer and the pool

    again_factory = make(tmp_path)
    assert again_factory.list_names() == ["public/default/persistent/t"]
    again = await again_factory.open("public/default/persistent/t", SMALL_KEEP)
    assert again.last_confirmed_entry == ps[-1]
    assert [e.data for e in await read_all(again)] == [f"m{i}".encode() for i in range(8)]
    assert set(again.cursors) == {"sub"}  # the reader was never stored
    restored = again.cursors["sub"]
    assert restored.mark_delete_position == ps[1]
    assert list(restored.individually_deleted) == [(ps[3], ps[3]), (ps[6], ps[6])]
    assert dict(restored.properties) == {"p": 2}
    # exactly the unacknowledged entries are delivered again
    assert [e.position for e in await restored.read_entries_async(10)] == [ps[2], ps[4], ps[5], ps[7]]
    # positions keep growing across the restart: a new ledger with a higher id
    new = await again.add_entry_async(b"after")
    assert new.ledger_id > ps[-1].ledger_id and new.entry_id == 0
    await again_factory.close()


async def test_unflushed_acks_are_redelivered_after_a_crash_flushed_ones_are_not() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs, cursor_persist_interval_s=3600)
    ml = await factory.open("t", SMALL_KEEP)
    sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 6)
    sub.mark_delete(ps[1])
    await sub.flush()  # durable: m0, m1 acknowledged
    sub.mark_delete(ps[3])  # not flushed (the persist interval is an hour)
    fs.power_cut()
    await factory.close()  # everything fails now; close must still finish
    fs.reboot()

    factory = crash_factory(fs)
    ml = await factory.open("t", SMALL_KEEP)
    assert ml.cursors["sub"].mark_delete_position == ps[1]
    assert [e.data for e in await ml.cursors["sub"].read_entries_async(10)] == [b"m2", b"m3", b"m4", b"m5"]
    await factory.close()


async def test_a_created_ledger_survives_a_power_cut() -> None:
    """``create`` is durable when it returns (a partitioned topic's partitions exist from its creation on): the
    directory's name, and a hashed name's "name" file, are synced; nothing else is written for it."""
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    names = ["parted-partition-0", "x" * 400]
    assert await asyncio.gather(*(factory.create(n) for n in names)) == [True, True]
    fs.power_cut()
    await factory.close()
    fs.reboot()
    factory = crash_factory(fs)
    assert factory.list_names() == sorted(names)
    for name in names:
        ml = await factory.open(name)
        assert ml.number_of_entries == 0
        await ml.add_entry_async(b"first")
    await factory.close()


async def test_hot_acks_are_coalesced_into_one_cursor_write(tmp_path: Path) -> None:
    factory = make(tmp_path, cursor_persist_interval_s=0)  # the timer fires on the next loop turn
    ml = await factory.open("t")
    sub = await ml.open_cursor("sub")
    ps = await add_all(ml, 3)
    writes = factory.stats.cursor_persists_total
    for p in ps:
        sub.delete([p])  # three acks in one go: one write of the latest state
    assert await _persisted_writes(factory) - writes == 1
    await factory.close()
    factory = make(tmp_path)
    assert (await factory.open("t")).cursors["sub"].mark_delete_position == ps[-1]
    await factory.close()


async def _persisted_writes(factory: FileManagedLedgerFactory) -> int:
    """Cursor writes completed once every write due now has started and the writer has done all it was given.

    A write due now is a ``call_later(0)`` timer. asyncio's loop (the tests') moves a due timer to its ready
    callbacks after those already queued, so after one ``sleep(0)`` this coroutine runs before the timer and its
    barrier could reach the writer ahead of the write (then the count missed it, when the writer thread took the
    barrier alone); after a second turn the write has been handed to the writer. No timed wait."""
    for _ in range(2):
        await asyncio.sleep(0)
    await factory.writer.barrier()
    return factory.stats.cursor_persists_total


async def test_cursor_writes_have_a_leading_edge_and_skip_the_rate_on_save_now_and_reset(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 6)
    await factory.close()

    factory = make(tmp_path, cursor_persist_interval_s=3600)  # one write an hour, but...
    ml = await factory.open("t")
    sub = ml.cursors["sub"]
    writes = await _persisted_writes(factory)
    sub.mark_delete(ps[0])
    sub.mark_delete(ps[1])
    assert await _persisted_writes(factory) == writes + 1  # ...the first change after a quiet hour goes at once
    sub.mark_delete(ps[2])
    assert await _persisted_writes(factory) == writes + 1  # the next ones wait for the rate
    sub.save_now()  # (a consumer closed)
    assert await _persisted_writes(factory) == writes + 2
    sub.save_now()  # nothing new: nothing written
    assert await _persisted_writes(factory) == writes + 2
    sub.reset(ps[4])  # a seek writes at once
    assert await _persisted_writes(factory) == writes + 3
    await factory.close()
    factory = make(tmp_path)
    assert (await factory.open("t")).cursors["sub"].mark_delete_position == ps[3]
    await factory.close()


async def test_a_change_within_the_rate_is_written_at_its_end(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    await ml.open_cursor("sub", InitialPosition.EARLIEST)
    ps = await add_all(ml, 3)
    await factory.close()

    factory = make(tmp_path, cursor_persist_interval_s=0.05)
    ml = await factory.open("t")
    sub = ml.cursors["sub"]
    writes = await _persisted_writes(factory)
    sub.mark_delete(ps[0])
    sub.mark_delete(ps[1])  # (the same loop turn: shares the leading write)
    await eventually(lambda: factory.stats.cursor_persists_total == writes + 1, "the leading write")
    sub.mark_delete(ps[2])
    await eventually(lambda: factory.stats.cursor_persists_total == writes + 2, "the trailing write")
    fresh = make(tmp_path)  # what a crash now would find: the last change is on disk (all acked)
    assert (await fresh.open("t")).cursors["sub"].number_of_entries_in_backlog() == 0
    await fresh.close()
    await factory.close()


async def test_ledger_ids_never_go_back(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    first = await ml.add_entry_async(b"x")
    await ml.delete()
    ml = await factory.open("t")  # recreated: still higher ids, like Pulsar's global ledger ids
    second = await ml.add_entry_async(b"y")
    assert second.ledger_id > first.ledger_id
    await factory.close()
    (tmp_path / "ledger-ids").unlink()  # even without the counter file
    factory = make(tmp_path)
    ml = await factory.open("t")
    assert (await ml.add_entry_async(b"z")).ledger_id > second.ledger_id
    await factory.close()


def _names_with_name_file(root: Path, names: list[str]) -> list[str]:
    ml_dir = next(root.rglob(encode_name(names[0]))).parent
    return sorted(n for n in names if (ml_dir / encode_name(n) / "name").exists())


def _make_ledger_directory(root: Path, name: str) -> None:
    ml_dir = next(p for p in root.rglob("*") if p.is_dir() and p.name == "ml")
    (ml_dir / encode_name(name) / "cursors").mkdir(parents=True)


async def test_names_are_encoded_safely(tmp_path: Path) -> None:
    factory = make(tmp_path)
    names = ["a/b/../c", ".hidden", "x" * 400, "üñí/çødé", "%2F"]
    for name in names:
        await (await factory.open(name)).add_entry_async(name.encode()[:10])
    await factory.close()
    assert all("/" not in encode_name(n) and not encode_name(n).startswith(".") for n in names)
    # Only the hashed (too long) name needs a file inside its directory to tell the real name.
    assert _names_with_name_file(tmp_path, names) == ["x" * 400]
    _make_ledger_directory(tmp_path, "created-then-crashed")  # a crash before its first segment
    factory = make(tmp_path)
    assert "created-then-crashed" in factory.list_names()
    assert await read_all(await factory.open("created-then-crashed")) == []
    await factory.delete("created-then-crashed")
    assert factory.list_names() == sorted(names)
    for name in names:
        assert [e.data for e in await read_all(await factory.open(name))] == [name.encode()[:10]]
    await factory.delete(names[0])
    assert names[0] not in factory.list_names()
    await factory.close()


# -- damaged segments ---------------------------------------------------------------------------


async def _write_closed_segment(tmp_path: Path, count: int) -> tuple[Path, list[Position]]:
    """A ledger of count entries "m0".."m{count-1}", the factory closed; returns its file."""
    factory = make(tmp_path)
    ml = await factory.open("t", ManagedLedgerConfig(retention_time_s=-1, retention_size_bytes=-1))
    ps = await add_all(ml, count)
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    await factory.close()
    return path, ps


@pytest.mark.parametrize("cut", ["mid-record", "half", "header-only", "empty"])
async def test_truncated_segment_keeps_the_intact_prefix(tmp_path: Path, cut: str) -> None:
    path, ps = await _write_closed_segment(tmp_path, 10)
    data = path.read_bytes()
    record = seg.RECORD_HEADER_SIZE + 2  # "m0".."m9" are 2 bytes
    keep = {
        "mid-record": seg.HEADER_SIZE + 6 * record + 5,  # 6 whole records and a torn 7th
        "half": len(data) // 2,
        "header-only": seg.HEADER_SIZE,
        "empty": 0,
    }[cut]
    path.write_bytes(data[:keep])
    factory = make(tmp_path)
    ml = await factory.open("t")
    intact = max(0, (keep - seg.HEADER_SIZE) // record) if keep >= seg.HEADER_SIZE else 0
    assert [e.data for e in await read_all(ml)] == [f"m{i}".encode() for i in range(intact)]
    # (An empty last segment looks like one created just before a crash and never written, whose
    # header was not yet synced: removed without counting. See the next test.)
    torn = keep != seg.HEADER_SIZE + intact * record and keep > 0
    assert factory.stats.corrupt_records_total == (1 if torn else 0)
    if intact:
        assert ml.last_confirmed_entry == ps[intact - 1]
        assert path.stat().st_size == seg.HEADER_SIZE + intact * record  # the torn tail was cut
    await factory.close()


@pytest.mark.parametrize("where", ["length", "crc", "data"])
async def test_bit_flip_cuts_from_the_bad_record(tmp_path: Path, where: str) -> None:
    path, ps = await _write_closed_segment(tmp_path, 10)
    data = bytearray(path.read_bytes())
    record = seg.RECORD_HEADER_SIZE + 2
    offset = seg.HEADER_SIZE + 4 * record + {"length": 3, "crc": 5, "data": 9}[where]
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))
    factory = make(tmp_path)
    ml = await factory.open("t")
    assert [e.data for e in await read_all(ml)] == [b"m0", b"m1", b"m2", b"m3"]
    assert factory.stats.corrupt_records_total == 1
    assert factory.stats.truncated_bytes_total == 6 * record
    # the cut is permanent and the ledger goes on: new entries after the survivors
    p = await ml.add_entry_async(b"new")
    assert p > ps[3]
    await factory.close()
    factory = make(tmp_path)
    ml = await factory.open("t")
    assert [e.data for e in await read_all(ml)] == [b"m0", b"m1", b"m2", b"m3", b"new"]
    assert factory.stats.corrupt_records_total == 0
    await factory.close()


async def test_a_short_segment_counts_as_corrupt_unless_it_is_the_last(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t", SMALL_KEEP)
    ps = await add_all(ml, 9)  # three ledgers of three entries, and a fourth, empty, current one
    directory = Path(ml.directory)
    files = segment_files(ml)
    await factory.close()
    assert len(files) == 4
    (directory / files[-1]).write_bytes(b"")  # created, header never synced, power cut: nothing lost
    factory = make(tmp_path)
    ml = await factory.open("t", SMALL_KEEP)
    assert len(await read_all(ml)) == 9
    assert factory.stats.corrupt_records_total == 0
    await factory.close()
    (directory / seg.file_name(ps[0].ledger_id)).write_bytes(b"")  # a closed ledger's entries lost
    factory = make(tmp_path)
    ml = await factory.open("t", SMALL_KEEP)
    assert [e.data for e in await read_all(ml)] == [f"m{i}".encode() for i in range(3, 9)]
    assert factory.stats.corrupt_records_total == 1
    await factory.close()


async def test_corrupt_record_in_an_older_ledger_cuts_only_that_ledger(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t", SMALL_KEEP)
    ps = await add_all(ml, 9)  # three ledgers of three entries
    directory = ml.directory
    await factory.close()
    middle = Path(directory) / seg.file_name(ps[3].ledger_id)
    data = bytearray(middle.read_bytes())
    data[seg.HEADER_SIZE + (seg.RECORD_HEADER_SIZE + 2) + 9] ^= 4  # entry 1 of the middle ledger
    middle.write_bytes(bytes(data))
    factory = make(tmp_path)
    ml = await factory.open("t", SMALL_KEEP)
    assert [e.data for e in await read_all(ml)] == [b"m0", b"m1", b"m2", b"m3", b"m6", b"m7", b"m8"]
    assert factory.stats.corrupt_records_total == 1
    await factory.close()


async def test_retention_time_counts_from_before_the_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_s=0, retention_time_s=3600,
                                 retention_size_bytes=-1)
    factory = make(tmp_path, clock)
    ml = await factory.open("t", config)
    sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await add_all(ml, 2)  # ledger 1, closed now
    clock.advance(1800)
    await add_all(ml, 2)  # ledger 2, closed 30 minutes later
    sub.clear_backlog()
    await factory.close()
    clock.advance(1801)  # ledger 1 is now past the hour, ledger 2 is not
    factory = make(tmp_path, clock)
    ml = await factory.open("t", config)
    assert ml.trim_consumed_ledgers() == 1
    assert [i.entries for i in ml.ledgers_info()] == [2, 0]
    clock.advance(1800)  # ledger 2 was closed (ledger 3 created) before the restart, not at it
    assert ml.trim_consumed_ledgers() == 1
    await factory.close()


async def test_damaged_header_is_moved_aside(tmp_path: Path) -> None:
    path, _ = await _write_closed_segment(tmp_path, 3)
    data = bytearray(path.read_bytes())
    data[2] ^= 1
    path.write_bytes(bytes(data))
    factory = make(tmp_path)
    ml = await factory.open("t")
    assert await read_all(ml) == []
    assert factory.stats.corrupt_records_total == 1
    assert factory.fs.exists(str(path) + ".corrupt")
    await factory.close()


async def test_corruption_found_by_a_read_is_never_served(tmp_path: Path) -> None:
    factory = make(tmp_path, cache_size_bytes=0)  # every read goes to disk
    ml = await factory.open("t")
    ps = await add_all(ml, 5)
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    data = bytearray(path.read_bytes())
    data[seg.HEADER_SIZE + 2 * (seg.RECORD_HEADER_SIZE + 2) + 9] ^= 1  # m2's data
    path.write_bytes(bytes(data))
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    assert [e.data for e in await cursor.read_entries_async(2)] == [b"m0", b"m1"]
    with pytest.raises(ManagedLedgerError, match="checksum"):
        await cursor.read_entries_async(2)
    assert cursor.read_position == ps[2]  # the failed read gave its positions back
    with pytest.raises(ManagedLedgerError):
        await ml.read_entry(ps[2])
    assert factory.stats.read_errors_total == 2 and factory.stats.corrupt_records_total >= 1
    await factory.close()


async def test_damaged_cursor_file_redelivers_everything(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    sub = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    await add_all(ml, 4)
    sub.clear_backlog()
    await factory.close()
    cursor_file = Path(ml.directory) / "cursors" / "sub.cur"
    cursor_file.write_bytes(cursor_file.read_bytes()[:-3])
    factory = make(tmp_path)
    ml = await factory.open("t")
    assert ml.cursors["sub"].number_of_entries_in_backlog() == 4  # at-least-once, never a skip
    assert factory.stats.corrupt_records_total == 1
    await factory.close()


# -- open files ---------------------------------------------------------------------------------


def open_segment_files(root: Path) -> int:
    fds = os.listdir("/proc/self/fd")
    names = []
    for fd in fds:
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return sum(1 for n in names if n.startswith(str(root)) and n.endswith(seg.SUFFIX))


async def test_segment_files_beyond_the_limit_are_closed_and_reopened(tmp_path: Path) -> None:
    factory = make(tmp_path, max_open_files=2)
    ledgers = [await factory.open(f"t{i}") for i in range(5)]
    for r in range(3):
        for i, ml in enumerate(ledgers):
            await ml.add_entry_async(b"%d-%d" % (i, r))
    await factory.writer.barrier()
    assert open_segment_files(tmp_path) <= 2
    assert factory.stats.segment_reopens_total >= 5
    for i, ml in enumerate(ledgers):
        assert [e.data for e in await read_all(ml)] == [b"%d-%d" % (i, r) for r in range(3)]
    await factory.close()
    assert open_segment_files(tmp_path) == 0
    factory = make(tmp_path)
    for i in range(5):
        ml = await factory.open(f"t{i}")
        assert [e.data for e in await read_all(ml)] == [b"%d-%d" % (i, r) for r in range(3)]
    await factory.close()


async def test_a_reopen_that_fails_fences_only_its_ledger() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs, max_open_files=1)
    a, b = await factory.open("a"), await factory.open("b")
    await a.add_entry_async(b"a0")
    await b.add_entry_async(b"b0")  # a's segment file is closed now
    fs.inject("open", errno.EMFILE, count=1, path_part="/a/")
    with pytest.raises(ManagedLedgerError):
        await a.add_entry_async(b"a1")
    assert a.is_fenced and not b.is_fenced
    await b.add_entry_async(b"b1")
    await factory.close()
    fs.power_cut()
    fs.reboot()
    factory = crash_factory(fs)
    assert [e.data for e in await read_all(await factory.open("a"))] == [b"a0"]
    assert [e.data for e in await read_all(await factory.open("b"))] == [b"b0", b"b1"]
    await factory.close()


async def test_a_batch_over_many_topics_syncs_them_together_and_settles_each_alone() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ledgers = [await factory.open(f"t{i}") for i in range(8)]
    for ml in ledgers:
        await ml.add_entry_async(b"before")
    # Hold the writer so that one add per ledger lands in the same batch; one ledger's sync fails.
    gate = threading.Event()
    def hold() -> None:
        gate.wait(TIMEOUT)

    factory.writer.run(hold)
    fs.inject("sync", errno.EIO, count=1, path_part="/t3/")
    adds = [asyncio.ensure_future(ml.add_entry_async(b"in the batch")) for ml in ledgers]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*adds, return_exceptions=True)
    assert factory.writer._sync_pool is not None  # synced on the sync threads
    assert isinstance(results[3], ManagedLedgerError)  # (t3 then recovers: the fault was one-off)
    assert all(isinstance(r, Position) for i, r in enumerate(results) if i != 3)
    assert not any(ml.is_fenced for i, ml in enumerate(ledgers) if i != 3)
    await factory.close()
    fs.power_cut()
    fs.reboot()
    factory = crash_factory(fs)
    for i in range(8):
        expected = [b"before"] if i == 3 else [b"before", b"in the batch"]
        assert [e.data for e in await read_all(await factory.open(f"t{i}"))] == expected
    await factory.close()


# -- write errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "code"), [("write", errno.ENOSPC), ("sync", errno.EIO)])
async def test_write_error_fences_then_recovers_when_the_fault_clears(op: str, code: int) -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    ok = await add_all(ml, 3, "ok")
    fs.inject(op, code, count=None, path_part=".seg")  # the disk stays broken
    futures = [asyncio.ensure_future(ml.add_entry_async(b"doomed%d" % i)) for i in range(5)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, ManagedLedgerError) for r in results)
    assert ml.is_fenced
    assert factory.stats.write_errors_total >= 1
    with pytest.raises(StorageUnavailableError):  # fails fast
        await ml.add_entry_async(b"while broken")
    assert ml.last_confirmed_entry == ok[-1]
    assert ml.number_of_entries == 3  # the failed adds were forgotten

    fs.clear_faults()
    # An add while fenced fails fast and starts a recovery (one at a time; one may still be
    # failing from before the fault cleared); once one succeeds, adds go to a new ledger.
    for _ in range(3):
        try:
            p = await ml.add_entry_async(b"back")
            break
        except StorageUnavailableError:
            await factory.writer.barrier()  # the recovery submitted by that add has completed
    else:
        pytest.fail("the ledger did not recover")
    assert not ml.is_fenced
    assert p.ledger_id > ok[-1].ledger_id
    assert [e.data for e in await read_all(ml)] == [b"ok0", b"ok1", b"ok2", b"back"]
    await factory.close()

    fs.power_cut()  # nothing unconfirmed may come back after a restart either
    fs.reboot()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    assert [e.data for e in await read_all(ml)] == [b"ok0", b"ok1", b"ok2", b"back"]
    await factory.close()


async def test_write_error_fails_pending_adds_in_order_and_never_confirms_after_a_failure() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    await ml.add_entry_async(b"first")
    order: list[tuple[int, bool]] = []
    done = asyncio.Event()
    fs.inject("sync", errno.EIO, count=1, path_part=".seg")

    def callback(i: int) -> Callable[[Position | None, BaseException | None], None]:
        def cb(position: Position | None, exc: BaseException | None) -> None:
            order.append((i, exc is None))
            if len(order) == 20:
                done.set()
        return cb

    for i in range(20):
        ml.add_entry(b"x%d" % i, callback(i))
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert [i for i, _ in order] == list(range(20))
    assert not any(ok for _, ok in order)
    await factory.close()


async def test_recovery_after_error_on_reopen() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    await add_all(ml, 2)
    fs.inject("write", errno.ENOSPC, count=None, path_part=".seg")
    with pytest.raises(ManagedLedgerError):
        await ml.add_entry_async(b"lost")
    await factory.close()
    fs.clear_faults()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    assert [e.data for e in await read_all(ml)] == [b"m0", b"m1"]
    assert not ml.is_fenced
    await ml.add_entry_async(b"m2")
    await factory.close()


# -- group commit -------------------------------------------------------------------------------


async def test_concurrent_adds_share_fsyncs(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    count = 2000
    positions = await asyncio.gather(*(ml.add_entry_async(b"%d" % i) for i in range(count)))
    assert positions == sorted(positions) and len(set(positions)) == count
    syncs = factory.stats.fsync_latency.count
    assert 1 <= syncs < count / 10  # many entries per fsync
    assert factory.stats.entries_written_total == count
    await factory.close()


async def test_heavy_stream_waits_to_share_one_sync(tmp_path: Path) -> None:
    # A wait far longer than the test's timeout: only reaching the byte threshold ends it.
    factory = make(tmp_path, group_wait_s=60, group_bytes=64 * 1024)
    ml = await factory.open("t")
    await ml.add_entry_async(b"h" * 10_000)  # a batch of >= 1/8 of the threshold: heavy traffic
    syncs = factory.stats.fsync_latency.count
    small = asyncio.ensure_future(ml.add_entry_async(b"s"))
    await eventually(lambda: factory.writer._gathering, "the writer to gather the next batch")
    assert not small.done()
    big = asyncio.ensure_future(ml.add_entry_async(b"b" * 70_000))  # crosses the threshold
    first, second = await asyncio.wait_for(asyncio.gather(small, big), TIMEOUT)
    assert (first.entry_id, second.entry_id) == (1, 2)
    assert factory.stats.fsync_latency.count == syncs + 1  # both in one sync
    await factory.close()


async def test_a_steady_stream_of_small_batches_is_grouped_until_it_slows_down(tmp_path: Path) -> None:
    """A batch of group_min_bytes (far below an eighth of group_bytes: a batching client's 8 KB
    SEND) makes the writer gather the next one; a gathered batch smaller than that ends the
    grouping, so the stream's next add is written at once."""
    factory = make(tmp_path, group_wait_s=60, group_bytes=512 * 1024, group_min_bytes=4096)
    ml = await factory.open("t")
    await ml.add_entry_async(b"h" * 5000)
    syncs = factory.stats.fsync_latency.count
    small = asyncio.ensure_future(ml.add_entry_async(b"s"))
    await eventually(lambda: factory.writer._gathering, "the writer to gather the next batch")
    assert not small.done()
    await asyncio.wait_for(factory.writer.barrier(), TIMEOUT)  # any other operation ends a wait
    assert (await small).entry_id == 1
    assert factory.stats.fsync_latency.count == syncs + 1
    # That batch carried 1 byte: the stream has slowed down, its next add does not wait 60 s.
    assert (await asyncio.wait_for(ml.add_entry_async(b"t"), TIMEOUT)).entry_id == 2
    await factory.close()


async def test_light_traffic_never_waits_for_a_group(tmp_path: Path) -> None:
    factory = make(tmp_path, group_wait_s=60, group_bytes=64 * 1024)
    ml = await factory.open("t")
    for i in range(20):  # each would take 60 s if it waited
        await asyncio.wait_for(ml.add_entry_async(b"%d" % i), TIMEOUT)
    assert factory.stats.fsync_latency.count >= 20
    await factory.close()


async def test_closing_ends_a_group_wait_and_keeps_its_entries(tmp_path: Path) -> None:
    factory = make(tmp_path, group_wait_s=60, group_bytes=64 * 1024)
    ml = await factory.open("t")
    await ml.add_entry_async(b"h" * 10_000)
    small = asyncio.ensure_future(ml.add_entry_async(b"last"))
    await eventually(lambda: factory.writer._gathering, "the writer to gather the next batch")
    await asyncio.wait_for(factory.close(), TIMEOUT)
    assert (await small).entry_id == 1
    factory = make(tmp_path)
    assert [e.data for e in await read_all(await factory.open("t"))][-1] == b"last"
    await factory.close()


async def test_sync_off_never_fsyncs_appends(tmp_path: Path) -> None:
    factory = make(tmp_path, sync=False)
    ml = await factory.open("t")
    await add_all(ml, 20)
    assert factory.stats.fsync_latency.count == 0
    await factory.close()
    factory = make(tmp_path)
    assert len(await read_all(await factory.open("t"))) == 20
    await factory.close()


async def test_adds_confirmed_together_wake_a_waiting_reader_once(tmp_path: Path) -> None:
    """Adds made durable in one writer round go to each cursor waiting at the tail in one read (one
    MESSAGE write per consumer), not in one read per add; the read completes on the next loop turn
    after the adds' completions, with no timer (the new-entries check delay stays 0)."""
    factory = make(tmp_path)
    ml = await factory.open("t")
    tail = TailReads([await ml.open_cursor(f"c{i}", InitialPosition.LATEST) for i in range(3)])
    gate = threading.Event()

    def hold() -> None:  # holds the writer: the adds below queue behind it and go as one round
        gate.wait(TIMEOUT)

    factory.writer.run(hold)
    tail.add(ml, 5)
    gate.set()
    await eventually(tail.all_read, "every waiting cursor read")
    tail.check_one_read_each_after_the_receipts(5)
    await factory.close()


# -- reading ------------------------------------------------------------------------------------


async def test_read_position_moves_when_the_read_is_issued(tmp_path: Path) -> None:
    factory = make(tmp_path, cache_size_bytes=0)  # every read is a disk read on the pool
    ml = await factory.open("t")
    ps = await add_all(ml, 6)
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    got: list[list[Entry]] = []
    done = asyncio.Event()

    def on_read(entries: list[Entry], exc: BaseException | None) -> None:
        assert exc is None
        got.append(entries)
        done.set()

    cursor.read_entries(3, on_read)
    assert cursor.read_position == ps[3]  # moved at once, the data is still on its way
    cursor.rewind()  # a dispatcher redelivering while the read is in flight
    assert cursor.read_position == ps[0]
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert [e.data for e in got[0]] == [b"m0", b"m1", b"m2"]
    assert cursor.read_position == ps[0]  # the completion did not undo the rewind
    assert factory.stats.cache_misses_total == 3
    await factory.close()


async def test_disk_and_cache_reads_complete_in_issue_order(tmp_path: Path) -> None:
    factory = make(tmp_path, cache_size_bytes=5_000)  # room for about 30 of the 60
    ml = await factory.open("t")
    ps = await add_all(ml, 60)  # older entries fall out of the small cache
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    order: list[str] = []
    done = asyncio.Event()
    cursor.read_entries(1, lambda es, e: order.append(f"disk {es[0].data!r}"))
    cursor.seek(ps[-1])

    def cached(es: list[Entry], e: BaseException | None) -> None:
        order.append(f"cache {es[0].data!r}")
        done.set()

    cursor.read_entries(1, cached)
    assert order == []  # the cached read queues behind the disk read of the same cursor
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert order == ["disk b'm0'", "cache b'm59'"]
    await factory.close()


async def test_chained_disk_reads_do_not_nest(tmp_path: Path) -> None:
    factory = make(tmp_path, cache_size_bytes=0)
    ml = await factory.open("t")
    await asyncio.gather(*(ml.add_entry_async(b"%d" % i) for i in range(300)))
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    depths: list[int] = []
    seen: list[bytes] = []
    done = asyncio.Event()

    def on_read(entries: list[Entry], exc: BaseException | None) -> None:
        assert exc is None
        seen.extend(e.data for e in entries)
        if entries:
            depths.append(factory.nesting.depth)
            cursor.read_entries(7, on_read)
        else:
            done.set()

    cursor.read_entries(7, on_read)
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert seen == [b"%d" % i for i in range(300)]
    assert max(depths) == 1  # each disk completion starts from the loop, not from a stack
    await factory.close()


async def test_memory_stays_bounded_reading_a_backlog_much_larger_than_the_cache(tmp_path: Path) -> None:
    cache = 256 * 1024
    factory = make(tmp_path, cache_size_bytes=cache, sync=False)
    ml = await factory.open("t", ManagedLedgerConfig(max_entries_per_ledger=500, min_ledger_rollover_time_s=0))
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    payload = os.urandom(8 * 1024)
    backlog = 3000  # 24 MiB: about 100 times the cache
    for _ in range(backlog // 500):
        await asyncio.gather(*(ml.add_entry_async(payload) for _i in range(500)))
    assert factory.cache.size <= cache
    tracemalloc.start()
    try:
        read = 0
        while batch := await cursor.read_entries_async(50):
            read += len(batch)
            assert factory.cache.size <= cache
            cursor.mark_delete(batch[-1].position)  # consumed ledgers get trimmed as we go
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read == backlog
    # cache + one batch in flight (50 x 8 KiB) + bookkeeping; nowhere near the 24 MiB backlog
    assert peak < 4 * 1024 * 1024, peak
    assert len(ml.ledgers_info()) <= 2
    await factory.close()


async def test_close_joins_every_thread(tmp_path: Path) -> None:
    factory = make(tmp_path, cache_size_bytes=0)
    ml = await factory.open("t")
    await add_all(ml, 3)
    await ml.read_entry(Position(ml.current_ledger_id, 0))
    threads = ml_threads(factory)
    assert len(threads) >= 2
    await factory.close()
    assert not any(t.is_alive() for t in threads)


async def test_adds_are_cached_only_while_the_ledger_has_cursors(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    await add_all(ml, 5)  # publish-only: nobody to read it soon
    assert len(factory.cache) == 0
    cursor = ml.new_non_durable_cursor(ml.last_confirmed_entry, "tail")
    ps = await add_all(ml, 3)
    assert len(factory.cache) == 3
    assert [e.data for e in await cursor.read_entries_async(10)] == [b"m0", b"m1", b"m2"]
    assert factory.stats.cache_misses_total == 0 and ps[-1] == ml.last_confirmed_entry
    reader = ml.new_non_durable_cursor(Position(-1, -1), "from-start")  # the first five come from disk
    assert len(await reader.read_entries_async(10)) == 8
    assert factory.stats.cache_misses_total == 5
    await factory.close()


async def test_cached_entries_leave_once_every_cursor_has_read_them(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    fast = await ml.open_cursor("fast", InitialPosition.LATEST)
    slow = await ml.open_cursor("slow", InitialPosition.LATEST)
    await add_all(ml, 10)
    assert len(factory.cache) == 10
    assert len(await fast.read_entries_async(10)) == 10
    assert len(await slow.read_entries_async(4)) == 4
    await eventually(lambda: len(factory.cache) == 6, "the four entries both cursors read to leave")
    assert len(await slow.read_entries_async(10)) == 6
    assert factory.stats.cache_misses_total == 0  # the slow cursor still found its entries cached
    await eventually(lambda: len(factory.cache) == 0, "the rest to leave")
    await factory.close()


async def test_a_failing_writer_operation_fails_its_batch_and_the_writer_goes_on(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    outcome: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

    def broken() -> None:
        raise ZeroDivisionError("a bug in a writer task")

    factory.writer.run(broken, outcome.set_result)
    assert isinstance(await asyncio.wait_for(outcome, TIMEOUT), ZeroDivisionError)
    assert (await asyncio.wait_for(ml.add_entry_async(b"after"), TIMEOUT)).entry_id == 0
    await factory.close()


async def test_a_segment_closed_before_its_first_entry_keeps_a_durable_header() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t")  # its first segment: header written, not yet synced, nor its name
    await ml.open_cursor("sub")  # (the cursor's file makes the names above it durable, the segment's too)
    directory = ml.directory
    await factory.close()  # closing syncs the header
    fs.power_cut()
    fs.reboot()
    [name] = [f for f in fs.listdir(directory) if f.endswith(seg.SUFFIX)]
    data = fs.read_file(f"{directory}/{name}")
    # (The header's block was synced with zeros after it; the cut back to the header, at close, was not.)
    assert seg.decode_header(data) is not None and not data[seg.HEADER_SIZE :].strip(b"\0")


async def test_only_active_cursors_keep_entries_cached(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    reading = await ml.open_cursor("reading", InitialPosition.LATEST)
    idle = await ml.open_cursor("idle", InitialPosition.LATEST)
    await add_all(ml, 4)
    assert len(await reading.read_entries_async(10)) == 4
    idle.set_active(False)  # the slowest reader no longer counts
    await eventually(lambda: len(factory.cache) == 0, "the entries only the idle cursor still needed to leave")
    reading.set_active(False)
    await add_all(ml, 2, "n")  # no active cursor: adds are not cached
    assert len(factory.cache) == 0
    idle.set_active(True)
    assert [e.data for e in await idle.read_entries_async(10)] == [b"m0", b"m1", b"m2", b"m3", b"n0", b"n1"]
    await factory.close()


# -- reads served from the page cache on the loop -------------------------------------------------


async def test_reads_of_entries_in_the_page_cache_are_served_on_the_loop(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Every read misses the broker's cache; segments written through the page cache (not direct I/O).
    factory = make(tmp_path, cache_size_bytes=0, page_cache_reads=True, direct_io=False)
    ml = await factory.open("t")
    await add_all(ml, 20)  # just written: in the OS page cache
    submitted: list[object] = []
    real_submit = factory.pool.submit
    def submit(*args: Any, **kwargs: Any) -> Any:
        submitted.append(args)
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(factory.pool, "submit", submit)
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    data = [e.data for e in await cursor.read_entries_async(7)] + [e.data for e in await cursor.read_entries_async(13)]
    assert data == [b"m%d" % i for i in range(20)]
    if factory.stats.page_cache_reads_total == 0:  # (a file system without RWF_NOWAIT: the worker path)
        pytest.skip("preadv(RWF_NOWAIT) is not supported here")
    assert factory.stats.page_cache_reads_total == 2 and not submitted  # no worker thread involved
    await factory.close()


async def test_page_cache_reads_are_off_by_default(tmp_path: Path) -> None:
    factory = make(tmp_path, cache_size_bytes=0)
    ml = await factory.open("t")
    await add_all(ml, 5)
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    assert [e.data for e in await cursor.read_entries_async(5)] == [b"m%d" % i for i in range(5)]
    assert factory.stats.page_cache_reads_total == 0
    await factory.close()


async def test_a_read_that_would_wait_for_the_disk_goes_to_a_worker_and_keeps_its_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    factory = make(tmp_path, cache_size_bytes=0, page_cache_reads=True, direct_io=False)
    ml = await factory.open("t")
    await add_all(ml, 10)
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    from managed_ledger import file_reads

    real = file_reads.read_from_page_cache
    calls = 0

    def first_misses(fs: object, jobs: list[file_reads.ReadJob]) -> list[list[bytes]] | None:
        nonlocal calls
        calls += 1
        return None if calls == 1 else real(fs, jobs)  # type: ignore[arg-type]

    monkeypatch.setattr(file_reads, "read_from_page_cache", first_misses)
    done: list[str] = []
    first = asyncio.ensure_future(cursor.read_entries_async(4))  # goes to a worker thread
    first.add_done_callback(lambda _: done.append("first"))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(cursor.read_entries_async(6))  # served on the loop, completes after
    second.add_done_callback(lambda _: done.append("second"))
    assert [e.data for e in await second] == [b"m%d" % i for i in range(4, 10)]
    assert [e.data for e in await first] == [b"m%d" % i for i in range(4)]
    assert done == ["first", "second"] and calls == 2
    await factory.close()


# -- read-ahead after a miss ------------------------------------------------------------------------


def count_submits(factory: FileManagedLedgerFactory, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    submitted: list[object] = []
    real_submit = factory.pool.submit

    def submit(*args: Any, **kwargs: Any) -> Any:
        submitted.append(args)
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(factory.pool, "submit", submit)
    return submitted


async def test_a_sequential_read_that_misses_reads_ahead_into_the_cache(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    await add_all(ml, 30)  # no active cursor: nothing of it is cached
    assert len(factory.cache) == 0
    submitted = count_submits(factory, monkeypatch)
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    data = [e.data for e in await cursor.read_entries_async(3)]
    assert len(submitted) == 1 and factory.stats.read_ahead_entries_total == 27
    while len(data) < 30:  # the rest: cache hits, no worker thread
        data += [e.data for e in await cursor.read_entries_async(4)]
    assert data == [b"m%d" % i for i in range(30)] and len(submitted) == 1
    await factory.close()


async def test_a_backlogged_cursor_keeps_what_it_read_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An inactive (backlogged) cursor reads from storage, but the entries its read brought in
    ahead of it stay cached until it has read them: the eviction after each read (every reader
    active or not past them) used to drop them, so every read went to the disk again."""
    factory = make(tmp_path)
    ml = await factory.open("t")
    await add_all(ml, 30)
    submitted = count_submits(factory, monkeypatch)
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    cursor.set_active(False)
    data = [e.data for e in await cursor.read_entries_async(3)]
    while len(data) < 30:
        ml._evict_read_entries()  # (what the timer after each read does)
        assert len(factory.cache) == 30 - len(data)  # only what it has read is gone
        data += [e.data for e in await cursor.read_entries_async(4)]
    assert data == [b"m%d" % i for i in range(30)] and len(submitted) == 1
    ml._evict_read_entries()  # past its read-ahead: nothing of it is kept any more
    assert len(factory.cache) == 0
    await factory.close()


async def test_read_ahead_stops_at_its_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from managed_ledger import file_reads
    monkeypatch.setattr(file_reads, "READ_AHEAD_ENTRIES", 5)
    factory = make(tmp_path)
    ml = await factory.open("t")
    await add_all(ml, 20)
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    assert len(await cursor.read_entries_async(2)) == 2
    assert factory.stats.read_ahead_entries_total == 5  # entries 2-6
    assert len(await cursor.read_entries_async(10)) == 10  # 2-6 cached; 7-11 missed, 12-16 read ahead
    assert factory.stats.read_ahead_entries_total == 10
    # Never past the last confirmed entry, and the byte bound keeps at least one entry.
    assert ml._following(Position(ml.last_confirmed_entry.ledger_id, 18), 100, 1 << 20) == [
        Position(ml.last_confirmed_entry.ledger_id, 19)]
    assert ml._following(ml.last_confirmed_entry, 100, 1 << 20) == []
    assert len(ml._following(Position(ml.last_confirmed_entry.ledger_id, 0), 100, 1)) == 1
    await factory.close()


async def test_replays_do_not_read_ahead(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t")
    positions = await add_all(ml, 10)
    cursor = ml.new_non_durable_cursor(Position(-1, -1), "r")
    done: asyncio.Future[list[Entry]] = asyncio.get_running_loop().create_future()
    cursor.replay_entries([positions[2]], lambda es, exc: done.set_result(es))
    assert [e.data for e in await done] == [b"m2"]
    assert factory.stats.read_ahead_entries_total == 0 and len(factory.cache) == 1
    await factory.close()


# -- a subscription's creation or removal that fails on the disk ------------------------------------


async def test_a_subscription_whose_creation_failed_does_not_come_back() -> None:
    # Its file was renamed into place, then the sync of cursors/ failed: the file is removed, or the
    # next cursor write's sync of cursors/ would make it durable and bring the subscription back.
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t", SMALL_KEEP)
    keep = await ml.open_cursor("keep", InitialPosition.EARLIEST)
    await ml.add_entry_async(b"x")
    fs.inject("fsync_dir", errno.EIO, count=1, path_part="cursors")
    with pytest.raises(ManagedLedgerError):
        await ml.open_cursor("ghost", InitialPosition.EARLIEST)
    assert "ghost" not in ml.cursors
    keep.mark_delete(ml.last_confirmed_entry)
    await keep.flush()  # another cursor's write syncs cursors/
    fs.power_cut()
    await factory.close()
    fs.reboot()
    factory = crash_factory(fs)
    ml = await factory.open("t", SMALL_KEEP)
    assert set(ml.cursors) == {"keep"}
    await factory.close()


async def test_an_unsubscribe_whose_removal_failed_leaves_the_subscription_and_can_be_retried() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t", SMALL_KEEP)
    gone = await ml.open_cursor("gone", InitialPosition.EARLIEST)
    p = await ml.add_entry_async(b"x")
    fs.inject("unlink", errno.EIO, count=1, path_part="cursors")
    with pytest.raises(ManagedLedgerError, match="injected: unlink"):
        await ml.delete_cursor("gone")
    assert ml.cursors["gone"] is gone  # still there, and still saved
    gone.mark_delete(p)
    await gone.flush()
    await ml.delete_cursor("gone")  # the retry removes it
    assert "gone" not in ml.cursors
    await factory.close()
    factory = crash_factory(fs)
    ml = await factory.open("t", SMALL_KEEP)
    assert "gone" not in ml.cursors
    await factory.close()


# -- adds that fail while the ledger closes, and batches that fail as a whole ------------------------


async def test_an_add_failing_while_the_ledger_closes_does_not_come_back() -> None:
    # The close starts before the add's failure reaches the loop: it waits for it, then cuts the
    # failed record (released at once, the writer kept it and a restart found it).
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    await ml.add_entry_async(b"first")
    fs.inject("sync", errno.EIO, count=1, path_part=".seg")
    outcome: list[BaseException | None] = []
    ml.add_entry(b"doomed", lambda position, exc: outcome.append(exc))
    await ml.close()
    await factory.close()
    assert len(outcome) == 1 and outcome[0] is not None
    factory = crash_factory(fs)
    ml = await factory.open("t")
    assert [e.data for e in await read_all(ml)] == [b"first"]
    await factory.close()


async def test_after_a_batch_fails_as_a_whole_no_later_add_of_its_ledger_is_confirmed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A failure that is no OSError (a bug, MemoryError) fences the batch's ledgers as a failed write
    # does: the add queued behind the failed one fails too, instead of being confirmed and then cut
    # off by the recovery.
    from managed_ledger import writer as writer_module

    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    await ml.add_entry_async(b"first")
    entered, proceed = threading.Event(), threading.Event()
    armed = True
    real = writer_module.GroupCommitWriter._write_blocks

    def write_blocks(self: Any, segment: Any, handle: Any, parts: Any, nbytes: int) -> None:
        nonlocal armed
        if armed and nbytes > 0:
            armed = False
            entered.set()
            proceed.wait(10)
            raise MemoryError("cannot allocate")
        real(self, segment, handle, parts, nbytes)

    monkeypatch.setattr(writer_module.GroupCommitWriter, "_write_blocks", write_blocks)
    outcomes: list[tuple[str, bool]] = []
    ml.add_entry(b"a1", lambda position, exc: outcomes.append(("a1", exc is None)))
    await asyncio.to_thread(entered.wait, 10)
    ml.add_entry(b"a2", lambda position, exc: outcomes.append(("a2", exc is None)))  # queued behind it
    proceed.set()
    await eventually(lambda: len(outcomes) == 2, "both adds answered")
    assert outcomes == [("a1", False), ("a2", False)]
    await factory.writer.barrier()
    await factory.close()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    assert [e.data for e in await read_all(ml)] == [b"first"]
    await factory.close()
