"""Faults under load, with real processes (issue 16, items 4 and 5): our broker as a subprocess
(``python -m broker standalone``, managedLedgerStorage=bookkeeper, metadata in ZooKeeper), real bookies and a real
ZooKeeper (cluster/local.py), and the official client producing and consuming.

- kill -9 of the broker while producing: a restarted broker fences and closes the old ledger, writes a new one,
  and every acknowledged message is consumed;
- kill -9 of a bookie of the current ensemble while producing: the ensemble changes, no send fails, nothing
  acknowledged is lost;
- (a paused broker whose topic another broker takes over: in cluster mode, tests/cluster/test_failover.py);
- ZooKeeper restarted under load: producing resumes, nothing acknowledged is lost.

The module has a cluster of its own (ZooKeeper + 3 bookies): it kills bookies and restarts ZooKeeper. Each test
has a ZooKeeper chroot of its own for the brokers' metadata.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient

from cluster.local import (
    BrokerInfo,
    LocalCluster,
    add_bookie,
    broker_settings,
    kill_bookie,
    kill_broker,
    running_cluster,
    start_broker,
    start_zookeeper,
    stop_process,
)
from managed_ledger.bookkeeper import metadata as ledger_metadata
from managed_ledger.bookkeeper import ml_formats
from tests.bookkeeper.conftest import require_cluster_deps
from tests.waiting import wait_for

SEND_TIMEOUT_MS = 30_000
RECEIVE_TIMEOUT_MS = 1_000
WAIT_S = 60.0
IN_FLIGHT = 32  # sends outstanding at once


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_cluster_deps()
    with running_cluster(tmp_path_factory.mktemp("faults"), bookies=3) as running:
        try:
            yield running
        finally:
            for broker in list(running.brokers):
                kill_broker(running, broker)


@contextlib.contextmanager
def broker(cluster: LocalCluster, settings: dict[str, str], name: str, port: int | None = None,
           web_port: int | None = None) -> Iterator[BrokerInfo]:
    info = start_broker(cluster, settings, name, port=port, web_port=web_port)
    try:
        yield info
    finally:
        if info in cluster.brokers:
            kill_broker(cluster, info)


def port_of(info: BrokerInfo) -> int:
    return int(info.service_url.rsplit(":", 1)[1])


def web_port_of(info: BrokerInfo) -> int:
    return int(info.web_url.rsplit(":", 1)[1])


class Checker:
    """What the producer was told and what the consumers saw. Every acknowledged send must be consumed; a
    message is consumed twice only if its send was not acknowledged before the fault."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[str, tuple[int, int]] = {}  # text -> the receipt's (ledger id, entry id)
        self.failed: dict[str, str] = {}
        self.consumed: list[str] = []
        self.ack_times: list[float] = []

    def longest_pause(self) -> tuple[float, float]:
        """The longest time without an acknowledgement, and when it began (time.monotonic())."""
        times = sorted(self.ack_times)
        return max(((b - a, a) for a, b in itertools.pairwise(times)), default=(0.0, 0.0))

    def lost(self) -> set[str]:
        with self.lock:
            return set(self.acked) - set(self.consumed)

    def duplicates(self) -> set[str]:
        seen: set[str] = set()
        return {m for m in self.consumed if m in seen or seen.add(m)}  # type: ignore[func-returns-value]


class Producing:
    """A thread sending ``<prefix>-<n>`` with at most IN_FLIGHT sends outstanding, until stopped."""

    def __init__(self, producer: pulsar.Producer, checker: Checker, prefix: str) -> None:
        self.producer, self.checker, self.prefix = producer, checker, prefix
        self.slots = threading.Semaphore(IN_FLIGHT)
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Producing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def finish(self) -> None:
        """Stop sending and wait until every send has an outcome."""
        self.stop.set()
        self.thread.join(WAIT_S)
        for _ in range(IN_FLIGHT):
            assert self.slots.acquire(timeout=SEND_TIMEOUT_MS / 1000 + WAIT_S), "a send never completed"
        for _ in range(IN_FLIGHT):
            self.slots.release()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.slots.acquire(timeout=0.1):
                continue
            text = f"{self.prefix}-{self.sent}"
            self.sent += 1

            def done(result: pulsar.Result, msg_id: pulsar.MessageId, text: str = text) -> None:
                with self.checker.lock:
                    if result == pulsar.Result.Ok:
                        self.checker.acked[text] = (msg_id.ledger_id(), msg_id.entry_id())
                        self.checker.ack_times.append(time.monotonic())
                    else:
                        self.checker.failed[text] = str(result)
                self.slots.release()

            try:
                self.producer.send_async(text.encode(), done)
            except pulsar.PulsarException as e:  # the producer is closed
                self.checker.failed[text] = str(e)
                self.slots.release()
                return


