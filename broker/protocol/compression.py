"""A message payload's decompression (the codec named in its MessageMetadata), for the broker's few readers of
payloads: compaction (the keys of a batch) and the admin API's peek / get-message (the body, as Pulsar returns it).

The publish and dispatch paths never decompress: codecs are imported on first use.
"""

from __future__ import annotations

import zlib

from broker.protocol import pulsar_api_pb2 as pb

C = pb.CompressionType


class UnknownCodecError(ValueError):
    """A compression type this broker does not know."""


def decompress(codec: int, data: bytes, uncompressed_size: int) -> bytes:
    """The payload ``data`` compressed with ``codec`` (pb.CompressionType), uncompressed."""
    if codec == C.NONE:
        return data
    if codec == C.LZ4:
        import lz4.block

        return bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
    if codec == C.ZLIB:
        return zlib.decompress(data)
    if codec == C.ZSTD:
        import zstandard

        return bytes(zstandard.ZstdDecompressor().decompress(data, max_output_size=uncompressed_size))
    if codec == C.SNAPPY:
        import cramjam

        return bytes(cramjam.snappy.decompress_raw(data))
    raise UnknownCodecError(f"unknown compression codec {codec}")
