"""Encoders: build broker -> client commands and frame them into bytes.

Every function returns the complete frame. Only commands the C++ 4.2 client accepts are built here
(see shared/docs/PROTOCOL.md section 4): sending it anything else closes its connection.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.varint import SMALL_VARINTS as _SMALL_VARINTS
from broker.protocol.varint import U64_MASK
from broker.protocol.varint import varint as _varint

_HEADER = struct.Struct(">II")
# Long.MAX_VALUE: what Java clients put in a message id's ledger and entry for MessageId.latest, and
# the largest position an admin call may name.
INT64_MAX = (1 << 63) - 1
# request_id used when the broker itself initiates CLOSE_PRODUCER / CLOSE_CONSUMER (-1 as u64).
BROKER_REQUEST_ID = U64_MASK

T = pb.BaseCommand.Type


def to_u64(value: int) -> int:
    """Clients carry -1 (earliest) and INT64_MAX in uint64 fields: store them two's complement."""
    return value & U64_MASK


def from_u64(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value


def frame(cmd: pb.BaseCommand) -> bytes:
    body = cmd.SerializeToString()
    return _HEADER.pack(len(body) + 4, len(body)) + body


def frame_with_payload(cmd: pb.BaseCommand, payload: bytes) -> bytes:
    body = cmd.SerializeToString()
    return b"".join((_HEADER.pack(len(body) + 4 + len(payload), len(body)), body, payload))


def message_id(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1) -> pb.MessageIdData:
    mid = pb.MessageIdData(ledgerId=to_u64(ledger_id), entryId=to_u64(entry_id))
    if partition >= 0:
        mid.partition = partition
    if batch_index >= 0:
        mid.batch_index = batch_index
    return mid


def connected(server_version: str, protocol_version: int, max_message_size: int) -> bytes:
    cmd = pb.BaseCommand(type=T.CONNECTED)
    c = cmd.connected
    c.server_version = server_version
    c.protocol_version = protocol_version
    c.max_message_size = max_message_size
    # What the Java client reads (ClientCnx): PIP-344 partition metadata without auto-creation and
    # PIP-145 topic-list watchers are served (its pattern consumers then rely on WATCH_TOPIC_UPDATE).
    c.feature_flags.supports_get_partitioned_metadata_without_auto_creation = True
    c.feature_flags.supports_topic_watchers = True
    return frame(cmd)


def ping() -> bytes:
    cmd = pb.BaseCommand(type=T.PING)
    cmd.ping.SetInParent()
    return frame(cmd)


def pong() -> bytes:
    cmd = pb.BaseCommand(type=T.PONG)
    cmd.pong.SetInParent()
    return frame(cmd)


PONG = pong()
PING = ping()


def auth_challenge(method: str, data: bytes, protocol_version: int, server_version: str | None = None) -> bytes:
    """Ask the client for (fresh) credentials; it answers with AUTH_RESPONSE. Pulsar's broker names no
    ``server_version`` in it (the clients read only the challenge)."""
    cmd = pb.BaseCommand(type=T.AUTH_CHALLENGE)
    c = cmd.authChallenge
    if server_version is not None:
        c.server_version = server_version
    c.challenge.auth_method_name = method
    c.challenge.auth_data = data
    c.protocol_version = protocol_version
    return frame(cmd)


def error(request_id: int, code: int, message: str) -> bytes:
    cmd = pb.BaseCommand(type=T.ERROR)
    cmd.error.request_id = to_u64(request_id)
    cmd.error.error = code  # type: ignore[assignment]
    cmd.error.message = message
    return frame(cmd)


def success(request_id: int, schema: pb.Schema | None = None) -> bytes:
    cmd = pb.BaseCommand(type=T.SUCCESS)
    cmd.success.request_id = request_id
    if schema is not None:
        cmd.success.schema.CopyFrom(schema)
    return frame(cmd)


def producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int,
    schema_version: bytes,
    topic_epoch: int | None = None,
    producer_ready: bool = True,
) -> bytes:
    cmd = pb.BaseCommand(type=T.PRODUCER_SUCCESS)
    ps = cmd.producer_success
    ps.request_id = request_id
    ps.producer_name = producer_name
    ps.last_sequence_id = last_sequence_id
    ps.schema_version = schema_version
    if topic_epoch is not None:
        ps.topic_epoch = topic_epoch
    ps.producer_ready = producer_ready
    return frame(cmd)


