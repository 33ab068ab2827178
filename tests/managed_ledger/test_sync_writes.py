"""Writes that sync themselves ("Writes that sync" in managed_ledger/writer.py): where the writer
would sync a segment right after writing it, the write carries RWF_DSYNC (``pwrite_parts(...,
sync=True)``) instead of being followed by an fdatasync; only when everything before it in the
segment is durable already; and buffered files, or kernels without the flag, write then sync."""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path
from typing import Any

import pytest

from managed_ledger import ManagedLedgerConfig, ManagedLedgerError
from managed_ledger.fs import BLOCK, OsFileSystem
from managed_ledger.stats import FileLedgerStats
from managed_ledger.writer import GroupCommitWriter, _Segment
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.test_file_ledger import crash_factory, make, read_all

KEEP = ManagedLedgerConfig(retention_time_s=-1, retention_size_bytes=-1)
RWF_DSYNC: int | None = getattr(os, "RWF_DSYNC", None)
linux_dsync = pytest.mark.skipif(RWF_DSYNC is None or not hasattr(os, "O_DIRECT"),
                                 reason="pwritev2 with RWF_DSYNC and O_DIRECT: Linux only")
# Small group thresholds: a 5,000-byte add is a heavy batch (nothing but appends, one segment), a
# 1,000-byte one a light batch that makes a grouped stream.
GROUPED: dict[str, Any] = {"group_bytes": 4096, "group_min_bytes": 512, "group_wait_s": 0.05}


