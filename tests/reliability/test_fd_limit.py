"""A broker out of file descriptors (issue 23, item 2).

The broker process runs with RLIMIT_NOFILE = 64 (``prlimit``); the test opens raw TCP connections
until the broker holds every descriptor it may. Then:

- the event loop does not spin: the broker's CPU time over a fixed workload (sends and receives
  on an existing connection) stays within a few times what the same workload costs unflooded
  (uvloop/libuv accepts and at once closes connections it has no descriptor for);
- existing connections keep working;
- a new connection is closed at once (the client retries), and a topic whose load needs a file
  gets PersistenceError "Too many open files" (the client retries);
- once descriptors are freed, new clients and the new topic are served.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.reliability.limited_broker import LimitedBroker
from tests.waiting import wait_for

NOFILE = 64
FLOOD = 120  # raw connections: far more than the broker has descriptors for
WORKLOAD = 200  # sends + receives, measured in broker CPU seconds
TOPIC = "persistent://public/default/fd-limit"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prlimit and /proc/<pid>")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LimitedBroker]:
    if os.system("prlimit --version >/dev/null 2>&1") != 0:
        pytest.skip("no prlimit(1) (util-linux)")
    b = LimitedBroker(tmp_path, {}, nofile=NOFILE)
    try:
        yield b
    finally:
        b.stop()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def workload(producer: pulsar.Producer, consumer: pulsar.Consumer, tag: str) -> None:
    for i in range(WORKLOAD):
        producer.send(f"{tag}-{i}".encode())
    for i in range(WORKLOAD):
        msg = consumer.receive(timeout_millis=10_000)
        assert msg.data() == f"{tag}-{i}".encode()
        consumer.acknowledge(msg)


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_out_of_descriptors_refuses_new_work_without_spinning_and_recovers(broker: LimitedBroker) -> None:
    b = broker
    client = pulsar.Client(b.url, operation_timeout_seconds=60)
    flood: list[socket.socket] = []
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        consumer = client.subscribe(TOPIC, "sub")
        before = b.cpu_seconds()
        workload(producer, consumer, "calm")
        calm = b.cpu_seconds() - before

        for _ in range(FLOOD):
            flood.append(socket.create_connection(("127.0.0.1", b.port), timeout=10))
        wait_for(lambda: open_fds(b.proc.pid) >= NOFILE - 1, what="the broker to hold all its descriptors")
        # A connection past the limit is closed at once (the client's cue to retry).
        late = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        assert closed_by_peer(late)
        late.close()

        before = b.cpu_seconds()
        workload(producer, consumer, "flooded")  # the existing connection is served as before
        flooded = b.cpu_seconds() - before
        # A spinning accept loop would burn a core for the whole workload; refusing costs little.
        assert flooded < 3 * calm + 2.0, (calm, flooded)

        results: dict[str, object] = {}

        def create(key: str, make: pulsar.Client, topic: str) -> None:
            try:
                results[key] = make.create_producer(topic, batching_enabled=False)
            except pulsar.PulsarException as exc:  # pragma: no cover - reported by the assertion below
                results[key] = exc

        # A new topic needs a segment file: its load fails ("Too many open files"), the client retries.
        new_topic = threading.Thread(target=create, args=("topic", client, TOPIC + "-new"))
        # A new client needs a connection: refused, it retries.
        other = pulsar.Client(b.url, operation_timeout_seconds=60)
        new_client = threading.Thread(target=create, args=("client", other, TOPIC))
        new_topic.start()
        new_client.start()
        try:
            for sock in flood:
                sock.close()
            flood.clear()
            new_topic.join(90)
            new_client.join(90)
            assert isinstance(results.get("topic"), pulsar.Producer), results
            assert isinstance(results.get("client"), pulsar.Producer), results
            workload(producer, consumer, "after")
        finally:
            other.close()
        assert b.proc.poll() is None
        assert not any("Traceback" in line for line in b.lines), "".join(b.lines)[-4000:]
    finally:
        for sock in flood:
            sock.close()
        client.close()
