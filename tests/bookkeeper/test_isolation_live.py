"""Bookie isolation on real bookies: two racks-info groups, a namespace with a bookie affinity group (set through
/admin/v2/namespaces/{tenant}/{ns}/persistence/bookieAffinity): every new ledger of its topics, read back from the
ledgers' metadata in ZooKeeper, is on that group's bookies only, and says so in its custom metadata as Pulsar's
brokers write it (EnsemblePlacementPolicyConfig)."""

from __future__ import annotations

import json
import uuid

import pulsar

from cluster.local import LocalCluster
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.placement import PLACEMENT_POLICY_CONFIG_KEY, IsolationGroups
from tests.admin.conftest import Admin
from tests.bookkeeper.live import bk_broker, chrooted_zk, topic_ledgers
from tests.waiting import wait_for

TOPICS = 6


def test_a_namespaces_ledgers_stay_on_its_bookie_group(bk_cluster: LocalCluster) -> None:
    with chrooted_zk(bk_cluster, "isolation") as (zk, chroot, bookies):
        group = {bookies[0]: "isolated", bookies[1]: "isolated", bookies[2]: "shared"}
        with bk_broker(bk_cluster, chroot) as broker:
            admin = Admin(broker.web_url)
            for i, (bookie, name) in enumerate(group.items()):
                assert admin.call("POST", f"/admin/v2/bookies/racks-info/{bookie}?group={name}",
                                  {"rack": f"rack-{i}"}).status == 204
            ns = f"public/isolated-{uuid.uuid4().hex[:8]}"
            assert admin.call("PUT", f"/admin/v2/namespaces/{ns}").status == 204
            affinity = {"bookkeeperAffinityGroupPrimary": "isolated"}
            assert admin.call("POST", f"/admin/v2/namespaces/{ns}/persistence/bookieAffinity", affinity).status == 204
            # Stored where Pulsar keeps it: the namespace's LocalPolicies.
            local = json.loads(zk.get(f"{chroot}/admin/local-policies/{ns}")[0])
            assert local["bookieAffinityGroup"] == affinity
            factory = broker.server.service.ledger_factory
            assert isinstance(factory, BookKeeperManagedLedgerFactory)

            async def groups_in_force() -> dict[str, list[str]]:
                return {g: sorted(b) for g, b in factory.bk.racks.configuration.items()}

            expected = {"isolated": bookies[:2], "shared": bookies[2:]}
            wait_for(lambda: broker.run_coroutine(groups_in_force()) == expected,
                     what="the broker's BookKeeper client to follow /bookies")
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
            locals_ = [f"iso-{uuid.uuid4().hex[:8]}" for _ in range(TOPICS)]
            try:
                for local in locals_:
                    client.create_producer(f"persistent://{ns}/{local}", batching_enabled=False).send(b"x")
            finally:
                client.close()
        ensembles: list[tuple[str, ...]] = []
        for metadata in topic_ledgers(zk, chroot, ns, locals_):
            assert IsolationGroups.of_ledger(metadata.custom_metadata) == IsolationGroups("isolated", "")
            assert json.loads(dict(metadata.custom_metadata)[PLACEMENT_POLICY_CONFIG_KEY])["policyClass"] == \
                "org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy"
            ensembles.extend(segment.ensemble for segment in metadata.segments)
        assert len(ensembles) >= TOPICS
        for ensemble in ensembles:
            assert sorted(ensemble) == bookies[:2], ensemble
