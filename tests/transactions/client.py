"""A small raw-protocol client for transaction tests (the Python client has no transactions):
requests matched to responses by request id, receipts by sequence id, MESSAGE frames queued per
consumer with their bodies."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.protocol.entry import entry_body
from broker.protocol.frames import FrameDecoder
from broker.protocol.limits import DEFAULT_MAX_MESSAGE_SIZE, max_frame_size

T = pb.BaseCommand.Type
WAIT_S = 10.0
Txn = tuple[int, int]
WORK = "work"  # the input's subscription in the tests' consume-and-produce transactions
WORK_CONSUMER = 10

# Response type -> (its field in BaseCommand).
_RESPONSES = {
    T.SUCCESS: "success", T.ERROR: "error", T.PRODUCER_SUCCESS: "producer_success",
    T.TC_CLIENT_CONNECT_RESPONSE: "tcClientConnectResponse", T.NEW_TXN_RESPONSE: "newTxnResponse",
    T.ADD_PARTITION_TO_TXN_RESPONSE: "addPartitionToTxnResponse",
    T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE: "addSubscriptionToTxnResponse", T.END_TXN_RESPONSE: "endTxnResponse",
    T.END_TXN_ON_PARTITION_RESPONSE: "endTxnOnPartitionResponse",
    T.END_TXN_ON_SUBSCRIPTION_RESPONSE: "endTxnOnSubscriptionResponse",
    T.ACK_RESPONSE: "ackResponse", T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse", T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse", T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.WATCH_TOPIC_LIST_SUCCESS: "watchTopicListSuccess", T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
}


# Commands a broker sends unasked (kept by type: ``pushed``).
_PUSHED = frozenset({T.ACTIVE_CONSUMER_CHANGE, T.REACHED_END_OF_TOPIC, T.CLOSE_PRODUCER, T.CLOSE_CONSUMER,
                     T.TOPIC_MIGRATED})


class Message:
    def __init__(self, cmd: pb.CommandMessage, payload: bytes) -> None:
        self.id = (commands.from_u64(cmd.message_id.ledgerId), commands.from_u64(cmd.message_id.entryId))
        self.message_id = cmd.message_id
        self.body = entry_body(payload).decode(errors="replace")
        self.ack_set = list(cmd.ack_set)
        self.command = cmd  # (the CommandMessage as the broker sent it)


class TxnWireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(max_frame_size(DEFAULT_MAX_MESSAGE_SIZE) * 2)
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self.receipts: dict[tuple[int, int], asyncio.Future[pb.BaseCommand]] = {}
        self.receipt_order: list[tuple[int, int]] = []  # (producer id, sequence id) as receipts and errors came
        self.messages: dict[int, asyncio.Queue[Message]] = {}
        self.closed_consumers: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self.connected: pb.BaseCommand | None = None  # (the CONNECTED answer)
        self._pushed: dict[int, asyncio.Queue[pb.BaseCommand]] = {}

    @classmethod
    async def open(cls, port: int, connect: pb.BaseCommand | None = None) -> TxnWireClient:
        """Connected to ``port``: with the ``connect`` command given (credentials), else a plain CONNECT."""
        r, w = await asyncio.open_connection("127.0.0.1", port)
        client = cls(r, w)
        cmd = connect if connect is not None else pb.BaseCommand(type=T.CONNECT)
        if connect is None:
            cmd.connect.client_version = "txn-test"
            cmd.connect.protocol_version = 20
        w.write(commands.frame(cmd))
        while True:
            f = client.decoder.next_frame()
            if f is not None:
                assert f.command.type == T.CONNECTED, f.command
                client.connected = f.command
                break
            data = await asyncio.wait_for(r.read(65536), WAIT_S)
            if not data:  # (closed before CONNECTED: an error, not a loop reading nothing for ever)
                w.close()
                raise ConnectionError("closed by the broker before CONNECTED")
            client.decoder.feed(data)
        client._task = asyncio.get_running_loop().create_task(client._read_loop())
        return client

    async def _read_loop(self) -> None:
        while True:
            f = self.decoder.next_frame()
            if f is None:
                data = await self.reader.read(65536)
                if not data:
                    for fut in [*self.pending.values(), *self.receipts.values()]:
                        if not fut.done():
                            fut.set_exception(ConnectionError("closed by broker"))
                            fut.exception()  # (retrieved by its awaiter, if any)
                    return
                self.decoder.feed(data)
                continue
            cmd = f.command
            if cmd.type == T.PING:  # (as every client: Pulsar takes a connection without PONGs for a dead one)
                self.writer.write(commands.frame(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong())))
            elif cmd.type == T.MESSAGE:
                assert f.payload is not None
                self.queue(cmd.message.consumer_id).put_nowait(Message(cmd.message, f.payload))
            elif cmd.type in (T.SEND_RECEIPT, T.SEND_ERROR):
                body = cmd.send_receipt if cmd.type == T.SEND_RECEIPT else cmd.send_error
                self.receipt_order.append((body.producer_id, body.sequence_id))
                receipt = self.receipts.pop((body.producer_id, body.sequence_id), None)
                if receipt is not None and not receipt.done():
                    receipt.set_result(cmd)
            elif cmd.type in _PUSHED:
                if cmd.type == T.CLOSE_CONSUMER:
                    self.closed_consumers.add(cmd.close_consumer.consumer_id)
                self.pushed(cmd.type).put_nowait(cmd)
            elif cmd.type in _RESPONSES:
                request_id = getattr(cmd, _RESPONSES[cmd.type]).request_id
                answer = self.pending.pop(request_id, None)
                if answer is not None and not answer.done():
                    answer.set_result(cmd)

    def pushed(self, kind: int) -> asyncio.Queue[pb.BaseCommand]:
        """The commands of ``kind`` the broker sent unasked (ACTIVE_CONSUMER_CHANGE, REACHED_END_OF_TOPIC, ...)."""
        return self._pushed.setdefault(kind, asyncio.Queue())

    def queue(self, consumer_id: int) -> asyncio.Queue[Message]:
        return self.messages.setdefault(consumer_id, asyncio.Queue())

    async def request(self, cmd: pb.BaseCommand, body: Any) -> pb.BaseCommand:
        request_id = next(self.ids)
        body.request_id = request_id
        fut: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = fut
        self.writer.write(commands.frame(cmd))
        return await asyncio.wait_for(fut, WAIT_S)

    # -- coordinator ---------------------------------------------------------------------------------
    async def tc_connect(self, tc_id: int = 0) -> pb.CommandTcClientConnectResponse:
        cmd = pb.BaseCommand(type=T.TC_CLIENT_CONNECT_REQUEST)
        cmd.tcClientConnectRequest.tc_id = tc_id
        reply = await self.request(cmd, cmd.tcClientConnectRequest)
        assert reply.type == T.TC_CLIENT_CONNECT_RESPONSE, reply
        return reply.tcClientConnectResponse

    async def new_txn(self, timeout_ms: int = 60_000, tc_id: int = 0) -> Txn:
        reply = await self.new_txn_raw(timeout_ms, tc_id)
        assert not reply.HasField("error"), reply
        return reply.txnid_most_bits, reply.txnid_least_bits

    async def new_txn_raw(self, timeout_ms: int = 60_000, tc_id: int = 0) -> pb.CommandNewTxnResponse:
        cmd = pb.BaseCommand(type=T.NEW_TXN)
        cmd.newTxn.txn_ttl_seconds = timeout_ms
        cmd.newTxn.tc_id = tc_id
        return (await self.request(cmd, cmd.newTxn)).newTxnResponse

    async def add_partitions(self, txn: Txn, *topics: str) -> pb.CommandAddPartitionToTxnResponse:
        cmd = pb.BaseCommand(type=T.ADD_PARTITION_TO_TXN)
        c = cmd.addPartitionToTxn
        c.txnid_most_bits, c.txnid_least_bits = txn
        c.partitions.extend(topics)
        return (await self.request(cmd, c)).addPartitionToTxnResponse

    async def add_subscription(self, txn: Txn, topic: str, sub: str) -> pb.CommandAddSubscriptionToTxnResponse:
        cmd = pb.BaseCommand(type=T.ADD_SUBSCRIPTION_TO_TXN)
        c = cmd.addSubscriptionToTxn
        c.txnid_most_bits, c.txnid_least_bits = txn
        c.subscription.add(topic=topic, subscription=sub)
        return (await self.request(cmd, c)).addSubscriptionToTxnResponse

    async def end_txn(self, txn: Txn, commit: bool) -> pb.CommandEndTxnResponse:
        cmd = _end_txn(txn, commit)
        return (await self.request(cmd, cmd.endTxn)).endTxnResponse

    def end_txn_nowait(self, txn: Txn, commit: bool) -> None:
        """END_TXN written without waiting for its answer (dropped when it comes): the broker is to be killed
        while it works on it."""
        cmd = _end_txn(txn, commit)
        cmd.endTxn.request_id = next(self.ids)
        self.writer.write(commands.frame(cmd))

    # -- producers and consumers ---------------------------------------------------------------------
    async def lookup(self, topic: str, authoritative: bool = False) -> pb.CommandLookupTopicResponse:
        cmd = pb.BaseCommand(type=T.LOOKUP)
        cmd.lookupTopic.topic = topic
        cmd.lookupTopic.authoritative = authoritative
        return (await self.request(cmd, cmd.lookupTopic)).lookupTopicResponse

    async def producer(self, topic: str, producer_id: int, txn_enabled: bool = False) -> None:
        """A producer; ``txn_enabled`` as the Java client sends it when its transactions are on."""
        cmd = pb.BaseCommand(type=T.PRODUCER)
        cmd.producer.topic = topic
        cmd.producer.producer_id = producer_id
        if txn_enabled:
            cmd.producer.txn_enabled = True
        reply = await self.request(cmd, cmd.producer)
        assert reply.type == T.PRODUCER_SUCCESS, reply

    async def send(self, producer_id: int, seq: int, text: str, txn: Txn | None = None,
                   txn_in_metadata: bool = True, key: str | None = None) -> pb.BaseCommand:
        """A SEND; in a transaction the id goes in CommandSend and (as Java does, unlike Go)
        in the message metadata too unless ``txn_in_metadata`` is False."""
        return await asyncio.wait_for(self.send_nowait(producer_id, seq, text, txn, txn_in_metadata, key), WAIT_S)

    def send_nowait(self, producer_id: int, seq: int, text: str, txn: Txn | None = None,
                    txn_in_metadata: bool = True, key: str | None = None) -> asyncio.Future[pb.BaseCommand]:
        """``send`` written at once: the future of its receipt (several SENDs in one go)."""
        cmd = pb.BaseCommand(type=T.SEND)
        cmd.send.producer_id = producer_id
        cmd.send.sequence_id = seq
        md = pb.MessageMetadata(producer_name=f"p{producer_id}", sequence_id=seq, publish_time=1)
        if key is not None:
            md.partition_key = key
        if txn is not None:
            cmd.send.txnid_most_bits, cmd.send.txnid_least_bits = txn
            if txn_in_metadata:
                md.txnid_most_bits, md.txnid_least_bits = txn
        meta = md.SerializeToString()
        tail = struct.pack(">I", len(meta)) + meta + text.encode()
        payload = b"\x0e\x01" + struct.pack(">I", crc32c(tail)) + tail
        fut: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self.receipts[(producer_id, seq)] = fut
        self.writer.write(commands.frame_with_payload(cmd, payload))
        return fut

    async def send_batch(self, producer_id: int, seq: int, texts: list[str]) -> pb.BaseCommand:
        """One SEND carrying a batch of ``texts`` (uncompressed)."""
        cmd = pb.BaseCommand(type=T.SEND)
        cmd.send.producer_id = producer_id
        cmd.send.sequence_id = seq
        cmd.send.num_messages = len(texts)
        md = pb.MessageMetadata(producer_name=f"p{producer_id}", sequence_id=seq, publish_time=1,
                                num_messages_in_batch=len(texts))
        body = b""
        for text in texts:
            single = pb.SingleMessageMetadata(payload_size=len(text.encode())).SerializeToString()
            body += struct.pack(">I", len(single)) + single + text.encode()
        meta = md.SerializeToString()
        tail = struct.pack(">I", len(meta)) + meta + body
        payload = b"\x0e\x01" + struct.pack(">I", crc32c(tail)) + tail
        fut: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self.receipts[(producer_id, seq)] = fut
        self.writer.write(commands.frame_with_payload(cmd, payload))
        return await asyncio.wait_for(fut, WAIT_S)

    def redeliver_unacknowledged(self, consumer_id: int) -> None:
        cmd = pb.BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        cmd.redeliverUnacknowledgedMessages.consumer_id = consumer_id
        self.writer.write(commands.frame(cmd))

    async def subscribe(self, topic: str, sub: str, consumer_id: int,
                        sub_type: int = pb.CommandSubscribe.Exclusive, permits: int = 1000,
                        durable: bool = True) -> None:
        cmd = pb.BaseCommand(type=T.SUBSCRIBE)
        s = cmd.subscribe
        s.topic, s.subscription, s.consumer_id, s.subType = topic, sub, consumer_id, sub_type  # type: ignore[assignment]
        s.initialPosition = pb.CommandSubscribe.Earliest
        s.durable = durable
        reply = await self.request(cmd, s)
        assert reply.type == T.SUCCESS, reply
        if permits:
            self.flow(consumer_id, permits)

    def flow(self, consumer_id: int, permits: int) -> None:
        cmd = pb.BaseCommand(type=T.FLOW)
        cmd.flow.consumer_id = consumer_id
        cmd.flow.messagePermits = permits
        self.writer.write(commands.frame(cmd))

    async def receive(self, consumer_id: int, wait_s: float = WAIT_S) -> Message:
        return await asyncio.wait_for(self.queue(consumer_id).get(), wait_s)

    async def receive_n(self, consumer_id: int, n: int) -> list[Message]:
        return [await self.receive(consumer_id) for _ in range(n)]

    async def ack(self, consumer_id: int, *messages: Message, txn: Txn | None = None,
                  cumulative: bool = False, ack_set: list[int] | None = None,
                  batch_size: int = 0) -> pb.CommandAckResponse:
        """An ACK of ``messages`` (with ``ack_set``: only the batch indexes whose bit is clear)."""
        cmd = pb.BaseCommand(type=T.ACK)
        c = cmd.ack
        c.consumer_id = consumer_id
        c.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
        for m in messages:
            mid = c.message_id.add()
            mid.CopyFrom(m.message_id)
            if ack_set is not None:
                mid.ack_set.extend(ack_set)
                mid.batch_size = batch_size
        if txn is not None:
            c.txnid_most_bits, c.txnid_least_bits = txn
        return (await self.request(cmd, c)).ackResponse

    async def last_message_id(self, consumer_id: int) -> tuple[int, int]:
        cmd = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID)
        cmd.getLastMessageId.consumer_id = consumer_id
        reply = await self.request(cmd, cmd.getLastMessageId)
        mid = reply.getLastMessageIdResponse.last_message_id
        return commands.from_u64(mid.ledgerId), commands.from_u64(mid.entryId)

    async def close(self) -> None:
        self.writer.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _end_txn(txn: Txn, commit: bool) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.END_TXN)
    c = cmd.endTxn
    c.txnid_most_bits, c.txnid_least_bits = txn
    c.txn_action = pb.COMMIT if commit else pb.ABORT
    return cmd


@dataclass(frozen=True)
class Output:
    """A topic a transaction produces to, through producer ``producer_id`` of ``client``."""

    client: TxnWireClient
    producer_id: int
    topic: str


async def waiting_inputs(client: TxnWireClient, topic: str, count: int,
                         sub_type: int = pb.CommandSubscribe.Exclusive) -> list[Message]:
    """``count`` messages "in-0", "in-1"... published to ``topic`` (producer 1) and received, not acknowledged, by
    consumer WORK_CONSUMER of the subscription WORK."""
    await client.producer(topic, 1)
    for i in range(count):
        assert (await client.send(1, i, f"in-{i}")).HasField("send_receipt")
    await client.subscribe(topic, WORK, WORK_CONSUMER, sub_type=sub_type)
    return await client.receive_n(WORK_CONSUMER, count)


async def consume_and_produce(coordinator: TxnWireClient, consumer: TxnWireClient, input_topic: str, msg: Message,
                              outputs: Sequence[Output], seq: int, timeout_ms: int = 300_000,
                              cumulative: bool = False) -> tuple[Txn, list[pb.BaseCommand]]:
    """A transaction of the usual shape, left open: with its output topics and the input's subscription WORK
    registered at ``coordinator``, it sends "out-<seq>" to each output and acknowledges ``msg`` through ``consumer``
    (the client of consumer WORK_CONSUMER); every step must succeed. The transaction and the SEND receipts."""
    txn = await coordinator.new_txn(timeout_ms=timeout_ms)
    assert not (await coordinator.add_partitions(txn, *(o.topic for o in outputs))).HasField("error")
    assert not (await coordinator.add_subscription(txn, input_topic, WORK)).HasField("error")
    receipts = []
    for out in outputs:
        receipt = await out.client.send(out.producer_id, seq, f"out-{seq}", txn)
        assert receipt.HasField("send_receipt"), receipt
        receipts.append(receipt)
    assert not (await consumer.ack(WORK_CONSUMER, msg, txn=txn, cumulative=cumulative)).HasField("error")
    return txn, receipts
