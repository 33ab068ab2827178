"""Namespace bundles as Apache Pulsar has them: ranges of a 32-bit hash of the topic name.

A namespace's topics are handed out (owned, looked up, unloaded, split) in bundles. The bundles of
a namespace are given by its sorted boundaries ``b0 = 0x00000000 < b1 < ... < bn = 0xffffffff``:
bundle ``i`` is ``[b_i, b_i+1)``, except the last, which also holds ``0xffffffff`` (Pulsar's
``NamespaceBundles``: ``Range.closedOpen`` for all but the last, ``Range.closed`` for the last).

The hash (``hash_topic``) is Pulsar's ``ConsistentHashingTopicBundleAssigner``: Guava's
``Hashing.crc32()`` (CRC-32, the zlib polynomial) of the UTF-8 bytes of ``TopicName.toString()``,
the full topic name, with the partition suffix (each partition of a partitioned topic lands in a
bundle of its own), ``padToLong`` making it unsigned.

Stored as Pulsar's ``BundlesData`` JSON, ``{"boundaries": ["0x00000000", ...], "numBundles": n}``,
in the namespace's LocalPolicies (``/admin/local-policies/<tenant>/<ns>``) and in its Policies
(``bundles``); ``broker.metadata.store`` reads and writes them.

Pure values: no I/O. A malformed name or document raises ``BundleError`` with a clear message.
"""

from __future__ import annotations

import bisect
import itertools
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Pulsar's NamespaceBundles.FULL_LOWER_BOUND / FULL_UPPER_BOUND: the whole 32-bit hash space.
FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF
# Pulsar's defaultNumberOfNamespaceBundles.
DEFAULT_NUMBER_OF_BUNDLES = 4
# Pulsar accepts up to 2^32 bundles at namespace creation (AdminResource.getBundles); each bundle
# is an object here, so we refuse more than this many when a namespace is created with a count
# (Pulsar's own loadBalancerNamespaceMaximumBundles default is 128).
MAX_CREATE_BUNDLES = 1 << 16


# Java's Long.decode: a sign, then 0x / 0X / # and hex digits, 0 and octal digits, or decimal digits.
_JAVA_LONG = re.compile(r"([+-]?)(?:(?:0[xX]|#)([0-9a-fA-F]+)|0([0-7]+)|([0-9]+))")


class BundleError(ValueError):
    """A malformed bundle name, boundary or BundlesData document (the admin layer: 400/412)."""


def hash_topic(full_name: str) -> int:
    """Pulsar's bundle hash of a topic: CRC-32 of the UTF-8 full topic name (``TopicName.toString()``,
    e.g. ``persistent://public/default/t-partition-0``), unsigned (0 .. 0xffffffff)."""
    return zlib.crc32(full_name.encode("utf-8"))


def format_boundary(value: int) -> str:
    """Pulsar's ``String.format("0x%08x", boundary)``."""
    return f"0x{value:08x}"


def parse_boundary(text: str) -> int:
    """A boundary as Pulsar reads it (Java's ``Long.decode``: ``0x``/``0X``/``#`` hex, a leading 0
    octal, else decimal), which must lie in 0 .. 0xffffffff."""
    if not isinstance(text, str):
        raise BundleError(f"Invalid bundle boundary {text!r}: expected a string such as \"0x40000000\"")
    match = _JAVA_LONG.fullmatch(text)
    if match is None:
        raise BundleError(f"Invalid bundle boundary {text!r}: expected a hex number such as 0x40000000")
    sign, hex_digits, octal_digits, decimal_digits = match.groups()
    if hex_digits is not None:
        value = int(hex_digits, 16)
    elif octal_digits is not None:
        value = int(octal_digits, 8)
    else:
        value = int(decimal_digits, 10)
    if sign == "-":
        value = -value
    if not FULL_LOWER <= value <= FULL_UPPER:
        raise BundleError(f"Invalid bundle boundary {text!r}: out of the hash range 0x00000000..0xffffffff")
    return value


@dataclass(frozen=True, order=True)
class NamespaceBundle:
    """One bundle: the hashes ``lower <= h < upper`` of a namespace's topics (``upper`` included
    when it is 0xffffffff, as in Pulsar)."""

    namespace: str
    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not FULL_LOWER <= self.lower < self.upper <= FULL_UPPER:
            raise BundleError(f"Invalid bundle range {format_boundary(self.lower)}_{format_boundary(self.upper)}: "
                              "expected 0x00000000 <= lower < upper <= 0xffffffff")

    @property
    def range_name(self) -> str:
        """Pulsar's ``getBundleRange()``: ``0x00000000_0x40000000``."""
        return f"{format_boundary(self.lower)}_{format_boundary(self.upper)}"

    def __str__(self) -> str:
        """Pulsar's ``NamespaceBundle.toString()``: ``tenant/ns/0x00000000_0x40000000``."""
        return f"{self.namespace}/{self.range_name}"

    def contains(self, h: int) -> bool:
        return self.lower <= h < self.upper or (h == self.upper == FULL_UPPER)

    def includes(self, full_topic_name: str) -> bool:
        """Pulsar's ``NamespaceBundle.includes(TopicName)`` (the caller checks the namespace)."""
        return self.contains(hash_topic(full_topic_name))

    @property
    def can_split(self) -> bool:
        """Pulsar's ``canSplitBundle``: the range spans more than one hash."""
        return self.upper - self.lower > 1

    @classmethod
    def parse(cls, namespace: str, range_name: str) -> NamespaceBundle:
        """A bundle from its range name (``0x00000000_0x40000000``); ``BundleError`` if malformed."""
        parts = range_name.split("_") if isinstance(range_name, str) else []
        if len(parts) != 2:
            raise BundleError(f"Invalid bundle range {range_name!r}: expected <lower>_<upper>, "
                              "e.g. 0x00000000_0x40000000")
        lower, upper = (parse_boundary(p) for p in parts)
        if lower >= upper:
            raise BundleError(f"Invalid bundle range {range_name!r}: the lower boundary must be below the upper one")
        return cls(namespace, lower, upper)


