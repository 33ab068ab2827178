"""A broker whose data directory is on a small file system that fills up (issue 23, item 1).

The broker runs on an 8 MB tmpfs of its own (a private mount namespace: tests/full_disk.py); the
test fills the tmpfs with a ballast file through /proc/<pid>/root and frees it again. With the official client:

- while the store cannot write, every send fails with the client's send timeout (the broker holds
  refused adds for managedLedgerDiskFullAddHoldSeconds, then answers SendError PersistenceError),
  and producers can still be created;
- readers and consumers keep reading what is stored, and consumers keep acknowledging;
- /admin/v2/brokers/health answers 500 with the reason, /metrics says pulsar_py_storage_write_disabled 1;
- once space is freed, sends succeed again without a restart, and nothing receipted is lost.

Two ways to be full: the free-space floor (managedLedgerDiskUsageThreshold: refused before the
disk is full, metadata still writable) and a disk that is really full (the floor off: writes fail
with ENOSPC; metadata changes answer 500 and leave nothing behind).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.full_disk import (
    new_producer_accepted_but_refused,
    private_mounts_unavailable,
    sends_fail,
    stored_messages_readable,
)
from tests.reliability.limited_broker import LimitedBroker
from tests.waiting import wait_for

TOPIC = "persistent://public/default/disk-full"
SEND_TIMEOUT_MS = 3000
PAYLOAD = 1024
FLOOR = {
    "managedLedgerDiskUsageThreshold": 0.6, "managedLedgerDiskUsageLwmThreshold": 0.5,
    "managedLedgerDiskUsageWarnThreshold": 0.5, "managedLedgerMinFreeDiskSpaceMB": 0,
    "managedLedgerDiskCheckIntervalMillis": 200,
}
NO_FLOOR = {**FLOOR, "managedLedgerDiskUsageThreshold": 1.0, "managedLedgerDiskUsageLwmThreshold": 0.99}

_unavailable = private_mounts_unavailable()
pytestmark = pytest.mark.skipif(_unavailable is not None, reason=str(_unavailable))


@pytest.fixture(params=["floor", "enospc"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, LimitedBroker]]:
    config = FLOOR if request.param == "floor" else NO_FLOOR
    b = LimitedBroker(tmp_path, {"managedLedgerSyncData": "true", **config}, tmpfs_size="8m")
    try:
        yield request.param, b
    finally:
        b.stop()
        print("".join(b.lines[-300:]))  # the broker's log, shown with a failure


def message(i: int) -> bytes:
    return b"%06d" % i + b"." * (PAYLOAD - 6)


def test_sends_fail_while_full_reads_go_on_and_writes_resume_when_space_returns(
        broker: tuple[str, LimitedBroker]) -> None:
    mode, b = broker
    writer = pulsar.Client(b.url, operation_timeout_seconds=10)
    readers = pulsar.Client(b.url, operation_timeout_seconds=10)  # (its own connection: see docs/exhaustion.md)
    try:
        producer = writer.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
        consumer = readers.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        # Never acknowledges: keeps every ledger. (Without it the ledger written before the disk filled goes
        # once "sub" has acknowledged all of it and the ledger is closed by the recovery, as Pulsar trims a
        # consumed ledger: readers hold no data. Whether "sub"'s grouped acks arrive before or after the
        # recovery decided whether a reader from the earliest message still found them.)
        audit = readers.subscribe(TOPIC, "audit", consumer_type=pulsar.ConsumerType.Exclusive)
        receipted: list[bytes] = []
        for i in range(100):
            producer.send(message(i))
            receipted.append(message(i))

        ballast = b.ballast
        if mode == "floor":
            ballast.fill(until_usage=0.7)
            # (The floor looks at the disk every managedLedgerDiskCheckIntervalMillis.)
            wait_for(lambda: b.metric("pulsar_py_storage_write_disabled") == 1.0, what="the write-disabled gauge")
        else:
            ballast.fill()  # the first write that fails for space turns writes off
        if mode == "enospc":
            # (A few more may fit: the last page of a segment file has room until it is full.)
            for _ in range(100):
                try:
                    producer.send(message(len(receipted)))
                except pulsar.PulsarException:
                    break
                receipted.append(message(len(receipted)))
            else:
                pytest.fail("the full disk took 100 more messages")
        sends_fail(producer)
        wait_for(lambda: b.metric("pulsar_py_storage_write_disabled") == 1.0, what="the write-disabled gauge")
        status, text = b.http("GET", "/admin/v2/brokers/health")
        assert status == 500 and ("refuses new entries" in text or "space" in text), text
        new_producer_accepted_but_refused(writer, TOPIC, SEND_TIMEOUT_MS)
        # Readers and consumers read what is stored; consumers acknowledge.
        reader = stored_messages_readable(readers, consumer, TOPIC, receipted)

        if mode == "enospc":
            # A metadata change on the full disk: 500 with the reason, and nothing of it applied. (The
            # journal's last page may still have room for a few small records.)
            for n in range(200):
                status, text = b.http("PUT", f"/admin/v2/namespaces/public/full-disk-{n}", json.dumps({}).encode())
                if status != 204:
                    break
            assert status == 500 and "No space left" in text, (status, text)
            status, text = b.http("GET", "/admin/v2/namespaces/public")
            assert status == 200 and f"public/full-disk-{n}" not in json.loads(text)

        # The acknowledgements are kept in memory (on a really full disk their cursor file cannot be
        # written now) and written once there is room (below).
        persisted = b.metric("pulsar_py_ledger_cursor_persists_total") or 0.0
        ballast.remove()
        full_at = len(receipted)
        wait_for(lambda: (b.metric("pulsar_py_ledger_cursor_persists_total") or 0.0) > persisted,
                 what="the cursor's state to be written once space returns")

        def resumed() -> bool:
            try:
                producer.send(message(len(receipted)))
            except pulsar.PulsarException:
                return False
            receipted.append(message(len(receipted)))
            return True

        wait_for(resumed, timeout=60, what="a send to succeed once space is freed")
        for _ in range(50):
            producer.send(message(len(receipted)))
            receipted.append(message(len(receipted)))
        wait_for(lambda: b.metric("pulsar_py_storage_write_disabled") == 0.0, what="the gauge back at 0")
        assert b.http("GET", "/admin/v2/brokers/health")[0] == 200
        if mode == "enospc":
            status, _ = b.http("PUT", f"/admin/v2/namespaces/public/full-disk-{n}", json.dumps({}).encode())
            assert status == 204

        # Nothing receipted was lost, in order. (The sends that timed out in the client were held by the
        # broker and may have been stored once space returned: a timeout leaves the outcome open.)
        stored: list[bytes] = []
        while receipted[-1] not in stored:
            stored.append(audit.receive(timeout_millis=10_000).data())
        assert [m for m in stored if m in set(receipted)] == receipted
        # The reader and the consumer carry on with the new messages.
        rest = stored[full_at:]
        assert [reader.read_next(timeout_millis=10_000).data() for _ in rest] == rest
        msg = consumer.receive(timeout_millis=10_000)
        assert msg.data() == rest[0]
        assert b.proc.poll() is None
    finally:
        writer.close()
        readers.close()
