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
from broker.admin.otel_instruments import (
    COUNTER,
    GAUGE,
    HISTOGRAMS,
    INSTRUMENTS,
    UP_DOWN,
    AttributeCache,
    Snapshot,
    take_snapshot,
)
from broker.embedded import Broker, BrokerThread
from broker.topic_name import TopicName
from tests.admin.conftest import Admin, rest_path
from tests.component.wire import port_of
from tests.e2e.test_geo_replication import Pair, link
from tests.security.conftest import expiring_token
from tests.security.pki import HS256_SECRET
from tests.transactions.client import T, TxnWireClient
from tests.unit.test_otlp_encode import normalized, parsed
from tests.waiting import wait_for

TIMEOUT_MS = 10_000
OTLP_WAIT_S = 30.0
# Instruments only there in situations this test does not set up: a compacted topic
# (test_compaction_instruments), a non-persistent producer, a schema compatibility check, replication
# (test_replicator_instruments), transactions (test_transaction_instruments), authentication.
CONDITIONAL = {"pulsar.broker.producer.message.drop.count",
               "pulsar.broker.operation.schema_registry.compatibility_check.count",
               "pulsar.broker.topic.transaction.buffer.client.operation.count",
               *(n for n in (*INSTRUMENTS, *HISTOGRAMS) if n.startswith(
                   ("pulsar.broker.topic.compaction.", "pulsar.broker.replication.", "pulsar.broker.transaction.",
                    "pulsar.authentication.")))}


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
    base = topic.rsplit("-partition-", 1)[0]
    ledger_name = TopicName.parse(topic).persistence_path
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
                if not {"pulsar.broker.topic.message.incoming.count", "pulsar.broker.consumer.message.ack.count",
                        "pulsar.broker.managed_ledger.persist.operation.count"} <= set(got):
                    return None
                incoming = of_topic(got, "pulsar.broker.topic.message.incoming.count", "pulsar.topic", base)
                acked = of_topic(got, "pulsar.broker.consumer.message.ack.count", "pulsar.topic", base)
                # (the cursor's state is written a little after the acks)
                persisted = [v for a, v in points(got["pulsar.broker.managed_ledger.persist.operation.count"][0])
                             if a["pulsar.managed_ledger.name"] == ledger_name
                             and a["pulsar.managed_ledger.cursor.operation.status"] == "success"]
                return got if incoming >= 4 and acked >= 4 and sum(persisted) >= 1 else None

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
    # Acknowledgments, per consumer; blocked on unacknowledged messages: an UpDownCounter, 0 or 1.
    (ack_attrs, acked), = [p for p in points(got["pulsar.broker.consumer.message.ack.count"][0])
                           if p[0].get("pulsar.consumer.name") == "otel-consumer"]
    assert acked == 4 and ack_attrs == c_attrs and got["pulsar.broker.consumer.message.ack.count"][0].unit == "{ack}"
    blocked = got["pulsar.broker.consumer.blocked"][0]
    assert not blocked.sum.is_monotonic and blocked.unit == "1"
    assert [v for a, v in points(blocked) if a == c_attrs] == [0]
    # The managed ledger's bytes and mark-deletes, and its cursor's state writes (ManagedCursorAttributes).
    ml = {"pulsar.namespace": "public/default", "pulsar.managed_ledger.name": ledger_name}
    for name in ("pulsar.broker.managed_ledger.message.outgoing.logical.size",
                 "pulsar.broker.managed_ledger.message.outgoing.replicated.size",
                 "pulsar.broker.managed_ledger.message.incoming.size"):
        (value,) = [v for a, v in points(got[name][0]) if a == ml]
        assert value >= 400 and got[name][0].unit == "By" and got[name][0].sum.is_monotonic, (name, value)
    (mark_deletes,) = [v for a, v in points(got["pulsar.broker.managed_ledger.mark_delete.count"][0]) if a == ml]
    assert mark_deletes >= 1
    cursor = {**ml, "pulsar.managed_ledger.cursor.name": "otel-sub"}
    persisted = {a["pulsar.managed_ledger.cursor.operation.status"]: v
                 for a, v in points(got["pulsar.broker.managed_ledger.persist.operation.count"][0])
                 if {k: a[k] for k in cursor} == cursor}
    assert persisted["success"] >= 1 and persisted["failure"] == 0
    (written,) = [v for a, v in points(got["pulsar.broker.managed_ledger.cursor.outgoing.logical.size"][0])
                  if a == cursor]
    assert written > 0
    assert got["pulsar.broker.managed_ledger.cursor.outgoing.size"][0].unit == "{By}"
    # No quota set: the limits are -1, as Pulsar's defaults (backlogQuotaDefaultLimitBytes / ...Second).
    for name in ("pulsar.broker.topic.storage.backlog.quota.limit.size",
                 "pulsar.broker.topic.storage.backlog.quota.limit.time"):
        assert [v for a, v in points(got[name][0]) if a == attrs] == [-1], name
    looked_up = {a["pulsar.managed_ledger.cache.operation.status"]: v
                 for a, v in points(got["pulsar.broker.managed_ledger.cache.operation.size"][0])}
    assert set(looked_up) == {"hit", "miss"} and sum(looked_up.values()) >= 400
    limits = {a["pulsar.connection.rate_limit.operation.name"]
              for a, _ in points(got["pulsar.broker.connection.rate_limit.count"][0])}
    assert limits == {"paused", "resumed", "throttled", "unthrottled"}


