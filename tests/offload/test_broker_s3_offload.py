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
        # the scan: each object's user metadata read (S3 lists none), each copy found in the topic's ledger list
        endpoint.client().put_object(Bucket=bucket, Key="foreign", Body=b"x")
        scan = admin.ok("GET", "/admin/v2/namespaces/public/default/scanOffloadedLedgers")
        assert (scan["total"], scan["errors"], scan["unknown"]) == (9, 0, 1)
        assert {o["name"]: o["status"] for o in scan["objects"]} == {**{key: "OK" for key in objects},
                                                                      "foreign": "UNKNOWN"}
        endpoint.client().delete_object(Bucket=bucket, Key="foreign")

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


def test_a_namespace_and_a_topic_offload_to_the_drivers_their_policies_name(tmp_path: Path,
                                                                            endpoint: S3Endpoint) -> None:
    """Pulsar's BrokerService makes an offloader from the merged offload policies: here the broker has none, a
    namespace's policies name S3, one topic's own policies another bucket; removing them falls back."""
    settings = {k: v for k, v in SETTINGS.items() if k != "managedLedgerOffloadDriver"}
    namespace_tier, namespace_bucket = s3_tier(endpoint)
    topic_tier, topic_bucket = s3_tier(endpoint)
    namespace = "public/default"
    first, second = topic_name("ns-driver"), topic_name("topic-driver")
    broker = BrokerThread(data_dir=tmp_path / "data", **settings).start()
    try:
        admin = Admin(broker.web_url)
        sent = [f"m{i}".encode() for i in range(22)]
        last = {topic: produce_held(broker, topic, sent) for topic in (first, second)}
        path = {topic: "/admin/v2/" + topic.replace("://", "/") for topic in (first, second)}
        admin.ok("PUT", path[first] + "/offload", {"ledgerId": last[first].ledger_id(),
                                                   "entryId": last[first].entry_id()})
        status = wait_for(lambda: (s := admin.ok("GET", path[first] + "/offload"))["status"] != "RUNNING" and s, 30,
                          "the offload run to end")
        assert status["status"] == "ERROR" and "NullLedgerOffloader" in status["lastError"]  # (no driver at all)

        admin.ok("POST", f"/admin/v2/namespaces/{namespace}/offloadPolicies", namespace_tier)
        admin.ok("POST", path[second] + "/offloadPolicies", topic_tier)
        wait_for(lambda: admin.ok("GET", path[second] + "/offloadPolicies") is not None, 10,
                 "the topic's offload policies")
        for topic in (first, second):
            offload_but_the_last(admin, path[topic], last[topic], 30)
        assert len(bucket_keys(endpoint, namespace_bucket)) == 8 and len(bucket_keys(endpoint, topic_bucket)) == 8

        admin.ok("DELETE", path[second] + "/offloadPolicies")
        admin.ok("DELETE", f"/admin/v2/namespaces/{namespace}/removeOffloadPolicies")
        wait_for(lambda: broker.run_coroutine(_tier_of(broker, second)) is None, 10, "the topic back on no driver")
        assert_read_back_from_copies(broker, second, 4, sent)  # (still read from the local copies)

        # deleted with its namespace's driver's copies (the topic deleted closed: the copies by the config it would
        # open with, as Pulsar's factory delete is given)
        admin.ok("POST", f"/admin/v2/namespaces/{namespace}/offloadPolicies", namespace_tier)
        admin.ok("DELETE", path[first] + "?force=true")
        assert bucket_keys(endpoint, namespace_bucket) == []
    finally:
        broker.stop()


async def _tier_of(broker: BrokerThread, topic: str) -> object:
    return broker.server.service.topics[topic].ledger.config.offload.tier
