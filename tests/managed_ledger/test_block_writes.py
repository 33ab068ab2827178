"""Segments are written in whole blocks, the last one filled up with zeros, with direct I/O when
syncing (``writer``); a write that grows the file lays down zeros ahead of the records too. Closing a
segment cuts the zeros, and a segment left with zeros at its end (a
crash, a stop) reads as ending at its last record. Torn writes over the zeros are cut like any torn
tail. The power-cut suite (test_power_cut.py) runs on block writes too."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from managed_ledger import ManagedLedgerConfig, ManagedLedgerError, Position, StorageUnavailableError
from managed_ledger import segment as seg
from managed_ledger.file import FileManagedLedger, FileManagedLedgerFactory
from managed_ledger.fs import BLOCK, OsFileSystem
from managed_ledger.writer import PREALLOC_MAX
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.test_file_ledger import crash_factory, make, read_all

KEEP = ManagedLedgerConfig(retention_time_s=-1, retention_size_bytes=-1)
PAD = b"." * 1500  # entries over several blocks
RECORD = seg.RECORD_HEADER_SIZE + 2 + len(PAD)  # "m0".."m9" and the pad


def records_end(entries: int) -> int:
    return seg.HEADER_SIZE + entries * RECORD


def payloads(count: int) -> list[bytes]:
    return [f"m{i}".encode() + PAD for i in range(count)]


async def add_big(ml: FileManagedLedger, count: int) -> list[Position]:
    return [await ml.add_entry_async(p) for p in payloads(count)]


async def crash_ledger(count: int) -> tuple[CrashFileSystem, FileManagedLedgerFactory, FileManagedLedger, str]:
    """"t" on a CrashFileSystem with count entries in its first segment (and that segment's path)."""
    fs = CrashFileSystem(mode="drop")
    factory = crash_factory(fs)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, count)
    return fs, factory, ml, f"{ml.directory}/{seg.file_name(ps[0].ledger_id)}"


async def cut_power_and_reopen(fs: CrashFileSystem, factory: FileManagedLedgerFactory,
                               ) -> tuple[FileManagedLedgerFactory, FileManagedLedger]:
    """Power off, close everything (every write failing), power back on: the factory and "t" again."""
    fs.power_cut()
    await factory.close()
    fs.reboot()
    factory = crash_factory(fs)
    return factory, await factory.open("t", KEEP)


async def test_a_segment_is_written_in_whole_blocks_and_cut_to_its_last_record_when_it_closes(tmp_path: Path) -> None:
    factory = make(tmp_path)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, 10)
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    data = path.read_bytes()
    assert len(data) % BLOCK == 0 and len(data) >= records_end(10)  # whole blocks ...
    assert not data[records_end(10) :].strip(b"\0")  # ... and zeros after the records
    await factory.close()
    assert path.stat().st_size == records_end(10)
    factory = make(tmp_path)
    ml = await factory.open("t", KEEP)
    assert [e.data for e in await read_all(ml)] == payloads(10)
    assert factory.stats.corrupt_records_total == 0
    await factory.close()


