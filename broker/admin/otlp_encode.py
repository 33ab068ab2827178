"""OTLP metrics requests (``ExportMetricsServiceRequest``, protobuf) written by hand from a snapshot.

Sans-IO: values in, bytes out. Why by hand: the OTLP exporter's encoder builds one protobuf KeyValue
and AnyValue object per attribute per data point (about 40 us a point, 25,000 points per 1,000
topics); here each attribute set is encoded once, kept while the snapshot keeps handing the same
dict (the attribute cache of ``otel_instruments``), and a data point is its cached attribute bytes
and three packed numbers. Checked against the opentelemetry-proto classes in
``tests/unit/test_otlp_encode.py``.

Field numbers (opentelemetry/proto/metrics/v1/metrics.proto, common/v1/common.proto): the request's
``resource_metrics`` 1; ResourceMetrics ``resource`` 1, ``scope_metrics`` 2; Resource ``attributes`` 1;
ScopeMetrics ``scope`` 1, ``metrics`` 2; InstrumentationScope ``name`` 1, ``version`` 2; Metric
``name`` 1, ``description`` 2, ``unit`` 3, ``gauge`` 5, ``sum`` 7; Sum ``data_points`` 1,
``aggregation_temporality`` 2, ``is_monotonic`` 3; Gauge ``data_points`` 1; NumberDataPoint
``start_time_unix_nano`` 2 and ``time_unix_nano`` 3 (fixed64), ``as_double`` 4 (double), ``as_int`` 6
(sfixed64), ``attributes`` 7; KeyValue ``key`` 1, ``value`` 2; AnyValue ``string_value`` 1,
``bool_value`` 2, ``int_value`` 3, ``double_value`` 4.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence

from broker.protocol.varint import varint

CUMULATIVE = 2  # AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
_DOUBLE = struct.Struct("<d")
_SFIXED64 = struct.Struct("<q")
# A data point's start (field 2) and time (field 3): a tag and a fixed64 each.
_START = struct.Struct("<BQ")
_TAG_START, _TAG_TIME = 0x11, 0x19  # fields 2 and 3, wire type 1 (64-bit)
_TAG_DOUBLE, _TAG_INT = b"\x21", b"\x31"  # as_double (4) and as_int (6), wire type 1


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes or an embedded message)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def any_value(value: object) -> bytes:
    if isinstance(value, str):
        return field(1, value.encode())
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    return field(1, str(value).encode())


def attributes(attrs: Mapping[str, object], number: int) -> bytes:
    """Each attribute as a KeyValue in repeated field ``number``."""
    return b"".join(field(number, field(1, k.encode()) + field(2, any_value(v))) for k, v in attrs.items())


# A point's bytes before its value, for one attribute dict: (the dict, start ns, value is an int, head, the
# encoded attributes).
Head = tuple[Mapping[str, object], int, bool, bytes, bytes]


class AttributeBytes:
    """Encoded attribute sets, by the identity of the dict they came from. An entry holds its dict, so
    the id cannot be reused while the entry lives; entries not used by the last request are dropped."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Mapping[str, object], bytes]] = {}
        self._used: dict[int, tuple[Mapping[str, object], bytes]] = {}
        # PointWriter's heads, kept the same way: (gauges' points, without a start time; sums').
        self.heads: tuple[dict[int, Head], ...] = ({}, {})
        self._heads_used: tuple[dict[int, Head], ...] = ({}, {})

    def __call__(self, attrs: Mapping[str, object]) -> bytes:
        key = id(attrs)
        entry = self._used.get(key)
        if entry is None:
            entry = self._cache.get(key)
            if entry is None or entry[0] is not attrs:
                entry = (attrs, attributes(attrs, 7))
            self._used[key] = entry
        return entry[1]

    def end(self) -> None:
        self._cache, self._used = self._used, {}
        self.heads, self._heads_used = self._heads_used, ({}, {})

    def __len__(self) -> int:
        return len(self._cache)


class Instrument:
    """What a metric's header says: name, description, unit, and Sum (monotonic or not) or Gauge."""

    __slots__ = ("description", "is_gauge", "monotonic", "name", "unit")

    def __init__(self, name: str, description: str, unit: str, is_gauge: bool, monotonic: bool) -> None:
        self.name, self.description, self.unit = name, description, unit
        self.is_gauge, self.monotonic = is_gauge, monotonic


