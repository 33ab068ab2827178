"""Tiered storage on BookKeeper storage, on real bookies.

A managed ledger whose ledger a Pulsar broker offloaded (the filesystem offloader's copy, the ledger's OffloadContext
complete with its BookKeeper copy deleted, as Pulsar leaves them): the context is kept when ours rewrites the ledger
list, the ledger is read from its copy, and without the offloader the read fails clearly.

Ours offloading (offload.tiered): the copies, their contexts in the ledger list as Pulsar writes them, the BookKeeper
ledgers deleted after the lag and read from the copies by the next owner, a failed copy tried again, trimmed and
deleted ledgers' copies deleted.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from cluster.local import LocalCluster
from managed_ledger import (
    InitialPosition,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    OffloadPolicy,
    Position,
)
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.errors import NoSuchLedgerError
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.ml_data_formats_pb2 import OffloadContext
from managed_ledger.offload.filesystem import FileSystemOffloader
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.state import uuid_halves
from tests.managed_ledger.ml_support import FakeClock, bookkeeper_factory
from tests.offload.support import FailingOffloader, copies
from tests.waiting import eventually

NAME = "public/default/persistent/offloaded-by-pulsar"
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=5, min_ledger_rollover_time_s=0, retention_time_s=-1,
                             retention_size_bytes=-1)


async def read_all(ml: ManagedLedger) -> list[bytes]:
    reader = ml.new_non_durable_cursor(Position(-1, -1), "check")
    out: list[bytes] = []
    while batch := await reader.read_entries_async(4):
        out.extend(e.data for e in batch)
    await reader.close()
    return out


async def offload_as_pulsar_does(factory: BookKeeperManagedLedgerFactory, offloader: FileSystemOffloader,
                                 ledger_id: int, entries: list[bytes]) -> uuid.UUID:
    """The copy, then the context in the ledger list (complete, BookKeeper copy deleted), then the ledger deleted."""
    uid = uuid.uuid4()
    offloader.offload(NAME, ledger_id, uid, OffloadedLedgerMetadata.of_managed_ledger(
        NAME, len(entries) - 1, sum(map(len, entries)), 1_700_000_000_000), iter(entries))
    context = OffloadContext(complete=True, bookkeeperDeleted=True, timestamp=1_700_000_000_500)
    context.uidMsb, context.uidLsb = uuid_halves(uid)
    context.driverMetadata.name = "filesystem"
    context.driverMetadata.properties.add(key="storageBasePath", value=str(offloader.base))
    path = ml_formats.ledger_path(factory.root, NAME)
    got = await factory.store.get(path)
    assert got is not None
    info = ml_formats.decode_ledger_info(got.value)
    ledgers = tuple(dataclasses.replace(s, offload_context=context.SerializeToString()) if s.ledger_id == ledger_id
                    else s for s in info.ledgers)
    await factory.store.put(path, ml_formats.encode_ledger_info(dataclasses.replace(info, ledgers=ledgers)),
                            got.stat.version)
    await factory.bk.delete_ledger(ledger_id)
    return uid


async def test_a_ledger_pulsar_offloaded_is_kept_and_read_from_its_copy(ml_bk_cluster: LocalCluster,
                                                                         tmp_path: Path) -> None:
    root = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers"
    data = [b"o%d" % i for i in range(12)]
    offloader = FileSystemOffloader(tmp_path / "tier")
    made = [bookkeeper_factory(ml_bk_cluster.zk_address, root=root)]
    try:
        ml = await made[0].open(NAME, CONFIG)
        for d in data:
            await ml.add_entry_async(d)
        first = ml.ledgers_info()[0].ledger_id
        await ml.close()
        uid = await offload_as_pulsar_does(made[0], offloader, first, data[:5])

        made.append(bookkeeper_factory(ml_bk_cluster.zk_address, root=root))  # (another owner takes it over)
        made[-1].offloader = offloader
        ml = await made[-1].open(NAME, CONFIG)
        assert [i.offloaded for i in ml.ledgers_info()][:3] == [True, False, False]
        assert ml.offloaded_size == ml.ledgers_info()[0].size
        assert await read_all(ml) == data
        got = await made[-1].store.get(ml_formats.ledger_path(root, NAME))  # (rewritten at the takeover)
        assert got is not None
        stored = ml_formats.decode_ledger_info(got.value).ledgers[0]
        context = OffloadContext()
        context.ParseFromString(stored.offload_context)
        assert (stored.ledger_id, context.complete, context.bookkeeperDeleted) == (first, True, True)
        assert uuid_halves(uid) == (context.uidMsb, context.uidLsb)
        await ml.close()

        made.append(bookkeeper_factory(ml_bk_cluster.zk_address, root=root))  # (without the offloader)
        ml = await made[-1].open(NAME, CONFIG)
        with pytest.raises(ManagedLedgerError, match=f"ledger {first} .* no such offloader is configured"):
            await ml.read_entry(Position(first, 0))
        await ml.close()
    finally:
        for factory in made:
            await factory.close()


async def stored_contexts(factory: BookKeeperManagedLedgerFactory) -> dict[int, OffloadContext]:
    """The offload contexts in the managed ledger's znode, by ledger id."""
    got = await factory.store.get(ml_formats.ledger_path(factory.root, NAME))
    assert got is not None
    out = {}
    for stored in ml_formats.decode_ledger_info(got.value).ledgers:
        if stored.offload_context:
            context = out[stored.ledger_id] = OffloadContext()
            context.ParseFromString(stored.offload_context)
    return out


