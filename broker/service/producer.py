"""A producer attached to a topic over one connection.

Receipts leave in SEND order: the managed ledger completes appends in call order, and each
completion writes its receipt at once. The C++ client closes the connection on a receipt for a
sequence id beyond its pending head, so order is not optional.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from managed_ledger import Position

if TYPE_CHECKING:
    from broker.service.abstract_topic import AbstractTopic
    from broker.service.consumer import ClientConnection

E = pb.ServerError

ACCESS_MODE_NAMES: dict[int, str] = {
    pb.ProducerAccessMode.Shared: "Shared",
    pb.ProducerAccessMode.Exclusive: "Exclusive",
    pb.ProducerAccessMode.WaitForExclusive: "WaitForExclusive",
    pb.ProducerAccessMode.ExclusiveWithFencing: "ExclusiveWithFencing",
}


class ProducerState(enum.Enum):
    WAITING = "waiting"  # WaitForExclusive, not yet granted
    READY = "ready"
    CLOSED = "closed"


class Producer:
    __slots__ = (
        "access_mode", "bytes_in", "cnx", "connected_since", "epoch", "is_generated_name", "metadata",
        "msg_in", "name", "pending", "producer_id", "schema_version", "state",
        "topic", "topic_epoch",
    )

    def __init__(
        self,
        cnx: ClientConnection,
        topic: AbstractTopic,
        producer_id: int,
        name: str,
        is_generated_name: bool,
        access_mode: int,
        epoch: int,
        metadata: dict[str, str],
        schema_version: bytes,
    ) -> None:
        self.cnx = cnx
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.is_generated_name = is_generated_name
        self.access_mode = access_mode
        self.epoch = epoch
        self.metadata = metadata
        self.schema_version = schema_version
        self.topic_epoch: int | None = None
        self.state = ProducerState.READY
        self.pending = 0
        self.msg_in = 0
        self.bytes_in = 0
        self.connected_since = time.time()

    @property
    def is_exclusive(self) -> bool:
        return self.access_mode != pb.ProducerAccessMode.Shared

    @property
    def access_mode_name(self) -> str:
        return ACCESS_MODE_NAMES.get(self.access_mode, "Shared")

    def publish(self, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes,
                done: Callable[[], None], advances_sequence: bool = True) -> None:
        """Append ``entry``; ``done()`` is called once the receipt or error has been written.

        ``advances_sequence`` is False for chunks other than the last one of a message: they share
        the message's sequence id, so only the last chunk may move deduplication state.
        """
        if self.state is not ProducerState.READY:
            self.cnx.write(commands.send_error(self.producer_id, sequence_id, E.PersistenceError,
                                               "Producer is closed"))
            done()
            return
        topic = self.topic
        if topic.terminated_at is not None:
            self.cnx.write(commands.send_error(self.producer_id, sequence_id, E.TopicTerminatedError,
                                               f"Topic {topic.name} was already terminated"))
            done()
            return
        dedup = advances_sequence and topic.deduplication_enabled
        if dedup:
            if highest_sequence_id <= topic.sequence_persisted.get(self.name, -1):
                # Already stored: acknowledge without storing again; Pulsar answers with id (-1,-1).
                self.cnx.write(commands.send_receipt(self.producer_id, sequence_id, -1, -1, highest_sequence_id))
                done()
                return
            if highest_sequence_id <= topic.sequence_pushed.get(self.name, -1):
                self.cnx.write(commands.send_error(self.producer_id, sequence_id, E.PersistenceError,
                                                   "Duplicate of a message whose persistence is not yet known"))
                done()
                return
            topic.sequence_pushed[self.name] = highest_sequence_id
        self.pending += 1
        self.msg_in += num_messages
        self.bytes_in += len(entry)

        def complete(pos: Position | None, exc: BaseException | None) -> None:
            self.pending -= 1
            if pos is not None:
                if dedup:
                    if highest_sequence_id > topic.sequence_persisted.get(self.name, -1):
                        topic.sequence_persisted[self.name] = highest_sequence_id
                    topic.deduplicated_entry_stored()
                self.cnx.write(commands.send_receipt(self.producer_id, sequence_id, pos.ledger_id,
                                                     pos.entry_id, highest_sequence_id))
            else:
                self.cnx.write(commands.send_error(self.producer_id, sequence_id, E.PersistenceError,
                                                   f"Failed to persist message: {exc}"))
            done()

        self.topic.publish(self, entry, num_messages, complete)

    def close(self) -> None:
        self.state = ProducerState.CLOSED

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, id={self.producer_id}, topic={self.topic.name})"