# BaseCommand{type = SEND_RECEIPT (field 1, varint 7), send_receipt = field 7 (length-delimited)}
_RECEIPT_PREFIX = b"\x08\x07\x3a"


def send_receipt(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                 highest_sequence_id: int | None = None) -> bytes:
    """SEND_RECEIPT, encoded by hand: it is written once per SEND, the hottest reply of all.

    Byte-for-byte what protobuf would produce (checked by tests/unit/test_codec.py): fields in
    number order, producer_id=1, sequence_id=2, message_id=3 {ledgerId=1, entryId=2},
    highest_sequence_id=4.
    """
    mid = b"\x08" + _varint(ledger_id) + b"\x10" + _varint(entry_id)
    body = b"".join((b"\x08", _varint(producer_id), b"\x10", _varint(sequence_id), b"\x1a",
                     _varint(len(mid)), mid,
                     b"" if highest_sequence_id is None else b"\x20" + _varint(highest_sequence_id)))
    cmd = _RECEIPT_PREFIX + _varint(len(body)) + body
    return _HEADER.pack(len(cmd) + 4, len(cmd)) + cmd


# A varint's byte holding the 7 bits i when more bytes follow.
_CONTINUED = [bytes((i | 0x80,)) for i in range(0x80)]
# The frame head of a SEND_RECEIPT whose body is n bytes (n < 128): sizes, prefix, body length.
_RECEIPT_HEADS = [_HEADER.pack(n + 8, n + 4) + _RECEIPT_PREFIX + _SMALL_VARINTS[n] for n in range(0x80)]


class ReceiptEncoder:
    """SEND_RECEIPTs of one producer, encoded like ``send_receipt`` with the producer id and the
    ledger id prepared once (they rarely change), and the highest sequence id always present."""

    __slots__ = ("_head", "_ledger_id", "_ledger_part")

    def __init__(self, producer_id: int) -> None:
        self._head = b"\x08" + _varint(producer_id) + b"\x10"
        self._ledger_id: int | None = None
        self._ledger_part = b""

    def encode(self, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int) -> bytes:
        """One receipt: its three varints written as they are (``encode_many``'s shared tails pay off
        from the second receipt of a run on)."""
        if ledger_id != self._ledger_id:
            self._ledger_id = ledger_id
            self._ledger_part = b"\x08" + _varint(ledger_id) + b"\x10"
        head, ledger_part = self._head, self._ledger_part
        seq, entry = _varint(sequence_id), _varint(entry_id)
        highest = seq if highest_sequence_id == sequence_id else _varint(highest_sequence_id)
        # (As in encode_many: every length here is below 128.)
        return b"".join((_RECEIPT_HEADS[len(head) + 3 + len(ledger_part) + len(seq) + len(entry) + len(highest)],
                         head, seq, b"\x1a", _SMALL_VARINTS[len(ledger_part) + len(entry)], ledger_part, entry,
                         b"\x20", highest))

    def encode_many(self, sends: Sequence[tuple[Any, ...]], ledger_id: int, first_entry_id: int,
                    step: int) -> list[bytes]:
        """The receipts of ``sends`` ((sequence id, highest sequence id, ...) each), stored from
        entry ``first_entry_id`` on, ``step`` entries apart (0: all in one entry)."""
        if len(sends) == 1:  # (a batching client's SEND, stored alone)
            send = sends[0]
            return [self.encode(send[0], ledger_id, first_entry_id, send[1])]
        if ledger_id != self._ledger_id:
            self._ledger_id = ledger_id
            self._ledger_part = b"\x08" + _varint(ledger_id) + b"\x10"
        head, ledger_part, small, varint, heads = self._head, self._ledger_part, _SMALL_VARINTS, _varint, _RECEIPT_HEADS
        continued = _CONTINUED
        join = b"".join
        # A body is this plus its sequence id's, entry id's and highest sequence id's varints.
        fixed = len(head) + 3 + len(ledger_part)
        ledger_len = len(ledger_part)
        out: list[bytes] = []
        append = out.append
        # A varint of v >= 128 is v's low 7 bits with the continuation bit, then the varint of
        # v >> 7: that tail changes once in 128 consecutive ids (a stored batch's entry ids are
        # consecutive, its sequence ids mostly), so it is encoded once for them. Written out for
        # both ids: a call per varint would add ~15% to a receipt.
        seq_high = entry_high = -1
        seq_tail = entry_tail = b""
        entry_id = first_entry_id
        for send in sends:
            sequence_id = send[0]
            if 0 <= sequence_id < 0x80:
                seq = small[sequence_id]
            elif 0 < sequence_id < 1 << 64:
                if sequence_id >> 7 != seq_high:
                    seq_high = sequence_id >> 7
                    seq_tail = varint(seq_high)
                seq = continued[sequence_id & 0x7F] + seq_tail
            else:
                seq = varint(sequence_id)
            if 0 <= entry_id < 0x80:
                entry = small[entry_id]
            elif 0 < entry_id < 1 << 64:
                if entry_id >> 7 != entry_high:
                    entry_high = entry_id >> 7
                    entry_tail = varint(entry_high)
                entry = continued[entry_id & 0x7F] + entry_tail
            else:
                entry = varint(entry_id)
            highest = seq if send[1] == sequence_id else varint(send[1])
            # Every length here is below 128 (the body is at most 57 bytes): one-byte varints.
            append(join((heads[fixed + len(seq) + len(entry) + len(highest)], head, seq, b"\x1a",
                         small[ledger_len + len(entry)], ledger_part, entry, b"\x20", highest)))
            entry_id += step
        return out


