"""The hand-written OTLP encoding against the opentelemetry-proto classes and the SDK's own encoder."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from broker.admin.otlp_encode import AttributeBytes, Instrument, PointWriter, data_point, requests
from broker.protocol.varint import varint

NOW = 1_764_633_600_000_000_123
TOPIC = {"pulsar.domain": "persistent", "pulsar.topic": "persistent://t/n/x", "pulsar.partition.index": 3}
OTHER = {"pulsar.namespace": "t/n", "flag": True, "ratio": 0.5, "negative": -7, "unicode": "é✓"}
RESOURCE = {"pulsar.cluster": "c1", "service.name": "pulsar-broker"}
COUNTER = Instrument("pulsar.broker.topic.message.incoming.count", "Messages in", "{message}", False, True)
UP_DOWN = Instrument("pulsar.broker.topic.storage.size", "Storage", "By", False, False)
GAUGE = Instrument("pulsar.broker.topic.storage.backlog.age", "Age", "s", True, False)
SCOPES: Any = [
    ("org.apache.pulsar.broker", "1.0", [
        (COUNTER, [(5, TOPIC, 100), (2**40, OTHER, 200)]),
        (UP_DOWN, [(-3, TOPIC, 100)]),
        (GAUGE, [(1.25, TOPIC, 100), (0, {}, 300)]),
    ]),
    ("org.apache.pulsar.authentication", "1.0", [(COUNTER, [(1, {"pulsar.authentication.result": "success"}, 9)])]),
]


def normalized(request: ExportMetricsServiceRequest) -> list[tuple[Any, ...]]:
    """Every data point with what identifies it, in a comparable form."""
    out = []
    for rm in request.resource_metrics:
        resource = sorted((a.key, a.value.string_value) for a in rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data") or ""
                data = getattr(m, kind)
                shape = (kind, data.is_monotonic, data.aggregation_temporality) if kind == "sum" else (kind,)
                for p in data.data_points:
                    attrs = sorted((a.key, str(getattr(a.value, a.value.WhichOneof("value")))) for a in p.attributes)
                    value = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                    out.append((tuple(resource), sm.scope.name, sm.scope.version, m.name, m.description, m.unit,
                                shape, tuple(attrs), p.start_time_unix_nano, p.time_unix_nano, value))
    return sorted(out)


def sdk_encoded() -> ExportMetricsServiceRequest:
    scopes = []
    for name, version, instruments in SCOPES:
        metrics = []
        for instrument, points in instruments:
            dps = [NumberDataPoint(a, t0, NOW, v) for v, a, t0 in points]
            data: Any = Gauge(dps) if instrument.is_gauge else Sum(dps, AggregationTemporality.CUMULATIVE,
                                                                    instrument.monotonic)
            metrics.append(Metric(instrument.name, instrument.description, instrument.unit, data))
        scopes.append(ScopeMetrics(InstrumentationScope(name, version), metrics, ""))
    return encode_metrics(MetricsData([ResourceMetrics(Resource(RESOURCE), scopes, "")]))


def parsed(bodies: list[bytes]) -> ExportMetricsServiceRequest:
    merged = ExportMetricsServiceRequest()
    for body in bodies:
        one = ExportMetricsServiceRequest()
        one.ParseFromString(body)
        merged.resource_metrics.extend(one.resource_metrics)
    return merged


def test_same_points_as_the_sdk_encoder() -> None:
    bodies = list(requests(RESOURCE, SCOPES, NOW, AttributeBytes(), max_points=1000))
    assert len(bodies) == 1
    mine, sdk = normalized(parsed(bodies)), normalized(sdk_encoded())
    assert mine == sdk and len(mine) == 6


def test_requests_hold_at_most_max_points_and_lose_none() -> None:
    for max_points in (1, 2, 3, 6, 7):
        bodies = list(requests(RESOURCE, SCOPES, NOW, AttributeBytes(), max_points=max_points))
        counts = [len(normalized(parsed([b]))) for b in bodies]
        assert all(0 < c <= max_points for c in counts) and sum(counts) == 6, (max_points, counts)
        assert normalized(parsed(bodies)) == normalized(sdk_encoded())


def test_attribute_sets_encoded_once_while_handed_again_and_dropped_after() -> None:
    encoded = AttributeBytes()
    list(requests(RESOURCE, SCOPES, NOW, encoded, max_points=1000))
    assert len(encoded) == 4  # TOPIC, OTHER, {} and the authentication one
    first = encoded(TOPIC)
    encoded.end()
    assert encoded(TOPIC) is first  # the same bytes object: not encoded again
    encoded.end()
    list(requests(RESOURCE, [("s", "1", [(COUNTER, [(1, OTHER, 0)])])], NOW, encoded, max_points=10))
    assert len(encoded) == 1  # TOPIC was not used by the last request: dropped


def test_varint_of_negative_int64_is_ten_bytes_as_protobuf() -> None:
    assert varint(300) == b"\xac\x02" and varint(0) == b"\x00"
    assert varint(-1) == b"\xff" * 9 + b"\x01"


def test_point_writer_writes_the_bytes_of_data_point() -> None:
    """The batch writer's cached heads give each point exactly the bytes of data_point, whatever the mix of
    start times, attribute sets and value types (ints, doubles, a bool written as a double, negatives)."""
    encoded = AttributeBytes()
    big = {**OTHER, "pad": "x" * 200}  # a point over 127 bytes: a two-byte length
    chunk = [(5, TOPIC, 100), (-3, TOPIC, 100), (1.25, TOPIC, 100), (True, OTHER, 100), (2**62, big, 7),
             (0.0, {}, 0), (7, TOPIC, 101), (-(2**63), big, 7)]
    writer = PointWriter(NOW, encoded)
    for keep_start in (True, False):
        expected = [data_point(encoded(a), t0 if keep_start else 0, NOW, v) for v, a, t0 in chunk]
        assert writer.points(chunk, keep_start) == expected
