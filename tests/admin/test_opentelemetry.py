"""OpenTelemetry export, configured Pulsar's way (OTEL_* environment), received over OTLP/HTTP.

The receiver is a small OTLP/HTTP server started by the test that decodes the real protobuf
(opentelemetry-proto's ExportMetricsServiceRequest) and answers as a collector does. The
OpenTelemetry Collector itself could not be had here (its otelcorecol command is not a tagged Go
module, so `go install` cannot fetch it; no release binaries are reachable).
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pulsar
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from broker.admin.otel import SCOPE, OpenTelemetryExport, _request_sender
from broker.admin.otel_instruments import HISTOGRAMS, INSTRUMENTS, AttributeCache, Snapshot, take_snapshot
from broker.embedded import Broker, BrokerThread
from broker.topic_name import TopicName
from tests.component.wire import port_of
from tests.e2e.test_geo_replication import Pair, link
from tests.security.conftest import expiring_token
from tests.security.pki import HS256_SECRET
from tests.transactions.client import T, TxnWireClient
from tests.unit.test_otlp_encode import normalized, parsed
from tests.waiting import wait_for

TIMEOUT_MS = 10_000
OTLP_WAIT_S = 30.0
# Instruments only there in situations this test does not set up: a backlog quota, a time quota's
# backlog age, a compacted topic, a non-persistent producer, a schema compatibility check,
# replication (test_replicator_instruments), transactions (test_transaction_instruments), authentication.
CONDITIONAL = {"pulsar.broker.topic.storage.backlog.quota.limit.size",
               "pulsar.broker.topic.storage.backlog.quota.limit.time", "pulsar.broker.topic.storage.backlog.age",
               "pulsar.broker.topic.compaction.removed.message.count", "pulsar.broker.topic.compaction.operation.count",
               "pulsar.broker.topic.compaction.compacted.entry.count",
               "pulsar.broker.topic.compaction.compacted.entry.size", "pulsar.broker.producer.message.drop.count",
               "pulsar.broker.operation.schema_registry.compatibility_check.count",
               *(n for n in (*INSTRUMENTS, *HISTOGRAMS) if n.startswith(
                   ("pulsar.broker.replication.", "pulsar.broker.transaction.", "pulsar.authentication.")))}


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

    def values(self, name: str, cluster: str) -> dict[tuple[tuple[str, Any], ...], float]:
        """The newest value of each series of metric ``name`` exported by the broker of ``cluster``."""
        out: dict[tuple[tuple[str, Any], ...], float] = {}
        with self._lock:
            requests = list(self.requests)
        for request in requests:
            for rm in request.resource_metrics:
                if {a.key: a.value.string_value for a in rm.resource.attributes}.get("pulsar.cluster") != cluster:
                    continue
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name == name:
                            out.update((tuple(sorted(attrs.items())), v) for attrs, v in points(m))
        return out

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


def histogram_points(metric: Any) -> dict[tuple[tuple[str, Any], ...], tuple[int, float]]:
    """attributes (sorted pairs) -> (count, sum) of a cumulative histogram."""
    assert metric.WhichOneof("data") == "histogram"
    return {tuple(sorted((a.key, a.value.string_value) for a in p.attributes)): (p.count, p.sum)
            for p in metric.histogram.data_points}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.close()


def export_to(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OTel environment of the brokers started next: OTLP/HTTP to ``receiver`` every 300 ms."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)


def test_pulsar_otel_metrics_exported_over_otlp(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    export_to(receiver, monkeypatch)
    topic = f"persistent://public/default/otel-{uuid.uuid4().hex[:8]}-partition-1"
    with BrokerThread(clusterName="otel-cluster") as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(topic, "otel-sub", consumer_name="otel-consumer")
            producer = client.create_producer(topic, producer_name="otel-producer", batching_enabled=False)
            client.create_producer(f"{topic}-typed", schema=pulsar.schema.StringSchema()).close()  # a schema put
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
            # (What arrived are the requests otlp_encode wrote, sent through the OTLP/HTTP exporter.)
            assert _request_sender(broker.server.web.otel._exporter) is not None
        finally:
            client.close()
    assert receiver.bad_requests == 0
    assert set(INSTRUMENTS) - CONDITIONAL <= set(got), sorted(set(INSTRUMENTS) - CONDITIONAL - set(got))
    assert set(HISTOGRAMS) - CONDITIONAL <= set(got)
    # The histograms, recorded where lookups and schema operations happen (seconds, Pulsar's attributes).
    lookups = got["pulsar.broker.request.topic.lookup.duration"][0]
    assert lookups.unit == "s" and got["pulsar.broker.request.topic.lookup.duration"][2] == SCOPE
    answered = histogram_points(lookups)
    assert answered[(("pulsar.lookup.response", "broker"),)][0] >= 1, answered
    schema_ops = histogram_points(got["pulsar.broker.request.schema_registry.duration"][0])
    put = (("pulsar.namespace", "public/default"), ("pulsar.schema_registry.request", "put"),
           ("pulsar.schema_registry.response", "success"))
    assert schema_ops[put][0] >= 1 and schema_ops[put][1] >= 0, schema_ops
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


async def on_loop(fn: Callable[[], Any]) -> Any:
    return fn()


def test_attribute_sets_are_built_once_per_entity_and_dropped_with_it() -> None:
    """The snapshot reuses each topic's, consumer's and producer's attribute dicts while they live (no dict
    per observation), and forgets a topic once it is unloaded."""
    kept = "persistent://public/default/otel-cache-kept"
    gone = "persistent://public/default/otel-cache-gone"
    with BrokerThread(managedLedgerStorage="memory") as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe(kept, "s", consumer_name="c")
            producer = client.create_producer(kept, producer_name="p")
            producer.send(b"x")
            gone_producer = client.create_producer(gone)
            gone_producer.send(b"y")
            web = broker.server.web
            cache = AttributeCache()

            def snapshot() -> Snapshot:
                snap: Snapshot = broker.run_coroutine(take_snapshot(web.ctx, web.sampler, cache))
                return snap

            def attrs_of(snap: Snapshot, instrument: str, topic: str) -> list[Any]:
                local = topic.rsplit("/", 1)[1]  # (managed-ledger instruments name the ledger, not the topic)
                return [a for _, a, _ in snap[instrument] if a.get("pulsar.topic") == topic
                        or str(a.get("pulsar.managed_ledger.name", "")).endswith(f"/{local}")]

            first, second = snapshot(), snapshot()
            # The SDK's data model and encoder (the fallback for exporters without the request path) give
            # the same points as the hand-written requests.
            export = OpenTelemetryExport(web.ctx, web.sampler, env={"OTEL_SDK_DISABLED": "false"})
            export.provider = broker.run_coroutine(on_loop(export._histograms))
            now = time.time_ns()
            by_sdk = normalized(encode_metrics(export.metrics_data(second, now)))
            assert by_sdk == normalized(parsed(export.encoded_requests(second, now))) and len(by_sdk) > 20
            for instrument in ("pulsar.broker.topic.message.incoming.count", "pulsar.broker.consumer.permit.count",
                               "pulsar.broker.producer.message.incoming.count",
                               "pulsar.broker.managed_ledger.message_range.count"):
                (a1,), (a2,) = attrs_of(first, instrument, kept), attrs_of(second, instrument, kept)
                assert a1 is a2 and a1 == a2, instrument
            # One dict per topic serves all its topic-level instruments.
            (incoming,) = attrs_of(second, "pulsar.broker.topic.message.incoming.count", kept)
            (storage,) = attrs_of(second, "pulsar.broker.topic.storage.size", kept)
            assert incoming is storage
            start = cache.topics[kept].start_ns
            assert all(t0 == start for _, a, t0 in second["pulsar.broker.topic.storage.size"] if a is incoming)
            assert gone in cache.topics
            gone_producer.close()
            broker.run_coroutine(broker.server.service.unload_topic(TopicName.parse(gone)))
            third = snapshot()
            assert gone not in cache.topics and not attrs_of(third, "pulsar.broker.topic.storage.size", gone)
            consumer.close()
            fourth = snapshot()
            assert not attrs_of(fourth, "pulsar.broker.consumer.permit.count", kept)
            assert not cache.topics[kept].consumers
        finally:
            client.close()


def test_replicator_instruments(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two clusters replicating one namespace: each broker exports its replicator's series, by remote cluster."""
    export_to(receiver, monkeypatch)
    with (BrokerThread(clusterName="otel-a", data_dir=tmp_path / "a") as a,
          BrokerThread(clusterName="otel-b", data_dir=tmp_path / "b") as b):
        pair = Pair(a, b)
        try:
            link(pair.admin_a, "otel-b", b)
            link(pair.admin_b, "otel-a", a)
            for admin in (pair.admin_a, pair.admin_b):
                admin.ok("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["otel-a", "otel-b"]})
            topic = f"persistent://{pair.namespace(['otel-a', 'otel-b'])}/replicated"
            on_b = pair.client_b.subscribe(topic, "s")
            producer = pair.client_a.create_producer(topic, batching_enabled=False)
            for i in range(5):
                producer.send(b"r%d" % i)
            for _ in range(5):
                on_b.acknowledge(on_b.receive(TIMEOUT_MS))
            series = (("pulsar.domain", "persistent"), ("pulsar.namespace", topic.split("/", 2)[2].rsplit("/", 1)[0]),
                      ("pulsar.tenant", "geo"), ("pulsar.topic", topic))

            def exported(name: str, cluster: str, remote: str) -> float | None:
                value = receiver.values(name, cluster).get(
                    tuple(sorted((*series, ("pulsar.replication.remote.cluster.name", remote)))))
                return value if value is not None and value >= 5 else None

            sent = wait_for(lambda: exported("pulsar.broker.replication.message.outgoing.count", "otel-a", "otel-b"),
                            OTLP_WAIT_S, "a's replicator's outgoing count at the OTLP receiver")
            received = wait_for(lambda: exported("pulsar.broker.replication.message.incoming.count", "otel-b",
                                                 "otel-a"), OTLP_WAIT_S, "b's incoming replicated messages")
            assert sent == received == 5
            size = wait_for(lambda: exported("pulsar.broker.replication.message.outgoing.size", "otel-a", "otel-b"),
                            OTLP_WAIT_S, "a's replicated bytes")
            assert size >= 5 * 2
            backlog = receiver.values("pulsar.broker.replication.message.backlog.count", "otel-a")
            assert backlog and all(v >= 0 for v in backlog.values())
            metric, _, _ = receiver.latest()["pulsar.broker.replication.message.backlog.age"]
            assert metric.WhichOneof("data") == "gauge" and metric.unit == "s"
        finally:
            pair.close()


async def test_transaction_instruments(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A committed transaction that acknowledged a message: the coordinator's and the subscription's
    pending-ack store's series (the raw-protocol client: the Python client has no transactions)."""
    export_to(receiver, monkeypatch)
    topic = "persistent://public/default/otel-txn"
    async with Broker(data_dir=tmp_path, clusterName="otel-txn", transactionCoordinatorEnabled=True) as broker:
        client = await TxnWireClient.open(port_of(broker))
        try:
            assert not (await client.tc_connect(0)).HasField("error")
            await client.producer(topic, 1)
            assert (await client.send(1, 0, "in")).type == T.SEND_RECEIPT
            await client.subscribe(topic, "work", 10)
            (message,) = await client.receive_n(10, 1)
            txn = await client.new_txn()
            assert not (await client.add_subscription(txn, topic, "work")).HasField("error")
            assert not (await client.ack(10, message, txn=txn)).HasField("error")
            assert not (await client.end_txn(txn, commit=True)).HasField("error")

            def coordinator() -> dict[str, float]:
                return {dict(k)["pulsar.transaction.status"]: v for k, v in receiver.values(
                    "pulsar.broker.transaction.coordinator.transaction.count", "otel-txn").items()
                    if dict(k).get("pulsar.transaction.coordinator.id") == 0}

            def pending_ack() -> dict[tuple[tuple[str, Any], ...], float]:
                return receiver.values("pulsar.broker.transaction.pending.ack.store.transaction.count", "otel-txn")

            sub = {"pulsar.namespace": "public/default", "pulsar.subscription.name": "work", "pulsar.tenant": "public",
                   "pulsar.topic": topic, "pulsar.transaction.pending.ack.store.operation.status": "success"}
            committed, aborted = (tuple(sorted({**sub, "pulsar.transaction.status": s}.items()))
                                  for s in ("committed", "aborted"))
            # (polled from a thread: the broker runs on this loop, and exports come every 300 ms)
            await asyncio.to_thread(wait_for, lambda: coordinator().get("committed") == 1
                                    and pending_ack().get(committed) == 1, OTLP_WAIT_S,
                                    "the coordinator's and the pending-ack store's series at the OTLP receiver")
        finally:
            await client.close()
    statuses = coordinator()
    assert statuses["created"] == 1 and statuses["active"] == 0 and statuses["aborted"] == statuses["timeout"] == 0
    appended = receiver.values("pulsar.broker.transaction.coordinator.append.log.count", "otel-txn")
    assert appended[(("pulsar.transaction.coordinator.id", 0),)] >= 2  # (opened, committed: a record each at least)
    assert pending_ack()[aborted] == 0


def test_authentication_instruments(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Token authentication: operations by result, the expired token, the seconds left on an accepted one."""
    export_to(receiver, monkeypatch)
    secret = base64.b64encode(HS256_SECRET).decode()
    with BrokerThread(clusterName="otel-auth", managedLedgerStorage="memory", authenticationEnabled=True,
                      authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                      tokenSecretKey=f"data:;base64,{secret}") as broker:
        good = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                             authentication=pulsar.AuthenticationToken(expiring_token("app", 3600)))
        expired = pulsar.Client(broker.service_url, operation_timeout_seconds=3,
                                authentication=pulsar.AuthenticationToken(expiring_token("app", -60)))
        try:
            good.create_producer("persistent://public/default/otel-auth").send(b"x")
            with pytest.raises(pulsar.PulsarException):
                expired.create_producer("persistent://public/default/otel-auth")

            def operations() -> dict[str, float]:
                return {dict(k)["pulsar.authentication.result"]: v
                        for k, v in receiver.values("pulsar.authentication.operation.count", "otel-auth").items()}

            wait_for(lambda: operations().get("success", 0) >= 1 and operations().get("failure", 0) >= 1
                     and receiver.values("pulsar.authentication.token.expired.count", "otel-auth").get((), 0) >= 1,
                     OTLP_WAIT_S, "the authentication series at the OTLP receiver")
        finally:
            good.close()
            expired.close()
    got = receiver.latest()
    metric, _, scope = got["pulsar.authentication.token.expiry.duration"]
    assert scope == "org.apache.pulsar.authentication" and metric.unit == "s"
    (count, seconds), = histogram_points(metric).values()
    assert count >= 1 and 3000 < seconds / count <= 3600
    (failure,) = [dict(k) for k in receiver.values("pulsar.authentication.operation.count", "otel-auth")
                  if dict(k)["pulsar.authentication.result"] == "failure"]
    assert failure["pulsar.authentication.method"] == "token" and failure["pulsar.authentication.error"]
