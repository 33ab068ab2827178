"""The cost of one /metrics scrape (and one OpenTelemetry snapshot) at 1,000 and 10,000 topics.

An in-process broker (memory storage, so creating the topics costs nothing on disk) gets N
persistent topics, each with one subscription and a few stored messages; then the sampler runs
once and we time, on the broker's loop: building the /metrics text (wall and CPU time of the
thread), the same over HTTP as Prometheus would fetch it (the CPU time of the broker's loop thread
and of the whole process during the GET, and the longest time the loop went without running a 1 ms
ticker meanwhile, and the most CPU the loop's thread used between two ticks: the part of a stall that is
the broker's own work and not the wait for a CPU on a busy machine), and one OpenTelemetry collection (the CPU
time of the snapshot on the broker's loop, and of turning it into OTLP data and encoding the request as the
export thread does, without sending it). Medians of a few scrapes. Last, the broker's periodic sweeps over all
topics (the stats sampler and the housekeeping jobs) run once each under the same probe.

    python -m bench.metrics_scrape [--topics 1000 10000] [--scrapes 5]

Run as a file (``python bench/metrics_scrape.py``) with another checkout first on PYTHONPATH, it
measures that checkout's broker: how before/after numbers are taken in one run, alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import urllib.request
from typing import Any

from broker.admin.otel import OpenTelemetryExport
from broker.admin.otel_instruments import take_snapshot
from broker.embedded import BrokerThread
from broker.service import admin_ops
from broker.topic_name import TopicName

MESSAGES_PER_TOPIC = 3
CREATE_BATCH = 200  # topics created per round trip to the loop
IDLE_PROBE_S = 10.0  # how long the loop is watched with no scrape, for the stall baseline


async def _create(broker: BrokerThread, names: list[str]) -> None:
    service = broker.server.service
    for name in names:
        topic = await service.get_persistent_topic(TopicName.parse(name), create=True)
        await admin_ops.create_subscription(topic, "sub", None)
        for i in range(MESSAGES_PER_TOPIC):
            topic.ledger.add_entry(bytes(40 + i), lambda *_: None)


async def _running_loop() -> tuple[asyncio.AbstractEventLoop, int]:
    """The broker's loop and the CPU-time clock of the thread running it."""
    return asyncio.get_running_loop(), time.pthread_getcpuclockid(threading.get_ident())


class LoopProbe:
    """On the broker's loop: the longest time it went without running this task (a 1 ms ticker), and the
    most CPU the loop's thread used between two of its ticks. On a shared machine the wall time of a
    stall is mostly the wait for a CPU (load 12 on 2 cores stretches 100 ms of work to ~600 ms); the CPU
    between ticks is what the broker's own code held the loop for."""

    def __init__(self) -> None:
        self.stop = False
        self.longest = 0.0
        self.most_cpu = 0.0

    async def run(self) -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()  # (this task runs on the loop's thread)
        while not self.stop:
            await asyncio.sleep(0.001)
            now, cpu = time.perf_counter(), time.thread_time()
            self.longest = max(self.longest, now - last)
            self.most_cpu = max(self.most_cpu, cpu - last_cpu)
            last, last_cpu = now, cpu


def _timed(fn: Any) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.thread_time()
    result = fn()
    return time.perf_counter() - wall, time.thread_time() - cpu, result