async def test_a_write_that_grows_a_segment_leaves_zeros_ahead_so_the_next_appends_do_not_grow_it(
        tmp_path: Path) -> None:
    # An fdatasync that changes a file's size also commits the file system's journal; one that
    # overwrites zeros already in the file is the data and a cache flush (see "Zeros ahead").
    factory = make(tmp_path)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, 10)
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    size = path.stat().st_size
    last_block_end = -(-records_end(10) // BLOCK) * BLOCK
    assert size > last_block_end  # zeros beyond the last record's block
    assert size - last_block_end <= min(PREALLOC_MAX, last_block_end)  # as many as the records at most
    assert not path.read_bytes()[records_end(10) :].strip(b"\0")
    assert records_end(11) <= size
    await ml.add_entry_async(b"mA" + PAD)  # written over the zeros
    assert path.stat().st_size == size
    await factory.close()
    assert path.stat().st_size == records_end(11)  # closing cuts the zeros
    factory = make(tmp_path)
    ml = await factory.open("t", KEEP)
    assert [e.data for e in await read_all(ml)] == [*payloads(10), b"mA" + PAD]
    assert factory.stats.corrupt_records_total == 0
    await factory.close()


async def test_a_segment_keeps_no_zeros_ahead_without_syncs(tmp_path: Path) -> None:
    factory = make(tmp_path, sync=False)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, 10)
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    assert path.stat().st_size == -(-records_end(10) // BLOCK) * BLOCK
    await factory.close()


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="Linux only")
async def test_no_room_for_the_zeros_ahead_still_stores_the_records(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwritev
    refused = 0

    def full_for_zeros(fd: int, buffers: Any, offset: int, *flags: int) -> int:
        nonlocal refused
        if len(buffers) > 1:  # the records and the zeros ahead of them
            refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(real(fd, buffers, offset, *flags))

    factory = make(tmp_path)
    monkeypatch.setattr(os, "pwritev", full_for_zeros)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, 4)
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    assert refused and factory.stats.write_errors_total == 0
    assert path.stat().st_size == -(-records_end(4) // BLOCK) * BLOCK  # no zeros beyond the last block
    assert [e.data for e in await read_all(ml)] == payloads(4)
    await factory.close()


async def test_a_segment_left_with_zeros_reopens_with_every_entry_and_no_corruption() -> None:
    fs, factory, ml, path = await crash_ledger(10)
    assert len(fs.file_bytes(path)) > records_end(10)  # synced with every record confirmed: zeros after them
    factory, ml = await cut_power_and_reopen(fs, factory)
    assert [e.data for e in await read_all(ml)] == payloads(10)
    assert factory.stats.corrupt_records_total == 0 and factory.stats.truncated_bytes_total == 0
    assert len(fs.file_bytes(path)) == records_end(10)  # the zeros were cut
    await ml.add_entry_async(b"new")  # and the ledger goes on
    await factory.close()


async def test_a_record_written_over_the_zeros_but_never_synced_is_lost_cleanly() -> None:
    fs, factory, ml, path = await crash_ledger(3)
    assert records_end(3) // BLOCK == records_end(4) // BLOCK  # the 4th record goes over the zeros of a block
    fs.inject("sync", errno.EIO, count=None, path_part=".seg")  # the 4th record is written, never synced
    # What the file held when its sync failed (looked at then: the fenced ledger's recovery may cut
    # the record before the add's failure reaches this test).
    at_sync: list[bytes] = []
    check, segment_path = fs._check, path

    def look_then_check(op: str, path: str, mutating: bool) -> None:
        if op == "sync" and path == segment_path and not at_sync:
            at_sync.append(bytes(fs._inode(path).data))  # (the file system's lock is held: an RLock)
        check(op, path, mutating)

    fs._check = look_then_check  # type: ignore[method-assign]
    with pytest.raises(ManagedLedgerError):
        await ml.add_entry_async(b"m3" + PAD)
    assert at_sync[0][records_end(3) : records_end(4)].strip(b"\0")
    factory, ml = await cut_power_and_reopen(fs, factory)
    assert [e.data for e in await read_all(ml)] == payloads(3)
    assert factory.stats.corrupt_records_total == 0
    await factory.close()


def _segment_with(tail: bytes, entries: int = 4) -> bytes:
    data = [f"m{i}".encode() for i in range(entries)]
    return seg.encode_header(7, 0.0) + b"".join(seg.encode_records(data, [len(d) for d in data])) + tail


@pytest.mark.parametrize(("tail", "entries", "problem"), [
    (bytes(3000), 4, None),  # zeros to the end: a clean end
    (bytes(5), 4, None),  # fewer zeros than a record header
    (bytes(100) + b"\x01" + bytes(50), 4, "zeros at offset"),  # zeros, then something: torn
    (_segment_with(b"", 1)[seg.HEADER_SIZE : seg.HEADER_SIZE + 7] + bytes(400), 4, "checksum mismatch"),
])
def test_the_scan_ends_cleanly_at_zeros_and_cuts_anything_else(tmp_path: Path, tail: bytes, entries: int,
                                                                problem: str | None) -> None:
    path = tmp_path / seg.file_name(7)
    path.write_bytes(_segment_with(tail))
    handle = OsFileSystem().open_read(str(path))
    try:
        result = seg.scan(handle, 7)
    finally:
        handle.close()
    assert result is not None
    assert result.index.entries == entries
    assert result.valid_end == seg.HEADER_SIZE + entries * (seg.RECORD_HEADER_SIZE + 2)
    assert result.zero_tail == (problem is None)
    assert (result.problem is None) if problem is None else (problem in str(result.problem))


def _open_flags(path: Path) -> list[int]:
    """The flags of this process's open descriptors of path (from /proc/self/fdinfo)."""
    flags = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    flags.append(int(next(line for line in info if line.startswith("flags:")).split()[1], 8))
        except (OSError, StopIteration):
            continue
    return flags


@pytest.mark.skipif(not hasattr(os, "O_DIRECT") or not os.path.isdir("/proc/self/fdinfo"), reason="Linux only")
@pytest.mark.parametrize("direct_io", [True, False])
async def test_segments_are_written_with_direct_io_when_syncing(tmp_path: Path, direct_io: bool) -> None:
    factory = make(tmp_path, direct_io=direct_io)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, 3)
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    [flags] = _open_flags(path)  # the writer's descriptor (reads opened none yet)
    assert bool(flags & os.O_DIRECT) == direct_io
    assert [e.data for e in await read_all(ml)] == payloads(3)
    await factory.close()
    assert path.stat().st_size == records_end(3)


