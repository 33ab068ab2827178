"""A persistent topic: a managed ledger, its producers and its subscriptions."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from broker.dispatch.entry_metas import SharedEntryMetas
from broker.errors import (
    PersistenceError,
    ProducerBusyError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
    TooManySubscriptionsError,
    TopicTerminatedError,
)
from broker.metadata.policy_table import (
    AUTO_SUBSCRIPTION_CREATION,
    DEDUPLICATION,
    MAX_SUBSCRIPTIONS,
    SUBSCRIBE_RATE,
    TOPIC_DISPATCH_RATE,
)
from broker.metadata.store import Derived
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import entry_meta, read_entry_metadata
from broker.service.abstract_topic import AbstractTopic
from broker.service.broker_entry_metadata import EntryStamper
from broker.service.compacted_view import CompactedView
from broker.service.compaction import COMPACTION_CURSOR, COMPACTION_READER, Compactor
from broker.service.deduplication import DEDUP_CURSOR, Deduplication
from broker.service.offload import OffloadProcess
from broker.service.producer import Producer
from broker.service.rate_limits import DispatchRate, SubscribeRateLimiter
from broker.service.replicated_subscriptions import ReplicatedSubscriptionsController
from broker.service.replication import REPLICATOR_PREFIX, PersistentReplicator, is_replicator_name
from broker.service.subscription import Subscription
from broker.tasks import OwnedTasks
from broker.topic_name import TopicName, is_system_topic
from broker.transactions.buffer import BUFFER_CURSOR, TransactionBuffer
from broker.transactions.model import TxnID
from managed_ledger import (
    InitialPosition,
    LedgerClosedError,
    LedgerFencedError,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerError,
    Position,
)

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService
    from broker.service.nonpersistent import NonPersistentTopic

log = logging.getLogger(__name__)
T = TypeVar("T")


RESERVED_SUBSCRIPTION = "Subscription with reserved subscription name attempted"  # (Pulsar's words)


def check_subscription_name(name: str) -> None:
    """A client may not subscribe with the name of one of the broker's own cursors (a replicator's,
    deduplication's, the transaction buffer's, the compactor's): it would share that cursor, and its
    acks would move it. As Pulsar's internalSubscribe refuses the replicator prefix and pulsar.dedup
    (its NamingException reaches the client as ProducerBusy); Pulsar lets a client onto __compaction
    but refuses its acks there (CompactorSubscription), here it is refused at once."""
    if is_reserved_subscription(name):
        raise ProducerBusyError(RESERVED_SUBSCRIPTION)


def is_reserved_subscription(name: str) -> bool:
    """The name of one of the broker's own cursors, which no client or admin call may subscribe with."""
    return not PersistentTopic.is_subscription_cursor(name) or name == COMPACTION_CURSOR


