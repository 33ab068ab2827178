"""The broker's resident memory with many connections and many topics (docs/exhaustion.md#memory).

Starts ``python -m broker standalone`` (file storage, a temporary data dir, the fd limit raised),
then with raw protocol frames from this process: opens N idle connections (CONNECT / CONNECTED),
then creates a producer on each of T topics (over a few connections, pipelined), then one
subscription with a consumer on each topic, reading VmRSS after each step. Prints a table.

    python -m bench.memory_bound [--connections 1000] [--topics 10000]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb

T = pb.BaseCommand.Type
_LEN = struct.Struct(">I")
READY_RE = re.compile(r"broker ready in [\d.]+ s: pulsar://[^:]+:(\d+)")
TOPIC_CONNECTIONS = 10  # the topics' producers and consumers are spread over this many connections
IN_FLIGHT = 50  # PRODUCER / SUBSCRIBE requests outstanding per connection


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Raw:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.buf = b""

    def send_connect(self) -> None:
        connect = pb.BaseCommand(type=T.CONNECT)
        connect.connect.client_version = "bench-memory"
        connect.connect.protocol_version = 20
        self.sock.sendall(commands.frame(connect))

    def next_command(self) -> pb.BaseCommand:
        while len(self.buf) < 4 or len(self.buf) < 4 + _LEN.unpack_from(self.buf)[0]:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the broker")
            self.buf += data
        end = 4 + _LEN.unpack_from(self.buf)[0]
        frame, self.buf = self.buf[:end], self.buf[end:]
        cmd = pb.BaseCommand()
        cmd.ParseFromString(frame[8:8 + _LEN.unpack_from(frame, 4)[0]])
        return cmd

    def expect(self, *kinds: int) -> pb.BaseCommand:
        while True:
            cmd = self.next_command()
            if cmd.type == T.PING:
                self.sock.sendall(commands.pong())
                continue
            if cmd.type in kinds:
                return cmd
            if cmd.type == T.ERROR:
                raise RuntimeError(f"broker error: {cmd.error.message}")


def start_broker(data_dir: Path) -> subprocess.Popen[str]:
    conf = data_dir.parent / "memory.conf"
    conf.write_text("brokerDeleteInactiveTopicsEnabled=false\n")
    argv = [sys.executable, "-m", "broker", "standalone", "--config", str(conf), "--port", "0", "--web-port", "0",
            "--data-dir", str(data_dir), "--bind-address", "127.0.0.1"]
    return subprocess.Popen(["prlimit", "--nofile=20000:20000", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=10000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    proc = start_broker(tmp / "data")
    assert proc.stdout is not None
    port = 0
    lines = []
    for line in proc.stdout:
        lines.append(line)
        m = READY_RE.search(line)
        if m:
            port = int(m.group(1))
            break
    if not port:
        raise SystemExit("the broker did not start:\n" + "".join(lines))
    os.set_blocking(proc.stdout.fileno(), False)  # (its log is not read further; a full pipe would block it)
    rows: list[tuple[str, float]] = []
    try:
        time.sleep(1)
        rows.append(("started, idle", rss_mb(proc.pid)))
        idle = [Raw(port) for _ in range(args.connections)]
        for c in idle:
            c.send_connect()
        for c in idle:
            c.expect(T.CONNECTED)
        rows.append((f"+ {args.connections} connections (handshaken, idle)", rss_mb(proc.pid)))

        workers = [Raw(port) for _ in range(TOPIC_CONNECTIONS)]
        for w in workers:
            w.send_connect()
            w.expect(T.CONNECTED)
        started = time.monotonic()
        _requests(workers, args.topics, "producer")
        rows.append((f"+ {args.topics} topics, one producer each ({time.monotonic() - started:.0f} s)",
                     rss_mb(proc.pid)))
        started = time.monotonic()
        _requests(workers, args.topics, "subscribe")
        rows.append((f"+ one subscription and consumer on each topic ({time.monotonic() - started:.0f} s)",
                     rss_mb(proc.pid)))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print(f"| step ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores) | broker RSS, MB |")
    print("|---|---|")
    for what, mb in rows:
        print(f"| {what} | {mb:.0f} |")
    base = rows[0][1]
    per_conn = (rows[1][1] - base) * 1024 / max(1, args.connections)
    per_topic = (rows[2][1] - rows[1][1]) * 1024 / max(1, args.topics)
    per_sub = (rows[3][1] - rows[2][1]) * 1024 / max(1, args.topics)
    print(f"\nper connection {per_conn:.1f} KB, per topic with a producer {per_topic:.1f} KB, "
          f"per subscription with a consumer {per_sub:.1f} KB")


def _requests(workers: list[Raw], count: int, kind: str) -> None:
    """PRODUCER or SUBSCRIBE on topics 0..count-1, spread over the workers, IN_FLIGHT outstanding each."""
    assignments: list[list[int]] = [list(range(i, count, len(workers))) for i in range(len(workers))]
    for w, topics in zip(workers, assignments, strict=True):
        pending = 0
        for n, t in enumerate(topics):
            cmd = pb.BaseCommand()
            name = f"persistent://public/default/memory-{t}"
            if kind == "producer":
                cmd.type = T.PRODUCER
                cmd.producer.topic = name
                cmd.producer.producer_id = t
                cmd.producer.request_id = t
            else:
                cmd.type = T.SUBSCRIBE
                cmd.subscribe.topic = name
                cmd.subscribe.subscription = "sub"
                cmd.subscribe.subType = pb.CommandSubscribe.Shared
                cmd.subscribe.consumer_id = t
                cmd.subscribe.request_id = count + t
            w.sock.sendall(commands.frame(cmd))
            pending += 1
            if pending >= IN_FLIGHT or n == len(topics) - 1:
                for _ in range(pending):
                    w.expect(T.PRODUCER_SUCCESS if kind == "producer" else T.SUCCESS)
                pending = 0


if __name__ == "__main__":
    main()
