"""A WebSocket producer session (Pulsar's ProducerHandler): each JSON message becomes a SEND on the session's own
connection to the topic's owner; each receipt becomes a ProducerAck, in send order.

Flow control: a SEND is written only when the broker reads the connection (``drain``), so a broker that throttles
the producer (publish rate, pending sends, its publish buffer) stops the reading of the WebSocket; with
``maxPendingMessages`` (batching on), sends past it are refused at once, as the Java client refuses them with
``blockIfQueueFull=false``. Batching (``batchingEnabled=true``) groups messages into one entry as the Java client
does: up to ``batchingMaxMessages`` or 128 KiB, sent ``batchingMaxPublishDelay`` ms after the first; a message with
a delivery time or its own replication clusters goes alone. Each message keeps its own sequence id. A partitioned
topic's producer (``PartitionedProducer``) is a session per partition, routing as the Java client's routers.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import mmh3

from broker.protocol import client_commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.service.peer_link import BrokerLink, LinkError
from broker.websocket.messages import (
    UNKNOWN_ERROR,
    MessageId,
    ProducerMessage,
    producer_ack,
)
from broker.websocket.options import DEFAULT_BATCHING_MAX_BYTES, ProducerOptions
from compression_codecs import NONE, compress

T = pb.BaseCommand.Type
PRODUCER_ID = 1


@dataclass
class _Pending:
    """One SEND awaiting its receipt: the contexts of its messages (one, or one per message of a batch)."""

    contexts: list[str | None]
    batch: bool
    frame: bytes = b""  # (sent again after a reconnection)
    timer: asyncio.TimerHandle | None = None
    done: asyncio.Future[tuple[int, int]] | None = None  # (publish: the entry's ledger and entry ids)


@dataclass
class _Batch:
    messages: list[tuple[int, ProducerMessage]] = field(default_factory=list)
    size: int = 0
    timer: asyncio.TimerHandle | None = None


class ProducerSession:
    def __init__(self, link: BrokerLink, topic: str, options: ProducerOptions, emit: Callable[[str], None],
                 partition: int = -1) -> None:
        self.link = link
        # (a partition of a partitioned topic's producer: its index in the ids, as the Java client's partitioned
        # producer writes them; -1 for the producer of one topic, also when that topic is a partition)
        self.partition = partition
        self.topic = topic
        self.options = options
        self._emit = emit  # writes one text frame to the WebSocket, in order
        self.producer_name = ""
        self._next_sequence = 0
        self._pending: dict[int, _Pending] = {}  # first sequence id of a SEND -> what awaits its receipt
        self._batch = _Batch()

    async def start(self) -> None:
        """Create the producer on the topic's owner (LinkError when refused)."""
        answer = await self._create()
        self.producer_name = answer.producer_success.producer_name
        if self.options.initial_sequence_id is not None:
            self._next_sequence = self.options.initial_sequence_id + 1
        elif answer.producer_success.last_sequence_id >= 0:
            self._next_sequence = answer.producer_success.last_sequence_id + 1

    async def restart(self) -> None:
        """After a reconnection: the producer again, under its name, and the sends still awaiting their receipts
        again, in order (the broker's deduplication, when on, drops those it had stored)."""
        await self._create()
        for pending in self._pending.values():
            self.link.write(pending.frame)

    async def _create(self) -> pb.BaseCommand:
        if self.producer_name:  # (created before: the name the broker gave it)
            request = client_commands.producer(self.topic, PRODUCER_ID, self.producer_name)
        else:
            request = client_commands.producer(self.topic, PRODUCER_ID, self.options.producer_name,
                                               user_provided_name=True)
        return await self.link.request(*request)

    # -- sending ---------------------------------------------------------------------------------------------------
    async def publish(self, message: ProducerMessage) -> tuple[int, int]:
        """Send one message alone and await its receipt: its entry's (ledger id, entry id); LinkError when the
        broker refuses it, or the send times out (the consumer's dead-letter producer)."""
        sequence_id = self._next_sequence
        self._next_sequence += 1
        done: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        md = self._metadata(sequence_id, message)
        self._write(sequence_id, sequence_id, 1, md, message.payload, _Pending([message.context], False, done=done))
        await self.link.drain()
        return await done

    async def send(self, message: ProducerMessage) -> None:
        limit = self.options.max_pending_messages
        if limit and len(self._pending) + len(self._batch.messages) >= limit:
            self._emit(producer_ack(None, message.context, (UNKNOWN_ERROR, "Producer send queue is full")))
            return
        sequence_id = self._next_sequence
        self._next_sequence += 1
        alone = message.deliver_at > 0 or message.deliver_after_ms > 0 or message.replication_clusters is not None
        if not self.options.batching or alone:
            self._flush_batch()
            self._send_one(sequence_id, message)
        else:
            batch = self._batch
            batch.messages.append((sequence_id, message))
            batch.size += len(message.payload)
            if len(batch.messages) >= self.options.batching_max_messages or batch.size >= DEFAULT_BATCHING_MAX_BYTES:
                self._flush_batch()
            elif batch.timer is None:
                delay = self.options.batching_max_publish_delay_ms / 1000
                batch.timer = asyncio.get_running_loop().call_later(delay, self._flush_batch)
        await self.link.drain()

    def _metadata(self, sequence_id: int, message: ProducerMessage | None) -> pb.MessageMetadata:
        md = pb.MessageMetadata(producer_name=self.producer_name, sequence_id=sequence_id,
                                publish_time=int(time.time() * 1000))
        if message is not None:
            for k, v in message.properties.items():
                md.properties.add(key=k, value=v)
            if message.key is not None:
                md.partition_key = message.key
            if message.replication_clusters is not None:
                md.replicate_to.extend(message.replication_clusters)
            if message.event_time is not None:
                md.event_time = message.event_time
            if message.deliver_at > 0:
                md.deliver_at_time = message.deliver_at
            if message.deliver_after_ms > 0:
                md.deliver_at_time = md.publish_time + message.deliver_after_ms
        return md

    def _send_one(self, sequence_id: int, message: ProducerMessage) -> None:
        md = self._metadata(sequence_id, message)
        self._write(sequence_id, sequence_id, 1, md, message.payload, _Pending([message.context], False))

    def _flush_batch(self) -> None:
        batch, self._batch = self._batch, _Batch()
        if batch.timer is not None:
            batch.timer.cancel()
        if not batch.messages:
            return
        first, last = batch.messages[0][0], batch.messages[-1][0]
        md = self._metadata(first, None)
        md.num_messages_in_batch = len(batch.messages)
        md.highest_sequence_id = last
        parts = []
        for sequence_id, message in batch.messages:
            single = pb.SingleMessageMetadata(payload_size=len(message.payload), sequence_id=sequence_id)
            for k, v in message.properties.items():
                single.properties.add(key=k, value=v)
            if message.key is not None:
                single.partition_key = message.key
            if message.event_time is not None:
                single.event_time = message.event_time
            head = single.SerializeToString()
            parts += [len(head).to_bytes(4, "big"), head, message.payload]
        pending = _Pending([m.context for _, m in batch.messages], True)
        self._write(first, last, len(batch.messages), md, b"".join(parts), pending)

    def _write(self, first: int, last: int, count: int, md: pb.MessageMetadata, body: bytes,
               pending: _Pending) -> None:
        if self.options.compression != NONE:
            md.compression = self.options.compression  # type: ignore[assignment]
            md.uncompressed_size = len(body)
            body = compress(self.options.compression, body)
        pending.frame = client_commands.send(PRODUCER_ID, first, count, build_entry(md.SerializeToString(), body),
                                             highest_sequence_id=last)
        try:
            self.link.write(pending.frame)
        except LinkError:
            pass  # (reconnecting: sent again once the producer is back, or failed by the send timeout)
        if self.options.send_timeout_ms > 0:
            pending.timer = asyncio.get_running_loop().call_later(
                self.options.send_timeout_ms / 1000, self._timed_out, first)
        self._pending[first] = pending

    # -- answers ---------------------------------------------------------------------------------------------------
    def on_command(self, cmd: pb.BaseCommand) -> None:
        """SEND_RECEIPT / SEND_ERROR / CLOSE_PRODUCER for this producer (anything else is not for a producer:
        ignored)."""
        if cmd.type == T.SEND_RECEIPT:
            pending = self._take(cmd.send_receipt.sequence_id)
            if pending is None:
                return
            r = cmd.send_receipt.message_id
            ledger, entry = r.ledgerId, r.entryId
            if pending.done is not None:
                if not pending.done.done():
                    pending.done.set_result((ledger, entry))
                return
            for index, context in enumerate(pending.contexts):
                # (a message of a batch: its index, and a batch size of 0, as the Java client's producer writes it)
                mid = MessageId(ledger, entry, self.partition, index if pending.batch else -1)
                self._emit(producer_ack(mid.encode(), context))
        elif cmd.type == T.SEND_ERROR:
            pending = self._take(cmd.send_error.sequence_id)
            if pending is not None:
                self._fail(pending, f"{pb.ServerError.Name(cmd.send_error.error)}: {cmd.send_error.message}")
        elif cmd.type == T.CLOSE_PRODUCER:
            self.link.lost(LinkError("the broker closed the producer"))

    def _take(self, sequence_id: int) -> _Pending | None:
        pending = self._pending.pop(sequence_id, None)
        if pending is not None and pending.timer is not None:
            pending.timer.cancel()
        return pending

    def _timed_out(self, first: int) -> None:
        pending = self._pending.pop(first, None)
        if pending is not None:
            self._fail(pending, f"The producer {self.producer_name} can not send message to the topic {self.topic} "
                                "within given timeout")

    def _fail(self, pending: _Pending, reason: str) -> None:
        if pending.done is not None:
            if not pending.done.done():
                pending.done.set_exception(LinkError(reason))
            return
        for context in pending.contexts:
            self._emit(producer_ack(None, context, (UNKNOWN_ERROR, reason)))

    async def close(self) -> None:
        """Forget what still waits (the session is ending) and stop the timers."""
        if self._batch.timer is not None:
            self._batch.timer.cancel()
        for pending in self._pending.values():
            if pending.timer is not None:
                pending.timer.cancel()
            if pending.done is not None and not pending.done.done():
                pending.done.set_exception(LinkError("the producer was closed"))
        self._pending.clear()


