"""Seeded random commands for the wire fuzz tests (tests/component/test_command_fuzz.py on the default storage,
tests/bookkeeper/test_command_fuzz_bookkeeper.py on BookKeeper and ZooKeeper): every command a client may send, and
some only a broker sends, each with its fields filled from values that sit on edges (empty, huge, negative as unsigned,
names of other topics, ids of the connection's own producer and consumer, strings that are not UTF-8 on the wire).

Most sessions start as a client would (a producer and a consumer on one of a few topics, permits, a few SENDs), so
that the random commands after them meet real state: acks of positions that exist or not, seeks, redeliveries,
schema and transaction calls on a topic that is loaded.

``check_random_commands`` is the check both tests run: the sessions on a broker, then what must hold after them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor as FD
from google.protobuf.message import Message

from broker.dispatch import base as dispatch_base
from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from tests.component.wire import WAIT_S, T, WireClient, port_of, producer_cmd, send_frame, subscribe_cmd

# A 3-byte string put in by the generator and swapped for 3 bytes that are not UTF-8 once serialized (the protobuf
# library refuses them in a string field, a client on the wire need not).
NOT_UTF8_MARK, NOT_UTF8 = "\x7fQ\x7f", b"\xfe\xff\xc3"

TOPICS = ["persistent://public/default/fuzz-0", "persistent://public/default/fuzz-1", "fuzz-2",
          "non-persistent://public/default/fuzz-np", "persistent://public/default/fuzz-p-partition-1",
          "persistent://public/default/fuzz-0-partition-99999999999", "persistent://missing/ns/t",
          "persistent://public/default/", "public/default", "", "persistent://public/default/" + "a" * 3000,
          "persistent://public/default/é ü\n", "persistent://public/default/__change_events",
          "persistent://pulsar/system/transaction_coordinator_assign-partition-0",
          "persistent://public/default/fuzz-0/extra", "http://x", "persistent:///default/x",
          "persistent://public/default/fuzz-" + NOT_UTF8_MARK]
STRINGS = ["", "s", "sub", "p", "x" * 300, "\x00", "é", "__compaction", "$", "/", "..", "a" * 70000, NOT_UTF8_MARK]
U64 = [0, 1, 2, 3, 7, 100, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1]
I64 = [0, 1, -1, 2, 100, -2**63, 2**63 - 1]
I32 = [0, 1, -1, 2, 5, 1000, -2**31, 2**31 - 1]
U32 = [0, 1, 2, 1000, 2**32 - 1]
FLOATS = [0.0, -1.0, 1e300, float("nan")]

# What a client sends.
CLIENT_TYPES = [T.SUBSCRIBE, T.PRODUCER, T.SEND, T.ACK, T.FLOW, T.UNSUBSCRIBE, T.CLOSE_PRODUCER, T.CLOSE_CONSUMER,
                T.REDELIVER_UNACKNOWLEDGED_MESSAGES, T.PARTITIONED_METADATA, T.LOOKUP, T.CONSUMER_STATS, T.SEEK,
                T.GET_LAST_MESSAGE_ID, T.GET_TOPICS_OF_NAMESPACE, T.GET_SCHEMA, T.AUTH_RESPONSE,
                T.GET_OR_CREATE_SCHEMA, T.NEW_TXN, T.ADD_PARTITION_TO_TXN, T.ADD_SUBSCRIPTION_TO_TXN, T.END_TXN,
                T.END_TXN_ON_PARTITION, T.END_TXN_ON_SUBSCRIPTION, T.TC_CLIENT_CONNECT_REQUEST, T.WATCH_TOPIC_LIST,
                T.WATCH_TOPIC_LIST_CLOSE, T.PING, T.PONG]
# What only a broker sends (from a client, a protocol error that closes the connection: rarer, so that most
# sessions go on long enough to reach state).
BROKER_TYPES = [T.CONNECT, T.ERROR, T.SUCCESS, T.SEND_RECEIPT, T.PRODUCER_SUCCESS, T.ACK_RESPONSE, T.MESSAGE]
# BaseCommand's field for each type (in PulsarApi.proto a command's field number is its type's number).
_FIELD = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields}
_IDS = ("producer_id", "consumer_id", "request_id", "txnid_least_bits", "txnid_most_bits")


class CommandFuzz:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    # -- values ----------------------------------------------------------------------------------------------
    def _scalar(self, f: Any) -> object:  # (a FieldDescriptor: its stubs type upb's apart)
        rng, t = self.rng, f.type
        if t == FD.TYPE_STRING:
            return rng.choice(TOPICS if "topic" in f.name.lower() else STRINGS + TOPICS[:2])
        if t == FD.TYPE_BYTES:
            return rng.choice([b"", b"\x00", rng.randbytes(rng.randrange(40)), b"\xff" * 5000])
        if t == FD.TYPE_BOOL:
            return rng.random() < 0.5
        if t == FD.TYPE_ENUM:
            return rng.choice([v.number for v in f.enum_type.values])
        if t in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
            return rng.choice(U64) if rng.random() < 0.7 else rng.randrange(2**64)
        if t in (FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64):
            return rng.choice(I64)
        if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
            return rng.choice(I32)
        if t in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
            return rng.choice(U32)
        return rng.choice(FLOATS)

    def fill(self, msg: Message, p: float, depth: int = 0) -> None:
        """Set each field of ``msg`` with probability ``p`` (a required one mostly), nested messages too."""
        rng = self.rng
        for f in msg.DESCRIPTOR.fields:
            if not (f.is_required and rng.random() < 0.9) and rng.random() > p:
                continue
            if f.type == FD.TYPE_MESSAGE:
                if depth >= 3:
                    continue
                if f.is_repeated:
                    for _ in range(rng.randrange(4)):
                        self.fill(getattr(msg, f.name).add(), p, depth + 1)
                else:
                    getattr(msg, f.name).SetInParent()
                    self.fill(getattr(msg, f.name), p, depth + 1)
            elif f.is_repeated:
                getattr(msg, f.name).extend(self._scalar(f) for _ in range(rng.randrange(5)))
            else:
                setattr(msg, f.name, self._scalar(f))

    # -- frames ----------------------------------------------------------------------------------------------
    def _payload(self) -> bytes:
        """A SEND's payload: random metadata (now and then a batch's first message), checksummed mostly."""
        rng = self.rng
        md = pb.MessageMetadata()
        self.fill(md, rng.choice([0.1, 0.4]))
        if rng.random() < 0.7:
            md.producer_name, md.sequence_id, md.publish_time = "p", rng.randrange(10), 1
        body = rng.randbytes(rng.randrange(64))
        if md.HasField("num_messages_in_batch") and rng.random() < 0.7:
            single = pb.SingleMessageMetadata()
            self.fill(single, 0.4)
            single.payload_size = rng.choice([0, 3, 100, 2**31 - 1])
            raw = single.SerializePartialToString()
            body = struct.pack(">I", len(raw)) + raw + b"abc" + body
        meta = md.SerializePartialToString().replace(NOT_UTF8_MARK.encode(), NOT_UTF8)
        tail = struct.pack(">I", len(meta)) + meta + body
        return b"\x0e\x01" + struct.pack(">I", crc32c(tail)) + tail if rng.random() < 0.9 else tail

    def command(self) -> tuple[pb.BaseCommand, bytes]:
        """One random command and its payload (b"" for none)."""
        rng = self.rng
        t = rng.choice(BROKER_TYPES if rng.random() < 0.05 else CLIENT_TYPES)
        cmd = pb.BaseCommand(type=t)
        inner = getattr(cmd, _FIELD[t])
        inner.SetInParent()
        self.fill(inner, rng.choice([0.2, 0.5, 0.9]))
        for name in _IDS:  # (small ids, mostly 1: commands meet the session's producer, consumer and requests)
            if name in inner.DESCRIPTOR.fields_by_name and rng.random() < 0.8:
                setattr(inner, name, rng.choice((1, 1, 1, 0, 2, 3)))
        payload = self._payload() if t == T.SEND or (t == T.MESSAGE and rng.random() < 0.5) else b""
        return cmd, payload

    def opening(self) -> list[pb.BaseCommand]:
        """What a client does first, most of the time: producer 1 (request 100) and consumer 1 (request 101) on a
        topic. A client waits for their answers before it goes on; so does the test."""
        rng = self.rng
        if rng.random() >= 0.8:
            return []
        topic = rng.choice(TOPICS[:3] + TOPICS[4:5])
        sub_type = rng.choice([pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Shared,
                               pb.CommandSubscribe.Failover, pb.CommandSubscribe.Key_Shared])
        # (a few names shared by all sessions, so that state carries over; one of the session's own at times, as an
        # exclusive subscription another session still holds refuses this one)
        name = rng.choice(["s", "t", f"own-{rng.randrange(1 << 30)}"])
        return [producer_cmd(topic, 1, 100), subscribe_cmd(topic, name, 1, 101, sub_type)]

    def session(self) -> list[tuple[pb.BaseCommand, bytes]]:
        """The commands of one connection after its opening: most of the time permits and a few SENDs for the
        opening's consumer and producer, then random commands."""
        rng = self.rng
        out: list[tuple[pb.BaseCommand, bytes]] = []
        if rng.random() < 0.8:
            flow = pb.BaseCommand(type=T.FLOW)
            flow.flow.consumer_id, flow.flow.messagePermits = 1, rng.choice([1, 10, 1000])
            out.append((flow, b""))
            for seq in range(rng.randrange(5)):
                batched = rng.random() < 0.5
                out.append(send_frame(1, seq, b"m", num_messages_in_batch=1) if batched else send_frame(1, seq, b"m"))
        return out + [self.command() for _ in range(rng.randrange(1, 8))]


