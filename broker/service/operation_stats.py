"""Counters of the broker's control operations (lookups, topic loads), as Pulsar's metrics report
them: a latency summary per stats interval, outcome counters, operations in flight.

Nothing here is on the message path: one lookup or one topic load adds one observation. The
quantiles cover the observations of the last full stats interval (``rotate`` is called by the
stats sampler, as Pulsar's summaries rotate with statsUpdateFrequencyInSecs): NaN when that
interval had none, as in Pulsar.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Protocol

# Observations kept per interval for the quantiles (beyond that, one in two is kept, and so on:
# the quantiles stay representative, the memory bounded).
WINDOW_LIMIT = 4096


class Histogram(Protocol):
    """Where a duration also goes: an OpenTelemetry histogram (its ``record``) once the export binds one."""

    def record(self, amount: float, attributes: Mapping[str, str] | None = None) -> None: ...


class _Unbound:
    """No OpenTelemetry export: the durations go nowhere else."""

    def record(self, amount: float, attributes: Mapping[str, str] | None = None) -> None:
        pass


UNBOUND: Histogram = _Unbound()

# Pulsar's pulsar.lookup.response attribute values (NamespaceService.PULSAR_LOOKUP_RESPONSE_*).
_LOOKUP_BROKER = {"pulsar.lookup.response": "broker"}
_LOOKUP_REDIRECT = {"pulsar.lookup.response": "redirect"}
_LOOKUP_FAILURE = {"pulsar.lookup.response": "failure"}


class LatencySummary:
    """Milliseconds of an operation: count and sum since start, quantiles of the last interval."""

    __slots__ = ("_current", "_last", "_seen", "_stride", "count", "sum_ms")

    def __init__(self) -> None:
        self.count = 0
        self.sum_ms = 0.0
        self._current: list[float] = []
        self._last: list[float] = []  # sorted
        self._seen = 0  # observations of the current interval
        self._stride = 1

    def observe(self, ms: float) -> None:
        self.count += 1
        self.sum_ms += ms
        self._seen += 1
        if self._seen % self._stride == 0:
            self._current.append(ms)
            if len(self._current) >= WINDOW_LIMIT:
                self._current = self._current[::2]
                self._stride *= 2

    def observe_n(self, ms: float, n: int) -> None:
        """``n`` operations that each took ``ms`` (a group of adds made durable together): the same samples,
        count and sum as n observe() calls, kept in slices up to each halving of the window."""
        if n == 1:  # (the usual group: one add, a batching client's SEND)
            self.observe(ms)
            return
        self.count += n
        self.sum_ms += ms * n
        while n:
            stride, seen = self._stride, self._seen
            first_kept = (seen // stride + 1) * stride  # (observe keeps the one that makes _seen a multiple)
            take = min(n, first_kept + (WINDOW_LIMIT - len(self._current) - 1) * stride - seen)
            kept = (seen + take) // stride - seen // stride
            self._seen = seen + take
            n -= take
            if kept:
                self._current.extend([ms] * kept)
                if len(self._current) >= WINDOW_LIMIT:
                    self._current = self._current[::2]
                    self._stride *= 2

    def rotate(self) -> None:
        self._last = sorted(self._current)
        self._current, self._seen, self._stride = [], 0, 1

    def quantile(self, q: float) -> float:
        values = self._last
        if not values:
            return math.nan
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]

    def mean(self) -> float:
        values = self._last
        return sum(values) / len(values) if values else math.nan

    @property
    def last_count(self) -> int:
        return len(self._last)


class LookupStats:
    """Pulsar's NamespaceService lookup metrics: answers (Connect), redirects, failures, latency,
    and lookups in flight. Pulsar counts the outcome of NamespaceService.getBrokerServiceUrlAsync only (the search
    for the bundle's owner): a lookup that ends before it (a name or a namespace refused, a role not allowed, a
    namespace a peer cluster serves, redirected there by TopicLookupBase) is in none of them (``skipped``)."""

    def __init__(self) -> None:
        self.answers = 0
        self.redirects = 0
        self.failures = 0
        self.pending = 0
        self.latency = LatencySummary()
        # pulsar.broker.request.topic.lookup.duration (seconds, by outcome; failures too, as Pulsar)
        self.histogram = UNBOUND

    def start(self) -> float:
        self.pending += 1
        return time.monotonic()

    def skipped(self) -> None:
        """A lookup from ``start`` that ended before the owner was looked for: no longer in flight, not counted."""
        self.pending -= 1

    def done(self, started: float, *, redirect: bool = False, failed: bool = False) -> None:
        """One lookup finished (``started`` from ``start``)."""
        self.pending -= 1
        elapsed = time.monotonic() - started
        self.histogram.record(elapsed, _LOOKUP_FAILURE if failed else _LOOKUP_REDIRECT if redirect else _LOOKUP_BROKER)
        if failed:
            self.failures += 1
            return
        self.latency.observe(elapsed * 1000.0)
        if redirect:
            self.redirects += 1
        else:
            self.answers += 1


class TopicLoadStats:
    """Pulsar's BrokerOperabilityMetrics topic-load metrics: load times and failed loads."""

    def __init__(self) -> None:
        self.failed = 0
        self.times = LatencySummary()

    def loaded(self, started: float) -> None:
        self.times.observe((time.monotonic() - started) * 1000.0)

    def load_failed(self) -> None:
        self.failed += 1


