"""The WebSocket API's JSON, and the messages it carries, as Pulsar's data classes write and read them
(ProducerMessage, ProducerAck, ConsumerMessage, ConsumerCommand, EndOfTopicResponse).

Message ids are the base64 of a MessageIdData (the Java client's MessageId.toByteArray: ledger and entry, the
partition when there is one, the batch index and size for a message of a batch). Times are ISO-8601 as Pulsar's
DateFormatter writes them.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from broker.java_text import iso_time_ms
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.commands import from_u64, to_u64
from broker.protocol.entry import entry_body, read_entry_metadata
from broker.protocol.errors import ProtocolError
from compression_codecs import DecompressionError, decompress

_U32 = struct.Struct(">I")

# WebSocketError's codes, in ProducerAck's "send-error:<code>".
FAILED_TO_DESERIALIZE_FROM_JSON = 3
PAYLOAD_ENCODING_ERROR = 7
UNKNOWN_ERROR = 8
# The WebSocket close code Pulsar's handlers close a session with when a command is not JSON (its
# WebSocketError.FailedToDeserializeFromJSON, 3, is not a code a WebSocket close may carry: Jetty sends 1011).
CLOSE_BAD_COMMAND = 1011
CLOSE_BAD_COMMAND_REASON = "Failed to de-serialize from JSON"


class BadRequest(ValueError):
    """A client's JSON that cannot be used: ``code`` is WebSocketError's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- message ids -----------------------------------------------------------------------------------------------------
class MessageId(NamedTuple):
    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = 0

    def encode(self) -> str:
        mid = pb.MessageIdData(ledgerId=to_u64(self.ledger_id), entryId=to_u64(self.entry_id))
        if self.partition >= 0:
            mid.partition = self.partition
        if self.batch_index >= 0:
            mid.batch_index = self.batch_index
        mid.batch_size = self.batch_size  # (the Java client's toByteArray sets it, 0 for a message of no batch)
        return base64.b64encode(mid.SerializeToString()).decode()

    @property
    def entry(self) -> tuple[int, int]:
        return self.ledger_id, self.entry_id

    @property
    def entry_key(self) -> tuple[int, int, int]:
        """The entry with its partition: what names it among the topics of a multi-topic consumer's WebSocket."""
        return self.ledger_id, self.entry_id, self.partition

    def data(self) -> pb.MessageIdData:
        """The entry's id on the wire (the batch index left out: redeliveries and acks name entries)."""
        mid = pb.MessageIdData(ledgerId=to_u64(self.ledger_id), entryId=to_u64(self.entry_id))
        if self.partition >= 0:
            mid.partition = self.partition
        return mid


def decode_message_id(text: Any) -> MessageId:
    """A base64 message id; BadRequest when it is not base64 or not a MessageIdData."""
    if not isinstance(text, str):
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, "messageId is missing or not a string")
    try:
        raw = base64.b64decode(text, validate=True)
        mid = pb.MessageIdData()
        mid.ParseFromString(raw)
        if not mid.IsInitialized():
            raise DecodeError("a MessageIdData needs its ledgerId and entryId")
    except (binascii.Error, ValueError, DecodeError) as exc:
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, f"Invalid message id: {exc}") from None
    return MessageId(from_u64(mid.ledgerId), from_u64(mid.entryId), mid.partition, mid.batch_index,
                     mid.batch_size if mid.HasField("batch_size") else 0)


# -- what a producer sends -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProducerMessage:
    payload: bytes
    context: str | None
    properties: dict[str, str]
    key: str | None
    replication_clusters: list[str] | None
    event_time: int | None
    deliver_at: int
    deliver_after_ms: int


def parse_producer_message(text: str) -> ProducerMessage:
    """ProducerHandler.onWebSocketText's reading; BadRequest (its error codes and words) when it cannot be sent.
    The context is read first, so an error about the payload carries it."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, str(exc)) from None
    if not isinstance(doc, dict):
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, "a message is a JSON object")
    context = _text(doc, "context")
    try:
        payload_text = doc.get("payload")
        if payload_text is None:
            raise _WithContext(PAYLOAD_ENCODING_ERROR, "payload is missing", context)
        if not isinstance(payload_text, str):
            raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, "payload is not a string")
        try:
            payload = base64.b64decode(payload_text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _WithContext(PAYLOAD_ENCODING_ERROR, f"Invalid Base64 message-payload error={exc}",
                               context) from None
        properties = doc.get("properties") or {}
        if not isinstance(properties, dict) or not all(isinstance(v, str | int | float | bool)
                                                       for v in properties.values()):
            raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, "properties is not an object of strings")
        clusters = doc.get("replicationClusters")
        if clusters is not None and (not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters)):
            raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, "replicationClusters is not a list of strings")
        event_time = None
        if doc.get("eventTime") is not None:
            event_time = _parse_time(doc["eventTime"], context)
        return ProducerMessage(payload, context, {str(k): _java_text(v) for k, v in properties.items()},
                               _text(doc, "key"), clusters, event_time, _long(doc, "deliverAt"),
                               _long(doc, "deliverAfterMs"))
    except _WithContext as exc:
        raise exc.bad() from None


class _WithContext(Exception):
    def __init__(self, code: int, message: str, context: str | None) -> None:
        super().__init__(message)
        self.code, self.message, self.context = code, message, context

    def bad(self) -> BadRequest:
        bad = BadRequest(self.code, self.message)
        bad.context = self.context  # type: ignore[attr-defined]
        return bad


def _text(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, f"{key} is not a string")
    return _java_text(value)


def _java_text(value: Any) -> str:
    """A JSON scalar as Jackson reads it into a String field."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _long(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, f"{key} is not a number")
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, f"{key} is not a number") from None
    if not -(2**63) <= number < 2**63:
        raise BadRequest(FAILED_TO_DESERIALIZE_FROM_JSON, f"{key} is out of range")
    return number


