"""Rack-aware ensembles on real bookies: racks set through /admin/v2/bookies/racks-info land in the metadata store's
/bookies node (Pulsar's BookiesRackConfiguration JSON), the broker's BookKeeper client follows them, and every new
ledger's ensemble spans both racks, as read back from the ledgers' metadata in ZooKeeper."""

from __future__ import annotations

import json
import uuid

import pulsar
from kazoo.client import KazooClient

from broker.embedded import BrokerThread
from cluster.local import LocalCluster
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.metadata import ledger_path, parse
from tests.admin.conftest import Admin
from tests.waiting import wait_for

TOPICS = 6


def test_every_new_ensemble_spans_both_racks(bk_cluster: LocalCluster) -> None:
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    chroot = f"/racks-{uuid.uuid4().hex[:8]}"
    try:
        bookies = sorted(b for b in zk.get_children("/ledgers/available") if b != "readonly")
        assert len(bookies) == 3
        rack = {bookies[0]: "rack-a", bookies[1]: "rack-a", bookies[2]: "rack-b"}
        with BrokerThread(managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{bk_cluster.zk_address}{chroot}",
                          bookkeeperMetadataServiceUri=f"zk+hierarchical://{bk_cluster.zk_address}/ledgers",
                          managedLedgerDefaultEnsembleSize=2, managedLedgerDefaultWriteQuorum=2,
                          managedLedgerDefaultAckQuorum=2) as broker:
            admin = Admin(broker.web_url)
            for bookie, name in rack.items():
                assert admin.call("POST", f"/admin/v2/bookies/racks-info/{bookie}?group=default",
                                  {"rack": name}).status == 204
            # Stored where Pulsar's BookieResources keeps them, in its JSON.
            stored = json.loads(zk.get(f"{chroot}/bookies")[0])
            assert stored == {"default": {b: {"rack": r} for b, r in rack.items()}}
            listed = admin.ok("GET", "/admin/v2/bookies/all")
            assert set(bookies) <= {b["bookieId"] for b in listed["bookies"]}
            factory = broker.server.service.ledger_factory
            assert isinstance(factory, BookKeeperManagedLedgerFactory)

            async def racks_in_force() -> dict[str, str]:
                return {b: factory.bk.rack_of(b) for b in bookies}

            wait_for(lambda: broker.run_coroutine(racks_in_force()) == {b: "/" + r for b, r in rack.items()},
                     what="the broker's BookKeeper client to follow the racks")
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
            locals_ = [f"racks-{uuid.uuid4().hex[:8]}" for _ in range(TOPICS)]
            try:
                for local in locals_:
                    client.create_producer(f"persistent://public/default/{local}", batching_enabled=False).send(b"x")
            finally:
                client.close()
        ensembles: list[tuple[str, ...]] = []
        for local in locals_:
            info = ml_formats.decode_ledger_info(
                zk.get(f"{chroot}{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent/{local}")[0])
            for ledger in info.ledgers:
                metadata = parse(zk.get(ledger_path(ledger.ledger_id))[0])
                ensembles.extend(segment.ensemble for segment in metadata.segments)
        assert len(ensembles) >= TOPICS
        for ensemble in ensembles:
            assert sorted(rack[b] for b in ensemble) == ["rack-a", "rack-b"], ensemble
    finally:
        zk.delete(chroot, recursive=True)
        zk.stop()
        zk.close()
