"""Key_Shared key hashes against Apache Pulsar 4.0.7's: Murmur3_32Hash.makeHash (the sign bit
cleared) folded into the range of the mode's selector. The expected values were computed with
pulsar-common 4.0.7's Murmur3_32Hash."""

from __future__ import annotations

import pytest

from broker.dispatch.key_selector import key_hash

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
