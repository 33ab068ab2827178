"""Offloading with managedLedgerStorage=bookkeeper through the broker: a topic's closed ledgers offloaded on request
(their OffloadContexts in the managed ledger's znode, as Pulsar writes them), their BookKeeper ledgers deleted after
the namespace's deletion lag, and the topic read back from the copies by the official client after a restart."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker.embedded import BrokerThread
from cluster.local import LocalCluster
from managed_ledger.bookkeeper import metadata as bk_metadata
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.ml_data_formats_pb2 import OffloadContext
from tests.admin.conftest import Admin
from tests.offload.azurite import AzureEndpoint, azurite
from tests.offload.fakegcs import GcsEndpoint, fake_gcs
from tests.offload.s3proxy import S3Endpoint, s3proxy
from tests.offload.support import (
    assert_read_back_from_copies,
    bucket_keys,
    emulator_tier,
    offload_but_the_last,
    produce_held,
    s3_tier,
)
from tests.waiting import wait_for

COPY_DIRECTORY = re.compile(r"\d+-[0-9a-f-]{36}")  # (<ledger id>-<uuid>)


def settings(cluster: LocalCluster, tier: dict[str, Any]) -> dict[str, Any]:
    return {"managedLedgerStorage": "bookkeeper",
            "bookkeeperMetadataServiceUri": f"zk+hierarchical://{cluster.zk_address}/ledgers",
            "managedLedgerDefaultEnsembleSize": 3, "managedLedgerDefaultWriteQuorum": 2,
            "managedLedgerDefaultAckQuorum": 2, **tier,
            "managedLedgerMaxEntriesPerLedger": 5, "managedLedgerMinLedgerRolloverTimeMinutes": 0,
            "retentionCheckIntervalInSeconds": 1}


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    with s3proxy(tmp_path_factory.mktemp("s3proxy")) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def azure_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureEndpoint]:
    with azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEndpoint]:
    with fake_gcs(tmp_path_factory.mktemp("fake-gcs")) as endpoint:
        yield endpoint


@pytest.fixture(params=["filesystem", "aws-s3", "azureblob", "google-cloud-storage"])
def tier(request: pytest.FixtureRequest) -> tuple[dict[str, Any], Callable[[], int]]:
    """The offload settings of a broker, and how many objects its tier holds (files: the copies' directories)."""
    if request.param == "filesystem":
        base = request.getfixturevalue("tmp_path") / "data" / "offloaded"
        return {"managedLedgerOffloadDriver": "filesystem"}, lambda: sum(
            1 for p in base.rglob("*") if p.is_dir() and COPY_DIRECTORY.fullmatch(p.name))
    endpoint: S3Endpoint | AzureEndpoint | GcsEndpoint
    monkeypatch = request.getfixturevalue("monkeypatch")
    if request.param == "aws-s3":
        endpoint = s3 = request.getfixturevalue("s3_endpoint")
        offload, bucket = s3_tier(s3)
    elif request.param == "azureblob":
        endpoint = azure = request.getfixturevalue("azure_endpoint")
        offload, bucket = emulator_tier(azure, monkeypatch, "azureblob", "managedLedgerOffloadBucket")
    else:
        endpoint = gcs = request.getfixturevalue("gcs_endpoint")
        offload, bucket = emulator_tier(gcs, monkeypatch, "google-cloud-storage",
                                        "gcsManagedLedgerOffloadBucket")
    return offload, lambda: len(bucket_keys(endpoint, bucket)) // 2  # (a data and an index object per copy)


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


def test_offload_from_bookkeeper_delete_the_ledgers_restart_and_read(
        bk_cluster: LocalCluster, tmp_path: Path, tier: tuple[dict[str, Any], Callable[[], int]]) -> None:
    offload, copies = tier
    namespace = f"public/offload-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{namespace}/t"
    managed_ledger = f"{namespace}/persistent/t"
    path = f"/admin/v2/persistent/{namespace}/t"
    data = tmp_path / "data"
    sent = [f"m{i}".encode() for i in range(22)]
    zk = KazooClient(hosts=bk_cluster.zk_address)
    zk.start()
    broker = BrokerThread(data_dir=data, **settings(bk_cluster, offload)).start()
    try:
        admin = Admin(broker.web_url)
        admin.ok("PUT", f"/admin/v2/namespaces/{namespace}", {})
        last = produce_held(broker, topic, sent)
        ledgers = [lg["ledgerId"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]]
        assert len(ledgers) == 5  # (5, 5, 5, 5 and 2 entries)

        _, internal = offload_but_the_last(admin, path, last, 60)
        assert admin.ok("GET", path + "/stats")["offloadedStorageSize"] == sum(lg["size"] for lg in internal[:4])
        stored = contexts(zk, managed_ledger)
        assert sorted(stored) == ledgers[:4]
        assert all(c.complete and not c.bookkeeperDeleted
                   and c.driverMetadata.name == offload["managedLedgerOffloadDriver"] for c in stored.values())
        properties = [{kv.key: kv.value for kv in c.driverMetadata.properties} for c in stored.values()]
        driver = offload["managedLedgerOffloadDriver"]
        if driver != "filesystem":  # (Pulsar's getOffloadDriverMetadata)
            provider, bucket = {"aws-s3": ("AWS_S3", offload.get("s3ManagedLedgerOffloadBucket")),
                                "azureblob": ("AZURE_BLOB", offload.get("managedLedgerOffloadBucket")),
                                "google-cloud-storage": ("GOOGLE_CLOUD_STORAGE",
                                                         offload.get("gcsManagedLedgerOffloadBucket"))}[driver]
            assert all(p["managedLedgerOffloadDriver"] == provider and p["bucket"] == bucket for p in properties)
        assert copies() == 4
        assert all(in_bookkeeper(zk, ledger_id) for ledger_id in ledgers[:4])  # (the default lag: 4 hours)

        admin.ok("PUT", f"/admin/v2/namespaces/{namespace}/offloadDeletionLagMs", 0)
        wait_for(lambda: not any(in_bookkeeper(zk, ledger_id) for ledger_id in ledgers[:4]), 30,
                 "the offloaded ledgers deleted from BookKeeper")
        assert all(c.bookkeeperDeleted for c in contexts(zk, managed_ledger).values())
    finally:
        broker.stop()

    broker = BrokerThread(data_dir=data, **settings(bk_cluster, offload)).start()
    try:
        # the tier's scan, the topic not loaded yet: its ledger list read from its znode
        assert topic not in broker.run_coroutine(_loaded(broker))
        scan = Admin(broker.web_url).ok("GET", f"/admin/v2/namespaces/{namespace}/scanOffloadedLedgers")
        assert {o["status"] for o in scan["objects"]} == {"OK"} and scan["errors"] == scan["unknown"] == 0
        assert sorted({o["ledger"] for o in scan["objects"]}) == ledgers[:4]
        assert_read_back_from_copies(broker, topic, 4, sent)
        Admin(broker.web_url).ok("DELETE", path + "?force=true")
        assert copies() == 0
    finally:
        broker.stop()
        zk.stop()
        zk.close()


async def _loaded(broker: BrokerThread) -> set[str]:
    return set(broker.server.service.topics)
