"""Key_Shared: every message of one key goes to the same consumer.

The sticky key (ordering_key, else partition_key, else NONE_KEY) is hashed with Murmur3_32 into
0..65535. AUTO_SPLIT places consumers on a consistent-hash ring (100 points each); STICKY uses the
ranges each consumer declared (overlaps are refused at subscribe). When the owner of a key has no
permits, the entry waits in the replay set, and so does every later entry for that consumer in the
same read, so per-consumer order holds.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import mmh3

from broker.dispatch.entry_meta import EntryMeta
from broker.dispatch.shared import SharedDispatcher
from broker.errors import ConsumerAssignError
from broker.protocol import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from broker.service.consumer import Consumer

HASH_RANGE_SIZE = 65536  # Pulsar's key hash space
POINTS_PER_CONSUMER = 100  # Pulsar's default keySharedConsistentHashingReplicaPoints


def sticky_key_hash(key: bytes) -> int:
    return int(mmh3.hash(key, 0, signed=False)) % HASH_RANGE_SIZE


class KeySharedDispatcher(SharedDispatcher):
    def __init__(self, *args: object, sticky: bool, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sticky = sticky
        self._ring: list[tuple[int, int]] = []  # (point, index into consumers)
        self._blocked: set[int] = set()

    @property
    def type_name(self) -> str:
        return "Key_Shared"

    def validate_new_consumer(self, consumer: Consumer) -> None:
        meta = consumer.key_shared_meta
        mode_sticky = meta is not None and meta.keySharedMode == pb.KeySharedMode.STICKY
        if mode_sticky != self.sticky:
            raise ConsumerAssignError("Key_Shared mode differs from the subscription's")
        if not self.sticky:
            return
        if not consumer.hash_ranges:
            raise ConsumerAssignError("STICKY Key_Shared consumer declared no hash ranges")
        for start, end in consumer.hash_ranges:
            if not 0 <= start <= end < HASH_RANGE_SIZE:
                raise ConsumerAssignError(f"Invalid hash range [{start}, {end}]")
            for other in self.consumers:
                for o_start, o_end in other.hash_ranges:
                    if start <= o_end and o_start <= end:
                        raise ConsumerAssignError(
                            f"Range [{start}, {end}] overlaps [{o_start}, {o_end}] of consumer {other.name}")

    def _rebuild_ring(self) -> None:
        ring: list[tuple[int, int]] = []
        for i, c in enumerate(self.consumers):
            for k in range(POINTS_PER_CONSUMER):
                ring.append((sticky_key_hash(f"{c.name}{k}".encode()), i))
        ring.sort()
        self._ring = ring

    def _consumer_added(self, consumer: Consumer) -> None:
        self._rebuild_ring()
        super()._consumer_added(consumer)

    def _consumer_removed(self, consumer: Consumer) -> None:
        self._rebuild_ring()
        super()._consumer_removed(consumer)

    def _owner(self, key_hash: int) -> Consumer | None:
        if not self.consumers:
            return None
        if self.sticky:
            for c in self.consumers:
                for start, end in c.hash_ranges:
                    if start <= key_hash <= end:
                        return c
            return None
        i = bisect.bisect_left(self._ring, (key_hash, -1))
        if i == len(self._ring):
            i = 0
        return self.consumers[self._ring[i][1]]

    def _read_more(self) -> None:
        self._blocked.clear()
        super()._read_more()

    def select_consumer(self, meta: EntryMeta) -> Consumer | None:
        owner = self._owner(sticky_key_hash(meta.sticky_key))
        if owner is None or id(owner) in self._blocked:
            return None
        if not self._available(owner):
            self._blocked.add(id(owner))
            return None
        return owner

    def _any_available(self) -> bool:
        return any(self._available(c) for c in self.consumers)
