"""Key_Shared key selectors: which consumer owns a sticky-key hash.

Shared by the persistent Key_Shared dispatcher and the non-persistent one. The sticky key
(ordering_key, else partition_key, else NONE_KEY) is hashed with Murmur3_32 (sign bit cleared, as
Pulsar's Murmur3_32Hash does) and folded into the key hash range of the mode's selector, as Pulsar
4.0's StickyKeyConsumerSelector.makeStickyKeyHash does; which consumer gets a key depends on it:

- AUTO_SPLIT (ConsistentHashingStickyKeyConsumerSelector): range 1..65535, so ``h % 65535 + 1``.
  Consumers sit on a consistent-hash ring (100 points each, hashed the same way from the consumer
  name and a per-name index: consumers sharing a name get distinct points, so each owns its share
  of the keys); a point two consumers hash to belongs to the one that came first.
- STICKY (HashRangeExclusiveStickyKeyConsumerSelector): range 0..65535, so ``h % 65536``, except
  that 0 becomes 1 (Pulsar keeps 0 for "no hash"): a range [0, 0] owns no key. Each consumer
  declares its ranges, and overlapping ranges are refused at subscribe.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import mmh3

from broker.errors import ConsumerAssignError, ConsumerBusyError, HashRangeTakenError
from broker.protocol import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from broker.dispatch.context import Consumer

HASH_RANGE_SIZE = 65536  # STICKY ranges lie in 0..65535 (Pulsar's DEFAULT_RANGE_SIZE)
RING_RANGE_END = 65535  # AUTO_SPLIT's key hash range is 1..65535 (ConsistentHashingStickyKeyConsumerSelector)
POINTS_PER_CONSUMER = 100  # Pulsar's default keySharedConsistentHashingReplicaPoints


def _mode_name(sticky: bool) -> str:
    return pb.KeySharedMode.Name(pb.KeySharedMode.STICKY if sticky else pb.KeySharedMode.AUTO_SPLIT)


def key_hash(key: bytes, sticky: bool) -> int:
    """The key hash a selector of this mode gives ``key`` (see the module docstring)."""
    h = int(mmh3.hash(key, 0, signed=False)) & 0x7FFFFFFF
    if sticky:
        return h % HASH_RANGE_SIZE or 1
    return h % RING_RANGE_END + 1


class KeySelector:
    """Owner of a key hash among a set of consumers; ``rebuild`` after every membership change."""

    def __init__(self, sticky: bool) -> None:
        self.sticky = sticky
        self._consumers: list[Consumer] = []
        self._ring: list[tuple[int, int]] = []  # (point, index into _consumers)
        # id(consumer) -> (consumer, its name index): the lowest index no other member of that
        # name holds, kept while it is a member (Pulsar's ConsumerNameIndexTracker). The entry
        # holds the consumer, so an id is never reused while it is here.
        self._name_index: dict[int, tuple[Consumer, int]] = {}

    def _update_name_indexes(self) -> None:
        present = {id(c) for c in self._consumers}
        self._name_index = {k: v for k, v in self._name_index.items() if k in present}
        for c in self._consumers:
            if id(c) not in self._name_index:
                taken = {i for other, i in self._name_index.values() if other.name == c.name}
                self._name_index[id(c)] = (c, next(i for i in range(len(taken) + 1) if i not in taken))

    def key_hash(self, key: bytes) -> int:
        return key_hash(key, self.sticky)

    def rebuild(self, consumers: Sequence[Consumer]) -> None:
        self._consumers = list(consumers)
        if self.sticky:
            return
        self._update_name_indexes()
        ring: list[tuple[int, int]] = []
        for i, c in enumerate(self._consumers):
            name_index = self._name_index[id(c)][1]
            for k in range(POINTS_PER_CONSUMER):
                ring.append((key_hash(f"{c.name}\0{name_index}\0{k}".encode(), False), i))
        ring.sort()
        self._ring = ring

    def owner(self, key_hash: int) -> Consumer | None:
        if not self._consumers:
            return None
        if self.sticky:
            for c in self._consumers:
                for start, end in c.hash_ranges:
                    if start <= key_hash <= end:
                        return c
            return None
        i = bisect.bisect_left(self._ring, (key_hash, -1))
        if i == len(self._ring):
            i = 0
        return self._consumers[self._ring[i][1]]

    def hash_ranges(self) -> dict[Consumer, list[tuple[int, int]]]:
        """Each consumer's key hash ranges, sorted, adjacent ones merged (the stats' keyHashRangeArrays, as Pulsar's
        ConsumerHashAssignmentsSnapshot gives them): a STICKY consumer's declared ranges; on the AUTO_SPLIT ring a
        point owns the hashes after the previous point up to itself, and the hashes past the last point wrap
        around to the first point's owner."""
        pieces: dict[int, list[tuple[int, int]]] = {}
        if self.sticky:
            for i, c in enumerate(self._consumers):
                pieces[i] = sorted(c.hash_ranges)
        elif self._ring:
            start, previous = 1, 0
            for point, i in self._ring:
                if point != previous:  # (a point two consumers hash to is the first's: the first in the sorted ring)
                    pieces.setdefault(i, []).append((start, point))
                    start, previous = point + 1, point
            if start <= RING_RANGE_END:
                pieces.setdefault(self._ring[0][1], []).append((start, RING_RANGE_END))
        ranges: dict[Consumer, list[tuple[int, int]]] = {}
        for i, own in pieces.items():
            merged: list[tuple[int, int]] = []
            for start, end in own:
                if merged and start <= merged[-1][1] + 1:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], end))
                else:
                    merged.append((start, end))
            ranges[self._consumers[i]] = merged
        return ranges

    def validate_new_consumer(self, consumer: Consumer, members: Sequence[Consumer],
                              allow_out_of_order: bool) -> None:
        """Why ``consumer`` cannot join ``members``: a mode or ordering other than the subscription's
        is ConsumerBusyError, in the words of Pulsar's
        AbstractSubscription.checkForConsumerCompatibilityErrorWithDispatcher; STICKY ranges that
        are missing, invalid or taken are ConsumerAssignError (HashRangeExclusiveStickyKeyConsumerSelector)."""
        meta = consumer.key_shared_meta
        mode_sticky = meta is not None and meta.keySharedMode == pb.KeySharedMode.STICKY
        if mode_sticky != self.sticky:
            raise ConsumerBusyError(
                "Subscription is of different type. Active subscription key_shared mode of "
                f"'{_mode_name(self.sticky)}' is different than the connecting consumer's key_shared mode "
                f"'{_mode_name(mode_sticky)}'.")
        ooo = meta is not None and meta.allowOutOfOrderDelivery
        if members and ooo != allow_out_of_order:
            raise ConsumerBusyError("Subscription is of different type. " + (
                "Active subscription allows out of order delivery while the connecting consumer does not allow it."
                if allow_out_of_order else
                "Active subscription does not allow out of order delivery while the connecting consumer allows it."))
        if not self.sticky:
            return
        if not consumer.hash_ranges:
            raise ConsumerAssignError("STICKY Key_Shared consumer declared no hash ranges")
        for start, end in consumer.hash_ranges:
            if not 0 <= start <= end < HASH_RANGE_SIZE:
                raise ConsumerAssignError(f"Invalid hash range [{start}, {end}]")
            for other in members:
                for o_start, o_end in other.hash_ranges:
                    if start <= o_end and o_start <= end:  # (server_cnx checks the holder's connection is alive)
                        raise HashRangeTakenError(
                            f"Range [{start}, {end}] overlaps [{o_start}, {o_end}] of consumer {other.name}", other.cnx)
