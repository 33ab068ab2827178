"""Cluster mode, 1 broker vs 2 brokers on the same ZooKeeper and bookies, the load spread over many topics.

The load: raw-protocol producers (bench.raw_publish.RawProducer, pre-built frames, a fixed window of unbatched
SENDs in flight), one connection per topic, each connected to the topic's owner as the official clients are (a
LOOKUP at any broker, following Redirects). Measured per run: the aggregate rate (all messages / wall time) and
each broker process's CPU time, so the broker CPU per message (what cluster mode must not tax: the ownership check
is at topic load, never per message).

On a machine with C free cores, N brokers can use min(N, C) of them: with a broker's CPU per message c (us) and a
load generator that keeps up, the aggregate ceiling is about min(N, C) x 1e6 / c messages per second. A 2-core
machine shared with the load generator (Python, here) and the bookies shows the per-message cost staying flat and
the aggregate growing only as far as idle CPU allows: the printed table says the load average.
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import threading
import time
import uuid
from datetime import date
from pathlib import Path

from bench.brokers import BrokerProcess, bookkeeper_settings, start_ours
from bench.compare import load_average
from bench.raw_publish import RawProducer
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from cluster.local import missing_dependencies, start_cluster, stop_cluster

T = pb.BaseCommand.Type
_LEN = struct.Struct(">I")
LOOKUP_TIMEOUT_S = 60.0


def _read_command(sock: socket.socket) -> pb.BaseCommand:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + _LEN.unpack_from(buf)[0]:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the broker")
        buf += data
    return pb.BaseCommand.FromString(buf[8: 8 + _LEN.unpack_from(buf, 4)[0]])


def owner_port(port: int, topic: str) -> int:
    """The binary port of the topic's owner: LOOKUP at ``port``, following Redirects (as the clients do)."""
    deadline = time.monotonic() + LOOKUP_TIMEOUT_S
    authoritative = False
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            connect = pb.BaseCommand(type=T.CONNECT)
            connect.connect.client_version = "bench-lookup"
            connect.connect.protocol_version = 20
            sock.sendall(commands.frame(connect))
            _read_command(sock)
            lookup = pb.BaseCommand(type=T.LOOKUP)
            lookup.lookupTopic.topic = topic
            lookup.lookupTopic.request_id = 1
            lookup.lookupTopic.authoritative = authoritative
            sock.sendall(commands.frame(lookup))
            r = _read_command(sock).lookupTopicResponse
        if r.response == pb.CommandLookupTopicResponse.Failed:
            time.sleep(0.1)  # (ServiceNotReady: a broker still starting, a bundle being unloaded)
            continue
        port = int(r.brokerServiceUrl.rsplit(":", 1)[1])
        if r.response == pb.CommandLookupTopicResponse.Connect:
            return port
        authoritative = r.authoritative
    raise TimeoutError(f"no owner found for {topic}")


def run(brokers: list[BrokerProcess], topics: int, messages: int, window: int, size: int) -> dict[str, float]:
    names = [f"persistent://public/default/scale-{uuid.uuid4().hex[:6]}-{i}" for i in range(topics)]
    producers = [RawProducer(owner_port(brokers[i % len(brokers)].port, name), name) for i, name in enumerate(names)]
    frames = RawProducer.frames(messages, size)
    for p in producers:  # warm-up: the topics are loaded, the ledgers open
        p.run(frames[:10], window)
    frames = RawProducer.frames(messages, size)  # (sequence ids from 0 again: no deduplication here)
    cpu0 = [b.cpu_seconds() for b in brokers]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=p.run, args=(frames, window)) for p in producers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = [b.cpu_seconds() - c for b, c in zip(brokers, cpu0, strict=True)]
    for p in producers:
        p.close()
    total = topics * messages
    return {"rate": total / elapsed, "cpu_us_per_msg": sum(cpu) / total * 1e6, "elapsed": elapsed,
            **{f"cpu_{i}": c for i, c in enumerate(cpu)}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--topics", type=int, default=16)
    p.add_argument("--messages", type=int, default=5000, help="per topic")
    p.add_argument("--window", type=int, default=200, help="SENDs in flight per topic")
    p.add_argument("--size", type=int, default=100)
    args = p.parse_args(argv)
    why = missing_dependencies()
    if why is not None:
        print(f"cluster_scale: skipped ({why})")
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = start_cluster(Path(tmp) / "cluster", bookies=2)
        try:
            for count in (1, 2):
                settings = {**bookkeeper_settings(cluster, 2, 2, 2),
                            "metadataStoreUrl": f"zk:{cluster.zk_address}/scale-{count}",
                            "bookkeeperMetadataServiceUri": cluster.metadata_service_uri}
                brokers = [start_ours(Path(tmp), name=f"b{count}-{i}", settings=settings) for i in range(count)]
                try:
                    rows.append((count, run(brokers, args.topics, args.messages, args.window, args.size)))
                finally:
                    for b in brokers:
                        b.stop()
        finally:
            stop_cluster(cluster)
    print(f"\n{date.today()}: cluster mode, {args.topics} topics, {args.messages} unbatched {args.size} B SENDs each, "
          f"{args.window} in flight per topic, 2 local bookies; load average {load_average()}")
    print("| brokers | aggregate msg/s | broker CPU us/msg | CPU s per broker |")
    print("|---|---|---|---|")
    for count, r in rows:
        per = ", ".join(f"{r[f'cpu_{i}']:.1f}" for i in range(count))
        print(f"| {count} | {r['rate']:,.0f} | {r['cpu_us_per_msg']:.1f} | {per} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