def acked_count(checker: Checker) -> int:
    with checker.lock:
        return len(checker.acked)


def wait_acked(checker: Checker, at_least: int) -> None:
    try:
        wait_for(lambda: acked_count(checker) >= at_least, WAIT_S, f"{at_least} acknowledged sends")
    except AssertionError as e:
        raise AssertionError(f"{e}: {acked_count(checker)} acknowledged, failures e.g. "
                             f"{dict(list(checker.failed.items())[:3])}") from None


def drain(service_url: str, topic: str, checker: Checker) -> None:
    """Read the topic from the start (a new subscription) until every acknowledged message is seen."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        name = f"check-{uuid.uuid4().hex[:6]}"

        def subscribed() -> pulsar.Consumer | None:
            # After a ZooKeeper restart a metadata-store connection can take up to its session timeout (30 s) to come
            # back (kazoo waits that long for the answer to a handshake the restarting server never gives); creating
            # the subscription writes a cursor znode, so it is retried meanwhile.
            try:
                return client.subscribe(topic, name, initial_position=pulsar.InitialPosition.Earliest)
            except pulsar.PulsarException:
                return None

        consumer = wait_for(subscribed, 2 * WAIT_S, "the checking subscription")

        def seen_all() -> bool:
            with contextlib.suppress(pulsar.Timeout):
                while True:
                    message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
                    checker.consumed.append(message.data().decode())
                    consumer.acknowledge(message)
            return not checker.lost()

        try:
            wait_for(seen_all, WAIT_S, "every acknowledged message consumed")
        except AssertionError as e:
            raise AssertionError(f"{e}: {len(checker.lost())} acknowledged messages never consumed, e.g. "
                                 f"{sorted(checker.lost())[:5]}") from None
    finally:
        client.close()


class Zk:
    def __init__(self, cluster: LocalCluster, chroot: str) -> None:
        self.client = KazooClient(hosts=cluster.zk_address, timeout=10.0)
        self.client.start(timeout=20)
        self.chroot = chroot

    def managed_ledger(self, topic: str) -> ml_formats.StoredManagedLedger:
        local = topic.rsplit("/", 1)[1]
        path = f"{self.chroot}{ml_formats.MANAGED_LEDGERS_ROOT}/public/default/persistent/{local}"
        return ml_formats.decode_ledger_info(self.client.get(path)[0])

    def ledger(self, ledger_id: int) -> ledger_metadata.LedgerMetadata:
        data, stat = self.client.get(ledger_metadata.ledger_path(ledger_id))
        return ledger_metadata.parse(data, stat.ctime)

    def close(self) -> None:
        self.client.stop()
        self.client.close()


@contextlib.contextmanager
def zk_view(cluster: LocalCluster, chroot: str) -> Iterator[Zk]:
    zk = Zk(cluster, chroot)
    try:
        yield zk
    finally:
        zk.close()


def new_topic(kind: str) -> tuple[str, str]:
    """A topic and a ZooKeeper chroot of its own."""
    tag = uuid.uuid4().hex[:8]
    return f"persistent://public/default/{kind}-{tag}", f"/faults-{kind}-{tag}"


def open_producer(client: pulsar.Client, topic: str, send_timeout_ms: int = SEND_TIMEOUT_MS) -> pulsar.Producer:
    return client.create_producer(topic, batching_enabled=False, send_timeout_millis=send_timeout_ms,
                                  max_pending_messages=IN_FLIGHT * 2, block_if_queue_full=True)


def test_broker_kill9_while_producing(cluster: LocalCluster) -> None:
    topic, chroot = new_topic("kill9")
    settings = broker_settings(cluster, chroot)
    checker = Checker()
    with broker(cluster, settings, "kill9") as first, zk_view(cluster, chroot) as zk:
        client = pulsar.Client(first.service_url, operation_timeout_seconds=30)
        try:
            producer = open_producer(client, topic)
            with Producing(producer, checker, "a") as producing:
                wait_acked(checker, 200)
                old_ledger = zk.managed_ledger(topic).ledgers[-1].ledger_id
                assert not zk.ledger(old_ledger).is_closed
                kill_broker(cluster, first)
                with checker.lock:
                    acked_before_kill = set(checker.acked)
                # The same ports: the client reconnects and resends what was pending, and the broker is the same one
                # to the cluster (its id is host:webport): it takes back its bundles at once, without waiting for
                # the previous session to expire.
                with broker(cluster, settings, "kill9", port=port_of(first), web_port=web_port_of(first)) as second:
                    wait_acked(checker, len(acked_before_kill) + 200)
                    producing.finish()
                    info = zk.managed_ledger(topic)
                    ids = [ledger.ledger_id for ledger in info.ledgers]
                    assert old_ledger in ids and ids[-1] > old_ledger, ids  # a new ledger after the old one
                    old = zk.ledger(old_ledger)
                    assert old.is_closed and old.state == ledger_metadata.LedgerState.CLOSED
                    assert not zk.ledger(ids[-1]).is_closed  # the new broker writes there
                    drain(second.service_url, topic, checker)
        finally:
            client.close()
    assert not checker.lost()
    assert not checker.duplicates() & acked_before_kill, "a message acknowledged before the kill came twice"


def test_bookie_kill9_while_producing(cluster: LocalCluster) -> None:
    """Ensemble 2 of 3 bookies, write and ack quorum 2: a dead bookie of the ensemble must be replaced."""
    topic, chroot = new_topic("bookie")
    settings = broker_settings(cluster, chroot, ensemble=2, write_quorum=2, ack_quorum=2)
    checker = Checker()
    with broker(cluster, settings, "bookie") as only, zk_view(cluster, chroot) as zk:
        client = pulsar.Client(only.service_url, operation_timeout_seconds=30)
        try:
            producer = open_producer(client, topic)
            with Producing(producer, checker, "b") as producing:
                wait_acked(checker, 200)
                current = zk.managed_ledger(topic).ledgers[-1].ledger_id
                victim = zk.ledger(current).last_ensemble.ensemble[0]
                kill_bookie(cluster, victim)
                try:
                    after_kill = acked_count(checker)
                    wait_acked(checker, after_kill + 300)
                    producing.finish()
                finally:
                    add_bookie(cluster)  # the module's cluster keeps 3 live bookies
            ensemble = zk.ledger(current)
            assert len(ensemble.segments) > 1 and victim not in ensemble.last_ensemble.ensemble, ensemble
            pause, _ = checker.longest_pause()
            print(f"bookie kill: longest pause without receipts {pause:.2f} s")
            assert pause < SEND_TIMEOUT_MS / 1000
            drain(only.service_url, topic, checker)
        finally:
            client.close()
    assert not checker.failed, f"sends failed: {dict(list(checker.failed.items())[:5])}"
    assert not checker.lost()


def test_zookeeper_restart_under_load(cluster: LocalCluster) -> None:
    topic, chroot = new_topic("zk")
    settings = broker_settings(cluster, chroot)
    checker = Checker()
    with broker(cluster, settings, "zk") as only:
        client = pulsar.Client(only.service_url, operation_timeout_seconds=30)
        try:
            producer = open_producer(client, topic)
            with Producing(producer, checker, "z") as producing:
                wait_acked(checker, 200)
                port = int(cluster.zk_address.rsplit(":", 1)[1])
                stopped_at = time.monotonic()
                stop_process(cluster.zookeeper.pid)
                cluster.zookeeper = start_zookeeper(Path(cluster.state_dir), port=port)
                print(f"zookeeper down for {time.monotonic() - stopped_at:.1f} s")
                # The broker's metadata store saw the connection go and come back (same session, or a new one).
                log = Path(only.log)
                wait_for(lambda: "CONNECTION_LOST" in (text := log.read_text(errors="replace"))
                         and ("RECONNECTED" in text or "SESSION_REESTABLISHED" in text), 2 * WAIT_S,
                         "the broker's metadata store to reconnect")
                after_restart = acked_count(checker)
                wait_acked(checker, after_restart + 300)
                producing.finish()
            pause, began = checker.longest_pause()
            print(f"longest pause without receipts {pause:.1f} s, from {began - stopped_at:.1f} s after the stop")
            drain(only.service_url, topic, checker)
        finally:
            client.close()
    assert not checker.lost()
    assert not checker.failed, f"sends failed: {dict(list(checker.failed.items())[:5])}"