def send_receipt_protobuf(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                          highest_sequence_id: int | None = None) -> bytes:
    """The reference encoding of SEND_RECEIPT through protobuf (tests compare the two)."""
    cmd = pb.BaseCommand(type=T.SEND_RECEIPT)
    r = cmd.send_receipt
    r.producer_id = producer_id
    r.sequence_id = sequence_id
    r.message_id.ledgerId = to_u64(ledger_id)
    r.message_id.entryId = to_u64(entry_id)
    if highest_sequence_id is not None:
        r.highest_sequence_id = highest_sequence_id
    return frame(cmd)


def send_error(producer_id: int, sequence_id: int, code: int, message: str) -> bytes:
    cmd = pb.BaseCommand(type=T.SEND_ERROR)
    e = cmd.send_error
    e.producer_id = producer_id
    e.sequence_id = sequence_id
    e.error = code  # type: ignore[assignment]
    e.message = message
    return frame(cmd)


def close_producer(producer_id: int) -> bytes:
    cmd = pb.BaseCommand(type=T.CLOSE_PRODUCER)
    cmd.close_producer.producer_id = producer_id
    cmd.close_producer.request_id = BROKER_REQUEST_ID
    return frame(cmd)


def reached_end_of_topic(consumer_id: int) -> bytes:
    cmd = pb.BaseCommand(type=T.REACHED_END_OF_TOPIC)
    cmd.reachedEndOfTopic.consumer_id = consumer_id
    return frame(cmd)


