"""Key_Shared: every message of one key goes to the same consumer, in order.

The sticky key (ordering_key, else partition_key, else NONE_KEY) is hashed with Murmur3_32 into
the key hash range of the mode. AUTO_SPLIT places consumers on a consistent-hash ring (100 points
each); STICKY uses the ranges each consumer declared (overlaps are refused at subscribe). Hashing
and ownership are the KeySelector's (key_selector.py), which the non-persistent Key_Shared
dispatcher uses too.

Per-key order across consumer changes ("draining hashes"): while messages of a hash are delivered
and unacknowledged on one consumer, no other consumer may receive messages of that hash. When the
ring moves a hash to a newcomer, its messages wait until the old owner acks (or leaves, which puts
its messages back for replay, ahead of anything newer). And a new entry never overtakes an older
entry of the same hash waiting in the replay set. ``allowOutOfOrderDelivery`` turns both off.

Chunked messages: the rest of a message goes to the consumer that got its first chunks, past its
maxUnackedMessagesPerConsumer (each chunk counts as one unacked message, and a client acknowledges a
chunked message only once it has all of it: held back at the limit, the key's consumer would wait
for acks that cannot come, and the subscription stalled there; Pulsar 4.0's Key_Shared dispatcher
caps every consumer at its room and stalls so). Only an earlier chunk of the same message waiting in
the replay set holds a chunk back, so the chunks arrive in order.
"""

from __future__ import annotations

import bisect
from typing import Any

from broker.dispatch.context import Consumer, DispatchContext
from broker.dispatch.key_selector import KeySelector
from broker.dispatch.shared import SharedDispatcher
from broker.protocol.entry import EntryMeta
from managed_ledger import ManagedCursor, Position

__all__ = ["KeySharedDispatcher"]


