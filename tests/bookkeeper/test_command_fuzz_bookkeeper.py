"""tests/component/test_command_fuzz.py's random commands on a broker whose topics live on real BookKeeper and whose
metadata is in ZooKeeper (a chroot of its own): the same checks (every connection answered, refused or closed, none
hurting the others, no error logged, no task failing, the permit invariant held), on the storage whose every add,
read and cursor update is a round trip to bookies and ZooKeeper. Fewer connections than on the default storage.
Seeded: PULSAR_FUZZ_SEED=<n> runs another seed, PULSAR_FUZZ_BK_SESSIONS=<n> more connections."""

from __future__ import annotations

import os
import uuid

import pytest

from broker.embedded import Broker
from cluster.local import LocalCluster
from tests.component.command_fuzz import check_random_commands

SEED = int(os.environ.get("PULSAR_FUZZ_SEED", "6650"))
SESSIONS = int(os.environ.get("PULSAR_FUZZ_BK_SESSIONS", "1000"))


async def test_random_commands_on_bookkeeper_are_answered_refused_or_closed_and_never_fail_the_broker(
        bk_cluster: LocalCluster, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    zk = bk_cluster.zk_address
    broker = Broker(managedLedgerStorage="bookkeeper", metadataStoreUrl=f"zk:{zk}/fuzz-{uuid.uuid4().hex[:8]}",
                    bookkeeperMetadataServiceUri=f"zk+hierarchical://{zk}/ledgers",
                    managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=2,
                    managedLedgerDefaultAckQuorum=2, transactionCoordinatorEnabled=True,
                    topicLevelPoliciesEnabled=True)
    await check_random_commands(broker, SEED, SESSIONS, caplog, monkeypatch)