def measure(n_topics: int, scrapes: int) -> dict[str, float]:
    # (No automatic bundle split: past loadBalancerNamespaceBundleMaxTopics it would unload the topics
    # being measured, and the scrapes after it would find an empty broker.)
    with BrokerThread(managedLedgerStorage="memory", statsUpdateFrequencyInSecs=3600,
                      brokerDeleteInactiveTopicsEnabled=False, loadBalancerAutoBundleSplitEnabled=False) as broker:
        names = [f"persistent://public/default/scrape-{i}" for i in range(n_topics)]
        for start in range(0, n_topics, CREATE_BATCH):
            broker.run_coroutine(_create(broker, names[start:start + CREATE_BATCH]), timeout=600)
        web = broker.server.web
        broker.run_coroutine(web.sampler.sample_async())
        loop, loop_clock = broker.run_coroutine(_running_loop())

        async def on_loop(fn: Any) -> tuple[float, float, Any]:
            return _timed(fn)

        # The baseline: the longest stall of the loop with N topics and no scrape (the broker's own
        # periodic work over all topics, the garbage collector), to read the GET's stall against.
        idle = LoopProbe()
        idling = asyncio.run_coroutine_threadsafe(idle.run(), loop)
        time.sleep(IDLE_PROBE_S)
        idle.stop = True
        idling.result(60)
        text_walls, text_cpus, http_walls, stalls, stall_cpus = [], [], [], [], []
        otel_loop_cpus, otel_export_cpus = [], []
        otel = OpenTelemetryExport(web.ctx, web.sampler, env={"OTEL_SDK_DISABLED": "false"})
        otel.provider = broker.run_coroutine(_on_loop(otel._histograms))
        otel_collect(broker, otel, loop_clock)  # the first builds the attribute cache: not counted
        http_loop_cpus, http_process_cpus = [], []
        size = 0
        for _ in range(scrapes):
            wall, cpu, body = broker.run_coroutine(on_loop(web._metrics.render), timeout=600)
            text_walls.append(wall)
            text_cpus.append(cpu)
            size = len(body)
            otel_loop_cpu, otel_export_cpu = otel_collect(broker, otel, loop_clock)
            otel_loop_cpus.append(otel_loop_cpu)
            otel_export_cpus.append(otel_export_cpu)
            probe = LoopProbe()
            probing = asyncio.run_coroutine_threadsafe(probe.run(), loop)
            started, loop_cpu, process_cpu = time.perf_counter(), time.clock_gettime(loop_clock), time.process_time()
            with urllib.request.urlopen(f"{broker.web_url}/metrics", timeout=600) as r:
                r.read()
            http_walls.append(time.perf_counter() - started)
            http_loop_cpus.append(time.clock_gettime(loop_clock) - loop_cpu)
            http_process_cpus.append(time.process_time() - process_cpu)
            probe.stop = True
            probing.result(60)
            stalls.append(probe.longest)
            stall_cpus.append(probe.most_cpu)
        # The broker's own periodic sweeps over every topic (the sampler, each housekeeping job), run once each
        # with the probe: the most loop CPU between two ticks while they ran.
        service = broker.server.service
        sweeps = [web.sampler.sample_async, *(t.job for t in service.housekeeping.tasks)]

        async def run_sweeps() -> None:
            for job in sweeps:
                await job()

        probe = LoopProbe()
        probing = asyncio.run_coroutine_threadsafe(probe.run(), loop)
        broker.run_coroutine(run_sweeps(), timeout=600)
        probe.stop = True
        probing.result(60)
        loaded = len(broker.server.service.topics)
        assert loaded == n_topics, f"{loaded} topics loaded at the end, not {n_topics}: the numbers mean nothing"
        return {"topics": n_topics, "bytes": size, "lines": body.count(b"\n"),
                "text_wall_ms": statistics.median(text_walls) * 1000,
                "text_cpu_ms": statistics.median(text_cpus) * 1000,
                "http_wall_ms": statistics.median(http_walls) * 1000,
                "http_loop_cpu_ms": statistics.median(http_loop_cpus) * 1000,
                "http_process_cpu_ms": statistics.median(http_process_cpus) * 1000,
                "otel_loop_cpu_ms": statistics.median(otel_loop_cpus) * 1000,
                "otel_export_cpu_ms": statistics.median(otel_export_cpus) * 1000,
                "stall_ms": statistics.median(stalls) * 1000, "idle_stall_ms": idle.longest * 1000,
                "stall_cpu_ms": statistics.median(stall_cpus) * 1000, "idle_stall_cpu_ms": idle.most_cpu * 1000,
                "sweeps_cpu_ms": probe.most_cpu * 1000}


async def _on_loop(fn: Any) -> Any:
    return fn()


def otel_collect(broker: BrokerThread, otel: OpenTelemetryExport, loop_clock: int) -> tuple[float, float]:
    """One OpenTelemetry collection: (CPU of the loop thread for the snapshot, CPU of this thread for the
    encoded OTLP requests, parsed and serialized again as the OTLP/HTTP exporter's ``_export_batch`` does:
    what the export's worker thread does short of the HTTP POST)."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    web = broker.server.web
    before = time.clock_gettime(loop_clock)
    snapshot = broker.run_coroutine(take_snapshot(web.ctx, web.sampler, otel.cache), timeout=600)
    loop_cpu = time.clock_gettime(loop_clock) - before
    started = time.thread_time()
    for body in otel.encoded_requests(snapshot, time.time_ns()):
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        request.SerializeToString()
    return loop_cpu, time.thread_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--scrapes", type=int, default=5)
    args = parser.parse_args()
    print("| topics | series lines | bytes | scrape wall ms | scrape CPU ms | GET /metrics ms "
          "| GET: loop thread CPU ms | GET: process CPU ms | longest loop stall during the GET, ms "
          "| most loop CPU between two ticks during the GET, ms "
          f"| longest stall in {IDLE_PROBE_S:.0f} s without a scrape, ms | most loop CPU between two ticks then, ms "
          "| OTel: loop CPU ms | OTel: export CPU ms "
          "| sampler and housekeeping sweeps: most loop CPU between two ticks, ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.topics:
        r = measure(n, args.scrapes)
        print(f"| {r['topics']:,} | {r['lines']:,} | {r['bytes']:,} | {r['text_wall_ms']:.0f} | "
              f"{r['text_cpu_ms']:.0f} | {r['http_wall_ms']:.0f} | {r['http_loop_cpu_ms']:.0f} | "
              f"{r['http_process_cpu_ms']:.0f} | {r['stall_ms']:.0f} | {r['stall_cpu_ms']:.0f} | "
              f"{r['idle_stall_ms']:.0f} | {r['idle_stall_cpu_ms']:.0f} | "
              f"{r['otel_loop_cpu_ms']:.0f} | {r['otel_export_cpu_ms']:.0f} | {r['sweeps_cpu_ms']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
