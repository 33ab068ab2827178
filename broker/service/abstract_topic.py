"""What persistent and non-persistent topics share (Pulsar's AbstractTopic): producers, producer
access modes, the topic epoch, and the publish counters; and what both kinds answer, so that
callers need not ask which kind they hold (their subscriptions meet kinds.AnySubscription)."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from broker.errors import ProducerBusyError, ProducerFencedError, ProducerNameTakenError, ServiceNotReadyError
from broker.metadata.policy_table import DELAYED_DELIVERY, ENCRYPTION_REQUIRED, MAX_MESSAGE_SIZE, MAX_PRODUCERS
from broker.metadata.store import Derived
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.producer import Producer, ProducerState
from broker.service.rate_limits import PublishThrottle
from broker.service.replication import is_replicator_name
from broker.topic_name import TopicName, is_system_topic
from managed_ledger import Position

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.kinds import AnySubscription
    from broker.service.nonpersistent import NonPersistentTopic
    from broker.service.topic import PersistentTopic
    from broker.transactions.model import TxnID

T = TypeVar("T")

Mode = pb.ProducerAccessMode


class SendPolicy(NamedTuple):
    encryption_required: bool
    max_delivery_delay_ms: int  # 0 = no max (or delayed delivery is off)
    delayed_delivery: bool  # deliver_at is honoured by Shared / Key_Shared dispatchers
    max_message_size: int = 0  # the topic's maxMessageSize policy; 0 = only the broker's


# A topic's WaitForExclusive queue until a producer waits: shared, never appended to (an empty deque is ~770 bytes).
_NONE_WAITING: deque[tuple[Producer, int]] = deque()


class AbstractTopic(ABC):
    # Slots (a loaded topic's attributes are more than an instance dict shares its keys for, so each topic had a
    # dict of its own); "__dict__" keeps other attributes possible, a dict made only when one is set.
    __slots__ = ("__dict__", "_send_policy", "bytes_in", "closed", "created", "entries_added", "exclusive_producer",
                 "last_active", "loop", "msg_in", "name", "producers", "publish_throttle", "sequence_persisted",
                 "sequence_pushed", "service", "terminated_at", "topic_epoch", "waiting_producers")

    def __init__(self, service: BrokerService, name: TopicName) -> None:
        self.service = service
        self.name = name
        self.loop = asyncio.get_running_loop()
        self.producers: dict[str, Producer] = {}
        self.exclusive_producer: Producer | None = None
        self.topic_epoch = 0
        # WaitForExclusive producers queued for the exclusive slot, oldest first.
        self.waiting_producers = _NONE_WAITING
        # Deduplication: highest sequence id per producer name, sent to storage / stored (only
        # used where deduplication_enabled).
        self.sequence_pushed: dict[str, int] = {}
        self.sequence_persisted: dict[str, int] = {}
        # Set once the topic is terminated (its last position): no more producers or messages.
        self.terminated_at: Position | None = None
        self.msg_in = 0
        self.bytes_in = 0
        self.entries_added = 0
        self.created = time.time()
        # When the topic was last seen active (time.monotonic()): loaded, a producer left, a
        # subscription was deleted, or the inactive-topic check found it in use.
        self.last_active = time.monotonic()
        self.publish_throttle = PublishThrottle(self)
        self._send_policy = Derived(service.metadata, self._read_send_policy)
        self.closed = False

    def published_totals(self) -> tuple[int, int]:
        """Messages and bytes published to the topic since it loaded."""
        return self.msg_in, self.bytes_in

    @property
    def full_name(self) -> str:
        return self.name.full

    @property
    def deduplication_enabled(self) -> bool:
        return False

    @property
    def send_policy(self) -> SendPolicy:
        """What every SEND is checked against (policies); re-read only when the metadata changed."""
        return self._send_policy.get()

    def _read_send_policy(self) -> SendPolicy:
        policies = self.service.policies
        delayed = policies.get(self.name, DELAYED_DELIVERY)
        return SendPolicy(
            encryption_required=not is_system_topic(self.name.full) and policies.for_namespace(
                self.name.namespace, ENCRYPTION_REQUIRED),
            max_delivery_delay_ms=delayed.max_delay_ms if delayed.active else 0,
            delayed_delivery=delayed.active,
            max_message_size=policies.topic_value(self.name, MAX_MESSAGE_SIZE) or 0)

    @property
    def encryption_required(self) -> bool:
        """The namespace's encryption_required: every message must carry encryption keys."""
        return self.send_policy.encryption_required

    def last_sequence_id(self, producer_name: str) -> int:
        return -1

    # -- what both kinds answer ----------------------------------------------------------------------
    @abstractmethod
    def match_kind(self, persistent: Callable[[PersistentTopic], T],
                   non_persistent: Callable[[NonPersistentTopic], T]) -> T:
        """Call the function for this topic's kind: the one typed branch point for output whose
        shape differs by kind (Pulsar's TopicStats and NonPersistentTopicStats, internal stats)."""

    def subscribe_permitted(self, consumer: tuple[str, str, int]) -> bool:
        """Count a subscribe of (client host, consumer name, consumer id) against the subscribe
        rate; False when it is over it (persistent topics only, as in Pulsar)."""
        return True

    # Messages nobody can take now are dropped and counted (msgDropRate in stats), not kept:
    # non-persistent topics.
    drops_messages = False

    # Live subscriptions by name (each kind keeps its own).
    subscriptions: Mapping[str, AnySubscription]

    @abstractmethod
    async def last_message_id(self, compacted: bool = False) -> tuple[Position, int]:
        """(last entry position, batch index of its last message or -1); (-1,-1) when empty."""

    @abstractmethod
    def subscription_names(self) -> list[str]:
        """Names of the topic's subscriptions, sorted (persistent: stored ones too)."""

    # Entries published together get consecutive entry ids (False: every receipt carries the
    # same fixed id, as for non-persistent topics).
    consecutive_positions = True

    @abstractmethod
    def publish_entries(self, producer: Producer, entries: list[bytes], num_messages: int, nbytes: int,
                        callback: Callable[[Position | None, BaseException | None], None],
                        txn: TxnID | None = None) -> None:
        """Store or deliver ``entries`` (in order; ``num_messages`` and ``nbytes`` in all).
        ``callback`` runs once: the first entry's position (the receipts), or an error for all.
        ``txn``: transactional entries (persistent topics only: SEND refuses them elsewhere)."""

    def deduplicated_entries_stored(self, count: int, last: Position) -> None:  # noqa: B027 - optional hook
        """Entries were stored while deduplication is on (persistent topics snapshot the state)."""

    def _check_new_producer(self) -> None:  # noqa: B027 - optional hook
        """Raise when no producer may be added now (the persistent topic's backlog quota)."""

    # -- producers ---------------------------------------------------------------------------------
    def add_producer(self, producer: Producer, request_id: int) -> bool:
        """Attach ``producer``. Returns False when it is queued (WaitForExclusive)."""
        if self.closed:  # unloaded or deleted while the producer was being set up: it retries
            raise ServiceNotReadyError(f"Topic {self.name} is being closed; retry")
        self._check_new_producer()
        existing = self.producers.get(producer.name)
        if existing is not None:
            same_owner = (existing.cnx is producer.cnx and existing.producer_id == producer.producer_id)
            if existing.is_generated_name and producer.is_generated_name and same_owner \
                    and producer.epoch > existing.epoch:
                self.remove_producer(existing)
            elif existing.cnx is not producer.cnx:  # (server_cnx checks the holder's connection is alive)
                raise ProducerNameTakenError(
                    f"Producer with name '{producer.name}' is already connected to topic", existing.cnx)
            else:
                raise ProducerBusyError(f"Producer with name '{producer.name}' is already connected to topic")
        # A remote cluster's replicator is neither limited nor counted, nor are a system topic's producers (Pulsar's
        # isProducersExceeded and its count of user-created producers).
        if not is_replicator_name(producer.name) and not is_system_topic(self.name.full):
            limit = self.service.policies.get(self.name, MAX_PRODUCERS)
            if 0 < limit <= sum(1 for name in self.producers if not is_replicator_name(name)):
                raise ProducerBusyError("Topic reached max producers limit")
        mode = producer.access_mode
        holder = self.exclusive_producer
        if mode == Mode.Shared:
            if holder is not None:
                raise ProducerBusyError(f"Topic has an existing exclusive producer: {holder.name}")
        elif mode == Mode.Exclusive:
            if holder is not None or self.producers:
                raise ProducerFencedError(
                    f"Topic has an existing {'exclusive ' if holder else ''}producer; Exclusive access refused")
        elif mode == Mode.ExclusiveWithFencing:
            for other in list(self.producers.values()):
                other.cnx.producer_closed_by_broker(other.producer_id)
                self.remove_producer(other)
        elif mode == Mode.WaitForExclusive and (holder is not None or self.producers):
            producer.state = ProducerState.WAITING
            if self.waiting_producers is _NONE_WAITING:
                self.waiting_producers = deque()
            self.waiting_producers.append((producer, request_id))
            return False
        if mode != Mode.Shared:
            self.topic_epoch += 1
            producer.topic_epoch = self.topic_epoch
            self.exclusive_producer = producer
        self.producers[producer.name] = producer
        return True

    def remove_producer(self, producer: Producer) -> None:
        producer.close()
        self.last_active = time.monotonic()
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
        if self.exclusive_producer is producer:
            self.exclusive_producer = None
        if self.waiting_producers:
            self.waiting_producers = deque((p, r) for p, r in self.waiting_producers if p is not producer)
        self._grant_waiting()

    def _grant_waiting(self) -> None:
        while self.waiting_producers and self.exclusive_producer is None and not self.producers:
            producer, request_id = self.waiting_producers.popleft()
            producer.state = ProducerState.READY
            self.topic_epoch += 1
            producer.topic_epoch = self.topic_epoch
            self.exclusive_producer = producer
            self.producers[producer.name] = producer
            producer.cnx.write(commands.producer_success(
                request_id, producer.name, self.last_sequence_id(producer.name), producer.schema_version,
                self.topic_epoch, producer_ready=True))
