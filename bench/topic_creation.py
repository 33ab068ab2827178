"""Topic creation rate at 1,000 and 10,000 topics, each with a producer and a subscription.

Issue 20, item 4: the rate must stay flat as topics accumulate (every per-topic operation O(1) in the
number of topics). One broker process per kind (ours, Apache Pulsar standalone, pulsar-lite), a fresh
data directory each; the official client creates the topics in blocks, from a few threads (each topic:
a consumer on subscription "sub", then a producer; both held open until the end, as in a broker with
that many active topics). For each block: topics per second (wall), the broker's CPU per topic
(process CPU time, all threads) and its RSS once the block is open. Flat means the last block's rate
and CPU per topic are those of the first; ``--topics 10000 --block 1000`` shows both 1,000 and 10,000.

    python -m bench.topic_creation                       # ours, 10,000 topics in blocks of 1,000
    python -m bench.topic_creation --kinds ours,pulsar,lite --topics 1000 --block 250

Our broker runs with automatic bundle splitting off unless ``--split`` is given: past 1,000 topics
in a bundle it splits the bundle and unloads its topics (Pulsar's default too), and under heavy
load a client creating topics then timed out on a topic being unloaded (seen at ~3,300 topics).
Apache Pulsar and pulsar-lite run with their own defaults.

Apache Pulsar runs with the bench's heap (``-Xmx1g``, cluster/apache_pulsar.py HEAP_OPTS) unless
``--pulsar-heap pulsar-env`` gives it what Pulsar's own conf/pulsar_env.sh would (``-Xms2g -Xmx2g
-XX:MaxDirectMemorySize=4g``). The run ends with the memory row of issue 20: each kind's RSS idle (right after
start), with all its topics open, and the growth per topic. A kind that fails part-way is reported with how far it
got and why, and the other kinds still run.

Kinds whose broker cannot be had (no jars for Apache Pulsar: `make pulsar-deps`; no pulsar-lite wheel)
are skipped with the reason.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pulsar

from bench.brokers import BrokerProcess, start_apache_pulsar, start_ours, start_pulsar_lite
from cluster.apache_pulsar import PULSAR_ENV_HEAP_OPTS

KINDS = ("ours", "pulsar", "lite")
PULSAR_HEAPS = {"bench": None, "pulsar-env": PULSAR_ENV_HEAP_OPTS}


@dataclass
class Block:
    topics_total: int  # topics open once the block was done
    seconds: float
    broker_cpu_s: float
    rss_mb: float
    count: int

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_topic(self) -> float:
        return self.broker_cpu_s * 1000 / self.count


@dataclass
class KindRun:
    """One kind's run: its blocks, its RSS right after start, and why it stopped early (None: it did not)."""

    idle_rss_mb: float
    blocks: list[Block]
    failure: str | None = None

    def memory_row(self, name: str) -> str:
        if not self.blocks:
            return f"| {name} | {self.idle_rss_mb:.0f} MB | - | - | {self.failure or ''} |"
        last = self.blocks[-1]
        growth_kb = (last.rss_mb - self.idle_rss_mb) * 1024 / last.topics_total
        return (f"| {name} | {self.idle_rss_mb:.0f} MB | {last.rss_mb:.0f} MB with {last.topics_total:,} | "
                f"{growth_kb:+.1f} KB | {self.failure or ''} |")


