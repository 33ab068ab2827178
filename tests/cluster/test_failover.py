"""Cluster mode under faults, real processes and the official client: kill -9 of a topic's owner while producing,
a graceful unload under load, and an owner paused (SIGSTOP) longer than its metadata session.

Each test counts a message as acknowledged only once its receipt is in, and checks that every acknowledged message
is consumed afterwards, once (deduplication is on: what the client resends after a move must not be stored
twice)."""

from __future__ import annotations

import os
import signal

import pulsar
import pytest

from cluster.local import BrokerInfo, stop_process
from tests.bookkeeper.test_broker_faults import (
    Checker,
    Producing,
    acked_count,
    drain,
    open_producer,
    wait_acked,
    zk_view,
)
from tests.cluster.conftest import SESSION_TIMEOUT_MS, Brokers, http_json, log_of
from tests.waiting import wait_for

WAIT_S = 60.0


def service_urls(*brokers: BrokerInfo) -> str:
    """One client service URL naming every broker (the client looks up through any live one)."""
    return "pulsar://" + ",".join(b.service_url.removeprefix("pulsar://") for b in brokers)


def owner_of(brokers: Brokers, topic: str) -> BrokerInfo:
    local = topic.removeprefix("persistent://")
    url = http_json(f"{brokers.live[0].web_url}/lookup/v2/topic/persistent/{local}")["brokerUrl"]
    return next(b for b in brokers.live if b.service_url == url)


def bundle_owners(brokers: Brokers) -> set[str]:
    with brokers.zk() as zk:
        return {str(o["nativeUrl"]) for o in brokers.owners(zk).values()}


def keep_data(client: pulsar.Client, topic: str) -> None:
    """A subscription from the start, so that the data stays (with no subscription and no retention, Pulsar's
    trimming deletes what was published, as each new owner rolls the ledger over)."""
    client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()


@pytest.fixture
def dedup_brokers(brokers: Brokers) -> Brokers:
    brokers.settings["brokerDeduplicationEnabled"] = "true"
    return brokers


def test_kill9_of_the_owner_while_producing(dedup_brokers: Brokers) -> None:
    brokers = dedup_brokers
    b1, b2 = brokers.start(2)
    topic = f"persistent://public/default/kill9-{os.urandom(3).hex()}"
    checker = Checker()
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        keep_data(client, topic)
        producer = open_producer(client, topic)
        with Producing(producer, checker, "k") as producing:
            wait_acked(checker, 200)
            owner = owner_of(brokers, topic)
            survivor = b2 if owner is b1 else b1
            brokers.kill(owner)
            acked_at_kill = acked_count(checker)
            # The owner's session expires, the client looks up through the survivor, which takes the bundle.
            wait_acked(checker, acked_at_kill + 200)
            producing.finish()
        assert owner_of(brokers, topic) is survivor
        assert bundle_owners(brokers) == {survivor.service_url}
    finally:
        client.close()
    drain(survivor.service_url, topic, checker)
    assert not checker.lost()
    assert not checker.duplicates(), f"stored twice: {sorted(checker.duplicates())[:5]}"


def test_graceful_unload_under_load(dedup_brokers: Brokers) -> None:
    brokers = dedup_brokers
    b1, b2 = brokers.start(2)
    topic = f"persistent://public/default/unload-{os.urandom(3).hex()}"
    checker = Checker()
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        keep_data(client, topic)
        producer = open_producer(client, topic)
        with Producing(producer, checker, "u") as producing:
            for round_ in range(3):
                wait_acked(checker, acked_count(checker) + 150)
                # Through the broker that does not own it: the namespace unload is passed on to the owner.
                owner = owner_of(brokers, topic)
                other = b2 if owner is b1 else b1
                released = log_of(owner).count("unloaded")
                http_json(f"{other.web_url}/admin/v2/namespaces/public/default/unload", method="PUT")
                assert log_of(owner).count("unloaded") > released, f"round {round_}: the owner released nothing"
            wait_acked(checker, acked_count(checker) + 150)
            producing.finish()
        assert not checker.failed, dict(list(checker.failed.items())[:3])
    finally:
        client.close()
    drain(b1.service_url, topic, checker)
    assert not checker.lost()
    assert not checker.duplicates()