class NamespaceSchemaStats:
    """One namespace's schema-registry operations (Pulsar's SchemaRegistryStats, label namespace)."""

    __slots__ = ("attributes", "compatible", "delete", "delete_failed", "get", "get_failed",
                 "incompatible", "put", "put_failed")

    def __init__(self, namespace: str) -> None:
        self.get, self.put, self.delete = LatencySummary(), LatencySummary(), LatencySummary()
        self.get_failed = self.put_failed = self.delete_failed = 0
        self.compatible = self.incompatible = 0
        # Pulsar's attributes of pulsar.broker.request.schema_registry.duration, built once per namespace
        self.attributes = {(request, ok): {"pulsar.namespace": namespace, "pulsar.schema_registry.request": request,
                                          "pulsar.schema_registry.response": "success" if ok else "failure"}
                          for request in ("get", "put", "delete") for ok in (True, False)}



class SchemaStats:
    """Schema-registry operations per namespace: gets (and lists), puts, deletes with their latency and
    failures, and the compatibility checks' outcomes."""

    def __init__(self) -> None:
        self.by_namespace: dict[str, NamespaceSchemaStats] = {}
        self.histogram = UNBOUND  # pulsar.broker.request.schema_registry.duration, once the export binds it

    def of(self, base_topic: str) -> NamespaceSchemaStats:
        """The stats of the topic's namespace ("unknown" for a name that is not a topic's, as Pulsar)."""
        _, sep, rest = base_topic.partition("://")
        namespace = rest.rpartition("/")[0] if sep and rest.count("/") >= 2 else "unknown"
        stats = self.by_namespace.get(namespace)
        if stats is None:
            stats = self.by_namespace[namespace] = NamespaceSchemaStats(namespace)
        return stats

    def done(self, base_topic: str, request: str, ms: float, ok: bool = True) -> None:
        """One ``get``, ``put`` or ``delete`` finished: its latency (successes only, as Pulsar's summaries)
        or its failure; and its duration, failures too, to the OpenTelemetry histogram."""
        stats = self.of(base_topic)
        if ok:
            getattr(stats, request).observe(ms)
        else:
            setattr(stats, f"{request}_failed", getattr(stats, f"{request}_failed") + 1)
        self.histogram.record(ms / 1000.0, stats.attributes[(request, ok)])

    def rotate(self) -> None:
        for s in self.by_namespace.values():
            s.get.rotate()
            s.put.rotate()
            s.delete.rotate()


class TxnEndStats:
    """Ends of transactions on one topic (or namespace) asked by this broker's coordinators: latency of those that
    succeeded, count of those that failed, for commits and aborts."""

    __slots__ = ("abort", "abort_failed", "commit", "commit_failed")

    def __init__(self) -> None:
        self.commit, self.abort = LatencySummary(), LatencySummary()
        self.commit_failed = self.abort_failed = 0


