"""kill -9 the broker of cluster "a" while it publishes and replicates to cluster "b", several rounds.

Cluster a runs as a ``python -m broker standalone`` child process on one data directory; cluster b
runs in this process. A producer with a fixed name and its own sequence ids sends to a; after a
kill it carries on from the last receipted id (a's deduplication drops what a had already stored).
a replicates to b at least once, resending after every restart what b had not confirmed, and b's
deduplication (by the original producer and sequence id) drops the repeats. The check, on b: every
message receipted by a arrives, exactly once, in send order, with nothing that was never sent.
After each restart a loads the replicated topic by itself: no client touches it there until the
next round's producer.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin
from tests.reliability.broker_process import start_broker_with_web
from tests.waiting import wait_for

ROUNDS = int(os.environ.get("GEO_KILL9_ROUNDS", "3"))
TOPIC = "persistent://geo/ns/kept"
IN_FLIGHT = 32


def set_up_a(admin: Admin, b: BrokerThread) -> None:
    """Cluster data for b, the tenant and the replicated, deduplicating namespace (kept in a's data dir)."""
    method = "POST" if admin.get("/admin/v2/clusters/b").status == 200 else "PUT"
    admin.ok(method, "/admin/v2/clusters/b", {"serviceUrl": b.web_url, "brokerServiceUrl": b.service_url})
    if admin.get("/admin/v2/tenants/geo").status == 404:
        admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b"]})
        admin.ok("PUT", "/admin/v2/namespaces/geo/ns")
        admin.ok("POST", "/admin/v2/namespaces/geo/ns/replication", ["a", "b"])
        admin.ok("POST", "/admin/v2/namespaces/geo/ns/deduplication", True)


def produce_until_killed(url: str, proc: subprocess.Popen[str], first_seq: int, kill_after: int) -> int:
    """Send from ``first_seq`` on; SIGKILL the broker after ``kill_after`` receipts. Returns the
    highest receipted sequence id + 1 (receipts come in order)."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    producer = client.create_producer(TOPIC, producer_name="soak", batching_enabled=False,
                                      send_timeout_millis=5000, block_if_queue_full=True)
    slots = threading.Semaphore(IN_FLIGHT)
    lock = threading.Lock()
    receipted = first_seq
    killed = threading.Event()

    def on_receipt(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            nonlocal receipted
            slots.release()
            if result != pulsar.Result.Ok:
                return
            with lock:
                receipted = max(receipted, seq + 1)
                if receipted - first_seq == kill_after and not killed.is_set():
                    os.kill(proc.pid, signal.SIGKILL)
                    killed.set()
        return callback

    seq = first_seq
    while not killed.is_set() and proc.poll() is None:
        if not slots.acquire(timeout=10):
            break
        producer.send_async(b"m%d" % seq, on_receipt(seq), sequence_id=seq)
        seq += 1
    proc.wait(timeout=10)
    try:
        client.close()
    except pulsar.PulsarException:
        pass  # (it may still be reconnecting to the broker that was killed)
    assert killed.is_set(), "the broker died before the test killed it"
    with lock:
        return receipted


def test_replication_survives_kill9_of_the_source(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    config = tmp_path / "a.conf"
    config.write_text("clusterName=a\nmanagedLedgerDefaultMarkDeleteRateLimit=50\n"
                      "brokerDeleteInactiveTopicsEnabled=false\n")
    with BrokerThread(clusterName="b", data_dir=tmp_path / "b", brokerDeleteInactiveTopicsEnabled=False) as b:
        admin_b = Admin(b.web_url)
        admin_b.ok("PUT", "/admin/v2/clusters/a", {})
        admin_b.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["a", "b"]})
        admin_b.ok("PUT", "/admin/v2/namespaces/geo/ns")
        admin_b.ok("POST", "/admin/v2/namespaces/geo/ns/deduplication", True)
        client_b = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            on_b = client_b.subscribe(TOPIC, "check", initial_position=pulsar.InitialPosition.Earliest)
            sent = 0  # every sequence id below it was receipted by a
            for _ in range(ROUNDS):
                proc, port, web = start_broker_with_web(tmp_path / "a", config)
                try:
                    set_up_a(Admin(f"http://127.0.0.1:{web}"), b)
                    sent = produce_until_killed(f"pulsar://127.0.0.1:{port}", proc, sent, rng.randint(50, 300))
                finally:
                    if proc.poll() is None:
                        proc.kill()
                    proc.wait()
            assert sent >= ROUNDS * 50
            # A last start of a: a producer that closes cleanly resends every id the last kill
            # may have left in flight (a drops those it had stored) and ten more, so the ids sent
            # are exactly 0..sent-1; a then replicates what b has not confirmed.
            proc, port, web = start_broker_with_web(tmp_path / "a", config)
            try:
                client_a = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
                producer = client_a.create_producer(TOPIC, producer_name="soak", batching_enabled=False)
                for seq in range(sent, sent + IN_FLIGHT + 10):
                    producer.send(b"m%d" % seq, sequence_id=seq)
                sent += IN_FLIGHT + 10
                client_a.close()
                got: list[bytes] = []

                def all_arrived() -> bool:
                    try:
                        while True:
                            msg = on_b.receive(200)
                            got.append(msg.data())
                            on_b.acknowledge(msg)
                    except pulsar.Timeout:
                        pass
                    return len(got) >= sent

                wait_for(all_arrived, timeout=60, what=f"{sent} messages on b")
                assert got == [b"m%d" % i for i in range(sent)]
                with pytest.raises(pulsar.Timeout):
                    on_b.receive(500)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=15)
        finally:
            client_b.close()
