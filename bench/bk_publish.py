"""Broker CPU per message on BookKeeper storage: checkouts of this repository measured alternately on one cluster.

One ZooKeeper and 3 bookies (``cluster.local``, ensemble 3 / write 2 / ack 2 as ``make bench``'s ours-bk); per round,
each checkout's broker is started from that checkout (``python -m broker`` in its directory), warmed up, measured,
stopped. Measured per broker: unbatched 100 B SENDs from the raw-protocol producer of ``raw_publish`` (``--window`` in
flight, no client library in the broker's way) and, with ``--batched N``, N messages from the official client with
batching (compare.py's throughput producer). The broker's CPU is read from /proc (all its threads; the per-thread
split is printed too); the bookies' CPU is theirs, left out. Prints each round, then the medians and the per-round
ratios against the first checkout.

    python -m bench.bk_publish --checkouts /path/to/new,/path/to/old --rounds 3 --batched 100000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import pulsar

from bench.brokers import BrokerProcess, bookkeeper_settings, start_ours
from bench.compare import fresh_topic, publish_all, throughput_producer
from bench.raw_publish import RawProducer
from cluster.local import start_cluster, stop_cluster


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU time of each thread of a process ("name:tid" -> ns), from /proc/<pid>/task/*/schedstat."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[f"{name}:{tid}"] = int(f.read().split()[0])
        except OSError:
            continue  # the thread ended
    return out


def unbatched(broker: BrokerProcess, frames: list[bytes], window: int) -> tuple[float, float, dict[str, float]]:
    """(msg/s, broker CPU us per message, us per message of each busy thread) of one run on a fresh topic."""
    topic = f"persistent://public/default/raw-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=60)
    try:
        client.create_producer(topic).close()  # the lookup: the broker owns the topic's bundle before the raw producer
    finally:
        client.close()
    producer = RawProducer(broker.port, topic)
    try:
        threads0, cpu0, t0 = thread_cpu_ns(broker.proc.pid), broker.cpu_seconds(), time.perf_counter()
        producer.run(frames, window)
        elapsed, cpu, threads1 = time.perf_counter() - t0, broker.cpu_seconds() - cpu0, thread_cpu_ns(broker.proc.pid)
    finally:
        producer.close()
    n = len(frames)
    per_thread = {k: (v - threads0.get(k, 0)) / n / 1000 for k, v in threads1.items() if v > threads0.get(k, 0)}
    return n / elapsed, cpu / n * 1e6, per_thread


def batched(broker: BrokerProcess, n: int, size: int) -> tuple[float, float]:
    """(msg/s, broker CPU us per message) of ``n`` batched messages (after 20,000 unrecorded ones)."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=60, io_threads=2)
    try:
        producer = throughput_producer(client, fresh_topic("bk-publish"), True)
        publish_all(producer, 20_000, b"p" * size)
        cpu0, t0 = broker.cpu_seconds(), time.perf_counter()
        publish_all(producer, n, b"p" * size)
        elapsed, cpu = time.perf_counter() - t0, broker.cpu_seconds() - cpu0
        producer.close()
    finally:
        client.close()
    return n / elapsed, cpu / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkouts", default=".", help="comma-separated checkout directories, measured in this order")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--messages", type=int, default=20_000, help="unbatched SENDs per run")
    p.add_argument("--window", type=int, default=1000, help="unbatched SENDs in flight")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batched", type=int, default=0, help="batched messages per run (0: none)")
    args = p.parse_args(argv)
    checkouts = [str(Path(c).resolve()) for c in args.checkouts.split(",")]
    results: dict[str, dict[str, list[tuple[float, float]]]] = {c: {"unbatched": [], "batched": []} for c in checkouts}
    frames = RawProducer.frames(args.messages, args.size)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cluster = start_cluster(work / "cluster", bookies=3)
        with open("/proc/loadavg") as f:
            print(f"load average before: {' '.join(f.read().split()[:3])}", flush=True)
        try:
            for r in range(args.rounds):
                for i, checkout in enumerate(checkouts):
                    os.chdir(checkout)  # the broker runs this checkout's code
                    workdir = work / f"round{r}-{i}"
                    workdir.mkdir()
                    broker = start_ours(workdir, name="ours-bk", settings=bookkeeper_settings(cluster))
                    os.chdir(here)
                    try:
                        unbatched(broker, frames[:2000], args.window)  # warm-up: topic paths, the bookies' JIT
                        rate, cpu, threads = unbatched(broker, frames, args.window)
                        results[checkout]["unbatched"].append((rate, cpu))
                        busiest = sorted(threads.items(), key=lambda kv: -kv[1])[:3]
                        line = (f"round {r} {checkout}: unbatched {rate:,.0f} msg/s, {cpu:.1f} us/msg (threads: "
                                + ", ".join(f"{k} {v:.1f}" for k, v in busiest) + ")")
                        if args.batched:
                            brate, bcpu = batched(broker, args.batched, args.size)
                            results[checkout]["batched"].append((brate, bcpu))
                            line += f"; batched {brate:,.0f} msg/s, {bcpu:.2f} us/msg"
                        print(line, flush=True)
                    finally:
                        broker.stop()
        finally:
            stop_cluster(cluster)
    with open("/proc/loadavg") as f:
        print(f"load average after: {' '.join(f.read().split()[:3])}")
    first = checkouts[0]
    for kind in ("unbatched", "batched"):
        if not results[first][kind]:
            continue
        for checkout in checkouts:
            runs = results[checkout][kind]
            line = (f"{kind} {checkout}: median {statistics.median(x for x, _ in runs):,.0f} msg/s, "
                    f"{statistics.median(c for _, c in runs):.2f} us/msg broker CPU")
            if checkout != first:
                ratios = [c / c0 for (_, c), (_, c0) in zip(runs, results[first][kind], strict=True)]
                line += (f"; CPU ratio to {first} per round: {', '.join(f'{x:.2f}' for x in ratios)} "
                         f"(median {statistics.median(ratios):.2f})")
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