def _parse_time(value: Any, context: str | None) -> int:
    """DateFormatter.parse: ISO_OFFSET_DATE_TIME (an offset is required) to epoch milliseconds."""
    if not isinstance(value, str) or "T" not in value:
        raise _WithContext(PAYLOAD_ENCODING_ERROR, f"Text '{value}' could not be parsed at index 0", context)
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _WithContext(PAYLOAD_ENCODING_ERROR, f"Text '{value}' could not be parsed", context) from None
    if parsed.tzinfo is None:
        raise _WithContext(PAYLOAD_ENCODING_ERROR, f"Text '{value}' could not be parsed", context)
    return int(parsed.timestamp() * 1000)


def producer_ack(message_id: str | None, context: str | None, error: tuple[int, str] | None = None) -> str:
    """ProducerAck's JSON (Jackson: its fields in order, nulls left out; errorCode and schemaVersion always)."""
    doc: dict[str, Any] = {"result": "ok" if error is None else f"send-error:{error[0]}"}
    if error is not None:
        doc["errorMsg"] = error[1]
    if message_id is not None:
        doc["messageId"] = message_id
    if context is not None:
        doc["context"] = context
    doc["errorCode"] = 0
    doc["schemaVersion"] = 0
    return json.dumps(doc, separators=(",", ":"))


# -- what a consumer receives ----------------------------------------------------------------------------------------
class Delivered(NamedTuple):
    """One message of an entry, as the WebSocket client gets it."""

    id: MessageId
    payload: bytes
    metadata: pb.MessageMetadata
    single: pb.SingleMessageMetadata | None  # for a message of a batch
    redelivery_count: int

    def to_json(self) -> str:
        md, single = self.metadata, self.single
        source: Any = single if single is not None else md
        doc: dict[str, Any] = {
            "messageId": self.id.encode(),
            "payload": base64.b64encode(self.payload).decode(),
            "properties": {kv.key: kv.value for kv in source.properties},
            "publishTime": iso_time_ms(md.publish_time),
            "redeliveryCount": self.redelivery_count,
        }
        event_time = source.event_time if source.HasField("event_time") else 0
        if event_time:
            doc["eventTime"] = iso_time_ms(event_time)
        if source.HasField("partition_key"):
            doc["key"] = source.partition_key
        return json.dumps(doc, separators=(",", ":"))


class UnreadableEntry(Exception):
    """An entry the service cannot turn into messages (a batch it cannot take apart, a codec it cannot undo)."""


def split_entry(entry: bytes, cmd: pb.CommandMessage, partition: int) -> Iterator[Delivered]:
    """The messages of a MESSAGE's entry: one, or one per message of a batch still to be delivered (its ack_set)."""
    try:
        md = read_entry_metadata(entry)
        body = entry_body(entry)
        if md.compression != pb.NONE:
            body = decompress(md.compression, body, md.uncompressed_size)
    except (ProtocolError, DecompressionError) as exc:
        raise UnreadableEntry(str(exc)) from exc
    ledger, entry_id = from_u64(cmd.message_id.ledgerId), from_u64(cmd.message_id.entryId)
    redelivery = cmd.redelivery_count
    if not md.HasField("num_messages_in_batch"):
        yield Delivered(MessageId(ledger, entry_id, partition), body, md, None, redelivery)
        return
    count = md.num_messages_in_batch
    still = _ack_set_bits(cmd.ack_set, count)
    pos = 0
    for index in range(count):
        try:
            (size,) = _U32.unpack_from(body, pos)
            single = pb.SingleMessageMetadata()
            single.ParseFromString(body[pos + 4:pos + 4 + size])
            start = pos + 4 + size
            if start + single.payload_size > len(body):
                raise DecodeError("payload past the batch's end")
        except (struct.error, DecodeError) as exc:
            raise UnreadableEntry(f"message {index} of a batch of {count}: {exc}") from exc
        pos = start + single.payload_size
        if still is not None and index not in still:
            continue  # (acknowledged already: batch-index acks)
        yield Delivered(MessageId(ledger, entry_id, partition, index, count), body[start:pos], md, single,
                        redelivery)


def _ack_set_bits(ack_set: Any, count: int) -> set[int] | None:
    """The batch indexes an ack_set says are still to be delivered (None: all of them)."""
    if not ack_set:
        return None
    words = list(ack_set)
    return {i for i in range(count) if i // 64 < len(words) and (words[i // 64] >> (i % 64)) & 1}


def end_of_topic(reached: bool) -> str:
    return json.dumps({"endOfTopic": reached}, separators=(",", ":"))