def copy_uuid(context: OffloadContext) -> uuid.UUID:
    return uuid.UUID(int=((context.uidMsb % (1 << 64)) << 64) | (context.uidLsb % (1 << 64)))


async def test_offload_from_bookkeeper_delete_the_ledgers_read_the_copies_trim(ml_bk_cluster: LocalCluster,
                                                                               tmp_path: Path) -> None:
    root, clock, tier = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers", FakeClock(), tmp_path / "tier"
    data = [b"b%d" % i * (i % 3 + 1) for i in range(17)]
    made = [bookkeeper_factory(ml_bk_cluster.zk_address, clock, root)]
    try:
        made[0].offloader = FileSystemOffloader(tier)
        ml = await made[0].open(NAME, CONFIG)
        for d in data:
            await ml.add_entry_async(d)
        ids = [i.ledger_id for i in ml.ledgers_info()]
        assert len(ids) == 4  # (5, 5, 5 and the current ledger's 2)
        assert await ml.offload_prefix(Position(ids[2], 1)) == Position(ids[2], 0)
        infos = ml.ledgers_info()
        assert [i.offloaded for i in infos] == [True, True, False, False]
        assert ml.offloaded_size == infos[0].size + infos[1].size
        contexts = await stored_contexts(made[0])
        assert sorted(contexts) == ids[:2]
        for ledger_id, context in contexts.items():
            assert (context.complete, context.bookkeeperDeleted) == (True, False)
            assert context.timestamp == int(clock() * 1000)
            assert context.driverMetadata.name == "filesystem"
            assert [(p.key, p.value) for p in context.driverMetadata.properties] == [("storageBasePath", str(tier))]
            # The copy: the ledger's entries, and the ledger's own BookKeeper metadata under key -1.
            copy = made[0].offloader.open(NAME, ledger_id, copy_uuid(context))
            try:
                first = ids.index(ledger_id) * 5
                assert copy.read(0, 4) == data[first:first + 5]
                metadata, _version = await made[0].bk.read_metadata(ledger_id)
                assert copy.metadata == OffloadedLedgerMetadata.of_bookkeeper(metadata)
                assert {b for _first, ensemble in copy.metadata.segments for b in ensemble} <= {
                    *await made[0].bk.writable_bookies(), *await made[0].bk.read_only_bookies()}
            finally:
                copy.close()
        assert [c.split("-")[0] for c in copies(tier, NAME)] == [str(ids[0]), str(ids[1])]

        assert await ml.delete_offloaded_locals(60) == 0  # (within the lag)
        clock.advance(60)
        assert await ml.delete_offloaded_locals(60) == 2
        for ledger_id in ids[:2]:
            with pytest.raises(NoSuchLedgerError):
                await made[0].bk.read_metadata(ledger_id)
        assert all(c.bookkeeperDeleted and c.complete for c in (await stored_contexts(made[0])).values())
        await ml.close()

        made.append(bookkeeper_factory(ml_bk_cluster.zk_address, clock, root))  # the next owner reads the copies
        made[-1].offloader = FileSystemOffloader(tier)
        ml = await made[-1].open(NAME, dataclasses.replace(CONFIG, retention_time_s=0, retention_size_bytes=0))
        assert [i.offloaded for i in ml.ledgers_info()][:3] == [True, True, False]
        assert await read_all(ml) == data
        cursor = await ml.open_cursor("s", InitialPosition.EARLIEST)
        cursor.mark_delete(Position(ids[1], 4))
        ml.trim_consumed_ledgers()  # (if moving the mark-delete did not trim already)
        await eventually(lambda: copies(tier, NAME) == [], "the trimmed ledgers' copies deleted")
        assert [i.ledger_id for i in ml.ledgers_info()][:2] == ids[2:]
        assert await stored_contexts(made[-1]) == {}  # (written before the copies were deleted)
        await ml.close()
    finally:
        for factory in made:
            await factory.close()


