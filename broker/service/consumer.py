"""A consumer: one client-side consumer attached to a subscription over one connection.

It implements what dispatchers see of a consumer (``broker.dispatch.context.Consumer``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from broker.dispatch.context import Delivery
from broker.dispatch.nonpersistent import MESSAGE_POSITION
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import BROKER_ENTRY_METADATA_HEAD, skip_broker_entry_metadata
from managed_ledger import Position

if TYPE_CHECKING:
    from broker.service.kinds import AnySubscription
    from broker.service.rate_limits import ConnectionThrottle

SUB_TYPE_NAMES: dict[int, str] = {
    pb.CommandSubscribe.Exclusive: "Exclusive",
    pb.CommandSubscribe.Shared: "Shared",
    pb.CommandSubscribe.Failover: "Failover",
    pb.CommandSubscribe.Key_Shared: "Key_Shared",
}


class ClientConnection(Protocol):
    """What the service layer needs from a connection (connection.py implements it)."""

    @property
    def writable(self) -> bool: ...
    @property
    def remote_address(self) -> str: ...
    @property
    def client_version(self) -> str: ...
    def write(self, data: bytes) -> None: ...
    def write_many(self, frames: list[bytes]) -> None: ...
    def sends_finished(self, count: int, nbytes: int) -> None: ...
    def set_rate_throttled(self, delta: int, throttle: ConnectionThrottle) -> None: ...
    def consumer_closed_by_broker(self, consumer: Consumer) -> None: ...
    # Broker entry metadata stays on dispatched entries (PIP-70: the client asked for it and
    # exposingBrokerEntryMetadataToClientEnabled is on); else it is stripped.
    @property
    def keeps_broker_entry_metadata(self) -> bool: ...
    def producer_closed_by_broker(self, producer_id: int) -> None: ...
    async def check_liveness(self) -> bool | None: ...


# The Java client's CONNECT client_version ("Pulsar-Java-v4.0.13"): the one client that understands
# REACHED_END_OF_TOPIC.
JAVA_CLIENT_VERSION_PREFIX = "Pulsar-Java-"
# The WebSocket service's own client (broker/websocket/client.py), which reads REACHED_END_OF_TOPIC as the Java one.
WEBSOCKET_CLIENT_VERSION_PREFIX = "pulsar-py-broker-websocket/"
END_OF_TOPIC_CLIENTS = (JAVA_CLIENT_VERSION_PREFIX, WEBSOCKET_CLIENT_VERSION_PREFIX)


class DepartedOut:
    """Out counters of the consumers that have left a subscription (their final values), so the
    subscription's and topic's msgOutCounter / bytesOutCounter stay cumulative after they leave."""

    __slots__ = ("bytes", "msgs", "redelivered")

    def __init__(self) -> None:
        self.msgs = 0
        self.bytes = 0
        self.redelivered = 0

    def add(self, consumer: Consumer) -> None:
        self.msgs += consumer.msg_out
        self.bytes += consumer.bytes_out
        self.redelivered += consumer.redelivered


class Consumer:
    """Permits follow the architecture's rule: FLOW adds to ``permits`` and ``pending_flow`` here,
    on the connection's loop; the dispatcher's lane later settles ``pending_flow`` and adds the
    permits to the dispatcher total if this exact object is still a member.

    Identity matters: equality is object identity (no ``__eq__``), so a reconnecting consumer
    with the same id and name is a different member.
    """

    __slots__ = (
        "auto_consume", "avg_messages_per_entry", "blocked", "bytes_out", "closed", "cnx", "connected_since",
        "consumer_id", "hash_ranges",
        "headers", "key_shared_meta", "last_acked", "last_consumed", "last_flow", "metadata", "msg_ack_counter",
        "msg_out", "name", "partition_index",
        "pending_acks", "pending_flow", "permits", "priority_level", "read_compacted", "read_compacted_from_earliest",
        "redelivered",
        "strip_broker_meta", "sub_type", "subscription", "unacked_messages",
    )

    def __init__(
        self,
        cnx: ClientConnection,
        consumer_id: int,
        name: str,
        sub_type: int,
        priority_level: int,
        subscription: AnySubscription,
        partition_index: int,
        metadata: dict[str, str],
        key_shared_meta: pb.KeySharedMeta | None = None,
    ) -> None:
        self.cnx = cnx
        self.strip_broker_meta = not cnx.keeps_broker_entry_metadata
        self.consumer_id = consumer_id
        self.name = name
        self.sub_type = sub_type
        self.priority_level = priority_level
        self.subscription = subscription
        self.partition_index = partition_index
        # MESSAGE headers, with this consumer's constant parts encoded once.
        self.headers = commands.MessageHeaderEncoder(consumer_id, partition_index)
        self.metadata = metadata
        self.key_shared_meta = key_shared_meta
        self.hash_ranges: list[tuple[int, int]] = (
            [(r.start, r.end) for r in key_shared_meta.hashRanges] if key_shared_meta is not None else []
        )
        self.permits = 0
        self.pending_flow = 0
        # Delivered, not yet acknowledged: position -> number of messages in the entry.
        self.pending_acks: dict[Position, int] = {}
        self.unacked_messages = 0
        self.msg_out = 0
        self.bytes_out = 0
        self.redelivered = 0
        self.msg_ack_counter = 0  # messages (entries) this consumer acknowledged (Pulsar's messageAckCounter)
        # Messages per entry sent, a moving average (Pulsar's Consumer: the first send's, then 0.9 old + 0.1 new).
        self.avg_messages_per_entry = 0.0
        # Reads the compacted view up to the compaction horizon, then the live topic.
        self.read_compacted = False
        # SUBSCRIBE started it at MessageId.earliest (a reader's, a TableView's): its first read of the
        # compacted view starts at the view's first entry, though the topic's first entry may be later.
        self.read_compacted_from_earliest = False
        # Subscribed with an AUTO_CONSUME schema: does not make the topic in use for a consumer's schema.
        self.auto_consume = False
        # Shared: stopped at maxUnackedMessagesPerConsumer until acks bring it under half of that.
        self.blocked = False
        self.connected_since = time.time()
        self.last_acked = 0.0
        self.last_consumed = 0.0
        self.last_flow = 0.0  # (epoch seconds of its last FLOW: the stats' lastConsumedFlowTimestamp)
        self.closed = False

    @property
    def sub_type_name(self) -> str:
        return SUB_TYPE_NAMES.get(self.sub_type, "Exclusive")

    @property
    def writable(self) -> bool:
        return self.cnx.writable

    def send_entries(self, batch: Iterable[Delivery]) -> int:
        """Write MESSAGE frames; returns the messages sent (the permits they cost).

        The caller has already taken the permits. Entries are sent verbatim, as stored, less
        their broker entry metadata unless this consumer keeps it.
        """
        frames: list[bytes] = []
        sent = 0
        nbytes = 0
        newly_unacked = 0
        pending = self.pending_acks
        strip = self.strip_broker_meta
        header = self.headers.header
        for (pos, data), messages, redelivery_count, ack_set in batch:
            nbytes += len(data)
            if strip and data.startswith(BROKER_ENTRY_METADATA_HEAD):
                data = skip_broker_entry_metadata(data)
            # The entry goes out as its own buffer of the writev: never copied into a frame.
            frames += (header(pos[0], pos[1], redelivery_count, len(data), ack_set), data)
            newly_unacked += messages - pending.get(pos, 0)
            pending[pos] = messages
            sent += messages
        if frames:
            self.cnx.write_many(frames)
            self.unacked_messages += newly_unacked
            self._count_out(sent, nbytes, len(frames) >> 1)
        return sent

    def _count_out(self, messages: int, nbytes: int, entries: int) -> None:
        """Counters and the messages-per-entry average after a write of ``entries`` entries."""
        self.msg_out += messages
        self.bytes_out += nbytes
        self.last_consumed = time.time()
        avg, sample = self.avg_messages_per_entry, messages / entries
        self.avg_messages_per_entry = sample if avg < 1 else 0.9 * avg + 0.1 * sample

    def reached_end_of_topic(self) -> None:
        """REACHED_END_OF_TOPIC, to the Java client only: Pulsar sends it to every client, and the C++ client (so the
        Python and Node ones) and the Go client take it for an invalid command and drop the connection, again at
        each reconnection (measured against Pulsar 4.0.7; the Go client's connection.go has no case for it). Our
        WebSocket service's client reads it too."""
        if self.cnx.client_version.startswith(END_OF_TOPIC_CLIENTS):
            self.cnx.write(commands.reached_end_of_topic(self.consumer_id))

    def send_unstored(self, entry: bytes, messages: int) -> None:
        """Write one MESSAGE of a non-persistent topic. Nothing is remembered as pending: these
        messages are never acknowledged."""
        self.cnx.write(commands.message(self.consumer_id, MESSAGE_POSITION.ledger_id, MESSAGE_POSITION.entry_id,
                                        self.partition_index, 0, entry))
        self._count_out(messages, len(entry), 1)

    def set_pending_messages(self, pos: Position, messages: int) -> None:
        """A partial batch ack left ``messages`` of this delivered entry unacknowledged."""
        before = self.pending_acks.get(pos)
        if before is not None:
            self.pending_acks[pos] = messages
            self.unacked_messages += messages - before

    def lower_pending_messages(self, pos: Position, messages: int) -> None:
        """At most ``messages`` of this delivered entry are still unacknowledged (batch indexes held
        by a transaction)."""
        before = self.pending_acks.get(pos)
        if before is not None and messages < before:
            self.pending_acks[pos] = messages
            self.unacked_messages -= before - messages

    def remove_pending(self, pos: Position) -> bool:
        n = self.pending_acks.pop(pos, None)
        if n is None:
            return False
        self.unacked_messages -= n
        return True

    def remove_pending_many(self, positions: list[Position]) -> list[Position]:
        """``remove_pending`` of each; the positions that were not pending here."""
        pending = self.pending_acks
        pop = pending.pop
        missing: list[Position] = []
        removed = 0
        for p in positions:
            n = pop(p, None)
            if n is None:
                missing.append(p)
            else:
                removed += n
        self.unacked_messages -= removed
        return missing

    def remove_pending_up_to(self, pos: Position) -> None:
        pending = self.pending_acks
        if not pending:
            return
        done = [p for p in pending if p <= pos]
        for p in done:
            self.unacked_messages -= pending.pop(p)

    def clear_pending(self) -> list[Position]:
        positions = sorted(self.pending_acks)
        self.pending_acks.clear()
        self.unacked_messages = 0
        return positions

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, id={self.consumer_id}, sub={self.subscription.name!r})"