def of_topic(got: dict[str, Any], name: str, key: str, value: str) -> float:
    """The sum of instrument ``name``'s points whose attribute ``key`` is ``value``."""
    return sum(v for a, v in points(got[name][0]) if a.get(key) == value)


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
            # A replicated subscription: a's topic takes snapshots of both clusters' positions (every second).
            pair.client_a.subscribe(topic, "r", replicate_subscription_state_enabled=True)
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
            # (at least the five: the replicated subscription's snapshot markers go to b too, and count, as Pulsar's
            # replicator counts every entry it sends; how many went by the time of the export is a matter of timing)
            assert sent >= 5 and received >= 5
            size = wait_for(lambda: exported("pulsar.broker.replication.message.outgoing.size", "otel-a", "otel-b"),
                            OTLP_WAIT_S, "a's replicated bytes")
            assert size >= 5 * 2
            backlog = receiver.values("pulsar.broker.replication.message.backlog.count", "otel-a")
            assert backlog and all(v >= 0 for v in backlog.values())
            metric, _, _ = receiver.latest()["pulsar.broker.replication.message.backlog.age"]
            assert metric.WhichOneof("data") == "gauge" and metric.unit == "s"

            def written() -> tuple[int, float] | None:
                got = receiver.latest().get("pulsar.broker.replication.subscription.snapshot.operation.duration")
                return None if got is None else histogram_points(got[0]).get(
                    (("pulsar.replication.subscription.snapshot.operation.result", "success"),))

            count, seconds = wait_for(written, OTLP_WAIT_S, "a replicated-subscription snapshot's duration")
            assert count >= 1 and 0 < seconds / count < 30
            got = receiver.latest()
            assert got["pulsar.broker.replication.subscription.snapshot.operation.duration"][0].unit == "s"
            # (a's export of the count may come after the one the duration was read from: awaited too)
            wait_for(lambda: receiver.values("pulsar.broker.replication.subscription.snapshot.operation.count",
                                             "otel-a").get((), 0) >= count, OTLP_WAIT_S, "the snapshots begun")
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
    # The coordinator's end of the transaction on the topic's subscription, through the transaction buffer
    # client (Pulsar's PersistentTopicAttributes: the topic's attributes without pulsar.domain).
    ends = {(dict(k)["pulsar.transaction.status"], dict(k)["pulsar.transaction.buffer.client.operation.status"]): v
            for k, v in receiver.values("pulsar.broker.topic.transaction.buffer.client.operation.count",
                                        "otel-txn").items() if dict(k)["pulsar.topic"] == topic}
    assert ends == {("committed", "success"): 1, ("committed", "failure"): 0, ("aborted", "success"): 0,
                    ("aborted", "failure"): 0}
    (key,) = [k for k in receiver.values("pulsar.broker.topic.transaction.buffer.client.operation.count",
                                         "otel-txn") if dict(k)["pulsar.topic"] == topic][:1]
    assert "pulsar.domain" not in dict(key)
    assert receiver.values("pulsar.broker.transaction.buffer.client.pending.count", "otel-txn") == {(): 0}


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
    assert count >= 1 and 3000 < seconds / count <= 3601  # (expiring_token rounds its exp up to a whole second)
    (failure,) = [dict(k) for k in receiver.values("pulsar.authentication.operation.count", "otel-auth")
                  if dict(k)["pulsar.authentication.result"] == "failure"]
    assert failure["pulsar.authentication.method"] == "token" and failure["pulsar.authentication.error"]