@dataclass(frozen=True)
class NamespaceBundles:
    """All the bundles of one namespace (Pulsar's ``NamespaceBundles``): ``boundaries`` ascending,
    from 0x00000000 to 0xffffffff."""

    namespace: str
    boundaries: tuple[int, ...]
    bundles: tuple[NamespaceBundle, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        b = tuple(self.boundaries)
        if len(b) < 2:
            raise BundleError("Need to specify at least 2 boundaries")
        if b[0] != FULL_LOWER or b[-1] != FULL_UPPER:
            raise BundleError(f"Bundles do not cover the whole hash range. first:{format_boundary(b[0])}, "
                              f"last:{format_boundary(b[-1])}")
        if any(lo >= hi for lo, hi in itertools.pairwise(b)):
            raise BundleError(f"Bundle boundaries must be strictly ascending: {[format_boundary(x) for x in b]}")
        object.__setattr__(self, "boundaries", b)
        object.__setattr__(self, "bundles", tuple(NamespaceBundle(self.namespace, lo, hi)
                                                  for lo, hi in itertools.pairwise(b)))

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def equal(cls, namespace: str, count: int) -> NamespaceBundles:
        """``count`` equal bundles, laid out as Pulsar's ``getBundles(numBundles)``: boundaries at
        multiples of 2^32 // count, the last one 0xffffffff."""
        if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= MAX_CREATE_BUNDLES:
            raise BundleError(f"Invalid number of bundles {count!r}: expected 1 to {MAX_CREATE_BUNDLES}")
        step = (1 << 32) // count
        return cls(namespace, (*(i * step for i in range(count)), FULL_UPPER))

    @classmethod
    def from_bundles_data(cls, namespace: str, doc: Any) -> NamespaceBundles:
        """From Pulsar's BundlesData JSON. As Pulsar's reader: the boundaries are what counts
        (``numBundles`` is derived from them); they must cover the whole range."""
        if not isinstance(doc, Mapping):
            raise BundleError("BundlesData must be a JSON object {\"boundaries\": [...], \"numBundles\": n}")
        boundaries = doc.get("boundaries")
        if not isinstance(boundaries, list) or not boundaries:
            raise BundleError("BundlesData has no boundaries")
        return cls(namespace, tuple(parse_boundary(b) for b in boundaries))

    def to_bundles_data(self) -> dict[str, Any]:
        """Pulsar's BundlesData JSON (``NamespaceBundles.getBundlesData()``)."""
        return {"boundaries": [format_boundary(b) for b in self.boundaries], "numBundles": len(self.bundles)}

    # -- lookups -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.bundles)

    def bundle_of_hash(self, h: int) -> NamespaceBundle:
        if not FULL_LOWER <= h <= FULL_UPPER:
            raise BundleError(f"hash {h!r} out of the 32-bit range")
        index = bisect.bisect_right(self.boundaries, h) - 1
        return self.bundles[min(index, len(self.bundles) - 1)]

    def find(self, full_topic_name: str) -> NamespaceBundle:
        """The bundle a topic belongs to (Pulsar's ``findBundle``): by ``hash_topic`` of its full name."""
        return self.bundle_of_hash(hash_topic(full_topic_name))

    def get(self, range_name: str) -> NamespaceBundle | None:
        """The bundle named ``range_name`` if it is one of these (None: not a bundle of the namespace
        now, e.g. split since); ``BundleError`` when the name is malformed."""
        wanted = NamespaceBundle.parse(self.namespace, range_name)
        return wanted if wanted in self.bundles else None

    # -- splitting -----------------------------------------------------------------------------------
    def split(self, bundle: NamespaceBundle, split_points: Sequence[int]) -> tuple[NamespaceBundles,
                                                                                   tuple[NamespaceBundle, ...]]:
        """The bundles after ``bundle`` is cut at ``split_points`` (each strictly inside it), and
        the children (Pulsar's ``NamespaceBundleFactory.splitBundles``)."""
        if bundle not in self.bundles:
            raise BundleError(f"Bundle {bundle} is not one of the bundles of {self.namespace}")
        if not bundle.can_split:
            raise BundleError(f"{bundle} bundle can't be split further since range not larger than 1")
        points = sorted(set(split_points))
        if not points:
            raise BundleError(f"No split boundary given for {bundle}")
        if points[0] <= bundle.lower or points[-1] >= bundle.upper:
            raise BundleError(f"The given fixed keys must between the key range of the {bundle} bundle")
        index = self.boundaries.index(bundle.lower)
        new = NamespaceBundles(self.namespace,
                               (*self.boundaries[: index + 1], *points, *self.boundaries[index + 1:]))
        return new, new.bundles[index: index + len(points) + 1]
