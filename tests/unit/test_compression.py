"""compression_codecs: every codec a client may use reads what the libraries write the way Pulsar's Java codecs do,
and round-trips; an unknown one is refused by type; the numbers are both protos' CompressionType."""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import pytest
import zstandard

import compression_codecs as codecs
from broker.protocol import pulsar_api_pb2 as pb
from managed_ledger.bookkeeper import ml_data_formats_pb2 as ml

PLAIN = b"hello, compressed world " * 40
C = pb.CompressionType


@pytest.mark.parametrize(("codec", "compressed"), [
    (C.NONE, PLAIN),
    (C.LZ4, lz4.block.compress(PLAIN, store_size=False)),
    (C.ZLIB, zlib.compress(PLAIN)),
    (C.ZSTD, zstandard.ZstdCompressor().compress(PLAIN)),
    (C.SNAPPY, bytes(cramjam.snappy.compress_raw(PLAIN))),
])
def test_each_codec_gives_the_payload_back(codec: int, compressed: bytes) -> None:
    assert codecs.decompress(codec, compressed, len(PLAIN)) == PLAIN


@pytest.mark.parametrize("codec", list(codecs.CODECS))
def test_each_codec_round_trips(codec: int) -> None:
    compressed = codecs.compress(codec, PLAIN)
    assert (compressed == PLAIN) is (codec == codecs.NONE)
    assert codecs.decompress(codec, compressed, len(PLAIN)) == PLAIN


@pytest.mark.parametrize("codec", [C.LZ4, C.ZLIB, C.ZSTD, C.SNAPPY])
def test_bytes_holding_more_than_announced_are_refused_before_they_take_the_memory(codec: int) -> None:
    bomb = codecs.compress(codec, bytes(8 * 1024 * 1024))  # 8 MiB of zeros: a few KB (snappy: 390 KB) compressed
    assert len(bomb) < 512 * 1024
    with pytest.raises(codecs.DecompressionError) as refused:
        codecs.decompress(codec, bomb, 10)
    if codec != C.LZ4:  # (the LZ4 block decoder stops at the size it is given)
        assert isinstance(refused.value, codecs.SizeMismatchError)


@pytest.mark.parametrize("codec", [C.LZ4, C.ZLIB, C.ZSTD, C.SNAPPY])
@pytest.mark.parametrize("garbage", [b"\xff" * 64, b"\x00\x01garbage"])
def test_bytes_a_codec_cannot_read_raise_one_error_type(codec: int, garbage: bytes) -> None:
    """Whatever the library raises comes out as DecompressionError, so callers need not know it."""
    with pytest.raises(codecs.DecompressionError, match=f"^{codecs.codec(codec).name}: "):
        codecs.decompress(codec, garbage, 1000)


@pytest.mark.parametrize("codec", [C.LZ4, C.ZLIB, C.ZSTD, C.SNAPPY])
def test_any_announced_size_gives_the_payload_or_the_one_error_type(codec: int) -> None:
    # (MessageMetadata.uncompressed_size is a uint32: LZ4 raised OverflowError past 2^31 - 1)
    compressed = codecs.compress(codec, PLAIN)
    for announced in (2**31 - 1, 2**31, 2**32 - 1):
        try:
            assert codecs.decompress(codec, compressed, announced) == PLAIN
        except codecs.DecompressionError:
            pass


def test_an_unknown_codec_is_refused() -> None:
    with pytest.raises(codecs.UnknownCodecError, match="unknown compression codec 99"):
        codecs.decompress(99, b"x", 1)
    with pytest.raises(codecs.UnknownCodecError, match="unknown compression codec 5"):
        codecs.compress(5, b"x")


def test_the_numbers_and_names_are_both_protos_compression_types() -> None:
    for enum in (pb.CompressionType, ml.CompressionType):
        assert {name: enum.Value(name) for name in enum.keys()} == codecs.BY_NAME
    assert {number: codec.name for number, codec in codecs.CODECS.items()} == \
        {codecs.NONE: "NONE", codecs.LZ4: "LZ4", codecs.ZLIB: "ZLIB", codecs.ZSTD: "ZSTD", codecs.SNAPPY: "SNAPPY"}