# -- a partitioned topic -----------------------------------------------------------------------------------------------
def java_string_hash(key: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a non-negative int: the client's JavaStringHash."""
    h = 0
    data = key.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def murmur3_hash(key: str) -> int:
    """The client's Murmur3Hash32: Murmur3 32-bit of the UTF-8 bytes, seed 0, as a non-negative int."""
    return int(mmh3.hash(key.encode(), 0, signed=False)) & 0x7FFFFFFF


class PartitionRouter:
    """Which partition a message goes to, as the Java client's routers choose (the WebSocket producer's default:
    SinglePartition): a message with a key by its hash (``hashingScheme``); others to one partition picked at
    random (SinglePartition), or each in turn (RoundRobinPartition; with batching, the partition changes every
    ``batchingMaxPublishDelay`` ms, as the Java router does)."""

    def __init__(self, partitions: int, options: ProducerOptions) -> None:
        self.partitions = partitions
        self.options = options
        self._hash = murmur3_hash if options.hashing_scheme == "Murmur3_32Hash" else java_string_hash
        self._start = random.randrange(partitions)
        self._next = self._start

    def choose(self, key: str | None) -> int:
        if key is not None:
            return self._hash(key) % self.partitions
        if self.options.routing_mode != "RoundRobinPartition":
            return self._start
        if self.options.batching:
            switch_ms = max(1, self.options.batching_max_publish_delay_ms)
            return (int(time.time() * 1000) // switch_ms + self._start) % self.partitions
        index, self._next = self._next, self._next + 1
        return index % self.partitions


class PartitionedProducer:
    """A partitioned topic's producer: one session per partition, under one name, each message to the partition
    its router chooses."""

    def __init__(self, sessions: list[ProducerSession], router: PartitionRouter) -> None:
        self.sessions = sessions
        self.router = router

    async def send(self, message: ProducerMessage) -> None:
        await self.sessions[self.router.choose(message.key)].send(message)
