"""The dispatchers of non-persistent topics: nothing stored, nothing read, nothing redelivered.

Each published entry is offered once (``send``) to the consumer the subscription type selects;
when that consumer cannot take it now (no permits, or its transport is not writable), the entry
is dropped and the subscription counts it (msgDropRate). A delivered MESSAGE carries id (0, 0,
partition index); its cost in permits is the entry's message count, as for persistent topics.

FLOW is applied at once rather than through a lane: there is no read to order it with, and a
permit waiting in a lane would drop the messages that arrive meanwhile. The permit invariant of
base.py holds trivially (``pending_flow`` stays 0).

One dispatcher per subscription type, as in Pulsar:

- Exclusive / Failover: the active consumer, elected as in single_active.py; Failover consumers
  learn who is active through ACTIVE_CONSUMER_CHANGE.
- Shared: round robin over the available consumers, best priority level first (shared.py). Pulsar
  also drops every message while the dispatcher's permit total is <= 0, which a batch overdrawing
  one consumer can cause while another still has permits; here that other consumer gets them.
- Key_Shared: the owner of the message key's hash (key_selector.py). There is no per-key drain
  state to keep: nothing is ever redelivered. A key no consumer owns (outside every STICKY range)
  is released without being counted as dropped, as in Pulsar.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from broker.dispatch.context import Consumer, DispatchContext
from broker.dispatch.key_selector import KeySelector
from broker.dispatch.members import ConsumerMembers
from broker.dispatch.shared import next_round_robin
from broker.dispatch.single_active import ActiveConsumerElection
from broker.protocol.entry import EntryMeta
from managed_ledger import Position

# The message id of every receipt and every delivered message (Pulsar: entries made with (0,0)).
MESSAGE_POSITION = Position(0, 0)


def available(consumer: Consumer) -> bool:
    """May take a message now (Pulsar: permits > 0 and a writable channel)."""
    return consumer.permits > 0 and consumer.writable and not consumer.closed


class NonPersistentDispatcher(ConsumerMembers, ABC):
    # See Dispatcher.renew_when_empty.
    renew_when_empty = False

    def __init__(self, context: DispatchContext) -> None:
        super().__init__()
        self.context = context
        self.closed = False

    @property
    @abstractmethod
    def type_name(self) -> str: ...

    @property
    def active_consumer_name(self) -> str | None:
        return None

    @property
    def key_shared_mode(self) -> str | None:
        """AUTO_SPLIT or STICKY for Key_Shared (its subscription stats' keySharedMode)."""
        return None

    @abstractmethod
    def select(self, meta: EntryMeta) -> Consumer | None:
        """The consumer that takes this entry now, or None to drop it."""

    def _membership_changed(self, consumer: Consumer, joined: bool) -> None:
        """``consumer`` joined or left."""

    def validate_new_consumer(self, consumer: Consumer) -> None:
        """Raise ConsumerBusyError or ConsumerAssignError when ``consumer`` cannot join (Key_Shared
        checks its mode, ordering and ranges)."""

    # -- consumers and permits -------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.join(consumer)
        self._membership_changed(consumer, True)

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.leave(consumer):
            self._membership_changed(consumer, False)

    def flow(self, consumer: Consumer, permits: int) -> None:
        # Applied at once (no lane): there is no read loop here to race with.
        consumer.permits += permits
        if self.is_member(consumer):
            self.total_permits += permits

    def on_writable(self) -> None:
        """Nothing waits to be sent: a message no consumer could take was dropped."""

    def close(self) -> None:
        self.closed = True

    # -- dispatch --------------------------------------------------------------------------------
    def send(self, entry: bytes, meta: EntryMeta) -> bool:
        """Deliver ``entry`` to the selected consumer; False when nobody can take it (dropped and
        counted). Key_Shared releases an entry whose key no consumer owns uncounted."""
        consumer = self.select(meta)
        if consumer is None:
            return False
        self._deliver(consumer, entry, meta)
        return True

    def _deliver(self, consumer: Consumer, entry: bytes, meta: EntryMeta) -> None:
        self.take_permits(consumer, meta.num_messages)
        consumer.send_unstored(entry, meta.num_messages)


class NonPersistentSingleActiveDispatcher(ActiveConsumerElection, NonPersistentDispatcher):
    def __init__(self, context: DispatchContext, failover: bool) -> None:
        super().__init__(context)
        self._init_election(failover, context.loop, context.partition_index)

    def _membership_changed(self, consumer: Consumer, joined: bool) -> None:
        new = self._elect()
        changed = new is not self.active
        self.active = new
        if not self.failover:
            return
        if changed:
            for c in self.consumers:
                self._notify(c, c is new)
        elif joined:
            self._notify(consumer, consumer is new)  # only the newcomer needs telling

    def select(self, meta: EntryMeta) -> Consumer | None:
        active = self.active
        return active if active is not None and available(active) else None


class NonPersistentSharedDispatcher(NonPersistentDispatcher):
    def __init__(self, context: DispatchContext) -> None:
        super().__init__(context)
        self._rr = 0

    @property
    def type_name(self) -> str:
        return "Shared"

    def select(self, meta: EntryMeta) -> Consumer | None:
        consumer, self._rr = next_round_robin(self.consumers, self._rr, available)
        return consumer


class NonPersistentKeySharedDispatcher(NonPersistentDispatcher):
    renew_when_empty = True

    def __init__(self, context: DispatchContext, sticky: bool, allow_out_of_order: bool) -> None:
        super().__init__(context)
        self.allow_out_of_order = allow_out_of_order
        self.selector = KeySelector(sticky)

    @property
    def type_name(self) -> str:
        return "Key_Shared"

    @property
    def key_shared_mode(self) -> str | None:
        return "STICKY" if self.selector.sticky else "AUTO_SPLIT"

    def validate_new_consumer(self, consumer: Consumer) -> None:
        self.selector.validate_new_consumer(consumer, self.consumers, self.allow_out_of_order)

    def _membership_changed(self, consumer: Consumer, joined: bool) -> None:
        self.selector.rebuild(self.consumers)

    def select(self, meta: EntryMeta) -> Consumer | None:
        owner = self.selector.owner(self.selector.key_hash(meta.sticky_key))
        return owner if owner is not None and available(owner) else None

    def send(self, entry: bytes, meta: EntryMeta) -> bool:
        owner = self.selector.owner(self.selector.key_hash(meta.sticky_key))
        if owner is None:
            # No consumer's range covers the key (STICKY): released without counting a drop, as
            # Pulsar's NonPersistentStickyKeyDispatcherMultipleConsumers.sendMessages does.
            return True
        if not available(owner):
            return False
        self._deliver(owner, entry, meta)
        return True