def data_point(attrs: bytes, start_ns: int, now_ns: int, value: float) -> bytes:
    """A NumberDataPoint as a data_points field; ``start_ns`` 0 (a gauge's) is left out, as the SDK does. The
    time comes last (protobuf fields may come in any order): all the bytes before it but the value are then
    the same from one export to the next (``PointWriter``)."""
    body = _START.pack(_TAG_START, start_ns) if start_ns else b""
    if isinstance(value, int) and not isinstance(value, bool):
        body += _TAG_INT + _SFIXED64.pack(value)
    else:
        body += _TAG_DOUBLE + _DOUBLE.pack(float(value))
    return field(1, body + attrs + _START.pack(_TAG_TIME, now_ns))


class PointWriter:
    """``data_point`` for many points, faster: all of a point's bytes before its value depend on its attribute
    set, start time and value type only, so they are built once per attribute dict (an entity's attributes
    always come with its start time) and kept from one export to the next with the attribute bytes
    (``AttributeBytes``, dropped with them); a point is head + packed value + attribute bytes + time."""

    def __init__(self, now_ns: int, encoded: AttributeBytes) -> None:
        self.encoded = encoded
        self.time = _START.pack(_TAG_TIME, now_ns)

    def points(self, chunk: Sequence[tuple[float, Mapping[str, object], int]], keep_start: bool) -> list[bytes]:
        kept, used, out = self.encoded.heads[keep_start], self.encoded._heads_used[keep_start], []
        pack_int, pack_double, time = _SFIXED64.pack, _DOUBLE.pack, self.time
        for value, attrs, t0 in chunk:
            start = t0 if keep_start else 0
            is_int = type(value) is int  # (a bool is written as a double, as data_point does)
            key = id(attrs)
            head = used.get(key)
            if head is None or head[1] != start or head[2] is not is_int or head[0] is not attrs:
                head = kept.get(key)
                if head is None or head[1] != start or head[2] is not is_int or head[0] is not attrs:
                    head = self._head(attrs, start, is_int)
                used[key] = head
            out.append(head[3] + (pack_int(value) if is_int else pack_double(float(value))) + head[4] + time)
        return out

    def _head(self, attrs: Mapping[str, object], start_ns: int, is_int: bool) -> Head:
        attr_bytes = self.encoded(attrs)
        start = _START.pack(_TAG_START, start_ns) if start_ns else b""
        length = len(start) + 9 + len(attr_bytes) + 9
        return attrs, start_ns, is_int, b"\x0a" + varint(length) + start + (_TAG_INT if is_int else _TAG_DOUBLE), \
            attr_bytes


def metric(instrument: Instrument, points: Sequence[bytes]) -> bytes:
    """A Metric of already encoded data points (each one ``field(1, NumberDataPoint)``)."""
    header = field(1, instrument.name.encode()) + field(2, instrument.description.encode()) + field(
        3, instrument.unit.encode())
    if instrument.is_gauge:
        return header + field(5, b"".join(points))
    return header + field(7, b"".join(points) + b"\x10" + varint(CUMULATIVE)
                          + (b"\x18\x01" if instrument.monotonic else b""))


def requests(resource: Mapping[str, object], scopes: Sequence[tuple[str, str, Sequence[tuple[Instrument, list[
        tuple[float, Mapping[str, object], int]]]]]], now_ns: int, encoded: AttributeBytes,
             max_points: int) -> Iterator[bytes]:
    """ExportMetricsServiceRequest bodies of at most ``max_points`` data points each: ``scopes`` is
    (scope name, scope version, [(instrument, [(value, attributes, start ns)])])."""
    resource_bytes = field(1, attributes(resource, 1))
    scope_bodies: list[bytes] = []
    n = 0

    def flush() -> bytes:
        body = field(1, resource_bytes + b"".join(scope_bodies))
        scope_bodies.clear()
        return body

    writer = PointWriter(now_ns, encoded)
    for scope_name, version, instruments in scopes:
        scope_header = field(1, field(1, scope_name.encode()) + field(2, version.encode()))
        metrics: list[bytes] = []
        for instrument, points in instruments:
            start = 0
            while start < len(points):
                room = max_points - n
                chunk = points[start:start + room]
                start += len(chunk)
                n += len(chunk)
                metrics.append(field(2, metric(instrument, writer.points(chunk, not instrument.is_gauge))))
                if n >= max_points:
                    scope_bodies.append(field(2, scope_header + b"".join(metrics)))
                    metrics = []
                    yield flush()
                    n = 0
        if metrics:
            scope_bodies.append(field(2, scope_header + b"".join(metrics)))
    if scope_bodies:
        yield flush()
    encoded.end()
