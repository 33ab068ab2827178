"""A producer attached to a topic over one connection.

Receipts leave in SEND order: the SENDs of one read are stored as one batch (a big read as several,
in order), the managed ledger completes appends in call order, and each completion writes its
batch's receipts at once, in order. The C++ client closes the connection on a receipt for a
sequence id beyond its pending head, so order is not optional.
"""

from __future__ import annotations

import enum
import time
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, cast

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import read_entry_metadata
from broker.service.replication import REPLICATOR_PREFIX
from managed_ledger import LedgerFencedError, Position

if TYPE_CHECKING:
    from broker.protocol.frames import RunSend
    from broker.service.abstract_topic import AbstractTopic
    from broker.service.consumer import ClientConnection
    from broker.transactions.model import TxnID

E = pb.ServerError

# One queued SEND: (sequence id, highest sequence id, messages in it, entry, advances sequence,
# transaction or None).
QueuedSend = tuple[int, int, int, bytes, bool, "TxnID | None"]

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


# Per flushed batch (the hot path): an Enum member as a module constant (a look-up on its class costs
# ~0.2 us on Python 3.11), a QueuedSend's fields by itemgetter (map over them is twice as fast as a
# generator expression).
_READY = ProducerState.READY
_MESSAGES = itemgetter(2)
_ENTRY = itemgetter(3)


