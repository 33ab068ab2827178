"""Broker behaviour the other official clients' compatibility suite (`make compat`) found missing,
checked here with the Python client and the admin REST API."""

from __future__ import annotations

import uuid

import pulsar

from tests.admin.conftest import Admin, rest_path

TIMEOUT_MS = 10_000


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def test_out_counters_stay_after_the_consumer_left(admin: Admin, client: pulsar.Client) -> None:
    """compat scenario out_counters: msgOutCounter / bytesOutCounter are cumulative, also when the
    consumer came and went between two samples of the stats."""
    topic = new_topic("counters")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    for _ in range(3):
        consumer.acknowledge(consumer.receive(TIMEOUT_MS))
    consumer.close()
    stats = admin.ok("GET", f"/admin/v2/{rest_path(topic)}/stats")
    sub = stats["subscriptions"]["s"]
    assert stats["msgOutCounter"] == 3 and sub["msgOutCounter"] == 3
    assert sub["bytesOutCounter"] > 0 and stats["bytesOutCounter"] == sub["bytesOutCounter"]
    # a second consumer adds to what the first delivered
    consumer = client.subscribe(topic, "s")
    producer.send(b"m3")
    consumer.acknowledge(consumer.receive(TIMEOUT_MS))
    assert admin.ok("GET", f"/admin/v2/{rest_path(topic)}/stats")["subscriptions"]["s"]["msgOutCounter"] == 4
    consumer.close()
    producer.close()