class TxnBufferClientStats:
    """Pulsar's TransactionBufferClientStats: every END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION a coordinator
    sends (Pulsar's coordinator sends them all through its transaction buffer client, to this broker too; here a
    topic served by this broker is ended in place, and counted the same), by namespace and topic (topic level on)
    or namespace; and the requests in flight. The latencies are kept in milliseconds (the exposition writes them
    in Pulsar's unit)."""

    def __init__(self, by_topic: bool) -> None:
        self.by_topic = by_topic
        self.by_key: dict[tuple[str, str | None], TxnEndStats] = {}
        # Per topic, whatever the Prometheus switch (Pulsar's PersistentTopicMetrics, read by OpenTelemetry):
        # [commits that succeeded, commits that failed, aborts that succeeded, aborts that failed].
        self.by_topic_name: dict[str, list[int]] = {}
        self.pending = 0

    def start(self) -> float:
        self.pending += 1
        return time.perf_counter()

    def done(self, topic: str, commit: bool, started: float, *, failed: bool) -> None:
        self.pending -= 1
        key = (namespace_of(topic), topic if self.by_topic else None)
        stats = self.by_key.get(key)
        if stats is None:
            stats = self.by_key[key] = TxnEndStats()
        ends = self.by_topic_name.get(topic)
        if ends is None:
            ends = self.by_topic_name[topic] = [0, 0, 0, 0]
        ends[(0 if commit else 2) + failed] += 1
        if failed:
            if commit:
                stats.commit_failed += 1
            else:
                stats.abort_failed += 1
        else:
            (stats.commit if commit else stats.abort).observe((time.perf_counter() - started) * 1000.0)

    def rotate(self) -> None:
        for s in self.by_key.values():
            s.commit.rotate()
            s.abort.rotate()


def namespace_of(topic: str) -> str:
    """The namespace of a full topic name ("unknown" if it is not one, as Pulsar's stats label it)."""
    _, sep, rest = topic.partition("://")
    return rest.rpartition("/")[0] if sep and rest.count("/") >= 2 else "unknown"


class PendingAckEndStats:
    """Transactions whose acknowledgements ended on one subscription (or namespace): commits and aborts that
    succeeded or failed, and the latency of the commits that succeeded."""

    __slots__ = ("abort_failed", "aborted", "commit", "commit_failed", "committed")

    def __init__(self) -> None:
        self.commit = LatencySummary()
        self.committed = self.commit_failed = self.aborted = self.abort_failed = 0


class PendingAckStats:
    """Pulsar's PendingAckHandleStats (pulsar_txn_tp_*): the end of a transaction on a subscription that has
    acknowledgements pending in it (END_TXN_ON_SUBSCRIPTION, or a coordinator of this broker ending it in place),
    by namespace, topic and subscription (topic level on) or namespace. Latencies in milliseconds (the exposition
    writes them in Pulsar's microseconds)."""

    def __init__(self, by_topic: bool) -> None:
        self.by_topic = by_topic
        self.by_key: dict[tuple[str, str | None, str | None], PendingAckEndStats] = {}

    def done(self, topic: str, subscription: str, commit: bool, started: float, *, failed: bool) -> None:
        """One end finished (``started`` from time.perf_counter())."""
        key = (namespace_of(topic), topic, subscription) if self.by_topic else (namespace_of(topic), None, None)
        stats = self.by_key.get(key)
        if stats is None:
            stats = self.by_key[key] = PendingAckEndStats()
        if commit and failed:
            stats.commit_failed += 1
        elif commit:
            stats.committed += 1
            stats.commit.observe((time.perf_counter() - started) * 1000.0)
        elif failed:
            stats.abort_failed += 1
        else:
            stats.aborted += 1

    def rotate(self) -> None:
        for s in self.by_key.values():
            s.commit.rotate()


_SNAPSHOT_SUCCESS = {"pulsar.replication.subscription.snapshot.operation.result": "success"}
_SNAPSHOT_TIMEOUT = {"pulsar.replication.subscription.snapshot.operation.result": "timeout"}


class SnapshotStats:
    """The broker's replicated-subscription snapshots, for Prometheus (Pulsar's static ReplicatedSubscriptionsController
    and snapshot builder metrics: pulsar_replicated_subscriptions_*) and OpenTelemetry (its
    OpenTelemetryReplicatedSubscriptionStats): begun, being gathered now, written (and the time they took), given up
    after replicatedSubscriptionsSnapshotTimeoutSeconds. ``seen`` once a controller was made, as Pulsar's Prometheus
    metrics exist once its class was loaded."""

    def __init__(self) -> None:
        self.seen = False
        self.started = self.pending = self.succeeded = self.timed_out = 0
        self.succeeded_ms = 0.0
        self.histogram = UNBOUND  # pulsar.broker.replication.subscription.snapshot.operation.duration, once bound

    def begun(self) -> None:
        self.started += 1
        self.pending += 1

    def ended(self, seconds: float, *, written: bool) -> None:
        self.pending -= 1
        if written:
            self.succeeded += 1
            self.succeeded_ms += seconds * 1000.0
        else:
            self.timed_out += 1
        self.histogram.record(seconds, _SNAPSHOT_SUCCESS if written else _SNAPSHOT_TIMEOUT)
