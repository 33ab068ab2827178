"""Deduplication state survives restarts: clean ones (snapshot) and kill -9 (snapshot + replay)."""

from __future__ import annotations

import signal
from pathlib import Path

import pulsar
import pytest

from tests.reliability.broker_process import start_broker

TIMEOUT_MS = 10_000


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_last_sequence_id_and_duplicates_after_restart(tmp_path: Path, stop: signal.Signals) -> None:
    config = tmp_path / "broker.conf"
    # A snapshot every 4 entries: after 10 sends the last 2 are only in the log, so a kill -9
    # exercises the replay of entries written after the snapshot.
    config.write_text("managedLedgerStorage=file\nbrokerDeduplicationEnabled=true\n"
                      "brokerDeduplicationEntriesInterval=4\n")
    data = tmp_path / "data"
    topic = "persistent://public/default/dedup-restart"
    proc, port = start_broker(data, config)
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        for i in range(10):
            producer.send(f"m{i}".encode(), sequence_id=i)
        client.close()
    finally:
        proc.send_signal(stop)
        proc.wait(15)
    proc, port = start_broker(data, config)
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        assert producer.last_sequence_id() == 9
        producer.send(b"duplicate of m7", sequence_id=7)  # acknowledged, not stored again
        producer.send(b"m10", sequence_id=10)
        consumer = client.subscribe(topic, "sub")
        got = []
        for _ in range(11):
            msg = consumer.receive(TIMEOUT_MS)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == [f"m{i}".encode() for i in range(11)]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
        client.close()
    finally:
        proc.terminate()
        proc.wait(15)
