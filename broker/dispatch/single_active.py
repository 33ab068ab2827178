"""Exclusive and Failover: one active consumer receives everything, in order.

Failover keeps several consumers and elects one active among those of the highest priority level
(lowest number), sorted by name: a partition k of a partitioned topic picks index ``k % n``
(spreading partitions over consumers); a non-partitioned persistent topic (and every partition with
activeConsumerFailoverConsistentHashing) picks from a hash ring of the consumers' names by the
topic's name, as Pulsar's AbstractDispatcherSingleActiveConsumer does, so which consumer is active
does not depend on names sorting first; a non-persistent topic picks the first (Pulsar passes it
partition 0). On every change each consumer is told whether it is active (ACTIVE_CONSUMER_CHANGE,
Failover only), and the cursor is rewound so the new active consumer gets every message the old one
had not acknowledged.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence

import mmh3

from broker.dispatch.base import Dispatcher
from broker.dispatch.context import CompactedEntry, CompactedView, Consumer, Delivery, DispatchContext, new_delivery
from broker.protocol import commands
from managed_ledger import Entry, ManagedCursor, Position

_new_tuple = tuple.__new__  # a Delivery without the NamedTuple's keyword-taking __new__ (per entry)

# Points each consumer has on the hash ring of a Failover election (Pulsar's CONSUMER_CONSISTENT_HASH_REPLICAS).
RING_POINTS_PER_CONSUMER = 100


def elect_active(consumers: Sequence[Consumer], partition_index: int, ring_topic: str | None = None) -> Consumer | None:
    """The active consumer (also used by the non-persistent dispatcher) among the highest priority level
    (lowest number), sorted by name: with ``ring_topic`` (the topic's name), the one whose point on a
    hash ring of their names follows that name's hash; else partition k picks ``k % n`` of them, and a
    non-partitioned topic the first."""
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name))
    top = [c for c in ordered if c.priority_level == ordered[0].priority_level]
    if ring_topic is not None:
        return top[_ring_index(top, ring_topic)]
    return top[partition_index % len(top)] if partition_index >= 0 else top[0]


def _hash31(data: bytes) -> int:
    """Pulsar's Murmur3_32Hash.makeHash: Murmur3 32-bit, seed 0, as a non-negative Java int."""
    return int(mmh3.hash(data, 0, signed=False)) & 0x7FFFFFFF


def _ring_index(top: Sequence[Consumer], topic: str) -> int:
    """Pulsar's makeHashRing + peekConsumerIndexFromHashRing: each consumer's name + 0..99 hashed onto
    a ring (a point two consumers hash to is the later one's, as a TreeMap put), and the first point
    at or after the topic name's hash, wrapping to the first point."""
    ring: dict[int, int] = {}
    for i, c in enumerate(top):
        for j in range(RING_POINTS_PER_CONSUMER):
            ring[_hash31(f"{c.name}{j}".encode())] = i
    points = sorted(ring)
    k = bisect.bisect_left(points, _hash31(topic.encode()))
    return ring[points[k] if k < len(points) else points[0]]


class ActiveConsumerElection:
    """What Exclusive/Failover dispatchers share, persistent or not: the active consumer, the
    election, and the ACTIVE_CONSUMER_CHANGE notices Failover sends. Mixed in before the
    dispatcher base, which provides ``consumers`` (ConsumerMembers)."""

    consumers: list[Consumer]

    def _init_election(self, failover: bool, loop: asyncio.AbstractEventLoop, partition_index: int,
                       ring_topic: str | None = None) -> None:
        """``ring_topic``: elect from a hash ring by this topic name (see ``elect_active``)."""
        self.failover = failover
        self.active: Consumer | None = None
        self._election_loop = loop
        self._partition_index = partition_index
        self._ring_topic = ring_topic

    @property
    def type_name(self) -> str:
        return "Failover" if self.failover else "Exclusive"

    @property
    def active_consumer_name(self) -> str | None:
        return self.active.name if self.active is not None else None

    def _elect(self) -> Consumer | None:
        return elect_active(self.consumers, self._partition_index, self._ring_topic)

    def _notify(self, consumer: Consumer, active: bool) -> None:
        # Deferred one loop turn so a new consumer's SUBSCRIBE success goes out first.
        frame = commands.active_consumer_change(consumer.consumer_id, active)
        self._election_loop.call_soon(consumer.cnx.write, frame)


class SingleActiveConsumerDispatcher(ActiveConsumerElection, Dispatcher):
    def __init__(self, context: DispatchContext, cursor: ManagedCursor, failover: bool) -> None:
        super().__init__(context, cursor)
        ring = context.partition_index < 0 or context.failover_consistent_hashing
        self._init_election(failover, context.loop, context.partition_index, context.topic_name if ring else None)
        # No read was served yet (Pulsar's isFirstRead): see _compacted_read_position.
        self._first_read = True
        # Where a read of the compacted view from its start goes on, when that is before the cursor's
        # first valid position (in ledgers retention deleted): the cursor cannot be moved there.
        self._view_resume: Position | None = None

    def _update_active(self, notify_all: bool) -> None:
        new = self._elect()
        changed = new is not self.active
        old = self.active
        self.active = new
        if changed:
            self.cancel_reads()
            if old is not None:
                old.clear_pending()
            self._view_resume = None
            self.cursor.rewind()
        if self.failover and (changed or notify_all):
            for c in self.consumers:
                self._notify(c, c is new)
        if changed:
            self.trigger_read()

    def _consumer_added(self, consumer: Consumer) -> None:
        if self.active is None:
            self.active = consumer
            if self.failover:
                self._notify(consumer, True)
            self.trigger_read()
            return
        before = self.active
        self._update_active(notify_all=False)
        if self.failover and self.active is before:
            # Tell only the newcomer that it is standing by.
            self._notify(consumer, consumer is self.active)

    def _consumer_removed(self, consumer: Consumer) -> None:
        if consumer is self.active:
            self.active = None
            consumer.clear_pending()
            self.cancel_reads()
            self._view_resume = None
            self.cursor.rewind()
            self._update_active(notify_all=True)

    def _read_more(self) -> None:
        active = self.active
        if active is None or active.permits <= 0 or not active.writable:
            return
        view = self.context.compacted_view() if active.read_compacted else None
        if view is not None:
            start = self._compacted_read_position(active)
            if start <= view.horizon:
                # The compacted view is read within the dispatch rate limits too (Pulsar sizes the
                # compacted read with the same calculateToRead).
                size = self.read_size(active.permits)
                if size is not None:
                    epoch = self._begin_read()
                    view.read_entries(start, *size, lambda entries, at_end, exc: self._compacted_read_complete(
                        epoch, active, view, entries, at_end, exc))
                return
        if self.at_read_limit() or self.at_terminated_end():
            return  # an open transaction holds the next entries back, or none will ever come
        size = self.read_size(active.permits)
        if size is None:
            return  # the dispatch rate limits allow nothing now; retried when they do
        n, max_bytes = size
        epoch = self._begin_read()
        self.cursor.read_entries_or_wait(n, lambda entries, exc: self._read_complete(epoch, active, entries, exc),
                                         max_bytes, self._read_inline)

    def _compacted_read_position(self, active: Consumer) -> Position:
        """Where a read of the compacted view starts: the cursor's read position, but the view's start
        on the first read for a consumer that SUBSCRIBEd from MessageId.earliest (a reader's cursor, or
        a durable one not moved yet), as Pulsar's readFromEarliest: the view keeps keys whose topic
        ledgers retention deleted, before the topic's first entry."""
        if self._view_resume is not None:
            return self._view_resume
        if self._first_read and active.read_compacted_from_earliest and (
                not self.cursor.is_durable or self.cursor.mark_delete_position.entry_id == -1):
            return Position(-1, -1)
        return self.cursor.read_position

    def _read_complete(self, epoch: int, target: Consumer, entries: list[Entry], exc: BaseException | None) -> None:
        if not self._end_read(epoch, exc):
            return
        self._first_read = False
        if target is not self.active or target.closed:
            # The read was for a consumer that lost its place: put the entries back.
            if entries:
                self.cursor.seek(entries[0].position)
            self.trigger_read()
            return
        entries = self.clip_to_read_limit(entries)
        state = self.delivery_states()
        deliveries = []
        budget = target.permits
        for entry, meta in self.filter_markers(entries):
            if budget <= 0:
                # Out of permits (the read was sized on an average): the rest is read again later.
                self.cursor.seek(entry.position)
                break
            if state is None:
                messages, ack_set = meta.num_messages, None
            else:
                messages, ack_set = state(entry.position, meta.num_messages)
            deliveries.append(new_delivery(entry, messages, 0, ack_set))
            budget -= messages
        if deliveries:
            sent = target.send_entries(deliveries)
            self.take_permits(target, sent)
            self.note_dispatched(len(deliveries), sent)
            if self.rate_limited:
                self.rate_consumed(sent, sum(len(d.entry.data) for d in deliveries), len(deliveries))
        self.trigger_read()

    def _read_inline(self, entries: list[Entry]) -> None:
        """``_read_complete`` of a read the cache served at once, on the stack of the ``_read_more`` that
        issued it: nothing ran in between, so it is for the active consumer and the current epoch. The
        common case in one loop (no transaction read limit, batch-index acks or held entries; no
        marker or transactional entry among them); any other goes through ``_read_complete``."""
        target = self.active
        assert target is not None
        context = self.context
        if target.closed or self.reads_need_general_path():
            self._read_complete(self.read_epoch, target, entries, None)
            return
        plain = context.entry_messages
        budget = target.permits
        deliveries: list[Delivery] = []
        cut: Position | None = None
        for entry in entries:
            messages = plain(entry)
            if not messages:
                meta = context.entry_meta(entry)
                if meta.is_marker or meta.txn is not None:
                    self._read_complete(self.read_epoch, target, entries, None)
                    return
                messages = meta.num_messages
            if cut is None:
                if budget > 0:
                    deliveries.append(_new_tuple(Delivery, (entry, messages, 0, None)))
                    budget -= messages
                else:
                    # Out of permits (the read was sized on an average): the rest is read again later.
                    cut = entry.position
        self.read_outstanding = False
        self._first_read = False
        if cut is not None:
            self.cursor.seek(cut)
        if deliveries:
            sent = target.send_entries(deliveries)
            target.permits -= sent  # (take_permits, inlined)
            self.total_permits -= sent
            self.note_dispatched(len(deliveries), sent)
            if context.rates and self.rate_limited:
                self.rate_consumed(sent, sum(len(d.entry.data) for d in deliveries), len(deliveries))
        self.trigger_read()

    def _compacted_read_complete(self, epoch: int, target: Consumer, view: CompactedView,
                                 entries: Sequence[CompactedEntry], at_end: bool, exc: BaseException | None) -> None:
        """Deliver what was read from the compacted view and move the cursor past it: at most a read's
        size (the read was sized on ``target``'s permits and the rate limits).

        Up to the compaction horizon a read_compacted consumer sees only the survivors; the cursor
        then continues on the live topic after the horizon.
        """
        if not self._end_read(epoch, exc):
            return
        self._first_read = False
        if target is not self.active or target.closed:
            self.trigger_read()  # (the cursor did not move: the next read starts where this one did)
            return
        budget = target.permits
        deliveries: list[Delivery] = []
        # (read from the view's start, entries before the mark-delete are delivered: the topic's
        # ledgers they came from may be gone, the view keeps them)
        mark_delete = self.cursor.mark_delete_position
        i = 0
        while i < len(entries) and len(deliveries) < budget and entries[i].entry.position <= view.horizon:
            c = entries[i]
            if c.entry.position <= mark_delete or not self.cursor.is_acked(c.entry.position):
                deliveries.append(Delivery(c.entry, c.messages, 0, c.ack_set))
            i += 1
        if i < len(entries) and entries[i].entry.position <= view.horizon:
            self._resume_view_at(entries[i].entry.position)
        elif not at_end and entries:
            # (more of the view follows: from just after the last entry read, wherever the next one is)
            last = entries[-1].entry.position
            self._resume_view_at(Position(last.ledger_id, last.entry_id + 1))
        else:
            self._view_resume = None
            self.cursor.seek(self.cursor.ledger.next_valid_position(view.horizon))
        if deliveries:
            sent = target.send_entries(deliveries)
            self.take_permits(target, sent)
            if self.rate_limited:
                self.rate_consumed(sent, sum(len(d.entry.data) for d in deliveries), len(deliveries))
        self.trigger_read()

    def _resume_view_at(self, resume: Position) -> None:
        """The next read of the view starts at ``resume`` (the first entry there or after it)."""
        self.cursor.seek(resume)
        # (Pulsar's force seek: where retention deleted the topic's ledgers the cursor cannot go, and its
        # own position would skip the rest of the view)
        self._view_resume = resume if self.cursor.read_position > resume else None

    def on_cursor_reset(self) -> None:
        self._view_resume = None
        super().on_cursor_reset()

    def redeliver_positions(self, positions: list[Position]) -> None:
        if self.active is not None:
            self.redeliver(self.active, None)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Exclusive/Failover redeliver everything unacknowledged (the ids are not needed)."""
        if consumer is not self.active:
            return
        consumer.clear_pending()
        self.cancel_reads()
        self._view_resume = None
        self.cursor.rewind()
        self.trigger_read()
