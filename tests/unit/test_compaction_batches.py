"""Compaction's reading of batches: a batch it cannot read is kept whole, as Pulsar's compactor keeps it,
and the compacted view's records count a batch's messages from its metadata."""

from __future__ import annotations

import struct

import lz4.block
import pytest
import zstandard

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol import pulsar_markers_pb2 as pb_markers
from broker.protocol.entry import build_entry
from broker.service.compacted_view import CompactedEntry, decode_record, encode_record
from broker.service.compaction import MAX_BATCH_INFLATE, UnreadableBatchError, messages_of, select_survivors
from managed_ledger import Entry, Position


def single(key: str, value: bytes) -> bytes:
    meta = pb.SingleMessageMetadata(partition_key=key, payload_size=len(value)).SerializeToString()
    return struct.pack(">I", len(meta)) + meta + value


def batch_entry(eid: int, *messages: tuple[str, bytes], compression: pb.CompressionType = pb.NONE,
                body: bytes | None = None) -> Entry:
    plain = b"".join(single(k, v) for k, v in messages)
    md = pb.MessageMetadata(producer_name="p", sequence_id=eid, publish_time=1, num_messages_in_batch=len(messages),
                            uncompressed_size=len(plain))
    if compression != pb.NONE:
        md.compression = compression
    if body is None:
        body = plain if compression == pb.NONE else lz4.block.compress(plain, store_size=False)
    return Entry(Position(1, eid), build_entry(md.SerializeToString(), body))


def survivors(entries: list[Entry]) -> list[tuple[int, list[int] | None, int, int]]:
    return [(c.entry.position.entry_id, c.ack_set, c.messages, c.last_index) for c in select_survivors(entries, False)]


GARBAGE_LZ4 = b"\xff" * 40  # (what a client announced as 3 messages in LZ4)


@pytest.mark.parametrize("damage", ["does not uncompress", "messages do not fit"])
def test_a_batch_that_cannot_be_read_is_kept_whole_and_supersedes_nothing(damage: str) -> None:
    messages = (("k1", b"old"), ("k2", b"x"), ("k3", b"y"))
    if damage == "does not uncompress":
        unreadable = batch_entry(1, *messages, compression=pb.LZ4, body=GARBAGE_LZ4)
    else:  # the count says 3, the body holds one and a half
        whole = b"".join(single(k, v) for k, v in messages)
        unreadable = batch_entry(1, *messages, body=whole[:len(single("k1", b"old")) + 5])
    entries = [batch_entry(0, ("k1", b"first"), ("k9", b"kept")), unreadable, batch_entry(2, ("k1", b"last"))]
    # k1 of entry 0 is superseded by entry 2's, not by the unreadable batch's (whose keys are unknown)
    assert survivors(entries) == [(0, [0b10], 1, 1), (1, None, 3, 2), (2, None, 1, 0)]


def test_the_records_of_a_view_count_an_unreadable_batch_by_its_metadata() -> None:
    unreadable = batch_entry(4, ("a", b"1"), ("b", b"2"), compression=pb.LZ4, body=GARBAGE_LZ4)
    readable = batch_entry(5, ("a", b"1"), ("b", b"2"), ("c", b"3"))
    plain = Entry(Position(1, 6), build_entry(pb.MessageMetadata(producer_name="p", sequence_id=6, publish_time=1,
                                                                 partition_key="z").SerializeToString(), b"v"))
    for kept in (CompactedEntry(unreadable, None, 2, 1), CompactedEntry(readable, [0b101], 2, 2),
                 CompactedEntry(readable, None, 3, 2), CompactedEntry(plain, None, 1, -1)):
        assert decode_record(encode_record(kept)) == kept


def test_server_markers_are_never_kept_even_with_key_less_messages_retained() -> None:
    # Pulsar's compactor drops every server-only marker (Markers.isServerOnlyMarker), whatever
    # topicCompactionRetainNullKey says: a replicated-subscription snapshot marker has no key, and kept it
    # would be delivered to read_compacted consumers from the view, which does not filter markers.
    marker = Entry(Position(1, 0), build_entry(pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, marker_type=pb_markers.REPLICATED_SUBSCRIPTION_SNAPSHOT,
    ).SerializeToString(), b"snapshot"))
    plain = Entry(Position(1, 1), build_entry(pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1).SerializeToString(), b"no key"))
    kept = select_survivors([marker, plain], retain_null_key=True)
    assert [c.entry.position for c in kept] == [Position(1, 1)]


def raw_batch(count: int, plain: bytes, *, compression: pb.CompressionType = pb.NONE, body: bytes | None = None,
              uncompressed_size: int | None = None) -> Entry:
    """A batch entry as a client may send it: its metadata says what it likes."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=count,
                            uncompressed_size=len(plain) if uncompressed_size is None else uncompressed_size)
    if compression != pb.NONE:
        md.compression = compression
    return Entry(Position(1, 0), build_entry(md.SerializeToString(), plain if body is None else body))


def a_message(key: str, payload_size: int, value: bytes = b"") -> bytes:
    meta = pb.SingleMessageMetadata(partition_key=key, payload_size=payload_size).SerializeToString()
    return struct.pack(">I", len(meta)) + meta + value


@pytest.mark.parametrize("lie", ["a negative payload size", "a payload past the batch's end",
                                 "metadata past the batch's end"])
def test_a_batch_whose_messages_do_not_fit_it_is_unreadable(lie: str) -> None:
    # A negative payload size read the same message again and again, once per message the batch claimed (up
    # to 2^31: the broker's loop held for hours); a last message past the end took what was not there.
    count = 1
    if lie == "a negative payload size":  # (-(4 + its metadata's size): the next message is this one again)
        size = len(a_message("k", -1)) - 4  # (a negative int32 is always 10 bytes of varint)
        plain, count = a_message("k", -(4 + size)), 1000
    elif lie == "a payload past the batch's end":
        plain = a_message("k", 10, b"short")
    else:
        plain = struct.pack(">I", 100) + pb.SingleMessageMetadata(partition_key="k", payload_size=0).SerializeToString()
    with pytest.raises(UnreadableBatchError):
        list(messages_of(raw_batch(count, plain).data))
    assert survivors([raw_batch(count, plain)]) == [(0, None, count, count - 1)]  # (kept whole)


def test_a_batch_announcing_a_size_beyond_the_codecs_reach_is_unreadable() -> None:
    # uncompressed_size is a uint32; LZ4 raised OverflowError past 2^31 - 1, which failed every run of the topic.
    plain = single("k", b"v")
    entry = raw_batch(1, plain, compression=pb.LZ4, body=lz4.block.compress(plain, store_size=False),
                      uncompressed_size=2**32 - 1)
    with pytest.raises(UnreadableBatchError):
        list(messages_of(entry.data))


def test_a_batch_announcing_more_than_a_compaction_inflates_is_kept_whole_unread() -> None:
    # A few KB of ZSTD holding one message of 64 MiB + 1 of zeros: every run inflated it, twice (2 GiB would do
    # as well); it is unreadable now, kept whole.
    plain = single("k", bytes(MAX_BATCH_INFLATE + 1))
    entry = raw_batch(1, plain, compression=pb.ZSTD, body=zstandard.ZstdCompressor().compress(plain))
    assert len(entry.data) < 64 * 1024
    with pytest.raises(UnreadableBatchError, match="announces"):
        list(messages_of(entry.data))
