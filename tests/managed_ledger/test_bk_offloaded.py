"""A managed ledger on BookKeeper whose ledger a Pulsar broker offloaded (the filesystem offloader's copy, the
ledger's OffloadContext complete with its BookKeeper copy deleted, as Pulsar leaves them): the context is kept when
ours rewrites the ledger list, the ledger is read from its copy, and without the offloader the read fails clearly."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from cluster.local import LocalCluster
from managed_ledger import ManagedLedger, ManagedLedgerConfig, ManagedLedgerError, Position
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.ml_data_formats_pb2 import OffloadContext
from managed_ledger.offload.filesystem import FileSystemOffloader
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.state import uuid_halves
from tests.managed_ledger.ml_support import bookkeeper_factory

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
