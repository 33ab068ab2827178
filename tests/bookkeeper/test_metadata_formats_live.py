"""Compressed managed-ledger and cursor znodes and long-array acknowledgements, on real ZooKeeper and bookies: what
one factory writes with them, another (writing plain values) reads back, and the znodes carry Pulsar's magic.
Cursor properties set on the first owner reach the second, which took over without the first closing."""

from __future__ import annotations

import uuid

from kazoo.client import KazooClient

from cluster.local import LocalCluster
from managed_ledger import InitialPosition, ManagedLedgerConfig
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.client import BookKeeper
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory

NAME = "public/default/persistent/compressed"


def factory(cluster: LocalCluster, root: str, formats: ml_formats.MetadataFormats) -> BookKeeperManagedLedgerFactory:
    return BookKeeperManagedLedgerFactory(BookKeeper(cluster.zk_address), f"zk:{cluster.zk_address}", root=root,
                                          ensemble_size=3, write_quorum=2, ack_quorum=2, formats=formats)


async def test_compressed_metadata_and_long_array_acks_survive_a_takeover(bk_cluster: LocalCluster) -> None:
    root = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers"
    packed = ml_formats.MetadataFormats.from_names("ZSTD", "LZ4", ledger_info_threshold=0, cursor_info_threshold=0,
                                                   acks_as_long_array=True)
    first = factory(bk_cluster, root, packed)
    ml = await first.open(NAME, ManagedLedgerConfig())
    positions = [await ml.add_entry_async(b"m%d" % i) for i in range(10)]
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    cursor.delete([positions[0], positions[1], positions[4], positions[7]])
    await cursor.flush()  # a cursor-ledger entry (PositionInfo, long arrays) and a compressed znode
    await cursor.set_cursor_properties({"team": "blue"})  # durable on return: into the znode (Pulsar keeps them there)
    # The first owner is not closed (as after a crash): the next one reads the cursor's state from its ledger.

    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    try:
        ml_znode, _ = zk.get(f"{root}/{NAME}")
        cursor_znode, _ = zk.get(f"{root}/{NAME}/sub")
    finally:
        zk.stop()
        zk.close()
    assert ml_znode[:2] == cursor_znode[:2] == bytes.fromhex("4778")

    second = factory(bk_cluster, root, ml_formats.PLAIN)
    try:
        ml = await second.open(NAME, ManagedLedgerConfig())
        reopened = ml.cursors["sub"]
        assert reopened.mark_delete_position == positions[1]
        assert dict(reopened.cursor_properties) == {"team": "blue"}
        assert list(reopened.individually_deleted) == [(positions[4], positions[4]), (positions[7], positions[7])]
        entries = await reopened.read_entries_async(10)
        assert [e.data for e in entries] == [b"m%d" % i for i in (2, 3, 5, 6, 8, 9)]
        assert ml.last_confirmed_entry == positions[-1]
    finally:
        await second.close()
        await first.close()