class KeySharedDispatcher(SharedDispatcher):
    # Its mode and ordering come from its first consumer: a subscription everyone left gets a new one.
    renew_when_empty = True
    fused_reads = False  # (consumers are picked by key: every read takes the general path)

    def __init__(self, context: DispatchContext, cursor: ManagedCursor, sticky: bool,
                 allow_out_of_order: bool) -> None:
        super().__init__(context, cursor)
        self.sticky = sticky
        self.allow_out_of_order = allow_out_of_order
        self._selector = KeySelector(sticky)
        # Hash of every entry that is pending on a consumer or waiting in the replay set.
        self._hash_of: dict[Position, int] = {}
        # hash -> the consumer holding unacked messages of it, and how many entries
        self._drain_owner: dict[int, Consumer] = {}
        self._drain_count: dict[int, int] = {}
        # Entries counted in _drain_count (so a late ack of a redelivered entry is not counted twice).
        self._counted: set[Position] = set()
        # hash -> positions of it in the replay set, sorted
        self._replay_by_hash: dict[int, list[Position]] = {}
        # Chunked messages under way (their consumer in _chunk_owner): uuid -> hash of their key.
        self._chunk_hash: dict[str, int] = {}
        # Draining hashes, for the stats (PIP-379's names): a hash the ring moved away from a consumer that still
        # has it unacked, -> that consumer (set at each ring change); how often each held back a delivery; and
        # per consumer how many of its draining hashes its acks cleared.
        self._draining: dict[int, Consumer] = {}
        self._blocked_attempts: dict[int, int] = {}
        self._cleared: dict[Consumer, int] = {}

    @property
    def type_name(self) -> str:
        return "Key_Shared"

    @property
    def key_shared_mode(self) -> str | None:
        return "STICKY" if self.sticky else "AUTO_SPLIT"

    def validate_new_consumer(self, consumer: Consumer) -> None:
        self._selector.validate_new_consumer(consumer, self.consumers, self.allow_out_of_order)

    # -- ownership ---------------------------------------------------------------------------------
    def _rebuild_ring(self) -> None:
        self._selector.rebuild(self.consumers)
        owner = self._selector.owner
        self._draining = {h: c for h, c in self._drain_owner.items() if owner(h) is not c}
        self._blocked_attempts = {h: n for h, n in self._blocked_attempts.items() if h in self._draining}

    def _consumer_added(self, consumer: Consumer) -> None:
        self._rebuild_ring()
        super()._consumer_added(consumer)

    def _consumer_removed(self, consumer: Consumer) -> None:
        self._rebuild_ring()
        super()._consumer_removed(consumer)
        self._cleared.pop(consumer, None)

    def key_hash(self, key: bytes) -> int:
        return self._selector.key_hash(key)

    def owner(self, key_hash: int) -> Consumer | None:
        return self._selector.owner(key_hash)

    def select_consumer(self, pos: Position, meta: EntryMeta, replaying: bool) -> Consumer | None:
        h = self._hash_of.get(pos)
        if h is None:
            h = self._hash_of[pos] = self._selector.key_hash(meta.sticky_key)
        if meta.num_chunks:
            return self._chunk_consumer_for(h, pos, meta)
        return self._key_consumer(h, pos)

    def _key_consumer(self, h: int, pos: Position) -> Consumer | None:
        owner = self.owner(h)
        if owner is None or not self._available(owner):
            return None
        if not self.allow_out_of_order:
            holder = self._drain_owner.get(h)
            if holder is not None and holder is not owner:
                self._blocked(h)
                return None  # the previous owner still has unacked messages of this key
            waiting = self._replay_by_hash.get(h)
            if waiting and waiting[0] < pos:
                # An older message of this key waits in the replay set. New entries are always newer
                # than the replay set; a replayed entry can be too when a consumer left (its pending
                # entries joined the replay set) while this replay read was in flight on disk.
                return None
        return owner

    def _chunk_consumer_for(self, h: int, pos: Position, meta: EntryMeta) -> Consumer | None:
        """A chunk goes to the consumer that has the earlier chunks of its message whatever its unacked
        count (the module docstring says why), once no earlier chunk of it waits in the replay set; a
        message none has started goes by its key, as any entry."""
        uuid = meta.chunk_uuid
        last = meta.chunk_id >= meta.num_chunks - 1
        holder = self._chunk_holder(uuid)
        if holder is None:
            holder = self._key_consumer(h, pos)
            if holder is not None and not last:
                self._chunk_begun(uuid, holder, pos)
                self._chunk_hash[uuid] = h
            return holder
        if not self._owner_takes_chunk(holder, pos, uuid):
            return None
        if last:
            self._chunk_done(uuid)
        return holder

    def _chunk_done(self, uuid: str) -> None:
        super()._chunk_done(uuid)
        self._chunk_hash.pop(uuid, None)

    def _chunk_takers(self) -> dict[int, Consumer]:
        """hash -> a consumer midway through a chunked message of that key that can take a chunk now
        (empty unless chunked messages are under way)."""
        takers: dict[int, Consumer] = {}
        for uuid, c in self._chunk_owner.items():
            if c.permits > 0 and c.writable and not c.closed:
                takers[self._chunk_hash[uuid]] = c
        return takers

    def _take_replay(self, n: int) -> list[Position]:
        """The first ``n`` waiting entries that could go out now, in order, skipping every entry of a
        hash whose consumer cannot take it (no permits, or another consumer still drains it), and,
        once one entry of a hash is skipped, the later ones of that hash too (order). Reading from
        the head regardless would let one slow consumer's backlog stall every other consumer until
        it caught up (Pulsar 4's PIP-379 filters replays the same way)."""
        taken: list[Position] = []
        skipped: set[int] = set()
        # A key with a chunked message under way is let through when that message's consumer can take a
        # chunk (past its unacked limit, or the key moved on): its other entries come back if they cannot go.
        takers = self._chunk_takers() if self._chunk_owner else {}
        for p in self.replay:
            h = self._hash_of.get(p)
            if h is not None:
                if h in skipped:
                    continue
                owner = self.owner(h)
                holder = None if self.allow_out_of_order else self._drain_owner.get(h)
                draining = holder is not None and holder is not owner
                if (owner is None or not self._available(owner) or draining) and h not in takers:
                    if draining:
                        self._blocked(h)
                    skipped.add(h)
                    continue
            taken.append(p)
            if len(taken) >= n:
                break
        for p in taken:
            self._drop_from_replay(p)
        return taken

    # -- bookkeeping hooks -------------------------------------------------------------------------
    def _dispatched(self, consumer: Consumer, p: Position, meta: EntryMeta) -> None:
        if self.allow_out_of_order:
            return
        if p in self._counted:
            return
        self._counted.add(p)
        h = self._hash_of[p]
        self._drain_owner[h] = consumer
        self._drain_count[h] = self._drain_count.get(h, 0) + 1

    def _pending_released(self, p: Position) -> None:
        if p not in self._counted:
            return
        self._counted.discard(p)
        h = self._hash_of[p]
        n = self._drain_count[h] - 1
        if n > 0:
            self._drain_count[h] = n
        else:
            del self._drain_count[h]
            del self._drain_owner[h]
            if self._draining:
                holder = self._draining.pop(h, None)
                if holder is not None:
                    self._cleared[holder] = self._cleared.get(holder, 0) + 1
                    self._blocked_attempts.pop(h, None)

    def _blocked(self, h: int) -> None:
        """An entry of hash ``h`` held back: its unacked holder is not its owner. The hash is draining even when
        the last ring change did not move it (the holder took the rest of a chunked message after the drain had
        cleared), so that it is named in the stats and its count goes when the holder acknowledges."""
        self._draining.setdefault(h, self._drain_owner[h])
        self._blocked_attempts[h] = self._blocked_attempts.get(h, 0) + 1

    def _released(self, positions: list[Position]) -> None:
        for p in positions:
            self._pending_released(p)

    def _forget_acked(self, positions: list[Position]) -> None:
        super()._forget_acked(positions)
        for p in positions:
            self._hash_of.pop(p, None)

    def _replay_added(self, p: Position) -> None:
        h = self._hash_of.get(p)
        if h is not None:
            bisect.insort(self._replay_by_hash.setdefault(h, []), p)

    def _replay_removed(self, p: Position) -> None:
        h = self._hash_of.get(p)
        waiting = self._replay_by_hash.get(h) if h is not None else None
        if waiting:
            i = bisect.bisect_left(waiting, p)
            if i < len(waiting) and waiting[i] == p:
                del waiting[i]
            if not waiting:
                del self._replay_by_hash[h]  # type: ignore[arg-type]

    def on_cursor_reset(self) -> None:
        super().on_cursor_reset()
        self._hash_of.clear()
        self._drain_owner.clear()
        self._drain_count.clear()
        self._draining.clear()
        self._blocked_attempts.clear()
        self._counted.clear()
        self._replay_by_hash.clear()
        self._chunk_hash.clear()

    # -- stats -------------------------------------------------------------------------------------
    def consumer_key_stats(self) -> dict[Consumer, dict[str, Any]]:
        """Each consumer's Key_Shared stats fields of Pulsar 4.0 (PIP-379): its key hash ranges
        (``keyHashRangeArrays``) and, when the subscription keeps order on an AUTO_SPLIT ring (where
        Pulsar tracks them), its draining hashes: ``[{hash, unackMsgs, blockedAttempts}]`` (unackMsgs
        counts entries, as Pulsar's) with their count, unacked sum and the cleared total."""
        stats: dict[Consumer, dict[str, Any]] = {
            c: {"keyHashRangeArrays": [list(r) for r in ranges]} for c, ranges in self._selector.hash_ranges().items()}
        if self.sticky or self.allow_out_of_order:
            return stats
        draining: dict[Consumer, list[dict[str, int]]] = {c: [] for c in self.consumers}
        for h, c in sorted(self._draining.items()):
            draining.setdefault(c, []).append({"hash": h, "unackMsgs": self._drain_count.get(h, 0),
                                               "blockedAttempts": self._blocked_attempts.get(h, 0)})
        for c, hashes in draining.items():
            stats.setdefault(c, {}).update({
                "drainingHashesCount": len(hashes),
                "drainingHashesClearedTotal": self._cleared.get(c, 0),
                "drainingHashesUnackedMessages": sum(d["unackMsgs"] for d in hashes),
                "drainingHashes": hashes,
            })
        return stats