def close_consumer(consumer_id: int) -> bytes:
    cmd = pb.BaseCommand(type=T.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    cmd.close_consumer.request_id = BROKER_REQUEST_ID
    return frame(cmd)


def lookup_connect(request_id: int, broker_url: str, broker_url_tls: str | None = None,
                   through_service_url: bool = False) -> bytes:
    """Connect to this broker; ``through_service_url``: by the URL the client looked up with, not the one named
    (Pulsar's standalone says so when it advertises a loopback address)."""
    cmd = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
    r = cmd.lookupTopicResponse
    r.request_id = request_id
    r.response = pb.CommandLookupTopicResponse.Connect  # must be explicit: the client checks presence
    r.brokerServiceUrl = broker_url
    if broker_url_tls:
        r.brokerServiceUrlTls = broker_url_tls
    r.authoritative = True
    r.proxy_through_service_url = through_service_url  # (set either way, as Pulsar's Commands.newLookupResponse)
    return frame(cmd)


def lookup_redirect(request_id: int, broker_url: str | None, broker_url_tls: str | None,
                    authoritative: bool) -> bytes:
    """Look up again at that broker (cluster mode); ``authoritative``: the leader picked it, which then takes the
    bundle without asking the leader again."""
    cmd = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
    r = cmd.lookupTopicResponse
    r.request_id = request_id
    r.response = pb.CommandLookupTopicResponse.Redirect
    if broker_url:
        r.brokerServiceUrl = broker_url
    if broker_url_tls:
        r.brokerServiceUrlTls = broker_url_tls
    r.authoritative = authoritative
    r.proxy_through_service_url = False
    return frame(cmd)


def lookup_failed(request_id: int, code: int, message: str) -> bytes:
    cmd = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
    r = cmd.lookupTopicResponse
    r.request_id = request_id
    r.response = pb.CommandLookupTopicResponse.Failed
    r.error = code  # type: ignore[assignment]
    r.message = message
    return frame(cmd)


def partitioned_metadata(request_id: int, partitions: int) -> bytes:
    cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
    r = cmd.partitionMetadataResponse
    r.request_id = request_id
    r.partitions = partitions
    r.response = pb.CommandPartitionedTopicMetadataResponse.Success  # = 0, still must be present
    return frame(cmd)


def partitioned_metadata_failed(request_id: int, code: int, message: str) -> bytes:
    cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
    r = cmd.partitionMetadataResponse
    r.request_id = request_id
    r.response = pb.CommandPartitionedTopicMetadataResponse.Failed
    r.error = code  # type: ignore[assignment]
    r.message = message
    return frame(cmd)


def message(consumer_id: int, ledger_id: int, entry_id: int, partition: int, redelivery_count: int,
            entry: bytes, ack_set: list[int] | None = None) -> bytes:
    """MESSAGE carrying ``entry`` verbatim, as one buffer (see ``message_header``)."""
    return message_header(consumer_id, ledger_id, entry_id, partition, redelivery_count, len(entry), ack_set) + entry


def message_header(consumer_id: int, ledger_id: int, entry_id: int, partition: int, redelivery_count: int,
                   entry_size: int, ack_set: list[int] | None = None) -> bytes:
    """Everything of a MESSAGE frame before its ``entry_size`` bytes of entry, encoded by hand.

    Dispatch writes this and the stored entry as two buffers of one writev, so the entry is never
    copied into a frame (nor once per subscription when it fans out).

    Byte-for-byte what protobuf gives (checked by tests/unit/test_codec.py): BaseCommand
    {type = MESSAGE (9), message = field 9 {consumer_id = 1, message_id = 2 {ledgerId = 1,
    entryId = 2, partition = 3}, redelivery_count = 3 (when > 0), ack_set = 4 (proto2 repeated
    int64: not packed, one tag per word)}}.
    """
    mid = b"".join((b"\x08", _varint(ledger_id), b"\x10", _varint(entry_id), _partition_field(partition)))
    parts = [_consumer_field(consumer_id), b"\x12", _SMALL_VARINTS[len(mid)], mid]  # mid < 128 bytes
    if redelivery_count > 0:
        parts += (b"\x18", _varint(redelivery_count))
    if ack_set:
        for word in ack_set:
            parts += (b"\x20", _varint(word))
    body = b"".join(parts)
    cmd = _MESSAGE_PREFIX + _varint(len(body)) + body
    return _HEADER.pack(len(cmd) + 4 + entry_size, len(cmd)) + cmd


# BaseCommand{type = MESSAGE (field 1, varint 9), message = field 9 (length-delimited)}
_MESSAGE_PREFIX = b"\x08\x09\x4a"


@functools.lru_cache(maxsize=4096)
def _consumer_field(consumer_id: int) -> bytes:
    return b"\x08" + _varint(consumer_id)


@functools.lru_cache(maxsize=1024)
def _partition_field(partition: int) -> bytes:
    # int32 -1 (not partitioned) is a 10-byte varint: worth computing once.
    return b"\x18" + _varint(partition)


class MessageHeaderEncoder:
    """MESSAGE headers of one consumer, byte-for-byte ``message_header``'s, with what does not
    change from entry to entry prepared once: the consumer id and partition for the consumer's
    life, the ledger id while it stays the same. An entry with neither a redelivery count nor an
    ack_set (nearly all of them) costs one varint (its entry id), one pack and one join."""

    __slots__ = ("_consumer_id", "_ledger_id", "_partition", "_prefixes", "_tail")

    def __init__(self, consumer_id: int, partition: int) -> None:
        self._consumer_id = consumer_id
        self._partition = partition
        self._tail = _partition_field(partition)
        self._ledger_id: int | None = None
        # Length of the entry id's varint -> (the command up to that varint, the command's size).
        self._prefixes: dict[int, tuple[bytes, int]] = {}

    def header(self, ledger_id: int, entry_id: int, redelivery_count: int, entry_size: int,
               ack_set: list[int] | None = None) -> bytes:
        if redelivery_count > 0 or ack_set:
            return message_header(self._consumer_id, ledger_id, entry_id, self._partition, redelivery_count,
                                  entry_size, ack_set)
        if ledger_id != self._ledger_id:
            self._ledger_id = ledger_id
            self._prefixes = {}
        eid = _SMALL_VARINTS[entry_id] if 0 <= entry_id < 0x80 else _varint(entry_id)
        prefix = self._prefixes.get(len(eid))
        if prefix is None:
            prefix = self._prefixes[len(eid)] = self._prefix(ledger_id, len(eid))
        head, cmd_size = prefix
        return b"".join((_HEADER.pack(cmd_size + 4 + entry_size, cmd_size), head, eid, self._tail))

    def _prefix(self, ledger_id: int, eid_size: int) -> tuple[bytes, int]:
        ledger = b"\x08" + _varint(ledger_id) + b"\x10"
        mid_size = len(ledger) + eid_size + len(self._tail)
        body = _consumer_field(self._consumer_id) + b"\x12" + _SMALL_VARINTS[mid_size] + ledger  # mid < 128 bytes
        body_size = len(body) + eid_size + len(self._tail)
        head = _MESSAGE_PREFIX + _varint(body_size) + body
        return head, len(head) + eid_size + len(self._tail)


def message_protobuf(consumer_id: int, ledger_id: int, entry_id: int, partition: int, redelivery_count: int,
                     entry: bytes, ack_set: list[int] | None = None) -> bytes:
    """The reference encoding of MESSAGE through protobuf (tests compare the two)."""
    cmd = pb.BaseCommand(type=T.MESSAGE)
    m = cmd.message
    m.consumer_id = consumer_id
    mid = m.message_id
    mid.ledgerId = ledger_id
    mid.entryId = entry_id
    mid.partition = partition
    if redelivery_count > 0:
        m.redelivery_count = redelivery_count
    if ack_set:
        m.ack_set.extend(ack_set)
    return frame_with_payload(cmd, entry)


def active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    cmd = pb.BaseCommand(type=T.ACTIVE_CONSUMER_CHANGE)
    cmd.active_consumer_change.consumer_id = consumer_id
    cmd.active_consumer_change.is_active = is_active
    return frame(cmd)


def ack_response(consumer_id: int, request_id: int, code: int | None = None, message_text: str = "",
                 txn: tuple[int, int] | None = None) -> bytes:
    cmd = pb.BaseCommand(type=T.ACK_RESPONSE)
    r = cmd.ackResponse
    r.consumer_id = consumer_id
    r.request_id = request_id
    if txn is not None:
        r.txnid_most_bits, r.txnid_least_bits = txn
    if code is not None:
        r.error = code  # type: ignore[assignment]
        r.message = message_text
    return frame(cmd)


def get_last_message_id_response(request_id: int, last: pb.MessageIdData,
                                 mark_delete: tuple[int, int] | None) -> bytes:
    cmd = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID_RESPONSE)
    r = cmd.getLastMessageIdResponse
    r.request_id = request_id
    r.last_message_id.CopyFrom(last)
    if mark_delete is not None:
        r.consumer_mark_delete_position.ledgerId = to_u64(mark_delete[0])
        r.consumer_mark_delete_position.entryId = to_u64(mark_delete[1])
    return frame(cmd)


