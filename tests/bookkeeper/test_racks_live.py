"""Rack-aware ensembles on real bookies: racks set through /admin/v2/bookies/racks-info land in the metadata store's
/bookies node (Pulsar's BookiesRackConfiguration JSON), the broker's BookKeeper client follows them, and every new
ledger's ensemble spans both racks, as read back from the ledgers' metadata in ZooKeeper."""

from __future__ import annotations

import json
import uuid

import pulsar

from cluster.local import LocalCluster
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from tests.admin.conftest import Admin
from tests.bookkeeper.live import bk_broker, chrooted_zk, topic_ledgers
from tests.waiting import wait_for

TOPICS = 6


def test_every_new_ensemble_spans_both_racks(bk_cluster: LocalCluster) -> None:
    with chrooted_zk(bk_cluster, "racks") as (zk, chroot, bookies):
        rack = {bookies[0]: "rack-a", bookies[1]: "rack-a", bookies[2]: "rack-b"}
        with bk_broker(bk_cluster, chroot) as broker:
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
        ensembles = [segment.ensemble for metadata in topic_ledgers(zk, chroot, "public/default", locals_)
                     for segment in metadata.segments]
        assert len(ensembles) >= TOPICS
        for ensemble in ensembles:
            assert sorted(rack[b] for b in ensemble) == ["rack-a", "rack-b"], ensemble
