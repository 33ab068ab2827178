"""What every dispatcher shares: the lane, permit accounting, and owning the read loop.

Permit invariant (asserted in tests, checked at runtime with ``PULSAR_BROKER_DEBUG=1``):

    total_permits == sum(c.permits - c.pending_flow for c in consumers)

FLOW arrives on the connection (``flow``), which bumps ``permits`` and ``pending_flow`` of that
consumer and posts the settlement to the lane. Removing a consumer subtracts only its settled
balance ``permits - pending_flow`` (negative if it was sent more than its settled permits). A
queued flow for a consumer that is gone, or that was replaced by an equal-looking new object,
changes nothing when it runs. Consumer add/remove and read completions run directly on the loop,
not through the lane: lane.py says why that is equivalent, and which test shows it.

The dispatcher owns its read loop: at most one read outstanding, and the entries of a read are
fully handed to consumers before the next read is issued, so order is kept.

Reads are sized in entries but permits count messages, and a batch entry holds many messages.
A read asks for about ``permits / average messages per entry`` entries (Pulsar's precise
dispatcher flow control), so a consumer with 1000 permits is not sent 100 batches of 500.

What a dispatcher knows of the subscription, topic and broker above it comes through its
``DispatchContext`` (context.py); it reads and moves the subscription's cursor itself.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from broker.dispatch.context import Consumer, DispatchContext
from broker.dispatch.lane import Lane
from broker.dispatch.members import ConsumerMembers
from broker.protocol import ack_sets
from broker.protocol.entry import SNAPSHOT as SNAPSHOT_MARKER
from broker.protocol.entry import EntryMeta
from managed_ledger import Entry, ManagedCursor, Position

log = logging.getLogger(__name__)

DEBUG_INVARIANTS = os.environ.get("PULSAR_BROKER_DEBUG", "") not in ("", "0")


class PermitInvariantError(AssertionError):
    pass


class Dispatcher(ConsumerMembers, ABC):
    # Replaced by a new one when a consumer joins after everyone left (Key_Shared: its mode and
    # ordering come from its first consumer).
    renew_when_empty = False

    def __init__(self, context: DispatchContext, cursor: ManagedCursor) -> None:
        super().__init__()
        self.context = context
        self.cursor = cursor
        self.lane = Lane(context.loop)
        self.max_read_batch = context.max_read_batch
        # Moving average of messages per dispatched entry (0: none dispatched yet).
        self.avg_messages_per_entry = 0.0
        self.read_outstanding = False
        # Bumped whenever the cursor is moved under a read (rewind/seek); stale completions are dropped.
        self.read_epoch = 0
        # A read put off by the dispatch rate limits, retried when they allow it.
        self._rate_timer: asyncio.TimerHandle | None = None
        # Reads cut short by each dispatch rate limit (index as context.rates), on messages and on bytes:
        # Pulsar's dispatchThrottled{Msg,Bytes}Events (pulsar_subscription_dispatch_throttled_*_events).
        self.throttled_msg_events = [0] * len(context.rates)
        self.throttled_bytes_events = [0] * len(context.rates)
        # dispatchThrottlingOnNonBacklogConsumerEnabled=false: the limits do not apply while the cursor
        # is active (Pulsar's calculateToRead and acquirePermitsForDeliveredMessages ask cursor.isActive).
        self._rates_spare_active = bool(context.rates) and not context.throttle_non_backlog
        # dispatchThrottlingOnBatchMessageEnabled: the limits on messages count entries instead.
        self._rates_count_entries = context.rate_counts_entries
        self.closed = False

    # -- consumers ---------------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.join(consumer)
        self._consumer_added(consumer)
        self.check_invariant()

    def remove_consumer(self, consumer: Consumer) -> None:
        if not self.leave(consumer):
            return
        self._consumer_removed(consumer)
        self.check_invariant()

    def validate_new_consumer(self, consumer: Consumer) -> None:
        """Raise ConsumerBusyError or ConsumerAssignError when ``consumer`` cannot join (Key_Shared
        checks its mode, ordering and ranges)."""

    # -- flow --------------------------------------------------------------------------------------
    def flow(self, consumer: Consumer, permits: int) -> None:
        """On the connection's loop: record, then settle on the lane."""
        consumer.permits += permits
        consumer.pending_flow += permits
        self.lane.post(self._settle_flow, consumer, permits)

    def _settle_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.pending_flow -= permits
        if self.closed or not self.is_member(consumer):
            return
        self.total_permits += permits
        self.check_invariant()
        self._flow_settled(consumer)
        self.trigger_read()

    # -- invariant -----------------------------------------------------------------------------------

    def check_invariant(self) -> None:
        if DEBUG_INVARIANTS and self.total_permits != self.permit_balance():
            self.invariant_drift_count += 1
            raise PermitInvariantError(
                f"permit drift on {self.context.name}: total={self.total_permits} "
                f"sum={self.permit_balance()}"
            )

    # -- reading -----------------------------------------------------------------------------------
    def trigger_read(self) -> None:
        if self.read_outstanding or self.closed:
            return
        self._read_more()

    @abstractmethod
    def _read_more(self) -> None: ...

    def entries_to_read(self, permits: int) -> int:
        """How many entries a read for ``permits`` messages should ask for (at least one).

        Rounded up, as Pulsar's ``calculateToRead``: the entry that does not fit whole goes out
        anyway (permits may go negative by less than one entry), so rounding down only cost a
        second read for it, once per FLOW."""
        avg = self.avg_messages_per_entry
        n = math.ceil(permits / avg) if avg > 1 else permits
        # (comparisons, not max() and min(): once per read)
        if n > self.max_read_batch:
            n = self.max_read_batch
        return n if n > 1 else 1

    def read_size(self, permits: int) -> tuple[int, int | None] | None:
        """(entries, max bytes or None) for a read on behalf of ``permits`` messages, within the
        dispatch rate limits (the topic's and the subscription's); None when they leave nothing
        now: the read is retried once they do."""
        context = self.context
        max_bytes: int | None = context.max_read_bytes
        if not context.rates or (self._rates_spare_active and self.cursor.is_active):
            return self.entries_to_read(permits), max_bytes
        # Counting entries, a limit on messages caps the entries read (not the messages asked for).
        entries = self.entries_to_read(permits) if self._rates_count_entries else 0
        for i, rate in enumerate(self.context.rates):
            budget = rate.budget()
            if budget is None:
                continue
            messages, nbytes = budget
            if messages <= 0:  # (nothing left on one measure or both: budget() gives (0, 0))
                if rate.limits_messages:
                    self.throttled_msg_events[i] += 1
                if rate.limits_bytes:
                    self.throttled_bytes_events[i] += 1
                if self._rate_timer is None:
                    self._rate_timer = self.context.loop.call_later(rate.wait(), self._rate_retry)
                return None
            if self._rates_count_entries:
                if messages < entries:
                    self.throttled_msg_events[i] += 1
                    entries = messages
            elif messages < permits:
                self.throttled_msg_events[i] += 1
                permits = messages
            if nbytes is not None and (max_bytes is None or nbytes < max_bytes):
                self.throttled_bytes_events[i] += 1
                max_bytes = nbytes
        return entries if self._rates_count_entries else self.entries_to_read(permits), max_bytes

    def context_changed(self, context: DispatchContext) -> None:
        """Settings of the context changed while the dispatcher runs (the dynamic configuration): its read sizes,
        how its rate limits count, and its rate limits (those it had, in their order, and maybe more after them)."""
        added = len(context.rates) - len(self.context.rates)
        self.context = context
        self.max_read_batch = context.max_read_batch
        self.throttled_msg_events += [0] * added
        self.throttled_bytes_events += [0] * added
        self._rates_spare_active = bool(context.rates) and not context.throttle_non_backlog
        self._rates_count_entries = context.rate_counts_entries

    def _rate_retry(self) -> None:
        self._rate_timer = None
        self.trigger_read()

    @property
    def rate_limited(self) -> bool:
        """A dispatch rate limit is in force (as of the last read_size)."""
        return any(rate.active for rate in self.context.rates)

    def rate_consumed(self, messages: int, nbytes: int, entries: int) -> None:
        """What a read sent, charged to the dispatch rate limits (its entries instead of its messages
        with dispatchThrottlingOnBatchMessageEnabled, as Pulsar's acquirePermitsForDeliveredMessages)."""
        if self._rates_spare_active and self.cursor.is_active:
            return
        if self._rates_count_entries:
            messages = entries
        for rate in self.context.rates:
            rate.consume(messages, nbytes)

    def note_dispatched(self, entries: int, messages: int) -> None:
        if entries:
            sample = messages / entries
            avg = self.avg_messages_per_entry
            self.avg_messages_per_entry = sample if avg == 0 else 0.5 * avg + 0.5 * sample

    def _begin_read(self) -> int:
        self.read_outstanding = True
        return self.read_epoch

    def _end_read(self, epoch: int, exc: BaseException | None) -> bool:
        """Common completion checks. Returns True when the entries should be dispatched."""
        self.read_outstanding = False
        if self.closed:
            return False
        if exc is not None:
            log.warning("read failed on %s: %s", self.context.name, exc)
            self.context.loop.call_later(0.1, self.trigger_read)
            return False
        if epoch != self.read_epoch:
            # The cursor moved while this read was in flight; its entries are stale.
            self.trigger_read()
            return False
        return True

    def cancel_reads(self) -> None:
        """Forget the outstanding read: its completion will be dropped."""
        self.read_epoch += 1
        if self.cursor.cancel_pending_read():
            self.read_outstanding = False

    def at_terminated_end(self) -> bool:
        """Whether the topic is terminated and read to its end: a read of new entries would wait for ever, so
        none is made and the consumers are told instead (as Pulsar's dispatchers tell them when such a read
        fails with NoMoreEntriesToRead: at each attempt)."""
        end = self.context.terminated_at()
        if end is None or self.cursor.read_position <= end:
            return False
        for consumer in list(self.consumers):
            consumer.reached_end_of_topic()
        return True

    def at_read_limit(self) -> bool:
        """Whether new entries may not be read now (an open transaction holds them back); the
        dispatcher is then woken when the limit moves on."""
        limit = self.context.read_limit()
        if limit is not None and self.cursor.read_position >= limit:
            self.context.limit_waiters.add(self)
            return True
        return False

    def clip_to_read_limit(self, entries: list[Entry]) -> list[Entry]:
        """The entries of a read of new entries that lie before the read limit; the cursor goes
        back to the first one beyond it (read again once the limit has moved on)."""
        limit = self.context.read_limit()
        if limit is None or not entries or entries[-1].position < limit:
            return entries
        keep = [e for e in entries if e.position < limit]
        self.cursor.seek(entries[len(keep)].position)
        self.context.limit_waiters.add(self)
        return keep

    def reads_need_general_path(self) -> bool:
        """Whether a read's entries may need more than their message counts to be dispatched: a transaction
        read limit, entries held or partly acknowledged by an open transaction, batch-index acks. The fused
        completions of reads served at once (``_read_inline``) then hand the read to the general one."""
        context = self.context
        return (context.held is not None or context.held_indexes is not None or bool(self.cursor.batch_acks)
                or context.read_limit() is not None)

    def filter_markers(self, entries: list[Entry]) -> list[tuple[Entry, EntryMeta]]:
        """Parse metadata once; marker entries and entries of aborted transactions are
        acknowledged and never delivered; entries held by a pending transactional ack are skipped
        (delivered again if that transaction aborts)."""
        out: list[tuple[Entry, EntryMeta]] = []
        markers: list[Position] = []
        held = self.context.held
        parse = self.context.entry_meta
        for e in entries:
            meta = parse(e)
            if meta.is_marker:
                markers.append(e.position)
                if meta.marker_type == SNAPSHOT_MARKER:
                    self.context.snapshot_marker(e.position, e.data)
            elif meta.txn is not None and self.context.txn_aborted(*meta.txn):
                markers.append(e.position)
            elif held is not None and held(e.position):
                continue
            else:
                out.append((e, meta))
        if markers:
            before = self.cursor.mark_delete_position
            self.cursor.delete(markers)
            if self.cursor.mark_delete_position != before:
                self.context.mark_delete_moved()
        return out

    def delivery_states(self) -> Callable[[Position, int], tuple[int, list[int] | None]] | None:
        """``delivery_state`` while some entry may be partly acknowledged (batch-index acks kept
        by the cursor or held by an open transaction); None when none is, the usual case: every
        entry then costs all its messages and goes without an ack_set (asked once per read)."""
        if self.cursor.batch_acks or self.context.held_indexes is not None:
            return self.delivery_state
        return None

    def delivery_state(self, pos: Position, num_messages: int) -> tuple[int, list[int] | None]:
        """(messages still to deliver, ack_set to send) for an entry about to be dispatched: a
        batch partly acknowledged by index (kept by the cursor, or held by an open transaction)
        costs only what is left of it."""
        batch_acks = self.cursor.batch_acks
        held = self.context.held_indexes
        words = batch_acks.get(pos) if batch_acks else None
        if held is not None:
            in_txn = held(pos)
            if in_txn is not None:
                words = ack_sets.merged(words, in_txn)
        if words is None:
            return num_messages, None
        return min(num_messages, ack_sets.unacked(words)), words

    # -- hooks -------------------------------------------------------------------------------------
    def _consumer_added(self, consumer: Consumer) -> None:
        self.trigger_read()

    def _consumer_removed(self, consumer: Consumer) -> None:
        """A consumer left (its permits are already subtracted)."""

    def _flow_settled(self, consumer: Consumer) -> None:
        """A FLOW was applied to a member consumer."""

    @abstractmethod
    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None: ...

    def on_acked(self, positions: list[Position]) -> None:
        """Entries were acknowledged (Shared drops them from its replay set)."""

    def on_writable(self) -> None:
        self.trigger_read()

    def redeliver_positions(self, positions: list[Position]) -> None:
        """Deliver these positions again (no consumer holds them: a transaction that
        acknowledged them aborted)."""
        self.cancel_reads()
        self.cursor.rewind()
        self.trigger_read()

    def on_cursor_reset(self) -> None:
        """The cursor was moved (seek/reset/skip): drop in-flight reads and start over."""
        self.cancel_reads()
        self.trigger_read()

    def close(self) -> None:
        self.closed = True
        self.context.limit_waiters.discard(self)
        self.lane.close()
        self.cancel_reads()
        if self._rate_timer is not None:
            self._rate_timer.cancel()
            self._rate_timer = None

    @property
    @abstractmethod
    def type_name(self) -> str: ...

    @property
    def active_consumer_name(self) -> str | None:
        return None

    # Shared / Key_Shared: reads of new entries paused on the cursor's acknowledgement holes (shared.py; PIP-299).
    paused_on_ack_state = False

    # -- Key_Shared's stats (nothing for the other types) -----------------------------------------
    allow_out_of_order = False

    @property
    def key_shared_mode(self) -> str | None:
        """AUTO_SPLIT or STICKY for Key_Shared (its subscription stats' keySharedMode)."""
        return None

    def consumer_key_stats(self) -> dict[Consumer, dict[str, Any]]:
        """Per consumer, its Key_Shared stats fields (key hash ranges, draining hashes)."""
        return {}