class _Calls:
    """os.pwritev and os.fdatasync, recorded: the flags of each write, the number of fdatasyncs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, refuse_flags: int | None = None) -> None:
        self.write_flags: list[int] = []
        self.fdatasyncs = 0
        real_pwritev, real_fdatasync = os.pwritev, os.fdatasync

        def pwritev(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
            self.write_flags.append(flags)
            if flags and refuse_flags is not None:
                raise OSError(refuse_flags, os.strerror(refuse_flags))
            return int(real_pwritev(fd, buffers, offset, flags))

        def fdatasync(fd: int) -> None:
            self.fdatasyncs += 1
            real_fdatasync(fd)

        monkeypatch.setattr(os, "pwritev", pwritev)
        monkeypatch.setattr(os, "fdatasync", fdatasync)

    @property
    def dsync_writes(self) -> int:
        return sum(1 for f in self.write_flags if f == RWF_DSYNC)


def _aligned(data: bytes) -> memoryview:
    """data in a page-aligned buffer (direct writes refuse others)."""
    buf = mmap.mmap(-1, len(data))
    buf[:] = data
    return memoryview(buf)


def _direct_io(tmp_path: Path) -> bool:
    try:
        os.close(os.open(tmp_path / "probe", os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644))
    except OSError:
        return False
    finally:
        (tmp_path / "probe").unlink(missing_ok=True)
    return True


@linux_dsync
def test_a_direct_write_that_syncs_is_one_write_with_rwf_dsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _direct_io(tmp_path):
        pytest.skip("no direct I/O on this file system")
    handle = OsFileSystem().open_append(str(tmp_path / "f"), create=True, direct=True)
    calls = _Calls(monkeypatch)
    try:
        handle.pwrite_parts([_aligned(b"a" * BLOCK), _aligned(bytes(BLOCK))], 0, sync=True)
        handle.pwrite_parts([_aligned(b"b" * BLOCK)], BLOCK, sync=False)
    finally:
        handle.close()
    assert calls.write_flags == [RWF_DSYNC, 0] and calls.fdatasyncs == 0
    assert (tmp_path / "f").read_bytes() == b"a" * BLOCK + b"b" * BLOCK


@linux_dsync
@pytest.mark.parametrize("refused", [errno.EOPNOTSUPP, errno.ENOSYS])
def test_without_rwf_dsync_a_write_that_syncs_is_a_write_then_an_fdatasync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: int) -> None:
    if not _direct_io(tmp_path):
        pytest.skip("no direct I/O on this file system")
    fs = OsFileSystem()
    handle = fs.open_append(str(tmp_path / "f"), create=True, direct=True)
    calls = _Calls(monkeypatch, refuse_flags=refused)
    try:
        handle.pwrite_parts([_aligned(b"a" * BLOCK)], 0, sync=True)
        handle.pwrite_parts([_aligned(b"b" * BLOCK)], BLOCK, sync=True)
    finally:
        handle.close()
    # Refused once (the kernel does not know the flag): written without it and synced, and the next
    # write does not try the flag again.
    assert calls.write_flags == [RWF_DSYNC, 0, 0] and calls.fdatasyncs == 2 and fs._no_dsync
    assert (tmp_path / "f").read_bytes() == b"a" * BLOCK + b"b" * BLOCK


def test_a_buffered_write_that_syncs_is_a_write_then_an_fdatasync(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # (RWF_DSYNC on a buffered write writes back only its own range of the page cache: not used.)
    handle = OsFileSystem().open_append(str(tmp_path / "f"), create=True, direct=False)
    calls = _Calls(monkeypatch)
    try:
        handle.pwrite_parts([b"abc"], 0, sync=True)
    finally:
        handle.close()
    assert calls.write_flags == [0] and calls.fdatasyncs == 1
    assert (tmp_path / "f").read_bytes() == b"abc"


@linux_dsync
def test_a_failed_write_that_syncs_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _direct_io(tmp_path):
        pytest.skip("no direct I/O on this file system")
    handle = OsFileSystem().open_append(str(tmp_path / "f"), create=True, direct=True)
    _Calls(monkeypatch, refuse_flags=errno.EIO)  # (as a sync that fails in the write would)
    try:
        with pytest.raises(OSError) as raised:
            handle.pwrite_parts([_aligned(b"a" * BLOCK)], 0, sync=True)
    finally:
        handle.close()
    assert raised.value.errno == errno.EIO


@linux_dsync
async def test_heavy_batches_and_grouped_rounds_sync_in_their_writes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if not _direct_io(tmp_path):
        pytest.skip("no direct I/O on this file system")
    factory = make(tmp_path, **GROUPED)
    ml = await factory.open("t", KEEP)
    await ml.add_entry_async(b"warm-up")  # (a new topic's first add syncs its names too: a round of its own)
    calls = _Calls(monkeypatch)
    await ml.add_entry_async(b"h" * 5000)  # a heavy batch, one segment
    await ml.add_entry_async(b"g" * 1000)  # a light batch of a grouped stream
    await ml.add_entry_async(b"g" * 1000)
    assert calls.dsync_writes == 3 and calls.fdatasyncs == 0
    await ml.add_entry_async(b"light")  # a light batch that is not grouped: its sync goes to a sync thread
    assert calls.write_flags[-1] == 0 and calls.fdatasyncs == 1
    monkeypatch.undo()
    await factory.close()
    factory = make(tmp_path)
    ml = await factory.open("t", KEEP)
    assert [e.data for e in await read_all(ml)] == [b"warm-up", b"h" * 5000, b"g" * 1000, b"g" * 1000, b"light"]
    await factory.close()


async def test_entries_confirmed_by_writes_that_synced_survive_a_power_cut() -> None:
    # CrashFileSystem keeps only a synced write's own bytes (a device with FUA): the writer must not
    # lean on such a write for anything written before it. A new segment's header (written with its
    # create, not synced) is rewritten by the first append's write, so it survives too.
    fs = CrashFileSystem(mode="drop")
    factory = crash_factory(fs, **GROUPED)
    ml = await factory.open("t", KEEP)
    entries = [b"h" * 5000, b"g" * 1000, b"g" * 1000, b"x" * 9000]
    for data in entries:
        await ml.add_entry_async(data)
    syncs_before_cut = fs.syncs
    fs.power_cut()
    await factory.close()
    fs.reboot()
    assert syncs_before_cut
    factory = crash_factory(fs)
    ml = await factory.open("t", KEEP)
    assert [e.data for e in await read_all(ml)] == entries
    await factory.close()


async def test_a_write_that_fails_to_sync_fails_its_adds_and_the_ledger_recovers() -> None:
    fs = CrashFileSystem(mode="drop")
    factory = crash_factory(fs, **GROUPED)
    ml = await factory.open("t", KEEP)
    await ml.add_entry_async(b"first")
    fs.inject("sync", errno.EIO)  # the sync in the heavy batch's write
    with pytest.raises(ManagedLedgerError):
        await ml.add_entry_async(b"h" * 5000)
    await factory.writer.barrier()
    await ml.add_entry_async(b"back")
    assert [e.data for e in await read_all(ml)] == [b"first", b"back"]
    fs.power_cut()
    await factory.close()
    fs.reboot()
    factory = crash_factory(fs)
    ml = await factory.open("t", KEEP)
    assert [e.data for e in await read_all(ml)] == [b"first", b"back"]
    await factory.close()


class _FlagHandle:
    def __init__(self) -> None:
        self.syncs: list[bool] = []

    def pwrite_parts(self, parts: Any, offset: int, *, sync: bool = False) -> None:
        self.syncs.append(sync)


@pytest.mark.parametrize(("synced", "expected"), [(BLOCK, True), (BLOCK - 1, False)])
def test_a_write_syncs_itself_only_when_everything_before_it_is_durable(synced: int, expected: bool) -> None:
    # The write starts at the segment's last partial block (BLOCK here): bytes before it that are not
    # known durable would need a sync of their own, so the write does not sync, and the sync after it
    # (the caller's, as before) covers both.
    writer = GroupCommitWriter(CrashFileSystem(), FileLedgerStats())
    segment = _Segment("/s", None, None, written=BLOCK + 10, synced=synced, size=2 * BLOCK, tail=b"t" * 10)
    handle = _FlagHandle()
    writer._write_blocks(segment, handle, [b"new"], 3, sync=True)  # type: ignore[arg-type]
    assert handle.syncs == [expected]
    assert (segment.synced_write is not None) is expected and segment.written == BLOCK + 13
