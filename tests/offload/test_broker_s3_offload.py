"""Offloading to S3 through the broker (managedLedgerOffloadDriver=aws-s3 with a service endpoint: S3Proxy): a topic's
closed ledgers offloaded on request as Pulsar's jcloud offloader's objects, their local copies deleted after the
namespace's deletion lag, the topic read back from S3 by the official client after a restart, and the copies deleted
with the topic. A broker whose S3 settings Pulsar would refuse does not start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin
from tests.e2e.conftest import topic_name
from tests.offload.s3proxy import S3Endpoint, s3proxy
from tests.offload.support import (
    assert_read_back_from_copies,
    bucket_keys,
    offload_but_the_last,
    produce_held,
    s3_tier,
)
from tests.offload.test_broker_offload import SETTINGS, local_segments
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    with s3proxy(tmp_path_factory.mktemp("s3proxy")) as e:
        yield e


def test_offload_to_s3_delete_locally_restart_read_and_delete(tmp_path: Path, endpoint: S3Endpoint) -> None:
    tier, bucket = s3_tier(endpoint)
    settings = {**SETTINGS, **tier}
    topic = topic_name("s3-offloaded")
    path = "/admin/v2/" + topic.replace("://", "/")
    data = tmp_path / "data"
    sent = [f"m{i}".encode() * (i + 1) for i in range(22)]
    broker = BrokerThread(data_dir=data, **settings).start()
    try:
        admin = Admin(broker.web_url)
        last = produce_held(broker, topic, sent)
        ledgers = [lg["ledgerId"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]]
        assert len(ledgers) == 5  # (5, 5, 5, 5 and 2 entries)
        offload_but_the_last(admin, path, last, 30)
        objects = bucket_keys(endpoint, bucket)
        assert len(objects) == 8
        assert sorted(int(key.split("-ledger-")[1]) for key in objects if not key.endswith("-index")) == ledgers[:4]

        admin.ok("PUT", "/admin/v2/namespaces/public/default/offloadDeletionLagMs", 0)
        wait_for(lambda: not set(ledgers[:4]) & local_segments(data), 30, "the offloaded ledgers' local copies gone")
    finally:
        broker.stop()

    broker = BrokerThread(data_dir=data, **settings).start()
    try:
        assert_read_back_from_copies(broker, topic, 4, sent)
        Admin(broker.web_url).ok("DELETE", path + "?force=true")
        assert bucket_keys(endpoint, bucket) == []
    finally:
        broker.stop()


def test_a_broker_with_s3_settings_pulsar_refuses_does_not_start(tmp_path: Path, endpoint: S3Endpoint) -> None:
    tier, _ = s3_tier(endpoint)
    del tier["s3ManagedLedgerOffloadBucket"]
    with pytest.raises(ValueError, match="managedLedgerOffloadDriver=aws-s3: Bucket cannot be empty for aws-s3 "
                                          "offload"):
        BrokerThread(data_dir=tmp_path / "data", **{**SETTINGS, **tier}).start()
