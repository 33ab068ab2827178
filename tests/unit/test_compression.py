"""broker.protocol.compression: every codec a client may use round-trips; an unknown one is refused by type."""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import pytest
import zstandard

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.compression import UnknownCodecError, decompress

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
    assert decompress(codec, compressed, len(PLAIN)) == PLAIN


def test_an_unknown_codec_is_refused() -> None:
    with pytest.raises(UnknownCodecError, match="unknown compression codec 99"):
        decompress(99, b"x", 1)
