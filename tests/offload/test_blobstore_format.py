"""The blob-store offloader's objects, byte for byte as Pulsar's jcloud offloader lays them out (its
DataBlockHeaderImpl, BlockAwareSegmentInputStreamImpl and OffloadIndexBlockImpl), and the refusals of damaged ones.
The same objects against Pulsar's own code: tests/offload/test_blob_offloaders.py."""

from __future__ import annotations

import struct
from uuid import UUID

import pytest

from managed_ledger.offload.api import OffloadedLedgerError
from managed_ledger.offload.blobstore import (
    BLOCK_HEADER_SIZE,
    Block,
    LedgerIndex,
    block_header,
    block_size_for,
    data_key,
    index_key,
    padding,
)
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata

UUID_ = UUID("3f0c7c9e-6a2f-4a8e-9b7e-2a8f1c3d4e5f")
METADATA = OffloadedLedgerMetadata.of_managed_ledger("public/default/persistent/t", 9, 1000, 1_700_000_000_000)


def test_object_keys() -> None:
    assert data_key(42, UUID_) == "3f0c7c9e-6a2f-4a8e-9b7e-2a8f1c3d4e5f-ledger-42"
    assert index_key(42, UUID_) == "3f0c7c9e-6a2f-4a8e-9b7e-2a8f1c3d4e5f-ledger-42-index"


def test_block_header_and_padding() -> None:
    header = block_header(5_000_000, 17)
    assert len(header) == BLOCK_HEADER_SIZE
    assert header[:28] == bytes.fromhex("fbdbabcb" "0000000000000080" "00000000004c4b40" "0000000000000011")
    assert header[28:] == bytes(100)
    # the pattern restarts where the entries end, whatever the length
    assert padding(6) == bytes.fromhex("fedcdeadfedc")
    assert padding(0) == b""
    assert struct.unpack(">i", padding(4))[0] < 0  # (a reader takes it for no entry)


def test_block_size_is_the_maximum_or_what_the_rest_needs() -> None:
    # 10 entries of 100 bytes left: 10 * (4 + 8) + 1000 + 128
    assert block_size_for(64 << 20, 10, 1000) == 1248
    assert block_size_for(1024, 10, 1000) == 1024


def test_index_layout_and_round_trip() -> None:
    index = LedgerIndex(METADATA, 5000, BLOCK_HEADER_SIZE, (Block(0, 1, 0), Block(4, 2, 2048), Block(8, 3, 4096)))
    raw = index.serialize()
    metadata = METADATA.serialize()
    magic, length, data_length, header_length, count, metadata_length = struct.unpack_from(">IiqqII", raw)
    assert (magic, data_length, header_length, count, metadata_length) == (0xDE47DE47, 5000, 128, 3,
                                                                           len(metadata))
    assert length == len(raw) == 32 + len(metadata) + 3 * 20
    assert raw[32:32 + len(metadata)] == metadata
    assert struct.unpack_from(">qiq", raw, 32 + len(metadata) + 20) == (4, 2, 2048)
    parsed = LedgerIndex.parse(raw)
    assert parsed == index
    assert [parsed.block_of(e) for e in (0, 3, 4, 7, 8, 9)] == [0, 0, 1, 1, 2, 2]
    assert [parsed.end_of(b) for b in range(3)] == [2048, 4096, 5000]


@pytest.mark.parametrize(("damage", "words"), [
    (lambda raw: raw[:20], "too short"),
    (lambda raw: struct.pack(">I", 0x3D1FB0BC) + raw[4:], "streaming offload's index"),
    (lambda raw: struct.pack(">I", 0x12345678) + raw[4:], "magic 0x12345678"),
    (lambda raw: raw[:-1], "damaged index object"),
])
def test_damaged_indexes_are_refused(damage: object, words: str) -> None:
    raw = LedgerIndex(METADATA, 5000, BLOCK_HEADER_SIZE, (Block(0, 1, 0), Block(4, 2, 2048))).serialize()
    with pytest.raises(OffloadedLedgerError, match=words):
        LedgerIndex.parse(damage(raw))  # type: ignore[operator]


def test_blocks_out_of_order_are_refused() -> None:
    raw = LedgerIndex(METADATA, 5000, BLOCK_HEADER_SIZE, (Block(0, 1, 0), Block(4, 2, 2048))).serialize()
    swapped = LedgerIndex(METADATA, 5000, BLOCK_HEADER_SIZE, (Block(0, 1, 2048), Block(4, 2, 0))).serialize()
    assert LedgerIndex.parse(raw).blocks[1].offset == 2048
    with pytest.raises(OffloadedLedgerError, match="not in order"):
        LedgerIndex.parse(swapped)
