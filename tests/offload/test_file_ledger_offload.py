"""A file ledger's closed ledgers offloaded to the filesystem offloader: the copies, reads once the local copy is
deleted (before and after a restart), trimming, a failed copy tried again, refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import threading
from pathlib import Path
from uuid import UUID

import pytest

from managed_ledger import Entry, InitialPosition, ManagedLedgerConfig, ManagedLedgerError, OffloadPolicy, Position
from managed_ledger import segment as seg
from managed_ledger.file import FileManagedLedger, FileManagedLedgerFactory
from managed_ledger.offload.filesystem import FileSystemOffloader, OffloadWriter
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from tests.managed_ledger.ml_support import FakeClock
from tests.offload.support import FailingOffloader, copies
from tests.waiting import eventually

NAME = "public/default/persistent/tiered"
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=10, min_ledger_rollover_time_s=0, retention_time_s=-1,
                             retention_size_bytes=-1)


def factory(tmp_path: Path, clock: FakeClock, offloader: FileSystemOffloader | None = None,
            ) -> FileManagedLedgerFactory:
    return FileManagedLedgerFactory(str(tmp_path / "ledgers"), clock=clock, offloader=offloader,
                                    direct_io=False)


async def read_all(ml: FileManagedLedger) -> list[bytes]:
    reader = ml.new_non_durable_cursor(Position(-1, -1), "check")
    out: list[Entry] = []
    while batch := await reader.read_entries_async(7):
        out.extend(batch)
    await reader.close()
    return [e.data for e in out]


def segments(ml: FileManagedLedger) -> list[int]:
    return sorted(i for f in os.listdir(ml.directory) if (i := seg.ledger_id_of(f)) is not None)


async def test_offload_delete_locally_read_restart_trim(tmp_path: Path) -> None:
    clock, tier = FakeClock(), tmp_path / "tier"
    f = factory(tmp_path, clock, FileSystemOffloader(tier))
    ml = await f.open(NAME, CONFIG)
    data = [f"m{i}".encode() * (i % 5 + 1) for i in range(35)]
    for d in data:
        await ml.add_entry_async(d)
    ids = [i.ledger_id for i in ml.ledgers_info()]
    assert len(ids) == 4  # (10, 10, 10 and the current ledger's 5)
    assert await ml.offload_prefix(Position(ids[2], 3)) == Position(ids[2], 0)  # (not the ledger of the position)
    infos = ml.ledgers_info()
    assert [i.offloaded for i in infos] == [True, True, False, False]
    assert ml.offloaded_size == infos[0].size + infos[1].size
    assert [c.split("-")[0] for c in copies(tier, NAME)] == [str(ids[0]), str(ids[1])]
    assert await ml.offload_prefix(Position(ids[2], 3)) == Position(ids[2], 0)  # (nothing more: done already)
    assert len(copies(tier, NAME)) == 2

    assert await ml.delete_offloaded_locals(3600) == 0  # (completed just now: within the lag)
    clock.advance(3600)
    assert await ml.delete_offloaded_locals(3600) == 2
    await eventually(lambda: segments(ml) == ids[2:], "the local copies deleted")
    ml._reader.forget_all()  # (nothing from the cache: the reads go to the offloaded copies)
    assert await read_all(ml) == data
    assert (await ml.read_entry(Position(ids[1], 4))).data == data[14]
    await ml.close()
    await f.close()

    f = factory(tmp_path, clock, FileSystemOffloader(tier))  # a restart: the first two ledgers are offloaded only
    ml = await f.open(NAME, dataclasses.replace(CONFIG, retention_time_s=0, retention_size_bytes=0))
    assert [i.ledger_id for i in ml.ledgers_info()][:4] == ids and ml.ledgers_info()[0].offloaded
    assert await read_all(ml) == data
    cursor = await ml.open_cursor("s", InitialPosition.EARLIEST)
    cursor.mark_delete(Position(ids[1], 9))
    ml.trim_consumed_ledgers()  # (if moving the mark-delete did not trim already)
    # (a trimmed ledger's offloaded copy goes too)
    await eventually(lambda: copies(tier, NAME) == [], "the trimmed ledgers' copies deleted")
    assert [i.ledger_id for i in ml.ledgers_info()][:2] == ids[2:]
    await ml.close()
    await f.close()

    f = factory(tmp_path, clock, FileSystemOffloader(tier))
    ml = await f.open(NAME, CONFIG)
    assert not any(i.offloaded for i in ml.ledgers_info())
    await ml.close()
    await f.close()


async def test_without_an_offloader(tmp_path: Path) -> None:
    clock, tier = FakeClock(), tmp_path / "tier"
    f = factory(tmp_path, clock)
    ml = await f.open(NAME, CONFIG)
    for i in range(15):
        await ml.add_entry_async(b"x%d" % i)
    with pytest.raises(ManagedLedgerError, match="no offloader"):
        await ml.offload_prefix(ml.last_confirmed_entry)
    await ml.close()
    await f.close()
    f = factory(tmp_path, clock, FileSystemOffloader(tier))  # offloaded and deleted locally with one...
    ml = await f.open(NAME, CONFIG)
    first = ml.ledgers_info()[0].ledger_id
    await ml.offload_prefix(Position(ml.ledgers_info()[1].ledger_id, 0))
    assert await ml.delete_offloaded_locals(0) == 1
    await ml.close()
    await f.close()
    f = factory(tmp_path, clock)  # ...then read without one: a clear error
    ml = await f.open(NAME, CONFIG)
    with pytest.raises(ManagedLedgerError, match=f"ledger {first} .* no such offloader is configured"):
        await ml.read_entry(Position(first, 0))
    await ml.close()
    await f.close()


async def test_a_failed_copy_is_tried_again(tmp_path: Path) -> None:
    clock, tier = FakeClock(), tmp_path / "tier"
    offloader = FailingOffloader(tier)
    f = factory(tmp_path, clock, offloader)
    ml = await f.open(NAME, CONFIG)
    for i in range(25):
        await ml.add_entry_async(b"y%d" % i)
    ids = [i.ledger_id for i in ml.ledgers_info()]
    offloader.fail = frozenset({ids[0]})
    with pytest.raises(OSError, match="the tier went away"):
        await ml.offload_prefix(Position(ids[2], 0))
    # (As Pulsar's offloadLoop: the next ledger is copied all the same, then the first failure is the run's.)
    assert [i.offloaded for i in ml.ledgers_info()] == [False, True, False]
    assert len(copies(tier, NAME)) == 1
    await ml.close()
    await f.close()
    f = factory(tmp_path, clock, offloader)  # (the record of the failed copy survives a restart)
    ml = await f.open(NAME, CONFIG)
    offloader.fail = frozenset()
    assert await ml.offload_prefix(Position(ids[2], 0)) == Position(ids[2], 0)
    assert [i.offloaded for i in ml.ledgers_info()][:2] == [True, True]
    assert len(copies(tier, NAME)) == 2
    await ml.close()
    await f.close()


async def test_refusals(tmp_path: Path) -> None:
    f = factory(tmp_path, FakeClock(), FileSystemOffloader(tmp_path / "tier"))
    ml = await f.open(NAME, CONFIG)
    for _ in range(25):
        await ml.add_entry_async(b"z" * 1000)
    ids = [i.ledger_id for i in ml.ledgers_info()]
    with pytest.raises(ManagedLedgerError, match=f"Invalid position for offload: {ids[0]}:99"):
        await ml.offload_prefix(Position(ids[0], 99))
    running = asyncio.ensure_future(ml.offload_prefix(Position(ids[2], 0)))
    await asyncio.sleep(0)
    with pytest.raises(ManagedLedgerError, match="already running"):
        await ml.offload_prefix(Position(ids[2], 0))
    await running
    await ml.close()
    await f.close()



async def test_a_crash_between_the_record_and_the_segments_removal(tmp_path: Path) -> None:
    """The record says the local copy is deleted, the segment is still there (a crash in between): at the next open
    the segment goes and reads use the copy."""
    clock, tier = FakeClock(), tmp_path / "tier"
    f = factory(tmp_path, clock, FileSystemOffloader(tier))
    ml = await f.open(NAME, CONFIG)
    data = [b"c%d" % i for i in range(15)]
    for d in data:
        await ml.add_entry_async(d)
    first = ml.ledgers_info()[0].ledger_id
    await ml.offload_prefix(Position(ml.ledgers_info()[1].ledger_id, 0))
    ml._tier.records[first].local_deleted = True
    await ml._save_offloads()
    await ml.close()
    await f.close()
    f = factory(tmp_path, clock, FileSystemOffloader(tier))
    ml = await f.open(NAME, CONFIG)
    await eventually(lambda: first not in segments(ml), "the segment removed")
    assert await read_all(ml) == data
    await ml.close()
    await f.close()


async def test_offload_by_thresholds(tmp_path: Path) -> None:
    """Pulsar's automatic selection: newest first, a ledger not offloaded yet is chosen once the newer data passes
    the size threshold, or when it closed long enough ago."""
    clock, tier = FakeClock(), tmp_path / "tier"
    f = factory(tmp_path, clock, FileSystemOffloader(tier))
    ml = await f.open(NAME, CONFIG)
    for _ in range(35):
        await ml.add_entry_async(b"t" * 100)
    infos = ml.ledgers_info()
    assert await ml.offload_by_thresholds(-1, -1) == 0
    assert await ml.offload_by_thresholds(infos[2].size, -1) == 2  # (the newest closed ledger alone: not past it)
    assert [i.offloaded for i in ml.ledgers_info()] == [True, True, False, False]
    assert await ml.offload_by_thresholds(infos[2].size, -1) == 0  # (done already)
    clock.advance(100)
    assert await ml.offload_by_thresholds(-1, 101) == 0
    assert await ml.offload_by_thresholds(-1, 100) == 1  # (the current ledger never)
    assert [i.offloaded for i in ml.ledgers_info()] == [True, True, True, False]
    await ml.close()
    await f.close()


@pytest.mark.parametrize("tiered_first", [True, False], ids=["tiered-storage-first", "bookkeeper-first"])
async def test_the_read_priority(tmp_path: Path, tiered_first: bool) -> None:
    """With a complete copy and the local copy still there, reads go to the copy (Pulsar's default) or to the local
    copy: each is shown by taking the other away behind the ledger's back."""
    tier = tmp_path / "tier"
    f = factory(tmp_path, FakeClock(), FileSystemOffloader(tier))
    config = dataclasses.replace(CONFIG, offload=OffloadPolicy(read_tiered_first=tiered_first))
    ml = await f.open(NAME, config)
    data = [b"r%d" % i for i in range(25)]
    for d in data:
        await ml.add_entry_async(d)
    first = ml.ledgers_info()[0].ledger_id
    await ml.offload_prefix(Position(ml.ledgers_info()[1].ledger_id, 0))
    ml._reader.forget_all()  # (nothing from the cache)
    if tiered_first:
        os.remove(os.path.join(ml.directory, seg.file_name(first)))
    else:
        for name in copies(tier, NAME):
            shutil.rmtree(tier / NAME / name)
    assert await read_all(ml) == data
    await ml.close()
    await f.close()


async def test_automatic_offload_at_rollover_and_on_open(tmp_path: Path) -> None:
    """With thresholds in force, each ledger rollover offloads what they choose (Pulsar's ledgerClosed ->
    maybeOffloadInBackground), and with ``on_open`` so does opening (triggerOffloadOnTopicLoad)."""
    tier = tmp_path / "tier"
    f = factory(tmp_path, FakeClock(), FileSystemOffloader(tier))
    ml = await f.open(NAME, dataclasses.replace(CONFIG, offload=OffloadPolicy(threshold_bytes=0)))
    for i in range(25):
        await ml.add_entry_async(b"a%d" % i)
    await eventually(lambda: [i.offloaded for i in ml.ledgers_info()] == [True, True, False],
                     "the closed ledgers offloaded at their rollover")
    await ml.close()
    await f.close()

    f = factory(tmp_path / "other", FakeClock(), FileSystemOffloader(tmp_path / "other-tier"))
    ml = await f.open(NAME, CONFIG)  # (no thresholds: nothing offloaded)
    for i in range(25):
        await ml.add_entry_async(b"b%d" % i)
    assert not any(i.offloaded for i in ml.ledgers_info())
    await ml.close()
    ml = await f.open(NAME, dataclasses.replace(CONFIG, offload=OffloadPolicy(threshold_bytes=0, on_open=True)))
    await eventually(lambda: [i.offloaded for i in ml.ledgers_info()][:3] == [True, True, True],
                     "the closed ledgers offloaded when the managed ledger opened")
    await ml.close()
    await f.close()


async def test_a_rollover_during_an_admin_run_offloads_when_it_ends(tmp_path: Path) -> None:
    """A ledger closing while a run asked for by an admin holds the offload (Pulsar's offloadMutex) gets its automatic
    offload once that run ends (Pulsar tries again until the mutex is free), not only at the next rollover."""
    gate = threading.Event()

    class Gated(FileSystemOffloader):
        def begin(self, managed_ledger: str, ledger_id: int, uuid: UUID,
                  metadata: OffloadedLedgerMetadata) -> OffloadWriter:
            if not gate.wait(30):
                raise OSError("the test's gate was not opened")
            return super().begin(managed_ledger, ledger_id, uuid, metadata)

    f = factory(tmp_path, FakeClock(), Gated(tmp_path / "tier"))
    ml = await f.open(NAME, CONFIG)  # (no thresholds yet)
    for i in range(15):
        await ml.add_entry_async(b"a%d" % i)
    first = ml.ledgers_info()[0].ledger_id
    admin = asyncio.ensure_future(ml.offload_prefix(Position(ml.ledgers_info()[1].ledger_id, 0)))
    await eventually(lambda: ml._tier.running, "the admin's run under way")
    ml.update_config(dataclasses.replace(CONFIG, offload=OffloadPolicy(threshold_bytes=0)))
    for i in range(15, 25):  # (the second ledger closes: its automatic offload finds the admin's run)
        await ml.add_entry_async(b"a%d" % i)
    assert len(ml.ledgers_info()) == 3
    gate.set()
    await admin
    # (the run takes the ledger as its last one once the record is saved, after the copy shows as complete)
    await eventually(lambda: [i.offloaded for i in ml.ledgers_info()] == [True, True, False]
                     and ml.last_offload_ledger_id == ml.ledgers_info()[1].ledger_id,
                     "the second ledger offloaded after the admin's run")
    assert ml.last_offload_ledger_id != first
    await ml.close()
    await f.close()


async def test_deleting_a_managed_ledger_deletes_its_copies(tmp_path: Path) -> None:
    """Open (ManagedLedger.delete) or closed (the factory's delete by name): no offloaded copy is left behind."""
    tier = tmp_path / "tier"
    f = factory(tmp_path, FakeClock(), FileSystemOffloader(tier))
    for name, open_ in ((NAME, True), (NAME + "-closed", False)):
        ml = await f.open(name, CONFIG)
        for i in range(25):
            await ml.add_entry_async(b"d%d" % i)
        await ml.offload_prefix(Position(ml.ledgers_info()[2].ledger_id, 0))
        assert len(copies(tier, name)) == 2
        if open_:
            await ml.delete()
        else:
            await ml.close()
            await f.delete(name)
        assert copies(tier, name) == []
    await f.close()


async def test_copies_open_for_reads_are_closed_when_idle(tmp_path: Path) -> None:
    """Pulsar's managedLedgerInactiveOffloadedLedgerEvictionTimeSeconds: a copy read from is closed once idle that
    long (not while a read holds it), and read again later."""
    clock, tier = FakeClock(), tmp_path / "tier"
    f = factory(tmp_path, clock, FileSystemOffloader(tier))
    ml = await f.open(NAME, dataclasses.replace(CONFIG, offloaded_idle_s=600))
    data = [f"e{i}".encode() for i in range(25)]
    for d in data:
        await ml.add_entry_async(d)
    first = ml.ledgers_info()[0].ledger_id
    await ml.offload_prefix(Position(ml.ledgers_info()[2].ledger_id, 0))
    assert await ml.delete_offloaded_locals(0) == 2
    ml._reader.forget_all()
    assert (await ml.read_entry(Position(first, 3))).data == data[3]
    source = ml._tier.sources[first]
    assert source._ledger is not None and ml.release_idle_copies() == 0  # (just read)
    clock.advance(600)
    with source._lock:  # (a read under way keeps it)
        assert ml.release_idle_copies() == 0
    assert ml.release_idle_copies() == 1 and source._ledger is None
    assert (await ml.read_entry(Position(first, 4))).data == data[4]  # (opened again)
    assert source._ledger is not None
    await ml.close()
    await f.close()
