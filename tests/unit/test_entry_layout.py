"""The stored-entry layout (broker/protocol/entry.py): every reader finds the same metadata and
body, with or without a checksum, with or without broker-entry metadata in front."""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

import pytest

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import (
    NONE_KEY,
    SNAPSHOT,
    build_entry,
    entry_body,
    entry_meta,
    metadata_span,
    parse_payload,
    peek_broker_entry_metadata,
    read_entry_metadata,
    skip_broker_entry_metadata,
    with_broker_entry_metadata,
)
from broker.protocol.errors import ProtocolError

_U32 = struct.Struct(">I")
BODY = b"the body"


def metadata(**fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1234, **fields)  # type: ignore[arg-type]


def without_checksum(md: pb.MessageMetadata) -> bytes:
    raw = md.SerializeToString()
    return _U32.pack(len(raw)) + raw + BODY


def with_checksum(md: pb.MessageMetadata) -> bytes:
    return build_entry(md.SerializeToString(), BODY)


def with_broker_metadata(entry: bytes) -> bytes:
    bem = pb.BrokerEntryMetadata(broker_timestamp=99, index=3).SerializeToString()
    return b"\x0e\x02" + _U32.pack(len(bem)) + bem + entry


LAYOUTS: dict[str, Callable[[pb.MessageMetadata], bytes]] = {
    "plain": without_checksum,
    "checksum": with_checksum,
    "broker-metadata+checksum": lambda md: with_broker_metadata(with_checksum(md)),
    "broker-metadata+plain": lambda md: with_broker_metadata(without_checksum(md)),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_reader_agrees_on_every_layout(layout: str) -> None:
    md = metadata(num_messages_in_batch=5, partition_key="k", deliver_at_time=42)
    entry = LAYOUTS[layout](md)
    start, size = metadata_span(entry)
    assert entry[start : start + size] == md.SerializeToString()
    assert read_entry_metadata(entry) == md
    assert entry_body(entry) == BODY
    meta = entry_meta(entry)
    assert (meta.num_messages, meta.sticky_key, meta.deliver_at_time, meta.publish_time, meta.is_batch,
            meta.is_marker) == (5, b"k", 42, 1234, True, False)


def test_sticky_key_ordering_key_then_partition_key_then_none() -> None:
    assert entry_meta(with_checksum(metadata(ordering_key=b"o", partition_key="p"))).sticky_key == b"o"
    encoded = base64.b64encode(b"\x00\x01").decode()
    md = metadata(partition_key=encoded, partition_key_b64_encoded=True)
    assert entry_meta(with_checksum(md)).sticky_key == b"\x00\x01"
    assert entry_meta(with_checksum(metadata())).sticky_key == NONE_KEY


def test_marker_and_single_message() -> None:
    meta = entry_meta(with_checksum(metadata(marker_type=SNAPSHOT)))
    assert meta.is_marker and meta.marker_type == SNAPSHOT
    assert (meta.num_messages, meta.is_batch) == (1, False)


def test_send_payload_is_checked_and_broker_metadata_refused() -> None:
    entry = with_checksum(metadata())
    assert parse_payload(entry).checksum_ok
    corrupt = entry[:-1] + b"?"
    assert not parse_payload(corrupt).checksum_ok
    with pytest.raises(ProtocolError):
        parse_payload(with_broker_metadata(entry))  # a client never sends it
    with pytest.raises(ProtocolError):
        read_entry_metadata(_U32.pack(3) + b"\xff\xff\xff")


def test_broker_entry_metadata_golden_bytes() -> None:
    """PIP-70's layout: magic 0x0e02, a u32 size, BrokerEntryMetadata{broker_timestamp = 1,
    index = 2}, then the entry as the client sent it."""
    entry = with_checksum(metadata())
    stamped = with_broker_entry_metadata(entry, 1_700_000_000_123, 7)
    assert stamped == b"\x0e\x02\x00\x00\x00\x09" + b"\x08\xfb\xd0\x95\xff\xbc\x31" + b"\x10\x07" + entry
    assert with_broker_entry_metadata(entry, None, 0) == b"\x0e\x02\x00\x00\x00\x02\x10\x00" + entry
    assert with_broker_entry_metadata(entry, 5, None) == b"\x0e\x02\x00\x00\x00\x02\x08\x05" + entry
    bem = peek_broker_entry_metadata(stamped)
    assert bem is not None and (bem.broker_timestamp, bem.index) == (1_700_000_000_123, 7)
    assert skip_broker_entry_metadata(stamped) == entry
    assert peek_broker_entry_metadata(entry) is None
    assert skip_broker_entry_metadata(entry) is entry
    assert read_entry_metadata(stamped) == metadata()
    assert entry_body(stamped) == BODY
