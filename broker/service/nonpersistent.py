"""Non-persistent topics (``non-persistent://...``): nothing is stored.

A SEND is answered at once with a receipt for message id (0,0), as Pulsar's NonPersistentTopic
does, and the entry is then pushed to every subscription: to a consumer that can take it now
(permits > 0 and a writable transport), or else it is dropped and counted (msgDropRate in the
subscription's stats). A delivered MESSAGE carries id (0, 0, partition index); its cost in
permits is the entry's message count (num_messages_in_batch), as for persistent topics.

There is no cursor, backlog, acknowledgement, redelivery, seek target, deduplication or delayed
delivery: the C++ client never acknowledges these messages. A subscription is deleted when its
last consumer leaves, and the topic is forgotten once it has neither producers nor consumers
(Pulsar garbage-collects it after a minute of inactivity; it holds nothing worth keeping). One no
client ever attached to (an admin's create, a refused SUBSCRIBE) is collected by the
inactive-topic monitor, as Pulsar's checkGC does.

The dispatchers (one per subscription type, FLOW applied at once) are in
broker/dispatch/nonpersistent.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

from broker.dispatch.factory import non_persistent_dispatcher
from broker.dispatch.nonpersistent import MESSAGE_POSITION, NonPersistentDispatcher
from broker.errors import NotAllowedError, ServiceNotReadyError, UnsupportedOperationError
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import EntryMeta, entry_meta
from broker.service.abstract_topic import AbstractTopic
from broker.service.consumer import DepartedOut
from broker.service.dispatch_context import non_persistent_context
from broker.service.producer import Producer
from broker.service.replication import NonPersistentReplicator
from broker.service.subscription import check_consumer_admission
from broker.tasks import OwnedTasks
from broker.topic_name import is_system_topic
from managed_ledger import Position

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.consumer import Consumer
    from broker.service.topic import PersistentTopic
    from broker.topic_name import TopicName
    from broker.transactions.model import TxnID

log = logging.getLogger(__name__)
T = TypeVar("T")
Sub = pb.CommandSubscribe

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
        self.departed = DepartedOut()
        self.subscription_properties: dict[str, str] = {}  # kept while the topic lives (nothing is stored)

    async def set_subscription_properties(self, properties: Mapping[str, str]) -> None:
        self.subscription_properties = dict(properties)

    @property
    def consumers(self) -> list[Consumer]:
        # The dispatcher knows its members as dispatch.context.Consumer; every one of them was
        # added by add_consumer, which takes a service Consumer.
        return cast("list[Consumer]", self.dispatcher.consumers) if self.dispatcher is not None else []

    @property
    def backlog(self) -> int:
        return 0

    def type_name(self) -> str:
        return self.dispatcher.type_name if self.dispatcher is not None else "Exclusive"

    def _make_dispatcher(self, consumer: Consumer) -> NonPersistentDispatcher:
        return non_persistent_dispatcher(consumer.sub_type, consumer.key_shared_meta, non_persistent_context(self))

    def add_consumer(self, consumer: Consumer) -> None:
        check_consumer_admission(self, consumer)
        d = self.dispatcher
        if d is None or (not d.consumers and (self.sub_type != consumer.sub_type or d.renew_when_empty)):
            if d is not None:
                d.close()
            d = self._make_dispatcher(consumer)
            self.dispatcher = d
            self.sub_type = consumer.sub_type
        d.validate_new_consumer(consumer)
        d.add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.departed.add(consumer)
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

    # -- what has no meaning without storage (AnySubscription's neutral answers) -------------------
    @property
    def replicated(self) -> bool:
        return False

    def set_replicated(self, enabled: bool = True) -> bool:
        """Only durable subscriptions of persistent topics are replicated."""
        return False

    @property
    def last_mark_delete(self) -> Position | None:
        """No cursor, no mark-delete (PROTOCOL.md section 14)."""
        return None

    async def acknowledge_in_txn(self, consumer: Consumer, txn: TxnID, cumulative: bool,
                                 message_ids: Sequence[pb.MessageIdData]) -> None:
        raise NotAllowedError("Transactions are not supported on non-persistent topics")

    def acknowledge(self, consumer: Consumer, cumulative: bool, message_ids: Sequence[pb.MessageIdData]) -> None:
        """Nothing stored, nothing to acknowledge (the C++ client never acks these)."""

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Nothing is kept to redeliver."""

    async def seek(self, message_id: pb.MessageIdData | None, publish_time: int) -> None:
        """Nothing stored to seek in: Pulsar answers success."""

    async def unsubscribed(self) -> None:
        """It went with its last consumer."""

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

    @property
    def in_use_for_schema(self) -> bool:
        """Pulsar's NonPersistentTopic.addSchemaIfIdleOrCheckCompatible: a producer, a consumer without an
        AUTO_CONSUME schema, or anything ever published; a consumer's schema is then checked, not adopted."""
        return (bool(self.producers) or not self.is_empty
                or any(not c.auto_consume for s in self.subscriptions.values() for c in s.consumers))

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

    def match_kind(self, persistent: Callable[[PersistentTopic], T],
                   non_persistent: Callable[[NonPersistentTopic], T]) -> T:
        return non_persistent(self)

    def subscription_names(self) -> list[str]:
        """Only live subscriptions: nothing is stored."""
        return sorted(self.subscriptions)

    drops_messages = True
    consecutive_positions = False  # every receipt carries MESSAGE_POSITION

    def publish_entries(self, producer: Producer, entries: list[bytes], num_messages: int, nbytes: int,
                        callback: Callable[[Position | None, BaseException | None], None],
                        txn: TxnID | None = None) -> None:
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
        properties: Mapping[str, str] | None = None,
    ) -> NonPersistentSubscription:
        """``initial_position`` and ``start`` have no meaning without stored messages."""
        self._check_open()
        sub = self.subscriptions.get(name)
        if sub is None:
            sub = self.subscriptions[name] = NonPersistentSubscription(self, name, durable)
            sub.subscription_properties = dict(properties or {})
        return sub

    def remove_subscription(self, sub: NonPersistentSubscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        sub.close()
        self._forget_if_idle()

    async def delete_subscription(self, sub: NonPersistentSubscription) -> None:
        self.remove_subscription(sub)

    async def last_message_id(self, compacted: bool = False) -> tuple[Position, int]:
        """Not supported: Pulsar 4.0 answers GetLastMessageId with UnknownError, which the clients
        raise at once (a reader's has_message_available too), rather than a last id that is not one."""
        raise UnsupportedOperationError("GetLastMessageId is not supported on non-persistent topic")

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

    def forget_inactive(self) -> None:
        """The inactive-topic monitor's: no client attached for the inactivity limit."""
        self._forget_if_idle()

    async def close(self) -> None:
        self.closed = True
        self.publish_throttle.release()
        for sub in list(self.subscriptions.values()):
            sub.close()
        self.update_replication()
        await self._closing.wait()
