"""A WebSocket consumer or reader session (Pulsar's ConsumerHandler, ReaderHandler) on its own connection to the
topic's owner.

Flow control end to end, as the Java client and Pulsar's handler do it: the broker is given permits for the receiver
queue (``receiverQueueSize``, at most 1000) and more only as messages leave the queue (half a queue at a time), so
the session never holds more than a queue of messages; messages leave the queue for the WebSocket only while the
client may take them: in push mode fewer than ``receiverQueueSize`` delivered and not yet acknowledged, in pull mode
as many as its ``permit`` commands allowed. A batch entry becomes one WebSocket message per message of the batch;
a batch's entry is acknowledged to the broker once each of its messages is (the Java client's default, without
batch-index acks). Negative acks and ack timeouts ask the broker to redeliver (the entries named, on Shared and
Key_Shared subscriptions; everything unacknowledged, on Exclusive and Failover ones, as the Java client does).
With a dead-letter policy (``maxRedeliverCount``, ``deadLetterTopic``), an entry delivered ``maxRedeliverCount``
times is published to the dead-letter topic (``<topic>-<subscription>-DLQ`` unless named) and acknowledged instead
of being redelivered once more, as the Java client does it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from broker.protocol import client_commands, commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.peer_link import BrokerLink, LinkError
from broker.tasks import OwnedTasks
from broker.topic_name import TopicName
from broker.websocket.messages import (
    BadRequest,
    Delivered,
    MessageId,
    ProducerMessage,
    UnreadableEntry,
    decode_message_id,
    end_of_topic,
    split_entry,
)
from broker.websocket.options import ConsumerOptions, ProducerOptions, ReaderOptions
from broker.websocket.producer import ProducerSession

log = logging.getLogger(__name__)

T = pb.BaseCommand.Type
CONSUMER_ID = 1
SUB_TYPES = {"Exclusive": pb.CommandSubscribe.Exclusive, "Shared": pb.CommandSubscribe.Shared,
             "Failover": pb.CommandSubscribe.Failover, "Key_Shared": pb.CommandSubscribe.Key_Shared}
SHARED_TYPES = ("Shared", "Key_Shared")
ACK_TIMEOUT_TICK_S = 1.0  # the Java client's UnAckedMessageTracker tick (ackTimeoutTickTime: 1 s)


class ConsumerSession:
    def __init__(self, link: BrokerLink, topic: str, subscription: str, options: ConsumerOptions | None,
                 reader: ReaderOptions | None, emit: Callable[[str], None],
                 new_link: Callable[[str], BrokerLink] | None = None, gate: Gate | None = None) -> None:
        self.link = link
        self._new_link = new_link  # a connection for another topic's producer (the dead-letter topic)
        self.topic = topic
        self.subscription = subscription
        self.options = options or ConsumerOptions(subscription_type="Exclusive", durable=False)
        self.reader = reader
        self._emit = emit
        queue = reader.receiver_queue_size if reader is not None else self.options.receiver_queue_size
        self.queue_size = max(queue, 1)  # (a queue of 0: one message at a time, as Pulsar's handler)
        self.pull_mode = self.options.pull_mode if reader is None else False
        self._queue: collections.deque[Delivered] = collections.deque()
        self._taken = 0  # messages that left the queue since the last FLOW
        self.gate = gate if gate is not None else Gate.of(options, reader)
        self.gate.sessions.append(self)
        self._batches: dict[tuple[int, int], set[int]] = {}  # a batch entry -> its indexes not yet acknowledged
        self._unacked: dict[tuple[int, int], float] = {}  # ack timeout: entry -> when it was delivered
        self._nacked: set[tuple[int, int]] = set()
        self._nack_timer: asyncio.TimerHandle | None = None
        self._ack_timeout_task: asyncio.Task[None] | None = None
        self._start_after: tuple[int, int, int] | None = None  # a reader's start (exclusive)
        self.end_of_topic = False
        self.closed = False
        self.consumer_name = ""
        self.partition = TopicName.parse(topic).partition_index  # (in the message ids, as the Java client's)
        self._last_delivered: MessageId | None = None  # (a reader resumes after it)
        # Dead-letter policy (maxRedeliverCount): the messages of an entry delivered maxRedeliverCount times, which
        # go to the dead-letter topic instead of being redelivered again (the Java client's
        # possibleSendToDeadLetterTopicMessages), and the producer on that topic, made when first needed.
        self._dead_letter_candidates: dict[tuple[int, int], list[Delivered]] = {}
        self._dead_letter: ProducerSession | None = None
        self._dead_letter_ready: asyncio.Lock = asyncio.Lock()
        self._tasks = OwnedTasks(f"websocket consumer {topic} {subscription}")

    async def start(self) -> None:
        await self._subscribe(None)
        self._track_ack_timeouts()

    def _track_ack_timeouts(self) -> None:
        if self.options.ack_timeout_ms > 0 and self.reader is None and self._ack_timeout_task is None:
            self._ack_timeout_task = asyncio.get_running_loop().create_task(self._ack_timeouts())

    async def restart(self) -> None:
        """After a reconnection (or a first subscription that failed): subscribe again (a reader after the last
        message it delivered); what waited in the queue is dropped (the broker delivers it again), and the queue's
        permits are given anew."""
        self._queue.clear()
        self._taken = 0
        self._unacked.clear()
        await self._subscribe(self._last_delivered)
        self._track_ack_timeouts()

    async def _subscribe(self, resume_after: MessageId | None) -> None:
        if self.consumer_name:
            name = self.consumer_name
        elif self.reader is not None:
            name = self.reader.reader_name or _random_name()
        elif self.options.consumer_name is not None:
            name = self.options.consumer_name
        else:
            name = _random_name()
        start = None
        if self.reader is not None:
            if resume_after is not None:
                self._start_after = (resume_after.ledger_id, resume_after.entry_id, resume_after.batch_index)
                start = resume_after.data()
            else:
                start = self._reader_start(self.reader.start)
        cmd, s = client_commands.subscribe(self.topic, self.subscription, CONSUMER_ID,
                                           SUB_TYPES[self.options.subscription_type], name,
                                           durable=self.options.durable,
                                           earliest=self.options.initial_position == "Earliest", start=start)
        s.priority_level = self.options.priority_level
        self.consumer_name = name
        await self.link.request(cmd, s)
        self._flow(self.queue_size)

    def _reader_start(self, start: str) -> pb.MessageIdData:
        if start == "earliest":
            return commands.message_id(*client_commands.EARLIEST)
        if start == "latest":
            return client_commands.reader_start_latest()
        parsed = decode_message_id(start)  # (BadRequest: the handler answers it)
        self._start_after = (parsed.ledger_id, parsed.entry_id, parsed.batch_index)
        return parsed.data()

    # -- from the broker ---------------------------------------------------------------------------------------------
    def on_message(self, cmd: pb.CommandMessage, entry: bytes) -> None:
        try:
            messages = list(split_entry(entry, cmd, self.partition))
        except UnreadableEntry:
            messages = []
        permits = len(messages) or 1
        dlq = self.options.dead_letter_topic
        if dlq is not None and messages and cmd.redelivery_count >= self.options.max_redeliver_count:
            position = messages[0].id.entry
            self._dead_letter_candidates[position] = messages
            if cmd.redelivery_count > self.options.max_redeliver_count:
                self._taken += permits  # (not delivered: straight to the dead-letter topic)
                self._redeliver({position})
                return
        for message in messages:
            if self._before_start(message.id):
                self._taken += 1
                continue
            self._queue.append(message)
        if not messages:
            self._taken += permits
        self._pump()

    def _before_start(self, mid: MessageId) -> bool:
        start = self._start_after
        if start is None:
            return False
        if (mid.ledger_id, mid.entry_id) != start[:2]:
            if (mid.ledger_id, mid.entry_id) > start[:2]:
                self._start_after = None
            return (mid.ledger_id, mid.entry_id) < start[:2]
        return start[2] < 0 or mid.batch_index <= start[2]

    def on_end_of_topic(self) -> None:
        self.end_of_topic = True

    # -- to the WebSocket ------------------------------------------------------------------------------------------
    def _pump(self) -> None:
        while self._queue and not self.closed and self._may_deliver():
            message = self._queue.popleft()
            self.gate.outstanding += 1
            self._taken += 1
            if message.id.batch_size > 0:
                self._batches.setdefault(message.id.entry, set(range(message.id.batch_size)))
            if self._ack_timeout_task is not None:
                self._unacked.setdefault(message.id.entry, time.monotonic())
            self._last_delivered = message.id
            if self.gate.owners is not None:
                self.gate.owners[message.id.entry_key] = self
            self._emit(message.to_json())
        if self._taken >= max(self.queue_size // 2, 1):
            taken, self._taken = self._taken, 0
            self._flow(taken)

    def _may_deliver(self) -> bool:
        return self.gate.may_deliver()

    def _flow(self, permits: int) -> None:
        self._write(client_commands.flow(CONSUMER_ID, permits))

    def _write(self, frame: bytes) -> None:
        """A FLOW, ACK or REDELIVER; dropped while the session reconnects (the new subscription gets a full queue
        of permits; what was not acknowledged comes again)."""
        try:
            self.link.write(frame)
        except LinkError:
            pass

    # -- from the WebSocket (through Consumers) ---------------------------------------------------------------
    async def unsubscribe(self) -> None:
        await self.link.request(*client_commands.unsubscribe(CONSUMER_ID))
        self.closed = True

    def _ack(self, mid: MessageId) -> None:
        if mid.batch_size > 0:
            left = self._batches.setdefault(mid.entry, set(range(mid.batch_size)))
            left.discard(mid.batch_index)
            if left:
                return
            del self._batches[mid.entry]
        self._unacked.pop(mid.entry, None)
        if self.gate.owners is not None:
            self.gate.owners.pop(mid.entry_key, None)
        cmd = pb.BaseCommand(type=T.ACK)
        a = cmd.ack
        a.consumer_id, a.ack_type = CONSUMER_ID, pb.CommandAck.Individual
        a.message_id.add().CopyFrom(mid.data())
        self._write(commands.frame(cmd))

    def _nack(self, mid: MessageId) -> None:
        self._nacked.add(mid.entry)
        if self._nack_timer is None:
            delay = self.options.negative_ack_delay_ms / 1000
            self._nack_timer = asyncio.get_running_loop().call_later(delay, self._redeliver_nacked)

    def _redeliver_nacked(self) -> None:
        self._nack_timer = None
        entries, self._nacked = self._nacked, set()
        self._redeliver(entries)

    def _redeliver(self, entries: set[tuple[int, int]]) -> None:
        if self.closed or not entries:
            return
        dead = {e for e in entries if e in self._dead_letter_candidates}
        for entry in dead:
            self._tasks.spawn(self._to_dead_letter_topic(entry, self._dead_letter_candidates.pop(entry)))
        entries = entries - dead
        if not entries:
            return
        cmd = pb.BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        r = cmd.redeliverUnacknowledgedMessages
        r.consumer_id = CONSUMER_ID
        for entry in entries:
            self._unacked.pop(entry, None)
            self._batches.pop(entry, None)
        if self.options.subscription_type in SHARED_TYPES:
            for ledger, entry_id in sorted(entries):
                r.message_ids.add().CopyFrom(commands.message_id(ledger, entry_id))
        else:
            # Exclusive / Failover: everything unacknowledged comes again, and what waits in the queue is dropped
            # (it will come again too): its permits are given back.
            self._taken += len(self._queue)
            self._queue.clear()
            self._unacked.clear()
        self._write(commands.frame(cmd))
        self._pump()

    async def _to_dead_letter_topic(self, entry: tuple[int, int], messages: list[Delivered]) -> None:
        """Publish an entry's messages to the dead-letter topic, then acknowledge the entry (as the Java client:
        the messages keep their payload, properties, key and event time, with REAL_TOPIC, ORIGIN_MESSAGE_ID and
        REAL_SUBSCRIPTION added). When that fails, the entry is redelivered as any other."""
        try:
            producer = await self._dead_letter_producer()
            for message in messages:
                await producer.publish(dead_letter_message(message, self.topic, self.subscription))
        except (LinkError, OSError) as exc:
            log.warning("%s %s: the dead-letter topic %s refused %s: %s; redelivered", self.topic,
                        self.subscription, self.options.dead_letter_topic, entry, exc)
            self._redeliver({entry})
            return
        self._batches.pop(entry, None)
        self._unacked.pop(entry, None)
        first = messages[0].id
        self._ack(MessageId(first.ledger_id, first.entry_id, first.partition))

    async def _dead_letter_producer(self) -> ProducerSession:
        async with self._dead_letter_ready:
            if self._dead_letter is None:
                topic = str(TopicName.parse(self.options.dead_letter_topic or "").full)
                if self._new_link is None:
                    raise LinkError("no connection for the dead-letter topic")
                link = self._new_link(topic)
                link.on_lost = lambda _: self._forget_dead_letter_producer()
                name = f"{self.topic}-{self.subscription}-{self.consumer_name}-{secrets.token_hex(3)[:5]}-DLQ"
                session = ProducerSession(link, topic, ProducerOptions(producer_name=name), lambda _: None)
                link.on_command = lambda frame: session.on_command(frame.command)
                try:
                    await link.open()
                    await session.start()
                except BaseException:
                    await link.close()
                    raise
                self._dead_letter = session
            return self._dead_letter

    def _forget_dead_letter_producer(self) -> None:
        """Its connection is lost: the next dead letter makes a new one (this one's sends fail by their timeout)."""
        old, self._dead_letter = self._dead_letter, None
        if old is not None:
            self._tasks.spawn(_close_producer(old))

    async def _ack_timeouts(self) -> None:
        timeout = self.options.ack_timeout_ms / 1000
        while not self.closed:
            await asyncio.sleep(min(ACK_TIMEOUT_TICK_S, timeout))
            now = time.monotonic()
            expired = {entry for entry, since in self._unacked.items() if now - since >= timeout}
            self._redeliver(expired)

    async def close(self) -> None:
        self.closed = True
        if self._nack_timer is not None:
            self._nack_timer.cancel()
        task, self._ack_timeout_task = self._ack_timeout_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._tasks.close()
        if self._dead_letter is not None:
            await self._dead_letter.close()
            await self._dead_letter.link.close()


class Gate:
    """How many messages the WebSocket client may be sent now, over all the sessions of one WebSocket (a
    partitioned topic has one per partition, a multi-topic consumer one per topic): in push mode fewer than the
    receiver queue delivered and not acknowledged (``outstanding``), in pull mode as many as its permits left
    (``-outstanding``).

    ``owners``: for a WebSocket on several topics, the session of each entry delivered and not yet acknowledged, by
    its id (ledger, entry, partition): a message id does not name its topic (as Pulsar's handler keeps the ids it
    sent, to acknowledge each on its topic); None when the partition in an id is enough."""

    def __init__(self, limit: int, pull_mode: bool) -> None:
        self.limit = limit
        self.pull_mode = pull_mode
        self.outstanding = 0
        self.sessions: list[ConsumerSession] = []
        self._next = 0  # (the session pumped first next time: each in turn)
        self.owners: dict[tuple[int, int, int], ConsumerSession] | None = None

    @classmethod
    def of(cls, options: ConsumerOptions | None, reader: ReaderOptions | None) -> Gate:
        """The gate of a consumer's (or a reader's) WebSocket: its receiver queue, its pull mode."""
        if reader is not None:
            return cls(max(reader.receiver_queue_size, 1), False)  # (a queue of 0: one message at a time)
        options = options or ConsumerOptions(subscription_type="Exclusive", durable=False)
        return cls(max(options.receiver_queue_size, 1), options.pull_mode)

    def may_deliver(self) -> bool:
        return self.outstanding < 0 if self.pull_mode else self.outstanding < self.limit

    def pump(self) -> None:
        n = len(self.sessions)
        for i in range(n):
            self.sessions[(self._next + i) % n]._pump()
        self._next = (self._next + 1) % max(n, 1)


class Consumers:
    """The commands of one consumer or reader WebSocket, for its session or, on a partitioned topic, the session of
    each partition (a message id names its partition)."""

    def __init__(self, sessions: list[ConsumerSession], emit: Callable[[str], None], gate: Gate) -> None:
        self.sessions = sessions  # (a pattern consumer's come and go: ``remove``)
        self.gate = gate
        self.reader = bool(sessions) and sessions[0].reader is not None
        self._emit = emit

    def remove(self, session: ConsumerSession) -> None:
        """A session that ended (its topic deleted): no longer pumped, and its messages' acks go nowhere."""
        if session in self.sessions:
            self.sessions.remove(session)
        if session in self.gate.sessions:
            self.gate.sessions.remove(session)
        owners = self.gate.owners
        if owners is not None:
            for key in [k for k, s in owners.items() if s is session]:
                del owners[key]

    def _session(self, mid: MessageId) -> ConsumerSession:
        owners = self.gate.owners
        if owners is not None:
            session = owners.get(mid.entry_key)
            if session is None:
                raise BadRequest(3, f"message id names no message delivered on this session ({mid.ledger_id}:"
                                    f"{mid.entry_id}:{mid.partition})")
            return session
        if len(self.sessions) == 1:
            return self.sessions[0]
        if not 0 <= mid.partition < len(self.sessions):
            raise BadRequest(3, f"message id names no partition of the topic (partition {mid.partition})")
        return self.sessions[mid.partition]

    def _end_of_topic(self) -> str:
        return end_of_topic(bool(self.sessions) and all(s.end_of_topic for s in self.sessions))

    async def on_command(self, doc: dict[str, object]) -> None:
        """One ConsumerCommand (BadRequest for one that cannot be used), as Pulsar's handlers read them."""
        kind = doc.get("type")
        gate = self.gate
        if self.reader:
            if kind == "isEndOfTopic":
                self._emit(self._end_of_topic())
                return
            gate.outstanding -= 1  # (any other text: the client took a message; a reader acknowledges nothing)
            gate.pump()
            return
        if kind == "permit":
            permits = doc.get("permitMessages")
            if not isinstance(permits, int) or isinstance(permits, bool):
                raise BadRequest(3, "Missing required permitMessages field for 'permit' command")
            if gate.pull_mode:
                gate.outstanding -= permits
                gate.pump()
        elif kind == "unsubscribe":
            for session in self.sessions:
                await session.unsubscribe()
        elif kind == "isEndOfTopic":
            self._emit(self._end_of_topic())
        elif kind == "negativeAcknowledge":
            mid = decode_message_id(doc.get("messageId"))
            self._session(mid)._nack(mid)
            self._resume()
        else:  # (any other type, or none: an acknowledgement, as in Pulsar's handler)
            mid = decode_message_id(doc.get("messageId"))
            self._session(mid)._ack(mid)
            self._resume()

    def _resume(self) -> None:
        if not self.gate.pull_mode:
            self.gate.outstanding -= 1
            self.gate.pump()


async def _close_producer(session: ProducerSession) -> None:
    await session.close()
    await session.link.close()


def dead_letter_message(message: Delivered, topic: str, subscription: str) -> ProducerMessage:
    """A message as the Java client republishes it to the dead-letter topic."""
    source: Any = message.single if message.single is not None else message.metadata
    properties = {kv.key: kv.value for kv in source.properties}
    mid = message.id
    origin = f"{mid.ledger_id}:{mid.entry_id}:{mid.partition}" + (f":{mid.batch_index}" if mid.batch_index >= 0 else "")
    # (ConsumerImpl.getPropertiesMap, each unless the message has it: ORIGIN_MESSAGE_IDY_TIME is the name Pulsar's
    # RetryMessageUtil gives its "old" origin property, written out as the Java client writes it)
    for name, value in (("REAL_TOPIC", topic), ("ORIGIN_MESSAGE_IDY_TIME", origin), ("ORIGIN_MESSAGE_ID", origin),
                        ("REAL_SUBSCRIPTION", subscription)):
        properties.setdefault(name, value)
    key = source.partition_key if source.HasField("partition_key") else None
    event_time = source.event_time if source.HasField("event_time") and source.event_time else None
    return ProducerMessage(message.payload, None, properties, key, None, event_time, 0, 0)


def _random_name() -> str:
    return secrets.token_hex(5)


def reader_subscription() -> str:
    """A reader's subscription name, as the Java client names it: ``reader-`` and ten hex digits."""
    return f"reader-{secrets.token_hex(5)}"
