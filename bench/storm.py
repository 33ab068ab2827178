"""Shared-subscription throughput before and after a consumer reconnect storm, same topic.

The Pulsar bug this guards against: consumers removed while their FLOW was still queued left the
dispatcher's permit total permanently low, so reads shrank and throughput fell 30-40 % after
frequent reconnects. Here the stormed topic's throughput after the storm must stay within 10 % of
a control topic's, measured in alternation with it (a control in the same minute, because this
kind of VM drifts in speed by more than 10 % between "before" and "after"). Before-storm runs are
shown too.

The broker runs as a subprocess (its CPU is measured separately from the client's). Load is the
official client: a producer with batching and no per-message callback, consumers calling
receive() + acknowledge().

``--type Key_Shared`` runs the same on a Key_Shared subscription (messages over ``--keys`` keys, key-based
batching): a storm there leaves hashes blocked while their old consumer's messages are replayed.
``--profile FILE`` runs the broker under cProfile and writes its profile to FILE at the end (what share of
the broker's time a function takes; the rates are then lower than without it).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import pulsar
from pulsar import ConsumerType

READY_RE = re.compile(r"broker ready in [\d.]+ s: pulsar://[^:]+:(\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    name: str
    messages: int
    seconds: float
    broker_cpu: float
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def broker_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def client_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass(frozen=True)
class Load:
    """The subscription the consumers share, and the keys the producer spreads messages over (Key_Shared)."""

    consumer_type: ConsumerType = ConsumerType.Shared
    keys: int = 0

    def producer(self, client: pulsar.Client, topic: str) -> pulsar.Producer:
        batching = pulsar.BatchingType.KeyBased if self.keys else pulsar.BatchingType.Default
        return client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                      block_if_queue_full=True, batching_type=batching)

    def send(self, producer: pulsar.Producer, payload: bytes, i: int) -> None:
        if self.keys:
            producer.send_async(payload, None, partition_key=f"k{i % self.keys}")
        else:
            producer.send_async(payload, None)


def start_broker(data_dir: str, profile: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    log_path = os.path.join(data_dir, "broker.log")
    log = open(log_path, "wb")  # the broker's own log; read for the bound port
    under = ["-m", "cProfile", "-o", profile] if profile else []
    proc = subprocess.Popen(
        [sys.executable, *under, "-m", "broker", "standalone", "--port", "0", "--web-port", "0",
         "--data-dir", os.path.join(data_dir, "data"), "--bind-address", "127.0.0.1"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + 60  # (a busy machine, or the broker under cProfile)
    while time.monotonic() < deadline:
        with open(log_path) as f:
            m = READY_RE.search(f.read())
        if m:
            return proc, int(m.group(1))
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError("broker did not start")


def measure(client: pulsar.Client, topic: str, n: int, consumers: int, pid: int, name: str,
            load: Load = Load()) -> Phase:
    subs = [client.subscribe(topic, "bench", consumer_type=load.consumer_type, receiver_queue_size=1000)
            for _ in range(consumers)]
    producer = load.producer(client, topic)
    counts = [0] * consumers
    stop = threading.Event()

    def drain(i: int) -> None:
        c = subs[i]
        while not stop.is_set():
            try:
                msg = c.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            c.acknowledge(msg)
            counts[i] += 1

    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(consumers)]
    cpu0, ccpu0, t0 = broker_cpu_seconds(pid), client_cpu_seconds(), time.perf_counter()
    for t in threads:
        t.start()
    payload = b"x" * 100
    for i in range(n):
        load.send(producer, payload, i)
    producer.flush()
    while sum(counts) < n:
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    phase = Phase(name, n, elapsed, broker_cpu_seconds(pid) - cpu0, client_cpu_seconds() - ccpu0)
    producer.close()
    for c in subs:
        c.close()
    return phase


def storm(client: pulsar.Client, topic: str, seconds: float, consumers: int, load: Load = Load()) -> int:
    """Consumers subscribe and close continually while messages flow; returns reconnects."""
    producer = load.producer(client, topic)
    stop = threading.Event()
    reconnects = [0]

    def churn(seed: int) -> None:
        r = random.Random(seed)
        while not stop.is_set():
            c = client.subscribe(topic, "bench", consumer_type=load.consumer_type,
                                 receiver_queue_size=r.choice([10, 100, 1000]))
            for _ in range(r.randint(0, 200)):
                try:
                    c.acknowledge(c.receive(timeout_millis=20))
                except pulsar.Timeout:
                    break
            c.close()
            reconnects[0] += 1

    threads = [threading.Thread(target=churn, args=(i,), daemon=True) for i in range(consumers)]
    for t in threads:
        t.start()
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        load.send(producer, b"s" * 100, sent)
        sent += 1
        if random.random() < 0.001:
            producer.flush()
    producer.flush()
    stop.set()
    for t in threads:
        t.join()
    # Drain what the storm left so the "after" phase starts from an empty backlog.
    c = client.subscribe(topic, "bench", consumer_type=load.consumer_type)
    while True:
        try:
            c.acknowledge(c.receive(timeout_millis=500))
        except pulsar.Timeout:
            break
    c.close()
    producer.close()
    return reconnects[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--storm-seconds", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--type", choices=["Shared", "Key_Shared"], default="Shared")
    p.add_argument("--keys", type=int, default=1000, help="Key_Shared: the distinct keys messages carry")
    p.add_argument("--profile", metavar="FILE", help="run the broker under cProfile, its profile written to FILE")
    args = p.parse_args(argv)
    load = Load(ConsumerType.KeyShared, args.keys) if args.type == "Key_Shared" else Load()
    with tempfile.TemporaryDirectory() as data:
        proc, port = start_broker(data, args.profile and os.path.abspath(args.profile))
        try:
            client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=30)
            topic = f"persistent://public/default/bench-storm-{os.getpid()}"
            control_topic = f"persistent://public/default/bench-storm-control-{os.getpid()}"
            for t in (topic, control_topic):
                measure(client, t, args.messages, args.consumers, proc.pid, "warm-up", load)
            before = [measure(client, topic, args.messages, args.consumers, proc.pid, "before", load)
                      for _ in range(args.runs)]
            reconnects = storm(client, topic, args.storm_seconds, args.consumers, load)
            after: list[Phase] = []
            control: list[Phase] = []
            for _ in range(args.runs):
                after.append(measure(client, topic, args.messages, args.consumers, proc.pid, "after", load))
                control.append(measure(client, control_topic, args.messages, args.consumers, proc.pid, "control",
                                       load))
            client.close()
        finally:
            proc.terminate()
            proc.wait(15)
    med_b = statistics.median(x.rate for x in before)
    med_a = statistics.median(x.rate for x in after)
    paired = statistics.median(a.rate / c.rate for a, c in zip(after, control, strict=True))
    print(f"\n{args.type} subscription, {args.consumers} consumers, {args.messages} x 100 B batched, "
          f"median of {args.runs}; storm: {args.storm_seconds:.0f} s, {reconnects} reconnects")
    print(f"{'phase':<8} {'msg/s':>10} {'broker CPU s':>13} {'broker us/msg':>14} {'client CPU s':>13}")
    for ph in before + [ph for pair in zip(after, control, strict=True) for ph in pair]:
        print(f"{ph.name:<8} {ph.rate:>10.0f} {ph.broker_cpu:>13.2f} "
              f"{ph.broker_cpu / ph.messages * 1e6:>14.1f} {ph.client_cpu:>13.2f}")
    print(f"after/before (medians): {med_a / med_b:.3f}; after/control (median of pairs): {paired:.3f}")
    return 0 if paired >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