def topics_of_namespace(request_id: int, topics: list[str], topics_hash: str | None, changed: bool) -> bytes:
    cmd = pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    r = cmd.getTopicsOfNamespaceResponse
    r.request_id = request_id
    r.topics.extend(topics)
    r.filtered = False
    r.changed = changed
    if topics_hash is not None:
        r.topics_hash = topics_hash
    return frame(cmd)


def watch_topic_list_success(request_id: int, watcher_id: int, topics: list[str], topics_hash: str) -> bytes:
    cmd = pb.BaseCommand(type=T.WATCH_TOPIC_LIST_SUCCESS)
    r = cmd.watchTopicListSuccess
    r.request_id = request_id
    r.watcher_id = watcher_id
    r.topic.extend(topics)
    r.topics_hash = topics_hash
    return frame(cmd)


def watch_topic_update(watcher_id: int, new_topics: list[str], deleted_topics: list[str], topics_hash: str) -> bytes:
    cmd = pb.BaseCommand(type=T.WATCH_TOPIC_UPDATE)
    u = cmd.watchTopicUpdate
    u.watcher_id = watcher_id
    u.new_topics.extend(new_topics)
    u.deleted_topics.extend(deleted_topics)
    u.topics_hash = topics_hash
    return frame(cmd)


def get_schema_response(request_id: int, schema: pb.Schema, version: bytes) -> bytes:
    cmd = pb.BaseCommand(type=T.GET_SCHEMA_RESPONSE)
    r = cmd.getSchemaResponse
    r.request_id = request_id
    r.schema.CopyFrom(schema)
    r.schema_version = version
    return frame(cmd)


