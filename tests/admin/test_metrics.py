"""/metrics with Pulsar's names and labels, checked with Prometheus's promtool; rates in stats."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from types import SimpleNamespace

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.admin.metric_families import FAMILIES
from broker.embedded import Broker, BrokerThread
from tests.admin.conftest import Admin
from tests.waiting import eventually, wait_for

TIMEOUT_MS = 10_000
# Pulsar's own metric names that promtool's naming lint dislikes (a "_count" suffix on a gauge).
# We keep them: dashboards and alerts written for Pulsar query exactly these names.
PULSAR_NAMES_WITH_COUNT_SUFFIX = {
    "pulsar_broker_topics_count", "pulsar_broker_subscriptions_count", "pulsar_broker_producers_count",
    "pulsar_broker_consumers_count", "pulsar_connection_created_total_count", "pulsar_connection_closed_total_count",
    "pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
    "pulsar_subscription_consumers_count", "pulsar_topics_count",
}


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread(statsUpdateFrequencyInSecs=0.2, exposeConsumerLevelMetricsInPrometheus=True,
                      exposeProducerLevelMetricsInPrometheus=True) as b:
        yield b


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    yield c
    c.close()


def scrape(web_url: str) -> str:
    with urllib.request.urlopen(f"{web_url}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(r.read().decode())


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, name: str, **labels: str) -> float | None:
    want = set(labels.items())
    for (n, ls), v in samples(text).items():
        if n == name and want <= ls:
            return v
    return None


def promtool_problems(prometheus_bin: str, text: str) -> list[str]:
    proc = subprocess.run([f"{prometheus_bin}/promtool", "check", "metrics"], input=text.encode(),
                          capture_output=True, timeout=30)
    out = (proc.stdout + proc.stderr).decode().strip()
    assert proc.returncode in (0, 3), f"promtool could not parse the exposition (rc={proc.returncode}): {out}"
    return [line for line in out.splitlines() if line.strip()]


# Pulsar's add buckets: gauges named ..._count and ..._sum too (not a Prometheus histogram), and
# entry size buckets named with abbreviated units (..._le_1_kb).
PULSAR_BUCKET_TOTALS = {f"{prefix}_{suffix}" for prefix in ("pulsar_storage_write_latency",
                                                             "pulsar_storage_ledger_write_latency", "pulsar_entry_size")
                        for suffix in ("count", "sum")}
PULSAR_BUCKETS_WITH_UNITS = {f"pulsar_entry_size_le_{b}" for b in ("1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb")}


def assert_only_pulsar_naming_lint(problems: list[str]) -> None:
    """promtool's naming lint may dislike Apache Pulsar's own names (a "_count" suffix on a gauge,
    abbreviated units, camel case in pulsar_ml_*): we keep them, dashboards query exactly these.
    Our own names (pulsar_py_*) and everything else must pass."""
    for line in problems:
        name, _, message = line.partition(" ")
        if name in PULSAR_BUCKET_TOTALS:
            assert '"_count" suffix' in message or '"_sum" suffix' in message, line
            continue
        if name in PULSAR_BUCKETS_WITH_UNITS:
            assert "abbreviated units" in message, line
            continue
        if name in PULSAR_NAMES_WITH_COUNT_SUFFIX:
            assert '"_count" suffix' in message, line
            continue
        assert name in FAMILIES and not name.startswith("pulsar_py_"), line
        assert any(m in message for m in ("camelCase", '"_total" suffix', "counter metrics should",
                                          "non-base units", "abbreviated units", '"_count" suffix',
                                          '"quantile" label')), line


def test_metric_names_labels_and_rates(broker: BrokerThread, client: pulsar.Client, prometheus_bin: str) -> None:
    topic = f"persistent://public/default/metrics-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "msub", consumer_name="mc")
    producer = client.create_producer(topic, producer_name="mp", batching_enabled=False)
    labels = {"cluster": "standalone", "namespace": "public/default", "topic": topic}

    def rates_visible() -> str | None:
        producer.send(b"payload")  # keep traffic in every stats interval while waiting
        consumer.acknowledge(consumer.receive(TIMEOUT_MS))
        text = scrape(broker.web_url)
        ok = all((value(text, n, **labels) or 0) > 0 for n in ("pulsar_rate_in", "pulsar_rate_out",
                                                               "pulsar_throughput_in", "pulsar_throughput_out"))
        return text if ok and (value(text, "pulsar_subscription_msg_rate_out", subscription="msub") or 0) > 0 \
            else None

    text = wait_for(rates_visible, what="non-zero rates in /metrics")
    sent = value(text, "pulsar_in_messages_total", **labels)
    assert sent is not None and sent >= 1
    # bytes are stored entry bytes: the payload plus its metadata
    assert (value(text, "pulsar_in_bytes_total", **labels) or 0) > sent * len(b"payload")
    for name in ("pulsar_producers_count", "pulsar_consumers_count", "pulsar_subscriptions_count"):
        assert value(text, name, **labels) == 1, name
    for name in ("pulsar_storage_size", "pulsar_msg_backlog", "pulsar_storage_backlog_size",
                 "pulsar_average_msg_size", "pulsar_storage_write_rate"):
        assert value(text, name, **labels) is not None, name
    sub = {**labels, "subscription": "msub"}
    for name in ("pulsar_subscription_back_log", "pulsar_subscription_unacked_messages",
                 "pulsar_subscription_msg_throughput_out", "pulsar_out_messages_total", "pulsar_out_bytes_total",
                 "pulsar_subscription_consumers_count", "pulsar_subscription_msg_ack_rate",
                 "pulsar_subscription_last_acked_timestamp", "pulsar_py_permit_invariant_drift"):
        assert value(text, name, **sub) is not None, name
    assert value(text, "pulsar_py_permit_invariant_drift", **sub) == 0
    assert value(text, "pulsar_consumer_msg_rate_out", consumer_name="mc", **sub) is not None
    assert value(text, "pulsar_producer_msg_rate_in", producer_name="mp", **labels) is not None
    for name in ("pulsar_broker_topics_count", "pulsar_broker_rate_in", "pulsar_broker_msg_backlog",
                 "pulsar_active_connections", "pulsar_connection_created_total_count"):
        assert value(text, name, cluster="standalone") is not None, name
    stats = Admin(broker.web_url).stats(topic)
    assert stats["msgInCounter"] >= sent and stats["publishers"][0]["producerName"] == "mp"
    assert_only_pulsar_naming_lint(promtool_problems(prometheus_bin, text))


def test_out_counters_survive_consumers_leaving(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = f"persistent://public/default/outctr-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=False)
    first = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    for i in range(5):
        producer.send(f"a{i}".encode())
    for _ in range(5):
        first.acknowledge(first.receive(TIMEOUT_MS))
    sub = {"topic": topic, "subscription": "shared"}
    assert value(scrape(broker.web_url), "pulsar_out_messages_total", **sub) == 5
    first.close()
    assert value(scrape(broker.web_url), "pulsar_out_messages_total", **sub) == 5  # a counter never drops
    second = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    for i in range(3):
        producer.send(f"b{i}".encode())
    for _ in range(3):
        second.acknowledge(second.receive(TIMEOUT_MS))
    assert value(scrape(broker.web_url), "pulsar_out_messages_total", **sub) == 8
    assert Admin(broker.web_url).stats(topic)["subscriptions"]["shared"]["msgOutCounter"] == 8


class FakeHistogram:
    def __init__(self, cumulative: list[tuple[float, int]], total: float) -> None:
        self._snap = SimpleNamespace(cumulative=lambda: cumulative, count=cumulative[-1][1], total=total)

    def snapshot(self) -> SimpleNamespace:
        return self._snap


def test_ledger_storage_hooks(prometheus_bin: str) -> None:
    # A memory-ledger broker: its factory has no stats, so we give it the file ledger's shape.
    with BrokerThread(managedLedgerStorage="memory") as b:
        factory = b.server.service.ledger_factory
        assert getattr(factory, "stats", None) is None
        assert "pulsar_py_ledger_" not in scrape(b.web_url)  # nothing exported without stats
        factory.stats = SimpleNamespace(  # type: ignore[attr-defined]  # the file factory's shape
            fsync_latency=FakeHistogram([(0.001, 3), (0.01, 7), (float("inf"), 8)], 0.05),
            cache_hits_total=30, cache_misses_total=10, entries_written_total=8, corrupt_records_total=0)
        text = scrape(b.web_url)
    assert value(text, "pulsar_py_ledger_fsync_latency_seconds_bucket", le="0.01") == 7
    assert value(text, "pulsar_py_ledger_fsync_latency_seconds_count") == 8
    assert value(text, "pulsar_py_ledger_cache_hit_ratio") == 0.75
    assert value(text, "pulsar_py_ledger_cache_hits_total") == 30
    assert value(text, "pulsar_py_ledger_entries_written_total") == 8
    assert value(text, "pulsar_py_ledger_group_commit_entries_count") is None  # absent member: no series
    assert_only_pulsar_naming_lint(promtool_problems(prometheus_bin, text))


def test_file_ledger_stats_exported(broker: BrokerThread, client: pulsar.Client) -> None:
    if getattr(broker.server.service.ledger_factory, "stats", None) is None:
        pytest.skip("this broker's storage exposes no stats")
    client.create_producer(f"persistent://public/default/fsync-{uuid.uuid4().hex[:8]}").send(b"durable")
    text = scrape(broker.web_url)
    assert (value(text, "pulsar_py_ledger_entries_written_total") or 0) >= 1
    assert value(text, "pulsar_py_ledger_cache_hit_ratio") is not None


def test_namespace_level_metrics(tmp_path: Path, prometheus_bin: str) -> None:
    with BrokerThread(exposeTopicLevelMetricsInPrometheus=False) as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            for name in ("a", "b"):
                client.create_producer(f"persistent://public/default/{name}").send(b"x")
            text = scrape(b.web_url)
        finally:
            client.close()
    assert value(text, "pulsar_topics_count", namespace="public/default") == 2
    assert value(text, "pulsar_in_messages_total", namespace="public/default") == 2
    assert all("topic" not in dict(labels) for _name, labels in samples(text))
    assert_only_pulsar_naming_lint(promtool_problems(prometheus_bin, text))


def test_storage_write_latency_and_entry_size_buckets(prometheus_bin: str) -> None:
    # Pulsar's per-topic add buckets: one gauge per bucket (not cumulative), counting the entries
    # of the last stats interval (here the sampler runs only when the test says so).
    with BrokerThread(statsUpdateFrequencyInSecs=3600) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            topic = f"persistent://public/default/buckets-{uuid.uuid4().hex[:8]}"
            producer = client.create_producer(topic, batching_enabled=False)
            for size in (10, 10, 3000):
                producer.send(b"x" * size)
            broker.run_coroutine(broker.server.web.sampler.sample_async())
            text = scrape(broker.web_url)
        finally:
            client.close()
    labels = {"topic": topic}
    sizes = {name: value(text, f"pulsar_entry_size_{name}", **labels)
             for name in ("le_128", "le_512", "le_1_kb", "le_2_kb", "le_4_kb", "le_16_kb", "le_100_kb", "le_1_mb",
                          "le_overflow", "count")}
    assert sizes == {"le_128": 2, "le_512": 0, "le_1_kb": 0, "le_2_kb": 0, "le_4_kb": 1, "le_16_kb": 0,
                     "le_100_kb": 0, "le_1_mb": 0, "le_overflow": 0, "count": 3}
    assert value(text, "pulsar_entry_size_sum", **labels) == value(text, "pulsar_in_bytes_total", **labels)
    buckets = ["le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000", "overflow"]
    for prefix in ("pulsar_storage_write_latency", "pulsar_storage_ledger_write_latency"):
        latency = [value(text, f"{prefix}_{b}", **labels) for b in buckets]
        assert None not in latency and sum(v or 0 for v in latency) == value(text, f"{prefix}_count", **labels) == 3
        assert (value(text, f"{prefix}_sum", **labels) or 0) > 0  # microseconds to be durable
    # The whole add takes at least as long as its write.
    whole = value(text, "pulsar_storage_write_latency_sum", **labels)
    write = value(text, "pulsar_storage_ledger_write_latency_sum", **labels)
    assert whole is not None and write is not None and whole >= write
    assert_only_pulsar_naming_lint(promtool_problems(prometheus_bin, text))


def test_expose_switches_behave_as_pulsars() -> None:
    with BrokerThread(splitTopicAndPartitionLabelInPrometheus=True, exposeManagedLedgerMetricsInPrometheus=False,
                      exposePublisherStats=False, exposeProducerLevelMetricsInPrometheus=True) as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            base = f"persistent://public/default/split-{uuid.uuid4().hex[:8]}"
            client.create_producer(f"{base}-partition-3", producer_name="p3").send(b"x")
            client.create_producer(base + "-plain").send(b"y")
            text = scrape(b.web_url)
            stats = Admin(b.web_url).stats(f"{base}-partition-3")
        finally:
            client.close()
    # splitTopicAndPartitionLabelInPrometheus: the partitioned topic's name and the index apart.
    assert value(text, "pulsar_in_messages_total", topic=base, partition="3") == 1
    assert value(text, "pulsar_in_messages_total", topic=base + "-plain", partition="-1") == 1
    assert value(text, "pulsar_in_messages_total", topic=f"{base}-partition-3") is None
    names = {name for name, _labels in samples(text)}
    # exposeManagedLedgerMetricsInPrometheus=false (the cache's and the read limit's series are written anyway, as
    # Pulsar's ManagedLedgerCacheMetrics and its InflightReadsLimiter collectors are)
    assert not [n for n in names if n.startswith("pulsar_ml_")
                and not n.startswith(("pulsar_ml_cache", "pulsar_ml_reads_")) and n != "pulsar_ml_count"]
    assert not [n for n in names if n.startswith("pulsar_ml_cursor_")]  # exposeManagedCursorMetricsInPrometheus off
    assert stats["publishers"] == [] and "pulsar_producer_msg_rate_in" not in names  # exposePublisherStats=false


def test_managed_ledger_families_per_namespace(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = f"persistent://public/default/ml-{uuid.uuid4().hex[:8]}"
    client.create_producer(topic).send(b"z" * 200)
    text = scrape(broker.web_url)
    # (The namespace of Pulsar's managed-ledger series is the ledger name's first three parts, domain included.)
    ns = {"namespace": "public/default/persistent"}
    assert (value(text, "pulsar_ml_StoredMessagesSize", **ns) or 0) >= 200
    assert value(text, "pulsar_ml_StoredMessagesSize", namespace="public/default") is None
    ranges = {dict(labels)["quantile"] for name, labels in samples(text)
              if name == "pulsar_ml_AddEntryLatencyBuckets" and dict(labels).get("namespace") == ns["namespace"]}
    assert ranges == {"0.0_0.5", "0.5_1.0", "1.0_5.0", "5.0_10.0", "10.0_20.0", "20.0_50.0", "50.0_100.0",
                      "100.0_200.0", "200.0_1000.0"}
    # Pulsar 4.0.7's bounds (a scrape of its standalone: quantile="102400.0_1048576.0").
    assert value(text, "pulsar_ml_EntrySizeBuckets", quantile="102400.0_1048576.0", **ns) is not None


async def test_a_scraper_that_goes_away_mid_scrape_is_no_error(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A scraper that closes its connection while /metrics streams (its timeout, say) ends the scrape quietly: no
    error logged with a traceback, no 500 attempted on the closed connection."""
    caplog.set_level(logging.DEBUG, logger="broker.admin.http")
    async with Broker() as b:
        assert b.server is not None
        web = b.server.web
        streaming, release = asyncio.Event(), asyncio.Event()
        stream = web._metrics.stream

        async def held() -> AsyncGenerator[bytes, None]:
            streaming.set()  # (the answer's headers are sent: the stream is what is left)
            await release.wait()
            async for chunk in stream():
                yield chunk

        monkeypatch.setattr(web._metrics, "stream", held)
        _, writer = await asyncio.open_connection("127.0.0.1", b.server.web_port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n")
        await asyncio.wait_for(streaming.wait(), 10)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # (closed with a reset)
        writer.close()
        release.set()  # (the socket's close, with its reset, runs first on the loop's next turn; then the scrape)
        await eventually(lambda: any("during the scrape" in r.getMessage() or r.levelno >= logging.ERROR
                                     for r in caplog.records), "the scrape ended")
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
