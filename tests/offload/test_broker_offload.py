"""Offloading through the broker (managedLedgerOffloadDriver=filesystem): a topic's closed ledgers offloaded on
request, their local copies deleted after the namespace's deletion lag, the topic read back from the copies by the
official client after a restart; the stats and metrics that say so."""

from __future__ import annotations

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
