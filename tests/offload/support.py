"""Helpers of the offloading tests (file and BookKeeper ledgers)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from uuid import UUID

import pulsar
import pytest

from broker.embedded import BrokerThread
from managed_ledger.offload.filesystem import FileSystemOffloader, OffloadWriter
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from tests.admin.conftest import Admin
from tests.offload.azurite import AzureEndpoint
from tests.offload.fakegcs import GcsEndpoint
from tests.offload.s3proxy import S3Endpoint
from tests.waiting import wait_for


class FailingOffloader(FileSystemOffloader):
    """Fails the copy of ledgers in ``fail`` after its first entry."""

    fail: frozenset[int] = frozenset()

    def begin(self, managed_ledger: str, ledger_id: int, uuid: UUID,
              metadata: OffloadedLedgerMetadata) -> OffloadWriter:
        writer = super().begin(managed_ledger, ledger_id, uuid, metadata)
        if ledger_id in self.fail:
            append = writer.append

            def broken(entries: Iterable[bytes]) -> None:
                append(list(entries)[:1])
                raise OSError("the tier went away")

            writer.append = broken  # type: ignore[method-assign]
        return writer


def copies(tier: Path, managed_ledger: str) -> list[str]:
    """The names under a managed ledger's directory of the tier (``<ledger id>-<uuid>`` each, and any temporary)."""
    where = tier / managed_ledger
    return sorted(p.name for p in where.iterdir()) if where.exists() else []


def read_back(broker: BrokerThread, topic: str, subscription: str, count: int) -> list[bytes]:
    """The first ``count`` messages of the topic, by the official client on a new subscription from the earliest."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, subscription, initial_position=pulsar.InitialPosition.Earliest)
        return [consumer.receive(10_000).data() for _ in range(count)]
    finally:
        client.close()


def produce_held(broker: BrokerThread, topic: str, sent: list[bytes]) -> pulsar.MessageId:
    """Publish ``sent`` (unbatched) with a subscription from the earliest that holds them; the last message's id."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe(topic, "keeps", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        return [producer.send(d) for d in sent][-1]
    finally:
        client.close()


def offload_but_the_last(admin: Admin, path: str, last: pulsar.MessageId, timeout: float) -> tuple[Any, list[Any]]:
    """Offload the topic's ledgers before ``last``'s (the last of five ledgers, as produce_held leaves them with 22
    messages); the run's status and the internal stats' ledgers once it succeeded."""
    admin.ok("PUT", path + "/offload", {"ledgerId": last.ledger_id(), "entryId": last.entry_id()})
    status = wait_for(lambda: (s := admin.ok("GET", path + "/offload"))["status"] != "RUNNING" and s, timeout,
                      "the offload run to end")
    assert status["status"] == "SUCCESS", status
    internal = admin.ok("GET", path + "/internalStats")["ledgers"]
    assert [lg["offloaded"] for lg in internal] == [True, True, True, True, False]
    return status, internal


def assert_read_back_from_copies(broker: BrokerThread, topic: str, offloaded: int, sent: list[bytes]) -> None:
    """After a restart: the topic's first ``offloaded`` ledgers show as offloaded, and a new subscription from the
    earliest reads every message sent."""
    internal = Admin(broker.web_url).ok("GET", "/admin/v2/" + topic.replace("://", "/") + "/internalStats")["ledgers"]
    assert [lg["offloaded"] for lg in internal[:offloaded]] == [True] * offloaded
    assert read_back(broker, topic, "after", len(sent)) == sent


def s3_tier(endpoint: S3Endpoint) -> tuple[dict[str, Any], str]:
    """Broker settings offloading to a new bucket of ``endpoint`` (the aws-s3 driver with a service endpoint and
    credentials, as a broker.conf gives them), and the bucket's name."""
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    settings = {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadBucket": bucket,
                "s3ManagedLedgerOffloadServiceEndpoint": endpoint.url,
                "s3ManagedLedgerOffloadCredentialId": endpoint.identity,
                "s3ManagedLedgerOffloadCredentialSecret": endpoint.credential}
    endpoint.create_bucket(bucket)
    return settings, bucket


def emulator_tier(endpoint: AzureEndpoint | GcsEndpoint, monkeypatch: pytest.MonkeyPatch, driver: str,
                  bucket_key: str) -> tuple[dict[str, Any], str]:
    """Broker settings offloading with ``driver`` to a new bucket (Azure: container) of an emulator, its endpoint
    given and its environment set as the driver reads it (Azure: the account's credentials; GCS: the emulator's
    address, no key file), and the bucket's name."""
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    endpoint.create_bucket(bucket)
    for key, value in endpoint.environ.items():
        monkeypatch.setenv(key, value)
    return {"managedLedgerOffloadDriver": driver, bucket_key: bucket,
            "managedLedgerOffloadServiceEndpoint": endpoint.url}, bucket


def bucket_keys(endpoint: S3Endpoint | AzureEndpoint | GcsEndpoint, bucket: str) -> list[str]:
    """The bucket's objects."""
    return endpoint.keys(bucket)