async def test_a_file_system_without_direct_io_is_written_through_the_page_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open
    direct_opens = 0

    def no_direct(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        nonlocal direct_opens
        if flags & getattr(os, "O_DIRECT", 0):
            direct_opens += 1
            fd = real_open(path, flags & ~os.O_DIRECT, mode, **kwargs)  # (made, as Linux does, then refused)
            os.close(fd)
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", no_direct)
    factory = make(tmp_path)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, 4)
    await factory.close()
    monkeypatch.undo()
    assert direct_opens == (1 if hasattr(os, "O_DIRECT") else 0)  # tried once, then not again
    factory = make(tmp_path)
    ml = await factory.open("t", KEEP)
    assert [e.data for e in await read_all(ml)] == payloads(4) and ps
    await factory.close()


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="Linux only")
async def test_a_direct_write_or_read_the_file_system_refuses_goes_on_through_the_page_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    refused: list[str] = []

    def refusing(real: Any, name: str) -> Any:
        def call(fd: int, *args: Any) -> Any:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:  # (opened with O_DIRECT, then refused)
                refused.append(name)
                raise OSError(errno.EINVAL, "Invalid argument")
            return real(fd, *args)
        return call

    monkeypatch.setattr(os, "pwritev", refusing(os.pwritev, "write"))
    monkeypatch.setattr(os, "preadv", refusing(os.preadv, "read"))
    factory = make(tmp_path, cache_size_bytes=0)  # (every read goes to the file)
    ml = await factory.open("t", KEEP)
    ps = await add_big(ml, 4)  # the first write is refused, then written through the page cache
    assert refused == ["write"] and factory.stats.write_errors_total == 0
    path = Path(ml.directory) / seg.file_name(ps[0].ledger_id)
    assert not any(flags & os.O_DIRECT for flags in _open_flags(path))
    assert [e.data for e in await read_all(ml)] == payloads(4)  # read without direct I/O from now on
    assert refused == ["write"]
    await factory.close()


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="Linux only")
def test_a_direct_read_the_file_system_refuses_is_read_again_through_the_page_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10_000)
    fs = OsFileSystem()
    handle = fs.open_read(str(path), direct=True)

    def refuse(fd: int, *args: Any) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "preadv", refuse)
    try:
        assert handle.pread(100, 5000) == b"x" * 100
    finally:
        handle.close()
    assert fs._no_direct  # the files opened next are not direct


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="Linux only")
async def test_a_short_direct_write_fails_like_a_full_disk_and_the_ledger_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    real = os.pwritev
    short = 1

    def short_once(fd: int, buffers: Any, offset: int, *flags: int) -> int:
        nonlocal short
        if short and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            short -= 1
            return real(fd, [memoryview(buffers[0])[:BLOCK]], offset) if len(buffers[0]) > BLOCK else 0
        return int(real(fd, buffers, offset, *flags))

    factory = make(tmp_path, fault_retry_interval_s=0)
    ml = await factory.open("t", KEEP)
    await add_big(ml, 2)
    monkeypatch.setattr(os, "pwritev", short_once)
    with pytest.raises(ManagedLedgerError, match="short direct write"):
        await ml.add_entry_async(b"m2" + PAD)
    assert factory.stats.write_errors_total == 1
    with pytest.raises(StorageUnavailableError):  # fails fast and starts the recovery (a cut, a new segment)
        await ml.add_entry_async(b"while fenced")
    await factory.writer.barrier()
    back = await ml.add_entry_async(b"back")
    assert [e.data for e in await read_all(ml)] == [*payloads(2), b"back"]
    await factory.close()
    factory = make(tmp_path)  # and after a restart: nothing torn, nothing unconfirmed
    ml = await factory.open("t", KEEP)
    assert [e.data for e in await read_all(ml)] == [*payloads(2), b"back"] and back.entry_id == 0
    assert factory.stats.corrupt_records_total == 0
    await factory.close()


