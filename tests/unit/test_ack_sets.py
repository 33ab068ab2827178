"""The batch ack-set words: counted, merged and built as the wire's int64s (Java's BitSet.toLongArray)."""

from __future__ import annotations

from broker.protocol import ack_sets


def test_unacked_counts_the_set_bits_of_negative_words_as_unsigned() -> None:
    assert ack_sets.unacked([]) == 0
    assert ack_sets.unacked([0b1011]) == 3
    assert ack_sets.unacked([-1, 1]) == 65  # (-1: all 64 bits of the first word set)
    assert ack_sets.unacked([-(1 << 63)]) == 1


def test_merged_keeps_a_bit_only_where_both_have_it() -> None:
    assert ack_sets.merged(None, [0b110]) == [0b110]
    assert ack_sets.merged([0b110], [0b011]) == [0b010]
    # A shorter set has no bits past its words: those messages are acknowledged.
    assert ack_sets.merged([-1, -1], [-1]) == [-1, 0]
    assert ack_sets.merged([-1], [-1, 5]) == [-1, 0]


def test_words_are_signed_int64s() -> None:
    assert ack_sets.words_between(2, 5) == [0b11100]
    assert ack_sets.words_between(3, 3) == []
    assert ack_sets.words_between(0, 64) == [-1]  # (bit 63 set: a negative long, as Java's BitSet.toLongArray)
    assert ack_sets.words_between(63, 65) == [-(1 << 63), 1]
    assert ack_sets.words_between(62, 66) == [-(1 << 63) | (1 << 62), 0b11]
    assert ack_sets.unacked(ack_sets.words_between(5, 130)) == 125
