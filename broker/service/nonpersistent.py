"""Non-persistent topics (``non-persistent://...``): nothing is stored.

A SEND is answered at once with a receipt for message id (0,0), as Pulsar's NonPersistentTopic
does, and the entry is then pushed to every subscription: to a consumer that can take it now
(permits > 0 and a writable transport), or else it is dropped and counted (msgDropRate in the
subscription's stats). A delivered MESSAGE carries id (0, 0, partition index); its cost in
permits is the entry's message count (num_messages_in_batch), as for persistent topics.

There is no cursor, backlog, acknowledgement, redelivery, seek target, deduplication or delayed
delivery: the C++ client never acknowledges these messages. A subscription is deleted when its
last consumer leaves, and the topic is forgotten once it has neither producers nor consumers
(Pulsar garbage-collects it after a minute of inactivity; it holds nothing worth keeping).

FLOW is applied at once rather than through a dispatcher lane: there is no read to order it
with, and a permit waiting in a lane would drop the messages that arrive meanwhile. The permit
invariant of dispatch/base.py holds trivially (``pending_flow`` stays 0).

One dispatcher per subscription type, as in Pulsar:

- Exclusive / Failover: the active consumer, elected as in single_active.py; Failover consumers
  learn who is active through ACTIVE_CONSUMER_CHANGE.
- Shared: round robin over the available consumers, best priority level first (shared.py).
- Key_Shared: the owner of the message key's hash (key_selector.py). There is no per-key drain
  state to keep: nothing is ever redelivered.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.dispatch.entry_meta import EntryMeta, entry_meta
from broker.dispatch.key_selector import KeySelector, sticky_key_hash
from broker.dispatch.members import ConsumerMembers
from broker.dispatch.shared import next_round_robin
from broker.dispatch.single_active import ActiveConsumerElection
from broker.errors import ServiceNotReadyError
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.abstract_topic import AbstractTopic
from broker.service.producer import Producer
from broker.service.replication import NonPersistentReplicator
from broker.service.subscription import check_consumer_admission
from broker.tasks import OwnedTasks
from broker.topic_name import is_system_topic
from managed_ledger import Position

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.consumer import Consumer
    from broker.topic_name import TopicName

log = logging.getLogger(__name__)
Sub = pb.CommandSubscribe

# The message id of every receipt and every delivered message (Pulsar: entries made with (0,0)).
MESSAGE_POSITION = Position(0, 0)
# GetLastMessageId has no meaning here; PROTOCOL.md section 14 recommends "empty topic".
NO_MESSAGE = Position(-1, -1)


def available(consumer: Consumer) -> bool:
    """May take a message now (Pulsar: permits > 0 and a writable channel)."""
    return consumer.permits > 0 and consumer.writable and not consumer.closed


def deliver(consumer: Consumer, entry: bytes, messages: int) -> None:
    """Write one MESSAGE. Nothing is remembered as pending: these messages are never acknowledged."""
    consumer.cnx.write(commands.message(consumer.consumer_id, MESSAGE_POSITION.ledger_id,
                                        MESSAGE_POSITION.entry_id, consumer.partition_index, 0, entry))
    consumer.msg_out += messages
    consumer.bytes_out += len(entry)
    consumer.last_consumed = time.time()


# -- dispatchers ----------------------------------------------------------------------------------

class NonPersistentDispatcher(ConsumerMembers, ABC):
    def __init__(self, subscription: NonPersistentSubscription) -> None:
        super().__init__()
        self.subscription = subscription
        self.closed = False

    @property
    @abstractmethod
    def type_name(self) -> str: ...

    @property
    def active_consumer_name(self) -> str | None:
        return None

    @abstractmethod
    def select(self, meta: EntryMeta) -> Consumer | None:
        """The consumer that takes this entry now, or None to drop it."""

    def _membership_changed(self, consumer: Consumer, joined: bool) -> None:
        """``consumer`` joined or left."""

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
        """Deliver ``entry`` to the selected consumer; False when nobody can take it (dropped)."""
        consumer = self.select(meta)
        if consumer is None:
            return False
        self.take_permits(consumer, meta.num_messages)
        deliver(consumer, entry, meta.num_messages)
        return True


class NonPersistentSingleActiveDispatcher(ActiveConsumerElection, NonPersistentDispatcher):
    def __init__(self, subscription: NonPersistentSubscription, failover: bool) -> None:
        super().__init__(subscription)
        topic = subscription.topic
        self._init_election(failover, topic.loop, topic.name.partition_index)

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
    def __init__(self, subscription: NonPersistentSubscription) -> None:
        super().__init__(subscription)
        self._rr = 0

    @property
    def type_name(self) -> str:
        return "Shared"

    def select(self, meta: EntryMeta) -> Consumer | None:
        consumer, self._rr = next_round_robin(self.consumers, self._rr, available)
        return consumer


class NonPersistentKeySharedDispatcher(NonPersistentDispatcher):
    def __init__(self, subscription: NonPersistentSubscription, sticky: bool, allow_out_of_order: bool) -> None:
        super().__init__(subscription)
        self.allow_out_of_order = allow_out_of_order
        self.selector = KeySelector(sticky)

    @property
    def type_name(self) -> str:
        return "Key_Shared"

    def validate_new_consumer(self, consumer: Consumer) -> None:
        self.selector.validate_new_consumer(consumer, self.consumers, self.allow_out_of_order)

    def _membership_changed(self, consumer: Consumer, joined: bool) -> None:
        self.selector.rebuild(self.consumers)

    def select(self, meta: EntryMeta) -> Consumer | None:
        owner = self.selector.owner(sticky_key_hash(meta.sticky_key))
        return owner if owner is not None and available(owner) else None


# -- subscription ---------------------------------------------------------------------------------

class NonPersistentSubscription:
    def __init__(self, topic: NonPersistentTopic, name: str, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.durable = durable
        self.sub_type: int | None = None
        self.dispatcher: NonPersistentDispatcher | None = None
        self.created = time.time()
        # Messages no consumer could take (msgDropRate, pulsar_py_subscription_msg_dropped_total).
        self.msg_dropped = 0
        # Read by the stats sampler like a persistent subscription's; nothing is ever acknowledged.
        self.msg_ack_counter = 0

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers if self.dispatcher is not None else []

    @property
    def backlog(self) -> int:
        return 0

    def type_name(self) -> str:
        return self.dispatcher.type_name if self.dispatcher is not None else "Exclusive"

    def _make_dispatcher(self, consumer: Consumer) -> NonPersistentDispatcher:
        t = consumer.sub_type
        if t == Sub.Shared:
            return NonPersistentSharedDispatcher(self)
        if t == Sub.Key_Shared:
            meta = consumer.key_shared_meta
            sticky = meta is not None and meta.keySharedMode == pb.KeySharedMode.STICKY
            ooo = meta is not None and meta.allowOutOfOrderDelivery
            return NonPersistentKeySharedDispatcher(self, sticky, ooo)
        return NonPersistentSingleActiveDispatcher(self, failover=(t == Sub.Failover))

    def add_consumer(self, consumer: Consumer) -> None:
        check_consumer_admission(self, consumer)
        d = self.dispatcher
        if d is None or (not d.consumers and (
                self.sub_type != consumer.sub_type or isinstance(d, NonPersistentKeySharedDispatcher))):
            if d is not None:
                d.close()
            d = self._make_dispatcher(consumer)
            self.dispatcher = d
            self.sub_type = consumer.sub_type
        if isinstance(d, NonPersistentKeySharedDispatcher):
            d.validate_new_consumer(consumer)
        d.add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        consumer.closed = True
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        self.drop_if_unused()

    def drop_if_unused(self) -> None:
        """Nothing outlives the consumers here: no position to remember."""
        if not self.consumers:
            self.topic.remove_subscription(self)

    def dispatch(self, entry: bytes, meta: EntryMeta) -> None:
        d = self.dispatcher
        if d is None:
            return  # created by a producer's initial subscription, never joined: Pulsar counts nothing
        if not d.send(entry, meta):
            self.msg_dropped += meta.num_messages

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Nothing is kept to redeliver."""

    def disconnect_consumers(self) -> None:
        for c in list(self.consumers):
            c.cnx.consumer_closed_by_broker(c)

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()


