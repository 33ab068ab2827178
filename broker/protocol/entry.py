"""The stored-entry layout: the one module that splits an entry (or a SEND payload) open.

A SEND payload is stored verbatim as the entry and sent verbatim in MESSAGE. Its layout (all
integers big-endian):

    [0x0e02][size:u32][BrokerEntryMetadata]      optional; added by a broker, never by a client
    [0x0e01][crc32c:u32]                         optional; CRC32C of everything after it
    [metadataSize:u32][MessageMetadata][body]    body: the payload, compressed or batched as sent

The broker prepends broker-entry metadata (PIP-70) when ``brokerEntryMetadataInterceptors`` is
set (``with_broker_entry_metadata``); every reader below skips it, so a ledger written by another
broker is read too. A SEND payload with it is refused like any payload whose metadata cannot be
read. ``skip_broker_entry_metadata`` strips it for consumers that may not see it.

Two readers, for two kinds of input:

- ``parse_payload``: a SEND payload from a client, untrusted: every size is checked, the
  checksum verified, the metadata's required fields checked. Raises ProtocolError.
- ``metadata_span`` and what is built on it (``entry_meta``, ``read_entry_metadata``,
  ``entry_body``): a stored entry, validated when it was published, so only located and parsed.
  ``entry_meta`` runs once per dispatched entry: one slice compare, one unpack, one protobuf
  parse, no copy of the entry.

Sans-IO: no asyncio, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from typing import NamedTuple

from google.protobuf.message import DecodeError

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol import pulsar_markers_pb2 as mk
from broker.protocol.checksum import crc32c
from broker.protocol.errors import ProtocolError
from broker.protocol.limits import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_CRC_HEAD = MAGIC_CRC32C.to_bytes(2, "big")
_BROKER_META_HEAD = BROKER_ENTRY_METADATA_HEAD = MAGIC_BROKER_ENTRY_METADATA.to_bytes(2, "big")

# Marker types (MessageMetadata.marker_type) of replicated subscriptions: entries that are never
# delivered to consumers (replicated_subscriptions.py writes and reads them).
REQUEST = mk.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST
RESPONSE = mk.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
SNAPSHOT = mk.REPLICATED_SUBSCRIPTION_SNAPSHOT
UPDATE = mk.REPLICATED_SUBSCRIPTION_UPDATE

# Key_Shared routing key of a message with neither ordering_key nor partition_key (Pulsar's).
NONE_KEY = b"NONE_KEY"


# -- SEND payloads (untrusted) ----------------------------------------------------------------------

class ParsedPayload(NamedTuple):
    """A SEND payload split open. ``entry`` is the verbatim bytes to store and re-send."""

    metadata: pb.MessageMetadata
    # False when a checksum was present and did not match; True when it matched or was absent.
    checksum_ok: bool
    entry: bytes


def parse_payload(payload: bytes, verify: bool = True) -> ParsedPayload:
    """Split a SEND payload; raises ProtocolError when the metadata cannot be read.

    With ``verify`` the CRC32C (when present) is checked over everything after it.
    """
    n = len(payload)
    pos = 0
    checksum_ok = True
    if n >= 6 and _U16.unpack_from(payload, 0)[0] == MAGIC_CRC32C:
        (expected,) = _U32.unpack_from(payload, 2)
        pos = 6
        if verify:
            checksum_ok = crc32c(memoryview(payload)[6:]) == expected
    if n - pos < 4:
        raise ProtocolError("payload too short for the metadata size")
    (meta_size,) = _U32.unpack_from(payload, pos)
    if meta_size > n - pos - 4:
        raise ProtocolError(f"metadata size {meta_size} exceeds the payload")
    metadata = _parse_metadata(memoryview(payload)[pos + 4 : pos + 4 + meta_size])
    return ParsedPayload(metadata, checksum_ok, payload)


class SendChecks(NamedTuple):
    """What the broker checks of a SEND payload before storing it (``check_send_payload``)."""

    # False when a checksum was present and did not match; True when it matched or was absent.
    checksum_ok: bool
    # deliver_at_time - publish_time (ms) for a delayed message, else None.
    delivery_delay: int | None
    encrypted: bool  # has encryption_keys
    has_txn: bool  # the metadata carries txnid_most_bits
    last_chunk: bool  # not a chunk, or the last chunk of its message


# The checks of metadata of the common shape (no delivery time, encryption, transaction or chunk).
_COMMON_CHECKS = SendChecks(True, None, False, False, True)


# The common shape of a MessageMetadata, as clients serialize it (fields in number order):
# producer_name (1, read by hand: a length-prefixed ASCII string), then the fields below, each once,
# a varint of at most 9 bytes. Protobuf parses every such metadata (an unknown compression value is
# kept aside, not an error) with its required fields set, and none of the fields a SEND's checks look
# at (encryption, delivery time, transaction, chunk), nor any a stored entry's EntryMeta takes but the
# two the consume path captures (it then has no key, delivery time, marker, chunk or transaction).
# To accept another varint field, add its row.
_VARINT = rb"[\x80-\xff]{0,8}+[\x00-\x7f]"
# num_messages_in_batch when at most 4 bytes, so below 2**28 and read as protobuf reads an int32 (a
# longer one, or a negative one, goes to protobuf).
_BATCH_COUNT = rb"[\x80-\xff]{0,3}+[\x00-\x7f]"
_COMMON_METADATA_FIELDS: tuple[tuple[bytes, bool, bytes | None, bytes | None], ...] = (
    # (tag: field number << 3 | varint, as its varint bytes; required; what the produce path, then
    # the consume path, captures of its value, as a pattern, or None)
    (b"\x10", True, None, None),  # 2 sequence_id
    (b"\x18", True, None, _VARINT),  # 3 publish_time
    (b"\x40", False, None, None),  # 8 compression
    (b"\x48", False, None, None),  # 9 uncompressed_size
    (b"\x58", False, _BATCH_COUNT, _BATCH_COUNT),  # 11 num_messages_in_batch
    (b"\x60", False, None, None),  # 12 event_time
    (b"\xc0\x01", False, None, None),  # 24 highest_sequence_id
)
_PRODUCE, _CONSUME = 2, 3  # the columns of what each path captures


def _fields_pattern(column: int) -> re.Pattern[bytes]:
    """The fields after producer_name, one compiled pattern, with a group for each field the path of
    ``column`` reads (in table order)."""
    parts = []
    for tag, required, *captures in _COMMON_METADATA_FIELDS:
        captured = captures[column - _PRODUCE]
        field = re.escape(tag) + (b"(" + captured + b")" if captured is not None else _VARINT)
        parts.append(field if required else b"(?:" + field + b")?+")
    return re.compile(b"".join(parts))


# Recognised by one compiled pattern over the bytes, not by a walk in Python: per SEND the pattern
# took 1.7 us and a hand-written varint walk over the same fields 3.8 us (tests/unit/test_send_fast_path.py
# and test_entry_meta_fast_path.py hold both patterns to protobuf's answers). Possessive: a field's
# tag byte is never another's, so nothing is lost by not backtracking, and the matcher does less.
_COMMON_METADATA_TAIL = _fields_pattern(_PRODUCE)  # the produce path's: (num_messages_in_batch,)
_ENTRY_META_TAIL = _fields_pattern(_CONSUME)  # the consume path's: (publish_time, num_messages_in_batch)


def _common_match(pattern: re.Pattern[bytes], buf: bytes, pos: int, end: int) -> re.Match[bytes] | None:
    """``pattern``'s match of the fields after producer_name when buf[pos:end] is a MessageMetadata
    of the common shape above; None for any other (the caller then hands it to protobuf)."""
    if end - pos < 2 or buf[pos] != 0x0A or buf[pos + 1] >= 0x80:
        return None
    name_end = pos + 2 + buf[pos + 1]
    if name_end > end or not buf[pos + 2 : name_end].isascii():
        return None
    return pattern.fullmatch(buf, name_end, end)


# The least a message of a batch takes: its 4-byte size, then its SingleMessageMetadata, whose one
# required field (payload_size) takes 2 bytes, then its payload, which may be empty.
MIN_BATCHED_MESSAGE_SIZE = 6


def batch_fits(count: int, body_size: int, uncompressed_size: int) -> bool:
    """Whether a batch of ``count`` messages can be held by a body of ``body_size`` bytes that
    uncompresses to ``uncompressed_size`` (the larger of the two bounds it: a chunk's body is part
    of its message). A count beyond it is a lie that consumers would read past the payload on
    (the C++ client crashed on a batch that claimed 2**31-1 messages)."""
    return 0 <= count and count * MIN_BATCHED_MESSAGE_SIZE <= max(body_size, uncompressed_size)


_COPY_FOR_CRC = 16 * 1024


def plain_send_payloads(payloads: list[bytes], max_size: int) -> int:
    """How many payloads at the head of ``payloads`` are plain: at most ``max_size`` bytes, their
    CRC32C right (or absent), their metadata of the common shape and, for a batch, a count its body
    can hold (``batch_fits``), so that ``check_send_payload`` gives each ``_COMMON_CHECKS``. One
    loop for a run of SENDs (a call and a SendChecks per SEND cost ~0.9 us more); the first that is
    not plain ends the count, and ``check_send_payload`` tells what it is."""
    unpack = _U32.unpack_from
    count = 0
    for payload in payloads:
        n = len(payload)
        if n > max_size:
            break
        pos = 0
        if n >= 6 and payload.startswith(_CRC_HEAD):
            pos = 6
            # A small payload's tail is copied: cheaper than making a memoryview and slicing it.
            tail = payload[6:] if n <= _COPY_FOR_CRC else memoryview(payload)[6:]
            if crc32c(tail) != unpack(payload, 2)[0]:
                break
        if n - pos < 4:
            break
        end = pos + 4 + unpack(payload, pos)[0]
        if end > n:
            break
        m = _common_match(_COMMON_METADATA_TAIL, payload, pos + 4, end)
        if m is None:
            break
        # A batch whose body holds its count is plain; one whose count only what the body uncompresses
        # to can hold (rare: a very compressible batch) is checked by ``check_send_payload``.
        batch = m.group(1)
        if batch is not None and _varint_value(batch) * MIN_BATCHED_MESSAGE_SIZE > n - end:
            break
        count += 1
    return count


def check_send_payload(payload: bytes) -> SendChecks:
    """What a SEND's checks need of its payload; raises ProtocolError when the metadata cannot be
    read, as ``parse_payload`` does, or claims more messages in its batch than the payload can hold.
    A plain payload (``plain_send_payloads``) is recognised with no protobuf message built; any other
    goes through ``parse_payload``."""
    if plain_send_payloads([payload], len(payload)):
        return _COMMON_CHECKS
    parsed = parse_payload(payload)
    md = parsed.metadata
    if md.HasField("num_messages_in_batch"):
        offset, size = metadata_span(payload)
        if not batch_fits(md.num_messages_in_batch, len(payload) - offset - size, md.uncompressed_size):
            raise ProtocolError(f"a batch of {md.num_messages_in_batch} messages cannot be held by its "
                                f"{len(payload) - offset - size} bytes (uncompressed: {md.uncompressed_size})")
    return SendChecks(parsed.checksum_ok,
                      md.deliver_at_time - md.publish_time if md.HasField("deliver_at_time") else None,
                      len(md.encryption_keys) > 0,
                      md.HasField("txnid_most_bits"),
                      not md.HasField("chunk_id") or md.chunk_id == md.num_chunks_from_msg - 1)


def build_entry(metadata: bytes, body: bytes | memoryview) -> bytes:
    """An entry as clients send and the broker stores it: magic, CRC32C, metadata, body."""
    tail = b"".join((_U32.pack(len(metadata)), metadata, body))
    return _CRC_HEAD + _U32.pack(crc32c(tail)) + tail


# -- broker-entry metadata (PIP-70) ------------------------------------------------------------------

def with_broker_entry_metadata(entry: bytes, broker_timestamp: int | None, index: int | None) -> bytes:
    """``entry`` with BrokerEntryMetadata prepended (the fields that are not None)."""
    bem = pb.BrokerEntryMetadata()
    if broker_timestamp is not None:
        bem.broker_timestamp = broker_timestamp
    if index is not None:
        bem.index = index
    data = bem.SerializeToString()
    return b"".join((_BROKER_META_HEAD, _U32.pack(len(data)), data, entry))


def peek_broker_entry_metadata(entry: bytes) -> pb.BrokerEntryMetadata | None:
    """The BrokerEntryMetadata of a stored entry, None when it has none (or it cannot be read)."""
    if len(entry) < 6 or entry[:2] != _BROKER_META_HEAD:
        return None
    (size,) = _U32.unpack_from(entry, 2)
    bem = pb.BrokerEntryMetadata()
    try:
        bem.ParseFromString(memoryview(entry)[6 : 6 + size])  # type: ignore[arg-type]  # upb takes buffers
    except DecodeError:
        return None
    return bem


def skip_broker_entry_metadata(entry: bytes) -> bytes:
    """``entry`` without its BrokerEntryMetadata (itself when it has none)."""
    if entry[:2] != _BROKER_META_HEAD:
        return entry
    return entry[6 + _U32.unpack_from(entry, 2)[0] :]


# -- stored entries (validated when published) --------------------------------------------------------

def _after_broker_metadata(entry: bytes) -> int:
    """Offset of what follows the broker-entry metadata (the rare path: kept out of the hot one)."""
    pos: int = 6 + _U32.unpack_from(entry, 2)[0]
    return pos + 6 if entry[pos : pos + 2] == _CRC_HEAD else pos


def metadata_span(entry: bytes) -> tuple[int, int]:
    """(offset, size) of the MessageMetadata of a stored entry."""
    head = entry[:2]
    if head == _CRC_HEAD:
        pos = 6
    elif head == _BROKER_META_HEAD:
        pos = _after_broker_metadata(entry)
    else:
        pos = 0
    return pos + 4, _U32.unpack_from(entry, pos)[0]


def read_entry_metadata(entry: bytes) -> pb.MessageMetadata:
    """The whole MessageMetadata of a stored entry; ProtocolError if it cannot be read (as
    ``parse_payload`` would say: the callers read entries they did not just validate)."""
    start, size = metadata_span(entry)
    return _parse_metadata(memoryview(entry)[start : start + size])


def _parse_metadata(data: memoryview) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(data)  # type: ignore[arg-type]  # upb takes buffers
    except DecodeError as exc:
        raise ProtocolError(f"undecodable message metadata: {exc}") from None
    if not metadata.IsInitialized():
        raise ProtocolError("message metadata lacks required fields")
    return metadata


def entry_body(entry: bytes) -> bytes:
    """What follows the metadata of a stored entry (its payload, compressed or batched as sent)."""
    start, size = metadata_span(entry)
    return entry[start + size :]


class EntryMeta(NamedTuple):
    """What the broker needs to know about a stored entry to dispatch it, read once from its
    MessageMetadata."""

    # Permits it costs: num_messages_in_batch for a batch, else 1 (a chunk is one message).
    num_messages: int
    # Key_Shared routing key: ordering_key, else partition_key (decoded if base64), else NONE_KEY.
    sticky_key: bytes
    # Absolute ms before which Shared/Key_Shared must hold it back; 0 when not delayed.
    deliver_at_time: int
    # Marker entries (replication/txn markers) are never delivered to clients.
    is_marker: bool
    publish_time: int
    # True when the metadata has num_messages_in_batch (the client then reads it as a batch).
    is_batch: bool
    marker_type: int = 0
    # A chunk of a chunked message (PIP-37): the message's uuid, this chunk's index, how many
    # chunks the message has. num_chunks is 0 for an entry that is not a chunk.
    chunk_uuid: str = ""
    chunk_id: int = 0
    num_chunks: int = 0
    # (txnid_most_bits, txnid_least_bits) of a transactional entry or transaction marker.
    txn: tuple[int, int] | None = None


# -- the consume path's fast reader (see entry_meta) --------------------------------------------------

_new_tuple = tuple.__new__  # builds a NamedTuple without its keyword-taking __new__ (the hot path)


def _varint_value(data: bytes) -> int:
    value = shift = 0
    for b in data:
        value |= (b & 0x7F) << shift
        shift += 7
    return value


def _common_entry_meta(entry: bytes, pos: int, end: int) -> EntryMeta | None:
    """The EntryMeta of metadata entry[pos:end] of the common shape above, read by a pattern
    instead of protobuf (4-5x cheaper; per dispatched entry, so per message when unbatched);
    None for any other shape, which ``entry_meta`` then parses. Property-tested against it."""
    if end > len(entry):
        return None
    m = _common_match(_ENTRY_META_TAIL, entry, pos, end)
    if m is None:
        return None
    publish_time, batch = m.groups()
    if batch is None:
        return _new_tuple(EntryMeta, (1, NONE_KEY, 0, False, _varint_value(publish_time), False, 0, "", 0, 0, None))
    return _new_tuple(EntryMeta, (_varint_value(batch), NONE_KEY, 0, False, _varint_value(publish_time), True,
                                  0, "", 0, 0, None))


def entry_meta(entry: bytes) -> EntryMeta:
    """Parsed once per dispatched entry (the hot path: metadata_span inlined). Metadata of the
    common shape is read by ``_common_entry_meta``; any other by protobuf."""
    head = entry[:2]
    if head == _CRC_HEAD:
        pos = 6
    elif head == _BROKER_META_HEAD:
        pos = _after_broker_metadata(entry)
    else:
        pos = 0
    (size,) = _U32.unpack_from(entry, pos)
    common = _common_entry_meta(entry, pos + 4, pos + 4 + size)
    return common if common is not None else _parsed_entry_meta(memoryview(entry)[pos + 4 : pos + 4 + size])


def entry_messages(entry: bytes) -> int:
    """``entry_meta(entry).num_messages`` when its metadata is of the common shape (then it is no
    marker, no transaction's entry, no delayed message and no chunk), read without building an
    EntryMeta (the publish time is not decoded); 0 for any other shape: ask ``entry_meta``. For a
    dispatcher that needs only the count of a plain entry (``entry_meta`` inlined: per dispatched
    entry)."""
    head = entry[:2]
    if head == _CRC_HEAD:
        pos = 6
    elif head == _BROKER_META_HEAD:
        pos = _after_broker_metadata(entry)
    else:
        pos = 0
    start = pos + 4
    end = start + _U32.unpack_from(entry, pos)[0]
    if end > len(entry):
        return 0
    m = _common_match(_COMMON_METADATA_TAIL, entry, start, end)
    if m is None:
        return 0
    batch = m[1]
    if batch is None:
        return 1
    return batch[0] if len(batch) == 1 else _varint_value(batch)


def _parsed_entry_meta(metadata: memoryview) -> EntryMeta:
    """The EntryMeta of any MessageMetadata, through protobuf."""
    md = pb.MessageMetadata()
    md.ParseFromString(metadata)  # type: ignore[arg-type]  # upb takes buffers
    is_batch = md.HasField("num_messages_in_batch")
    # Absent and empty keys mean the same (no key); deliver_at_time defaults to 0.
    key = md.ordering_key
    if not key:
        partition_key: str | bytes = md.partition_key  # (bytes: not valid UTF-8)
        if not partition_key:
            key = NONE_KEY
        elif isinstance(partition_key, bytes):  # (not valid UTF-8: read as Java decodes it, see text.mend_strings)
            key = partition_key.decode("utf-8", "replace").encode()
        else:
            key = partition_key.encode()
        if partition_key and md.partition_key_b64_encoded:
            try:
                # (Java's basic decoder: padding optional, nothing outside the alphabet)
                key = base64.b64decode(key + b"=" * (-len(key) % 4), validate=True)
            except binascii.Error:  # (Pulsar's Commands.peekStickyKey: any failure is NONE_KEY)
                key = NONE_KEY
    return EntryMeta(
        num_messages=md.num_messages_in_batch if is_batch else 1,
        sticky_key=key,
        deliver_at_time=md.deliver_at_time,
        is_marker=md.HasField("marker_type"),
        publish_time=md.publish_time,
        is_batch=is_batch,
        marker_type=md.marker_type,
        chunk_uuid=md.uuid,
        chunk_id=md.chunk_id,
        num_chunks=md.num_chunks_from_msg if md.num_chunks_from_msg > 1 else 0,
        txn=(md.txnid_most_bits, md.txnid_least_bits) if md.HasField("txnid_most_bits") else None,
    )
