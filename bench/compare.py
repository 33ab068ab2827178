"""Side-by-side benchmark: our broker (file ledger, and on BookKeeper) vs pulsar-lite, same machine, same run.

The official client is the load. Each workload runs against every broker kind alternately
(A B C A B C ...); the table shows medians, and first/other is the median (and range) of the ratios
within each round (the first kind of --kinds against each other one); a fixed-rate row, where every kind
achieves the rate, also gives the publish p99s' ratios by round in its notes (lower is better there).
Kinds: ``ours`` (file ledger), ``ours-bk`` (managedLedgerStorage=bookkeeper on ZooKeeper + 3 local
bookies started here, cluster/local.py), ``pulsar`` (Apache Pulsar standalone from the jars of
`make pulsar-deps`, cluster/apache_pulsar.py), ``lite`` (pulsar-lite).
No per-message Python callbacks on the throughput paths (they cap the client near 30k msg/s):
producers use send_async(payload, None) + flush(); consumers call receive() + acknowledge().
The fixed-rate latency workloads, and produce and fan-out rows beside the Python client's, use a load generator
on the official Go client (bench/fixed_rate.py);
a run that does not achieve the rate offered fails (RunFailed): the table says so and the bench exits 1
(with --keep-going FILE, 0, the failure written to FILE: `make bench` runs its other benches, then fails).
Broker CPU is read from /proc for each broker process around each run; RSS at the end. The bookies'
CPU is the storage's, reported in a column of its own (like Pulsar's bookies, it is not the broker's).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pulsar
from pulsar import ConsumerType

from bench import fixed_rate
from bench.brokers import BrokerProcess, start_apache_pulsar, start_ours, start_ours_bk, start_pulsar_lite
from cluster.local import LocalCluster, missing_dependencies, start_cluster, stop_cluster


@dataclass
class Result:
    messages: int
    seconds: float
    nbytes: int
    broker_cpu: float
    extra: dict[str, float] = field(default_factory=dict)
    storage_cpu: float = 0.0
    # Why runs did not count (RunFailed): one for each failed run. A median result keeps every run's.
    failures: list[str] = field(default_factory=list)
    # Of the median result: how many runs counted (the figures are of those).
    counted: int = 1

    @property
    def rate(self) -> float:
        """Messages per second; for a fixed-rate workload, the rate it achieved."""
        if "achieved" in self.extra:
            return self.extra["achieved"]
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def mb_s(self) -> float:
        return self.nbytes / self.seconds / 1e6 if self.seconds else 0.0

    @property
    def cpu_us_per_msg(self) -> float:
        return self.broker_cpu / self.messages * 1e6 if self.messages else 0.0

    @property
    def storage_cpu_us_per_msg(self) -> float:
        return self.storage_cpu / self.messages * 1e6 if self.messages else 0.0


class RunFailed(Exception):
    """A run that does not count (a fixed rate not achieved, sends that failed): the table says why, and the
    bench exits with status 1 once every workload has run."""

    def __init__(self, why: str, messages: int, nbytes: int, extra: dict[str, float]) -> None:
        super().__init__(why)
        self.messages, self.nbytes, self.extra = messages, nbytes, extra


class Window:
    """The timed part of a workload: set-up done before ``start()`` is neither timed nor charged."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.start()

    def start(self) -> None:
        self.cpu0 = self.broker.cpu_seconds()
        self.storage_cpu0 = self.broker.storage_cpu_seconds()
        self.t0 = time.perf_counter()


Workload = Callable[[pulsar.Client, Window], tuple[int, int, dict[str, float]]]


def fresh_topic(tag: str) -> str:
    return f"persistent://public/default/bench-{tag}-{uuid.uuid4().hex[:8]}"


def throughput_producer(client: pulsar.Client, topic: str, batching: bool) -> pulsar.Producer:
    """The throughput workloads' producer: batches flushed every millisecond, 5000 in flight."""
    return client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=1,
                                  block_if_queue_full=True, max_pending_messages=5000)


