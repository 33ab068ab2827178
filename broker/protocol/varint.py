"""Protobuf's base-128 varint, written by hand: for the encoders that build protobuf bytes without
the protobuf classes (``commands.py``'s receipts, the OTLP metrics encoder in broker/admin).

The faster of the two writers the codebase had: a table for one byte and the two- and three-byte
cases written out cost a third of a plain loop's time for a one-byte value, two thirds for two or
three bytes, the same for longer ones (timeit).
"""

from __future__ import annotations

U64_MASK = (1 << 64) - 1

# Every one-byte varint, by value (indexed by the hot encoders directly).
SMALL_VARINTS = [bytes([i]) for i in range(0x80)]


def varint(value: int) -> bytes:
    """``value`` as a varint; a negative int64 as its 64-bit two's complement (ten bytes), as protobuf
    encodes it."""
    value &= U64_MASK
    if value < 0x80:
        return SMALL_VARINTS[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
