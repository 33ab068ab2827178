"""What the live bookie-placement tests share (test_racks_live, test_isolation_live): a metadata-store chroot of
their own on the local cluster's ZooKeeper, a broker on it that writes to the three bookies with ensembles of 2,
and the ledgers' metadata of the topics they wrote, read back from ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient

from broker.embedded import BrokerThread
from cluster.local import LocalCluster
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.metadata import LedgerMetadata, ledger_path, parse


@contextmanager
def chrooted_zk(bk_cluster: LocalCluster, prefix: str) -> Iterator[tuple[KazooClient, str, list[str]]]:
    """(a ZooKeeper client, a new chroot for the broker's metadata, the three bookies' ids); the chroot is removed
    after."""
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    chroot = f"/{prefix}-{uuid.uuid4().hex[:8]}"
    try:
        bookies = sorted(b for b in zk.get_children("/ledgers/available") if b != "readonly")
        assert len(bookies) == 3
        yield zk, chroot, bookies
    finally:
        zk.delete(chroot, recursive=True)
        zk.stop()
        zk.close()


def bk_broker(bk_cluster: LocalCluster, chroot: str) -> BrokerThread:
    """A broker with its metadata under ``chroot`` and its ledgers on the cluster's bookies, ensembles of 2."""
    return BrokerThread(managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{bk_cluster.zk_address}{chroot}",
                        bookkeeperMetadataServiceUri=f"zk+hierarchical://{bk_cluster.zk_address}/ledgers",
                        managedLedgerDefaultEnsembleSize=2, managedLedgerDefaultWriteQuorum=2,
                        managedLedgerDefaultAckQuorum=2)


def topic_ledgers(zk: KazooClient, chroot: str, namespace: str, locals_: list[str]) -> Iterator[LedgerMetadata]:
    """The metadata of every ledger of these persistent topics of ``namespace``, from their managed ledgers'
    znodes."""
    for local in locals_:
        info = ml_formats.decode_ledger_info(
            zk.get(f"{chroot}{ml_formats.MANAGED_LEDGERS_ROOT}/{namespace}/persistent/{local}")[0])
        for ledger in info.ledgers:
            yield parse(zk.get(ledger_path(ledger.ledger_id))[0])
