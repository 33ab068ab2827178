"""OpenTelemetry metrics as Apache Pulsar 4 exports them (PIP-264): ``pulsar.broker.*`` names, units and
attributes, over OTLP, configured Pulsar's way.

Pulsar's OpenTelemetryService starts the SDK with ``otel.sdk.disabled=true`` and lets the OTel
environment (or Java system properties) override it; so here too nothing runs unless
``OTEL_SDK_DISABLED=false``. Then the standard variables apply: ``OTEL_METRICS_EXPORTER`` (``otlp``,
the default; ``none`` turns export off), ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``; ``grpc``
needs the opentelemetry-exporter-otlp-proto-grpc package), ``OTEL_METRIC_EXPORT_INTERVAL`` and
``OTEL_METRIC_EXPORT_TIMEOUT`` (ms), ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``. The resource
carries Pulsar's ``pulsar.cluster`` (the cluster name), ``service.name=pulsar-broker`` and
``service.version`` unless the environment sets them.

How an export runs: a task on the event loop wakes every export interval, takes a snapshot of the
observable instruments' values (``otel_instruments.take_snapshot``: in slices, attribute dicts cached
per entity), then hands it to a worker thread, which adds the SDK's histograms (recorded where
lookups and schema operations happen), turns the snapshot into OTLP data points and calls the OTLP
exporter. The observable values do not go through the SDK's measurement path (an attribute copy,
validation and hash per observation, several microseconds each): the broker's counters are already
cumulative, so each is one data point as it stands, with the start time of its entity.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.admin.otel_instruments import (
    BROKER_SCOPE,
    COUNTER,
    GAUGE,
    HISTOGRAMS,
    INSTRUMENTS,
    AttributeCache,
    Snapshot,
    take_snapshot,
)
from broker.admin.otlp_encode import AttributeBytes
from broker.admin.otlp_encode import Instrument as EncodedInstrument
from broker.admin.otlp_encode import requests as otlp_requests
from broker.admin.stats import StatsSampler
from broker.tasks import OwnedTasks
from broker.version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExporter, MetricsData
    from opentelemetry.sdk.resources import Resource

    from broker.admin.context import AdminContext

log = logging.getLogger(__name__)

SCOPE = BROKER_SCOPE
SERVICE_NAME = "pulsar-broker"  # PulsarBrokerOpenTelemetry.SERVICE_NAME
DEFAULT_INTERVAL_MS = 60_000  # OTEL_METRIC_EXPORT_INTERVAL's default (the OTel specification's)
DEFAULT_TIMEOUT_MS = 30_000  # OTEL_METRIC_EXPORT_TIMEOUT's default
# Pulsar's OpenTelemetryService.MAX_CARDINALITY_LIMIT: attribute sets per instrument (the SDK's
# default, 2,000, would fold the topics past the 2,000th into one overflow point).
CARDINALITY_LIMIT = 10_000
# The OTLP/HTTP exporter versions (>= first, < second) whose private ``_export_batch`` the request path was read
# against and tested with (pyproject.toml pins the same range). Outside it, the public ``export`` is used instead.
CHECKED_EXPORTER = ((1, 45), (1, 46))
EXPORTER_PACKAGE = "opentelemetry-exporter-otlp-proto-http"
# Data points per OTLP request written here: ~180 bytes each, so ~2 MB a request, well below the
# OpenTelemetry Collector's default request limits (4 MiB for gRPC, 20 MiB for HTTP) and the Python
# exporter's 64 MiB (a 10,000-topic broker has ~250,000 points).
MAX_POINTS_PER_REQUEST = 10_000


def enabled(env: Mapping[str, str]) -> bool:
    """Pulsar's rule: the SDK is off unless OTEL_SDK_DISABLED=false."""
    return env.get("OTEL_SDK_DISABLED", "true").strip().lower() == "false"


def _ms(env: Mapping[str, str], key: str, default: int) -> int:
    try:
        value = int(env.get(key, "").strip() or default)
    except ValueError:
        log.error("OpenTelemetry: %s=%r is not a number of milliseconds; using %d", key, env.get(key), default)
        return default
    return value if value > 0 else default


