"""What a dispatcher needs to know about a stored entry, read from its MessageMetadata."""

from __future__ import annotations

import base64
import struct
from typing import NamedTuple

from broker.protocol import pulsar_api_pb2 as pb

NONE_KEY = b"NONE_KEY"


class EntryMeta(NamedTuple):
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


_U32 = struct.Struct(">I")
_CHECKSUM_MAGIC = b"\x0e\x01"


def entry_meta(entry: bytes) -> EntryMeta:
    """Parsed once per dispatched entry. Stored entries were validated when they were published
    (checksum, metadata with its required fields), so this only locates and parses the metadata."""
    pos = 6 if entry[:2] == _CHECKSUM_MAGIC else 0
    (size,) = _U32.unpack_from(entry, pos)
    md = pb.MessageMetadata()
    md.ParseFromString(memoryview(entry)[pos + 4 : pos + 4 + size])  # type: ignore[arg-type]  # upb takes buffers
    is_batch = md.HasField("num_messages_in_batch")
    # Absent and empty keys mean the same (no key); deliver_at_time defaults to 0.
    key = md.ordering_key
    if not key:
        partition_key = md.partition_key
        if partition_key:
            key = base64.b64decode(partition_key) if md.partition_key_b64_encoded else partition_key.encode()
        else:
            key = NONE_KEY
    return EntryMeta(
        num_messages=md.num_messages_in_batch if is_batch else 1,
        sticky_key=key,
        deliver_at_time=md.deliver_at_time,
        is_marker=md.HasField("marker_type"),
        publish_time=md.publish_time,
        is_batch=is_batch,
        marker_type=md.marker_type,
    )
