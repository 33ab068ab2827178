"""Key_Shared key hashes against Apache Pulsar 4.0.7's: Murmur3_32Hash.makeHash (the sign bit
cleared) folded into the range of the mode's selector. The expected values were computed with
pulsar-common 4.0.7's Murmur3_32Hash."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from broker.dispatch.key_selector import KeySelector, key_hash

# key -> (Murmur3_32Hash.makeHash(key), AUTO_SPLIT hash, STICKY hash)
PULSAR_HASHES = {
    b"k0": (190934230, 30776, 27862),
    b"k1": (2110152746, 56817, 24618),  # mmh3's unsigned hash has the top bit set: the fold into 65535 differs
    b"k2": (1479966664, 55295, 32712),
    b"z198787": (1550647296, 23662, 1),  # 0 modulo 65536: STICKY gives 1 (0 is Pulsar's "no hash")
    b"A\x000\x000": (1856293464, 14590, 51800),  # consumer A's first point on the AUTO_SPLIT ring
}


@pytest.mark.parametrize("key", list(PULSAR_HASHES))
def test_key_hash_is_pulsars(key: bytes) -> None:
    _, auto_split, sticky = PULSAR_HASHES[key]
    assert key_hash(key, sticky=False) == auto_split
    assert key_hash(key, sticky=True) == sticky


def test_auto_split_hashes_lie_in_1_to_65535_and_sticky_ones_never_0() -> None:
    keys = [f"key-{i}".encode() for i in range(20_000)]
    assert all(1 <= key_hash(k, sticky=False) <= 65535 for k in keys)
    assert all(1 <= key_hash(k, sticky=True) <= 65535 for k in keys)


class _Member:
    """What the selector reads of a consumer: its name and, for STICKY, its declared ranges."""

    def __init__(self, name: str, hash_ranges: list[tuple[int, int]] | None = None) -> None:
        self.name = name
        self.hash_ranges = hash_ranges or []


def test_auto_split_ranges_cover_the_key_hash_range_once_and_agree_with_the_owner() -> None:
    members: list[Any] = [_Member("a"), _Member("b"), _Member("c"), _Member("a")]  # (two sharing a name: distinct ones)
    selector = KeySelector(sticky=False)
    selector.rebuild(members)
    ranges = selector.hash_ranges()
    assert set(ranges) == set(members)
    pieces = sorted((start, end, id(c)) for c, own in ranges.items() for start, end in own)
    assert pieces[0][0] == 1 and pieces[-1][1] == 65535
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(pieces))  # no gap, no overlap
    for c, own in ranges.items():
        assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(own))  # adjacent ones merged
        for start, end in own:
            for h in {start, end, (start + end) // 2}:
                assert selector.owner(h) is c
    # One consumer owns the whole range, as Pulsar's stats show it: [[1, 65535]].
    alone = KeySelector(sticky=False)
    alone.rebuild([members[0]])
    assert alone.hash_ranges() == {members[0]: [(1, 65535)]}


def test_sticky_ranges_are_the_declared_ones_sorted_and_merged() -> None:
    a: Any = _Member("a", [(100, 199), (0, 99), (500, 600)])
    b: Any = _Member("b", [(200, 300)])
    selector = KeySelector(sticky=True)
    selector.rebuild([a, b])
    assert selector.hash_ranges() == {a: [(0, 199), (500, 600)], b: [(200, 300)]}