def publish_all(producer: pulsar.Producer, n: int, payload: bytes) -> None:
    """``n`` sends with no per-message callback, then wait for every receipt."""
    for _ in range(n):
        producer.send_async(payload, None)
    producer.flush()


def produce(n: int, size: int, batching: bool) -> Workload:
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        producer = throughput_producer(client, fresh_topic("produce"), batching)
        publish_all(producer, n, b"p" * size)
        producer.close()
        return n, n * size, {}
    return run


def consume(n: int, size: int, batching: bool) -> Workload:
    """Times the delivery and draining of a backlog produced beforehand.

    The subscription is created first (so it keeps the backlog), but the consumer attaches only
    once the backlog is written: the broker delivers all of it inside the timed window. With the
    consumer attached while producing, a broker that counts permits per entry rather than per
    message (pulsar-lite does: 1000 permits brought the whole 20,000-message backlog in 55 batches)
    delivers outside the window, into the client's queue, and looks faster than it is.
    """
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        topic = fresh_topic("consume")
        client.subscribe(topic, "bench").close()
        producer = throughput_producer(client, topic, batching)
        publish_all(producer, n, b"c" * size)
        producer.close()
        window.start()
        consumer = client.subscribe(topic, "bench", receiver_queue_size=1000)
        for _ in range(n):
            consumer.acknowledge(consumer.receive(10_000))
        consumer.close()
        return n, n * size, {}
    return run


def end_to_end(n: int, size: int) -> Workload:
    """Batched messages from a producer to a consumer attached beforehand, timed from the first send
    until the consumer has received (and acknowledged) the last one: what an application moving
    data through the broker sees. Prefetching into the client's queue cannot flatter a broker here,
    since the clock runs until the consumer has taken every message out of that queue."""
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        topic = fresh_topic("e2e")
        consumer = client.subscribe(topic, "bench", receiver_queue_size=1000)
        producer = throughput_producer(client, topic, True)

        def drain() -> None:
            for _ in range(n):
                consumer.acknowledge(consumer.receive(20_000))

        window.start()
        reader = threading.Thread(target=drain)
        reader.start()
        publish_all(producer, n, b"e" * size)
        reader.join()
        producer.close()
        consumer.close()
        return n, n * size, {}
    return run


# Kinds whose end-to-end latency the fixed-rate workloads cannot measure, and why (their consumer is still
# attached and acknowledges what it gets, so the broker does the same work).
NO_END_TO_END = {"pulsar-lite": "the Go client discards its deliveries (ChecksumMismatch: pulsar-lite 0.2's MESSAGE "
                                "frames fail the client's CRC32C check)"}


def latency(rate: int, seconds: float, size: int) -> Workload:
    """Publish unbatched at a fixed rate, open loop, with the Go load generator (bench/fixed_rate.py):
    publish (send -> receipt) and end-to-end (send -> received) percentiles, and the rate achieved, which
    is the rate of the row; a run below fixed_rate.MIN_RATIO of the rate offered fails (RunFailed).
    CPU per message counts the warm-up's messages too (the broker's CPU is read over the whole run)."""
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        topic = fresh_topic("latency")
        window.start()
        r = fixed_rate.run(window.broker.url, topic, rate, seconds, size,
                           end_to_end=window.broker.name not in NO_END_TO_END)
        extra = {"offered": float(rate), "achieved": r.figure("achieved"), "client_cpu_s": r.client_cpu_s}
        for series, key in (("publish_ms", "pub"), ("end_to_end_ms", "e2e"), ("from_schedule_ms", "sched"),
                            ("lag_ms", "lag")):
            for q in ("p50", "p99", "p999", "max"):
                extra[f"{key}_{q}"] = r.ms(series, q)
        total = int(rate * (seconds + fixed_rate.WARMUP_S))
        if r.failure is not None:
            raise RunFailed(r.failure, total, total * size, extra)
        return total, total * size, extra
    return run


