"""Publish latency at a fixed rate, measured by a small load generator on the official Go client; and, with the
same program, throughput with a client that costs less than the Python one and is not bound by a GIL
(``produce``, ``fan_out``).

``bench/go_load`` (built here with ``go build`` into ``bench/go_load/.bin``, ignored; the Go module proxy
fetches the client into Go's module cache, as for compat/go) publishes unbatched messages at a fixed rate,
open loop (message i is due at start + i/rate, whatever the receipts before it did), with a consumer in the
same process, and prints the publish (send -> receipt), end-to-end (send -> received) and schedule-lag
percentiles as JSON.

Why not the Python client: it paced the sends from a Python thread and ran a Python callback per receipt
on the client's C++ threads, all under one GIL; on this 2-core machine the load generator itself could not
keep 10k msg/s, and a default queue of 1000 pending messages blocked the sender whenever latency passed
100 ms, closing the loop (docs/benchmarks.md, "Fixed-rate latency with the Go load generator").

A run whose rate achieved (the lower of the rate sent and the rate receipted) is below ``MIN_RATIO`` of the
rate offered fails: ``FixedRateRun.failure`` says by how much, and bench.compare prints it and exits 1.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

GO_LOAD = Path(__file__).resolve().parent / "go_load"
BINARY = GO_LOAD / ".bin" / "latency-load"
MIN_RATIO = 0.95  # of the rate offered
WARMUP_S = 1.0  # at the same rate, before the measured seconds (as pulsar-perf's --warmup-time)


class LoadGeneratorUnavailable(RuntimeError):
    """Go is missing or the build failed: the fixed-rate workloads cannot run."""


def build() -> Path:
    """The load generator's binary, (re)built when a source is newer (go build's own cache makes it quick)."""
    sources = [*GO_LOAD.glob("*.go"), GO_LOAD / "go.mod", GO_LOAD / "go.sum"]
    if BINARY.exists() and all(BINARY.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return BINARY
    go = shutil.which("go")
    if go is None:
        raise LoadGeneratorUnavailable("go is not on PATH (the fixed-rate latency workloads need Go 1.26)")
    done = subprocess.run([go, "build", "-o", str(BINARY), "."], cwd=GO_LOAD, capture_output=True, text=True)
    if done.returncode != 0:
        raise LoadGeneratorUnavailable(f"go build in {GO_LOAD} failed: {done.stderr.strip()[-2000:]}")
    return BINARY


@dataclass
class FixedRateRun:
    report: dict[str, object]  # the load generator's JSON (see bench/go_load/main.go)
    client_cpu_s: float  # the load generator's CPU (user + system)
    failure: str | None  # why the run does not count (rate not achieved, errors), or None

    def ms(self, series: str, quantile: str) -> float:
        value = self.report.get(series, {})
        assert isinstance(value, dict)
        return float(value.get(quantile, 0.0))

    def figure(self, key: str) -> float:
        value = self.report.get(key, 0.0)
        assert isinstance(value, (int, float))
        return float(value)


def run(url: str, topic: str, rate: int, seconds: float, size: int, warmup_s: float = WARMUP_S,
        end_to_end: bool = True) -> FixedRateRun:
    """One run against the broker at ``url`` (after ``warmup_s`` at the same rate, not measured); never raises
    for a broker's failure (see FixedRateRun.failure). ``end_to_end=False``: the consumer is attached and
    acknowledges what it gets, but the run neither waits for it nor reports end-to-end latency."""
    return _run_load_generator(
        ["-url", url, "-topic", topic, "-rate", str(rate), "-seconds", str(seconds), "-warmup", str(warmup_s),
         "-size", str(size), "-min-ratio", str(MIN_RATIO), f"-e2e={str(end_to_end).lower()}"],
        timeout=seconds + warmup_s + 300)


def fan_out(url: str, topic: str, subscriptions: int, messages: int, size: int) -> FixedRateRun:
    """``messages`` published as fast as the Go client's batching producer goes, each delivered to and
    acknowledged by one consumer of each of ``subscriptions`` Shared subscriptions; the report's ``rate`` is
    deliveries per second from the first send to the last delivery (bench/go_load/fanout.go). Never raises for a
    broker's failure (see FixedRateRun.failure: deliveries that never came, sends that failed)."""
    return _run_load_generator(["-url", url, "-topic", topic, "-fanout", str(subscriptions),
                                "-messages", str(messages), "-size", str(size)], timeout=300)


def produce(url: str, topic: str, messages: int, size: int, batched: bool, producers: int = 1) -> FixedRateRun:
    """``messages`` published as fast as the Go client goes (at most 5000 in flight per producer, batches flushed
    every millisecond, as the Python client's produce rows), by ``producers`` producers at once, each on a topic of
    its own (``topic``-<i> when several); the report's ``rate`` is messages per second from the first send to the
    last receipt (bench/go_load/produce.go). Never raises for a broker's failure."""
    return _run_load_generator(["-url", url, "-topic", topic, "-produce", "-messages", str(messages),
                                "-size", str(size), f"-batched={str(batched).lower()}", "-pending", "5000",
                                "-producers", str(producers)],
                               timeout=300)


def _run_load_generator(args: list[str], timeout: float) -> FixedRateRun:
    binary = build()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = done.stderr.strip()[-1000:]
        return FixedRateRun({}, cpu, f"the load generator exited {done.returncode} without a report: {tail}")
    failure = str(report.get("error") or "") or (f"exit status {done.returncode}" if done.returncode else "")
    return FixedRateRun(report, cpu, failure or None)


def required() -> bool:
    """Under CI a missing load generator fails the bench; elsewhere its workloads are skipped with the reason."""
    return os.environ.get("CI") == "true"