def frame(cmd: pb.BaseCommand, payload: bytes) -> bytes:
    """The frame of ``cmd`` even with required fields missing, its marked strings made not UTF-8."""
    body = cmd.SerializePartialToString().replace(NOT_UTF8_MARK.encode(), NOT_UTF8)
    return struct.pack(">II", len(body) + 4 + len(payload), len(body)) + body + payload


def ping() -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.PING)
    cmd.ping.SetInParent()
    return cmd


def lookup(topic: str, request_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.LOOKUP)
    cmd.lookupTopic.topic, cmd.lookupTopic.request_id = topic, request_id
    return cmd


async def opened(c: WireClient, opening: list[pb.BaseCommand]) -> bool | None:
    """Send the opening as a client does, after a LOOKUP of its topic (with metadata in ZooKeeper, the lookup is what
    makes the broker own the topic's bundle): True once the lookup and the opening's requests were each answered
    (a success or an error); None when the broker closed the connection instead; False when it did neither in
    time."""
    try:
        c.writer.write(frame(lookup(opening[0].producer.topic, 99), b""))
        while (await c.recv()).type != T.LOOKUP_RESPONSE:
            pass
        c.writer.write(b"".join(frame(cmd, b"") for cmd in opening))
        for _ in opening:
            while (await c.recv()).type not in (T.PRODUCER_SUCCESS, T.SUCCESS, T.ERROR):
                pass
    except ConnectionError:
        return None
    except TimeoutError:
        return False
    return True