def get_schema_error(request_id: int, code: int, message_text: str) -> bytes:
    cmd = pb.BaseCommand(type=T.GET_SCHEMA_RESPONSE)
    r = cmd.getSchemaResponse
    r.request_id = request_id
    r.error_code = code  # type: ignore[assignment]
    r.error_message = message_text
    return frame(cmd)


def consumer_stats_response(request_id: int, **fields: object) -> bytes:
    cmd = pb.BaseCommand(type=T.CONSUMER_STATS_RESPONSE)
    r = cmd.consumerStatsResponse
    r.request_id = request_id
    for key, value in fields.items():
        setattr(r, key, value)
    return frame(cmd)


def consumer_stats_error(request_id: int, code: int, message_text: str) -> bytes:
    cmd = pb.BaseCommand(type=T.CONSUMER_STATS_RESPONSE)
    r = cmd.consumerStatsResponse
    r.request_id = request_id
    r.error_code = code  # type: ignore[assignment]
    r.error_message = message_text
    return frame(cmd)


# -- transactions (PIP-31): the coordinator's answers ------------------------------------------------

# Response type -> the BaseCommand field that carries it.
_TXN_RESPONSES: dict[int, str] = {
    T.TC_CLIENT_CONNECT_RESPONSE: "tcClientConnectResponse",
    T.NEW_TXN_RESPONSE: "newTxnResponse",
    T.ADD_PARTITION_TO_TXN_RESPONSE: "addPartitionToTxnResponse",
    T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE: "addSubscriptionToTxnResponse",
    T.END_TXN_RESPONSE: "endTxnResponse",
    T.END_TXN_ON_PARTITION_RESPONSE: "endTxnOnPartitionResponse",
    T.END_TXN_ON_SUBSCRIPTION_RESPONSE: "endTxnOnSubscriptionResponse",
}


def txn_response(kind: int, request_id: int, txn: tuple[int, int] | None = None,
                 code: int | None = None, message_text: str = "") -> bytes:
    """One of the coordinator's responses (``kind`` a *_RESPONSE type): the request id, the
    transaction id (most, least) where the response has one, and an error when ``code``."""
    cmd = pb.BaseCommand(type=kind)  # type: ignore[arg-type]
    r = getattr(cmd, _TXN_RESPONSES[kind])
    r.request_id = request_id
    if txn is not None:
        r.txnid_most_bits, r.txnid_least_bits = txn
    if code is not None:
        r.error = code
        r.message = message_text
    return frame(cmd)