def many_topics(topics: int, per_topic: int) -> Workload:
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        tag = uuid.uuid4().hex[:8]
        producers = [client.create_producer(f"persistent://public/default/bench-many-{tag}-{i}",
                                            batching_enabled=False) for i in range(topics)]
        for p in producers:
            for _ in range(per_topic):
                p.send_async(b"m" * 100, None)
        for p in producers:
            p.flush()
            p.close()
        return topics * per_topic, topics * per_topic * 100, {}
    return run


def topics_with_subscriptions(topics: int) -> Workload:
    """Creation of ``topics`` topics, each with a producer and a subscription (consumer attached), all held open;
    the rate is topics per second, and the broker's RSS is read while they are all open. Topics are not deleted
    afterwards (no broker here deletes inactive ones), so the RSS of later rounds includes earlier rounds' topics:
    the ``rss_per_topic_kb`` figure is the growth during this run divided by its topics. Nor are the earlier
    workloads' topics: when it runs last in a full run, each broker already holds some thousands of topics, so this is
    the creation rate at that size (pulsar-lite's CPU per topic grows with the topics it holds; bench.topic_creation
    starts each broker fresh: docs/benchmarks.md, "Why the two creation benches disagreed"). One client thread."""
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        tag = uuid.uuid4().hex[:8]
        rss0 = window.broker.rss_mb()
        producers, consumers = [], []
        for i in range(topics):
            topic = f"persistent://public/default/bench-rss-{tag}-{i}"
            consumers.append(client.subscribe(topic, "sub", receiver_queue_size=10))
            producers.append(client.create_producer(topic, batching_enabled=False))
        elapsed = time.perf_counter() - window.t0
        rss = window.broker.rss_mb()
        for p in producers:
            p.close()
        for c in consumers:
            c.close()
        return topics, 0, {"rss_mb": rss, "rss_per_topic_kb": (rss - rss0) * 1024 / topics,
                           "create_s": elapsed}
    return run


