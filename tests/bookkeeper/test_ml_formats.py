"""Golden bytes of Pulsar's managed-ledger metadata as we write it (sans-IO, no cluster).

The expected hex strings were produced by protobuf code generated from Apache Pulsar's own MLDataFormats.proto
(apache/pulsar @8df09321) for the same field values, and compared byte for byte with ours: same field numbers,
types and labels give the same bytes, so a Pulsar broker reads what we write.
"""

from __future__ import annotations

import zlib

import pytest

from managed_ledger.bookkeeper import ml_formats as F
from managed_ledger.bookkeeper.ml_data_formats_pb2 import PositionInfo
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

ML_INFO = "0a0e0803106418802020fbd095ffbc310a04080720001a060a016b120176"
POSITION_INFO = (
    "080510011a0c0a04080510021204080510041a150a0d080610ffffffffffffffffff01120408061000220e0a016110ffffffffffffffffff"
    "0122050a016210022a130a0408051007100510feffffffffffffffff01"
)
CURSOR_INFO = (
    "080c10051801220c0a040805100212040805100422150a0d080610ffffffffffffffffff011204080610002a0e0a016110ffffffffffffff"
    "ffff012a050a0162100230f4d395ffbc313a130a0408051007100510feffffffffffffffff01"
)
CURSOR_INFO_NO_LEDGER = "08ffffffffffffffffff01100918ffffffffffffffffff01"


def sample_record() -> CursorRecord:
    ranges = PositionRangeSet()
    ranges.add_range(5, 3, 4)  # acked 5:3..5:4 -> MessageRange((5:2, 5:4]]
    ranges.add_range(6, 0, 0)  # acked 6:0 -> ((6:-1, 6:0]]
    return CursorRecord(Position(5, 1), ranges, {"b": 2, "a": -1}, {Position(5, 7): [5, -2]}, 1_700_000_000.5)


def test_managed_ledger_info_golden_and_round_trip() -> None:
    info = F.StoredManagedLedger((F.StoredLedger(3, 100, 4096, 1_700_000_000_123), F.StoredLedger(7)), (("k", "v"),))
    data = F.encode_ledger_info(info)
    assert data.hex() == ML_INFO
    assert F.decode_ledger_info(data) == info


def test_an_empty_znode_is_an_empty_managed_ledger() -> None:
    assert F.decode_ledger_info(b"") == F.StoredManagedLedger()


def test_position_info_golden_and_round_trip() -> None:
    record = sample_record()
    data = F.encode_position_info(record)
    assert data.hex() == POSITION_INFO
    back = F.decode_position_info(data)
    assert back.mark_delete == record.mark_delete
    assert list(back.individually_deleted) == list(record.individually_deleted)
    assert back.properties == record.properties and back.batch_acks == record.batch_acks


def test_cursor_info_golden_and_round_trip() -> None:
    record = sample_record()
    data = F.encode_cursor_info(12, record)
    assert data.hex() == CURSOR_INFO
    stored = F.decode_cursor_info(data)
    assert stored.cursors_ledger_id == 12
    assert stored.record.mark_delete == record.mark_delete and stored.record.last_active == record.last_active
    assert list(stored.record.individually_deleted) == list(record.individually_deleted)
    assert F.encode_cursor_info(-1, CursorRecord(Position(9, -1))).hex() == CURSOR_INFO_NO_LEDGER


def test_ranges_beyond_the_limit_are_left_out_from_the_far_end() -> None:
    record = CursorRecord(Position(1, 0))
    for i in range(5):
        record.individually_deleted.add_range(1, 10 * i + 2, 10 * i + 3)
    kept = F.decode_position_info(F.encode_position_info(record, max_ranges=2)).individually_deleted
    assert list(kept) == list(record.individually_deleted)[:2]


def test_unsigned_ack_set_words_are_stored_as_java_longs() -> None:
    record = CursorRecord(Position(1, 0), batch_acks={Position(1, 4): [2**64 - 1]})
    assert F.decode_position_info(F.encode_position_info(record)).batch_acks == {Position(1, 4): [-1]}


@pytest.mark.parametrize("bad", [b"\x08", b"\x10\x01", b"\x47\x78\x00\x00\x00\x02\x08\x00"])
def test_bad_values_raise_a_format_error(bad: bytes) -> None:
    with pytest.raises(F.MetadataFormatError):
        F.decode_cursor_info(bad)


def test_url_encoding_is_javas() -> None:
    assert F.url_encode("my sub/x*~é") == "my+sub%2Fx*%7E%C3%A9"
    assert F.url_decode("my+sub%2Fx*%7E%C3%A9") == "my sub/x*~é"
    assert F.cursor_path("/managed-ledgers", "public/default/persistent/t", "a b") == \
        "/managed-ledgers/public/default/persistent/t/a+b"


# -- compressed znodes (Pulsar's MetaStoreImpl: magic 0x4778, metadata size, metadata, compressed payload) ----------

def compressed(codec: int, payload: bytes, plain_size: int) -> bytes:
    """A compressed value built by hand from the layout: [0x4778][i32 size][{1: codec, 2: size}][payload]."""
    assert plain_size < 128  # (one-byte varint below)
    metadata = bytes([0x08, codec, 0x10, plain_size])
    return bytes.fromhex("4778") + len(metadata).to_bytes(4, "big") + metadata + payload


def lz4_literals(data: bytes) -> bytes:
    """An LZ4 block holding only literals (the block format: token, extra length bytes, the literals)."""
    assert 15 <= len(data) < 15 + 255
    return bytes([0xF0, len(data) - 15]) + data


