"""Cluster mode under faults, real processes and the official client: kill -9 of a topic's owner while producing,
a graceful unload under load, and an owner paused (SIGSTOP) longer than its metadata session.

Each test counts a message as acknowledged only once its receipt is in, and checks that every acknowledged message
is consumed afterwards, once (deduplication is on: what the client resends after a move must not be stored
twice)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

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


@dataclass
class Run:
    """One producing run: the topic, what was acknowledged and consumed, the producing thread."""

    topic: str
    checker: Checker
    producing: Producing

    def acked(self) -> int:
        return acked_count(self.checker)


@contextlib.contextmanager
def producing_through(brokers: Brokers, prefix: str, topic: str | None = None) -> Iterator[Run]:
    """A client given every live broker produces to a new topic (or ``topic``; with a subscription from the start: the
    data stays) until 200 sends are acknowledged; the body injects its fault; on the way out, 200 more must be
    acknowledged after it (the client carried on), then the sending stops with every send's outcome known and the
    client closes."""
    topic = topic or f"persistent://public/default/{prefix}-{os.urandom(3).hex()}"
    checker = Checker()
    client = pulsar.Client(service_urls(*brokers.live), operation_timeout_seconds=30)
    try:
        keep_data(client, topic)
        with Producing(open_producer(client, topic), checker, prefix[0]) as producing:
            wait_acked(checker, 200)
            run = Run(topic, checker, producing)
            yield run
            wait_acked(checker, run.acked() + 200)
            producing.finish()
    finally:
        client.close()


def read_everything(run: Run, broker: BrokerInfo, no_duplicates: bool = True) -> None:
    """Every acknowledged message is read from ``broker`` (and, with deduplication on, none twice)."""
    drain(broker.service_url, run.topic, run.checker)
    assert not run.checker.lost(), "an acknowledged message is not readable"
    if no_duplicates:
        assert not run.checker.duplicates(), f"stored twice: {sorted(run.checker.duplicates())[:5]}"


@contextlib.contextmanager
def fault_to_the_owner(brokers: Brokers, prefix: str, moves: bool = True,
                       no_duplicates: bool = True) -> Iterator[tuple[Run, BrokerInfo, BrokerInfo]]:
    """Two brokers; a client produces through both (``producing_through``) while the body does its fault to the
    topic's owner: it gets the run, the owner and the other broker. Afterwards every acknowledged message is read
    (``read_everything``) from the other broker, which then owns the topic (``moves``), else from the topic's owner
    then."""
    b1, b2 = brokers.start(2)
    with producing_through(brokers, prefix) as run:
        owner = owner_of(brokers, run.topic)
        other = b2 if owner is b1 else b1
        yield run, owner, other
    if moves:
        assert owner_of(brokers, run.topic) is other
    read_everything(run, other if moves else owner_of(brokers, run.topic), no_duplicates)


@pytest.fixture
def dedup_brokers(brokers: Brokers) -> Brokers:
    brokers.settings["brokerDeduplicationEnabled"] = "true"
    return brokers


def test_kill9_of_the_owner_while_producing(dedup_brokers: Brokers) -> None:
    with fault_to_the_owner(dedup_brokers, "kill9") as (_, owner, survivor):
        # The owner's session expires, the client looks up through the survivor, which takes the bundle.
        dedup_brokers.kill(owner)
    assert bundle_owners(dedup_brokers) == {survivor.service_url}


def test_graceful_unload_under_load(dedup_brokers: Brokers) -> None:
    brokers = dedup_brokers
    with fault_to_the_owner(brokers, "unload", moves=False) as (run, _, _):
        for round_ in range(3):
            # Through the broker that does not own it: the namespace unload is passed on to the owner.
            owner = owner_of(brokers, run.topic)
            other = next(b for b in brokers.live if b is not owner)
            released = log_of(owner).count("unloaded")
            http_json(f"{other.web_url}/admin/v2/namespaces/public/default/unload", method="PUT")
            assert log_of(owner).count("unloaded") > released, f"round {round_}: the owner released nothing"
            wait_acked(run.checker, run.acked() + 150)
    assert not run.checker.failed, dict(list(run.checker.failed.items())[:3])


def test_owner_paused_longer_than_its_session(brokers: Brokers) -> None:
    """The owner is stopped (SIGSTOP) past its session timeout: its ownership node vanishes, the other broker takes
    the bundle when a client looks up there and opens the topic (recovery fences the owner's ledger). Resumed, the
    paused broker finds its session lost and stops serving at once; the producer moves to the new owner. No receipt
    names an entry past the end at which the recovery closed the ledger, and every acknowledged message is read."""
    with fault_to_the_owner(brokers, "pause", no_duplicates=False) as (run, paused, taker_broker), \
            zk_view(brokers.cluster, brokers.chroot) as zk:
        old_ledger = zk.managed_ledger(run.topic).ledgers[-1].ledger_id
        os.kill(paused.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: paused.service_url not in bundle_owners(brokers), 3 * SESSION_TIMEOUT_MS / 1000,
                     "the paused broker's ownership to expire")
            taker = pulsar.Client(taker_broker.service_url, operation_timeout_seconds=30)
            try:
                taker.subscribe(run.topic, "taker", initial_position=pulsar.InitialPosition.Earliest).close()
            finally:
                taker.close()
            closed = zk.ledger(old_ledger)
            assert closed.is_closed  # recovered (fenced) by the new owner
            assert bundle_owners(brokers) == {taker_broker.service_url}
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        wait_for(lambda: "metadata session lost" in log_of(paused), WAIT_S, "the paused broker to stop serving")
    with run.checker.lock:
        beyond = {text: pos for text, pos in run.checker.acked.items()
                  if pos[0] == old_ledger and pos[1] > closed.last_entry_id}
    assert not beyond, f"receipts for entries past the fenced ledger's end: {beyond}"


def test_graceful_stop_hands_the_bundles_over(brokers: Brokers) -> None:
    """SIGTERM of the owner while producing: it releases its bundles before it stops (the log says so), the client
    carries on through the other broker, nothing acknowledged is lost."""
    with fault_to_the_owner(brokers, "stop", no_duplicates=False) as (_, owner, _):
        stop_process(owner.pid)
        brokers.cluster.brokers.remove(owner)
        assert "unloaded" in log_of(owner) and "broker stopped" in log_of(owner)