class OpenTelemetryExport:
    """The broker's OTel export, when the environment enables it (see the module docstring)."""

    def __init__(self, ctx: AdminContext, sampler: StatsSampler, env: Mapping[str, str] | None = None) -> None:
        self.ctx = ctx
        self.sampler = sampler
        self.env = dict(os.environ if env is None else env)
        self.provider: MeterProvider | None = None
        self.cache = AttributeCache()
        self.interval_s = _ms(self.env, "OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_INTERVAL_MS) / 1000.0
        self.timeout_ms = _ms(self.env, "OTEL_METRIC_EXPORT_TIMEOUT", DEFAULT_TIMEOUT_MS)
        self._exporter: MetricExporter | None = None
        self._reader: InMemoryMetricReader | None = None
        self._resource: Resource | None = None
        self._encoded = AttributeBytes()  # (worker thread only, one export at a time: _export_lock)
        self._export_lock = threading.Lock()  # (an export cancelled at stop may still be running in its thread)
        self._headers = {name: EncodedInstrument(name, i.description, i.unit, i.kind == GAUGE, i.kind == COUNTER)
                         for name, i in INSTRUMENTS.items()}
        self._tasks = OwnedTasks("OpenTelemetry export")

    def start(self) -> None:
        """Build the exporter and the histograms, start the export task (on the loop). A bad configuration
        is logged, not fatal."""
        if not enabled(self.env):
            return
        exporter_name = self.env.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower()
        if exporter_name == "none":
            return
        if exporter_name != "otlp":
            log.error("OpenTelemetry: OTEL_METRICS_EXPORTER=%s is not supported here (otlp or none); "
                      "metrics are not exported", exporter_name)
            return
        try:
            self._exporter = self._otlp_exporter()
            self.provider = self._histograms()
        except Exception as e:  # e.g. grpc asked for and not installed
            log.error("OpenTelemetry: metrics are not exported: %s", e)
            self._exporter = None
            return
        self._tasks.spawn(self._run())
        log.info("OpenTelemetry: exporting pulsar.broker.* metrics over OTLP every %.0f s", self.interval_s)

    def _otlp_exporter(self) -> MetricExporter:
        protocol = self.env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                                self.env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")).strip().lower()
        if protocol == "grpc":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (  # type: ignore[import-not-found]
                    OTLPMetricExporter as GrpcExporter,
                )
            except ImportError as e:
                raise RuntimeError("OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the package "
                                   "opentelemetry-exporter-otlp-proto-grpc; use http/protobuf") from e
            exporter: MetricExporter = GrpcExporter()
            return exporter
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            if not checked_exporter(exporter_version()):
                (low_major, low_minor), (high_major, high_minor) = CHECKED_EXPORTER
                log.warning("OpenTelemetry: %s %s is not a version this broker was checked with (%d.%d to before "
                            "%d.%d); exports go through the SDK's slower data model", EXPORTER_PACKAGE,
                            exporter_version(), low_major, low_minor, high_major, high_minor)
            return OTLPMetricExporter()
        raise RuntimeError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported (http/protobuf or grpc)")

    def _histograms(self) -> MeterProvider:
        """The SDK's meter provider for the synchronous instruments (the histograms), bound to where the
        durations are recorded; read by the export, not on its own schedule."""
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.resources import Resource

        defaults = Resource({"pulsar.cluster": self.ctx.config.clusterName, "service.name": SERVICE_NAME,
                             "service.version": __version__})
        from_env = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME (service.name defaults otherwise)
        attrs = dict(from_env.attributes)
        if "OTEL_SERVICE_NAME" not in self.env and "service.name=" not in self.env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
            attrs.pop("service.name", None)
        self._resource = defaults.merge(Resource(attrs))
        self._reader = _reader(InMemoryMetricReader)
        provider = MeterProvider(resource=self._resource, metric_readers=[self._reader])
        service = self.ctx.service
        h = {name: provider.get_meter(i.scope, __version__).create_histogram(name, i.unit, i.description)
             for name, i in HISTOGRAMS.items()}
        service.lookup_stats.histogram = h["pulsar.broker.request.topic.lookup.duration"]
        service.schemas.stats.histogram = h["pulsar.broker.request.schema_registry.duration"]
        service.snapshot_stats.histogram = h["pulsar.broker.replication.subscription.snapshot.operation.duration"]
        for token in self.ctx.security.authentication.providers.get("token", []):
            token.record_expiry = h["pulsar.authentication.token.expiry.duration"].record  # type: ignore[attr-defined]
        return provider

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.export_once()
            except Exception:
                log.exception("OpenTelemetry: export failed")

    async def export_once(self) -> None:
        """One export: the snapshot on the loop, the rest in a worker thread."""
        snapshot = await take_snapshot(self.ctx, self.sampler, self.cache)
        await asyncio.get_running_loop().run_in_executor(None, self.export_snapshot, snapshot, time.time_ns())

    def export_snapshot(self, snapshot: Snapshot, now_ns: int) -> None:
        """(Worker thread.) The SDK's histograms and the snapshot's points, to the exporter."""
        with self._export_lock:
            self._export(snapshot, now_ns)

    def _export(self, snapshot: Snapshot, now_ns: int) -> None:
        exporter = self._exporter
        if exporter is None:
            return
        send = _request_sender(exporter)
        if send is None:  # gRPC, or an unchecked OTLP/HTTP version: the SDK's data model and encoder
            exporter.export(self.metrics_data(snapshot, now_ns), timeout_millis=self.timeout_ms)
            return
        assert self._reader is not None
        recorded = self._reader.get_metrics_data()
        if recorded is not None and recorded.resource_metrics:
            exporter.export(recorded, timeout_millis=self.timeout_ms)
        for body in self.encoded_requests(snapshot, now_ns):
            send(body)

    def encoded_requests(self, snapshot: Snapshot, now_ns: int) -> list[bytes]:
        """The snapshot as OTLP request bodies (otlp_encode: attribute sets encoded once)."""
        assert self._resource is not None
        by_scope: dict[str, list[Any]] = {}
        for name, points in snapshot.items():
            if points:
                by_scope.setdefault(INSTRUMENTS[name].scope, []).append((self._headers[name], points))
        scopes = [(scope, __version__, instruments) for scope, instruments in by_scope.items()]
        return list(otlp_requests(self._resource.attributes, scopes, now_ns, self._encoded, MAX_POINTS_PER_REQUEST))

    def metrics_data(self, snapshot: Snapshot, now_ns: int) -> MetricsData:
        from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        assert self._reader is not None and self._resource is not None
        recorded = self._reader.get_metrics_data()  # the histograms (None: nothing recorded yet)
        sdk_scopes = list(recorded.resource_metrics[0].scope_metrics) if recorded and recorded.resource_metrics else []
        by_scope: dict[str, list[Any]] = {}
        for name, points in snapshot.items():
            if points:
                by_scope.setdefault(INSTRUMENTS[name].scope, []).append(_metric(name, points, now_ns))
        scopes = [ScopeMetrics(InstrumentationScope(scope, __version__), metrics, "")
                  for scope, metrics in by_scope.items()]
        for sdk_scope in sdk_scopes:  # (the histograms: the broker's scope too)
            mine = next((s for s in scopes if s.scope.name == sdk_scope.scope.name), None)
            if mine is None:
                scopes.append(sdk_scope)
            else:
                mine.metrics.extend(sdk_scope.metrics)  # type: ignore[attr-defined]
        return MetricsData([ResourceMetrics(self._resource, scopes, "")])

    async def stop(self) -> None:
        """A last export (bounded by the export timeout), then shut the exporter down, off the loop."""
        if self._exporter is None:
            return
        self._tasks.cancel()
        await self._tasks.wait()
        try:
            await asyncio.wait_for(self.export_once(), self.timeout_ms / 1000.0)
        except Exception:
            log.warning("OpenTelemetry: the last export failed", exc_info=True)
        exporter, provider = self._exporter, self.provider
        self._exporter = self.provider = None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, exporter.shutdown)
        if provider is not None:
            await loop.run_in_executor(None, provider.shutdown)


