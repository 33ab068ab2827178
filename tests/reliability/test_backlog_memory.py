"""A backlog far larger than the read cache: the broker's memory stays bounded while it is read.

The broker process runs with a 1 MiB cache; 48 MiB of messages are produced and then consumed
with the official client. The broker's resident memory (VmRSS, sampled throughout) may grow by
what is in flight (pending sends, a dispatcher read, the consumer's permits worth of socket
buffers), not by the backlog.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pulsar
import pytest

from tests.reliability.broker_process import start_broker

MESSAGES = 6000
SIZE = 8 * 1024  # 48 MiB in all
ALLOWED_GROWTH = 24 * 1024 * 1024  # half the backlog; in-flight data is about 10 MiB
TOPIC = "persistent://public/default/big-backlog"
RECEIVE_TIMEOUT_MS = 20_000

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_reading_a_backlog_larger_than_the_cache_keeps_memory_bounded(tmp_path: Path) -> None:
    config = tmp_path / "broker.conf"
    config.write_text("managedLedgerCacheSizeMB=1\n")
    proc, port = start_broker(tmp_path / "data", config)
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=20)
    try:
        consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
        consumer.close()  # the subscription holds the backlog; nobody reads while we produce
        baseline = rss(proc.pid)
        peak = baseline
        producer = client.create_producer(TOPIC, batching_enabled=False, block_if_queue_full=True,
                                          max_pending_messages=500)
        payload = b"x" * SIZE
        done = threading.Event()
        failures: list[pulsar.Result] = []
        acked = 0

        def on_receipt(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            nonlocal acked
            if result != pulsar.Result.Ok:
                failures.append(result)
            acked += 1
            if acked == MESSAGES:
                done.set()

        for i in range(MESSAGES):
            producer.send_async(payload, on_receipt)
            if i % 250 == 0:
                peak = max(peak, rss(proc.pid))
        assert done.wait(60) and not failures

        consumer = client.subscribe(TOPIC, "sub")
        for i in range(MESSAGES):
            msg = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
            consumer.acknowledge(msg)
            if i % 250 == 0:
                peak = max(peak, rss(proc.pid))
        peak = max(peak, rss(proc.pid))
        assert peak - baseline < ALLOWED_GROWTH, (baseline, peak)
    finally:
        client.close()
        proc.kill()
        proc.wait()
