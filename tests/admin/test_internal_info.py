"""``GET .../internal-info`` (``pulsar-admin topics info-internal``): a topic's managed ledger as the storage holds it
(Pulsar's ManagedLedgerInfo), on the file ledger and in memory; the BookKeeper side is in
tests/bookkeeper/test_broker_storage.py, the shape against Pulsar 4.0.7's own in tests/admin/test_pulsar_shapes.py.

What is stored is what shows: a cursor's saved state, not its state in memory; the ledger still written without its
entries and size (as Pulsar's ledger list keeps it), every ledger with them once the topic is unloaded (counted from
the segments' record headers without opening the managed ledger).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin, rest_path
from tests.waiting import wait_for

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$")


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    # (the positions reach the cursor files at once: the test reads what is stored)
    with BrokerThread(data_dir=tmp_path_factory.mktemp("internal-info"),
                      managedLedgerDefaultMarkDeleteRateLimit=0) as b:
        yield b


def info_of(admin: Admin, topic: str) -> Any:
    return admin.ok("GET", f"/admin/v2/{rest_path(topic)}/internal-info")


def new_topic(admin: Admin) -> str:
    return f"persistent://{admin.new_namespace()}/t-{uuid.uuid4().hex[:8]}"


def test_stored_ledgers_and_cursor_before_and_after_unload(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic(admin)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"m" * (i + 1))
    received = [consumer.receive(10_000) for _ in range(10)]
    for i in (0, 1, 2, 5, 6):
        consumer.acknowledge(received[i])
    ledger_id = received[0].message_id().ledger_id()

    def stored_cursor() -> Any:
        cursor = info_of(admin, topic)["cursors"].get("s")
        return cursor if cursor and cursor["markDelete"]["entryId"] == 2 and "individualDeletedMessages" in cursor \
            else None

    cursor = wait_for(stored_cursor, 10, "the acknowledgements stored")
    assert cursor["markDelete"] == {"ledgerId": ledger_id, "entryId": 2}
    # Pulsar's open-closed range: entries 5 and 6
    assert cursor["individualDeletedMessages"] == [{"from": {"ledgerId": ledger_id, "entryId": 4},
                                                    "to": {"ledgerId": ledger_id, "entryId": 6}}]
    assert cursor["version"] == -1 and cursor["cursorsLedgerId"] == -1 and "creationDate" not in cursor
    assert ISO.match(cursor["modificationDate"])

    info = info_of(admin, topic)
    assert info["version"] == -1 and ISO.match(info["modificationDate"]) and "creationDate" not in info
    # The ledger still written: its id only (Pulsar's ledger list has no entries or size for it), timestamp 0.
    assert info["ledgers"] == [{"ledgerId": ledger_id, "timestamp": 0, "isOffloaded": False}]
    assert "terminatedPosition" not in info and "properties" not in info

    producer.close()
    consumer.close()
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/unload")
    info = info_of(admin, topic)
    [row] = info["ledgers"]
    assert row["ledgerId"] == ledger_id and row["entries"] == 10 and row["isOffloaded"] is False
    stats = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/internalStats")  # (loads the topic again)
    assert row["size"] == next(r["size"] for r in stats["ledgers"] if r["ledgerId"] == ledger_id) > 55
    assert row["timestamp"] > 0
    assert info["cursors"]["s"]["markDelete"] == {"ledgerId": ledger_id, "entryId": 2}


def test_terminated_position_and_properties(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic(admin)
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}", {"owner": "team-a"})
    producer = client.create_producer(topic, batching_enabled=False)
    last = producer.send(b"x")
    producer.close()
    admin.ok("POST", f"/admin/v2/{rest_path(topic)}/terminate")
    info = info_of(admin, topic)
    assert info["terminatedPosition"] == {"ledgerId": last.ledger_id(), "entryId": last.entry_id()}
    assert info["properties"] == {"owner": "team-a"}
    assert info["cursors"] == {}


def test_partitioned_topic_has_each_partition(admin: Admin, client: pulsar.Client) -> None:
    topic = new_topic(admin)
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/partitions", 2)
    producer = client.create_producer(topic)
    producer.send(b"x")
    producer.close()
    info = info_of(admin, topic)
    assert info["version"] == 0 and set(info) == {"version", "partitions"}
    assert sorted(info["partitions"]) == [f"{topic}-partition-0", f"{topic}-partition-1"]
    for one in info["partitions"].values():
        assert one["version"] == -1 and isinstance(one["ledgers"], list)
    assert info_of(admin, f"{topic}-partition-1") == info["partitions"][f"{topic}-partition-1"]


def test_refusals(admin: Admin) -> None:
    ns = admin.new_namespace()
    reply = admin.get(f"/admin/v2/persistent/{ns}/nosuch/internal-info")
    assert reply.status == 404 and reply.reason == f"Topic persistent://{ns}/nosuch not found"
    reply = admin.get("/admin/v2/persistent/public/nosuchns/t/internal-info")
    assert reply.status == 404 and reply.reason == "Namespace not found"
    reply = admin.get(f"/admin/v2/non-persistent/{ns}/t/internal-info")
    assert reply.status == 404 and "not found" in reply.reason


def test_in_memory_storage(tmp_path_factory: pytest.TempPathFactory) -> None:
    with BrokerThread(managedLedgerStorage="memory") as broker:
        admin = Admin(broker.web_url)
        topic = new_topic(admin)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            client.subscribe(topic, "s")
            client.create_producer(topic).send(b"x")
        finally:
            client.close()
        info = info_of(admin, topic)
        assert info["version"] == -1 and "modificationDate" not in info
        assert [set(row) for row in info["ledgers"]] == [{"ledgerId", "timestamp", "isOffloaded"}]
        assert set(info["cursors"]["s"]) == {"version", "cursorsLedgerId", "markDelete"}
