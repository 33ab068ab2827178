"""Shared: entries go round-robin to consumers that have permits, highest priority level first.

Messages to redeliver (unacked messages of a consumer that left, negative acks, entries no
consumer could take) sit in a replay set and are read before new entries. Each redelivery bumps
the entry's redelivery count, which the client's dead-letter policy reads from MESSAGE. Delayed
messages (deliver_at_time) are held back in a timer-driven set and do not block the entries
behind them. A consumer with maxUnackedMessagesPerConsumer unacknowledged messages is blocked
(its permits are kept) until acks bring it down to half of that, as in Pulsar; the limit is the
one in force now (a policy change reaches the live consumers, as Pulsar's Consumer reads it from
the topic's policies each time), and a block the new limit lifts ends at once. A subscription
whose consumers hold maxUnackedMessagesOnSubscription unacknowledged messages reads no new
entries (redeliveries still go out) until acks bring it down to half.

Pause on ack state (PIP-299, dispatcherPauseOnAckStatePersistent, off by default): an ack that leaves
the cursor with more acknowledgement holes (individually acknowledged ranges) than its storage keeps
(managedLedgerMaxUnackedRangesToPersist) pauses the reads of new entries, as Pulsar's
PersistentDispatcherMultipleConsumers does; redeliveries still go out. The next ack (or cursor move)
that brings the holes back within resumes it, and so does the policy turned off. Pausing also drops a
read parked for new entries (ours: Pulsar lets that one read complete), so nothing published after the
pause goes out. A read in flight from storage completes as any other.

Chunked messages (PIP-37): every chunk of a message goes to the consumer that got its first chunk,
as Pulsar's SharedConsumerAssignor does; a chunk whose consumer has no permit now waits in the
replay set, and so does a chunk while an earlier one of its message waits there (one that had no
permit, or one redelivered), so the chunks arrive in order (Key_Shared shares this). The first chunk
goes preferably to a consumer with permits for all the chunks. When that consumer leaves, its chunks
go back to the replay set, and a later chunk of the message read meanwhile waits behind them.

Liveness rule of the read loop: a replay round that hands nothing out marks the replay set
"stalled" and reads new entries instead; any event that may unblock replayed entries (FLOW, ack,
consumer change, redelivery, delayed release, a consumer's connection writable again) clears the
mark and re-plans a parked read.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from broker.dispatch.base import Dispatcher
from broker.dispatch.context import Consumer, Delivery, DispatchContext, new_delivery
from broker.protocol.entry import EntryMeta
from managed_ledger import Entry, ManagedCursor, Position

if TYPE_CHECKING:
    import asyncio

_new_tuple = tuple.__new__  # a Delivery without the NamedTuple's keyword-taking __new__ (per entry)


# How many entries may wait in the replay set before reading new entries stops (Pulsar's
# keySharedLookAheadMsgInReplayThresholdPerSubscription default). Bounds memory when a Key_Shared
# consumer is stuck while others could take more.
MAX_REPLAY_LOOKAHEAD = 20000


def next_round_robin(consumers: Sequence[Consumer], start: int,
                     available: Callable[[Consumer], bool]) -> tuple[Consumer | None, int]:
    """Round robin from index ``start`` within the best priority level (lowest number) that has an
    available consumer. Returns the consumer (None when nobody is available) and the next start.
    Also used by the non-persistent Shared dispatcher."""
    n = len(consumers)
    best: Consumer | None = None
    best_i = -1
    for k in range(n):
        i = (start + k) % n
        c = consumers[i]
        if available(c) and (best is None or c.priority_level < best.priority_level):
            best, best_i = c, i
    return best, (best_i + 1 if best is not None else start)


class SharedDispatcher(Dispatcher):
    # Reads of new entries the cache serves at once go through ``_read_inline`` (Key_Shared picks
    # consumers by key and takes the general path).
    fused_reads = True

    def __init__(self, context: DispatchContext, cursor: ManagedCursor) -> None:
        super().__init__(context, cursor)
        # maxUnackedMessagesPerConsumer, 0 disables it (Pulsar's meaning): re-read from the policy
        # before every read, so a change reaches the live consumers.
        self.max_unacked_per_consumer = context.policy().max_unacked_per_consumer
        self._rr = 0
        # Sorted positions waiting to be (re)delivered ahead of new entries.
        self.replay: list[Position] = []
        self._replay_set: set[Position] = set()
        self.redelivery_counts: dict[Position, int] = {}
        # Delayed delivery: heap of (deliver_at_ms, position) and the timer that releases them.
        self._delayed: list[tuple[int, Position]] = []
        self._delayed_set: set[Position] = set()
        self._delay_timer: asyncio.TimerHandle | None = None
        self._replay_stalled = False
        self._kicked_during_read = False
        # maxUnackedMessagesOnSubscription reached: no new entries until acks bring it to half.
        self.blocked_on_unacked = False
        # Paused on its acknowledgement holes (module docstring): no new entries until an ack brings them back within
        # what the cursor's storage keeps. Pulsar's blockedDispatcherOnCursorDataCanNotFullyPersist.
        self.paused_on_ack_state = False
        # Chunked messages being delivered: uuid -> the consumer that got the first chunk.
        self._chunk_owner: dict[str, Consumer] = {}
        # Their chunks handed out or held back so far (position -> uuid), and, per message, those positions
        # and which of them wait in the replay set: a later chunk waits behind them (``_owner_takes_chunk``).
        self._chunk_of: dict[Position, str] = {}
        self._chunk_seen: dict[str, list[Position]] = {}
        self._chunk_waiting: dict[str, list[Position]] = {}
        # While a read's entries are handed out: messages given to each consumer (by id) and not yet
        # sent, so maxUnackedMessagesPerConsumer counts them (empty otherwise).
        self._handed: dict[int, int] = {}

    @property
    def type_name(self) -> str:
        return "Shared"

    @property
    def number_of_delayed_messages(self) -> int:  # (Pulsar's Dispatcher.getNumberOfDelayedMessages: entries held)
        return len(self._delayed_set)

    # -- replay set --------------------------------------------------------------------------------
    def add_to_replay(self, positions: list[Position]) -> None:
        for p in positions:
            if p not in self._replay_set:
                self._replay_set.add(p)
                bisect.insort(self.replay, p)
                self._replay_added(p)
                if self._chunk_of:
                    self._chunk_replayed(p)

    def _take_replay(self, n: int) -> list[Position]:
        taken = self.replay[:n]
        del self.replay[:n]
        self._replay_set.difference_update(taken)
        for p in taken:
            self._replay_removed(p)
        return taken

    def _drop_from_replay(self, p: Position) -> None:
        if p in self._replay_set:
            self._replay_set.discard(p)
            i = bisect.bisect_left(self.replay, p)
            if i < len(self.replay) and self.replay[i] == p:
                del self.replay[i]
            self._replay_removed(p)

    def _kick(self) -> None:
        """Replayed entries may be deliverable now: re-plan, even if a read is parked for new entries.

        A read already in flight (a disk read) cannot be cancelled: remember the kick so that its
        completion re-plans instead of declaring the replay set stalled.
        """
        self._replay_stalled = False
        if self.read_outstanding:
            if self.cursor.has_pending_read:
                if self.replay:
                    self.cancel_reads()
            else:
                self._kicked_during_read = True
        self.trigger_read()

    def on_writable(self) -> None:
        # A consumer's connection drained: what waits in the replay set for it may go now (the
        # set was declared stalled, and a read for new entries may be parked).
        self._kick()

    def on_acked(self, positions: list[Position]) -> None:
        self._after_acks()
        self._forget_acked(positions)
        # A consumer blocked on maxUnackedMessagesPerConsumer may be free again.
        self.trigger_read()

    def _after_acks(self) -> None:
        """The cursor's acknowledgements changed: pause on the acknowledgement holes, or resume (Pulsar's
        afterAckMessages). With the policy off and no pause, one look at the policy snapshot."""
        if self.paused_on_ack_state or self.context.policy().pause_on_ack_state:
            self._check_ack_state()

    def _check_ack_state(self) -> None:
        """Paused while the policy is on and the cursor holds more acknowledgement holes than its storage keeps
        (Pulsar's checkAndResumeIfPaused); a paused dispatcher is told of policy changes (``unacked_blocked``).
        A resumed one reads at the caller's next trigger."""
        pause = self.context.policy().pause_on_ack_state and not self.cursor.is_cursor_data_fully_persistable()
        if pause == self.paused_on_ack_state:
            return
        self.paused_on_ack_state = pause
        if pause:
            self.context.unacked_blocked.add(self)
            if self.read_outstanding and self.cursor.has_pending_read:
                self.cancel_reads()  # (a read parked for new entries: what is published from now on waits)
        elif not self._held_by_policy():
            self.context.unacked_blocked.discard(self)

    def _forget_acked(self, positions: list[Position]) -> None:
        # Per acknowledged id, so only what is there to forget (usually nothing: no redelivery,
        # replay or delay) is looked at.
        if self.redelivery_counts:
            for p in positions:
                self.redelivery_counts.pop(p, None)
        if self._replay_set:
            for p in positions:
                self._drop_from_replay(p)
        if self._delayed_set:
            self._delayed_set.difference_update(positions)
        self._released(positions)
        self._kick()

    # -- hooks for Key_Shared ----------------------------------------------------------------------
    def _released(self, positions: list[Position]) -> None:
        """``positions`` (acknowledged) are no longer pending on the consumers they were delivered to."""

    def _replay_added(self, p: Position) -> None:
        """``p`` entered the replay set."""

    def _replay_removed(self, p: Position) -> None:
        """``p`` left the replay set (taken for a read, or acknowledged)."""

    def _pending_released(self, p: Position) -> None:
        """``p`` is no longer pending on the consumer it was delivered to (``_released`` for
        acknowledged ones)."""

    def _dispatched(self, consumer: Consumer, p: Position, meta: EntryMeta) -> None:
        """``p`` was handed to ``consumer``."""

    # -- consumers ---------------------------------------------------------------------------------
    def _consumer_removed(self, consumer: Consumer) -> None:
        if consumer.blocked:
            self._unblock(consumer)
        for uuid in [u for u, c in self._chunk_owner.items() if c is consumer]:
            self._chunk_done(uuid)  # its chunks come back through the replay set, in order
        leftover = consumer.clear_pending()
        for p in leftover:
            self._pending_released(p)
        if leftover:
            self.add_to_replay(leftover)
        self._kick()

    def _flow_settled(self, consumer: Consumer) -> None:
        if self.replay:
            self._kick()

    def _available(self, c: Consumer) -> bool:
        limit = self.max_unacked_per_consumer
        if limit > 0:
            unacked = c.unacked_messages
            if self._handed:
                unacked += self._handed.get(id(c), 0)
            if c.blocked:
                if unacked > limit // 2:
                    return False
                self._unblock(c)
            elif unacked >= limit:
                c.blocked = True
                # While a consumer is blocked, a policy change (the limit raised or removed)
                # re-plans a read too.
                self.context.unacked_blocked.add(self)
                return False
        elif c.blocked:
            self._unblock(c)  # the limit was removed
        return c.permits > 0 and c.writable and not c.closed

    def unacked_limits_changed(self) -> None:
        """A policy change may have raised or removed the unacked limit this dispatcher or one of its
        consumers is blocked on: re-plan now, under the limits in force now. A kick, not just a read:
        the entries a blocked Key_Shared consumer owns wait in the replay set, declared stalled, while
        a read waits for new entries on behalf of the other consumers, and that waiting read would
        make a plain trigger_read a no-op (they would wait for the consumer's next ack or FLOW)."""
        if self.closed:
            return
        self.max_unacked_per_consumer = self.context.policy().max_unacked_per_consumer
        if self.paused_on_ack_state:
            self._check_ack_state()  # (the pause turned off resumes; a change never pauses: only acks do, as Pulsar)
        self._kick()

    def _unblock(self, c: Consumer) -> None:
        c.blocked = False
        if not self._held_by_policy():
            self.context.unacked_blocked.discard(self)

    def _held_by_policy(self) -> bool:
        """Whether a policy change may let this dispatcher read more (it stays in ``context.unacked_blocked`` while
        so): it is blocked on an unacked limit (its own or a consumer's) or paused on its acknowledgement holes."""
        return self.blocked_on_unacked or self.paused_on_ack_state or any(c.blocked for c in self.consumers)

    def _next_consumer(self) -> Consumer | None:
        best, self._rr = next_round_robin(self.consumers, self._rr, self._available)
        return best

    def select_consumer(self, pos: Position, meta: EntryMeta, replaying: bool) -> Consumer | None:
        if meta.num_chunks:
            return self._chunk_consumer(pos, meta)
        return self._next_consumer()

    def _chunk_consumer(self, pos: Position, meta: EntryMeta) -> Consumer | None:
        """The consumer for a chunk: the one that has the message's earlier chunks (None while it
        has no permit: the chunk waits), else a new owner, preferably with permits for every
        chunk left. The mapping ends with the last chunk.

        A later chunk whose message has no consumer now waits while anything older waits in the
        replay set: its consumer left while the chunk was being read, and the earlier chunks it had
        went back there. Replayed in order, they pick the new consumer first.

        The owner takes the later chunks past its maxUnackedMessagesPerConsumer (as Pulsar's
        SharedConsumerAssignor gives them to the consumer of the first chunk whatever its count): a
        client acknowledges a chunked message only once it has all of it, so an owner held back at its
        limit would wait for acks that cannot come, and the subscription would stall there."""
        uuid = meta.chunk_uuid
        last = meta.chunk_id >= meta.num_chunks - 1
        owner = self._chunk_holder(uuid)
        if owner is None:
            if meta.chunk_id > 0 and self.replay and self.replay[0] < pos:
                return None
            left = meta.num_chunks - meta.chunk_id
            owner, rr = next_round_robin(self.consumers, self._rr,
                                         lambda c: self._available(c) and c.permits >= left)
            if owner is None:
                owner = self._next_consumer()
                if owner is None:
                    return None
            else:
                self._rr = rr
            if not last:
                self._chunk_begun(uuid, owner, pos)
            return owner
        if not self._owner_takes_chunk(owner, pos, uuid):
            return None
        if last:
            self._chunk_done(uuid)
        return owner

    # -- chunked messages under way (Key_Shared's too) ---------------------------------------------
    def _chunk_holder(self, uuid: str) -> Consumer | None:
        """The consumer that got the earlier chunks of message ``uuid``, while it is connected (a closed one's
        chunks come back through the replay set, and the message starts over with a new one)."""
        holder = self._chunk_owner.get(uuid)
        if holder is not None and holder.closed:
            self._chunk_done(uuid)
            return None
        return holder

    def _chunk_begun(self, uuid: str, owner: Consumer, pos: Position) -> None:
        """``owner`` gets the chunk at ``pos``, the first of message ``uuid`` it gets: the rest goes to it."""
        self._chunk_owner[uuid] = owner
        self._chunk_seen[uuid] = [pos]
        self._chunk_of[pos] = uuid

    def _owner_takes_chunk(self, owner: Consumer, pos: Position, uuid: str) -> bool:
        """Whether ``owner``, which has the earlier chunks of message ``uuid``, takes its chunk at ``pos`` now.
        It needs a permit and a writable connection (not room under its unacked limit: see _chunk_consumer),
        and no earlier chunk of the message may wait in the replay set: one read while it had no permit, or
        one redelivered to it (a negative ack, or all its unacked messages). A read of new entries in flight
        meanwhile completes after a FLOW or that redelivery, and its chunk would overtake the waiting one:
        the client drops a message whose chunks come out of order. A chunk held back waits behind them."""
        if pos not in self._chunk_of:
            self._chunk_of[pos] = uuid
            self._chunk_seen[uuid].append(pos)
        waiting = self._chunk_waiting.get(uuid)
        if waiting:
            # (only those still waiting: taken for this replay read, earlier ones were handled already; or acked)
            waiting[:] = [p for p in waiting if p in self._replay_set]
        if owner.permits > 0 and owner.writable and not (waiting and waiting[0] < pos):
            return True
        if waiting is None:
            waiting = self._chunk_waiting[uuid] = []
        if pos not in waiting:
            bisect.insort(waiting, pos)
        return False

    def _chunk_replayed(self, p: Position) -> None:
        """``p`` entered the replay set: if it is a chunk of a message under way, the later chunks wait for it."""
        uuid = self._chunk_of.get(p)
        if uuid is not None and uuid in self._chunk_owner:
            waiting = self._chunk_waiting.setdefault(uuid, [])
            if p not in waiting:
                bisect.insort(waiting, p)

    def _chunk_done(self, uuid: str) -> None:
        """Message ``uuid`` is no longer under way: all of it was handed out, or its consumer left (what it
        had comes back through the replay set, and goes to a new owner from the first chunk)."""
        self._chunk_owner.pop(uuid, None)
        self._chunk_waiting.pop(uuid, None)
        for p in self._chunk_seen.pop(uuid, ()):
            self._chunk_of.pop(p, None)

    def _any_available(self) -> bool:
        """Someone can take an entry now: a consumer under its limits, or one midway through a chunked
        message that has a permit (it takes the next chunks past its unacked limit: held to it, the read
        loop stopped when no one else could take anything, and the message never completed)."""
        return (any(self._available(c) for c in self.consumers)
                or any(c.permits > 0 and c.writable and not c.closed for c in self._chunk_owner.values()))

    # -- reading -----------------------------------------------------------------------------------
    def _read_more(self) -> None:
        policy = self.context.policy()
        self.max_unacked_per_consumer = policy.max_unacked_per_consumer
        if self.total_permits <= 0 or not self._any_available():
            return
        replaying = bool(self.replay) and not self._replay_stalled
        permits = self.total_permits
        if not replaying and self.paused_on_ack_state and policy.pause_on_ack_state:
            return  # too many acknowledgement holes to store: an ack that fills some resumes (_after_acks)
        if not replaying and (self.at_read_limit() or self.at_terminated_end()):
            return  # an open transaction holds the next entries back, or none will ever come
        if not replaying:
            room = self._unacked_room()
            if room is not None:
                if room <= 0:
                    return
                permits = min(permits, room)
        size = self.read_size(permits)
        if size is None:
            return  # the dispatch rate limits allow nothing now; retried when they do
        n, max_bytes = size
        if replaying:
            positions = self._take_replay(n)
            if not positions:  # nothing waiting can go out now (Key_Shared: every hash blocked)
                self._replay_stalled = True
                self._read_more()
                return
            epoch = self._begin_read()
            self.cursor.replay_entries(positions, lambda es, exc: self._read_complete(epoch, es, exc, positions))
        else:
            epoch = self._begin_read()
            self.cursor.read_entries_or_wait(n, lambda es, exc: self._read_complete(epoch, es, exc, None), max_bytes,
                                             self._read_inline if self.fused_reads else None)

    def _unacked_room(self) -> int | None:
        """New messages the subscription may still be sent under maxUnackedMessagesOnSubscription
        (None: no limit; 0: blocked). Asked before reading new entries; the acks, redeliveries and
        consumer changes that lower the count re-plan reads. A read is sized to the room, so the
        limit is passed by less than one entry (Pulsar may pass it by a whole read)."""
        limit = self.context.policy().max_unacked_per_subscription
        was = self.blocked_on_unacked
        if limit <= 0:
            blocked, room = False, None
        else:
            unacked = sum(c.unacked_messages for c in self.consumers)
            blocked = unacked > limit // 2 if was else unacked >= limit
            room = 0 if blocked else limit - unacked
        if blocked != was:
            self.blocked_on_unacked = blocked
            # While blocked, a policy change (the limit raised or removed) re-plans a read too.
            registry = self.context.unacked_blocked
            if blocked:
                registry.add(self)
            elif not self._held_by_policy():
                registry.discard(self)
        return room

    def _read_complete(self, epoch: int, entries: list[Entry], exc: BaseException | None,
                       replayed: list[Position] | None) -> None:
        if exc is not None and replayed and not self.closed and epoch == self.read_epoch:
            self.add_to_replay(replayed)  # retried; a stale read (cursor reset) is simply dropped
        if not self._end_read(epoch, exc):
            return
        replaying = replayed is not None
        if replaying:
            # The read left out acknowledged positions when it was issued; one acknowledged while it
            # was in flight (the client's late ack after a nack or an ack timeout) is not sent again.
            is_acked = self.cursor.is_acked
            entries = [e for e in entries if not is_acked(e.position)]
        else:
            entries = self.clip_to_read_limit(entries)
        # With delayed delivery off (policy), deliver_at is ignored: everything goes out at once.
        now_ms = int(time.time() * 1000) if self.context.policy().delayed_delivery else 1 << 62
        state = self.delivery_states()
        redelivery_counts = self.redelivery_counts
        per_consumer: dict[int, tuple[Consumer, list[Delivery]]] = {}
        undelivered: list[Position] = []
        dispatched = 0
        sent_messages = 0
        sent_bytes = 0
        # With maxUnackedMessagesPerConsumer, what each consumer is handed in this read counts toward it
        # at once (Pulsar's getMaxEntriesInThisBatch caps a consumer's share of a read by its room), so
        # a consumer passes its limit by less than an entry, not by a whole read.
        limited = self.max_unacked_per_consumer > 0
        handed = self._handed
        handed.clear()
        try:
            for entry, meta in self.filter_markers(entries):
                pos = entry.position
                if meta.deliver_at_time > now_ms and not replaying:
                    self._hold_delayed(meta.deliver_at_time, pos)
                    continue
                consumer = self.select_consumer(pos, meta, replaying)
                if consumer is None:
                    undelivered.append(pos)
                    continue
                if state is None:
                    messages, ack_set = meta.num_messages, None
                else:
                    messages, ack_set = state(pos, meta.num_messages)
                self.take_permits(consumer, messages)
                sent_messages += messages
                self._dispatched(consumer, pos, meta)
                if limited:
                    handed[id(consumer)] = handed.get(id(consumer), 0) + messages
                slot = per_consumer.get(id(consumer))
                if slot is None:
                    slot = per_consumer[id(consumer)] = (consumer, [])
                slot[1].append(new_delivery(entry, messages, redelivery_counts.get(pos, 0) if redelivery_counts else 0,
                                            ack_set))
                dispatched += 1
                sent_bytes += len(entry.data)
        finally:
            handed.clear()  # (also if a bug raised in the loop: stale counts would block consumers)
        self._hand_out(per_consumer, dispatched, sent_messages, sent_bytes, undelivered, replaying)

    def _read_inline(self, entries: list[Entry]) -> None:
        """``_read_complete`` of a read of new entries the cache served at once, on the stack of the
        ``_read_more`` that issued it (nothing ran in between: the current epoch, no kick). The common
        case in one loop: no transaction read limit, batch-index acks or held entries, no
        maxUnackedMessagesPerConsumer, every entry plain (``entry_messages``: no marker, transaction,
        delay or chunk; a key does not matter here); any other read goes through ``_read_complete``.
        Consumers are picked round robin as there (``_next_consumer``); an entry nobody can take goes to
        the replay set."""
        if self.max_unacked_per_consumer > 0 or self.reads_need_general_path():
            self._read_complete(self.read_epoch, entries, None, None)
            return
        plain = self.context.entry_messages
        counts = [plain(entry) for entry in entries]
        if 0 in counts:
            self._read_complete(self.read_epoch, entries, None, None)
            return
        self.read_outstanding = False
        redelivery_counts = self.redelivery_counts
        next_consumer = self._next_consumer
        per_consumer: dict[int, tuple[Consumer, list[Delivery]]] = {}
        undelivered: list[Position] = []
        dispatched = sent_messages = sent_bytes = 0
        for entry, messages in zip(entries, counts, strict=True):
            consumer = next_consumer()
            if consumer is None:
                undelivered.append(entry.position)
                continue
            consumer.permits -= messages  # (take_permits, inlined)
            sent_messages += messages
            slot = per_consumer.get(id(consumer))
            if slot is None:
                slot = per_consumer[id(consumer)] = (consumer, [])
            slot[1].append(_new_tuple(Delivery, (
                entry, messages, redelivery_counts.get(entry.position, 0) if redelivery_counts else 0, None)))
            dispatched += 1
            sent_bytes += len(entry.data)
        self.total_permits -= sent_messages
        self._hand_out(per_consumer, dispatched, sent_messages, sent_bytes, undelivered, False)

    def _hand_out(self, per_consumer: dict[int, tuple[Consumer, list[Delivery]]], dispatched: int, sent_messages: int,
                  sent_bytes: int, undelivered: list[Position], replaying: bool) -> None:
        """The end of a read: each consumer's entries sent, the stats and rate limits charged, what nobody
        took put in the replay set, and the next read planned."""
        for consumer, batch in per_consumer.values():
            consumer.send_entries(batch)
        self.note_dispatched(dispatched, sent_messages)
        if self.context.rates:
            self.rate_consumed(sent_messages, sent_bytes, dispatched)
        if undelivered:
            self.add_to_replay(undelivered)
        kicked, self._kicked_during_read = self._kicked_during_read, False
        if kicked:
            self._replay_stalled = False
            self.trigger_read()
        elif replaying and dispatched == 0:
            # Nothing in the replay set can go out now: serve new entries until something changes.
            self._replay_stalled = True
            self.trigger_read()
        elif dispatched or not undelivered or len(self.replay) < MAX_REPLAY_LOOKAHEAD:
            # Entries nobody could take went to the replay set; keep reading for the consumers
            # that can take more, up to a bound on how much we hold aside.
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
        loop = self.context.loop
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
            self._pending_released(p)
        consumer.redelivered += len(positions)
        self.add_to_replay(positions)
        self._kick()

    def redeliver_positions(self, positions: list[Position]) -> None:
        if positions:
            self.add_to_replay(positions)
            self._kick()

    def on_cursor_reset(self) -> None:
        self._after_acks()  # (Pulsar's resetComplete, clearBacklogComplete and skipEntriesComplete: afterAckMessages)
        self._chunk_owner.clear()
        self._chunk_of.clear()
        self._chunk_seen.clear()
        self._chunk_waiting.clear()
        for p in list(self.replay):
            self._replay_removed(p)
        self.replay.clear()
        self._replay_set.clear()
        self._delayed.clear()
        self._delayed_set.clear()
        for c in self.consumers:
            for p in c.clear_pending():
                self._pending_released(p)
        super().on_cursor_reset()

    def close(self) -> None:
        self.context.unacked_blocked.discard(self)
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
        super().close()