class PersistentTopic(AbstractTopic):
    __slots__ = ("_closing", "_dedup", "_deleting_subscriptions", "_replication_update", "backlog_quota_evictions",
                 "compacted_view", "compactor", "data_entries_added", "dedup", "dispatch_rate", "entry_metas",
                 "entry_stamper", "fenced_unload", "ledger", "offload", "oldest_backlog_age_s",
                 "replicated_subscriptions", "replicators", "subscribe_rate", "subscriptions", "txn_buffer")

    def __init__(self, service: BrokerService, name: TopicName, ledger: ManagedLedger) -> None:
        super().__init__(service, name)
        # The compacted view (latest message per key up to a horizon) and who builds it.
        self.compacted_view: CompactedView | None = None
        self.compactor = Compactor(self)
        # Deduplication state snapshots (cursor "pulsar.dedup"), recovered when the topic loads.
        self.dedup = Deduplication(self)
        self.ledger = ledger
        self.offload = OffloadProcess()  # (PUT / GET .../offload)
        # Transactional entries wait here until their transaction ends (recovered when it loads).
        self.txn_buffer = TransactionBuffer(ledger)
        self.subscriptions: dict[str, Subscription] = {}
        # Entry metadata parsed once for all subscriptions while there are several.
        subscriptions = self.subscriptions
        self.entry_metas = SharedEntryMetas(lambda: len(subscriptions) > 1)
        # The dispatch rate limit all its subscriptions share (each has its own too).
        policies = service.policies
        self.dispatch_rate = DispatchRate(service.metadata, lambda: policies.get(name, TOPIC_DISPATCH_RATE).as_tuple(),
                                          published=self.published_totals)
        self.subscribe_rate = SubscribeRateLimiter(lambda: service.policies.get(name, SUBSCRIBE_RATE).as_tuple())
        # Geo-replication: remote cluster -> its replicator (see replication.py).
        self.replicators: dict[str, PersistentReplicator] = {}
        self._replication_update: asyncio.Task[None] | None = None
        # Replicated subscriptions: present while the topic is replicated (and they are enabled).
        self.replicated_subscriptions: ReplicatedSubscriptionsController | None = None
        self.data_entries_added = 0
        # Backlog-quota evictions by quota type (Pulsar's destination_storage / message_age), for metrics.
        self.backlog_quota_evictions = {"destination_storage": 0, "message_age": 0}
        # Age of the oldest unacknowledged message as of the last time-quota check (None = unknown).
        self.oldest_backlog_age_s: int | None = None
        self._dedup = Derived(service.metadata, lambda: service.policies.get(name, DEDUPLICATION))
        # Cursor closes started from synchronous paths, and cursor deletions (which their callers' cancellation
        # must not cut short); awaited in close() (no fire-and-forget).
        self._closing = OwnedTasks(f"topic {name}")
        # Durable subscriptions whose cursor is being deleted (see delete_subscription).
        self._deleting_subscriptions: set[str] = set()
        # Set once a write found the managed ledger fenced and the unload of this instance was asked for.
        self.fenced_unload = False
        # Broker entry metadata (PIP-70) prepended to each entry; None when not configured.
        self.entry_stamper = EntryStamper.configured(service.config.brokerEntryMetadataInterceptors)
        # Markers the broker writes are stamped too (Pulsar's interceptor sees every add, one message each).
        self.txn_buffer.stamp = self.stamp_broker_entry

    def stamp_broker_entry(self, entry: bytes) -> bytes:
        """An entry the broker writes itself (a marker): with broker entry metadata when configured,
        counted as one message, as Pulsar's managed-ledger interceptor does; stamp just before the add."""
        return entry if self.entry_stamper is None else self.entry_stamper.stamp([entry], 1)[0]

    @property
    def deduplication_enabled(self) -> bool:
        """Topic policy, else namespace policy, else the broker setting; re-read only when the
        metadata changed (asked per SEND)."""
        return self._dedup.get()

    def last_sequence_id(self, producer_name: str) -> int:
        return self.sequence_persisted.get(producer_name, -1) if self.deduplication_enabled else -1

    @property
    def is_empty(self) -> bool:
        """Nothing stored (a consumer's schema may then still be registered)."""
        return self.ledger.number_of_entries == 0

    # -- producers ---------------------------------------------------------------------------------
    def _check_new_producer(self) -> None:
        if self.terminated_at is not None:
            raise TopicTerminatedError(f"Topic {self.name} was already terminated")
        # Backlog quota (producer_request_hold / producer_exception): refuse while exceeded.
        self.service.backlog_quotas.check_producer(self)

    def add_producer(self, producer: Producer, request_id: int) -> bool:
        added = super().add_producer(producer, request_id)
        # Replicators the inactive-topic check disconnected start again with any producer, a remote cluster's
        # replicator included (Pulsar's addProducer calls startReplProducers).
        for replicator in self.replicators.values():
            replicator.start()
        return added

    @property
    def has_local_producers(self) -> bool:
        """A producer of this cluster's clients, connected or waiting (another cluster's replicator aside):
        Pulsar's hasLocalProducers."""
        return bool(self.waiting_producers) or any(not p.replicator for p in self.producers.values())

    def truncate(self) -> int:
        """Pulsar's truncate (the admin's DELETE .../truncate): every subscription, reader and replicator has
        everything written so far acknowledged (a reader goes on with what is published next), and every ledger
        before the current one is deleted, whatever the retention; returns how many. The broker's own cursors are
        not moved by force: deduplication and the transaction buffer first snapshot their state as far as it goes
        (the end, unless producer receipts are in flight or a transaction is open), and what they still need is
        kept; a compaction under way reads on to its horizon. (Pulsar clears them too, the deduplication cursor's
        snapshot with it: a broker reloading the topic before the next snapshot would then accept a resent message
        again, or miss the entries of a transaction still open.)"""
        if self.dedup.cursor is not None:
            self.dedup.snapshot()
        self.txn_buffer.snapshot_idle()
        return self.ledger.truncate(keep=(DEDUP_CURSOR, BUFFER_CURSOR, COMPACTION_READER))

    async def terminate(self) -> Position:
        """No more messages, ever: record the last position, close producers (their reconnect is refused).

        Consumers keep reading to the end; there their dispatcher tells them (REACHED_END_OF_TOPIC, to Java clients
        only: see Consumer.reached_end_of_topic).
        """
        if self.terminated_at is None:
            last = self.ledger.last_confirmed_entry
            await self.service.metadata.mark_terminated(self.full_name, last.ledger_id, last.entry_id)
            self.terminated_at = last
        for producer in list(self.producers.values()):
            producer.cnx.producer_closed_by_broker(producer.producer_id)
            self.remove_producer(producer)
        for sub in list(self.subscriptions.values()):  # (a read waiting for more entries would wait for ever)
            dispatcher = sub.dispatcher
            if dispatcher is not None:
                dispatcher.cancel_reads()
                dispatcher.trigger_read()
        return self.terminated_at

    def publish_entries(self, producer: Producer, entries: list[bytes], num_messages: int, nbytes: int,
                        callback: Callable[[Position | None, BaseException | None], None],
                        txn: TxnID | None = None) -> None:
        self.msg_in += num_messages
        self.bytes_in += nbytes
        self.entries_added += len(entries)
        # Data, not markers (only another cluster's replicator sends markers): what replicated
        # subscriptions take snapshots for.
        self.data_entries_added += len(entries) if not producer.replicator else sum(
            1 for e in entries if not read_entry_metadata(e).HasField("marker_type"))
        if self.entry_stamper is not None:
            entries = self.entry_stamper.stamp(entries, num_messages)
        if txn is None:
            self.txn_buffer.add_entries(entries, callback)  # (the ledger's, unless held behind a first snapshot)
        else:
            self.txn_buffer.append(txn, entries, callback)

    def match_kind(self, persistent: Callable[[PersistentTopic], T],
                   non_persistent: Callable[[NonPersistentTopic], T]) -> T:
        return persistent(self)

    def subscribe_permitted(self, consumer: tuple[str, str, int]) -> bool:
        return self.subscribe_rate.try_acquire(consumer)

    # -- subscriptions -----------------------------------------------------------------------------
    def subscription_names(self) -> list[str]:
        """Live subscriptions plus stored durable cursors nobody has attached to since the topic
        loaded (not the broker's own cursors: deduplication's and the replicators')."""
        return sorted(n for n in set(self.subscriptions) | set(self.ledger.cursors) if self.is_subscription_cursor(n))

    def subscription_cursor(self, name: str) -> ManagedCursor | None:
        """The cursor of subscription ``name``: its live subscription's, or the stored one nobody has attached
        to since the topic loaded; None when there is neither."""
        sub = self.subscriptions.get(name)
        return sub.cursor if sub is not None else self.ledger.cursors.get(name)

    @staticmethod
    def is_subscription_cursor(name: str) -> bool:
        """A stored cursor that is a subscription, not one of the broker's own (deduplication's,
        the transaction buffer's, the replicators'). Their names are reserved: no client or admin
        call may subscribe with one (``check_subscription_name``)."""
        return name not in (DEDUP_CURSOR, BUFFER_CURSOR) and not is_replicator_name(name)

    async def get_or_create_subscription(
        self, name: str, durable: bool, initial_position: int, start: pb.MessageIdData | None,
        properties: Mapping[str, str] | None = None, by_client: bool = True,
    ) -> Subscription:
        """``properties``: the subscription's (SUBSCRIBE.subscription_properties), stored with a new durable cursor
        (Pulsar's cursorProperties); a subscription that exists keeps its own. ``by_client``: a client's SUBSCRIBE,
        which the auto-subscription-creation policy may refuse; the admin API's create (False) is not subject to it,
        as in Pulsar (ServerCnx checks it, PersistentTopic.createSubscription does not)."""
        if self.closed:  # unloaded or deleted while the client was being set up: it retries
            raise ServiceNotReadyError(f"Topic {self.name} is being closed; retry")
        if name in self._deleting_subscriptions:
            # Pulsar keeps a subscription being deleted, fenced, until its cursor is gone (PersistentTopic's
            # delete-cursor callback removes it): PersistentSubscription.addConsumer refuses it meanwhile with
            # SubscriptionFencedException, ServiceNotReady to the client, which retries. (Opened now, the cursor
            # would be the one being deleted: closed under the new subscription.)
            raise ServiceNotReadyError("Subscription is fenced")
        sub = self.subscriptions.get(name)
        if sub is not None:
            return sub
        if durable:
            if name not in self.ledger.cursors:
                if by_client and not self.service.policies.get(self.name, AUTO_SUBSCRIPTION_CREATION).allow:
                    raise SubscriptionNotFoundError(f"Subscription {name} does not exist")
                limit = self.service.policies.get(self.name, MAX_SUBSCRIPTIONS)
                if 0 < limit <= sum(1 for n in self.ledger.cursors if self.is_subscription_cursor(n)):
                    raise TooManySubscriptionsError(
                        f"Exceed the maximum number of subscriptions of the topic: {self.name}")
            pos = (InitialPosition.EARLIEST if initial_position == pb.CommandSubscribe.Earliest
                   else InitialPosition.LATEST)
            try:
                cursor = await self.ledger.open_cursor(name, pos, cursor_properties=properties)
            except (LedgerClosedError, LedgerFencedError) as exc:  # (the topic is going: the client looks up again)
                raise ServiceNotReadyError(f"Topic {self.name} is being closed; retry") from exc
            except ManagedLedgerError as exc:
                # Pulsar answers a cursor that cannot be opened with PersistenceError (its asyncOpenCursor failing is
                # a PersistenceException): storage unreachable, or a name its metadata store cannot hold (a
                # subscription named "." or ".." on ZooKeeper, as in Pulsar).
                log.warning("topic %s: cursor %r not opened: %s", self.name, name, exc)
                raise PersistenceError(f"Failed to open cursor {name}: {exc}") from exc
            sub = self.subscriptions.get(name)
            if sub is not None:  # created while we awaited
                return sub
        else:
            cursor = self.ledger.new_non_durable_cursor(self._reader_start(start, initial_position), name)
            if properties:
                await cursor.set_cursor_properties(properties)  # (in memory only: a non-durable cursor)
        sub = Subscription(self, name, cursor, durable)
        self.subscriptions[name] = sub
        return sub

    def _reader_start(self, start: pb.MessageIdData | None, initial_position: int) -> Position:
        """The mark-delete position of a reader's non-durable cursor (it reads what follows).

        A start id (L,E) re-delivers entry E itself (mark-delete = the entry before it): the client
        filters by exclusive/inclusive and batch index, and needs E to do so.
        """
        ledger = self.ledger
        if start is None:
            if initial_position == pb.CommandSubscribe.Earliest:
                return Position(-1, -1)
            return ledger.last_confirmed_entry
        lid, eid = commands.from_u64(start.ledgerId), commands.from_u64(start.entryId)
        if lid < 0 or eid < 0:
            return Position(-1, -1)
        if lid == commands.INT64_MAX and eid == commands.INT64_MAX:
            return ledger.last_confirmed_entry
        pos = Position(lid, eid)
        if pos > ledger.last_confirmed_entry:
            return ledger.last_confirmed_entry
        return ledger.previous_position(pos)

    def remove_subscription(self, sub: Subscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        sub.close()
        if not sub.durable:
            self._closing.spawn(sub.cursor.close(), loop=self.loop)

    async def delete_subscription(self, sub: Subscription) -> None:
        self.remove_subscription(sub)
        self.last_active = time.monotonic()
        if sub.durable:
            # The deletion is the topic's, not its caller's: an UNSUBSCRIBE's handler is cancelled when its
            # connection closes, and cancelled halfway the deletion left the cursor in the managed ledger (the
            # subscription back at the next load; on BookKeeper, its znode gone or going and its every state write
            # failing). As in Pulsar, where a client going away does not stop PersistentSubscription.delete. The
            # topic's close waits for it.
            self._deleting_subscriptions.add(sub.name)
            try:
                await asyncio.shield(self._closing.spawn(self._delete_cursor(sub.name), loop=self.loop))
            except ManagedLedgerError as exc:  # (logged once, by the task's owner: the caller answers it)
                raise PersistenceError(f"Failed to delete cursor {sub.name}: {exc}") from exc

    async def _delete_cursor(self, name: str) -> None:
        try:
            await self.ledger.delete_cursor(name)
        finally:
            self._deleting_subscriptions.discard(name)

    # -- reading -----------------------------------------------------------------------------------
    async def last_message_id(self, compacted: bool = False) -> tuple[Position, int]:
        """(last entry position, batch index of its last message or -1). (-1,-1) when empty.

        For a read_compacted consumer, when nothing was added after the compaction horizon, the
        last message it can ever read is the compacted view's last survivor.
        """
        last = self.ledger.last_confirmed_entry
        limit = self.txn_buffer.read_limit()
        if limit is not None:  # an open transaction: what follows its first entry is not readable yet
            last = min(last, self.ledger.previous_position(limit))
        view = self.compacted_view
        if compacted and view is not None and last <= view.horizon:
            return view.last if view.last is not None else (Position(-1, -1), -1)
        if last.entry_id < 0:
            return Position(-1, -1), -1
        try:
            entry = await self.ledger.read_entry(last)
        except Exception:  # trimmed away: the position is still the last one written
            return last, -1
        meta = entry_meta(entry.data)
        return last, (meta.num_messages - 1 if meta.is_batch else -1)

    async def find_position_by_time(self, timestamp_ms: int) -> Position:
        """First entry published at or after ``timestamp_ms`` (the end when there is none)."""
        newest_older = await self.ledger.find_newest_matching(
            lambda e: entry_meta(e.data).publish_time < timestamp_ms)
        if newest_older is None:
            return self.ledger.first_position
        return self.ledger.next_valid_position(newest_older)

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def is_idle(self) -> bool:
        return not self.producers and not any(s.consumers for s in self.subscriptions.values())

    @property
    def in_use_for_schema(self) -> bool:
        """Pulsar's PersistentTopic.addSchemaIfIdleOrCheckCompatible: a producer of its own (a geo-replicator's
        aside), a consumer without an AUTO_CONSUME schema, or something stored; a consumer's schema is then
        checked against the topic's, not adopted."""
        return (any(not p.replicator for p in self.producers.values()) or not self.is_empty
                or any(not c.auto_consume for s in self.subscriptions.values() for c in s.consumers))

    def deduplicated_entries_stored(self, count: int, last: Position) -> None:
        self.dedup.entries_persisted(count, last)

    # -- geo-replication ---------------------------------------------------------------------------
    async def start_replication(self) -> None:
        """At load, before any client sees the topic: the replicators' cursors are open before
        the first message can be published, so nothing published from then on is missed."""
        if is_system_topic(self.name.full):
            return
        wanted = set(self.service.replication_targets(self.name))
        # A cluster dropped from the list while the topic was not loaded: its cursor would hold
        # the topic's data for good.
        for name in [n for n in self.ledger.cursors if is_replicator_name(n)]:
            if name[len(REPLICATOR_PREFIX):] not in wanted:
                await self.ledger.delete_cursor(name)
        await self._update_replicators(wanted)

    def update_replication(self) -> None:
        """Start or stop replicators to match the namespace's replication clusters (called at load
        and after metadata changes; one update runs at a time, and a later call runs it again)."""
        if self.closed or is_system_topic(self.name.full):
            return
        if self._replication_update is not None and not self._replication_update.done():
            self._replication_update.add_done_callback(lambda _: self.update_replication())
            return
        wanted = set(self.service.replication_targets(self.name))
        if wanted != set(self.replicators):
            self._replication_update = self.loop.create_task(self._update_replicators_logged(wanted))

    async def _update_replicators_logged(self, wanted: set[str]) -> None:
        try:
            await self._update_replicators(wanted)
        except Exception:  # (a cursor that cannot be opened or deleted): the next change retries
            log.exception("replication of %s not updated", self.name)

    async def _update_replicators(self, wanted: set[str]) -> None:
        for remote in [r for r in self.replicators if r not in wanted]:
            replicator = self.replicators.pop(remote)
            await replicator.close()
            if not self.closed:  # no longer replicated there: its position goes too (as in Pulsar)
                await self.ledger.delete_cursor(replicator.cursor.name)
        for remote in sorted(wanted - set(self.replicators)):
            if self.closed:
                return
            # A new replicator starts at the end: what was published before it is not sent.
            cursor = await self.ledger.open_cursor(REPLICATOR_PREFIX + remote, InitialPosition.LATEST)
            replicator = self.replicators[remote] = PersistentReplicator(self, remote, cursor)
            replicator.start()
        controller = self.replicated_subscriptions
        if self.replicators and controller is None and self.service.config.enableReplicatedSubscriptions:
            self.replicated_subscriptions = ReplicatedSubscriptionsController(self)
            self.replicated_subscriptions.start()
        elif not self.replicators and controller is not None:
            controller.close()
            self.replicated_subscriptions = None

    async def close(self) -> None:
        self.closed = True
        self.publish_throttle.release()
        if self._replication_update is not None:
            await asyncio.gather(self._replication_update, return_exceptions=True)
        await asyncio.gather(*(r.close() for r in self.replicators.values()), return_exceptions=True)
        if self.replicated_subscriptions is not None:
            self.replicated_subscriptions.close()
        await self.compactor.close()
        await self.offload.close()
        await self.dedup.close()
        self.txn_buffer.snapshot_idle()
        await self.txn_buffer.close()
        for sub in list(self.subscriptions.values()):
            sub.close()
        await self._closing.wait()
        if self.compacted_view is not None:  # (after the dispatchers that read it)
            await self.compacted_view.close()
        await self.ledger.close()

    async def abandon_load(self) -> None:
        """A load that failed midway: close what it opened (its replicators, the compacted view, the managed
        ledger), as Pulsar closes a topic whose initialisation failed, but save none of the state it was
        recovering (``close`` would snapshot a half-replayed transaction buffer or deduplication state over the
        good one). No client has seen the topic yet."""
        self.closed = True
        await asyncio.gather(*(r.close() for r in self.replicators.values()), return_exceptions=True)
        if self.replicated_subscriptions is not None:
            self.replicated_subscriptions.close()
        try:
            if self.compacted_view is not None:
                await self.compacted_view.close()
        finally:
            await self.ledger.close()
