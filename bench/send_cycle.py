"""The broker's produce path in one process, without sockets: CPU per SEND.

A real ``BrokerServer`` (file ledger, fdatasync on, a temporary data directory) and one real
``Connection`` on a fake transport. The fake client feeds pre-built SEND frames (one message each,
as an unbatched official client sends them) in reads of ``--per-read`` frames, keeps at most
``--window`` SENDs in flight (the official client's max pending messages in bench/compare.py) and
counts the receipts the connection writes. It prints the event loop thread's CPU and the whole
process's CPU per SEND, the SENDs per read and per fdatasync.

``--batch N`` makes every SEND a batch of N messages (as a batching client frames it);
``--pace-ms T`` feeds one read every T ms on a fixed schedule instead of as fast as the window
allows: a quiet batching client sends one batch per millisecond, so each SEND arrives alone
(``--batch 83 --per-read 1 --pace-ms 1 --messages 2000``). ``--set KEY=VALUE`` (repeatable) sets a
broker setting, e.g. ``--set journalMaxGroupWaitMSec=2`` to compare group waits in the same minutes.
Paced runs also print each thread's CPU and its runs on a CPU (wake-ups) per SEND, from
``/proc/self/task/*/schedstat``.

What it leaves out (the socket reads and writes, the client) is the same for every version of the
broker, so on a machine too busy for bench/compare.py to show a difference of this size, alternating
runs of two checkouts still compare their produce paths:

    PYTHONSAFEPATH=1 PYTHONPATH=<checkout> python -m bench.send_cycle

(PYTHONSAFEPATH: without it ``-m`` puts the current directory first on the module path, so a run
started inside one checkout measures that checkout whatever PYTHONPATH says.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import tempfile
import threading
import time
from typing import Any

import uvloop

from broker.__main__ import tune_gc
from broker.config import BrokerConfig
from broker.connection import Connection
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.server import BrokerServer

T = pb.BaseCommand.Type
_LEN = struct.Struct(">I")


def send_frames(n: int, size: int, producer_id: int = 1, batch: int = 0) -> list[bytes]:
    """n SENDs as the official client frames them: CRC32C, metadata with the producer name,
    sequence id, publish time and uncompressed size; unbatched (batch 0) or each a batch of that
    many messages of size bytes (the sequence id is the batch's first)."""
    out = []
    body = b"x" * size
    if batch:
        single = pb.SingleMessageMetadata(payload_size=size).SerializeToString()
        body = (_LEN.pack(len(single)) + single + body) * batch
    for i in range(n):
        seq = i * max(batch, 1)
        send = pb.BaseCommand(type=T.SEND)
        send.send.producer_id = producer_id
        send.send.sequence_id = seq
        meta = pb.MessageMetadata(producer_name="standalone-0-1", sequence_id=seq,
                                  publish_time=1_700_000_000_000 + i, uncompressed_size=len(body))
        if batch:
            send.send.num_messages = batch
            send.send.highest_sequence_id = seq + batch - 1
            meta.num_messages_in_batch = batch
        encoded = meta.SerializeToString()
        tail = _LEN.pack(len(encoded)) + encoded + body
        out.append(commands.frame_with_payload(send, b"\x0e\x01" + _LEN.pack(crc32c(tail)) + tail))
    return out


def thread_times() -> dict[str, tuple[int, int]]:
    """This process's threads by kind (the loop, the writer, sync threads, other): nanoseconds on a
    CPU and runs on a CPU (each wake-up starts one), from /proc/self/task/*/schedstat."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    main = threading.main_thread().native_id
    out: dict[str, tuple[int, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ran, _, runs = (int(x) for x in f.read().split())
        except OSError:  # (the thread ended)
            continue
        name = names.get(int(tid), "")
        kind = ("loop" if int(tid) == main else "writer" if name == "ml-writer"
                else "sync" if name.startswith("ml-sync") else "other")
        total = out.get(kind, (0, 0))
        out[kind] = (total[0] + ran, total[1] + runs)
    return out


class FakeTransport:
    """What the connection writes: counted (receipts) and otherwise dropped."""

    def __init__(self) -> None:
        self.frames = 0
        self.writes = 0
        self.on_write: Any = None
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 6650)}.get(name, default)

    def writelines(self, data: list[bytes]) -> None:
        self.writes += 1
        self.frames += len(data)
        if self.on_write is not None:
            self.on_write()

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        pass


def _fsyncs(server: BrokerServer) -> float:
    factory: Any = server.service.ledger_factory
    stats = getattr(factory, "stats", None)
    return float(stats.fsync_latency.count) if stats is not None else 0.0


async def run(messages: int, size: int, per_read: int, window: int, batch: int = 0,
              pace_s: float = 0.0, settings: dict[str, str] | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = BrokerConfig(brokerServicePort=0, webServicePort=0, bindAddress="127.0.0.1", dataDir=tmp)
        for key, value in (settings or {}).items():
            cfg.set(key, value)
        server = BrokerServer(cfg)
        await server.start()
        try:
            transport = FakeTransport()
            conn = Connection(server)
            conn.connection_made(transport)  # type: ignore[arg-type]
            connect = pb.BaseCommand(type=T.CONNECT)
            connect.connect.client_version = "send-cycle"
            connect.connect.protocol_version = 20
            conn.data_received(commands.frame(connect))
            producer = pb.BaseCommand(type=T.PRODUCER)
            producer.producer.topic = "persistent://public/default/send-cycle"
            producer.producer.producer_id = 1
            producer.producer.request_id = 1
            ready = asyncio.Event()
            transport.on_write = lambda: ready.set() if conn.cnx.producers else None  # (PRODUCER_SUCCESS)
            conn.data_received(commands.frame(producer))
            await ready.wait()
            frames = send_frames(messages, size, batch=batch)
            reads = [b"".join(frames[i : i + per_read]) for i in range(0, messages, per_read)]
            base = transport.frames
            done = asyncio.Event()
            sent = 0
            loop = asyncio.get_running_loop()

            def feed() -> None:
                nonlocal sent
                received = transport.frames - base
                while sent < len(reads) and sent * per_read - received < window and not transport.paused:
                    conn.data_received(reads[sent])
                    sent += 1
                if received >= messages:
                    done.set()

            started = 0.0
            fed_at: list[float] = []  # paced: when each read was fed ...
            latencies: list[float] = []  # ... and how long until its last SEND's receipt was written

            def paced() -> None:  # one read per pace_s on a fixed schedule (the receipts do not feed)
                nonlocal sent
                if sent < len(reads):
                    fed_at.append(time.perf_counter())
                    conn.data_received(reads[sent])
                    sent += 1
                    loop.call_at(started + sent * pace_s, paced)

            def received() -> None:
                receipts = transport.frames - base
                now = time.perf_counter()
                while len(latencies) < receipts // per_read:
                    latencies.append(now - fed_at[len(latencies)])
                if receipts >= messages:
                    done.set()

            transport.on_write = received if pace_s else lambda: loop.call_soon(feed)
            fsyncs0 = _fsyncs(server)
            threads0 = thread_times()
            process0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
            if pace_s:
                started = loop.time()
                paced()
            else:
                feed()
            await done.wait()
            process, thread, wall = time.process_time() - process0, time.thread_time() - thread0, \
                time.perf_counter() - wall0
            threads1 = thread_times()
            fsyncs = _fsyncs(server) - fsyncs0
            conn.connection_lost(None)
        finally:
            await server.stop()
    out = {"loop_us": thread / messages * 1e6, "process_us": process / messages * 1e6,
           "msg_s": messages / wall, "per_fsync": messages / fsyncs if fsyncs else 0.0}
    for kind, (ran, runs) in threads1.items():
        ran0, runs0 = threads0.get(kind, (0, 0))
        out[f"{kind}_cpu_us"] = (ran - ran0) / 1e3 / messages
        out[f"{kind}_runs"] = (runs - runs0) / messages
    if latencies:
        latencies.sort()
        out["p50_ms"] = latencies[len(latencies) // 2] * 1e3
        out["p99_ms"] = latencies[len(latencies) * 99 // 100] * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--per-read", type=int, default=100, help="SENDs per socket read")
    p.add_argument("--window", type=int, default=5000, help="SENDs in flight")
    p.add_argument("--batch", type=int, default=0, help="messages per SEND (0: unbatched)")
    p.add_argument("--pace-ms", type=float, default=0.0,
                   help="one read every this many ms (0: as fast as the window allows)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting (Pulsar's key, as in broker.conf), e.g. journalMaxGroupWaitMSec=2")
    args = p.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    # The standalone broker's collector settings (broker/__main__.py); CPython's defaults cost this
    # bench's produce path ~3 us per SEND at one SEND per read, which the broker does not pay.
    tune_gc()
    for _ in range(args.runs):
        r = uvloop.run(run(args.messages, args.size, args.per_read, args.window, args.batch, args.pace_ms / 1e3,
                                settings))
        line = (f"loop {r['loop_us']:.2f} us/SEND, process {r['process_us']:.2f} us/SEND, "
                f"{r['msg_s']:,.0f} SEND/s, {r['per_fsync']:.{1 if args.pace_ms else 0}f} SENDs per fdatasync")
        if args.pace_ms:
            line += "; per SEND: " + ", ".join(
                f"{kind} {r[f'{kind}_cpu_us']:.0f} us / {r[f'{kind}_runs']:.2f} runs"
                for kind in ("loop", "writer", "sync", "other") if f"{kind}_cpu_us" in r)
            line += f"; read to receipt p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
