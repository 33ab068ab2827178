"""Broker CPU per unbatched message with no client library in the way: ours vs pulsar-lite.

The official client spends more CPU per message than either broker and shares the machine's
cores with them, which blurs the broker's own cost. Here a small raw-protocol producer (in this
process, with pre-built frames) keeps a fixed number of SENDs in flight on one connection and
counts the receipts; each broker runs as a subprocess whose CPU time is read from /proc.
Alternating runs, medians.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path

from bench.brokers import BrokerProcess, start_ours, start_pulsar_lite
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c

T = pb.BaseCommand.Type
_LEN = struct.Struct(">I")


class RawProducer:
    """One connection, one producer; ``run`` sends pre-built frames with ``window`` in flight."""

    def __init__(self, port: int, topic: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        connect = pb.BaseCommand(type=T.CONNECT)
        connect.connect.client_version = "bench-raw"
        connect.connect.protocol_version = 20
        self.sock.sendall(commands.frame(connect))
        self._expect(T.CONNECTED)
        producer = pb.BaseCommand(type=T.PRODUCER)
        producer.producer.topic = topic
        producer.producer.producer_id = 1
        producer.producer.request_id = 1
        self.sock.sendall(commands.frame(producer))
        self._expect(T.PRODUCER_SUCCESS)

    def _next_frame(self) -> bytes:
        while len(self.buf) < 4 or len(self.buf) < 4 + _LEN.unpack_from(self.buf)[0]:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the broker")
            self.buf += data
        end = 4 + _LEN.unpack_from(self.buf)[0]
        frame, self.buf = self.buf[:end], self.buf[end:]
        return frame

    def _expect(self, kind: int) -> None:
        frame = self._next_frame()
        cmd = pb.BaseCommand.FromString(frame[8 : 8 + _LEN.unpack_from(frame, 4)[0]])
        if cmd.type != kind:
            raise RuntimeError(f"expected {T.Name(kind)}, got {cmd}")

    def _count_receipts(self) -> int:
        """Receipts that are already here (at least one: blocks for it)."""
        got = 0
        while True:
            buf = self.buf
            pos = 0
            while len(buf) - pos >= 4 and len(buf) - pos >= 4 + _LEN.unpack_from(buf, pos)[0]:
                pos += 4 + _LEN.unpack_from(buf, pos)[0]
                got += 1
            self.buf = buf[pos:]
            if got:
                return got
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the broker")
            self.buf += data

    @staticmethod
    def frames(n: int, size: int) -> list[bytes]:
        out = []
        body = b"x" * size
        for seq in range(n):
            send = pb.BaseCommand(type=T.SEND)
            send.send.producer_id = 1
            send.send.sequence_id = seq
            meta = pb.MessageMetadata(producer_name="bench-raw", sequence_id=seq,
                                      publish_time=1_700_000_000_000 + seq,
                                      uncompressed_size=size).SerializeToString()
            tail = _LEN.pack(len(meta)) + meta + body
            out.append(commands.frame_with_payload(send, b"\x0e\x01" + _LEN.pack(crc32c(tail)) + tail))
        return out

    def run(self, frames: list[bytes], window: int) -> None:
        n = len(frames)
        sent = acked = 0
        while acked < n:
            if sent < n and sent - acked < window:
                k = min(n - sent, window - (sent - acked))
                self.sock.sendall(b"".join(frames[sent : sent + k]))
                sent += k
            acked += self._count_receipts()

    def close(self) -> None:
        self.sock.close()


def measure(broker: BrokerProcess, frames: list[bytes], window: int) -> tuple[float, float]:
    """(msg/s, broker CPU us per message) of one run on a fresh topic."""
    producer = RawProducer(broker.port, f"persistent://public/default/raw-{uuid.uuid4().hex[:8]}")
    try:
        cpu0 = broker.cpu_seconds()
        t0 = time.perf_counter()
        producer.run(frames, window)
        elapsed = time.perf_counter() - t0
        cpu = broker.cpu_seconds() - cpu0
    finally:
        producer.close()
    return len(frames) / elapsed, cpu / len(frames) * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--window", type=int, default=1000, help="SENDs in flight")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        brokers = [start_ours(Path(tmp))]
        peer = start_pulsar_lite(Path(tmp))
        if peer is not None:
            brokers.append(peer)
        try:
            for size in (100, 1024):
                frames = RawProducer.frames(args.messages, size)
                results: dict[str, list[tuple[float, float]]] = {b.name: [] for b in brokers}
                for b in brokers:  # warm-up: topic creation paths, caches
                    measure(b, frames[:1000], args.window)
                for _ in range(args.runs):
                    for b in brokers:
                        results[b.name].append(measure(b, frames, args.window))
                rows.append((size, {k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v))
                                    for k, v in results.items()}))
        finally:
            for b in brokers:
                b.stop()
    names = [b.name for b in brokers]
    print(f"\n{date.today()}: {args.messages} unbatched SENDs per run, {args.window} in flight, one connection; "
          f"medians of {args.runs} alternating runs")
    print("| size | " + " | ".join(f"{n} msg/s | {n} CPU us/msg" for n in names) + " |")
    print("|" + "---|" * (1 + 2 * len(names)))
    for size, res in rows:
        print(f"| {size} B | " + " | ".join(f"{res[n][0]:,.0f} | {res[n][1]:.1f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
