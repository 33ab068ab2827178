"""The file ledger's free-space floor (managed_ledger/disk_space.py) and a full disk.

The guard is checked with a fake measurement and clock; the ledger with the fault-injecting file
system (ENOSPC at the os.write / fsync boundary). The real full file system is exercised end to
end in tests/reliability/test_disk_full.py.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from managed_ledger import ManagedLedgerError, Position, StorageUnavailableError
from managed_ledger.disk_space import DiskSpaceGuard, DiskSpacePolicy, DiskUsage, statvfs_usage
from managed_ledger.file import FileManagedLedgerFactory
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.ml_support import FakeClock
from tests.managed_ledger.test_file_ledger import read_all
from tests.waiting import eventually

MB = 1024 * 1024
TIMEOUT = 10.0
ROOT = "/data/ledgers"


class FakeDisk:
    """A file system of ``total`` bytes with ``used`` in use; counts measurements."""

    def __init__(self, total: int = 100 * MB, used: int = 0) -> None:
        self.total = total
        self.used = used
        self.measured = 0
        self.looked = 0  # clock readings: one per writable() call
        self.now = 0.0

    def measure(self, path: str) -> DiskUsage:
        self.measured += 1
        return DiskUsage(self.total, self.total - self.used)

    def clock(self) -> float:
        self.looked += 1
        return self.now


def guard(disk: FakeDisk, **policy: float) -> DiskSpaceGuard:
    return DiskSpaceGuard("/data", DiskSpacePolicy(**policy),  # type: ignore[arg-type]
                          measure=disk.measure, clock=disk.clock)


def test_refuses_at_the_threshold_and_takes_writes_again_below_the_low_water_mark() -> None:
    disk = FakeDisk(used=94 * MB)
    g = guard(disk)
    assert g.writable() and g.warning  # 94% is past the 90% warning
    disk.used, disk.now = 95 * MB, 1.0
    assert not g.writable()
    assert "95.0% full" in g.reason and "managedLedgerDiskUsageThreshold=0.95" in g.reason
    disk.used, disk.now = 92 * MB, 2.0  # below the threshold, above the low-water mark: still refused
    assert not g.writable()
    disk.used, disk.now = 89 * MB, 3.0
    assert g.writable() and g.reason == ""


def test_refuses_below_the_minimum_free_space_whatever_the_ratio() -> None:
    disk = FakeDisk(total=10 * MB, used=5 * MB)
    g = guard(disk, min_free_bytes=6 * MB)
    assert not g.writable()
    assert "managedLedgerMinFreeDiskSpaceMB=6" in g.reason
    disk.used, disk.now = 3 * MB, 1.0
    assert g.writable()


def test_measures_at_most_once_per_interval() -> None:
    disk = FakeDisk()
    g = guard(disk, check_interval_s=1.0)
    for _ in range(1000):
        assert g.writable()
    assert disk.measured == 1
    disk.used, disk.now = 99 * MB, 0.5  # full, but not looked at yet
    assert g.writable()
    disk.now = 1.0
    assert not g.writable()
    assert disk.measured == 2


def test_a_write_failing_for_space_refuses_until_a_check_finds_room() -> None:
    disk = FakeDisk(used=50 * MB)  # (the floor is off here: ENOSPC alone turns writes off)
    g = guard(disk, usage_threshold=1.0, check_interval_s=1.0)
    assert g.writable()
    g.write_failed(OSError(errno.EIO, "I/O error"))  # not about space: no change
    assert g.writable()
    cause = OSError(errno.ENOSPC, "No space left on device")
    wrapped = ManagedLedgerError("write failed")
    wrapped.__cause__ = cause
    g.write_failed(wrapped)
    assert not g.writable() and "No space left" in g.reason
    assert g.no_space_errors_total == 1
    disk.now = 1.0  # the next check finds room
    assert g.writable()


def test_statvfs_measures_a_real_directory(tmp_path: Path) -> None:
    usage = statvfs_usage(str(tmp_path))
    assert usage.total_bytes > 0 and 0 <= usage.free_bytes <= usage.total_bytes
    assert 0.0 <= usage.usage <= 1.0


# -- the file ledger under the floor, and on a full disk -----------------------------------------


def crash_factory(fs: CrashFileSystem, disk: FakeDisk | None = None, **policy: float) -> FileManagedLedgerFactory:
    fs.makedirs_durable("/data")
    factory = FileManagedLedgerFactory(ROOT, clock=FakeClock(), fs=fs, fault_retry_interval_s=0)
    if disk is not None:
        factory.disk = guard(disk, **{"check_interval_s": 1.0, "add_hold_s": 0.0, **policy})
    return factory


async def test_the_floor_refuses_adds_without_fencing_and_reads_and_acks_go_on() -> None:
    fs = CrashFileSystem()
    disk = FakeDisk(used=10 * MB)
    factory = crash_factory(fs, disk)
    ml = await factory.open("t")
    cursor = await ml.open_cursor("sub")
    stored = [await ml.add_entry_async(b"m%d" % i) for i in range(3)]
    disk.used, disk.now = 96 * MB, 1.0
    for _ in range(5):
        with pytest.raises(StorageUnavailableError, match=r"refuses new entries.*96\.0% full"):
            await ml.add_entry_async(b"refused")
    assert not ml.is_fenced
    assert factory.disk is not None and factory.disk.refused_total == 5
    assert [e.data for e in await read_all(ml)] == [b"m0", b"m1", b"m2"]
    entries = await cursor.read_entries_async(10)
    cursor.mark_delete(entries[-1].position)  # acknowledging needs no room for entries
    await cursor.flush()
    disk.used, disk.now = 50 * MB, 2.0
    position = await ml.add_entry_async(b"back")
    assert position > stored[-1]
    assert [e.data for e in await read_all(ml)] == [b"m0", b"m1", b"m2", b"back"]
    await factory.close()


async def test_enospc_on_write_turns_the_floor_on_and_the_ledger_heals_when_room_returns() -> None:
    fs = CrashFileSystem()
    disk = FakeDisk(used=10 * MB)
    factory = crash_factory(fs, disk)
    ml = await factory.open("t")
    cursor = await ml.open_cursor("sub")
    ok = [await ml.add_entry_async(b"ok%d" % i) for i in range(2)]
    fs.inject("write", errno.ENOSPC, count=None, path_part=".seg")
    with pytest.raises(ManagedLedgerError):
        await ml.add_entry_async(b"lost")
    assert factory.disk is not None and factory.disk.write_disabled
    with pytest.raises(StorageUnavailableError):  # refused at once, nothing queued
        await ml.add_entry_async(b"refused")
    # Acknowledgements are kept and their cursor file is written (cursor files are not .seg).
    entries = await cursor.read_entries_async(10)
    assert [e.data for e in entries] == [b"ok0", b"ok1"]
    cursor.mark_delete(entries[-1].position)
    await cursor.flush()
    fs.clear_faults()
    disk.now = 1.0  # the next check finds room: the ledger recovers on the next adds
    position: Position | None = None
    for _ in range(3):
        try:
            position = await ml.add_entry_async(b"back")
            break
        except StorageUnavailableError:
            await factory.writer.barrier()
    assert position is not None and position > ok[-1]
    assert [e.data for e in await read_all(ml)] == [b"ok0", b"ok1", b"back"]
    await factory.close()


async def test_a_ledger_opened_on_a_full_disk_is_readable_and_heals() -> None:
    fs = CrashFileSystem()
    factory = crash_factory(fs)
    ml = await factory.open("t")
    await ml.add_entry_async(b"kept")
    await factory.close()
    factory = crash_factory(fs, FakeDisk(used=10 * MB))
    fs.inject("create", errno.ENOSPC, count=None, path_part=".seg")
    ml = await factory.open("t")  # opens read-only instead of failing
    assert ml.is_fenced
    assert [e.data for e in await read_all(ml)] == [b"kept"]
    with pytest.raises(StorageUnavailableError):
        await ml.add_entry_async(b"refused")
    fs.clear_faults()
    assert factory.disk is not None
    factory.disk.check()
    for _ in range(3):
        try:
            await ml.add_entry_async(b"back")
            break
        except StorageUnavailableError:
            await factory.writer.barrier()
    assert [e.data for e in await read_all(ml)] == [b"kept", b"back"]
    await factory.close()


async def test_refused_adds_are_held_and_stored_in_order_when_room_returns_or_fail_after_the_hold() -> None:
    fs = CrashFileSystem()
    disk = FakeDisk(used=10 * MB)
    # (The hold timer runs on the loop's clock; the disk is looked at when the fake clock moves.)
    factory = crash_factory(fs, disk, check_interval_s=0.01, add_hold_s=60.0)
    ml = await factory.open("t")
    await ml.add_entry_async(b"before")
    disk.used, disk.now = 96 * MB, 1.0
    held = [asyncio.ensure_future(ml.add_entry_async(b"held%d" % i)) for i in range(3)]
    looked = disk.looked
    await eventually(lambda: disk.looked >= looked + 3, "three turns of the hold timer while still full")
    assert not any(f.done() for f in held)
    disk.used, disk.now = 50 * MB, 2.0
    positions = await asyncio.wait_for(asyncio.gather(*held), TIMEOUT)
    assert positions == sorted(positions)
    after = await ml.add_entry_async(b"after")
    assert after > positions[-1]
    assert [e.data for e in await read_all(ml)] == [b"before", b"held0", b"held1", b"held2", b"after"]

    assert factory.disk is not None
    factory.disk.policy = DiskSpacePolicy(check_interval_s=0.01, add_hold_s=0.05)
    disk.used, disk.now = 96 * MB, 3.0
    with pytest.raises(StorageUnavailableError, match="refuses new entries"):
        await asyncio.wait_for(ml.add_entry_async(b"too long"), TIMEOUT)
    closing = asyncio.ensure_future(ml.add_entry_async(b"closed"))
    await asyncio.sleep(0)
    await ml.close()
    with pytest.raises(ManagedLedgerError):
        await closing
    await factory.close()
