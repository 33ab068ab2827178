"""The dispatch hot path reads the metadata of ordinary entries with a pattern, not protobuf
(entry.py ``_common_entry_meta``); for every input it must give what protobuf gives."""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import (
    EntryMeta,
    _common_entry_meta,
    _parsed_entry_meta,
    build_entry,
    entry_messages,
    entry_meta,
    with_broker_entry_metadata,
)
from tests.metadata_strategies import message_metadata


def reference(meta: bytes) -> object:
    try:
        return _parsed_entry_meta(memoryview(meta))
    except Exception as exc:  # whatever protobuf raises, the fast path must not answer instead
        return type(exc)


@settings(max_examples=500, deadline=None)
@given(message_metadata)
def test_agrees_with_protobuf_on_valid_metadata(md: pb.MessageMetadata) -> None:
    meta = md.SerializeToString()
    fast = _common_entry_meta(meta, 0, len(meta))
    if fast is not None:
        assert fast == reference(meta)
        assert type(fast) is EntryMeta
    assert entry_meta(build_entry(meta, b"body")) == reference(meta)


@settings(max_examples=800, deadline=None)
@given(st.binary(max_size=60))
@example(b"\x0a\x01p\x10\x01\x18\x01")  # the common shape itself
@example(b"\x0a\x01p\x10\x01")  # publish_time missing
@example(b"\x0a\x01\xff\x10\x01\x18\x01")  # a producer name that is not UTF-8
@example(b"\x0a\x01p\x10\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x18\x01")  # a 10-byte varint
@example(b"\x0a\x01p\x10\x01\x18\x01\x40\x07")  # an unknown compression value
@example(b"\x0a\x01p\x10\x01\x18\x01\x58\x80")  # a varint cut short
@example(b"\x0a\x01p\x10\x01\x18\x01\x58\xff\xff\xff\xff\x0f")  # num_messages_in_batch -1 (int32 wraps)
@example(b"\x0a\x01p\x10\x01\x18\x01\x58\x05\x58\x06")  # a field twice: protobuf keeps the last
@example(b"\x0a\x01p\x10\x01\x18\xff\xff\xff\xff\xff\xff\xff\xff\x7f")  # publish_time 2**63 - 1
def test_agrees_with_protobuf_on_any_bytes(meta: bytes) -> None:
    fast = _common_entry_meta(meta, 0, len(meta))
    if fast is not None:
        assert fast == reference(meta)


def test_the_bounds_are_the_metadata_span() -> None:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2).SerializeToString()
    entry = build_entry(meta, b"\x58\x05")  # a body that would read as one more field
    assert entry_meta(entry).num_messages == 1
    assert _common_entry_meta(entry, 10, len(entry) + 5) is None  # a span past the end: not guessed


@pytest.mark.parametrize("md", [
    pb.MessageMetadata(producer_name="standalone-0-0", sequence_id=5, publish_time=1764633600000),
    pb.MessageMetadata(producer_name="standalone-0-1", sequence_id=0, publish_time=1764633600000,
                       num_messages_in_batch=136, uncompressed_size=14_000),
])
def test_the_clients_metadata_takes_the_fast_path(md: pb.MessageMetadata) -> None:
    """What the official client sends (unbatched; batched) is the shape the pattern knows."""
    meta = md.SerializeToString()
    assert _common_entry_meta(meta, 0, len(meta)) == reference(meta)
    entry = build_entry(meta, b"x" * 100)
    assert entry_meta(entry) == reference(meta)
    assert entry_meta(with_broker_entry_metadata(entry, 1, 2)) == reference(meta)
    assert entry_meta(struct.pack(">I", len(meta)) + meta + b"no crc") == reference(meta)


def messages_agree(entry: bytes) -> None:
    """``entry_messages`` answers only for a plain entry, and then what ``entry_meta`` says it costs."""
    n = entry_messages(entry)
    if n:
        meta = entry_meta(entry)
        assert not meta.is_marker and meta.txn is None and not meta.deliver_at_time and not meta.num_chunks
        assert n == meta.num_messages


@settings(max_examples=500, deadline=None)
@given(message_metadata)
def test_entry_messages_agrees_with_entry_meta(md: pb.MessageMetadata) -> None:
    meta = md.SerializeToString()
    entry = build_entry(meta, b"body")
    for e in (entry, with_broker_entry_metadata(entry, 1, 2), struct.pack(">I", len(meta)) + meta + b"no crc"):
        messages_agree(e)


@settings(max_examples=800, deadline=None)
@given(st.binary(max_size=60))
@example(b"\x0a\x01p\x10\x01\x18\x01\x58\x05\x58\x06")  # a field twice: protobuf keeps the last
@example(b"\x0a\x01p\x10\x01\x18\x01\x58\x88\x01")  # 136 messages
def test_entry_messages_agrees_with_entry_meta_on_any_bytes(meta: bytes) -> None:
    entry = build_entry(meta, b"\x58\x05")
    try:
        reference_meta = entry_meta(entry)
    except Exception:  # (undecodable: the fast path must not answer either)
        assert entry_messages(entry) == 0
        return
    n = entry_messages(entry)
    if n:
        assert not reference_meta.is_marker and reference_meta.txn is None
        assert n == reference_meta.num_messages


@pytest.mark.parametrize("md", [
    pb.MessageMetadata(producer_name="standalone-0-0", sequence_id=5, publish_time=1764633600000),
    pb.MessageMetadata(producer_name="standalone-0-1", sequence_id=0, publish_time=1764633600000,
                       num_messages_in_batch=136, uncompressed_size=14_000),
])
def test_the_clients_entries_are_counted_without_their_entry_meta(md: pb.MessageMetadata) -> None:
    meta = md.SerializeToString()
    entry = build_entry(meta, b"x" * 100)
    expected = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
    assert entry_messages(entry) == expected
    assert entry_messages(with_broker_entry_metadata(entry, 1, 2)) == expected
    assert entry_messages(struct.pack(">I", len(meta)) + meta + b"no crc") == expected
