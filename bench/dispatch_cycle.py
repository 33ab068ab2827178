"""The broker's consume path in one process, without sockets: CPU per message of dispatch + storage.

A file-ledger backlog of batch entries (136 messages of 100 B each, ~14 KB, as the official client
batches them in bench/compare.py), read by an Exclusive dispatcher (``consume``) or by ten Shared
subscriptions (``fanout``) into a fake connection; the fake client acknowledges what it got and gives
back 500 permits per 500 messages (the official client's FLOW for a receiver queue of 1000). It
prints the loop thread's and the whole process's CPU per delivered message.

``tail`` is the fan-out of bench/compare.py as it runs there: ten Shared subscriptions waiting at the
tail while a producer adds smaller entries (30 messages, as the official client batches at 1 ms)
through the writer with fdatasync, a few per loop turn and up to 64 in flight; it also prints the
MESSAGE writes per added entry per subscription (1.0: a read and a write per entry).

``e2e`` is bench/compare.py's end-to-end at 1 KiB: one Exclusive subscription at the tail while a
producer adds entries of 77 messages of 1 KiB (2 per loop turn, through the writer with fdatasync);
the fake client acknowledges in groups of 3000 messages (one ACK of many ids, as the official
client's 100 ms grouping sends them at this rate) and gives back 500 permits per 500 messages. It
runs the same adds with no subscription first and prints the difference: what delivering and
acknowledging adds per message on the loop.

What it leaves out (socket writes, frame decoding, the ACK and FLOW commands) is the same for every
version of the dispatch code, so on a machine too busy for bench/compare.py to show a difference of
this size, alternating runs of two checkouts still compare their dispatch and storage work:

    PYTHONSAFEPATH=1 PYTHONPATH=<checkout> python -m bench.dispatch_cycle consume

(PYTHONSAFEPATH: without it ``-m`` puts the current directory first on the module path, so a run
started inside one checkout measures that checkout whatever PYTHONPATH says.)
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import tempfile
import time
from types import SimpleNamespace
from typing import Any

import uvloop

from broker.__main__ import tune_gc
from broker.dispatch.base import Dispatcher
from broker.dispatch.context import DispatchContext, DispatchPolicy
from broker.dispatch.entry_metas import SharedEntryMetas
from broker.dispatch.shared import SharedDispatcher
from broker.dispatch.single_active import SingleActiveConsumerDispatcher
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.consumer import Consumer
from managed_ledger import InitialPosition, Position
from managed_ledger.file import FileManagedLedgerFactory

BATCH = 136  # messages per entry
PAYLOAD = 105  # bytes per message in a batch (100 B + its single-message metadata)
FLOW = 500  # permits the client gives back per 500 messages received (receiver queue 1000)


class FakeConnection:
    """Counts what is written and wakes the fake client (one callback per loop turn)."""

    writes = 0  # write calls of every fake connection (class-wide)

    writable = True
    remote_address = "bench"
    client_version = "bench"
    keeps_broker_entry_metadata = False

    def __init__(self, on_write: Any) -> None:
        self.bytes = 0
        self._on_write = on_write
        self._scheduled = False

    def write(self, data: bytes) -> None:
        FakeConnection.writes += 1
        self.bytes += len(data)
        self._poke()

    def write_many(self, frames: list[bytes]) -> None:
        FakeConnection.writes += 1
        self.bytes += sum(map(len, frames))
        self._poke()

    def _poke(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        self._on_write()


class FakeClient:
    """Takes what was sent, acknowledges it, and gives back FLOW permits per FLOW messages."""

    def __init__(self, dispatcher: Dispatcher, cursor: Any, total: int, ack_every: int = FLOW) -> None:
        self.dispatcher = dispatcher
        self.ack_every = ack_every
        self.acked = 0
        self.cursor = cursor
        self.total = total
        self.consumer: Consumer | None = None
        self.done: Any = None
        self.seen = 0
        self.finished = False

    def received(self) -> None:
        c = self.consumer
        assert c is not None
        got = c.msg_out - self.seen
        flow = got >= FLOW or (got > 0 and c.permits <= 0)
        if ((flow and self.ack_every <= FLOW) or c.msg_out - self.acked >= self.ack_every
                or (c.msg_out >= self.total and c.pending_acks)):
            # One ACK of every id received (the official client groups them: ackGroupingTime),
            # handled as the subscription handles an ACK of many ids.
            acked = sorted(c.pending_acks)
            c.remove_pending_many(acked)
            self.cursor.delete(acked)
            self.dispatcher.on_acked(acked)
            self.acked = c.msg_out
        if flow:
            self.seen = c.msg_out
            self.dispatcher.flow(c, FLOW)
        if c.msg_out >= self.total and not self.finished:
            self.finished = True
            self.done()


def batch_entry(messages: int = BATCH, payload: int = PAYLOAD) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=messages)
    meta = md.SerializeToString()
    return struct.pack(">I", len(meta)) + meta + b"x" * (messages * payload)


TAIL_BATCH = 30  # messages per entry in ``tail``
TAIL_PER_TURN = 3  # entries the producer adds per loop turn
TAIL_IN_FLIGHT = 64  # entries added and not yet confirmed, at most


E2E_BATCH = 77  # messages per entry in ``e2e`` (1 KiB each: the official client's 1 ms batches at ~40k msg/s)
E2E_PAYLOAD = 1024 + 5  # bytes per message in its batch (1 KiB + its single-message metadata)
E2E_PER_TURN = 2  # entries the producer adds per loop turn in ``e2e``
E2E_ACK_EVERY = 3000  # messages per grouped ACK in ``e2e`` (the client's 100 ms at ~30k msg/s)


def subscribe(mode: str, cursors: list[Any], total: int,
              ack_every: int = FLOW) -> tuple[list[FakeClient], asyncio.Event]:
    """A dispatcher, consumer and fake client per cursor, each given its first FLOWs; the event is set
    once every client has received ``total`` messages."""
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()
    clients: list[FakeClient] = []

    def done() -> None:
        if all(c.finished for c in clients):
            finished.set()

    metas = SharedEntryMetas(lambda: len(cursors) > 1)  # the topic's, as broker/service/topic.py makes it
    for i, cursor in enumerate(cursors):
        cursor.set_active(True)
        context = DispatchContext(loop=loop, name=f"s{i}", max_read_batch=100, entry_meta=metas.get,
                                  entry_messages=metas.messages,
                                  policy=lambda: DispatchPolicy(max_unacked_per_consumer=0,
                                                                max_unacked_per_subscription=0))
        dispatcher: Dispatcher = (SingleActiveConsumerDispatcher(context, cursor, failover=False)
                                  if mode in ("consume", "e2e") else SharedDispatcher(context, cursor))
        client = FakeClient(dispatcher, cursor, total, ack_every)
        consumer = Consumer(FakeConnection(client.received), i, f"c{i}",  # type: ignore[arg-type]
                            pb.CommandSubscribe.Exclusive, 0, SimpleNamespace(name=f"s{i}"), -1, {})
        client.consumer = consumer
        client.done = done
        dispatcher.add_consumer(consumer)
        dispatcher.flow(consumer, 2 * FLOW)
        clients.append(client)
    return clients, finished


async def run_tail(mode: str, entries: int, subscriptions: int) -> float:
    """``tail`` or ``e2e`` with this many subscriptions (none: the adds alone); the loop's CPU
    seconds per message added."""
    e2e = mode == "e2e"
    per_entry, per_turn = (E2E_BATCH, E2E_PER_TURN) if e2e else (TAIL_BATCH, TAIL_PER_TURN)
    with tempfile.TemporaryDirectory() as tmp:
        factory = FileManagedLedgerFactory(tmp)
        ml = await factory.open("t")
        cursors = [await ml.open_cursor(f"s{i}", InitialPosition.LATEST) for i in range(subscriptions)]
        process0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        writes0 = FakeConnection.writes
        clients, finished = (subscribe("e2e", cursors, entries * per_entry, E2E_ACK_EVERY) if e2e
                             else subscribe("fanout", cursors, entries * per_entry))
        data = batch_entry(E2E_BATCH, E2E_PAYLOAD) if e2e else batch_entry(TAIL_BATCH)
        in_flight = confirmed = 0
        room = asyncio.Event()

        def added(position: Position | None, exc: BaseException | None) -> None:
            nonlocal in_flight, confirmed
            in_flight -= 1
            confirmed += 1
            room.set()
            if not cursors and confirmed == entries:
                finished.set()

        sent = 0
        while sent < entries:
            while in_flight >= TAIL_IN_FLIGHT:
                room.clear()
                await room.wait()
            for _ in range(min(per_turn, entries - sent)):
                in_flight += 1
                sent += 1
                ml.add_entry(data, added)
            await asyncio.sleep(0)
        await finished.wait()
        for c in clients:
            c.dispatcher.close()
        loop_cpu = time.thread_time() - thread0
        messages = entries * per_entry * max(1, len(cursors))
        writes = FakeConnection.writes - writes0
        print(f"{mode}{'' if cursors else ', the adds alone'}: {1e6 * loop_cpu / messages:.3f} us/msg on the loop, "
              f"{1e6 * (time.process_time() - process0) / messages:.3f} us/msg in the process, "
              f"{messages / (time.perf_counter() - wall0):,.0f} msg/s"
              + (f", {writes / entries / len(cursors):.2f} writes per entry per subscription" if cursors else ""),
              flush=True)
        await factory.close()
        return loop_cpu / (entries * per_entry)


async def run_e2e(entries: int) -> None:
    """``e2e``, and the same adds with no subscription: what delivery and acks add per message."""
    alone = await run_tail("e2e", entries, 0)
    both = await run_tail("e2e", entries, 1)
    print(f"e2e: delivery and acks add {1e6 * (both - alone):.3f} us/msg on the loop", flush=True)


async def run(mode: str, entries: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        factory = FileManagedLedgerFactory(tmp)
        ml = await factory.open("t")
        subscriptions = 1 if mode == "consume" else 10
        cursors = [await ml.open_cursor(f"s{i}", InitialPosition.EARLIEST) for i in range(subscriptions)]
        for cursor in cursors:
            cursor.set_active(False)  # a backlog: written while nobody reads (so not in the read cache)
        stored = asyncio.Event()
        count = 0

        def added(position: Position | None, exc: BaseException | None) -> None:
            nonlocal count
            count += 1
            if count == entries:
                stored.set()

        data = batch_entry()
        for _ in range(entries):
            ml.add_entry(data, added)
        await stored.wait()

        process0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        clients, finished = subscribe(mode, cursors, entries * BATCH)
        await finished.wait()
        for c in clients:
            c.dispatcher.close()
        messages = entries * BATCH * subscriptions
        print(f"{mode}: {1e6 * (time.thread_time() - thread0) / messages:.3f} us/msg on the loop, "
              f"{1e6 * (time.process_time() - process0) / messages:.3f} us/msg in the process, "
              f"{messages / (time.perf_counter() - wall0):,.0f} msg/s", flush=True)
        await factory.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("mode", choices=("consume", "fanout", "tail", "e2e"))
    p.add_argument("--entries", type=int, default=1500,
                   help="backlog entries (of 136 messages each); tail: entries added (of 30 messages); "
                        "e2e: entries added (of 77 messages)")
    args = p.parse_args()
    # The standalone broker's collector settings (broker/__main__.py): with CPython's defaults this
    # process would pay for young collections the broker does not run.
    tune_gc()
    if args.mode == "tail":
        uvloop.run(run_tail(args.mode, args.entries, 10))
    elif args.mode == "e2e":
        uvloop.run(run_e2e(args.entries))
    else:
        uvloop.run(run(args.mode, args.entries if args.mode == "consume" else args.entries // 3))


if __name__ == "__main__":
    main()
