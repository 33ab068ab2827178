"""The broker's resident memory with many connections and many topics (docs/exhaustion.md#memory).

Starts ``python -m broker standalone`` (file storage, a temporary data dir, the fd limit raised),
then with raw protocol frames from this process: opens N idle connections (CONNECT / CONNECTED),
then creates a producer on each of T topics (over a few connections, pipelined), then one
subscription with a consumer on each topic, reading VmRSS after each step. Prints a table.

    python -m bench.memory_bound [--connections 1000] [--topics 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
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
    """One raw-protocol connection (asyncio): answers the broker's PINGs, matches answers to requests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.waiting: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, port: int) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(reader, writer)
        connect = pb.BaseCommand(type=T.CONNECT)
        connect.connect.client_version = "bench-memory"
        connect.connect.protocol_version = 20
        writer.write(commands.frame(connect))
        await raw.connected
        return raw

    async def _read(self) -> None:
        try:
            while True:
                size = _LEN.unpack(await self.reader.readexactly(4))[0]
                frame = await self.reader.readexactly(size)
                cmd = pb.BaseCommand()
                cmd.ParseFromString(frame[4:4 + _LEN.unpack_from(frame)[0]])
                if cmd.type == T.PING:
                    self.writer.write(commands.pong())
                elif cmd.type == T.CONNECTED:
                    self.connected.set_result(None)
                else:
                    answer = getattr(cmd, pb.BaseCommand.Type.Name(cmd.type).lower(), None)
                    request_id = getattr(answer, "request_id", None)
                    future = self.waiting.pop(request_id, None) if request_id is not None else None
                    if future is not None and not future.done():
                        future.set_result(cmd)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            error = ConnectionError(f"closed by the broker: {exc}")
            if not self.connected.done():
                self.connected.set_exception(error)
            for waiter in self.waiting.values():
                if not waiter.done():
                    waiter.set_exception(error)

    async def request(self, cmd: pb.BaseCommand, request_id: int) -> pb.BaseCommand:
        future: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        self.writer.write(commands.frame(cmd))
        answer = await future
        if answer.type == T.ERROR:
            raise RuntimeError(f"broker error: {answer.error.message}")
        return answer


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
    threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()  # drain its log
    try:
        rows = asyncio.run(_measure(proc.pid, port, args.connections, args.topics))
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


async def _measure(pid: int, port: int, connections: int, topics: int) -> list[tuple[str, float]]:
    rows: list[tuple[str, float]] = []
    await asyncio.sleep(1)
    rows.append(("started, idle", rss_mb(pid)))
    idle = []
    for i in range(0, connections, 100):
        idle += await asyncio.gather(*(Raw.open(port) for _ in range(min(100, connections - i))))
    await asyncio.sleep(1)
    rows.append((f"+ {connections} connections (handshaken, idle)", rss_mb(pid)))
    workers = [await Raw.open(port) for _ in range(TOPIC_CONNECTIONS)]
    for kind in ("producer", "subscribe"):
        started = time.monotonic()
        await _requests(workers, topics, kind)
        what = f"+ {topics} topics, one producer each" if kind == "producer" \
            else "+ one subscription and consumer on each topic"
        rows.append((f"{what} ({time.monotonic() - started:.0f} s)", rss_mb(pid)))
    for raw in [*idle, *workers]:
        raw.writer.close()
        raw.task.cancel()
    return rows


async def _requests(workers: list[Raw], count: int, kind: str) -> None:
    """PRODUCER or SUBSCRIBE on topics 0..count-1, spread over the workers, IN_FLIGHT outstanding each."""
    async def worker(w: Raw, topics: list[int]) -> None:
        for i in range(0, len(topics), IN_FLIGHT):
            await asyncio.gather(*(w.request(_command(kind, t, count), _request_id(kind, t, count))
                                   for t in topics[i:i + IN_FLIGHT]))

    await asyncio.gather(*(worker(w, list(range(i, count, len(workers)))) for i, w in enumerate(workers)))


def _request_id(kind: str, t: int, count: int) -> int:
    return t if kind == "producer" else count + t


def _command(kind: str, t: int, count: int) -> pb.BaseCommand:
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
    return cmd


if __name__ == "__main__":
    main()
