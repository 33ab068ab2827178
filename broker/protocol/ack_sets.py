"""A batch's ack set as the wire and the cursor carry it (CommandAck's ack_set, a cursor's batch-index acks): a
bit set in Java's ``BitSet.toLongArray`` form, int64 words, bit i standing for the batch's message i and set while
that message is not acknowledged. Words with the top bit set are negative."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import zip_longest

from broker.protocol.commands import from_u64
from broker.protocol.varint import U64_MASK


def unacked(words: Sequence[int]) -> int:
    """How many messages the set leaves unacknowledged (its set bits)."""
    return sum((w & U64_MASK).bit_count() for w in words)


def merged(old: Sequence[int] | None, words: Sequence[int]) -> list[int]:
    """A batch's set after another batch-index ack: a bit stays set (unacknowledged) only if set in both."""
    return list(words) if old is None else [a & b for a, b in zip_longest(old, words, fillvalue=0)]


def words_between(start: int, end: int) -> list[int]:
    """The set with bits [start, end) set (those messages unacknowledged)."""
    bits = ((1 << end) - 1) ^ ((1 << start) - 1)
    words = []
    while bits:
        words.append(from_u64(bits & U64_MASK))
        bits >>= 64
    return words