async def test_a_failed_copy_is_tried_again_and_deletion_takes_the_copies(ml_bk_cluster: LocalCluster,
                                                                          tmp_path: Path) -> None:
    root, tier = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers", tmp_path / "tier"
    offloader = FailingOffloader(tier)
    made = [bookkeeper_factory(ml_bk_cluster.zk_address, root=root)]
    try:
        made[0].offloader = offloader
        ml = await made[0].open(NAME, CONFIG)
        for i in range(12):
            await ml.add_entry_async(b"f%d" % i)
        ids = [i.ledger_id for i in ml.ledgers_info()]
        offloader.fail = frozenset({ids[1]})
        with pytest.raises(OSError, match="the tier went away"):
            await ml.offload_prefix(Position(ids[2], 0))
        assert [i.offloaded for i in ml.ledgers_info()] == [True, False, False]  # (the one before it stays)
        failed = (await stored_contexts(made[0]))[ids[1]]
        assert failed.HasField("uidMsb") and not failed.complete  # (the record of the try, kept before the copy)
        assert len(copies(tier, NAME)) == 1  # (nothing left of the failed one)
        await ml.close()

        made.append(bookkeeper_factory(ml_bk_cluster.zk_address, root=root))  # (the record survives a takeover)
        made[-1].offloader = offloader
        offloader.fail = frozenset()
        ml = await made[-1].open(NAME, CONFIG)
        assert await ml.offload_prefix(Position(ids[2], 0)) == Position(ids[2], 0)
        contexts = await stored_contexts(made[-1])
        assert contexts[ids[1]].complete and copy_uuid(contexts[ids[1]]) != copy_uuid(failed)
        assert len(copies(tier, NAME)) == 2
        await ml.close()

        await made[-1].delete(NAME)  # (a closed managed ledger deleted: its copies too)
        assert copies(tier, NAME) == []
    finally:
        for factory in made:
            await factory.close()


async def test_offload_by_thresholds_and_delete(ml_bk_cluster: LocalCluster, tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    factory = bookkeeper_factory(ml_bk_cluster.zk_address)
    try:
        factory.offloader = FileSystemOffloader(tier)
        ml = await factory.open(NAME, CONFIG)
        for i in range(17):
            await ml.add_entry_async(b"t%d" % i)
        assert await ml.offload_by_thresholds(-1, -1) == 0  # (no criterion)
        assert await ml.offload_by_thresholds(0, -1) == 3  # (every closed ledger: the sum passes 0 at once)
        assert [i.offloaded for i in ml.ledgers_info()] == [True, True, True, False]
        assert len(copies(tier, NAME)) == 3
        await ml.delete()  # (an open managed ledger deleted: its copies too)
        assert copies(tier, NAME) == []
        assert await factory.store.get(ml_formats.ledger_path(factory.root, NAME)) is None
    finally:
        await factory.close()


async def test_offload_at_rollover_and_reads_from_the_copies_first(ml_bk_cluster: LocalCluster,
                                                                   tmp_path: Path) -> None:
    """Thresholds in force: each rollover offloads (Pulsar's ledgerClosed). Reads then go to the copies (Pulsar's
    default, tiered-storage-first), shown by deleting the BookKeeper ledgers behind the managed ledger's back."""
    root, tier = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers", tmp_path / "tier"
    data = [b"r%d" % i for i in range(17)]
    made = [bookkeeper_factory(ml_bk_cluster.zk_address, root=root)]
    try:
        made[0].offloader = FileSystemOffloader(tier)
        ml = await made[0].open(NAME, dataclasses.replace(CONFIG, offload=OffloadPolicy(threshold_bytes=0)))
        for d in data:
            await ml.add_entry_async(d)
        await eventually(lambda: [i.offloaded for i in ml.ledgers_info()] == [True, True, True, False],
                         "the closed ledgers offloaded at their rollover")
        ids = [i.ledger_id for i in ml.ledgers_info()]
        await ml.close()
        for ledger_id in ids[:3]:
            await made[0].bk.delete_ledger(ledger_id)

        made.append(bookkeeper_factory(ml_bk_cluster.zk_address, root=root))
        made[-1].offloader = FileSystemOffloader(tier)
        ml = await made[-1].open(NAME, CONFIG)
        assert await read_all(ml) == data
        await ml.close()
    finally:
        for factory in made:
            await factory.close()
