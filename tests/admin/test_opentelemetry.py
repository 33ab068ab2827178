"""OpenTelemetry export, configured Pulsar's way (OTEL_* environment), received over OTLP/HTTP.

The receiver is a small OTLP/HTTP server started by the test that decodes the real protobuf
(opentelemetry-proto's ExportMetricsServiceRequest) and answers as a collector does. The
OpenTelemetry Collector itself could not be had here (its otelcorecol command is not a tagged Go
module, so `go install` cannot fetch it; no release binaries are reachable).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pulsar
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from broker.admin.otel import INSTRUMENTS, SCOPE
from broker.embedded import BrokerThread
from tests.waiting import wait_for

TIMEOUT_MS = 10_000
OTLP_WAIT_S = 30.0
# Instruments only there in situations this test does not set up: a backlog quota, a time quota's
# backlog age, a compacted topic, a non-persistent producer.
CONDITIONAL = {"pulsar.broker.topic.storage.backlog.quota.limit.size",
               "pulsar.broker.topic.storage.backlog.quota.limit.time", "pulsar.broker.topic.storage.backlog.age",
               "pulsar.broker.topic.compaction.removed.message.count", "pulsar.broker.topic.compaction.operation.count",
               "pulsar.broker.topic.compaction.compacted.entry.count",
               "pulsar.broker.topic.compaction.compacted.entry.size", "pulsar.broker.producer.message.drop.count"}


class OtlpReceiver:
    """POST /v1/metrics with an ExportMetricsServiceRequest (application/x-protobuf)."""

    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        self.bad_requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/metrics" or self.headers.get("Content-Type") != "application/x-protobuf":
                    receiver.bad_requests += 1
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                with receiver._lock:
                    receiver.requests.append(request)
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def latest(self) -> dict[str, Any]:
        """name -> (metric, resource attributes, scope name) from the newest request that has it."""
        out: dict[str, Any] = {}
        with self._lock:
            requests = list(self.requests)
        for request in requests:
            for rm in request.resource_metrics:
                resource = {a.key: a.value.string_value for a in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        out[m.name] = (m, resource, sm.scope.name)
        return out


def points(metric: Any) -> list[tuple[dict[str, Any], float]]:
    data = getattr(metric, metric.WhichOneof("data"))
    out = []
    for p in data.data_points:
        attrs = {a.key: (a.value.int_value if a.value.HasField("int_value") else a.value.string_value)
                 for a in p.attributes}
        out.append((attrs, p.as_int if p.HasField("as_int") else p.as_double))
    return out


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.close()


def test_pulsar_otel_metrics_exported_over_otlp(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    topic = f"persistent://public/default/otel-{uuid.uuid4().hex[:8]}-partition-1"
    with BrokerThread(clusterName="otel-cluster") as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(topic, "otel-sub", consumer_name="otel-consumer")
            producer = client.create_producer(topic, producer_name="otel-producer", batching_enabled=False)
            for _ in range(4):
                producer.send(b"o" * 100)
            for _ in range(4):
                consumer.acknowledge(consumer.receive(TIMEOUT_MS))

            def exported() -> dict[str, Any] | None:
                got = receiver.latest()
                incoming = got.get("pulsar.broker.topic.message.incoming.count")
                if incoming is None:
                    return None
                mine = [v for attrs, v in points(incoming[0]) if attrs.get("pulsar.topic") == topic.rsplit(
                    "-partition-", 1)[0]]
                return got if mine and mine[0] >= 4 else None

            got = wait_for(exported, OTLP_WAIT_S, "pulsar.broker.* metrics at the OTLP receiver")
        finally:
            client.close()
    assert receiver.bad_requests == 0
    assert set(INSTRUMENTS) - CONDITIONAL <= set(got), sorted(set(INSTRUMENTS) - CONDITIONAL - set(got))
    metric, resource, scope = got["pulsar.broker.topic.message.incoming.count"]
    assert resource["pulsar.cluster"] == "otel-cluster" and resource["service.name"] == "pulsar-broker"
    assert scope == SCOPE
    assert metric.unit == "{message}" and metric.sum.is_monotonic
    attrs, value = next(p for p in points(metric) if p[0].get("pulsar.topic", "").startswith(
        "persistent://public/default/otel-"))
    assert attrs == {"pulsar.domain": "persistent", "pulsar.tenant": "public", "pulsar.namespace": "public/default",
                     "pulsar.topic": topic.rsplit("-partition-", 1)[0], "pulsar.partition.index": 1}
    assert value >= 4
    size = got["pulsar.broker.topic.message.incoming.size"][0]
    assert size.unit == "By"
    assert all(v >= 400 for a, v in points(size) if a.get("pulsar.topic") == attrs["pulsar.topic"])
    storage = got["pulsar.broker.topic.storage.size"][0]
    assert not storage.sum.is_monotonic  # an UpDownCounter, as in Pulsar
    connections = {a["pulsar.connection.status"]: v for a, v in points(got["pulsar.broker.connection.count"][0])}
    assert connections["open"] >= 1 and connections["active"] >= 0
    evictions = points(got["pulsar.broker.topic.storage.backlog.quota.eviction.count"][0])
    assert {a["pulsar.backlog.quota.type"] for a, _ in evictions} == {"size", "time"}
    # Consumer and producer instruments carry their own attributes besides the topic's.
    (c_attrs, delivered), = [p for p in points(got["pulsar.broker.consumer.message.outgoing.count"][0])
                             if p[0].get("pulsar.consumer.name") == "otel-consumer"]
    assert delivered >= 4
    assert c_attrs["pulsar.subscription.name"] == "otel-sub" and c_attrs["pulsar.subscription.type"] == "Exclusive"
    assert c_attrs["pulsar.topic"] == attrs["pulsar.topic"] and isinstance(c_attrs["pulsar.consumer.id"], int)
    (p_attrs, published), = [p for p in points(got["pulsar.broker.producer.message.incoming.count"][0])
                             if p[0].get("pulsar.producer.name") == "otel-producer"]
    assert published >= 4 and p_attrs["pulsar.producer.access_mode"] == "shared"
    entries = {a["pulsar.managed_ledger.cache.entry.status"]: v
               for a, v in points(got["pulsar.broker.managed_ledger.cache.entry.count"][0])}
    assert entries["inserted"] >= 4
    outgoing = [v for a, v in points(got["pulsar.broker.managed_ledger.message.outgoing.count"][0])
                if a["pulsar.managed_ledger.operation.status"] == "success"]
    assert sum(outgoing) >= 4


def test_off_unless_enabled_pulsars_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # Pulsar's default: otel.sdk.disabled=true
    with BrokerThread() as broker:
        assert broker.server.web.otel.provider is None


def test_unsupported_exporter_is_refused_without_stopping_the_broker(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with BrokerThread() as broker:
        assert broker.server.web.otel.provider is None
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            client.create_producer("persistent://public/default/otel-still-serving").send(b"x")
        finally:
            client.close()
    assert any("carrier-pigeon" in r.getMessage() for r in caplog.records)