def test_owner_paused_longer_than_its_session(brokers: Brokers) -> None:
    """The owner is stopped (SIGSTOP) past its session timeout: its ownership node vanishes, the other broker takes
    the bundle when a client looks up there and opens the topic (recovery fences the owner's ledger). Resumed, the
    paused broker finds its session lost and stops serving at once; the producer moves to the new owner. No receipt
    names an entry past the end at which the recovery closed the ledger, and every acknowledged message is read."""
    b1, b2 = brokers.start(2)
    topic = f"persistent://public/default/pause-{os.urandom(3).hex()}"
    checker = Checker()
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        keep_data(client, topic)
        producer = open_producer(client, topic)
        with Producing(producer, checker, "p") as producing, zk_view(brokers.cluster, brokers.chroot) as zk:
            wait_acked(checker, 200)
            paused = owner_of(brokers, topic)
            taker_broker = b2 if paused is b1 else b1
            old_ledger = zk.managed_ledger(topic).ledgers[-1].ledger_id
            os.kill(paused.pid, signal.SIGSTOP)
            try:
                wait_for(lambda: paused.service_url not in bundle_owners(brokers), 3 * SESSION_TIMEOUT_MS / 1000,
                         "the paused broker's ownership to expire")
                taker = pulsar.Client(taker_broker.service_url, operation_timeout_seconds=30)
                try:
                    taker.subscribe(topic, "taker", initial_position=pulsar.InitialPosition.Earliest).close()
                finally:
                    taker.close()
                closed = zk.ledger(old_ledger)
                assert closed.is_closed  # recovered (fenced) by the new owner
                assert bundle_owners(brokers) == {taker_broker.service_url}
            finally:
                os.kill(paused.pid, signal.SIGCONT)
            wait_for(lambda: "metadata session lost" in log_of(paused), WAIT_S, "the paused broker to stop serving")
            wait_acked(checker, acked_count(checker) + 200)  # on the new owner
            producing.finish()
            with checker.lock:
                beyond = {text: pos for text, pos in checker.acked.items()
                          if pos[0] == old_ledger and pos[1] > closed.last_entry_id}
            assert not beyond, f"receipts for entries past the fenced ledger's end: {beyond}"
        assert owner_of(brokers, topic) is taker_broker
    finally:
        client.close()
    drain(taker_broker.service_url, topic, checker)
    assert not checker.lost(), "an acknowledged message is not readable from the new owner"


def test_graceful_stop_hands_the_bundles_over(brokers: Brokers) -> None:
    """SIGTERM of the owner while producing: it releases its bundles before it stops (the log says so), the client
    carries on through the other broker, nothing acknowledged is lost."""
    b1, b2 = brokers.start(2)
    topic = f"persistent://public/default/stop-{os.urandom(3).hex()}"
    checker = Checker()
    client = pulsar.Client(service_urls(b1, b2), operation_timeout_seconds=30)
    try:
        keep_data(client, topic)
        producer = open_producer(client, topic)
        with Producing(producer, checker, "g") as producing:
            wait_acked(checker, 200)
            owner = owner_of(brokers, topic)
            survivor = b2 if owner is b1 else b1
            stop_process(owner.pid)
            brokers.cluster.brokers.remove(owner)
            assert "unloaded" in log_of(owner) and "broker stopped" in log_of(owner)
            wait_acked(checker, acked_count(checker) + 200)
            producing.finish()
        assert owner_of(brokers, topic) is survivor
    finally:
        client.close()
    drain(survivor.service_url, topic, checker)
    assert not checker.lost()
