"""Shared: entries go round-robin to consumers that have permits, highest priority level first.

Messages to redeliver (unacked messages of a consumer that left, negative acks) sit in a replay
set and are read before new entries. Each redelivery bumps the entry's redelivery count, which
the client's dead-letter policy reads from MESSAGE. Delayed messages (deliver_at_time) are held
back in a timer-driven set and do not block the entries behind them.
"""

from __future__ import annotations

import bisect
import heapq
import time
from typing import TYPE_CHECKING

from broker.dispatch.base import Dispatcher
from broker.dispatch.entry_meta import EntryMeta
from managed_ledger import Entry, Position

if TYPE_CHECKING:
    import asyncio

    from broker.service.consumer import Consumer
    from broker.service.subscription import Subscription


class SharedDispatcher(Dispatcher):
    def __init__(self, subscription: Subscription, max_read_batch: int, max_unacked_per_consumer: int) -> None:
        super().__init__(subscription, max_read_batch)
        self.max_unacked_per_consumer = max_unacked_per_consumer
        self._rr = 0
        # Sorted positions waiting to be (re)delivered ahead of new entries.
        self.replay: list[Position] = []
        self._replay_set: set[Position] = set()
        self.redelivery_counts: dict[Position, int] = {}
        # Delayed delivery: heap of (deliver_at_ms, position) and the timer that releases them.
        self._delayed: list[tuple[int, Position]] = []
        self._delayed_set: set[Position] = set()
        self._delay_timer: asyncio.TimerHandle | None = None
        # Set when a replay round dispatched nothing: the next round reads new entries instead.
        self._replay_stalled = False

    @property
    def type_name(self) -> str:
        return "Shared"

    # -- replay set --------------------------------------------------------------------------------
    def add_to_replay(self, positions: list[Position]) -> None:
        for p in positions:
            if p not in self._replay_set:
                self._replay_set.add(p)
                bisect.insort(self.replay, p)

    def _kick(self) -> None:
        """New replay work while a read is parked waiting for new entries: re-plan the read."""
        if self.read_outstanding and self.cursor.has_pending_read:
            self.cancel_reads()
        self._replay_stalled = False
        self.trigger_read()

    def _take_replay(self, n: int) -> list[Position]:
        taken = self.replay[:n]
        del self.replay[:n]
        self._replay_set.difference_update(taken)
        return taken

    def on_acked(self, positions: list[Position]) -> None:
        for p in positions:
            self.redelivery_counts.pop(p, None)
            if p in self._replay_set:
                self._replay_set.discard(p)
                i = bisect.bisect_left(self.replay, p)
                if i < len(self.replay) and self.replay[i] == p:
                    del self.replay[i]
            self._delayed_set.discard(p)

    @property
    def delayed_count(self) -> int:
        return len(self._delayed_set)

    # -- consumers ---------------------------------------------------------------------------------
    def _consumer_removed(self, consumer: Consumer) -> None:
        leftover = consumer.clear_pending()
        if leftover:
            self.add_to_replay(leftover)
        self._kick()

    def _flow_settled(self, consumer: Consumer) -> None:
        self._replay_stalled = False

    def _available(self, c: Consumer) -> bool:
        return (c.permits > 0 and c.writable and not c.closed
                and c.unacked_messages < self.max_unacked_per_consumer)

    def _next_consumer(self) -> Consumer | None:
        """Round robin within the best priority level that has an available consumer."""
        consumers = self.consumers
        n = len(consumers)
        if n == 0:
            return None
        best: Consumer | None = None
        best_i = -1
        for k in range(n):
            i = (self._rr + k) % n
            c = consumers[i]
            if self._available(c) and (best is None or c.priority_level < best.priority_level):
                best, best_i = c, i
        if best is not None:
            self._rr = best_i + 1
        return best

    def select_consumer(self, meta: EntryMeta) -> Consumer | None:
        return self._next_consumer()

    def _any_available(self) -> bool:
        return any(self._available(c) for c in self.consumers)

    # -- reading -----------------------------------------------------------------------------------
    def _read_more(self) -> None:
        if self.total_permits <= 0 or not self._any_available():
            return
        n = min(max(self.total_permits, 1), self.max_read_batch)
        epoch = self._begin_read()
        if self.replay and not self._replay_stalled:
            positions = self._take_replay(n)
            self.cursor.replay_entries(positions, lambda es, exc: self._read_complete(epoch, es, exc, positions))
        else:
            self.cursor.read_entries_or_wait(n, lambda es, exc: self._read_complete(epoch, es, exc, None))

    def _read_complete(self, epoch: int, entries: list[Entry], exc: BaseException | None,
                       replayed: list[Position] | None) -> None:
        if not self._end_read(epoch, exc):
            if replayed:
                self.add_to_replay(replayed)
            return
        now_ms = int(time.time() * 1000)
        per_consumer: dict[int, tuple[Consumer, list[tuple[Entry, EntryMeta, int]]]] = {}
        undelivered: list[Position] = []
        dispatched = 0
        for entry, meta in self.filter_markers(entries):
            pos = entry.position
            if meta.deliver_at_time > now_ms and replayed is None:
                self._hold_delayed(meta.deliver_at_time, pos)
                continue
            consumer = self.select_consumer(meta)
            if consumer is None:
                undelivered.append(pos)
                continue
            self.take_permits(consumer, meta.num_messages)
            slot = per_consumer.get(id(consumer))
            if slot is None:
                slot = per_consumer[id(consumer)] = (consumer, [])
            slot[1].append((entry, meta, self.redelivery_counts.get(pos, 0)))
            dispatched += 1
        for consumer, batch in per_consumer.values():
            consumer.send_entries(batch)
        if undelivered:
            self.add_to_replay(undelivered)
        if replayed is not None and dispatched == 0:
            self._replay_stalled = True
        elif dispatched:
            self._replay_stalled = False
        if dispatched or (replayed is None and not undelivered):
            self.trigger_read()

    # -- delayed delivery --------------------------------------------------------------------------
    def _hold_delayed(self, deliver_at: int, pos: Position) -> None:
        if pos in self._delayed_set:
            return
        self._delayed_set.add(pos)
        heapq.heappush(self._delayed, (deliver_at, pos))
        self._arm_delay_timer()

    def _arm_delay_timer(self) -> None:
        if self._delay_timer is not None or not self._delayed:
            return
        loop = self.subscription.topic.loop
        delay = max(0.0, self._delayed[0][0] / 1000 - time.time())
        self._delay_timer = loop.call_later(delay, self._release_delayed)

    def _release_delayed(self) -> None:
        self._delay_timer = None
        now_ms = int(time.time() * 1000) + 1
        ready: list[Position] = []
        while self._delayed and self._delayed[0][0] <= now_ms:
            _, pos = heapq.heappop(self._delayed)
            if pos in self._delayed_set:
                self._delayed_set.discard(pos)
                ready.append(pos)
        if ready:
            self.add_to_replay(ready)
            self._kick()
        self._arm_delay_timer()

    # -- redelivery --------------------------------------------------------------------------------
    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if positions is None:
            positions = consumer.clear_pending()
        else:
            positions = [p for p in positions if consumer.remove_pending(p)]
        if not positions:
            return
        for p in positions:
            self.redelivery_counts[p] = self.redelivery_counts.get(p, 0) + 1
        consumer.redelivered += len(positions)
        self.add_to_replay(positions)
        self._kick()

    def on_cursor_reset(self) -> None:
        self.replay.clear()
        self._replay_set.clear()
        self._delayed.clear()
        self._delayed_set.clear()
        for c in self.consumers:
            c.clear_pending()
        super().on_cursor_reset()

    def close(self) -> None:
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
        super().close()
