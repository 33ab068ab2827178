"""Everything a dispatcher knows of the world above it: one narrow, typed context.

The dispatch package imports nothing from the packages above it (service, admin, server):
what a dispatcher needs from above comes in here:

- ``Consumer``: what a dispatcher calls on a consumer (the service layer's Consumer,
  service/consumer.py, implements it);
- ``DispatchContext``: the loop, the subscription's name and partition, the read batch size, the
  policies in force (``DispatchPolicy``, a snapshot re-resolved when the metadata changes), the
  dispatch rate limits it consults (``DispatchRateLimit``), the compacted view (``CompactedView``),
  the registry of dispatchers blocked on an unacked limit or paused on their acknowledgement holes
  (``UnackedBlocked``), and the two hooks of replicated subscriptions (a snapshot marker was read;
  the mark-delete moved);
- ``Delivery``: one entry on its way to a consumer (what ``Consumer.send_entries`` takes).

The service layer builds a context in one place (service/dispatch_context.py); a
test builds one by hand from a loop and a few values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, MutableSet, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import EntryMeta, entry_messages, entry_meta
from managed_ledger import Entry, Position


class Delivery(NamedTuple):
    """One entry on its way to a consumer (per dispatched entry: the dispatchers build it with
    ``new_delivery``, without the NamedTuple's keyword-taking ``__new__``)."""

    entry: Entry
    # Permits it costs: messages of the entry not yet acknowledged (all of them unless batch-index acked).
    messages: int
    redelivery_count: int
    # Batch-index ack state: bit i set = message i still to deliver; None when nothing was acked.
    ack_set: list[int] | None


def new_delivery(entry: Entry, messages: int, redelivery_count: int, ack_set: list[int] | None) -> Delivery:
    return _new_tuple(Delivery, (entry, messages, redelivery_count, ack_set))


_new_tuple = tuple.__new__


class FrameSink(Protocol):
    """The consumer's connection, as far as a dispatcher writes to it (ACTIVE_CONSUMER_CHANGE), and a consumer
    refused for its hash range asks whether it is alive (broker.errors.Holder)."""

    def write(self, data: bytes) -> None: ...

    async def check_liveness(self) -> bool | None: ...


class Consumer(Protocol):
    """What a dispatcher reads and calls on a consumer. Membership is by identity: two consumers
    with the same id and name are different members.

    Permits: FLOW adds to ``permits`` and ``pending_flow`` on the connection's loop; the dispatcher
    settles ``pending_flow`` and spends ``permits`` (which may go below zero: an entry is never split).
    """

    permits: int
    pending_flow: int
    # Shared: stopped at maxUnackedMessagesPerConsumer until acks bring it under half of that.
    blocked: bool
    redelivered: int

    @property
    def consumer_id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def priority_level(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def writable(self) -> bool: ...
    @property
    def unacked_messages(self) -> int: ...
    @property
    def read_compacted(self) -> bool: ...
    @property
    def read_compacted_from_earliest(self) -> bool: ...
    @property
    def key_shared_meta(self) -> pb.KeySharedMeta | None: ...
    @property
    def hash_ranges(self) -> Sequence[tuple[int, int]]: ...
    @property
    def cnx(self) -> FrameSink: ...

    def send_entries(self, batch: Iterable[Delivery]) -> int:
        """Write MESSAGE frames, remember them as pending; the messages sent (permits they cost)."""
        ...

    def send_unstored(self, entry: bytes, messages: int) -> None:
        """Write one MESSAGE of a non-persistent topic (nothing remembered as pending)."""
        ...

    def reached_end_of_topic(self) -> None:
        """The subscription has read the terminated topic to its end (REACHED_END_OF_TOPIC, where the client
        understands it)."""
        ...

    def remove_pending(self, pos: Position) -> bool: ...

    def clear_pending(self) -> list[Position]:
        """Forget every pending entry; their positions, sorted."""
        ...


class DispatchRateLimit(Protocol):
    """A dispatch rate limit (the service layer's DispatchRate): asked before a read,
    told what the read sent."""

    @property
    def active(self) -> bool: ...

    @property
    def limits_messages(self) -> bool:
        """A limit on messages is in force (as of the last budget())."""
        ...

    @property
    def limits_bytes(self) -> bool:
        """A limit on bytes is in force (as of the last budget())."""
        ...

    def budget(self) -> tuple[int, int | None] | None:
        """(messages, bytes or None) that may be dispatched now; None = no limit at all."""
        ...

    def wait(self) -> float:
        """Seconds until there is budget again."""
        ...

    def consume(self, messages: int, nbytes: int) -> None: ...


class CompactedEntry(Protocol):
    @property
    def entry(self) -> Entry: ...
    @property
    def messages(self) -> int: ...
    @property
    def ack_set(self) -> list[int] | None: ...


class CompactedView(Protocol):
    """The topic's compacted view (service/compacted_view.py's): the latest message per key up to
    ``horizon``, which a read_compacted consumer reads first. It is read from storage, not held."""

    @property
    def horizon(self) -> Position: ...

    def read_entries(self, start: Position, max_entries: int, max_bytes: int | None,
                     callback: Callable[[Sequence[CompactedEntry], bool, BaseException | None], None]) -> None:
        """Read the entries from the first at or after topic position ``start`` (at most ``max_entries``;
        past the first, ``max_bytes`` bytes). ``callback(entries, at_end, error)`` runs later on the loop;
        ``at_end``: the view's last entry is among them."""


class ReadTrigger(Protocol):
    def trigger_read(self) -> None: ...


class UnackedBlocked(Protocol):
    """A dispatcher blocked on an unacked limit (its subscription's or a consumer's), or paused on its acknowledgement
    holes (``DispatchPolicy.pause_on_ack_state``)."""

    def unacked_limits_changed(self) -> None:
        """The policies changed: a limit it is blocked on may have been raised or removed, the pause turned off."""


class DispatchPolicy(NamedTuple):
    """The policies a dispatcher reads (topic, else namespace, else broker), as one snapshot."""

    # maxUnackedMessagesPerConsumer (Shared / Key_Shared); 0 = no limit. Read before every read:
    # a change reaches the live consumers (blocked ones re-plan through ``unacked_blocked``).
    max_unacked_per_consumer: int = 0
    # maxUnackedMessagesOnSubscription; 0 = no limit. Read before every read of new entries.
    max_unacked_per_subscription: int = 0
    # Delayed delivery on: deliver_at_time is honoured (Shared / Key_Shared). Read per read.
    delayed_delivery: bool = True
    # dispatcherPauseOnAckStatePersistent (PIP-299; Shared / Key_Shared): an ack that leaves the cursor with more
    # acknowledgement holes than its storage keeps pauses the reads of new entries until acks bring it back within.
    # Read per ack and, once paused, per read.
    pause_on_ack_state: bool = False


def _no_policy() -> DispatchPolicy:
    return DispatchPolicy()


def _no_view() -> CompactedView | None:
    return None


def _ignore_marker(position: Position, entry: bytes) -> None:
    pass


def _nothing() -> None:
    pass


def _no_limit() -> Position | None:
    return None


def _parse_entry_meta(entry: Entry) -> EntryMeta:
    return entry_meta(entry.data)


def _plain_entry_messages(entry: Entry) -> int:
    return entry_messages(entry.data)


def _not_aborted(most: int, least: int) -> bool:
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchContext:
    loop: asyncio.AbstractEventLoop
    # The subscription's name (logs, errors).
    name: str
    # Partition of a partitioned topic, -1 otherwise (Failover spreads partitions by it).
    partition_index: int = -1
    # The topic's full name: a persistent Failover subscription of a non-partitioned topic elects its active
    # consumer from a hash ring by it (every partition too with activeConsumerFailoverConsistentHashing).
    topic_name: str = ""
    failover_consistent_hashing: bool = False
    # dispatcherMaxReadBatchSize: entries per read, at most.
    max_read_batch: int = 100
    # dispatcherMaxReadSizeBytes: bytes per read, at most (past the first entry).
    max_read_bytes: int = 5 * 1024 * 1024
    # The policies in force now (cheap to call: re-resolved only after a metadata change).
    policy: Callable[[], DispatchPolicy] = _no_policy
    # The dispatch rate limits consulted before every read: the topic's and the subscription's.
    rates: Sequence[DispatchRateLimit] = ()
    # dispatchThrottlingOnNonBacklogConsumerEnabled: False spares reads and sends while the cursor is
    # active (not backlogged) from the rate limits.
    throttle_non_backlog: bool = True
    # dispatchThrottlingOnBatchMessageEnabled: the limits on messages count entries (a batch is one).
    rate_counts_entries: bool = False
    # The topic's compacted view, when it has one.
    compacted_view: Callable[[], CompactedView | None] = _no_view
    # Dispatchers blocked on maxUnackedMessagesOnSubscription, with a consumer blocked on
    # maxUnackedMessagesPerConsumer, or paused on their acknowledgement holes: told after a policy change.
    unacked_blocked: MutableSet[UnackedBlocked] = field(default_factory=set)
    # Replicated subscriptions: a snapshot marker was read at this position (its entry bytes) ...
    snapshot_marker: Callable[[Position, bytes], None] = _ignore_marker
    # ... and the mark-delete moved because the dispatcher acknowledged markers itself.
    mark_delete_moved: Callable[[], None] = _nothing
    # Transactions: reads of new entries stop before this position (the first entry of the oldest
    # transaction still open on the topic: Pulsar's maxReadPosition); None = no limit ...
    read_limit: Callable[[], Position | None] = _no_limit
    # ... the dispatchers stopped there, woken (trigger_read) when it moves on ...
    limit_waiters: MutableSet[ReadTrigger] = field(default_factory=set)
    # The topic's last entry once it is terminated (no entry will ever come after it), else None.
    terminated_at: Callable[[], Position | None] = _no_limit
    # ... an entry of this aborted transaction (most, least bits) is acknowledged, never delivered ...
    txn_aborted: Callable[[int, int], bool] = _not_aborted
    # ... an entry acknowledged in a transaction still open is not delivered (None: no such acks) ...
    held: Callable[[Position], bool] | None = None
    # ... and the batch indexes open transactions acknowledged in an entry (ack_set words, bit set =
    # not acknowledged by any of them), left out when it is delivered; None when there are none.
    held_indexes: Callable[[Position], list[int] | None] | None = None
    # An entry's parsed metadata: the topic's ``SharedEntryMetas`` (entry_metas.py) parses each
    # entry once for all its subscriptions; by default each read parses its own.
    entry_meta: Callable[[Entry], EntryMeta] = _parse_entry_meta
    # What a plain entry costs, cheaper than its EntryMeta: its messages when it is sure to be none of a
    # marker, a transaction's entry, a delayed message (deliver_at_time) or a chunk, else 0 (then ask
    # ``entry_meta``). The topic's ``SharedEntryMetas`` gives ``messages``; the two must agree (the default
    # agrees with the default ``entry_meta``).
    entry_messages: Callable[[Entry], int] = _plain_entry_messages
