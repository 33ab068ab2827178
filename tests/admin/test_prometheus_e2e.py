"""A real Prometheus server scrapes the broker's /metrics and computes a rate from our counters."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.waiting import wait_for

# Prometheus 2.42 applies discovered targets after a fixed 5 s, then scrapes every 500 ms; a rate
# needs two scrapes in its window.
PROMETHEUS_WAIT_S = 30.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as b:
        yield b


@pytest.fixture
def prometheus(prometheus_bin: str, broker: BrokerThread, tmp_path: Path) -> Iterator[str]:
    """A Prometheus server on an ephemeral port scraping the broker; always stopped afterwards."""
    target = broker.web_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\n"
        "scrape_configs:\n  - job_name: pulsar\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n")
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [f"{prometheus_bin}/prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(ready, PROMETHEUS_WAIT_S, "prometheus ready")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
        log.close()


def query(url: str, promql: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5) as r:
        reply = json.loads(r.read())
    assert reply["status"] == "success", reply
    return list(reply["data"]["result"])


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
