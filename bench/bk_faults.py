"""Two measurements of our broker on BookKeeper (managedLedgerStorage=bookkeeper), not tests.

1. Topic open on takeover: broker A (a process) owns a topic (its ledger open, a subscription on it);
   broker B (another process, same ZooKeeper and bookies) is asked for it by the official client.
   Timed: ``create_producer`` on B (lookup, connect, the managed ledger's takeover: recovery-open that
   fences A's ledger, close it, a new ledger, the list CAS'd), then ``subscribe`` to the existing
   subscription (its cursor recovered). For comparison, the same calls for a fresh topic on B and on
   our broker with the file ledger.
2. A bookie crash under load: unbatched sends at a fixed rate to broker B, ``kill -9`` of one bookie
   of the topic's current ensemble mid-run; send latency (send -> receipt) of the sends issued
   before the kill, in the seconds after it, and after that, and how many sends failed.

The cluster has 4 bookies, ensembles 3 / write quorum 2 / ack quorum 2: the spare bookie is what
the ensemble change replaces the dead one with (with 3 bookies and ensemble 3 there is none).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pulsar
from kazoo.client import KazooClient

from bench.brokers import (
    BK_ACK_QUORUM,
    BK_ENSEMBLE,
    BK_WRITE_QUORUM,
    BrokerProcess,
    start_ours,
    start_ours_bk,
)
from bench.compare import load_average
from cluster.local import LocalCluster, missing_dependencies, start_cluster, stop_cluster
from managed_ledger.bookkeeper import metadata, ml_formats

BOOKIES = 4


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def _fmt(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.0f} ms (min {min(values):.0f}, max {max(values):.0f})"


# ---- 1. topic open on takeover -------------------------------------------------------------------


def open_times(client: pulsar.Client, topic: str) -> tuple[float, float]:
    """(create_producer ms, subscribe ms) for ``topic`` through ``client``."""
    t0 = time.perf_counter()
    producer = client.create_producer(topic, batching_enabled=False)
    produce_ms = _ms(t0)
    t0 = time.perf_counter()
    consumer = client.subscribe(topic, "sub")
    subscribe_ms = _ms(t0)
    producer.close()
    consumer.close()
    return produce_ms, subscribe_ms


def load_topic(client: pulsar.Client, topic: str, messages: int) -> None:
    """Make ``topic`` owned by the broker ``client`` talks to: a subscription, messages, some acked."""
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1)
    for _ in range(messages):
        producer.send_async(b"t" * 100, None)
    producer.flush()
    for _ in range(messages // 2):
        consumer.acknowledge(consumer.receive(10_000))
    producer.close()
    consumer.close()


def takeover(a: BrokerProcess, b: BrokerProcess, file_broker: BrokerProcess, rounds: int) -> None:
    ca = pulsar.Client(a.url, operation_timeout_seconds=30)
    cb = pulsar.Client(b.url, operation_timeout_seconds=30)
    cf = pulsar.Client(file_broker.url, operation_timeout_seconds=30)
    taken: list[tuple[float, float]] = []
    fresh: list[tuple[float, float]] = []
    fresh_file: list[tuple[float, float]] = []
    try:
        # First opens pay for connections and warm-up: not counted.
        open_times(cb, f"persistent://public/default/warm-{uuid.uuid4().hex[:8]}")
        open_times(cf, f"persistent://public/default/warm-{uuid.uuid4().hex[:8]}")
        for _ in range(rounds):
            topic = f"persistent://public/default/takeover-{uuid.uuid4().hex[:8]}"
            load_topic(ca, topic, 1000)
            taken.append(open_times(cb, topic))
            fresh.append(open_times(cb, f"persistent://public/default/fresh-{uuid.uuid4().hex[:8]}"))
            fresh_file.append(open_times(cf, f"persistent://public/default/fresh-{uuid.uuid4().hex[:8]}"))
    finally:
        for c in (ca, cb, cf):
            c.close()
    print(f"\n### Topic open (median of {rounds}; the client's create_producer, then subscribe)\n")
    print("| case | create_producer | subscribe (existing subscription on takeover) |")
    print("|---|---|---|")
    for name, rows in (("takeover from a live owner (BookKeeper: fence + close its ledger, new ledger)", taken),
                       ("fresh topic, BookKeeper", fresh), ("fresh topic, file ledger", fresh_file)):
        print(f"| {name} | {_fmt([r[0] for r in rows])} | {_fmt([r[1] for r in rows])} |")


# ---- 2. a bookie crash under load ---------------------------------------------------------------


@dataclass
class Send:
    at: float  # seconds since the start of the run, when issued
    latency_ms: float | None = None
    ok: bool = True


def current_ensemble(cluster: LocalCluster, topic: str) -> tuple[str, ...]:
    """The bookies of the topic's current (last) ledger, from its znodes in ZooKeeper."""
    zk = KazooClient(hosts=cluster.zk_address)
    zk.start(timeout=10)
    try:
        local = topic.split("://", 1)[1]
        tenant, namespace, name = local.split("/")
        path = ml_formats.ledger_path(ml_formats.MANAGED_LEDGERS_ROOT,
                                      f"{tenant}/{namespace}/persistent/{ml_formats.url_encode(name)}")
        info = ml_formats.decode_ledger_info(zk.get(path)[0])
        ledger_id = info.ledgers[-1].ledger_id
        data, _stat = zk.get(metadata.ledger_path(ledger_id))
        return metadata.parse(data).segments[-1].ensemble
    finally:
        zk.stop()
        zk.close()


