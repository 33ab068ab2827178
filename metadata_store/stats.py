"""What a metadata store session did, as Pulsar's MetadataStoreStats counts it: get, put and delete
operations by outcome with their latency (a histogram in milliseconds), and the bytes put.

Plain counters kept by the store; whoever exports metrics reads them (this package knows nothing of
its users). One operation costs a clock read and a few additions.
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

# Pulsar's MetadataStoreStats.BUCKETS: upper bounds in milliseconds (one more bucket past the last).
LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
OPERATIONS = ("get", "del", "put")


class LatencyHistogram:
    __slots__ = ("count", "counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)  # per bucket, not cumulative
        self.count = 0
        self.sum_ms = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.count += 1
        self.sum_ms += ms


class StoreStats:
    """Per (operation, "success" / "fail"): a latency histogram; and the bytes of successful puts."""

    def __init__(self) -> None:
        self.latency = {(op, status): LatencyHistogram() for op in OPERATIONS for status in ("success", "fail")}
        self.put_bytes = 0

    def record(self, op: str, ok: bool, started: float) -> None:
        self.latency[(op, "success" if ok else "fail")].observe((time.perf_counter() - started) * 1000.0)


class _Measured(Protocol):
    stats: StoreStats


S = TypeVar("S", bound=_Measured)
P = ParamSpec("P")
R = TypeVar("R")
Method = Callable[Concatenate[S, P], Coroutine[Any, Any, R]]


def measured(op: str) -> Callable[[Method[S, P, R]], Method[S, P, R]]:
    """Count a store method's calls in ``self.stats`` under ``op`` (a put's value bytes too)."""

    def wrap(fn: Method[S, P, R]) -> Method[S, P, R]:
        async def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                result = await fn(self, *args, **kwargs)
            except BaseException:
                self.stats.record(op, False, started)
                raise
            self.stats.record(op, True, started)
            if op == "put" and len(args) > 1 and isinstance(args[1], bytes | bytearray | memoryview):
                self.stats.put_bytes += len(args[1])
            return result

        functools.update_wrapper(run, fn)  # (its name and docstring)
        return run

    return wrap
