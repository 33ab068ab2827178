"""Cluster mode, link down: the owner of a topic loses its network (to ZooKeeper, the bookies, the clients and the
other broker) while an official client produces with deduplication on; it runs in a network namespace of the test's
own (tests/cluster/netns.py) whose link the test sets down, then up again.

As in Pulsar: the cut broker stops serving once its metadata session is lost, before ZooKeeper expires the session
(only then may another broker take the bundle); the other broker takes it on the client's next lookup, recovery fences
the cut broker's ledger, the producer carries on, nothing acknowledged is lost or stored twice. With the link back,
the cut broker joins again with a new session and does not serve the topic it had (its admin calls redirect to the new
owner)."""

from __future__ import annotations

import datetime
import os
import re

import pulsar
import pytest
import requests

from cluster.local import start_broker
from tests.bookkeeper.test_broker_faults import zk_view
from tests.cluster.conftest import SESSION_TIMEOUT_MS, Brokers, log_of
from tests.cluster.netns import linked_namespace, netns_or_skip
from tests.cluster.test_failover import WAIT_S, bundle_owners, keep_data, owner_of, producing_through, read_everything
from tests.waiting import wait_for

# The client notices a dead connection by its keep-alive (30 s: no pong to a ping, then the next ping) or by a send
# timing out (30 s), then looks up through the other broker.
CARRY_ON_S = 150.0


def first_log_time(log: str, pattern: str) -> datetime.datetime:
    m = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*" + pattern, log, re.MULTILINE)
    assert m, f"no log line matching {pattern!r}"
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")


@pytest.mark.timeout(420)  # (two brokers started, the client's keep-alive to notice the cut, a session to expire)
def test_owner_cut_off_by_link_down(brokers: Brokers) -> None:
    netns_or_skip()
    brokers.settings["brokerDeduplicationEnabled"] = "true"
    topic = f"persistent://public/default/linkdown-{os.urandom(3).hex()}"
    with linked_namespace() as ns:
        cut = start_broker(brokers.cluster, {**brokers.settings, "advertisedAddress": ns.inner_address},
                           f"{brokers.chroot[1:]}-cut", bind_address=ns.inner_address,
                           command_prefix=ns.command_prefix)
        brokers.started.append(cut)
        try:
            # The cut broker owns the topic: created through it while it is the only broker.
            client = pulsar.Client(cut.service_url, operation_timeout_seconds=30)
            try:
                keep_data(client, topic)
            finally:
                client.close()
            (other,) = brokers.start(1)
            registration = f"/loadbalance/brokers/{cut.web_url.removeprefix('http://')}"
            with brokers.zk() as kz:
                first_session = kz.exists(registration).ephemeralOwner
            with producing_through(brokers, "linkdown", topic) as run, zk_view(brokers.cluster, brokers.chroot) as zk:
                assert owner_of(brokers, topic) is cut
                old_ledger = zk.managed_ledger(topic).ledgers[-1].ledger_id
                ns.down()
                try:
                    wait_for(lambda: "metadata session lost" in log_of(cut), 3 * SESSION_TIMEOUT_MS / 1000,
                             "the cut broker to give its session up")
                    acked = run.acked()
                    wait_for(lambda: run.acked() >= acked + 200, CARRY_ON_S,
                             "the producer to carry on through the other broker")
                    assert bundle_owners(brokers) == {other.service_url}
                    closed = zk.ledger(old_ledger)
                    assert closed.is_closed  # recovered (fenced) by the new owner
                finally:
                    ns.up()

            # Back: registered again, with a new session.
            def registered_again() -> bool:
                with brokers.zk() as kz:
                    stat = kz.exists(registration)
                return stat is not None and stat.ephemeralOwner != first_session

            wait_for(registered_again, WAIT_S, "the cut broker to register again with a new session")
            with run.checker.lock:
                beyond = {text: pos for text, pos in run.checker.acked.items()
                          if pos[0] == old_ledger and pos[1] > closed.last_entry_id}
            assert not beyond, f"receipts for entries past the fenced ledger's end: {beyond}"
            # It stopped serving before the other broker took the bundle (the same clock: both logs on this host).
            taken = first_log_time(log_of(other), r"bundle public/default/\S+ now owned by this broker")
            assert first_log_time(log_of(cut), "metadata session lost") < taken
            # Nothing stale: the topic is the new owner's; the old one redirects its admin calls there.
            assert owner_of(brokers, topic) is other
            local = topic.removeprefix("persistent://")
            answer = requests.get(f"{cut.web_url}/admin/v2/persistent/{local}/stats", allow_redirects=False,
                                  timeout=30)
            assert answer.status_code == 307 and answer.headers["Location"].startswith(other.web_url)
            read_everything(run, other)
        finally:
            brokers.kill(cut)  # (before its namespace goes)