RATE_LIMIT_OPERATIONS = ("paused", "resumed", "throttled", "unthrottled")


def test_connection_rate_limit_instruments(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer past maxPendingPublishRequestsPerConnection: its connection is throttled and paused, then
    unthrottled and resumed (Pulsar's ServerCnxThrottleTracker operations)."""
    export_to(receiver, monkeypatch)
    with BrokerThread(clusterName="otel-throttle", maxPendingPublishRequestsPerConnection=2) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            producer = client.create_producer("persistent://public/default/otel-throttled", batching_enabled=False)
            for i in range(200):
                producer.send_async(b"t%d" % i, None)
            producer.flush()

            def operations() -> dict[str, float]:
                return {dict(k)["pulsar.connection.rate_limit.operation.name"]: v for k, v in
                        receiver.values("pulsar.broker.connection.rate_limit.count", "otel-throttle").items()}

            wait_for(lambda: all(operations().get(o, 0) >= 1 for o in RATE_LIMIT_OPERATIONS), OTLP_WAIT_S,
                     "the connection's pauses at the OTLP receiver")
        finally:
            client.close()
    got = operations()
    assert got["resumed"] <= got["paused"] and got["unthrottled"] <= got["throttled"] <= got["paused"]
    metric, _, _ = receiver.latest()["pulsar.broker.connection.rate_limit.count"]
    assert metric.sum.is_monotonic and metric.unit == "{operation}"


def test_compaction_instruments(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compacted topic: runs by status, time spent, bytes read and written, what the compacted view holds."""
    export_to(receiver, monkeypatch)
    topic = "persistent://public/default/otel-compacted"
    with BrokerThread(clusterName="otel-compaction") as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        admin = Admin(broker.web_url)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):
                producer.send(b"v" * 50, partition_key=f"k{i % 3}")
            admin.ok("PUT", f"/admin/v2/{rest_path(topic)}/compaction")
            wait_for(lambda: admin.ok("GET", f"/admin/v2/{rest_path(topic)}/compaction")["status"] == "SUCCESS",
                     what="compaction")

            def value(name: str) -> float | None:
                return next((v for k, v in receiver.values(name, "otel-compaction").items()
                             if dict(k).get("pulsar.topic") == topic), None)

            wait_for(lambda: value("pulsar.broker.topic.compaction.outgoing.size"), OTLP_WAIT_S,
                     "the compaction series at the OTLP receiver")
        finally:
            client.close()
    read = value("pulsar.broker.topic.compaction.incoming.size")
    written = value("pulsar.broker.topic.compaction.outgoing.size")
    assert read is not None and written is not None and read >= 10 * 50 and 3 * 50 <= written < read
    assert value("pulsar.broker.topic.compaction.compacted.entry.count") == 3
    assert value("pulsar.broker.topic.compaction.removed.message.count") == 7
    duration = value("pulsar.broker.topic.compaction.duration")
    assert duration is not None and 0 <= duration < 60
    got = receiver.latest()
    metric = got["pulsar.broker.topic.compaction.duration"][0]
    assert metric.unit == "s" and not metric.sum.is_monotonic and points(metric)[0][1] == duration
    statuses = {dict(k)["pulsar.compaction.status"]: v for k, v in receiver.values(
        "pulsar.broker.topic.compaction.operation.count", "otel-compaction").items()}
    assert statuses == {"success": 1, "failure": 0}


def test_the_otlp_exporter_is_the_version_its_private_request_path_was_checked_with() -> None:
    """broker/admin/otel.py sends its hand-encoded requests through OTLPMetricExporter._export_batch, a private
    method read in the versions CHECKED_EXPORTER names. A different installed version must fail here (and the
    broker falls back to the public export), so whoever upgrades it checks the method again and moves the pin
    in pyproject.toml with CHECKED_EXPORTER."""
    import inspect
    import tomllib

    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    from broker.admin.otel import CHECKED_EXPORTER, EXPORTER_PACKAGE, checked_exporter, exporter_version

    found = exporter_version()
    assert checked_exporter(found), f"{EXPORTER_PACKAGE} {found} is outside {CHECKED_EXPORTER}: check _export_batch"
    (low_major, low_minor), (high_major, high_minor) = CHECKED_EXPORTER
    pins = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"{EXPORTER_PACKAGE}>={low_major}.{low_minor},<{high_major}.{high_minor}" in pins
    parameters = list(inspect.signature(OTLPMetricExporter._export_batch).parameters)
    assert parameters == ["self", "export_request"]
    assert not checked_exporter((high_major, high_minor, 0)) and not checked_exporter(None)


def test_an_unchecked_exporter_version_goes_through_the_public_export(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    import broker.admin.otel as otel

    exporter = OTLPMetricExporter(endpoint="http://127.0.0.1:9/v1/metrics")
    try:
        assert _request_sender(exporter) is not None
        monkeypatch.setattr(otel, "exporter_version", lambda: (1, 99, 0))
        assert _request_sender(exporter) is None
    finally:
        exporter.shutdown()


# Every instrument Apache Pulsar 4.0.7's broker registers (read from its jars: each class that builds an
# instrument on an OpenTelemetry Meter, in pulsar-broker, managed-ledger, pulsar-broker-common, pulsar-metadata),
# besides the JVM runtime's, the internal Pulsar clients' and the function worker's.
PULSAR_4_0_INSTRUMENTS = {
    *(f"pulsar.broker.topic.{n}" for n in (
        "subscription.count", "producer.count", "consumer.count", "message.incoming.count",
        "message.outgoing.count", "message.incoming.size", "message.outgoing.size", "publish.rate.limit.count",
        "storage.size", "storage.logical.size", "storage.backlog.size", "storage.offloaded.size",
        "storage.backlog.quota.limit.size", "storage.backlog.quota.limit.time", "storage.backlog.quota.eviction.count",
        "storage.backlog.age", "storage.entry.outgoing.count", "storage.entry.incoming.count",
        "compaction.removed.message.count", "compaction.operation.count", "compaction.duration",
        "compaction.incoming.size", "compaction.outgoing.size", "compaction.compacted.entry.count",
        "compaction.compacted.entry.size", "transaction.count", "transaction.buffer.client.operation.count",
        "subscription.delayed.entry.count")),
    *(f"pulsar.broker.consumer.{n}" for n in (
        "message.outgoing.count", "message.outgoing.size", "message.ack.count", "message.redeliver.count",
        "message.unack.count", "blocked", "permit.count")),
    *(f"pulsar.broker.producer.message.{n}" for n in ("incoming.count", "incoming.size", "drop.count")),
    *(f"pulsar.broker.replication.message.{n}" for n in (
        "incoming.count", "outgoing.count", "incoming.size", "outgoing.size", "backlog.count", "backlog.age",
        "expired.count", "dropped.count")),
    "pulsar.broker.replication.subscription.snapshot.operation.count",
    "pulsar.broker.replication.subscription.snapshot.operation.duration",
    *(f"pulsar.broker.managed_ledger.{n}" for n in (
        "message.outgoing.count", "message.outgoing.logical.size", "message.outgoing.replicated.size",
        "backlog.count", "message.incoming.count", "message.incoming.size", "message.incoming.cache.miss.count",
        "mark_delete.count", "persist.operation.count", "persist.mds.operation.count", "message_range.count",
        "cursor.outgoing.size", "cursor.outgoing.logical.size", "cursor.incoming.size", "count",
        "cache.eviction.count", "cache.entry.count", "cache.entry.size", "cache.operation.count",
        "cache.operation.size", "cache.pool.allocation.active.count", "cache.pool.allocation.size",
        "inflight.read.limit", "inflight.read.usage")),
    "pulsar.broker.request.topic.lookup.duration", "pulsar.broker.request.topic.lookup.concurrent.usage",
    "pulsar.broker.request.topic.lookup.concurrent.limit", "pulsar.broker.topic.load.concurrent.usage",
    "pulsar.broker.topic.load.concurrent.limit", "pulsar.broker.connection.rate_limit.count",
    "pulsar.broker.connection.count", "pulsar.broker.connection.create.operation.count",
    "pulsar.broker.request.schema_registry.duration",
    "pulsar.broker.operation.schema_registry.compatibility_check.count",
    "pulsar.broker.transaction.coordinator.transaction.count", "pulsar.broker.transaction.coordinator.append.log.count",
    "pulsar.broker.transaction.pending.ack.store.transaction.count",
    "pulsar.broker.transaction.buffer.client.pending.count",
    "pulsar.broker.metadata.store.outgoing.size", "pulsar.broker.metadata.store.executor.queue.size",
    "pulsar.authentication.operation.count", "pulsar.authentication.token.expired.count",
    "pulsar.authentication.token.expiry.duration",
    "pulsar.web.executor.thread.limit", "pulsar.web.executor.thread.usage",
    "pulsar.web.filter.rate_limit.request.count",
}
# What has no counterpart here (docs/metrics.md, "Registered by Pulsar 4.0.7 and not here, and why").
NOT_HERE = {"pulsar.broker.managed_ledger.cache.pool.allocation.active.count",
            "pulsar.broker.managed_ledger.cache.pool.allocation.size",
            "pulsar.broker.managed_ledger.inflight.read.limit", "pulsar.broker.managed_ledger.inflight.read.usage",
            "pulsar.broker.request.topic.lookup.concurrent.limit", "pulsar.broker.topic.load.concurrent.limit",
            "pulsar.broker.metadata.store.executor.queue.size", "pulsar.web.executor.thread.limit",
            "pulsar.web.executor.thread.usage", "pulsar.web.filter.rate_limit.request.count"}


def test_every_pulsar_instrument_is_exported_or_documented_as_not_applying() -> None:
    ours = set(INSTRUMENTS) | set(HISTOGRAMS)
    assert ours == PULSAR_4_0_INSTRUMENTS - NOT_HERE, (sorted(ours - PULSAR_4_0_INSTRUMENTS),
                                                       sorted(PULSAR_4_0_INSTRUMENTS - NOT_HERE - ours))
    doc = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    section = doc[doc.index("## OpenTelemetry"):]
    types = {COUNTER: "Counter", UP_DOWN: "UpDownCounter", GAUGE: "Gauge", "histogram": "Histogram"}
    rows = {}
    for line in section.splitlines():
        if line.startswith("| pulsar."):
            name, kind, unit = (cell.strip() for cell in line.strip("|").split("|")[:3])
            rows[name] = (kind.split(" ")[0], unit)
    assert rows == {name: (types[i.kind], i.unit) for name, i in {**INSTRUMENTS, **HISTOGRAMS}.items()}
    not_here = section[section.index("Registered by Pulsar 4.0.7 and not here"):]
    assert [name for name in sorted(NOT_HERE) if f"`{name}`" not in not_here] == []
