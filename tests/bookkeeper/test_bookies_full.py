"""Bookies whose disks fill up, on BookKeeper storage (issue 23, item 4): real bookies, each with its ledger
directory on a 16 MB tmpfs of its own (a private mount namespace: ``unshare --user --map-root-user --mount``), with
BookKeeper's own disk thresholds (diskUsageThreshold 0.95, diskUsageLwmThreshold 0.90); the test fills a tmpfs
completely with a ballast file (through /proc/<bookie pid>/root) and removes it again.

What a real bookie does then (checked here): its disk checker finds the directory over the threshold, the bookie
turns read-only (readOnlyModeEnabled, the default): its registration moves from /ledgers/available/<id> to
/ledgers/available/readonly/<id> and it answers adds with EREADONLY while still serving reads; once the ballast is
gone it turns writable again by itself.

What the broker's clients see is what they see on a full disk with file storage (test_disk_full.py):
- one bookie full: the ensemble changes away from it (it is never chosen again while read-only), no send fails;
- every bookie full: every send fails at the client's send timeout (adds are held, then PersistenceError), a
  producer can still be created, readers and consumers read what is stored, acknowledgements are written (into the
  cursor's znode: no cursor ledger can be written), health answers 500 and /metrics says why;
- the ballast gone, sends succeed again without a restart, and nothing receipted is lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient

from cluster.local import (
    LEDGERS_ROOT,
    BrokerInfo,
    LocalCluster,
    add_bookie,
    broker_settings,
    kill_broker,
    running_cluster,
    start_broker,
)
from managed_ledger.bookkeeper import metadata as ledger_metadata
from managed_ledger.bookkeeper import ml_formats
from tests.bookkeeper.conftest import require_cluster_deps
from tests.full_disk import (
    Ballast,
    http_call,
    metric_value,
    new_producer_accepted_but_refused,
    on_private_tmpfs,
    private_mounts_unavailable,
    sends_fail,
    stored_messages_readable,
)
from tests.waiting import wait_for

TOPIC = "persistent://public/default/bookies-full"
SEND_TIMEOUT_MS = 3000
PAYLOAD = 1024
TMPFS = "16m"
# BookKeeper's defaults for the thresholds, written out; the disk checked every 500 ms instead of 10 s.
BOOKIE_DISK = {"diskUsageThreshold": "0.95", "diskUsageWarnThreshold": "0.90", "diskUsageLwmThreshold": "0.90",
               "diskCheckInterval": "500", "readOnlyModeEnabled": "true"}

_unavailable = private_mounts_unavailable()
pytestmark = pytest.mark.skipif(_unavailable is not None, reason=str(_unavailable))


class FullableBookie:
    def __init__(self, cluster: LocalCluster, mount: Path) -> None:
        mount.mkdir()
        self.mount = mount
        self.info = add_bookie(cluster, {**BOOKIE_DISK, "ledgerDirectories": str(mount / "ledgers")},
                               on_private_tmpfs(mount, TMPFS, "ledgers", []))
        self.ballast = Ballast(self.info.pid, mount)

    def fill(self) -> None:
        self.ballast.fill()  # until ENOSPC: a really full disk

    def empty(self) -> None:
        self.ballast.remove()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, list[FullableBookie]]]:
    require_cluster_deps()
    state = tmp_path_factory.mktemp("bookies-full")
    with running_cluster(state, bookies=0) as running:
        try:
            yield running, [FullableBookie(running, state / f"mnt-{i}") for i in range(3)]
        finally:
            for broker in list(running.brokers):
                kill_broker(running, broker)


def http(broker: BrokerInfo, method: str, path: str) -> tuple[int, str]:
    return http_call(broker.web_url, method, path)


def metric(broker: BrokerInfo, name: str) -> float | None:
    return metric_value(broker.web_url, name)


def message(i: int) -> bytes:
    return b"%06d" % i + b"." * (PAYLOAD - 6)


def test_full_bookies_fail_sends_in_time_reads_go_on_and_writes_resume(
        cluster: tuple[LocalCluster, list[FullableBookie]]) -> None:
    running, bookies = cluster
    settings = {**broker_settings(running), "managedLedgerCacheSizeMB": "0",  # reads come from the bookies
                "managedLedgerDiskCheckIntervalMillis": "200"}
    broker = start_broker(running, settings, "broker-full")
    zk = KazooClient(hosts=running.zk_address)
    zk.start(timeout=10)
    writer = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    readers = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    filled: list[FullableBookie] = []

    def registered(readonly: bool) -> set[str]:
        path = f"{LEDGERS_ROOT}/available" + ("/readonly" if readonly else "")
        return {c for c in zk.get_children(path) if c != "readonly"} if zk.exists(path) else set()

    def current_ensemble() -> tuple[str, ...]:
        local = TOPIC.rsplit("/", 1)[1]
        info = ml_formats.decode_ledger_info(
            zk.get(f"{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent/{local}")[0])
        data, stat = zk.get(ledger_metadata.ledger_path(info.ledgers[-1].ledger_id))
        return ledger_metadata.parse(data, stat.ctime).last_ensemble.ensemble

    try:
        producer = writer.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
        consumer = readers.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
        # Never acknowledges: keeps every ledger (the other subscription's acks let consumed ledgers be trimmed).
        audit = readers.subscribe(TOPIC, "audit", consumer_type=pulsar.ConsumerType.Exclusive)
        receipted: list[bytes] = []
        ids: list[pulsar.MessageId] = []

        def send_ok(n: int) -> None:
            for _ in range(n):
                data = message(len(receipted))
                ids.append(producer.send(data))
                receipted.append(data)

        send_ok(50)
        assert metric(broker, "pulsar_py_storage_write_disabled") == 0.0
        wait_for(lambda: metric(broker, "pulsar_py_bookkeeper_writable_bookies") == 3.0, what="3 writable bookies")

        # One bookie of the current ensemble full: it turns read-only, the ensemble changes away from it, no send
        # fails.
        ensemble = current_ensemble()
        first = next(b for b in bookies if b.info.address in ensemble)
        first.fill()
        filled.append(first)
        wait_for(lambda: first.info.address in registered(readonly=True), what="the full bookie to turn read-only")
        assert first.info.address not in registered(readonly=False)
        send_ok(50)
        assert first.info.address not in current_ensemble()
        assert metric(broker, "pulsar_py_storage_write_disabled") == 0.0  # two writable bookies: an ensemble

        # Every bookie full: no ensemble can be formed.
        for bookie in bookies:
            if bookie not in filled:
                bookie.fill()
                filled.append(bookie)
        wait_for(lambda: len(registered(readonly=True)) == 3 and not registered(readonly=False),
                 what="all bookies read-only")
        sends_fail(producer)
        wait_for(lambda: metric(broker, "pulsar_py_storage_write_disabled") == 1.0, what="the write-disabled gauge")
        assert metric(broker, "pulsar_py_bookkeeper_writable_bookies") == 0.0
        assert metric(broker, "pulsar_py_bookkeeper_readonly_bookies") == 3.0
        status, text = http(broker, "GET", "/admin/v2/brokers/health")
        assert status == 500 and "refuses new entries" in text and "read-only" in text, (status, text)
        new_producer_accepted_but_refused(writer, TOPIC, SEND_TIMEOUT_MS)

        # Readers and consumers read what is stored (from the read-only bookies: no read cache); acknowledgements
        # are written, into the cursor's znode (no cursor ledger can be written now).
        stored_messages_readable(readers, consumer, TOPIC, receipted)
        last = ids[-1]
        cursor_znode = ml_formats.cursor_path(ml_formats.MANAGED_LEDGERS_ROOT,
                                              "public/default/persistent/" + TOPIC.rsplit("/", 1)[1], "sub")

        def acks_stored() -> bool:
            stored = ml_formats.decode_cursor_info(zk.get(cursor_znode)[0])
            position = stored.record.mark_delete
            return stored.cursors_ledger_id == -1 and (position.ledger_id, position.entry_id) == (
                last.ledger_id(), last.entry_id())

        wait_for(acks_stored, what="the acknowledgements to be written while the bookies are full")

        # Room again: the bookies turn writable by themselves, sends succeed, no restart.
        for bookie in bookies:
            bookie.empty()
        wait_for(lambda: len(registered(readonly=False)) == 3, what="the bookies to turn writable again")
        full_at = len(receipted)

        def resumed() -> bool:
            try:
                send_ok(1)
            except pulsar.PulsarException:
                return False
            return True

        wait_for(resumed, timeout=60, what="a send to succeed once the bookies are writable")
        send_ok(20)
        wait_for(lambda: metric(broker, "pulsar_py_storage_write_disabled") == 0.0, what="the gauge back at 0")
        assert http(broker, "GET", "/admin/v2/brokers/health")[0] == 200

        # Nothing receipted was lost, in order (sends that timed out were held and may have been stored).
        stored: list[bytes] = []
        while receipted[-1] not in stored:
            stored.append(audit.receive(timeout_millis=10_000).data())
        assert [m for m in stored if m in set(receipted)] == receipted
        assert consumer.receive(timeout_millis=10_000).data() == stored[full_at]
    finally:
        writer.close()
        readers.close()
        zk.stop()
        zk.close()
        for bookie in filled:
            bookie.empty()
