"""A real Prometheus server scrapes the broker's /metrics and computes a rate from our counters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.prometheus_server import PROMETHEUS_WAIT_S, prometheus_server, query
from tests.waiting import wait_for


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as b:
        yield b


@pytest.fixture
def prometheus(prometheus_bin: str, broker: BrokerThread, tmp_path: Path) -> Iterator[str]:
    with prometheus_server(prometheus_bin, broker.web_url.removeprefix("http://"), tmp_path) as url:
        yield url


def test_prometheus_scrapes_and_computes_a_rate(broker: BrokerThread, prometheus: str) -> None:
    topic = f"persistent://public/default/prom-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "prom-sub")
        producer = client.create_producer(topic, batching_enabled=False)
        wait_for(lambda: [r for r in query(prometheus, 'up{job="pulsar"}') if r["value"][1] == "1"],  # type: ignore[index]
                 PROMETHEUS_WAIT_S, "a successful scrape")

        def rate_seen() -> float | None:
            for _ in range(5):  # keep publishing so consecutive scrapes see the counter grow
                producer.send(b"scraped")
            result = query(prometheus, f'rate(pulsar_in_messages_total{{topic="{topic}"}}[5s])')
            rate = float(result[0]["value"][1]) if result else 0.0  # type: ignore[index]
            return rate if rate > 0 else None

        assert wait_for(rate_seen, PROMETHEUS_WAIT_S, "rate(pulsar_in_messages_total) > 0") > 0
        backlog = query(prometheus, f'pulsar_subscription_back_log{{topic="{topic}",subscription="prom-sub"}}')
        assert backlog and backlog[0]["metric"]["cluster"] == "standalone"  # type: ignore[index]
        consumer.close()
    finally:
        client.close()