def snappy_literals(data: bytes) -> bytes:
    """A raw Snappy stream holding one literal (varint length, then tag (len-1)<<2)."""
    assert len(data) <= 60
    return bytes([len(data), (len(data) - 1) << 2]) + data


def test_compressed_managed_ledger_info_is_read_whatever_the_codec() -> None:
    plain = bytes.fromhex(ML_INFO)
    info = F.decode_ledger_info(plain)
    assert F.decode_ledger_info(compressed(1, lz4_literals(plain), len(plain))) == info  # LZ4
    assert F.decode_ledger_info(compressed(2, zlib.compress(plain), len(plain))) == info  # ZLIB
    assert F.decode_ledger_info(compressed(4, snappy_literals(plain), len(plain))) == info  # SNAPPY


@pytest.mark.parametrize("codec", ["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_compression_is_written_when_configured_and_over_the_threshold(codec: str) -> None:
    info = F.decode_ledger_info(bytes.fromhex(ML_INFO))
    always = F.MetadataFormats.from_names(codec, codec, ledger_info_threshold=0, cursor_info_threshold=0)
    data = F.encode_ledger_info(info, always)
    number = F.COMPRESSION_TYPES[codec]
    assert data[:10] == bytes.fromhex(f"47780000000408{number:02x}101e")  # 30 bytes uncompressed
    assert F.decode_ledger_info(data) == info
    record = sample_record()
    cursor = F.encode_cursor_info(12, record, formats=always)
    assert cursor[:2] == bytes.fromhex("4778")
    assert F.encode_cursor_info(12, record) == bytes.fromhex(CURSOR_INFO)
    stored = F.decode_cursor_info(cursor)
    assert stored.cursors_ledger_id == 12 and stored.record == F.decode_cursor_info(bytes.fromhex(CURSOR_INFO)).record
    # At or under the threshold (Pulsar's default 16 KiB) the value stays as it is.
    assert F.encode_ledger_info(info, F.MetadataFormats.from_names(codec, codec)) == bytes.fromhex(ML_INFO)


def test_a_bad_compressed_value_is_a_format_error() -> None:
    plain = bytes.fromhex(ML_INFO)
    with pytest.raises(F.MetadataFormatError, match="does not decompress"):
        F.decode_ledger_info(compressed(2, b"not zlib", len(plain)))
    with pytest.raises(F.MetadataFormatError, match="announced"):
        F.decode_ledger_info(compressed(2, zlib.compress(plain), len(plain) - 1))
    with pytest.raises(F.MetadataFormatError, match="compression metadata"):  # (no such codec)
        F.decode_ledger_info(compressed(9, plain, len(plain)))
    with pytest.raises(ValueError, match="managedCursorInfoCompressionType"):
        F.MetadataFormats.from_names("NONE", "GZIP")


# -- individually deleted entries as long arrays (PositionInfo.individualDeletedMessageRanges) ----------------------

# PositionInfo{ledgerId 5, entryId 1, individualDeletedMessageRanges [{key 5, values [0x18]}, {key 6, values [1]}]}:
# entries 5:3, 5:4 and 6:0 deleted (BitSet words: bit e of word e // 64).
POSITION_INFO_LONG_ARRAY = "08051001" "320408051018" "320408061001"


def test_long_array_acks_golden_and_round_trip() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(5, 3, 4)
    ranges.add_range(6, 0, 0)
    record = CursorRecord(Position(5, 1), ranges)
    data = F.encode_position_info(record, formats=F.MetadataFormats(acks_as_long_array=True))
    assert data.hex() == POSITION_INFO_LONG_ARRAY
    assert F.decode_position_info(data) == record
    assert F.decode_position_info(F.encode_position_info(record)) == record  # the MessageRange form, as before


def test_long_array_words_are_java_longs_and_runs_cross_words() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(9, 60, 130)  # bits 60..63 of word 0 (negative as a Java long), all of word 1, 0..2 of word 2
    ranges.add_range(9, 200, 200)
    record = CursorRecord(Position(9, 10), ranges)
    data = F.encode_position_info(record, formats=F.MetadataFormats(acks_as_long_array=True))
    message = PositionInfo.FromString(data)
    [item] = message.individualDeletedMessageRanges
    assert list(item.values) == [-(1 << 63) + (0b111 << 60), -1, 0b111, 1 << (200 - 192)]
    assert list(F.decode_position_info(data).individually_deleted) == [
        (Position(9, 60), Position(9, 130)), (Position(9, 200), Position(9, 200))]


def test_long_array_limit_leaves_out_whole_ledgers() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(1, 0, 4)
    ranges.add_range(2, 0, 9)
    record = CursorRecord(Position(1, -1), ranges)
    data = F.encode_position_info(record, max_ranges=8, formats=F.MetadataFormats(acks_as_long_array=True))
    assert list(F.decode_position_info(data).individually_deleted) == [(Position(1, 0), Position(1, 4))]


def test_cursor_properties_golden_and_round_trip() -> None:
    """Pulsar's ManagedCursorInfo.cursorProperties (field 8, StringProperty{name, value}): a subscription's
    properties, which live only in the znode."""
    record = CursorRecord(Position(9, -1), cursor_properties={"k": "v"})
    data = F.encode_cursor_info(-1, record)
    assert data.hex() == CURSOR_INFO_NO_LEDGER + "42060a016b120176"
    assert F.decode_cursor_info(data).record.cursor_properties == {"k": "v"}
    # A PositionInfo (a cursor-ledger entry) has no such field: they are not in it.
    assert F.decode_position_info(F.encode_position_info(record)).cursor_properties == {}
