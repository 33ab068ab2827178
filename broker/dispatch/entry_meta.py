"""What a dispatcher needs to know about a stored entry, read from its MessageMetadata."""

from __future__ import annotations

import base64
from typing import NamedTuple

from broker.protocol.frames import read_entry_metadata

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


def entry_meta(entry: bytes) -> EntryMeta:
    md = read_entry_metadata(entry)
    is_batch = md.HasField("num_messages_in_batch")
    if md.HasField("ordering_key") and md.ordering_key:
        key = md.ordering_key
    elif md.HasField("partition_key") and md.partition_key:
        key = (base64.b64decode(md.partition_key) if md.partition_key_b64_encoded
               else md.partition_key.encode())
    else:
        key = NONE_KEY
    return EntryMeta(
        num_messages=md.num_messages_in_batch if is_batch else 1,
        sticky_key=key,
        deliver_at_time=md.deliver_at_time if md.HasField("deliver_at_time") else 0,
        is_marker=md.HasField("marker_type"),
        publish_time=md.publish_time,
        is_batch=is_batch,
    )
