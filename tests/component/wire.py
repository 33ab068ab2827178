"""A raw Pulsar-protocol client for component tests: frames in, commands out, no pulsar-client."""

from __future__ import annotations

import asyncio
import struct

from broker.embedded import Broker
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.protocol.frames import FrameDecoder
from broker.protocol.limits import DEFAULT_MAX_MESSAGE_SIZE, max_frame_size

T = pb.BaseCommand.Type
WAIT_S = 5.0


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(max_frame_size(DEFAULT_MAX_MESSAGE_SIZE) * 2)

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> WireClient:
        r, w = await asyncio.open_connection(host, port)
        return cls(r, w)

    def send(self, cmd: pb.BaseCommand, payload: bytes | None = None) -> None:
        self.writer.write(commands.frame_with_payload(cmd, payload) if payload is not None else commands.frame(cmd))

    async def recv(self) -> pb.BaseCommand:
        async def one() -> pb.BaseCommand:
            while True:
                f = self.decoder.next_frame()
                if f is not None:
                    return f.command
                data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError("closed by broker")
                self.decoder.feed(data)
        return await asyncio.wait_for(one(), WAIT_S)

    async def connect(self) -> pb.CommandConnected:
        cmd = pb.BaseCommand(type=T.CONNECT)
        cmd.connect.client_version = "wire-test"
        cmd.connect.protocol_version = 20
        self.send(cmd)
        reply = await self.recv()
        assert reply.type == T.CONNECTED
        return reply.connected

    async def lookup(self, topic: str, request_id: int = 7) -> pb.CommandLookupTopicResponse:
        """A LOOKUP of ``topic`` and its answer."""
        cmd = pb.BaseCommand(type=T.LOOKUP)
        cmd.lookupTopic.topic = topic
        cmd.lookupTopic.request_id = request_id
        self.send(cmd)
        answer = await self.recv()
        assert answer.type == T.LOOKUP_RESPONSE and answer.lookupTopicResponse.request_id == request_id
        return answer.lookupTopicResponse

    async def closed_by_broker(self) -> bool:
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(65536), WAIT_S)
                if not data:
                    return True
        except (ConnectionError, TimeoutError):
            return False

    def close(self) -> None:
        self.writer.close()


def port_of(b: Broker) -> int:
    assert b.server is not None
    return b.server.port


def producer_cmd(topic: str, producer_id: int = 1, request_id: int = 1) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.PRODUCER)
    cmd.producer.topic = topic
    cmd.producer.producer_id = producer_id
    cmd.producer.request_id = request_id
    return cmd


def subscribe_cmd(topic: str, subscription: str = "sub", consumer_id: int = 1, request_id: int = 1,
                  sub_type: int = pb.CommandSubscribe.Exclusive, **fields: object) -> pb.BaseCommand:
    """A SUBSCRIBE; ``fields`` sets further CommandSubscribe fields (consumer_name, ...)."""
    cmd = pb.BaseCommand(type=T.SUBSCRIBE)
    s = cmd.subscribe
    s.topic, s.subscription, s.consumer_id, s.request_id, s.subType = (
        topic, subscription, consumer_id, request_id, sub_type)  # type: ignore[assignment]
    for name, value in fields.items():
        setattr(s, name, value)
    return cmd


def send_frame(producer_id: int, seq: int, body: bytes, corrupt: bool = False,
               **metadata: object) -> tuple[pb.BaseCommand, bytes]:
    """A SEND and its payload; ``metadata`` sets more MessageMetadata fields (e.g. deliver_at_time)."""
    cmd = pb.BaseCommand(type=T.SEND)
    cmd.send.producer_id = producer_id
    cmd.send.sequence_id = seq
    fields: dict[str, object] = {"producer_name": "p", "sequence_id": seq, "publish_time": 1, **metadata}
    meta = pb.MessageMetadata(**fields).SerializeToString()  # type: ignore[arg-type]
    tail = struct.pack(">I", len(meta)) + meta + body
    crc = crc32c(tail) ^ (1 if corrupt else 0)
    return cmd, b"\x0e\x01" + struct.pack(">I", crc) + tail
