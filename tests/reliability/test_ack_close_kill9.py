"""A consumer's acknowledgements survive a kill -9 that comes soon after it closed (issue 20, item 3).

Subscription positions are written at the mark-delete rate (the default 1/s): acks made within a
second of the last write used to wait for the next tick, so a crash half a second after a consumer
closed lost them and the subscription started over. Now the first change after a quiet interval is
written at once and a consumer's close writes whatever is left at once.

The scenario, with the official client and the broker as a process on the default settings: 20
messages, ack the first 5, close the consumer, kill -9 the broker 0.5 s later (the half second is
part of the scenario: the crash comes before the next rate-limited write), restart on the same data:
delivery resumes at message 6.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pulsar

from tests.reliability.broker_process import start_broker

TOPIC = "persistent://public/default/ack-close-kill9"
SUB = "resume"
CRASH_AFTER_CLOSE_S = 0.5  # the scenario's delay, not a wait for a condition


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_acks_before_a_close_survive_a_kill9_half_a_second_later(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = tmp_path / "broker.conf"
    config.write_text("")  # the defaults: managedLedgerDefaultMarkDeleteRateLimit = 1/s
    proc, port = start_broker(data_dir, config)
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(TOPIC, SUB, initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(TOPIC, batching_enabled=False)
            for i in range(20):
                producer.send(b"m%d" % i)
            producer.close()
            received = [consumer.receive(timeout_millis=10_000) for _ in range(20)]
            assert [m.data() for m in received] == [b"m%d" % i for i in range(20)]
            for msg in received[:5]:
                consumer.acknowledge(msg)
            consumer.close()  # sends the grouped acks, then CLOSE_CONSUMER
            time.sleep(CRASH_AFTER_CLOSE_S)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            try:
                client.close()
            except pulsar.PulsarException:
                pass  # (the broker may be gone already)
    finally:
        _stop(proc)

    proc, port = start_broker(data_dir, config)
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(TOPIC, SUB)
            first = consumer.receive(timeout_millis=10_000)
            assert first.data() == b"m5"  # message 6: the five acks were on disk
        finally:
            client.close()
    finally:
        _stop(proc)
