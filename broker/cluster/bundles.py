"""STAND-IN for helper "bundles"'s model (branch r-bundles): the agreed interface, to be replaced by theirs.

Namespace bundles as Pulsar's: ranges of the 32-bit CRC32 hash of a topic's full name; the last range includes
its upper end.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

FULL_UPPER = 0xFFFFFFFF
DEFAULT_NUM_BUNDLES = 4  # Pulsar's defaultNumberOfNamespaceBundles


def hash_topic(full_name: str) -> int:
    return zlib.crc32(full_name.encode())


@dataclass(frozen=True)
class NamespaceBundle:
    namespace: str
    lower: int
    upper: int

    @property
    def range_name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def contains(self, h: int) -> bool:
        return self.lower <= h < self.upper or (self.upper == FULL_UPPER and h == FULL_UPPER)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range_name}"


@dataclass(frozen=True)
class NamespaceBundles:
    namespace: str
    boundaries: tuple[int, ...]

    @property
    def bundles(self) -> list[NamespaceBundle]:
        return [NamespaceBundle(self.namespace, lo, hi) for lo, hi in itertools.pairwise(self.boundaries)]

    def find(self, full_topic_name: str) -> NamespaceBundle:
        h = hash_topic(full_topic_name)
        for bundle in self.bundles:
            if bundle.contains(h):
                return bundle
        raise ValueError(f"no bundle of {self.namespace} contains {full_topic_name}")

    def get(self, range_name: str) -> NamespaceBundle | None:
        return next((b for b in self.bundles if b.range_name == range_name), None)


def default_bundles(namespace: str, count: int = DEFAULT_NUM_BUNDLES) -> NamespaceBundles:
    step = (1 << 32) // count
    return NamespaceBundles(namespace, tuple(min(i * step, FULL_UPPER) for i in range(count + 1)))
