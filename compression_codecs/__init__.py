"""Pulsar's compression codecs (``CompressionCodecProvider``): the one table of NONE, LZ4, ZLIB, ZSTD and SNAPPY for
everything here that reads or writes compressed bytes: a message payload (compaction reads a batch's keys, the admin
API's peek returns the body) and the managed ledger's compressed metadata (``managed_ledger/bookkeeper/ml_formats.py``).

The ground floor: this package imports nothing of ours, so the broker and the managed ledger (which may not import
the broker) both stand on it. A codec is named by its number in Pulsar's ``CompressionType``, the same in
PulsarApi.proto and MLDataFormats.proto (tests/unit/test_compression.py holds both enums to these numbers).

The bytes are those of Pulsar's Java codecs: LZ4 a raw block without its size (the uncompressed size travels beside
it, in the MessageMetadata or the compression metadata), ZLIB with its zlib header (``java.util.zip.Deflater``),
ZSTD one frame, SNAPPY raw (no framing). Each library is imported on first use: the publish and dispatch paths never
compress nor decompress.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

# Pulsar's CompressionType numbers.
NONE = 0
LZ4 = 1
ZLIB = 2
ZSTD = 3
SNAPPY = 4


class DecompressionError(ValueError):
    """Bytes a codec cannot uncompress: damaged, not of that codec, or more than the size announced.
    Each library's own error is wrapped in it (its ``__cause__``)."""


class UnknownCodecError(DecompressionError):
    """A compression type this broker does not know (to compress with, or to uncompress)."""


@dataclass(frozen=True)
class Codec:
    name: str  # Pulsar's name (the configuration values, e.g. managedLedgerInfoCompressionType=LZ4)
    compress: Callable[[bytes], bytes]
    decompress: Callable[[bytes, int], bytes]  # (compressed bytes, the uncompressed size announced beside them)


def _same(data: bytes) -> bytes:
    return data


def _same_back(data: bytes, size: int) -> bytes:
    return data


def _lz4_compress(data: bytes) -> bytes:
    import lz4.block

    return bytes(lz4.block.compress(data, store_size=False))


def _lz4_decompress(data: bytes, size: int) -> bytes:
    import lz4.block

    try:
        return bytes(lz4.block.decompress(data, uncompressed_size=size))
    except (lz4.block.LZ4BlockError, OverflowError) as exc:  # (OverflowError: a size past 2^31 - 1)
        raise DecompressionError(f"LZ4: {exc}") from exc


class SizeMismatchError(DecompressionError):
    """Compressed bytes that hold more than the size announced beside them (a decompression bomb, or a lie)."""


def _too_big(size: int) -> SizeMismatchError:
    return SizeMismatchError(f"compressed data holds more than the {size} bytes announced")


# Each codec below makes at most the announced size (plus what it takes to notice more): bytes that would grow
# past it are refused before they take the memory.


def _zlib_decompress(data: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, size + 1)
    except zlib.error as exc:
        raise DecompressionError(f"ZLIB: {exc}") from exc
    if len(out) > size:
        raise _too_big(size)
    return out


def _zstd_compress(data: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdCompressor().compress(data))


def _zstd_decompress(data: bytes, size: int) -> bytes:
    import zstandard

    try:
        declared = zstandard.frame_content_size(data)
        if declared > size:  # (-1: not declared; then max_output_size holds it)
            raise _too_big(size)
        return bytes(zstandard.ZstdDecompressor().decompress(data, max_output_size=size))
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"ZSTD: {exc}") from exc


def _snappy_compress(data: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.compress_raw(data))


def _snappy_decompress(data: bytes, size: int) -> bytes:
    import cramjam

    # A raw snappy block starts with its uncompressed length (a varint): the size it would allocate.
    declared = shift = 0
    for i, byte in enumerate(data[:5]):
        declared |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
        if i == 4:
            raise DecompressionError("SNAPPY: bad length")
    if declared > size:
        raise _too_big(size)
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"SNAPPY: {exc}") from exc


CODECS: dict[int, Codec] = {
    NONE: Codec("NONE", _same, _same_back),
    LZ4: Codec("LZ4", _lz4_compress, _lz4_decompress),
    ZLIB: Codec("ZLIB", zlib.compress, _zlib_decompress),
    ZSTD: Codec("ZSTD", _zstd_compress, _zstd_decompress),
    SNAPPY: Codec("SNAPPY", _snappy_compress, _snappy_decompress),
}
# Pulsar's names -> numbers.
BY_NAME: dict[str, int] = {codec.name: number for number, codec in CODECS.items()}


def codec(number: int) -> Codec:
    """The codec of a CompressionType number; UnknownCodecError for one this broker does not know."""
    found = CODECS.get(number)
    if found is None:
        raise UnknownCodecError(f"unknown compression codec {number}")
    return found


def compress(number: int, data: bytes) -> bytes:
    """``data`` compressed with the codec ``number``, as Pulsar's codec writes it."""
    return codec(number).compress(data)


def decompress(number: int, data: bytes, uncompressed_size: int) -> bytes:
    """``data``, compressed with the codec ``number``, uncompressed (``uncompressed_size``: the size announced with
    it); DecompressionError when it cannot be."""
    return codec(number).decompress(data, uncompressed_size)