def exporter_version() -> tuple[int, ...] | None:
    """The installed OTLP/HTTP exporter's version (major, minor, ...), or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version(EXPORTER_PACKAGE)
    except PackageNotFoundError:
        return None
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def checked_exporter(found: tuple[int, ...] | None) -> bool:
    low, high = CHECKED_EXPORTER
    return found is not None and low <= found[:2] < high


def _request_sender(exporter: Any) -> Any:
    """How to send an encoded request with this exporter, or None. The OTLP/HTTP exporter sends a parsed
    request with its retries, limits and settings in ``_export_batch``: a private method, so only with the
    exporter versions it was checked against (CHECKED_EXPORTER); otherwise the public ``export``, which
    tests/admin/test_opentelemetry.py checks gives the same points (several times slower at 10,000 topics)."""
    export_batch = getattr(exporter, "_export_batch", None)
    if export_batch is None or type(exporter).__module__ != "opentelemetry.exporter.otlp.proto.http.metric_exporter":
        return None
    if not checked_exporter(exporter_version()):
        return None
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    def send(body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        export_batch(request)

    return send


def _reader(reader_class: Any) -> Any:
    """An SDK reader with Pulsar's cardinality limit where the SDK lets one set it."""
    from opentelemetry.sdk.metrics import Histogram

    try:
        return reader_class(cardinality_limits={Histogram: CARDINALITY_LIMIT})
    except TypeError:  # an SDK before cardinality limits could be set: its default
        return reader_class()


def _metric(name: str, points: list[Any], now_ns: int) -> Any:
    """One instrument's points as OTLP data: a cumulative Sum (monotonic for a Counter) or a Gauge."""
    from opentelemetry.sdk.metrics.export import AggregationTemporality, Gauge, Metric, NumberDataPoint, Sum

    instrument = INSTRUMENTS[name]
    data_points = [NumberDataPoint(attrs, start, now_ns, value) for value, attrs, start in points]
    data: Any
    if instrument.kind == GAUGE:
        data = Gauge(data_points)
    else:
        data = Sum(data_points, AggregationTemporality.CUMULATIVE, instrument.kind == COUNTER)
    return Metric(name, instrument.description, instrument.unit, data)
