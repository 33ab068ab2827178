"""Offloading with managedLedgerStorage=bookkeeper through the broker: a topic's closed ledgers offloaded on request
(their OffloadContexts in the managed ledger's znode, as Pulsar writes them), their BookKeeper ledgers deleted after
the namespace's deletion lag, and the topic read back from the copies by the official client after a restart."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.embedded import BrokerThread
from cluster.local import LocalCluster
from managed_ledger.bookkeeper import metadata as bk_metadata
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.ml_data_formats_pb2 import OffloadContext
from tests.admin.conftest import Admin
from tests.offload.support import assert_read_back_from_copies, produce_held
from tests.waiting import wait_for


def settings(cluster: LocalCluster) -> dict[str, Any]:
    return {"managedLedgerStorage": "bookkeeper",
            "bookkeeperMetadataServiceUri": f"zk+hierarchical://{cluster.zk_address}/ledgers",
            "managedLedgerDefaultEnsembleSize": 3, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, "managedLedgerOffloadDriver": "filesystem",
            "managedLedgerMaxEntriesPerLedger": 5, "managedLedgerMinLedgerRolloverTimeMinutes": 0,
            "retentionCheckIntervalInSeconds": 1}


def contexts(zk: KazooClient, managed_ledger: str) -> dict[int, OffloadContext]:
    info = ml_formats.decode_ledger_info(zk.get(f"{ml_formats.MANAGED_LEDGERS_ROOT}/{managed_ledger}")[0])
    out = {}
    for stored in info.ledgers:
        if stored.offload_context:
            context = out[stored.ledger_id] = OffloadContext()
            context.ParseFromString(stored.offload_context)
    return out


def in_bookkeeper(zk: KazooClient, ledger_id: int) -> bool:
    try:
        zk.get(bk_metadata.ledger_path(ledger_id))
    except NoNodeError:
        return False
    return True


def test_offload_from_bookkeeper_delete_the_ledgers_restart_and_read(bk_cluster: LocalCluster,
                                                                     tmp_path: Path) -> None:
    namespace = f"public/offload-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{namespace}/t"
    managed_ledger = f"{namespace}/persistent/t"
    path = f"/admin/v2/persistent/{namespace}/t"
    data = tmp_path / "data"
    sent = [f"m{i}".encode() for i in range(22)]
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    broker = BrokerThread(data_dir=data, **settings(bk_cluster)).start()
    try:
        admin = Admin(broker.web_url)
        admin.ok("PUT", f"/admin/v2/namespaces/{namespace}", {})
        last = produce_held(broker, topic, sent)
        ledgers = [lg["ledgerId"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]]
        assert len(ledgers) == 5  # (5, 5, 5, 5 and 2 entries)

        admin.ok("PUT", path + "/offload", {"ledgerId": last.ledger_id(), "entryId": last.entry_id()})
        status = wait_for(lambda: (s := admin.ok("GET", path + "/offload"))["status"] != "RUNNING" and s, 60,
                          "the offload run to end")
        assert status["status"] == "SUCCESS", status
        internal = admin.ok("GET", path + "/internalStats")["ledgers"]
        assert [lg["offloaded"] for lg in internal] == [True, True, True, True, False]
        assert admin.ok("GET", path + "/stats")["offloadedStorageSize"] == sum(lg["size"] for lg in internal[:4])
        stored = contexts(zk, managed_ledger)
        assert sorted(stored) == ledgers[:4]
        assert all(c.complete and not c.bookkeeperDeleted and c.driverMetadata.name == "filesystem"
                   for c in stored.values())
        assert all(in_bookkeeper(zk, ledger_id) for ledger_id in ledgers[:4])  # (the default lag: 4 hours)

        admin.ok("PUT", f"/admin/v2/namespaces/{namespace}/offloadDeletionLagMs", 0)
        wait_for(lambda: not any(in_bookkeeper(zk, ledger_id) for ledger_id in ledgers[:4]), 30,
                 "the offloaded ledgers deleted from BookKeeper")
        assert all(c.bookkeeperDeleted for c in contexts(zk, managed_ledger).values())
    finally:
        broker.stop()

    broker = BrokerThread(data_dir=data, **settings(bk_cluster)).start()
    try:
        assert_read_back_from_copies(broker, topic, 4, sent)
    finally:
        broker.stop()
        zk.stop()
        zk.close()