def create_topics(client: pulsar.Client, names: list[str], threads: int,
                  held: list[pulsar.Consumer | pulsar.Producer]) -> None:
    """Each name: subscribe (subscription "sub") and create a producer, from ``threads`` threads; all kept open."""
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(part: list[str]) -> None:
        try:
            for topic in part:
                consumer = client.subscribe(topic, "sub", receiver_queue_size=10)
                producer = client.create_producer(topic, batching_enabled=False)
                with lock:
                    held.extend((consumer, producer))
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(names[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise RuntimeError(f"topic creation failed: {errors[0]!r}")


def start_py_spy(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy (next to this Python, or on the PATH) sampling ``pid`` into ``out`` (collapsed stacks)."""
    exe = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(exe) if exe.exists() else "py-spy", "record", "--native", "--format", "raw",
                             "--rate", "200", "-o", out, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_kind(broker: BrokerProcess, topics: int, block: int, threads: int, blocks: list[Block]) -> None:
    """Create ``topics`` in blocks, appending each measured block to ``blocks`` (kept if a later one fails)."""
    # (The client's INFO lines, ~10 per topic, made the output of a 10,000-topic run some hundred thousand lines.)
    client = pulsar.Client(broker.url, operation_timeout_seconds=120, io_threads=2,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    held: list[pulsar.Consumer | pulsar.Producer] = []
    tag = uuid.uuid4().hex[:8]
    try:
        done = 0
        while done < topics:
            count = min(block, topics - done)
            names = [f"persistent://public/default/create-{tag}-{i}" for i in range(done, done + count)]
            cpu0, t0 = broker.cpu_seconds(), time.perf_counter()
            create_topics(client, names, threads, held)
            seconds = time.perf_counter() - t0
            done += count
            blocks.append(Block(done, seconds, broker.cpu_seconds() - cpu0, broker.rss_mb(), count))
            b = blocks[-1]
            print(f"  {broker.name}: {done:,} topics open; last {count:,}: {b.rate:,.0f} topics/s, "
                  f"{b.cpu_ms_per_topic:.2f} ms broker CPU per topic, RSS {b.rss_mb:.0f} MB, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for handle in held:
            try:
                handle.close()
            except pulsar.PulsarException:
                pass
        client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kinds", default="ours", help=f"comma-separated, among {', '.join(KINDS)} (default: ours)")
    p.add_argument("--topics", type=int, default=10_000, help="topics to create (default 10,000)")
    p.add_argument("--block", type=int, default=1000, help="topics per measured block (default 1,000)")
    p.add_argument("--threads", type=int, default=4, help="client threads creating topics at once (default 4)")
    p.add_argument("--profile", metavar="OUT.txt",
                   help="record our broker with py-spy (--native, --idle off) for the run; collapsed stacks to OUT.txt")
    p.add_argument("--pulsar-heap", choices=sorted(PULSAR_HEAPS), default="bench",
                   help="Apache Pulsar's JVM memory: the bench's -Xmx1g (default) or pulsar_env.sh's "
                        f"{' '.join(PULSAR_ENV_HEAP_OPTS)}")
    p.add_argument("--split", action="store_true",
                   help="leave our broker's automatic bundle split on (default: off, see below)")
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        p.error(f"--kinds: expected some of {', '.join(KINDS)}, got {args.kinds!r}")
    print(f"load average before: {os.getloadavg()}", flush=True)
    results: dict[str, KindRun] = {}
    notes: dict[str, str] = {}
    for kind in kinds:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            # Our broker splits a bundle past 1,000 topics (loadBalancerNamespaceBundleMaxTopics) and unloads
            # its topics, as Pulsar does; that is a rate of its own, not the creation rate measured here.
            settings = None if args.split else {"loadBalancerAutoBundleSplitEnabled": "false"}
            broker = (start_ours(work, settings=settings) if kind == "ours"
                      else start_apache_pulsar(work, PULSAR_HEAPS[args.pulsar_heap]) if kind == "pulsar"
                      else start_pulsar_lite(work))
            if broker is None:
                print(f"{kind} skipped: not installed (see the module docstring)")
                continue
            spy = start_py_spy(broker.proc.pid, args.profile) if args.profile and kind == "ours" else None
            notes[broker.name] = broker.notes
            run = results[broker.name] = KindRun(broker.rss_mb(), [])
            print(f"  {broker.name}: RSS idle {run.idle_rss_mb:.0f} MB ({broker.notes})", flush=True)
            try:
                run_kind(broker, args.topics, args.block, args.threads, run.blocks)
            except RuntimeError as exc:  # (reported, and the other kinds still run)
                alive = broker.proc.poll() is None
                run.failure = (f"failed after {run.blocks[-1].topics_total if run.blocks else 0:,} topics: {exc}"
                               f"{'' if alive else f'; the broker exited with {broker.proc.returncode}'}")
                print(f"{broker.name} {run.failure}; the end of its log:\n"
                      + "\n".join(broker.log_path.read_text(errors="replace").splitlines()[-30:]), flush=True)
            finally:
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                    spy.wait(timeout=60)
                broker.stop()
    print(f"\n{date.today()}: {args.topics:,} topics, each a consumer (subscription) + a producer, "
          f"{args.threads} client threads, blocks of {args.block:,}; load average after: {os.getloadavg()}")
    print("\n| broker | topics open | topics/s (this block) | broker CPU ms/topic | RSS MB |")
    print("|---|---|---|---|---|")
    for name, run in results.items():
        for b in run.blocks:
            print(f"| {name} | {b.topics_total:,} | {b.rate:,.0f} | {b.cpu_ms_per_topic:.2f} | {b.rss_mb:.0f} |")
    for name, run in results.items():
        blocks = run.blocks
        if len(blocks) >= 2:
            first, last = blocks[0], blocks[-1]
            print(f"{name}: last block / first block: rate {last.rate / first.rate:.2f}, CPU per topic "
                  f"{last.cpu_ms_per_topic / first.cpu_ms_per_topic:.2f}; median rate "
                  f"{statistics.median(b.rate for b in blocks):,.0f} topics/s")
    print("\nMemory (issue 20): RSS right after start, with every topic open (each a producer + a subscription)\n")
    print("| broker | RSS idle | RSS with the topics open | growth per topic | failure |")
    print("|---|---|---|---|---|")
    for name, run in results.items():
        print(run.memory_row(name))
    for name, note in notes.items():
        print(f"- {name}: {note}")
    return 1 if any(run.failure for run in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
