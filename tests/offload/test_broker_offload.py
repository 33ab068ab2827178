"""Offloading through the broker (managedLedgerOffloadDriver=filesystem): a topic's closed ledgers offloaded on
request, their local copies deleted after the namespace's deletion lag, the topic read back from the copies by the
official client after a restart; the stats and metrics that say so."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pulsar

from broker.embedded import BrokerThread
from managed_ledger import segment as seg
from tests.admin.conftest import Admin
from tests.e2e.conftest import topic_name
from tests.offload.support import assert_read_back_from_copies, offload_but_the_last, produce_held
from tests.waiting import wait_for

SETTINGS: dict[str, Any] = {
    "managedLedgerStorage": "file", "managedLedgerOffloadDriver": "filesystem",
    "managedLedgerMaxEntriesPerLedger": 5, "managedLedgerMinLedgerRolloverTimeMinutes": 0,
    "retentionCheckIntervalInSeconds": 1,
}


def local_segments(data_dir: Path) -> set[int]:
    return {i for p in (data_dir / "ledgers").rglob("*") if (i := seg.ledger_id_of(p.name)) is not None}


def test_offload_delete_locally_restart_and_read(tmp_path: Path) -> None:
    topic = topic_name("offloaded")
    path = "/admin/v2/" + topic.replace("://", "/")
    data = tmp_path / "data"
    sent = [f"m{i}".encode() for i in range(22)]
    broker = BrokerThread(data_dir=data, **SETTINGS).start()
    try:
        admin = Admin(broker.web_url)
        last = produce_held(broker, topic, sent)
        ledgers = [lg["ledgerId"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]]
        assert len(ledgers) == 5  # (5, 5, 5, 5 and 2 entries)
        assert admin.ok("GET", path + "/offload")["status"] == "NOT_RUN"

        status, internal = offload_but_the_last(admin, path, last, 30)
        assert status == {"status": "SUCCESS", "lastError": "", "firstUnoffloadedMessage": {
            "ledgerId": ledgers[4], "entryId": 0, "partitionIndex": -1, "batchSize": 0, "batchIndex": -1}}
        stats = admin.ok("GET", path + "/stats")
        assert stats["offloadedStorageSize"] == sum(lg["size"] for lg in internal[:4])
        assert stats["lastOffloadLedgerId"] == ledgers[3] and stats["lastOffloadSuccessTimeStamp"] > 0
        series = f'pulsar_storage_offloaded_size{{cluster="standalone",namespace="public/default",topic="{topic}"}} '
        scraped = [line for line in admin.call("GET", "/metrics").body.decode().splitlines() if line.startswith(series)]
        assert [float(line.split()[-1]) for line in scraped] == [stats["offloadedStorageSize"]]
        assert set(ledgers[:4]) <= local_segments(data)  # (the default lag: 4 hours)

        admin.ok("PUT", "/admin/v2/namespaces/public/default/offloadDeletionLagMs", 0)
        wait_for(lambda: not set(ledgers[:4]) & local_segments(data), 30, "the offloaded ledgers' local copies gone")
    finally:
        broker.stop()

    broker = BrokerThread(data_dir=data, **SETTINGS).start()
    try:
        assert_read_back_from_copies(broker, topic, 4, sent)
    finally:
        broker.stop()


def test_automatic_offload_by_the_namespace_threshold(tmp_path: Path) -> None:
    topic = topic_name("auto-offloaded")
    path = "/admin/v2/" + topic.replace("://", "/")
    broker = BrokerThread(data_dir=tmp_path / "data", **SETTINGS).start()
    try:
        admin = Admin(broker.web_url)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        client.subscribe(topic, "keeps", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(b"a%d" % i)
        client.close()
        assert [lg["offloaded"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]] == [False] * 3
        admin.ok("PUT", "/admin/v2/namespaces/public/default/offloadThreshold", 0)  # (every closed ledger)
        wait_for(lambda: [lg["offloaded"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]]
                 == [True, True, False], 30, "the closed ledgers offloaded by the retention check")
    finally:
        broker.stop()


def ledger_config(broker: BrokerThread, topic: str) -> Any:
    async def get() -> Any:
        return broker.server.service.topics[topic].ledger.config

    return broker.run_coroutine(get())


def test_offload_at_rollover_by_a_namespace_policy_set_while_the_topic_is_loaded(tmp_path: Path) -> None:
    """No retention check runs here (an hour apart): the namespace's threshold reaches the loaded topic when it is
    set, and each ledger rollover offloads (Pulsar's ledgerClosed); its read priority reaches it too."""
    topic = topic_name("rollover-offloaded")
    path = "/admin/v2/" + topic.replace("://", "/")
    broker = BrokerThread(data_dir=tmp_path / "data", **{**SETTINGS, "retentionCheckIntervalInSeconds": 3600}).start()
    try:
        admin = Admin(broker.web_url)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        client.subscribe(topic, "keeps", initial_position=pulsar.InitialPosition.Earliest)
        assert ledger_config(broker, topic).offload.read_tiered_first  # (the broker's default)
        admin.ok("POST", "/admin/v2/namespaces/public/default/offloadPolicies", {
            "managedLedgerOffloadDriver": "filesystem", "managedLedgerOffloadThresholdInBytes": 0,
            "managedLedgerOffloadedReadPriority": "bookkeeper-first"})
        policy = ledger_config(broker, topic).offload
        assert (policy.threshold_bytes, policy.read_tiered_first) == (0, False)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(b"r%d" % i)
        client.close()
        wait_for(lambda: [lg["offloaded"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]]
                 == [True, True, False], 30, "the closed ledgers offloaded at their rollover")
    finally:
        broker.stop()


def test_trigger_offload_on_topic_load(tmp_path: Path) -> None:
    topic = topic_name("offloaded-on-load")
    path = "/admin/v2/" + topic.replace("://", "/")
    data = tmp_path / "data"
    broker = BrokerThread(data_dir=data, **SETTINGS).start()
    try:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        client.subscribe(topic, "keeps", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(b"l%d" % i)
        client.close()
    finally:
        broker.stop()
    broker = BrokerThread(data_dir=data, **{**SETTINGS, "retentionCheckIntervalInSeconds": 3600,
                                            "managedLedgerOffloadAutoTriggerSizeThresholdBytes": 0,
                                            "triggerOffloadOnTopicLoad": True}).start()
    try:
        admin = Admin(broker.web_url)
        wait_for(lambda: [lg["offloaded"] for lg in admin.ok("GET", path + "/internalStats")["ledgers"]]
                 == [True, True, True, False], 30, "the closed ledgers offloaded when the topic loaded")
    finally:
        broker.stop()


def test_scan_offloaded_ledgers(tmp_path: Path) -> None:
    """GET .../scanOffloadedLedgers (Pulsar's, which its filesystem offloader cannot do): every copy of the tier, each
    checked against the ledger list of the managed ledger it belongs to (loaded or not): OK, and for copies nobody
    keeps, why (NOT-FOUND, NOT-OFFLOADED, BAD-UUID); the answer is JSON (Pulsar's is not)."""
    topic, other = topic_name("scanned"), topic_name("scanned-unloaded")
    path = "/admin/v2/" + topic.replace("://", "/")
    data = tmp_path / "data"
    broker = BrokerThread(data_dir=data, **SETTINGS).start()
    try:
        admin = Admin(broker.web_url)
        for name in (topic, other):
            last = produce_held(broker, name, [f"m{i}".encode() for i in range(22)])
            offload_but_the_last(admin, "/admin/v2/" + name.replace("://", "/"), last, 30)
        admin.ok("PUT", "/admin/v2/" + other.replace("://", "/") + "/unload")  # (its ledger list read from disk)
        ledgers = admin.ok("GET", path + "/internalStats")["ledgers"]
        base = data / "offloaded"
        managed_ledger = "/".join([*topic.removeprefix("persistent://").split("/")[:2], "persistent",
                                   topic.rsplit("/", 1)[1]])
        copies = sorted((base / managed_ledger).iterdir())
        # what nobody keeps: a copy of a ledger the topic never had, of its current ledger (not offloaded), another
        # copy of an offloaded ledger, and one of a managed ledger that does not exist
        strays = {f"{managed_ledger}/999999-{uuid.uuid4()}": "NOT-FOUND",
                  f"{managed_ledger}/{ledgers[4]['ledgerId']}-{uuid.uuid4()}": "NOT-OFFLOADED",
                  f"{managed_ledger}/{ledgers[0]['ledgerId']}-{uuid.uuid4()}": "BAD-UUID",
                  f"public/default/persistent/gone/{ledgers[0]['ledgerId']}-{uuid.uuid4()}": "NOT-FOUND"}
        for stray in strays:
            shutil.copytree(copies[0], base / stray)

        answer = admin.ok("GET", "/admin/v2/namespaces/public/default/scanOffloadedLedgers")
        by_name = {o["name"]: o for o in answer["objects"]}
        assert (answer["total"], answer["errors"], answer["unknown"]) == (8 + 4, 4, 0)
        assert {name: o["status"] for name, o in by_name.items() if name in strays} == strays
        mine = [o for name, o in by_name.items() if name.startswith(managed_ledger + "/") and name not in strays]
        assert sorted(o["ledger"] for o in mine) == [lg["ledgerId"] for lg in ledgers[:4]]
        first = next(o for o in mine if o["ledger"] == ledgers[0]["ledgerId"])
        assert first["status"] == "OK" and first["managedLedgerName"] == managed_ledger
        assert (first["numEntries"], first["offloaded"], first["userMetadata"]) == (5, True, {})
        assert first["uri"].startswith("file:///") and first["size"] > 0 and first["lastModified"] > 0
        unloaded = [o for o in answer["objects"] if o.get("managedLedgerName", "").endswith(other.rsplit("/", 1)[1])]
        assert len(unloaded) == 4 and {o["status"] for o in unloaded} == {"OK"}

        assert admin.call("GET", "/admin/v2/namespaces/public/nosuch/scanOffloadedLedgers").status == 404
    finally:
        broker.stop()


def test_scan_without_an_offloader_is_refused(tmp_path: Path) -> None:
    settings = {k: v for k, v in SETTINGS.items() if k != "managedLedgerOffloadDriver"}
    broker = BrokerThread(data_dir=tmp_path / "data", **settings).start()
    try:
        answer = Admin(broker.web_url).call("GET", "/admin/v2/namespaces/public/default/scanOffloadedLedgers")
        assert answer.status == 412
        assert "no offloader is configured for public/default" in answer.body.decode()
    finally:
        broker.stop()