# -- topic ----------------------------------------------------------------------------------------

class NonPersistentTopic(AbstractTopic):
    def __init__(self, service: BrokerService, name: TopicName) -> None:
        super().__init__(service, name)
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        # Set while a producer is being added: one it replaces or fences must not make the topic
        # look idle (and forgotten) just before the newcomer arrives.
        self._adding_producer = False
        # Geo-replication: remote cluster -> its replicator, while the topic has producers of its
        # own (only their messages are replicated; see update_replication).
        self.replicators: dict[str, NonPersistentReplicator] = {}
        self._closing = OwnedTasks(f"topic {name}")

    @property
    def is_empty(self) -> bool:
        """Nothing was ever published (a consumer's schema may then still be registered)."""
        return self.entries_added == 0

    @property
    def is_idle(self) -> bool:
        return not self.producers and not self.waiting_producers \
            and not any(s.consumers for s in self.subscriptions.values())

    def _check_open(self) -> None:
        if self.closed:
            # Forgotten while the request waited: the client retries and gets a fresh topic.
            raise ServiceNotReadyError(f"Topic {self.name} is being closed")

    # -- producers -------------------------------------------------------------------------------
    def _check_new_producer(self) -> None:
        self._check_open()

    def add_producer(self, producer: Producer, request_id: int) -> bool:
        self._adding_producer = True
        try:
            added = super().add_producer(producer, request_id)
        finally:
            self._adding_producer = False
        self.update_replication()
        return added

    def remove_producer(self, producer: Producer) -> None:
        super().remove_producer(producer)
        self.update_replication()
        self._forget_if_idle()

    consecutive_positions = False  # every receipt carries MESSAGE_POSITION

    def publish_entries(self, producer: Producer, entries: list[bytes], num_messages: int, nbytes: int,
                        callback: Callable[[Position | None, BaseException | None], None]) -> None:
        self.msg_in += num_messages
        self.bytes_in += nbytes
        self.entries_added += len(entries)
        callback(MESSAGE_POSITION, None)  # the receipts go first, as in Pulsar
        # Another cluster's replicator: its messages are not sent on (and never replicated here).
        replicators = self.replicators.values() if self.replicators and not producer.replicator else ()
        if not self.subscriptions and not replicators:
            return
        for entry in entries:
            meta = entry_meta(entry)
            for sub in list(self.subscriptions.values()):
                sub.dispatch(entry, meta)
            for replicator in replicators:
                replicator.offer(entry, meta.num_messages)

    # -- subscriptions ---------------------------------------------------------------------------
    async def get_or_create_subscription(
        self, name: str, durable: bool, initial_position: int, start: pb.MessageIdData | None,
    ) -> NonPersistentSubscription:
        """``initial_position`` and ``start`` have no meaning without stored messages."""
        self._check_open()
        sub = self.subscriptions.get(name)
        if sub is None:
            sub = self.subscriptions[name] = NonPersistentSubscription(self, name, durable)
        return sub

    def remove_subscription(self, sub: NonPersistentSubscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        sub.close()
        self._forget_if_idle()

    async def delete_subscription(self, sub: NonPersistentSubscription) -> None:
        self.remove_subscription(sub)

    async def last_message_id(self, compacted: bool = False) -> tuple[Position, int]:
        """Pulsar does not support it here; PROTOCOL.md section 14 answers "empty topic"."""
        return NO_MESSAGE, -1

    # -- geo-replication ---------------------------------------------------------------------------
    def update_replication(self) -> None:
        """A replicator per remote cluster of the replication policy, while the topic is open and
        has producers of its own (called when producers come and go, and after metadata changes).
        Only local producers' messages are replicated, so two clusters' topics never keep each
        other alive through their replicators' producers."""
        local = not self.closed and any(not p.replicator for p in self.producers.values())
        wanted = set(self.service.replication_targets(self.name)) \
            if local and not is_system_topic(self.name.full) else set()
        for remote in [r for r in self.replicators if r not in wanted]:
            self._closing.spawn(self.replicators.pop(remote).close(), loop=self.loop)
        for remote in sorted(wanted - set(self.replicators)):
            replicator = self.replicators[remote] = NonPersistentReplicator(self, remote)
            replicator.start()

    # -- lifecycle -------------------------------------------------------------------------------
    def _forget_if_idle(self) -> None:
        if self.is_idle and not self.closed and not self._adding_producer:
            self.closed = True
            self.publish_throttle.release()
            for sub in list(self.subscriptions.values()):
                sub.close()
            self.update_replication()
            self.service.forget_non_persistent_topic(self)

    async def close(self) -> None:
        self.closed = True
        self.publish_throttle.release()
        for sub in list(self.subscriptions.values()):
            sub.close()
        self.update_replication()
        await self._closing.wait()