BIG = b"x" * (2 * 1024 * 1024)  # more than the writer's first block buffer (1 MiB), under maxMessageSize


async def test_a_failed_write_leaves_the_block_buffer_growable_for_any_topic() -> None:
    # The failed write's traceback holds the writer's frames; the view of the block buffer they
    # passed must not stay exported, or growing the buffer for a big entry fails every topic's batch.
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t", KEEP)
    other = await factory.open("u", KEEP)
    await ml.add_entry_async(b"small")
    fs.inject("write", errno.EIO, count=1, path_part="/t/")
    with pytest.raises(ManagedLedgerError):
        await ml.add_entry_async(b"fails")
    await factory.writer.barrier()
    await other.add_entry_async(BIG)  # "u" never failed
    assert [e.data for e in await read_all(other)] == [BIG]
    await factory.close()


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="Linux only")
async def test_a_big_entry_after_a_failed_direct_write_is_stored(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwritev
    fail = 1

    def enospc_once(fd: int, buffers: Any, offset: int, *flags: int) -> int:
        nonlocal fail
        if fail:
            fail = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(real(fd, buffers, offset, *flags))

    factory = make(tmp_path, fault_retry_interval_s=0)
    ml = await factory.open("t", KEEP)
    await ml.add_entry_async(b"small")
    monkeypatch.setattr(os, "pwritev", enospc_once)
    with pytest.raises(ManagedLedgerError):
        await ml.add_entry_async(b"fails")
    await factory.writer.barrier()
    await ml.add_entry_async(b"back")
    await ml.add_entry_async(BIG)
    assert [e.data for e in await read_all(ml)] == [b"small", b"back", BIG]
    await factory.close()


@pytest.mark.parametrize(("blocks", "removed"), [(1, True), (3, True), (None, False)])
async def test_a_last_segment_with_a_zeroed_header_is_removed_only_when_it_is_all_zeros(
        blocks: int | None, removed: bool) -> None:
    # All zeros (created, or grown, before a crash, never written): nothing was confirmed in it,
    # removed. A zeroed header with records after it is damage: moved aside and counted, never
    # removed silently.
    fs, factory, ml, path = await crash_ledger(5)
    await factory.close()
    data = fs.file_bytes(path)
    fs.set_file_bytes(path, bytes(blocks * BLOCK) if blocks else bytes(seg.HEADER_SIZE) + data[seg.HEADER_SIZE:])
    factory = crash_factory(fs)
    ml = await factory.open("t", KEEP)
    assert await read_all(ml) == []
    assert not fs.exists(path)
    assert fs.exists(path + ".corrupt") is not removed
    assert factory.stats.corrupt_records_total == (0 if removed else 1)
    await factory.close()