def bookie_crash(cluster: LocalCluster, broker: BrokerProcess, rate: int, seconds: float, kill_at: float,
                 during_s: float) -> None:
    topic = f"persistent://public/default/crash-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.url, operation_timeout_seconds=30)
    lock = threading.Lock()
    sends: list[Send] = []
    try:
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                          send_timeout_millis=30_000)
        producer.send(b"first")
        ensemble = current_ensemble(cluster, topic)
        victim = next(b for b in cluster.bookies if b.address in ensemble)
        killed_at: float | None = None
        start = time.perf_counter()
        n = int(rate * seconds)
        tick = 0.001
        per_tick = max(1, int(rate * tick))
        issued = 0

        def done(send: Send, t_ns: int) -> object:
            def callback(res: pulsar.Result, _mid: object) -> None:
                with lock:
                    send.latency_ms = (time.perf_counter_ns() - t_ns) / 1e6
                    send.ok = res == pulsar.Result.Ok
            return callback

        while issued < n:
            now = time.perf_counter()
            if killed_at is None and now - start >= kill_at:
                os.kill(victim.pid, signal.SIGKILL)
                killed_at = now - start
            due = min(n, int((now - start) * rate) + per_tick)
            while issued < due:
                send = Send(time.perf_counter() - start)
                sends.append(send)
                producer.send_async(b"x" * 100, done(send, time.perf_counter_ns()))
                issued += 1
            time.sleep(tick)
        producer.flush()
        producer.send(b"last")  # after the ensemble change: the current ledger's ensemble shows it
        ensemble_after = current_ensemble(cluster, topic)
        producer.close()
    finally:
        client.close()
    cluster.bookies = [b for b in cluster.bookies if b.pid != victim.pid]
    assert killed_at is not None
    print(f"\n### A bookie crash under load: {rate} msg/s unbatched 100 B for {seconds:.0f} s, kill -9 of bookie "
          f"{victim.address} (in the topic's ensemble {', '.join(ensemble)}) at {killed_at:.1f} s\n")
    print("| sends issued | sends | p50 | p99 | max | failed |")
    print("|---|---|---|---|---|---|")
    windows = (("before the kill", 0.0, killed_at), (f"0-{during_s:.0f} s after the kill", killed_at,
               killed_at + during_s), (f"later ({during_s:.0f} s after the kill to the end)",
               killed_at + during_s, float("inf")))
    for name, lo, hi in windows:
        chunk = [s for s in sends if lo <= s.at < hi]
        lat = [s.latency_ms for s in chunk if s.latency_ms is not None]
        failed = sum(1 for s in chunk if not s.ok or s.latency_ms is None)
        if len(lat) >= 2:
            q = statistics.quantiles(lat, n=100)
            print(f"| {name} | {len(chunk)} | {q[49]:.1f} ms | {q[98]:.1f} ms | {max(lat):.1f} ms | {failed} |")
        else:
            print(f"| {name} | {len(chunk)} | - | - | - | {failed} |")
    print(f"\nThe topic's current ensemble at the end: {', '.join(ensemble_after)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="takeovers to time (median shown)")
    p.add_argument("--rate", type=int, default=200, help="sends per second in the bookie-crash run")
    p.add_argument("--seconds", type=float, default=30.0, help="length of the bookie-crash run")
    p.add_argument("--kill-at", type=float, default=10.0, help="when the bookie is killed (s into the run)")
    p.add_argument("--during", type=float, default=5.0, help="the 'during' window after the kill (s)")
    args = p.parse_args(argv)
    why = missing_dependencies()
    if why is not None:
        print(f"bench.bk_faults skipped: cannot start bookies ({why})")
        return 0
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; load average before: {load_average()}", flush=True)
    print(f"ZooKeeper + {BOOKIES} local bookies (journalSyncData=false); ledgers: ensemble {BK_ENSEMBLE} / "
          f"write {BK_WRITE_QUORUM} / ack {BK_ACK_QUORUM}; two broker processes on them, one on the file ledger")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cluster = start_cluster(work / "bk-cluster", bookies=BOOKIES)
        brokers: list[BrokerProcess] = []
        try:
            brokers.append(start_ours_bk(work, cluster, name="bk-a"))
            brokers.append(start_ours_bk(work, cluster, name="bk-b"))
            brokers.append(start_ours(work))
            a, b, file_broker = brokers
            takeover(a, b, file_broker, args.rounds)
            bookie_crash(cluster, b, args.rate, args.seconds, args.kill_at, args.during)
        finally:
            for broker in brokers:
                broker.stop()
            stop_cluster(cluster)
    print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