class Producer:
    __slots__ = (
        "_batch",
        "_batch_has_txn",
        "_receipts",
        "access_mode",
        "broker_throttle",
        "bytes_in",
        "cnx",
        "connected_since",
        "epoch",
        "is_generated_name",
        "metadata",
        "msg_in",
        "name",
        "pending",
        "producer_id",
        "replicator",
        "schema_version",
        "state",
        "topic",
        "topic_epoch",
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
        # A geo-replicator of another cluster: deduplication goes by the original producers.
        self.replicator = name.startswith(REPLICATOR_PREFIX)
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
        self._batch: list[QueuedSend] = []  # SENDs of the current read, stored together by flush()
        self._batch_has_txn = False  # a SEND of _batch is in a transaction (flush cuts it at each change)
        self._receipts = commands.ReceiptEncoder(producer_id)
        # The broker-wide publish rate limit (None: none configured, nothing to do per publish; given later when
        # one is set while the broker runs).
        self.broker_throttle = topic.service.broker_publish_throttle

    @property
    def access_mode_name(self) -> str:
        return ACCESS_MODE_NAMES.get(self.access_mode, "Shared")

    def publish(self, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes,
                advances_sequence: bool = True, txn: TxnID | None = None) -> bool:
        """Queue ``entry`` for the next ``flush()``; True when it opened a new batch.

        The connection calls ``flush()`` once the frames of the current read are routed (or
        before any other command, or every SENDS_PER_APPEND SENDs), so the SENDs of one read go
        to storage together: one append, one completion. Once the receipt or error of each is
        written, the connection hears ``sends_finished``. ``advances_sequence`` is False for
        chunks other than the last one of a message: they share the message's sequence id, so
        only the last chunk may move deduplication state. ``txn``: a transactional SEND, stored through the topic's
        transaction buffer.
        """
        self._batch.append((sequence_id, highest_sequence_id, num_messages, entry, advances_sequence, txn))
        if txn is not None:
            self._batch_has_txn = True
        return len(self._batch) == 1

    def publish_many(self, sends: list[QueuedSend]) -> bool:
        """Queue ``sends`` (as ``publish`` queues one, none in a transaction) for the next
        ``flush()``; True when they opened a new batch."""
        batch = self._batch
        batch += sends
        return len(batch) == len(sends)

    def flush(self) -> None:
        batch = self._batch
        if not batch:
            return
        self._batch = []
        has_txn, self._batch_has_txn = self._batch_has_txn, False
        cnx = self.cnx
        topic = self.topic
        error = None
        if self.state is not _READY:
            error = (E.PersistenceError, "Producer is closed")
        elif topic.terminated_at is not None:
            error = (E.TopicTerminatedError, f"Topic {topic.name} was already terminated")
        if error is not None:
            cnx.write_many([commands.send_error(self.producer_id, seq, error[0], error[1]) for seq, *_ in batch])
            cnx.sends_finished(len(batch), sum(len(b[3]) for b in batch))
            return
        dedup = topic.deduplication_enabled
        if dedup:
            batch = self._drop_duplicates(batch)
            if not batch:
                return
        for run in _runs_by_transaction(batch) if has_txn else (batch,):
            entries = list(map(_ENTRY, run))
            self._store(run, entries, sum(map(_MESSAGES, run)), sum(map(len, entries)), dedup, run[0][5])

    def can_store_at_once(self) -> bool:
        """Whether a run of plain SENDs may go to ``store_run`` rather than be queued: none of this
        producer's are queued, deduplication is off (it answers some SENDs itself), the producer is
        open and the topic not terminated (``flush`` answers those)."""
        topic = self.topic
        return (not self._batch and self.state is _READY and topic.terminated_at is None
                and not topic.deduplication_enabled)

    def store_run(self, sends: list[RunSend], entries: list[bytes], nbytes: int) -> None:
        """Store a run of plain SENDs at once (``entries``: their payloads, ``nbytes`` in all), as
        ``flush`` would store them queued, without building and taking apart a batch: the
        connection's path for a read that ends with one producer's run when nothing was queued
        before it (the common case). Only where ``can_store_at_once()``."""
        self._store(sends, entries, sum(map(_MESSAGES, sends)), nbytes, False, None)

    def _store(self, run: list[QueuedSend] | list[RunSend], entries: list[bytes], num_messages: int, nbytes: int,
               dedup: bool, txn: TxnID | None) -> None:
        """Hand ``run``'s entries to the topic (one append); its receipts are written when stored."""
        self.pending += len(run)
        self.msg_in += num_messages
        self.bytes_in += nbytes
        topic, cnx = self.topic, self.cnx
        topic.publish_entries(self, entries, num_messages, nbytes, partial(self._stored, run, nbytes, dedup), txn)
        topic.publish_throttle.record(cnx, num_messages, nbytes)
        if self.broker_throttle is not None:
            self.broker_throttle.record(cnx, num_messages, nbytes)

    def _dedup_key(self, send: QueuedSend) -> tuple[str, int]:
        """(producer name, highest sequence id) deduplication goes by: this producer's, or for a
        replicator (``pulsar.repl.<cluster>``) the original producer's, from the message's
        metadata, as Pulsar does."""
        if not self.replicator:
            return self.name, send[1]
        md = read_entry_metadata(send[3])
        highest = md.sequence_id + max(1, md.num_messages_in_batch) - 1
        if md.HasField("highest_sequence_id"):
            highest = max(highest, md.highest_sequence_id)
        return md.producer_name, highest

    def _drop_duplicates(self, batch: list[QueuedSend]) -> list[QueuedSend]:
        """Answer the SENDs deduplication recognises at once; the rest are to be stored."""
        topic, cnx = self.topic, self.cnx
        pushed: dict[str, int] = {}  # what this batch pushes, per producer name
        kept: list[QueuedSend] = []
        for send in batch:
            seq, highest, _, entry, advances, _txn = send
            if advances:
                name, key_highest = self._dedup_key(send)
                if key_highest <= topic.sequence_persisted.get(name, -1):
                    # Already stored: acknowledge without storing again; Pulsar answers with id (-1,-1).
                    cnx.write(commands.send_receipt(self.producer_id, seq, -1, -1, highest))
                    cnx.sends_finished(1, len(entry))
                    continue
                if key_highest <= pushed.get(name, topic.sequence_pushed.get(name, -1)):
                    cnx.write(commands.send_error(self.producer_id, seq, E.PersistenceError,
                                                  "Duplicate of a message whose persistence is not yet known"))
                    cnx.sends_finished(1, len(entry))
                    continue
                pushed[name] = key_highest
            kept.append(send)
        topic.sequence_pushed.update(pushed)
        return kept

    def _stored(self, batch: list[QueuedSend] | list[RunSend], nbytes: int, dedup: bool, first: Position | None,
                exc: BaseException | None) -> None:
        self.pending -= len(batch)
        cnx = self.cnx
        if first is None:
            cnx.write_many([commands.send_error(self.producer_id, seq, E.PersistenceError,
                                                f"Failed to persist message: {exc}") for seq, *_ in batch])
            cnx.sends_finished(len(batch), nbytes)
            if isinstance(exc, LedgerFencedError):
                self.topic.match_kind(self.topic.service.ledger_fenced, lambda _: None)
            return
        ledger_id, entry_id = first
        step = 1 if self.topic.consecutive_positions else 0
        cnx.write_many(self._receipts.encode_many(batch, ledger_id, entry_id, step))
        if dedup:
            topic = self.topic
            persisted = topic.sequence_persisted
            for send in cast("list[QueuedSend]", batch):  # (a run stored by store_run is never deduplicated)
                if send[4]:
                    name, highest = self._dedup_key(send)
                    if highest > persisted.get(name, -1):
                        persisted[name] = highest
            topic.deduplicated_entries_stored(len(batch), Position(ledger_id, entry_id + (len(batch) - 1) * step))
        cnx.sends_finished(len(batch), nbytes)

    def close(self) -> None:
        self.state = ProducerState.CLOSED

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, id={self.producer_id}, topic={self.topic.name})"


def _runs_by_transaction(batch: list[QueuedSend]) -> list[list[QueuedSend]]:
    """The batch cut where the transaction changes (one append each; the ledger completes them
    in order, so receipts keep SEND order)."""
    runs: list[list[QueuedSend]] = [[batch[0]]]
    for send in batch[1:]:
        if send[5] == runs[-1][0][5]:
            runs[-1].append(send)
        else:
            runs.append([send])
    return runs
