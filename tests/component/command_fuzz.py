"""Seeded random commands for the wire fuzz test (test_command_fuzz.py): every command a client may send, and some
only a broker sends, each with its fields filled from values that sit on edges (empty, huge, negative as unsigned,
names of other topics, ids of the connection's own producer and consumer, strings that are not UTF-8 on the wire).

Most sessions start as a client would (a producer and a consumer on one of a few topics, permits, a few SENDs), so
that the random commands after them meet real state: acks of positions that exist or not, seeks, redeliveries,
schema and transaction calls on a topic that is loaded.
"""

from __future__ import annotations

import random
import struct
from typing import Any

from google.protobuf.descriptor import FieldDescriptor as FD
from google.protobuf.message import Message

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from tests.component.wire import T, producer_cmd, send_frame, subscribe_cmd

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