def fan_out(subscriptions: int, n: int, size: int) -> Workload:
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        topic = fresh_topic("fanout")
        consumers = [client.subscribe(topic, f"sub-{i}", consumer_type=ConsumerType.Shared)
                     for i in range(subscriptions)]
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                          block_if_queue_full=True)

        received = [0] * subscriptions

        def drain(i: int, c: pulsar.Consumer) -> None:
            # A receive that times out ends this consumer's count: the row says how many never came
            # (before, the thread died with the Timeout and the run still counted all n).
            try:
                for _ in range(n):
                    c.acknowledge(c.receive(20_000))
                    received[i] += 1
            except pulsar.Timeout:
                pass

        threads = [threading.Thread(target=drain, args=(i, c)) for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        payload = b"f" * size
        for _ in range(n):
            producer.send_async(payload, None)
        producer.flush()
        for t in threads:
            t.join()
        producer.close()
        for c in consumers:
            c.close()
        got = sum(received)
        missed = n * subscriptions - got
        return got, got * size, {"missed": float(missed)} if missed else {}
    return run


def produce_go(n: int, size: int, batching: bool, producers: int = 1) -> Workload:
    """``produce`` with the official Go client (bench/go_load/produce.go): the Python client spends about as
    much CPU per message as the fastest brokers, so its rows show the client's limit as much as the brokers'.
    The rate is the Go program's (first send -> last receipt)."""
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        return go_run(window, "messages", size, lambda url: fixed_rate.produce(url, fresh_topic("go-produce"), n,
                                                                                size, batching, producers))
    return run


def fan_out_go(subscriptions: int, n: int, size: int) -> Workload:
    """``fan_out`` with the official Go client (bench/go_load/fanout.go): the Python client's consumer threads
    wait on its GIL in ``acknowledge`` (docs/benchmarks.md), so that row measures the client as much as the
    broker. The rate is the Go program's (first send -> last delivery); the broker's CPU is over the whole run,
    subscribing included."""
    def run(client: pulsar.Client, window: Window) -> tuple[int, int, dict[str, float]]:
        if window.broker.name in NO_END_TO_END:
            return 0, 0, {"not_measured": 1.0}
        return go_run(window, "deliveries", size, lambda url: fixed_rate.fan_out(url, fresh_topic("go-fanout"),
                                                                                  subscriptions, n, size))
    return run


def go_run(window: Window, counted: str, size: int,
           start: Callable[[str], fixed_rate.FixedRateRun]) -> tuple[int, int, dict[str, float]]:
    """A throughput run of the Go load generator against ``window``'s broker: what it ``counted`` (messages or
    deliveries) and its own rate; RunFailed with its reason when it failed."""
    window.start()
    r = start(window.broker.url)
    got = int(r.figure(counted))
    extra = {"achieved": r.figure("rate"), "client_cpu_s": r.client_cpu_s}
    if r.failure is not None:
        raise RunFailed(r.failure, got, got * size, extra)
    return got, got * size, extra


def measure(broker: BrokerProcess, workload: Workload) -> Result:
    # Start every run with no dirty pages left by the previous one: pulsar-lite does not fsync,
    # so the kernel would otherwise write its last run's data back during the next run, which
    # competes with (and delays) our fsyncs in particular.
    os.sync()
    client = pulsar.Client(broker.url, operation_timeout_seconds=60, io_threads=2)
    try:
        window = Window(broker)
        failures: list[str] = []
        try:
            messages, nbytes, extra = workload(client, window)
        except RunFailed as exc:
            messages, nbytes, extra, failures = exc.messages, exc.nbytes, exc.extra, [str(exc)]
        elapsed = time.perf_counter() - window.t0
        cpu = broker.cpu_seconds() - window.cpu0
        storage_cpu = broker.storage_cpu_seconds() - window.storage_cpu0
        # How long until what the run wrote is on disk: a broker that receipts before syncing
        # leaves its data in the page cache, where the timed window never pays for writing it.
        os.sync()
        extra["until_on_disk_s"] = time.perf_counter() - window.t0
        return Result(messages, elapsed, nbytes, cpu, extra, storage_cpu, failures, counted=0 if failures else 1)
    finally:
        client.close()


def median_result(results: list[Result]) -> Result:
    """The run with the median rate, with every extra figure replaced by its median; of the runs that counted
    (with every run's failure kept), or, when none did, the first run as it failed."""
    failures = [f for r in results for f in r.failures]
    counted = [r for r in results if not r.failures]
    if not counted:
        first = results[0]
        return Result(first.messages, first.seconds, first.nbytes, first.broker_cpu, first.extra, first.storage_cpu,
                      failures, counted=0)
    results = counted
    ordered = sorted(results, key=lambda r: r.rate)
    mid = ordered[len(ordered) // 2]
    keys = {k for r in results for k in r.extra}
    extra = {k: statistics.median(r.extra.get(k, 0.0) for r in results) for k in keys}
    if "missed" in extra:  # a loss in any run shows, not the median run's
        extra["missed"] = max(r.extra.get("missed", 0.0) for r in results)
    return Result(mid.messages, mid.seconds, mid.nbytes, mid.broker_cpu, extra, mid.storage_cpu, failures,
                  counted=len(counted))


def paired_ratios(runs: dict[str, list[Result]],
                  figure: Callable[[Result], float | None] = lambda r: r.rate) -> dict[str, list[float]]:
    """first/other of ``figure`` (the rate, by default) for each round and each other kind (the runs of a round
    are back to back): this VM's speed drifts by up to 2x over minutes, and a ratio within a round cancels most of
    that drift. A round where either run failed or has no such figure (None) gives no ratio."""
    if len(runs) < 2:
        return {}
    (_, first), *others = runs.items()
    out = {}
    for name, other in others:
        ratios = []
        for a, b in zip(first, other, strict=True):
            x, y = figure(a), figure(b)
            if x is not None and y and not a.failures and not b.failures:
                ratios.append(x / y)
        out[name] = ratios
    return out


def publish_p99(r: Result) -> float | None:
    """A fixed-rate run's publish p99 (None for other workloads)."""
    return r.extra.get("pub_p99")


def ratio_text(ratios: list[float]) -> str:
    """A list of per-round ratios as the table shows them: median (range)."""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def workloads(scale: float) -> list[tuple[str, Workload]]:
    def s(n: int) -> int:
        return max(100, int(n * scale))
    return [
        ("produce batched 100 B", produce(s(200_000), 100, True)),
        ("produce batched 1 KiB", produce(s(100_000), 1024, True)),
        ("produce unbatched 100 B", produce(s(30_000), 100, False)),
        ("produce unbatched 1 KiB", produce(s(30_000), 1024, False)),
        (f"produce batched 100 B, {GO_CLIENT}", produce_go(s(400_000), 100, True)),
        (f"produce unbatched 100 B, {GO_CLIENT}", produce_go(s(60_000), 100, False)),
        # Four producers want more CPU than the machine has: the broker that takes less per message leaves the
        # clients more (one producer is limited by the client alone, about 1.4 of 2 cores).
        (f"produce batched 100 B, 4 producers, {GO_CLIENT}", produce_go(s(800_000), 100, True, producers=4)),
        ("consume+ack batched 100 B", consume(s(100_000), 100, True)),
        ("consume+ack unbatched 100 B", consume(s(30_000), 100, False)),
        ("end-to-end batched 100 B", end_to_end(s(200_000), 100)),
        ("end-to-end batched 1 KiB", end_to_end(s(100_000), 1024)),
        (f"{LATENCY} 1k msg/s, 100 B", latency(1000, max(2.0, 10 * scale), 100)),
        (f"{LATENCY} 10k msg/s, 100 B", latency(10_000, max(2.0, 10 * scale), 100)),
        (f"{max(10, int(1000 * scale))} topics x 10 msgs", many_topics(max(10, int(1000 * scale)), 10)),
        ("fan-out to 10 subscriptions", fan_out(10, s(20_000), 100)),
        (f"fan-out to 10 subscriptions, {GO_CLIENT}", fan_out_go(10, s(20_000), 100)),
        (f"{topic_count(scale)} topics, each a producer + a subscription",
         topics_with_subscriptions(topic_count(scale))),
    ]


LATENCY = "latency"  # the fixed-rate workloads' names start with it
GO_CLIENT = "Go client"  # and the other workloads of the Go load generator end with it


def needs_go(name: str) -> bool:
    return name.startswith(LATENCY) or name.endswith(GO_CLIENT)


def topic_count(scale: float) -> int:
    return max(10, int(2000 * scale))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs per broker per workload (median shown)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply message counts (0.1 for a quick look)")
    p.add_argument("--only", help="run only workloads whose name contains this")
    p.add_argument("--kinds", default=",".join(KINDS), type=parse_kinds,
                   help=f"comma-separated broker kinds, in column order ({', '.join(KINDS)}); default all")
    p.add_argument("--keep-going", type=Path, metavar="FILE",
                   help="when a run fails, exit 0 and append its FAILED line to FILE (for a caller that runs more "
                        "benches first and fails at its end when FILE is not empty)")
    args = p.parse_args(argv)
    print(f"load average before: {load_average()}", flush=True)
    chosen = [(name, w) for name, w in workloads(args.scale) if not args.only or args.only in name]
    if any(needs_go(name) for name, _ in chosen):
        try:
            fixed_rate.build()
        except fixed_rate.LoadGeneratorUnavailable as exc:
            if fixed_rate.required():
                raise
            print(f"workloads of the Go load generator skipped: {exc}", flush=True)
            chosen = [(name, w) for name, w in chosen if not needs_go(name)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cluster: LocalCluster | None = None
        brokers: list[BrokerProcess] = []
        table: list[Row] = []
        try:
            for kind in args.kinds:
                if kind == "ours":
                    brokers.append(start_ours(work))
                elif kind == "ours-bk":
                    why = missing_dependencies()
                    if why is not None:
                        print(f"ours-bk skipped: cannot start bookies ({why})")
                        continue
                    cluster = start_cluster(work / "bk-cluster", bookies=3)
                    brokers.append(start_ours_bk(work, cluster))
                elif kind == "pulsar":
                    apache = start_apache_pulsar(work)
                    if apache is not None:
                        brokers.append(apache)
                else:
                    peer = start_pulsar_lite(work)
                    if peer is None:
                        print("pulsar-lite is not installed (pip install pulsar-lite): skipped")
                    else:
                        brokers.append(peer)
            idle_rss = {b.name: b.rss_mb() for b in brokers}
            # Warm-up, not recorded: the JVMs' JIT (Apache Pulsar's, the bookies') and every broker's first topics
            # and connections; each path the workloads take, once, for every kind alike.
            for b in brokers:
                measure(b, produce(2000, 100, False))
                measure(b, produce(20_000, 100, True))
                measure(b, produce(10_000, 1024, True))
                measure(b, consume(20_000, 100, True))
                measure(b, consume(3000, 100, False))
                measure(b, fan_out(10, 2000, 100))
            for name, workload in chosen:
                runs: dict[str, list[Result]] = {b.name: [] for b in brokers}
                for _ in range(args.runs):
                    for b in brokers:  # alternate A B A B
                        runs[b.name].append(measure(b, workload))
                table.append(Row(name, {k: median_result(v) for k, v in runs.items()}, paired_ratios(runs),
                                 paired_ratios(runs, publish_p99)))
                print(f"  done: {name}", flush=True)
            rss = {b.name: b.rss_mb() for b in brokers}
        finally:
            for b in brokers:
                b.stop()
            if cluster is not None:
                stop_cluster(cluster)
    print_table(table, brokers, rss, args.runs, idle_rss)
    print(f"\nload average after: {load_average()}")
    failed = [(row.name, kind, why) for row in table for kind, r in row.results.items() for why in r.failures]
    return report_failures(failed, args.keep_going)


def report_failures(failed: list[tuple[str, str, str]], keep_going: Path | None) -> int:
    """Print each failed run (workload, kind, why) and return the exit status: 1 when a run failed; with
    ``keep_going``, 0, the lines appended to that file instead (`make bench` goes on to its other benches and
    fails at its end when the file is not empty)."""
    lines = [f"FAILED: {name}, {kind}: {why}" for name, kind, why in failed]
    for line in lines:
        print(line, file=sys.stderr)
    if keep_going is None:
        return 1 if lines else 0
    if lines:
        with keep_going.open("a") as out:
            out.write("".join(line + "\n" for line in lines))
    return 0


KINDS = ("ours", "ours-bk", "pulsar", "lite")


def parse_kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise argparse.ArgumentTypeError(f"expected distinct kinds among {', '.join(KINDS)}, got {text!r}")
    return kinds


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min, {os.cpu_count()} CPUs)"


@dataclass
class Row:
    """A workload's line of the table: each kind's median result, and the per-round ratios of the first kind
    against each other one (rates; for a fixed-rate workload also publish p99s, lower is better)."""

    name: str
    results: dict[str, Result]
    ratios: dict[str, list[float]]
    p99_ratios: dict[str, list[float]]


def print_table(table: list[Row], brokers: list[BrokerProcess],
                rss: dict[str, float], runs: int, idle_rss: dict[str, float]) -> None:
    names = [b.name for b in brokers]
    print(f"\n{date.today()}, {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, official pulsar-client {pulsar.__version__}; medians of {runs} "
          f"alternating runs")
    for b in brokers:
        print(f"  {b.name}: {b.notes}; RSS idle after start {idle_rss[b.name]:.0f} MB, at end {rss[b.name]:.0f} MB")
    with_storage = {b.name for b in brokers if b.storage_pids}
    head = "| workload | " + " | ".join(
        f"{n} msg/s | {n} MB/s | {n} CPU us/msg" + (f" | {n} bookies CPU us/msg" if n in with_storage else "")
        for n in names)
    for other in names[1:]:
        head += f" | {names[0]}/{other} (median of rounds; range)"
    head += " | notes |"
    print("\n" + head)
    print("|" + "---|" * (head.count("|") - 1))
    for entry in table:
        name, results = entry.name, entry.results
        cells = []
        for n in names:
            r = results[n]
            cells.append(f"{r.rate:,.0f} | {r.mb_s:.1f} | {r.cpu_us_per_msg:.2f}"
                         + (f" | {r.storage_cpu_us_per_msg:.2f}" if n in with_storage else ""))
        row = f"| {name} | " + " | ".join(cells)
        for other in names[1:]:
            rs = entry.ratios.get(other, [])
            row += f" | {ratio_text(rs)}" if rs else " | -"
        notes = [f"publish p99 {names[0]}/{other} by round {ratio_text(rs)}"
                 for other, rs in entry.p99_ratios.items() if rs]
        if name.startswith("produce"):
            notes.append("until on disk (run + os.sync()): " + ", ".join(
                f"{n} {results[n].messages / results[n].extra['until_on_disk_s']:,.0f} msg/s" for n in names))
        for n in names:
            ex = results[n].extra
            if ex.get("missed"):
                notes.append(f"{n}: {ex['missed']:,.0f} messages never received in a run (receive timed out)")
            if "rss_mb" in ex:
                notes.append(f"{n}: RSS with them open {ex['rss_mb']:.0f} MB (+{ex['rss_per_topic_kb']:.1f} KB/topic)")
            if "offered" in ex:
                notes.append(latency_note(n, results[n], runs))
            elif "not_measured" in ex:
                notes.append(f"{n}: not measured ({NO_END_TO_END[n]})")
            elif name.endswith(GO_CLIENT) and "client_cpu_s" in ex:
                notes.append(f"{n}: load generator CPU {ex['client_cpu_s']:.1f} s")
        print(row + " | " + "; ".join(notes) + " |")


def latency_note(name: str, r: Result, runs: int) -> str:
    """A fixed-rate row's figures for one kind: the rate achieved, the percentiles (ms), the load
    generator's CPU; and, loudly, the runs that did not reach the rate offered."""
    ex = r.extra
    text = f"{name}: "
    if r.failures:
        text += f"**FAILED in {len(r.failures)} of {runs} runs** ({r.failures[0]}); "
        text += "figures of the first failed run: " if not r.counted else "figures of the runs that counted: "
    text += (f"achieved {ex['achieved']:,.0f} of {ex['offered']:,.0f} msg/s; publish p50/p99/p99.9 "
             f"{ex['pub_p50']:.2f}/{ex['pub_p99']:.2f}/{ex['pub_p999']:.2f} ms (max {ex['pub_max']:.1f}; p99 from the "
             f"schedule {ex['sched_p99']:.2f}), ")
    if name in NO_END_TO_END:
        text += f"end-to-end not measured ({NO_END_TO_END[name]})"
    else:
        text += f"end-to-end p50/p99/p99.9 {ex['e2e_p50']:.2f}/{ex['e2e_p99']:.2f}/{ex['e2e_p999']:.2f} ms"
    return text + f"; load generator CPU {ex['client_cpu_s']:.1f} s"


if __name__ == "__main__":
    raise SystemExit(main())