async def answered_or_closed(c: WireClient) -> bool:
    """True when the broker answers the last PING or closes the connection; False when it does neither in time."""
    try:
        while (await c.recv()).type != T.PONG:
            pass
    except ConnectionError:
        pass  # (closed by the broker, e.g. after a command only a broker sends: a protocol error)
    except TimeoutError:
        return False
    return True


async def run_sessions(port: int, fuzz: CommandFuzz, sessions: int) -> list[list[str]]:
    """``sessions`` connections one after another, each opened as a client does then given random commands and a
    last PING; the command types of those that hung (neither answered nor closed in time)."""
    hung: list[list[str]] = []
    for _ in range(sessions):
        opening = fuzz.opening()
        session = fuzz.session()
        c = await WireClient.open(port)
        await c.connect()
        if opening:
            state = await opened(c, opening)
            if not state:
                if state is False:
                    hung.append([pb.BaseCommand.Type.Name(cmd.type) for cmd in opening])
                c.close()
                continue
        c.writer.write(b"".join(frame(cmd, payload) for cmd, payload in session) + frame(ping(), b""))
        if not await answered_or_closed(c):
            hung.append([pb.BaseCommand.Type.Name(cmd.type) for cmd, _ in session])
        c.close()
    return hung


async def produce_and_consume(port: int, topic: str) -> None:
    """A new connection subscribes to ``topic``, produces one message on it and is given it."""
    c = await WireClient.open(port)
    try:
        await c.connect()
        assert (await c.lookup(topic)).response == pb.CommandLookupTopicResponse.Connect
        c.send(subscribe_cmd(topic, request_id=1))
        assert (reply := await c.recv()).type == T.SUCCESS, reply
        c.send(producer_cmd(topic, producer_id=7, request_id=2))
        assert (reply := await c.recv()).type == T.PRODUCER_SUCCESS, reply
        c.send(*send_frame(7, 0, b"still fine"))
        assert (reply := await c.recv()).type == T.SEND_RECEIPT, reply
        flow = pb.BaseCommand(type=T.FLOW)
        flow.flow.consumer_id, flow.flow.messagePermits = 1, 10
        c.send(flow)
        assert (reply := await c.recv()).type == T.MESSAGE, reply
    finally:
        c.close()


async def check_random_commands(broker: AbstractAsyncContextManager[Broker], seed: int, sessions: int,
                                caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start ``broker`` (on the running loop), give it ``sessions`` fuzzed connections from ``seed``, and assert that
    every connection's last PING was answered or the connection closed, that another connection still produces and
    consumes, that no error was logged, that no task failed unretrieved, and (checked by the broker after every
    change) that the dispatchers' permit invariant held."""
    caplog.set_level(logging.WARNING)
    # The dispatchers' permit invariant checked after every change (PULSAR_BROKER_DEBUG=1): a drift raises.
    monkeypatch.setattr(dispatch_base, "DEBUG_INVARIANTS", True)
    loop = asyncio.get_running_loop()
    loop_errors: list[dict[str, Any]] = []
    previous_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
    try:
        async with broker as b:
            hung = await run_sessions(port_of(b), CommandFuzz(seed), sessions)
            await produce_and_consume(port_of(b), "persistent://public/default/after-fuzz")
    finally:
        loop.set_exception_handler(previous_handler)
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not hung, f"seed {seed}: no PONG and no close within {WAIT_S} s after {hung}"
    assert not failures, f"seed {seed}: {len(failures)} logged:\n" + "\n".join(
        f"{r.levelname} {r.name}: {r.getMessage()}"[:400] for r in failures[:20]) + "\nfirst:\n" + (
        logging.Formatter().format(failures[0]))
    assert not loop_errors, f"seed {seed}: {loop_errors}"
